//! The files commands change where they are not snapshotted in git: outside a git work tree,
//! and in one over `[undo] max_snapshot_files`, they are found by a scan of sizes and times,
//! listed marked not restorable, and left alone (and said so) by a rewind. And commands of two
//! sessions running at once in one work tree each keep only their own changes.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sidechat::protocol::{Event, SessionRewind, SessionRewindResult, SkippedFile};

use crate::harness::{Daemon, Options, Scratch, env, session};
use crate::rewind_commands::{CONFIG, call, git, read, restored, rewind, says, turn};
use crate::upstream::start;

/// Why a rewind leaves a file a command changed outside git.
const NOT_RESTORABLE: &str = "changed by a command outside git: cannot be restored";

fn not_restorable(path: &str) -> SkippedFile {
    SkippedFile {
        path: path.into(),
        reason: NOT_RESTORABLE.into(),
    }
}

/// The text of the note `typed` (a command that starts no run) left: the newest entry.
async fn command_note(daemon: &Daemon, session: &str, typed: &str) -> String {
    let sent = daemon.send(session, typed).await;
    assert_eq!(sent.run_id, None, "{typed} starts no run");
    let transcript = daemon.transcript(session).await;
    let last = transcript["entries"].as_array().unwrap().last().unwrap();
    assert_eq!(last["role"], "note", "{typed}: {last}");
    last["blocks"][0]["text"].as_str().unwrap().to_string()
}

/// The texts of the session's notices.
async fn notices(daemon: &Daemon, session: &str) -> Vec<String> {
    let transcript = daemon.transcript(session).await;
    transcript["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["role"] == "notice")
        .map(|e| e["blocks"][0]["text"].as_str().unwrap().to_string())
        .collect()
}

fn command(id: &str, line: &str) -> crate::upstream::Reply {
    call(id, "run_command", json!({"command": line}))
}

#[tokio::test]
async fn a_command_outside_git_lists_its_files_as_not_restorable_and_a_rewind_leaves_them() {
    let scratch = Scratch::new();
    let ws = scratch.workspace();
    std::fs::write(ws.join(".gitignore"), "*.log\n").unwrap();
    std::fs::write(ws.join("a.txt"), "one\n").unwrap();
    std::fs::write(ws.join("gone.txt"), "doomed\n").unwrap();
    std::fs::write(ws.join("same.txt"), "untouched\n").unwrap();
    std::fs::write(ws.join("kept.log"), "log\n").unwrap();
    std::fs::write(ws.join(".env"), "A=1\n").unwrap();
    scratch.write_config(CONFIG);
    let line = "sed -i 's/one/two/' a.txt && printf 'new\\n' > sub-made.txt && rm gone.txt \
                && echo later >> kept.log && echo B=2 >> .env";
    let upstream = start(vec![command("call_cmd", line), says("Changed.")]);
    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(env(&upstream.url))).await;
    let session = session(&daemon, &scratch).await;
    let message = turn(&mut daemon, &session, "change things").await;
    let after: [Option<String>; 5] =
        ["a.txt", "sub-made.txt", "gone.txt", "kept.log", ".env"].map(|p| read(&scratch, p));
    assert_eq!(
        after,
        [
            Some("two\n".into()),
            Some("new\n".into()),
            None,
            Some("log\nlater\n".into()),
            Some("A=1\nB=2\n".into())
        ]
    );

    // Listed with the turn, marked; the ignored log and the untouched file are not.
    assert_eq!(
        command_note(&daemon, &session, "/rewind").await,
        "Turns (type /rewind <n> to take back the last n):\n   1  change things — .env (not restorable), a.txt (not restorable), gone.txt (not restorable), sub-made.txt (not restorable)"
    );
    let left = vec![
        not_restorable(".env"),
        not_restorable("a.txt"),
        not_restorable("gone.txt"),
        not_restorable("sub-made.txt"),
    ];
    // The turn's four entries and the listing's note.
    let expected = SessionRewindResult {
        restored: vec![],
        skipped: left.clone(),
        rewound_messages: 5,
    };
    let planned = daemon
        .call::<SessionRewind>(rewind(&session, &message, true))
        .await;
    assert_eq!(planned, expected);
    let done = daemon
        .call::<SessionRewind>(rewind(&session, &message, false))
        .await;
    assert_eq!(done, expected);
    let events = daemon
        .events_until(|e| matches!(e, Event::Rewound { .. }))
        .await;
    assert_eq!(
        crate::harness::json_of(&events.last().unwrap().event)["skipped"],
        json!(left)
    );
    // Nothing was touched.
    assert_eq!(
        ["a.txt", "sub-made.txt", "gone.txt", "kept.log", ".env"].map(|p| read(&scratch, p)),
        after
    );
    daemon.close().await;
}

#[tokio::test]
async fn a_work_tree_over_the_cap_is_said_once_and_its_commands_are_treated_as_outside_git() {
    let scratch = Scratch::new();
    let ws = scratch.workspace();
    git(&ws, &["init", "-q"]);
    for name in ["a.txt", "b.txt", "c.txt", "d.txt"] {
        std::fs::write(ws.join(name), "one\n").unwrap();
    }
    scratch.write_config(&format!("{CONFIG}[undo]\nmax_snapshot_files = 3\n"));
    let upstream = start(vec![
        command("call_1", "sed -i 's/one/two/' a.txt"),
        says("Changed a."),
        command("call_2", "sed -i 's/one/two/' b.txt"),
        says("Changed b."),
    ]);
    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(env(&upstream.url))).await;
    let session = session(&daemon, &scratch).await;
    let first = turn(&mut daemon, &session, "change a").await;
    turn(&mut daemon, &session, "change b").await;
    assert_eq!(
        notices(&daemon, &session).await,
        vec![
            "The workspace has more than 3 files: the files commands change in it are listed but not kept, so a rewind cannot put them back."
                .to_string()
        ]
    );
    let done = daemon
        .call::<SessionRewind>(rewind(&session, &first, false))
        .await;
    assert_eq!(
        done,
        SessionRewindResult {
            restored: vec![],
            skipped: vec![not_restorable("a.txt"), not_restorable("b.txt")],
            // Each turn's four entries, and the notice.
            rewound_messages: 9,
        }
    );
    assert_eq!(
        (read(&scratch, "a.txt"), read(&scratch, "b.txt")),
        (Some("two\n".into()), Some("two\n".into()))
    );
    daemon.close().await;
}

/// Waits for the run of `session` to finish, whatever other sessions do meanwhile.
async fn finished(daemon: &mut Daemon, session: &str) {
    loop {
        let event = daemon.next_event().await;
        if event.session_id == session && matches!(event.event, Event::RunFinished { .. }) {
            return;
        }
    }
}

#[tokio::test]
async fn commands_of_two_sessions_running_at_once_in_one_work_tree_each_keep_their_own() {
    let scratch = Scratch::new();
    let ws = scratch.workspace();
    git(&ws, &["init", "-q"]);
    std::fs::write(ws.join("start.txt"), "start\n").unwrap();
    let gate = ws.parent().unwrap().join("gate");
    let made = std::process::Command::new("mkfifo")
        .arg(&gate)
        .status()
        .unwrap();
    assert!(made.success());
    scratch.write_config(CONFIG);
    // Session A's command waits on the gate; session B's runs whole meanwhile, and only then
    // does A's write its file: A's snapshot after it sees both files.
    let upstream = start(vec![
        command("call_a", "read line < ../gate && echo a > a.txt"),
        command("call_b", "echo b > b.txt"),
        says("B done."),
        says("A done."),
    ]);
    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(env(&upstream.url))).await;
    let a = session(&daemon, &scratch).await;
    let b = session(&daemon, &scratch).await;
    let a_message = daemon.send(&a, "write a").await.message_id.unwrap();
    // Opening the gate for writing returns once A's command opened it to read: it runs.
    let opening = gate.clone();
    let writer = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        tokio::task::spawn_blocking(move || {
            std::fs::OpenOptions::new()
                .write(true)
                .open(opening)
                .unwrap()
        }),
    )
    .await
    .expect("A's command never started")
    .unwrap();
    let b_message = daemon.send(&b, "write b").await.message_id.unwrap();
    finished(&mut daemon, &b).await;
    {
        use std::io::Write;
        let mut writer = writer;
        writer.write_all(b"go\n").unwrap();
    }
    finished(&mut daemon, &a).await;
    assert_eq!(
        (read(&scratch, "a.txt"), read(&scratch, "b.txt")),
        (Some("a\n".into()), Some("b\n".into()))
    );

    let planned: Vec<Value> = vec![
        json!(
            daemon
                .call::<SessionRewind>(rewind(&a, &a_message, true))
                .await
        ),
        json!(
            daemon
                .call::<SessionRewind>(rewind(&b, &b_message, true))
                .await
        ),
    ];
    let only = |path: &str| SessionRewindResult {
        restored: vec![restored(path, true)],
        skipped: vec![],
        rewound_messages: 4,
    };
    assert_eq!(planned, vec![json!(only("a.txt")), json!(only("b.txt"))]);
    let done = daemon
        .call::<SessionRewind>(rewind(&a, &a_message, false))
        .await;
    assert_eq!(done, only("a.txt"));
    assert_eq!(
        (read(&scratch, "a.txt"), read(&scratch, "b.txt")),
        (None, Some("b\n".into()))
    );
    let done = daemon
        .call::<SessionRewind>(rewind(&b, &b_message, false))
        .await;
    assert_eq!(done, only("b.txt"));
    assert_eq!(
        (
            read(&scratch, "a.txt"),
            read(&scratch, "b.txt"),
            read(&scratch, "start.txt")
        ),
        (None, None, Some("start\n".into()))
    );
    daemon.close().await;
}
