//! Carry-over notes: what a new context opens with, how long it stays, and what it may hold.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sidechat::protocol::{
    ChatSend, NoteDelete, NoteDeleteParams, SessionBudget, SessionCreateParams, SessionGet,
};

use crate::harness::{Daemon, Options, Scratch, json_of, say, sid};
use crate::long_context::{WINDOW, carry_over_notes, compactions, env, text_reply, user_texts};
use crate::upstream::{Reply, start};

/// A made-up private key block, as a user might paste it.
const PEM: &str = "-----BEGIN RSA PRIVATE KEY-----
Rl0MR48pQ8np3bWRgj5NNdXrQ0nmSgmF/krFuA8a4Qrb7KkwvWxtHNTdVLntlpqj
pvPS3/oIUjYMiA4khArd8HbHkYONqJweZVwEd+H2h5Cd8dHF6nPaDgpCdwwPUS9O
HTy/jtOE19eg3o8ju0rkcvDIdQnrr/ewkSRjJg0aFGLcYHQZxJ93kMJw88LZyqee
PPo4ehfXhNOzs1JIuYc2a6DOXMzhabvIt2Pmzo8PBC3qdjNHbHF5jjs+wlyWKrcM
Ex6cRpi0YdtA3ItKKPKriObgfgueK6/Rg8sKQmtrcABspCXxqDNhJvBjtVf1OFcZ
xhqrJOKme4fZTKjOLe56fy9ZZ/yUV11f+nW7VOXUMTSRj0MozYwEBVGlwZ99ERqw
-----END RSA PRIVATE KEY-----";

/// A made-up AWS access key id.
const AWS: &str = "AKIAIOSFODNN7EXAMPLE";

/// The parts of [`PEM`] and [`AWS`] in `text`: the key block's header or footer, the start of
/// any line of its body, or the access key's prefix or any six of its other characters.
fn leaks(text: &str) -> Vec<String> {
    let mut found: Vec<String> = ["BEGIN RSA", "PRIVATE KEY", "AKIA"]
        .iter()
        .filter(|f| text.contains(*f))
        .map(|f| f.to_string())
        .collect();
    let body = PEM.lines().filter(|l| !l.starts_with("-----"));
    let aws: Vec<char> = AWS[4..].chars().collect();
    let fragments = body
        .flat_map(|line| {
            let chars: Vec<char> = line.chars().collect();
            chars
                .windows(8)
                .map(|w| w.iter().collect::<String>())
                .collect::<Vec<_>>()
        })
        .chain(aws.windows(6).map(|w| w.iter().collect::<String>()));
    found.extend(fragments.filter(|f| text.contains(f.as_str())).take(1));
    found
}

/// The summariser fails, so the note is copied: each part is cut at 400 characters, and a key
/// block that starts before that cut and an access key that straddles it leave nothing, in the
/// stored note nor in the request that sends it.
#[tokio::test]
async fn a_copied_note_keeps_nothing_of_a_key_across_its_cut() {
    let filler = "y".repeat(394);
    let upstream = start(vec![
        text_reply(&format!("{filler} {AWS} is the access key."), 100, 9),
        Reply::status(500, r#"{"error":{"message":"overloaded"}}"#),
        text_reply("Restarted.", 100, 3),
    ]);
    let scratch = Scratch::new();
    let mut daemon =
        Daemon::start(&scratch.db(), Options::with_env(env(&upstream.url, WINDOW))).await;
    let session = daemon.create_session(SessionCreateParams::default()).await;
    daemon
        .send(
            &session,
            &format!("Deploy with this key:\n{PEM}\nthen restart."),
        )
        .await;
    daemon.until_finished().await;
    daemon.call::<ChatSend>(say(&session, "/new-context")).await;
    let notes = carry_over_notes(&daemon.transcript(&session).await);
    let copied =
        format!("Task: Deploy with this key:\n[redacted]\nthen restart.\nLast answer: {filler}…");
    assert_eq!(
        notes.iter().map(|n| n.1.clone()).collect::<Vec<_>>(),
        vec![copied.clone()]
    );
    daemon.send(&session, "Restart it.").await;
    daemon.until_finished().await;
    let requests = upstream.bodies();
    assert_eq!(requests.len(), 3);
    assert_eq!(
        user_texts(&requests[2]),
        vec![format!(
            "Notes carried over from an earlier conversation:\n{copied}\n\nRestart it."
        )]
    );
    assert_eq!(leaks(&requests[2].to_string()), Vec::<String>::new());
    daemon.close().await;
}

/// The texts of a request's first message, in order (the OpenAI driver joins a message's texts
/// with a blank line).
fn first_texts(request: &Value) -> Vec<String> {
    match &request["messages"][0]["content"] {
        Value::String(text) => vec![text.clone()],
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    }
}

/// A carry-over note is sent as the first block of every request of its context, after a
/// compaction by summary and after one by drop (neither folds it in), until it is deleted.
#[tokio::test]
async fn a_carry_over_note_stays_first_through_compactions_until_deleted() {
    let note = "NOTE: the user counts upwards.";
    let upstream = start(vec![
        text_reply("1.", 100, 3),
        text_reply(note, 100, 9),
        text_reply("2.", 100, 3),
        text_reply("SUMMARY: they counted to two.", 100, 9),
        text_reply("3.", 100, 3),
        Reply::status(500, r#"{"error":{"message":"overloaded"}}"#),
        text_reply("4.", 100, 3),
        text_reply("5.", 100, 3),
    ]);
    let scratch = Scratch::new();
    let mut daemon =
        Daemon::start(&scratch.db(), Options::with_env(env(&upstream.url, WINDOW))).await;
    let session = daemon.create_session(SessionCreateParams::default()).await;
    let command = |text: &str| say(&session, text);
    daemon.send(&session, "Count: one").await;
    daemon.until_finished().await;
    daemon.call::<ChatSend>(command("/new-context")).await;
    daemon.send(&session, "two").await;
    daemon.until_finished().await;
    let carried = format!("Notes carried over from an earlier conversation:\n{note}");

    // By summary: the summariser is not shown the note, and the note stays first.
    daemon.call::<ChatSend>(command("/compact")).await;
    daemon.send(&session, "three").await;
    daemon.until_finished().await;
    let requests = upstream.bodies();
    assert!(!requests[3].to_string().contains(note), "{}", requests[3]);
    assert_eq!(
        first_texts(&requests[4]),
        vec![format!(
            "{carried}\n\nSummary of the earlier conversation (2 messages):\n\
             SUMMARY: they counted to two.\n\nthree"
        )]
    );

    // By drop (the summariser fails): the note stays first, before the marker.
    daemon.call::<ChatSend>(command("/compact")).await;
    daemon.send(&session, "four").await;
    daemon.until_finished().await;
    let requests = upstream.bodies();
    assert_eq!(
        first_texts(&requests[6]),
        vec![format!(
            "{carried}\n\n[4 earlier messages were left out here to fit the context window.]\n\nfour"
        )]
    );
    // The budget counts it as part of what stands for the earlier turns.
    let budget = json_of(daemon.call::<SessionBudget>(sid(&session)).await);
    assert!(
        budget["snapshot"]["summaryTokens"].as_u64() > Some(20),
        "{budget}"
    );

    // Deleted: gone from the next request.
    let (note_id, _) = carry_over_notes(&daemon.transcript(&session).await)[0].clone();
    daemon
        .call::<NoteDelete>(NoteDeleteParams {
            message_id: note_id,
        })
        .await;
    daemon.send(&session, "five").await;
    daemon.until_finished().await;
    let requests = upstream.bodies();
    assert_eq!(requests.len(), 8);
    assert_eq!(
        first_texts(&requests[7]),
        vec![
            "[4 earlier messages were left out here to fit the context window.]\n\nfour"
                .to_string()
        ]
    );
    assert!(!requests[7].to_string().contains("carried over"));
    daemon.close().await;
}

/// Moves every message of the session `hours` into the past, as if the conversation had been
/// idle that long (rather than waiting).
fn age_messages(scratch: &Scratch, session: &str, hours: i64) {
    let db = rusqlite::Connection::open(scratch.db()).unwrap();
    db.busy_timeout(std::time::Duration::from_secs(10)).unwrap();
    db.execute(
        "UPDATE messages SET created_at = created_at - ?2 WHERE session_id = ?1",
        rusqlite::params![session, hours * 3_600_000],
    )
    .unwrap();
}

/// Without a setting, a conversation idle for three hours starts a new context with a
/// carry-over note on its next turn; idle for less, it goes on. `off` stays available.
#[tokio::test]
async fn rollover_is_three_hours_by_default() {
    let note = "NOTE: the user counts.";
    let upstream = start(vec![
        text_reply("1.", 100, 3),
        text_reply("2.", 100, 3),
        text_reply(note, 100, 9),
        text_reply("3.", 100, 3),
    ]);
    let scratch = Scratch::new();
    let mut daemon =
        Daemon::start(&scratch.db(), Options::with_env(env(&upstream.url, WINDOW))).await;
    let session = daemon.create_session(SessionCreateParams::default()).await;
    let got = daemon.call::<SessionGet>(sid(&session)).await;
    assert_eq!(got.rollover.as_deref(), Some("3h"));
    daemon.send(&session, "one").await;
    daemon.until_finished().await;
    age_messages(&scratch, &session, 2);
    daemon.send(&session, "two").await;
    let events = daemon.until_finished().await;
    assert_eq!(compactions(&events), Vec::<Value>::new());
    age_messages(&scratch, &session, 3);
    daemon.send(&session, "three").await;
    let events = daemon.until_finished().await;
    let compaction = &compactions(&events)[0];
    assert_eq!(
        [&compaction["method"], &compaction["reason"]],
        [&json!("carryOver"), &json!("idle")]
    );
    let requests = upstream.bodies();
    assert_eq!(requests.len(), 4);
    assert_eq!(
        user_texts(&requests[3]),
        vec![format!(
            "Notes carried over from an earlier conversation:\n{note}\n\nthree"
        )]
    );
    let off = daemon
        .create_session(SessionCreateParams {
            rollover: Some("off".into()),
            ..SessionCreateParams::default()
        })
        .await;
    let got = daemon.call::<SessionGet>(sid(&off)).await;
    assert_eq!(got.rollover, None);
    daemon.close().await;

    // Off for every new session, from the environment (or `[defaults] rollover`).
    let mut env = env(&upstream.url, WINDOW);
    env.push(("SIDECHAT_ROLLOVER", "off".into()));
    let daemon = Daemon::start(&scratch.db(), Options::with_env(env)).await;
    let session = daemon.create_session(SessionCreateParams::default()).await;
    let got = daemon.call::<SessionGet>(sid(&session)).await;
    assert_eq!(got.rollover, None);
    daemon.close().await;
}

/// Runs `git` in `dir`, as a test sets up a repository.
fn git(dir: &std::path::Path, args: &[&str]) -> String {
    let output = std::process::Command::new("git")
        .args(["-c", "user.name=Test", "-c", "user.email=test@example.com"])
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .expect("git runs");
    assert!(output.status.success(), "git {args:?}: {output:?}");
    String::from_utf8(output.stdout).unwrap()
}

/// A note made in a git work tree ends with where the work stands, read by the daemon: the
/// branch, the last commit, the uncommitted files (twenty named, then a count).
#[tokio::test]
async fn a_note_made_in_a_git_work_tree_ends_with_where_the_work_stands() {
    let note = "NOTE: the user writes notes.";
    let upstream = start(vec![text_reply("1.", 100, 3), text_reply(note, 100, 9)]);
    let scratch = Scratch::new();
    let root = scratch.workspace();
    git(&root, &["init", "-q", "-b", "feature/notes"]);
    std::fs::write(root.join("README.md"), "Notes.\n").unwrap();
    git(&root, &["add", "README.md"]);
    git(&root, &["commit", "-q", "-m", "Start the notes"]);
    std::fs::write(root.join("README.md"), "Notes, changed.\n").unwrap();
    for i in 1..=23 {
        std::fs::write(root.join(format!("f{i:02}.txt")), "x").unwrap();
    }
    let status_before = git(&root, &["status", "--porcelain"]);
    let mut daemon =
        Daemon::start(&scratch.db(), Options::with_env(env(&upstream.url, WINDOW))).await;
    let session = daemon
        .create_session(SessionCreateParams {
            workspace_root: Some(root.display().to_string()),
            ..SessionCreateParams::default()
        })
        .await;
    daemon.send(&session, "one").await;
    daemon.until_finished().await;
    daemon.call::<ChatSend>(say(&session, "/new-context")).await;
    let hash = git(&root, &["rev-parse", "--short", "HEAD"]);
    let named: Vec<String> = std::iter::once("README.md".to_string())
        .chain((1..=19).map(|i| format!("f{i:02}.txt")))
        .collect();
    let notes = carry_over_notes(&daemon.transcript(&session).await);
    assert_eq!(
        notes.iter().map(|n| n.1.clone()).collect::<Vec<_>>(),
        vec![format!(
            "{note}\n\nWhere the work stands (git):\n- branch: feature/notes\n\
             - last commit: {} Start the notes\n- uncommitted files (24): {} and 4 more",
            hash.trim(),
            named.join(", ")
        )]
    );
    // Read, not changed.
    assert_eq!(git(&root, &["status", "--porcelain"]), status_before);
    daemon.close().await;
}
