//! Custom slash commands: `.sidechat/commands/NAME.md` (project) and
//! `$XDG_CONFIG_HOME/sidechat/commands/NAME.md` (user) define `/NAME`; the model reads the
//! expansion, the transcript keeps what was typed.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sidechat::protocol::{
    ChatResume, ChatSend, CommandInfo, CommandSource, Event, SessionCommands,
    SessionCommandsResult, SessionCost, SessionCreateParams, SessionGet, SessionState,
};

use crate::harness::{
    Daemon, Options, Scratch, daemon_answering_done, last_message_texts, say, sid,
};
use crate::upstream::{Part, Reply, openai, start};

/// A project command `review` and `fix`, a user command `review` (beaten by the project's)
/// and `hello`, and a project `help.md` that the built-in shadows.
fn commands(scratch: &Scratch) {
    let project = scratch.workspace().join(".sidechat/commands");
    let user = scratch.home().join(".config/sidechat/commands");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::create_dir_all(&user).unwrap();
    std::fs::write(
        project.join("review.md"),
        "---\ndescription: Review a file\nargument-hint: <path> [focus]\n---\nReview $1, looking at $2. Everything: $ARGUMENTS\n",
    )
    .unwrap();
    std::fs::write(project.join("fix.md"), "Fix the failing tests.\n").unwrap();
    std::fs::write(user.join("review.md"), "The user's review.").unwrap();
    std::fs::write(
        user.join("hello.md"),
        "---\ndescription: Say hello\n---\nSay hello to $ARGUMENTS.",
    )
    .unwrap();
    std::fs::write(project.join("help.md"), "Not used.").unwrap();
}

async fn last_user_blocks(daemon: &Daemon, session: &str) -> Value {
    let transcript = daemon.transcript(session).await;
    let user = transcript["entries"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|e| e["role"] == "user")
        .unwrap()
        .clone();
    user["blocks"].clone()
}

#[tokio::test]
async fn a_command_expands_its_arguments_for_the_model_and_keeps_what_was_typed() {
    let scratch = Scratch::new();
    commands(&scratch);
    let (mut daemon, session) = daemon_answering_done(&scratch).await;
    let typed = r#"/review src/lib.rs "error handling""#;
    daemon.call::<ChatSend>(say(&session, typed)).await;
    daemon.until_finished().await;
    let prompt =
        r#"Review src/lib.rs, looking at error handling. Everything: src/lib.rs "error handling""#;
    assert_eq!(last_message_texts(&scratch), vec![format!("{prompt}\n")]);
    assert_eq!(
        last_user_blocks(&daemon, &session).await,
        json!([
            {"type": "text", "text": typed},
            {"type": "command", "name": "review", "prompt": format!("{prompt}\n")}
        ])
    );

    // The user's command, where the project has none of that name.
    daemon
        .call::<ChatSend>(say(&session, "/HELLO the team"))
        .await;
    daemon.until_finished().await;
    assert_eq!(
        last_message_texts(&scratch),
        vec!["Say hello to the team.".to_string()]
    );
    daemon.close().await;
}

#[tokio::test]
async fn built_ins_win_with_a_notice_and_unknown_commands_reach_no_model() {
    let scratch = Scratch::new();
    commands(&scratch);
    let (mut daemon, session) = daemon_answering_done(&scratch).await;
    daemon.call::<ChatSend>(say(&session, "/help")).await;
    let events = daemon
        .events_until(|e| matches!(e, Event::MessageCompleted { entry } if entry.role == sidechat::protocol::Role::Note))
        .await;
    let notices: Vec<String> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::Notice { message, .. } => Some(message.clone()),
            _ => None,
        })
        .collect();
    let help_file = scratch.workspace().join(".sidechat/commands/help.md");
    assert_eq!(
        notices,
        vec![format!(
            "The command file {} is not used: /help is a built-in command.",
            help_file.display()
        )]
    );
    let Some(Event::MessageCompleted { entry }) = events.last().map(|e| &e.event) else {
        unreachable!()
    };
    let help = serde_json::to_value(&entry.blocks).unwrap()[0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        help.ends_with(
            "Custom commands:\n  /fix             Fix the failing tests.\n  /hello           Say hello\n  /review <path> [focus] Review a file"
        ),
        "{help}"
    );

    daemon
        .call::<ChatSend>(say(&session, "/nosuch thing"))
        .await;
    let transcript = daemon.transcript(&session).await;
    let last = transcript["entries"].as_array().unwrap().last().unwrap();
    assert_eq!(last["role"], "notice");
    assert!(scratch.requests().is_empty(), "nothing reached a model");
    daemon.close().await;
}

#[tokio::test]
async fn session_commands_lists_built_in_and_custom_commands() {
    let scratch = Scratch::new();
    commands(&scratch);
    let (daemon, session) = daemon_answering_done(&scratch).await;
    let SessionCommandsResult { commands, .. } =
        daemon.call::<SessionCommands>(sid(&session)).await;
    let custom: Vec<CommandInfo> = commands
        .iter()
        .filter(|c| c.source != CommandSource::Builtin)
        .cloned()
        .collect();
    let project = scratch.workspace().join(".sidechat/commands");
    let user = scratch.home().join(".config/sidechat/commands");
    assert_eq!(
        custom,
        vec![
            CommandInfo {
                name: "fix".into(),
                description: "Fix the failing tests.".into(),
                argument_hint: None,
                source: CommandSource::Project,
                path: Some(project.join("fix.md").display().to_string()),
            },
            CommandInfo {
                name: "hello".into(),
                description: "Say hello".into(),
                argument_hint: None,
                source: CommandSource::User,
                path: Some(user.join("hello.md").display().to_string()),
            },
            CommandInfo {
                name: "review".into(),
                description: "Review a file".into(),
                argument_hint: Some("<path> [focus]".into()),
                source: CommandSource::Project,
                path: Some(project.join("review.md").display().to_string()),
            },
        ]
    );
    let builtins: Vec<&str> = commands
        .iter()
        .filter(|c| c.source == CommandSource::Builtin)
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(
        builtins,
        vec![
            "cost",
            "model",
            "effort",
            "system",
            "clear",
            "compact",
            "new-context",
            "instructions",
            "help"
        ]
    );
    let missing = daemon
        .try_call::<SessionCommands>(sid("ses_missing"))
        .await
        .unwrap_err();
    assert_eq!(missing.code, -32001, "{missing:?}");
    daemon.close().await;
}

/// The fake OpenAI upstream's settings: the session's model is `gpt-4` (an 8192-token window).
fn openai_env(url: &str) -> Vec<(&'static str, String)> {
    vec![
        ("OPENAI_BASE_URL", format!("{url}/v1")),
        ("OPENAI_API_KEY", "sk-test".into()),
        ("SIDECHAT_OPENAI_MODEL", "gpt-4".into()),
        ("SIDECHAT_MAX_RETRIES", "0".into()),
    ]
}

/// A `list_directory` call, its answer, then a text answer per later turn.
fn tool_turn_then_texts(texts: usize) -> Vec<Reply> {
    let call = openai::chunk(
        json!({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_1", "type": "function",
            "function": {"name": "list_directory", "arguments": "{\"path\":\".\"}"}}]}),
        None,
    );
    let mut replies = vec![Reply::sse(&[
        call,
        openai::chunk(json!({}), Some("tool_calls")),
        openai::usage(50, 0, 5),
    ])];
    replies.extend((0..texts).map(|_| Reply::sse(&openai::text(&["Done."], 60, 2))));
    replies
}

/// `.sidechat/commands/quick.md`, whose turn runs on `gpt-4o-mini`, and `odd.md`, naming a
/// model the account does not know.
fn model_commands(scratch: &Scratch) {
    let project = scratch.workspace().join(".sidechat/commands");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(
        project.join("quick.md"),
        "---\ndescription: Look quickly\nmodel: gpt-4o-mini\n---\nList the files.\n",
    )
    .unwrap();
    std::fs::write(
        project.join("odd.md"),
        "---\nmodel: no-such-model\n---\nAnything.\n",
    )
    .unwrap();
}

/// What a run told of its models: `runStarted`'s, each `usage` line's, each `budget`'s window.
fn models_told(events: &[sidechat::protocol::SessionEventParams]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            Event::RunStarted { model } => Some(format!("run {model}")),
            Event::Usage { model, .. } => Some(format!("usage {model}")),
            Event::Budget {
                snapshot,
                actual: None,
            } => Some(format!("window {}", snapshot.context_window)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_commands_model_runs_its_whole_turn_and_the_next_turn_is_the_sessions_again() {
    let upstream = start(tool_turn_then_texts(2));
    let scratch = Scratch::new();
    model_commands(&scratch);
    let mut daemon =
        Daemon::start(&scratch.db(), Options::with_env(openai_env(&upstream.url))).await;
    let session = daemon
        .create_session(SessionCreateParams {
            workspace_root: Some(scratch.workspace().display().to_string()),
            ..SessionCreateParams::default()
        })
        .await;
    daemon.call::<ChatSend>(say(&session, "/quick")).await;
    let command_turn = daemon.until_finished().await;
    assert_eq!(
        models_told(&command_turn),
        vec![
            "run gpt-4o-mini",
            "window 128000",
            "usage gpt-4o-mini",
            "window 128000",
            "usage gpt-4o-mini"
        ]
    );
    let got = daemon.call::<SessionGet>(sid(&session)).await;
    assert_eq!(got.model, "gpt-4");

    daemon.call::<ChatSend>(say(&session, "and now?")).await;
    let next_turn = daemon.until_finished().await;
    assert_eq!(
        models_told(&next_turn),
        vec!["run gpt-4", "window 8192", "usage gpt-4"]
    );
    let requested = upstream.models();
    assert_eq!(
        requested,
        vec![json!("gpt-4o-mini"), json!("gpt-4o-mini"), json!("gpt-4")]
    );
    // Priced as the model that answered.
    let cost = daemon.call::<SessionCost>(sid(&session)).await;
    let mut priced: Vec<(String, u64)> = cost
        .cost
        .by_model
        .iter()
        .map(|m| (m.model.clone(), m.lines))
        .collect();
    priced.sort();
    assert_eq!(
        priced,
        vec![("gpt-4".to_string(), 1), ("gpt-4o-mini".to_string(), 2)]
    );
    daemon.close().await;
}

/// A command turn a killed daemon left unanswered is answered by `chat/resume` on the
/// command's model, as its first run was, not on the session's.
#[tokio::test]
async fn a_resumed_command_turn_runs_on_the_commands_model() {
    let upstream = start(vec![
        Reply::parts(vec![Part::Stall]),
        Reply::sse(&openai::text(&["Listed."], 60, 2)),
    ]);
    let scratch = Scratch::new();
    model_commands(&scratch);
    let options = || Options::with_env(openai_env(&upstream.url));
    let mut daemon = Daemon::start(&scratch.db(), options()).await;
    let session = daemon
        .create_session(SessionCreateParams {
            workspace_root: Some(scratch.workspace().display().to_string()),
            ..SessionCreateParams::default()
        })
        .await;
    daemon.call::<ChatSend>(say(&session, "/quick")).await;
    let asked = tokio::time::timeout(std::time::Duration::from_secs(60), async {
        while upstream.seen().is_empty() {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    });
    asked
        .await
        .expect("the command's request reached no upstream within the hang guard");
    daemon.process().kill().await.unwrap();

    let mut daemon = Daemon::start(&scratch.db(), options()).await;
    assert_eq!(
        daemon.call::<SessionGet>(sid(&session)).await.state,
        SessionState::Unanswered
    );
    daemon.call::<ChatResume>(sid(&session)).await;
    let resumed = daemon.until_finished().await;
    assert_eq!(
        models_told(&resumed),
        vec!["run gpt-4o-mini", "window 128000", "usage gpt-4o-mini"]
    );
    let requested = upstream.models();
    assert_eq!(requested, vec![json!("gpt-4o-mini"), json!("gpt-4o-mini")]);
    daemon.close().await;
}

#[tokio::test]
async fn a_command_naming_a_model_the_account_does_not_know_is_refused_before_anything_is_stored() {
    let upstream = start(Vec::new());
    let scratch = Scratch::new();
    model_commands(&scratch);
    let daemon = Daemon::start(&scratch.db(), Options::with_env(openai_env(&upstream.url))).await;
    let session = daemon
        .create_session(SessionCreateParams {
            workspace_root: Some(scratch.workspace().display().to_string()),
            ..SessionCreateParams::default()
        })
        .await;
    let refused = daemon
        .try_call::<ChatSend>(say(&session, "/odd now"))
        .await
        .unwrap_err();
    let file = scratch.workspace().join(".sidechat/commands/odd.md");
    assert_eq!(
        (refused.code, refused.message),
        (
            -32602,
            format!(
                "invalid params: model: the command file {} names the model \"no-such-model\", which the account openai does not know (it is in neither the context window table, the price table nor the account's configuration); correct the file's front matter",
                file.display()
            )
        )
    );
    let transcript = daemon.transcript(&session).await;
    assert_eq!(transcript["entries"], json!([]));
    assert_eq!(upstream.bodies(), Vec::<Value>::new());
    daemon.close().await;
}
