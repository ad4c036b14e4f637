//! Requests in flight through the real binary, with a request that is slow for real: a
//! `chat/send` whose message commit the store is told to slow (as a slow disk would) far past
//! anything the test waits for. Later frames, inside a batch or not, are answered meanwhile,
//! and a request reusing its id is refused instead of taking its place.

use serde_json::{Value, json, to_value};
use sidechat::protocol::{ChatSend, Request, SessionCreateParams, SessionList, SessionListParams};

use crate::harness::{Daemon, Options, Scratch, json_of, say};

/// How long the slowed commit takes: far longer than the test runs, which ends by killing the
/// daemon, so nothing here depends on how fast the machine is.
const SLOW_COMMIT_MS: u64 = 600_000;

/// A daemon whose one session's message commits take [`SLOW_COMMIT_MS`]; the session's id.
async fn daemon_with_a_slow_session(scratch: &Scratch) -> (Daemon, String) {
    // A first daemon makes the session, so the second can be told which one is slow.
    let first = Daemon::start(&scratch.db(), Options::default()).await;
    let session = first.create_session(SessionCreateParams::default()).await;
    first.close().await;
    let slow = format!("{session}:{SLOW_COMMIT_MS}");
    let daemon = Daemon::start(
        &scratch.db(),
        Options::with_env(vec![("SIDECHAT_TEST_SLOW_COMMIT", slow)]),
    )
    .await;
    (daemon, session)
}

/// One request frame of `M` with a chosen id.
fn request<M: Request>(id: &str, params: M::Params) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": M::METHOD, "params": to_value(params).unwrap()})
}

async fn write_line(daemon: &Daemon, frame: &Value) {
    let mut line = frame.to_string();
    line.push('\n');
    daemon.conn.write_raw(line.as_bytes()).await.unwrap();
}

/// The next frame that answers a request written with [`write_line`] (not an event).
async fn next_answer(daemon: &mut Daemon) -> Value {
    loop {
        let frame = daemon.next_note().await;
        if frame.is_array() || frame.get("id").is_some() {
            return frame;
        }
    }
}

async fn kill(mut daemon: Daemon) {
    daemon.process().kill().await.unwrap();
}

#[tokio::test]
async fn a_slow_batch_member_does_not_hold_the_frames_after_it() {
    let scratch = Scratch::new();
    let (mut daemon, session) = daemon_with_a_slow_session(&scratch).await;
    let batch = json!([
        request::<ChatSend>("slow", say(&session, "hello")),
        request::<SessionList>("listed", SessionListParams::default()),
    ]);
    write_line(&daemon, &batch).await;
    // A request after the batch is answered while the batch's slow member still works.
    let listed = json_of(
        daemon
            .call::<SessionList>(SessionListParams::default())
            .await,
    );
    assert_eq!(listed["sessions"][0]["id"], json!(session));
    assert!(
        daemon.notes.try_recv().is_err(),
        "the batch, whose member is still committing, was not answered yet"
    );
    kill(daemon).await;
}

#[tokio::test]
async fn a_request_reusing_the_id_of_one_in_flight_is_refused_and_the_first_keeps_it() {
    let scratch = Scratch::new();
    let (mut daemon, session) = daemon_with_a_slow_session(&scratch).await;
    write_line(
        &daemon,
        &request::<ChatSend>("same", say(&session, "hello")),
    )
    .await;
    write_line(
        &daemon,
        &request::<SessionList>("same", SessionListParams::default()),
    )
    .await;
    let refused = next_answer(&mut daemon).await;
    assert_eq!(
        (refused["id"].clone(), refused["error"]["code"].clone()),
        (json!("same"), json!(-32600)),
        "{refused}"
    );
    // The daemon goes on answering, and the first request's answer is still owed: no other
    // frame with its id came back.
    let listed = json_of(
        daemon
            .call::<SessionList>(SessionListParams::default())
            .await,
    );
    assert!(listed["sessions"].is_array());
    assert!(daemon.notes.try_recv().is_err(), "nothing else was sent");
    kill(daemon).await;
}
