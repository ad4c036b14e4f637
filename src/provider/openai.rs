//! The OpenAI Chat Completions API (`POST /chat/completions`, streamed), which most local and
//! hosted OpenAI-compatible servers (Ollama, llama.cpp, vLLM, LM Studio…) also speak.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::mem;
use std::sync::{Arc, Mutex};

use futures::StreamExt;

use reqwest::header::AUTHORIZATION;
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Value, json};

mod fast_chunk;

use super::retry::error_message;
use super::sse::SseEvent;
use super::upstream::{Decoder, Upstream};
use super::{
    HttpSettings, ModelContent, ModelDriver, ModelEvent, ModelMessage, ModelRequest, ModelRole,
    ModelStream, ProviderError, StopReason, ToolSpec,
};
use crate::protocol::TokenUsage;

/// Where OpenAI's API lives (the `/v1` is part of the base URL, as with compatible servers).
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// Streams answers from a Chat Completions endpoint.
pub struct OpenAiDriver {
    upstream: Arc<Upstream>,
    compat: bool,
    /// The output-limit field each model turned out to need, learned from a server that refused
    /// the other one. Kept in memory for the driver's life (the daemon keeps one driver per
    /// account for its whole run), so a restarted daemon learns it again with one more request.
    learned: Arc<Mutex<HashMap<String, LimitField>>>,
}

/// The request field that carries the output limit. OpenAI's reasoning models (`gpt-5`, the
/// o-series) refuse the older `max_tokens` with a 400, whoever serves them (OpenAI, Azure, a
/// gateway); Ollama and llama.cpp ignore the newer `max_completion_tokens`, so the limit would
/// silently not apply there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitField {
    MaxTokens,
    MaxCompletionTokens,
}

impl LimitField {
    pub fn name(self) -> &'static str {
        match self {
            LimitField::MaxTokens => "max_tokens",
            LimitField::MaxCompletionTokens => "max_completion_tokens",
        }
    }

    fn other(self) -> Self {
        match self {
            LimitField::MaxTokens => LimitField::MaxCompletionTokens,
            LimitField::MaxCompletionTokens => LimitField::MaxTokens,
        }
    }

    /// The field to send first: the newer one to OpenAI itself and to any server for a model of
    /// a reasoning family, the older one to other models on a compatible server.
    pub fn for_model(model: &str, compat: bool) -> Self {
        if !compat || is_reasoning_family(model) {
            LimitField::MaxCompletionTokens
        } else {
            LimitField::MaxTokens
        }
    }
}

/// `gpt-5…` and the o-series (`o1`, `o3-mini`, `o4-mini`…), also behind a gateway's vendor
/// prefix (`openai/gpt-5`). A deployment renamed beyond recognition (Azure) is caught by the
/// retry in [`OpenAiDriver::stream`] instead.
pub fn is_reasoning_family(model: &str) -> bool {
    let name = model
        .rsplit('/')
        .next()
        .unwrap_or(model)
        .to_ascii_lowercase();
    name.starts_with("gpt-5")
        || name
            .strip_prefix('o')
            .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
}

/// Whether `error` is a server refusing the output-limit field `field` (and not, say, its
/// value): a 400 whose message names the field, before any mention of the other one (which
/// OpenAI's message suggests instead), and says it is not supported or not known.
fn refuses(error: &ProviderError, field: LimitField) -> bool {
    const REFUSALS: [&str; 7] = [
        "unsupported",
        "not supported",
        "unrecognized",
        "unknown",
        "not permitted",
        "not allowed",
        "extra",
    ];
    let ProviderError::Http {
        status: 400,
        message,
    } = error
    else {
        return false;
    };
    let message = message.to_ascii_lowercase();
    let named_first = match (
        message.find(field.name()),
        message.find(field.other().name()),
    ) {
        (Some(at), Some(other)) => at < other,
        (found, None) => found.is_some(),
        (None, Some(_)) => false,
    };
    named_first && REFUSALS.iter().any(|word| message.contains(word))
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
            upstream: Arc::new(upstream),
            compat: false,
            learned: Arc::default(),
        })
    }

    /// Compatibility mode for OpenAI-compatible servers: the output limit is sent as the older
    /// `max_tokens` (see [`LimitField`]), except for models of OpenAI's reasoning families,
    /// which refuse it wherever they are served. Not the default, because OpenAI itself
    /// refuses `max_tokens` for those models.
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
            .finish_non_exhaustive()
    }
}

impl OpenAiDriver {
    /// The field to send for `model`: what the server taught, else the family's rule.
    fn limit_field(&self, model: &str) -> LimitField {
        let learned = crate::util::lock(&self.learned);
        learned
            .get(model)
            .copied()
            .unwrap_or_else(|| LimitField::for_model(model, self.compat))
    }
}

impl ModelDriver for OpenAiDriver {
    /// Streams the answer. When the server refuses the output-limit field before anything
    /// else (a 400 naming it), the request is sent once more with the other field, and the
    /// field that worked is remembered for the model.
    fn stream(&self, request: ModelRequest) -> ModelStream {
        let field = self.limit_field(&request.model);
        let first = self
            .upstream
            .stream::<OpenAiDecoder>(&request_body(&request, field));
        let (upstream, learned) = (self.upstream.clone(), self.learned.clone());
        let answer = async move {
            let (head, rest) = first.into_future().await;
            match head {
                Some(Err(refusal)) if refuses(&refusal, field) => {
                    let other = field.other();
                    tracing::info!(
                        model = request.model,
                        refused = field.name(),
                        "the server refused the output-limit field; sending {} instead",
                        other.name()
                    );
                    let second = upstream.stream::<OpenAiDecoder>(&request_body(&request, other));
                    let (head, rest) = second.into_future().await;
                    if !matches!(&head, Some(Err(error)) if refuses(error, other)) {
                        crate::util::lock(&learned).insert(request.model, other);
                    }
                    futures::stream::iter(head).chain(rest)
                }
                head => futures::stream::iter(head).chain(rest),
            }
        };
        Box::pin(futures::stream::once(answer).flatten())
    }
}

/// The JSON body of a streamed Chat Completions request.
fn request_body(request: &ModelRequest, limit: LimitField) -> Value {
    let mut body = json!({
        "model": request.model,
        "stream": true,
        // Without this the stream carries no token counts at all.
        "stream_options": {"include_usage": true},
        "messages": messages(request),
    });
    body[limit.name()] = json!(request.max_output_tokens);
    // Some compatible servers reject an empty tool list, so it is left out.
    if !request.tools.is_empty() {
        body["tools"] = tools(&request.tools);
    }
    if let Some(super::effort::Reasoning::Effort { effort }) = request.reasoning {
        body["reasoning_effort"] = json!(effort.name());
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
    let images: Vec<Value> = message
        .content
        .iter()
        .filter_map(|content| match content {
            ModelContent::Image {
                media_type, data, ..
            } => Some(json!({
                "type": "image_url",
                "image_url": {"url": format!("data:{media_type};base64,{data}"), "detail": "high"},
            })),
            _ => None,
        })
        .collect();
    let text = joined_text(message);
    if images.is_empty() {
        if let Some(text) = text {
            out.push(json!({"role": "user", "content": text}));
        }
        return;
    }
    // Images need the array form of content; text-only turns keep the plain string, which
    // every compatible server understands.
    let mut parts: Vec<Value> = text
        .map(|text| json!({"type": "text", "text": text}))
        .into_iter()
        .collect();
    parts.extend(images);
    out.push(json!({"role": "user", "content": parts}));
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
    /// Why the model declines to answer, streamed in place of `content`.
    #[serde(default, borrow)]
    refusal: Option<Cow<'a, str>>,
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
    /// The model streamed a refusal: the answer ends as one whatever the finish reason says.
    refused: bool,
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
            if delta.refusal.as_deref().is_some_and(|r| !r.is_empty()) {
                // The refusal is what the person reads in place of an answer.
                self.refused = true;
                push_text(out, ModelEvent::TextDelta, delta.refusal);
            }
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
        let stop = match self.refused {
            true => StopReason::Refusal,
            false => stop_reason(reason, !self.calls.is_empty()),
        };
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
        crate::provider::upstream::decode_all::<OpenAiDecoder>("message", chunks)
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
    fn a_streamed_refusal_is_shown_and_ends_the_answer_as_a_refusal() {
        let (events, done) = decode(&[
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":null,"refusal":""}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"refusal":"I can't help"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"refusal":" with that."}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
            "[DONE]",
        ]);
        assert_eq!(
            events,
            vec![
                ModelEvent::TextDelta("I can't help".into()),
                ModelEvent::TextDelta(" with that.".into()),
                ModelEvent::Finished(StopReason::Refusal),
            ]
        );
        assert_eq!(done, Ok(true));
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
            delegated: false,
            reasoning: None,
        };
        assert_eq!(
            request_body(&request, LimitField::for_model("llama", true)),
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
    fn the_limit_field_follows_the_model_family_on_compatible_servers() {
        let fields: Vec<_> = [
            "gpt-5",
            "gpt-5-mini",
            "openai/gpt-5.1",
            "o1",
            "o3-mini",
            "openai/o4-mini",
            "gpt-4o",
            "llama3.1",
            "ollama",
            "qwen2.5-coder",
        ]
        .into_iter()
        .map(|model| (model, LimitField::for_model(model, true).name()))
        .collect();
        assert_eq!(
            fields,
            [
                ("gpt-5", "max_completion_tokens"),
                ("gpt-5-mini", "max_completion_tokens"),
                ("openai/gpt-5.1", "max_completion_tokens"),
                ("o1", "max_completion_tokens"),
                ("o3-mini", "max_completion_tokens"),
                ("openai/o4-mini", "max_completion_tokens"),
                ("gpt-4o", "max_tokens"),
                ("llama3.1", "max_tokens"),
                ("ollama", "max_tokens"),
                ("qwen2.5-coder", "max_tokens"),
            ]
        );
        assert_eq!(
            LimitField::for_model("llama3.1", false),
            LimitField::MaxCompletionTokens
        );
    }

    #[test]
    fn only_a_400_refusing_the_field_itself_is_a_refusal() {
        let http = |status, message: &str| ProviderError::Http {
            status,
            message: message.into(),
        };
        let openai = "invalid_request_error: Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.";
        assert!(refuses(&http(400, openai), LimitField::MaxTokens));
        assert!(!refuses(
            &http(400, openai),
            LimitField::MaxCompletionTokens
        ));
        assert!(!refuses(&http(500, openai), LimitField::MaxTokens));
        let azure = "Unrecognized request argument supplied: max_completion_tokens";
        assert!(refuses(&http(400, azure), LimitField::MaxCompletionTokens));
        let value =
            "max_tokens is too large: 100000. This model supports at most 4096 completion tokens.";
        assert!(!refuses(&http(400, value), LimitField::MaxTokens));
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
