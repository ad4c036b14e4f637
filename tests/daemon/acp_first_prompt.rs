//! `sidechat acp`'s first `session/prompt` waits neither for the tokenizer, as a fresh
//! daemon's first `chat/send` does not (`first_request`), nor for the redaction patterns the
//! session's provisional title is cleaned with: a prompt whose UTF-8 size fits the window
//! reaches the upstream while neither can be built yet, and its title and its turn's end
//! follow once they are. `SIDECHAT_TEST_TOKENIZER=gate:<file>` and
//! `SIDECHAT_TEST_REDACTION=gate:<file>` keep each unbuilt until the test creates the file, so
//! no timing decides what the test sees.

use agent_client_protocol_schema::v1::AGENT_METHOD_NAMES;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

use crate::first_request::until_requests;
use crate::harness::{Scratch, clean_command, home_for};
use crate::long_context::{env, text_reply};
use crate::upstream::{Upstream, start};

/// A guard against a hung agent, not a performance assertion.
const HANG_GUARD: std::time::Duration = std::time::Duration::from_secs(60);

/// The window of a real model: a short prompt certainly fits by its bytes.
const LARGE_WINDOW: u64 = 128_000;

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
    /// `gate` exists.
    fn spawn(db: &std::path::Path, upstream: &Upstream, gate: &std::path::Path) -> Self {
        let mut command = clean_command(&home_for(db));
        command.arg("acp").arg("--db").arg(db);
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
            let line = tokio::time::timeout(HANG_GUARD, self.lines.next_line())
                .await
                .expect("the agent wrote nothing")
                .unwrap()
                .expect("the agent closed its output");
            let frame: Value = serde_json::from_str(&line).unwrap();
            if frame["id"] == json!(id) && frame.get("method").is_none() {
                return frame;
            }
            let update = &frame["params"]["update"];
            if let Some(kind) = update["sessionUpdate"].as_str() {
                let title = update["title"].as_str().map(str::to_string);
                self.updates.push((kind.to_string(), title));
            }
        }
    }

    async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params).await;
        let answer = self.answer(id).await;
        assert_eq!(answer.get("error"), None, "{method}: {answer}");
        answer["result"].clone()
    }
}

#[tokio::test]
async fn acps_first_prompt_goes_out_before_the_tokenizer_and_the_redaction_patterns_are_built() {
    let scratch = Scratch::new();
    let db = scratch.db();
    let gate = scratch.dir.path().join("tokenizer-gate");
    let workspace = scratch.dir.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    let upstream = start(vec![text_reply("Hi.", 100, 3)]);
    let mut agent = Agent::spawn(&db, &upstream, &gate);
    agent
        .request(
            AGENT_METHOD_NAMES.initialize,
            json!({"protocolVersion": 1, "clientCapabilities": {}}),
        )
        .await;
    let session = agent
        .request(
            AGENT_METHOD_NAMES.session_new,
            json!({"cwd": workspace.display().to_string(), "mcpServers": []}),
        )
        .await["sessionId"]
        .clone();
    let prompt = agent
        .send(
            AGENT_METHOD_NAMES.session_prompt,
            json!({"sessionId": session, "prompt": [{"type": "text", "text": "Hello there, what does this project do?"}]}),
        )
        .await;

    // Neither can be built yet, and the prompt reaches the upstream all the same.
    until_requests(&upstream, 1).await;
    assert!(!gate.exists());

    // Once they are, the session's provisional title is told before the turn ends.
    std::fs::write(&gate, "").unwrap();
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
    drop(agent.stdin);
    let status = tokio::time::timeout(HANG_GUARD, agent.child.wait())
        .await
        .expect("the agent did not exit")
        .unwrap();
    assert_eq!(status.code(), Some(0));
}
