//! Bad input against the running binary: each gets the right JSON-RPC error (or is ignored, for
//! notifications), and the same process then still answers a valid request.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sidechat::protocol::{
    Initialize, InitializeParams, Request, SessionCreate, SessionCreateParams, SessionDelete,
    SessionList, SessionListParams,
};
use sidechat::rpc::framing::Framing;

use crate::harness::{Daemon, Options, Scratch, json_of, sid};

/// The code and id of the next unsolicited frame (an error answer to a raw write).
async fn next_error(daemon: &mut Daemon) -> (Value, i64) {
    let note = daemon.next_note().await;
    (
        note["id"].clone(),
        note["error"]["code"]
            .as_i64()
            .unwrap_or_else(|| panic!("not an error: {note}")),
    )
}

async fn still_answers(daemon: &Daemon) {
    let listed = json_of(
        daemon
            .call::<SessionList>(SessionListParams {
                limit: Some(1),
                ..SessionListParams::default()
            })
            .await,
    );
    assert!(listed["sessions"].is_array());
}

#[tokio::test]
async fn line_framing_bad_input() {
    let scratch = Scratch::new();
    let mut daemon = Daemon::spawn(&scratch.db(), Options::default());

    // A request before initialize.
    daemon
        .conn
        .write_raw(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"session/list\"}\n")
        .await
        .unwrap();
    assert_eq!(next_error(&mut daemon).await, (json!(1), -32002));
    daemon.call::<Initialize>(InitializeParams::default()).await;

    let cases: &[(&[u8], Value, i64)] = &[
        // Random bytes.
        (b"\x00\xff\x13garbage\xfe\n", Value::Null, -32700),
        // Invalid JSON, answered with the id its envelope shows.
        (b"{\"jsonrpc\":\"2.0\",\"id\":5,\n", json!(5), -32700),
        // An empty batch.
        (b"[]\n", Value::Null, -32600),
        // Not JSON-RPC 2.0.
        (b"{\"jsonrpc\":\"1.0\",\"id\":6,\"method\":\"session/list\"}\n", json!(6), -32600),
        // Unknown method.
        (b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"no/such\"}\n", json!(7), -32601),
        // Wrong param types.
        (b"{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"session/get\",\"params\":{\"sessionId\":5}}\n", json!(8), -32602),
        // Missing params.
        (b"{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"session/get\"}\n", json!(9), -32602),
        // Unknown session id.
        (b"{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"session/get\",\"params\":{\"sessionId\":\"ses_nope\"}}\n", json!(10), -32001),
        // A second initialize.
        (b"{\"jsonrpc\":\"2.0\",\"id\":11,\"method\":\"initialize\"}\n", json!(11), -32600),
    ];
    for (bytes, id, code) in cases {
        daemon.conn.write_raw(bytes).await.unwrap();
        assert_eq!(
            next_error(&mut daemon).await,
            (id.clone(), *code),
            "{}",
            String::from_utf8_lossy(bytes)
        );
        still_answers(&daemon).await;
    }

    // The unknown session's id is named in the error.
    let error = daemon
        .try_call::<SessionDelete>(sid("ses_gone"))
        .await
        .unwrap_err();
    assert_eq!(
        (error.code, error.data),
        (-32001, Some(json!({"sessionId": "ses_gone"})))
    );
    assert!(error.message.contains("ses_gone"), "{}", error.message);

    // A notification with an unknown method is ignored: nothing comes back.
    daemon
        .conn
        .write_raw(b"{\"jsonrpc\":\"2.0\",\"method\":\"no/such\"}\n")
        .await
        .unwrap();
    // A batch: answers come back together, one per request, none for the notification.
    daemon
        .conn
        .write_raw(b"[{\"jsonrpc\":\"2.0\",\"id\":20,\"method\":\"session/list\",\"params\":{\"limit\":1}},{\"jsonrpc\":\"2.0\",\"method\":\"x/y\"},{\"jsonrpc\":\"2.0\",\"id\":21,\"method\":\"nope\"}]\n")
        .await
        .unwrap();
    let batch = daemon.next_note().await;
    let answers: Vec<_> = batch
        .as_array()
        .unwrap_or_else(|| panic!("expected the batch answer first, got {batch}"))
        .iter()
        .map(|a| {
            (
                a["id"].clone(),
                a.get("result").is_some(),
                a["error"]["code"].clone(),
            )
        })
        .collect();
    assert_eq!(
        answers,
        vec![
            (json!(20), true, Value::Null),
            (json!(21), false, json!(-32601))
        ]
    );
    still_answers(&daemon).await;
    assert!(daemon.notes.try_recv().is_err(), "nothing else was sent");
    assert_eq!(daemon.close().await, 0);
}

fn frame(json: &str) -> Vec<u8> {
    let mut wire = Vec::new();
    Framing::ContentLength.encode(json, &mut wire);
    wire
}

#[tokio::test]
async fn content_length_framing_bad_input() {
    let scratch = Scratch::new();
    let mut daemon = Daemon::spawn(
        &scratch.db(),
        Options {
            framing: Framing::ContentLength,
            ..Options::default()
        },
    );
    daemon.call::<Initialize>(InitializeParams::default()).await;

    // A truncated header.
    daemon.conn.write_raw(b"Content-Len\r\n\r\n").await.unwrap();
    still_answers(&daemon).await;
    assert_eq!(next_error(&mut daemon).await, (Value::Null, -32700));

    // A Content-Length shorter than the body: the cut body does not parse (answered with the
    // id it still shows), and the bytes left over are not a frame.
    let body = r#"{"jsonrpc":"2.0","id":30,"method":"session/list"}"#;
    let mut short = format!("Content-Length: {}\r\n\r\n", body.len() - 5).into_bytes();
    short.extend_from_slice(body.as_bytes());
    daemon.conn.write_raw(&short).await.unwrap();
    still_answers(&daemon).await;
    let errors = [next_error(&mut daemon).await, next_error(&mut daemon).await];
    assert_eq!(errors, [(json!(30), -32700), (Value::Null, -32700)]);

    // A Content-Length longer than the body: it swallows the start of the next frame.
    let mut long = format!("Content-Length: {}\r\n\r\n", body.len() + 10).into_bytes();
    long.extend_from_slice(body.as_bytes());
    long.extend(frame(
        r#"{"jsonrpc":"2.0","id":31,"method":"session/list"}"#,
    ));
    daemon.conn.write_raw(&long).await.unwrap();
    still_answers(&daemon).await;
    let errors = [next_error(&mut daemon).await, next_error(&mut daemon).await];
    assert_eq!(errors, [(json!(30), -32700), (Value::Null, -32700)]);

    // A frame over the 64 MiB limit is refused without being buffered.
    let size = 64 * 1024 * 1024 + 1;
    let mut huge = format!("Content-Length: {size}\r\n\r\n").into_bytes();
    huge.resize(huge.len() + size, b' ');
    daemon.conn.write_raw(&huge).await.unwrap();
    assert_eq!(next_error(&mut daemon).await, (Value::Null, -32600));
    still_answers(&daemon).await;
    assert!(daemon.notes.try_recv().is_err(), "nothing else was sent");
    assert_eq!(daemon.close().await, 0);
}

#[tokio::test]
async fn a_line_past_the_frame_limit_is_refused_with_its_id_and_the_next_line_answered() {
    let scratch = Scratch::new();
    let mut daemon = Daemon::spawn(&scratch.db(), Options::default());
    daemon.call::<Initialize>(InitializeParams::default()).await;

    // The line is refused once it passes the limit and the rest of it is skipped as it
    // arrives; its first bytes show its id, so the client hears which request it was.
    let limit = 64 * 1024 * 1024;
    let mut wire =
        br#"{"jsonrpc":"2.0","id":40,"method":"chat/send","params":{"sessionId":"ses_x","text":""#
            .to_vec();
    wire.resize(limit + 1024, b'x');
    wire.extend_from_slice(b"\"}}\n");
    let next = json!({"jsonrpc": "2.0", "id": 41, "method": SessionList::METHOD});
    wire.extend_from_slice(format!("{next}\n").as_bytes());
    daemon.conn.write_raw(&wire).await.unwrap();
    let refusal = daemon.next_note().await;
    assert_eq!(
        (refusal["id"].clone(), refusal["error"]["code"].clone()),
        (json!(40), json!(-32600))
    );
    let message = refusal["error"]["message"].as_str().unwrap();
    assert!(message.contains(&limit.to_string()), "{message}");
    let next = daemon.next_note().await;
    assert_eq!(next["id"], json!(41));
    assert!(next["result"]["sessions"].is_array(), "{next}");
    still_answers(&daemon).await;
    assert!(daemon.notes.try_recv().is_err(), "nothing else was sent");
    assert_eq!(daemon.close().await, 0);
}

/// `session/create` refuses a workspace root its tools could not work in, as `session/update`
/// does, naming the path; nothing is created.
#[tokio::test]
async fn session_create_refuses_a_missing_root_and_a_file_as_root() {
    let scratch = Scratch::new();
    let daemon = Daemon::start(&scratch.db(), Options::default()).await;
    let missing = scratch.dir.path().join("missing").display().to_string();
    let file = scratch.workspace().join("file.txt");
    std::fs::write(&file, "not a folder").unwrap();
    let file = file.display().to_string();
    for root in [&missing, &file] {
        let params = SessionCreateParams {
            workspace_root: Some(root.clone()),
            ..SessionCreateParams::default()
        };
        let refused = daemon.try_call::<SessionCreate>(params).await.unwrap_err();
        assert_eq!(
            (refused.code, refused.message),
            (
                -32602,
                format!("invalid params: workspaceRoot {root:?} is not an existing directory")
            )
        );
    }
    let listed = json_of(
        daemon
            .call::<SessionList>(SessionListParams::default())
            .await,
    );
    assert_eq!(listed["sessions"], json!([]));
    assert_eq!(daemon.close().await, 0);
}

#[tokio::test]
async fn an_oversized_frame_is_refused_with_its_id_alike_in_both_framings() {
    let limit = 64 * 1024 * 1024;
    let request =
        br#"{"jsonrpc":"2.0","id":40,"method":"chat/send","params":{"sessionId":"ses_x","text":""#;
    let mut refusals = Vec::new();
    for framing in [Framing::Line, Framing::ContentLength] {
        let scratch = Scratch::new();
        let mut daemon = Daemon::spawn(
            &scratch.db(),
            Options {
                framing,
                ..Options::default()
            },
        );
        daemon.call::<Initialize>(InitializeParams::default()).await;
        let mut body = request.to_vec();
        body.resize(limit + 1024, b'x');
        body.extend_from_slice(b"\"}}");
        let mut wire = Vec::new();
        match framing {
            Framing::Line => {
                wire.extend_from_slice(&body);
                wire.push(b'\n');
            }
            Framing::ContentLength => {
                wire.extend_from_slice(
                    format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes(),
                );
                wire.extend_from_slice(&body);
            }
        }
        let next = json!({"jsonrpc": "2.0", "id": 41, "method": SessionList::METHOD});
        framing.encode(&next.to_string(), &mut wire);
        daemon.conn.write_raw(&wire).await.unwrap();
        let refusal = daemon.next_note().await;
        let next = daemon.next_note().await;
        assert_eq!(next["id"], json!(41), "{framing:?}");
        assert!(next["result"]["sessions"].is_array(), "{framing:?}: {next}");
        assert!(daemon.notes.try_recv().is_err(), "nothing else was sent");
        assert_eq!(daemon.close().await, 0);
        refusals.push(refusal);
    }
    assert_eq!(
        (
            refusals[0]["id"].clone(),
            refusals[0]["error"]["code"].clone()
        ),
        (json!(40), json!(-32600))
    );
    assert_eq!(refusals[1], refusals[0]);
}
