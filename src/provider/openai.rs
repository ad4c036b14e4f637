//! The OpenAI Chat Completions API (`POST /chat/completions`, streamed), which most local and
//! hosted OpenAI-compatible servers (Ollama, llama.cpp, vLLM, LM Studio…) also speak.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::mem;

use reqwest::header::AUTHORIZATION;
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Value, json};

mod fast_chunk;

use super::retry::{Decoder, Upstream, error_message};
use super::sse::SseEvent;
use super::{
    HttpSettings, ModelContent, ModelDriver, ModelEvent, ModelMessage, ModelRequest, ModelRole,
    ModelStream, ProviderError, StopReason, TokenUsage, ToolSpec,
};

/// Where OpenAI's API lives (the `/v1` is part of the base URL, as with compatible servers).
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// Streams answers from a Chat Completions endpoint.
pub struct OpenAiDriver {
    upstream: Upstream,
    compat: bool,
}

impl OpenAiDriver {
    /// `base_url` up to but without `/chat/completions`, e.g. [`DEFAULT_BASE_URL`] or
    /// `http://localhost:11434/v1`. The key is held in memory only; local servers usually need
    /// none, and then no `Authorization` header is sent.
    pub fn new(
        base_url: &str,
        api_key: Option<String>,
        settings: HttpSettings,
    ) -> Result<Self, ProviderError> {
        let mut upstream = Upstream::new("OpenAI", base_url, "/chat/completions", settings)?;
        if let Some(key) = api_key.filter(|key| !key.is_empty()) {
            upstream.secret_header(AUTHORIZATION, &format!("Bearer {key}"), key)?;
        }
        Ok(Self {
            upstream,
            compat: false,
        })
    }

    /// Compatibility mode for OpenAI-compatible servers: the output limit is sent as the older
    /// `max_tokens`, because Ollama and llama.cpp ignore OpenAI's current
    /// `max_completion_tokens` (so the limit would silently not apply). OpenAI itself rejects
    /// `max_tokens` for its reasoning models, hence not the default.
    pub fn with_compat(mut self, compat: bool) -> Self {
        self.compat = compat;
        self
    }
}

impl fmt::Debug for OpenAiDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiDriver")
            .field("upstream", &self.upstream)
            .field("compat", &self.compat)
            .finish()
    }
}

impl ModelDriver for OpenAiDriver {
    fn stream(&self, request: ModelRequest) -> ModelStream {
        self.upstream
            .stream::<OpenAiDecoder>(&request_body(&request, self.compat))
    }
}

/// The JSON body of a streamed Chat Completions request.
fn request_body(request: &ModelRequest, compat: bool) -> Value {
    let mut body = json!({
        "model": request.model,
        "stream": true,
        // Without this the stream carries no token counts at all.
        "stream_options": {"include_usage": true},
        "messages": messages(request),
    });
    let limit = if compat {
        "max_tokens"
    } else {
        "max_completion_tokens"
    };
    body[limit] = json!(request.max_output_tokens);
    // Some compatible servers reject an empty tool list, so it is left out.
    if !request.tools.is_empty() {
        body["tools"] = tools(&request.tools);
    }
    body
}

fn tools(tools: &[ToolSpec]) -> Value {
    tools
        .iter()
        .map(|tool| {
            json!({
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.input_schema,
                },
            })
        })
        .collect()
}

fn messages(request: &ModelRequest) -> Vec<Value> {
    let mut out = Vec::new();
    if let Some(system) = request.system.as_deref().filter(|s| !s.is_empty()) {
        out.push(json!({"role": "system", "content": system}));
    }
    for message in &request.messages {
        match message.role {
            ModelRole::User => user_messages(message, &mut out),
            ModelRole::Assistant => out.push(assistant_message(message)),
        }
    }
    out
}

/// A user turn becomes one `tool` message per tool result, first, because they must directly
/// follow the assistant message that made the calls, then the user's text, if any.
fn user_messages(message: &ModelMessage, out: &mut Vec<Value>) {
    for content in &message.content {
        if let ModelContent::ToolResult {
            call_id,
            output,
            is_error,
        } = content
        {
            // The API has no error flag for tool results; the model learns it from the text.
            let content = if *is_error {
                format!("Error: {output}")
            } else {
                output.clone()
            };
            out.push(json!({"role": "tool", "tool_call_id": call_id, "content": content}));
        }
    }
    if let Some(text) = joined_text(message) {
        out.push(json!({"role": "user", "content": text}));
    }
}

/// Thinking is dropped: the API has no way to send it back.
fn assistant_message(message: &ModelMessage) -> Value {
    let calls: Vec<Value> = message
        .content
        .iter()
        .filter_map(|content| match content {
            ModelContent::ToolCall { id, name, input } => Some(json!({
                "id": id,
                "type": "function",
                "function": {"name": name, "arguments": input.to_string()},
            })),
            _ => None,
        })
        .collect();
    let text = joined_text(message);
    let mut out = json!({"role": "assistant", "content": text});
    if calls.is_empty() {
        // A message with neither text nor calls still needs a string content.
        out["content"] = json!(text.unwrap_or_default());
    } else {
        out["tool_calls"] = Value::Array(calls);
    }
    out
}

/// The message's text blocks as one string (plain-string content is what every compatible
/// server understands), or `None` when it has no text.
fn joined_text(message: &ModelMessage) -> Option<String> {
    let texts: Vec<&str> = message
        .content
        .iter()
        .filter_map(|content| match content {
            ModelContent::Text { text } if !text.is_empty() => Some(text.as_str()),
            _ => None,
        })
        .collect();
    (!texts.is_empty()).then(|| texts.join("\n\n"))
}

/// One streamed chunk. Every field is optional: compatible servers differ in what they omit
/// or send as `null`, and the final usage chunk has no choices.
/// One streamed chunk. Text borrows from the event's data where it has no escapes: a chunk is
/// parsed for every token, so each allocation saved is one per token.
#[derive(Debug, Deserialize)]
struct WireChunk<'a> {
    #[serde(default, borrow)]
    choices: Option<Vec<WireChoice<'a>>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    /// Only whether it is there matters; the message is read from the raw data.
    #[serde(default)]
    error: Option<IgnoredAny>,
}

#[derive(Debug, Deserialize)]
struct WireChoice<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default, borrow)]
    delta: Option<WireDelta<'a>>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Debug, Deserialize)]
struct WireDelta<'a> {
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
    /// Reasoning text, as DeepSeek, llama.cpp and vLLM name it.
    #[serde(default, borrow)]
    reasoning_content: Option<Cow<'a, str>>,
    /// Reasoning text, as Ollama and OpenRouter name it.
    #[serde(default, borrow)]
    reasoning: Option<Cow<'a, str>>,
    #[serde(default)]
    tool_calls: Option<Vec<WireToolCall>>,
}

#[derive(Debug, Deserialize)]
struct WireToolCall {
    #[serde(default)]
    index: Option<usize>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<WireFunction>,
}

#[derive(Debug, Deserialize)]
struct WireFunction {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Debug, Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<WirePromptDetails>,
    #[serde(default)]
    completion_tokens_details: Option<WireCompletionDetails>,
}

#[derive(Debug, Deserialize)]
struct WirePromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct WireCompletionDetails {
    #[serde(default)]
    reasoning_tokens: Option<u64>,
}

impl From<WireUsage> for TokenUsage {
    fn from(usage: WireUsage) -> Self {
        let cached = usage
            .prompt_tokens_details
            .and_then(|d| d.cached_tokens)
            .unwrap_or(0);
        TokenUsage {
            // OpenAI counts cached tokens inside `prompt_tokens`; here they are kept apart.
            input: usage.prompt_tokens.unwrap_or(0).saturating_sub(cached),
            output: usage.completion_tokens.unwrap_or(0),
            cache_read: cached,
            cache_write: 0,
            reasoning: usage
                .completion_tokens_details
                .and_then(|d| d.reasoning_tokens)
                .unwrap_or(0),
        }
    }
}

/// A tool call being assembled from fragments.
#[derive(Debug, Default)]
struct PendingCall {
    id: String,
    name: String,
    arguments: String,
}

/// Turns Chat Completions chunks into [`ModelEvent`]s.
#[derive(Debug, Default)]
pub struct OpenAiDecoder {
    /// Tool calls by their `index`, emitted in that order once the choice finishes.
    calls: BTreeMap<usize, PendingCall>,
    last_call: Option<usize>,
    stop: Option<StopReason>,
    /// Only sent when the server reports it; a made-up zero would read as a free request.
    usage: Option<TokenUsage>,
}

impl Decoder for OpenAiDecoder {
    fn event(
        &mut self,
        event: &SseEvent,
        out: &mut Vec<ModelEvent>,
    ) -> Result<bool, ProviderError> {
        if event.data.trim() == "[DONE]" {
            self.finish(out)?;
            return Ok(true);
        }
        let chunk = match fast_chunk::read(&event.data) {
            Some(chunk) => chunk,
            None => serde_json::from_str(&event.data)
                .map_err(|e| ProviderError::Stream(format!("malformed chunk: {e}")))?,
        };
        if chunk.error.is_some() {
            let message = error_message(&event.data);
            return Err(ProviderError::Stream(format!(
                "the provider reported an error: {message}"
            )));
        }
        if let Some(usage) = chunk.usage {
            self.usage = Some(usage.into());
        }
        // Only one answer is requested, so only choice 0 matters.
        let choice = chunk
            .choices
            .unwrap_or_default()
            .into_iter()
            .find(|choice| choice.index.unwrap_or(0) == 0);
        if let Some(choice) = choice {
            self.choice(choice, out)?;
        }
        Ok(false)
    }

    fn end(&mut self, out: &mut Vec<ModelEvent>) -> Result<bool, ProviderError> {
        // Some servers close without `[DONE]`; the answer is whole if it had finished.
        if self.stop.is_none() {
            return Ok(false);
        }
        self.finish(out)?;
        Ok(true)
    }
}

impl OpenAiDecoder {
    fn choice(
        &mut self,
        choice: WireChoice<'_>,
        out: &mut Vec<ModelEvent>,
    ) -> Result<(), ProviderError> {
        if let Some(delta) = choice.delta {
            let reasoning = delta.reasoning_content.or(delta.reasoning);
            push_text(out, ModelEvent::ThinkingDelta, reasoning);
            push_text(out, ModelEvent::TextDelta, delta.content);
            for fragment in delta.tool_calls.unwrap_or_default() {
                self.add_fragment(fragment);
            }
        }
        if let Some(reason) = choice.finish_reason {
            self.finish_choice(&reason, out)?;
        }
        Ok(())
    }

    fn add_fragment(&mut self, fragment: WireToolCall) {
        let id = fragment.id.filter(|id| !id.is_empty());
        let index = fragment
            .index
            .unwrap_or_else(|| self.index_without_one(id.as_deref()));
        self.last_call = Some(index);
        let call = self.calls.entry(index).or_default();
        if let Some(id) = id {
            call.id = id;
        }
        if let Some(function) = fragment.function {
            if let Some(name) = function.name.filter(|name| !name.is_empty()) {
                call.name = name;
            }
            if let Some(arguments) = function.arguments {
                call.arguments.push_str(&arguments);
            }
        }
    }

    /// Some servers leave out `index`: a fragment with a new id starts a new call, any other
    /// continues the latest one.
    fn index_without_one(&self, id: Option<&str>) -> usize {
        let next = self.calls.keys().next_back().map_or(0, |last| last + 1);
        match (self.last_call, id) {
            (Some(last), Some(id)) if self.calls.get(&last).is_some_and(|c| c.id == id) => last,
            (Some(last), None) => last,
            _ => next,
        }
    }

    /// Emits the assembled tool calls when the choice finishes.
    fn finish_choice(
        &mut self,
        reason: &str,
        out: &mut Vec<ModelEvent>,
    ) -> Result<(), ProviderError> {
        if self.stop.is_some() {
            return Ok(());
        }
        let stop = stop_reason(reason, !self.calls.is_empty());
        for (index, call) in mem::take(&mut self.calls) {
            let id = if call.id.is_empty() {
                format!("call_{index}")
            } else {
                call.id
            };
            let arguments = if call.arguments.trim().is_empty() {
                "{}"
            } else {
                call.arguments.as_str()
            };
            match serde_json::from_str(arguments) {
                Ok(input) => out.push(ModelEvent::ToolCall {
                    id,
                    name: call.name,
                    input,
                }),
                Err(_) if stop == StopReason::MaxTokens => {
                    out.push(ModelEvent::ToolCallCutOff {
                        id,
                        name: call.name,
                    });
                }
                Err(error) => {
                    return Err(ProviderError::Stream(format!(
                        "the arguments of tool call `{}` are not valid JSON: {error}",
                        call.name
                    )));
                }
            }
        }
        self.stop = Some(stop);
        Ok(())
    }

    /// The closing events; a stream that ends with `[DONE]` but no finish reason is taken as a
    /// normal end.
    fn finish(&mut self, out: &mut Vec<ModelEvent>) -> Result<(), ProviderError> {
        if self.stop.is_none() {
            self.finish_choice("stop", out)?;
        }
        if let Some(usage) = self.usage.take() {
            out.push(ModelEvent::Usage(usage));
        }
        let stop = self.stop.take().unwrap_or(StopReason::EndTurn);
        out.push(ModelEvent::Finished(stop));
        Ok(())
    }
}

fn push_text(
    out: &mut Vec<ModelEvent>,
    event: fn(String) -> ModelEvent,
    text: Option<Cow<'_, str>>,
) {
    if let Some(text) = text.filter(|text| !text.is_empty()) {
        out.push(event(text.into_owned()));
    }
}

/// Servers that predate tool calling in their finish reasons say `stop` after a tool call.
fn stop_reason(reason: &str, has_tool_calls: bool) -> StopReason {
    match reason {
        "stop" if has_tool_calls => StopReason::ToolUse,
        "stop" => StopReason::EndTurn,
        "tool_calls" | "function_call" => StopReason::ToolUse,
        "length" => StopReason::MaxTokens,
        "content_filter" => StopReason::Refusal,
        other => StopReason::Other(other.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    fn decode(chunks: &[&str]) -> (Vec<ModelEvent>, Result<bool, ProviderError>) {
        crate::provider::retry::decode_all::<OpenAiDecoder>("message", chunks)
    }

    #[test]
    fn reasoning_text_is_streamed_as_thinking() {
        let (events, done) = decode(&[
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","reasoning_content":"hm"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"reasoning":"m"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
            "[DONE]",
        ]);
        assert_eq!(
            events,
            vec![
                ModelEvent::ThinkingDelta("hm".into()),
                ModelEvent::ThinkingDelta("m".into()),
                ModelEvent::TextDelta("Hi".into()),
                ModelEvent::Finished(StopReason::EndTurn),
            ]
        );
        assert_eq!(done, Ok(true));
    }

    #[test]
    fn calls_without_index_or_with_stop_still_work() {
        let (events, done) = decode(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"a","function":{"name":"ls","arguments":""}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"b","function":{"name":"cat","arguments":"{\"p\":1}"}}]}}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#,
        ]);
        assert_eq!(
            events,
            vec![
                ModelEvent::ToolCall {
                    id: "a".into(),
                    name: "ls".into(),
                    input: json!({})
                },
                ModelEvent::ToolCall {
                    id: "b".into(),
                    name: "cat".into(),
                    input: json!({"p": 1})
                },
                ModelEvent::Finished(StopReason::ToolUse),
            ]
        );
        assert_eq!(done, Ok(true));
    }

    #[test]
    fn errors_in_the_stream_and_early_ends() {
        let (_, done) = decode(&[r#"{"error":{"message":"boom","type":"server_error"}}"#]);
        assert_eq!(
            done,
            Err(ProviderError::Stream(
                "the provider reported an error: server_error: boom".into()
            ))
        );
        let (events, done) = decode(&[r#"{"choices":[{"index":0,"delta":{"content":"Hi"}}]}"#]);
        assert_eq!(events, vec![ModelEvent::TextDelta("Hi".into())]);
        assert_eq!(done, Ok(false));
        let (_, done) = decode(&["{nope"]);
        assert!(matches!(done, Err(ProviderError::Stream(_))));
    }

    #[test]
    fn finish_reasons() {
        assert_eq!(stop_reason("content_filter", false), StopReason::Refusal);
        assert_eq!(stop_reason("length", true), StopReason::MaxTokens);
        assert_eq!(stop_reason("tool_calls", true), StopReason::ToolUse);
        assert_eq!(stop_reason("eos", false), StopReason::Other("eos".into()));
    }

    #[test]
    fn compat_mode_sends_max_tokens_and_errors_are_flagged() {
        let request = ModelRequest {
            model: "llama".into(),
            system: Some(String::new()),
            messages: vec![
                ModelMessage {
                    role: ModelRole::Assistant,
                    content: vec![ModelContent::Thinking {
                        text: "secret thoughts".into(),
                        signature: Some("sig".into()),
                    }],
                },
                ModelMessage {
                    role: ModelRole::User,
                    content: vec![ModelContent::ToolResult {
                        call_id: "c".into(),
                        output: "no such file".into(),
                        is_error: true,
                    }],
                },
            ],
            tools: vec![],
            max_output_tokens: 64,
        };
        assert_eq!(
            request_body(&request, true),
            json!({
                "model": "llama",
                "stream": true,
                "stream_options": {"include_usage": true},
                "max_tokens": 64,
                "messages": [
                    {"role": "assistant", "content": ""},
                    {"role": "tool", "tool_call_id": "c", "content": "Error: no such file"},
                ],
            })
        );
    }

    #[test]
    fn debug_never_shows_the_key() {
        let driver = OpenAiDriver::new(
            "http://localhost:8080/v1",
            Some("sk-proj-123".into()),
            HttpSettings::default(),
        );
        let text = format!("{driver:?}");
        assert!(!text.contains("sk-proj-123"), "{text}");
        assert!(text.contains("has_api_key: true"), "{text}");
    }
}
