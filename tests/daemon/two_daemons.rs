//! Two daemons on one database file (two editor windows on the default database): a run
//! belongs to the daemon holding its lease; the other hands input, approvals and stops over to
//! it through the database, and takes the run over only once its daemon is gone.

use std::sync::mpsc;
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sidechat::protocol::{
    ApprovalDecision, ApprovalRespond, ApprovalRespondParams, ChatResume, ChatStop, Event,
    FinishReason, InterjectionCancel, InterjectionCancelParams, SessionCreate, SessionCreateParams,
    SessionGet, SessionIdParams, SessionList, SessionListParams,
};

use crate::harness::{
    Daemon, Options, Scratch, env, gated, held_run, json_of, second_daemon, session, text,
};
use crate::upstream::{Reply, Upstream, openai, start};

/// The chunks of one tool call and the end of a step that asks for it.
fn tool_call(id: &str, name: &str, arguments: Value) -> Vec<Value> {
    vec![
        openai::chunk(
            json!({"tool_calls": [{"index": 0, "id": id, "type": "function",
                   "function": {"name": name, "arguments": arguments.to_string()}}]}),
            None,
        ),
        openai::chunk(json!({}), Some("tool_calls")),
        openai::usage(30, 0, 5),
    ]
}

async fn state(daemon: &Daemon, session: &str) -> Value {
    json_of(
        daemon
            .call::<SessionGet>(SessionIdParams {
                session_id: session.into(),
            })
            .await,
    )["state"]
        .clone()
}

pub(crate) fn roles(transcript: &Value) -> Vec<String> {
    transcript["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["role"].as_str().unwrap().to_string())
        .collect()
}

pub(crate) fn finish_reason(
    events: &[sidechat::protocol::SessionEventParams],
) -> Option<FinishReason> {
    events.iter().find_map(|e| match &e.event {
        Event::RunFinished { reason, .. } => Some(*reason),
        _ => None,
    })
}

#[tokio::test]
async fn a_second_daemon_leaves_a_live_run_alone_and_its_input_is_delivered_once_by_the_owner() {
    let (gate, held) = mpsc::channel();
    let (upstream, scratch, mut a, session, run_id) = held_run(
        vec![
            gated(
                vec![text("Looking around.")],
                held,
                tool_call("call_1", "list_directory", json!({"path": "."})),
            ),
            Reply::sse(&openai::text(&["Noted the README too."], 40, 6)),
        ],
        "look around",
        &[],
    )
    .await;

    // B starts while A streams: its start-up recovery leaves A's run open.
    let b = second_daemon(&scratch, &upstream).await;
    assert_eq!(state(&b, &session).await, json!("running"));
    let queued = json_of(b.send(&session, "also read the README").await);
    assert_eq!(
        (queued["queued"].clone(), queued["runId"].clone()),
        (json!(true), run_id)
    );
    let pending_id = queued["pendingId"].clone();

    // A's client hears of it from A, before A delivers it.
    let heard = a
        .events_until(|e| matches!(e, Event::InterjectionQueued { .. }))
        .await;
    let Some(Event::InterjectionQueued {
        pending_id: heard_id,
        text,
    }) = heard.last().map(|e| &e.event)
    else {
        unreachable!()
    };
    assert_eq!(
        (json!(heard_id), text.as_str()),
        (pending_id.clone(), "also read the README")
    );
    gate.send(()).unwrap();
    let events = a.until_finished().await;
    let delivered: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::InterjectionDelivered { pending_ids, .. } => Some(pending_ids.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(json!(delivered), json!([[pending_id]]));
    assert_eq!(finish_reason(&events), Some(FinishReason::EndTurn));

    // The model read it exactly once, in the request after the tool results.
    let bodies = upstream.bodies();
    assert_eq!(bodies.len(), 2);
    let mentions = |body: &Value| body.to_string().matches("also read the README").count();
    assert_eq!((mentions(&bodies[0]), mentions(&bodies[1])), (0, 1));

    // One transcript, the same from both daemons, with no run closed behind A's back.
    let transcript = b.transcript(&session).await;
    assert_eq!(
        roles(&transcript),
        ["user", "assistant", "tool", "user", "assistant"]
    );
    assert_eq!(transcript, a.transcript(&session).await);
    assert_eq!(state(&b, &session).await, json!("idle"));
    a.close().await;
    b.close().await;
}

/// Daemon A's run asks to write notes.md ("one\n") and waits for the approval; the upstream
/// then answers "Written.". The upstream, scratch, A, the session and the approval's id.
async fn write_waiting_for_approval() -> (Upstream, Scratch, Daemon, String, String) {
    let upstream = start(vec![
        Reply::sse(&tool_call(
            "call_w",
            "write_file",
            json!({"path": "notes.md", "content": "one\n"}),
        )),
        Reply::sse(&openai::text(&["Written."], 50, 3)),
    ]);
    let scratch = Scratch::new();
    let mut a = Daemon::start(&scratch.db(), Options::with_env(env(&upstream.url))).await;
    let session = session(&a, &scratch).await;
    a.send(&session, "write the notes").await;
    let (_, approval_id) = a.until_approval().await;
    (upstream, scratch, a, session, approval_id)
}

#[tokio::test]
async fn an_approval_answered_through_the_other_daemon_reaches_the_owner_once() {
    let (upstream, scratch, mut a, session, approval_id) = write_waiting_for_approval().await;

    let b = second_daemon(&scratch, &upstream).await;
    assert_eq!(state(&b, &session).await, json!("awaitingApproval"));
    let answer = |decision| ApprovalRespondParams {
        approval_id: approval_id.clone(),
        decision,
        rule: None,
        reason: None,
    };
    let applied = json_of(
        b.call::<ApprovalRespond>(answer(ApprovalDecision::Allow))
            .await,
    );
    assert_eq!(applied["applied"], json!(true));

    // A tells its client the prompt is answered, runs the tool, and finishes.
    let events = a.until_finished().await;
    let resolved: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::ApprovalResolved {
                approval_id,
                decision,
            } => Some((approval_id.clone(), *decision)),
            _ => None,
        })
        .collect();
    assert_eq!(
        resolved,
        vec![(approval_id.clone(), ApprovalDecision::Allow)]
    );
    assert_eq!(finish_reason(&events), Some(FinishReason::EndTurn));

    // A later answer from either side changes nothing.
    for daemon in [&a, &b] {
        let late = json_of(
            daemon
                .call::<ApprovalRespond>(answer(ApprovalDecision::Deny))
                .await,
        );
        assert_eq!(
            (late["applied"].clone(), late["decision"].clone()),
            (json!(false), json!("allow"))
        );
    }
    assert_eq!(
        std::fs::read_to_string(scratch.workspace().join("notes.md")).unwrap(),
        "one\n"
    );
    let transcript = a.transcript(&session).await;
    assert_eq!(
        roles(&transcript),
        ["user", "assistant", "tool", "assistant"]
    );
    assert_eq!(upstream.bodies().len(), 2);
    a.close().await;
    b.close().await;
}

#[tokio::test]
async fn an_approval_answered_through_the_other_daemon_is_acted_on_when_the_owner_dies_before_reading_it()
 {
    let (upstream, scratch, mut a, session, approval_id) = write_waiting_for_approval().await;
    let mut b = second_daemon(&scratch, &upstream).await;

    // A is frozen, so its lease still looks live and B hands the answer over through the
    // database; then A dies without having read it.
    let pid = a.process().id().unwrap().to_string();
    let stopped = std::process::Command::new("kill")
        .args(["-STOP", pid.as_str()])
        .status()
        .unwrap();
    assert!(stopped.success());
    let applied = json_of(
        b.call::<ApprovalRespond>(ApprovalRespondParams {
            approval_id: approval_id.clone(),
            decision: ApprovalDecision::Allow,
            rule: None,
            reason: None,
        })
        .await,
    );
    assert_eq!(applied["applied"], json!(true));
    a.process().kill().await.unwrap();

    // B takes the run over and acts on the answer, instead of closing the run as interrupted.
    let events = b.until_finished().await;
    assert_eq!(finish_reason(&events), Some(FinishReason::EndTurn));
    assert_eq!(
        std::fs::read_to_string(scratch.workspace().join("notes.md")).unwrap(),
        "one\n"
    );
    let transcript = b.transcript(&session).await;
    assert_eq!(
        roles(&transcript),
        ["user", "assistant", "tool", "assistant"]
    );
    assert_eq!(state(&b, &session).await, json!("idle"));
    assert_eq!(upstream.bodies().len(), 2);
    b.close().await;
}

#[tokio::test]
async fn a_stop_sent_to_the_other_daemon_stops_the_owners_run() {
    let (_gate, held) = mpsc::channel::<()>();
    let (upstream, scratch, mut a, session, run_id) = held_run(
        vec![gated(vec![text("Thinking it over")], held, vec![])],
        "take your time",
        &[],
    )
    .await;

    let b = second_daemon(&scratch, &upstream).await;
    let stopped = b
        .call::<ChatStop>(SessionIdParams {
            session_id: session.clone(),
        })
        .await;
    assert_eq!(json_of(stopped), json!({"runId": run_id, "stopped": true}));
    let events = a.until_finished().await;
    assert_eq!(finish_reason(&events), Some(FinishReason::Stopped));
    assert_eq!(state(&b, &session).await, json!("idle"));
    a.close().await;
    b.close().await;
}

#[tokio::test]
async fn a_run_whose_daemon_was_killed_is_taken_over_by_the_other() {
    let (_gate, held) = mpsc::channel::<()>();
    let (upstream, scratch, mut a, session, _) = held_run(
        vec![
            gated(vec![text("Halfway")], held, vec![]),
            Reply::sse(&openai::text(&["Back again."], 30, 3)),
        ],
        "start something",
        &[],
    )
    .await;
    let mut b = second_daemon(&scratch, &upstream).await;
    assert_eq!(state(&b, &session).await, json!("running"));

    a.process().kill().await.unwrap();
    // B's heartbeat closes the run once A's lease is dead; poll, with a guard against a hang
    // only.
    let mut polls = 0;
    while roles(&b.transcript(&session).await) == ["user"] {
        polls += 1;
        assert!(polls < 600, "B never took the run over");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let transcript = b.transcript(&session).await;
    assert_eq!(roles(&transcript), ["user", "notice"]);
    assert_eq!(state(&b, &session).await, json!("unanswered"));

    // The session is B's to use now.
    let resumed = json_of(
        b.call::<ChatResume>(SessionIdParams {
            session_id: session.clone(),
        })
        .await,
    );
    assert!(resumed["runId"].is_string(), "{resumed}");
    let events = b.until_finished().await;
    assert_eq!(finish_reason(&events), Some(FinishReason::EndTurn));
    assert_eq!(
        roles(&b.transcript(&session).await),
        ["user", "notice", "assistant"]
    );
    b.close().await;
}

#[tokio::test]
async fn resume_on_the_other_daemons_run_is_refused_naming_its_owner() {
    let (_gate, held) = mpsc::channel::<()>();
    let (upstream, scratch, mut a, session, run_id) =
        held_run(vec![gated(vec![text("Busy")], held, vec![])], "go", &[]).await;
    let b = second_daemon(&scratch, &upstream).await;
    let refused = b
        .try_call::<ChatResume>(SessionIdParams {
            session_id: session.clone(),
        })
        .await
        .unwrap_err();
    let data = refused.data.clone().unwrap();
    assert_eq!(
        (data["sessionId"].clone(), data["runId"].clone()),
        (json!(session), run_id)
    );
    let owner = data["owner"].as_str().unwrap();
    assert!(
        owner.starts_with("another sidechat process (pid "),
        "{owner}"
    );
    assert!(refused.message.contains(owner), "{}", refused.message);
    a.process().kill().await.unwrap();
    b.close().await;
}

#[tokio::test]
async fn a_frozen_daemon_loses_its_run_once_the_lease_expires_and_writes_nothing_more() {
    let (gate, held) = mpsc::channel::<()>();
    let (upstream, scratch, mut a, session, _) = held_run(
        vec![gated(
            vec![text("Halfway")],
            held,
            vec![
                openai::chunk(json!({"content": " and done."}), Some("stop")),
                openai::usage(20, 0, 4),
            ],
        )],
        "start something",
        &[],
    )
    .await;
    let b = second_daemon(&scratch, &upstream).await;

    // A is frozen, not gone: its process still exists, so only the lease's expiry frees the run.
    let pid = a.process().id().unwrap().to_string();
    let signal = |name: &str| {
        let status = std::process::Command::new("kill")
            .args([name, pid.as_str()])
            .status()
            .unwrap();
        assert!(status.success());
    };
    signal("-STOP");
    let mut polls = 0;
    while roles(&b.transcript(&session).await) == ["user"] {
        polls += 1;
        assert!(polls < 600, "B never took the run over");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Woken, A finds its run taken over: it ends it without writing to the transcript again.
    signal("-CONT");
    gate.send(()).unwrap();
    let events = a.until_finished().await;
    assert!(finish_reason(&events).is_some());
    let transcript = b.transcript(&session).await;
    assert_eq!(roles(&transcript), ["user", "notice"]);
    assert_eq!(transcript, a.transcript(&session).await);
    a.close().await;
    b.close().await;
}

#[tokio::test]
async fn two_daemons_started_at_once_on_a_new_file_both_serve() {
    // Several rounds: the two start-ups race differently each time.
    for round in 0..5 {
        let scratch = Scratch::new();
        let db = scratch.db();
        let (a, b) = tokio::join!(
            Daemon::start(&db, Options::default()),
            Daemon::start(&db, Options::default()),
        );
        let (created_a, created_b) = tokio::join!(
            a.try_call::<SessionCreate>(titled("a")),
            b.try_call::<SessionCreate>(titled("b")),
        );
        let (created_a, created_b) = match (created_a, created_b) {
            (Ok(a), Ok(b)) => (a, b),
            other => panic!("round {round}: a daemon could not create a session: {other:?}"),
        };
        // Each sees both sessions: one database, one schema.
        for daemon in [&a, &b] {
            let listed = daemon
                .call::<SessionList>(SessionListParams::default())
                .await;
            let mut titles: Vec<&str> = listed.sessions.iter().map(|s| s.title.as_str()).collect();
            titles.sort();
            assert_eq!(titles, ["a", "b"], "round {round}");
        }
        assert_ne!(created_a.id, created_b.id);
        assert_eq!((a.close().await, b.close().await), (0, 0), "round {round}");
    }
}

/// `session/create` params of a session with this title.
fn titled(title: &str) -> SessionCreateParams {
    SessionCreateParams {
        title: Some(title.into()),
        ..SessionCreateParams::default()
    }
}

#[tokio::test]
async fn an_interjection_cancelled_through_the_other_daemon_is_announced_to_the_owners_clients() {
    let (gate, held) = mpsc::channel();
    let (upstream, scratch, mut a, session, _) = held_run(
        vec![gated(
            vec![text("Working on it.")],
            held,
            vec![openai::chunk(json!({}), Some("stop"))],
        )],
        "work",
        &[],
    )
    .await;

    let b = second_daemon(&scratch, &upstream).await;
    let queued = json_of(b.send(&session, "never mind this").await);
    let pending_id = queued["pendingId"].as_str().unwrap().to_string();
    a.events_until(|e| matches!(e, Event::InterjectionQueued { .. }))
        .await;

    // Withdrawn through B: A's client hears of it from A, as it would of a cancel made at A.
    let cancelled = json_of(
        b.call::<InterjectionCancel>(InterjectionCancelParams {
            pending_id: pending_id.clone(),
        })
        .await,
    );
    assert_eq!(cancelled["cancelled"], json!(true));
    let heard = a
        .events_until(|e| matches!(e, Event::InterjectionCancelled { .. }))
        .await;
    assert_eq!(
        heard.last().map(|e| e.event.clone()),
        Some(Event::InterjectionCancelled { pending_id })
    );

    // The run ends without it; a second look by the heartbeat tells nothing again.
    gate.send(()).unwrap();
    let events = a.until_finished().await;
    assert_eq!(finish_reason(&events), Some(FinishReason::EndTurn));
    assert!(
        !events.iter().any(|e| matches!(
            e.event,
            Event::InterjectionCancelled { .. } | Event::InterjectionDelivered { .. }
        )),
        "{events:?}"
    );
    let transcript = a.transcript(&session).await;
    assert_eq!(roles(&transcript), ["user", "assistant"]);
    assert_eq!((a.close().await, b.close().await), (0, 0));
}
