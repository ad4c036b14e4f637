//! `update_plan`: the model's plan is published whole, kept for `session/get`, never asked
//! about, and a plan with two steps in progress is an error the model reads.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sidechat::protocol::{Event, Plan, PlanStep, PlanStepStatus, SessionGet};

use crate::harness::{Daemon, Options, Scratch, sid};

fn plan_call(steps: Value) -> Value {
    json!({"toolCalls": [{"name": "update_plan", "input": {"explanation": "start with the test", "steps": steps}}]})
}

#[tokio::test]
async fn a_plan_is_published_stored_and_checked() {
    let scratch = Scratch::new();
    let good = json!([
        {"step": "Write the test", "status": "completed"},
        {"step": "Fix the bug", "status": "in_progress"},
        {"step": "Run the suite", "status": "pending"}
    ]);
    let two_in_progress = json!([
        {"step": "Fix the bug", "status": "in_progress"},
        {"step": "Run the suite", "status": "in_progress"}
    ]);
    let script = json!({"turns": [plan_call(good), plan_call(two_in_progress), {"text": "done"}]});
    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(scratch.replay(script))).await;
    let session = daemon.create_session(scratch.replay_session()).await;
    daemon.send(&session, "fix the bug").await;
    let events = daemon.until_finished().await;

    let expected = Plan {
        explanation: Some("start with the test".into()),
        steps: vec![
            PlanStep {
                step: "Write the test".into(),
                status: PlanStepStatus::Completed,
            },
            PlanStep {
                step: "Fix the bug".into(),
                status: PlanStepStatus::InProgress,
            },
            PlanStep {
                step: "Run the suite".into(),
                status: PlanStepStatus::Pending,
            },
        ],
    };
    let started: Vec<String> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::ToolCallStarted { call_id, .. } => Some(call_id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(started.len(), 2);
    let plans: Vec<(String, Plan)> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::Plan { call_id, plan } => Some((call_id.clone(), plan.clone())),
            _ => None,
        })
        .collect();
    // Only the valid plan is published; no call waited for approval.
    assert_eq!(plans, vec![(started[0].clone(), expected.clone())]);
    assert!(
        !events
            .iter()
            .any(|e| matches!(e.event, Event::ApprovalRequested { .. })),
        "update_plan asked for approval"
    );
    let outputs: Vec<(String, bool)> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::ToolCallUpdated {
                output: Some(output),
                status,
                ..
            } => Some((
                output.clone(),
                *status == sidechat::protocol::ToolCallStatus::Error,
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        outputs,
        vec![
            ("Plan updated: 1 of 3 steps completed.".to_string(), false),
            (
                "2 steps are in_progress; at most one may be. Mark the others pending or completed and call update_plan again.".to_string(),
                true
            ),
        ]
    );
    // The latest valid plan stays the session's.
    let got = daemon.call::<SessionGet>(sid(&session)).await;
    assert_eq!(got.plan, Some(expected));
    // The model was offered the tool.
    let requests = scratch.requests();
    let offered: Vec<&str> = requests[0]["tools"]
        .as_array()
        .map(|tools| tools.iter().filter_map(|t| t["name"].as_str()).collect())
        .unwrap_or_default();
    assert!(offered.contains(&"update_plan"), "{offered:?}");
}
