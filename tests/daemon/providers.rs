//! The real provider drivers inside the daemon, against a fake upstream.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sidechat::protocol::{Event, FinishReason};

use crate::harness::{Daemon, Options, Scratch, kinds};
use crate::upstream::{Reply, start};

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
    let mut daemon = Daemon::start(
        &scratch.db(),
        Options {
            env: openai_env(&upstream.url),
            ..Options::default()
        },
    )
    .await;
    let session = daemon
        .create_session(json!({"systemPrompt": "Be brief."}))
        .await;
    daemon
        .call("chat/send", json!({"sessionId": session, "text": "hi"}))
        .await;
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
    let transcript = daemon
        .call("session/transcript", json!({"sessionId": session}))
        .await;
    assert_eq!(
        transcript["entries"][1]["blocks"],
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
    let mut dropped = Reply::sse(&[chunk(json!({"content": "Partial answ"}), None)]);
    dropped.body = dropped.body.replace("data: [DONE]\n\n", "");
    dropped.drop = true;
    let upstream = start(vec![dropped]);
    let scratch = Scratch::new();
    let mut daemon = Daemon::start(
        &scratch.db(),
        Options {
            env: openai_env(&upstream.url),
            ..Options::default()
        },
    )
    .await;
    let session = daemon.create_session(json!({})).await;
    daemon
        .call("chat/send", json!({"sessionId": session, "text": "hi"}))
        .await;
    let events = daemon.until_finished().await;
    let Some(Event::RunFinished { reason, error }) = events.last().map(|e| &e.event) else {
        unreachable!()
    };
    assert_eq!(*reason, FinishReason::Error);
    assert!(error.is_some());
    let transcript = daemon
        .call("session/transcript", json!({"sessionId": session}))
        .await;
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
    let daemon = Daemon::start(
        &scratch.db(),
        Options {
            env: openai_env(&upstream.url),
            ..Options::default()
        },
    )
    .await;
    let session = daemon.create_session(json!({"account": "openai"})).await;
    daemon.close().await;
    // The next daemon has no OpenAI configuration.
    let daemon = Daemon::start(&scratch.db(), Options::default()).await;
    let refused = daemon
        .try_call("chat/send", json!({"sessionId": session, "text": "hi"}))
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
    let _: Value = daemon
        .call("session/get", json!({"sessionId": session}))
        .await;
    daemon.close().await;
}
