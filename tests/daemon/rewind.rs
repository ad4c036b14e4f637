//! `session/rewind` and `session/fork`: every turn's file changes can be taken back, the
//! conversation cut, a rewind killed half way is finished by the next daemon, and a fork is a
//! session of its own.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sidechat::protocol::{
    ApprovalDecision, ApprovalRespond, Event, RewindRestore, RewoundFile, SessionFork,
    SessionForkParams, SessionGet, SessionList, SessionListParams, SessionRewind,
    SessionRewindParams, SessionRewindResult, SkippedFile,
};

use crate::harness::{Daemon, Options, Scratch, answer, json_of, sid};

/// Every write, edit and command runs without asking.
const ALLOW_ALL: &str =
    "[permissions]\nallow = [\"write_file\", \"edit_file\", \"run_command\", \"delegate\"]\n";

fn calls(calls: Vec<(&str, Value)>) -> Value {
    let calls: Vec<Value> = calls
        .into_iter()
        .map(|(name, input)| json!({"name": name, "input": input}))
        .collect();
    json!({"text": "Working.", "toolCalls": calls})
}

fn write(path: &str, content: &str) -> (&'static str, Value) {
    ("write_file", json!({"path": path, "content": content}))
}

fn edit(path: &str, old: &str, new: &str) -> (&'static str, Value) {
    (
        "edit_file",
        json!({"path": path, "old_string": old, "new_string": new}),
    )
}

async fn daemon(scratch: &Scratch, turns: Value) -> (Daemon, String) {
    scratch.write_config(ALLOW_ALL);
    let script = json!({"turns": turns, "fallback": {"text": "Done."}});
    let daemon = Daemon::start(&scratch.db(), Options::with_env(scratch.replay(script))).await;
    let session = daemon.create_session(scratch.replay_session()).await;
    (daemon, session)
}

/// Sends `text` and waits for its run to end; the user message's id.
async fn turn(daemon: &mut Daemon, session: &str, text: &str) -> String {
    let sent = daemon.send(session, text).await;
    daemon.until_finished().await;
    sent.message_id.expect("a user message")
}

fn rewind(
    session: &str,
    message: &str,
    restore: RewindRestore,
    force: bool,
) -> SessionRewindParams {
    SessionRewindParams {
        session_id: session.into(),
        message_id: message.into(),
        restore,
        force,
        dry_run: false,
    }
}

fn read(scratch: &Scratch, path: &str) -> Option<String> {
    std::fs::read_to_string(scratch.workspace().join(path)).ok()
}

fn restored(path: &str, removed: bool) -> RewoundFile {
    RewoundFile {
        path: path.into(),
        removed,
    }
}

/// The texts of the transcript's user messages, each with whether it is rewound.
async fn user_texts(daemon: &Daemon, session: &str) -> Vec<(String, bool)> {
    let transcript = daemon.transcript(session).await;
    transcript["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["role"] == "user")
        .map(|e| {
            (
                e["blocks"][0]["text"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                e["rewound"] == json!(true),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_rewind_takes_back_writes_edits_and_creations_and_cuts_the_conversation() {
    let scratch = Scratch::new();
    std::fs::write(scratch.workspace().join("a.txt"), "original\n").unwrap();
    let (mut daemon, session) = daemon(
        &scratch,
        json!([
            calls(vec![write("a.txt", "one\n")]),
            {"text": "Wrote."},
            calls(vec![edit("a.txt", "one", "two"), write("new/b.txt", "b\n")]),
            {"text": "Edited."},
        ]),
    )
    .await;
    let first = turn(&mut daemon, &session, "first").await;
    let second = turn(&mut daemon, &session, "second").await;
    assert_eq!(
        (read(&scratch, "a.txt"), read(&scratch, "new/b.txt")),
        (Some("two\n".into()), Some("b\n".into()))
    );

    let done = daemon
        .call::<SessionRewind>(rewind(&session, &second, RewindRestore::Both, false))
        .await;
    assert_eq!(
        done,
        SessionRewindResult {
            restored: vec![restored("a.txt", false), restored("new/b.txt", true)],
            skipped: vec![],
            rewound_messages: 4,
        }
    );
    let events = daemon
        .events_until(|e| matches!(e, Event::Rewound { .. }))
        .await;
    assert_eq!(
        json_of(&events.last().unwrap().event),
        json!({"kind": "rewound", "messageId": second, "restore": "both",
               "restored": [{"path": "a.txt", "removed": false}, {"path": "new/b.txt", "removed": true}],
               "skipped": [], "rewoundMessages": 4})
    );
    assert_eq!(
        (read(&scratch, "a.txt"), read(&scratch, "new/b.txt")),
        (Some("one\n".into()), None)
    );
    assert_eq!(
        user_texts(&daemon, &session).await,
        vec![("first".into(), false), ("second".into(), true)]
    );

    // The model never hears of the rewound turn again: the scripted model answers by how many
    // answers of its own it is sent, so it makes the second turn's changes once more.
    turn(&mut daemon, &session, "third").await;
    assert_eq!(
        (read(&scratch, "a.txt"), read(&scratch, "new/b.txt")),
        (Some("two\n".into()), Some("b\n".into()))
    );
    let sent: Vec<String> = scratch.requests().last().unwrap()["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter_map(|c| c["text"].as_str().map(str::to_string))
        .collect();
    assert!(sent.contains(&"third".to_string()), "{sent:?}");
    assert!(
        !sent.iter().any(|t| t == "second" || t == "Edited."),
        "{sent:?}"
    );

    // Files only: every live turn's changes are taken back, the conversation stays.
    let done = daemon
        .call::<SessionRewind>(rewind(&session, &first, RewindRestore::Files, false))
        .await;
    assert_eq!(
        done,
        SessionRewindResult {
            restored: vec![restored("a.txt", false), restored("new/b.txt", true)],
            skipped: vec![],
            rewound_messages: 0,
        }
    );
    assert_eq!(
        (read(&scratch, "a.txt"), read(&scratch, "new/b.txt")),
        (Some("original\n".into()), None)
    );
    assert_eq!(
        user_texts(&daemon, &session).await,
        vec![
            ("first".into(), false),
            ("second".into(), true),
            ("third".into(), false)
        ]
    );
    daemon.close().await;
}

#[tokio::test]
async fn a_file_changed_since_is_refused_unless_forced_and_a_busy_session_is_refused() {
    let scratch = Scratch::new();
    let (mut daemon, session) = daemon(
        &scratch,
        json!([calls(vec![write("a.txt", "model\n"), write("c.txt", "c\n")]), {"text": "Wrote."}]),
    )
    .await;
    let first = turn(&mut daemon, &session, "first").await;
    std::fs::write(scratch.workspace().join("a.txt"), "user\n").unwrap();
    std::fs::remove_file(scratch.workspace().join("c.txt")).unwrap();
    let refused = daemon
        .try_call::<SessionRewind>(rewind(&session, &first, RewindRestore::Both, false))
        .await
        .unwrap_err();
    assert_eq!(
        (refused.code, refused.message),
        (
            -32602,
            "invalid params: these files changed since the session last wrote them: a.txt; rewind with force to overwrite them".to_string()
        )
    );
    assert_eq!(read(&scratch, "a.txt"), Some("user\n".into()));
    let forced = daemon
        .call::<SessionRewind>(rewind(&session, &first, RewindRestore::Both, true))
        .await;
    assert_eq!(
        forced,
        SessionRewindResult {
            restored: vec![restored("a.txt", true)],
            skipped: vec![SkippedFile {
                path: "c.txt".into(),
                reason: "already as it was".into()
            }],
            rewound_messages: 4,
        }
    );
    assert_eq!(read(&scratch, "a.txt"), None);
    let not_user = daemon
        .try_call::<SessionRewind>(rewind(&session, "msg_nosuch", RewindRestore::Both, false))
        .await
        .unwrap_err();
    assert_eq!(not_user.code, -32602);
    daemon.close().await;

    // A run waiting for an approval keeps the session busy.
    let scratch = Scratch::new();
    let script = json!({"turns": [calls(vec![write("a.txt", "x\n")]), {"text": "Wrote."}]});
    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(scratch.replay(script))).await;
    let session = daemon.create_session(scratch.replay_session()).await;
    let sent = daemon.send(&session, "write").await;
    let (_, approval) = daemon.until_approval().await;
    let busy = daemon
        .try_call::<SessionRewind>(rewind(
            &session,
            sent.message_id.as_deref().unwrap(),
            RewindRestore::Both,
            false,
        ))
        .await
        .unwrap_err();
    assert_eq!(busy.code, -32003);
    daemon
        .call::<ApprovalRespond>(answer(&approval, ApprovalDecision::Deny))
        .await;
    daemon.until_finished().await;
    daemon.close().await;
}

#[tokio::test]
async fn a_fork_copies_the_transcript_up_to_a_message_and_lives_on_its_own() {
    let scratch = Scratch::new();
    let (mut daemon, session) = daemon(&scratch, json!([])).await;
    turn(&mut daemon, &session, "first").await;
    let second = turn(&mut daemon, &session, "second").await;
    turn(&mut daemon, &session, "third").await;
    let fork = daemon
        .call::<SessionFork>(SessionForkParams {
            session_id: session.clone(),
            message_id: Some(second),
        })
        .await;
    assert_eq!(fork.forked_from.as_deref(), Some(session.as_str()));
    let original = daemon.call::<SessionGet>(sid(&session)).await;
    assert_eq!(
        (
            &fork.account,
            &fork.model,
            &fork.workspace_root,
            fork.max_steps
        ),
        (
            &original.account,
            &original.model,
            &original.workspace_root,
            original.max_steps
        )
    );
    assert_eq!(original.forked_from, None);
    assert_eq!(
        user_texts(&daemon, &fork.id).await,
        vec![("first".into(), false), ("second".into(), false)]
    );
    let listed = daemon
        .call::<SessionList>(SessionListParams::default())
        .await;
    let forked_from: Vec<_> = listed
        .sessions
        .iter()
        .map(|s| (s.id.clone(), s.forked_from.clone()))
        .collect();
    assert!(
        forked_from.contains(&(fork.id.clone(), Some(session.clone()))),
        "{forked_from:?}"
    );

    turn(&mut daemon, &fork.id, "only in the fork").await;
    turn(&mut daemon, &session, "only in the original").await;
    assert_eq!(
        user_texts(&daemon, &fork.id).await,
        vec![
            ("first".into(), false),
            ("second".into(), false),
            ("only in the fork".into(), false)
        ]
    );
    assert_eq!(
        user_texts(&daemon, &session).await,
        vec![
            ("first".into(), false),
            ("second".into(), false),
            ("third".into(), false),
            ("only in the original".into(), false)
        ]
    );
    // The fork's model is sent the copied turns and its own, nothing of the original's after.
    let last = scratch.requests().last().unwrap().clone();
    let fork_request = scratch
        .requests()
        .into_iter()
        .find(|r| r.to_string().contains("only in the fork"))
        .unwrap();
    assert!(!fork_request.to_string().contains("third"));
    assert!(last.to_string().contains("third"));
    daemon.close().await;
}

/// Files the kill rounds write: enough that a rewind takes a while to put them back.
const KILL_FILES: usize = 120;

#[tokio::test]
async fn a_rewind_killed_at_any_moment_is_whole_after_the_next_start() {
    let scratch = Scratch::new();
    let writes: Vec<(&str, Value)> = (0..KILL_FILES)
        .map(|i| {
            (
                "write_file",
                json!({"path": format!("f{i:03}.txt"), "content": format!("changed {i}\n").repeat(50)}),
            )
        })
        .collect();
    for i in 0..KILL_FILES {
        std::fs::write(
            scratch.workspace().join(format!("f{i:03}.txt")),
            format!("original {i}\n"),
        )
        .unwrap();
    }
    let original: Vec<Option<String>> = (0..KILL_FILES)
        .map(|i| read(&scratch, &format!("f{i:03}.txt")))
        .collect();
    let rounds: u64 = 10;
    let mut outcomes = Vec::new();
    for round in 0..rounds {
        // Each round makes the changes again (a fresh turn) and rewinds them, killed after a
        // delay that moves across the rewind's duration from round to round.
        let (mut daemon, session) =
            daemon(&scratch, json!([calls(writes.clone()), {"text": "Wrote."}])).await;
        let message = turn(&mut daemon, &session, "change them").await;
        let changed: Vec<Option<String>> = (0..KILL_FILES)
            .map(|i| read(&scratch, &format!("f{i:03}.txt")))
            .collect();
        assert_ne!(changed, original);
        let delay = std::time::Duration::from_millis(rand_delay(round));
        let params =
            serde_json::to_value(rewind(&session, &message, RewindRestore::Both, false)).unwrap();
        let request = daemon.conn.request(
            <SessionRewind as sidechat::protocol::Request>::METHOD,
            params,
        );
        let _ = tokio::time::timeout(delay, request).await;
        daemon.process().kill().await.unwrap();
        drop(daemon);
        let open_journals: i64 = rusqlite::Connection::open(scratch.db())
            .unwrap()
            .query_row(
                "SELECT COUNT(*) FROM rewinds WHERE finished_at IS NULL",
                [],
                |r| r.get(0),
            )
            .unwrap();

        let after = Daemon::start(&scratch.db(), Options::default()).await;
        // The first request answered after the handshake waits for the start-up repairs.
        let texts = user_texts(&after, &session).await;
        let now: Vec<Option<String>> = (0..KILL_FILES)
            .map(|i| read(&scratch, &format!("f{i:03}.txt")))
            .collect();
        let whole = if now == original {
            assert_eq!(texts, vec![("change them".into(), true)], "round {round}");
            match open_journals {
                0 => "done before the kill",
                _ => "finished on the next start",
            }
        } else {
            assert_eq!(now, changed, "round {round}: a rewind left half done");
            assert_eq!(texts, vec![("change them".into(), false)], "round {round}");
            assert_eq!(open_journals, 0, "round {round}");
            // Not started: finish it now, so the next round starts from the originals.
            after
                .call::<SessionRewind>(rewind(&session, &message, RewindRestore::Both, false))
                .await;
            "not started"
        };
        outcomes.push(whole);
        after.close().await;
    }
    // Printed for the record: which rounds were cut before the journal and which after.
    eprintln!("kill rounds: {outcomes:?}");
}

/// A delay between 0 and 400 ms, different each round: from before the journal is written to
/// after the last file is back.
fn rand_delay(round: u64) -> u64 {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() as u64)
        .unwrap_or(0);
    (seed.wrapping_mul(31).wrapping_add(round * 37)) % 400
}

/// The text of the note a command left, the newest entry of the transcript.
async fn command_note(daemon: &Daemon, session: &str, typed: &str) -> String {
    let sent = daemon.send(session, typed).await;
    assert_eq!(sent.run_id, None, "{typed} starts no run");
    let transcript = daemon.transcript(session).await;
    let last = transcript["entries"].as_array().unwrap().last().unwrap();
    assert_eq!(last["role"], "note", "{typed}: {last}");
    last["blocks"][0]["text"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn undo_rewind_and_fork_commands() {
    let scratch = Scratch::new();
    let (mut daemon, session) = daemon(
        &scratch,
        json!([
            calls(vec![write("a.txt", "one\n")]),
            {"text": "Wrote."},
            calls(vec![edit("a.txt", "one", "two"), write("b.txt", "b\n")]),
            {"text": "Edited."},
            {"text": "Nothing to change."},
        ]),
    )
    .await;
    turn(&mut daemon, &session, "first").await;
    turn(&mut daemon, &session, "second").await;
    turn(&mut daemon, &session, "third").await;
    assert_eq!(
        command_note(&daemon, &session, "/rewind").await,
        "Turns (type /rewind <n> to take back the last n):\n   1  third — no files changed\n   2  second — a.txt, b.txt\n   3  first — a.txt"
    );
    assert_eq!(
        command_note(&daemon, &session, "/undo").await,
        // The turn, its answer and the note of the listing after them.
        "Took back the last turn (3 messages)."
    );
    assert_eq!(
        command_note(&daemon, &session, "/rewind 1").await,
        "Took back the last turn (5 messages).\n  restored a.txt\n  removed b.txt"
    );
    assert_eq!(
        (read(&scratch, "a.txt"), read(&scratch, "b.txt")),
        (Some("one\n".into()), None)
    );
    let refused = daemon
        .try_call::<sidechat::protocol::ChatSend>(crate::harness::say(&session, "/rewind 5"))
        .await
        .unwrap_err();
    assert_eq!(
        (refused.code, refused.message),
        (
            -32602,
            "invalid params: the session has 1 turns to take back, not 5".to_string()
        )
    );

    let forked = command_note(&daemon, &session, "/fork").await;
    let fork_id = forked
        .strip_prefix("Forked into session ")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap()
        .to_string();
    let fork = daemon.call::<SessionGet>(sid(&fork_id)).await;
    assert_eq!(fork.forked_from, Some(session.clone()));
    assert_eq!(
        user_texts(&daemon, &fork_id).await,
        vec![("first".into(), false)]
    );
    daemon.close().await;
}
