//! Every method of the native protocol, declared once: its name, which side sends it, and the
//! types of its params and result.
//!
//! The list below is the only place a method is named. From it come the method table the
//! dispatcher routes requests through (a [`Handler`] has one function per request, so a method
//! without a handler does not compile), the method list `initialize` advertises ([`METHODS`]),
//! and the JSON Schema in `schema/` ([`visit_methods`]).

use std::future::Future;

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

use super::*;

/// Which side sends a method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    ClientToServer,
    ServerToClient,
}

impl Direction {
    /// The name `schema/` uses for it.
    pub fn wire_name(self) -> &'static str {
        match self {
            Direction::ClientToServer => "clientToServer",
            Direction::ServerToClient => "serverToClient",
        }
    }
}

/// How a method is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MethodKind {
    /// A request the dispatcher answers itself, because it changes the connection's lifecycle
    /// (`initialize`, `shutdown`).
    Lifecycle,
    /// A request answered through the method table by a [`Handler`].
    Request,
    /// A notification: no answer.
    Notification,
}

/// One declared method, as data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MethodInfo {
    pub name: &'static str,
    pub direction: Direction,
    pub kind: MethodKind,
}

/// A request: its wire name and the types of its params and result.
pub trait Request {
    const METHOD: &'static str;
    const DIRECTION: Direction;
    type Params: DeserializeOwned + Serialize + JsonSchema + Send + 'static;
    type Result: DeserializeOwned + Serialize + JsonSchema + Send + 'static;
}

/// A notification: its wire name and the type of its params.
pub trait Notification {
    const METHOD: &'static str;
    const DIRECTION: Direction;
    type Params: DeserializeOwned + Serialize + JsonSchema + Send + 'static;
}

/// Something that wants to see every declared method with its types (the schema export).
pub trait MethodVisitor {
    fn request<M: Request>(&mut self);
    fn notification<N: Notification>(&mut self);
}

/// Why a routed request produced no result.
#[derive(Debug, thiserror::Error)]
pub enum RouteError<E> {
    /// The params are not the method's params type.
    #[error("Invalid params: {0}")]
    Params(serde_json::Error),
    /// The handler refused the request.
    #[error(transparent)]
    Handler(E),
    /// The result could not be written as JSON.
    #[error("cannot serialise the result: {0}")]
    Result(serde_json::Error),
}

/// What a [`Route`] returns: the result's JSON text, or why there is none.
pub type RouteFuture<E> = BoxFuture<'static, Result<Box<RawValue>, RouteError<E>>>;

/// One method of the table with its types erased: parses the params from their JSON text (the
/// only time they are parsed), runs the handler and writes the result.
pub type Route<H> = fn(H, Option<&str>) -> RouteFuture<<H as Handler>::Error>;

/// Params from their JSON text. Absent (or `null`) params read as `{}`, so a method whose
/// params are all optional may omit them, and one with a required field names it.
pub fn read_params<P: DeserializeOwned>(raw: Option<&str>) -> Result<P, serde_json::Error> {
    match raw.map(str::trim) {
        None | Some("null") => serde_json::from_str("{}"),
        Some(text) => serde_json::from_str(text),
    }
}

/// Runs one request on `handler` once its params parsed.
fn route<H: Handler, P: DeserializeOwned, R: Serialize, F>(
    handler: H,
    raw: Option<&str>,
    run: impl FnOnce(H, P) -> F,
) -> RouteFuture<H::Error>
where
    F: Future<Output = Result<R, H::Error>> + Send + 'static,
{
    match read_params::<P>(raw) {
        Err(e) => Box::pin(std::future::ready(Err(RouteError::Params(e)))),
        Ok(params) => {
            let running = run(handler, params);
            Box::pin(async move {
                let result = running.await.map_err(RouteError::Handler)?;
                serde_json::value::to_raw_value(&result).map_err(RouteError::Result)
            })
        }
    }
}

macro_rules! protocol_methods {
    (
        lifecycle {
            $( $(#[doc = $ldoc:literal])* $lmarker:ident $lname:literal ($lparams:ty) -> $lresult:ty; )*
        }
        requests {
            $( $(#[doc = $doc:literal])* $marker:ident $name:literal ($params:ty) -> $result:ty => $handler:ident; )*
        }
        notifications {
            $( $(#[doc = $ndoc:literal])* $nmarker:ident $nname:literal ($nparams:ty) $ndirection:ident; )*
        }
    ) => {
        $(
            $(#[doc = $ldoc])*
            pub enum $lmarker {}
            impl Request for $lmarker {
                const METHOD: &'static str = $lname;
                const DIRECTION: Direction = Direction::ClientToServer;
                type Params = $lparams;
                type Result = $lresult;
            }
        )*
        $(
            $(#[doc = $doc])*
            pub enum $marker {}
            impl Request for $marker {
                const METHOD: &'static str = $name;
                const DIRECTION: Direction = Direction::ClientToServer;
                type Params = $params;
                type Result = $result;
            }
        )*
        $(
            $(#[doc = $ndoc])*
            pub enum $nmarker {}
            impl Notification for $nmarker {
                const METHOD: &'static str = $nname;
                const DIRECTION: Direction = Direction::$ndirection;
                type Params = $nparams;
            }
        )*

        /// Every method of the protocol, in declaration order.
        pub const METHODS: &[MethodInfo] = &[
            $( MethodInfo { name: $lname, direction: Direction::ClientToServer, kind: MethodKind::Lifecycle }, )*
            $( MethodInfo { name: $name, direction: Direction::ClientToServer, kind: MethodKind::Request }, )*
            $( MethodInfo { name: $nname, direction: Direction::$ndirection, kind: MethodKind::Notification }, )*
        ];

        /// Shows `visitor` every method with its types, in declaration order.
        pub fn visit_methods(visitor: &mut impl MethodVisitor) {
            $( visitor.request::<$lmarker>(); )*
            $( visitor.request::<$marker>(); )*
            $( visitor.notification::<$nmarker>(); )*
        }

        /// The server's side of every request in the method table: one function per method.
        ///
        /// Each function takes the handler by value (a cheap handle) so the request's future
        /// owns everything it uses.
        pub trait Handler: Clone + Send + Sync + 'static {
            type Error: Send + 'static;
            $(
                $(#[doc = $doc])*
                fn $handler(self, params: $params)
                    -> impl Future<Output = Result<$result, Self::Error>> + Send;
            )*
        }

        /// Calls `register` with each method of the table and the route that runs it.
        pub fn for_each_route<H: Handler>(mut register: impl FnMut(&'static str, Route<H>)) {
            $(
                register($name, |handler: H, raw: Option<&str>| {
                    route(handler, raw, |handler: H, params: $params| handler.$handler(params))
                });
            )*
        }
    };
}

protocol_methods! {
    lifecycle {
        /// Server info, protocol version, capabilities and model accounts. The first request.
        Initialize "initialize" (InitializeParams) -> InitializeResult;
        /// Ends every request in flight and the runs; `exit` follows.
        Shutdown "shutdown" (Option<()>) -> Option<()>;
    }
    requests {
        /// A new session.
        SessionCreate "session/create" (SessionCreateParams) -> Session => session_create;
        /// Sessions, newest first, paged.
        SessionList "session/list" (SessionListParams) -> SessionListResult => session_list;
        /// One session.
        SessionGet "session/get" (SessionIdParams) -> Session => session_get;
        /// Renames a session or changes its model, system prompt or limits.
        SessionUpdate "session/update" (SessionUpdateParams) -> Session => session_update;
        /// Deletes a session, stopping its run.
        SessionDelete "session/delete" (SessionIdParams) -> SessionDeleteResult => session_delete;
        /// Committed entries after a `seq`, pending approvals and interjections.
        SessionTranscript "session/transcript" (SessionTranscriptParams) -> SessionTranscriptResult => session_transcript;
        /// How full the model's context is.
        SessionBudget "session/budget" (SessionIdParams) -> SessionBudgetResult => session_budget;
        /// What the session's model requests cost.
        SessionCost "session/cost" (SessionIdParams) -> SessionCostResult => session_cost;
        /// One changed file's text before the session's first change and after its latest.
        SessionFileDiff "session/fileDiff" (SessionFileDiffParams) -> SessionFileDiffResult => session_file_diff;
        /// What the user typed: starts a run, or queues an interjection while one works.
        ChatSend "chat/send" (ChatSendParams) -> ChatSendResult => chat_send;
        /// Ends the session's run.
        ChatStop "chat/stop" (SessionIdParams) -> ChatStopResult => chat_stop;
        /// Runs a user turn no run answered.
        ChatResume "chat/resume" (SessionIdParams) -> ChatResumeResult => chat_resume;
        /// Answers an approval prompt.
        ApprovalRespond "approval/respond" (ApprovalRespondParams) -> ApprovalRespondResult => approval_respond;
        /// Withdraws a queued interjection.
        InterjectionCancel "interjection/cancel" (InterjectionCancelParams) -> InterjectionCancelResult => interjection_cancel;
        /// Deletes a carry-over note: it is never sent to a model again.
        NoteDelete "note/delete" (NoteDeleteParams) -> NoteDeleteResult => note_delete;
        /// The saved workspace answers, and every rule in force in a workspace with its source.
        PermissionsList "permissions/list" (PermissionsListParams) -> PermissionsListResult => permissions_list;
        /// Deletes a saved workspace answer.
        PermissionsRemove "permissions/remove" (PermissionsRemoveParams) -> PermissionsRemoveResult => permissions_remove;
        /// The slash commands the session's composer offers: built-in and custom.
        SessionCommands "session/commands" (SessionIdParams) -> SessionCommandsResult => session_commands;
        /// Takes the session back to just before a user message: files, conversation or both.
        SessionRewind "session/rewind" (SessionRewindParams) -> SessionRewindResult => session_rewind;
        /// A new session with the transcript up to a message, on the same workspace and model.
        SessionFork "session/fork" (SessionForkParams) -> Session => session_fork;
        /// The session's workspace files that best match a query, for `@` completion.
        WorkspaceFiles "workspace/files" (WorkspaceFilesParams) -> WorkspaceFilesResult => workspace_files;
        /// The session's events reach this connection from now on (a WebSocket connection;
        /// stdio's one client gets every session's events anyway).
        SessionSubscribe "session/subscribe" (SessionIdParams) -> SessionSubscribeResult => session_subscribe;
        /// The session's events no longer reach this connection.
        SessionUnsubscribe "session/unsubscribe" (SessionIdParams) -> SessionUnsubscribeResult => session_unsubscribe;
        /// The bytes of an image a message of the session carries.
        SessionImage "session/image" (SessionImageParams) -> SessionImageResult => session_image;
    }
    notifications {
        /// The client has read `initialize`'s answer.
        Initialized "initialized" (InitializedParams) ClientToServer;
        /// Ends the process: exit code 0 after `shutdown`, 1 without.
        Exit "exit" (Option<()>) ClientToServer;
        /// Cancels a request in flight, which is answered -32800.
        CancelRequest "$/cancelRequest" (CancelRequestParams) ClientToServer;
        /// One event of one session, numbered.
        SessionEvent "session/event" (SessionEventParams) ServerToClient;
    }
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    /// The `kind` of each variant in the JSON Schema generated from [`Event`], in order.
    fn kinds_in_the_schema() -> Vec<String> {
        let schema = schemars::SchemaGenerator::default().into_root_schema_for::<Event>();
        let variants = schema
            .get("oneOf")
            .and_then(serde_json::Value::as_array)
            .expect("Event is a oneOf of its variants");
        variants
            .iter()
            .map(|variant| {
                let kind = variant
                    .pointer("/properties/kind")
                    .unwrap_or_else(|| panic!("a variant without a kind: {variant}"));
                kind.get("const")
                    .or_else(|| kind.pointer("/enum/0"))
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or_else(|| panic!("a kind that is not one string: {kind}"))
                    .to_string()
            })
            .collect()
    }

    #[test]
    fn the_listed_event_kinds_are_the_kinds_of_the_event_type() {
        assert_eq!(Event::KINDS, kinds_in_the_schema());
    }

    #[test]
    fn absent_params_read_as_an_empty_object() {
        assert_eq!(
            read_params::<SessionListParams>(None).unwrap(),
            SessionListParams::default()
        );
        assert_eq!(
            read_params::<SessionListParams>(Some(" null ")).unwrap(),
            SessionListParams::default()
        );
        let missing = read_params::<SessionIdParams>(None).unwrap_err();
        assert!(missing.to_string().contains("sessionId"), "{missing}");
    }
}
