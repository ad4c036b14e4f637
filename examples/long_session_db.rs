//! Writes a long session into a database, for the VS Code page's benchmark
//! (`editors/vscode/bench/bench.ts`), which opens it in the page through the daemon.
//!
//! `long_session_db DB WORKSPACE COUNT`: one session on the demo model rooted in `WORKSPACE`,
//! of `COUNT` messages, a user's question and an assistant's Markdown answer (a paragraph, a
//! list and a code block) in turns, written through the library's store with their token
//! counts (`benches/support/long_session.rs`, which `cargo bench --bench long_session` uses
//! too). Prints the session's id.

#[path = "../benches/support/long_session.rs"]
mod long_session;
#[path = "../benches/support/words.rs"]
mod words;

use std::path::PathBuf;

use anyhow::{Context, bail};
use sidechat::protocol::Role;
use sidechat::store::Store;

use long_session::{LongSession, sentence};

/// The Markdown of message `seq`: a question, or an answer as a model writes one.
fn text(seq: u64, role: Role) -> String {
    match role {
        Role::User => format!("Question {seq}: {}?", sentence(seq)),
        _ => format!(
            "Answer {seq}. {}.\n\n- **one** render per frame\n- entries by `revision`\n- {}\n\n```rust\nfn frame(entries: &[Entry]) -> usize {{\n    entries.iter().filter(|e| e.stale).count()\n}}\n```",
            sentence(seq),
            sentence(seq + 1)
                .split(' ')
                .take(8)
                .collect::<Vec<_>>()
                .join(" "),
        ),
    }
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [db, workspace, count] = args.as_slice() else {
        bail!("usage: long_session_db DB WORKSPACE COUNT");
    };
    let count: u64 = count
        .parse()
        .with_context(|| format!("COUNT is not a number: {count}"))?;
    let store = Store::open(&PathBuf::from(db)).with_context(|| format!("cannot open {db}"))?;
    let long = LongSession::create(&store, "demo", "demo", Some(workspace))?;
    long.append_turns(count, text)?;
    println!("{}", long.session.id);
    Ok(())
}
