//! Model providers behind one provider-neutral driver trait.
//!
//! A driver turns a projected transcript ([`ModelRequest`]) into a stream of [`ModelEvent`]s.
//! Nothing outside this module knows a provider's JSON.

pub mod anthropic;
pub mod demo;
pub mod effort;
#[cfg(test)]
mod fuzz;
mod generator;
pub mod openai;
pub mod replay;
pub mod retry;
pub mod sse;
pub mod upstream;

use std::pin::Pin;
use std::time::Duration;

use futures::Stream;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::protocol::TokenUsage;

/// Who said a projected message, in the providers' two-role world.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ModelRole {
    User,
    Assistant,
}

/// One part of a projected message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum ModelContent {
    Text {
        text: String,
    },
    Thinking {
        text: String,
        signature: Option<String>,
    },
    ToolCall {
        id: String,
        name: String,
        input: Value,
    },
    ToolResult {
        call_id: String,
        output: String,
        is_error: bool,
    },
    /// An image of a user message. The projection leaves `data` empty (it works from the
    /// transcript, which holds references); the run fills it from the store just before the
    /// request is sent.
    Image {
        image_id: String,
        media_type: String,
        width: u32,
        height: u32,
        /// The bytes in base64.
        data: String,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelMessage {
    pub role: ModelRole,
    pub content: Vec<ModelContent>,
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the tool's input object.
    pub input_schema: Value,
}

/// Everything a driver needs for one model request. Messages alternate roles, start with the
/// user, and every tool call is followed by its result (the projection guarantees it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelRequest {
    pub model: String,
    pub system: Option<String>,
    pub messages: Vec<ModelMessage>,
    pub tools: Vec<ToolSpec>,
    pub max_output_tokens: u32,
    /// The request is a delegated task's (a child session's). Real providers ignore it; the
    /// replay model answers such a request from its `delegated` script.
    pub delegated: bool,
    /// How hard the model thinks, in the shape its provider takes ([`effort::plan`]); `None`
    /// leaves it to the provider. A driver ignores a shape it does not speak.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<effort::Reasoning>,
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    EndTurn,
    ToolUse,
    /// The output limit cut the answer.
    MaxTokens,
    Refusal,
    Other(String),
}

/// What a driver streams for one request.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelEvent {
    TextDelta(String),
    ThinkingDelta(String),
    /// The signature of the thinking streamed so far, needed to replay it.
    ThinkingSignature(String),
    /// A complete tool call, its arguments parsed.
    ToolCall {
        id: String,
        name: String,
        input: Value,
    },
    /// A tool call whose arguments were cut by the output limit; it must not run.
    ToolCallCutOff {
        id: String,
        name: String,
    },
    Usage(TokenUsage),
    /// Something the user should know, e.g. that a request is being retried.
    Notice(String),
    /// The last event of a successful stream.
    Finished(StopReason),
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProviderError {
    #[error("the provider answered HTTP {status}: {message}")]
    Http { status: u16, message: String },
    #[error("cannot reach the provider: {0}")]
    Connection(String),
    #[error("the provider's stream failed: {0}")]
    Stream(String),
    #[error("the provider sent nothing for {0} seconds")]
    Stalled(u64),
    #[error("{0}")]
    Config(String),
}

pub type ModelStream = Pin<Box<dyn Stream<Item = Result<ModelEvent, ProviderError>> + Send>>;

/// One wire shape of model API.
pub trait ModelDriver: Send + Sync {
    /// Starts one model request. The stream ends after [`ModelEvent::Finished`] or an error.
    fn stream(&self, request: ModelRequest) -> ModelStream;
}

/// Network behaviour shared by the HTTP drivers.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpSettings {
    /// How long to wait for the TCP and TLS connection.
    pub connect_timeout: Duration,
    /// How long the provider may send nothing at all (no bytes, not even a keep-alive ping)
    /// before the request is abandoned with [`ProviderError::Stalled`]. Also bounds the wait for
    /// the response headers. Whole-request timeouts would cut long answers, so there is none.
    pub stall_timeout: Duration,
    pub retry: retry::RetrySettings,
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            stall_timeout: Duration::from_secs(120),
            retry: retry::RetrySettings::default(),
        }
    }
}
