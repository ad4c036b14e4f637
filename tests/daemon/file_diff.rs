//! `session/fileDiff`: the text of a changed file before the session's first change and after
//! its latest, kept by the daemon so a client can show the diff.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sidechat::protocol::{
    ApprovalDecision, ApprovalRespond, Event, Request, SessionCreateParams, SessionFileDiff,
    SessionFileDiffParams, SessionGet,
};

use crate::harness::{Daemon, Options, Scratch, answer, json_of, sid};

fn tool_turn(name: &str, input: Value) -> Value {
    json!({"text": format!("Calling {name}."), "toolCalls": [{"name": name, "input": input}]})
}

async fn run_script(scratch: &Scratch, turns: Value) -> (Daemon, String) {
    let mut daemon = Daemon::start(
        &scratch.db(),
        Options::with_env(scratch.replay(json!({ "turns": turns }))),
    )
    .await;
    let session = daemon.create_session(scratch.replay_session()).await;
    daemon.send(&session, "change files").await;
    // Allow every write and edit until the run ends.
    loop {
        let events = daemon
            .events_until(|e| {
                matches!(
                    e,
                    Event::ApprovalRequested { .. } | Event::RunFinished { .. }
                )
            })
            .await;
        match events.last().map(|e| &e.event) {
            Some(Event::ApprovalRequested { approval }) => {
                daemon
                    .call::<ApprovalRespond>(answer(&approval.approval_id, ApprovalDecision::Allow))
                    .await;
            }
            _ => break,
        }
    }
    (daemon, session)
}

#[tokio::test]
async fn spans_the_sessions_changes_and_skips_failed_ones() {
    let scratch = Scratch::new();
    let (daemon, session) = run_script(
        &scratch,
        json!([
            tool_turn("write_file", json!({"path": "a.txt", "content": "one\n"})),
            tool_turn("edit_file", json!({"path": "a.txt", "old_string": "one", "new_string": "two"})),
            tool_turn("edit_file", json!({"path": "a.txt", "old_string": "absent", "new_string": "x"})),
            {"text": "Done."}
        ]),
    )
    .await;
    let diff = json_of(
        daemon
            .call::<SessionFileDiff>(SessionFileDiffParams {
                session_id: session.clone(),
                path: "a.txt".into(),
                child_session_id: None,
            })
            .await,
    );
    assert_eq!(
        diff,
        json!({"sessionId": session, "path": "a.txt", "after": "two\n", "omitted": false, "changes": 2})
    );
    daemon.close().await;
}

#[tokio::test]
async fn keeps_the_text_an_overwrite_replaced() {
    let scratch = Scratch::new();
    std::fs::write(scratch.workspace().join("b.txt"), "old\n").unwrap();
    let (daemon, session) = run_script(
        &scratch,
        json!([
            tool_turn("write_file", json!({"path": "b.txt", "content": "new\n"})),
            {"text": "Done."}
        ]),
    )
    .await;
    let diff = json_of(
        daemon
            .call::<SessionFileDiff>(SessionFileDiffParams {
                session_id: session.clone(),
                path: "b.txt".into(),
                child_session_id: None,
            })
            .await,
    );
    assert_eq!(
        diff,
        json!({"sessionId": session, "path": "b.txt", "before": "old\n", "after": "new\n", "omitted": false, "changes": 1})
    );
    daemon.close().await;
}

#[tokio::test]
async fn a_file_over_the_cap_is_listed_but_its_text_omitted() {
    let scratch = Scratch::new();
    let huge = "x".repeat(300 * 1024);
    let (daemon, session) = run_script(
        &scratch,
        json!([
            tool_turn("write_file", json!({"path": "big.txt", "content": huge})),
            {"text": "Done."}
        ]),
    )
    .await;
    let diff = json_of(
        daemon
            .call::<SessionFileDiff>(SessionFileDiffParams {
                session_id: session.clone(),
                path: "big.txt".into(),
                child_session_id: None,
            })
            .await,
    );
    assert_eq!(
        diff,
        json!({"sessionId": session, "path": "big.txt", "omitted": true, "changes": 1})
    );
    let view = json_of(daemon.call::<SessionGet>(sid(&session)).await);
    assert_eq!(
        view["changedFiles"],
        json!([{"path": "big.txt", "added": 1, "removed": 0}])
    );
    daemon.close().await;
}

#[tokio::test]
async fn bad_requests_get_clear_errors() {
    let scratch = Scratch::new();
    let daemon = Daemon::start(&scratch.db(), Options::default()).await;
    let session = daemon.create_session(SessionCreateParams::default()).await;
    let never_changed = daemon
        .try_call::<SessionFileDiff>(SessionFileDiffParams {
            session_id: session.clone(),
            path: "nope.txt".into(),
            child_session_id: None,
        })
        .await
        .unwrap_err();
    assert_eq!(
        (never_changed.code, never_changed.message.as_str()),
        (-32004, "no changed file with id \"nope.txt\"")
    );
    let unknown = daemon
        .try_call::<SessionFileDiff>(SessionFileDiffParams {
            session_id: "ses_nope".into(),
            path: "a.txt".into(),
            child_session_id: None,
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code, -32001);
    let missing = daemon
        .try_call_raw(SessionFileDiff::METHOD, sid(&session))
        .await
        .unwrap_err();
    assert_eq!(missing.code, -32602);
    daemon.close().await;
}
