//! `sidechat sessions list|show|export|delete`: stored sessions for scripts and for people
//! who want their data, through a daemon spawned as `sidechat chat` spawns it.

use std::path::PathBuf;

use anyhow::Context;

use super::daemon::Daemon;
use super::render::{Plain, Screen};
use super::style::Style;
use super::{export, plural, workspace_root};
use crate::protocol::{
    SessionDelete, SessionIdParams, SessionOrigin, SessionState, SessionSummary,
};

#[derive(Debug, clap::Args)]
pub struct SessionsArgs {
    /// The SQLite database handed to the daemon.
    #[arg(long, env = "SIDECHAT_DB", global = true)]
    pub db: Option<PathBuf>,
    #[command(subcommand)]
    pub command: SessionsCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum SessionsCommand {
    /// Sessions, newest first: every folder's, or one folder's with `--workspace`; the newest
    /// 50 unless `--limit` or `--all` says otherwise.
    List {
        /// Only the sessions of this folder.
        #[arg(long)]
        workspace: Option<PathBuf>,
        /// How many of the newest to list.
        #[arg(long, default_value_t = DEFAULT_LIST, conflicts_with = "all")]
        limit: usize,
        /// List every session.
        #[arg(long)]
        all: bool,
        /// One JSON object per line (as `session/list` returns them).
        #[arg(long)]
        json: bool,
    },
    /// Prints a session's whole transcript.
    Show { id: String },
    /// Writes a session's whole transcript (tool calls, notes and messages typed during runs
    /// included) to stdout or a file.
    Export {
        id: String,
        #[arg(long, value_enum, default_value_t = Format::Md)]
        format: Format,
        /// Write here instead of stdout.
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
    /// Deletes a session and its transcript (stopping its run).
    Delete { id: String },
    /// Deletes every session not updated for a while, with everything it owns (its delegated
    /// tasks too). A session whose run is still going is left alone.
    Prune {
        /// How long a session must have been left untouched, e.g. `90d` or `12weeks`.
        #[arg(long, value_parser = humantime::parse_duration)]
        older_than: std::time::Duration,
        /// Then rewrite the database file without the freed space (SQLite's `VACUUM`). Without
        /// it the space is reused for new messages but the file does not shrink; a vacuum
        /// reads and writes the whole file, and needs as much free disk again while it runs.
        #[arg(long)]
        vacuum: bool,
    },
}

/// How many sessions `sessions list` shows unless told: a screenful, not a year of history.
const DEFAULT_LIST: usize = 50;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Md,
    Json,
}

pub async fn run(args: SessionsArgs) -> anyhow::Result<i32> {
    let (daemon, _notes) = Daemon::start(args.db.as_deref()).await?;
    let vacuum = matches!(args.command, SessionsCommand::Prune { vacuum: true, .. });
    let outcome = command(&daemon, args.command).await;
    daemon.close().await?;
    if vacuum && outcome.is_ok() {
        super::prune::vacuum(args.db.as_deref())?;
    }
    outcome
}

async fn command(daemon: &Daemon, command: SessionsCommand) -> anyhow::Result<i32> {
    match command {
        SessionsCommand::List {
            workspace,
            limit,
            all,
            json,
        } => {
            let folder = workspace.map(|w| workspace_root(Some(&w))).transpose()?;
            let at_most = if all { usize::MAX } else { limit };
            let (sessions, more) = daemon.newest_sessions(folder.as_deref(), at_most).await?;
            if json {
                for session in &sessions {
                    println!("{}", serde_json::to_string(session)?);
                }
            } else if sessions.is_empty() {
                eprintln!("no sessions");
            } else {
                for session in &sessions {
                    println!("{}", list_line(session));
                }
            }
            if more {
                // On stderr, so that scripts reading stdout see sessions only.
                eprintln!(
                    "the newest {} shown; more with --limit N or --all",
                    plural(sessions.len() as u64, "session", "sessions")
                );
            }
        }
        SessionsCommand::Show { id } => {
            let session = daemon.session(&id).await?;
            let transcript = daemon.transcript(&id).await?;
            let mut screen = Screen::new(Box::new(Plain(std::io::stdout())), Style::detect(), true);
            screen.set_workspace(session.workspace_root.as_deref());
            screen.line(&format!(
                "{} · {} · {}",
                session.title, session.id, session.model
            ));
            for entry in &transcript.entries {
                let lines = screen.entry(entry);
                screen.lines(lines);
            }
            for approval in &transcript.pending_approvals {
                let lines = screen.approval(approval);
                screen.lines(lines);
            }
            for waiting in &transcript.pending_interjections {
                let line = screen.waiting_line(&waiting.text);
                screen.lines(vec![line]);
            }
        }
        SessionsCommand::Export { id, format, output } => {
            let session = daemon.session(&id).await?;
            let transcript = daemon.transcript(&id).await?;
            let text = match format {
                Format::Json => export::json(&session, &transcript)? + "\n",
                Format::Md => export::markdown(&session, &transcript),
            };
            match output {
                Some(path) => {
                    std::fs::write(&path, text)
                        .with_context(|| format!("cannot write {}", path.display()))?;
                    eprintln!(
                        "wrote {} of session {id} to {}",
                        plural(transcript.entries.len() as u64, "entry", "entries"),
                        path.display()
                    );
                }
                None => print!("{text}"),
            }
        }
        SessionsCommand::Delete { id } => {
            let deleted = daemon
                .call::<SessionDelete>(SessionIdParams {
                    session_id: id.clone(),
                })
                .await?;
            match deleted.deleted {
                true => eprintln!("deleted session {id}"),
                false => anyhow::bail!("there is no session {id}"),
            }
        }
        SessionsCommand::Prune { older_than, .. } => {
            super::prune::prune(daemon, older_than).await?;
        }
    }
    Ok(0)
}

/// One row of `sessions list`: id, when, state, title, folder.
pub fn list_line(session: &SessionSummary) -> String {
    let state = match session.state {
        SessionState::Idle => "",
        SessionState::Running => " [running]",
        SessionState::AwaitingApproval => " [waiting for approval]",
        SessionState::Unanswered => " [unanswered]",
    };
    let when = session
        .updated_at
        .get(..16)
        .unwrap_or(&session.updated_at)
        .replace('T', " ");
    let origin = match session.origin {
        Some(SessionOrigin::Oneshot) => " [one-shot]",
        _ => "",
    };
    format!(
        "{}  {when}  {}{state}{origin}  {}",
        session.id,
        session.title,
        session.workspace_root.as_deref().unwrap_or("(no folder)")
    )
}
