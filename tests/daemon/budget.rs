//! Token budgets, usage, prices, spend caps and slash commands, through the real daemon.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sidechat::protocol::{
    ChatSend, Event, FinishReason, SessionBudget, SessionCost, SessionCreateParams,
    SessionEventParams, SessionGet, SessionList, SessionListParams, SessionUpdate,
    SessionUpdateParams,
};

use crate::harness::{Daemon, Options, Scratch, json_of, say, sid};
use crate::upstream::{Reply, start};

fn openai_text(text: &str, prompt: u64, cached: u64, completion: u64) -> Reply {
    Reply::sse(&[
        json!({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        json!({"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
               "prompt_tokens_details": {"cached_tokens": cached}}}),
    ])
}

fn openai_env(url: &str, model: &str) -> Vec<(&'static str, String)> {
    vec![
        ("OPENAI_BASE_URL", format!("{url}/v1")),
        ("OPENAI_API_KEY", "sk-test".into()),
        ("SIDECHAT_OPENAI_MODEL", model.into()),
    ]
}

fn budgets(events: &[SessionEventParams]) -> Vec<Value> {
    events
        .iter()
        .filter(|e| matches!(e.event, Event::Budget { .. }))
        .map(|e| serde_json::to_value(&e.event).unwrap())
        .collect()
}

fn finish(events: &[SessionEventParams]) -> (FinishReason, Option<String>) {
    match events.last().map(|e| &e.event) {
        Some(Event::RunFinished { reason, error }) => (*reason, error.clone()),
        other => panic!("not finished: {other:?}"),
    }
}

/// tiktoken's own count of a one-text user message for an o200k model: 3 tokens of framing,
/// the role, and the text.
fn o200k_user_message(text: &str) -> u64 {
    let bpe = tiktoken_rs::o200k_base().unwrap();
    3 + bpe.encode_with_special_tokens("user").len() as u64
        + bpe.encode_with_special_tokens(text).len() as u64
}

#[tokio::test]
async fn counts_are_tiktokens_and_the_stored_counts_add_up_to_a_recount() {
    let scratch = Scratch::new();
    let script = json!({"turns": [
        {"text": "Listing.", "toolCalls": [{"name": "list_directory", "input": {"path": "."}}]},
        {"text": "There is nothing here yet."}
    ]});
    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(scratch.replay(script))).await;
    let session = daemon
        .create_session(SessionCreateParams {
            model: Some("gpt-4o".into()),
            system_prompt: Some("Be brief.".into()),
            ..scratch.replay_session()
        })
        .await;
    let question = "What files are in this folder, and which one is the largest?";
    daemon.call::<ChatSend>(say(&session, question)).await;
    let events = daemon.until_finished().await;
    let first = &budgets(&events)[0]["snapshot"];
    assert_eq!(
        first["latestUserTokens"],
        json!(o200k_user_message(question))
    );
    // Text is counted exactly; only the tool definitions' framing is an estimate.
    assert_eq!(first["countedByEstimate"], json!(false));

    // The incremental tally equals a recount of every message the model is sent.
    let snapshot = json_of(daemon.call::<SessionBudget>(sid(&session)).await)["snapshot"].clone();
    let transcript = daemon.transcript(&session).await;
    let entries: Vec<sidechat::protocol::TranscriptEntry> =
        serde_json::from_value(transcript["entries"].clone()).unwrap();
    let recount: u64 = entries
        .iter()
        .map(|e| sidechat::runtime::count_blocks("gpt-4o", e.role, &e.blocks).tokens)
        .sum();
    let tallied = snapshot["historyTokens"].as_u64().unwrap()
        + snapshot["latestUserTokens"].as_u64().unwrap();
    assert_eq!(
        (tallied, snapshot["historyMessages"].as_u64().unwrap()),
        (recount, entries.len() as u64)
    );
    assert_eq!(
        snapshot["latestUserTokens"],
        json!(0),
        "the model answered last"
    );
    daemon.close().await;

    // A new daemon rebuilds the same tally from the stored counts.
    let daemon = Daemon::start(
        &scratch.db(),
        Options {
            env: scratch.replay(json!({"turns": []})),
            ..Options::default()
        },
    )
    .await;
    let again = json_of(daemon.call::<SessionBudget>(sid(&session)).await)["snapshot"].clone();
    assert_eq!(again, snapshot);
    daemon.close().await;
}

/// Streamed text is counted while it arrives, in pieces; the stored count must still be the
/// count of the whole answer.
#[tokio::test]
async fn a_long_streamed_answer_counts_as_a_recount_of_it() {
    let paragraph = "Streaming answers arrive in small pieces, and émigré words, numbers like \
                     12345, code such as `let x = 1;` and <|endoftext|> all get counted.\n\
                     Another line follows here with  two spaces and a tab\tinside.\n";
    let text = paragraph.repeat(300);
    let thinking = "Let me think about this step by step.\nFirst, the question.\n".repeat(200);
    let pieces = |text: &str| -> Vec<String> {
        let chars: Vec<char> = text.chars().collect();
        chars.chunks(5).map(|c| c.iter().collect()).collect()
    };
    let mut chunks: Vec<Value> = pieces(&thinking)
        .into_iter()
        .map(|piece| json!({"choices": [{"index": 0, "delta": {"reasoning_content": piece}}]}))
        .collect();
    chunks.extend(
        pieces(&text)
            .into_iter()
            .map(|piece| json!({"choices": [{"index": 0, "delta": {"content": piece}}]})),
    );
    chunks.push(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}));
    let upstream = start(vec![Reply::sse(&chunks)]);
    let scratch = Scratch::new();
    let mut daemon = Daemon::start(
        &scratch.db(),
        Options::with_env(openai_env(&upstream.url, "gpt-4o")),
    )
    .await;
    let session = daemon.create_session(SessionCreateParams::default()).await;
    daemon.call::<ChatSend>(say(&session, "Explain.")).await;
    assert_eq!(
        finish(&daemon.until_finished().await).0,
        FinishReason::EndTurn
    );
    let transcript = daemon.transcript(&session).await;
    let entries: Vec<sidechat::protocol::TranscriptEntry> =
        serde_json::from_value(transcript["entries"].clone()).unwrap();
    assert_eq!(
        entries[1].blocks,
        vec![
            sidechat::protocol::Block::Thinking {
                text: thinking,
                signature: None
            },
            sidechat::protocol::Block::Text { text }
        ]
    );
    let recount: u64 = entries
        .iter()
        .map(|e| sidechat::runtime::count_blocks("gpt-4o", e.role, &e.blocks).tokens)
        .sum();
    let snapshot = json_of(daemon.call::<SessionBudget>(sid(&session)).await)["snapshot"].clone();
    assert_eq!(snapshot["historyTokens"].as_u64().unwrap(), recount);
    daemon.close().await;
}

#[tokio::test]
async fn context_windows_come_from_the_table_unless_the_account_overrides() {
    let scratch = Scratch::new();
    let config = scratch.dir.path().join("config.toml");
    std::fs::write(
        &config,
        "[accounts.local]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\ndefault_model = \"llama3.1:8b\"\ncontext_window = 8000\n",
    )
    .unwrap();
    let env = vec![("SIDECHAT_CONFIG", config.display().to_string())];
    let daemon = Daemon::start(&scratch.db(), Options::with_env(env)).await;
    let window = |session: String| {
        let daemon = &daemon;
        async move {
            json_of(daemon.call::<SessionBudget>(sid(&session)).await)["snapshot"]["contextWindow"]
                .clone()
        }
    };
    let local = daemon
        .create_session(SessionCreateParams {
            account: Some("local".into()),
            ..Default::default()
        })
        .await;
    let claude = daemon
        .create_session(SessionCreateParams {
            account: Some("local".into()),
            model: Some("claude-sonnet-4-5".into()),
            ..Default::default()
        })
        .await;
    let unknown = daemon
        .create_session(SessionCreateParams {
            account: Some("demo".into()),
            model: Some("no-such-model".into()),
            ..Default::default()
        })
        .await;
    // The owner's 8,000 tokens win over the table's figure for llama3.1 and for Claude alike.
    assert_eq!(window(local).await, json!(8000));
    assert_eq!(window(claude).await, json!(8000));
    assert_eq!(window(unknown).await, json!(128000));
    daemon.close().await;
}

#[tokio::test]
async fn pressure_follows_the_configured_thresholds_exactly() {
    let scratch = Scratch::new();
    let daemon = Daemon::start(&scratch.db(), Options::default()).await;
    let session = daemon
        .create_session(SessionCreateParams {
            model: Some("gpt-4o".into()),
            system_prompt: Some("x ".repeat(30000)),
            ..SessionCreateParams::default()
        })
        .await;
    let utilisation =
        json_of(daemon.call::<SessionBudget>(sid(&session)).await)["snapshot"]["utilisation"]
            .as_f64()
            .unwrap();
    daemon.close().await;
    let cases = [
        (utilisation + 0.01, utilisation + 0.02, "normal"),
        (utilisation, utilisation + 0.01, "high"),
        (utilisation - 0.02, utilisation, "critical"),
    ];
    for (high, critical, expected) in cases {
        let env = vec![
            ("SIDECHAT_PRESSURE_HIGH", high.to_string()),
            ("SIDECHAT_PRESSURE_CRITICAL", critical.to_string()),
        ];
        let daemon = Daemon::start(&scratch.db(), Options::with_env(env)).await;
        let snapshot =
            json_of(daemon.call::<SessionBudget>(sid(&session)).await)["snapshot"].clone();
        assert_eq!(
            (
                snapshot["pressure"].clone(),
                snapshot["utilisation"].as_f64()
            ),
            (json!(expected), Some(utilisation)),
            "{snapshot}"
        );
        daemon.close().await;
    }
    // The budget event before a request carries the same pressure: with the critical threshold
    // at the session's current use, a run's first request is critical.
    let env = vec![
        ("SIDECHAT_PRESSURE_HIGH", (utilisation - 0.02).to_string()),
        ("SIDECHAT_PRESSURE_CRITICAL", utilisation.to_string()),
    ];
    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(env)).await;
    daemon.send(&session, "hi").await;
    let events = daemon.until_finished().await;
    assert_eq!(budgets(&events)[0]["snapshot"]["pressure"], "critical");
    daemon.close().await;
}

#[tokio::test]
async fn actual_usage_is_reported_and_priced_when_read() {
    // gpt-4o: $2.50 input, $1.25 cached input, $10 output per million tokens.
    let upstream = start(vec![openai_text("Hello.", 120_000, 20_000, 5_000)]);
    let scratch = Scratch::new();
    let mut daemon = Daemon::start(
        &scratch.db(),
        Options::with_env(openai_env(&upstream.url, "gpt-4o")),
    )
    .await;
    let session = daemon.create_session(SessionCreateParams::default()).await;
    daemon.send(&session, "hi").await;
    let events = daemon.until_finished().await;
    let reported = budgets(&events);
    let estimate = reported[0]["snapshot"]["inputTokens"].as_i64().unwrap();
    let actual = &reported[1]["actual"];
    assert_eq!(actual["actualInputTokens"], json!(120_000));
    assert_eq!(actual["actualOutputTokens"], json!(5_000));
    assert_eq!(actual["difference"], json!(120_000 - estimate));
    assert_eq!(
        (
            actual["learned"].clone(),
            actual["correctionFactor"].clone()
        ),
        (json!(false), json!(1.0))
    );

    let cost = json_of(daemon.call::<SessionCost>(sid(&session)).await)["cost"].clone();
    // 100,000 × 2.50 + 20,000 × 1.25 + 5,000 × 10 = 250,000 + 25,000 + 50,000 µ$ = $0.325
    assert_eq!(
        cost["byKind"],
        json!({"input": 0.25, "cacheRead": 0.025, "cacheWrite": 0.0, "output": 0.05})
    );
    assert_eq!(
        (cost["totalUsd"].clone(), cost["partial"].clone()),
        (json!(0.325), json!(false))
    );
    assert_eq!(cost["unpriced"]["lines"], json!(0));
    let listed = json_of(
        daemon
            .call::<SessionList>(SessionListParams::default())
            .await,
    )["sessions"][0]
        .clone();
    let spend = |v: &Value| {
        (
            v["tokens"].clone(),
            v["costUsd"].clone(),
            v["unpricedRequests"].clone(),
        )
    };
    assert_eq!(spend(&listed), (json!(125_000), json!(0.325), json!(0)));
    let view = json_of(daemon.call::<SessionGet>(sid(&session)).await);
    assert_eq!(spend(&view), spend(&listed));
    daemon.close().await;
}

#[tokio::test]
async fn an_estimated_model_learns_a_correction_from_actuals() {
    let anthropic = |input: u64| {
        let body = [
            json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "content": [], "usage": {"input_tokens": input, "output_tokens": 1}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ok"}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}}),
            json!({"type": "message_stop"}),
        ];
        Reply::anthropic(&body)
    };
    let upstream = start(vec![anthropic(900), anthropic(950)]);
    let scratch = Scratch::new();
    let env = vec![
        ("ANTHROPIC_BASE_URL", upstream.url.clone()),
        ("ANTHROPIC_API_KEY", "k".into()),
        ("SIDECHAT_ANTHROPIC_MODEL", "claude-sonnet-4-5".into()),
    ];
    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(env)).await;
    let session = daemon.create_session(SessionCreateParams::default()).await;
    daemon.send(&session, "one").await;
    let first = budgets(&daemon.until_finished().await);
    let raw = first[0]["snapshot"]["rawInputTokens"].as_f64().unwrap();
    assert_eq!(first[0]["snapshot"]["countedByEstimate"], true);
    let learned = first[1]["actual"]["correctionFactor"].as_f64().unwrap();
    assert_eq!(first[1]["actual"]["learned"], true);
    assert_eq!(learned, (900.0 / raw).clamp(0.25, 4.0));
    daemon.send(&session, "two").await;
    let second = budgets(&daemon.until_finished().await);
    assert_eq!(
        second[0]["snapshot"]["correctionFactor"].as_f64(),
        Some(learned)
    );
    daemon.close().await;
}

#[tokio::test]
async fn configured_prices_beat_the_table_and_unpriced_models_say_so() {
    let upstream = start(vec![
        openai_text("a", 1_000, 0, 500),
        openai_text("b", 1_000, 0, 500),
    ]);
    let scratch = Scratch::new();
    let config = scratch.dir.path().join("config.toml");
    std::fs::write(
        &config,
        "[prices.\"my-local-model\"]\ninput = 1.0\noutput = 2.0\n",
    )
    .unwrap();
    let mut env = openai_env(&upstream.url, "my-local-model");
    env.push(("SIDECHAT_CONFIG", config.display().to_string()));
    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(env)).await;
    let priced = daemon.create_session(SessionCreateParams::default()).await;
    daemon.send(&priced, "hi").await;
    daemon.until_finished().await;
    let cost = json_of(daemon.call::<SessionCost>(sid(&priced)).await)["cost"].clone();
    // 1,000 × $1/M + 500 × $2/M = $0.001 + $0.001
    assert_eq!(
        (
            cost["totalUsd"].clone(),
            cost["byModel"][0]["priceSource"].clone()
        ),
        (json!(0.002), json!("override"))
    );

    let unpriced = daemon
        .create_session(SessionCreateParams {
            model: Some("mystery-model".into()),
            ..Default::default()
        })
        .await;
    daemon.send(&unpriced, "hi").await;
    daemon.until_finished().await;
    let cost = json_of(daemon.call::<SessionCost>(sid(&unpriced)).await)["cost"].clone();
    assert_eq!(
        (
            cost.get("totalUsd").cloned(),
            cost["partial"].clone(),
            cost["unpriced"].clone()
        ),
        (
            None,
            json!(true),
            json!({"lines": 1, "tokens": {"input": 1000, "output": 500, "cacheRead": 0, "cacheWrite": 0, "reasoning": 0}, "models": ["mystery-model"]})
        )
    );
    // Nothing priced: no amount anywhere, not $0.
    assert_eq!(
        (cost.get("byKind").cloned(), cost["byRequest"].clone()),
        (
            None,
            json!([{"kind": "turn", "lines": 1, "tokens": {"input": 1000, "output": 500, "cacheRead": 0, "cacheWrite": 0, "reasoning": 0}, "partial": true}])
        )
    );
    let view = json_of(daemon.call::<SessionGet>(sid(&unpriced)).await);
    assert_eq!(
        (
            view["tokens"].clone(),
            view.get("costUsd"),
            view["unpricedRequests"].clone()
        ),
        (json!(1500), None, json!(1))
    );
    daemon.send(&unpriced, "/cost").await;
    let note = daemon
        .events_until(|e| matches!(e, Event::MessageCompleted { .. }))
        .await;
    let Some(Event::MessageCompleted { entry }) = note.last().map(|e| &e.event) else {
        unreachable!()
    };
    let text = serde_json::to_value(&entry.blocks).unwrap()[0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(text.starts_with("Cost of this session: unpriced"), "{text}");
    assert!(
        text.contains("unpriced: 1 requests of mystery-model (1500 tokens), not included"),
        "{text}"
    );
    assert!(
        !text.contains('$'),
        "no amount for what nothing priced: {text}"
    );
    daemon.close().await;
}

#[tokio::test]
async fn a_price_change_dated_after_a_usage_line_leaves_its_cost_alone() {
    let upstream = start(vec![openai_text("a", 1_000, 0, 500)]);
    let scratch = Scratch::new();
    let config = scratch.dir.path().join("config.toml");
    // $1 / $2 per M from the beginning of time; a change to $10 / $20 from far ahead.
    let prices = "[[prices.\"my-local-model\"]]\ninput = 1.0\noutput = 2.0\n\
                  [[prices.\"my-local-model\"]]\nsince = \"2999-01-01\"\ninput = 10.0\noutput = 20.0\n";
    std::fs::write(&config, prices).unwrap();
    let mut env = openai_env(&upstream.url, "my-local-model");
    env.push(("SIDECHAT_CONFIG", config.display().to_string()));
    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(env)).await;
    let session = daemon.create_session(SessionCreateParams::default()).await;
    daemon.send(&session, "hi").await;
    daemon.until_finished().await;
    let cost = json_of(daemon.call::<SessionCost>(sid(&session)).await)["cost"].clone();
    // 1,000 × $1/M + 500 × $2/M = $0.002, at the price in force when the request was made.
    assert_eq!(
        (
            cost["totalUsd"].clone(),
            cost["byRequest"][0]["totalUsd"].clone()
        ),
        (json!(0.002), json!(0.002))
    );
    daemon.close().await;
}

#[tokio::test]
async fn a_spend_cap_stops_before_the_request_and_refuses_sends_until_raised() {
    let upstream = start(vec![
        openai_text("Hello.", 120_000, 20_000, 5_000),
        openai_text("Again.", 10, 0, 1),
    ]);
    let scratch = Scratch::new();
    let mut daemon = Daemon::start(
        &scratch.db(),
        Options::with_env(openai_env(&upstream.url, "gpt-4o")),
    )
    .await;

    // A cap of nothing on a model without a price: refused, with no amount for what was spent.
    let unpriced = daemon
        .create_session(SessionCreateParams {
            model: Some("mystery-model".into()),
            cap_usd: Some(0.0),
            ..Default::default()
        })
        .await;
    let refused = daemon
        .try_call::<ChatSend>(say(&unpriced, "hi"))
        .await
        .unwrap_err();
    assert_eq!(
        (refused.code, refused.message.as_str()),
        (
            -32006,
            "the session's spend cap of $0.00 is used up (nothing spent yet); raise capUsd with session/update to continue"
        )
    );

    // A cap below one request's input: the run ends before anything is sent.
    let tiny = daemon
        .create_session(SessionCreateParams {
            cap_usd: Some(0.000001),
            ..Default::default()
        })
        .await;
    daemon.send(&tiny, "hi").await;
    let (reason, error) = finish(&daemon.until_finished().await);
    assert_eq!(reason, FinishReason::BudgetSpent);
    assert!(error.unwrap().starts_with("capUsd: the next request"));
    assert_eq!(upstream.requests.lock().unwrap().len(), 0);

    // A cap the first request uses up: the next send is refused until the cap is raised.
    let session = daemon
        .create_session(SessionCreateParams {
            cap_usd: Some(0.30),
            ..Default::default()
        })
        .await;
    daemon.send(&session, "hi").await;
    assert_eq!(
        finish(&daemon.until_finished().await).0,
        FinishReason::EndTurn
    );
    let refused = daemon
        .try_call::<ChatSend>(say(&session, "more"))
        .await
        .unwrap_err();
    assert_eq!(refused.code, -32006);
    assert!(
        refused
            .message
            .contains("spend cap of $0.30 is used up ($0.3250 spent)"),
        "{}",
        refused.message
    );
    daemon
        .call::<SessionUpdate>(SessionUpdateParams {
            session_id: session.clone(),
            cap_usd: Some(Some(1.0)),
            ..SessionUpdateParams::default()
        })
        .await;
    daemon.send(&session, "more").await;
    assert_eq!(
        finish(&daemon.until_finished().await).0,
        FinishReason::EndTurn
    );
    let removed = json_of(
        daemon
            .call::<SessionUpdate>(SessionUpdateParams {
                session_id: session.clone(),
                cap_usd: Some(None),
                ..SessionUpdateParams::default()
            })
            .await,
    );
    assert_eq!(removed.get("capUsd"), None);
    daemon.close().await;
}

#[tokio::test]
async fn a_run_past_its_time_limit_ends_with_budget_spent() {
    let scratch = Scratch::new();
    let slow = json!({"text": "thinking slowly", "delayMs": 600, "toolCalls": [{"name": "list_directory", "input": {}}]});
    let mut daemon = Daemon::start(
        &scratch.db(),
        Options {
            env: scratch.replay(json!({"turns": [slow]})),
            ..Options::default()
        },
    )
    .await;
    let session = daemon
        .create_session(SessionCreateParams {
            max_seconds: Some(1),
            ..scratch.replay_session()
        })
        .await;
    daemon.send(&session, "go").await;
    let (reason, error) = finish(&daemon.until_finished().await);
    assert_eq!(
        (reason, error.as_deref()),
        (
            FinishReason::BudgetSpent,
            Some("maxSeconds: the run reached its time limit of 1 s")
        )
    );
    assert_eq!(scratch.requests().len(), 1);
    daemon.close().await;
}

#[tokio::test]
async fn slash_commands_run_locally_and_notes_never_reach_the_model() {
    let scratch = Scratch::new();
    let script = json!({"turns": [{"text": "first answer"}, {"text": "second answer"}, {"text": "third answer"}]});
    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(scratch.replay(script))).await;
    let session = daemon
        .create_session(SessionCreateParams {
            account: Some("replay".into()),
            ..Default::default()
        })
        .await;
    daemon
        .call::<ChatSend>(say(&session, "remember the word apple"))
        .await;
    daemon.until_finished().await;

    for (command, starts) in [
        ("/help", "Commands:"),
        ("/cost", "Cost of this session:"),
        ("/model --force replay-2", "Model set to replay-2"),
        (
            "/system Answer in French.",
            "System prompt set: Answer in French.",
        ),
    ] {
        let sent = json_of(daemon.call::<ChatSend>(say(&session, command)).await);
        assert_eq!(
            (sent["runId"].clone(), sent["queued"].clone()),
            (Value::Null, json!(false)),
            "{command}"
        );
        let events = daemon
            .events_until(|e| matches!(e, Event::MessageCompleted { .. }))
            .await;
        let Some(Event::MessageCompleted { entry }) = events.last().map(|e| &e.event) else {
            unreachable!()
        };
        assert_eq!(entry.role, sidechat::protocol::Role::Note);
        if command.starts_with("/system") {
            // Other views of the session learn the new prompt from the event.
            let announced = events.iter().find_map(|e| match &e.event {
                Event::SessionUpdated { session, .. } => Some(session.system_prompt.clone()),
                _ => None,
            });
            assert_eq!(announced, Some(Some("Answer in French.".to_string())));
        }
        let text = serde_json::to_value(&entry.blocks).unwrap()[0]["text"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(text.starts_with(starts), "{command}: {text}");
    }
    let view = json_of(daemon.call::<SessionGet>(sid(&session)).await);
    assert_eq!(
        (view["model"].clone(), view["systemPrompt"].clone()),
        (json!("replay-2"), json!("Answer in French."))
    );

    daemon.call::<ChatSend>(say(&session, "/frobnicate")).await;
    let notice = daemon.next_event().await;
    assert!(
        matches!(&notice.event, Event::Notice { message, .. } if message.starts_with("Unknown command /frobnicate"))
    );

    daemon.call::<ChatSend>(say(&session, "what word?")).await;
    daemon.until_finished().await;
    daemon.send(&session, "/clear").await;
    daemon.next_event().await;
    daemon.call::<ChatSend>(say(&session, "//start over")).await;
    daemon.until_finished().await;

    let requests = scratch.requests();
    assert_eq!(requests.len(), 3, "commands start no run");
    let all = serde_json::to_string(&requests).unwrap();
    assert!(
        !all.contains("Cost of this session") && !all.contains("Commands:"),
        "notes are never sent"
    );
    assert_eq!(requests[1]["system"], "Answer in French.");
    assert!(
        serde_json::to_string(&requests[1])
            .unwrap()
            .contains("apple")
    );
    // After /clear the model starts fresh; the slash was escaped.
    assert_eq!(
        requests[2]["messages"],
        json!([{"role": "user", "content": [{"type": "text", "text": "/start over"}]}])
    );
    let transcript = daemon.transcript(&session).await;
    assert!(
        transcript.to_string().contains("apple"),
        "earlier messages stay readable"
    );
    daemon.close().await;
}
