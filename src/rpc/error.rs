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

/// A JSON-RPC error object with an optional `data` payload. Every error answer is written from
/// this one type (`jsonrpsee_types`' error object), whether a method returned it or the
/// dispatcher refused the frame.
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
    object_frame(id, &error_object(code, message, data))
}

/// A complete error response frame carrying `error`, answering the id whose JSON text is `id`.
/// The error object is written by its own `Serialize`; only the envelope is written as text,
/// as [`result_frame`]'s is, so the id goes back byte for byte as the client wrote it without
/// being parsed and written again.
pub fn object_frame(id: &str, error: &ErrorObjectOwned) -> String {
    match serde_json::to_string(error) {
        Ok(error) => format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{error}}}"#),
        // Only a `data` payload that is no JSON could fail, and none is built that way.
        Err(e) => {
            tracing::error!(error = %e, "cannot write an error object");
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":{INTERNAL_ERROR},"message":"Internal error"}}}}"#
            )
        }
    }
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

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;
    use serde_json::json;

    use super::*;

    #[test]
    fn an_error_frame_keeps_the_id_as_written_and_carries_the_typed_object() {
        let data = Some(json!({"sessionId": "s"}));
        assert_eq!(
            error_frame("1.50", SESSION_BUSY, "busy", data.clone()),
            r#"{"jsonrpc":"2.0","id":1.50,"error":{"code":-32003,"message":"busy","data":{"sessionId":"s"}}}"#
        );
        assert_eq!(
            object_frame("7", &error_object(SESSION_BUSY, "busy", data)),
            error_frame("7", SESSION_BUSY, "busy", Some(json!({"sessionId": "s"})))
        );
        assert_eq!(
            error_response(&json!("a"), PARSE_ERROR, "Parse error", None),
            r#"{"jsonrpc":"2.0","id":"a","error":{"code":-32700,"message":"Parse error"}}"#
        );
    }
}
