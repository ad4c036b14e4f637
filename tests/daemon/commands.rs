//! Slash commands and session settings: what the composer's commands do and refuse, and what
//! `session/update` changes.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sidechat::protocol::{
    ApprovalDecision, ApprovalRespond, ChatResume, ChatSend, Event, SessionCost,
    SessionCreateParams, SessionGet, SessionUpdate, SessionUpdateParams,
};

use crate::harness::{Daemon, Options, Scratch, answer, json_of, say, sid};

fn write_turn() -> Value {
    json!({"toolCalls": [{"name": "write_file", "input": {"path": "a.txt", "content": "a"}}]})
}

async fn replay(scratch: &Scratch, script: Value) -> (Daemon, String) {
    let daemon = Daemon::start(&scratch.db(), Options::with_env(scratch.replay(script))).await;
    let session = daemon.create_session(scratch.replay_session()).await;
    (daemon, session)
}

async fn session_view(daemon: &Daemon, session: &str) -> Value {
    json_of(daemon.call::<SessionGet>(sid(session)).await)
}

/// The text of the note a command wrote.
async fn note_of(daemon: &mut Daemon, session: &str, command: &str) -> String {
    daemon.call::<ChatSend>(say(session, command)).await;
    let events = daemon
        .events_until(|e| matches!(e, Event::MessageCompleted { .. }))
        .await;
    let Some(Event::MessageCompleted { entry }) = events.last().map(|e| &e.event) else {
        unreachable!()
    };
    serde_json::to_value(&entry.blocks).unwrap()[0]["text"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn commands_match_whatever_the_case_and_an_unknown_one_keeps_what_was_typed() {
    let scratch = Scratch::new();
    let (mut daemon, session) = replay(&scratch, json!({"turns": []})).await;
    let cost = note_of(&mut daemon, &session, "/COST").await;
    assert!(cost.starts_with("Cost of this session"), "{cost}");
    let help = note_of(&mut daemon, &session, "/Help").await;
    assert!(help.starts_with("Commands:"), "{help}");

    let typed = "/frobnicate the widgets, please";
    let sent = json_of(daemon.call::<ChatSend>(say(&session, typed)).await);
    let transcript = daemon.transcript(&session).await;
    let last = transcript["entries"].as_array().unwrap().last().unwrap();
    assert_eq!(
        (last["role"].clone(), last["id"].clone()),
        (json!("notice"), sent["messageId"].clone()),
        "the notice is stored and the reply names it"
    );
    let text = last["blocks"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("Unknown command /frobnicate"), "{text}");
    assert!(text.ends_with(&format!("You typed: {typed}")), "{text}");
    assert!(scratch.requests().is_empty(), "nothing reached a model");
    daemon.close().await;
}

/// The role of the transcript's newest entry and its text.
async fn last_entry(daemon: &Daemon, session: &str) -> (Value, String) {
    let transcript = daemon.transcript(session).await;
    let last = transcript["entries"].as_array().unwrap().last().unwrap();
    let text = last["blocks"][0]["text"].as_str().unwrap_or_default();
    (last["role"].clone(), text.to_string())
}

#[tokio::test]
async fn only_a_first_word_shaped_like_a_command_name_is_a_command() {
    let scratch = Scratch::new();
    let script = json!({"turns": [], "fallback": {"text": "Seen."}});
    let (mut daemon, session) = replay(&scratch, script).await;
    let path = "/usr/bin/python3 crashes when I run it";
    for text in [path, "/a/b"] {
        let sent = json_of(daemon.call::<ChatSend>(say(&session, text)).await);
        assert!(sent["runId"].is_string(), "{text}: {sent}");
        daemon.until_finished().await;
    }
    let said: Vec<Value> = scratch
        .requests()
        .iter()
        .map(|r| r["messages"][0]["content"][0]["text"].clone())
        .collect();
    assert_eq!(said, [json!(path), json!(path)]);
    let last_request = scratch.requests().last().unwrap()["messages"].clone();
    assert_eq!(last_request[2]["content"][0]["text"], json!("/a/b"));

    let cost = note_of(&mut daemon, &session, "/cost").await;
    assert!(cost.starts_with("Cost of this session"), "{cost}");
    daemon.call::<ChatSend>(say(&session, "/nosuch")).await;
    let (role, text) = last_entry(&daemon, &session).await;
    assert_eq!(role, json!("notice"));
    assert!(text.starts_with("Unknown command /nosuch"), "{text}");
    assert_eq!(scratch.requests().len(), 2, "commands reach no model");
    daemon.close().await;
}

#[tokio::test]
async fn clear_is_refused_while_a_run_waits_on_an_approval_after_a_restart() {
    let scratch = Scratch::new();
    let script = json!({"turns": [write_turn(), {"text": "Written."}]});
    let (mut daemon, session) = replay(&scratch, script.clone()).await;
    daemon.send(&session, "write a.txt").await;
    let (_, approval) = daemon.until_approval().await;
    daemon.process().kill().await.unwrap();

    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(scratch.replay(script))).await;
    let refused = daemon
        .try_call::<ChatSend>(say(&session, "/clear"))
        .await
        .unwrap_err();
    assert_eq!(refused.code, -32003, "{}", refused.message);
    daemon
        .call::<ApprovalRespond>(answer(&approval, ApprovalDecision::Allow))
        .await;
    daemon.until_finished().await;
    // The continued run's request still holds the call its result answers.
    let requests = scratch.requests();
    let kinds: Vec<Vec<Value>> = requests[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            m["content"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["type"].clone())
                .collect()
        })
        .collect();
    assert_eq!(
        kinds,
        [
            vec![json!("text")],
            vec![json!("toolCall")],
            vec![json!("toolResult")]
        ]
    );
    daemon.close().await;
}

#[tokio::test]
async fn clear_on_an_unanswered_session_leaves_nothing_to_resume() {
    let scratch = Scratch::new();
    let script = json!({"turns": [{"text": "word ".repeat(50), "delayMs": 50}], "fallback": {"text": "Fresh."}});
    let (mut daemon, session) = replay(&scratch, script.clone()).await;
    daemon.send(&session, "talk").await;
    daemon
        .events_until(|e| matches!(e, Event::TextDelta { .. }))
        .await;
    daemon.process().kill().await.unwrap();

    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(scratch.replay(script))).await;
    assert_eq!(session_view(&daemon, &session).await["state"], "unanswered");
    let cleared = note_of(&mut daemon, &session, "/clear").await;
    assert!(cleared.starts_with("Context cleared"), "{cleared}");
    assert_eq!(session_view(&daemon, &session).await["state"], "idle");
    let nothing = daemon
        .try_call::<ChatResume>(sid(&session))
        .await
        .unwrap_err();
    assert_eq!(nothing.code, -32007);
    daemon.send(&session, "start over").await;
    daemon.until_finished().await;
    let requests = scratch.requests();
    assert_eq!(
        requests.last().unwrap()["messages"],
        json!([{"role": "user", "content": [{"type": "text", "text": "start over"}]}])
    );
    daemon.close().await;
}

#[tokio::test]
async fn unknown_models_need_force_and_the_demo_is_never_priced() {
    let scratch = Scratch::new();
    let mut daemon = Daemon::start(&scratch.db(), Options::default()).await;
    let session = daemon
        .create_session(SessionCreateParams {
            account: Some("demo".into()),
            ..Default::default()
        })
        .await;
    let refused = daemon
        .try_call::<ChatSend>(say(&session, "/model gtp-4o"))
        .await
        .unwrap_err();
    assert_eq!(refused.code, -32602);
    assert!(
        refused.message.contains("/model --force gtp-4o"),
        "{}",
        refused.message
    );
    assert_eq!(session_view(&daemon, &session).await["model"], "demo");

    let forced = note_of(&mut daemon, &session, "/model --force my-local-model").await;
    assert!(
        forced.starts_with("Model set to my-local-model"),
        "{forced}"
    );
    let known = note_of(&mut daemon, &session, "/model gpt-4o").await;
    assert!(known.starts_with("Model set to gpt-4o"), "{known}");
    assert_eq!(session_view(&daemon, &session).await["model"], "gpt-4o");

    // The demo answers whatever the session's model says; its usage is never priced as it.
    daemon.send(&session, "hello").await;
    daemon.until_finished().await;
    let cost = json_of(daemon.call::<SessionCost>(sid(&session)).await)["cost"].clone();
    assert_eq!(
        (
            cost.get("totalUsd").cloned(),
            cost["byModel"].clone(),
            cost["unpriced"]["models"].clone()
        ),
        (None, json!([]), json!(["demo"]))
    );
    let text = note_of(&mut daemon, &session, "/cost").await;
    assert!(text.starts_with("Cost of this session: unpriced"), "{text}");
    daemon.close().await;
}

#[tokio::test]
async fn update_changes_the_account_and_the_workspace_root_or_says_why_not() {
    let scratch = Scratch::new();
    let daemon = Daemon::start(
        &scratch.db(),
        Options::with_env(scratch.replay(json!({"turns": []}))),
    )
    .await;
    let session = daemon
        .create_session(SessionCreateParams {
            account: Some("demo".into()),
            ..Default::default()
        })
        .await;
    let root = scratch.workspace().display().to_string();
    let updated = json_of(
        daemon
            .call::<SessionUpdate>(SessionUpdateParams {
                session_id: session.clone(),
                account: Some("replay".into()),
                workspace_root: Some(root.clone()),
                ..SessionUpdateParams::default()
            })
            .await,
    );
    assert_eq!(
        (
            updated["account"].clone(),
            updated["model"].clone(),
            updated["workspaceRoot"].clone()
        ),
        (json!("replay"), json!("replay"), json!(root))
    );

    let file = scratch.workspace().join("file.txt");
    std::fs::write(&file, "not a folder").unwrap();
    let update = |account: Option<&str>, workspace_root: Option<String>| SessionUpdateParams {
        session_id: session.clone(),
        account: account.map(str::to_string),
        workspace_root,
        ..SessionUpdateParams::default()
    };
    for (params, says) in [
        (
            update(Some("nowhere"), None),
            "no account named \"nowhere\"",
        ),
        (update(None, Some("relative/path".into())), "absolute"),
        (
            update(
                None,
                Some(scratch.dir.path().join("missing").display().to_string()),
            ),
            "not an existing directory",
        ),
        (
            update(None, Some(file.display().to_string())),
            "not an existing directory",
        ),
    ] {
        let refused = daemon
            .try_call::<SessionUpdate>(params.clone())
            .await
            .unwrap_err();
        assert_eq!(refused.code, -32602, "{params:?}");
        assert!(
            refused.message.contains(says),
            "{params:?}: {}",
            refused.message
        );
    }
    // Nothing was lost to the refusals.
    assert_eq!(session_view(&daemon, &session).await, updated);
    daemon.close().await;
}

#[tokio::test]
async fn compact_with_the_demo_model_shrinks_the_history() {
    let scratch = Scratch::new();
    let mut daemon = Daemon::start(&scratch.db(), Options::default()).await;
    let session = daemon
        .create_session(SessionCreateParams {
            workspace_root: Some(scratch.workspace().display().to_string()),
            ..Default::default()
        })
        .await;
    for text in ["hello there", "list files", "hello again"] {
        daemon.send(&session, text).await;
        daemon.until_finished().await;
    }
    daemon.call::<ChatSend>(say(&session, "/compact")).await;
    let events = daemon
        .events_until(|e| {
            matches!(e, Event::MessageCompleted { entry } if entry.role == sidechat::protocol::Role::Note)
        })
        .await;
    let compacted = events
        .iter()
        .find_map(|e| match &e.event {
            Event::Compaction {
                method,
                tokens_before,
                tokens_after,
                ..
            } => Some((*method, *tokens_before, *tokens_after)),
            _ => None,
        })
        .expect("a compaction event");
    assert_eq!(compacted.0, sidechat::protocol::CompactionMethod::Summary);
    assert!(compacted.2 < compacted.1, "{compacted:?}");
    daemon.close().await;
}
