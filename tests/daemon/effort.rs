//! Reasoning effort: the session setting, the account default, `/effort`, and each provider's
//! request field against the fake upstream.

use agent_client_protocol_schema::v1::AGENT_METHOD_NAMES;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sidechat::protocol::{
    ChatSend, Effort, Event, Initialize, InitializeParams, SessionCreate, SessionCreateParams,
    SessionGet, SessionUpdate, SessionUpdateParams,
};

use crate::acp_client::Agent;
use crate::harness::{Daemon, Options, Scratch, say, sid};
use crate::upstream::{Reply, Upstream, anthropic, openai, start};

fn anthropic_env(url: &str) -> Vec<(&'static str, String)> {
    vec![
        ("ANTHROPIC_BASE_URL", url.to_string()),
        ("ANTHROPIC_API_KEY", "x".into()),
        ("SIDECHAT_ANTHROPIC_MODEL", "claude-sonnet-4-5".into()),
        ("SIDECHAT_MAX_RETRIES", "0".into()),
    ]
}

fn openai_env(url: &str) -> Vec<(&'static str, String)> {
    vec![
        ("OPENAI_BASE_URL", format!("{url}/v1")),
        ("OPENAI_API_KEY", "sk-test".into()),
        ("SIDECHAT_OPENAI_MODEL", "gpt-5-mini".into()),
        ("SIDECHAT_MAX_RETRIES", "0".into()),
    ]
}

fn anthropic_answers(count: usize) -> Vec<Reply> {
    (0..count)
        .map(|_| Reply::anthropic(&anthropic::text(&["ok"], 10, 2)))
        .collect()
}

fn openai_answers(count: usize) -> Vec<Reply> {
    (0..count)
        .map(|_| Reply::sse(&openai::text(&["ok"], 10, 2)))
        .collect()
}

/// What each request sent about thinking: `thinking`, `max_tokens`.
fn thinking_fields(upstream: &Upstream) -> Vec<(Value, Value)> {
    upstream
        .bodies()
        .iter()
        .map(|b| (b["thinking"].clone(), b["max_tokens"].clone()))
        .collect()
}

async fn turn(daemon: &mut Daemon, session: &str) {
    daemon.send(session, "hi").await;
    daemon.until_finished().await;
}

async fn set_effort(daemon: &Daemon, session: &str, effort: Option<Effort>) -> Option<Effort> {
    daemon
        .call::<SessionUpdate>(SessionUpdateParams {
            session_id: session.into(),
            effort: Some(effort),
            ..Default::default()
        })
        .await
        .effort
}

#[tokio::test]
async fn anthropic_gets_a_thinking_budget_per_level_within_the_reply_limit() {
    let upstream = start(anthropic_answers(3));
    let scratch = Scratch::new();
    let mut daemon = Daemon::start(
        &scratch.db(),
        Options::with_env(anthropic_env(&upstream.url)),
    )
    .await;
    let created = daemon
        .call::<SessionCreate>(SessionCreateParams {
            effort: Some(Effort::High),
            ..Default::default()
        })
        .await;
    assert_eq!(created.effort, Some(Effort::High));
    let session = created.id;
    turn(&mut daemon, &session).await;
    assert_eq!(
        set_effort(&daemon, &session, Some(Effort::Low)).await,
        Some(Effort::Low)
    );
    turn(&mut daemon, &session).await;
    assert_eq!(set_effort(&daemon, &session, None).await, None);
    turn(&mut daemon, &session).await;
    assert_eq!(
        thinking_fields(&upstream),
        vec![
            // claude-sonnet-4-5 replies up to 64,000 tokens: 32,000 of thinking, 8,192 of answer.
            (
                json!({"type": "enabled", "budget_tokens": 32000}),
                json!(40192)
            ),
            (
                json!({"type": "enabled", "budget_tokens": 4096}),
                json!(12288)
            ),
            (Value::Null, json!(8192)),
        ]
    );
    daemon.close().await;
}

#[tokio::test]
async fn openai_reasoning_models_get_reasoning_effort_and_others_a_notice_once() {
    let upstream = start(openai_answers(4));
    let scratch = Scratch::new();
    let mut daemon =
        Daemon::start(&scratch.db(), Options::with_env(openai_env(&upstream.url))).await;
    let session = daemon
        .create_session(SessionCreateParams {
            effort: Some(Effort::Minimal),
            ..Default::default()
        })
        .await;
    turn(&mut daemon, &session).await;
    daemon
        .call::<SessionUpdate>(SessionUpdateParams {
            session_id: session.clone(),
            model: Some("gpt-4o".into()),
            ..Default::default()
        })
        .await;
    let mut notices = Vec::new();
    for _ in 0..2 {
        daemon.send(&session, "hi").await;
        for event in daemon.until_finished().await {
            if let Event::Notice { message, .. } = event.event {
                notices.push(message);
            }
        }
    }
    daemon
        .call::<SessionUpdate>(SessionUpdateParams {
            session_id: session.clone(),
            model: Some("o3".into()),
            ..Default::default()
        })
        .await;
    // A minimal effort set for gpt-5 is sent as low to a model without minimal.
    turn(&mut daemon, &session).await;
    let sent: Vec<Value> = upstream
        .bodies()
        .iter()
        .map(|b| b["reasoning_effort"].clone())
        .collect();
    assert_eq!(
        sent,
        vec![json!("minimal"), Value::Null, Value::Null, json!("low")]
    );
    assert_eq!(
        notices,
        vec![
            "The model gpt-4o takes no reasoning effort here, so the effort minimal is not sent to it."
                .to_string()
        ]
    );
    daemon.close().await;
}

#[tokio::test]
async fn the_account_default_applies_until_the_session_sets_its_own() {
    let upstream = start(anthropic_answers(1));
    let scratch = Scratch::new();
    scratch.write_config(&format!(
        r#"
default_account = "thinker"
[accounts.thinker]
kind = "anthropic"
base_url = "{}"
default_model = "claude-opus-4-1"
effort = "medium"
"#,
        upstream.url
    ));
    let mut daemon = Daemon::start(
        &scratch.db(),
        Options::with_env(vec![("SIDECHAT_MAX_RETRIES", "0".into())]),
    )
    .await;
    let session = daemon.create_session(SessionCreateParams::default()).await;
    let got = daemon.call::<SessionGet>(sid(&session)).await;
    assert_eq!(
        (got.effort, got.effort_inherited, got.effort_levels),
        (Some(Effort::Medium), true, Effort::ALL.to_vec())
    );
    turn(&mut daemon, &session).await;
    assert_eq!(
        thinking_fields(&upstream),
        vec![(
            json!({"type": "enabled", "budget_tokens": 16384}),
            json!(24576)
        )]
    );
    let own = daemon
        .call::<SessionUpdate>(SessionUpdateParams {
            session_id: session.clone(),
            effort: Some(Some(Effort::Medium)),
            ..Default::default()
        })
        .await;
    assert_eq!(
        (own.effort, own.effort_inherited),
        (Some(Effort::Medium), false)
    );
    daemon.close().await;
}

/// `initialize` tells pickers each model's levels and the account's default.
#[tokio::test]
async fn initialize_names_the_levels_each_model_takes_and_the_account_default() {
    let scratch = Scratch::new();
    scratch.write_config(
        r#"
default_account = "thinker"
[accounts.thinker]
kind = "anthropic"
base_url = "http://127.0.0.1:9"
default_model = "claude-opus-4-1"
effort = "high"
[accounts.local]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
default_model = "gpt-5-mini"
[accounts.plain]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
default_model = "gpt-4o"
"#,
    );
    let keys = vec![
        ("ANTHROPIC_API_KEY", "x".to_string()),
        ("OPENAI_API_KEY", "x".to_string()),
    ];
    let daemon = Daemon::spawn(&scratch.db(), Options::with_env(keys));
    let init = daemon
        .call::<Initialize>(InitializeParams {
            client_info: None,
            protocol_version: Some(1),
            capabilities: None,
        })
        .await;
    let of = |name: &str| {
        let account = init
            .accounts
            .iter()
            .find(|a| a.name == name)
            .unwrap_or_else(|| panic!("no account {name}"));
        (
            account.effort,
            account.effort_levels.get(&account.default_model).cloned(),
        )
    };
    assert_eq!(
        [of("thinker"), of("local"), of("plain")],
        [
            (Some(Effort::High), Some(Effort::ALL.to_vec())),
            (None, Some(Effort::ALL.to_vec())),
            (None, None),
        ]
    );
    daemon.close().await;
}

#[tokio::test]
async fn the_effort_command_sets_and_says_the_effort() {
    let scratch = Scratch::new();
    let daemon = Daemon::start(&scratch.db(), Options::default()).await;
    let session = daemon.create_session(SessionCreateParams::default()).await;
    daemon.send(&session, "/effort high").await;
    let got = daemon.call::<SessionGet>(sid(&session)).await;
    assert_eq!(got.effort, Some(Effort::High));
    daemon.send(&session, "/effort").await;
    daemon.send(&session, "/effort default").await;
    let got = daemon.call::<SessionGet>(sid(&session)).await;
    assert_eq!(got.effort, None);
    let transcript = daemon.transcript(&session).await;
    let notes: Vec<String> = transcript["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["role"] == "note")
        .map(|e| {
            e["blocks"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert_eq!(
        notes,
        vec![
            "Reasoning effort set to high; it applies from the next request on. demo takes no reasoning effort; the setting is ignored for it.".to_string(),
            "The reasoning effort is high. demo takes no reasoning effort; the setting is ignored for it. Type /effort minimal|low|medium|high, or /effort default.".to_string(),
            "Effort is back to the account's default; the account has no default: the model decides.".to_string(),
        ]
    );
    daemon.close().await;
}

#[tokio::test]
async fn effort_default_names_the_accounts_default() {
    let scratch = Scratch::new();
    scratch.write_config(
        r#"
default_account = "thinker"
[accounts.thinker]
kind = "anthropic"
base_url = "http://127.0.0.1:9"
default_model = "claude-opus-4-1"
effort = "medium"
"#,
    );
    let daemon = Daemon::start(&scratch.db(), Options::default()).await;
    let session = daemon.create_session(SessionCreateParams::default()).await;
    daemon.send(&session, "/effort high").await;
    daemon.send(&session, "/effort default").await;
    let got = daemon.call::<SessionGet>(sid(&session)).await;
    assert_eq!(got.effort, Some(Effort::Medium));
    let transcript = daemon.transcript(&session).await;
    let last_note = transcript["entries"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|e| e["role"] == "note")
        .map(|e| e["blocks"][0]["text"].clone());
    assert_eq!(
        last_note,
        Some(json!("Effort is back to the account's default, medium."))
    );
    daemon.close().await;
}

#[tokio::test]
async fn bad_efforts_are_refused_naming_the_problem() {
    let scratch = Scratch::new();
    let daemon = Daemon::start(&scratch.db(), Options::default()).await;
    let wrong_level = daemon
        .try_call::<SessionCreate>(SessionCreateParams {
            model: Some("o3".into()),
            effort: Some(Effort::Minimal),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        (wrong_level.code, wrong_level.message),
        (
            -32602,
            "invalid params: effort \"minimal\" is not a level of the model o3; use low, medium or high".into()
        )
    );
    let unknown = daemon
        .try_call_raw("session/create", json!({"effort": "extreme"}))
        .await
        .unwrap_err();
    assert_eq!(unknown.code, -32602);
    assert!(unknown.message.contains("extreme"), "{}", unknown.message);
    let session = daemon.create_session(SessionCreateParams::default()).await;
    let refused = daemon
        .try_call::<ChatSend>(say(&session, "/effort extreme"))
        .await
        .unwrap_err();
    assert_eq!(
        (refused.code, refused.message),
        (
            -32602,
            "invalid params: /effort takes minimal, low, medium, high or default, not \"extreme\""
                .into()
        )
    );
    let got = daemon.call::<SessionGet>(sid(&session)).await;
    assert_eq!(got.effort, None);
    daemon.close().await;
}

/// The effort option of an ACP `configOptions` list: its category, its value and the values
/// it offers.
fn acp_effort_option(options: &Value) -> (Value, Value, Vec<Value>) {
    let option = options
        .as_array()
        .expect("configOptions")
        .iter()
        .find(|o| o["id"] == "effort")
        .unwrap_or_else(|| panic!("no effort option in {options}"));
    let values = option["options"]
        .as_array()
        .expect("the option's values")
        .iter()
        .map(|o| o["value"].clone())
        .collect();
    (
        option["category"].clone(),
        option["currentValue"].clone(),
        values,
    )
}

#[tokio::test]
async fn acp_offers_the_effort_as_a_thought_level_option_and_sends_what_is_chosen() {
    let upstream = start(openai_answers(1));
    let scratch = Scratch::new();
    let mut agent = Agent::spawn(&scratch.db(), &openai_env(&upstream.url));
    agent
        .request(AGENT_METHOD_NAMES.initialize, json!({"protocolVersion": 1}))
        .await;
    let created = agent
        .request(
            AGENT_METHOD_NAMES.session_new,
            json!({"cwd": scratch.workspace(), "mcpServers": []}),
        )
        .await;
    let levels = ["default", "minimal", "low", "medium", "high"].map(|v| json!(v));
    assert_eq!(
        acp_effort_option(&created["configOptions"]),
        (json!("thought_level"), json!("default"), levels.to_vec())
    );
    let session = created["sessionId"].clone();

    let set = |value: &str| json!({"sessionId": session, "configId": "effort", "value": value});
    let chosen = agent
        .request(AGENT_METHOD_NAMES.session_set_config_option, set("high"))
        .await;
    assert_eq!(
        acp_effort_option(&chosen["configOptions"]),
        (json!("thought_level"), json!("high"), levels.to_vec())
    );
    agent
        .request(
            AGENT_METHOD_NAMES.session_prompt,
            json!({"sessionId": session, "prompt": [{"type": "text", "text": "hi"}]}),
        )
        .await;
    let sent: Vec<Value> = upstream
        .bodies()
        .iter()
        .map(|b| b["reasoning_effort"].clone())
        .collect();
    assert_eq!(sent, vec![json!("high")]);

    let reset = agent
        .request(AGENT_METHOD_NAMES.session_set_config_option, set("default"))
        .await;
    assert_eq!(
        acp_effort_option(&reset["configOptions"]).1,
        json!("default")
    );
}
