//! Session titles after the first answer, the running token totals of `session/get`,
//! `autoCompact`, and notes that clients wrap.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sidechat::protocol::{
    ChatSend, Event, FinishReason, SessionCost, SessionCreateParams, SessionGet, SessionUpdate,
    SessionUpdateParams,
};

use crate::harness::{Daemon, Options, Scratch, json_of, say, sid};
use crate::long_context::{env as window_env, text_reply};
use crate::upstream::start;

/// The settings of a daemon that titles sessions (the harness turns titles off, so that other
/// tests see only their own requests).
fn titling(mut env: Vec<(&'static str, String)>) -> Vec<(&'static str, String)> {
    env.push(("SIDECHAT_AUTO_TITLE", "on".into()));
    env
}

async fn view(daemon: &Daemon, session: &str) -> Value {
    json_of(daemon.call::<SessionGet>(sid(session)).await)
}

/// The title the next `sessionUpdated` event carries.
async fn next_title(daemon: &mut Daemon, session: &str) -> String {
    let events = daemon
        .events_until(|e| matches!(e, Event::SessionUpdated { .. }))
        .await;
    let last = events.last().unwrap();
    assert_eq!(last.session_id, session);
    let Event::SessionUpdated { title, .. } = &last.event else {
        unreachable!()
    };
    title.clone()
}

fn title_requests(requests: &[Value]) -> Vec<&Value> {
    requests
        .iter()
        .filter(|r| r["system"] == sidechat::context::title::TITLE_SYSTEM)
        .collect()
}

#[tokio::test]
async fn the_model_titles_a_session_after_its_first_answer_once_and_counts_it() {
    let scratch = Scratch::new();
    let usage = |input: u64, output: u64| json!({"input": input, "output": output, "cacheRead": 0, "cacheWrite": 0, "reasoning": 0});
    let script = json!({
        "turns": [
            {"text": "Run cargo check first.", "usage": usage(100, 10)},
            {"text": "Then cargo test.", "usage": usage(150, 5)},
        ],
        "title": {"text": "Title: \"Fixing the build.\"", "usage": usage(40, 4)},
    });
    let mut daemon = Daemon::start(
        &scratch.db(),
        Options::with_env(titling(scratch.replay(script))),
    )
    .await;
    let session = daemon.create_session(scratch.replay_session()).await;
    assert_eq!(view(&daemon, &session).await["title"], "New chat");
    daemon.send(&session, "How do I fix the build?").await;
    assert_eq!(next_title(&mut daemon, &session).await, "Fixing the build");
    let got = view(&daemon, &session).await;
    assert_eq!(got["title"], "Fixing the build");
    assert_eq!(
        got["tokensByKind"],
        json!({"input": 140, "output": 14, "cacheRead": 0, "cacheWrite": 0, "reasoning": 0})
    );
    assert_eq!(got["tokens"], json!(154));

    let requests = scratch.requests();
    let titles = title_requests(&requests);
    assert_eq!(titles.len(), 1);
    let asked = titles[0]["messages"][0]["content"][0]["text"]
        .as_str()
        .unwrap();
    assert_eq!(
        asked,
        "<conversation>\nUser: How do I fix the build?\nAssistant: Run cargo check first.\n</conversation>"
    );
    let cost = json_of(daemon.call::<SessionCost>(sid(&session)).await);
    let kinds: Vec<Value> = cost["cost"]["byRequest"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| json!([k["kind"], k["lines"]]))
        .collect();
    assert_eq!(kinds, vec![json!(["turn", 1]), json!(["title", 1])]);

    // Titled once: the next answer asks for no title.
    daemon.send(&session, "And then?").await;
    daemon.until_finished().await;
    daemon.send(&session, "Thanks").await;
    daemon.until_finished().await;
    assert_eq!(title_requests(&scratch.requests()).len(), 1);
    assert_eq!(view(&daemon, &session).await["title"], "Fixing the build");
    daemon.close().await;
}

#[tokio::test]
async fn the_demo_model_titles_from_the_first_words() {
    let scratch = Scratch::new();
    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(titling(Vec::new()))).await;
    let session = daemon.create_session(SessionCreateParams::default()).await;
    daemon
        .send(
            &session,
            "  please explain how lifetimes work in rust, with examples",
        )
        .await;
    assert_eq!(
        next_title(&mut daemon, &session).await,
        "please explain how lifetimes work in"
    );
    assert_eq!(
        view(&daemon, &session).await["title"],
        "please explain how lifetimes work in"
    );
    daemon.close().await;
}

#[tokio::test]
async fn a_title_the_user_set_is_kept() {
    let scratch = Scratch::new();
    let script =
        json!({"turns": [{"text": "one"}, {"text": "two"}], "title": {"text": "Model's title"}});
    let mut daemon = Daemon::start(
        &scratch.db(),
        Options::with_env(titling(scratch.replay(script))),
    )
    .await;
    let given = daemon
        .create_session(SessionCreateParams {
            title: Some("Given at creation".into()),
            ..scratch.replay_session()
        })
        .await;
    let renamed = daemon.create_session(scratch.replay_session()).await;
    daemon
        .call::<SessionUpdate>(SessionUpdateParams {
            session_id: renamed.clone(),
            title: Some("Renamed".into()),
            ..SessionUpdateParams::default()
        })
        .await;
    for session in [&given, &renamed] {
        for text in ["first", "second"] {
            daemon.send(session, text).await;
            daemon.until_finished().await;
        }
    }
    assert_eq!(view(&daemon, &given).await["title"], "Given at creation");
    assert_eq!(view(&daemon, &renamed).await["title"], "Renamed");
    assert_eq!(title_requests(&scratch.requests()).len(), 0);
    daemon.close().await;
}

#[tokio::test]
async fn a_failed_title_request_leaves_the_title() {
    let scratch = Scratch::new();
    // No `title` in the script: the replay model fails title requests.
    let script = json!({"turns": [{"text": "one"}, {"text": "two"}]});
    let mut daemon = Daemon::start(
        &scratch.db(),
        Options::with_env(titling(scratch.replay(script))),
    )
    .await;
    let session = daemon.create_session(scratch.replay_session()).await;
    daemon.send(&session, "first").await;
    daemon.until_finished().await;
    daemon.send(&session, "second").await;
    daemon.until_finished().await;
    // The title is asked for beside the runs: its request may come after the second turn.
    let asked = tokio::time::timeout(std::time::Duration::from_secs(60), async {
        while title_requests(&scratch.requests()).is_empty() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    });
    asked.await.expect("no title request within the hang guard");
    assert_eq!(view(&daemon, &session).await["title"], "New chat");
    daemon.close().await;
}

#[tokio::test]
async fn auto_compact_is_a_setting_of_the_config_and_of_each_session() {
    let scratch = Scratch::new();
    scratch.write_config("[defaults]\nauto_compact = false\n");
    let daemon = Daemon::start(&scratch.db(), Options::default()).await;
    let session = daemon.create_session(SessionCreateParams::default()).await;
    assert_eq!(view(&daemon, &session).await["autoCompact"], json!(false));
    let on = daemon
        .create_session(SessionCreateParams {
            auto_compact: Some(true),
            ..SessionCreateParams::default()
        })
        .await;
    assert_eq!(view(&daemon, &on).await["autoCompact"], json!(true));
    let updated = json_of(
        daemon
            .call::<SessionUpdate>(SessionUpdateParams {
                session_id: session.clone(),
                auto_compact: Some(true),
                ..SessionUpdateParams::default()
            })
            .await,
    );
    assert_eq!(updated["autoCompact"], json!(true));
    daemon.close().await;
}

#[tokio::test]
async fn with_auto_compact_off_a_request_past_the_window_is_refused_with_a_hint() {
    let replies = (0..12).map(|_| text_reply("Noted.", 10, 2)).collect();
    let upstream = start(replies);
    let scratch = Scratch::new();
    let mut daemon = Daemon::start(
        &scratch.db(),
        Options::with_env(window_env(&upstream.url, crate::long_context::WINDOW)),
    )
    .await;
    let session = daemon
        .create_session(SessionCreateParams {
            auto_compact: Some(false),
            ..SessionCreateParams::default()
        })
        .await;
    let big = |i: usize| format!("Part {i}: {}", "lorem ipsum dolor sit amet ".repeat(120));
    let mut refusal = None;
    let mut answered = 0;
    for i in 1..=12 {
        daemon.send(&session, &big(i)).await;
        let events = daemon.until_finished().await;
        assert!(
            !events
                .iter()
                .any(|e| matches!(e.event, Event::Compaction { .. })),
            "nothing is folded unasked"
        );
        match &events.last().unwrap().event {
            Event::RunFinished {
                reason: FinishReason::EndTurn,
                ..
            } => answered += 1,
            Event::RunFinished {
                reason: FinishReason::Error,
                error,
            } => {
                refusal = error.clone();
                break;
            }
            other => panic!("unexpected end {other:?}"),
        }
    }
    let refusal = refusal.expect("a request past the window was refused");
    assert!(
        refusal.starts_with("The request would be ")
            && refusal.contains("Automatic compaction is off")
            && refusal.contains("/compact"),
        "{refusal}"
    );
    assert!(answered >= 2, "earlier turns passed their share unfolded");
    assert_eq!(
        upstream.bodies().len(),
        answered,
        "the refused request was not sent"
    );
    // Nothing is lost: the refused message is the last turn, unanswered.
    let transcript = daemon.transcript(&session).await;
    let users: Vec<&Value> = transcript["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["role"] == "user")
        .collect();
    assert_eq!(users.len(), answered + 1);
    assert_eq!(view(&daemon, &session).await["state"], "unanswered");
    daemon.close().await;
}

#[tokio::test]
async fn help_is_not_hard_wrapped() {
    let scratch = Scratch::new();
    let mut daemon = Daemon::start(&scratch.db(), Options::default()).await;
    let session = daemon.create_session(SessionCreateParams::default()).await;
    daemon.call::<ChatSend>(say(&session, "/help")).await;
    let events = daemon
        .events_until(|e| matches!(e, Event::MessageCompleted { .. }))
        .await;
    let Some(Event::MessageCompleted { entry }) = events.last().map(|e| &e.event) else {
        unreachable!()
    };
    let text = serde_json::to_value(&entry.blocks).unwrap()[0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    // Each command on one line, whatever its length: clients wrap to their width.
    let continued: Vec<&str> = text.lines().filter(|l| l.starts_with("   ")).collect();
    assert_eq!(continued, Vec::<&str>::new(), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("  /model") && l.ends_with("/model --force <id>")),
        "{text}"
    );
    daemon.close().await;
}

#[tokio::test]
async fn session_update_tells_the_clients_with_the_whole_session() {
    let upstream = crate::upstream::start(Vec::new());
    let scratch = Scratch::new();
    let env = vec![
        ("OPENAI_BASE_URL", format!("{}/v1", upstream.url)),
        ("OPENAI_API_KEY", "sk-test".into()),
        ("SIDECHAT_OPENAI_MODEL", "gpt-5".into()),
    ];
    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(env)).await;
    let session = daemon.create_session(SessionCreateParams::default()).await;
    let base = SessionUpdateParams {
        session_id: session.clone(),
        ..SessionUpdateParams::default()
    };
    let changes = [
        SessionUpdateParams {
            title: Some("Renamed".into()),
            ..base.clone()
        },
        SessionUpdateParams {
            model: Some("o3".into()),
            ..base.clone()
        },
        SessionUpdateParams {
            effort: Some(Some(sidechat::protocol::Effort::High)),
            ..base.clone()
        },
        SessionUpdateParams {
            auto_compact: Some(false),
            ..base.clone()
        },
    ];
    for change in changes {
        let updated = daemon.call::<SessionUpdate>(change).await;
        let events = daemon
            .events_until(|e| matches!(e, Event::SessionUpdated { .. }))
            .await;
        let told = events.last().unwrap();
        assert_eq!(told.session_id, session);
        assert_eq!(
            told.event,
            Event::SessionUpdated {
                title: updated.title.clone(),
                session: Box::new(updated),
            }
        );
    }
    let now = view(&daemon, &session).await;
    assert_eq!(
        (
            now["title"].clone(),
            now["model"].clone(),
            now["effort"].clone(),
            now["autoCompact"].clone()
        ),
        (json!("Renamed"), json!("o3"), json!("high"), json!(false))
    );
    daemon.close().await;
}
