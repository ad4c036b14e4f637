//! Spawns the real `sidechat serve` binary and talks to it over stdio.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use sidechat::client::{Connection, RpcError};
use sidechat::protocol::{Event, SessionEventParams};
use sidechat::rpc::framing::Framing;
use tokio::sync::mpsc;

/// A guard against a hung daemon, not a performance assertion.
const HANG_GUARD: Duration = Duration::from_secs(60);

pub struct Daemon {
    pub conn: Connection,
    pub notes: mpsc::UnboundedReceiver<Value>,
}

pub struct Options<'a> {
    pub framing: Framing,
    pub env: Vec<(&'a str, String)>,
}

impl<'a> Options<'a> {
    /// Line framing with these environment variables.
    pub fn with_env(env: Vec<(&'a str, String)>) -> Self {
        Self {
            env,
            ..Self::default()
        }
    }
}

impl Default for Options<'_> {
    fn default() -> Self {
        Self {
            framing: Framing::Line,
            env: Vec::new(),
        }
    }
}

pub fn command(db: &Path, env: &[(&str, String)]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_sidechat"));
    command
        .arg("serve")
        .arg("--db")
        .arg(db)
        .env("SIDECHAT_DEMO_DELAY_MS", "0")
        .env("SIDECHAT_LOG", "warn")
        .env_remove("SIDECHAT_REPLAY_SCRIPT")
        .env_remove("SIDECHAT_ACCOUNT")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .stderr(std::process::Stdio::null());
    for (key, value) in env {
        command.env(key, value);
    }
    command
}

impl Daemon {
    pub fn spawn(db: &Path, options: Options<'_>) -> Self {
        let (conn, notes) =
            Connection::spawn(command(db, &options.env), options.framing).expect("spawn sidechat");
        Self { conn, notes }
    }

    /// Spawns and completes the `initialize` handshake.
    pub async fn start(db: &Path, options: Options<'_>) -> Self {
        let daemon = Self::spawn(db, options);
        daemon
            .call(
                "initialize",
                json!({"clientInfo": {"name": "tests"}, "protocolVersion": 1}),
            )
            .await;
        daemon.conn.notify("initialized", json!({})).await.unwrap();
        daemon
    }

    pub async fn call(&self, method: &str, params: Value) -> Value {
        match self.try_call(method, params).await {
            Ok(result) => result,
            Err(e) => panic!("{method} failed: {e:?}"),
        }
    }

    pub async fn try_call(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        tokio::time::timeout(HANG_GUARD, self.conn.request(method, params))
            .await
            .expect("the daemon did not answer")
            .expect("connection")
    }

    /// `chat/send` of plain text; the result.
    pub async fn send(&self, session: &str, text: &str) -> Value {
        self.call("chat/send", json!({"sessionId": session, "text": text}))
            .await
    }

    /// The whole `session/transcript` of a session.
    pub async fn transcript(&self, session: &str) -> Value {
        self.call("session/transcript", json!({"sessionId": session}))
            .await
    }

    /// The next frame that is not a response to one of our requests.
    pub async fn next_note(&mut self) -> Value {
        tokio::time::timeout(HANG_GUARD, self.notes.recv())
            .await
            .expect("no notification arrived")
            .expect("the daemon closed its output")
    }

    pub async fn next_event(&mut self) -> SessionEventParams {
        loop {
            let note = self.next_note().await;
            if note["method"] == "session/event" {
                return serde_json::from_value(note["params"].clone())
                    .expect("a well-formed event");
            }
        }
    }

    /// Events up to and including the first one `stop` accepts.
    pub async fn events_until(&mut self, stop: impl Fn(&Event) -> bool) -> Vec<SessionEventParams> {
        let mut events = Vec::new();
        loop {
            let event = self.next_event().await;
            let done = stop(&event.event);
            events.push(event);
            if done {
                return events;
            }
        }
    }

    pub async fn until_finished(&mut self) -> Vec<SessionEventParams> {
        self.events_until(|e| matches!(e, Event::RunFinished { .. }))
            .await
    }

    pub async fn until_approval(&mut self) -> (Vec<SessionEventParams>, String) {
        let events = self
            .events_until(|e| matches!(e, Event::ApprovalRequested { .. }))
            .await;
        let Some(Event::ApprovalRequested { approval }) = events.last().map(|e| &e.event) else {
            unreachable!()
        };
        let id = approval.approval_id.clone();
        (events, id)
    }

    pub async fn create_session(&self, params: Value) -> String {
        let session = self.call("session/create", params).await;
        session["id"].as_str().expect("session id").to_string()
    }

    /// `shutdown` + `exit`; the exit code.
    pub async fn close(self) -> i32 {
        tokio::time::timeout(HANG_GUARD, self.conn.close())
            .await
            .expect("the daemon did not exit")
            .expect("close")
    }
}

/// A scratch folder with a database path and a workspace folder.
pub struct Scratch {
    pub dir: tempfile::TempDir,
}

impl Scratch {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("ws")).unwrap();
        Self { dir }
    }

    pub fn db(&self) -> PathBuf {
        self.dir.path().join("data/sidechat.db")
    }

    pub fn workspace(&self) -> PathBuf {
        self.dir.path().join("ws").canonicalize().unwrap()
    }

    /// Writes a replay script and returns the env that selects it.
    pub fn replay(&self, script: Value) -> Vec<(&'static str, String)> {
        let path = self.dir.path().join("script.json");
        std::fs::write(&path, script.to_string()).unwrap();
        vec![
            ("SIDECHAT_REPLAY_SCRIPT", path.display().to_string()),
            (
                "SIDECHAT_REPLAY_LOG",
                self.request_log().display().to_string(),
            ),
        ]
    }

    pub fn request_log(&self) -> PathBuf {
        self.dir.path().join("requests.jsonl")
    }

    /// Requests the replay model received, in order.
    pub fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(self.request_log())
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// Event kinds in order, for compact assertions.
pub fn kinds(events: &[SessionEventParams]) -> Vec<String> {
    events
        .iter()
        .map(|e| {
            serde_json::to_value(&e.event).unwrap()["kind"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}
