//! `sidechat serve --listen ADDR`: the native protocol over WebSocket, for many clients at
//! once (editor windows sharing one daemon, an editor attached to a daemon on another machine
//! through an SSH tunnel), on jsonrpsee's server.
//!
//! **One method table.** Every declared request is registered with jsonrpsee under its
//! declared name and answered by the same [`MethodTable`] the stdio dispatcher uses; only
//! `initialize` and `shutdown` are answered here, because on a shared daemon they concern the
//! connection, not the process: `shutdown` stops nothing, and closing the socket is the exit.
//!
//! **Events.** Each method is registered as jsonrpsee's "subscription" kind of callback, the
//! one kind that is handed the connection's outgoing sink; it answers like any method (no
//! subscription id). That sink carries `session/event` notifications exactly as stdio writes
//! them (same bytes, same per-session `seq`), to the connections that created, opened
//! (`session/get`, `session/transcript`), forked or subscribed to (`session/subscribe`) a
//! session, until `session/unsubscribe`. jsonrpsee's own subscriptions were not used: they wrap
//! every notification in `{subscription, result}` and number streams per subscription, so a
//! client would need a second event format and a second notion of where it stopped; with the
//! declared methods a client reads one format on either transport and refetches from its last
//! `seq` after a reconnect as on stdio.
//!
//! **Who may connect**: [`access`]. **Where clients find it**: [`discovery`]. **A unix
//! socket** (`unix:PATH`) instead of a TCP port: [`unix`]. **The chat page in a browser**
//! (`--web`, TCP only): [`page`].

pub mod access;
pub mod discovery;
pub mod fanout;
pub mod page;
pub mod unix;

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;

use jsonrpsee::ResponsePayload;
use jsonrpsee::server::{
    MethodCallback, MethodResponse, MethodSink, Methods, ServerConfig, ServerHandle,
    SubscriptionState,
};
use jsonrpsee::types::{ErrorObjectOwned, Id, Params};
use serde_json::value::RawValue;

use self::access::{Access, AccessLayer};
use self::discovery::ServeFile;
use self::fanout::Listeners;
use self::page::PageLayer;
use super::methods::MethodTable;
use crate::protocol::{
    Initialize, InitializeResult, Request, SessionCreate, SessionFork, SessionGet,
    SessionSubscribe, SessionTranscript, SessionUnsubscribe, SessionUnsubscribeResult, Shutdown,
};
use crate::runtime::Runtime;

/// The largest message either way: the stdio transport's limit.
const MAX_MESSAGE_BYTES: u32 = super::framing::MAX_FRAME_BYTES as u32;

#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    #[error(
        "cannot listen on unix:{}: another daemon listens on it; stop that one or pick another path",
        .0.display()
    )]
    SocketInUse(PathBuf),
    #[error(
        "cannot listen on unix:{}: it exists and is not a socket, so it is left alone",
        .0.display()
    )]
    NotASocket(PathBuf),
    #[error("cannot listen on {addr}: {reason}")]
    Address { addr: String, reason: String },
    #[error(
        "refusing to listen on {addr} ({ip}), which is not a loopback address: anyone who can reach it could try the token. Pass --allow-remote to do it anyway, or listen on 127.0.0.1 and reach it with `ssh -L`"
    )]
    NotLoopback { addr: String, ip: std::net::IpAddr },
    #[error(transparent)]
    Discovery(#[from] discovery::DiscoveryError),
    #[error("cannot start the WebSocket server: {0}")]
    Server(std::io::Error),
}

/// What `--listen` asked for.
#[derive(Debug, Clone)]
pub struct ListenOptions {
    pub addr: String,
    pub allow_remote: bool,
    /// `--web`: also serve the chat page over HTTP `GET` at the same address.
    pub web: bool,
}

/// The listening socket, bound before the store is open so a wrong address fails at once.
pub enum Bound {
    Tcp(TcpBound),
    Unix(unix::UnixBound),
}

impl Bound {
    /// Binds `options.addr`: `unix:PATH` ([`unix::bind`]), or a loopback `host:port`
    /// ([`TcpBound::bind`]).
    pub fn bind(options: &ListenOptions) -> Result<Self, ListenError> {
        match options.addr.trim().strip_prefix("unix:") {
            Some(_) if options.web => Err(ListenError::Address {
                addr: options.addr.trim().to_string(),
                reason: "--web serves the page to a browser, which cannot reach a unix socket; listen on a loopback host:port".into(),
            }),
            Some(path) => unix::bind(path).map(Bound::Unix),
            None => TcpBound::bind(options).map(Bound::Tcp),
        }
    }
}

/// A bound TCP port.
pub struct TcpBound {
    listener: std::net::TcpListener,
    local: SocketAddr,
    /// The host as the address named it (`localhost`, `127.0.0.1`, `[::1]`).
    host: String,
    allow_remote: bool,
    web: bool,
}

impl TcpBound {
    /// Binds `options.addr`: a `host:port` (port 0 picks a free one) whose every address is a
    /// loopback one unless `allow_remote`.
    pub fn bind(options: &ListenOptions) -> Result<Self, ListenError> {
        let addr = options.addr.trim();
        let invalid = |reason: String| ListenError::Address {
            addr: addr.to_string(),
            reason,
        };
        let (host, _port) = addr
            .rsplit_once(':')
            .ok_or_else(|| invalid("expected host:port".into()))?;
        let resolved: Vec<SocketAddr> = addr
            .to_socket_addrs()
            .map_err(|e| invalid(e.to_string()))?
            .collect();
        if resolved.is_empty() {
            return Err(invalid("it names no address".into()));
        }
        if !options.allow_remote
            && let Some(remote) = resolved.iter().find(|a| !a.ip().is_loopback())
        {
            return Err(ListenError::NotLoopback {
                addr: addr.to_string(),
                ip: remote.ip(),
            });
        }
        let listener =
            std::net::TcpListener::bind(&resolved[..]).map_err(|e| invalid(e.to_string()))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| invalid(e.to_string()))?;
        let local = listener.local_addr().map_err(|e| invalid(e.to_string()))?;
        Ok(Self {
            listener,
            local,
            host: host.to_string(),
            allow_remote: options.allow_remote,
            web: options.web,
        })
    }

    /// `host:port` as a client writes it in `Host`.
    fn authority(&self) -> String {
        format!("{}:{}", self.host, self.local.port())
    }

    /// The `Host` values that name this address; any, for a daemon listening on every
    /// interface (which only `--allow-remote` allows).
    fn hosts(&self) -> Option<Vec<String>> {
        if self.allow_remote && self.local.ip().is_unspecified() {
            return None;
        }
        let port = self.local.port();
        let mut hosts = vec![self.authority(), self.local.to_string()];
        if self.local.ip().is_loopback() {
            hosts.extend([
                format!("localhost:{port}"),
                format!("127.0.0.1:{port}"),
                format!("[::1]:{port}"),
            ]);
        }
        Some(hosts)
    }
}

/// A running WebSocket server; stopping it closes every connection.
pub struct Listening {
    handle: ServerHandle,
    pub url: String,
    /// With `--web`: the chat page's address, without the token (`http://host:port/`).
    pub page: Option<String>,
    serve_file: PathBuf,
    token: String,
    /// The unix socket's file, removed once the server has stopped.
    socket: Option<unix::SocketFile>,
}

impl Listening {
    /// Stops serving and removes `serve.json` if it is still this daemon's, and the unix
    /// socket.
    pub async fn stop(self) {
        let _ = self.handle.stop();
        self.handle.stopped().await;
        discovery::remove_own(&self.serve_file, &self.token);
        drop(self.socket);
    }
}

/// Serves the methods of `runtime` (on database `db`) on `bound` and writes `serve.json`.
pub async fn start(
    bound: Bound,
    runtime: Runtime,
    init: InitializeResult,
    listeners: Arc<Listeners>,
    db: PathBuf,
) -> Result<Listening, ListenError> {
    let token = discovery::new_token();
    // A unix socket names no host: only its owner can connect, and no browser can.
    let (url, hosts, page) = match &bound {
        Bound::Tcp(tcp) => (
            format!("ws://{}/", tcp.authority()),
            tcp.hosts(),
            tcp.web.then(|| format!("http://{}/", tcp.authority())),
        ),
        Bound::Unix(socket) => (socket.url(), None, None),
    };
    let access = Arc::new(Access::new(token.clone(), hosts));
    let config = ServerConfig::builder()
        .ws_only()
        .max_request_body_size(MAX_MESSAGE_BYTES)
        .max_response_body_size(MAX_MESSAGE_BYTES)
        .max_subscriptions_per_connection(u32::MAX)
        .build();
    let builder = jsonrpsee::server::Server::builder()
        .set_config(config)
        .set_http_middleware(
            tower::ServiceBuilder::new()
                .layer(PageLayer {
                    access: access.clone(),
                    serving: page.is_some(),
                })
                .layer(AccessLayer(access)),
        );
    let methods = methods(MethodTable::new(runtime), init, listeners);
    let (handle, socket) = match bound {
        Bound::Tcp(tcp) => {
            let server = builder
                .build_from_tcp(tcp.listener)
                .map_err(ListenError::Server)?;
            (server.start(methods), None)
        }
        Bound::Unix(bound) => {
            let services = builder.to_service_builder();
            let (handle, file) = unix::serve(bound, move |stop| {
                services.clone().build(methods.clone(), stop)
            })?;
            (handle, Some(file))
        }
    };
    let serve_file = discovery::serve_file_path()?;
    let file = ServeFile {
        url: url.clone(),
        token: token.clone(),
        pid: std::process::id(),
        db: Some(std::path::absolute(&db).unwrap_or(db)),
    };
    if let Err(e) = discovery::write(&serve_file, &file) {
        let _ = handle.stop();
        return Err(e.into());
    }
    tracing::info!(%url, serve_file = %serve_file.display(), page = page.as_deref(), "listening");
    Ok(Listening {
        handle,
        url,
        page,
        serve_file,
        token,
        socket,
    })
}

/// How a method changes which sessions' events its connection receives.
#[derive(Clone, Copy)]
enum Effect {
    None,
    /// Subscribes to the session its params name, before it runs (so no event is missed
    /// between its answer and the subscription), undone if it fails.
    OpensParams,
    /// Subscribes to the session its result is (`{"id": …}`).
    OpensResult,
    Unsubscribes,
}

fn effect(method: &str) -> Effect {
    match method {
        SessionGet::METHOD | SessionTranscript::METHOD | SessionSubscribe::METHOD => {
            Effect::OpensParams
        }
        SessionCreate::METHOD | SessionFork::METHOD => Effect::OpensResult,
        SessionUnsubscribe::METHOD => Effect::Unsubscribes,
        _ => Effect::None,
    }
}

/// The `sessionId` of a method's params, when they read as an object with one.
fn session_of(params: Option<&str>) -> Option<String> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Named {
        session_id: String,
    }
    serde_json::from_str::<Named>(params?)
        .ok()
        .map(|n| n.session_id)
}

/// The declared methods for jsonrpsee, each answered by `table`.
fn methods(table: MethodTable, init: InitializeResult, listeners: Arc<Listeners>) -> Methods {
    let table = Arc::new(table);
    let mut methods = Methods::new();
    let names: Vec<&'static str> = table.names().collect();
    for name in names {
        let (table, listeners) = (table.clone(), listeners.clone());
        let callback = move |id: Id<'_>,
                             params: Params<'_>,
                             sink: MethodSink,
                             state: SubscriptionState<'_>,
                             _: jsonrpsee::Extensions| {
            let connection = state.conn_id;
            drop(state);
            listeners.connect(connection, &sink);
            let id = id.into_owned();
            let params = params.as_str().map(str::to_owned);
            let (table, listeners) = (table.clone(), listeners.clone());
            let answer: futures::future::BoxFuture<'static, MethodResponse> =
                Box::pin(async move {
                    let Some(run) = table.get(name) else {
                        return MethodResponse::error(id, method_not_found(name));
                    };
                    let session = session_of(params.as_deref());
                    let effect = effect(name);
                    let newly = match (effect, &session) {
                        (Effect::OpensParams, Some(session)) => {
                            listeners.subscribe(connection, session)
                        }
                        _ => false,
                    };
                    let outcome = run(params.as_deref()).await;
                    let outcome = match (effect, outcome) {
                        (Effect::OpensParams, Err(e)) => {
                            if newly && let Some(session) = &session {
                                listeners.unsubscribe(connection, session);
                            }
                            Err(e)
                        }
                        (Effect::OpensResult, Ok(result)) => {
                            if let Some(created) = created_id(&result) {
                                listeners.subscribe(connection, &created);
                            }
                            Ok(result)
                        }
                        (Effect::Unsubscribes, Ok(_)) => {
                            let subscribed = session
                                .as_deref()
                                .is_some_and(|s| listeners.unsubscribe(connection, s));
                            serde_json::value::to_raw_value(&SessionUnsubscribeResult {
                                subscribed,
                            })
                            .map_err(|e| {
                                ErrorObjectOwned::owned(
                                    super::error::INTERNAL_ERROR,
                                    e.to_string(),
                                    None::<()>,
                                )
                            })
                        }
                        (_, outcome) => outcome,
                    };
                    respond(id, outcome)
                });
            answer
        };
        insert(
            &mut methods,
            name,
            MethodCallback::Subscription(Arc::new(callback)),
        );
    }
    let initialize = move |id: Id<'_>, _: Params<'_>, _: usize, _: jsonrpsee::Extensions| {
        respond(
            id.into_owned(),
            serde_json::value::to_raw_value(&init).map_err(|e| {
                ErrorObjectOwned::owned(super::error::INTERNAL_ERROR, e.to_string(), None::<()>)
            }),
        )
    };
    insert(
        &mut methods,
        Initialize::METHOD,
        MethodCallback::Sync(Arc::new(initialize)),
    );
    let shutdown = |id: Id<'_>, _: Params<'_>, _: usize, _: jsonrpsee::Extensions| {
        respond(id.into_owned(), Ok(RawValue::NULL.to_owned()))
    };
    insert(
        &mut methods,
        Shutdown::METHOD,
        MethodCallback::Sync(Arc::new(shutdown)),
    );
    methods
}

fn insert(methods: &mut Methods, name: &'static str, callback: MethodCallback) {
    if let Err(e) = methods.verify_and_insert(name, callback) {
        tracing::error!(name, error = %e, "method registered twice");
    }
}

fn method_not_found(name: &str) -> ErrorObjectOwned {
    ErrorObjectOwned::owned(
        super::error::METHOD_NOT_FOUND,
        format!("Method not found: {name}"),
        None::<()>,
    )
}

/// The `id` of a created session's JSON.
fn created_id(result: &RawValue) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Created {
        id: String,
    }
    serde_json::from_str::<Created>(result.get())
        .ok()
        .map(|c| c.id)
}

fn respond(id: Id<'static>, outcome: Result<Box<RawValue>, ErrorObjectOwned>) -> MethodResponse {
    match outcome {
        Ok(result) => MethodResponse::response(
            id,
            ResponsePayload::success(result),
            MAX_MESSAGE_BYTES as usize,
        ),
        Err(error) => MethodResponse::error(id, error),
    }
}
