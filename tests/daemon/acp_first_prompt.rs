//! `sidechat acp`'s first `session/prompt` waits neither for the tokenizer, as a fresh
//! daemon's first `chat/send` does not (`first_request`), nor for the redaction patterns the
//! session's provisional title is cleaned with: a prompt whose UTF-8 size fits the window
//! reaches the upstream while neither can be built yet, and its title and its turn's end
//! follow once they are. `SIDECHAT_TEST_TOKENIZER=gate:<file>` and
//! `SIDECHAT_TEST_REDACTION=gate:<file>` keep each unbuilt until the test creates the file, so
//! no timing decides what the test sees. Meanwhile nothing else starts building them at full
//! priority beside the turn (the daemon logs each such build): not the usage update of the
//! request's upper-bound budget, which would hold back every update after it, nor the title.
//! A fresh agent's `session/load` does not wait for the tokenizer either: the session's usage
//! update, which needs its counts, follows once the tokenizer is built.

use agent_client_protocol_schema::v1::AGENT_METHOD_NAMES;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

use crate::first_request::until_requests;
use crate::harness::{Scratch, clean_command, home_for};
use crate::long_context::{env, text_reply};
use crate::upstream::{Reply, Upstream, openai, start};

/// A guard against a hung agent, not a performance assertion.
const HANG_GUARD: std::time::Duration = std::time::Duration::from_secs(60);

/// The window of a real model: a short prompt certainly fits by its bytes.
const LARGE_WINDOW: u64 = 128_000;

/// A reply whose first words stream at once and whose end waits for `gate`: the turn cannot
/// end, and ask for its exact figures, while the test looks at what happened before.
fn held_reply(gate: &std::path::Path) -> Reply {
    let gate = gate.to_path_buf();
    Reply::writer(move |stream| {
        use std::io::Write;
        let text =
            json!({"choices": [{"index": 0, "delta": {"content": "Hi."}, "finish_reason": null}]});
        stream.write_all(openai::event(&text).as_bytes())?;
        stream.flush()?;
        let waited = std::time::Instant::now();
        while !gate.exists() && waited.elapsed() < HANG_GUARD {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let end = [
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": 3}}),
        ];
        for chunk in &end {
            stream.write_all(openai::event(chunk).as_bytes())?;
        }
        stream.write_all(openai::DONE.as_bytes())
    })
}

/// A test's files: the database, the gate, the agent's log and a workspace.
struct Files {
    _scratch: Scratch,
    db: std::path::PathBuf,
    gate: std::path::PathBuf,
    log: std::path::PathBuf,
    workspace: std::path::PathBuf,
}

impl Files {
    fn new() -> Self {
        let scratch = Scratch::new();
        let dir = scratch.dir.path().to_path_buf();
        let workspace = dir.join("workspace");
        std::fs::create_dir_all(&workspace).unwrap();
        Self {
            db: scratch.db(),
            gate: dir.join("tokenizer-gate"),
            log: dir.join("acp.log"),
            workspace,
            _scratch: scratch,
        }
    }
}

struct Agent {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    next_id: u64,
    /// The updates read so far, as `(sessionUpdate, title)`.
    updates: Vec<(String, Option<String>)>,
}

impl Agent {
    /// `sidechat acp` on `db` whose tokenizer and redaction patterns are not built before
    /// `gate` exists, logging at debug level to `log`.
    fn spawn(
        db: &std::path::Path,
        upstream: &Upstream,
        gate: &std::path::Path,
        log: &std::path::Path,
    ) -> Self {
        let mut command = clean_command(&home_for(db));
        command
            .arg("acp")
            .arg("--db")
            .arg(db)
            .arg("--log-file")
            .arg(log);
        for (key, value) in env(&upstream.url, LARGE_WINDOW) {
            command.env(key, value);
        }
        let mut child = command
            .env(
                "SIDECHAT_TEST_TOKENIZER",
                format!("gate:{}", gate.display()),
            )
            .env(
                "SIDECHAT_TEST_REDACTION",
                format!("gate:{}", gate.display()),
            )
            .env("SIDECHAT_LOG", "debug")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn sidechat acp");
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Self {
            child,
            stdin,
            lines,
            next_id: 0,
            updates: Vec::new(),
        }
    }

    /// Writes a request; its id.
    async fn send(&mut self, method: &str, params: Value) -> u64 {
        self.next_id += 1;
        let line =
            json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params});
        self.stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
        self.stdin.flush().await.unwrap();
        self.next_id
    }

    /// The answer to request `id`; updates on the way are kept in `updates`.
    async fn answer(&mut self, id: u64) -> Value {
        loop {
            let frame = self.next_frame().await;
            if frame["id"] == json!(id) && frame.get("method").is_none() {
                return frame;
            }
        }
    }

    /// Reads until an update of `kind` has come.
    async fn until_update(&mut self, kind: &str) {
        while !self.saw(kind) {
            self.next_frame().await;
        }
    }

    /// The next frame; an update is kept in `updates`.
    async fn next_frame(&mut self) -> Value {
        let line = tokio::time::timeout(HANG_GUARD, self.lines.next_line())
            .await
            .expect("the agent wrote nothing")
            .unwrap()
            .expect("the agent closed its output");
        let frame: Value = serde_json::from_str(&line).unwrap();
        let update = &frame["params"]["update"];
        if let Some(kind) = update["sessionUpdate"].as_str() {
            let title = update["title"].as_str().map(str::to_string);
            self.updates.push((kind.to_string(), title));
        }
        frame
    }

    async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params).await;
        let answer = self.answer(id).await;
        assert_eq!(answer.get("error"), None, "{method}: {answer}");
        answer["result"].clone()
    }

    async fn initialize(&mut self) {
        self.request(
            AGENT_METHOD_NAMES.initialize,
            json!({"protocolVersion": 1, "clientCapabilities": {}}),
        )
        .await;
    }

    /// Closes the agent's input; it exits cleanly.
    async fn close(mut self) {
        drop(self.stdin);
        let status = tokio::time::timeout(HANG_GUARD, self.child.wait())
            .await
            .expect("the agent did not exit")
            .unwrap();
        assert_eq!(status.code(), Some(0));
    }

    /// A new session in `workspace`; its id.
    async fn new_session(&mut self, workspace: &std::path::Path) -> Value {
        self.request(
            AGENT_METHOD_NAMES.session_new,
            json!({"cwd": workspace.display().to_string(), "mcpServers": []}),
        )
        .await["sessionId"]
            .clone()
    }

    fn saw(&self, kind: &str) -> bool {
        self.updates.iter().any(|(seen, _)| seen == kind)
    }
}

#[tokio::test]
async fn acps_first_prompt_goes_out_before_the_tokenizer_and_the_redaction_patterns_are_built() {
    let files = Files::new();
    let (db, gate, log, workspace) = (&files.db, &files.gate, &files.log, &files.workspace);
    let upstream = start(vec![held_reply(gate)]);
    let mut agent = Agent::spawn(db, &upstream, gate, log);
    agent.initialize().await;
    let session = agent.new_session(workspace).await;
    let prompt = agent
        .send(
            AGENT_METHOD_NAMES.session_prompt,
            json!({"sessionId": session, "prompt": [{"type": "text", "text": "Hello there, what does this project do?"}]}),
        )
        .await;

    // Neither can be built yet, and the prompt reaches the upstream all the same.
    until_requests(&upstream, 1).await;
    assert!(!gate.exists());
    // The reply streams to the client (no update waits for them), and nothing has started
    // building them at full priority: only the warm-up's lowered threads wait at the gate.
    agent.until_update("agent_message_chunk").await;
    let logged = std::fs::read_to_string(log).unwrap();
    let full_priority: Vec<&str> = logged
        .lines()
        .filter(|line| line.contains("building at full priority"))
        .collect();
    assert_eq!(full_priority, Vec::<&str>::new());

    // Once they are, the session's provisional title is told before the turn ends.
    std::fs::write(gate, "").unwrap();
    assert_eq!(
        agent.answer(prompt).await["result"],
        json!({"stopReason": "end_turn"})
    );
    let titles: Vec<_> = agent
        .updates
        .iter()
        .filter(|(kind, _)| kind == "session_info_update")
        .map(|(_, title)| title.clone())
        .collect();
    assert_eq!(
        titles,
        vec![Some("Hello there, what does this project do?".to_string())]
    );
    assert_eq!(upstream.bodies().len(), 1);
    agent.close().await;
}

#[tokio::test]
async fn a_fresh_agent_loads_a_session_before_the_tokenizer_is_built_and_its_usage_follows() {
    let files = Files::new();
    let (db, gate, log, workspace) = (&files.db, &files.gate, &files.log, &files.workspace);
    let upstream = start(vec![text_reply("Hi.", 100, 3)]);

    // A conversation, on an agent whose gate is open.
    std::fs::write(gate, "").unwrap();
    let mut first = Agent::spawn(db, &upstream, gate, log);
    first.initialize().await;
    let session = first.new_session(workspace).await;
    let prompt = json!([{"type": "text", "text": "Hello there"}]);
    first
        .request(
            AGENT_METHOD_NAMES.session_prompt,
            json!({"sessionId": session, "prompt": prompt}),
        )
        .await;
    first.close().await;

    // A fresh agent that cannot build the tokenizer loads it: the history is replayed and the
    // load answered, and the context usage, which needs counting, is not sent yet.
    std::fs::remove_file(gate).unwrap();
    let mut fresh = Agent::spawn(db, &upstream, gate, log);
    fresh.initialize().await;
    fresh
        .request(
            AGENT_METHOD_NAMES.session_load,
            json!({"sessionId": session, "cwd": workspace.display().to_string(), "mcpServers": []}),
        )
        .await;
    assert!(fresh.saw("agent_message_chunk"), "{:?}", fresh.updates);
    assert!(!fresh.saw("usage_update"), "{:?}", fresh.updates);

    // Once the tokenizer is built, it follows.
    std::fs::write(gate, "").unwrap();
    fresh.until_update("usage_update").await;
    fresh.close().await;
}
