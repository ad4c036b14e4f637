//! Delegation: a run hands a task to a child session with the `delegate` tool, against a fake
//! OpenAI-compatible upstream that answers the parent's and the child's requests in the order
//! they arrive.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sidechat::protocol::{
    ApprovalDecision, ApprovalRespond, ChatStop, Event, FinishReason, SessionCost,
    SessionCreateParams, SessionDelete, SessionEventParams, SessionFileDiff, SessionFileDiffParams,
    SessionGet, SessionList, SessionListParams, SessionUpdate, SessionUpdateParams, ToolCallStatus,
};

use crate::clock::TestClock;
use crate::harness::{Daemon, Options, Scratch, answer, gated, json_of, sid, text};
use crate::locked_database::hold_write_lock;
use crate::transcripts::{self, ToolResult};
use crate::upstream::{Reply, Upstream, start};

const MODEL: &str = "gpt-4o";

fn env(url: &str) -> Vec<(&'static str, String)> {
    vec![
        ("OPENAI_BASE_URL", format!("{url}/v1")),
        ("OPENAI_API_KEY", "sk-test".into()),
        ("SIDECHAT_OPENAI_MODEL", MODEL.into()),
        ("SIDECHAT_MAX_RETRIES", "0".into()),
    ]
}

fn usage(prompt: u64, completion: u64) -> Value {
    json!({"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion}})
}

/// An answer of words.
fn says(text: &str) -> Reply {
    Reply::sse(&[
        json!({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        usage(100, 10),
    ])
}

/// An answer of tool calls: `(id, tool, input)`.
fn calls(list: &[(&str, &str, Value)]) -> Reply {
    let calls: Vec<Value> = list
        .iter()
        .enumerate()
        .map(|(index, (id, name, input))| {
            json!({"index": index, "id": id, "type": "function",
                   "function": {"name": name, "arguments": input.to_string()}})
        })
        .collect();
    Reply::sse(&[
        json!({"choices": [{"index": 0, "delta": {"tool_calls": calls}, "finish_reason": null}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
        usage(100, 10),
    ])
}

fn call(id: &str, name: &str, input: Value) -> Reply {
    calls(&[(id, name, input)])
}

async fn start_daemon(scratch: &Scratch, upstream: &Upstream) -> Daemon {
    Daemon::start(&scratch.db(), Options::with_env(env(&upstream.url))).await
}

async fn parent_session(daemon: &Daemon, scratch: &Scratch) -> String {
    daemon
        .create_session(SessionCreateParams {
            workspace_root: Some(scratch.workspace().display().to_string()),
            ..SessionCreateParams::default()
        })
        .await
}

/// Events until the run of `session` finishes.
async fn until_finished_in(daemon: &mut Daemon, session: &str) -> Vec<SessionEventParams> {
    let mut events = Vec::new();
    loop {
        let event = daemon.next_event().await;
        let done = event.session_id == session && matches!(event.event, Event::RunFinished { .. });
        events.push(event);
        if done {
            return events;
        }
    }
}

/// A parent session asks for done.txt to be written (the upstream delegates it to a writing
/// child), until the child's approval reaches the parent; the parent's and the approval's ids.
async fn delegated_approval_waits(daemon: &mut Daemon, scratch: &Scratch) -> (String, String) {
    let parent = parent_session(daemon, scratch).await;
    daemon.send(&parent, "Have it written.").await;
    let (_, approval) = until_delegated_approval(daemon, &parent).await;
    (parent, approval)
}

/// Events until a child's approval request reaches the parent; the approval's id.
async fn until_delegated_approval(
    daemon: &mut Daemon,
    parent: &str,
) -> (Vec<SessionEventParams>, String) {
    let mut events = Vec::new();
    loop {
        let event = daemon.next_event().await;
        let id = match &event.event {
            Event::Delegation { event: inner, .. } if event.session_id == parent => {
                match &**inner {
                    Event::ApprovalRequested { approval } => Some(approval.approval_id.clone()),
                    _ => None,
                }
            }
            _ => None,
        };
        events.push(event);
        if let Some(id) = id {
            return (events, id);
        }
    }
}

/// The tool results of a session's transcript.
async fn tool_results(daemon: &Daemon, session: &str) -> Vec<ToolResult> {
    transcripts::tool_results(&daemon.transcript(session).await)
}

fn tool_names(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| t["function"]["name"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn finish(events: &[SessionEventParams], session: &str) -> FinishReason {
    events
        .iter()
        .rev()
        .find_map(|e| match &e.event {
            Event::RunFinished { reason, .. } if e.session_id == session => Some(*reason),
            _ => None,
        })
        .expect("the session's run finished")
}

/// Answers an approval that was already decided (or expired): the answer is refused as not
/// applied.
async fn answered_again_changes_nothing(
    daemon: &Daemon,
    approval: &str,
    decision: ApprovalDecision,
) {
    let again = json_of(
        daemon
            .call::<ApprovalRespond>(answer(approval, decision))
            .await,
    );
    assert_eq!(again["applied"], false, "{again}");
}

/// The only child of `parent`.
async fn only_child(daemon: &Daemon, parent: &str) -> String {
    let view = json_of(daemon.call::<SessionGet>(sid(parent)).await);
    let children = view["children"].as_array().expect("children").clone();
    assert_eq!(children.len(), 1, "{view}");
    children[0].as_str().unwrap().to_string()
}

#[tokio::test]
async fn a_child_reads_files_and_its_answer_is_the_parents_tool_result() {
    let scratch = Scratch::new();
    std::fs::write(scratch.workspace().join("notes.txt"), "alpha\nbeta\n").unwrap();
    let upstream = start(vec![
        call(
            "call_d",
            "delegate",
            json!({"task": "Tell me the first line of notes.txt", "instructions": "Answer with the line only."}),
        ),
        call("call_r", "read_file", json!({"path": "notes.txt"})),
        says("alpha"),
        says("The first line is alpha."),
    ]);
    let mut daemon = start_daemon(&scratch, &upstream).await;
    let parent = parent_session(&daemon, &scratch).await;
    daemon
        .send(&parent, "What does notes.txt start with?")
        .await;
    let events = until_finished_in(&mut daemon, &parent).await;
    assert_eq!(finish(&events, &parent), FinishReason::EndTurn);
    let child = only_child(&daemon, &parent).await;

    // The parent read the child's answer as the call's result, and went on.
    assert_eq!(
        tool_results(&daemon, &parent).await,
        vec![("call_d".into(), "alpha".into(), false, "done".into())]
    );
    let requests = upstream.bodies();
    assert_eq!(requests.len(), 4);
    assert!(tool_names(&requests[0]).contains(&"delegate".to_string()));
    // The child: a fresh context holding the task, its role and the instructions, with
    // read-only tools and no `delegate`.
    let child_request = &requests[1];
    assert_eq!(
        tool_names(child_request),
        ["read_file", "list_directory", "search_text"]
    );
    let messages = child_request["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "{messages:?}");
    assert_eq!(messages[0]["role"], "system");
    let system = messages[0]["content"].as_str().unwrap();
    assert!(system.starts_with("You are a sub-agent."), "{system}");
    assert!(system.ends_with("Answer with the line only."), "{system}");
    assert_eq!(
        messages[1]["content"],
        "Tell me the first line of notes.txt"
    );
    let parent_last = requests[3]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(parent_last["role"], "tool");
    assert_eq!(parent_last["content"], "alpha");

    // The child's events reached the parent as `delegation` events, in the parent's own
    // sequence, carrying the child's id and numbers.
    let forwarded: Vec<(&str, u64, String)> = events
        .iter()
        .filter(|e| e.session_id == parent)
        .filter_map(|e| match &e.event {
            Event::Delegation {
                call_id,
                child_session_id,
                child_seq,
                event,
            } => {
                assert_eq!(child_session_id, &child);
                let kind = serde_json::to_value(event).unwrap()["kind"]
                    .as_str()
                    .unwrap()
                    .to_string();
                Some((call_id.as_str(), *child_seq, kind))
            }
            _ => None,
        })
        .collect();
    assert!(forwarded.iter().all(|(call, _, _)| *call == "call_d"));
    let kinds: Vec<&str> = forwarded.iter().map(|(_, _, k)| k.as_str()).collect();
    assert_eq!(kinds.first(), Some(&"messageCompleted"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"runFinished"), "{kinds:?}");
    assert!(kinds.contains(&"toolCallStarted") && kinds.contains(&"textDelta"));
    let child_seqs: Vec<u64> = forwarded.iter().map(|(_, s, _)| *s).collect();
    assert!(child_seqs.windows(2).all(|w| w[0] < w[1]), "{child_seqs:?}");
    let parent_seqs: Vec<u64> = events
        .iter()
        .filter(|e| e.session_id == parent)
        .map(|e| e.seq)
        .collect();
    assert_eq!(
        parent_seqs,
        (parent_seqs[0]..parent_seqs[0] + parent_seqs.len() as u64).collect::<Vec<_>>()
    );

    // The child is listed under its parent, not at the top level unless asked.
    let child_view = json_of(daemon.call::<SessionGet>(sid(&child)).await);
    assert_eq!(child_view["parentId"], json!(parent));
    assert_eq!(child_view["parentCallId"], "call_d");
    assert_eq!(child_view["delegation"], false);
    assert_eq!(
        child_view["workspaceRoot"],
        json!(scratch.workspace().display().to_string())
    );
    let ids = |list: &Value| -> Vec<String> {
        list["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap().to_string())
            .collect()
    };
    let top = json_of(
        daemon
            .call::<SessionList>(SessionListParams::default())
            .await,
    );
    assert_eq!(ids(&top), vec![parent.clone()]);
    let all = json_of(
        daemon
            .call::<SessionList>(SessionListParams {
                include_children: Some(true),
                ..SessionListParams::default()
            })
            .await,
    );
    let mut all_ids = ids(&all);
    all_ids.sort();
    let mut both = vec![parent.clone(), child.clone()];
    both.sort();
    assert_eq!(all_ids, both);
    let under = json_of(
        daemon
            .call::<SessionList>(SessionListParams {
                parent_id: Some(parent.clone()),
                ..SessionListParams::default()
            })
            .await,
    );
    assert_eq!(ids(&under), vec![child.clone()]);
    assert_eq!(under["sessions"][0]["parentId"], json!(parent));

    // The child's whole transcript is readable.
    let transcript = daemon.transcript(&child).await;
    let roles: Vec<&str> = transcript["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool", "assistant"]);

    // Deleting the parent deletes its delegated tasks.
    daemon.call::<SessionDelete>(sid(&parent)).await;
    let gone = daemon.try_call::<SessionGet>(sid(&child)).await;
    assert!(gone.is_err(), "{gone:?}");
    daemon.close().await;
}

#[tokio::test]
async fn bad_delegations_fail_with_the_reason_and_the_parent_goes_on() {
    let scratch = Scratch::new();
    let upstream = start(vec![
        calls(&[
            (
                "call_set",
                "delegate",
                json!({"task": "look", "tools": "write-only"}),
            ),
            (
                "call_model",
                "delegate",
                json!({"task": "look", "model": "no-such-model"}),
            ),
            ("call_task", "delegate", json!({"tools": "all"})),
            ("call_fail", "delegate", json!({"task": "look around"})),
        ]),
        // The fourth call's child: its provider fails.
        Reply::status(
            400,
            r#"{"error":{"message":"the child's request is malformed"}}"#,
        ),
        says("Nothing worked."),
    ]);
    let mut daemon = start_daemon(&scratch, &upstream).await;
    let parent = parent_session(&daemon, &scratch).await;
    daemon.send(&parent, "Delegate badly.").await;
    let events = until_finished_in(&mut daemon, &parent).await;
    assert_eq!(finish(&events, &parent), FinishReason::EndTurn);
    let results = tool_results(&daemon, &parent).await;
    let summary: Vec<(&str, bool, &str)> = results
        .iter()
        .map(|(id, _, error, status)| (id.as_str(), *error, status.as_str()))
        .collect();
    assert_eq!(
        summary,
        [
            ("call_set", true, "error"),
            ("call_model", true, "error"),
            ("call_task", true, "error"),
            ("call_fail", true, "error"),
        ]
    );
    assert_eq!(
        results[0].1,
        "unknown tool set \"write-only\": tools must be \"read-only\" or \"all\""
    );
    assert!(
        results[1]
            .1
            .starts_with("unknown model \"no-such-model\": account \"openai\" knows gpt-4o"),
        "{}",
        results[1].1
    );
    assert_eq!(
        results[2].1,
        "task is missing: say what the sub-agent should do"
    );
    let failed = &results[3].1;
    assert!(failed.starts_with("status: failed\nnote: "), "{failed}");
    assert!(
        failed.contains("the child's request is malformed"),
        "{failed}"
    );
    assert!(failed.contains("last message: (none)"), "{failed}");
    // Only the last call started a child.
    let view = json_of(daemon.call::<SessionGet>(sid(&parent)).await);
    assert_eq!(view["children"].as_array().unwrap().len(), 1);
    daemon.close().await;
}

#[tokio::test]
async fn a_child_cannot_delegate_and_a_session_can_turn_delegation_off() {
    let scratch = Scratch::new();
    let upstream = start(vec![
        call("call_d", "delegate", json!({"task": "delegate further"})),
        // The child calls the tool it was not offered.
        call("call_dd", "delegate", json!({"task": "deeper"})),
        says("I could not delegate."),
        says("Done."),
        // The second session has delegation off from the start.
        call("call_off", "delegate", json!({"task": "anything"})),
        says("Fine."),
    ]);
    let mut daemon = start_daemon(&scratch, &upstream).await;
    let parent = parent_session(&daemon, &scratch).await;
    daemon.send(&parent, "Go.").await;
    until_finished_in(&mut daemon, &parent).await;
    let child = only_child(&daemon, &parent).await;
    assert_eq!(
        tool_results(&daemon, &child).await,
        vec![(
            "call_dd".into(),
            "Delegation is one level deep: a delegated task cannot delegate again. Do the work with your own tools.".into(),
            true,
            "error".into()
        )]
    );
    assert_eq!(
        tool_results(&daemon, &parent).await[0].1,
        "I could not delegate."
    );

    let off = daemon
        .create_session(SessionCreateParams {
            workspace_root: Some(scratch.workspace().display().to_string()),
            delegation: Some(false),
            ..SessionCreateParams::default()
        })
        .await;
    assert_eq!(
        json_of(daemon.call::<SessionGet>(sid(&off)).await)["delegation"],
        false
    );
    daemon.send(&off, "Go.").await;
    until_finished_in(&mut daemon, &off).await;
    assert_eq!(
        tool_results(&daemon, &off).await[0].1,
        "Delegation is turned off for this session. Do the work with your own tools."
    );
    let requests = upstream.bodies();
    assert!(!tool_names(&requests[4]).contains(&"delegate".to_string()));
    // And back on.
    let on = json_of(
        daemon
            .call::<SessionUpdate>(SessionUpdateParams {
                session_id: off.clone(),
                delegation: Some(true),
                ..SessionUpdateParams::default()
            })
            .await,
    );
    assert_eq!(on["delegation"], true);
    daemon.close().await;
}

/// A child given all tools asks to write done.txt (the approval surfaces at the root); then
/// the model says `then`, in order.
fn writing_child(then: &[&str]) -> Vec<Reply> {
    let mut script = vec![
        call(
            "call_d",
            "delegate",
            json!({"task": "Write done.txt", "tools": "all"}),
        ),
        call(
            "call_w",
            "write_file",
            json!({"path": "done.txt", "content": "done\n"}),
        ),
    ];
    script.extend(then.iter().map(|text| says(text)));
    script
}

/// The child writes done.txt once allowed, and the parent goes on with its answer.
fn writing_child_script() -> Vec<Reply> {
    writing_child(&["Wrote done.txt.", "The sub-agent wrote it."])
}

/// Allows the writing child's call: the child writes done.txt, and the parent's run finishes
/// with the child's answer as its `delegate` call's result. The events until then.
async fn allow_and_finish(
    daemon: &mut Daemon,
    scratch: &Scratch,
    parent: &str,
    approval: &str,
) -> Vec<SessionEventParams> {
    daemon
        .call::<ApprovalRespond>(answer(approval, ApprovalDecision::Allow))
        .await;
    let events = until_finished_in(daemon, parent).await;
    assert_eq!(finish(&events, parent), FinishReason::EndTurn);
    assert_eq!(
        std::fs::read_to_string(scratch.workspace().join("done.txt")).unwrap(),
        "done\n"
    );
    assert_eq!(
        tool_results(daemon, parent).await,
        vec![(
            "call_d".into(),
            "Wrote done.txt.\n\nfiles changed: done.txt (+1 -0)".into(),
            false,
            "done".into()
        )]
    );
    events
}

#[tokio::test]
async fn a_childs_approval_is_answered_at_the_root_and_both_runs_finish() {
    let scratch = Scratch::new();
    let upstream = start(writing_child_script());
    let mut daemon = start_daemon(&scratch, &upstream).await;
    let parent = parent_session(&daemon, &scratch).await;
    daemon.send(&parent, "Have it written.").await;
    let (events, approval) = until_delegated_approval(&mut daemon, &parent).await;
    let child = only_child(&daemon, &parent).await;
    // The parent's call shows that it waits for the user.
    assert!(events.iter().any(|e| e.session_id == parent
        && matches!(&e.event, Event::ToolCallUpdated { call_id, status: ToolCallStatus::AwaitingApproval, .. } if call_id == "call_d")));
    let root = daemon.transcript(&parent).await;
    assert_eq!(root["state"], "awaitingApproval");
    assert_eq!(root["pendingApprovals"], json!([]));
    let delegated = &root["delegatedApprovals"];
    assert_eq!(delegated.as_array().unwrap().len(), 1, "{delegated}");
    assert_eq!(delegated[0]["childSessionId"], json!(child));
    assert_eq!(delegated[0]["callId"], "call_d");
    assert_eq!(delegated[0]["task"], "Write done.txt");
    assert_eq!(delegated[0]["approval"]["approvalId"], json!(approval));
    assert_eq!(
        delegated[0]["approval"]["summary"],
        "write done.txt (1 line)"
    );
    // The child lists it as its own.
    let own = daemon.transcript(&child).await;
    assert_eq!(own["pendingApprovals"][0]["approvalId"], json!(approval));

    // Delegated with "all", the child is offered every tool but `delegate`, `web_fetch`
    // among them (it asks as the parent's calls do); a read-only child is not (see the first
    // test above).
    assert_eq!(
        tool_names(&upstream.bodies()[1]),
        [
            "read_file",
            "list_directory",
            "search_text",
            "write_file",
            "edit_file",
            "run_command",
            "update_plan",
            "web_fetch"
        ]
    );

    allow_and_finish(&mut daemon, &scratch, &parent, &approval).await;
    // Answering again, from either side, changes nothing: it was one decision.
    answered_again_changes_nothing(&daemon, &approval, ApprovalDecision::Deny).await;
    let root = daemon.transcript(&parent).await;
    assert_eq!(root["state"], "idle");
    assert!(root.get("delegatedApprovals").is_none(), "{root}");
    daemon.close().await;
}

#[tokio::test]
async fn the_files_a_child_changed_are_its_parents_changes_too() {
    let scratch = Scratch::new();
    let upstream = start(writing_child_script());
    let mut daemon = start_daemon(&scratch, &upstream).await;
    let (parent, approval) = delegated_approval_waits(&mut daemon, &scratch).await;
    let child = only_child(&daemon, &parent).await;
    allow_and_finish(&mut daemon, &scratch, &parent, &approval).await;

    let view = json_of(daemon.call::<SessionGet>(sid(&parent)).await);
    assert_eq!(
        view["changedFiles"],
        json!([{"path": "done.txt", "added": 1, "removed": 0, "childSessionId": child}])
    );
    let own = json_of(daemon.call::<SessionGet>(sid(&child)).await);
    assert_eq!(
        own["changedFiles"],
        json!([{"path": "done.txt", "added": 1, "removed": 0}])
    );
    let want = json!({"sessionId": parent, "path": "done.txt", "childSessionId": child,
                      "after": "done\n", "omitted": false, "changes": 1});
    for asked in [
        SessionFileDiffParams {
            session_id: parent.clone(),
            path: "done.txt".into(),
            child_session_id: Some(child.clone()),
        },
        SessionFileDiffParams {
            session_id: parent.clone(),
            path: "done.txt".into(),
            child_session_id: None,
        },
    ] {
        assert_eq!(
            json_of(daemon.call::<SessionFileDiff>(asked.clone()).await),
            want,
            "{asked:?}"
        );
    }
    let stranger = daemon
        .try_call::<SessionFileDiff>(SessionFileDiffParams {
            session_id: parent.clone(),
            path: "done.txt".into(),
            child_session_id: Some(parent.clone()),
        })
        .await
        .unwrap_err();
    assert_eq!(stranger.code, -32004, "{}", stranger.message);
    daemon.close().await;
}

#[tokio::test]
async fn a_denied_delegated_approval_fails_the_parents_call_with_the_reason() {
    let scratch = Scratch::new();
    let upstream = start(writing_child(&["I will not write it then."]));
    let mut daemon = start_daemon(&scratch, &upstream).await;
    let (parent, approval) = delegated_approval_waits(&mut daemon, &scratch).await;
    daemon
        .call::<ApprovalRespond>(answer(&approval, ApprovalDecision::Deny))
        .await;
    until_finished_in(&mut daemon, &parent).await;
    let results = tool_results(&daemon, &parent).await;
    assert_eq!(results.len(), 1);
    let (id, output, error, status) = &results[0];
    assert_eq!(
        (id.as_str(), *error, status.as_str()),
        ("call_d", true, "error")
    );
    assert_eq!(
        output,
        "status: failed\nnote: the user denied the sub-agent's call: write done.txt (1 line)\nlast message: (none)\nfiles changed: none\nfailed calls:\n- write done.txt (1 line): The user denied this tool call. Do not retry it; ask the user how to proceed if needed."
    );
    assert!(!scratch.workspace().join("done.txt").exists());
    // The child's model was not asked again: the parent's answer came next.
    assert_eq!(upstream.bodies().len(), 3);
    daemon.close().await;
}

/// A daemon whose parent session delegates a task to a child that waits for an approval,
/// then goes away: killed, or shut down. The parent's, the child's and the approval's ids.
async fn waits_then_goes_away(
    scratch: &Scratch,
    upstream: &Upstream,
    kill: bool,
) -> (String, String, String) {
    let mut daemon = start_daemon(scratch, upstream).await;
    let (parent, approval) = delegated_approval_waits(&mut daemon, scratch).await;
    let child = only_child(&daemon, &parent).await;
    if kill {
        daemon.process().kill().await.unwrap();
    } else {
        daemon.close().await;
    }
    (parent, child, approval)
}

/// A child's approval waits when the daemon goes away (killed, or shut down); it is answered
/// through the next daemon.
async fn answered_after_a_restart(kill: bool) {
    let scratch = Scratch::new();
    let upstream = start(writing_child_script());
    let (parent, child, approval) = waits_then_goes_away(&scratch, &upstream, kill).await;

    // The heartbeat beats often: its recovery looks at the parent's run while the child
    // works on after the answer, and must leave it waiting for the child's end.
    let mut often = env(&upstream.url);
    often.push(("SIDECHAT_LEASE_MS", "200".into()));
    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(often)).await;
    let root = daemon.transcript(&parent).await;
    assert_eq!(root["state"], "awaitingApproval");
    assert_eq!(
        root["delegatedApprovals"][0]["approval"]["approvalId"],
        json!(approval)
    );
    assert_eq!(
        root["delegatedApprovals"][0]["childSessionId"],
        json!(child)
    );
    // A new turn on the parent waits: its run is still open behind the child's approval.
    let queued = json_of(daemon.send(&parent, "Also, hurry.").await);
    assert_eq!(queued["queued"], true);

    let events = allow_and_finish(&mut daemon, &scratch, &parent, &approval).await;
    assert_eq!(finish(&events, &child), FinishReason::EndTurn);
    daemon.close().await;
}

#[tokio::test]
async fn a_delegated_approval_survives_a_kill_and_resumes_both_runs() {
    answered_after_a_restart(true).await;
}

#[tokio::test]
async fn a_delegated_approval_survives_a_shutdown_and_resumes_both_runs() {
    answered_after_a_restart(false).await;
}

#[tokio::test]
async fn stop_on_the_parent_stops_the_child() {
    let scratch = Scratch::new();
    let upstream = start(writing_child_script());
    let mut daemon = start_daemon(&scratch, &upstream).await;
    let (parent, _) = delegated_approval_waits(&mut daemon, &scratch).await;
    let child = only_child(&daemon, &parent).await;
    let stopped = json_of(daemon.call::<ChatStop>(sid(&parent)).await);
    assert_eq!(stopped["stopped"], true);
    let events = until_finished_in(&mut daemon, &parent).await;
    assert_eq!(finish(&events, &parent), FinishReason::Stopped);
    let child_view = json_of(daemon.call::<SessionGet>(sid(&child)).await);
    assert_eq!(child_view["state"], "idle");
    let results = tool_results(&daemon, &parent).await;
    assert_eq!(results[0].3, "cancelled");
    assert!(
        results[0].1.starts_with("status: stopped\n"),
        "{}",
        results[0].1
    );
    assert!(!scratch.workspace().join("done.txt").exists());
    daemon.close().await;
}

/// `session/create` params of a parent with these limits.
fn limited(
    scratch: &Scratch,
    max_steps: Option<u32>,
    max_seconds: Option<u64>,
    cap_usd: Option<f64>,
) -> SessionCreateParams {
    SessionCreateParams {
        workspace_root: Some(scratch.workspace().display().to_string()),
        max_steps,
        max_seconds,
        cap_usd,
        ..SessionCreateParams::default()
    }
}

/// A delegate call whose request reported `prompt` input tokens.
fn costly_call(id: &str, input: Value, prompt: u64) -> Reply {
    Reply::sse(&[
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": id, "type": "function",
               "function": {"name": "delegate", "arguments": input.to_string()}}]}, "finish_reason": null}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
        usage(prompt, 10),
    ])
}

#[tokio::test]
async fn a_spent_budget_refuses_a_delegation_and_names_the_limit() {
    let scratch = Scratch::new();
    let delegate = || call("call_d", "delegate", json!({"task": "look"}));
    let upstream = start(vec![
        // Steps: the parent's only step delegates.
        delegate(),
        // Money: the parent's first request used up the cap.
        costly_call("call_d", json!({"task": "look"}), 100_000),
        // Time: the parent's first answer took longer than its time limit.
        Reply::parts(
            std::iter::once(crate::upstream::Part::Pause(std::time::Duration::from_millis(1_100)))
                .chain(
                    [
                        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_d", "type": "function",
                               "function": {"name": "delegate", "arguments": "{\"task\":\"look\"}"}}]}, "finish_reason": null}]}),
                        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
                    ]
                    .iter()
                    .map(|c| crate::upstream::Part::Bytes(crate::upstream::openai::event(c).into_bytes())),
                )
                .chain(std::iter::once(crate::upstream::Part::Bytes(
                    crate::upstream::openai::DONE.as_bytes().to_vec(),
                )))
                .collect(),
        ),
    ]);
    let mut daemon = start_daemon(&scratch, &upstream).await;
    let mut refusals = Vec::new();
    for params in [
        limited(&scratch, Some(1), None, None),
        limited(&scratch, None, None, Some(0.01)),
        limited(&scratch, None, Some(1), None),
    ] {
        let parent = daemon.create_session(params).await;
        daemon.send(&parent, "Delegate.").await;
        let events = until_finished_in(&mut daemon, &parent).await;
        let results = tool_results(&daemon, &parent).await;
        assert_eq!((results.len(), results[0].2), (1, true), "{results:?}");
        refusals.push((finish(&events, &parent), results[0].1.clone()));
        let view = json_of(daemon.call::<SessionGet>(sid(&parent)).await);
        assert!(view.get("children").is_none(), "nothing started: {view}");
    }
    assert_eq!(refusals[0].0, FinishReason::MaxIterations);
    assert_eq!(
        refusals[0].1,
        "budget_spent: turns: this run has used all 1 of its steps (maxSteps), so none are left for a delegated task"
    );
    assert_eq!(refusals[1].0, FinishReason::BudgetSpent);
    assert!(
        refusals[1]
            .1
            .starts_with("budget_spent: usd: the session's spend cap of $0.01 is used up"),
        "{}",
        refusals[1].1
    );
    assert_eq!(refusals[2].0, FinishReason::BudgetSpent);
    assert_eq!(
        refusals[2].1,
        "budget_spent: seconds: this run has used all 1 s of its time limit (maxSeconds), so none is left for a delegated task"
    );
    // No child request was ever made.
    assert_eq!(upstream.bodies().len(), 3);
    daemon.close().await;
}

#[tokio::test]
async fn a_parents_time_limit_counts_from_its_turns_start_across_a_restart() {
    let scratch = Scratch::new();
    let upstream = start(vec![calls(&[
        (
            "call_w",
            "write_file",
            json!({"path": "first.txt", "content": "first\n"}),
        ),
        ("call_d", "delegate", json!({"task": "look"})),
    ])]);
    let mut daemon = start_daemon(&scratch, &upstream).await;
    let parent = daemon
        .create_session(limited(&scratch, None, Some(2), None))
        .await;
    daemon.send(&parent, "Write, then delegate.").await;
    let (_, approval) = daemon.until_approval().await;
    daemon.close().await;
    // The turn's two seconds pass while no daemon runs: the resumed run has none left.
    let clock = TestClock::beside(&scratch.db());
    clock.advance(3);
    let mut later = env(&upstream.url);
    later.push(clock.env());
    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(later)).await;
    daemon
        .call::<ApprovalRespond>(answer(&approval, ApprovalDecision::Allow))
        .await;
    let events = until_finished_in(&mut daemon, &parent).await;
    assert_eq!(finish(&events, &parent), FinishReason::BudgetSpent);
    let results = tool_results(&daemon, &parent).await;
    assert_eq!(results.len(), 2, "{results:?}");
    assert_eq!(
        (results[0].0.as_str(), results[0].3.as_str()),
        ("call_w", "done")
    );
    assert_eq!(
        results[1],
        (
            "call_d".into(),
            "budget_spent: seconds: this run has used all 2 s of its time limit (maxSeconds), so none is left for a delegated task".into(),
            true,
            "error".into()
        )
    );
    let view = json_of(daemon.call::<SessionGet>(sid(&parent)).await);
    assert!(view.get("children").is_none(), "nothing started: {view}");
    assert_eq!(upstream.bodies().len(), 1);
    daemon.close().await;
}

#[tokio::test]
async fn a_child_gets_only_the_steps_its_parent_has_left() {
    let scratch = Scratch::new();
    let upstream = start(vec![
        call("call_d", "delegate", json!({"task": "Search everything"})),
        // The child's one step asks for a tool: no step follows.
        call("call_l", "list_directory", json!({"path": "."})),
        says("It ran out of steps."),
    ]);
    let mut daemon = start_daemon(&scratch, &upstream).await;
    let parent = daemon
        .create_session(limited(&scratch, Some(2), None, None))
        .await;
    daemon.send(&parent, "Delegate.").await;
    let events = until_finished_in(&mut daemon, &parent).await;
    assert_eq!(finish(&events, &parent), FinishReason::EndTurn);
    let child = only_child(&daemon, &parent).await;
    assert_eq!(finish(&events, &child), FinishReason::MaxIterations);
    assert_eq!(
        json_of(daemon.call::<SessionGet>(sid(&child)).await)["maxSteps"],
        1
    );
    let results = tool_results(&daemon, &parent).await;
    assert_eq!(
        results[0].1,
        "status: out of steps\nnote: the sub-agent used all the steps it was given\nlast message: (none)\nfiles changed: none\nfailed calls: none"
    );
    daemon.close().await;
}

#[tokio::test]
async fn a_childs_spend_joins_its_parents_cost_and_cap() {
    let scratch = Scratch::new();
    let upstream = start(vec![
        call(
            "call_d",
            "delegate",
            json!({"task": "Look", "model": "gpt-4o-mini"}),
        ),
        // The child's answer is expensive.
        Reply::sse(&[
            json!({"choices": [{"index": 0, "delta": {"content": "Looked."}, "finish_reason": null}]}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
            usage(200_000, 10),
        ]),
        says("never asked"),
    ]);
    // A second model of the account, priced (a compatible server knows the models priced).
    scratch.write_config("[prices.\"gpt-4o-mini\"]\ninput = 0.15\noutput = 0.6\n");
    let mut daemon = start_daemon(&scratch, &upstream).await;
    let parent = daemon
        .create_session(limited(&scratch, None, None, Some(0.02)))
        .await;
    daemon.send(&parent, "Delegate.").await;
    let events = until_finished_in(&mut daemon, &parent).await;
    assert_eq!(tool_results(&daemon, &parent).await[0].1, "Looked.");
    let child = only_child(&daemon, &parent).await;
    // The child ran under what was left of the cap, at the model asked for.
    let child_view = json_of(daemon.call::<SessionGet>(sid(&child)).await);
    assert_eq!(child_view["model"], "gpt-4o-mini");
    assert!(
        child_view["capUsd"].as_f64().unwrap() < 0.02,
        "{child_view}"
    );
    assert_eq!(upstream.bodies()[1]["model"], "gpt-4o-mini");
    // Its spend counts in the parent's cost, marked, at its own model's price.
    let cost = json_of(daemon.call::<SessionCost>(sid(&parent)).await);
    let by_model: Vec<(String, Option<String>, u64)> = cost["cost"]["byModel"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["model"].as_str().unwrap().to_string(),
                m["delegatedTo"].as_str().map(str::to_string),
                m["lines"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        by_model,
        vec![
            ("gpt-4o".to_string(), None, 1),
            ("gpt-4o-mini".to_string(), Some(child.clone()), 1),
        ]
    );
    // `session/get` sums the same lines' tokens of each kind, the child's included.
    let kinds = ["input", "output", "cacheRead", "cacheWrite", "reasoning"];
    let summed: serde_json::Map<String, Value> = kinds
        .iter()
        .map(|kind| {
            let sum: u64 = cost["cost"]["byModel"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["tokens"][kind].as_u64().unwrap())
                .sum();
            (kind.to_string(), json!(sum))
        })
        .collect();
    assert!(summed["input"].as_u64().unwrap() >= 200_000, "{cost}");
    let parent_view = json_of(daemon.call::<SessionGet>(sid(&parent)).await);
    assert_eq!(parent_view["tokensByKind"], Value::Object(summed));
    let own = json_of(daemon.call::<SessionCost>(sid(&child)).await);
    let child_usd = own["cost"]["totalUsd"].as_f64().unwrap();
    let parent_usd = cost["cost"]["totalUsd"].as_f64().unwrap();
    let parent_own = cost["cost"]["byModel"][0]["totalUsd"].as_f64().unwrap();
    assert!(
        (parent_usd - (parent_own + child_usd)).abs() < 1e-9,
        "{cost}"
    );
    // And against the parent's spend cap: the parent's next request would pass it.
    assert_eq!(finish(&events, &parent), FinishReason::BudgetSpent);
    assert_eq!(upstream.bodies().len(), 2);
    daemon.close().await;
}

#[tokio::test]
async fn an_expired_delegated_approval_fails_the_parents_call_with_the_reason() {
    let scratch = Scratch::new();
    let upstream = start(writing_child(&["Nobody answered."]));
    let mut expiring = env(&upstream.url);
    expiring.push(("SIDECHAT_DELEGATED_APPROVAL_EXPIRY", "1s".into()));
    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(expiring.clone())).await;
    let (parent, approval) = delegated_approval_waits(&mut daemon, &scratch).await;
    // Nobody answers: the sweep denies it as expired, and the parent hears why.
    let events = until_finished_in(&mut daemon, &parent).await;
    assert!(events.iter().any(|e| matches!(&e.event,
        Event::Delegation { event, .. } if matches!(&**event,
            Event::ApprovalResolved { approval_id, decision: ApprovalDecision::Deny } if *approval_id == approval))));
    let results = tool_results(&daemon, &parent).await;
    assert_eq!((results[0].2, results[0].3.as_str()), (true, "error"));
    assert!(
        results[0].1.starts_with("status: failed\nnote: the sub-agent's approval expired unanswered after 1s: write done.txt (1 line)\n"),
        "{}",
        results[0].1
    );
    assert!(!scratch.workspace().join("done.txt").exists());
    answered_again_changes_nothing(&daemon, &approval, ApprovalDecision::Allow).await;

    daemon.close().await;
}

/// A child asks to write a file, and the daemon goes away (killed, or shut down) while the
/// approval waits; the next daemon starts after the approval's time is up.
async fn expired_while_no_daemon_ran(kill: bool) {
    let scratch = Scratch::new();
    let upstream = start(writing_child(&["Nobody answered."]));
    // The first daemon lets approvals wait an hour: this one does not expire while it runs.
    let (parent, child, approval) = waits_then_goes_away(&scratch, &upstream, kill).await;
    // Time passes with no daemon running; the next one expires approvals after a second. Its
    // heartbeat beats often, so its recovery looks at the runs while they take the expiry:
    // the parent's run must wait for its child's end, not be closed as interrupted.
    let clock = TestClock::beside(&scratch.db());
    clock.advance(2);
    let mut expiring = env(&upstream.url);
    expiring.push(clock.env());
    expiring.push(("SIDECHAT_DELEGATED_APPROVAL_EXPIRY", "1s".into()));
    expiring.push(("SIDECHAT_LEASE_MS", "200".into()));
    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(expiring)).await;
    let events = until_finished_in(&mut daemon, &parent).await;

    // The child's call failed with the expiry as its reason, and the child ended.
    assert_eq!(finish(&events, &child), FinishReason::Error);
    assert!(events.iter().any(|e| e.session_id == parent
        && matches!(&e.event, Event::Delegation { event, .. } if matches!(&**event,
            Event::ApprovalResolved { approval_id, decision: ApprovalDecision::Deny } if *approval_id == approval))));
    let expired = "This call's approval expired unanswered after 1s, so it was not run. Do not retry it; ask the user how to proceed if needed.";
    assert_eq!(
        tool_results(&daemon, &child).await,
        vec![("call_w".into(), expired.into(), true, "denied".into())]
    );
    // The parent's delegate call failed with the reason, and its run went on to its end.
    assert_eq!(finish(&events, &parent), FinishReason::EndTurn);
    assert_eq!(
        tool_results(&daemon, &parent).await,
        vec![(
            "call_d".into(),
            format!(
                "status: failed\nnote: the sub-agent's approval expired unanswered after 1s: write done.txt (1 line)\nlast message: (none)\nfiles changed: none\nfailed calls:\n- write done.txt (1 line): {expired}"
            ),
            true,
            "error".into()
        )]
    );
    assert_eq!(upstream.bodies().len(), 3);
    assert!(!scratch.workspace().join("done.txt").exists());
    let root = daemon.transcript(&parent).await;
    assert_eq!(root["state"], "idle");
    assert!(root.get("delegatedApprovals").is_none(), "{root}");
    answered_again_changes_nothing(&daemon, &approval, ApprovalDecision::Allow).await;
    daemon.close().await;
}

#[tokio::test]
async fn a_delegated_approval_that_expired_while_the_daemon_was_killed_fails_the_parents_call() {
    expired_while_no_daemon_ran(true).await;
}

#[tokio::test]
async fn a_delegated_approval_that_expired_while_the_daemon_was_shut_down_fails_the_parents_call() {
    expired_while_no_daemon_ran(false).await;
}

#[tokio::test]
async fn a_childs_end_held_back_by_a_locked_database_resumes_its_parent_once_recorded() {
    let scratch = Scratch::new();
    let (gate, held) = std::sync::mpsc::channel::<()>();
    let upstream = start(vec![
        call("call_d", "delegate", json!({"task": "Find the parser."})),
        gated(
            vec![text("It is in src/rpc")],
            held,
            vec![
                json!({"choices": [{"index": 0, "delta": {"content": "/framing.rs."}, "finish_reason": "stop"}]}),
                usage(100, 10),
            ],
        ),
        says("Thanks, noted."),
    ]);
    // Writes give up on a lock after a second; heartbeats come every half second.
    let mut settings = env(&upstream.url);
    settings.push(("SIDECHAT_LOCK_WAIT_MS", "1000".into()));
    settings.push(("SIDECHAT_LEASE_MS", "2000".into()));
    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(settings)).await;
    let parent = parent_session(&daemon, &scratch).await;
    daemon.send(&parent, "Where is the parser?").await;
    let mut polls = 0;
    while upstream.bodies().len() < 2 {
        polls += 1;
        assert!(polls < 600, "the child never asked the model");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    // Another program holds the database as the child answers: the child's answer and end wait
    // for it, and the parent, finding its child's run still open, waits too.
    let lock = hold_write_lock(&scratch.db());
    gate.send(()).unwrap();
    loop {
        let event = daemon.next_event().await;
        if matches!(&event.event, Event::Delegation { event: inner, .. }
            if matches!(&**inner, Event::RunFinished { .. }))
        {
            break;
        }
    }
    // The parent, finding its child's run still open, leaves the run table and fails to give
    // back its lease (the last write it tries): it waits to be resumed.
    parent_gave_up_its_lease(&daemon, &parent).await;
    drop(lock);

    // Once the database is free the heartbeat stores the child's answer, records its end and
    // resumes the parent, which gets the answer in the child's report (the child's run says
    // its answer was stored late).
    let events = until_finished_in(&mut daemon, &parent).await;
    assert_eq!(finish(&events, &parent), FinishReason::EndTurn);
    assert_eq!(
        tool_results(&daemon, &parent).await,
        vec![(
            "call_d".into(),
            "status: failed\nnote: The database cannot store the answer now (another program holds it, or the disk is full); it is kept and stored as soon as the database takes it.\nlast message: It is in src/rpc/framing.rs.\nfiles changed: none\nfailed calls: none".into(),
            true,
            "error".into()
        )]
    );
    let child = only_child(&daemon, &parent).await;
    let cost = json_of(daemon.call::<SessionCost>(sid(&child)).await);
    // The usage line the database refused with the answer is stored too.
    assert_eq!(
        (
            cost["cost"]["pricedLines"].clone(),
            cost["cost"]["byModel"][0]["tokens"].clone()
        ),
        (
            json!(1),
            json!({"input": 100, "output": 10, "cacheRead": 0, "cacheWrite": 0, "reasoning": 0})
        ),
        "{cost}"
    );
    assert_eq!(upstream.bodies().len(), 3);
    daemon.close().await;
}

/// Waits until the daemon has logged that it cannot give back the lease of `parent`'s run.
async fn parent_gave_up_its_lease(daemon: &Daemon, parent: &str) {
    let gave_up =
        |line: &String| line.contains("cannot give back a run's lease") && line.contains(parent);
    let mut polls = 0;
    while !daemon.conn.stderr_tail().iter().any(gave_up) {
        polls += 1;
        assert!(
            polls < 600,
            "the parent never gave up its lease: {:?}",
            daemon.conn.stderr_tail()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_parent_whose_child_ended_while_no_daemon_resumed_it_takes_the_answer_on_the_next_start()
{
    let scratch = Scratch::new();
    let upstream = start(writing_child_script());
    let (parent, child, _) = waits_then_goes_away(&scratch, &upstream, true).await;
    // What a daemon killed between a child's end and its parent's resume leaves: the child's
    // run has ended (here, stopped while it waited), the parent's call has no result yet and
    // its run is open.
    let conn = rusqlite::Connection::open(scratch.db()).unwrap();
    conn.execute(
        "UPDATE approvals SET status = 'cancelled' WHERE session_id = ?1",
        [&child],
    )
    .unwrap();
    conn.execute(
        "UPDATE runs SET status = 'finished', reason = 'stopped' WHERE session_id = ?1",
        [&child],
    )
    .unwrap();
    drop(conn);

    // The next daemon resumes the parent, which takes the child's report and goes on, rather
    // than being closed as interrupted.
    let mut daemon = start_daemon(&scratch, &upstream).await;
    let events = until_finished_in(&mut daemon, &parent).await;
    assert_eq!(finish(&events, &parent), FinishReason::EndTurn);
    assert_eq!(
        tool_results(&daemon, &parent).await,
        vec![(
            "call_d".into(),
            "status: stopped\nnote: the user stopped the run, and with it the delegated task\nlast message: (none)\nfiles changed: none\nfailed calls: none".into(),
            true,
            "cancelled".into()
        )]
    );
    daemon.close().await;
}
