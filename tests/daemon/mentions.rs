//! `@`-mentions: a file, a range of its lines or a folder named in a user message is attached
//! to it (stored with name, range, size and hash, and read by the model); what cannot be
//! attached stays as typed, with a notice saying why; an email address is text.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sidechat::protocol::ChatSend;

use crate::harness::{Daemon, Scratch, daemon_answering_done, last_message_texts, say};

fn sha256(bytes: &[u8]) -> String {
    sidechat::store::content_hash(bytes)
}

/// A workspace with `src/lib.rs` (three lines), `docs/` and a binary `logo.png`.
fn files(scratch: &Scratch) {
    let ws = scratch.workspace();
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::create_dir_all(ws.join("docs/api")).unwrap();
    std::fs::write(ws.join("src/lib.rs"), "fn a() {}\nfn b() {}\nfn c() {}\n").unwrap();
    std::fs::write(ws.join("docs/guide.md"), "# Guide\n").unwrap();
    std::fs::write(ws.join("docs/my notes.md"), "first\nsecond\n").unwrap();
    std::fs::write(ws.join("logo.png"), b"\x89PNG\r\n\x1a\n\x00\x00").unwrap();
    std::fs::write(scratch.dir.path().join("secret.txt"), "outside\n").unwrap();
}

/// The blocks of the session's last user message, and the texts of the notices after it.
async fn last_turn(daemon: &Daemon, session: &str) -> (Value, Vec<String>) {
    let transcript = daemon.transcript(session).await;
    let entries = transcript["entries"].as_array().unwrap();
    let user = entries.iter().rposition(|e| e["role"] == "user").unwrap();
    let notices = entries[user..]
        .iter()
        .filter(|e| e["role"] == "notice")
        .map(|e| e["blocks"][0]["text"].as_str().unwrap().to_string())
        .collect();
    (entries[user]["blocks"].clone(), notices)
}

#[tokio::test]
async fn a_file_a_range_and_a_folder_are_attached_for_the_model() {
    let scratch = Scratch::new();
    files(&scratch);
    let (mut daemon, session) = daemon_answering_done(&scratch).await;
    let typed =
        r#"Compare @src/lib.rs with @src/lib.rs:2-3, see @docs/ and @"docs/my notes.md":2."#;
    daemon.call::<ChatSend>(say(&session, typed)).await;
    daemon.until_finished().await;

    let lib = "fn a() {}\nfn b() {}\nfn c() {}\n";
    let listing = "api/\nguide.md\nmy notes.md";
    let notes = "first\nsecond\n";
    let (blocks, notices) = last_turn(&daemon, &session).await;
    assert_eq!(
        (blocks, notices),
        (
            json!([
                {"type": "text", "text": typed},
                {"type": "attachment", "name": "src/lib.rs",
                 "text": "     1\tfn a() {}\n     2\tfn b() {}\n     3\tfn c() {}",
                 "size": lib.len(), "hash": sha256(lib.as_bytes())},
                {"type": "attachment", "name": "src/lib.rs",
                 "text": "     2\tfn b() {}\n     3\tfn c() {}",
                 "range": {"start": 2, "end": 3},
                 "size": lib.len(), "hash": sha256(lib.as_bytes())},
                {"type": "attachment", "name": "docs/", "text": listing,
                 "size": listing.len(), "hash": sha256(listing.as_bytes())},
                {"type": "attachment", "name": "docs/my notes.md", "text": "     2\tsecond",
                 "range": {"start": 2, "end": 2},
                 "size": notes.len(), "hash": sha256(notes.as_bytes())},
            ]),
            vec![]
        )
    );
    assert_eq!(
        last_message_texts(&scratch),
        vec![
            typed.to_string(),
            "Attached src/lib.rs:\n     1\tfn a() {}\n     2\tfn b() {}\n     3\tfn c() {}"
                .to_string(),
            "Attached src/lib.rs (lines 2-3):\n     2\tfn b() {}\n     3\tfn c() {}".to_string(),
            format!("Attached docs/:\n{listing}"),
            "Attached docs/my notes.md (line 2):\n     2\tsecond".to_string(),
        ]
    );
    daemon.close().await;
}

#[tokio::test]
async fn missing_outside_and_binary_mentions_stay_as_typed_with_a_notice() {
    let scratch = Scratch::new();
    files(&scratch);
    let (mut daemon, session) = daemon_answering_done(&scratch).await;
    let typed = "Look at @src/gone.rs, @../secret.txt and @logo.png";
    daemon.call::<ChatSend>(say(&session, typed)).await;
    daemon.until_finished().await;
    let (blocks, notices) = last_turn(&daemon, &session).await;
    assert_eq!(
        (blocks, notices),
        (
            json!([{"type": "text", "text": typed}]),
            vec![
                "@src/gone.rs is left as typed: there is no such file or folder in the workspace"
                    .to_string(),
                "@../secret.txt is left as typed: it is outside the workspace, and mentions attach only files under the workspace root".to_string(),
                "@logo.png is left as typed: it is a binary file, not text".to_string(),
            ]
        )
    );
    assert_eq!(last_message_texts(&scratch), vec![typed.to_string()]);
    daemon.close().await;
}

#[tokio::test]
async fn an_email_address_and_a_name_that_is_no_path_are_text() {
    let scratch = Scratch::new();
    files(&scratch);
    // A file named like the address's domain: still no mention, the `@` is inside a word.
    std::fs::write(scratch.workspace().join("example.com"), "not attached\n").unwrap();
    let (mut daemon, session) = daemon_answering_done(&scratch).await;
    let typed = "Mail bob@example.com and ask @alice";
    daemon.call::<ChatSend>(say(&session, typed)).await;
    daemon.until_finished().await;
    let (blocks, notices) = last_turn(&daemon, &session).await;
    assert_eq!(
        (blocks, notices),
        (json!([{"type": "text", "text": typed}]), vec![])
    );
    daemon.close().await;
}

#[tokio::test]
async fn the_cap_comes_from_the_config_file() {
    let scratch = Scratch::new();
    files(&scratch);
    scratch.write_config("[mentions]\nmax_bytes = 16\n");
    let (mut daemon, session) = daemon_answering_done(&scratch).await;
    let typed = "@src/lib.rs:1 @src/lib.rs";
    daemon.call::<ChatSend>(say(&session, typed)).await;
    daemon.until_finished().await;
    let (blocks, notices) = last_turn(&daemon, &session).await;
    let lib = "fn a() {}\nfn b() {}\nfn c() {}\n";
    assert_eq!(
        (blocks, notices),
        (
            json!([
                {"type": "text", "text": typed},
                {"type": "attachment", "name": "src/lib.rs", "text": "     1\tfn a() {}",
                 "range": {"start": 1, "end": 1},
                 "size": lib.len(), "hash": sha256(lib.as_bytes())},
            ]),
            vec![
                "@src/lib.rs is left as typed: its 50 bytes would take this message's mentions past their cap of 16 bytes ([mentions] max_bytes)"
                    .to_string()
            ]
        )
    );
    daemon.close().await;
}
