//! The error answers of the ACP agent. They are the daemon's own error objects
//! (`jsonrpsee_types::ErrorObjectOwned`, written by [`crate::rpc::error::object_frame`]) with
//! ACP's code for an unknown session; the runtime's other errors keep the native protocol's
//! codes and messages.

use jsonrpsee_types::ErrorObjectOwned;
use serde::Serialize;
use serde_json::{Value, json};

use crate::rpc::error::{INTERNAL_ERROR, error_object};
use crate::runtime::RuntimeError;

/// ACP's "resource not found", for an unknown or closed session.
pub const RESOURCE_NOT_FOUND: i32 = -32002;

/// An ACP error answer: the daemon's JSON-RPC error object.
pub type AcpError = ErrorObjectOwned;

/// An error answer without `data`.
pub fn error_message(code: i32, message: impl Into<String>) -> AcpError {
    error_object(code, message, None)
}

/// An unknown or closed session, named in `data` as ACP's own `resource_not_found` does.
pub fn session_not_found(session_id: &str, message: impl Into<String>) -> AcpError {
    error_object(
        RESOURCE_NOT_FOUND,
        message,
        Some(json!({"sessionId": session_id})),
    )
}

/// A runtime error as ACP answers it: an unknown session is ACP's `resource_not_found`; the
/// others are the native protocol's error objects, whose messages already name what to do.
/// (Not a `From`: the native mapping is the `From`, and `?` must not pick it by accident.)
pub fn runtime_error(error: RuntimeError) -> AcpError {
    if let RuntimeError::SessionNotFound(id) = &error {
        return session_not_found(id, error.to_string());
    }
    ErrorObjectOwned::from(error)
}

/// What a request is answered with: its result, or an error.
pub type Answer = Result<Value, AcpError>;

/// A response of the schema as a result.
pub fn to_value<T: Serialize>(value: &T) -> Answer {
    serde_json::to_value(value)
        .map_err(|e| error_message(INTERNAL_ERROR, format!("cannot serialise the answer: {e}")))
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;
    use crate::rpc::error::{INVALID_PARAMS, SESSION_BUSY, object_frame};

    /// An unknown session is ACP's `resource_not_found` naming it; the other runtime errors
    /// keep the native protocol's code, message and data.
    #[test]
    fn runtime_errors_carry_over_with_acp_codes_for_sessions() {
        let errors = [
            RuntimeError::SessionNotFound("s1".into()),
            RuntimeError::InvalidParams("text is empty".into()),
            RuntimeError::Busy {
                session_id: "s1".into(),
                run_id: "r1".into(),
            },
        ];
        let busy = errors[2].to_string();
        let mapped: Vec<AcpError> = errors.into_iter().map(runtime_error).collect();
        assert_eq!(
            mapped,
            vec![
                error_object(
                    RESOURCE_NOT_FOUND,
                    "no session with id \"s1\"",
                    Some(json!({"sessionId": "s1"})),
                ),
                error_message(INVALID_PARAMS, "invalid params: text is empty"),
                error_object(
                    SESSION_BUSY,
                    busy,
                    Some(json!({"sessionId": "s1", "runId": "r1"})),
                ),
            ]
        );
    }

    /// The frames are the ones the agent wrote before its errors were the daemon's objects.
    #[test]
    fn error_frames_are_written_as_before() {
        let frames: Vec<String> = [
            session_not_found("s1", "no session with id \"s1\""),
            error_message(INVALID_PARAMS, "invalid params: text is empty"),
        ]
        .iter()
        .map(|error| object_frame("3", error))
        .collect();
        assert_eq!(
            frames,
            vec![
                r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32002,"message":"no session with id \"s1\"","data":{"sessionId":"s1"}}}"#.to_string(),
                r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"invalid params: text is empty"}}"#.to_string(),
            ]
        );
    }
}
