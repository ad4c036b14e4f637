//! Incoming ACP messages decoded by the schema's own method table: a request's method name
//! selects its params type through [`acp::ClientRequest::from_method_and_params`], a
//! notification's through [`acp::ClientNotification::from_method_and_params`], and what
//! sidechat serves is a [`Call`]. The JSON-RPC errors for a method sidechat does not serve and
//! for params that do not fit the method are decided here.

use agent_client_protocol_schema::MethodDispatchError;
use agent_client_protocol_schema::v1 as acp;
use serde_json::Value;

use super::error::{AcpError, error_message};
use crate::rpc::error::{INVALID_PARAMS, METHOD_NOT_FOUND};

/// The extension method codex-acp and claude-agent-acp clients use to type while a turn runs.
pub const STEERING: &str = "_session/steering";

/// The params of `_session/steering`.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SteeringParams {
    pub session_id: String,
    pub prompt: Vec<acp::ContentBlock>,
}

/// A request sidechat serves, with its params.
#[derive(Debug, Clone)]
pub enum Call {
    /// Boxed: the client's capabilities are several times the size of any other call.
    Initialize(Box<acp::InitializeRequest>),
    Authenticate(acp::AuthenticateRequest),
    NewSession(acp::NewSessionRequest),
    LoadSession(acp::LoadSessionRequest),
    ResumeSession(acp::ResumeSessionRequest),
    ListSessions(acp::ListSessionsRequest),
    CloseSession(acp::CloseSessionRequest),
    SetConfigOption(acp::SetSessionConfigOptionRequest),
    Prompt(acp::PromptRequest),
    Steering(SteeringParams),
}

/// The methods [`Call`] holds. A method the schema knows but sidechat does not serve is
/// answered "method not found" even when its params are malformed.
const SERVED: [&str; 10] = [
    acp::AGENT_METHOD_NAMES.initialize,
    acp::AGENT_METHOD_NAMES.authenticate,
    acp::AGENT_METHOD_NAMES.session_new,
    acp::AGENT_METHOD_NAMES.session_load,
    acp::AGENT_METHOD_NAMES.session_resume,
    acp::AGENT_METHOD_NAMES.session_list,
    acp::AGENT_METHOD_NAMES.session_close,
    acp::AGENT_METHOD_NAMES.session_set_config_option,
    acp::AGENT_METHOD_NAMES.session_prompt,
    STEERING,
];

/// Whether `method` is the one request served before `initialize`.
pub fn is_initialize(method: &str) -> bool {
    method == acp::AGENT_METHOD_NAMES.initialize
}

/// Decodes one request by its method name; absent params are `null`, as JSON-RPC leaves them
/// to the method.
pub fn decode(method: &str, params: Option<Value>) -> Result<Call, AcpError> {
    let params = params.unwrap_or(Value::Null);
    let request = match acp::ClientRequest::from_method_and_params(method, &params) {
        Ok(request) => request,
        Err(MethodDispatchError::InvalidPayload { source, .. }) if SERVED.contains(&method) => {
            return Err(invalid_params(method, &source));
        }
        Err(_) => return Err(not_served(method)),
    };
    let call = match request {
        acp::ClientRequest::InitializeRequest(p) => Call::Initialize(Box::new(p)),
        acp::ClientRequest::AuthenticateRequest(p) => Call::Authenticate(p),
        acp::ClientRequest::NewSessionRequest(p) => Call::NewSession(p),
        acp::ClientRequest::LoadSessionRequest(p) => Call::LoadSession(p),
        acp::ClientRequest::ResumeSessionRequest(p) => Call::ResumeSession(p),
        acp::ClientRequest::ListSessionsRequest(p) => Call::ListSessions(p),
        acp::ClientRequest::CloseSessionRequest(p) => Call::CloseSession(p),
        acp::ClientRequest::SetSessionConfigOptionRequest(p) => Call::SetConfigOption(p),
        acp::ClientRequest::PromptRequest(p) => Call::Prompt(p),
        acp::ClientRequest::ExtMethodRequest(ext) if &*ext.method == STEERING => {
            // Read from the params as sent, so the error names the field as for any method.
            let steering =
                serde_json::from_value(params).map_err(|e| invalid_params(method, &e))?;
            Call::Steering(steering)
        }
        _ => return Err(not_served(method)),
    };
    Ok(call)
}

/// A notification sidechat acts on.
#[derive(Debug, Clone)]
pub enum Notice {
    Cancel(acp::CancelNotification),
    /// One sidechat has no use for, such as an extension's.
    Ignored,
}

/// Decodes one notification by its method name; an error for params that do not fit.
pub fn decode_notification(method: &str, params: Option<Value>) -> Result<Notice, AcpError> {
    let params = params.unwrap_or(Value::Null);
    match acp::ClientNotification::from_method_and_params(method, &params) {
        Ok(acp::ClientNotification::CancelNotification(cancel)) => Ok(Notice::Cancel(cancel)),
        Ok(_) | Err(MethodDispatchError::UnknownMethod { .. }) => Ok(Notice::Ignored),
        Err(MethodDispatchError::InvalidPayload { source, .. }) => {
            Err(invalid_params(method, &source))
        }
        Err(other) => Err(error_message(INVALID_PARAMS, other.to_string())),
    }
}

fn invalid_params(method: &str, error: &serde_json::Error) -> AcpError {
    error_message(
        INVALID_PARAMS,
        format!("Invalid params for {method}: {error}"),
    )
}

fn not_served(method: &str) -> AcpError {
    error_message(
        METHOD_NOT_FOUND,
        format!("Method not found: sidechat acp does not serve {method}"),
    )
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;
    use serde_json::json;

    use super::*;

    /// The method a decoded call came from, and its params as they go back on the wire.
    fn wire(call: &Call) -> (&'static str, Value) {
        let (method, params) = match call {
            Call::Initialize(p) => (acp::AGENT_METHOD_NAMES.initialize, json!(p)),
            Call::Authenticate(p) => (acp::AGENT_METHOD_NAMES.authenticate, json!(p)),
            Call::NewSession(p) => (acp::AGENT_METHOD_NAMES.session_new, json!(p)),
            Call::LoadSession(p) => (acp::AGENT_METHOD_NAMES.session_load, json!(p)),
            Call::ResumeSession(p) => (acp::AGENT_METHOD_NAMES.session_resume, json!(p)),
            Call::ListSessions(p) => (acp::AGENT_METHOD_NAMES.session_list, json!(p)),
            Call::CloseSession(p) => (acp::AGENT_METHOD_NAMES.session_close, json!(p)),
            Call::SetConfigOption(p) => {
                (acp::AGENT_METHOD_NAMES.session_set_config_option, json!(p))
            }
            Call::Prompt(p) => (acp::AGENT_METHOD_NAMES.session_prompt, json!(p)),
            Call::Steering(p) => (
                STEERING,
                json!({"sessionId": p.session_id, "prompt": p.prompt}),
            ),
        };
        (method, params)
    }

    /// Each served method decodes into its own call, its params kept whole.
    #[test]
    fn every_served_method_decodes_into_its_call() {
        let prompt = json!([{"type": "text", "text": "hi"}]);
        let requests = [
            (
                acp::AGENT_METHOD_NAMES.initialize,
                json!({"protocolVersion": 1}),
            ),
            (
                acp::AGENT_METHOD_NAMES.authenticate,
                json!({"methodId": "m"}),
            ),
            (
                acp::AGENT_METHOD_NAMES.session_new,
                json!({"cwd": "/w", "mcpServers": []}),
            ),
            (
                acp::AGENT_METHOD_NAMES.session_load,
                json!({"sessionId": "s", "cwd": "/w", "mcpServers": []}),
            ),
            (
                acp::AGENT_METHOD_NAMES.session_resume,
                json!({"sessionId": "s", "cwd": "/w"}),
            ),
            (acp::AGENT_METHOD_NAMES.session_list, json!({"cwd": "/w"})),
            (
                acp::AGENT_METHOD_NAMES.session_close,
                json!({"sessionId": "s"}),
            ),
            (
                acp::AGENT_METHOD_NAMES.session_set_config_option,
                json!({"sessionId": "s", "configId": "model", "value": "m1"}),
            ),
            (
                acp::AGENT_METHOD_NAMES.session_prompt,
                json!({"sessionId": "s", "prompt": prompt}),
            ),
            (STEERING, json!({"sessionId": "s", "prompt": prompt})),
        ];
        assert_eq!(SERVED.len(), requests.len());
        for (method, params) in requests {
            let call = decode(method, Some(params.clone())).unwrap();
            let (decoded_method, decoded) = wire(&call);
            assert_eq!(decoded_method, method);
            // Fields the schema fills in with defaults (`mcpServers` on resume) are the only
            // additions: every field sent is kept with its value.
            let sent = params.as_object().unwrap();
            let kept: serde_json::Map<String, Value> = decoded
                .as_object()
                .unwrap()
                .iter()
                .filter(|(k, _)| sent.contains_key(*k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            assert_eq!(&kept, sent, "{method}");
        }
    }

    /// Methods sidechat does not serve are "method not found", whether the schema knows them
    /// (even with params that do not fit them) or not, and so are extensions other than
    /// steering.
    #[test]
    fn methods_not_served_are_not_found() {
        let refused: Vec<(i32, String)> = [
            (acp::AGENT_METHOD_NAMES.session_set_mode, json!({})),
            (
                acp::AGENT_METHOD_NAMES.session_delete,
                json!({"sessionId": "s"}),
            ),
            (acp::AGENT_METHOD_NAMES.logout, Value::Null),
            ("_other/extension", json!({})),
            ("no/such", json!({})),
        ]
        .into_iter()
        .map(|(method, params)| {
            let error = decode(method, Some(params)).unwrap_err();
            (error.code(), error.message().to_string())
        })
        .collect();
        let expected: Vec<(i32, String)> = [
            acp::AGENT_METHOD_NAMES.session_set_mode,
            acp::AGENT_METHOD_NAMES.session_delete,
            acp::AGENT_METHOD_NAMES.logout,
            "_other/extension",
            "no/such",
        ]
        .iter()
        .map(|m| {
            (
                METHOD_NOT_FOUND,
                format!("Method not found: sidechat acp does not serve {m}"),
            )
        })
        .collect();
        assert_eq!(refused, expected);
    }

    /// Params that do not fit a served method are "invalid params" naming the method and
    /// what is wrong; absent params are `null`, which no served method takes.
    #[test]
    fn malformed_params_are_invalid_params_naming_the_method() {
        let prompt = acp::AGENT_METHOD_NAMES.session_prompt;
        let errors: Vec<(i32, String)> = [
            (
                prompt,
                Some(json!({"sessionId": "s", "prompt": [{"type": "bogus", "text": "hi"}]})),
            ),
            (acp::AGENT_METHOD_NAMES.session_new, None),
            (STEERING, Some(json!({"sessionId": "s"}))),
        ]
        .into_iter()
        .map(|(method, params)| {
            let error = decode(method, params).unwrap_err();
            (error.code(), error.message().to_string())
        })
        .collect();
        let codes: Vec<i32> = errors.iter().map(|(code, _)| *code).collect();
        assert_eq!(codes, vec![INVALID_PARAMS; 3]);
        let starts: Vec<bool> = errors
            .iter()
            .zip([prompt, acp::AGENT_METHOD_NAMES.session_new, STEERING])
            .map(|((_, message), method)| {
                message.starts_with(&format!("Invalid params for {method}: "))
            })
            .collect();
        assert_eq!(starts, vec![true; 3]);
        assert_eq!(
            (
                errors[0].1.contains("bogus"),
                errors[2].1.ends_with("missing field `prompt`"),
            ),
            (true, true),
            "{errors:?}"
        );
    }

    /// `session/cancel` is the one notification acted on; others are ignored, a malformed
    /// cancel is an error to log.
    #[test]
    fn notifications_decode_cancel_and_ignore_the_rest() {
        let cancel = acp::AGENT_METHOD_NAMES.session_cancel;
        let decoded = [
            decode_notification(cancel, Some(json!({"sessionId": "s1"}))),
            decode_notification("_sidechat/whatever", None),
            decode_notification("no/such", Some(json!({}))),
            decode_notification(cancel, Some(json!({}))),
        ];
        let shown: Vec<Result<Option<String>, i32>> = decoded
            .into_iter()
            .map(|d| match d {
                Ok(Notice::Cancel(c)) => Ok(Some(c.session_id.0.to_string())),
                Ok(Notice::Ignored) => Ok(None),
                Err(e) => Err(e.code()),
            })
            .collect();
        assert_eq!(
            shown,
            vec![
                Ok(Some("s1".into())),
                Ok(None),
                Ok(None),
                Err(INVALID_PARAMS)
            ]
        );
    }
}
