//! `sidechat attach`: a stdio ↔ WebSocket bridge to a listening daemon, so that an editor
//! which spawns a stdio server (Neovim's `vim.lsp.rpc.start`, any LSP-style client) shares
//! that daemon instead of starting its own.
//!
//! Frames read on stdin (`Content-Length` or one JSON object per line, detected as `serve`
//! detects them) go out as one WebSocket message each; each message from the daemon is
//! written to stdout in the framing the editor chose. Input that is not a frame is answered
//! here, as `serve` answers it. The bridge ends when stdin ends, on the `exit` notification
//! (the editor's "this server may exit"), or when the daemon closes the connection.
//!
//! A bridge and not `vim.lsp.rpc.connect`: that speaks `Content-Length` frames over a raw
//! socket, while the listener speaks WebSocket (HTTP upgrade, token, message framing).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context;
use futures::{SinkExt, StreamExt};
use tokio::sync::Notify;
use tokio_tungstenite::tungstenite::Message;

use super::websocket::{self, Incoming, Outgoing};
use crate::protocol::{Exit, Notification};
use crate::rpc::stdio::StdioConnection;
use crate::rpc::transport::Outbox;

/// `sidechat attach`'s options.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct AttachArgs {
    /// Attach only to a daemon serving this database (default: the default database).
    #[arg(long, env = "SIDECHAT_DB")]
    pub db: Option<PathBuf>,
    /// Attach to the daemon at this URL (`ws://127.0.0.1:PORT/` or `ws+unix:///PATH`) instead
    /// of the one `serve.json` names. The token is `$SIDECHAT_TOKEN`, or `serve.json`'s when
    /// it names the same URL.
    #[arg(long)]
    pub url: Option<String>,
}

/// How the bridge ended.
enum End {
    /// stdin ended, or the editor sent `exit`.
    Editor,
    /// The daemon closed the connection (or it failed).
    Daemon(Option<String>),
}

/// How long the answers to requests the editor sent before it ended may take to come back
/// before the socket closes anyway (closing it first would cancel them in the daemon).
const ANSWER_GRACE: Duration = Duration::from_secs(5);

/// Runs the bridge to its end; the exit code: 0 when the editor ended it, 1 when the daemon
/// went away.
pub async fn run(args: AttachArgs) -> anyhow::Result<i32> {
    let (url, token) = target(&args)?;
    let (outgoing, incoming) = websocket::connect(&url, &token).await?;
    tracing::info!(%url, "attached");
    let stdio = StdioConnection::open(std::io::stdin(), std::io::stdout());
    let outbox = stdio.outbox.clone();
    let outstanding = Arc::new(Outstanding::default());
    let mut upstream = tokio::spawn(editor_to_daemon(stdio, outgoing, outstanding.clone()));
    let mut downstream = tokio::spawn(daemon_to_editor(
        incoming,
        outbox.clone(),
        outstanding.clone(),
    ));
    let end = tokio::select! {
        ended = &mut upstream => match ended {
            Ok(Ok(mut outgoing)) => {
                let answered = async {
                    tokio::select! {
                        () = outstanding.settled() => {}
                        _ = &mut downstream => {}
                    }
                };
                let _ = tokio::time::timeout(ANSWER_GRACE, answered).await;
                let _ = outgoing.close().await;
                End::Editor
            }
            Ok(Err(end)) => end,
            Err(_) => End::Editor,
        },
        ended = &mut downstream => ended.unwrap_or(End::Daemon(None)),
    };
    // What the daemon said before the end reaches the editor.
    outbox.flush().await;
    Ok(match end {
        End::Editor => 0,
        End::Daemon(reason) => {
            match reason {
                Some(reason) => {
                    eprintln!("sidechat: the daemon at {url} closed the connection: {reason}")
                }
                None => eprintln!("sidechat: the daemon at {url} closed the connection"),
            }
            1
        }
    })
}

/// The URL and token to attach to: `--url` (with `$SIDECHAT_TOKEN` or the serve file's
/// token), else the listening daemon of the database.
fn target(args: &AttachArgs) -> anyhow::Result<(String, String)> {
    let env_token = std::env::var("SIDECHAT_TOKEN")
        .ok()
        .filter(|t| !t.is_empty());
    match &args.url {
        Some(url) => {
            let token = match env_token {
                Some(token) => token,
                None => super::daemon::serve_file()
                    .ok()
                    .filter(|file| &file.url == url)
                    .map(|file| file.token)
                    .with_context(|| {
                        format!(
                            "no token for {url}: set SIDECHAT_TOKEN (serve.json names another daemon or none)"
                        )
                    })?,
            };
            Ok((url.clone(), token))
        }
        None => {
            let file = super::daemon::listening_daemon(args.db.as_deref())?;
            Ok((file.url, file.token))
        }
    }
}

/// Requests forwarded to the daemon and not yet answered.
#[derive(Default)]
struct Outstanding {
    count: AtomicUsize,
    answered: Notify,
}

impl Outstanding {
    fn sent(&self) {
        self.count.fetch_add(1, Ordering::SeqCst);
    }

    fn answered(&self) {
        let _ = self
            .count
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        self.answered.notify_waiters();
    }

    /// Resolves once every request sent has been answered.
    async fn settled(&self) {
        loop {
            let answered = self.answered.notified();
            tokio::pin!(answered);
            answered.as_mut().enable();
            if self.count.load(Ordering::SeqCst) == 0 {
                return;
            }
            answered.await;
        }
    }
}

/// Forwards the editor's frames until stdin ends or `exit` arrives; then hands the socket
/// back, still open, so the answers to what was sent can arrive. An error when the daemon is
/// gone.
async fn editor_to_daemon(
    mut stdio: StdioConnection,
    mut outgoing: Outgoing,
    outstanding: Arc<Outstanding>,
) -> Result<Outgoing, End> {
    while let Some(frame) = stdio.next_frame().await {
        let kind = kind_of(&frame);
        if kind == Kind::Exit {
            break;
        }
        if kind == Kind::Request {
            outstanding.sent();
        }
        if let Err(e) = outgoing.send(Message::text(frame)).await {
            return Err(End::Daemon(Some(e.to_string())));
        }
    }
    Ok(outgoing)
}

/// Writes the daemon's messages to stdout until it closes the connection. When the editor
/// reads slowly, reading from the daemon waits, so the daemon's own queue for this
/// connection holds its runs back rather than the bridge growing.
async fn daemon_to_editor(
    mut incoming: Incoming,
    outbox: Outbox,
    outstanding: Arc<Outstanding>,
) -> End {
    while let Some(message) = incoming.next().await {
        let text = match message {
            Ok(Message::Text(text)) => text.as_str().to_owned(),
            Ok(Message::Binary(bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
            Ok(Message::Close(frame)) => {
                return End::Daemon(
                    frame
                        .map(|f| f.reason.to_string())
                        .filter(|r| !r.is_empty()),
                );
            }
            Ok(_) => continue,
            Err(e) => return End::Daemon(Some(e.to_string())),
        };
        // Events, nearly every message, are told from answers by their first bytes.
        let answer = !text.starts_with(NOTIFICATION_HEAD) && kind_of(&text) == Kind::Answer;
        outbox.send(text);
        if answer {
            outstanding.answered();
        }
        if !outbox.has_room() {
            outbox.room().await;
        }
    }
    End::Daemon(None)
}

/// How every notification of the daemon begins (`rpc::peer::write_notification` and the delta
/// frames).
const NOTIFICATION_HEAD: &str = r#"{"jsonrpc":"2.0","method":"#;

/// What a message is, as far as the bridge cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// The `exit` notification.
    Exit,
    /// A request: an answer will come back.
    Request,
    /// An answer to a request.
    Answer,
    Other,
}

fn kind_of(message: &str) -> Kind {
    #[derive(serde::Deserialize)]
    struct Named<'a> {
        #[serde(borrow)]
        method: Option<&'a str>,
        id: Option<serde::de::IgnoredAny>,
    }
    match serde_json::from_str::<Named>(message) {
        Ok(Named {
            method: None,
            id: Some(_),
        }) => Kind::Answer,
        Ok(Named {
            method: Some(_),
            id: Some(_),
        }) => Kind::Request,
        Ok(Named {
            method: Some(method),
            id: None,
        }) if method == <Exit as Notification>::METHOD => Kind::Exit,
        _ => Kind::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_told_apart_as_the_bridge_needs() {
        let exit = <Exit as Notification>::METHOD;
        let shutdown = <crate::protocol::Shutdown as crate::protocol::Request>::METHOD;
        let event = <crate::protocol::SessionEvent as Notification>::METHOD;
        let cases = [
            (
                format!(r#"{{"jsonrpc":"2.0","method":"{exit}"}}"#),
                Kind::Exit,
            ),
            (
                format!(r#"{{"jsonrpc":"2.0","method":"{exit}","params":null}}"#),
                Kind::Exit,
            ),
            (
                format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{exit}"}}"#),
                Kind::Request,
            ),
            (
                format!(r#"{{"jsonrpc":"2.0","id":"a","method":"{shutdown}"}}"#),
                Kind::Request,
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"result":null}"#.to_string(),
                Kind::Answer,
            ),
            (
                r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700}}"#.to_string(),
                Kind::Other,
            ),
            (
                format!(r#"{{"jsonrpc":"2.0","method":"{event}","params":{{}}}}"#),
                Kind::Other,
            ),
            ("not json".to_string(), Kind::Other),
        ];
        let got: Vec<(String, Kind)> = cases.iter().map(|(m, _)| (m.clone(), kind_of(m))).collect();
        assert_eq!(got, cases.to_vec());
    }
}
