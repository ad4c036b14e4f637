//! The prompt count of a scripted coding workload of 40 tool calls, replayed through the real
//! daemon: reads, edits under `src/`, test-like commands, `git status`, one write outside the
//! workspace and one `curl` to a listener on 127.0.0.1.
//!
//! Counted three ways: with the sandbox off (every write, edit and command asks, as before the
//! sandbox; the user allows each once and denies the write outside and the `curl`); with the
//! sandbox and no rules; with the sandbox and the two rules a user saves after the first
//! prompts (`write_file(src/**)`, `edit_file(src/**)` in the user's config). The figures are in
//! docs/sandbox.md; `cargo test --test daemon workload -- --nocapture` prints them.

use std::net::TcpListener;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sidechat::protocol::{ApprovalDecision, ApprovalRespond, Event};

use crate::harness::{Daemon, Options, Scratch, answer};

const REFUSED: &str = "Refused by the sandbox:";

/// The rules the user saves once the first write and the first edit under `src/` asked.
const SAVED_RULES: &[&str] = &["write_file(src/**)", "edit_file(src/**)"];

fn call(name: &str, input: Value) -> Value {
    json!({"name": name, "input": input})
}

fn run(line: &str) -> Value {
    call("run_command", json!({"command": line}))
}

/// The 40 calls, in the order the model makes them, five to a turn.
fn workload(port: u16) -> Vec<Value> {
    let mut calls = vec![
        call("list_directory", json!({"path": "."})),
        call("read_file", json!({"path": "src/lib.rs"})),
        call("search_text", json!({"pattern": "fn a"})),
        run("git status"),
        call("read_file", json!({"path": "check.sh"})),
    ];
    for i in 0..6 {
        calls.push(call(
            "edit_file",
            json!({"path": "src/lib.rs", "old_string": format!("fn a{i}() {{}}"), "new_string": format!("fn a{i}() {{ let _ = {i}; }}")}),
        ));
        calls.push(run("sh check.sh"));
    }
    for i in 0..3 {
        calls.push(call(
            "write_file",
            json!({"path": format!("src/new{i}.rs"), "content": format!("pub fn new{i}() {{}}\n")}),
        ));
    }
    calls.extend([
        run("git status"),
        call("list_directory", json!({"path": "src"})),
        call("read_file", json!({"path": "src/new0.rs"})),
        run("wc -l src/*.rs"),
        run("echo note > \"$HOME/notes.txt\""),
        call(
            "edit_file",
            json!({"path": "src/main.rs", "old_string": "fn main() {}", "new_string": "fn main() { println!(\"hi\"); }"}),
        ),
        call(
            "write_file",
            json!({"path": "src/extra.rs", "content": "pub fn extra() {}\n"}),
        ),
        call("search_text", json!({"pattern": "todo"})),
        run(&format!("curl -sS --max-time 5 http://127.0.0.1:{port}/")),
        run("git status"),
        call("read_file", json!({"path": "src/main.rs"})),
        call("list_directory", json!({"path": "src"})),
        run("ls -la src"),
        run("git diff --stat"),
        run("git status"),
        call(
            "edit_file",
            json!({"path": "src/lib.rs", "old_string": "fn a6() {}", "new_string": "fn a6() { let _ = 6; }"}),
        ),
        run("sh check.sh"),
        call("read_file", json!({"path": "src/new1.rs"})),
        run("sh check.sh"),
        call("search_text", json!({"pattern": "fn new"})),
    ]);
    assert_eq!(calls.len(), 40);
    calls
}

/// A workspace with a git repository, sources to edit and a test-like script.
fn prepare(scratch: &Scratch) {
    let ws = scratch.workspace();
    std::fs::create_dir_all(ws.join("src")).unwrap();
    let lib: String = (0..10).map(|i| format!("fn a{i}() {{}}\n")).collect();
    std::fs::write(ws.join("src/lib.rs"), lib).unwrap();
    std::fs::write(ws.join("src/main.rs"), "fn main() {}\n").unwrap();
    // Builds into target/ and checks, as `cargo test` does, in a blink.
    std::fs::write(
        ws.join("check.sh"),
        "mkdir -p target && cat src/*.rs > target/all.rs && grep -c 'fn ' target/all.rs\n",
    )
    .unwrap();
    let git = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(&ws)
        .status()
        .expect("git runs");
    assert!(git.success());
    std::fs::create_dir_all(scratch.home()).unwrap();
}

/// What one replay of the workload showed.
#[derive(Debug)]
struct Count {
    prompts: usize,
    outside_written: bool,
    listener_reached: bool,
    /// The outputs of the write outside and of the `curl`.
    refused: Vec<String>,
    /// The outputs of the other commands that failed.
    failed: Vec<String>,
}

async fn replay(config: &str) -> Count {
    let scratch = Scratch::new();
    prepare(&scratch);
    scratch.write_config(config);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    let mut turns: Vec<Value> = workload(port)
        .chunks(5)
        .map(|calls| json!({ "toolCalls": calls }))
        .collect();
    turns.push(json!({"text": "done"}));
    let tmp = scratch.dir.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let mut env = scratch.replay(json!({ "turns": turns }));
    env.push(("TMPDIR", tmp.display().to_string()));
    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(env)).await;
    let session = daemon.create_session(scratch.replay_session()).await;
    daemon.send(&session, "work").await;
    let mut prompts = 0;
    loop {
        match daemon.next_event().await.event {
            Event::ApprovalRequested { approval } => {
                prompts += 1;
                let summary = &approval.summary;
                let risky = summary.contains("notes.txt") || summary.contains("curl");
                let decision = match risky {
                    true => ApprovalDecision::Deny,
                    false => ApprovalDecision::Allow,
                };
                daemon
                    .call::<ApprovalRespond>(answer(&approval.approval_id, decision))
                    .await;
            }
            Event::RunFinished { .. } => break,
            _ => {}
        }
    }
    let transcript = daemon.transcript(&session).await;
    let calls: Vec<&Value> = transcript["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["role"] == "tool")
        .flat_map(|e| e["blocks"].as_array().unwrap())
        .collect();
    assert_eq!(calls.len(), 40, "every call has its result");
    let inputs = workload(port);
    let (mut refused, mut failed) = (Vec::new(), Vec::new());
    for (result, input) in calls.iter().zip(&inputs) {
        let output = result["output"].as_str().unwrap().to_string();
        let line = input["input"]["command"].as_str().unwrap_or("");
        if line.contains("notes.txt") || line.contains("curl") {
            refused.push(output);
        } else if result["status"] != "done" {
            failed.push(output);
        }
    }
    daemon.close().await;
    Count {
        prompts,
        outside_written: scratch.home().join("notes.txt").exists(),
        listener_reached: listener.accept().is_ok(),
        refused,
        failed,
    }
}

#[tokio::test]
async fn the_sandbox_and_two_saved_rules_leave_a_fifth_of_the_prompts_or_fewer() {
    let before = replay("[sandbox]\nenabled = false\n").await;
    let sandbox_only = replay("").await;
    let rules = SAVED_RULES
        .iter()
        .map(|r| format!("{r:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    let with_rules = replay(&format!("[permissions]\nallow = [{rules}]\n")).await;
    // Each saved rule cost the one prompt after which it was saved.
    let after = with_rules.prompts + SAVED_RULES.len();
    println!(
        "workload of 40 calls: {} prompts without the sandbox; {} with the sandbox alone; {} with the sandbox and the rules {rules} ({} in the run, {} before they were saved)",
        before.prompts,
        sandbox_only.prompts,
        after,
        with_rules.prompts,
        SAVED_RULES.len()
    );
    // Without the sandbox: every write, edit and command asked; the user denied the risky two.
    assert_eq!(before.prompts, 29);
    assert!(!before.outside_written && !before.listener_reached);
    // With it: only the writes and edits under src/ ask, and the rules take those.
    assert_eq!(sandbox_only.prompts, 12);
    assert_eq!(with_rules.prompts, 0);
    assert!(after * 5 <= before.prompts, "{after} of {}", before.prompts);
    // The write outside and the connection were still refused, by the sandbox, and said so.
    for count in [&before, &sandbox_only, &with_rules] {
        assert_eq!(
            count.failed,
            Vec::<String>::new(),
            "the other calls all worked"
        );
    }
    for count in [&sandbox_only, &with_rules] {
        assert!(!count.outside_written, "the write outside was refused");
        assert!(!count.listener_reached, "the connection was refused");
        assert_eq!(count.refused.len(), 2);
        for output in &count.refused {
            assert!(output.contains(REFUSED), "{output}");
        }
    }
}
