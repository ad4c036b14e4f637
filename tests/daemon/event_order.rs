//! The order of events that come from two tasks of the daemon at once: a client draws what it
//! is told in the order it is told, so each pair below has one order, whatever the timing.
//!
//! - An answered approval: `approvalResolved` before the call it allowed runs.
//! - A `delegate` call: its `running` before the first event its sub-agent forwards.
//! - A sub-agent's end: its forwarded `runFinished` before its call takes the answer.
//!
//! The wrong orders showed only now and then, when a thread was held up at the wrong moment;
//! each test repeats its pair many times in one run, so that a loaded machine shows a wrong
//! order at once.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sidechat::protocol::{
    ApprovalDecision, ApprovalRespond, Event, SessionCreateParams, SessionEventParams,
    ToolCallStatus,
};

use crate::harness::{Daemon, Options, Scratch, answer};

/// How many times each pair comes up in one run.
const TIMES: usize = 12;

async fn replay_daemon(scratch: &Scratch, script: Value) -> (Daemon, String) {
    let daemon = Daemon::start(&scratch.db(), Options::with_env(scratch.replay(script))).await;
    let session = daemon
        .create_session(SessionCreateParams {
            // Every call is a step; the run must not be cut short.
            max_steps: Some(4 * TIMES as u32),
            ..scratch.replay_session()
        })
        .await;
    (daemon, session)
}

/// What the events of `session` say about `call_id`, in their order: a call's updates by
/// status, its approval's request and answer, and its sub-agent's forwarded events by kind.
fn about(events: &[SessionEventParams], session: &str, call_id: &str) -> Vec<String> {
    let mut approvals = Vec::new();
    let mut said = Vec::new();
    for event in events.iter().filter(|e| e.session_id == session) {
        match &event.event {
            Event::ToolCallStarted { call_id: id, .. } if id == call_id => {
                said.push("started".to_string())
            }
            Event::ToolCallUpdated {
                call_id: id,
                status,
                ..
            } if id == call_id => said.push(format!("{status:?}")),
            Event::ApprovalRequested { approval } if approval.call_id == call_id => {
                approvals.push(approval.approval_id.clone());
                said.push("approval requested".to_string());
            }
            Event::ApprovalResolved { approval_id, .. } if approvals.contains(approval_id) => {
                said.push("approval resolved".to_string())
            }
            Event::Delegation {
                call_id: id, event, ..
            } if id == call_id => {
                let kind = serde_json::to_value(event.as_ref()).unwrap()["kind"].clone();
                said.push(format!("sub-agent {}", kind.as_str().unwrap()));
            }
            _ => {}
        }
    }
    said
}

/// The ids of the calls `session`'s run started, in order.
fn calls(events: &[SessionEventParams], session: &str) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.session_id == session)
        .filter_map(|e| match &e.event {
            Event::ToolCallStarted { call_id, .. } => Some(call_id.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn an_answer_is_announced_before_the_call_it_allowed_runs() {
    let scratch = Scratch::new();
    let mut turns: Vec<Value> = (0..TIMES)
        .map(|n| {
            json!({"toolCalls": [{"name": "write_file", "input": {"path": format!("f{n}.txt"), "content": "x\n"}}]})
        })
        .collect();
    turns.push(json!({"text": "Wrote them."}));
    let (mut daemon, session) = replay_daemon(&scratch, json!({ "turns": turns })).await;
    daemon.send(&session, "write the files").await;
    // Each approval is answered the moment it is asked, as a client that allows by itself
    // does: the answer lands while the run may still be between asking and waiting.
    let mut events = Vec::new();
    for _ in 0..TIMES {
        let (asked, approval) = daemon.until_approval().await;
        events.extend(asked);
        daemon
            .call::<ApprovalRespond>(answer(&approval, ApprovalDecision::Allow))
            .await;
    }
    events.extend(daemon.until_finished().await);
    let calls = calls(&events, &session);
    assert_eq!(calls.len(), TIMES);
    let seen: Vec<Vec<String>> = calls
        .iter()
        .map(|call| about(&events, &session, call))
        .collect();
    let each = [
        "started",
        "AwaitingApproval",
        "approval requested",
        "approval resolved",
        "Running",
        "Done",
    ]
    .map(String::from)
    .to_vec();
    assert_eq!(seen, vec![each; TIMES]);
    daemon.close().await;
}

/// A run that delegates [`TIMES`] tasks one after another, each sub-agent listing the
/// workspace once; the parent's events and its calls.
async fn delegations() -> (Vec<SessionEventParams>, String, Vec<String>) {
    let scratch = Scratch::new();
    std::fs::write(scratch.workspace().join("a.txt"), "one\n").unwrap();
    let mut turns: Vec<Value> = (0..TIMES)
        .map(|n| {
            json!({"toolCalls": [{"name": "delegate", "input": {"task": format!("List the workspace, {n}")}}]})
        })
        .collect();
    turns.push(json!({"text": "They found a.txt."}));
    let script = json!({
        "turns": turns,
        "delegated": {"turns": [
            {"text": "Listing.", "toolCalls": [{"name": "list_directory", "input": {"path": "."}}]},
            {"text": "Found a.txt."},
        ]},
    });
    let (mut daemon, session) = replay_daemon(&scratch, script).await;
    daemon.send(&session, "ask sub-agents").await;
    let mut events = Vec::new();
    while !events.iter().any(|e: &SessionEventParams| {
        e.session_id == session && matches!(e.event, Event::RunFinished { .. })
    }) {
        events.extend(daemon.until_finished().await);
    }
    daemon.close().await;
    let calls = calls(&events, &session);
    assert_eq!(calls.len(), TIMES);
    (events, session, calls)
}

#[tokio::test]
async fn a_delegate_call_runs_before_its_sub_agent_says_anything() {
    let (events, session, calls) = delegations().await;
    let first: Vec<Vec<String>> = calls
        .iter()
        .map(|call| about(&events, &session, call)[..3].to_vec())
        .collect();
    let each = ["started", "Running", "sub-agent messageCompleted"]
        .map(String::from)
        .to_vec();
    assert_eq!(first, vec![each; TIMES]);
}

#[tokio::test]
async fn a_sub_agents_end_comes_before_its_call_takes_the_answer() {
    let (events, session, calls) = delegations().await;
    let last: Vec<Vec<String>> = calls
        .iter()
        .map(|call| {
            let said = about(&events, &session, call);
            said[said.len() - 2..].to_vec()
        })
        .collect();
    let done = format!("{:?}", ToolCallStatus::Done);
    let each = vec!["sub-agent runFinished".to_string(), done];
    assert_eq!(last, vec![each; TIMES]);
}
