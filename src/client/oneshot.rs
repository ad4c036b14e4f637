//! One-shot mode: `sidechat chat -p TEXT` (or text piped on stdin) runs one turn, prints the
//! answer and exits with a status that says how the run ended.
//!
//! Nobody is there to answer an approval prompt: tools named with `--allow` are allowed, every
//! other call is denied at once.

use std::io::{IsTerminal, Read, Write};

use anyhow::{Context, bail};

use super::ChatArgs;
use super::daemon::{Daemon, Notes};
use super::interactive::as_event;
use super::open::{self, Ask};
use super::render::{Plain, Screen, describe_call};
use super::style::{Paint, Style};
use crate::protocol::{
    ApprovalDecision, ApprovalRespond, ApprovalRespondParams, Block, ChatSend, ChatSendParams,
    ChatStop, Event, FinishReason, Role, SessionEventParams, SessionIdParams,
};

/// The exit status for how a run ended.
pub fn exit_code(reason: FinishReason) -> i32 {
    match reason {
        FinishReason::EndTurn => 0,
        FinishReason::Error => 1,
        FinishReason::MaxIterations => 3,
        FinishReason::BudgetSpent => 4,
        FinishReason::CutOff => 5,
        FinishReason::Refusal => 6,
        FinishReason::Stopped => 130,
    }
}

/// Refuses an `--allow` naming no tool (a typo would otherwise deny the call it meant to
/// allow), naming the tools there are. An MCP server's tools are known only once it runs, so
/// any `mcp__SERVER__TOOL` name passes.
pub fn check_allowed(allow: &[String]) -> anyhow::Result<()> {
    let mut tools: Vec<String> = crate::tools::specs().into_iter().map(|s| s.name).collect();
    // The tool that hands a task to a child session (offered unless a session turns it off).
    tools.push("delegate".to_string());
    for name in allow {
        if !tools.contains(name) && !name.starts_with("mcp__") {
            bail!(
                "--allow names the tool {name:?}, which does not exist; the tools are: {} (and an MCP server's, as mcp__SERVER__TOOL)",
                tools.join(", ")
            );
        }
    }
    Ok(())
}

pub async fn run(args: ChatArgs) -> anyhow::Result<i32> {
    check_allowed(&args.allow)?;
    let text = match &args.prompt {
        Some(text) => text.clone(),
        None => tokio::task::spawn_blocking(|| {
            let mut text = String::new();
            std::io::stdin().read_to_string(&mut text).map(|_| text)
        })
        .await?
        .context("cannot read the message from stdin")?,
    };
    if text.trim().is_empty() {
        bail!("nothing to send: pass -p TEXT or pipe the message on stdin");
    }
    let (daemon, mut notes) = Daemon::connect(args.db.as_deref(), args.connection_mode()).await?;
    // One-shot sessions are named by their message at once: the daemon titles a session in
    // the background after its answer, and this process closes the daemon before that.
    let first = text.trim().lines().next().unwrap_or_default();
    let title = crate::tools::truncate(first, 60);
    let (session, _) = open::choose(&daemon, &args, Ask::New, Some(title)).await?;
    let stdout_is_terminal = std::io::stdout().is_terminal();
    // On a terminal everything is drawn as the chat draws it; otherwise stdout gets the
    // answer's text exactly and the rest goes to stderr.
    let mut screen = match stdout_is_terminal {
        true => Screen::new(
            Box::new(Plain(std::io::stdout())),
            Style::detect(),
            args.show_thinking,
        ),
        false => {
            let style = Style::plain(Style::detect().width);
            Screen::new(
                Box::new(Plain(std::io::stderr())),
                style,
                args.show_thinking,
            )
        }
    };
    screen.set_workspace(session.workspace_root.as_deref());
    let sent = daemon
        .call::<ChatSend>(ChatSendParams {
            session_id: session.id.clone(),
            text: text.trim_end().to_string(),
            client_message_id: None,
            attachments: Vec::new(),
            images: Vec::new(),
        })
        .await
        .context("not sent")?;
    // A slash command the daemon answered itself (`/cost`, `/help`, an unknown command)
    // starts no run: its note is the whole answer, and no run's end will come to wait for.
    if sent.run_id.is_none() && !sent.kept {
        let answer = command_answer(&mut notes, &session.id, sent.message_id.as_deref()).await?;
        daemon.close().await?;
        return match answer {
            Some(event) => print_command_answer(&event, args.json),
            None => Ok(0),
        };
    }
    let mut stdout = std::io::stdout();
    let mut stopping = false;
    // Whether the answer's text on stdout ends mid-line.
    let mut mid_line = false;
    let reason = loop {
        let note = tokio::select! {
            note = notes.recv() => note,
            _ = tokio::signal::ctrl_c(), if !stopping => {
                stopping = true;
                let _ = daemon.call::<ChatStop>(SessionIdParams { session_id: session.id.clone() }).await;
                continue;
            }
        };
        let Some(note) = note else {
            bail!("the daemon exited during the run");
        };
        let Some(event) = as_event(&note) else {
            continue;
        };
        if event.session_id != session.id {
            continue;
        }
        if args.json {
            writeln!(stdout, "{}", serde_json::to_string(&event)?)?;
            stdout.flush()?;
        }
        if let Event::ApprovalRequested { approval } = &event.event {
            let allowed = args.allow.contains(&approval.tool);
            let decision = match allowed {
                true => ApprovalDecision::Allow,
                false => ApprovalDecision::Deny,
            };
            if !allowed && !args.json {
                let line = format!(
                    "✗ denied: {} (one-shot mode allows only the tools named with --allow)",
                    describe_call(&approval.tool, &approval.input)
                );
                screen.styled(&[Paint::Red], &line);
            }
            daemon
                .call::<ApprovalRespond>(ApprovalRespondParams {
                    approval_id: approval.approval_id.clone(),
                    decision,
                    rule: None,
                    reason: None,
                })
                .await?;
            continue;
        }
        if !args.json {
            match &event.event {
                Event::TextDelta { text, .. } if !stdout_is_terminal => {
                    write!(stdout, "{text}")?;
                    stdout.flush()?;
                    mid_line = !text.ends_with('\n');
                }
                Event::MessageCompleted { .. } if !stdout_is_terminal => {
                    if std::mem::take(&mut mid_line) {
                        writeln!(stdout)?;
                    }
                }
                Event::ThinkingDelta { .. } if !stdout_is_terminal && !args.show_thinking => {}
                other => screen.event(other),
            }
        }
        if let Event::RunFinished { reason, .. } = event.event {
            break reason;
        }
    };
    if mid_line {
        writeln!(stdout)?;
    }
    daemon.close().await?;
    Ok(exit_code(reason))
}

/// The event of the note or notice a command wrote, `message_id` (sent before the call's
/// answer, so already waiting among the notes); `None` when the command wrote none.
async fn command_answer(
    notes: &mut Notes,
    session_id: &str,
    message_id: Option<&str>,
) -> anyhow::Result<Option<SessionEventParams>> {
    let Some(message_id) = message_id else {
        return Ok(None);
    };
    loop {
        let Some(note) = notes.recv().await else {
            bail!("the daemon exited before the command's answer arrived");
        };
        let Some(event) = as_event(&note) else {
            continue;
        };
        let id = match &event.event {
            Event::MessageCompleted { entry } => &entry.id,
            Event::Notice { message_id, .. } => message_id,
            _ => continue,
        };
        if event.session_id == session_id && id == message_id {
            return Ok(Some(event));
        }
    }
}

/// Prints a command's note (or notice) to stdout, as a turn's answer would be (its event with
/// `--json`), and returns the exit status: 0 for a note, 1 for a notice (an unknown command,
/// a refusal).
fn print_command_answer(event: &SessionEventParams, json: bool) -> anyhow::Result<i32> {
    if json {
        println!("{}", serde_json::to_string(event)?);
    }
    match &event.event {
        Event::MessageCompleted { entry } => {
            if !json {
                for block in &entry.blocks {
                    if let Block::Text { text } = block {
                        println!("{text}");
                    }
                }
            }
            Ok(i32::from(entry.role == Role::Notice))
        }
        Event::Notice { message, .. } => {
            if !json {
                println!("{message}");
            }
            Ok(1)
        }
        _ => Ok(0),
    }
}
