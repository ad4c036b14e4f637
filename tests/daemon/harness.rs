//! Spawns the real `sidechat serve` binary and talks to it over stdio.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};
use sidechat::client::{Connection, RpcError};
use sidechat::protocol::{
    ApprovalDecision, ApprovalRespondParams, ChatSend, ChatSendParams, ChatSendResult, ClientInfo,
    Event, Initialize, InitializeParams, Initialized, InitializedParams, Notification, Request,
    SessionCreate, SessionCreateParams, SessionEvent, SessionEventParams, SessionIdParams,
    SessionTranscript, SessionTranscriptParams,
};
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

/// The variables a daemon under test gets besides its own HOME and XDG folders: `PATH`, so
/// `run_command` finds `sh`, and nothing else of the machine. A developer's provider keys,
/// `OPENAI_BASE_URL`, `SIDECHAT_*` settings or config file must not change what a test sees
/// (nor send a test meant for the demo model to a real server).
const PASSED_THROUGH: &[&str] = &["PATH"];

/// `sidechat` with a cleared environment: [`PASSED_THROUGH`], `HOME` and the XDG folders
/// inside `home` (which need not exist: then there is no config file), warnings-only logs,
/// counts that wait for the tokenizer and the demo model at full speed. Tests add what they need with `.env(…)`.
pub fn clean_command(home: &Path) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_sidechat"));
    command.env_clear();
    for name in PASSED_THROUGH {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    command
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_DATA_HOME", home.join(".local/share"))
        .env("XDG_STATE_HOME", home.join(".local/state"))
        .env("XDG_CACHE_HOME", home.join(".cache"))
        .env("SIDECHAT_DEMO_DELAY_MS", "0")
        // Counts wait for the tokenizer, so that figures do not depend on how soon it is built
        // (`first_request` tests the first request before it is).
        .env("SIDECHAT_TEST_TOKENIZER", "wait")
        .env("SIDECHAT_LOG", "warn")
        // No title request after a first answer: each test sees its own requests only
        // (`titles` turns them on).
        .env("SIDECHAT_AUTO_TITLE", "off")
        .stderr(std::process::Stdio::null());
    command
}

/// The HOME of a daemon whose database is `db`: a folder beside it, so each test (each
/// [`Scratch`]) has its own, shared by the daemons a test restarts on the same database.
pub fn home_for(db: &Path) -> PathBuf {
    db.with_file_name("home")
}

/// `sidechat serve --db <db>` with a [`clean_command`] environment plus `env`.
pub fn command(db: &Path, env: &[(&str, String)]) -> tokio::process::Command {
    let mut command = clean_command(&home_for(db));
    command.arg("serve").arg("--db").arg(db);
    for (key, value) in env {
        command.env(key, value);
    }
    command
}

impl Daemon {
    /// The daemon's process: the harness always spawns the daemon it talks to.
    pub fn process(&mut self) -> &mut tokio::process::Child {
        self.conn.child_mut().expect("a spawned daemon")
    }

    pub fn spawn(db: &Path, options: Options<'_>) -> Self {
        let (conn, notes) =
            Connection::spawn(command(db, &options.env), options.framing).expect("spawn sidechat");
        Self { conn, notes }
    }

    /// Spawns and completes the `initialize` handshake.
    pub async fn start(db: &Path, options: Options<'_>) -> Self {
        let daemon = Self::spawn(db, options);
        daemon
            .call::<Initialize>(InitializeParams {
                client_info: Some(ClientInfo {
                    name: "tests".into(),
                    version: None,
                }),
                protocol_version: Some(1),
                capabilities: None,
            })
            .await;
        daemon.notify::<Initialized>(InitializedParams {}).await;
        daemon
    }

    /// Request `M`, which must succeed; its result.
    pub async fn call<M: Request>(&self, params: M::Params) -> M::Result {
        match self.try_call::<M>(params).await {
            Ok(result) => result,
            Err(e) => panic!("{} failed: {e:?}", M::METHOD),
        }
    }

    /// Request `M`; its result or its error answer. The result is read as `M::Result` and must
    /// be the whole of what the daemon answered: written out again, it is the same JSON value,
    /// so a test comparing it compares everything the daemon sent.
    pub async fn try_call<M: Request>(&self, params: M::Params) -> Result<M::Result, RpcError> {
        let answer = self.try_call_raw(M::METHOD, params).await?;
        let result: M::Result = serde_json::from_value(answer.clone()).unwrap_or_else(|e| {
            panic!("{} answered {answer} which is not its type: {e}", M::METHOD)
        });
        let again = serde_json::to_value(&result).expect("a result serialises");
        assert_eq!(
            again,
            answer,
            "{}'s result type leaves out part of its answer",
            M::METHOD
        );
        Ok(result)
    }

    /// A request by name with any params: only for deliberately bad frames (an unknown
    /// method, malformed params); its result or its error answer.
    pub async fn try_call_raw(
        &self,
        method: &str,
        params: impl Serialize,
    ) -> Result<Value, RpcError> {
        let params = serde_json::to_value(params).expect("params serialise");
        tokio::time::timeout(HANG_GUARD, self.conn.request(method, params))
            .await
            .expect("the daemon did not answer")
            .expect("connection")
    }

    /// Notification `N`.
    pub async fn notify<N: Notification>(&self, params: N::Params) {
        self.conn.notify::<N>(params).await.expect("connection");
    }

    /// `chat/send` of plain text; the result.
    pub async fn send(&self, session: &str, text: &str) -> ChatSendResult {
        self.call::<ChatSend>(say(session, text)).await
    }

    /// Each tool result of a session's transcript: its status and output.
    pub async fn tool_results(&self, session: &str) -> Vec<(String, String)> {
        let transcript = self.transcript(session).await;
        transcript["entries"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["role"] == "tool")
            .flat_map(|e| e["blocks"].as_array().unwrap().clone())
            .map(|b| {
                (
                    b["status"].as_str().unwrap().to_string(),
                    b["output"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    /// The whole `session/transcript` of a session, as JSON.
    pub async fn transcript(&self, session: &str) -> Value {
        json_of(
            self.call::<SessionTranscript>(SessionTranscriptParams {
                session_id: session.into(),
                after_seq: None,
                before_seq: None,
                limit: None,
            })
            .await,
        )
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
            if note["method"] == SessionEvent::METHOD {
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

    /// `session/create`; the new session's id.
    pub async fn create_session(&self, params: SessionCreateParams) -> String {
        self.call::<SessionCreate>(params).await.id
    }

    /// `shutdown` + `exit`; the exit code.
    pub async fn close(self) -> i32 {
        tokio::time::timeout(HANG_GUARD, self.conn.close())
            .await
            .expect("the daemon did not exit")
            .expect("close")
    }
}

/// A typed result as a JSON value, for assertions written as JSON: the same value the daemon
/// sent, as [`Daemon::try_call`] checks.
pub fn json_of(result: impl Serialize) -> Value {
    serde_json::to_value(result).expect("a result serialises")
}

/// Params of the methods that name one session and nothing else (`session/get`, `chat/stop`…).
pub fn sid(session: &str) -> SessionIdParams {
    SessionIdParams {
        session_id: session.into(),
    }
}

/// Params of `chat/send` with a client message id, for retries and interjections.
pub fn send_with_id(session: &str, text: &str, client_message_id: &str) -> ChatSendParams {
    ChatSendParams {
        session_id: session.into(),
        text: text.into(),
        client_message_id: Some(client_message_id.into()),
        attachments: Vec::new(),
        images: Vec::new(),
    }
}

/// Params of `chat/send` of plain text.
pub fn say(session: &str, text: &str) -> ChatSendParams {
    ChatSendParams {
        session_id: session.into(),
        text: text.into(),
        client_message_id: None,
        attachments: Vec::new(),
        images: Vec::new(),
    }
}

/// Params of `approval/respond`.
pub fn answer(approval: &str, decision: ApprovalDecision) -> ApprovalRespondParams {
    ApprovalRespondParams {
        approval_id: approval.into(),
        decision,
        rule: None,
        reason: None,
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

    /// `session/create` params for the scripted replay model working in [`Scratch::workspace`].
    pub fn replay_session(&self) -> SessionCreateParams {
        SessionCreateParams {
            account: Some("replay".into()),
            workspace_root: Some(self.workspace().display().to_string()),
            ..SessionCreateParams::default()
        }
    }

    /// The HOME (and XDG folders) of daemons on [`Scratch::db`]; see [`home_for`].
    pub fn home(&self) -> PathBuf {
        home_for(&self.db())
    }

    /// Writes the config file those daemons read (`$XDG_CONFIG_HOME/sidechat/config.toml`).
    pub fn write_config(&self, toml: &str) {
        let path = self.home().join(".config/sidechat/config.toml");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, toml).unwrap();
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

// ---------------------------------------------------------------------------------------------
// A run held mid-answer by the fake upstream, on a database a second daemon can open.

/// The settings of daemons talking to the fake upstream at `url`: leases last 2 s (heartbeat
/// every 500 ms) so a takeover comes soon; no test depends on how soon.
pub fn env(url: &str) -> Vec<(&'static str, String)> {
    vec![
        ("OPENAI_BASE_URL", format!("{url}/v1")),
        ("OPENAI_API_KEY", "sk-test".into()),
        ("SIDECHAT_OPENAI_MODEL", "gpt-4o".into()),
        ("SIDECHAT_MAX_RETRIES", "0".into()),
        ("SIDECHAT_LEASE_MS", "2000".into()),
    ]
}

/// An answer that streams `before`, then waits until the test sends on (or drops) the gate's
/// other end, then streams `after`: a run held mid-stream for as long as a test needs.
pub fn gated(
    before: Vec<Value>,
    gate: std::sync::mpsc::Receiver<()>,
    after: Vec<Value>,
) -> crate::upstream::Reply {
    use crate::upstream::openai;
    use std::io::Write;
    crate::upstream::Reply::writer(move |stream| {
        for chunk in &before {
            stream.write_all(openai::event(chunk).as_bytes())?;
        }
        stream.flush()?;
        let _ = gate.recv();
        for chunk in &after {
            stream.write_all(openai::event(chunk).as_bytes())?;
        }
        stream.write_all(openai::DONE.as_bytes())?;
        stream.flush()
    })
}

/// A chunk of answer text.
pub fn text(content: &str) -> Value {
    crate::upstream::openai::chunk(json!({"role": "assistant", "content": content}), None)
}

/// A replay daemon whose model answers "Done." to every request, and a session of it.
pub async fn daemon_answering_done(scratch: &Scratch) -> (Daemon, String) {
    let script = json!({"turns": [], "fallback": {"text": "Done."}});
    let daemon = Daemon::start(&scratch.db(), Options::with_env(scratch.replay(script))).await;
    let session = daemon.create_session(scratch.replay_session()).await;
    (daemon, session)
}

/// The texts of the newest request's last message: what the model read of the user's turn.
pub fn last_message_texts(scratch: &Scratch) -> Vec<String> {
    let requests = scratch.requests();
    let last = requests.last().unwrap()["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    last["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["text"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// A replay model's `run_command` call of `line`.
pub fn run_command_call(line: &str) -> Value {
    json!({"name": "run_command", "input": {"command": line}})
}

/// A replay daemon on the scratch database whose model makes `calls` in one turn, then says
/// "done"; every session follows the same script.
pub async fn daemon_making(scratch: &Scratch, calls: Vec<Value>) -> Daemon {
    let script = json!({"turns": [{"toolCalls": calls}, {"text": "done"}]});
    Daemon::start(&scratch.db(), Options::with_env(scratch.replay(script))).await
}

/// A new session working in the scratch workspace.
pub async fn session(daemon: &Daemon, scratch: &Scratch) -> String {
    daemon
        .create_session(SessionCreateParams {
            workspace_root: Some(scratch.workspace().display().to_string()),
            ..SessionCreateParams::default()
        })
        .await
}

/// Starts the fake upstream with `replies` and daemon A (with [`env`] and `extra_env`) on a new
/// database, and sends `message` on a new session; returns once A's client has the answer's
/// first delta, so the first reply is being streamed (and held, if it is [`gated`]). Returns
/// the upstream, the scratch folder, A, the session's id and the run's id.
pub async fn held_run(
    replies: Vec<crate::upstream::Reply>,
    message: &str,
    extra_env: &[(&'static str, &str)],
) -> (crate::upstream::Upstream, Scratch, Daemon, String, Value) {
    let upstream = crate::upstream::start(replies);
    let scratch = Scratch::new();
    let mut settings = env(&upstream.url);
    settings.extend(extra_env.iter().map(|(k, v)| (*k, v.to_string())));
    let mut a = Daemon::start(&scratch.db(), Options::with_env(settings)).await;
    let session = session(&a, &scratch).await;
    let run_id = json!(a.send(&session, message).await.run_id);
    a.events_until(|e| matches!(e, Event::TextDelta { .. }))
        .await;
    (upstream, scratch, a, session, run_id)
}

/// Another daemon on `scratch`'s database, talking to the same upstream.
pub async fn second_daemon(scratch: &Scratch, upstream: &crate::upstream::Upstream) -> Daemon {
    Daemon::start(&scratch.db(), Options::with_env(env(&upstream.url))).await
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
