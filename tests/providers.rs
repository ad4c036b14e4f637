//! The HTTP provider drivers against a fake upstream that replays the providers' exact SSE
//! shapes, records what it was sent, and can fail, drop or stall on cue.

use std::net::TcpListener;
use std::time::Duration;

use futures::StreamExt;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sidechat::protocol::TokenUsage;
use sidechat::provider::anthropic::AnthropicDriver;
use sidechat::provider::openai::OpenAiDriver;
use sidechat::provider::retry::RetrySettings;
use sidechat::provider::{
    HttpSettings, ModelContent, ModelDriver, ModelEvent, ModelMessage, ModelRequest, ModelRole,
    ProviderError, StopReason, ToolSpec,
};

#[path = "support/upstream.rs"]
mod upstream;

use upstream::{Part, Reply, Upstream, anthropic as anthropic_shape, openai as openai_shape};

/// A streamed reply with one HTTP chunk per SSE event.
fn stream(events: Vec<String>) -> Reply {
    Reply::events(events)
}

fn error(status: u16, body: Value) -> Reply {
    Reply::status(status, &body.to_string())
}

// ---------------------------------------------------------------------------------------------
// Event shapes
// ---------------------------------------------------------------------------------------------

/// An Anthropic event: named by its type, like the real API.
fn a(data: Value) -> String {
    anthropic_shape::event(&data)
}

fn a_start() -> String {
    let mut start = anthropic_shape::message_start(25);
    start["message"]["usage"]["cache_creation_input_tokens"] = json!(7);
    start["message"]["usage"]["cache_read_input_tokens"] = json!(100);
    a(start)
}

fn a_block(index: usize, block: Value) -> String {
    a(anthropic_shape::block_start(index, block))
}

fn a_delta(index: usize, delta: Value) -> String {
    a(anthropic_shape::delta(index, delta))
}

fn a_text(index: usize, text: &str) -> String {
    a(anthropic_shape::text_delta(index, text))
}

fn a_json(index: usize, partial: &str) -> String {
    a_delta(
        index,
        json!({"type": "input_json_delta", "partial_json": partial}),
    )
}

fn a_tool(index: usize, id: &str, name: &str) -> String {
    a_block(
        index,
        json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
    )
}

fn a_stop_block(index: usize) -> String {
    a(anthropic_shape::block_stop(index))
}

fn a_end(stop_reason: &str, output_tokens: u64) -> Vec<String> {
    anthropic_shape::message_end(stop_reason, output_tokens)
        .into_iter()
        .map(a)
        .collect()
}

fn a_usage(output: u64) -> ModelEvent {
    ModelEvent::Usage(TokenUsage {
        input: 25,
        output,
        cache_read: 100,
        cache_write: 7,
        reasoning: 0,
    })
}

/// "Hello world", the plain Anthropic answer.
fn a_hello() -> Vec<String> {
    let mut events = vec![
        a_start(),
        a_block(0, json!({"type": "text", "text": ""})),
        a(json!({"type": "ping"})),
        a_text(0, "Hello"),
        a_text(0, " world"),
        a_stop_block(0),
    ];
    events.extend(a_end("end_turn", 12));
    events
}

fn a_hello_events() -> Vec<Item> {
    vec![
        Ok(ModelEvent::TextDelta("Hello".into())),
        Ok(ModelEvent::TextDelta(" world".into())),
        Ok(a_usage(12)),
        Ok(ModelEvent::Finished(StopReason::EndTurn)),
    ]
}

/// An OpenAI chunk with one choice.
fn o(delta: Value, finish_reason: Option<&str>) -> String {
    openai_shape::event(&openai_shape::chunk(delta, finish_reason))
}

fn o_tool(index: usize, id: Option<&str>, name: Option<&str>, arguments: &str) -> String {
    let mut call = json!({"index": index, "function": {"arguments": arguments}});
    if let Some(id) = id {
        call["id"] = json!(id);
        call["type"] = json!("function");
    }
    if let Some(name) = name {
        call["function"]["name"] = json!(name);
    }
    o(json!({"tool_calls": [call]}), None)
}

/// How the final usage chunk says it has no choices; servers differ.
#[derive(Clone, Copy)]
enum NoChoices {
    Empty,
    Null,
    Missing,
}

fn o_usage(shape: NoChoices) -> String {
    let mut chunk = openai_shape::usage(130, 100, 20);
    chunk["usage"]["completion_tokens_details"]["reasoning_tokens"] = json!(5);
    match shape {
        NoChoices::Empty => {}
        NoChoices::Null => chunk["choices"] = Value::Null,
        NoChoices::Missing => {
            chunk.as_object_mut().expect("an object").remove("choices");
        }
    }
    openai_shape::event(&chunk)
}

fn o_done() -> String {
    openai_shape::DONE.to_owned()
}

fn o_usage_event() -> ModelEvent {
    ModelEvent::Usage(TokenUsage {
        input: 30,
        output: 20,
        cache_read: 100,
        cache_write: 0,
        reasoning: 5,
    })
}

fn o_hello(shape: NoChoices) -> Vec<String> {
    vec![
        o(json!({"role": "assistant", "content": ""}), None),
        o(json!({"content": "Hello"}), None),
        o(json!({"content": " world"}), None),
        o(json!({}), Some("stop")),
        o_usage(shape),
        o_done(),
    ]
}

fn o_hello_events() -> Vec<Item> {
    vec![
        Ok(ModelEvent::TextDelta("Hello".into())),
        Ok(ModelEvent::TextDelta(" world".into())),
        Ok(o_usage_event()),
        Ok(ModelEvent::Finished(StopReason::EndTurn)),
    ]
}

// ---------------------------------------------------------------------------------------------
// Drivers and requests
// ---------------------------------------------------------------------------------------------

type Item = Result<ModelEvent, ProviderError>;

const KEY: &str = "sk-test-not-a-real-key";

fn settings() -> HttpSettings {
    HttpSettings {
        connect_timeout: Duration::from_secs(2),
        stall_timeout: Duration::from_secs(5),
        retry: RetrySettings {
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(40),
            ..RetrySettings::default()
        },
    }
}

fn anthropic(fake: &Upstream) -> AnthropicDriver {
    AnthropicDriver::new(&fake.url, Some(KEY.into()), settings()).expect("driver")
}

fn openai(fake: &Upstream) -> OpenAiDriver {
    OpenAiDriver::new(&format!("{}/v1", fake.url), Some(KEY.into()), settings()).expect("driver")
}

fn user_text(text: &str) -> ModelMessage {
    ModelMessage {
        role: ModelRole::User,
        content: vec![ModelContent::Text { text: text.into() }],
    }
}

fn hello_request() -> ModelRequest {
    ModelRequest {
        model: "test-model".into(),
        system: None,
        messages: vec![user_text("Say hello")],
        tools: vec![],
        max_output_tokens: 256,
        delegated: false,
        reasoning: None,
    }
}

async fn run(driver: &dyn ModelDriver, request: ModelRequest) -> Vec<Item> {
    let events = driver.stream(request).collect();
    tokio::time::timeout(Duration::from_secs(30), events)
        .await
        .expect("the stream ended in time")
}

/// Replaces what legitimately varies between runs: backoff delays (they have jitter) and the
/// HTTP stack's wording of a lost connection.
fn normalized(events: Vec<Item>) -> Vec<Item> {
    const LOST: &str = "the connection was lost: ";
    events
        .into_iter()
        .map(|event| match event {
            Ok(ModelEvent::Notice(text)) => Ok(ModelEvent::Notice(mask_delay(&text))),
            Err(ProviderError::Stream(text)) if text.starts_with(LOST) => {
                Err(ProviderError::Stream(format!("{LOST}…")))
            }
            other => other,
        })
        .collect()
}

fn mask_delay(text: &str) -> String {
    const MARK: &str = "retrying in ";
    let Some(start) = text.find(MARK).map(|i| i + MARK.len()) else {
        return text.to_owned();
    };
    match text[start..].find("s (") {
        Some(end) => format!("{}_{}", &text[..start], &text[start + end..]),
        None => text.to_owned(),
    }
}

fn notice(text: &str) -> Item {
    Ok(ModelEvent::Notice(text.into()))
}

// ---------------------------------------------------------------------------------------------
// Anthropic
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn anthropic_text() {
    let fake = upstream::start(vec![stream(a_hello())]);
    let events = run(&anthropic(&fake), hello_request()).await;
    assert_eq!(events, a_hello_events());

    let seen = fake.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, "/v1/messages");
    assert_eq!(seen[0].header("x-api-key"), Some(KEY));
    assert_eq!(seen[0].header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(seen[0].header("content-type"), Some("application/json"));
    assert_eq!(seen[0].body["stream"], json!(true));
}

#[tokio::test]
async fn anthropic_thinking_with_signature_is_replayed() {
    let mut events = vec![
        a_start(),
        a_block(
            0,
            json!({"type": "thinking", "thinking": "", "signature": ""}),
        ),
        a_delta(0, json!({"type": "thinking_delta", "thinking": "Let me"})),
        a_delta(0, json!({"type": "thinking_delta", "thinking": " think."})),
        a_delta(
            0,
            json!({"type": "signature_delta", "signature": "EqQBCgIYAh=="}),
        ),
        a_stop_block(0),
        a_block(1, json!({"type": "text", "text": ""})),
        a_text(1, "Answer."),
        a_stop_block(1),
    ];
    events.extend(a_end("end_turn", 40));
    let fake = upstream::start(vec![stream(events), stream(a_hello())]);
    let driver = anthropic(&fake);

    let got = run(&driver, hello_request()).await;
    assert_eq!(
        got,
        vec![
            Ok(ModelEvent::ThinkingDelta("Let me".into())),
            Ok(ModelEvent::ThinkingDelta(" think.".into())),
            Ok(ModelEvent::ThinkingSignature("EqQBCgIYAh==".into())),
            Ok(ModelEvent::TextDelta("Answer.".into())),
            Ok(a_usage(40)),
            Ok(ModelEvent::Finished(StopReason::EndTurn)),
        ]
    );

    let mut next = hello_request();
    next.messages.push(ModelMessage {
        role: ModelRole::Assistant,
        content: vec![
            ModelContent::Thinking {
                text: "Let me think.".into(),
                signature: Some("EqQBCgIYAh==".into()),
            },
            ModelContent::Text {
                text: "Answer.".into(),
            },
        ],
    });
    next.messages.push(user_text("And then?"));
    assert_eq!(run(&driver, next).await, a_hello_events());
    let seen = fake.seen();
    assert_eq!(
        seen[1].body["messages"][1],
        json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Let me think.", "signature": "EqQBCgIYAh=="},
            {"type": "text", "text": "Answer."},
        ]})
    );
}

/// The arguments `{"path": "café/日本.txt", "note": "say \"hi\" \ud83d\ude00 \u00e9"}`, in
/// fragments split mid-string, right after a backslash, between the halves of a surrogate pair
/// and inside a `\u` escape.
const SPLIT_ARGUMENTS: [&str; 7] = [
    r#"{"pa"#,
    r#"th": "caf"#,
    r#"é/日本.txt", "note": "say \"#,
    r#""hi\"#,
    r#"" \ud83d"#,
    r#"\ude00 \u00"#,
    r#"e9"}"#,
];

fn split_arguments_input() -> Value {
    json!({"path": "café/日本.txt", "note": "say \"hi\" 😀 é"})
}

/// Writes `event` as two HTTP chunks, split inside the UTF-8 encoding of `日`.
fn split_inside_char(event: String) -> Vec<Part> {
    let bytes = event.into_bytes();
    let cut = bytes
        .windows(3)
        .position(|w| w == "日".as_bytes())
        .expect("the event holds 日")
        + 1;
    vec![
        Part::Bytes(bytes[..cut].to_vec()),
        Part::Pause(Duration::from_millis(30)),
        Part::Bytes(bytes[cut..].to_vec()),
    ]
}

#[tokio::test]
async fn anthropic_tool_call_with_awkwardly_split_arguments() {
    let mut parts: Vec<Part> = Vec::new();
    let mut push = |event: String| parts.push(Part::Bytes(event.into_bytes()));
    push(a_start());
    push(a_block(0, json!({"type": "text", "text": ""})));
    push(a_text(0, "Let me look."));
    push(a_stop_block(0));
    push(a_tool(1, "toolu_01", "read_file"));
    push(a_json(1, ""));
    for fragment in &SPLIT_ARGUMENTS[..2] {
        push(a_json(1, fragment));
    }
    parts.extend(split_inside_char(a_json(1, SPLIT_ARGUMENTS[2])));
    for fragment in &SPLIT_ARGUMENTS[3..] {
        parts.push(Part::Bytes(a_json(1, fragment).into_bytes()));
    }
    for event in [a_stop_block(1)].into_iter().chain(a_end("tool_use", 60)) {
        parts.push(Part::Bytes(event.into_bytes()));
    }
    let fake = upstream::start(vec![Reply::parts(parts)]);

    let events = run(&anthropic(&fake), hello_request()).await;
    assert_eq!(
        events,
        vec![
            Ok(ModelEvent::TextDelta("Let me look.".into())),
            Ok(ModelEvent::ToolCall {
                id: "toolu_01".into(),
                name: "read_file".into(),
                input: split_arguments_input(),
            }),
            Ok(a_usage(60)),
            Ok(ModelEvent::Finished(StopReason::ToolUse)),
        ]
    );
}

#[tokio::test]
async fn anthropic_two_tool_calls_and_empty_arguments() {
    let mut events = vec![
        a_start(),
        a_tool(0, "toolu_a", "list_dir"),
        a_stop_block(0),
        a_tool(1, "toolu_b", "read_file"),
        a_json(1, r#"{"path":"#),
        a_json(1, r#" "b.txt"}"#),
        a_stop_block(1),
    ];
    events.extend(a_end("tool_use", 30));
    let fake = upstream::start(vec![stream(events)]);
    assert_eq!(
        run(&anthropic(&fake), hello_request()).await,
        vec![
            Ok(ModelEvent::ToolCall {
                id: "toolu_a".into(),
                name: "list_dir".into(),
                input: json!({}),
            }),
            Ok(ModelEvent::ToolCall {
                id: "toolu_b".into(),
                name: "read_file".into(),
                input: json!({"path": "b.txt"}),
            }),
            Ok(a_usage(30)),
            Ok(ModelEvent::Finished(StopReason::ToolUse)),
        ]
    );
}

#[tokio::test]
async fn anthropic_text_cut_by_max_tokens() {
    let mut events = vec![
        a_start(),
        a_block(0, json!({"type": "text", "text": ""})),
        a_text(0, "Once upon a"),
        a_stop_block(0),
    ];
    events.extend(a_end("max_tokens", 256));
    let fake = upstream::start(vec![stream(events)]);
    assert_eq!(
        run(&anthropic(&fake), hello_request()).await,
        vec![
            Ok(ModelEvent::TextDelta("Once upon a".into())),
            Ok(a_usage(256)),
            Ok(ModelEvent::Finished(StopReason::MaxTokens)),
        ]
    );
}

#[tokio::test]
async fn anthropic_tool_arguments_cut_by_max_tokens() {
    let mut events = vec![
        a_start(),
        a_tool(0, "toolu_cut", "write_file"),
        a_json(0, r#"{"path": "a.txt", "content": "lorem ip"#),
        a_stop_block(0),
    ];
    events.extend(a_end("max_tokens", 256));
    let fake = upstream::start(vec![stream(events)]);
    assert_eq!(
        run(&anthropic(&fake), hello_request()).await,
        vec![
            Ok(ModelEvent::ToolCallCutOff {
                id: "toolu_cut".into(),
                name: "write_file".into(),
            }),
            Ok(a_usage(256)),
            Ok(ModelEvent::Finished(StopReason::MaxTokens)),
        ]
    );
}

#[tokio::test]
async fn anthropic_refusal_and_pause_turn() {
    let mut refusal = vec![a_start()];
    refusal.extend(a_end("refusal", 2));
    let mut pause = vec![a_start()];
    pause.extend(a_end("pause_turn", 2));
    let fake = upstream::start(vec![stream(refusal), stream(pause)]);
    let driver = anthropic(&fake);
    assert_eq!(
        run(&driver, hello_request()).await,
        vec![
            Ok(a_usage(2)),
            Ok(ModelEvent::Finished(StopReason::Refusal))
        ]
    );
    assert_eq!(
        run(&driver, hello_request()).await,
        vec![
            Ok(a_usage(2)),
            Ok(ModelEvent::Finished(StopReason::Other("pause_turn".into())))
        ]
    );
}

fn overloaded() -> Value {
    json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
}

#[tokio::test]
async fn anthropic_overloaded_529_then_success() {
    let fake = upstream::start(vec![error(529, overloaded()), stream(a_hello())]);
    let events = normalized(run(&anthropic(&fake), hello_request()).await);
    let mut expected = vec![notice(
        "Anthropic: retrying in _s (HTTP 529: overloaded), retry 1 of 2",
    )];
    expected.extend(a_hello_events());
    assert_eq!(events, expected);
    assert_eq!(fake.seen().len(), 2);
}

#[tokio::test]
async fn anthropic_gives_up_after_three_500s() {
    let api_error = json!({"type": "error", "error": {"type": "api_error", "message": "Internal server error"}});
    let fake = upstream::start(vec![
        error(500, api_error.clone()),
        error(500, api_error.clone()),
        error(500, api_error),
        stream(a_hello()),
    ]);
    let events = normalized(run(&anthropic(&fake), hello_request()).await);
    assert_eq!(
        events,
        vec![
            notice("Anthropic: retrying in _s (HTTP 500: server error), retry 1 of 2"),
            notice("Anthropic: retrying in _s (HTTP 500: server error), retry 2 of 2"),
            Err(ProviderError::Http {
                status: 500,
                message: "api_error: Internal server error (gave up after 3 attempts)".into(),
            }),
        ]
    );
    assert_eq!(fake.seen().len(), 3);
}

#[tokio::test]
async fn anthropic_client_errors_are_not_retried() {
    let invalid_key = json!({"type": "error",
        "error": {"type": "authentication_error", "message": "invalid x-api-key"}});
    let fake = upstream::start(vec![error(401, invalid_key), stream(a_hello())]);
    assert_eq!(
        run(&anthropic(&fake), hello_request()).await,
        vec![Err(ProviderError::Http {
            status: 401,
            message: "authentication_error: invalid x-api-key".into(),
        })]
    );
    assert_eq!(fake.seen().len(), 1);
}

#[tokio::test]
async fn anthropic_error_event_after_200_and_some_text() {
    let events = vec![
        a_start(),
        a_block(0, json!({"type": "text", "text": ""})),
        a_text(0, "Hel"),
        a(overloaded()),
    ];
    let fake = upstream::start(vec![stream(events), stream(a_hello())]);
    assert_eq!(
        run(&anthropic(&fake), hello_request()).await,
        vec![
            Ok(ModelEvent::TextDelta("Hel".into())),
            Err(ProviderError::Http {
                status: 529,
                message: "overloaded_error: Overloaded".into(),
            }),
        ]
    );
    assert_eq!(fake.seen().len(), 1, "no retry after text was streamed");
}

#[tokio::test]
async fn anthropic_error_event_before_any_output_is_retried() {
    let events = vec![a_start(), a(json!({"type": "ping"})), a(overloaded())];
    let fake = upstream::start(vec![stream(events), stream(a_hello())]);
    let mut expected = vec![notice(
        "Anthropic: retrying in _s (HTTP 529: overloaded), retry 1 of 2",
    )];
    expected.extend(a_hello_events());
    assert_eq!(
        normalized(run(&anthropic(&fake), hello_request()).await),
        expected
    );
    assert_eq!(fake.seen().len(), 2);
}

#[tokio::test]
async fn anthropic_connection_dropped_mid_stream() {
    let mut parts: Vec<Part> = [
        a_start(),
        a_block(0, json!({"type": "text", "text": ""})),
        a_text(0, "Hel"),
        a_text(0, "lo"),
    ]
    .into_iter()
    .map(|e| Part::Bytes(e.into_bytes()))
    .collect();
    parts.push(Part::Pause(Duration::from_millis(50)));
    parts.push(Part::Drop);
    let fake = upstream::start(vec![Reply::parts(parts), stream(a_hello())]);
    assert_eq!(
        normalized(run(&anthropic(&fake), hello_request()).await),
        vec![
            Ok(ModelEvent::TextDelta("Hel".into())),
            Ok(ModelEvent::TextDelta("lo".into())),
            Err(ProviderError::Stream("the connection was lost: …".into())),
        ]
    );
    assert_eq!(fake.seen().len(), 1, "no retry, so no duplicate text");
}

#[tokio::test]
async fn anthropic_request_body() {
    let fake = upstream::start(vec![stream(a_hello())]);
    let events = run(&anthropic(&fake), full_request()).await;
    assert_eq!(events, a_hello_events());
    let ephemeral = json!({"type": "ephemeral"});
    assert_eq!(
        fake.seen()[0].body,
        json!({
            "model": "test-model",
            "max_tokens": 1024,
            "stream": true,
            "system": [{"type": "text", "text": "You are a careful assistant.",
                        "cache_control": ephemeral}],
            "tools": [
                {"name": "read_file", "description": "Read a file in the workspace.",
                 "input_schema": read_file_schema()},
                {"name": "list_dir", "description": "List a directory.",
                 "input_schema": {"type": "object", "properties": {}},
                 "cache_control": ephemeral},
            ],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "What is in a.txt?"}]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Let me look."},
                    {"type": "tool_use", "id": "call_1", "name": "read_file",
                     "input": {"path": "a.txt"}},
                    {"type": "tool_use", "id": "call_2", "name": "list_dir", "input": {}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "call_1", "content": "hello",
                     "is_error": false},
                    {"type": "tool_result", "tool_use_id": "call_2",
                     "content": "permission denied", "is_error": true},
                    {"type": "text", "text": "Thanks, summarise it.", "cache_control": ephemeral},
                ]},
            ],
        })
    );
}

// ---------------------------------------------------------------------------------------------
// OpenAI
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn openai_text_with_empty_choices_in_the_usage_chunk() {
    let fake = upstream::start(vec![stream(o_hello(NoChoices::Empty))]);
    assert_eq!(run(&openai(&fake), hello_request()).await, o_hello_events());
    let seen = fake.seen();
    assert_eq!(seen[0].path, "/v1/chat/completions");
    assert_eq!(
        seen[0].header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(seen[0].header("content-type"), Some("application/json"));
}

#[tokio::test]
async fn openai_usage_chunk_without_or_with_null_choices() {
    let fake = upstream::start(vec![
        stream(o_hello(NoChoices::Missing)),
        stream(o_hello(NoChoices::Null)),
    ]);
    let driver = openai(&fake);
    assert_eq!(run(&driver, hello_request()).await, o_hello_events());
    assert_eq!(run(&driver, hello_request()).await, o_hello_events());
}

#[tokio::test]
async fn openai_without_a_key_sends_no_authorization() {
    let fake = upstream::start(vec![stream(o_hello(NoChoices::Empty))]);
    let driver = OpenAiDriver::new(&format!("{}/v1", fake.url), None, settings())
        .expect("driver")
        .with_compat(true);
    assert_eq!(run(&driver, hello_request()).await, o_hello_events());
    let seen = fake.seen();
    assert_eq!(seen[0].header("authorization"), None);
    assert_eq!(seen[0].body["max_tokens"], json!(256));
    assert_eq!(seen[0].body.get("max_completion_tokens"), None);
}

#[tokio::test]
async fn openai_tool_call_with_awkwardly_split_arguments() {
    let mut parts: Vec<Part> = Vec::new();
    let bytes = |event: String| Part::Bytes(event.into_bytes());
    parts.push(bytes(o(
        json!({"role": "assistant", "content": null}),
        None,
    )));
    parts.push(bytes(o_tool(0, Some("call_x"), Some("read_file"), "")));
    for fragment in &SPLIT_ARGUMENTS[..2] {
        parts.push(bytes(o_tool(0, None, None, fragment)));
    }
    parts.extend(split_inside_char(o_tool(0, None, None, SPLIT_ARGUMENTS[2])));
    for fragment in &SPLIT_ARGUMENTS[3..] {
        parts.push(bytes(o_tool(0, None, None, fragment)));
    }
    parts.push(bytes(o(json!({}), Some("tool_calls"))));
    parts.push(bytes(o_usage(NoChoices::Empty)));
    parts.push(bytes(o_done()));
    let fake = upstream::start(vec![Reply::parts(parts)]);
    assert_eq!(
        run(&openai(&fake), hello_request()).await,
        vec![
            Ok(ModelEvent::ToolCall {
                id: "call_x".into(),
                name: "read_file".into(),
                input: split_arguments_input(),
            }),
            Ok(o_usage_event()),
            Ok(ModelEvent::Finished(StopReason::ToolUse)),
        ]
    );
}

#[tokio::test]
async fn openai_two_parallel_tool_calls_interleaved() {
    let events = vec![
        o(
            json!({"role": "assistant", "content": "Checking both."}),
            None,
        ),
        o_tool(0, Some("call_a"), Some("read_file"), ""),
        o_tool(1, Some("call_b"), Some("list_dir"), ""),
        o_tool(0, None, None, r#"{"path":"#),
        o_tool(1, None, None, r#"{"dir": "#),
        o_tool(0, None, None, r#" "a.txt"}"#),
        o_tool(1, None, None, r#"".", "depth": 2}"#),
        o(json!({}), Some("tool_calls")),
        o_usage(NoChoices::Empty),
        o_done(),
    ];
    let fake = upstream::start(vec![stream(events)]);
    assert_eq!(
        run(&openai(&fake), hello_request()).await,
        vec![
            Ok(ModelEvent::TextDelta("Checking both.".into())),
            Ok(ModelEvent::ToolCall {
                id: "call_a".into(),
                name: "read_file".into(),
                input: json!({"path": "a.txt"}),
            }),
            Ok(ModelEvent::ToolCall {
                id: "call_b".into(),
                name: "list_dir".into(),
                input: json!({"dir": ".", "depth": 2}),
            }),
            Ok(o_usage_event()),
            Ok(ModelEvent::Finished(StopReason::ToolUse)),
        ]
    );
}

#[tokio::test]
async fn openai_text_cut_by_length() {
    let events = vec![
        o(json!({"content": "Once upon a"}), None),
        o(json!({}), Some("length")),
        o_usage(NoChoices::Empty),
        o_done(),
    ];
    let fake = upstream::start(vec![stream(events)]);
    assert_eq!(
        run(&openai(&fake), hello_request()).await,
        vec![
            Ok(ModelEvent::TextDelta("Once upon a".into())),
            Ok(o_usage_event()),
            Ok(ModelEvent::Finished(StopReason::MaxTokens)),
        ]
    );
}

#[tokio::test]
async fn openai_tool_arguments_cut_by_length() {
    let events = vec![
        o_tool(
            0,
            Some("call_cut"),
            Some("write_file"),
            r#"{"path": "a.txt", "#,
        ),
        o_tool(0, None, None, r#""content": "lorem ip"#),
        o(json!({}), Some("length")),
        o_usage(NoChoices::Empty),
        o_done(),
    ];
    let fake = upstream::start(vec![stream(events)]);
    assert_eq!(
        run(&openai(&fake), hello_request()).await,
        vec![
            Ok(ModelEvent::ToolCallCutOff {
                id: "call_cut".into(),
                name: "write_file".into(),
            }),
            Ok(o_usage_event()),
            Ok(ModelEvent::Finished(StopReason::MaxTokens)),
        ]
    );
}

#[tokio::test]
async fn openai_content_filter_is_a_refusal() {
    let events = vec![o(json!({}), Some("content_filter")), o_done()];
    let fake = upstream::start(vec![stream(events)]);
    assert_eq!(
        run(&openai(&fake), hello_request()).await,
        vec![Ok(ModelEvent::Finished(StopReason::Refusal))]
    );
}

#[tokio::test]
async fn openai_429_with_retry_after_then_success() {
    let rate_limited = error(
        429,
        json!({"error": {"message": "Rate limit reached for requests",
                         "type": "requests", "param": null, "code": "rate_limit_exceeded"}}),
    )
    .header("retry-after", "1");
    let fake = upstream::start(vec![rate_limited, stream(o_hello(NoChoices::Empty))]);
    let mut expected = vec![notice(
        "OpenAI: retrying in 1s (HTTP 429: rate limited), retry 1 of 2",
    )];
    expected.extend(o_hello_events());
    assert_eq!(run(&openai(&fake), hello_request()).await, expected);
    assert_eq!(fake.seen().len(), 2);
}

#[tokio::test]
async fn openai_retry_after_beyond_the_limit_fails_at_once() {
    let rate_limited = error(
        429,
        json!({"error": {"message": "Daily quota exceeded", "type": "insufficient_quota"}}),
    )
    .header("retry-after", "3600");
    let fake = upstream::start(vec![rate_limited, stream(o_hello(NoChoices::Empty))]);
    assert_eq!(
        run(&openai(&fake), hello_request()).await,
        vec![Err(ProviderError::Http {
            status: 429,
            message: "insufficient_quota: Daily quota exceeded \
                      (the provider asked to retry in 3600s)"
                .into(),
        })]
    );
    assert_eq!(fake.seen().len(), 1);
}

#[tokio::test]
async fn openai_gives_up_after_three_503s_with_a_plain_body() {
    let unavailable = || Reply::status(503, "upstream connect error");
    let fake = upstream::start(vec![unavailable(), unavailable(), unavailable()]);
    assert_eq!(
        normalized(run(&openai(&fake), hello_request()).await),
        vec![
            notice("OpenAI: retrying in _s (HTTP 503: service unavailable), retry 1 of 2"),
            notice("OpenAI: retrying in _s (HTTP 503: service unavailable), retry 2 of 2"),
            Err(ProviderError::Http {
                status: 503,
                message: "upstream connect error (gave up after 3 attempts)".into(),
            }),
        ]
    );
    assert_eq!(fake.seen().len(), 3);
}

#[tokio::test]
async fn openai_connection_dropped_mid_stream() {
    let parts = vec![
        Part::Bytes(o(json!({"content": "Hel"}), None).into_bytes()),
        Part::Bytes(o(json!({"content": "lo"}), None).into_bytes()),
        Part::Pause(Duration::from_millis(50)),
        Part::Drop,
    ];
    let fake = upstream::start(vec![Reply::parts(parts), stream(o_hello(NoChoices::Empty))]);
    assert_eq!(
        normalized(run(&openai(&fake), hello_request()).await),
        vec![
            Ok(ModelEvent::TextDelta("Hel".into())),
            Ok(ModelEvent::TextDelta("lo".into())),
            Err(ProviderError::Stream("the connection was lost: …".into())),
        ]
    );
    assert_eq!(fake.seen().len(), 1, "no retry, so no duplicate text");
}

#[tokio::test]
async fn openai_stall_timeout() {
    let parts = vec![
        Part::Bytes(o(json!({"content": "Hel"}), None).into_bytes()),
        Part::Hang,
    ];
    let fake = upstream::start(vec![Reply::parts(parts), stream(o_hello(NoChoices::Empty))]);
    let mut quick = settings();
    quick.stall_timeout = Duration::from_secs(1);
    let driver =
        OpenAiDriver::new(&format!("{}/v1", fake.url), Some(KEY.into()), quick).expect("driver");
    assert_eq!(
        run(&driver, hello_request()).await,
        vec![
            Ok(ModelEvent::TextDelta("Hel".into())),
            Err(ProviderError::Stalled(1)),
        ]
    );
    assert_eq!(fake.seen().len(), 1);
}

#[tokio::test]
async fn openai_request_body() {
    let fake = upstream::start(vec![stream(o_hello(NoChoices::Empty))]);
    assert_eq!(run(&openai(&fake), full_request()).await, o_hello_events());
    assert_eq!(
        fake.seen()[0].body,
        json!({
            "model": "test-model",
            "stream": true,
            "stream_options": {"include_usage": true},
            "max_completion_tokens": 1024,
            "tools": [
                {"type": "function", "function": {"name": "read_file",
                 "description": "Read a file in the workspace.",
                 "parameters": read_file_schema()}},
                {"type": "function", "function": {"name": "list_dir",
                 "description": "List a directory.",
                 "parameters": {"type": "object", "properties": {}}}},
            ],
            "messages": [
                {"role": "system", "content": "You are a careful assistant."},
                {"role": "user", "content": "What is in a.txt?"},
                {"role": "assistant", "content": "Let me look.", "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "read_file", "arguments": r#"{"path":"a.txt"}"#}},
                    {"id": "call_2", "type": "function",
                     "function": {"name": "list_dir", "arguments": "{}"}},
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "hello"},
                {"role": "tool", "tool_call_id": "call_2",
                 "content": "Error: permission denied"},
                {"role": "user", "content": "Thanks, summarise it."},
            ],
        })
    );
}

// ---------------------------------------------------------------------------------------------
// Both
// ---------------------------------------------------------------------------------------------

fn read_file_schema() -> Value {
    json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})
}

/// System prompt, a user text, an assistant text with two tool calls (thinking included, which
/// only Anthropic keeps), their results (one failed) and another user text.
fn full_request() -> ModelRequest {
    ModelRequest {
        model: "test-model".into(),
        system: Some("You are a careful assistant.".into()),
        messages: vec![
            user_text("What is in a.txt?"),
            ModelMessage {
                role: ModelRole::Assistant,
                content: vec![
                    ModelContent::Text {
                        text: "Let me look.".into(),
                    },
                    ModelContent::ToolCall {
                        id: "call_1".into(),
                        name: "read_file".into(),
                        input: json!({"path": "a.txt"}),
                    },
                    ModelContent::ToolCall {
                        id: "call_2".into(),
                        name: "list_dir".into(),
                        input: json!({}),
                    },
                ],
            },
            ModelMessage {
                role: ModelRole::User,
                content: vec![
                    ModelContent::ToolResult {
                        call_id: "call_1".into(),
                        output: "hello".into(),
                        is_error: false,
                    },
                    ModelContent::ToolResult {
                        call_id: "call_2".into(),
                        output: "permission denied".into(),
                        is_error: true,
                    },
                    ModelContent::Text {
                        text: "Thanks, summarise it.".into(),
                    },
                ],
            },
        ],
        tools: vec![
            ToolSpec {
                name: "read_file".into(),
                description: "Read a file in the workspace.".into(),
                input_schema: read_file_schema(),
            },
            ToolSpec {
                name: "list_dir".into(),
                description: "List a directory.".into(),
                input_schema: json!({"type": "object", "properties": {}}),
            },
        ],
        max_output_tokens: 1024,
        delegated: false,
        reasoning: None,
    }
}

#[tokio::test]
async fn connection_errors_name_neither_key_nor_query() {
    let port = {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr").port()
    };
    let base = format!("http://127.0.0.1:{port}/v1?api-key=sekrit-query");
    let driver = OpenAiDriver::new(&base, Some(KEY.into()), settings()).expect("driver");
    let events = normalized(run(&driver, hello_request()).await);
    let (notices, last) = events.split_at(2);
    assert_eq!(
        notices,
        [
            notice("OpenAI: retrying in _s (connection failed), retry 1 of 2"),
            notice("OpenAI: retrying in _s (connection failed), retry 2 of 2"),
        ]
    );
    let [Err(ProviderError::Connection(message))] = last else {
        panic!("expected a connection error, got {last:?}");
    };
    assert!(message.ends_with("(gave up after 3 attempts)"), "{message}");
    for secret in [KEY, "sekrit-query", "?"] {
        assert!(!message.contains(secret), "{message}");
    }
    let debug = format!("{driver:?}");
    assert!(
        !debug.contains(KEY) && !debug.contains("sekrit-query"),
        "{debug}"
    );
}

// ---------------------------------------------------------------------------------------------
// The output-limit field on OpenAI-compatible servers
// ---------------------------------------------------------------------------------------------

/// A gateway (any base URL that is not OpenAI's) serving `model`.
fn gateway(fake: &Upstream) -> OpenAiDriver {
    openai(fake).with_compat(true)
}

fn request_for(model: &str) -> ModelRequest {
    ModelRequest {
        model: model.into(),
        ..hello_request()
    }
}

/// Which output-limit fields a request body carried.
fn limit_fields(body: &Value) -> Vec<&'static str> {
    ["max_tokens", "max_completion_tokens"]
        .into_iter()
        .filter(|field| body.get(*field).is_some())
        .collect()
}

/// OpenAI's own answer to `max_tokens` for a reasoning model.
fn max_tokens_refused() -> Reply {
    error(
        400,
        json!({"error": {
            "message": "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
            "type": "invalid_request_error", "param": "max_tokens", "code": "unsupported_parameter"}}),
    )
}

#[tokio::test]
async fn a_gateway_sends_reasoning_models_max_completion_tokens_and_others_max_tokens() {
    let models = ["gpt-5", "openai/o3-mini", "o1", "llama3.1", "gpt-4o"];
    let fake = upstream::start(
        models
            .iter()
            .map(|_| stream(o_hello(NoChoices::Empty)))
            .collect(),
    );
    let driver = gateway(&fake);
    for model in models {
        assert_eq!(run(&driver, request_for(model)).await, o_hello_events());
    }
    let sent: Vec<_> = fake
        .seen()
        .iter()
        .map(|seen| {
            (
                seen.body["model"].as_str().unwrap().to_owned(),
                limit_fields(&seen.body),
            )
        })
        .collect();
    assert_eq!(
        sent,
        [
            ("gpt-5".to_owned(), vec!["max_completion_tokens"]),
            ("openai/o3-mini".to_owned(), vec!["max_completion_tokens"]),
            ("o1".to_owned(), vec!["max_completion_tokens"]),
            ("llama3.1".to_owned(), vec!["max_tokens"]),
            ("gpt-4o".to_owned(), vec!["max_tokens"]),
        ]
    );
}

#[tokio::test]
async fn a_refused_max_tokens_is_sent_again_as_max_completion_tokens_and_remembered() {
    // An Azure deployment named beyond recognition, serving a reasoning model.
    let fake = upstream::start(vec![
        max_tokens_refused(),
        stream(o_hello(NoChoices::Empty)),
        stream(o_hello(NoChoices::Empty)),
        stream(o_hello(NoChoices::Empty)),
    ]);
    let driver = gateway(&fake);
    assert_eq!(
        run(&driver, request_for("prod-reasoner")).await,
        o_hello_events()
    );
    assert_eq!(
        run(&driver, request_for("prod-reasoner")).await,
        o_hello_events()
    );
    // Another model of the same account keeps its own rule.
    assert_eq!(
        run(&driver, request_for("llama3.1")).await,
        o_hello_events()
    );
    let fields: Vec<_> = fake.seen().iter().map(|s| limit_fields(&s.body)).collect();
    assert_eq!(
        fields,
        [
            vec!["max_tokens"],
            vec!["max_completion_tokens"],
            vec!["max_completion_tokens"],
            vec!["max_tokens"],
        ]
    );
    let bodies: Vec<_> = fake
        .seen()
        .into_iter()
        .map(|mut seen| {
            let body = seen.body.as_object_mut().unwrap();
            body.remove("max_tokens");
            body.remove("max_completion_tokens");
            seen.body
        })
        .collect();
    assert_eq!(bodies[0], bodies[1], "only the field changes");
}

#[tokio::test]
async fn a_refused_max_completion_tokens_is_sent_again_as_max_tokens() {
    let refused = error(
        400,
        json!({"error": {"message": "Unrecognized request argument supplied: max_completion_tokens",
                         "type": "invalid_request_error", "param": null, "code": null}}),
    );
    let fake = upstream::start(vec![refused, stream(o_hello(NoChoices::Empty))]);
    // OpenAI's kind of account (not compat), pointed at an older server.
    assert_eq!(
        run(&openai(&fake), request_for("gpt-4o")).await,
        o_hello_events()
    );
    let fields: Vec<_> = fake.seen().iter().map(|s| limit_fields(&s.body)).collect();
    assert_eq!(fields, [vec!["max_completion_tokens"], vec!["max_tokens"]]);
}

#[tokio::test]
async fn the_other_field_is_tried_once_and_other_400s_not_at_all() {
    let too_large = error(
        400,
        json!({"error": {"message": "max_tokens is too large: 100000. This model supports at most 4096 completion tokens.",
                         "type": "invalid_request_error", "param": "max_tokens", "code": null}}),
    );
    let fake = upstream::start(vec![too_large]);
    let events = run(&gateway(&fake), request_for("llama3.1")).await;
    assert_eq!(
        events,
        [Err(ProviderError::Http {
            status: 400,
            message: "invalid_request_error: max_tokens is too large: 100000. This model supports at most 4096 completion tokens.".into(),
        })]
    );
    assert_eq!(fake.seen().len(), 1);

    let both_refused = error(
        400,
        json!({"error": {"message": "Unsupported parameter: 'max_completion_tokens'.",
                         "type": "invalid_request_error"}}),
    );
    let fake = upstream::start(vec![max_tokens_refused(), both_refused]);
    let driver = gateway(&fake);
    let events = run(&driver, request_for("strict-model")).await;
    assert_eq!(
        events,
        [Err(ProviderError::Http {
            status: 400,
            message: "invalid_request_error: Unsupported parameter: 'max_completion_tokens'."
                .into(),
        })]
    );
    assert_eq!(fake.seen().len(), 2);
}
