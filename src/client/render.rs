//! How events look in the terminal.

use std::io::Write;

use serde_json::Value;

use super::flush;
use crate::protocol::Pressure;
use crate::protocol::{Event, FinishReason, InitializeResult, NoticeLevel, Role, ToolCallStatus};

pub struct Screen<W: Write> {
    out: W,
    /// Whether the cursor is mid-line (after streamed text).
    mid_line: bool,
    /// Whether an assistant message started and its first text has not come yet.
    awaiting_text: bool,
}

impl<W: Write> Screen<W> {
    pub fn new(out: W) -> Self {
        Self {
            out,
            mid_line: false,
            awaiting_text: false,
        }
    }

    fn end_line(&mut self) {
        if self.mid_line {
            let _ = writeln!(self.out);
            self.mid_line = false;
        }
    }

    pub fn line(&mut self, text: &str) {
        self.end_line();
        let _ = writeln!(self.out, "{text}");
        flush(&mut self.out);
    }

    pub fn prompt(&mut self) {
        self.end_line();
        let _ = write!(self.out, "> ");
        self.mid_line = true;
        flush(&mut self.out);
    }

    pub fn banner(&mut self, init: &InitializeResult, session: &Value) {
        let account = init
            .accounts
            .iter()
            .find(|a| session["account"].as_str() == Some(a.name.as_str()));
        self.line(&format!(
            "sidechat {} · session {} · model {}",
            init.server_info.version,
            session["id"].as_str().unwrap_or("?"),
            session["model"].as_str().unwrap_or("?")
        ));
        if account.is_some_and(|a| a.is_demo) {
            self.line("Using the built-in OFFLINE DEMO model (no API key configured): it is scripted, not a real model.");
            self.line("Set ANTHROPIC_API_KEY or OPENAI_API_KEY to talk to a real model. Try: create notes.md with hello");
        }
        if let Some(root) = session["workspaceRoot"].as_str() {
            self.line(&format!(
                "Tools work in {root}. Ctrl-C stops a run; /quit leaves."
            ));
        }
    }

    pub fn event(&mut self, event: &Event) {
        match event {
            // The speaker is written with the first text, so lines about tools and queued
            // messages that come first do not split it.
            Event::MessageStarted {
                role: Role::Assistant,
                ..
            } => self.awaiting_text = true,
            Event::TextDelta { text, .. } => {
                if std::mem::take(&mut self.awaiting_text) {
                    self.end_line();
                    let _ = write!(self.out, "assistant: ");
                }
                let _ = write!(self.out, "{text}");
                self.mid_line = true;
            }
            Event::ToolCallStarted { summary, .. } => self.line(&format!("  • {summary}")),
            Event::ToolCallUpdated { status, output, .. } => {
                let first = output
                    .as_deref()
                    .and_then(|o| o.lines().next())
                    .unwrap_or("");
                match status {
                    ToolCallStatus::Running => self.line("    running…"),
                    ToolCallStatus::Done => self.line(&format!("    done: {first}")),
                    ToolCallStatus::Error => self.line(&format!("    failed: {first}")),
                    ToolCallStatus::Denied => self.line("    denied"),
                    ToolCallStatus::Cancelled => self.line("    cancelled"),
                    ToolCallStatus::AwaitingApproval | ToolCallStatus::Pending => {}
                }
            }
            Event::ApprovalRequested { approval } => {
                self.line(&format!(
                    "  ? allow {}:  [a]llow once · al[w]ays · [d]eny",
                    approval.summary
                ));
                let _ = write!(self.out, "approve> ");
                self.mid_line = true;
            }
            Event::MessageCompleted { entry } if entry.role == Role::Note => {
                for block in &entry.blocks {
                    if let crate::protocol::Block::Text { text } = block {
                        self.line(text);
                    }
                }
                self.prompt();
            }
            Event::Budget {
                snapshot,
                actual: None,
            } if snapshot.pressure != Pressure::Normal => {
                self.line(&format!(
                    "! the context is {:.0}% full ({:?} pressure): consider /clear",
                    snapshot.utilisation * 100.0,
                    snapshot.pressure
                ));
            }
            Event::InterjectionDelivered { .. } => self.line("  ↳ your message reached the model"),
            Event::InterjectionPromoted { .. } => {
                self.line("  ↳ your queued message starts the next turn")
            }
            Event::ApprovalResolved { decision, .. } => {
                self.line(&format!("    answered: {decision:?}"))
            }
            Event::Notice { level, message, .. } => {
                let mark = match level {
                    NoticeLevel::Info => "i",
                    NoticeLevel::Warning => "!",
                    NoticeLevel::Error => "!!",
                };
                self.line(&format!("{mark} {message}"));
            }
            Event::RunFinished { reason, error } => {
                match (reason, error) {
                    (FinishReason::EndTurn, _) => {}
                    (_, Some(error)) => self.line(&format!("[run ended: {error}]")),
                    (reason, None) => self.line(&format!("[run ended: {reason:?}]")),
                }
                self.prompt();
            }
            _ => {}
        }
        flush(&mut self.out);
    }
}
