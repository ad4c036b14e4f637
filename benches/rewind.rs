//! What undo costs: `session/rewind` of a turn that wrote 100 files, and the snapshots taken
//! around a `run_command` in a git work tree, beside the same command in a plain folder.
//!
//! Run with `cargo bench --bench rewind` (a release build): 25 rewinds of 100 files of 20 KB,
//! and 25 commands in each of two workspaces of 10,000 files (one a git work tree with them
//! committed), measured interleaved. Without `--bench`, as under `cargo test --benches`, it
//! makes three quick runs of each on small workspaces to check that it works.
//!
//! Both drive `sidechat serve` over stdio with the scripted replay model. A rewind is timed
//! from writing the request to its answer; a command's turn from `chat/send` to its
//! `runFinished`, so the difference between the two workspaces' medians is what the snapshots
//! before and after the command add (the `git` index kept between snapshots makes each one
//! read only what changed).

#[path = "support/stdio.rs"]
mod stdio;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sidechat::protocol::{
    ChatSend, Initialize, Initialized, Notification, Request, SessionCreate, SessionEvent,
    SessionRewind,
};

const FILE_BYTES: usize = 20 * 1024;
const REWIND_GOAL: Duration = Duration::from_millis(50);
const SNAPSHOT_GOAL: Duration = Duration::from_millis(100);

struct Daemon {
    child: Child,
    requests: stdio::Requests,
    stdout: BufReader<ChildStdout>,
}

impl Daemon {
    /// `sidechat serve` in `home`, its model the replay `script`, commands and writes unasked.
    fn start(home: &Path, script: &Value) -> Self {
        let config = home.join("config/sidechat");
        std::fs::create_dir_all(&config).expect("the config folder");
        std::fs::write(
            config.join("config.toml"),
            "[sandbox]\nenabled = false\n[permissions]\nallow = [\"write_file\", \"run_command\"]\n",
        )
        .expect("the config file");
        let script_path = home.join("script.json");
        std::fs::write(&script_path, script.to_string()).expect("the script");
        let mut command = stdio::serve_command(
            home,
            &home.join("sidechat.db"),
            "http://127.0.0.1:9",
            "warn",
        );
        command
            .env("SIDECHAT_REPLAY_SCRIPT", &script_path)
            .env("SIDECHAT_AUTO_TITLE", "off")
            .stderr(Stdio::null());
        let mut child = command.spawn().expect("sidechat starts");
        let requests = stdio::Requests::new(child.stdin.take().expect("piped stdin"));
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut daemon = Self {
            child,
            requests,
            stdout,
        };
        daemon.call(
            Initialize::METHOD,
            json!({"clientInfo": {"name": "rewind-bench"}, "protocolVersion": 1, "capabilities": {}}),
        );
        daemon
            .requests
            .send(&json!({"jsonrpc": "2.0", "method": Initialized::METHOD, "params": {}}));
        daemon
    }

    /// Reads lines until `stop` says one is the one wanted.
    fn until(&mut self, stop: impl Fn(&Value) -> bool) -> Value {
        let mut line = String::new();
        loop {
            line.clear();
            let n = self.stdout.read_line(&mut line).expect("read sidechat");
            assert!(n > 0, "sidechat closed its output");
            let message: Value = serde_json::from_str(&line).expect("a JSON line");
            if stop(&message) {
                return message;
            }
        }
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.requests.start_call(method, params);
        let answer = self.until(|m| m["id"] == id && m.get("method").is_none());
        assert!(answer.get("error").is_none(), "{method} failed: {answer}");
        answer["result"].clone()
    }

    fn session(&mut self, workspace: &Path) -> String {
        let created = self.call(
            SessionCreate::METHOD,
            json!({"account": "replay", "workspaceRoot": workspace.display().to_string()}),
        );
        created["id"].as_str().expect("a session id").to_string()
    }

    /// Sends `text` and waits for the run's end; the user message's id and the time it took.
    fn turn(&mut self, session: &str, text: &str) -> (String, Duration) {
        let started = Instant::now();
        let sent = self.call(
            ChatSend::METHOD,
            json!({"sessionId": session, "text": text}),
        );
        self.until(|m| {
            m["method"] == SessionEvent::METHOD
                && m["params"]["sessionId"] == session
                && m["params"]["event"]["kind"] == "runFinished"
        });
        let took = started.elapsed();
        (
            sent["messageId"]
                .as_str()
                .expect("a message id")
                .to_string(),
            took,
        )
    }

    fn stop(mut self) {
        drop(self.requests);
        let _ = self.child.wait();
    }
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn rewinds(runs: usize) {
    let home = tempfile::tempdir().expect("a temporary folder");
    let workspace = home.path().join("ws");
    std::fs::create_dir(&workspace).expect("the workspace");
    let content = "x".repeat(FILE_BYTES - 1) + "\n";
    let writes: Vec<Value> = (0..100)
        .map(|i| json!({"name": "write_file", "input": {"path": format!("f{i:03}.txt"), "content": content}}))
        .collect();
    let script = json!({"turns": [{"text": "Writing.", "toolCalls": writes}, {"text": "Done."}], "fallback": {"text": "Done."}});
    let mut daemon = Daemon::start(home.path(), &script);
    let mut samples = Vec::new();
    for _ in 0..runs {
        // Each new session's first turn writes the 100 files; its rewind removes them.
        let session = daemon.session(&workspace);
        let (message, _) = daemon.turn(&session, "write them");
        let started = Instant::now();
        let done = daemon.call(
            SessionRewind::METHOD,
            json!({"sessionId": session, "messageId": message, "restore": "both"}),
        );
        samples.push(started.elapsed());
        assert_eq!(
            done["restored"].as_array().map(Vec::len),
            Some(100),
            "{done}"
        );
    }
    daemon.stop();
    let median = median(samples);
    println!(
        "rewind of 100 files of {FILE_BYTES} B: median {:.1} ms over {runs} runs (goal ≤ {} ms)",
        median.as_secs_f64() * 1000.0,
        REWIND_GOAL.as_millis()
    );
}

fn fill(workspace: &Path, files: usize) {
    for i in 0..files {
        let dir = workspace.join(format!("d{:03}", i / 100));
        std::fs::create_dir_all(&dir).expect("a folder");
        std::fs::write(dir.join(format!("f{i}.txt")), format!("file {i}\n")).expect("a file");
    }
}

fn git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .args([
            "-c",
            "user.name=bench",
            "-c",
            "user.email=bench@example.com",
        ])
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .status()
        .expect("git runs");
    assert!(status.success(), "git {args:?}");
}

fn snapshots(runs: usize, files: usize) {
    let home = tempfile::tempdir().expect("a temporary folder");
    let (plain, tree) = (home.path().join("plain"), home.path().join("git"));
    for ws in [&plain, &tree] {
        std::fs::create_dir(ws).expect("a workspace");
        fill(ws, files);
    }
    git(&tree, &["init", "-q"]);
    git(&tree, &["add", "."]);
    git(&tree, &["commit", "-q", "-m", "files"]);
    let command =
        json!({"name": "run_command", "input": {"command": "echo changed >> d000/f0.txt"}});
    let script = json!({"turns": [{"text": "Running.", "toolCalls": [command]}, {"text": "Done."}], "fallback": {"text": "Done."}});
    let mut daemon = Daemon::start(home.path(), &script);
    // The first command in the work tree fills the private index (not timed).
    for ws in [&plain, &tree] {
        let session = daemon.session(ws);
        daemon.turn(&session, "warm up");
    }
    let (mut plain_times, mut tree_times) = (Vec::new(), Vec::new());
    for round in 0..runs {
        let order = match round % 2 {
            0 => [(&plain, false), (&tree, true)],
            _ => [(&tree, true), (&plain, false)],
        };
        for (ws, in_git) in order {
            let session = daemon.session(ws);
            let (_, took) = daemon.turn(&session, "run it");
            match in_git {
                true => tree_times.push(took),
                false => plain_times.push(took),
            }
        }
    }
    daemon.stop();
    let (plain, tree) = (median(plain_times), median(tree_times));
    println!(
        "run_command turn in a workspace of {files} files: plain folder median {:.1} ms, git work tree (snapshots before and after) {:.1} ms; snapshots add {:.1} ms (goal ≤ {} ms)",
        plain.as_secs_f64() * 1000.0,
        tree.as_secs_f64() * 1000.0,
        tree.saturating_sub(plain).as_secs_f64() * 1000.0,
        SNAPSHOT_GOAL.as_millis()
    );
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    if bench && cfg!(debug_assertions) {
        panic!("run the benchmark with `cargo bench` (release); debug figures mean nothing");
    }
    let (runs, files) = if bench { (25, 10_000) } else { (3, 200) };
    rewinds(runs);
    snapshots(runs, files);
}
