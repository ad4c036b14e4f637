//! Project instructions: the user's and each folder's AGENTS.md (CLAUDE.md where there is
//! none) in the system prompt of every request, sub-agents' too, counted as their own budget
//! segment, listed by `session/get` and `/instructions`.

use std::path::Path;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sidechat::protocol::{
    ChatSend, Event, InstructionFile, SessionBudget, SessionCreateParams, SessionGet,
};

use crate::harness::{Daemon, Options, Scratch, say, sid};

/// A git work tree `repo` in the scratch folder with the workspace two folders down:
/// `repo/AGENTS.md`, `repo/app/CLAUDE.md` (no AGENTS.md there), `repo/app/ws/AGENTS.md`, and
/// the user's own AGENTS.md. Returns the workspace.
fn project(scratch: &Scratch) -> std::path::PathBuf {
    let repo = scratch.dir.path().join("repo");
    let ws = repo.join("app/ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir(repo.join(".git")).unwrap();
    std::fs::write(repo.join("AGENTS.md"), "Top: use tabs.\n").unwrap();
    std::fs::write(repo.join("app/CLAUDE.md"), "App: run make.\n").unwrap();
    std::fs::write(ws.join("AGENTS.md"), "Ws: be brief.\n").unwrap();
    let user = scratch.home().join(".config/sidechat");
    std::fs::create_dir_all(&user).unwrap();
    std::fs::write(user.join("AGENTS.md"), "User: British spelling.\n").unwrap();
    ws.canonicalize().unwrap()
}

fn user_file(scratch: &Scratch) -> std::path::PathBuf {
    scratch.home().join(".config/sidechat/AGENTS.md")
}

fn file(path: &Path, bytes: u64) -> InstructionFile {
    InstructionFile {
        path: path.display().to_string(),
        bytes,
    }
}

fn block(path: &Path, text: &str) -> String {
    format!("# Instructions from {}\n\n{text}", path.display())
}

async fn start(scratch: &Scratch, script: Value, workspace: &Path) -> (Daemon, String) {
    let daemon = Daemon::start(&scratch.db(), Options::with_env(scratch.replay(script))).await;
    let session = daemon
        .create_session(SessionCreateParams {
            account: Some("replay".into()),
            workspace_root: Some(workspace.display().to_string()),
            system_prompt: Some("Own prompt.".into()),
            ..SessionCreateParams::default()
        })
        .await;
    (daemon, session)
}

fn systems(scratch: &Scratch) -> Vec<String> {
    scratch
        .requests()
        .iter()
        .map(|r| r["system"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test]
async fn every_level_reaches_the_system_prompt_and_a_change_is_picked_up() {
    let scratch = Scratch::new();
    let ws = project(&scratch);
    let repo = ws.parent().unwrap().parent().unwrap().to_path_buf();
    let (mut daemon, session) = start(
        &scratch,
        json!({"turns": [], "fallback": {"text": "Ok."}}),
        &ws,
    )
    .await;

    let listed = daemon.call::<SessionGet>(sid(&session)).await.instructions;
    assert_eq!(
        listed,
        vec![
            file(&user_file(&scratch), 24),
            file(&repo.join("AGENTS.md"), 15),
            file(&repo.join("app/CLAUDE.md"), 15),
            file(&ws.join("AGENTS.md"), 14),
        ]
    );

    daemon.call::<ChatSend>(say(&session, "hello")).await;
    daemon.until_finished().await;
    std::fs::write(ws.join("AGENTS.md"), "Ws: be very brief.\n").unwrap();
    daemon.call::<ChatSend>(say(&session, "again")).await;
    daemon.until_finished().await;

    let expected = |ws_text: &str| {
        [
            "Own prompt.".to_string(),
            block(&user_file(&scratch), "User: British spelling."),
            block(&repo.join("AGENTS.md"), "Top: use tabs."),
            block(&repo.join("app/CLAUDE.md"), "App: run make."),
            block(&ws.join("AGENTS.md"), ws_text),
        ]
        .join("\n\n")
    };
    assert_eq!(
        systems(&scratch),
        vec![expected("Ws: be brief."), expected("Ws: be very brief.")]
    );
    daemon.close().await;
}

#[tokio::test]
async fn instructions_are_their_own_budget_segment_and_listed_by_the_command() {
    let scratch = Scratch::new();
    let ws = project(&scratch);
    let (mut daemon, session) = start(&scratch, json!({"turns": []}), &ws).await;
    let with = daemon.call::<SessionBudget>(sid(&session)).await.snapshot;
    assert!(with.instructions_tokens > 0, "{with:?}");

    daemon
        .call::<ChatSend>(say(&session, "/instructions"))
        .await;
    let events = daemon
        .events_until(|e| matches!(e, Event::MessageCompleted { .. }))
        .await;
    let Some(Event::MessageCompleted { entry }) = events.last().map(|e| &e.event) else {
        unreachable!()
    };
    let note = serde_json::to_value(&entry.blocks).unwrap()[0]["text"].clone();
    let repo = ws.parent().unwrap().parent().unwrap();
    assert_eq!(
        note,
        json!(format!(
            "Instructions sent with every request, in this order:\n  {} (24 bytes)\n  {} (15 bytes)\n  {} (15 bytes)\n  {} (14 bytes)",
            user_file(&scratch).display(),
            repo.join("AGENTS.md").display(),
            repo.join("app/CLAUDE.md").display(),
            ws.join("AGENTS.md").display()
        ))
    );
    daemon.close().await;

    // Turned off: no segment, nothing listed.
    scratch.write_config("[instructions]\nenabled = false\n");
    let daemon = Daemon::start(
        &scratch.db(),
        Options::with_env(scratch.replay(json!({"turns": []}))),
    )
    .await;
    let without = daemon.call::<SessionBudget>(sid(&session)).await.snapshot;
    assert_eq!(
        (without.instructions_tokens, without.system_tokens),
        (0, with.system_tokens)
    );
    let listed = daemon.call::<SessionGet>(sid(&session)).await.instructions;
    assert_eq!(listed, vec![]);
    daemon.close().await;
}

#[tokio::test]
async fn the_cap_cuts_the_outermost_files_with_a_notice() {
    let scratch = Scratch::new();
    let ws = project(&scratch);
    let repo = ws.parent().unwrap().parent().unwrap().to_path_buf();
    std::fs::write(repo.join("app/CLAUDE.md"), [0xff, 0xfe, 0x00]).unwrap();
    // Top (15) + ws (14) fit in 30; the user's file (24) does not.
    scratch.write_config("[instructions]\nmax_bytes = 30\n");
    let (mut daemon, session) = start(
        &scratch,
        json!({"turns": [], "fallback": {"text": "Ok."}}),
        &ws,
    )
    .await;
    daemon.call::<ChatSend>(say(&session, "hello")).await;
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
        vec![
            format!(
                "The instruction file {} is not UTF-8 text; it was skipped.",
                repo.join("app/CLAUDE.md").display()
            ),
            format!(
                "The instruction files pass the 30-byte cap ([instructions] max_bytes); left out, outermost first: {}.",
                user_file(&scratch).display()
            ),
        ]
    );
    assert_eq!(
        systems(&scratch),
        vec![
            [
                "Own prompt.".to_string(),
                block(&repo.join("AGENTS.md"), "Top: use tabs."),
                block(&ws.join("AGENTS.md"), "Ws: be brief."),
            ]
            .join("\n\n")
        ]
    );
    // Told once, not at every request.
    daemon.call::<ChatSend>(say(&session, "again")).await;
    let again = daemon.until_finished().await;
    assert!(
        !again
            .iter()
            .any(|e| matches!(e.event, Event::Notice { .. })),
        "{again:?}"
    );
    daemon.close().await;
}

#[tokio::test]
async fn a_sub_agent_gets_the_same_instructions() {
    let scratch = Scratch::new();
    let ws = project(&scratch);
    let script = json!({
        "turns": [
            {"toolCalls": [{"name": "delegate", "input": {"task": "Look around", "tools": "read-only"}}]},
            {"text": "Parent done."}
        ],
        "delegated": {"turns": [{"text": "Child done."}]}
    });
    let (mut daemon, session) = start(&scratch, script, &ws).await;
    daemon.call::<ChatSend>(say(&session, "delegate it")).await;
    loop {
        let event = daemon.next_event().await;
        if event.session_id == session && matches!(event.event, Event::RunFinished { .. }) {
            break;
        }
    }
    let requests = scratch.requests();
    let child = requests
        .iter()
        .find(|r| r["delegated"] == json!(true))
        .expect("the child's request");
    let system = child["system"].as_str().unwrap();
    assert!(
        system.ends_with(&block(&ws.join("AGENTS.md"), "Ws: be brief.")),
        "{system}"
    );
    assert!(
        system.contains(&block(&user_file(&scratch), "User: British spelling.")),
        "{system}"
    );
    daemon.close().await;
}
