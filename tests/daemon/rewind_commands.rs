//! Rewinds of what commands and sub-agents changed: a `run_command` in a git work tree is
//! snapshotted before and after (in sidechat's own object store, never the user's `.git`), a
//! delegated task's writes belong to the parent's turn, and a dry run lists what a rewind
//! would put back without changing anything.

use std::collections::BTreeMap;
use std::path::Path;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sidechat::protocol::{
    RewindRestore, RewoundFile, SessionRewind, SessionRewindParams, SessionRewindResult,
    SkippedFile,
};

use crate::harness::{Daemon, Options, Scratch, env, session};
use crate::upstream::{Reply, start};

/// Commands run outside the sandbox (which this test does not need) and without asking.
pub(crate) const CONFIG: &str = "[sandbox]\nenabled = false\n[permissions]\nallow = [\"write_file\", \"edit_file\", \"run_command\", \"delegate\"]\n";

pub(crate) fn rewind(session: &str, message: &str, dry_run: bool) -> SessionRewindParams {
    SessionRewindParams {
        session_id: session.into(),
        message_id: message.into(),
        restore: RewindRestore::Both,
        force: false,
        dry_run,
    }
}

pub(crate) fn restored(path: &str, removed: bool) -> RewoundFile {
    RewoundFile {
        path: path.into(),
        removed,
    }
}

fn usage() -> Value {
    json!({"choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": 10}})
}

pub(crate) fn says(text: &str) -> Reply {
    Reply::sse(&[
        json!({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        usage(),
    ])
}

pub(crate) fn call(id: &str, name: &str, input: Value) -> Reply {
    let call = json!({"index": 0, "id": id, "type": "function",
                      "function": {"name": name, "arguments": input.to_string()}});
    Reply::sse(&[
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": null}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
        usage(),
    ])
}

pub(crate) fn git(dir: &Path, args: &[&str]) {
    let status = std::process::Command::new("git")
        .args(["-c", "user.name=Test", "-c", "user.email=test@example.com"])
        .args(args)
        .current_dir(dir)
        .env("HOME", dir)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("git runs");
    assert!(status.success(), "git {args:?}");
}

/// Every file under `dir` with its bytes: to compare a folder byte for byte.
pub(crate) fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(folder) = stack.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let name = path.strip_prefix(dir).unwrap().display().to_string();
                files.insert(name, std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

pub(crate) fn read(scratch: &Scratch, path: &str) -> Option<String> {
    std::fs::read_to_string(scratch.workspace().join(path)).ok()
}

/// Sends `text` and waits for its run to end; the user message's id.
pub(crate) async fn turn(daemon: &mut Daemon, session: &str, text: &str) -> String {
    let sent = daemon.send(session, text).await;
    daemon.until_finished().await;
    sent.message_id.expect("a user message")
}

#[tokio::test]
async fn a_command_in_a_git_work_tree_is_rewound_and_the_users_git_is_untouched() {
    let scratch = Scratch::new();
    let ws = scratch.workspace();
    git(&ws, &["init", "-q"]);
    std::fs::write(ws.join(".gitignore"), "*.log\n").unwrap();
    std::fs::write(ws.join("tracked.txt"), "one\n").unwrap();
    std::fs::write(ws.join("gone.txt"), "doomed\n").unwrap();
    git(&ws, &["add", "."]);
    git(&ws, &["commit", "-q", "-m", "start"]);
    std::fs::write(ws.join("untracked.txt"), "mine\n").unwrap();
    std::fs::write(ws.join("kept.log"), "log\n").unwrap();
    let users_git = tree(&ws.join(".git"));

    scratch.write_config(CONFIG);
    let command = "sed -i 's/one/two/' tracked.txt && echo new > created.txt && rm gone.txt \
                   && echo more >> untracked.txt && echo later >> kept.log";
    let upstream = start(vec![
        call("call_cmd", "run_command", json!({"command": command})),
        says("Changed."),
    ]);
    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(env(&upstream.url))).await;
    let session = session(&daemon, &scratch).await;
    let message = turn(&mut daemon, &session, "change things").await;
    assert_eq!(
        [
            "tracked.txt",
            "created.txt",
            "gone.txt",
            "untracked.txt",
            "kept.log"
        ]
        .map(|p| read(&scratch, p)),
        [
            Some("two\n".into()),
            Some("new\n".into()),
            None,
            Some("mine\nmore\n".into()),
            Some("log\nlater\n".into())
        ]
    );

    // The dry run lists what the rewind does, and changes nothing.
    let planned = daemon
        .call::<SessionRewind>(rewind(&session, &message, true))
        .await;
    let expected_files = vec![
        restored("created.txt", true),
        restored("gone.txt", false),
        restored("tracked.txt", false),
        restored("untracked.txt", false),
    ];
    assert_eq!(
        planned,
        SessionRewindResult {
            restored: expected_files.clone(),
            skipped: vec![],
            rewound_messages: 4,
        }
    );
    assert_eq!(read(&scratch, "created.txt"), Some("new\n".into()));

    let done = daemon
        .call::<SessionRewind>(rewind(&session, &message, false))
        .await;
    assert_eq!(
        done,
        SessionRewindResult {
            restored: expected_files,
            skipped: vec![],
            rewound_messages: 4,
        }
    );
    // An ignored file is not the workspace's to put back.
    assert_eq!(
        [
            "tracked.txt",
            "created.txt",
            "gone.txt",
            "untracked.txt",
            "kept.log"
        ]
        .map(|p| read(&scratch, p)),
        [
            Some("one\n".into()),
            None,
            Some("doomed\n".into()),
            Some("mine\n".into()),
            Some("log\nlater\n".into())
        ]
    );
    assert!(
        tree(&ws.join(".git")) == users_git,
        "the user's .git changed"
    );
    daemon.close().await;
}

#[tokio::test]
async fn a_sub_agents_writes_are_rewound_with_the_parents_turn() {
    let scratch = Scratch::new();
    std::fs::write(scratch.workspace().join("shared.txt"), "before\n").unwrap();
    scratch.write_config(CONFIG);
    let upstream = start(vec![
        call(
            "call_d",
            "delegate",
            json!({"task": "Write the files", "tools": "all"}),
        ),
        call(
            "call_w",
            "write_file",
            json!({"path": "child.txt", "content": "from the child\n"}),
        ),
        call(
            "call_e",
            "edit_file",
            json!({"path": "shared.txt", "old_string": "before", "new_string": "after"}),
        ),
        says("Written."),
        says("The sub-agent wrote them."),
    ]);
    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(env(&upstream.url))).await;
    let parent = session(&daemon, &scratch).await;
    let message = daemon
        .send(&parent, "Have them written.")
        .await
        .message_id
        .unwrap();
    // The parent's run ends after the child's.
    loop {
        let event = daemon.next_event().await;
        if event.session_id == parent
            && matches!(event.event, sidechat::protocol::Event::RunFinished { .. })
        {
            break;
        }
    }
    assert_eq!(
        (read(&scratch, "child.txt"), read(&scratch, "shared.txt")),
        (Some("from the child\n".into()), Some("after\n".into()))
    );

    // Someone edits the shared file afterwards: the dry run names it as a conflict.
    std::fs::write(scratch.workspace().join("shared.txt"), "user's\n").unwrap();
    let planned = daemon
        .call::<SessionRewind>(rewind(&parent, &message, true))
        .await;
    assert_eq!(
        planned,
        SessionRewindResult {
            restored: vec![restored("child.txt", true)],
            skipped: vec![SkippedFile {
                path: "shared.txt".into(),
                reason: "changed since the session last wrote it; a forced rewind overwrites it"
                    .into()
            }],
            rewound_messages: 4,
        }
    );
    std::fs::write(scratch.workspace().join("shared.txt"), "after\n").unwrap();
    let done = daemon
        .call::<SessionRewind>(rewind(&parent, &message, false))
        .await;
    assert_eq!(
        done.restored,
        vec![restored("child.txt", true), restored("shared.txt", false)]
    );
    assert_eq!(
        (read(&scratch, "child.txt"), read(&scratch, "shared.txt")),
        (None, Some("before\n".into()))
    );
    daemon.close().await;
}

/// An editor's rewind picker asks a dry run for every turn at once: none of them may find the
/// session busy with another (a dry run changes nothing, so it holds no claim on the session).
#[tokio::test]
async fn dry_runs_asked_at_once_all_answer() {
    let scratch = Scratch::new();
    scratch.write_config(CONFIG);
    let upstream = start(vec![
        call(
            "call_a",
            "write_file",
            json!({"path": "a.md", "content": "one\n"}),
        ),
        says("Wrote a."),
        call(
            "call_b",
            "write_file",
            json!({"path": "b.md", "content": "two\n"}),
        ),
        says("Wrote b."),
    ]);
    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(env(&upstream.url))).await;
    let session = session(&daemon, &scratch).await;
    let first = turn(&mut daemon, &session, "create a.md").await;
    let second = turn(&mut daemon, &session, "create b.md").await;

    let asked: Vec<&String> = [&first, &second].repeat(8);
    let answers = futures::future::join_all(
        asked
            .iter()
            .map(|message| daemon.try_call::<SessionRewind>(rewind(&session, message, true))),
    )
    .await;
    let to_first = SessionRewindResult {
        restored: vec![restored("a.md", true), restored("b.md", true)],
        skipped: vec![],
        rewound_messages: 8,
    };
    let to_second = SessionRewindResult {
        restored: vec![restored("b.md", true)],
        skipped: vec![],
        rewound_messages: 4,
    };
    let expected: Vec<_> = asked
        .iter()
        .map(|m| {
            Ok(if **m == first {
                to_first.clone()
            } else {
                to_second.clone()
            })
        })
        .collect();
    assert_eq!(answers, expected);
    assert_eq!(
        (read(&scratch, "a.md"), read(&scratch, "b.md")),
        (Some("one\n".into()), Some("two\n".into())),
        "a dry run changes nothing"
    );
    daemon.close().await;
}
