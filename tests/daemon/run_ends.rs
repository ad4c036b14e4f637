//! How runs end and what a session says afterwards: its state, the notices a client that
//! reloads reads, and where input typed near the end goes.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sidechat::protocol::{
    ChatResume, ChatStop, Event, FinishReason, SessionCreateParams, SessionEventParams, SessionGet,
};

use crate::harness::{Daemon, Options, Scratch, json_of, sid};

/// A replay daemon and a session on it, taking at most `max_steps` steps per run when given.
async fn replay(scratch: &Scratch, script: Value, max_steps: Option<u32>) -> (Daemon, String) {
    let daemon = Daemon::start(&scratch.db(), Options::with_env(scratch.replay(script))).await;
    let params = SessionCreateParams {
        max_steps,
        ..scratch.replay_session()
    };
    let id = daemon.create_session(params).await;
    (daemon, id)
}

fn finish_of(events: &[SessionEventParams]) -> FinishReason {
    match events.last().map(|e| &e.event) {
        Some(Event::RunFinished { reason, .. }) => *reason,
        other => panic!("expected runFinished, got {other:?}"),
    }
}

async fn state(daemon: &Daemon, session: &str) -> Value {
    json_of(daemon.call::<SessionGet>(sid(session)).await)["state"].clone()
}

/// The session's entries of one role, whole.
async fn entries_of(daemon: &Daemon, session: &str, role: &str) -> Vec<Value> {
    daemon.transcript(session).await["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["role"] == role)
        .cloned()
        .collect()
}

/// Every text the request sent to the model, in order.
fn texts(request: &Value) -> Vec<String> {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().unwrap().clone())
        .filter_map(|c| c["text"].as_str().map(str::to_string))
        .collect()
}

fn list_step(delay_ms: u64) -> Value {
    json!({"text": "Looking around the workspace now, one file at a time.", "delayMs": delay_ms,
           "toolCalls": [{"name": "list_directory", "input": {"path": "."}}]})
}

#[tokio::test]
async fn stop_during_an_approval_leaves_the_session_idle() {
    let scratch = Scratch::new();
    let write =
        json!({"toolCalls": [{"name": "write_file", "input": {"path": "a.txt", "content": "a"}}]});
    let (mut daemon, session) = replay(&scratch, json!({"turns": [write]}), None).await;
    daemon.send(&session, "write a.txt").await;
    daemon.until_approval().await;
    daemon.call::<ChatStop>(sid(&session)).await;
    assert_eq!(
        finish_of(&daemon.until_finished().await),
        FinishReason::Stopped
    );
    assert_eq!(state(&daemon, &session).await, "idle");
    let nothing = daemon
        .try_call::<ChatResume>(sid(&session))
        .await
        .unwrap_err();
    assert_eq!(nothing.code, -32007);
    daemon.close().await;
}

#[tokio::test]
async fn a_run_at_its_step_limit_leaves_the_session_idle_and_says_why() {
    let scratch = Scratch::new();
    let (mut daemon, session) = replay(
        &scratch,
        json!({"turns": [], "fallback": list_step(0)}),
        Some(2),
    )
    .await;
    daemon.send(&session, "loop").await;
    assert_eq!(
        finish_of(&daemon.until_finished().await),
        FinishReason::MaxIterations
    );
    assert_eq!(state(&daemon, &session).await, "idle");
    // A client that reloads reads why the run ended.
    let notices = entries_of(&daemon, &session, "notice").await;
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert_eq!(
        notices[0]["blocks"],
        json!([{"type": "notice", "level": "warning", "text": "The run stopped after 2 steps, the session's step limit (maxSteps). Send a message to let it go on."}])
    );
    daemon.close().await;
}

#[tokio::test]
async fn a_failed_run_stores_its_error_as_a_notice_that_no_model_is_sent() {
    let scratch = Scratch::new();
    let script = json!({"turns": [
        {"text": "Starting", "error": "the connection dropped"},
        {"text": "Second try worked."}
    ]});
    let (mut daemon, session) = replay(&scratch, script, None).await;
    daemon.send(&session, "go").await;
    let events = daemon.until_finished().await;
    assert_eq!(finish_of(&events), FinishReason::Error);
    let told: Vec<Value> = events
        .iter()
        .filter(|e| matches!(e.event, Event::Notice { .. }))
        .map(|e| json!({"seq": e.seq, "event": e.event}))
        .collect();
    let notices = entries_of(&daemon, &session, "notice").await;
    assert_eq!(notices.len(), 1, "{notices:?}");
    let stored = &notices[0];
    assert!(
        stored["blocks"][0]["text"]
            .as_str()
            .unwrap()
            .contains("the connection dropped"),
        "{stored}"
    );
    assert_eq!(stored["blocks"][0]["level"], "error");
    // The client was told once, with the stored entry's id and seq.
    assert_eq!(
        told,
        vec![json!({"seq": stored["seq"], "event": {
            "kind": "notice",
            "level": "error",
            "message": stored["blocks"][0]["text"],
            "messageId": stored["id"],
        }})]
    );

    daemon.send(&session, "again").await;
    daemon.until_finished().await;
    let requests = scratch.requests();
    assert_eq!(requests.len(), 2);
    assert!(
        !serde_json::to_string(&requests[1])
            .unwrap()
            .contains("connection dropped"),
        "notices never reach a model"
    );
    daemon.close().await;
}

#[tokio::test]
async fn nothing_is_delivered_on_the_last_allowed_step_it_is_promoted_into_the_next_turn() {
    let scratch = Scratch::new();
    let script = json!({"turns": [list_step(150), list_step(0), {"text": "Here is the summary."}]});
    let (mut daemon, session) = replay(&scratch, script, Some(2)).await;
    let started = json_of(daemon.send(&session, "look").await);
    daemon
        .events_until(|e| matches!(e, Event::TextDelta { .. }))
        .await;
    let queued = json_of(daemon.send(&session, "then summarise").await);
    // The reply names the run that took it.
    assert_eq!(
        (queued["queued"].clone(), queued["runId"].clone()),
        (json!(true), started["runId"].clone())
    );
    let first_run = daemon.until_finished().await;
    assert_eq!(finish_of(&first_run), FinishReason::MaxIterations);
    assert!(
        !first_run
            .iter()
            .any(|e| matches!(e.event, Event::InterjectionDelivered { .. })),
        "taken on the last step, it would reach a model whose answer nobody sees"
    );
    let promoted: Vec<Vec<String>> = first_run
        .iter()
        .filter_map(|e| match &e.event {
            Event::InterjectionPromoted { pending_ids, .. } => Some(pending_ids.clone()),
            _ => None,
        })
        .collect();
    let pending_id = queued["pendingId"].as_str().unwrap().to_string();
    assert_eq!(promoted, vec![vec![pending_id.clone()]]);

    let second_run = daemon.until_finished().await;
    assert_eq!(finish_of(&second_run), FinishReason::EndTurn);
    let requests = scratch.requests();
    assert_eq!(requests.len(), 3);
    assert!(!texts(&requests[1]).iter().any(|t| t.contains("summarise")));
    assert_eq!(texts(&requests[2]).last().unwrap(), "then summarise");

    // The promoted turn keeps the interjection's id, so a client that reloads can match it.
    let users = entries_of(&daemon, &session, "user").await;
    assert_eq!(
        users.last().unwrap()["blocks"],
        json!([{"type": "interjection", "pendingId": pending_id, "text": "then summarise", "promoted": true}])
    );
    daemon.close().await;
}

#[tokio::test]
async fn input_promoted_after_a_crash_keeps_its_pending_id() {
    let scratch = Scratch::new();
    let script = json!({"turns": [list_step(150), {"text": "Answered."}]});
    let (mut daemon, session) = replay(&scratch, script.clone(), None).await;
    daemon.send(&session, "look").await;
    daemon
        .events_until(|e| matches!(e, Event::TextDelta { .. }))
        .await;
    let queued = json_of(daemon.send(&session, "and the tests").await);
    daemon.process().kill().await.unwrap();

    let daemon = Daemon::start(&scratch.db(), Options::with_env(scratch.replay(script))).await;
    assert_eq!(state(&daemon, &session).await, "unanswered");
    let users = entries_of(&daemon, &session, "user").await;
    assert_eq!(
        users.last().unwrap()["blocks"],
        json!([{"type": "interjection", "pendingId": queued["pendingId"], "text": "and the tests", "promoted": true}])
    );
    // The run the crash cut off says so.
    let notices = entries_of(&daemon, &session, "notice").await;
    assert_eq!(
        notices
            .iter()
            .map(|n| n["blocks"][0]["text"].clone())
            .collect::<Vec<_>>(),
        [json!("interrupted: sidechat stopped during the run")]
    );
    daemon.close().await;
}

/// A provider that refuses the request (here overloaded, with no retries left) leaves the turn
/// unanswered, not answered by the empty reply it stored: `chat/resume` asks again, and the
/// model reads the user's words last. A run that failed after the model said something keeps
/// that text as its answer.
#[tokio::test]
async fn a_turn_the_provider_failed_before_any_answer_is_unanswered_and_resumed() {
    use crate::long_context::{WINDOW, env, text_reply};
    use crate::upstream::{Reply, start};
    let upstream = start(vec![
        Reply::status(
            529,
            r#"{"error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        ),
        text_reply("Here it is.", 100, 4),
    ]);
    let scratch = Scratch::new();
    let mut daemon =
        Daemon::start(&scratch.db(), Options::with_env(env(&upstream.url, WINDOW))).await;
    let session = daemon.create_session(SessionCreateParams::default()).await;
    daemon.send(&session, "go").await;
    assert_eq!(
        finish_of(&daemon.until_finished().await),
        FinishReason::Error
    );
    assert_eq!(state(&daemon, &session).await, "unanswered");

    daemon.call::<ChatResume>(sid(&session)).await;
    assert_eq!(
        finish_of(&daemon.until_finished().await),
        FinishReason::EndTurn
    );
    assert_eq!(state(&daemon, &session).await, "idle");
    let requests = upstream.bodies();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[1]["messages"], requests[0]["messages"]);
    let answers: Vec<(Value, Value)> = entries_of(&daemon, &session, "assistant")
        .await
        .iter()
        .map(|e| (e["status"].clone(), e["blocks"].clone()))
        .collect();
    assert_eq!(
        answers,
        vec![
            (json!("failed"), json!([])),
            (
                json!("complete"),
                json!([{"type": "text", "text": "Here it is."}])
            ),
        ]
    );
    daemon.close().await;
}

#[tokio::test]
async fn a_run_that_failed_after_the_model_said_something_leaves_that_as_the_answer() {
    let scratch = Scratch::new();
    let script = json!({"turns": [{"text": "Starting", "error": "the connection dropped"}]});
    let (mut daemon, session) = replay(&scratch, script, None).await;
    daemon.send(&session, "go").await;
    assert_eq!(
        finish_of(&daemon.until_finished().await),
        FinishReason::Error
    );
    assert_eq!(state(&daemon, &session).await, "idle");
    daemon.close().await;
}
