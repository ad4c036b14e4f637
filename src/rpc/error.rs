//! JSON-RPC error codes and the mapping from the runtime's errors to them.

use jsonrpsee_types::ErrorObjectOwned;
use serde_json::Value;

use crate::runtime::RuntimeError;

pub const PARSE_ERROR: i32 = -32700;
pub const INVALID_REQUEST: i32 = -32600;
pub const METHOD_NOT_FOUND: i32 = -32601;
pub const INVALID_PARAMS: i32 = -32602;
pub const INTERNAL_ERROR: i32 = -32603;
/// LSP's ServerNotInitialized: a request before `initialize`.
pub const SERVER_NOT_INITIALIZED: i32 = -32002;
/// LSP's RequestCancelled: `$/cancelRequest` ended the request.
pub const REQUEST_CANCELLED: i32 = -32800;

// Application errors, -32000 to -32099.
pub const SESSION_NOT_FOUND: i32 = -32001;
pub const SESSION_BUSY: i32 = -32003;
pub const NOT_FOUND: i32 = -32004;
pub const PROVIDER_UNAVAILABLE: i32 = -32005;
pub const BUDGET_EXHAUSTED: i32 = -32006;
pub const CONFLICT: i32 = -32007;

/// A JSON-RPC error object with an optional `data` payload.
pub fn error_object(
    code: i32,
    message: impl Into<String>,
    data: Option<Value>,
) -> ErrorObjectOwned {
    ErrorObjectOwned::owned(code, message.into(), data)
}

/// A complete error response frame.
pub fn error_response(id: &Value, code: i32, message: &str, data: Option<Value>) -> String {
    error_frame(&id.to_string(), code, message, data)
}

/// A complete error response frame answering the id whose JSON text is `id` (as the client
/// wrote it, see [`super::request_id`]).
pub fn error_frame(id: &str, code: i32, message: &str, data: Option<Value>) -> String {
    let mut error = serde_json::json!({ "code": code, "message": message });
    if let Some(data) = data {
        error["data"] = data;
    }
    format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{error}}}"#)
}

/// A complete success response frame whose result is the JSON text `result`.
pub fn result_frame(id: &str, result: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#)
}

impl From<RuntimeError> for ErrorObjectOwned {
    fn from(error: RuntimeError) -> Self {
        let message = error.to_string();
        let (code, data) = match &error {
            RuntimeError::SessionNotFound(id) => (
                SESSION_NOT_FOUND,
                Some(serde_json::json!({ "sessionId": id })),
            ),
            RuntimeError::InvalidParams(_) => (INVALID_PARAMS, None),
            RuntimeError::Busy { session_id, run_id } => (
                SESSION_BUSY,
                Some(serde_json::json!({ "sessionId": session_id, "runId": run_id })),
            ),
            RuntimeError::RunElsewhere {
                session_id,
                run_id,
                owner,
            } => (
                SESSION_BUSY,
                Some(
                    serde_json::json!({ "sessionId": session_id, "runId": run_id, "owner": owner }),
                ),
            ),
            RuntimeError::NotFound { .. } => (NOT_FOUND, None),
            RuntimeError::Conflict(_) => (CONFLICT, None),
            RuntimeError::Provider(_) => (PROVIDER_UNAVAILABLE, None),
            RuntimeError::BudgetExhausted(_) => (BUDGET_EXHAUSTED, None),
            RuntimeError::Store(_) | RuntimeError::Internal(_) | RuntimeError::Suspended => {
                tracing::error!(%error, "internal error");
                (INTERNAL_ERROR, None)
            }
        };
        error_object(code, message, data)
    }
}
