//! Agent runs over stdio with the scripted replay model and the demo model.

use std::collections::HashMap;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sidechat::protocol::{
    ApprovalDecision, ApprovalRespond, ChatResume, ChatStop, Event, FinishReason,
    SessionCreateParams, SessionEventParams, SessionGet,
};
use sidechat::rpc::framing::Framing;

use crate::harness::{Daemon, Options, Scratch, answer, json_of, kinds, sid};

/// Replaces generated ids and timestamps with stable placeholders numbered by first sight.
fn normalize(value: &Value, seen: &mut HashMap<String, String>) -> Value {
    match value {
        Value::String(s) => {
            let generated = regex::Regex::new(r"^(ses|msg|run|apr|call)_[0-9a-f_]+$").unwrap();
            let time = regex::Regex::new(r"^\d{4}-\d\d-\d\dT").unwrap();
            if time.is_match(s) {
                json!("<time>")
            } else if let Some(caps) = generated.captures(s) {
                let count = seen.len() + 1;
                let kind = caps[1].to_string();
                json!(
                    seen.entry(s.clone())
                        .or_insert_with(|| format!("<{kind}-{count}>"))
                        .clone()
                )
            } else {
                value.clone()
            }
        }
        Value::Array(items) => Value::Array(items.iter().map(|v| normalize(v, seen)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), normalize(v, seen)))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn finish_of(events: &[SessionEventParams]) -> (FinishReason, Option<String>) {
    match events.last().map(|e| &e.event) {
        Some(Event::RunFinished { reason, error }) => (*reason, error.clone()),
        other => panic!("expected runFinished, got {other:?}"),
    }
}

async fn replay_daemon(scratch: &Scratch, script: Value) -> (Daemon, String) {
    let daemon = Daemon::start(&scratch.db(), Options::with_env(scratch.replay(script))).await;
    let session = daemon.create_session(scratch.replay_session()).await;
    (daemon, session)
}

async fn respond(daemon: &Daemon, approval: &str, decision: ApprovalDecision) -> Value {
    json_of(
        daemon
            .call::<ApprovalRespond>(answer(approval, decision))
            .await,
    )
}

fn write_turn(path: &str, content: &str) -> Value {
    json!({"text": format!("Writing {path}."), "toolCalls": [{"name": "write_file", "input": {"path": path, "content": content}}]})
}

#[tokio::test]
async fn plain_turn_with_the_demo_model() {
    plain_turn(Framing::Line).await;
}

/// Deltas are rendered in place among the queued bytes, which `Content-Length` frames need a
/// scratch buffer for: the same run over that framing.
#[tokio::test]
async fn plain_turn_over_content_length_framing() {
    plain_turn(Framing::ContentLength).await;
}

async fn plain_turn(framing: Framing) {
    let scratch = Scratch::new();
    let options = Options {
        framing,
        ..Options::default()
    };
    let mut daemon = Daemon::start(&scratch.db(), options).await;
    let session = daemon.create_session(SessionCreateParams::default()).await;
    let sent = json_of(daemon.send(&session, "hello there").await);
    let events = daemon.until_finished().await;
    assert_eq!(
        kinds(&events)
            .into_iter()
            .filter(|k| k != "textDelta")
            .collect::<Vec<_>>(),
        [
            "messageCompleted",
            "runStarted",
            "budget",
            "messageStarted",
            "usage",
            "budget",
            "messageCompleted",
            "runFinished"
        ]
    );
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(
        seqs,
        (1..=events.len() as u64).collect::<Vec<_>>(),
        "seq increases by one"
    );
    assert!(
        events
            .iter()
            .all(|e| e.run_id.as_ref() == sent["runId"].as_str().map(String::from).as_ref())
    );
    let transcript = daemon.transcript(&session).await;
    let reply = transcript["entries"][1]["blocks"][0]["text"]
        .as_str()
        .unwrap();
    assert!(
        reply.starts_with("[demo model, offline] You said: \"hello there\""),
        "{reply}"
    );
    let streamed: String = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::TextDelta { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(streamed, reply, "the deltas add up to the stored text");
    assert_eq!(transcript["state"], "idle");
    daemon.close().await;
}

#[tokio::test]
async fn tool_round_trip_allowed_is_one_snapshot() {
    let scratch = Scratch::new();
    let (mut daemon, session) = replay_daemon(
        &scratch,
        json!({"turns": [write_turn("out.txt", "hi\n"), {"text": "Wrote it."}]}),
    )
    .await;
    daemon.send(&session, "write out.txt").await;
    let (mut events, approval) = daemon.until_approval().await;
    let state = json_of(daemon.call::<SessionGet>(sid(&session)).await)["state"].clone();
    assert_eq!(state, "awaitingApproval");
    respond(&daemon, &approval, ApprovalDecision::Allow).await;
    events.extend(daemon.until_finished().await);
    assert_eq!(
        std::fs::read_to_string(scratch.workspace().join("out.txt")).unwrap(),
        "hi\n"
    );
    let mut seen = HashMap::new();
    let normalized = normalize(&serde_json::to_value(&events).unwrap(), &mut seen);
    insta::assert_json_snapshot!("tool_round_trip_allowed", normalized);
    let session_view = json_of(daemon.call::<SessionGet>(sid(&session)).await);
    assert_eq!(
        session_view["changedFiles"],
        json!([{"path": "out.txt", "added": 1, "removed": 0}])
    );
    daemon.close().await;
}

#[tokio::test]
async fn denied_call_is_reported_to_the_model_and_the_run_goes_on() {
    let scratch = Scratch::new();
    let (mut daemon, session) = replay_daemon(
        &scratch,
        json!({"turns": [write_turn("no.txt", "x"), {"text": "Understood, I will not."}]}),
    )
    .await;
    daemon.send(&session, "write no.txt").await;
    let (_, approval) = daemon.until_approval().await;
    respond(&daemon, &approval, ApprovalDecision::Deny).await;
    let events = daemon.until_finished().await;
    assert_eq!(finish_of(&events), (FinishReason::EndTurn, None));
    assert!(!scratch.workspace().join("no.txt").exists());
    let requests = scratch.requests();
    let results = &requests[1]["messages"][2]["content"];
    assert_eq!(results[0]["type"], "toolResult");
    assert_eq!(results[0]["isError"], true);
    assert!(results[0]["output"].as_str().unwrap().contains("denied"));
    let session_view = json_of(daemon.call::<SessionGet>(sid(&session)).await);
    assert_eq!(session_view["changedFiles"], json!([]));
    daemon.close().await;
}

#[tokio::test]
async fn allow_always_does_not_ask_again_and_answers_are_idempotent() {
    let scratch = Scratch::new();
    let (mut daemon, session) = replay_daemon(
        &scratch,
        json!({"turns": [write_turn("a.txt", "a\n"), write_turn("b.txt", "b\nb\n"), {"text": "Both written."}]}),
    )
    .await;
    daemon.send(&session, "write two files").await;
    let (_, approval) = daemon.until_approval().await;
    assert_eq!(
        respond(&daemon, &approval, ApprovalDecision::AllowAlways).await,
        json!({"decision": "allowAlways", "applied": true})
    );
    let events = daemon.until_finished().await;
    assert!(
        !kinds(&events).contains(&"approvalRequested".to_string()),
        "{:?}",
        kinds(&events)
    );
    assert_eq!(finish_of(&events), (FinishReason::EndTurn, None));
    assert!(scratch.workspace().join("b.txt").exists());

    let again = respond(&daemon, &approval, ApprovalDecision::Deny).await;
    assert_eq!(again["applied"], false);
    assert_eq!(again["decision"], "allowAlways");
    let unknown = daemon
        .try_call::<ApprovalRespond>(answer("apr_nope", ApprovalDecision::Allow))
        .await
        .unwrap_err();
    assert_eq!(unknown.code, -32004);
    let session_view = json_of(daemon.call::<SessionGet>(sid(&session)).await);
    assert_eq!(
        session_view["changedFiles"],
        json!([{"path": "a.txt", "added": 1, "removed": 0}, {"path": "b.txt", "added": 2, "removed": 0}])
    );
    daemon.close().await;
}

#[tokio::test]
async fn stop_mid_stream_keeps_the_partial_text() {
    let scratch = Scratch::new();
    let long = "word ".repeat(200);
    let (mut daemon, session) =
        replay_daemon(&scratch, json!({"turns": [{"text": long, "delayMs": 20}]})).await;
    daemon.send(&session, "talk").await;
    daemon
        .events_until(|e| matches!(e, Event::TextDelta { .. }))
        .await;
    let stopped = json_of(daemon.call::<ChatStop>(sid(&session)).await);
    assert_eq!(stopped["stopped"], true);
    let events = daemon.until_finished().await;
    assert_eq!(finish_of(&events), (FinishReason::Stopped, None));
    let transcript = daemon.transcript(&session).await;
    let partial = &transcript["entries"][1];
    assert_eq!(partial["status"], "stopped");
    let text = partial["blocks"][0]["text"].as_str().unwrap();
    assert!(
        !text.is_empty() && text.len() < long.len(),
        "{} of {}",
        text.len(),
        long.len()
    );
    // Stopping again is harmless.
    assert_eq!(
        json_of(daemon.call::<ChatStop>(sid(&session)).await),
        json!({"stopped": false})
    );
    daemon.close().await;
}

#[tokio::test]
async fn stop_while_an_approval_is_pending_cancels_it() {
    let scratch = Scratch::new();
    let (mut daemon, session) =
        replay_daemon(&scratch, json!({"turns": [write_turn("x.txt", "x")]})).await;
    daemon.send(&session, "write").await;
    let (_, approval) = daemon.until_approval().await;
    daemon.call::<ChatStop>(sid(&session)).await;
    let events = daemon.until_finished().await;
    let tail: Vec<_> = kinds(&events);
    assert_eq!(
        tail,
        [
            "toolCallUpdated",
            "messageCompleted",
            "approvalResolved",
            "runFinished"
        ]
    );
    assert_eq!(finish_of(&events), (FinishReason::Stopped, None));
    let transcript = daemon.transcript(&session).await;
    assert_eq!(transcript["pendingApprovals"], json!([]));
    assert_eq!(transcript["entries"][2]["blocks"][0]["status"], "cancelled");
    let late = respond(&daemon, &approval, ApprovalDecision::Allow).await;
    assert_eq!(
        (late["applied"].clone(), late["decision"].clone()),
        (json!(false), json!("cancelled"))
    );
    assert!(!scratch.workspace().join("x.txt").exists());
    daemon.close().await;
}

#[tokio::test]
async fn step_limit_ends_with_max_iterations() {
    let scratch = Scratch::new();
    let read = json!({"toolCalls": [{"name": "list_directory", "input": {"path": "."}}]});
    let daemon = Daemon::start(
        &scratch.db(),
        Options {
            env: scratch.replay(json!({"turns": [], "fallback": read})),
            ..Options::default()
        },
    )
    .await;
    let mut daemon = daemon;
    let session = daemon
        .create_session(SessionCreateParams {
            max_steps: Some(2),
            ..scratch.replay_session()
        })
        .await;
    daemon.send(&session, "loop").await;
    let events = daemon.until_finished().await;
    assert_eq!(finish_of(&events), (FinishReason::MaxIterations, None));
    assert_eq!(scratch.requests().len(), 2);
    let transcript = daemon.transcript(&session).await;
    let roles: Vec<_> = transcript["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["role"].clone())
        .collect();
    assert_eq!(
        roles,
        ["user", "assistant", "tool", "assistant", "tool", "notice"]
    );
    daemon.close().await;
}

#[tokio::test]
async fn send_right_after_run_finished_is_not_busy() {
    let scratch = Scratch::new();
    let mut daemon = Daemon::start(&scratch.db(), Options::default()).await;
    let session = daemon.create_session(SessionCreateParams::default()).await;
    for round in 0..5 {
        daemon.send(&session, &format!("round {round}")).await;
        daemon.until_finished().await;
    }
    let transcript = daemon.transcript(&session).await;
    assert_eq!(transcript["entries"].as_array().unwrap().len(), 10);
    daemon.close().await;
}

#[tokio::test]
async fn two_sessions_run_at_once_without_crossing() {
    let scratch = Scratch::new();
    let mut daemon = Daemon::start(
        &scratch.db(),
        Options::with_env(vec![("SIDECHAT_DEMO_DELAY_MS", "2".into())]),
    )
    .await;
    let first = daemon
        .create_session(SessionCreateParams {
            title: Some("one".into()),
            ..Default::default()
        })
        .await;
    let second = daemon
        .create_session(SessionCreateParams {
            title: Some("two".into()),
            ..Default::default()
        })
        .await;
    daemon.send(&first, "tell me a story").await;
    daemon.send(&second, "say something about apples").await;
    let mut by_session: HashMap<String, Vec<SessionEventParams>> = HashMap::new();
    let mut finished = 0;
    while finished < 2 {
        let event = daemon.next_event().await;
        if matches!(event.event, Event::RunFinished { .. }) {
            finished += 1;
        }
        by_session
            .entry(event.session_id.clone())
            .or_default()
            .push(event);
    }
    for (session, events) in &by_session {
        let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
        assert_eq!(
            seqs,
            (1..=events.len() as u64).collect::<Vec<_>>(),
            "{session}"
        );
        let text: String = events
            .iter()
            .filter_map(|e| match &e.event {
                Event::TextDelta { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        let stored = daemon.transcript(session).await;
        assert_eq!(
            stored["entries"][1]["blocks"][0]["text"].as_str().unwrap(),
            text
        );
        let expect = if session == &first {
            "Once upon a time"
        } else {
            "apples"
        };
        assert!(text.contains(expect), "{session}: {text}");
    }
    assert_eq!(by_session.len(), 2);
    daemon.close().await;
}

#[tokio::test]
async fn paths_outside_the_workspace_are_refused() {
    let scratch = Scratch::new();
    let outside = scratch.dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "secret").unwrap();
    std::os::unix::fs::symlink(&outside, scratch.workspace().join("link")).unwrap();
    let calls = json!([
        {"name": "read_file", "input": {"path": "../outside/secret.txt"}},
        {"name": "read_file", "input": {"path": outside.join("secret.txt").display().to_string()}},
        {"name": "read_file", "input": {"path": "link/secret.txt"}},
        {"name": "list_directory", "input": {"path": "link"}},
    ]);
    let (mut daemon, session) = replay_daemon(
        &scratch,
        json!({"turns": [{"toolCalls": calls}, {"text": "ok"}]}),
    )
    .await;
    daemon.send(&session, "peek").await;
    let events = daemon.until_finished().await;
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
    let refused = |path: &str, why: &str| (format!("{path:?} {why}"), true);
    let outside_why =
        "is outside the workspace; tools may only touch files under the workspace root";
    let symlink_why = "goes through a symbolic link; tools do not follow symbolic links, so use the path of the file itself";
    let secret = outside.join("secret.txt").display().to_string();
    assert_eq!(
        outputs,
        vec![
            refused("../outside/secret.txt", outside_why),
            refused(&secret, outside_why),
            refused("link/secret.txt", symlink_why),
            refused("link", symlink_why),
        ]
    );
    daemon.close().await;
}

/// Writes, edits and searches through a symlink are refused whether it leads out or stays
/// inside (tools never follow one: that is what keeps a swapped symlink from redirecting them),
/// and nothing is created on either side.
#[tokio::test]
async fn writes_through_a_symlink_are_refused_and_create_nothing() {
    let scratch = Scratch::new();
    let outside = scratch.dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("notes.md"), "outside\n").unwrap();
    let ws = scratch.workspace();
    std::fs::create_dir(ws.join("src")).unwrap();
    std::fs::write(ws.join("src/notes.md"), "inside\n").unwrap();
    std::os::unix::fs::symlink(&outside, ws.join("out")).unwrap();
    std::os::unix::fs::symlink(ws.join("src"), ws.join("inner")).unwrap();
    let calls = json!([
        {"name": "write_file", "input": {"path": "out/new.md", "content": "x\n"}},
        {"name": "write_file", "input": {"path": "inner/new.md", "content": "x\n"}},
        {"name": "write_file", "input": {"path": "out/deeper/new.md", "content": "x\n"}},
        {"name": "edit_file", "input": {"path": "out/notes.md", "old_string": "outside", "new_string": "changed"}},
        {"name": "edit_file", "input": {"path": "inner/notes.md", "old_string": "inside", "new_string": "changed"}},
        {"name": "search_text", "input": {"pattern": "side", "path": "out"}},
    ]);
    let (mut daemon, session) = replay_daemon(
        &scratch,
        json!({"turns": [{"toolCalls": calls}, {"text": "done"}]}),
    )
    .await;
    daemon.send(&session, "write through links").await;
    let mut events = Vec::new();
    for _ in 0..5 {
        let (before, approval) = daemon.until_approval().await;
        events.extend(before);
        respond(&daemon, &approval, ApprovalDecision::Allow).await;
    }
    events.extend(daemon.until_finished().await);
    let outputs: Vec<String> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::ToolCallUpdated {
                output: Some(output),
                ..
            } => Some(output.clone()),
            _ => None,
        })
        .collect();
    let refused = |path: &str| {
        format!(
            "{path:?} goes through a symbolic link; tools do not follow symbolic links, so use the path of the file itself"
        )
    };
    assert_eq!(
        outputs,
        [
            "out/new.md",
            "inner/new.md",
            "out/deeper/new.md",
            "out/notes.md",
            "inner/notes.md",
            "out"
        ]
        .map(refused)
        .to_vec()
    );
    let names = |dir: &std::path::Path| {
        let mut names: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    };
    assert_eq!(
        (
            names(&outside),
            names(&ws.join("src")),
            std::fs::read_to_string(outside.join("notes.md")).unwrap(),
            std::fs::read_to_string(ws.join("src/notes.md")).unwrap()
        ),
        (
            vec!["notes.md".to_string()],
            vec!["notes.md".to_string()],
            "outside\n".to_string(),
            "inside\n".to_string()
        )
    );
    let session_view = json_of(daemon.call::<SessionGet>(sid(&session)).await);
    assert_eq!(session_view["changedFiles"], json!([]));
    daemon.close().await;
}

#[tokio::test]
async fn only_successful_writes_are_recorded_as_changed() {
    let scratch = Scratch::new();
    std::fs::write(scratch.workspace().join("keep.txt"), "one\n").unwrap();
    let calls = json!([
        {"name": "write_file", "input": {"path": "ok.txt", "content": "fine\n"}},
        {"name": "write_file", "input": {"path": "../escape.txt", "content": "no\n"}},
        {"name": "edit_file", "input": {"path": "keep.txt", "old_string": "absent", "new_string": "x"}},
        {"name": "edit_file", "input": {"path": "keep.txt", "old_string": "one", "new_string": "1\n2"}},
    ]);
    let (mut daemon, session) = replay_daemon(
        &scratch,
        json!({"turns": [{"toolCalls": calls}, {"text": "done"}]}),
    )
    .await;
    daemon.send(&session, "change things").await;
    for _ in 0..4 {
        let (_, approval) = daemon.until_approval().await;
        respond(&daemon, &approval, ApprovalDecision::Allow).await;
    }
    daemon.until_finished().await;
    let session_view = json_of(daemon.call::<SessionGet>(sid(&session)).await);
    assert_eq!(
        session_view["changedFiles"],
        json!([{"path": "keep.txt", "added": 2, "removed": 1}, {"path": "ok.txt", "added": 1, "removed": 0}])
    );
    assert!(!scratch.dir.path().join("escape.txt").exists());
    daemon.close().await;
}

#[tokio::test]
async fn an_approval_survives_a_killed_daemon_and_resumes_the_run() {
    let scratch = Scratch::new();
    let script = json!({"turns": [write_turn("later.txt", "after restart\n"), {"text": "Finished after the restart."}]});
    let (mut daemon, session) = replay_daemon(&scratch, script.clone()).await;
    daemon.send(&session, "write later.txt").await;
    let (_, approval) = daemon.until_approval().await;
    daemon.process().kill().await.unwrap();

    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(scratch.replay(script))).await;
    let transcript = daemon.transcript(&session).await;
    assert_eq!(transcript["state"], "awaitingApproval");
    assert_eq!(
        transcript["pendingApprovals"][0]["approvalId"],
        json!(approval)
    );
    // Typing while the run waits is queued, not refused, and does not answer the approval.
    let queued = json_of(daemon.send(&session, "hello?").await);
    assert_eq!(queued["queued"], true);

    respond(&daemon, &approval, ApprovalDecision::Allow).await;
    let events = daemon.until_finished().await;
    assert_eq!(finish_of(&events), (FinishReason::EndTurn, None));
    assert_eq!(
        std::fs::read_to_string(scratch.workspace().join("later.txt")).unwrap(),
        "after restart\n"
    );
    let transcript = daemon.transcript(&session).await;
    let roles: Vec<_> = transcript["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["role"].clone())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool", "user", "assistant"]);
    assert_eq!(transcript["entries"][3]["blocks"][0]["text"], "hello?");
    assert_eq!(transcript["state"], "idle");
    daemon.close().await;
}

#[tokio::test]
async fn a_run_killed_mid_tool_is_closed_with_a_result_for_every_call() {
    let scratch = Scratch::new();
    let script = json!({"turns": [{"toolCalls": [{"name": "run_command", "input": {"command": "sleep 30", "sandbox": false}}]}, {"text": "Recovered."}]});
    let (mut daemon, session) = replay_daemon(&scratch, script.clone()).await;
    daemon.send(&session, "run it").await;
    let (_, approval) = daemon.until_approval().await;
    respond(&daemon, &approval, ApprovalDecision::Allow).await;
    daemon
        .events_until(|e| {
            matches!(
                e,
                Event::ToolCallUpdated {
                    status: sidechat::protocol::ToolCallStatus::Running,
                    ..
                }
            )
        })
        .await;
    daemon.process().kill().await.unwrap();

    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(scratch.replay(script))).await;
    let transcript = daemon.transcript(&session).await;
    assert_eq!(transcript["state"], "unanswered");
    let result = &transcript["entries"][2]["blocks"][0];
    assert_eq!(
        (result["type"].clone(), result["isError"].clone()),
        (json!("toolResult"), json!(true))
    );
    assert!(
        result["output"]
            .as_str()
            .unwrap()
            .starts_with("Interrupted")
    );
    daemon.call::<ChatResume>(sid(&session)).await;
    let events = daemon.until_finished().await;
    assert_eq!(finish_of(&events), (FinishReason::EndTurn, None));
    let nothing = daemon
        .try_call::<ChatResume>(sid(&session))
        .await
        .unwrap_err();
    assert_eq!(nothing.code, -32007);
    daemon.close().await;
}
