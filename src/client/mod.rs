//! `sidechat chat` and `sidechat sessions`: terminal clients that spawn `sidechat serve` as an
//! editor does; and `sidechat attach`, the bridge that lets a stdio editor share a listening
//! daemon.
//!
//! The chat shows streaming text, tool calls and their state, and approval prompts; the user
//! can keep typing while a run works, and Ctrl-C stops the run. With `-p` or text piped on
//! stdin it runs one turn and exits (`oneshot`).

mod bridge;
mod complete;
mod connection;
mod daemon;
mod export;
mod input;
mod interactive;
mod markdown;
mod oneshot;
mod open;
mod prune;
mod render;
mod sessions;
mod style;
mod view;
mod web;
mod websocket;

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::Context;

pub use bridge::AttachArgs;
pub use connection::{Connection, RpcError, read_frames};
pub use daemon::ConnectionMode;
pub use sessions::SessionsArgs;
pub use view::SessionView;
pub use web::WebArgs;

/// `sidechat chat`'s options.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ChatArgs {
    /// The SQLite database handed to the daemon.
    #[arg(long, env = "SIDECHAT_DB")]
    pub db: Option<PathBuf>,
    /// Continue this session.
    #[arg(long, conflicts_with_all = ["new", "continue_newest"])]
    pub session: Option<String>,
    /// Start a new session even when this folder has one.
    #[arg(long, conflicts_with = "continue_newest")]
    pub new: bool,
    /// Continue this folder's newest chat without asking (a new one when there is none); a
    /// one-shot run's session is passed over, except by another one-shot run.
    #[arg(long = "continue", short = 'c')]
    pub continue_newest: bool,
    /// The folder tools may touch (default: the current folder).
    #[arg(long)]
    pub workspace: Option<PathBuf>,
    /// The account of a new session (see the banner for the configured ones).
    #[arg(long)]
    pub account: Option<String>,
    /// The model of a new session (default: the account's default model).
    #[arg(long)]
    pub model: Option<String>,
    /// Use `--model` even when the account is not known to serve it.
    #[arg(long)]
    pub force: bool,
    /// Run one turn with this text, print the answer and exit.
    #[arg(long, short = 'p')]
    pub prompt: Option<String>,
    /// In one-shot mode, print the run's events as JSON lines instead of the answer.
    #[arg(long)]
    pub json: bool,
    /// In one-shot mode, tools that run without asking (e.g. `--allow write_file`); every
    /// other approval is denied.
    #[arg(long, num_args = 1.., value_name = "TOOL")]
    pub allow: Vec<String>,
    /// Show the model's thinking as it streams instead of one folded line.
    #[arg(long)]
    pub show_thinking: bool,
    /// How to reach a daemon: `auto` attaches to a daemon listening (`serve --listen`) on
    /// the same database when `serve.json` names one, and spawns one otherwise.
    #[arg(long, value_enum, default_value_t = ConnectionMode::Auto)]
    pub connection: ConnectionMode,
    /// Attach to the listening daemon `serve.json` names (`--connection attach`); fails when
    /// none listens.
    #[arg(long, conflicts_with = "connection")]
    pub attach: bool,
}

impl ChatArgs {
    /// `--connection`, with `--attach` standing for `attach`.
    pub fn connection_mode(&self) -> ConnectionMode {
        if self.attach {
            ConnectionMode::Attach
        } else {
            self.connection
        }
    }
}

/// Runs `sidechat chat` to completion; the process exit code.
pub fn run(args: ChatArgs) -> anyhow::Result<i32> {
    let tokio = async_runtime()?;
    let code = tokio.block_on(async move {
        let one_shot = args.prompt.is_some() || !std::io::stdin().is_terminal();
        if one_shot {
            oneshot::run(args).await
        } else {
            interactive::run(args).await
        }
    });
    tokio.shutdown_background();
    code
}

/// Runs `sidechat attach` until the editor or the daemon ends it; the process exit code.
pub fn run_attach(args: AttachArgs) -> anyhow::Result<i32> {
    crate::logging::init(None)?;
    let tokio = async_runtime()?;
    let code = tokio.block_on(bridge::run(args));
    // The stdin thread may still be blocked in read; exiting the process ends it.
    tokio.shutdown_background();
    code
}

/// Runs `sidechat web`: prints the chat page's address; the process exit code.
pub fn run_web(args: WebArgs) -> anyhow::Result<i32> {
    let tokio = async_runtime()?;
    let code = tokio.block_on(web::run(args));
    tokio.shutdown_background();
    code
}

/// Runs `sidechat sessions …` to completion; the process exit code.
pub fn run_sessions(args: SessionsArgs) -> anyhow::Result<i32> {
    let tokio = async_runtime()?;
    let code = tokio.block_on(sessions::run(args));
    tokio.shutdown_background();
    code
}

fn async_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// The folder a new session's tools work in, as the daemon stores it.
fn workspace_root(workspace: Option<&PathBuf>) -> anyhow::Result<String> {
    let workspace = match workspace {
        Some(w) => w.clone(),
        None => std::env::current_dir().context("cannot read the current folder")?,
    };
    let workspace = workspace.canonicalize().unwrap_or(workspace);
    Ok(workspace.display().to_string())
}

/// `1 line`, `2 lines`.
pub(crate) fn plural(count: impl Into<u64>, one: &str, many: &str) -> String {
    let count = count.into();
    format!("{count} {}", if count == 1 { one } else { many })
}
