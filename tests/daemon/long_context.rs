//! Long conversations: what the model is sent stays inside its window, by projection and
//! compaction, against a fake OpenAI-compatible upstream over real HTTP.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sidechat::context::TokenCounter;
use sidechat::protocol::{
    ChatSend, Event, FinishReason, Initialize, InitializeParams, Initialized, InitializedParams,
    NoteDelete, NoteDeleteParams, SessionBudget, SessionCost, SessionCreate, SessionCreateParams,
    SessionEventParams, SessionGet, SessionList, SessionListParams, SessionUpdate,
    SessionUpdateParams,
};

use crate::clock::TestClock;
use crate::harness::{Daemon, Options, Scratch, json_of, say, sid};
use crate::upstream::{Part, Reply, openai, start};

/// The window every test here gives its model, and what is left of it for the prompt: the
/// reply reserve is capped at half the window.
pub(crate) const WINDOW: u64 = 6_000;
const USABLE: u64 = WINDOW - WINDOW / 2;

/// The tokens of `web_fetch`'s definition, which came after the turn counts below were
/// measured: the tests whose folding point depends on the tools' size widen the window by
/// twice that (half of so small a window is kept for the reply).
const WEB_FETCH_TOOL: u64 = 69;

pub(crate) fn env(url: &str, window: u64) -> Vec<(&'static str, String)> {
    vec![
        ("OPENAI_BASE_URL", format!("{url}/v1")),
        ("OPENAI_API_KEY", "sk-test".into()),
        ("SIDECHAT_OPENAI_MODEL", "gpt-4o".into()),
        ("SIDECHAT_CONTEXT_WINDOW", window.to_string()),
        ("SIDECHAT_MAX_RETRIES", "0".into()),
    ]
}

pub(crate) fn text_reply(text: &str, prompt: u64, completion: u64) -> Reply {
    Reply::sse(&[
        json!({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        json!({"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion}}),
    ])
}

pub(crate) fn list_reply(id: &str) -> Reply {
    Reply::sse(&[
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": id,
               "type": "function", "function": {"name": "list_directory", "arguments": "{\"path\":\".\"}"}}]},
               "finish_reason": null}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
    ])
}

/// A user turn of about 310 tokens, numbered.
pub(crate) fn turn_text(i: usize) -> String {
    format!("Turn {i}: {}", "lorem ipsum dolor sit amet ".repeat(60))
}

/// The prompt of an OpenAI request as the project counts it: each message's framing, role,
/// text and tool calls, the tool definitions, and the reply priming.
fn prompt_tokens(body: &Value) -> u64 {
    let counter = TokenCounter::for_model("gpt-4o");
    let count = |text: &str| counter.count_text(text).tokens;
    let mut total = 3;
    for message in body["messages"].as_array().unwrap() {
        total += 3 + count(message["role"].as_str().unwrap());
        match &message["content"] {
            Value::String(text) => total += count(text),
            Value::Array(parts) => {
                for part in parts {
                    total += count(part["text"].as_str().unwrap_or_default());
                }
            }
            _ => {}
        }
        for call in message["tool_calls"].as_array().into_iter().flatten() {
            total += 1
                + count(call["function"]["name"].as_str().unwrap())
                + count(call["function"]["arguments"].as_str().unwrap());
        }
    }
    if let Some(tools) = body.get("tools") {
        total += count(&tools.to_string());
    }
    total
}

/// Every request fits by the project's own count (with a small margin for the framing of
/// tool definitions, which is estimated): prompt and the reply it allows within the window,
/// and a turn's prompt (one with tools) within the usable window, the reply reserve left free.
pub(crate) fn assert_within_window(requests: &[Value]) {
    assert_within(requests, WINDOW, USABLE);
}

/// [`assert_within_window`] for a window of `window` tokens, `usable` of them for the prompt.
fn assert_within(requests: &[Value], window: u64, usable: u64) {
    for (i, request) in requests.iter().enumerate() {
        let prompt = prompt_tokens(request);
        let output = request["max_tokens"].as_u64().unwrap();
        let turn = request.get("tools").is_some();
        assert!(
            prompt + output <= window + 50 && (!turn || prompt <= usable + 50),
            "request {i}: {prompt} prompt tokens + {output} output of a {window} window"
        );
    }
}

/// The o200k count of a one-text user message.
fn user_message_tokens(text: &str) -> u64 {
    let bpe = tiktoken_rs::o200k_base().unwrap();
    3 + bpe.encode_with_special_tokens("user").len() as u64
        + bpe.encode_with_special_tokens(text).len() as u64
}

/// Splits a request's user texts into what stands for the folded range and the turns kept
/// verbatim after it (the first of which shares a message with it).
fn after_fold(sent: &[String], marker: &str) -> (String, Vec<String>) {
    let (head, first) = sent[0]
        .split_once("\n\nTurn ")
        .unwrap_or((sent[0].as_str(), ""));
    let mut kept = Vec::new();
    if !first.is_empty() {
        kept.push(format!("Turn {first}"));
    }
    kept.extend(sent[1..].iter().cloned());
    assert!(head.starts_with(marker), "{head}");
    (head.to_string(), kept)
}

/// Every tool result follows the call it answers, and every call has its result.
fn assert_calls_paired(request: &Value) {
    let mut open: Vec<String> = Vec::new();
    for message in request["messages"].as_array().unwrap() {
        for call in message["tool_calls"].as_array().into_iter().flatten() {
            open.push(call["id"].as_str().unwrap().to_string());
        }
        if message["role"] == "tool" {
            let id = message["tool_call_id"].as_str().unwrap();
            assert!(
                open.contains(&id.to_string()),
                "result {id} without its call"
            );
            open.retain(|o| o != id);
        }
    }
    assert!(open.is_empty(), "calls without results: {open:?}");
}

/// The user-role texts of a request, in order.
pub(crate) fn user_texts(request: &Value) -> Vec<String> {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .flat_map(|m| match &m["content"] {
            Value::String(text) => vec![text.clone()],
            Value::Array(parts) => parts
                .iter()
                .filter_map(|p| p["text"].as_str().map(str::to_string))
                .collect(),
            _ => Vec::new(),
        })
        .collect()
}

pub(crate) fn finish(events: &[SessionEventParams]) -> (FinishReason, Option<String>) {
    match events.last().map(|e| &e.event) {
        Some(Event::RunFinished { reason, error }) => (*reason, error.clone()),
        other => panic!("not finished: {other:?}"),
    }
}

fn notices(events: &[SessionEventParams]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            Event::Notice { message, .. } => Some(message.clone()),
            _ => None,
        })
        .collect()
}

pub(crate) fn compactions(events: &[SessionEventParams]) -> Vec<Value> {
    events
        .iter()
        .filter(|e| matches!(e.event, Event::Compaction { .. }))
        .map(|e| serde_json::to_value(&e.event).unwrap())
        .collect()
}

pub(crate) async fn turns(
    daemon: &mut Daemon,
    session: &str,
    range: std::ops::Range<usize>,
) -> Vec<SessionEventParams> {
    let mut all = Vec::new();
    for i in range {
        daemon.send(session, &turn_text(i)).await;
        let events = daemon.until_finished().await;
        assert_eq!(finish(&events), (FinishReason::EndTurn, None), "turn {i}");
        all.extend(events);
    }
    all
}

#[tokio::test]
async fn a_long_session_is_summarised_and_goes_on_from_the_summary_and_the_newest_turns() {
    let mut replies: Vec<Reply> = (1..=5)
        .map(|i| text_reply(&format!("Answer {i}."), 100, 3))
        .collect();
    replies.push(text_reply(
        "SUMMARY: the user sent numbered turns of lorem ipsum.",
        900,
        12,
    ));
    replies.push(text_reply("Answer 6.", 100, 3));
    let upstream = start(replies);
    let scratch = Scratch::new();
    // The turn at which the history passes its share depends on the tool definitions' size:
    // the counts below were measured without `delegate`, `update_plan` (164 tokens) and
    // `web_fetch`, whose definitions the usable window is widened by: the window by twice
    // that, since half of so small a window is kept for the reply.
    let added = 164 + WEB_FETCH_TOOL;
    let mut daemon = Daemon::start(
        &scratch.db(),
        Options::with_env(env(&upstream.url, WINDOW + 2 * added)),
    )
    .await;
    let session = daemon
        .create_session(SessionCreateParams {
            delegation: Some(false),
            ..SessionCreateParams::default()
        })
        .await;
    let quiet = turns(&mut daemon, &session, 1..6).await;
    assert_eq!(compactions(&quiet), Vec::<Value>::new());
    let events = turns(&mut daemon, &session, 6..7).await;

    let requests = upstream.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 7);
    assert_within(&requests, WINDOW + 2 * added, USABLE + added);
    // The summary request: the summariser's instructions and the oldest turns, no tools.
    let summary_request = &requests[5];
    assert_eq!(summary_request.get("tools"), None);
    let asked = user_texts(summary_request).join("\n");
    assert!(asked.contains("quoting the user's own words") && asked.contains("User: Turn 1:"));
    // The next request: the summary first, then the newest turns verbatim, then turn 6.
    let (summary, kept) = after_fold(&user_texts(&requests[6]), "Summary");
    assert_eq!(
        summary,
        format!(
            "Summary of the earlier conversation ({} messages):\nSUMMARY: the user sent numbered turns of lorem ipsum.",
            compactions(&events)[0]["messages"]
        )
    );
    let first_kept = 6 - (kept.len() - 1);
    assert!(first_kept > 1 && first_kept < 6, "kept {kept:?}");
    assert_eq!(
        kept,
        (first_kept..=6).map(turn_text).collect::<Vec<_>>(),
        "the newest turns go verbatim"
    );

    // One compaction event, by summary, because the history passed its share.
    let compaction = &compactions(&events)[0];
    assert_eq!(
        (compaction["method"].clone(), compaction["reason"].clone()),
        (json!("summary"), json!("share"))
    );
    assert!(compaction["tokensAfter"].as_u64() < compaction["tokensBefore"].as_u64());

    // The summary is a transcript entry of its own kind, with the range it folded.
    let transcript = daemon.transcript(&session).await;
    let summary = transcript["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["role"] == "summary")
        .expect("a summary entry");
    assert_eq!(summary["blocks"][0]["fromSeq"], compaction["fromSeq"]);
    assert_eq!(summary["blocks"][0]["toSeq"], compaction["toSeq"]);

    // The summary request is a usage line of kind summary, counted in the session's cost.
    let cost = json_of(daemon.call::<SessionCost>(sid(&session)).await);
    let by_request: Vec<(Value, Value, Value)> = cost["cost"]["byRequest"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            (
                k["kind"].clone(),
                k["lines"].clone(),
                k["tokens"]["input"].clone(),
            )
        })
        .collect();
    assert_eq!(
        by_request,
        vec![
            (json!("turn"), json!(6), json!(600)),
            (json!("summary"), json!(1), json!(900))
        ]
    );
    // The budget describes the projection: part of the history is the summary.
    let snapshot = json_of(daemon.call::<SessionBudget>(sid(&session)).await)["snapshot"].clone();
    assert!(snapshot["summaryTokens"].as_u64().unwrap() > 0);
    assert!(snapshot["historyTokens"].as_u64() <= snapshot["historyLimitTokens"].as_u64());
    daemon.close().await;
}

/// A summary that starts and then never completes: the upstream keeps the connection open
/// until the daemon gives up on it and closes it.
fn stalled_reply() -> Reply {
    Reply::parts(vec![
        Part::Bytes(
            openai::event(&json!({"choices": [{"index": 0,
                "delta": {"content": "SUMMARY: the user"}, "finish_reason": null}]}))
            .into_bytes(),
        ),
        Part::Stall,
    ])
}

#[tokio::test]
async fn a_failing_summariser_falls_back_to_dropping_whole_turns() {
    let oversize = "far too long ".repeat(3_000);
    // The summariser's time limit, shortened from its 20 s default for the stalled case only,
    // so the other cases cannot run into it on a loaded machine.
    let timeout = ("SIDECHAT_SUMMARY_TIMEOUT_MS", "300".to_string());
    for (case, summary_reply, why) in [
        (
            "error",
            Reply::status(500, r#"{"error":{"message":"overloaded"}}"#),
            "overloaded",
        ),
        (
            "oversize",
            text_reply(&oversize, 900, 6_000),
            "the summary is ",
        ),
        ("timeout", stalled_reply(), "(no answer within 0.3 s)"),
    ] {
        // Each turn: a tool call and its result, then the answer.
        let mut replies = Vec::new();
        for i in 1..=5 {
            replies.push(list_reply(&format!("call_{i}")));
            replies.push(text_reply(&format!("Answer {i}."), 100, 3));
        }
        replies.push(summary_reply);
        replies.push(list_reply("call_6"));
        replies.push(text_reply("Answer 6.", 100, 3));
        let upstream = start(replies);
        let scratch = Scratch::new();
        let mut env = env(&upstream.url, WINDOW + 2 * WEB_FETCH_TOOL);
        if case == "timeout" {
            env.push(timeout.clone());
        }
        let mut daemon = Daemon::start(&scratch.db(), Options::with_env(env)).await;
        let session = daemon
            .create_session(SessionCreateParams {
                workspace_root: Some(scratch.workspace().display().to_string()),
                ..SessionCreateParams::default()
            })
            .await;
        turns(&mut daemon, &session, 1..6).await;
        let events = turns(&mut daemon, &session, 6..7).await;
        let requests = upstream.requests.lock().unwrap().clone();
        assert_eq!(requests.len(), 13, "{case}");
        assert_within(
            &requests,
            WINDOW + 2 * WEB_FETCH_TOOL,
            USABLE + WEB_FETCH_TOOL,
        );
        requests.iter().for_each(assert_calls_paired);
        let compaction = &compactions(&events)[0];
        assert_eq!(compaction["method"], json!("drop"), "{case}");
        let notice = notices(&events).join("\n");
        assert!(
            notice.starts_with(&format!(
                "The oldest {} messages were left out of what the model is sent: summarising them failed (",
                compaction["messages"]
            )) && notice.contains(why),
            "{case}: {notice}"
        );
        let (marker, kept) = after_fold(&user_texts(&requests[11]), "[");
        assert_eq!(
            marker,
            format!(
                "[{} earlier messages were left out here to fit the context window.]",
                compaction["messages"]
            ),
            "{case}"
        );
        // Tool results come between the turns' texts: the kept texts are whole turns, in order.
        let first_kept = 6 - (kept.len() - 1);
        assert!(first_kept > 1, "{case}: {kept:?}");
        assert_eq!(
            kept,
            (first_kept..=6).map(turn_text).collect::<Vec<_>>(),
            "{case}"
        );
        daemon.close().await;
    }
}

#[tokio::test]
async fn compact_works_on_a_session_already_over_its_window() {
    let big = |i: usize| format!("Part {i}: {}", "lorem ipsum dolor sit amet ".repeat(500));
    let mut replies: Vec<Reply> = (1..=3)
        .map(|i| text_reply(&format!("Read part {i}."), 100, 3))
        .collect();
    replies.push(text_reply("SUMMARY: three long parts were read.", 900, 9));
    let upstream = start(replies);
    let scratch = Scratch::new();
    let mut daemon = Daemon::start(
        &scratch.db(),
        Options::with_env(env(&upstream.url, 100_000)),
    )
    .await;
    let session = daemon.create_session(SessionCreateParams::default()).await;
    for i in 1..=3 {
        daemon.send(&session, &big(i)).await;
        daemon.until_finished().await;
    }
    daemon.close().await;
    // The same session under a model with a far smaller window: over it before anything.
    let daemon = Daemon::start(&scratch.db(), Options::with_env(env(&upstream.url, WINDOW))).await;
    let before = json_of(daemon.call::<SessionBudget>(sid(&session)).await)["snapshot"].clone();
    assert!(before["utilisation"].as_f64().unwrap() > 2.0, "{before}");
    let answer = json_of(
        daemon
            .call::<ChatSend>(say(&session, "/compact keep the part numbers"))
            .await,
    );
    let requests = upstream.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 4);
    assert_within_window(&requests[3..]);
    assert!(
        user_texts(&requests[3])[0].contains("pay particular attention to: keep the part numbers")
    );
    let transcript = daemon.transcript(&session).await;
    let entries = transcript["entries"].as_array().unwrap();
    let note = entries.last().unwrap();
    assert_eq!(note["id"], answer["messageId"]);
    assert_eq!(note["role"], "note");
    let said = note["blocks"][0]["text"].as_str().unwrap();
    assert!(
        said.starts_with("Compacted 6 messages") && said.contains("summarised"),
        "{said}"
    );
    let after = json_of(daemon.call::<SessionBudget>(sid(&session)).await)["snapshot"].clone();
    assert!(after["utilisation"].as_f64().unwrap() < 1.0, "{after}");
    assert_eq!(after["historyMessages"], json!(1));
    // Nothing is left to fold.
    let again = daemon.try_call::<ChatSend>(say(&session, "/compact")).await;
    assert!(again.is_err(), "{again:?}");
    daemon.close().await;
}

#[tokio::test]
async fn a_message_too_large_for_the_window_is_refused_before_any_request() {
    let upstream = start(Vec::new());
    let scratch = Scratch::new();
    let mut daemon =
        Daemon::start(&scratch.db(), Options::with_env(env(&upstream.url, WINDOW))).await;
    let session = daemon.create_session(SessionCreateParams::default()).await;
    let huge = "word ".repeat(8_000);
    daemon.send(&session, &huge).await;
    let (reason, error) = finish(&daemon.until_finished().await);
    let error = error.unwrap_or_default();
    assert_eq!(reason, FinishReason::Error);
    let expected = format!(
        "The message is {} tokens, more than the ",
        user_message_tokens(&huge)
    );
    assert!(
        error.starts_with(&expected) && error.contains("(6000 window, 3000 kept for the reply"),
        "{error}"
    );
    assert_eq!(upstream.requests.lock().unwrap().len(), 0);
    let transcript = daemon.transcript(&session).await;
    assert_eq!(transcript["entries"][0]["blocks"][0]["text"], json!(huge));
    daemon.close().await;
}

#[tokio::test]
async fn chinese_and_emoji_are_budgeted_in_tokens_not_bytes() {
    let upstream = start(vec![text_reply("好的 👍", 100, 3)]);
    let scratch = Scratch::new();
    let mut daemon =
        Daemon::start(&scratch.db(), Options::with_env(env(&upstream.url, WINDOW))).await;
    let session = daemon.create_session(SessionCreateParams::default()).await;
    let text = "请帮我重构这个函数，让它更容易测试。🙂🚀 ".repeat(60);
    daemon.send(&session, &text).await;
    let events = daemon.until_finished().await;
    assert_eq!(finish(&events).0, FinishReason::EndTurn);
    let budget = events
        .iter()
        .find_map(|e| match &e.event {
            Event::Budget { snapshot, .. } => Some(*snapshot),
            _ => None,
        })
        .unwrap();
    let expected = user_message_tokens(&text);
    assert_eq!(budget.latest_user_tokens, expected);
    // In bytes it would not fit; in tokens it does, and it was sent whole.
    assert!(text.len() as u64 > USABLE && expected < USABLE / 2);
    let requests = upstream.requests.lock().unwrap().clone();
    assert_within_window(&requests);
    assert_eq!(user_texts(&requests[0]), vec![text]);
    daemon.close().await;
}

#[tokio::test]
async fn an_interjection_leased_into_a_request_is_in_its_budget() {
    let scratch = Scratch::new();
    let script = json!({"turns": [
        {"text": "Looking around the workspace now, one file at a time.", "delayMs": 150,
         "toolCalls": [{"name": "list_directory", "input": {"path": "."}}]},
        {"text": "Noted."}
    ]});
    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(scratch.replay(script))).await;
    let session = daemon
        .create_session(SessionCreateParams {
            model: Some("gpt-4o".into()),
            ..scratch.replay_session()
        })
        .await;
    daemon.send(&session, "look around").await;
    daemon
        .events_until(|e| matches!(e, Event::TextDelta { .. }))
        .await;
    let long = "word ".repeat(20_000);
    assert!(daemon.send(&session, &long).await.queued);
    let events = daemon.until_finished().await;
    let budgets: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::Budget {
                snapshot,
                actual: None,
            } => Some(*snapshot),
            _ => None,
        })
        .collect();
    let counter = TokenCounter::for_model("gpt-4o");
    let interjection = counter
        .count_message(
            "user",
            &[sidechat::context::Part::Text(&format!(
                "The user adds: {long}"
            ))],
        )
        .tokens;
    let second = budgets.last().unwrap();
    assert!(interjection > 20_000);
    assert!(
        second.latest_user_tokens > interjection,
        "{} of which {interjection} leased",
        second.latest_user_tokens
    );
    // The request that carried it, as the model received it.
    let requests = scratch.requests();
    let sent = requests[1].to_string();
    assert!(sent.contains("The user adds: word word"));
    daemon.close().await;
}

#[tokio::test]
async fn a_history_share_outside_zero_to_one_is_a_clear_error() {
    let scratch = Scratch::new();
    for (share, line) in [
        ("1.5", "[defaults]"),
        (
            "0",
            "[accounts.local]\nkind = \"openai\"\ndefault_model = \"m\"",
        ),
    ] {
        let config = scratch.dir.path().join("config.toml");
        std::fs::write(&config, format!("{line}\nhistory_share = {share}\n")).unwrap();
        let env = vec![("SIDECHAT_CONFIG", config.display().to_string())];
        let output = crate::harness::command(&scratch.db(), &env)
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{share}");
        assert!(
            stderr.contains(&format!(
                "history_share must be a fraction in (0, 1], e.g. 0.5; got {share}"
            )),
            "{stderr}"
        );
        assert!(!scratch.db().exists(), "nothing was created");
    }
}

#[tokio::test]
async fn compact_on_an_empty_session_is_refused_and_changes_nothing() {
    let scratch = Scratch::new();
    let daemon = Daemon::start(&scratch.db(), Options::default()).await;
    let session = daemon.create_session(SessionCreateParams::default()).await;
    let error = daemon
        .try_call::<ChatSend>(say(&session, "/compact"))
        .await
        .unwrap_err();
    assert_eq!(
        (error.code, error.message.as_str()),
        (
            -32007,
            "nothing to compact: the model is sent no earlier turns to fold"
        )
    );
    assert_eq!(daemon.transcript(&session).await["entries"], json!([]));
    daemon.close().await;
}

#[tokio::test]
async fn a_turn_whose_tool_result_alone_passes_the_window_is_not_sent() {
    let scratch = Scratch::new();
    let big = "lorem ipsum dolor sit amet ".repeat(800);
    std::fs::write(scratch.workspace().join("big.txt"), &big).unwrap();
    let read = Reply::sse(&[
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1",
               "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"big.txt\"}"}}]},
               "finish_reason": null}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
    ]);
    let upstream = start(vec![read]);
    let mut daemon =
        Daemon::start(&scratch.db(), Options::with_env(env(&upstream.url, WINDOW))).await;
    let session = daemon
        .create_session(SessionCreateParams {
            workspace_root: Some(scratch.workspace().display().to_string()),
            ..SessionCreateParams::default()
        })
        .await;
    daemon.send(&session, "read big.txt").await;
    let events = daemon.until_finished().await;
    let (reason, error) = finish(&events);
    let error = error.unwrap_or_default();
    assert_eq!(reason, FinishReason::Error);
    assert!(
        error.starts_with("This turn is ")
            && error.contains("(6000 window, 3000 kept for the reply")
            && error.contains("It was not sent; everything stays in the transcript."),
        "{error}"
    );
    // The turn is over the window by the project's own count, and it said so.
    let budget = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::Budget { snapshot, .. } => Some(*snapshot),
            _ => None,
        })
        .next()
        .unwrap();
    let latest: u64 = error["This turn is ".len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(latest > USABLE && budget.latest_user_tokens < latest);
    // Only the first request went out; the second, carrying the result, was never made.
    let requests = upstream.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 1);
    assert_within_window(&requests);
    // Nothing is lost: the result is in the transcript whole, and the refusal as a notice.
    let transcript = daemon.transcript(&session).await;
    let entries = transcript["entries"].as_array().unwrap();
    let result = entries.iter().find(|e| e["role"] == "tool").unwrap();
    assert!(
        result["blocks"][0]["output"]
            .as_str()
            .unwrap()
            .contains(&big)
    );
    let notice = entries.last().unwrap();
    assert_eq!(
        (notice["role"].clone(), notice["blocks"][0]["text"].clone()),
        (json!("notice"), json!(error))
    );
    daemon.close().await;
}

/// A key as a user might paste it, and what a stored note has in its place.
const PASTED_KEY: &str = "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb7cDe0f";

/// The texts of the `summary` entries of role carry-over in a transcript, with their ids.
pub(crate) fn carry_over_notes(transcript: &Value) -> Vec<(String, String)> {
    transcript["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["role"] == "summary" && e["blocks"][0]["method"] == "carryOver")
        .map(|e| {
            (
                e["id"].as_str().unwrap().to_string(),
                e["blocks"][0]["text"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// A daemon that also logs at info level to `log`.
async fn daemon_logging_to(
    db: &std::path::Path,
    env: &[(&str, String)],
    log: &std::path::Path,
) -> Daemon {
    let mut command = crate::harness::command(db, env);
    command
        .arg("--log-file")
        .arg(log)
        .env("SIDECHAT_LOG", "info");
    let (conn, notes) =
        sidechat::client::Connection::spawn(command, sidechat::rpc::framing::Framing::Line)
            .expect("spawn sidechat");
    let daemon = Daemon { conn, notes };
    daemon
        .call::<Initialize>(InitializeParams {
            protocol_version: Some(1),
            ..InitializeParams::default()
        })
        .await;
    daemon.notify::<Initialized>(InitializedParams {}).await;
    daemon
}

#[tokio::test]
async fn an_idle_session_rolls_over_into_a_new_context_that_opens_with_a_redacted_note() {
    let note = format!(
        "NOTE: the user deploys with the key {PASTED_KEY}; the workspace was listed. Next: deploy."
    );
    let upstream = start(vec![
        list_reply("call_1"),
        text_reply("Listed it.", 100, 3),
        text_reply(&note, 300, 30),
        text_reply("Deploying.", 100, 3),
    ]);
    let scratch = Scratch::new();
    std::fs::write(scratch.workspace().join("secret-plan.txt"), "x").unwrap();
    let log = scratch.dir.path().join("sidechat.log");
    let clock = TestClock::beside(&scratch.db());
    let mut settings = env(&upstream.url, WINDOW);
    settings.push(clock.env());
    let mut daemon = daemon_logging_to(&scratch.db(), &settings, &log).await;
    let session = daemon
        .call::<SessionCreate>(SessionCreateParams {
            workspace_root: Some(scratch.workspace().display().to_string()),
            rollover: Some("1s".into()),
            ..SessionCreateParams::default()
        })
        .await;
    assert_eq!(session.rollover.as_deref(), Some("1s"));
    let session = session.id;
    let first = format!("Deploy it, the key is {PASTED_KEY}. List the workspace first.");
    daemon.send(&session, &first).await;
    assert_eq!(
        finish(&daemon.until_finished().await).0,
        FinishReason::EndTurn
    );
    // Idle past the session's rollover time (1 s) before the next turn.
    clock.advance(2);
    daemon.send(&session, "Go on.").await;
    let events = daemon.until_finished().await;
    assert_eq!(finish(&events).0, FinishReason::EndTurn);

    let requests = upstream.bodies();
    assert_eq!(requests.len(), 4);
    assert_within_window(&requests);
    // The note's request: user and assistant text and the tools' names, never their results.
    let asked = &requests[2];
    assert_eq!(
        (asked.get("tools"), asked["max_tokens"].clone()),
        (None, json!(500))
    );
    let source = user_texts(asked).join("\n");
    // Redacted before it is cut to its newest characters: the writer never sees the key.
    let redacted_first = first.replace(PASTED_KEY, "[redacted]");
    assert!(
        source.contains(&format!("User: {redacted_first}")) && !source.contains(PASTED_KEY),
        "{source}"
    );
    assert!(
        source.contains("Assistant: Listed it.") && source.contains("Tools called: list_directory")
    );
    assert!(!source.contains("secret-plan.txt"), "{source}");
    // The new context: the note, redacted, then the new turn; nothing of the old context.
    let stored = note.replace(PASTED_KEY, "[redacted]");
    assert_eq!(
        user_texts(&requests[3]),
        vec![format!(
            "Notes carried over from an earlier conversation:\n{stored}\n\nGo on."
        )]
    );
    assert_eq!(requests[3]["messages"].as_array().unwrap().len(), 1);
    let compaction = &compactions(&events)[0];
    assert_eq!(
        [
            &compaction["method"],
            &compaction["reason"],
            &compaction["messages"]
        ],
        [&json!("carryOver"), &json!("idle"), &json!(4)]
    );
    // The old context stays readable; the note is an entry of its own.
    let transcript = daemon.transcript(&session).await;
    let notes = carry_over_notes(&transcript);
    assert_eq!(
        notes.iter().map(|n| n.1.clone()).collect::<Vec<_>>(),
        vec![stored]
    );
    assert_eq!(transcript["entries"][0]["blocks"][0]["text"], json!(first));
    // The note's request is a summary usage line (the tool call's reply reported no usage).
    let cost = json_of(daemon.call::<SessionCost>(sid(&session)).await);
    let kinds: Vec<(Value, Value)> = cost["cost"]["byRequest"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| (k["kind"].clone(), k["lines"].clone()))
        .collect();
    assert_eq!(
        kinds,
        vec![(json!("turn"), json!(2)), (json!("summary"), json!(1))]
    );
    daemon.close().await;
    // One info line says why, how large, and the limits.
    let logged = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = logged
        .lines()
        .filter(|l| l.contains("started a new context with a carry-over note"))
        .collect();
    assert_eq!(lines.len(), 1, "{logged}");
    for field in [
        " INFO ",
        "reason=\"idle\"",
        "rollover_secs=1 ",
        "messages=4 ",
        &format!("note_chars={} ", stored_len(&note)),
        "note_limit_chars=1500 ",
        "note=\"model\"",
    ] {
        assert!(lines[0].contains(field), "{field} in {}", lines[0]);
    }
    assert!(!logged.contains(PASTED_KEY));
}

fn stored_len(note: &str) -> usize {
    note.replace(PASTED_KEY, "[redacted]").chars().count()
}

#[tokio::test]
async fn new_context_copies_a_note_when_the_model_fails_and_a_deleted_note_is_not_sent_again() {
    let upstream = start(vec![
        text_reply(
            "Sure: the guide at https://example.com/guide says to reset the token.",
            100,
            9,
        ),
        Reply::status(500, r#"{"error":{"message":"overloaded"}}"#),
        text_reply("Answer 2.", 100, 3),
        text_reply("Answer 3.", 100, 3),
    ]);
    let scratch = Scratch::new();
    let mut daemon =
        Daemon::start(&scratch.db(), Options::with_env(env(&upstream.url, WINDOW))).await;
    let session = daemon.create_session(SessionCreateParams::default()).await;
    daemon
        .send(
            &session,
            "Fix the login bug (https://example.com/issues/7); the test user has password=hunter2hunter2",
        )
        .await;
    daemon.until_finished().await;
    let answer = json_of(daemon.call::<ChatSend>(say(&session, "/new-context")).await);
    // The copied note: the task and the last answer, without URLs, redacted.
    let copied = "Task: Fix the login bug (); the test user has password=[redacted]\n\
                  Last answer: Sure: the guide at says to reset the token.";
    let transcript = daemon.transcript(&session).await;
    let notes = carry_over_notes(&transcript);
    assert_eq!(
        notes.iter().map(|n| n.1.as_str()).collect::<Vec<_>>(),
        vec![copied]
    );
    let note_id = notes[0].0.clone();
    let entries = transcript["entries"].as_array().unwrap();
    let said = entries.last().unwrap();
    assert_eq!(
        (said["id"].clone(), said["role"].clone()),
        (answer["messageId"].clone(), json!("note"))
    );
    let said = said["blocks"][0]["text"].as_str().unwrap();
    assert!(
        said.starts_with("New context: the model starts afresh") && said.contains("copied"),
        "{said}"
    );
    assert!(entries.iter().any(|e| {
        e["role"] == "notice"
            && e["blocks"][0]["text"]
                .as_str()
                .unwrap()
                .starts_with("The model could not write the carry-over note (")
    }));

    daemon.send(&session, "Second question").await;
    daemon.until_finished().await;
    let requests = upstream.bodies();
    assert_eq!(
        user_texts(&requests[2]),
        vec![format!(
            "Notes carried over from an earlier conversation:\n{copied}\n\nSecond question"
        )]
    );

    // Deleted: gone from the next request, its entry kept with no text.
    let deleted = daemon
        .call::<NoteDelete>(NoteDeleteParams {
            message_id: note_id.clone(),
        })
        .await;
    assert_eq!(json_of(deleted), json!({"deleted": true}));
    let event = daemon
        .events_until(|e| matches!(e, Event::NoteDeleted { .. }))
        .await;
    assert_eq!(
        event.last().map(|e| e.event.clone()),
        Some(Event::NoteDeleted {
            message_id: note_id.clone()
        })
    );
    daemon.send(&session, "Third question").await;
    daemon.until_finished().await;
    let requests = upstream.bodies();
    assert_eq!(requests.len(), 4);
    assert_within_window(&requests);
    assert_eq!(
        user_texts(&requests[3]),
        vec!["Second question".to_string(), "Third question".to_string()]
    );
    assert!(!requests[3].to_string().contains("carried over"));
    let notes = carry_over_notes(&daemon.transcript(&session).await);
    assert_eq!(notes, vec![(note_id.clone(), String::new())]);

    // Deleting again changes nothing; an unknown id or a message that is not a note is refused.
    let again = daemon
        .call::<NoteDelete>(NoteDeleteParams {
            message_id: note_id.clone(),
        })
        .await;
    assert_eq!(json_of(again), json!({"deleted": false}));
    let unknown = daemon
        .try_call::<NoteDelete>(NoteDeleteParams {
            message_id: "msg_nope".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(
        (unknown.code, unknown.message.as_str()),
        (-32004, "no note with id \"msg_nope\"")
    );
    let user = &daemon.transcript(&session).await["entries"][0];
    let not_a_note = daemon
        .try_call::<NoteDelete>(NoteDeleteParams {
            message_id: user["id"].as_str().unwrap().into(),
        })
        .await
        .unwrap_err();
    assert_eq!(not_a_note.code, -32602);
    assert!(
        not_a_note.message.contains("not a carry-over note"),
        "{}",
        not_a_note.message
    );
    assert_eq!(daemon.transcript(&session).await["entries"][0], *user);
    daemon.close().await;
}

#[tokio::test]
async fn rollover_values_and_new_context_on_an_empty_session_are_checked() {
    let scratch = Scratch::new();
    let daemon = Daemon::start(&scratch.db(), Options::default()).await;
    let refused = daemon
        .try_call::<SessionCreate>(SessionCreateParams {
            rollover: Some("soon".into()),
            ..SessionCreateParams::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        (refused.code, refused.message.as_str()),
        (
            -32602,
            "invalid params: rollover must be off or a whole number of s, m, h or d (such as 3h, 1d or 7d); got \"soon\""
        )
    );
    let listed = daemon
        .call::<SessionList>(SessionListParams::default())
        .await;
    assert_eq!(listed.sessions, vec![]);
    let session = daemon
        .create_session(SessionCreateParams {
            rollover: Some("7d".into()),
            ..SessionCreateParams::default()
        })
        .await;
    let refused = daemon
        .try_call::<SessionUpdate>(SessionUpdateParams {
            session_id: session.clone(),
            rollover: Some("1w".into()),
            ..SessionUpdateParams::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code, -32602);
    let got = daemon.call::<SessionGet>(sid(&session)).await;
    assert_eq!(got.rollover.as_deref(), Some("7d"));
    let off = daemon
        .call::<SessionUpdate>(SessionUpdateParams {
            session_id: session.clone(),
            rollover: Some("off".into()),
            ..SessionUpdateParams::default()
        })
        .await;
    assert_eq!(off.rollover, None);
    let error = daemon
        .try_call::<ChatSend>(say(&session, "/new-context"))
        .await
        .unwrap_err();
    assert_eq!(
        (error.code, error.message.as_str()),
        (
            -32007,
            "nothing to carry over: the model's context is already empty"
        )
    );
    assert_eq!(daemon.transcript(&session).await["entries"], json!([]));
    daemon.close().await;
}
