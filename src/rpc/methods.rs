//! The method table: every request declared in [`crate::protocol`] is registered here, routed to
//! the runtime function that answers it.

use std::collections::HashMap;

use futures::future::BoxFuture;
use jsonrpsee_types::ErrorObjectOwned;
use serde_json::value::RawValue;

use super::error::{INTERNAL_ERROR, INVALID_PARAMS, error_object};
use crate::protocol::*;
use crate::runtime::{Runtime, RuntimeError};

/// Each method of the table on the runtime. The protocol's declarations define this trait, so a
/// declared method without its function here does not compile.
impl Handler for Runtime {
    type Error = RuntimeError;

    async fn session_create(self, params: SessionCreateParams) -> Result<Session, RuntimeError> {
        self.create_session(params)
    }

    async fn session_list(
        self,
        params: SessionListParams,
    ) -> Result<SessionListResult, RuntimeError> {
        self.list_sessions(params)
    }

    async fn session_get(self, params: SessionIdParams) -> Result<Session, RuntimeError> {
        self.get_session(&params.session_id)
    }

    async fn session_update(self, params: SessionUpdateParams) -> Result<Session, RuntimeError> {
        self.update_session(params)
    }

    async fn session_delete(
        self,
        params: SessionIdParams,
    ) -> Result<SessionDeleteResult, RuntimeError> {
        self.delete_session(&params.session_id).await
    }

    async fn session_transcript(
        self,
        params: SessionTranscriptParams,
    ) -> Result<SessionTranscriptResult, RuntimeError> {
        self.transcript(params)
    }

    async fn workspace_files(
        self,
        params: WorkspaceFilesParams,
    ) -> Result<WorkspaceFilesResult, RuntimeError> {
        self.list_workspace_files(params).await
    }

    async fn session_commands(
        self,
        params: SessionIdParams,
    ) -> Result<SessionCommandsResult, RuntimeError> {
        self.commands(&params.session_id)
    }

    async fn session_budget(
        self,
        params: SessionIdParams,
    ) -> Result<SessionBudgetResult, RuntimeError> {
        self.budget(&params.session_id)
    }

    async fn session_cost(
        self,
        params: SessionIdParams,
    ) -> Result<SessionCostResult, RuntimeError> {
        self.cost(&params.session_id)
    }

    async fn session_file_diff(
        self,
        params: SessionFileDiffParams,
    ) -> Result<SessionFileDiffResult, RuntimeError> {
        self.file_diff(params)
    }

    async fn chat_send(self, params: ChatSendParams) -> Result<ChatSendResult, RuntimeError> {
        self.send(params).await
    }

    async fn chat_stop(self, params: SessionIdParams) -> Result<ChatStopResult, RuntimeError> {
        self.stop(&params.session_id).await
    }

    async fn chat_resume(self, params: SessionIdParams) -> Result<ChatResumeResult, RuntimeError> {
        self.resume(&params.session_id).await
    }

    async fn approval_respond(
        self,
        params: ApprovalRespondParams,
    ) -> Result<ApprovalRespondResult, RuntimeError> {
        self.respond_approval(params).await
    }

    async fn interjection_cancel(
        self,
        params: InterjectionCancelParams,
    ) -> Result<InterjectionCancelResult, RuntimeError> {
        self.cancel_interjection(&params.pending_id)
    }

    async fn note_delete(self, params: NoteDeleteParams) -> Result<NoteDeleteResult, RuntimeError> {
        self.delete_note(params)
    }

    async fn permissions_list(
        self,
        params: PermissionsListParams,
    ) -> Result<PermissionsListResult, RuntimeError> {
        self.list_permissions(params)
    }

    async fn permissions_remove(
        self,
        params: PermissionsRemoveParams,
    ) -> Result<PermissionsRemoveResult, RuntimeError> {
        self.remove_permission(params)
    }

    async fn session_rewind(
        self,
        params: SessionRewindParams,
    ) -> Result<SessionRewindResult, RuntimeError> {
        self.rewind(params).await
    }

    async fn session_fork(self, params: SessionForkParams) -> Result<Session, RuntimeError> {
        self.fork(params)
    }

    /// The runtime's part of a subscription: the session must exist. Which connection receives
    /// the session's events is the transport's part (`rpc::listen`); stdio's one client
    /// receives every session's events already.
    async fn session_subscribe(
        self,
        params: SessionIdParams,
    ) -> Result<SessionSubscribeResult, RuntimeError> {
        let session = self.get_session(&params.session_id)?;
        Ok(SessionSubscribeResult {
            last_seq: session.last_seq,
        })
    }

    /// The session must exist; `subscribed` is answered by the transport that keeps the
    /// subscriptions (false on stdio, which has none).
    async fn session_unsubscribe(
        self,
        params: SessionIdParams,
    ) -> Result<SessionUnsubscribeResult, RuntimeError> {
        self.get_session(&params.session_id)?;
        Ok(SessionUnsubscribeResult { subscribed: false })
    }

    async fn session_image(
        self,
        params: SessionImageParams,
    ) -> Result<SessionImageResult, RuntimeError> {
        self.image(params)
    }
}

impl From<RouteError<RuntimeError>> for ErrorObjectOwned {
    fn from(error: RouteError<RuntimeError>) -> Self {
        match error {
            RouteError::Handler(e) => e.into(),
            RouteError::Params(_) => error_object(INVALID_PARAMS, error.to_string(), None),
            RouteError::Result(_) => {
                tracing::error!(%error, "unwritable result");
                error_object(INTERNAL_ERROR, error.to_string(), None)
            }
        }
    }
}

/// What a method answers: its result's JSON text, or the error object to answer with.
pub type MethodFuture = BoxFuture<'static, Result<Box<RawValue>, ErrorObjectOwned>>;

/// One method: reads its params from their JSON text (`None` when absent) and returns the
/// future that answers it. The params are read before it returns, so the frame they were read
/// from can be dropped while the method works.
pub type Method = Box<dyn Fn(Option<&str>) -> MethodFuture + Send + Sync>;

/// The methods a client may call, by name.
#[derive(Default)]
pub struct MethodTable {
    methods: HashMap<&'static str, Method>,
}

impl MethodTable {
    /// The method table over `runtime`, one entry per declared request.
    pub fn new(runtime: Runtime) -> Self {
        let mut table = Self::default();
        for_each_route::<Runtime>(|name, route| {
            let runtime = runtime.clone();
            table.add(
                name,
                Box::new(move |params| {
                    let running = route(runtime.clone(), params);
                    Box::pin(async move { running.await.map_err(ErrorObjectOwned::from) })
                }),
            );
        });
        table
    }

    /// Adds `method` under `name`. Names come from one declaration list, so a clash is a
    /// programming error (the agreement test catches it); the first one stays.
    pub fn add(&mut self, name: &'static str, method: Method) {
        if self.methods.contains_key(name) {
            tracing::error!(name, "method registered twice");
            return;
        }
        self.methods.insert(name, method);
    }

    pub fn get(&self, name: &str) -> Option<&Method> {
        self.methods.get(name)
    }

    /// Every method's name, for a transport that registers them with its own server.
    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.methods.keys().copied()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::Arc;

    use pretty_assertions::assert_eq;

    use super::*;
    use crate::runtime::NoClient;

    fn declared(kinds: &[MethodKind]) -> BTreeSet<String> {
        METHODS
            .iter()
            .filter(|m| kinds.contains(&m.kind))
            .map(|m| m.name.to_string())
            .collect()
    }

    /// The first column of the method table in `docs/protocol.md` (in "Protocol in brief"):
    /// every method named in backticks.
    fn documented_methods() -> BTreeSet<String> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/protocol.md");
        let doc = std::fs::read_to_string(path).unwrap();
        let section = doc
            .split("## Protocol in brief")
            .nth(1)
            .expect("a \"Protocol in brief\" section")
            .split("\n## ")
            .next()
            .unwrap();
        let table: Vec<&str> = section
            .lines()
            .skip_while(|l| !l.starts_with("| method |"))
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .collect();
        assert!(!table.is_empty(), "no method table in docs/protocol.md");
        table
            .iter()
            .flat_map(|row| {
                let first = row.split('|').nth(1).unwrap_or_default();
                first
                    .split('`')
                    .skip(1)
                    .step_by(2)
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// The methods `schema/index.json` lists, with each file's direction.
    fn schema_methods() -> BTreeSet<(String, String)> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("schema");
        let index: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("index.json")).unwrap())
                .unwrap();
        index["methods"]
            .as_array()
            .unwrap()
            .iter()
            .map(|entry| {
                let file = entry["file"].as_str().unwrap();
                let schema: serde_json::Value =
                    serde_json::from_str(&std::fs::read_to_string(dir.join(file)).unwrap())
                        .unwrap();
                assert_eq!(schema["method"], entry["method"], "{file}");
                (
                    entry["method"].as_str().unwrap().to_string(),
                    schema["direction"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    #[test]
    fn declarations_schema_docs_and_method_table_agree() {
        let store = crate::store::Store::open_in_memory().unwrap();
        let config = crate::config::Config::from_env();
        let runtime = Runtime::new(store, config, Arc::new(NoClient)).unwrap();
        let table: BTreeSet<String> = MethodTable::new(runtime)
            .names()
            .map(str::to_string)
            .collect();
        assert_eq!(table, declared(&[MethodKind::Request]));

        let client_requests = declared(&[MethodKind::Lifecycle, MethodKind::Request]);
        let client_methods: BTreeSet<String> = METHODS
            .iter()
            .filter(|m| m.direction == Direction::ClientToServer)
            .map(|m| m.name.to_string())
            .collect();
        assert_eq!(documented_methods(), client_methods);

        let declarations: BTreeSet<(String, String)> = METHODS
            .iter()
            .map(|m| (m.name.to_string(), m.direction.wire_name().to_string()))
            .collect();
        assert_eq!(schema_methods(), declarations);

        let advertised: BTreeSet<String> =
            crate::runtime::describe(&crate::config::Config::from_env())
                .capabilities
                .methods
                .into_iter()
                .collect();
        assert_eq!(advertised, client_requests);
    }
}
