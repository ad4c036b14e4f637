//! A long history: `session/transcript` read backwards page by page, and `sidechat sessions
//! prune` deleting what was left untouched.

use std::sync::mpsc;

use pretty_assertions::assert_eq;
use serde_json::Value;
use sidechat::protocol::{
    Event, Role, SessionCreateParams, SessionList, SessionListParams, SessionListResult,
    SessionTranscript, SessionTranscriptParams, SessionTranscriptResult,
};

use crate::harness::{Daemon, Options, Scratch, clean_command, gated, held_run, text};

/// A `session/transcript` page.
async fn page(
    daemon: &Daemon,
    session: &str,
    after_seq: Option<u64>,
    before_seq: Option<u64>,
    limit: u32,
) -> SessionTranscriptResult {
    daemon
        .call::<SessionTranscript>(SessionTranscriptParams {
            session_id: session.into(),
            after_seq,
            before_seq,
            limit: Some(limit),
        })
        .await
}

/// The whole transcript, with the page's entries and `hasMore` in place of its own.
fn with_page(
    whole: &SessionTranscriptResult,
    range: std::ops::Range<usize>,
    has_more: bool,
) -> SessionTranscriptResult {
    SessionTranscriptResult {
        entries: whole.entries[range].to_vec(),
        has_more,
        ..whole.clone()
    }
}

/// The largest `seq` a JSON client keeps exact: "past every `seq`" for the newest page.
const PAST_EVERY_SEQ: u64 = (1 << 53) - 1;

#[tokio::test]
async fn the_transcript_is_read_backwards_from_its_newest_page() {
    let scratch = Scratch::new();
    let mut daemon = Daemon::start(&scratch.db(), Options::default()).await;
    let session = daemon.create_session(SessionCreateParams::default()).await;
    for text in ["one", "two", "three"] {
        daemon.send(&session, text).await;
        daemon.until_finished().await;
    }
    let whole = page(&daemon, &session, None, None, 5000).await;
    assert_eq!(whole.entries.len(), 6, "{whole:#?}");
    assert!(!whole.has_more);

    let newest = page(&daemon, &session, None, Some(PAST_EVERY_SEQ), 4).await;
    assert_eq!(newest, with_page(&whole, 2..6, true));
    let older = page(&daemon, &session, None, Some(newest.entries[0].seq), 4).await;
    assert_eq!(older, with_page(&whole, 0..2, false));
    // A page that fills exactly what remains says that nothing does.
    let exact = page(&daemon, &session, None, Some(whole.entries[2].seq), 2).await;
    assert_eq!(exact, with_page(&whole, 0..2, false));
    // Between two seqs: the newest of those between, and whether more remain above the first.
    let between = page(
        &daemon,
        &session,
        Some(whole.entries[0].seq),
        Some(whole.entries[5].seq),
        2,
    )
    .await;
    assert_eq!(between, with_page(&whole, 3..5, true));
    // Forward paging is as it was.
    let forward = page(&daemon, &session, Some(whole.entries[1].seq), None, 3).await;
    assert_eq!(forward, with_page(&whole, 2..5, true));
    daemon.close().await;
}

/// `sidechat <args> --db <db>` as a user runs it: (exit code, stderr).
fn sidechat(scratch: &Scratch, args: &[&str]) -> (i32, String) {
    let mut command = clean_command(&scratch.home()).into_std();
    command
        .arg(args[0])
        .arg("--db")
        .arg(scratch.db())
        .args(&args[1..])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .stdin(std::process::Stdio::null());
    let output = command.output().expect("run sidechat");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Makes a session look untouched for `days` days, as a year-old database has them.
fn age(db: &std::path::Path, session: &str, days: i64) {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.busy_timeout(std::time::Duration::from_secs(10))
        .unwrap();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let at = now_ms - days * 24 * 3600 * 1000;
    let changed = conn
        .execute(
            "UPDATE sessions SET updated_at = ?2, created_at = ?2 WHERE id = ?1",
            rusqlite::params![session, at],
        )
        .unwrap();
    assert_eq!(changed, 1);
}

/// How many rows each table that belongs to a session holds for `session`.
fn owned_rows(db: &std::path::Path, session: &str) -> Vec<(&'static str, i64)> {
    let conn = rusqlite::Connection::open(db).unwrap();
    ["sessions", "messages", "runs", "usage_lines", "tool_calls"]
        .into_iter()
        .map(|table| {
            let column = if table == "sessions" {
                "id"
            } else {
                "session_id"
            };
            let count = conn
                .query_row(
                    &format!("SELECT COUNT(*) FROM {table} WHERE {column} = ?1"),
                    [session],
                    |r| r.get(0),
                )
                .unwrap();
            (table, count)
        })
        .collect()
}

#[tokio::test]
async fn prune_deletes_old_sessions_with_what_they_own_and_leaves_recent_and_running_ones() {
    let (gate, held) = mpsc::channel::<()>();
    let (_upstream, scratch, mut a, running, _) = held_run(
        vec![
            crate::upstream::Reply::sse(&crate::upstream::openai::text(&["Old news."], 30, 3)),
            gated(vec![text("Still at it")], held, vec![text(", done.")]),
        ],
        "an old question",
        &[],
    )
    .await;
    // The held run is the first reply's: finish it, then hold a second one.
    a.until_finished().await;
    let old = running.clone();
    let running = a.create_session(SessionCreateParams::default()).await;
    a.send(&running, "a long task").await;
    a.events_until(|e| matches!(e, Event::TextDelta { .. }))
        .await;
    let recent = a.create_session(SessionCreateParams::default()).await;
    let owned_before = owned_rows(&scratch.db(), &old);
    assert_eq!(
        owned_before,
        [
            ("sessions", 1),
            ("messages", 2),
            ("runs", 1),
            ("usage_lines", 1),
            ("tool_calls", 0)
        ]
    );
    age(&scratch.db(), &old, 120);
    age(&scratch.db(), &running, 120);
    age(&scratch.db(), &recent, 30);

    let (status, said) = sidechat(&scratch, &["sessions", "prune", "--older-than", "90d"]);
    assert_eq!(
        (status, said),
        (
            0,
            format!("deleted 1 session\nleft {running}: its run is still going\n")
        )
    );
    let listed: SessionListResult = a
        .call::<SessionList>(SessionListParams {
            include_children: Some(true),
            ..SessionListParams::default()
        })
        .await;
    let mut ids: Vec<String> = listed.sessions.into_iter().map(|s| s.id).collect();
    ids.sort();
    let mut expected = vec![recent.clone(), running.clone()];
    expected.sort();
    assert_eq!(ids, expected);
    assert_eq!(
        owned_rows(&scratch.db(), &old),
        [
            ("sessions", 0),
            ("messages", 0),
            ("runs", 0),
            ("usage_lines", 0),
            ("tool_calls", 0)
        ]
    );

    // The run left alone goes on to its end.
    gate.send(()).unwrap();
    let events = a.until_finished().await;
    assert!(
        events
            .iter()
            .any(|e| matches!(&e.event, Event::MessageCompleted { entry } if entry.role == Role::Assistant)),
        "{events:#?}"
    );
    a.close().await;
}

#[tokio::test]
async fn prune_with_vacuum_leaves_no_free_pages() {
    let scratch = Scratch::new();
    let mut daemon = Daemon::start(&scratch.db(), Options::default()).await;
    let mut sessions = Vec::new();
    for _ in 0..3 {
        let session = daemon.create_session(SessionCreateParams::default()).await;
        daemon.send(&session, &"a long message ".repeat(2000)).await;
        daemon.until_finished().await;
        sessions.push(session);
    }
    daemon.close().await;
    for session in &sessions[..2] {
        age(&scratch.db(), session, 100);
    }
    let free_pages = || -> i64 {
        let conn = rusqlite::Connection::open(scratch.db()).unwrap();
        conn.query_row("PRAGMA freelist_count", [], |r| r.get(0))
            .unwrap()
    };

    let (status, said) = sidechat(&scratch, &["sessions", "prune", "--older-than", "90d"]);
    assert_eq!((status, said.as_str()), (0, "deleted 2 sessions\n"));
    assert!(free_pages() > 0, "deleting two sessions freed no page");

    let (status, said) = sidechat(
        &scratch,
        &["sessions", "prune", "--older-than", "90d", "--vacuum"],
    );
    assert_eq!(status, 0, "{said}");
    assert_eq!(said.lines().next(), Some("deleted 0 sessions"), "{said}");
    assert_eq!(free_pages(), 0);
    let daemon = Daemon::start(&scratch.db(), Options::default()).await;
    let kept: Value = daemon.transcript(&sessions[2]).await;
    assert_eq!(kept["entries"].as_array().map(Vec::len), Some(2));
    daemon.close().await;
}
