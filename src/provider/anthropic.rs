//! The Anthropic Messages API (`POST /v1/messages`, streamed).
//!
//! Requests mark three prompt-caching breakpoints: the system prompt, the last tool definition
//! and the last block of the last user message. Everything before a breakpoint is a prefix that
//! the next request of the same run repeats verbatim, so it is billed at the cache-read price.

use std::collections::BTreeMap;
use std::fmt;
use std::mem;

use reqwest::header::HeaderName;
use reqwest::header::HeaderValue;
use serde::Deserialize;
use serde_json::{Value, json};

use super::sse::SseEvent;
use super::upstream::{Decoder, Upstream};
use super::{
    HttpSettings, ModelContent, ModelDriver, ModelEvent, ModelMessage, ModelRequest, ModelRole,
    ModelStream, ProviderError, StopReason, ToolSpec,
};
use crate::protocol::TokenUsage;

/// Where Anthropic's API lives.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

/// The API version this driver speaks; it fixes the shape of requests and events.
const API_VERSION: &str = "2023-06-01";

/// Streams answers from Anthropic's Messages API, or from a server speaking the same shape.
pub struct AnthropicDriver {
    upstream: Upstream,
}

impl AnthropicDriver {
    /// `base_url` without the `/v1/messages` path, e.g. [`DEFAULT_BASE_URL`]. The key is held in
    /// memory only; without one no `x-api-key` header is sent (for proxies that add their own).
    pub fn new(
        base_url: &str,
        api_key: Option<String>,
        settings: HttpSettings,
    ) -> Result<Self, ProviderError> {
        let mut upstream = Upstream::new("Anthropic", base_url, "/v1/messages", settings)?;
        upstream.header(
            HeaderName::from_static("anthropic-version"),
            HeaderValue::from_static(API_VERSION),
        );
        if let Some(key) = api_key.filter(|key| !key.is_empty()) {
            upstream.secret_header(HeaderName::from_static("x-api-key"), &key.clone(), key)?;
        }
        Ok(Self { upstream })
    }
}

impl fmt::Debug for AnthropicDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnthropicDriver")
            .field("upstream", &self.upstream)
            .finish()
    }
}

impl ModelDriver for AnthropicDriver {
    fn stream(&self, request: ModelRequest) -> ModelStream {
        self.upstream
            .stream::<AnthropicDecoder>(&request_body(&request))
    }
}

/// The JSON body of a streamed Messages request.
fn request_body(request: &ModelRequest) -> Value {
    let mut body = json!({
        "model": request.model,
        "max_tokens": request.max_output_tokens,
        "stream": true,
        "messages": messages(&request.messages),
    });
    if let Some(system) = request.system.as_deref().filter(|s| !s.is_empty()) {
        body["system"] = json!([{
            "type": "text",
            "text": system,
            "cache_control": {"type": "ephemeral"},
        }]);
    }
    if !request.tools.is_empty() {
        body["tools"] = tools(&request.tools);
    }
    if let Some(super::effort::Reasoning::Thinking { budget_tokens }) = request.reasoning {
        body["thinking"] = json!({"type": "enabled", "budget_tokens": budget_tokens});
    }
    body
}

fn tools(tools: &[ToolSpec]) -> Value {
    let mut tools: Vec<Value> = tools
        .iter()
        .map(|tool| {
            json!({
                "name": tool.name,
                "description": tool.description,
                "input_schema": tool.input_schema,
            })
        })
        .collect();
    if let Some(last) = tools.last_mut() {
        last["cache_control"] = json!({"type": "ephemeral"});
    }
    Value::Array(tools)
}

fn messages(messages: &[ModelMessage]) -> Value {
    let mut messages: Vec<Value> = messages.iter().filter_map(message).collect();
    let last_user_block = messages
        .iter_mut()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_array_mut())
        .and_then(|blocks| blocks.last_mut());
    if let Some(block) = last_user_block {
        block["cache_control"] = json!({"type": "ephemeral"});
    }
    Value::Array(messages)
}

/// One message, or none when nothing in it can be sent: the API rejects empty messages.
fn message(message: &ModelMessage) -> Option<Value> {
    let mut blocks: Vec<Value> = message.content.iter().filter_map(block).collect();
    if blocks.is_empty() {
        return None;
    }
    let role = match message.role {
        ModelRole::User => {
            // The API wants the tool results first in the user turn that answers the calls.
            blocks.sort_by_key(|block| block["type"] != "tool_result");
            "user"
        }
        ModelRole::Assistant => "assistant",
    };
    Some(json!({"role": role, "content": blocks}))
}

fn block(content: &ModelContent) -> Option<Value> {
    Some(match content {
        // The API rejects empty text blocks.
        ModelContent::Text { text } if text.is_empty() => return None,
        ModelContent::Text { text } => json!({"type": "text", "text": text}),
        // Thinking is only accepted back with the signature that proves it is unaltered.
        ModelContent::Thinking { text, signature } => {
            let signature = signature.as_deref().filter(|s| !s.is_empty())?;
            json!({"type": "thinking", "thinking": text, "signature": signature})
        }
        ModelContent::ToolCall { id, name, input } => {
            let input = if input.is_null() { &json!({}) } else { input };
            json!({"type": "tool_use", "id": id, "name": name, "input": input})
        }
        ModelContent::ToolResult {
            call_id,
            output,
            is_error,
        } => json!({
            "type": "tool_result",
            "tool_use_id": call_id,
            "content": output,
            "is_error": is_error,
        }),
        ModelContent::Image {
            media_type, data, ..
        } => json!({
            "type": "image",
            "source": {"type": "base64", "media_type": media_type, "data": data},
        }),
    })
}

/// One streamed event, by its `type` field.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireEvent {
    MessageStart {
        message: WireMessage,
    },
    ContentBlockStart {
        index: usize,
        content_block: WireBlock,
    },
    ContentBlockDelta {
        index: usize,
        delta: WireDelta,
    },
    ContentBlockStop {
        index: usize,
    },
    MessageDelta {
        delta: WireMessageDelta,
        #[serde(default)]
        usage: Option<WireUsage>,
    },
    MessageStop,
    Error {
        error: WireError,
    },
    /// `ping` and event types added after this driver was written.
    #[serde(other)]
    Ignored,
}

#[derive(Debug, Deserialize)]
struct WireMessage {
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireBlock {
    Text {
        #[serde(default)]
        text: String,
    },
    Thinking {
        #[serde(default)]
        thinking: String,
        #[serde(default)]
        signature: Option<String>,
    },
    ToolUse {
        id: String,
        name: String,
    },
    /// Redacted thinking, server tools: nothing the transcript can hold.
    #[serde(other)]
    Other,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireDelta {
    TextDelta {
        text: String,
    },
    ThinkingDelta {
        thinking: String,
    },
    SignatureDelta {
        signature: String,
    },
    InputJsonDelta {
        partial_json: String,
    },
    #[serde(other)]
    Other,
}

#[derive(Debug, Deserialize)]
struct WireMessageDelta {
    #[serde(default)]
    stop_reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct WireError {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    message: String,
}

/// A `tool_use` block whose arguments are still arriving.
#[derive(Debug)]
struct OpenToolCall {
    id: String,
    name: String,
    json: String,
}

/// A tool call whose arguments did not parse; whether that is a cut-off or a provider fault is
/// known only once the stop reason arrives.
#[derive(Debug)]
struct BrokenToolCall {
    id: String,
    name: String,
    problem: String,
}

/// Turns Messages API events into [`ModelEvent`]s.
#[derive(Debug, Default)]
pub struct AnthropicDecoder {
    usage: TokenUsage,
    stop_reason: Option<String>,
    /// Open `tool_use` blocks by content block index.
    tool_calls: BTreeMap<usize, OpenToolCall>,
    broken: Vec<BrokenToolCall>,
}

impl Decoder for AnthropicDecoder {
    fn event(
        &mut self,
        event: &SseEvent,
        out: &mut Vec<ModelEvent>,
    ) -> Result<bool, ProviderError> {
        let wire: WireEvent = serde_json::from_str(&event.data).map_err(|e| {
            ProviderError::Stream(format!("malformed `{}` event: {e}", event.event))
        })?;
        match wire {
            WireEvent::MessageStart { message } => self.add_usage(message.usage),
            WireEvent::ContentBlockStart {
                index,
                content_block,
            } => self.start_block(index, content_block, out),
            WireEvent::ContentBlockDelta { index, delta } => self.delta(index, delta, out),
            WireEvent::ContentBlockStop { index } => self.stop_block(index, out),
            WireEvent::MessageDelta { delta, usage } => {
                if delta.stop_reason.is_some() {
                    self.stop_reason = delta.stop_reason;
                }
                self.add_usage(usage);
            }
            WireEvent::MessageStop => {
                self.finish(out)?;
                return Ok(true);
            }
            WireEvent::Error { error } => return Err(classify(error)),
            WireEvent::Ignored => {}
        }
        Ok(false)
    }

    fn end(&mut self, out: &mut Vec<ModelEvent>) -> Result<bool, ProviderError> {
        // Without `message_stop`, the answer is whole only if its stop reason arrived.
        if self.stop_reason.is_none() {
            return Ok(false);
        }
        self.finish(out)?;
        Ok(true)
    }
}

impl AnthropicDecoder {
    /// Usage arrives in `message_start` and again, cumulative, in `message_delta`; later
    /// numbers replace earlier ones.
    fn add_usage(&mut self, usage: Option<WireUsage>) {
        let Some(usage) = usage else { return };
        let fields = [
            (usage.input_tokens, &mut self.usage.input),
            (usage.output_tokens, &mut self.usage.output),
            (usage.cache_read_input_tokens, &mut self.usage.cache_read),
            (
                usage.cache_creation_input_tokens,
                &mut self.usage.cache_write,
            ),
        ];
        for (value, slot) in fields {
            if let Some(value) = value {
                *slot = value;
            }
        }
    }

    fn start_block(&mut self, index: usize, block: WireBlock, out: &mut Vec<ModelEvent>) {
        match block {
            WireBlock::Text { text } => push_text(out, ModelEvent::TextDelta, text),
            WireBlock::Thinking {
                thinking,
                signature,
            } => {
                push_text(out, ModelEvent::ThinkingDelta, thinking);
                push_text(
                    out,
                    ModelEvent::ThinkingSignature,
                    signature.unwrap_or_default(),
                );
            }
            WireBlock::ToolUse { id, name } => {
                let json = String::new();
                self.tool_calls
                    .insert(index, OpenToolCall { id, name, json });
            }
            WireBlock::Other => {}
        }
    }

    fn delta(&mut self, index: usize, delta: WireDelta, out: &mut Vec<ModelEvent>) {
        match delta {
            WireDelta::TextDelta { text } => push_text(out, ModelEvent::TextDelta, text),
            WireDelta::ThinkingDelta { thinking } => {
                push_text(out, ModelEvent::ThinkingDelta, thinking);
            }
            WireDelta::SignatureDelta { signature } => {
                push_text(out, ModelEvent::ThinkingSignature, signature);
            }
            WireDelta::InputJsonDelta { partial_json } => {
                if let Some(call) = self.tool_calls.get_mut(&index) {
                    call.json.push_str(&partial_json);
                }
            }
            WireDelta::Other => {}
        }
    }

    fn stop_block(&mut self, index: usize, out: &mut Vec<ModelEvent>) {
        let Some(call) = self.tool_calls.remove(&index) else {
            return;
        };
        let json = if call.json.trim().is_empty() {
            "{}"
        } else {
            call.json.as_str()
        };
        match serde_json::from_str(json) {
            Ok(input) => out.push(ModelEvent::ToolCall {
                id: call.id,
                name: call.name,
                input,
            }),
            Err(error) => self.broken.push(BrokenToolCall {
                id: call.id,
                name: call.name,
                problem: error.to_string(),
            }),
        }
    }

    /// The closing events: cut-off tool calls, usage, and the stop reason.
    fn finish(&mut self, out: &mut Vec<ModelEvent>) -> Result<(), ProviderError> {
        let stop = stop_reason(self.stop_reason.as_deref());
        let unclosed = mem::take(&mut self.tool_calls).into_values().map(|call| {
            let problem = "its block was never closed".to_owned();
            BrokenToolCall {
                id: call.id,
                name: call.name,
                problem,
            }
        });
        let broken: Vec<_> = mem::take(&mut self.broken)
            .into_iter()
            .chain(unclosed)
            .collect();
        for call in broken {
            if stop != StopReason::MaxTokens {
                return Err(ProviderError::Stream(format!(
                    "the arguments of tool call `{}` are not valid JSON: {}",
                    call.name, call.problem
                )));
            }
            out.push(ModelEvent::ToolCallCutOff {
                id: call.id,
                name: call.name,
            });
        }
        out.push(ModelEvent::Usage(self.usage));
        out.push(ModelEvent::Finished(stop));
        Ok(())
    }
}

fn push_text(out: &mut Vec<ModelEvent>, event: fn(String) -> ModelEvent, text: String) {
    if !text.is_empty() {
        out.push(event(text));
    }
}

fn stop_reason(reason: Option<&str>) -> StopReason {
    match reason {
        Some("end_turn" | "stop_sequence") => StopReason::EndTurn,
        Some("tool_use") => StopReason::ToolUse,
        Some("max_tokens") => StopReason::MaxTokens,
        Some("refusal") => StopReason::Refusal,
        Some(other) => StopReason::Other(other.to_owned()),
        None => StopReason::Other("unknown".to_owned()),
    }
}

/// An `error` event arrives after HTTP 200 (typically overload mid-request); it is reported with
/// the status the same error would have had before the stream began, so the retry policy and the
/// user see one classification.
fn classify(error: WireError) -> ProviderError {
    let status = match error.kind.as_str() {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "billing_error" => 402,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" => 429,
        "timeout_error" => 504,
        "overloaded_error" => 529,
        _ => 500,
    };
    let message = if error.message.is_empty() {
        error.kind
    } else {
        format!("{}: {}", error.kind, error.message)
    };
    ProviderError::Http { status, message }
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    fn user(content: Vec<ModelContent>) -> ModelMessage {
        ModelMessage {
            role: ModelRole::User,
            content,
        }
    }

    fn assistant(content: Vec<ModelContent>) -> ModelMessage {
        ModelMessage {
            role: ModelRole::Assistant,
            content,
        }
    }

    fn text(text: &str) -> ModelContent {
        ModelContent::Text { text: text.into() }
    }

    fn request(messages: Vec<ModelMessage>) -> ModelRequest {
        ModelRequest {
            model: "claude-test".into(),
            system: None,
            messages,
            tools: vec![],
            max_output_tokens: 100,
            delegated: false,
            reasoning: None,
        }
    }

    #[test]
    fn unsigned_thinking_and_empty_text_are_dropped() {
        let body = request_body(&request(vec![
            user(vec![text("hi")]),
            assistant(vec![
                ModelContent::Thinking {
                    text: "hmm".into(),
                    signature: None,
                },
                ModelContent::Thinking {
                    text: "also".into(),
                    signature: Some(String::new()),
                },
                text(""),
                text("hello"),
            ]),
            user(vec![text("again")]),
        ]));
        assert_eq!(
            body["messages"],
            json!([
                {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                {"role": "assistant", "content": [{"type": "text", "text": "hello"}]},
                {"role": "user", "content": [
                    {"type": "text", "text": "again", "cache_control": {"type": "ephemeral"}}
                ]},
            ])
        );
        assert_eq!(body.get("system"), None);
        assert_eq!(body.get("tools"), None);
    }

    #[test]
    fn tool_results_come_first_and_empty_messages_vanish() {
        let body = request_body(&request(vec![
            user(vec![text("go")]),
            assistant(vec![ModelContent::ToolCall {
                id: "t1".into(),
                name: "ls".into(),
                input: Value::Null,
            }]),
            user(vec![
                text("and hurry"),
                ModelContent::ToolResult {
                    call_id: "t1".into(),
                    output: "a.txt".into(),
                    is_error: false,
                },
            ]),
            assistant(vec![ModelContent::Thinking {
                text: "unsigned".into(),
                signature: None,
            }]),
        ]));
        assert_eq!(
            body["messages"],
            json!([
                {"role": "user", "content": [{"type": "text", "text": "go"}]},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "t1", "name": "ls", "input": {}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "a.txt",
                     "is_error": false},
                    {"type": "text", "text": "and hurry", "cache_control": {"type": "ephemeral"}},
                ]},
            ])
        );
    }

    fn decode(events: &[&str]) -> (Vec<ModelEvent>, Result<bool, ProviderError>) {
        crate::provider::upstream::decode_all::<AnthropicDecoder>("x", events)
    }

    #[test]
    fn unknown_events_and_blocks_are_ignored() {
        let (events, done) = decode(&[
            r#"{"type":"ping"}"#,
            r#"{"type":"future_event","x":1}"#,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"redacted_thinking","data":"x"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"citations_delta"}}"#,
            r#"{"type":"content_block_stop","index":0}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"pause_turn"},"usage":{"output_tokens":3}}"#,
            r#"{"type":"message_stop"}"#,
        ]);
        let usage = TokenUsage {
            output: 3,
            ..TokenUsage::default()
        };
        assert_eq!(
            events,
            vec![
                ModelEvent::Usage(usage),
                ModelEvent::Finished(StopReason::Other("pause_turn".into()))
            ]
        );
        assert_eq!(done, Ok(true));
    }

    #[test]
    fn stream_without_message_stop_is_incomplete_unless_the_stop_reason_came() {
        let (events, done) = decode(&[
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":"Hi"}}"#,
        ]);
        assert_eq!(events, vec![ModelEvent::TextDelta("Hi".into())]);
        assert_eq!(done, Ok(false));

        let (events, done) =
            decode(&[r#"{"type":"message_delta","delta":{"stop_reason":"stop_sequence"}}"#]);
        assert_eq!(
            events,
            vec![
                ModelEvent::Usage(TokenUsage::default()),
                ModelEvent::Finished(StopReason::EndTurn)
            ]
        );
        assert_eq!(done, Ok(true));
    }

    #[test]
    fn invalid_tool_json_without_a_cut_is_an_error() {
        let (events, done) = decode(&[
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"ls","input":{}}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}}"#,
            r#"{"type":"content_block_stop","index":0}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"}}"#,
            r#"{"type":"message_stop"}"#,
        ]);
        assert_eq!(events, vec![]);
        assert!(
            matches!(&done, Err(ProviderError::Stream(m)) if m.contains("`ls`")),
            "{done:?}"
        );
    }

    #[test]
    fn error_events_are_classified() {
        let (_, done) = decode(&[
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#,
        ]);
        assert_eq!(
            done,
            Err(ProviderError::Http {
                status: 429,
                message: "rate_limit_error: slow down".into()
            })
        );
        let (_, done) = decode(&["not json"]);
        assert!(matches!(done, Err(ProviderError::Stream(_))));
    }

    #[test]
    fn debug_never_shows_the_key() {
        let driver = AnthropicDriver::new(
            "https://example.com/?token=sekrit",
            Some("sk-ant-123".into()),
            HttpSettings::default(),
        );
        let text = format!("{driver:?}");
        assert!(!text.contains("sk-ant-123"), "{text}");
        assert!(!text.contains("sekrit"), "{text}");
        assert!(text.contains("has_api_key: true"), "{text}");
    }
}
