//! `sidechat chat`: a terminal chat client that spawns `sidechat serve` as an editor does.
//!
//! It shows streaming text, tool calls and their state, and approval prompts; the user can keep
//! typing while a run works, and Ctrl-C stops the run (twice, or with no run, quits).

mod connection;
mod render;

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;

pub use connection::{Connection, RpcError};
use render::Screen;

use crate::protocol::{ApprovalDecision, Event, InitializeResult, SessionEventParams};
use crate::rpc::framing::Framing;

pub struct ChatOptions {
    pub db: Option<PathBuf>,
    pub session: Option<String>,
    pub workspace: Option<PathBuf>,
}

/// Runs the terminal client to completion; the process exit code.
pub fn run(options: ChatOptions) -> anyhow::Result<i32> {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let code = tokio.block_on(chat(options));
    tokio.shutdown_background();
    code
}

fn daemon_command(options: &ChatOptions) -> anyhow::Result<tokio::process::Command> {
    let exe = std::env::current_exe().context("cannot find the sidechat executable")?;
    let mut command = tokio::process::Command::new(exe);
    command.arg("serve");
    if let Some(db) = &options.db {
        command.arg("--db").arg(db);
    }
    // The daemon's logs would scribble over the chat; they go to a file in the temp folder.
    let log = std::env::temp_dir().join(format!("sidechat-chat-{}.log", std::process::id()));
    command
        .arg("--log-file")
        .arg(&log)
        .stderr(std::process::Stdio::null())
        // Its own process group: Ctrl-C in the terminal is for the client (it stops the run),
        // not a signal that kills the daemon as an editor's would never be killed.
        .process_group(0);
    Ok(command)
}

async fn chat(options: ChatOptions) -> anyhow::Result<i32> {
    let (connection, mut notes) =
        Connection::spawn(daemon_command(&options)?, Framing::ContentLength)?;
    let init: InitializeResult = serde_json::from_value(
        connection
            .request(
                "initialize",
                json!({"clientInfo": {"name": "sidechat-chat", "version": env!("CARGO_PKG_VERSION")}, "protocolVersion": 1}),
            )
            .await??,
    )?;
    connection.notify("initialized", json!({})).await?;
    let mut screen = Screen::new(std::io::stdout());
    let session = open_session(&connection, &options).await?;
    let session_id = session["id"].as_str().unwrap_or_default().to_string();
    screen.banner(&init, &session);

    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut running = false;
    let mut pending_approval: Option<String> = None;
    let mut interrupts = 0u32;
    let mut ctrl_c = CtrlC::listen()?;
    screen.prompt();
    loop {
        tokio::select! {
            note = notes.recv() => {
                let Some(note) = note else {
                    screen.line("The daemon exited.");
                    return Ok(1);
                };
                let Some(event) = as_event(&note) else { continue };
                match &event.event {
                    Event::RunStarted { .. } => running = true,
                    Event::ApprovalRequested { approval } => pending_approval = Some(approval.approval_id.clone()),
                    Event::ApprovalResolved { approval_id, .. } if pending_approval.as_deref() == Some(approval_id) => pending_approval = None,
                    Event::RunFinished { .. } => {
                        running = false;
                        pending_approval = None;
                        interrupts = 0;
                    }
                    _ => {}
                }
                screen.event(&event.event);
            }
            line = lines.next_line() => {
                let Some(line) = line? else { break };
                let line = line.trim().to_string();
                if line.is_empty() {
                    screen.prompt();
                    continue;
                }
                if line == "/quit" || line == "/exit" {
                    break;
                }
                if line == "/stop" {
                    stop(&connection, &session_id, &mut screen).await?;
                    continue;
                }
                if let Some(approval_id) = pending_approval.clone()
                    && let Some(decision) = parse_decision(&line)
                {
                    let answer = connection
                        .request("approval/respond", json!({"approvalId": approval_id, "decision": decision}))
                        .await?;
                    if let Err(e) = answer {
                        screen.line(&format!("! {}", e.message));
                    }
                    continue;
                }
                match connection.request("chat/send", json!({"sessionId": session_id, "text": line})).await? {
                    Ok(sent) if sent["queued"] == true => {
                        screen.line("  ↳ queued: the model reads it after the current step");
                    }
                    Ok(_) => {}
                    Err(e) => {
                        screen.line(&format!("! not sent: {}", e.message));
                        screen.prompt();
                    }
                }
            }
            _ = ctrl_c.pressed() => {
                interrupts += 1;
                if running && interrupts == 1 {
                    screen.line("^C stopping the run (Ctrl-C again to quit)");
                    stop(&connection, &session_id, &mut screen).await?;
                } else {
                    break;
                }
            }
        }
    }
    screen.line("Bye.");
    let code = connection.close().await?;
    Ok(if code == 0 { 0 } else { 1 })
}

/// Ctrl-C presses, heard by one listener kept for the whole chat: a listener made anew on each
/// turn of the loop misses a press that lands while the loop is drawing an event.
struct CtrlC {
    #[cfg(unix)]
    signal: tokio::signal::unix::Signal,
}

impl CtrlC {
    fn listen() -> std::io::Result<Self> {
        Ok(Self {
            #[cfg(unix)]
            signal: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?,
        })
    }

    async fn pressed(&mut self) {
        #[cfg(unix)]
        if self.signal.recv().await.is_none() {
            std::future::pending::<()>().await;
        }
        #[cfg(not(unix))]
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

async fn open_session(connection: &Connection, options: &ChatOptions) -> anyhow::Result<Value> {
    if let Some(id) = &options.session {
        return connection
            .request("session/get", json!({"sessionId": id}))
            .await?
            .map_err(|e| anyhow::anyhow!("cannot open session {id}: {}", e.message));
    }
    let workspace = match &options.workspace {
        Some(w) => w.clone(),
        None => std::env::current_dir()?,
    };
    let workspace = workspace.canonicalize().unwrap_or(workspace);
    connection
        .request(
            "session/create",
            json!({"title": "Terminal chat", "workspaceRoot": workspace.display().to_string()}),
        )
        .await?
        .map_err(|e| anyhow::anyhow!("cannot create a session: {}", e.message))
}

async fn stop(
    connection: &Connection,
    session_id: &str,
    screen: &mut Screen<std::io::Stdout>,
) -> anyhow::Result<()> {
    if let Err(e) = connection
        .request("chat/stop", json!({"sessionId": session_id}))
        .await?
    {
        screen.line(&format!("! {}", e.message));
    }
    Ok(())
}

fn as_event(note: &Value) -> Option<SessionEventParams> {
    if note.get("method")?.as_str()? != "session/event" {
        return None;
    }
    serde_json::from_value(note.get("params")?.clone()).ok()
}

/// What the user typed at an approval prompt.
fn parse_decision(line: &str) -> Option<ApprovalDecision> {
    match line.to_lowercase().as_str() {
        "a" | "y" | "yes" | "allow" => Some(ApprovalDecision::Allow),
        "w" | "always" | "allow always" => Some(ApprovalDecision::AllowAlways),
        "d" | "n" | "no" | "deny" => Some(ApprovalDecision::Deny),
        _ => None,
    }
}

/// Flushes stdout; the terminal is the only place this client writes.
fn flush(out: &mut impl Write) {
    let _ = out.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions() {
        assert_eq!(parse_decision("A"), Some(ApprovalDecision::Allow));
        assert_eq!(
            parse_decision("always"),
            Some(ApprovalDecision::AllowAlways)
        );
        assert_eq!(parse_decision("deny"), Some(ApprovalDecision::Deny));
        assert_eq!(parse_decision("what?"), None);
    }
}
