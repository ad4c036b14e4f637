//! `sidechat acp` answers each request with its id as the client wrote it, as `sidechat serve`
//! does: a number is echoed as its JSON text (`1e2` stays `1e2`, not `100.0`), a string as
//! written, escapes and all.

use agent_client_protocol_schema::v1::AGENT_METHOD_NAMES;
use pretty_assertions::assert_eq;
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::harness::{Scratch, clean_command, home_for};

/// A guard against a hung agent, not a performance assertion.
const HANG_GUARD: std::time::Duration = std::time::Duration::from_secs(60);

/// The parts of a frame the test looks at, with the id as the JSON text it was written as.
#[derive(Debug, Deserialize)]
struct Frame {
    id: Option<Box<RawValue>>,
    method: Option<String>,
    result: Option<Value>,
    error: Option<Value>,
}

#[tokio::test]
async fn acp_answers_numeric_ids_as_sent() {
    let scratch = Scratch::new();
    let db = scratch.db();
    let mut child = clean_command(&home_for(&db))
        .arg("acp")
        .arg("--db")
        .arg(&db)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn sidechat acp");
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    // Each request written raw, so nothing on the way re-encodes its id; the answers read
    // with their ids kept as text.
    let (initialize, list) = (
        AGENT_METHOD_NAMES.initialize,
        AGENT_METHOD_NAMES.session_list,
    );
    let requests = [
        ("-1", initialize, r#"{"protocolVersion":1}"#),
        ("1.5", list, "{}"),
        ("1e2", list, "{}"),
        ("-0.25E-3", list, "{}"),
        ("18446744073709551616", list, "{}"),
        (r#""x\u0079""#, list, "{}"),
        ("2.50", "no/such", "{}"),
    ];
    let mut answered = Vec::new();
    for (id, method, params) in requests {
        let line =
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#);
        stdin.write_all(line.as_bytes()).await.unwrap();
        stdin.write_all(b"\n").await.unwrap();
        stdin.flush().await.unwrap();
        let answer = loop {
            let line = tokio::time::timeout(HANG_GUARD, lines.next_line())
                .await
                .expect("the agent did not answer")
                .unwrap()
                .expect("the agent closed its output");
            let frame: Frame = serde_json::from_str(&line).unwrap();
            if frame.method.is_none() {
                break frame;
            }
        };
        let code = answer.error.as_ref().map(|e| e["code"].clone());
        assert!(
            answer.result.is_some() || code.is_some(),
            "{method}: {answer:?}"
        );
        answered.push((
            answer.id.as_deref().map(RawValue::get).map(str::to_string),
            code,
        ));
    }
    let expected: Vec<(Option<String>, Option<Value>)> = requests
        .iter()
        .map(|(id, method, _)| {
            let code = (*method == "no/such").then(|| Value::from(-32601));
            (Some(id.to_string()), code)
        })
        .collect();
    assert_eq!(answered, expected);
    drop(stdin);
    let status = tokio::time::timeout(HANG_GUARD, child.wait())
        .await
        .expect("the agent did not exit")
        .unwrap();
    assert_eq!(status.code(), Some(0));
}
