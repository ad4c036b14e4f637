//! A database another program holds: acknowledged input waits for it (with a notice saying
//! why) instead of being refused, a stop answers at once, and what the run could not record
//! while the lock lasted is recorded once it clears.

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sidechat::protocol::{ChatSendParams, Event, FinishReason, SessionIdParams};

use crate::harness::{Daemon, Options, Scratch, env, gated, held_run, session, text};
use crate::two_daemons::{finish_reason, roles};
use crate::upstream::{Reply, openai, start};

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
    let notice = tokio::time::timeout(HANG_GUARD, async {
        loop {
            tokio::select! {
                answer = &mut request => panic!("{method} was answered while the database was locked: {answer:?}"),
                note = daemon.notes.recv() => {
                    let note = note.expect("the daemon closed its output");
                    if note["method"] == "session/event" && note["params"]["event"]["kind"] == "notice" {
                        return note["params"].clone();
                    }
                }
            }
        }
    })
    .await
    .expect("no notice while the database was locked");
    release();
    let answer = tokio::time::timeout(HANG_GUARD, request)
        .await
        .expect("no answer once the database was free")
        .expect("connection")
        .expect("the request succeeded");
    (notice, answer)
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
    };
    let (notice, queued) = answered_after_a_notice(
        &mut a,
        "chat/send",
        serde_json::to_value(params).unwrap(),
        || lock.execute_batch("COMMIT").unwrap(),
    )
    .await;
    let text = notice["event"]["message"].as_str().unwrap();
    assert!(text.contains("locked by another program"), "{text}");
    assert_eq!(queued["queued"], json!(true));

    // A stop answers while the lock is still held; the run's end follows once it clears.
    let lock = hold_write_lock(&scratch.db());
    let stopped = tokio::time::timeout(
        HANG_GUARD,
        a.call(
            "chat/stop",
            SessionIdParams {
                session_id: session.clone(),
            },
        ),
    )
    .await
    .expect("chat/stop waited for the lock");
    assert_eq!(stopped["stopped"], json!(true));
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
    let stopped = a
        .call(
            "chat/stop",
            SessionIdParams {
                session_id: session.clone(),
            },
        )
        .await;
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
    let cost = a
        .call(
            "session/cost",
            SessionIdParams {
                session_id: session.clone(),
            },
        )
        .await;
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
    let run_id = a.send(&session, "write it all down").await["runId"].clone();
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
    };
    let (notice, refused) = {
        let request = a
            .conn
            .request("chat/send", serde_json::to_value(params).unwrap());
        tokio::pin!(request);
        let notice = tokio::time::timeout(HANG_GUARD, async {
            loop {
                tokio::select! {
                    answer = &mut request => panic!("answered before the notice: {answer:?}"),
                    note = a.notes.recv() => {
                        let note = note.expect("the daemon closed its output");
                        if note["params"]["event"]["kind"] == "notice" {
                            return note["params"].clone();
                        }
                    }
                }
            }
        })
        .await
        .expect("no notice while the database was locked");
        let refused = tokio::time::timeout(HANG_GUARD, request)
            .await
            .expect("no answer while the database stayed locked")
            .expect("connection")
            .expect_err("the send cannot be stored while the database is locked");
        (notice, refused)
    };
    assert!(refused.message.contains("locked"), "{}", refused.message);

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
    a.close().await;
}
