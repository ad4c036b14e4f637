//! The error answers of the ACP agent: JSON-RPC error objects with ACP's codes, and the
//! runtime's errors carried over with the native protocol's codes and messages.

use serde::Serialize;
use serde_json::{Value, json};

use crate::rpc::error::INTERNAL_ERROR;
use crate::runtime::RuntimeError;

/// ACP's "resource not found", for an unknown or closed session.
pub const RESOURCE_NOT_FOUND: i32 = -32002;

/// A JSON-RPC error answer.
#[derive(Debug, Clone, PartialEq)]
pub struct AcpError {
    pub code: i32,
    pub message: String,
    pub data: Option<Value>,
}

impl AcpError {
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// An unknown or closed session, named in `data` as ACP's own `resource_not_found` does.
    pub fn session_not_found(session_id: &str, message: impl Into<String>) -> Self {
        Self {
            code: RESOURCE_NOT_FOUND,
            message: message.into(),
            data: Some(json!({"sessionId": session_id})),
        }
    }
}

impl From<RuntimeError> for AcpError {
    fn from(error: RuntimeError) -> Self {
        if let RuntimeError::SessionNotFound(id) = &error {
            return Self::session_not_found(id, error.to_string());
        }
        // The native protocol's codes and messages, which already name what to do.
        let object = jsonrpsee_types::ErrorObjectOwned::from(error);
        Self {
            code: object.code(),
            message: object.message().to_string(),
            data: object
                .data()
                .and_then(|raw| serde_json::from_str(raw.get()).ok()),
        }
    }
}

/// What a request is answered with: its result, or an error.
pub type Answer = Result<Value, AcpError>;

/// A response of the schema as a result.
pub fn to_value<T: Serialize>(value: &T) -> Answer {
    serde_json::to_value(value)
        .map_err(|e| AcpError::new(INTERNAL_ERROR, format!("cannot serialise the answer: {e}")))
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;
    use crate::rpc::error::{INVALID_PARAMS, SESSION_BUSY};

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
        let mapped: Vec<AcpError> = errors.into_iter().map(AcpError::from).collect();
        assert_eq!(
            mapped,
            vec![
                AcpError {
                    code: RESOURCE_NOT_FOUND,
                    message: "no session with id \"s1\"".into(),
                    data: Some(json!({"sessionId": "s1"})),
                },
                AcpError::new(INVALID_PARAMS, "invalid params: text is empty"),
                AcpError {
                    code: SESSION_BUSY,
                    message: busy,
                    data: Some(json!({"sessionId": "s1", "runId": "r1"})),
                },
            ]
        );
    }
}
