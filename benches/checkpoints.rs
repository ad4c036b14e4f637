//! What checkpoints weigh: a session of many turns, each editing a few lines in each of several
//! files, and the bytes the kept contents take beside the bytes that changed.
//!
//! Run with `cargo bench --bench checkpoints` (a release build) for the shape: 1,000
//! turns of 10 files of 20 KB, each turn changing one line per file. Without `--bench`, as
//! under `cargo test --benches`, it runs 20 turns to check that it works.
//!
//! Figures: the bytes that changed (the edited lines, before and after), the bytes of kept
//! contents (`checkpoint_blobs`), their ratio, and the database file's growth.

use std::time::Instant;

use sidechat::store::{NewCheckpoint, NewMessage, NewSession, Store};

const FILES: usize = 10;
const FILE_BYTES: usize = 20 * 1024;

/// File `f`'s text after `turn` turns: lines of 64 bytes, line `turn % lines` rewritten.
fn content(f: usize, lines: &mut [String], turn: usize) -> (Vec<u8>, usize) {
    let n = lines.len();
    let line = (turn * 7 + f) % n;
    let before = lines[line].len();
    lines[line] = format!("{:<63}\n", format!("file {f} line {line} turn {turn}"));
    let changed = before + lines[line].len();
    (lines.concat().into_bytes(), changed)
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    if bench && cfg!(debug_assertions) {
        panic!("run the benchmark with `cargo bench` (release); debug figures mean nothing");
    }
    let turns = if bench { 1000 } else { 20 };
    let dir = tempfile::tempdir().expect("a temporary folder");
    let db = dir.path().join("sidechat.db");
    let store = Store::open(&db).expect("the database");
    let session = store
        .insert_session(&NewSession {
            title: "bench".into(),
            account: "demo".into(),
            model: "demo".into(),
            system_prompt: None,
            workspace_root: Some(dir.path().display().to_string()),
            max_steps: 25,
            cap_usd: None,
            max_seconds: None,
            rollover_secs: None,
        })
        .expect("a session")
        .id;
    let size_before = std::fs::metadata(&db).map_or(0, |m| m.len());
    let lines_per_file = FILE_BYTES / 64;
    let mut files: Vec<Vec<String>> = (0..FILES)
        .map(|f| {
            (0..lines_per_file)
                .map(|l| format!("{:<63}\n", format!("file {f} line {l}")))
                .collect()
        })
        .collect();
    let mut current: Vec<Vec<u8>> = files.iter().map(|l| l.concat().into_bytes()).collect();
    let mut changed_bytes = 0usize;
    let started = Instant::now();
    for turn in 0..turns {
        let row = store.session(&session).expect("read").expect("the session");
        let mut message = NewMessage::new(
            &session,
            None,
            sidechat::protocol::Role::User,
            vec![sidechat::protocol::Block::Text {
                text: format!("turn {turn}"),
            }],
        );
        message.seq = row.next_free_seq();
        store.append_message(&message).expect("a user turn");
        for f in 0..FILES {
            let (after, changed) = content(f, &mut files[f], turn);
            changed_bytes += changed;
            let path = format!("f{f}.txt");
            store
                .keep_checkpoint(&NewCheckpoint {
                    session_id: &session,
                    call_id: "call",
                    path: &path,
                    before: Some((&current[f], 0o644)),
                    after: Some(&after),
                })
                .expect("a checkpoint");
            current[f] = after;
        }
    }
    let elapsed = started.elapsed();
    let kept = store.checkpoint_bytes().expect("the kept bytes");
    let size_after = std::fs::metadata(&db).map_or(0, |m| m.len())
        + std::fs::metadata(dir.path().join("sidechat.db-wal")).map_or(0, |m| m.len());
    println!(
        "checkpoints: {turns} turns × {FILES} files of {FILE_BYTES} B; changed {changed_bytes} B; kept {kept} B ({:.1}× the changed bytes); database grew {} B; {:.2} ms per checkpoint",
        kept as f64 / changed_bytes.max(1) as f64,
        size_after.saturating_sub(size_before),
        elapsed.as_secs_f64() * 1000.0 / (turns * FILES) as f64
    );
}
