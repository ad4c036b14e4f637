//! MCP servers end to end: the real daemon, the test server of `examples/mcp_fixture.rs`
//! (an rmcp stdio server that can also hang, crash or misbehave), and the replay model.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sidechat::protocol::{
    ApprovalDecision, ApprovalRespond, ApprovalRespondParams, ChatStop, Event, McpServerParams,
    McpServerState, McpServerStatus, Session, SessionBudget, SessionCreate, SessionCreateParams,
    SessionGet, SessionIdParams, SessionList, SessionListParams, SessionUpdate,
    SessionUpdateParams, ToolCallStatus,
};

use crate::harness::{Daemon, Options, Scratch, json_of};
use crate::mcp_fixture::mcp_fixture;

/// The fixture server, built once if missing or older than its source.
fn fixture() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| mcp_fixture(Path::new(env!("CARGO_BIN_EXE_sidechat"))))
}

/// A folder for one fixture server's log and mode file.
struct Server {
    dir: PathBuf,
}

impl Server {
    fn new(scratch: &Scratch, name: &str) -> Self {
        let dir = scratch.dir.path().join(format!("mcp-{name}"));
        std::fs::create_dir_all(&dir).unwrap();
        Self { dir }
    }

    fn mode_file(&self) -> PathBuf {
        self.dir.join("mode")
    }

    fn set_mode(&self, mode: &str) {
        std::fs::write(self.mode_file(), mode).unwrap();
    }

    /// The config-file table of this server.
    /// `extra` may set `startup_timeout_secs` (default here: 20).
    fn toml(&self, name: &str, extra: &str) -> String {
        let timeout = match extra.contains("startup_timeout_secs") {
            true => "",
            false => "startup_timeout_secs = 20\n",
        };
        format!(
            "[mcp_servers.{name}]\ncommand = {:?}\nargs = [\"--state\", {:?}, \"--mode-file\", {:?}]\n{timeout}{extra}\n",
            fixture().display().to_string(),
            self.dir.display().to_string(),
            self.mode_file().display().to_string(),
        )
    }

    fn params(&self, name: &str) -> McpServerParams {
        McpServerParams {
            name: name.into(),
            command: Some(fixture().display().to_string()),
            args: vec![
                "--state".into(),
                self.dir.display().to_string(),
                "--mode-file".into(),
                self.mode_file().display().to_string(),
            ],
            ..McpServerParams::default()
        }
    }

    fn log(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.join("log"))
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect()
    }

    /// Waits (bounded) until the log holds `line`.
    async fn wait_for_log(&self, line: &str) {
        for _ in 0..600 {
            if self.log().iter().any(|l| l == line) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the server never logged {line:?}; log: {:?}", self.log());
    }

    fn pids(&self, kind: &str) -> Vec<i32> {
        self.log()
            .iter()
            .filter_map(|l| l.strip_prefix(&format!("{kind} ")))
            .map(|pid| pid.parse().unwrap())
            .collect()
    }
}

fn session_params(workspace: &Path) -> SessionCreateParams {
    SessionCreateParams {
        workspace_root: Some(workspace.display().to_string()),
        ..SessionCreateParams::default()
    }
}

async fn session(daemon: &Daemon, id: &str) -> Session {
    daemon
        .call::<SessionGet>(SessionIdParams {
            session_id: id.into(),
        })
        .await
}

/// Polls `session/get` (bounded) until the named server is in `state`.
async fn wait_for_state(
    daemon: &Daemon,
    id: &str,
    name: &str,
    state: McpServerState,
) -> McpServerStatus {
    for _ in 0..600 {
        let view = session(daemon, id).await;
        if let Some(status) = view.mcp_servers.iter().find(|s| s.name == name)
            && status.state == state
        {
            return status.clone();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "MCP server {name} never reached {state:?}: {:?}",
        session(daemon, id).await.mcp_servers
    );
}

async fn respond(daemon: &Daemon, approval: String, decision: ApprovalDecision) {
    daemon
        .call::<ApprovalRespond>(ApprovalRespondParams {
            approval_id: approval,
            decision,
            rule: None,
            reason: None,
        })
        .await;
}

fn call(name: &str, input: Value) -> Value {
    json!({"name": name, "input": input})
}

/// The tool results of a transcript, by tool call, in order: (status, output).
fn results(transcript: &Value) -> Vec<(String, String)> {
    crate::transcripts::tool_results(transcript)
        .into_iter()
        .map(|(_, output, _, status)| (status, output))
        .collect()
}

fn notices(transcript: &Value) -> Vec<String> {
    transcript["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["role"] == "notice")
        .flat_map(|e| e["blocks"].as_array().unwrap().clone())
        .map(|b| b["text"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn tool_names(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .filter(|n| n.starts_with("mcp__"))
        .collect()
}

#[tokio::test]
async fn tools_are_sent_with_safe_names_and_calls_follow_the_approval_policy() {
    let scratch = Scratch::new();
    let server = Server::new(&scratch, "fix");
    scratch.write_config(&server.toml("fix", "trust = true"));
    let turns = json!({"turns": [
        {"toolCalls": [
            call("mcp__fix__echo", json!({"text": "hello"})),
            call("mcp__fix__touch", json!({})),
            call("mcp__fix__touch", json!({})),
            call("mcp__fix__picture", json!({})),
            call("mcp__fix__fails", json!({})),
            call("mcp__fix__big", json!({})),
        ]},
        {"text": "done"}
    ]});
    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(scratch.replay(turns))).await;
    let id = daemon
        .create_session(session_params(&scratch.workspace()))
        .await;
    let ready = wait_for_state(&daemon, &id, "fix", McpServerState::Ready).await;
    assert_eq!(ready.tools, 10);
    daemon.send(&id, "use the tools").await;
    // echo is read-only on a trusted server: it runs unasked. touch asks, twice.
    let (_, first) = daemon.until_approval().await;
    respond(&daemon, first, ApprovalDecision::Allow).await;
    let (_, second) = daemon.until_approval().await;
    respond(&daemon, second, ApprovalDecision::Deny).await;
    daemon.until_finished().await;

    let requests = scratch.requests();
    let names = tool_names(&requests[0]);
    let valid = regex::Regex::new("^[A-Za-z0-9_-]{1,64}$").unwrap();
    assert!(names.iter().all(|n| valid.is_match(n)), "{names:?}");
    assert_eq!(names.len(), 10);
    assert!(names.contains(&"mcp__fix__echo".to_string()));
    assert!(names.iter().any(|n| n.starts_with("mcp__fix__files_read_")));
    assert!(
        names
            .iter()
            .any(|n| n.starts_with("mcp__fix__a_tool_whose_name") && n.len() == 64)
    );
    let echo = requests[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "mcp__fix__echo")
        .unwrap();
    assert_eq!(
        echo["inputSchema"],
        json!({"type": "object", "properties": {"text": {"type": "string"}}})
    );

    let transcript = daemon.transcript(&id).await;
    let results = results(&transcript);
    let statuses: Vec<&str> = results.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(
        statuses,
        vec!["done", "done", "denied", "done", "error", "error"]
    );
    assert_eq!(results[0].1, "hello");
    assert_eq!(results[1].1, "touched");
    assert_eq!(
        results[3].1,
        "[image image/png, about 9 bytes, not shown]\n[resource picture.png: file:///tmp/picture.png]"
    );
    assert_eq!(results[4].1, "the fixture failed on purpose");
    assert!(
        results[5]
            .1
            .starts_with("The result of big was 102400 bytes, over the 64 KiB limit")
    );
    assert!(
        notices(&transcript)
            .iter()
            .any(|n| n.contains("mcp__fix__big returned 102400 bytes"))
    );
    let calls: Vec<String> = server
        .log()
        .into_iter()
        .filter(|l| l.starts_with("call "))
        .collect();
    assert_eq!(
        calls,
        vec![
            "call echo",
            "call touch",
            "call picture",
            "call fails",
            "call big"
        ]
    );
    daemon.close().await;
}

#[tokio::test]
async fn a_crash_mid_call_fails_the_call_and_the_server_restarts_on_next_need() {
    let scratch = Scratch::new();
    let server = Server::new(&scratch, "fix");
    scratch.write_config(&server.toml("fix", "trust = true"));
    let turns = json!({"turns": [
        {"toolCalls": [call("mcp__fix__crash", json!({}))]},
        {"text": "it crashed"},
        {"toolCalls": [call("mcp__fix__echo", json!({"text": "again"}))]},
        {"text": "done"}
    ]});
    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(scratch.replay(turns))).await;
    let id = daemon
        .create_session(session_params(&scratch.workspace()))
        .await;
    wait_for_state(&daemon, &id, "fix", McpServerState::Ready).await;
    daemon.send(&id, "crash it").await;
    // The crash approval: crash is not read-only.
    let (_, approval) = daemon.until_approval().await;
    respond(&daemon, approval, ApprovalDecision::Allow).await;
    let events = daemon.until_finished().await;
    assert!(matches!(
        &events.last().unwrap().event,
        Event::RunFinished { reason, .. } if serde_json::to_value(reason).unwrap() == "end_turn"
    ));
    let failed = wait_for_state(&daemon, &id, "fix", McpServerState::Failed).await;
    assert!(failed.last_error.unwrap().contains("stopped unexpectedly"));

    daemon.send(&id, "again").await;
    daemon.until_finished().await;
    let transcript = daemon.transcript(&id).await;
    let results = results(&transcript);
    assert_eq!(results[0].0, "error");
    assert!(
        results[0].1.contains("stopped during the call"),
        "{}",
        results[0].1
    );
    assert_eq!(results[1], ("done".to_string(), "again".to_string()));
    assert!(
        notices(&transcript)
            .iter()
            .any(|n| n.starts_with("MCP server \"fix\" stopped unexpectedly"))
    );
    assert_eq!(
        server.pids("start").len(),
        2,
        "restarted once: {:?}",
        server.log()
    );
    daemon.close().await;
}

#[tokio::test]
async fn a_server_that_never_starts_keeps_its_cached_tools_and_the_call_times_out() {
    let scratch = Scratch::new();
    let server = Server::new(&scratch, "fix");
    server.set_mode("normal");
    scratch.write_config(&server.toml("fix", "startup_timeout_secs = 2\ntrust = true"));
    let turns = json!({"turns": [
        {"toolCalls": [call("mcp__fix__echo", json!({"text": "hi"}))]},
        {"text": "done"}
    ]});
    let env = scratch.replay(turns);
    // A first daemon sees the server up, which caches its tools.
    let daemon = Daemon::start(&scratch.db(), Options::with_env(env.clone())).await;
    let id = daemon
        .create_session(session_params(&scratch.workspace()))
        .await;
    wait_for_state(&daemon, &id, "fix", McpServerState::Ready).await;
    daemon.close().await;

    server.set_mode("hang");
    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(env)).await;
    let view = session(&daemon, &id).await;
    assert!(matches!(
        view.mcp_servers[0].state,
        McpServerState::Starting | McpServerState::Idle
    ));
    daemon.send(&id, "call it").await;
    daemon.until_finished().await;
    let requests = scratch.requests();
    assert!(tool_names(&requests[0]).contains(&"mcp__fix__echo".to_string()));
    let transcript = daemon.transcript(&id).await;
    let results = results(&transcript);
    assert_eq!(results[0].0, "error");
    assert!(
        results[0].1.contains("did not start within 2 s"),
        "{}",
        results[0].1
    );
    let failed = wait_for_state(&daemon, &id, "fix", McpServerState::Failed).await;
    assert!(
        failed
            .last_error
            .unwrap()
            .contains("did not start within 2 s")
    );
    assert!(
        notices(&transcript)
            .iter()
            .any(|n| n.contains("did not start within 2 s"))
    );
    daemon.close().await;
}

#[tokio::test]
async fn stop_during_a_long_call_cancels_it_on_the_server() {
    let scratch = Scratch::new();
    let server = Server::new(&scratch, "fix");
    scratch.write_config(&server.toml("fix", "trust = true"));
    let turns =
        json!({"turns": [{"toolCalls": [call("mcp__fix__slow", json!({"seconds": 120}))]}]});
    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(scratch.replay(turns))).await;
    let id = daemon
        .create_session(session_params(&scratch.workspace()))
        .await;
    wait_for_state(&daemon, &id, "fix", McpServerState::Ready).await;
    daemon.send(&id, "be slow").await;
    daemon
        .events_until(|e| {
            matches!(
                e,
                Event::ToolCallUpdated {
                    status: ToolCallStatus::Running,
                    ..
                }
            )
        })
        .await;
    server.wait_for_log("call slow").await;
    daemon
        .call::<ChatStop>(SessionIdParams {
            session_id: id.clone(),
        })
        .await;
    daemon.until_finished().await;
    server.wait_for_log("cancelled slow").await;
    let results = results(&daemon.transcript(&id).await);
    assert_eq!(results[0].0, "cancelled");
    // The server itself lives on.
    assert_eq!(
        session(&daemon, &id).await.mcp_servers[0].state,
        McpServerState::Ready
    );
    daemon.close().await;
}

/// Whether a process is gone (or a zombie no one will run again).
fn gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

#[tokio::test]
async fn shutdown_leaves_no_server_process_behind() {
    let scratch = Scratch::new();
    let up = Server::new(&scratch, "up");
    let hung = Server::new(&scratch, "hung");
    hung.set_mode("hang");
    scratch.write_config(&format!(
        "{}{}",
        up.toml("up", ""),
        hung.toml("hung", "startup_timeout_secs = 600")
    ));
    let daemon = Daemon::start(&scratch.db(), Options::default()).await;
    let id = daemon
        .create_session(session_params(&scratch.workspace()))
        .await;
    wait_for_state(&daemon, &id, "up", McpServerState::Ready).await;
    for _ in 0..600 {
        if !hung.pids("grandchild").is_empty() && !up.pids("grandchild").is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pids: Vec<i32> = [&up, &hung]
        .iter()
        .flat_map(|s| [s.pids("start"), s.pids("grandchild")].concat())
        .collect();
    assert_eq!(pids.len(), 4, "{:?} {:?}", up.log(), hung.log());
    assert!(pids.iter().all(|p| !gone(*p)));
    daemon.close().await;
    for _ in 0..200 {
        if pids.iter().all(|p| gone(*p)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let left: Vec<i32> = pids.into_iter().filter(|p| !gone(*p)).collect();
    assert_eq!(left, Vec::<i32>::new(), "processes left behind");
}

#[tokio::test]
async fn broken_servers_are_notices_and_failed_calls_while_the_session_carries_on() {
    let scratch = Scratch::new();
    let modes = ["garbage", "init-error", "exit", "bad-tools"];
    let servers: Vec<Server> = modes.iter().map(|m| Server::new(&scratch, m)).collect();
    let mut config = String::from("[mcp_servers.missing]\ncommand = \"/nonexistent/mcp-server\"\n");
    for (mode, server) in modes.iter().zip(&servers) {
        server.set_mode(mode);
        config.push_str(&server.toml(&mode.replace('-', "_"), "startup_timeout_secs = 3"));
    }
    scratch.write_config(&config);
    let turns = json!({"turns": [
        {"toolCalls": [call("mcp__missing__anything", json!({}))]},
        {"text": "carried on"}
    ]});
    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(scratch.replay(turns))).await;
    let id = daemon
        .create_session(session_params(&scratch.workspace()))
        .await;
    let mut errors = Vec::new();
    for name in ["missing", "garbage", "init_error", "exit"] {
        let status = wait_for_state(&daemon, &id, name, McpServerState::Failed).await;
        errors.push((name, status.last_error.unwrap()));
    }
    assert!(
        errors[0]
            .1
            .starts_with("could not start: cannot run \"/nonexistent/mcp-server\""),
        "{errors:?}"
    );
    assert_eq!(
        errors[1].1,
        "did not start within 3 s (startup_timeout_secs); it was stopped"
    );
    assert!(
        errors[2]
            .1
            .starts_with("could not start: the MCP handshake failed"),
        "{errors:?}"
    );
    // Its exit and the end of its output race: either is told.
    let exited = [
        "could not start: its process exited before the MCP handshake (exit status 3)",
        "could not start: the MCP handshake failed",
    ];
    assert!(
        exited.iter().any(|e| errors[3].1.starts_with(e)),
        "{errors:?}"
    );
    let bad = wait_for_state(&daemon, &id, "bad_tools", McpServerState::Ready).await;
    assert_eq!(
        bad.tools, 10,
        "the invalid and the duplicate tool are left out"
    );

    daemon.send(&id, "call a tool of a missing server").await;
    let (_, approval) = daemon.until_approval().await;
    respond(&daemon, approval, ApprovalDecision::Allow).await;
    daemon.until_finished().await;
    let transcript = daemon.transcript(&id).await;
    let results = results(&transcript);
    assert_eq!(results[0].0, "error");
    assert!(
        results[0]
            .1
            .contains("There is no tool named \"mcp__missing__anything\""),
        "{}",
        results[0].1
    );
    let last = transcript["entries"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["blocks"][0]["text"], "carried on");
    let notices = notices(&transcript);
    assert!(
        notices
            .iter()
            .any(|n| n.contains("tool \"bad_schema\": its input schema's type is not \"object\"")),
        "{notices:?}"
    );
    let requests = scratch.requests();
    let names = tool_names(&requests[0]);
    assert!(!names.iter().any(|n| n.contains("bad_schema")));
    assert_eq!(
        names
            .iter()
            .filter(|n| *n == "mcp__bad_tools__echo")
            .count(),
        1
    );
    daemon.close().await;
}

#[tokio::test]
async fn invalid_session_servers_and_headers_are_refused_and_nothing_is_created() {
    let scratch = Scratch::new();
    let daemon = Daemon::start(&scratch.db(), Options::default()).await;
    let cases = [
        (
            McpServerParams {
                name: "a".into(),
                ..McpServerParams::default()
            },
            "needs `command`",
        ),
        (
            McpServerParams {
                name: "bad name".into(),
                command: Some("x".into()),
                ..McpServerParams::default()
            },
            "must be 1 to 32",
        ),
        (
            McpServerParams {
                name: "w".into(),
                url: Some("not a url".into()),
                ..McpServerParams::default()
            },
            "not a valid URL",
        ),
        (
            McpServerParams {
                name: "h".into(),
                url: Some("http://127.0.0.1:9/mcp".into()),
                headers: [("X-Key".into(), "one\ntwo".into())].into(),
                ..McpServerParams::default()
            },
            "not a valid HTTP header value",
        ),
        (
            McpServerParams {
                name: "h".into(),
                url: Some("http://127.0.0.1:9/mcp".into()),
                headers: [("Bad Name".into(), "x".into())].into(),
                ..McpServerParams::default()
            },
            "not a valid HTTP header name",
        ),
        (
            McpServerParams {
                name: "h".into(),
                url: Some("http://127.0.0.1:9/mcp".into()),
                headers: [("Content-Type".into(), "text/plain".into())].into(),
                ..McpServerParams::default()
            },
            "set by the MCP transport itself",
        ),
        (
            McpServerParams {
                name: "h".into(),
                command: Some("x".into()),
                headers: [("X-Key".into(), "k".into())].into(),
                ..McpServerParams::default()
            },
            "apply only to a `url`",
        ),
    ];
    for (server, message) in cases {
        let error = daemon
            .try_call::<SessionCreate>(SessionCreateParams {
                mcp_servers: Some(vec![server]),
                ..session_params(&scratch.workspace())
            })
            .await
            .unwrap_err();
        assert_eq!(error.code, -32602);
        assert!(error.message.contains(message), "{}", error.message);
    }
    let listed = daemon
        .call::<SessionList>(SessionListParams::default())
        .await;
    assert_eq!(listed.sessions, vec![]);
    daemon.close().await;
}

async fn tool_tokens(daemon: &Daemon, id: &str) -> u64 {
    let budget = json_of(
        daemon
            .call::<SessionBudget>(SessionIdParams {
                session_id: id.into(),
            })
            .await,
    );
    budget["snapshot"]["toolTokens"].as_u64().unwrap()
}

#[tokio::test]
async fn session_servers_and_list_changes_reach_the_request_and_the_budget() {
    let scratch = Scratch::new();
    let server = Server::new(&scratch, "own");
    let turns = json!({"turns": [
        {"toolCalls": [call("mcp__own__grow", json!({}))]},
        {"text": "grown"},
        {"text": "second"}
    ]});
    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(scratch.replay(turns))).await;
    let plain = daemon
        .create_session(session_params(&scratch.workspace()))
        .await;
    let with = daemon
        .create_session(SessionCreateParams {
            mcp_servers: Some(vec![server.params("own")]),
            ..session_params(&scratch.workspace())
        })
        .await;
    assert_eq!(session(&daemon, &plain).await.mcp_servers, vec![]);
    wait_for_state(&daemon, &with, "own", McpServerState::Ready).await;
    let (plain_tokens, with_tokens) = (
        tool_tokens(&daemon, &plain).await,
        tool_tokens(&daemon, &with).await,
    );
    assert!(
        with_tokens > plain_tokens + 100,
        "{plain_tokens} vs {with_tokens}"
    );

    daemon.send(&with, "grow").await;
    let (_, approval) = daemon.until_approval().await;
    respond(&daemon, approval, ApprovalDecision::Allow).await;
    daemon.until_finished().await;
    for _ in 0..600 {
        if session(&daemon, &with).await.mcp_servers[0].tools == 11 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(tool_tokens(&daemon, &with).await > with_tokens);
    daemon.send(&with, "again").await;
    daemon.until_finished().await;
    let requests = scratch.requests();
    assert!(!tool_names(&requests[0]).contains(&"mcp__own__extra".to_string()));
    assert!(tool_names(&requests[2]).contains(&"mcp__own__extra".to_string()));
    daemon.close().await;
}

/// The fixture serving over streamable HTTP, started by the test and killed when dropped.
struct HttpServer {
    server: Server,
    process: std::process::Child,
    url: String,
}

impl HttpServer {
    async fn start(scratch: &Scratch, required_headers: &[&str]) -> Self {
        let server = Server::new(scratch, "http");
        let port_file = server.dir.join("port");
        let mut command = std::process::Command::new(fixture());
        command
            .arg("--state")
            .arg(&server.dir)
            .arg("--http")
            .arg(&port_file);
        for header in required_headers {
            command.args(["--require-header", header]);
        }
        let process = command.spawn().expect("run the fixture");
        let mut started = Self {
            server,
            process,
            url: String::new(),
        };
        for _ in 0..600 {
            if let Ok(port) = std::fs::read_to_string(&port_file) {
                started.url = format!("http://127.0.0.1:{port}/mcp");
                return started;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the HTTP fixture never wrote its port");
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

#[tokio::test]
async fn an_http_server_gets_its_headers_and_one_without_them_is_a_notice() {
    let scratch = Scratch::new();
    let http = HttpServer::start(
        &scratch,
        &["X-Api-Key: key-1", "Authorization: Bearer token-2"],
    )
    .await;
    // `web` sends both credentials; `bare` the same server without them: 401.
    scratch.write_config(&format!(
        "[mcp_servers.web]\nurl = {url:?}\nheaders = {{ \"X-Api-Key\" = \"key-1\" }}\n\
         bearer_token_env_var = \"FIXTURE_TOKEN\"\ntrust = true\n\
         [mcp_servers.bare]\nurl = {url:?}\n",
        url = http.url
    ));
    let turns = json!({"turns": [
        {"toolCalls": [call("mcp__web__echo", json!({"text": "over http"}))]},
        {"text": "done"}
    ]});
    let mut env = scratch.replay(turns);
    env.push(("FIXTURE_TOKEN", "token-2".into()));
    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(env)).await;
    let id = daemon
        .create_session(session_params(&scratch.workspace()))
        .await;
    let ready = wait_for_state(&daemon, &id, "web", McpServerState::Ready).await;
    assert_eq!(ready.tools, 10);
    let refused = wait_for_state(&daemon, &id, "bare", McpServerState::Failed).await;
    assert_eq!(
        refused.last_error.as_deref(),
        Some(
            "could not start: the server refused the request as unauthorized (HTTP 401): check its `headers` or `bearer_token_env_var`"
        )
    );

    daemon.send(&id, "call it over http").await;
    daemon.until_finished().await;
    let transcript = daemon.transcript(&id).await;
    assert_eq!(
        results(&transcript),
        vec![("done".to_string(), "over http".to_string())]
    );
    assert!(
        notices(&transcript)
            .iter()
            .any(|n| n.starts_with("MCP server \"bare\" could not start: the server refused the request as unauthorized (HTTP 401)")),
        "{:?}",
        notices(&transcript)
    );
    let requests = scratch.requests();
    let names = tool_names(&requests[0]);
    assert!(names.contains(&"mcp__web__echo".to_string()));
    assert!(!names.iter().any(|n| n.starts_with("mcp__bare__")));
    let log = http.server.log();
    assert!(log.contains(&"call echo".to_string()), "{log:?}");
    assert!(log.contains(&"authorized POST".to_string()), "{log:?}");
    assert!(
        log.contains(&"unauthorized X-Api-Key,Authorization".to_string()),
        "{log:?}"
    );
    daemon.close().await;
}

#[tokio::test]
async fn a_server_that_exits_while_its_child_holds_stdout_fails_the_call_at_once() {
    let scratch = Scratch::new();
    let server = Server::new(&scratch, "fix");
    server.set_mode("leaky-stdout");
    // A call cut off only by the tool timeout would take 10 minutes and say so.
    scratch.write_config(&server.toml("fix", "tool_timeout_secs = 600"));
    let turns = json!({"turns": [
        {"toolCalls": [call("mcp__fix__crash", json!({}))]},
        {"text": "it crashed"},
    ]});
    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(scratch.replay(turns))).await;
    let id = daemon
        .create_session(session_params(&scratch.workspace()))
        .await;
    wait_for_state(&daemon, &id, "fix", McpServerState::Ready).await;
    let grandchild = server.pids("grandchild")[0];
    assert!(!gone(grandchild));
    daemon.send(&id, "crash it").await;
    let (_, approval) = daemon.until_approval().await;
    respond(&daemon, approval, ApprovalDecision::Allow).await;
    daemon.until_finished().await;
    let failed = wait_for_state(&daemon, &id, "fix", McpServerState::Failed).await;
    assert_eq!(
        failed.last_error.as_deref(),
        Some("stopped unexpectedly (its process exited (exit status 1))")
    );
    let transcript = daemon.transcript(&id).await;
    assert_eq!(
        results(&transcript),
        vec![(
            "error".to_string(),
            "The call to crash failed: MCP server \"fix\" stopped during the call (its process exited (exit status 1))".to_string()
        )]
    );
    assert!(
        notices(&transcript)
            .iter()
            .any(|n| n.starts_with("MCP server \"fix\" stopped unexpectedly (its process exited")),
        "{:?}",
        notices(&transcript)
    );
    // The process it left behind went with its group.
    for _ in 0..200 {
        if gone(grandchild) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(gone(grandchild), "the grandchild outlived its server");
    daemon.close().await;
}

#[tokio::test]
async fn a_session_server_offers_its_cached_tools_at_once_after_a_restart_and_no_secret_is_stored()
{
    let scratch = Scratch::new();
    let server = Server::new(&scratch, "own");
    let secret = "s3cret-value-of-the-test";
    let own = McpServerParams {
        env: [("FIXTURE_TOKEN".to_string(), secret.to_string())].into(),
        ..server.params("own")
    };
    let turns = json!({"turns": [{"text": "first"}]});
    let env = scratch.replay(turns);
    let daemon = Daemon::start(&scratch.db(), Options::with_env(env.clone())).await;
    let id = daemon
        .create_session(SessionCreateParams {
            mcp_servers: Some(vec![own]),
            ..session_params(&scratch.workspace())
        })
        .await;
    wait_for_state(&daemon, &id, "own", McpServerState::Ready).await;
    daemon.close().await;
    let dir = scratch.db().parent().unwrap().to_path_buf();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            let bytes = std::fs::read(&path).unwrap();
            let found = bytes.windows(secret.len()).any(|w| w == secret.as_bytes());
            assert!(!found, "{} holds the secret", path.display());
        }
    }

    // The server now never answers: tools offered can only come from the cache.
    server.set_mode("hang");
    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(env)).await;
    daemon.send(&id, "which tools?").await;
    daemon.until_finished().await;
    let names = tool_names(&scratch.requests()[0]);
    assert!(names.contains(&"mcp__own__echo".to_string()), "{names:?}");
    assert_eq!(names.len(), 10, "{names:?}");
    assert_eq!(
        session(&daemon, &id).await.mcp_servers[0].state,
        McpServerState::Starting
    );
    daemon.close().await;
}

#[tokio::test]
async fn after_a_restart_session_update_gives_an_http_server_its_headers_again() {
    let scratch = Scratch::new();
    let http = HttpServer::start(&scratch, &["X-Api-Key: key-1"]).await;
    let web = McpServerParams {
        name: "web".into(),
        url: Some(http.url.clone()),
        headers: [("X-Api-Key".into(), "key-1".into())].into(),
        trust: Some(true),
        ..McpServerParams::default()
    };
    let turns = json!({"turns": [
        {"toolCalls": [call("mcp__web__echo", json!({"text": "given again"}))]},
        {"text": "done"}
    ]});
    let env = scratch.replay(turns);
    let daemon = Daemon::start(&scratch.db(), Options::with_env(env.clone())).await;
    let id = daemon
        .create_session(SessionCreateParams {
            mcp_servers: Some(vec![web.clone()]),
            ..session_params(&scratch.workspace())
        })
        .await;
    wait_for_state(&daemon, &id, "web", McpServerState::Ready).await;
    daemon.close().await;

    // The header's value was not stored: the restarted daemon is refused, and told the fix.
    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(env)).await;
    let refused = wait_for_state(&daemon, &id, "web", McpServerState::Failed).await;
    assert_eq!(
        refused.last_error.as_deref(),
        Some(
            "could not start: the server refused the request as unauthorized (HTTP 401): check its `headers` or `bearer_token_env_var` (its header values are not kept over a restart of the daemon: give the server again with `session/update`'s `mcpServers`)"
        )
    );

    let updated = daemon
        .call::<SessionUpdate>(SessionUpdateParams {
            session_id: id.clone(),
            mcp_servers: Some(vec![web]),
            ..SessionUpdateParams::default()
        })
        .await;
    assert_eq!(updated.id, id);
    wait_for_state(&daemon, &id, "web", McpServerState::Ready).await;
    daemon.send(&id, "call it").await;
    daemon.until_finished().await;
    assert_eq!(
        results(&daemon.transcript(&id).await),
        vec![("done".to_string(), "given again".to_string())]
    );

    // An invalid list is refused and changes nothing; an empty one removes the servers.
    let error = daemon
        .try_call::<SessionUpdate>(SessionUpdateParams {
            session_id: id.clone(),
            mcp_servers: Some(vec![McpServerParams {
                name: "web".into(),
                ..McpServerParams::default()
            }]),
            ..SessionUpdateParams::default()
        })
        .await
        .unwrap_err();
    assert_eq!(error.code, -32602);
    assert_eq!(session(&daemon, &id).await.mcp_servers.len(), 1);
    daemon
        .call::<SessionUpdate>(SessionUpdateParams {
            session_id: id.clone(),
            mcp_servers: Some(Vec::new()),
            ..SessionUpdateParams::default()
        })
        .await;
    assert_eq!(session(&daemon, &id).await.mcp_servers, vec![]);
    daemon.close().await;
}
