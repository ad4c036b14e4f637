//! One-shot mode: `sidechat chat -p TEXT` (or text piped on stdin) runs one turn, prints the
//! answer and exits with a status that says how the run ended.
//!
//! Nobody is there to answer an approval prompt: tools named with `--allow` are allowed, every
//! other call is denied at once.

use std::io::{IsTerminal, Read, Write};

use anyhow::{Context, bail};

use super::ChatArgs;
use super::daemon::Daemon;
use super::interactive::as_event;
use super::open::{self, Ask};
use super::render::{Plain, Screen, describe_call};
use super::style::{Paint, Style};
use crate::protocol::{
    ApprovalDecision, ApprovalRespond, ApprovalRespondParams, ChatSend, ChatSendParams, ChatStop,
    Event, FinishReason, SessionIdParams, SessionUpdate, SessionUpdateParams,
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
    let (daemon, mut notes) = Daemon::start(args.db.as_deref()).await?;
    let (session, _) = open::choose(&daemon, &args, Ask::New).await?;
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
    daemon
        .call::<ChatSend>(ChatSendParams {
            session_id: session.id.clone(),
            text: text.trim_end().to_string(),
            client_message_id: None,
            attachments: Vec::new(),
            images: Vec::new(),
        })
        .await
        .context("not sent")?;
    if session.title == open::UNTITLED {
        let first = text.trim().lines().next().unwrap_or_default();
        let title = crate::tools::truncate(first, 60);
        let _ = daemon
            .call::<SessionUpdate>(SessionUpdateParams {
                session_id: session.id.clone(),
                title: Some(title),
                ..SessionUpdateParams::default()
            })
            .await;
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
