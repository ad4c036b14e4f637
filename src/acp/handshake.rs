//! `initialize`: what sidechat offers an ACP client, once per connection.

use agent_client_protocol_schema::v1 as acp;
use serde_json::json;

use super::agent::Agent;
use super::dispatch::STEERING;
use super::error::{Answer, error_message, to_value};
use crate::protocol::AccountInfo;
use crate::rpc::error::INVALID_REQUEST;

/// The agent's answer to `initialize`: its capabilities, and in `_meta.sidechat` what a
/// client that knows sidechat can use beyond ACP (the accounts, steering).
fn response(accounts: Vec<AccountInfo>) -> acp::InitializeResponse {
    let capabilities = acp::AgentCapabilities::new()
        .load_session(true)
        .prompt_capabilities(
            acp::PromptCapabilities::new()
                .embedded_context(true)
                .image(true),
        )
        .mcp_capabilities(acp::McpCapabilities::new().http(true))
        .session_capabilities(
            acp::SessionCapabilities::new()
                .list(acp::SessionListCapabilities::new())
                .resume(acp::SessionResumeCapabilities::new())
                .close(acp::SessionCloseCapabilities::new()),
        );
    let meta = json!({
        "sidechat": {
            // A prompt sent while a turn runs is queued and delivered between tool results
            // and the next model step; its request answers when that turn ends.
            "promptWhileRunning": "interjection",
            "steering": STEERING,
            "accounts": accounts,
        }
    });
    acp::InitializeResponse::new(agent_client_protocol_schema::ProtocolVersion::V1)
        .agent_capabilities(capabilities)
        .auth_methods(Vec::new())
        .agent_info(acp::Implementation::new(
            "sidechat",
            env!("CARGO_PKG_VERSION"),
        ))
        .meta(meta.as_object().cloned())
}

impl Agent {
    /// Answers the connection's one `initialize`; a second is refused.
    pub(super) fn initialize(&self, params: acp::InitializeRequest) -> Answer {
        if self.mark_initialized() {
            return Err(error_message(
                INVALID_REQUEST,
                "initialize was already received on this connection",
            ));
        }
        if let Some(client) = &params.client_info {
            tracing::info!(client = %client.name, version = %client.version, "client connected");
        }
        to_value(&response(self.config.account_infos()))
    }
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    /// Sessions load, list, resume and close; prompts take embedded context; MCP servers may
    /// be HTTP; no authentication; steering named for clients that know sidechat.
    #[test]
    fn initialize_offers_sessions_context_and_steering() {
        let wire = serde_json::to_value(response(Vec::new())).unwrap();
        assert_eq!(
            wire,
            json!({
                "protocolVersion": 1,
                "agentCapabilities": {
                    "loadSession": true,
                    "promptCapabilities": {"image": true, "audio": false, "embeddedContext": true},
                    "mcpCapabilities": {"http": true, "sse": false},
                    "sessionCapabilities": {"list": {}, "resume": {}, "close": {}},
                    "auth": {},
                },
                "authMethods": [],
                "agentInfo": {"name": "sidechat", "version": env!("CARGO_PKG_VERSION")},
                "_meta": {"sidechat": {
                    "promptWhileRunning": "interjection",
                    "steering": STEERING,
                    "accounts": [],
                }},
            })
        );
    }
}
