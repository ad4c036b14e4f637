//! A database another program holds: acknowledged input waits for it (with a notice saying
//! why) instead of being refused, a stop answers at once, and what the run could not record
//! while the lock lasted is recorded once it clears.

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sidechat::protocol::{
    ChatSend, ChatSendParams, ChatStop, Event, FinishReason, Notification, Request, SessionCost,
    SessionEvent, SessionEventParams, SessionGet, SessionIdParams, SessionState,
};

use crate::harness::{Daemon, Options, Scratch, env, gated, held_run, json_of, say, session, text};
use crate::two_daemons::{finish_reason, roles};
use crate::upstream::{Reply, Upstream, openai, start};

/// A guard against a hung daemon, not a performance assertion.
const HANG_GUARD: Duration = Duration::from_secs(60);

/// Another program's connection holding the database's write lock until dropped or
/// committed.
pub(crate) fn hold_write_lock(db: &Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.execute_batch("BEGIN IMMEDIATE").unwrap();
    conn
}

/// Sends `method` and, while its answer is outstanding, reads the daemon's notifications until
/// a `notice` event arrives; the answer must not come first. Answers the notice's
/// `session/event` params and the still-pending answer's outcome once `release` has run.
async fn answered_after_a_notice(
    daemon: &mut Daemon,
    method: &str,
    params: Value,
    release: impl FnOnce(),
) -> (Value, Value) {
    let request = daemon.conn.request(method, params);
    tokio::pin!(request);
    let notice = notice_first(&mut daemon.notes, &mut request).await;
    release();
    let answer = tokio::time::timeout(HANG_GUARD, request)
        .await
        .expect("no answer once the database was free")
        .expect("connection")
        .expect("the request succeeded");
    (notice, answer)
}

/// Polls `request` (sent by the first poll) while reading the daemon's notifications until a
/// `notice` event arrives, which must come before the request's answer: the `session/event`
/// params of the notice. The answer stays to be awaited.
async fn notice_first<F: std::future::Future + Unpin>(notes: &mut Notes, request: &mut F) -> Value
where
    F::Output: std::fmt::Debug,
{
    tokio::time::timeout(HANG_GUARD, async {
        loop {
            // Notifications first: those sent before the answer are all read before it.
            tokio::select! {
                biased;
                note = notes.recv() => {
                    let note = note.expect("the daemon closed its output");
                    if note["method"] == SessionEvent::METHOD && note["params"]["event"]["kind"] == "notice" {
                        return note["params"].clone();
                    }
                }
                answer = &mut *request => panic!("answered before the notice that the database is locked: {answer:?}"),
            }
        }
    })
    .await
    .expect("no notice while the database was locked")
}

/// The daemon's notifications, as the harness receives them.
type Notes = tokio::sync::mpsc::UnboundedReceiver<Value>;

/// Session events from `notes` up to and including the first `stop` accepts (read while a
/// request still borrows the daemon).
async fn events_in(notes: &mut Notes, stop: impl Fn(&Event) -> bool) -> Vec<SessionEventParams> {
    let mut events = Vec::new();
    loop {
        let note = tokio::time::timeout(HANG_GUARD, notes.recv())
            .await
            .expect("no event arrived")
            .expect("the daemon closed its output");
        if note["method"] != SessionEvent::METHOD {
            continue;
        }
        let event: SessionEventParams = serde_json::from_value(note["params"].clone()).unwrap();
        let done = stop(&event.event);
        events.push(event);
        if done {
            return events;
        }
    }
}

/// Checks that the transcript entry `stored` is the warning `notice` (a `session/event`'s
/// params) as it went out live: same id, same `seq`, same text.
fn assert_stored_as_sent(stored: &Value, notice: &Value) {
    assert_eq!(
        (
            stored["id"].clone(),
            stored["seq"].clone(),
            stored["blocks"].clone()
        ),
        (
            notice["event"]["messageId"].clone(),
            notice["seq"].clone(),
            json!([{"type": "notice", "level": "warning", "text": notice["event"]["message"]}])
        )
    );
}

#[tokio::test]
async fn input_waits_for_a_locked_database_and_a_stop_answers_at_once() {
    let (_gate, held) = mpsc::channel::<()>();
    let (_, scratch, mut a, session, _) = held_run(
        vec![
            gated(vec![text("Reading the files")], held, vec![]),
            Reply::sse(&openai::text(&["Got it."], 30, 3)),
        ],
        "read everything",
        &[],
    )
    .await;

    // An interjection typed while another program holds the database waits, and says so.
    let lock = hold_write_lock(&scratch.db());
    let params = ChatSendParams {
        session_id: session.clone(),
        text: "and the tests".into(),
        client_message_id: Some("c-1".into()),
        attachments: Vec::new(),
        images: Vec::new(),
    };
    let (notice, queued) = answered_after_a_notice(
        &mut a,
        ChatSend::METHOD,
        serde_json::to_value(params).unwrap(),
        || lock.execute_batch("COMMIT").unwrap(),
    )
    .await;
    let text = notice["event"]["message"].as_str().unwrap();
    assert!(text.contains("locked by another program"), "{text}");
    // Answered as kept while the lock lasted; queued for the run once it cleared.
    assert_eq!(queued["kept"], json!(true));
    a.events_until(|e| matches!(e, Event::InterjectionQueued { .. }))
        .await;

    // A stop answers while the lock is still held; the run's end follows once it clears.
    let lock = hold_write_lock(&scratch.db());
    let stopped = tokio::time::timeout(
        HANG_GUARD,
        a.call::<ChatStop>(SessionIdParams {
            session_id: session.clone(),
        }),
    )
    .await
    .expect("chat/stop waited for the lock");
    assert!(stopped.stopped);
    drop(lock);
    let events = a.until_finished().await;
    assert_eq!(finish_reason(&events), Some(FinishReason::Stopped));
    // The interjection was never delivered: it is the next turn, answered at once.
    let events = a.until_finished().await;
    assert_eq!(finish_reason(&events), Some(FinishReason::EndTurn));
    let transcript = a.transcript(&session).await;
    // The notice is stored too, where the live client saw it: before the answer it
    // interrupted, under the id and number it went out with.
    assert_eq!(
        roles(&transcript),
        ["user", "notice", "assistant", "user", "assistant"]
    );
    assert_stored_as_sent(&transcript["entries"][1], &notice);
    assert_eq!(transcript["entries"][2]["status"], json!("stopped"));
    assert_eq!(
        transcript["entries"][3]["blocks"][0]["text"],
        json!("and the tests")
    );
    a.close().await;
}

#[tokio::test]
async fn a_run_that_cannot_record_its_end_is_closed_once_the_database_is_free() {
    let (_gate, held) = mpsc::channel::<()>();
    // Writes give up on the lock after a second, so the run's end cannot be recorded while it
    // lasts.
    let (_, scratch, mut a, session, run_id) = held_run(
        vec![gated(vec![text("Half an answer")], held, vec![])],
        "go",
        &[("SIDECHAT_LOCK_WAIT_MS", "1000")],
    )
    .await;

    let lock = hold_write_lock(&scratch.db());
    let stopped = json_of(
        a.call::<ChatStop>(SessionIdParams {
            session_id: session.clone(),
        })
        .await,
    );
    assert_eq!(stopped["stopped"], json!(true));
    // The run gave up on the database and said so; it is still open in the store.
    let events = a.until_finished().await;
    assert!(finish_reason(&events).is_some());
    let status = |db: &Path| -> (String, Option<String>) {
        let conn = rusqlite::Connection::open(db).unwrap();
        conn.query_row(
            "SELECT status, reason FROM runs WHERE id = ?1",
            [run_id.as_str().unwrap()],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap()
    };
    assert_eq!(status(&scratch.db()).0, "running");
    drop(lock);

    // Once the database is free the heartbeat records the end, and keeps the streamed answer.
    let mut polls = 0;
    while status(&scratch.db()).0 == "running" {
        polls += 1;
        assert!(polls < 600, "the run's end was never recorded");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        status(&scratch.db()),
        ("finished".to_string(), Some("stopped".to_string()))
    );
    let transcript = a.transcript(&session).await;
    assert_eq!(roles(&transcript), ["user", "assistant"]);
    assert_eq!(
        (
            transcript["entries"][1]["status"].clone(),
            transcript["entries"][1]["blocks"][0]["text"].clone()
        ),
        (json!("stopped"), json!("Half an answer"))
    );
    a.close().await;
}

#[tokio::test]
async fn an_answer_and_its_usage_that_a_locked_database_refused_are_stored_once_it_is_free() {
    let (gate, held) = mpsc::channel::<()>();
    let (_, scratch, mut a, session, _) = held_run(
        vec![gated(
            vec![text("All")],
            held,
            vec![
                openai::chunk(json!({"content": " done."}), Some("stop")),
                openai::usage(20, 0, 4),
            ],
        )],
        "go",
        &[("SIDECHAT_LOCK_WAIT_MS", "1000")],
    )
    .await;

    // The answer ends, with its usage, while another program holds the database.
    let lock = hold_write_lock(&scratch.db());
    gate.send(()).unwrap();
    let events = a.until_finished().await;
    assert_eq!(finish_reason(&events), Some(FinishReason::Error));
    drop(lock);

    // Once it is free the heartbeat stores both: nothing the model sent is lost.
    let mut polls = 0;
    while roles(&a.transcript(&session).await) == ["user"] {
        polls += 1;
        assert!(polls < 600, "the answer was never stored");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let transcript = a.transcript(&session).await;
    assert_eq!(
        transcript["entries"][1]["blocks"],
        json!([{"type": "text", "text": "All done."}])
    );
    let cost = json_of(
        a.call::<SessionCost>(SessionIdParams {
            session_id: session.clone(),
        })
        .await,
    );
    assert_eq!(
        cost["cost"]["byRequest"][0]["tokens"],
        json!({"input": 20, "output": 4, "cacheRead": 0, "cacheWrite": 0, "reasoning": 0}),
        "{cost}"
    );
    a.close().await;
}

#[tokio::test]
async fn a_full_disk_keeps_the_streamed_answer_and_stores_it_once_there_is_room() {
    let answer: Vec<String> = (0..40)
        .map(|i| format!("{i:02} {}\n", "x".repeat(3000)))
        .collect();
    let pieces: Vec<&str> = answer.iter().map(String::as_str).collect();
    let upstream = start(vec![Reply::sse(&openai::text(&pieces, 30, 3))]);
    let scratch = Scratch::new();
    let first = Daemon::start(&scratch.db(), Options::with_env(env(&upstream.url))).await;
    let session = session(&first, &scratch).await;
    assert_eq!(first.close().await, 0);
    // A filler table stands for the rest of the disk; the daemon may not grow the file by more
    // than a few pages, too few for the answer.
    let pages: i64 = {
        let conn = rusqlite::Connection::open(scratch.db()).unwrap();
        conn.execute_batch(
            "CREATE TABLE filler (x BLOB); INSERT INTO filler VALUES (zeroblob(400000));",
        )
        .unwrap();
        conn.query_row("PRAGMA page_count", [], |r| r.get(0))
            .unwrap()
    };
    let mut env = env(&upstream.url);
    env.push(("SIDECHAT_TEST_MAX_PAGES", (pages + 16).to_string()));
    let mut a = Daemon::start(&scratch.db(), Options::with_env(env)).await;
    let run_id = json_of(a.send(&session, "write it all down").await)["runId"].clone();
    let events = a.until_finished().await;

    // The client saw the whole answer as it streamed; the run says it could not be stored.
    let streamed: String = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::TextDelta { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(streamed, answer.concat());
    assert_eq!(finish_reason(&events), Some(FinishReason::Error));
    assert_eq!(roles(&a.transcript(&session).await), ["user"]);
    let status = |db: &Path| -> String {
        let conn = rusqlite::Connection::open(db).unwrap();
        conn.query_row(
            "SELECT status FROM runs WHERE id = ?1",
            [run_id.as_str().unwrap()],
            |r| r.get(0),
        )
        .unwrap()
    };
    assert_eq!(status(&scratch.db()), "running");

    // Room returns: the kept answer is stored whole, and then the run's end.
    rusqlite::Connection::open(scratch.db())
        .unwrap()
        .execute_batch("DROP TABLE filler")
        .unwrap();
    let mut polls = 0;
    while status(&scratch.db()) == "running" {
        polls += 1;
        assert!(polls < 600, "the answer was never stored");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let transcript = a.transcript(&session).await;
    assert_eq!(roles(&transcript), ["user", "assistant"]);
    assert_eq!(
        transcript["entries"][1]["blocks"],
        json!([{"type": "text", "text": answer.concat()}])
    );
    assert_eq!(a.close().await, 0);
}

#[tokio::test]
async fn a_locked_notice_is_stored_once_the_database_is_free_after_every_try_failed() {
    let upstream = start(vec![
        Reply::sse(&openai::text(&["Hello."], 30, 3)),
        Reply::sse(&openai::text(&["Got it."], 30, 3)),
    ]);
    let scratch = Scratch::new();
    let mut env = env(&upstream.url);
    // A write gives up on the lock after a second: the notice goes out while the send still
    // waits, and every try to store it fails while the lock below lasts.
    env.push(("SIDECHAT_LOCK_WAIT_MS", "1000".into()));
    let mut a = Daemon::start(&scratch.db(), Options::with_env(env)).await;
    let session = session(&a, &scratch).await;
    // A first turn, so the session's event numbers are reserved before the lock.
    a.send(&session, "hello").await;
    a.until_finished().await;

    let lock = hold_write_lock(&scratch.db());
    let params = ChatSendParams {
        session_id: session.clone(),
        text: "are you there".into(),
        client_message_id: None,
        attachments: Vec::new(),
        images: Vec::new(),
    };
    let (notice, kept) = {
        let request = a
            .conn
            .request(ChatSend::METHOD, serde_json::to_value(params).unwrap());
        tokio::pin!(request);
        let notice = notice_first(&mut a.notes, &mut request).await;
        let kept = tokio::time::timeout(HANG_GUARD, request)
            .await
            .expect("no answer while the database stayed locked")
            .expect("connection")
            .expect("the send is kept while the database is locked");
        (notice, kept)
    };
    assert_eq!(kept["kept"], json!(true));

    // The lock outlasts every try to store the notice at once; the daemon says so.
    let given_up = "the notice that the database is locked is stored once the database is free";
    let guard = std::time::Instant::now() + HANG_GUARD;
    while !a
        .conn
        .stderr_tail()
        .iter()
        .any(|line| line.contains(given_up))
    {
        assert!(
            std::time::Instant::now() < guard,
            "the daemon never gave the notice to the heartbeat: {:?}",
            a.conn.stderr_tail()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(lock);

    // Stored once the database is free, where the live client saw it.
    let guard = std::time::Instant::now() + HANG_GUARD;
    let stored = loop {
        let transcript = a.transcript(&session).await;
        let entries = transcript["entries"].as_array().unwrap().clone();
        if let Some(entry) = entries.into_iter().find(|e| e["role"] == "notice") {
            break entry;
        }
        assert!(
            std::time::Instant::now() < guard,
            "the notice was never stored: {transcript}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_stored_as_sent(&stored, &notice);
    // The kept input is stored after it, and answered.
    let events = a.until_finished().await;
    assert_eq!(finish_reason(&events), Some(FinishReason::EndTurn));
    assert_eq!(
        roles(&a.transcript(&session).await),
        ["user", "assistant", "notice", "user", "assistant"]
    );
    a.close().await;
}

/// Writes no longer give up on the lock in these tests (ten minutes), so whatever waits for
/// the send would wait past every hang guard.
const PATIENT: (&str, &str) = ("SIDECHAT_LOCK_WAIT_MS", "600000");

/// An answer that streams a short delta every few milliseconds until the daemon hangs up (or
/// a minute has passed): a run that is always mid-stream.
fn endless() -> Reply {
    use std::io::Write;
    Reply::writer(|stream| {
        for i in 0..12_000 {
            stream.write_all(openai::event(&text(&format!("{i} "))).as_bytes())?;
            stream.flush()?;
            std::thread::sleep(Duration::from_millis(5));
        }
        stream.write_all(openai::DONE.as_bytes())?;
        stream.flush()
    })
}

/// A daemon that never gives up on the lock, with `first` a session that has had one turn
/// (its event numbers are reserved) and a second session, idle and unrelated. Each reply
/// answers, in order, the first session's turn, then the requests the test makes.
async fn two_sessions(later: Vec<Reply>) -> (Upstream, Scratch, Daemon, String, String) {
    let mut replies = vec![Reply::sse(&openai::text(&["Hello."], 30, 3))];
    replies.extend(later);
    let upstream = start(replies);
    let scratch = Scratch::new();
    let mut settings = env(&upstream.url);
    settings.push((PATIENT.0, PATIENT.1.into()));
    let mut a = Daemon::start(&scratch.db(), Options::with_env(settings)).await;
    let first = session(&a, &scratch).await;
    let other = session(&a, &scratch).await;
    a.send(&first, "hello").await;
    a.until_finished().await;
    (upstream, scratch, a, first, other)
}

#[tokio::test]
async fn reads_of_another_session_answer_while_a_send_waits_for_the_lock() {
    let (_upstream, scratch, mut a, waiting, other) =
        two_sessions(vec![Reply::sse(&openai::text(&["Got it."], 30, 3))]).await;
    let lock = hold_write_lock(&scratch.db());
    {
        let send = a.conn.request(
            ChatSend::METHOD,
            serde_json::to_value(say(&waiting, "are you there")).unwrap(),
        );
        tokio::pin!(send);
        // The notice says the send waits for the lock.
        notice_first(&mut a.notes, &mut send).await;

        // Reads of another session answer while the send still waits: before the lock is
        // released, and before the send's input is stored.
        let got = tokio::time::timeout(
            HANG_GUARD,
            a.call::<SessionGet>(SessionIdParams {
                session_id: other.clone(),
            }),
        )
        .await
        .expect("session/get waited for the write held by the lock");
        assert_eq!((got.id, got.state), (other.clone(), SessionState::Idle));
        let transcript = tokio::time::timeout(HANG_GUARD, a.transcript(&other))
            .await
            .expect("session/transcript waited for the write held by the lock");
        assert_eq!(transcript["entries"], json!([]));
        assert_eq!(roles(&a.transcript(&waiting).await), ["user", "assistant"]);
        drop(lock);

        tokio::time::timeout(HANG_GUARD, send)
            .await
            .expect("no answer once the database was free")
            .expect("connection")
            .expect("the send succeeded");
    }
    let events = a.until_finished().await;
    assert_eq!(finish_reason(&events), Some(FinishReason::EndTurn));
    assert_eq!(
        roles(&a.transcript(&waiting).await),
        ["user", "assistant", "notice", "user", "assistant"]
    );
    a.close().await;
}

#[tokio::test]
async fn a_stop_ends_the_stream_at_once_while_a_send_waits_for_the_lock() {
    let (_upstream, scratch, mut a, waiting, streaming) = two_sessions(vec![
        endless(),
        Reply::sse(&openai::text(&["Got it."], 30, 3)),
    ])
    .await;
    a.send(&streaming, "go on and on").await;
    a.events_until(|e| matches!(e, Event::TextDelta { .. }))
        .await;

    let lock = hold_write_lock(&scratch.db());
    {
        let send = a.conn.request(
            ChatSend::METHOD,
            serde_json::to_value(say(&waiting, "are you there")).unwrap(),
        );
        tokio::pin!(send);
        notice_first(&mut a.notes, &mut send).await;

        // The stop answers while the lock is held ...
        let stopped = tokio::time::timeout(
            HANG_GUARD,
            a.call::<ChatStop>(SessionIdParams {
                session_id: streaming.clone(),
            }),
        )
        .await
        .expect("chat/stop waited for the write held by the lock");
        assert!(stopped.stopped);
        // ... and the stream ends with it: what came before the answer is read already; at
        // most the delta in flight as it was stopped follows, then the run's end, with the
        // lock still held.
        let mut before = Vec::new();
        while let Ok(note) = a.notes.try_recv() {
            if note["method"] == SessionEvent::METHOD {
                before.push(
                    serde_json::from_value::<SessionEventParams>(note["params"].clone()).unwrap(),
                );
            }
        }
        let ended = |e: &SessionEventParams| matches!(e.event, Event::RunFinished { .. });
        let events = match before.iter().position(ended) {
            // The run ended as the stop was answered.
            Some(end) => before.drain(end..=end).collect(),
            None => events_in(&mut a.notes, |e| matches!(e, Event::RunFinished { .. })).await,
        };
        let late_deltas = events
            .iter()
            .filter(|e| e.session_id == streaming && matches!(e.event, Event::TextDelta { .. }))
            .count();
        assert!(
            late_deltas <= 2,
            "{late_deltas} deltas after the stop's answer"
        );
        assert_eq!(
            events
                .last()
                .map(|e| (e.session_id.clone(), finish_reason(&events))),
            Some((streaming.clone(), Some(FinishReason::Stopped)))
        );
        drop(lock);

        // Once the database is free the send goes through.
        tokio::time::timeout(HANG_GUARD, send)
            .await
            .expect("no answer once the database was free")
            .expect("connection")
            .expect("the send succeeded");
    }
    let events = a.until_finished().await;
    assert_eq!(finish_reason(&events), Some(FinishReason::EndTurn));
    // The stopped answer is stored too, once the database is free.
    let guard = std::time::Instant::now() + HANG_GUARD;
    let stored = loop {
        let transcript = a.transcript(&streaming).await;
        if roles(&transcript) == ["user", "assistant"] {
            break transcript["entries"][1]["status"].clone();
        }
        assert!(
            std::time::Instant::now() < guard,
            "the stopped answer was never stored: {transcript}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(stored, json!("stopped"));
    a.close().await;
}

#[tokio::test]
async fn the_locked_notice_goes_out_live_agrees_with_the_answer_and_both_are_stored_once() {
    let upstream = start(vec![Reply::sse(&openai::text(&["Got it."], 30, 3))]);
    let scratch = Scratch::new();
    let mut settings = env(&upstream.url);
    settings.push((PATIENT.0, PATIENT.1.into()));
    let mut a = Daemon::start(&scratch.db(), Options::with_env(settings)).await;
    // A new session: none of its event numbers are reserved yet.
    let session = session(&a, &scratch).await;

    let lock = hold_write_lock(&scratch.db());
    let params = ChatSendParams {
        session_id: session.clone(),
        text: "are you there".into(),
        client_message_id: Some("c-1".into()),
        attachments: Vec::new(),
        images: Vec::new(),
    };
    let notice = {
        let send = a
            .conn
            .request(ChatSend::METHOD, serde_json::to_value(&params).unwrap());
        tokio::pin!(send);
        // The notice goes out while the lock is held, and the answer says what it says: kept.
        let notice = notice_first(&mut a.notes, &mut send).await;
        let answer = tokio::time::timeout(HANG_GUARD, send)
            .await
            .expect("the send was not answered while the database was locked")
            .expect("connection")
            .expect("the send is kept, not refused");
        let text = notice["event"]["message"].as_str().unwrap();
        assert!(text.contains("your input is kept"), "{text}");
        assert_eq!(answer, json!({"queued": false, "kept": true}));
        notice
    };
    // A retry of the same send while the lock lasts is kept as well, and stores nothing twice.
    let retried = tokio::time::timeout(HANG_GUARD, a.call::<ChatSend>(params.clone()))
        .await
        .expect("the retry was not answered while the database was locked");
    assert_eq!(json_of(retried), json!({"queued": false, "kept": true}));
    drop(lock);

    // Once the database is free the input is stored and answered; the notice is stored where
    // the live client saw it; each once.
    let events = a.until_finished().await;
    assert_eq!(finish_reason(&events), Some(FinishReason::EndTurn));
    let transcript = a.transcript(&session).await;
    assert_eq!(roles(&transcript), ["notice", "user", "assistant"]);
    assert_stored_as_sent(&transcript["entries"][0], &notice);
    assert_eq!(
        transcript["entries"][1]["blocks"],
        json!([{"type": "text", "text": "are you there"}])
    );
    a.close().await;
}
