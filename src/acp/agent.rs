//! The ACP agent of one connection: what it holds, and how each decoded request reaches its
//! handler (sessions in `sessions`, prompt turns in `prompt_turn`, `initialize` in
//! `handshake`) and is answered. Prompts and steering reach the runtime in arrival order;
//! everything else is answered on its own task.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use agent_client_protocol_schema::v1 as acp;
use futures::FutureExt;
use futures::future::BoxFuture;
use serde_json::Value;

use super::dispatch::{self, Call, Notice};
use super::error::{AcpError, Answer, error_message, to_value};
use super::permissions::Asking;
use super::prompt_turn::Turns;
use super::sessions::Opened;
use super::sink::AcpSink;
use super::translate;
use crate::config::Config;
use crate::rpc::Peer;
use crate::rpc::error::{INTERNAL_ERROR, INVALID_REQUEST, object_frame, result_frame};
use crate::rpc::request_id::RequestId;
use crate::runtime::Runtime;

/// What a session's opening answer is followed by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Then {
    Nothing,
    /// A new session: its slash commands.
    Opened(String),
    /// A loaded or resumed one: its slash commands, then the permission requests a previous
    /// connection left open.
    Reopened(String),
}

/// Who waits for which turn, which permission requests are open, and which sessions this
/// connection opened; one lock, so a prompt's waiter is in before its run's end is handled.
/// Sends one update of a session to the client on `peer`.
pub(super) fn send_update(peer: &Peer, session_id: &str, update: acp::SessionUpdate) {
    peer.notify(
        acp::CLIENT_METHOD_NAMES.session_update,
        &acp::SessionNotification::new(session_id.to_string(), update),
    );
}

#[derive(Default)]
pub struct State {
    pub turns: Turns,
    pub asking: Asking,
    pub opened: Opened,
}

/// How often an open session's command files are looked at for changes.
const COMMAND_POLL: std::time::Duration = std::time::Duration::from_secs(1);

pub struct Agent {
    pub(super) peer: Peer,
    pub(super) sink: Arc<AcpSink>,
    pub(super) config: Config,
    opening: tokio::sync::Mutex<Option<super::Opening>>,
    ready: tokio::sync::OnceCell<Result<Runtime, String>>,
    initialized: AtomicBool,
    pub(super) state: tokio::sync::Mutex<State>,
}

impl Agent {
    pub fn new(peer: Peer, sink: Arc<AcpSink>, config: Config, opening: super::Opening) -> Self {
        Self {
            peer,
            sink,
            config,
            opening: tokio::sync::Mutex::new(Some(opening)),
            ready: tokio::sync::OnceCell::new(),
            initialized: AtomicBool::new(false),
            state: tokio::sync::Mutex::default(),
        }
    }

    /// The runtime, waiting for the store to open on first use.
    pub async fn runtime(&self) -> Result<&Runtime, AcpError> {
        let ready = self
            .ready
            .get_or_init(|| async {
                match self.opening.lock().await.take() {
                    Some(opening) => opening
                        .await
                        .unwrap_or_else(|e| Err(format!("opening the store failed: {e}"))),
                    None => Err("the runtime was never started".to_string()),
                }
            })
            .await;
        ready
            .as_ref()
            .map_err(|e| error_message(INTERNAL_ERROR, e.clone()))
    }

    /// Records `initialize`; whether it had already been received.
    pub(super) fn mark_initialized(&self) -> bool {
        self.initialized.swap(true, Ordering::SeqCst)
    }

    /// Sends one update of a session.
    pub(super) fn update(&self, session_id: &str, update: acp::SessionUpdate) {
        send_update(&self.peer, session_id, update);
    }

    /// Sends the session's slash commands, built-in and custom; the stamp of its command
    /// files they were read with.
    async fn send_commands(&self, session_id: &str) -> Option<crate::runtime::CommandStamp> {
        let runtime = self.runtime().await.ok()?;
        let stamp = runtime.command_stamp(session_id).ok();
        let custom = runtime
            .commands(session_id)
            .map(|listed| listed.commands)
            .unwrap_or_default();
        self.update(
            session_id,
            acp::SessionUpdate::AvailableCommandsUpdate(translate::available_commands(&custom)),
        );
        stamp
    }

    /// Sends the session's commands again whenever a command file changes, while the
    /// connection lasts and the session is open on it. Polled: a folder of a few small files
    /// costs a directory read every couple of seconds, and works on every file system.
    ///
    /// `sent` is the stamp taken before the list last sent was read: a file changed after it
    /// (even before this watch starts) is sent again, never missed.
    async fn watch_commands(
        self: &Arc<Self>,
        session_id: &str,
        sent: Option<crate::runtime::CommandStamp>,
    ) {
        let Ok(runtime) = self.runtime().await else {
            return;
        };
        let Some(mut stamp) = sent.or_else(|| runtime.command_stamp(session_id).ok()) else {
            return;
        };
        {
            let mut state = self.state.lock().await;
            if !state.opened.watched.insert(session_id.to_string()) {
                return;
            }
        }
        let agent = Arc::downgrade(self);
        let session_id = session_id.to_string();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(COMMAND_POLL).await;
                let Some(agent) = agent.upgrade() else {
                    return;
                };
                if agent.state.lock().await.opened.closed.contains(&session_id) {
                    agent.state.lock().await.opened.watched.remove(&session_id);
                    return;
                }
                let Ok(runtime) = agent.runtime().await else {
                    return;
                };
                let Ok(now) = runtime.command_stamp(&session_id) else {
                    return;
                };
                if now != stamp {
                    stamp = now;
                    agent.send_commands(&session_id).await;
                }
            }
        });
    }

    /// Takes one request in arrival order. Prompts and steering reach the runtime before the
    /// next message is read; the returned future answers (a prompt, when its turn ends).
    pub async fn take(
        self: &Arc<Self>,
        id: RequestId,
        method: String,
        params: Option<Value>,
    ) -> BoxFuture<'static, ()> {
        let this = self.clone();
        if !self.initialized.load(Ordering::SeqCst) {
            return async move {
                let call = dispatch::decode(&method, params);
                this.answer(id, &method, call).await
            }
            .boxed();
        }
        match dispatch::decode(&method, params) {
            Ok(Call::Steering(params)) => {
                let answer = self.steer(params).await;
                this.reply(&id, answer);
                futures::future::ready(()).boxed()
            }
            Ok(Call::Prompt(params)) => {
                let accepted = self.accept_prompt(params).await;
                async move {
                    let answer = match accepted {
                        Ok(accepted) => this.finish_prompt(accepted).await,
                        Err(e) => Err(e),
                    };
                    this.reply(&id, answer);
                }
                .boxed()
            }
            call => async move { this.answer(id, &method, call).await }.boxed(),
        }
    }

    /// Answers the request `id`, carrying the id as the client wrote it.
    fn reply(&self, id: &RequestId, answer: Answer) {
        let frame = match answer {
            Ok(result) => result_frame(id.json(), &result.to_string()),
            Err(error) => object_frame(id.json(), &error),
        };
        self.peer.outbox().send(frame);
    }

    /// Answers one request, then sends what follows the answer.
    async fn answer(self: &Arc<Self>, id: RequestId, method: &str, call: Result<Call, AcpError>) {
        let mut then = Then::Nothing;
        let answer = self.request(method, call, &mut then).await;
        self.reply(&id, answer);
        let (session_id, reopened) = match then {
            Then::Nothing => return,
            Then::Opened(id) => (id, false),
            Then::Reopened(id) => (id, true),
        };
        let sent = self.send_commands(&session_id).await;
        self.watch_commands(&session_id, sent).await;
        if reopened && let Err(e) = self.ask_pending(&session_id).await {
            tracing::warn!(session_id, error = %e.message(), "cannot ask again for open approvals");
        }
    }

    /// Serves one decoded request. Until `initialize` has been answered, every other method,
    /// known or not, is refused.
    async fn request(
        self: &Arc<Self>,
        method: &str,
        call: Result<Call, AcpError>,
        then: &mut Then,
    ) -> Answer {
        if !dispatch::is_initialize(method) && !self.initialized.load(Ordering::SeqCst) {
            return Err(error_message(
                INVALID_REQUEST,
                format!("send initialize before {method}"),
            ));
        }
        match call? {
            Call::Initialize(params) => self.initialize(*params),
            Call::Authenticate(params) => {
                // No authentication methods are offered: there is nothing to check.
                tracing::debug!(method_id = %params.method_id, "authentication asked for");
                to_value(&acp::AuthenticateResponse::new())
            }
            Call::NewSession(params) => self.new_session(params, then).await,
            Call::LoadSession(params) => self.load_session(params, then).await,
            Call::ResumeSession(params) => self.resume_session(params, then).await,
            Call::ListSessions(params) => self.list_sessions(params).await,
            Call::CloseSession(params) => self.close_session(params).await,
            Call::SetConfigOption(params) => self.set_config_option(params).await,
            Call::Prompt(params) => {
                let accepted = self.accept_prompt(params).await?;
                self.finish_prompt(accepted).await
            }
            Call::Steering(params) => self.steer(params).await,
        }
    }

    /// Handles one notification from the client.
    pub async fn notification(self: &Arc<Self>, method: &str, params: Option<Value>) {
        match dispatch::decode_notification(method, params) {
            Ok(Notice::Cancel(cancel)) => self.cancel_later(cancel.session_id.0.to_string()),
            Ok(Notice::Ignored) => tracing::debug!(method, "ignored notification"),
            Err(e) => {
                tracing::warn!(method, error = %e.message(), "ignored a malformed notification")
            }
        }
    }

    /// Ends the wait of every prompt still open, once the events before have been routed: the
    /// connection is closing and no turn will answer them here.
    pub async fn release_prompts(&self) {
        self.sink.barrier().await;
        self.state.lock().await.turns.clear();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Mutex, OnceLock};

    use pretty_assertions::assert_eq;
    use serde_json::json;

    use super::*;
    use crate::rpc::error::METHOD_NOT_FOUND;
    use crate::rpc::framing::Framing;
    use crate::rpc::transport::spawn_writer;

    /// What the agent wrote.
    #[derive(Clone, Default)]
    struct Written(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Written {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// An agent whose store never opens: what it answers without a runtime.
    fn agent() -> (Arc<Agent>, Written) {
        let written = Written::default();
        let outbox = spawn_writer(written.clone(), Arc::new(OnceLock::from(Framing::Line)));
        let (sink, _items) = AcpSink::new();
        let opening = tokio::spawn(async { Err("no store in this test".to_string()) });
        let agent = Agent::new(
            Peer::new(outbox),
            Arc::new(sink),
            Config::from_env(),
            opening,
        );
        (Arc::new(agent), written)
    }

    /// Sends one request and returns the frame answering it: its result, or its error's code
    /// and message.
    async fn ask(
        agent: &Arc<Agent>,
        written: &Written,
        method: &str,
        params: Value,
    ) -> Result<Value, (i64, String)> {
        written.0.lock().unwrap().clear();
        let id = RequestId::new(serde_json::value::to_raw_value(&json!(7)).unwrap());
        agent.take(id, method.to_string(), Some(params)).await.await;
        agent.peer.outbox().flush().await;
        let frame: Value = serde_json::from_slice(&written.0.lock().unwrap()).unwrap();
        assert_eq!(frame["id"], json!(7));
        match frame.get("error") {
            Some(error) => Err((
                error["code"].as_i64().unwrap(),
                error["message"].as_str().unwrap().to_string(),
            )),
            None => Ok(frame["result"].clone()),
        }
    }

    /// Until `initialize`, every other method is an invalid request, even one sidechat does
    /// not serve; after it, a second `initialize` is refused, unknown methods are not found,
    /// and a method that needs the store says it could not open.
    #[tokio::test]
    async fn requests_wait_for_initialize_and_go_to_their_handlers() {
        let (agent, written) = agent();
        let names = acp::AGENT_METHOD_NAMES;
        let early_new = ask(&agent, &written, names.session_new, json!({})).await;
        let early_unknown = ask(&agent, &written, "no/such", json!({})).await;
        let init = ask(
            &agent,
            &written,
            names.initialize,
            json!({"protocolVersion": 1}),
        )
        .await;
        let again = ask(
            &agent,
            &written,
            names.initialize,
            json!({"protocolVersion": 1}),
        )
        .await;
        let unknown = ask(&agent, &written, "no/such", json!({})).await;
        let auth = ask(
            &agent,
            &written,
            names.authenticate,
            json!({"methodId": "m"}),
        )
        .await;
        let list = ask(&agent, &written, names.session_list, json!({})).await;
        let code = |answer: &Result<Value, (i64, String)>| answer.as_ref().err().map(|e| e.0);
        assert_eq!(
            [&early_new, &early_unknown, &again, &unknown, &list].map(code),
            [
                Some(i64::from(INVALID_REQUEST)),
                Some(i64::from(INVALID_REQUEST)),
                Some(i64::from(INVALID_REQUEST)),
                Some(i64::from(METHOD_NOT_FOUND)),
                Some(i64::from(INTERNAL_ERROR)),
            ]
        );
        assert_eq!(
            early_new.unwrap_err().1,
            format!("send initialize before {}", names.session_new)
        );
        assert_eq!(list.unwrap_err().1, "no store in this test");
        assert_eq!(
            init.map(|result| result["protocolVersion"].clone()),
            Ok(json!(1))
        );
        assert_eq!(auth, Ok(json!({})));
    }
}
