//! A client that stops reading its output mid-stream: the daemon stops reading the provider's
//! stream rather than queue what the client does not take, and once the client reads again
//! every event arrives, in order, with `seq` rising by one.

use std::io::Write;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sidechat::protocol::{
    ChatSend, Exit, Initialize, Initialized, Notification, Request, SessionCreate, SessionEvent,
    Shutdown,
};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::ChildStdout;

use crate::harness::{Scratch, command, env};
use crate::upstream::{self, openai};

/// Enough answer that the socket buffers between the fake provider and the daemon, the
/// daemon's output queue and the pipe to the client together hold a small part of it.
const DELTAS: usize = 300_000;
/// Deltas the client reads before it stops reading.
const READ_FIRST: usize = 1_000;

/// A number after `key` in `text`.
fn number_after(text: &str, key: &str) -> Option<u64> {
    let at = text.find(key)? + key.len();
    let digits = text[at..].find(|c: char| !c.is_ascii_digit())?;
    text[at..at + digits].parse().ok()
}

/// Reads the daemon's next line into `line`.
async fn next_line(stdout: &mut BufReader<ChildStdout>, line: &mut String) {
    line.clear();
    let n = tokio::time::timeout(Duration::from_secs(60), stdout.read_line(line))
        .await
        .expect("the daemon wrote nothing for a minute")
        .unwrap();
    assert!(n > 0, "the daemon closed its output");
}

#[tokio::test]
async fn a_client_that_stops_reading_holds_the_provider_stream_and_loses_nothing() {
    let mut body = Vec::new();
    for index in 0..DELTAS {
        let chunk = openai::chunk(json!({"content": format!("w{index} ")}), None);
        body.extend_from_slice(openai::event(&chunk).as_bytes());
    }
    body.extend_from_slice(openai::event(&openai::chunk(json!({}), Some("stop"))).as_bytes());
    body.extend_from_slice(openai::DONE.as_bytes());
    let total = body.len();
    let (written, finished) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicBool::new(false)),
    );
    let fake = upstream::start(vec![upstream::Reply::writer({
        let (written, finished) = (written.clone(), finished.clone());
        move |socket| {
            for piece in body.chunks(16 * 1024) {
                socket.write_all(piece)?;
                written.fetch_add(piece.len(), Ordering::SeqCst);
            }
            socket.flush()?;
            finished.store(true, Ordering::SeqCst);
            Ok(())
        }
    })]);

    let scratch = Scratch::new();
    let mut daemon = command(&scratch.db(), &env(&fake.url))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn sidechat");
    let mut stdin = daemon.stdin.take().unwrap();
    let mut stdout = BufReader::new(daemon.stdout.take().unwrap());
    for request in [
        json!({"jsonrpc": "2.0", "id": 1, "method": Initialize::METHOD, "params": {}}),
        json!({"jsonrpc": "2.0", "method": Initialized::METHOD, "params": {}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": SessionCreate::METHOD, "params": {"workspaceRoot": scratch.workspace()}}),
    ] {
        stdin
            .write_all(format!("{request}\n").as_bytes())
            .await
            .unwrap();
    }
    let mut line = String::new();
    let session = loop {
        next_line(&mut stdout, &mut line).await;
        let message: Value = serde_json::from_str(&line).unwrap();
        if message["id"] == 2 {
            break message["result"]["id"].as_str().unwrap().to_string();
        }
    };
    let send = json!({"jsonrpc": "2.0", "id": 3, "method": ChatSend::METHOD, "params": {"sessionId": session, "text": "go"}});
    stdin
        .write_all(format!("{send}\n").as_bytes())
        .await
        .unwrap();

    let event = format!(r#""method":"{}""#, SessionEvent::METHOD);
    let mut seqs = Vec::new();
    let mut next_delta = 0u64;
    let mut paused = false;
    loop {
        next_line(&mut stdout, &mut line).await;
        if !line.contains(&event) {
            continue;
        }
        seqs.push(number_after(&line, r#""seq":"#).expect("an event has a seq"));
        if line.contains(r#""kind":"textDelta""#) {
            let index = number_after(&line, r#""text":"w"#).expect("a delta of this answer");
            assert_eq!(index, next_delta, "deltas arrive once each, in order");
            next_delta += 1;
        } else if line.contains(r#""kind":"runFinished""#) {
            assert!(line.contains(r#""reason":"end_turn""#), "{line}");
            break;
        }
        if next_delta == READ_FIRST as u64 && !paused {
            paused = true;
            // The client stops reading. Wait until the provider's stream stops moving (the
            // daemon no longer reads it), or has been read to its end.
            let mut last = written.load(Ordering::SeqCst);
            let mut still = 0;
            while !finished.load(Ordering::SeqCst) && still < 10 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                let now = written.load(Ordering::SeqCst);
                still = if now == last { still + 1 } else { 0 };
                last = now;
            }
            assert!(
                !finished.load(Ordering::SeqCst),
                "the daemon read the whole answer ({total} bytes) while its client read nothing"
            );
            assert!(last < total / 2, "{last} of {total} bytes were read");
        }
    }
    assert_eq!(next_delta, DELTAS as u64);
    let expected: Vec<u64> = (seqs[0]..seqs[0] + seqs.len() as u64).collect();
    assert!(
        seqs == expected,
        "seq must rise by one from each event to the next"
    );

    for request in [
        json!({"jsonrpc": "2.0", "id": 4, "method": Shutdown::METHOD}),
        json!({"jsonrpc": "2.0", "method": Exit::METHOD}),
    ] {
        stdin
            .write_all(format!("{request}\n").as_bytes())
            .await
            .unwrap();
    }
    drop(stdin);
    let status = tokio::time::timeout(Duration::from_secs(60), daemon.wait())
        .await
        .expect("the daemon exits")
        .unwrap();
    assert!(status.success(), "{status}");
}
