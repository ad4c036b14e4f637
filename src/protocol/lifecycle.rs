//! `initialize`: who the client and the server are, the server's capabilities, and the model
//! accounts a client may offer (with those configured but unusable, and why); and the params of
//! the lifecycle notifications a client sends (`initialized`, `$/cancelRequest`).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Who is on the other end of the connection; logged, never required.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientInfo {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InitializeParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_info: Option<ClientInfo>,
    /// The protocol version the client speaks; the server answers with its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol_version: Option<u32>,
    /// Free-form client capabilities; unknown keys are ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerInfo {
    pub name: String,
    pub version: String,
}

/// What this server can do, so a client can hide what it cannot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerCapabilities {
    /// Methods the server answers.
    pub methods: Vec<String>,
    /// Kinds of `session/event` the server emits.
    pub events: Vec<String>,
}

/// Which kind of model source an account is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ProviderKind {
    /// The built-in offline demo model.
    Demo,
    /// A scripted model replaying turns from a file (end-to-end tests, editor demos).
    Replay,
    /// Anthropic's Messages API.
    Anthropic,
    /// OpenAI's Chat Completions API, also serving OpenAI-compatible servers.
    #[serde(rename = "openai")]
    OpenAi,
}

impl ProviderKind {
    /// The name on the wire, in the configuration file and in usage lines.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Demo => "demo",
            ProviderKind::Replay => "replay",
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::OpenAi => "openai",
        }
    }
}

/// A model source the daemon can talk to (the built-in demo model when none is configured).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AccountInfo {
    pub name: String,
    pub kind: ProviderKind,
    pub default_model: String,
    /// True for the offline demo model, so a client can label it.
    pub is_demo: bool,
    /// Models the account is known to serve: its default, the built-in price table's for its
    /// provider and the configured prices'. Others may work too (a local server's, say).
    #[serde(default)]
    pub models: Vec<String>,
    /// The account's default reasoning effort (`effort` in its config), which a session
    /// without its own setting uses; absent when it sets none (the provider's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<super::Effort>,
    /// The reasoning-effort levels each of `models` takes through this account, lowest first,
    /// for clients' effort pickers; a model not listed takes none (the setting is ignored for
    /// it, with a notice).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub effort_levels: BTreeMap<String, Vec<super::Effort>>,
}

/// An account the configuration names that cannot be used, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnavailableAccount {
    pub name: String,
    /// What to fix, e.g. `ANTHROPIC_WORK_KEY is not set`.
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResult {
    pub server_info: ServerInfo,
    pub protocol_version: u32,
    pub capabilities: ServerCapabilities,
    pub accounts: Vec<AccountInfo>,
    /// The account a new session uses when `session/create` names none.
    pub default_account: String,
    /// Configured accounts left out of `accounts`, with the reason.
    #[serde(default)]
    pub unavailable_accounts: Vec<UnavailableAccount>,
    /// Whether `run_command` runs sandboxed by default on this machine, and why (not).
    #[serde(default)]
    pub sandbox: SandboxInfo,
}

/// `initialized`'s params: none yet (the client sends `{}`), kept as an object so fields can
/// be added.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct InitializedParams {}

/// `$/cancelRequest`'s params: the id of the request to cancel.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct CancelRequestParams {
    // The request's id, kept as the JSON text it was sent as, so the cancellation finds the
    // request however its number was written (`1e2` is not `100`).
    #[schemars(with = "RequestIdSchema")]
    pub id: Box<serde_json::value::RawValue>,
}

/// A request id: a string or a number.
#[derive(JsonSchema)]
#[schemars(untagged, rename = "RequestId")]
#[allow(dead_code, reason = "only its schema is used")]
enum RequestIdSchema {
    Text(String),
    Number(serde_json::Number),
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    /// A cancellation names its request by the id's text as sent, which a number type would
    /// rewrite (`1e2` as `100.0`) so that it no longer matched the request in flight.
    #[test]
    fn a_cancelled_id_is_kept_as_written() {
        let ids: Vec<String> = [r#"{"id":1e2}"#, r#"{"id":-0.50}"#, r#"{"id":"x\u0079"}"#]
            .into_iter()
            .map(|text| {
                let params: CancelRequestParams = serde_json::from_str(text).unwrap();
                params.id.get().to_string()
            })
            .collect();
        assert_eq!(ids, ["1e2", "-0.50", r#""x\u0079""#]);
    }
}

/// The sandbox of `run_command` on this machine (`docs/sandbox.md`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SandboxInfo {
    /// `true`: commands that no rule asks for run sandboxed without a prompt. `false`: the
    /// sandbox is off or missing, and commands ask.
    pub active: bool,
    /// One line saying which, e.g. `Landlock ABI 7: commands run sandboxed (…)`.
    pub detail: String,
}
