//! Starting `sidechat serve` for a terminal client, and the requests every client makes.

use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow, bail};
use serde_json::Value;
use tokio::sync::mpsc;

use super::Connection;
use crate::protocol::{
    ClientInfo, Initialize, InitializeParams, InitializeResult, Initialized, InitializedParams,
    Request, Session, SessionGet, SessionIdParams, SessionList, SessionListParams, SessionSummary,
    SessionTranscript, SessionTranscriptParams, SessionTranscriptResult,
};
use crate::rpc::framing::Framing;
use crate::rpc::listen::discovery::{self, ServeFile};

/// How many of the client's daemon log files are kept (one per process, newest kept).
const KEPT_LOGS: usize = 10;

/// The largest page `session/list` answers.
const FULL_PAGE: u32 = 200;

/// A started and initialised daemon.
pub struct Daemon {
    pub connection: Connection,
    pub init: InitializeResult,
}

/// What the daemon sends unasked (`session/event` notifications).
pub type Notes = mpsc::UnboundedReceiver<Value>;

impl Daemon {
    /// Spawns `sidechat serve` and completes the handshake. When the daemon cannot start, the
    /// error is its own last words on stderr (a config file's parse error, say), not "the
    /// connection closed".
    pub async fn start(db: Option<&Path>) -> anyhow::Result<(Self, Notes)> {
        let (connection, notes) = Connection::spawn(command(db)?, Framing::ContentLength)?;
        let init = match handshake(&connection).await {
            Ok(answer) => answer.map_err(|e| anyhow!("{}", e.message))?,
            Err(_) => return Err(start_failure(connection).await),
        };
        Ok((Self { connection, init }, notes))
    }

    /// A daemon reached as `mode` says: spawned, or attached to over WebSocket.
    pub async fn connect(db: Option<&Path>, mode: ConnectionMode) -> anyhow::Result<(Self, Notes)> {
        match mode {
            ConnectionMode::Spawn => Self::start(db).await,
            ConnectionMode::Attach => {
                let file = listening_daemon(db)?;
                Self::attach(&file).await
            }
            ConnectionMode::Auto => match listening_daemon(db) {
                Ok(file) => match Self::attach(&file).await {
                    Ok(attached) => Ok(attached),
                    Err(e) => {
                        tracing::info!(error = %e, "cannot attach; spawning a daemon");
                        Self::start(db).await
                    }
                },
                Err(e) => {
                    tracing::debug!(error = %e, "no daemon to attach to; spawning one");
                    Self::start(db).await
                }
            },
        }
    }

    /// Attaches to the listening daemon `file` names and completes the handshake.
    async fn attach(file: &ServeFile) -> anyhow::Result<(Self, Notes)> {
        let (connection, notes) = Connection::attach(&file.url, &file.token).await?;
        let init = handshake(&connection).await?.map_err(|e| {
            anyhow!(
                "the daemon at {} refused initialize: {}",
                file.url,
                e.message
            )
        })?;
        Ok((Self { connection, init }, notes))
    }

    /// Sends request `M` and reads its result; an error answer becomes the error.
    pub async fn call<M: Request>(&self, params: M::Params) -> anyhow::Result<M::Result> {
        self.connection
            .call::<M>(params)
            .await?
            .map_err(|e| anyhow!("{}", e.message))
    }

    pub async fn session(&self, id: &str) -> anyhow::Result<Session> {
        self.call::<SessionGet>(SessionIdParams {
            session_id: id.into(),
        })
        .await
        .with_context(|| format!("cannot open session {id}"))
    }

    /// Every session (of one folder, when given), newest first.
    pub async fn sessions(&self, workspace: Option<&str>) -> anyhow::Result<Vec<SessionSummary>> {
        Ok(self.newest_sessions(workspace, usize::MAX).await?.0)
    }

    /// The newest `at_most` sessions (of one folder, when given), newest first, and whether
    /// there are more: a year of history is not read to show its first screen.
    pub async fn newest_sessions(
        &self,
        workspace: Option<&str>,
        at_most: usize,
    ) -> anyhow::Result<(Vec<SessionSummary>, bool)> {
        // Pages no larger than asked for: the daemon prices and reads the state of every
        // session it lists, so a page of 200 to show 50 costs four times the answer.
        let page = at_most.clamp(1, FULL_PAGE as usize) as u32;
        self.sessions_in_pages(workspace, page, |read| read.len() >= at_most)
            .await
            .map(|(mut read, more)| {
                let more = more || read.len() > at_most;
                read.truncate(at_most);
                (read, more)
            })
    }

    /// Sessions newest first, read a page at a time until `enough` holds of those read so
    /// far or none are left; also says whether more were left.
    pub async fn sessions_until(
        &self,
        workspace: Option<&str>,
        enough: impl FnMut(&[SessionSummary]) -> bool,
    ) -> anyhow::Result<(Vec<SessionSummary>, bool)> {
        self.sessions_in_pages(workspace, FULL_PAGE, enough).await
    }

    /// [`Self::sessions_until`] in pages of `page` sessions.
    async fn sessions_in_pages(
        &self,
        workspace: Option<&str>,
        page: u32,
        mut enough: impl FnMut(&[SessionSummary]) -> bool,
    ) -> anyhow::Result<(Vec<SessionSummary>, bool)> {
        let mut read = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = self
                .call::<SessionList>(SessionListParams {
                    limit: Some(page),
                    cursor: cursor.take(),
                    workspace_root: workspace.map(str::to_string),
                    ..SessionListParams::default()
                })
                .await?;
            read.extend(page.sessions);
            match page.next_cursor {
                Some(next) if !enough(&read) => cursor = Some(next),
                left => return Ok((read, left.is_some())),
            }
        }
    }

    /// The whole transcript, read page by page; the pending approvals and interjections are
    /// those of the last page.
    pub async fn transcript(&self, id: &str) -> anyhow::Result<SessionTranscriptResult> {
        let mut whole: Option<SessionTranscriptResult> = None;
        loop {
            let after = whole
                .as_ref()
                .and_then(|w| w.entries.last())
                .map_or(0, |e| e.seq);
            let page = self
                .call::<SessionTranscript>(SessionTranscriptParams {
                    session_id: id.into(),
                    after_seq: Some(after),
                    before_seq: None,
                    limit: Some(5000),
                })
                .await?;
            let more = page.has_more && !page.entries.is_empty();
            whole = Some(match whole {
                None => page,
                Some(mut whole) => {
                    whole.entries.extend(page.entries);
                    whole.state = page.state;
                    whole.last_seq = page.last_seq;
                    whole.pending_approvals = page.pending_approvals;
                    whole.pending_interjections = page.pending_interjections;
                    whole
                }
            });
            if !more {
                return whole.context("no transcript");
            }
        }
    }

    /// `shutdown` and `exit`; whether the daemon exited cleanly.
    pub async fn close(self) -> anyhow::Result<bool> {
        Ok(self.connection.close().await? == 0)
    }
}

/// `initialize` and `initialized`: the daemon's answer, or its error answer. The outer error
/// is the connection's (the daemon went away).
async fn handshake(
    connection: &Connection,
) -> anyhow::Result<Result<InitializeResult, super::RpcError>> {
    let params = serde_json::to_value(InitializeParams {
        client_info: Some(ClientInfo {
            name: "sidechat-chat".into(),
            version: Some(env!("CARGO_PKG_VERSION").into()),
        }),
        protocol_version: Some(1),
        capabilities: None,
    })?;
    let answer = match connection.request(Initialize::METHOD, params).await? {
        Ok(answer) => answer,
        Err(e) => return Ok(Err(e)),
    };
    let init = serde_json::from_value(answer)
        .context("the daemon's initialize answer is not understood")?;
    connection
        .notify::<Initialized>(InitializedParams {})
        .await?;
    Ok(Ok(init))
}

/// How `sidechat chat` reaches a daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ConnectionMode {
    /// Attach to a listening daemon on the same database if there is one, else spawn.
    #[default]
    Auto,
    /// Spawn `sidechat serve` as an editor does.
    Spawn,
    /// Attach to the listening daemon `serve.json` names.
    Attach,
}

/// What `serve.json` says, when there is one.
pub(super) fn serve_file() -> anyhow::Result<ServeFile> {
    let path = discovery::serve_file_path()?;
    discovery::read(&path).context(
        "no listening daemon (start one with `sidechat serve --listen 127.0.0.1:0 --no-stdio`)",
    )
}

/// The listening daemon `serve.json` names, if it serves the database this client would
/// spawn a daemon on (`db`, or the default one).
pub(super) fn listening_daemon(db: Option<&Path>) -> anyhow::Result<ServeFile> {
    let file = serve_file()?;
    let wanted = match db {
        Some(db) => Some(db.to_path_buf()),
        None => crate::config::default_data_dir().map(|dir| dir.join("sidechat.db")),
    };
    let same = |a: &Path, b: &Path| {
        a == b
            || a.canonicalize()
                .ok()
                .is_some_and(|a| b.canonicalize().is_ok_and(|b| a == b))
    };
    match (&file.db, wanted) {
        (Some(serving), Some(wanted)) if !same(serving, &wanted) => bail!(
            "the listening daemon at {} serves {}, not {}",
            file.url,
            serving.display(),
            wanted.display()
        ),
        _ => Ok(file),
    }
}

/// The daemon's own explanation of why it stopped before answering `initialize`.
async fn start_failure(mut connection: Connection) -> anyhow::Error {
    // Its stderr is read to the end once it has exited.
    if let Some(child) = connection.child_mut() {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), child.wait()).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let tail = connection.stderr_tail();
    // The error `main` prints (with the lines of its explanation), when there is one; else
    // whatever was said last.
    let said: Vec<String> = match tail.iter().position(|l| l.starts_with("sidechat: ")) {
        Some(start) => tail[start..]
            .iter()
            .map(|l| l.strip_prefix("sidechat: ").unwrap_or(l).to_string())
            .collect(),
        None => tail.into_iter().filter(|l| !l.trim().is_empty()).collect(),
    };
    match said.is_empty() {
        true => anyhow!("sidechat serve stopped before answering; see its log"),
        false => anyhow!("sidechat serve could not start: {}", said.join("\n")),
    }
}

/// `sidechat serve` as this very executable, logging into the data folder.
fn command(db: Option<&Path>) -> anyhow::Result<tokio::process::Command> {
    let exe = std::env::current_exe().context("cannot find the sidechat executable")?;
    let mut command = tokio::process::Command::new(exe);
    command.arg("serve");
    if let Some(db) = db {
        command.arg("--db").arg(db);
    }
    if let Some(log) = log_file() {
        command.arg("--log-file").arg(log);
    }
    // Its own process group: Ctrl-C in the terminal is for the client (it stops the run), not
    // a signal that kills the daemon as an editor's would never be killed.
    command.process_group(0);
    Ok(command)
}

/// `<data>/logs/chat-<pid>.log`, after removing all but the newest few of the earlier ones;
/// none when there is no data folder or it cannot be written. The folders are made private
/// (0700), as `serve` makes its own: the logs tell of every conversation.
fn log_file() -> Option<PathBuf> {
    let dir = crate::config::default_data_dir()?.join("logs");
    crate::private_files::create_dir_all(&dir).ok()?;
    rotate(&dir, KEPT_LOGS);
    Some(dir.join(format!("chat-{}.log", std::process::id())))
}

/// Deletes the oldest `chat-*.log` files of `dir` so that `keep - 1` remain for the new one.
fn rotate(dir: &Path, keep: usize) {
    let Ok(read) = std::fs::read_dir(dir) else {
        return;
    };
    let mut logs: Vec<(std::time::SystemTime, PathBuf)> = read
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with("chat-") && name.ends_with(".log")
        })
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    logs.sort();
    let excess = (logs.len() + 1).saturating_sub(keep);
    for (_, path) in logs.into_iter().take(excess) {
        let _ = std::fs::remove_file(path);
    }
}

/// Checks a model against those the account is known to serve, unless forced.
pub fn check_model(
    init: &InitializeResult,
    account: &str,
    model: &str,
    force: bool,
) -> anyhow::Result<()> {
    let Some(info) = init.accounts.iter().find(|a| a.name == account) else {
        return check_account(init, account);
    };
    if force || info.models.iter().any(|m| m == model) {
        return Ok(());
    }
    bail!(
        "{model:?} is not a model the account {account} is known to serve ({}); add --force to use it anyway",
        info.models.join(", ")
    )
}

/// Checks an account named on the command line against the daemon's.
pub fn check_account(init: &InitializeResult, name: &str) -> anyhow::Result<()> {
    if init.accounts.iter().any(|a| a.name == name) {
        return Ok(());
    }
    let known: Vec<&str> = init.accounts.iter().map(|a| a.name.as_str()).collect();
    bail!(
        "there is no account {name:?}; the configured accounts are: {}",
        known.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotation_keeps_the_newest_logs() {
        let dir = tempfile::tempdir().unwrap();
        for n in 0..5 {
            let path = dir.path().join(format!("chat-{n}.log"));
            std::fs::write(&path, "x").unwrap();
            let when = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(n);
            std::fs::File::options()
                .write(true)
                .open(&path)
                .unwrap()
                .set_modified(when)
                .unwrap();
        }
        std::fs::write(dir.path().join("other.txt"), "kept").unwrap();
        rotate(dir.path(), 3);
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["chat-3.log", "chat-4.log", "other.txt"]);
    }
}
