//! An MCP server for sidechat's tests, built with rmcp's server side. It speaks MCP over stdio
//! and can misbehave on purpose.
//!
//! `mcp_fixture --state DIR [--mode MODE] [--mode-file PATH]`: events go to `DIR/log`, one per
//! line (`start PID`, `grandchild PID`, `call TOOL`, `cancelled TOOL`). The mode (from
//! `--mode-file` when it exists, else `--mode`, else `normal`):
//! - `normal`: serves the tools below;
//! - `leaky-stdout`: as `normal`, but its grandchild keeps the server's stdout open, so the
//!   server exiting (`crash`) does not close the pipe;
//! - `bad-tools`: also lists a tool with an invalid schema and a duplicate name;
//! - `hang`: reads requests and never answers;
//! - `garbage`: writes lines that are not JSON-RPC, never answers;
//! - `init-error`: answers `initialize` with a JSON-RPC error;
//! - `exit`: exits at once.
//!
//! `mcp_fixture --state DIR --http PORT_FILE [--require-header "NAME: VALUE"]...` serves the
//! same tools over streamable HTTP on 127.0.0.1 instead, writes its port to `PORT_FILE`, and
//! answers 401 to a request without every required header (logging `unauthorized NAMES`, else
//! `authorized METHOD`).

use std::convert::Infallible;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, StatusCode};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ListToolsResult,
    PaginatedRequestParams, ServerConfig,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

struct Fixture {
    log: PathBuf,
    bad_tools: bool,
    /// Set by `grow`: an extra tool is listed from then on.
    grown: AtomicBool,
}

fn log(path: &PathBuf, line: &str) {
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = writeln!(file, "{line}");
    }
}

fn tool(name: &str, description: &str, read_only: bool, properties: Value) -> Value {
    json!({
        "name": name,
        "description": description,
        "inputSchema": {"type": "object", "properties": properties},
        "annotations": {"readOnlyHint": read_only}
    })
}

fn text(text: &str, is_error: bool) -> CallToolResult {
    serde_json::from_value(
        json!({"content": [{"type": "text", "text": text}], "isError": is_error}),
    )
    .expect("a valid result")
}

impl Fixture {
    fn tools(&self) -> Vec<Value> {
        let mut tools = vec![
            tool(
                "echo",
                "Echoes its text.",
                true,
                json!({"text": {"type": "string"}}),
            ),
            tool(
                "files.read",
                "A read-only tool with a dot in its name.",
                true,
                json!({}),
            ),
            tool("touch", "A tool that changes something.", false, json!({})),
            tool(
                "slow",
                "Sleeps for `seconds`.",
                true,
                json!({"seconds": {"type": "number"}}),
            ),
            tool("crash", "Exits the server mid-call.", false, json!({})),
            tool("big", "Returns 100 KiB of text.", true, json!({})),
            tool(
                "picture",
                "Returns an image and a resource link.",
                true,
                json!({}),
            ),
            tool("fails", "Returns isError.", true, json!({})),
            tool("grow", "Lists one more tool from now on.", false, json!({})),
            tool(
                "a_tool_whose_name_is_much_longer_than_the_providers_allow_for_names",
                "A long name.",
                true,
                json!({}),
            ),
        ];
        if self.grown.load(Ordering::SeqCst) {
            tools.push(tool("extra", "Listed after grow.", true, json!({})));
        }
        if self.bad_tools {
            tools.push(json!({"name": "bad_schema", "inputSchema": {"type": "string"}}));
            tools.push(tool("echo", "A duplicate.", true, json!({})));
        }
        tools
    }
}

impl ServerHandler for Fixture {
    fn get_info(&self) -> ServerConfig {
        serde_json::from_value(json!({
            "protocolVersion": "2025-06-18",
            "capabilities": {"tools": {"listChanged": true}},
            "serverInfo": {"name": "mcp_fixture", "version": "1.0.0"}
        }))
        .expect("valid server info")
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(serde_json::from_value(json!({"tools": self.tools()})).expect("valid tools"))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        log(&self.log, &format!("call {name}"));
        let args = Value::Object(request.arguments.unwrap_or_default());
        let result = match name.as_str() {
            "echo" => text(args["text"].as_str().unwrap_or(""), false),
            "files.read" => text("read-only contents", false),
            "touch" => text("touched", false),
            "slow" => {
                let seconds = args["seconds"].as_f64().unwrap_or(30.0);
                tokio::select! {
                    _ = context.ct.cancelled() => {
                        log(&self.log, "cancelled slow");
                        text("cancelled", true)
                    }
                    _ = tokio::time::sleep(Duration::from_secs_f64(seconds)) => text("slept", false),
                }
            }
            "crash" => std::process::exit(1),
            "big" => text(&"x".repeat(100 * 1024), false),
            "picture" => serde_json::from_value(json!({"content": [
                {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
                {"type": "resource_link", "uri": "file:///tmp/picture.png", "name": "picture.png"}
            ]}))
            .expect("a valid result"),
            "fails" => text("the fixture failed on purpose", true),
            "grow" => {
                self.grown.store(true, Ordering::SeqCst);
                let _ = context.peer.notify_tool_list_changed().await;
                text("grown", false)
            }
            other => text(&format!("{other}: done"), false),
        };
        Ok(result.into())
    }
}

/// Answers only `initialize`, with an error, then reads on.
async fn init_error() {
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut stdout = tokio::io::stdout();
    while let Ok(Some(line)) = lines.next_line().await {
        let Ok(request) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if request["method"] == "initialize" {
            let reply = json!({"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32603, "message": "the fixture refuses to initialize"}});
            let _ = stdout.write_all(format!("{reply}\n").as_bytes()).await;
            let _ = stdout.flush().await;
        }
    }
}

/// Reads and never answers; with `garbage`, writes lines that are not JSON-RPC.
async fn silent(garbage: bool) {
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut stdout = tokio::io::stdout();
    while let Ok(Some(_line)) = lines.next_line().await {
        if garbage {
            let _ = stdout
                .write_all(b"this is not json\n{\"half\": \n\x01\x02garbage\n")
                .await;
            let _ = stdout.flush().await;
        }
    }
    // Stdin closed: stay alive, as a wedged server would, until killed.
    tokio::time::sleep(Duration::from_secs(3600)).await;
}

/// Serves the fixture's tools over streamable HTTP until killed.
async fn serve_http(
    port_file: PathBuf,
    log_path: PathBuf,
    required: Vec<(String, String)>,
) -> anyhow::Result<()> {
    let factory_log = log_path.clone();
    let service = StreamableHttpService::new(
        move || {
            Ok(Fixture {
                log: factory_log.clone(),
                bad_tools: false,
                grown: AtomicBool::new(false),
            })
        },
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    // Written whole, then renamed: a reader never sees half a port.
    let partial = port_file.with_extension("partial");
    std::fs::write(&partial, port.to_string())?;
    std::fs::rename(&partial, &port_file)?;
    let required = Arc::new(required);
    loop {
        let (stream, _) = listener.accept().await?;
        let (service, required, log_path) = (service.clone(), required.clone(), log_path.clone());
        let answer = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
            let (service, required, log_path) =
                (service.clone(), required.clone(), log_path.clone());
            async move {
                let missing: Vec<&str> = required
                    .iter()
                    .filter(|(name, value)| {
                        request
                            .headers()
                            .get(name.as_str())
                            .and_then(|v| v.to_str().ok())
                            != Some(value.as_str())
                    })
                    .map(|(name, _)| name.as_str())
                    .collect();
                if !missing.is_empty() {
                    log(&log_path, &format!("unauthorized {}", missing.join(",")));
                    let refused = Response::builder()
                        .status(StatusCode::UNAUTHORIZED)
                        .header("WWW-Authenticate", "Bearer realm=\"mcp_fixture\"")
                        .body(Full::new(bytes::Bytes::new()).boxed())
                        .expect("a valid response");
                    return Ok::<_, Infallible>(refused);
                }
                log(&log_path, &format!("authorized {}", request.method()));
                Ok(service.handle(request).await)
            }
        });
        tokio::spawn(async move {
            let io = hyper_util::rt::TokioIo::new(stream);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, answer)
                .await;
        });
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let state = PathBuf::from(arg("--state").unwrap_or_else(|| ".".into()));
    let log_path = state.join("log");
    let mode = arg("--mode-file")
        .and_then(|path| std::fs::read_to_string(path).ok())
        .map(|m| m.trim().to_string())
        .or_else(|| arg("--mode"))
        .unwrap_or_else(|| "normal".into());
    log(&log_path, &format!("start {}", std::process::id()));
    if let Some(port_file) = arg("--http") {
        let required = args
            .windows(2)
            .filter(|pair| pair[0] == "--require-header")
            .filter_map(|pair| pair[1].split_once(':'))
            .map(|(name, value)| (name.trim().to_string(), value.trim().to_string()))
            .collect();
        return serve_http(PathBuf::from(port_file), log_path, required).await;
    }
    eprintln!("mcp_fixture starting in mode {mode}");
    // A process of the server's own, to show the whole group goes on shutdown. With
    // `leaky-stdout` it inherits the server's stdout, as a careless server's helper would.
    let grandchild_stdout = match mode.as_str() {
        "leaky-stdout" => std::process::Stdio::inherit(),
        _ => std::process::Stdio::null(),
    };
    let grandchild = std::process::Command::new("sleep")
        .arg("3600")
        .stdin(std::process::Stdio::null())
        .stdout(grandchild_stdout)
        .spawn();
    if let Ok(child) = grandchild {
        log(&log_path, &format!("grandchild {}", child.id()));
    }
    match mode.as_str() {
        "exit" => std::process::exit(3),
        "hang" => silent(false).await,
        "garbage" => silent(true).await,
        "init-error" => init_error().await,
        _ => {
            let fixture = Fixture {
                log: log_path,
                bad_tools: mode == "bad-tools",
                grown: AtomicBool::new(false),
            };
            fixture
                .serve(rmcp::transport::stdio())
                .await?
                .waiting()
                .await?;
        }
    }
    Ok(())
}
