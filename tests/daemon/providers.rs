//! The real provider drivers inside the daemon, against a fake upstream.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sidechat::protocol::{ChatSend, Event, FinishReason, SessionCreateParams, SessionGet};

use crate::harness::{Daemon, Options, Scratch, json_of, kinds, say, sid};
use crate::upstream::{Part, Reply, openai, start};

fn chunk(delta: Value, finish: Option<&str>) -> Value {
    json!({"id": "c", "object": "chat.completion.chunk", "model": "gpt-test",
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
}

fn openai_env(url: &str) -> Vec<(&'static str, String)> {
    vec![
        ("OPENAI_BASE_URL", format!("{url}/v1")),
        ("OPENAI_API_KEY", "sk-test-secret".into()),
        ("SIDECHAT_OPENAI_MODEL", "gpt-test".into()),
        ("SIDECHAT_RETRY_BASE_MS", "10".into()),
    ]
}

#[tokio::test]
async fn openai_compatible_server_with_a_retry_then_a_streamed_answer() {
    let upstream = start(vec![
        Reply::status(503, r#"{"error":{"message":"overloaded, try later"}}"#),
        Reply::sse(&[
            chunk(json!({"role": "assistant", "content": "Hello"}), None),
            chunk(json!({"content": " from upstream."}), None),
            chunk(json!({}), Some("stop")),
            json!({"id": "c", "choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 4}}),
        ]),
    ]);
    let scratch = Scratch::new();
    let mut daemon =
        Daemon::start(&scratch.db(), Options::with_env(openai_env(&upstream.url))).await;
    let session = daemon
        .create_session(SessionCreateParams {
            system_prompt: Some("Be brief.".into()),
            ..Default::default()
        })
        .await;
    daemon.send(&session, "hi").await;
    let events = daemon.until_finished().await;
    let notices: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::Notice { message, .. } => Some(message.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(notices.len(), 1, "{notices:?}");
    let usage: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::Usage {
                provider,
                model,
                input,
                output,
                ..
            } => Some((provider.clone(), model.clone(), *input, *output)),
            _ => None,
        })
        .collect();
    assert_eq!(
        usage,
        vec![("openai".to_string(), "gpt-test".to_string(), 12, 4)]
    );
    assert!(notices[0].contains("HTTP 503"), "{}", notices[0]);
    assert!(matches!(
        events.last().map(|e| &e.event),
        Some(Event::RunFinished {
            reason: FinishReason::EndTurn,
            ..
        })
    ));
    let transcript = daemon.transcript(&session).await;
    let roles: Vec<_> = transcript["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["role"].clone())
        .collect();
    // The retry notice is kept where it happened.
    assert_eq!(roles, ["user", "notice", "assistant"]);
    assert_eq!(
        transcript["entries"][2]["blocks"],
        json!([{"type": "text", "text": "Hello from upstream."}])
    );
    let requests = upstream.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[1]["model"], "gpt-test");
    assert_eq!(
        requests[1]["messages"],
        json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}])
    );
    daemon.close().await;
}

#[tokio::test]
async fn a_dropped_stream_keeps_the_partial_text_and_is_not_resent() {
    // The connection is lost mid-body, after one chunk.
    let dropped = Reply::parts(vec![
        Part::Bytes(openai::event(&chunk(json!({"content": "Partial answ"}), None)).into_bytes()),
        Part::Drop,
    ]);
    let upstream = start(vec![dropped]);
    let scratch = Scratch::new();
    let mut daemon =
        Daemon::start(&scratch.db(), Options::with_env(openai_env(&upstream.url))).await;
    let session = daemon.create_session(SessionCreateParams::default()).await;
    daemon.send(&session, "hi").await;
    let events = daemon.until_finished().await;
    let Some(Event::RunFinished { reason, error }) = events.last().map(|e| &e.event) else {
        unreachable!()
    };
    assert_eq!(*reason, FinishReason::Error);
    assert!(error.is_some());
    let transcript = daemon.transcript(&session).await;
    let partial = &transcript["entries"][1];
    assert_eq!(
        (partial["status"].clone(), partial["blocks"].clone()),
        (
            json!("failed"),
            json!([{"type": "text", "text": "Partial answ"}])
        )
    );
    assert_eq!(upstream.requests.lock().unwrap().len(), 1);
    assert_eq!(
        kinds(&events).iter().filter(|k| *k == "textDelta").count(),
        1
    );
    daemon.close().await;
}

#[tokio::test]
async fn a_session_bound_to_a_missing_account_is_refused_clearly() {
    let upstream = start(vec![]);
    let scratch = Scratch::new();
    let daemon = Daemon::start(&scratch.db(), Options::with_env(openai_env(&upstream.url))).await;
    let session = daemon
        .create_session(SessionCreateParams {
            account: Some("openai".into()),
            ..Default::default()
        })
        .await;
    daemon.close().await;
    // The next daemon has no OpenAI configuration.
    let daemon = Daemon::start(&scratch.db(), Options::default()).await;
    let refused = daemon
        .try_call::<ChatSend>(say(&session, "hi"))
        .await
        .unwrap_err();
    assert_eq!(refused.code, -32005);
    assert!(
        refused
            .message
            .contains("\"openai\", which is not configured"),
        "{}",
        refused.message
    );
    daemon.call::<SessionGet>(sid(&session)).await;
    daemon.close().await;
}

fn anthropic_env(url: &str) -> Vec<(&'static str, String)> {
    vec![
        ("ANTHROPIC_BASE_URL", url.to_string()),
        ("ANTHROPIC_API_KEY", "x".into()),
        ("SIDECHAT_ANTHROPIC_MODEL", "claude-test".into()),
        ("SIDECHAT_RETRY_BASE_MS", "10".into()),
    ]
}

/// An Anthropic reply: `message_start`, the given content events, then `message_delta` with
/// `stop_reason` and `message_stop`.
fn anthropic_reply(content: &[Value], stop_reason: &str) -> Reply {
    let mut events = vec![json!({"type": "message_start", "message": {
        "id": "msg_up", "type": "message", "role": "assistant", "model": "claude-test",
        "content": [], "stop_reason": null,
        "usage": {"input_tokens": 20, "output_tokens": 1}}})];
    events.extend_from_slice(content);
    events.push(json!({"type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": null},
        "usage": {"output_tokens": 30}}));
    events.push(json!({"type": "message_stop"}));
    Reply::anthropic(&events)
}

/// A whole text block at `index`.
fn text_block(index: usize, text: &str) -> Vec<Value> {
    vec![
        json!({"type": "content_block_start", "index": index,
               "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": index,
               "delta": {"type": "text_delta", "text": text}}),
        json!({"type": "content_block_stop", "index": index}),
    ]
}

fn notices(events: &[sidechat::protocol::SessionEventParams]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            Event::Notice { message, .. } => Some(message.clone()),
            _ => None,
        })
        .collect()
}

fn finish_reason(events: &[sidechat::protocol::SessionEventParams]) -> FinishReason {
    match events.last().map(|e| &e.event) {
        Some(Event::RunFinished { reason, .. }) => *reason,
        other => panic!("the last event is not runFinished: {other:?}"),
    }
}

#[tokio::test]
async fn openai_answer_cut_by_the_length_limit_is_kept_and_reported() {
    let upstream = start(vec![Reply::sse(&[
        chunk(
            json!({"role": "assistant", "content": "The first half"}),
            None,
        ),
        chunk(json!({"content": " of a long ans"}), None),
        chunk(json!({}), Some("length")),
    ])]);
    let scratch = Scratch::new();
    let mut daemon =
        Daemon::start(&scratch.db(), Options::with_env(openai_env(&upstream.url))).await;
    let session = daemon.create_session(SessionCreateParams::default()).await;
    daemon.call::<ChatSend>(say(&session, "write a lot")).await;
    let events = daemon.until_finished().await;
    assert_eq!(finish_reason(&events), FinishReason::CutOff);
    assert_eq!(
        notices(&events),
        vec!["The answer got too long and was cut off.".to_string()]
    );
    let transcript = daemon.transcript(&session).await;
    let entries = transcript["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 3, "{entries:?}");
    assert_eq!(entries[1]["role"], "assistant");
    assert_eq!(
        entries[1]["blocks"],
        json!([{"type": "text", "text": "The first half of a long ans"}])
    );
    // Kept, so a client that reloads can still say why the answer stops short.
    assert_eq!(
        (entries[2]["role"].clone(), entries[2]["blocks"].clone()),
        (
            json!("notice"),
            json!([{"type": "notice", "level": "warning", "text": "The answer got too long and was cut off."}])
        )
    );
    assert_eq!(upstream.requests.lock().unwrap().len(), 1);
    daemon.close().await;
}

#[tokio::test]
async fn anthropic_tool_call_cut_by_max_tokens_is_not_run_and_the_model_is_told() {
    let mut cut = text_block(0, "I will write the file.");
    cut.extend([
        json!({"type": "content_block_start", "index": 1, "content_block":
            {"type": "tool_use", "id": "toolu_cut", "name": "write_file", "input": {}}}),
        json!({"type": "content_block_delta", "index": 1, "delta":
            {"type": "input_json_delta", "partial_json": "{\"path\": \"big.txt\", \"con"}}),
        json!({"type": "content_block_delta", "index": 1, "delta":
            {"type": "input_json_delta", "partial_json": "tent\": \"aaaaaaaa"}}),
        json!({"type": "content_block_stop", "index": 1}),
    ]);
    let upstream = start(vec![
        anthropic_reply(&cut, "max_tokens"),
        anthropic_reply(&text_block(0, "I will write it in parts."), "end_turn"),
    ]);
    let scratch = Scratch::new();
    let mut daemon = Daemon::start(
        &scratch.db(),
        Options::with_env(anthropic_env(&upstream.url)),
    )
    .await;
    let workspace = scratch.workspace();
    let session = daemon
        .create_session(SessionCreateParams {
            system_prompt: Some("Be brief.".into()),
            workspace_root: Some(workspace.display().to_string()),
            ..SessionCreateParams::default()
        })
        .await;
    daemon
        .call::<ChatSend>(say(&session, "write big.txt"))
        .await;
    let events = daemon.until_finished().await;
    assert_eq!(finish_reason(&events), FinishReason::EndTurn);
    let kinds = kinds(&events);
    assert!(
        !kinds.contains(&"approvalRequested".to_string()),
        "{kinds:?}"
    );
    assert!(!workspace.join("big.txt").exists());

    let transcript = daemon.transcript(&session).await;
    let entries = transcript["entries"].as_array().unwrap();
    let roles: Vec<&str> = entries
        .iter()
        .map(|e| e["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool", "assistant"]);
    let result = &entries[2]["blocks"][0];
    assert_eq!(
        (
            &result["type"],
            &result["callId"],
            &result["isError"],
            &result["status"]
        ),
        (
            &json!("toolResult"),
            &json!("toolu_cut"),
            &json!(true),
            &json!("error")
        )
    );

    let requests = upstream.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 2);
    let second = &requests[1];
    assert_eq!(second["model"], "claude-test");
    assert_eq!(second["system"][0]["text"], "Be brief.");
    let messages = second["messages"].as_array().unwrap();
    assert!(
        messages.iter().all(|m| m["role"] != "system"),
        "{messages:?}"
    );
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "user"]);
    assert_eq!(
        messages[1]["content"],
        json!([
            {"type": "text", "text": "I will write the file."},
            {"type": "tool_use", "id": "toolu_cut", "name": "write_file", "input": {}},
        ])
    );
    let tool_result = &messages[2]["content"][0];
    assert_eq!(tool_result["type"], "tool_result");
    assert_eq!(tool_result["tool_use_id"], "toolu_cut");
    assert_eq!(tool_result["is_error"], true);
    let output = tool_result["content"].as_str().unwrap();
    assert!(
        output.contains("Send less at once or split the work"),
        "{output}"
    );
    daemon.close().await;
}

#[tokio::test]
async fn anthropic_thinking_is_sent_back_with_its_signature() {
    let mut first = vec![
        json!({"type": "content_block_start", "index": 0,
               "content_block": {"type": "thinking", "thinking": ""}}),
        json!({"type": "content_block_delta", "index": 0,
               "delta": {"type": "thinking_delta", "thinking": "The user says hi. "}}),
        json!({"type": "content_block_delta", "index": 0,
               "delta": {"type": "thinking_delta", "thinking": "Greet back."}}),
        json!({"type": "content_block_delta", "index": 0,
               "delta": {"type": "signature_delta", "signature": "c2lnbmF0dXJl"}}),
        json!({"type": "content_block_stop", "index": 0}),
    ];
    first.extend(text_block(1, "Hello!"));
    let upstream = start(vec![
        anthropic_reply(&first, "end_turn"),
        anthropic_reply(&text_block(0, "Still here."), "end_turn"),
    ]);
    let scratch = Scratch::new();
    let mut daemon = Daemon::start(
        &scratch.db(),
        Options::with_env(anthropic_env(&upstream.url)),
    )
    .await;
    let session = daemon.create_session(SessionCreateParams::default()).await;
    daemon.send(&session, "hi").await;
    let events = daemon.until_finished().await;
    assert_eq!(finish_reason(&events), FinishReason::EndTurn);
    let thinking: String = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::ThinkingDelta { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(thinking, "The user says hi. Greet back.");

    daemon.call::<ChatSend>(say(&session, "still there?")).await;
    let events = daemon.until_finished().await;
    assert_eq!(finish_reason(&events), FinishReason::EndTurn);

    let requests = upstream.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 2);
    let messages = requests[1]["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3, "{messages:?}");
    assert_eq!(
        messages[1],
        json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": "The user says hi. Greet back.",
             "signature": "c2lnbmF0dXJl"},
            {"type": "text", "text": "Hello!"},
        ]})
    );
    daemon.close().await;
}

/// The run's end, its notice and the entries it left, after one message.
async fn refused_turn(
    daemon: &mut Daemon,
    session: &str,
    text: &str,
) -> (FinishReason, Vec<String>, Vec<Value>) {
    daemon.send(session, text).await;
    let events = daemon.until_finished().await;
    let entries = daemon.transcript(session).await["entries"]
        .as_array()
        .unwrap()
        .clone();
    let last_two = entries[entries.len() - 2..]
        .iter()
        .map(|e| json!([e["role"], e["blocks"]]))
        .collect();
    (finish_reason(&events), notices(&events), last_two)
}

fn declined(answer: &str) -> (FinishReason, Vec<String>, Vec<Value>) {
    (
        FinishReason::Refusal,
        vec!["The model declined to answer.".to_string()],
        vec![
            json!(["assistant", [{"type": "text", "text": answer}]]),
            json!(["notice", [{"type": "notice", "level": "warning", "text": "The model declined to answer."}]]),
        ],
    )
}

#[tokio::test]
async fn openai_refusals_and_content_filters_end_the_run_as_a_refusal() {
    let upstream = start(vec![
        // A refusal streams in its own field, and the choice then says `stop`.
        Reply::sse(&[
            chunk(
                json!({"role": "assistant", "content": null, "refusal": ""}),
                None,
            ),
            chunk(json!({"refusal": "I can't help"}), None),
            chunk(json!({"refusal": " with that."}), None),
            chunk(json!({}), Some("stop")),
        ]),
        Reply::sse(&[
            chunk(
                json!({"role": "assistant", "content": "Here is how to"}),
                None,
            ),
            chunk(json!({}), Some("content_filter")),
        ]),
    ]);
    let scratch = Scratch::new();
    let mut daemon =
        Daemon::start(&scratch.db(), Options::with_env(openai_env(&upstream.url))).await;
    let session = daemon.create_session(SessionCreateParams::default()).await;
    assert_eq!(
        refused_turn(&mut daemon, &session, "something it refuses").await,
        declined("I can't help with that.")
    );
    assert_eq!(
        refused_turn(&mut daemon, &session, "something it filters").await,
        declined("Here is how to")
    );
    // Declined on purpose: nothing is owed an answer.
    let state = json_of(daemon.call::<SessionGet>(sid(&session)).await)["state"].clone();
    assert_eq!(state, "idle");
    daemon.close().await;
}

#[tokio::test]
async fn anthropic_refusal_ends_the_run_as_a_refusal() {
    let upstream = start(vec![anthropic_reply(
        &text_block(0, "I won't do that."),
        "refusal",
    )]);
    let scratch = Scratch::new();
    let mut daemon = Daemon::start(
        &scratch.db(),
        Options::with_env(anthropic_env(&upstream.url)),
    )
    .await;
    let session = daemon.create_session(SessionCreateParams::default()).await;
    assert_eq!(
        refused_turn(&mut daemon, &session, "something it refuses").await,
        declined("I won't do that.")
    );
    daemon.close().await;
}

#[tokio::test]
async fn a_refused_key_names_the_account_where_its_key_comes_from_and_doctor() {
    let upstream = start(vec![Reply::status(
        401,
        r#"{"error":{"message":"Incorrect API key provided"}}"#,
    )]);
    let scratch = Scratch::new();
    let mut daemon =
        Daemon::start(&scratch.db(), Options::with_env(openai_env(&upstream.url))).await;
    let session = daemon.create_session(SessionCreateParams::default()).await;
    daemon.send(&session, "hi").await;
    let events = daemon.until_finished().await;
    let notices: Vec<String> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::Notice { message, .. } => Some(message.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        notices,
        [
            "the provider answered HTTP 401: Incorrect API key provided. The account openai's key \
          was refused: it comes from the variable OPENAI_API_KEY. `sidechat doctor` checks the \
          accounts."
        ],
    );
    daemon.close().await;
}
