//! Interjections: what the user types while a run works reaches the model exactly once.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sidechat::protocol::{
    ApprovalDecision, ApprovalRespond, Attachment, ChatResume, ChatSend, ChatSendParams, ChatStop,
    Event, FinishReason, InterjectionCancel, InterjectionCancelParams, SessionCreateParams,
    SessionGet, SessionTranscript, SessionTranscriptParams,
};

use crate::harness::{Daemon, Options, Scratch, answer, json_of, kinds, say, send_with_id, sid};

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

/// A replay daemon whose session has sent `first` and is now streaming the model's answer.
async fn mid_step(
    scratch: &Scratch,
    script: Value,
    max_steps: Option<u32>,
    first: &str,
) -> (Daemon, String) {
    let (mut daemon, id) = replay(scratch, script, max_steps).await;
    daemon.send(&id, first).await;
    daemon
        .events_until(|e| matches!(e, Event::TextDelta { .. }))
        .await;
    (daemon, id)
}

/// A step that streams slowly (so input can arrive mid-step) and then lists the workspace.
fn slow_tool_step() -> Value {
    json!({"text": "Looking around the workspace now, one file at a time.", "delayMs": 150,
           "toolCalls": [{"name": "list_directory", "input": {"path": "."}}]})
}

/// Every text block the request sent to the model, in order.
fn texts(request: &Value) -> Vec<String> {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().unwrap().clone())
        .filter(|c| c["type"] == "text")
        .map(|c| c["text"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn delivered_after_the_tool_results_exactly_once_and_in_order() {
    let scratch = Scratch::new();
    let (mut daemon, session) = mid_step(
        &scratch,
        json!({"turns": [slow_tool_step(), {"text": "Noted both."}]}),
        None,
        "look around",
    )
    .await;
    let first = json_of(daemon.send(&session, "also check the README").await);
    let second = json_of(daemon.send(&session, "and the licence").await);
    assert_eq!(
        (first["queued"].clone(), second["queued"].clone()),
        (json!(true), json!(true))
    );
    let waiting = daemon.transcript(&session).await;
    let waiting: Vec<_> = waiting["pendingInterjections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["text"].clone())
        .collect();
    assert_eq!(
        waiting,
        [json!("also check the README"), json!("and the licence")]
    );

    let events = daemon.until_finished().await;
    let delivered: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::InterjectionDelivered {
                pending_ids, step, ..
            } => Some((pending_ids.clone(), *step)),
            _ => None,
        })
        .collect();
    let ids = vec![
        first["pendingId"].as_str().unwrap().to_string(),
        second["pendingId"].as_str().unwrap().to_string(),
    ];
    assert_eq!(delivered, vec![(ids, 2)]);

    let requests = scratch.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(texts(&requests[0]), ["look around"]);
    let last_turn = requests[1]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    let shapes: Vec<_> = last_turn["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["type"].clone(), c.get("text").cloned()))
        .collect();
    assert_eq!(
        shapes,
        [
            (json!("toolResult"), None),
            (
                json!("text"),
                Some(json!("The user adds: also check the README"))
            ),
            (json!("text"), Some(json!("The user adds: and the licence"))),
        ]
    );

    let transcript = daemon.transcript(&session).await;
    let stored = &transcript["entries"][3];
    assert_eq!(stored["role"], "user");
    let words: Vec<_> = stored["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["type"].clone(), b["text"].clone()))
        .collect();
    assert_eq!(
        words,
        [
            (json!("interjection"), json!("also check the README")),
            (json!("interjection"), json!("and the licence"))
        ]
    );
    assert_eq!(transcript["pendingInterjections"], json!([]));
    daemon.close().await;
}

#[tokio::test]
async fn queued_during_the_last_allowed_step_is_promoted_into_the_next_run() {
    let scratch = Scratch::new();
    let (mut daemon, session) = mid_step(
        &scratch,
        json!({"turns": [slow_tool_step(), {"text": "Answering the follow-up."}]}),
        Some(1),
        "look",
    )
    .await;
    let queued = json_of(daemon.send(&session, "then summarise").await);
    let first_run = daemon.until_finished().await;
    let tail = kinds(&first_run);
    assert_eq!(
        &tail[tail.len() - 4..],
        [
            "notice",
            "messageCompleted",
            "interjectionPromoted",
            "runFinished"
        ]
    );
    let Some(Event::RunFinished { reason, .. }) = first_run.last().map(|e| &e.event) else {
        unreachable!()
    };
    assert_eq!(*reason, FinishReason::MaxIterations);
    let Event::InterjectionPromoted { pending_ids, .. } = &first_run[first_run.len() - 2].event
    else {
        unreachable!()
    };
    assert_eq!(
        pending_ids,
        &vec![queued["pendingId"].as_str().unwrap().to_string()]
    );

    // The promoted turn starts the next run at once.
    let second_run = daemon.until_finished().await;
    assert_eq!(kinds(&second_run)[0], "runStarted");
    let requests = scratch.requests();
    assert_eq!(requests.len(), 2);
    assert!(!texts(&requests[0]).iter().any(|t| t.contains("summarise")));
    assert_eq!(
        texts(&requests[1]).last().unwrap(),
        "then summarise",
        "a plain user turn, not an aside"
    );
    daemon.close().await;
}

#[tokio::test]
async fn stop_with_queued_input_ends_the_run_and_the_input_goes_out_next() {
    let scratch = Scratch::new();
    let long = json!({"text": "word ".repeat(100), "delayMs": 20});
    let (mut daemon, session) = mid_step(
        &scratch,
        json!({"turns": [long, {"text": "On it."}]}),
        None,
        "talk",
    )
    .await;
    daemon.send(&session, "stop that, do this instead").await;
    daemon.call::<ChatStop>(sid(&session)).await;
    let stopped = daemon.until_finished().await;
    assert!(matches!(
        stopped.last().map(|e| &e.event),
        Some(Event::RunFinished {
            reason: FinishReason::Stopped,
            ..
        })
    ));
    let next = daemon.until_finished().await;
    assert!(matches!(
        next.last().map(|e| &e.event),
        Some(Event::RunFinished {
            reason: FinishReason::EndTurn,
            ..
        })
    ));
    let requests = scratch.requests();
    assert_eq!(
        texts(&requests[1]).last().unwrap(),
        "stop that, do this instead"
    );
    daemon.close().await;
}

#[tokio::test]
async fn an_interjection_never_answers_a_pending_approval() {
    let scratch = Scratch::new();
    let write =
        json!({"toolCalls": [{"name": "write_file", "input": {"path": "a.txt", "content": "a"}}]});
    let (mut daemon, session) = replay(
        &scratch,
        json!({"turns": [write, {"text": "Written."}]}),
        None,
    )
    .await;
    daemon.send(&session, "write a.txt").await;
    let (_, approval) = daemon.until_approval().await;
    // Words that look like an answer are still just words for the model.
    assert_eq!(json_of(daemon.send(&session, "yes").await)["queued"], true);
    let transcript = daemon.transcript(&session).await;
    assert_eq!(transcript["state"], "awaitingApproval");
    assert_eq!(
        transcript["pendingApprovals"][0]["approvalId"],
        json!(approval)
    );
    daemon
        .call::<ApprovalRespond>(answer(&approval, ApprovalDecision::Allow))
        .await;
    daemon.until_finished().await;
    assert!(texts(&scratch.requests()[1]).contains(&"The user adds: yes".to_string()));
    daemon.close().await;
}

#[tokio::test]
async fn cancel_withdraws_a_waiting_interjection() {
    let scratch = Scratch::new();
    let (mut daemon, session) = mid_step(
        &scratch,
        json!({"turns": [slow_tool_step(), {"text": "Done."}]}),
        None,
        "look",
    )
    .await;
    let queued = json_of(daemon.send(&session, "never mind").await);
    let cancel = InterjectionCancelParams {
        pending_id: queued["pendingId"].as_str().expect("a pending id").into(),
    };
    let cancelled = json_of(daemon.call::<InterjectionCancel>(cancel.clone()).await);
    assert_eq!(cancelled, json!({"cancelled": true, "status": "cancelled"}));
    daemon.until_finished().await;
    assert!(
        !scratch
            .requests()
            .iter()
            .any(|r| texts(r).iter().any(|t| t.contains("never mind")))
    );
    let again = json_of(daemon.call::<InterjectionCancel>(cancel.clone()).await);
    assert_eq!(again, json!({"cancelled": true, "status": "cancelled"}));
    let unknown = daemon
        .try_call::<InterjectionCancel>(InterjectionCancelParams {
            pending_id: "inj_nope".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code, -32004);
    daemon.close().await;
}

#[tokio::test]
async fn attachments_wait_for_the_next_turn() {
    let scratch = Scratch::new();
    let (mut daemon, session) = mid_step(
        &scratch,
        json!({"turns": [slow_tool_step(), {"text": "Done."}, {"text": "Read it."}]}),
        None,
        "look",
    )
    .await;
    let with_attachment = ChatSendParams {
        attachments: vec![Attachment {
            name: "notes.md".into(),
            text: "hello".into(),
        }],
        ..say(&session, "see this")
    };
    let refused = daemon
        .try_call::<ChatSend>(with_attachment.clone())
        .await
        .unwrap_err();
    assert_eq!(refused.code, -32602);
    assert!(
        refused
            .message
            .contains("attachments wait for the next turn"),
        "{}",
        refused.message
    );
    daemon.until_finished().await;
    daemon.call::<ChatSend>(with_attachment.clone()).await;
    daemon.until_finished().await;
    assert!(
        texts(scratch.requests().last().unwrap())
            .contains(&"Attached notes.md:\nhello".to_string())
    );
    daemon.close().await;
}

#[tokio::test]
async fn a_retried_send_stores_nothing_twice_even_across_a_restart() {
    let scratch = Scratch::new();
    let script = json!({"turns": [slow_tool_step(), {"text": "Done."}]});
    let (mut daemon, session) = replay(&scratch, script.clone(), None).await;
    let params = send_with_id(&session, "look", "c-1");
    let first = daemon.call::<ChatSend>(params.clone()).await;
    assert_eq!(daemon.call::<ChatSend>(params.clone()).await, first);
    daemon
        .events_until(|e| matches!(e, Event::TextDelta { .. }))
        .await;
    let aside = send_with_id(&session, "aside", "c-2");
    let queued = daemon.call::<ChatSend>(aside.clone()).await;
    assert_eq!(daemon.call::<ChatSend>(aside.clone()).await, queued);
    assert_eq!(daemon.call::<ChatSend>(aside.clone()).await, queued);
    daemon.until_finished().await;
    daemon.close().await;

    let daemon = Daemon::start(&scratch.db(), Options::with_env(scratch.replay(script))).await;
    assert_eq!(daemon.call::<ChatSend>(params).await, first);
    assert_eq!(daemon.call::<ChatSend>(aside).await, queued);
    let transcript = daemon.transcript(&session).await;
    let all = transcript.to_string();
    assert_eq!(
        (
            all.matches("\"look\"").count(),
            all.matches("\"aside\"").count()
        ),
        (1, 1)
    );
    daemon.close().await;
}

/// A small deterministic generator, so a failing round can be replayed.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_at_random_moments_no_acknowledged_interjection_is_lost_or_doubled() {
    let scratch = Scratch::new();
    let step = json!({"text": "step", "delayMs": 3, "toolCalls": [{"name": "list_directory", "input": {"path": "."}}]});
    let script = json!({"turns": [], "fallback": step});
    let db = scratch.db();
    let env = scratch.replay(script);
    let start = || Daemon::start(&db, Options::with_env(env.clone()));
    let mut daemon = start().await;
    let session = daemon
        .create_session(SessionCreateParams {
            max_steps: Some(8),
            ..scratch.replay_session()
        })
        .await;
    let mut rng = Lcg(0x5eed);
    let mut acknowledged: Vec<String> = Vec::new();
    let mut sent_unconfirmed: Vec<String> = Vec::new();
    let rounds = 50;
    for round in 0..rounds {
        let state = json_of(daemon.call::<SessionGet>(sid(&session)).await)["state"].clone();
        if state == "unanswered" {
            daemon.call::<ChatResume>(sid(&session)).await;
        } else {
            let text = format!("turn-{round}");
            daemon.send(&session, &text).await;
            acknowledged.push(text);
        }
        for i in 0..rng.below(5) {
            tokio::time::sleep(std::time::Duration::from_millis(rng.below(25))).await;
            let text = format!("aside-{round}-{i}");
            // Whether or not the answer arrives before the kill decides if it was acknowledged.
            let answered = tokio::time::timeout(
                std::time::Duration::from_millis(rng.below(20) + 1),
                daemon.send(&session, &text),
            )
            .await;
            match answered {
                Ok(_) => acknowledged.push(text),
                Err(_) => sent_unconfirmed.push(text),
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(rng.below(30))).await;
        daemon.process().kill().await.unwrap();
        daemon = start().await;
        let transcript = json_of(
            daemon
                .call::<SessionTranscript>(SessionTranscriptParams {
                    session_id: session.clone(),
                    after_seq: None,
                    before_seq: None,
                    limit: Some(5000),
                })
                .await,
        );
        assert_eq!(
            transcript["pendingInterjections"],
            json!([]),
            "round {round}: nothing is left waiting"
        );
        let user_texts: Vec<String> = transcript["entries"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["role"] == "user")
            .flat_map(|e| e["blocks"].as_array().unwrap().clone())
            .filter_map(|b| b["text"].as_str().map(str::to_string))
            .collect();
        for text in &acknowledged {
            let count = user_texts.iter().filter(|t| *t == text).count();
            assert_eq!(count, 1, "round {round}: {text:?} appears {count} times");
        }
        for text in &sent_unconfirmed {
            let count = user_texts.iter().filter(|t| *t == text).count();
            assert!(
                count <= 1,
                "round {round}: unconfirmed {text:?} appears {count} times"
            );
        }
    }
    let transcript = json_of(
        daemon
            .call::<SessionTranscript>(SessionTranscriptParams {
                session_id: session.clone(),
                after_seq: None,
                before_seq: None,
                limit: Some(5000),
            })
            .await,
    );
    let blocks: Vec<Value> = transcript["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["role"] == "user")
        .flat_map(|e| e["blocks"].as_array().unwrap().clone())
        .collect();
    let delivered = blocks
        .iter()
        .filter(|b| b["type"] == "interjection")
        .count();
    let asides = acknowledged
        .iter()
        .filter(|t| t.starts_with("aside"))
        .count();
    println!(
        "crash test: {rounds} rounds, {} acknowledged sends checked exactly once ({asides} typed mid-run: {delivered} delivered between steps, the rest promoted or started a turn), {} unacknowledged checked at most once",
        acknowledged.len(),
        sent_unconfirmed.len()
    );
    daemon.close().await;
}

/// The last `n` text blocks the request sent to the model.
fn last_texts(request: &Value, n: usize) -> Vec<String> {
    let all = texts(request);
    all[all.len().saturating_sub(n)..].to_vec()
}

/// The attachment block `@notes.md` makes of the workspace's `notes.md` ("alpha\n").
fn notes_attachment(scratch: &Scratch) -> Value {
    std::fs::write(scratch.workspace().join("notes.md"), "alpha\n").unwrap();
    json!({"type": "attachment", "name": "notes.md", "text": "     1\talpha",
           "size": 6, "hash": sidechat::store::content_hash(b"alpha\n")})
}

/// The blocks of the transcript's user message holding the interjection `pending_id`.
async fn carrying(daemon: &Daemon, session: &str, pending_id: &Value) -> Value {
    let transcript = daemon.transcript(session).await;
    transcript["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| {
            e["role"] == "user"
                && e["blocks"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|b| &b["pendingId"] == pending_id)
        })
        .map(|e| e["blocks"].clone())
        .unwrap_or(Value::Null)
}

#[tokio::test]
async fn an_interjections_mentions_are_delivered_with_it_and_read_again_later() {
    let scratch = Scratch::new();
    let attachment = notes_attachment(&scratch);
    let (mut daemon, session) = mid_step(
        &scratch,
        json!({"turns": [slow_tool_step(), {"text": "Noted."}, {"text": "Still noted."}]}),
        None,
        "look around",
    )
    .await;
    let queued = json_of(daemon.send(&session, "also read @notes.md").await);
    assert_eq!(queued["queued"], json!(true));
    daemon.until_finished().await;
    let attached = "Attached notes.md:\n     1\talpha";
    let requests = scratch.requests();
    assert_eq!(
        last_texts(&requests[1], 2),
        ["The user adds: also read @notes.md", attached]
    );
    assert_eq!(
        carrying(&daemon, &session, &queued["pendingId"]).await,
        json!([
            {"type": "interjection", "pendingId": queued["pendingId"],
             "text": "also read @notes.md"},
            attachment
        ])
    );

    // The next turn's request reads the delivered interjection as the run's request did.
    daemon.send(&session, "thanks").await;
    daemon.until_finished().await;
    let requests = scratch.requests();
    assert_eq!(
        last_texts(&requests[2], 4),
        [
            "The user adds: also read @notes.md",
            attached,
            "Noted.",
            "thanks"
        ]
    );
    daemon.close().await;
}

#[tokio::test]
async fn an_interjections_mentions_stay_with_it_when_it_is_promoted() {
    let scratch = Scratch::new();
    let attachment = notes_attachment(&scratch);
    let (mut daemon, session) = mid_step(
        &scratch,
        json!({"turns": [slow_tool_step(), {"text": "Summarised."}]}),
        Some(1),
        "look",
    )
    .await;
    let queued = json_of(daemon.send(&session, "then summarise @notes.md").await);
    assert_eq!(queued["queued"], json!(true));
    daemon.until_finished().await;
    daemon.until_finished().await;
    let requests = scratch.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        last_texts(&requests[1], 2),
        [
            "then summarise @notes.md",
            "Attached notes.md:\n     1\talpha"
        ]
    );
    assert_eq!(
        carrying(&daemon, &session, &queued["pendingId"]).await,
        json!([
            {"type": "interjection", "pendingId": queued["pendingId"],
             "text": "then summarise @notes.md", "promoted": true},
            attachment
        ])
    );
    daemon.close().await;
}
