//! Permission rules from the user's config file and the project's `.sidechat/config.toml`:
//! allow skips the prompt, ask forces it, deny refuses and tells the model which rule refused.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sidechat::protocol::{ApprovalDecision, ApprovalRespond, Event, NoticeLevel};

use crate::harness::{Daemon, Scratch, answer, daemon_making, run_command_call};

/// A replay daemon whose model makes `calls` in one turn, then says "done", and a session.
async fn daemon_and_session(scratch: &Scratch, calls: Vec<Value>) -> (Daemon, String) {
    let daemon = daemon_making(scratch, calls).await;
    let session = daemon.create_session(scratch.replay_session()).await;
    (daemon, session)
}

fn config_path(scratch: &Scratch) -> String {
    scratch
        .home()
        .join(".config/sidechat/config.toml")
        .display()
        .to_string()
}

fn write_project(scratch: &Scratch, toml: &str) -> String {
    let dir = scratch.workspace().join(".sidechat");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("config.toml");
    std::fs::write(&path, toml).unwrap();
    path.display().to_string()
}

/// The tool names approvals were requested for, in order, answering each with `decision`, until
/// the run finishes; and the notices given meanwhile.
async fn answer_all(
    daemon: &mut Daemon,
    decision: ApprovalDecision,
) -> (Vec<String>, Vec<(NoticeLevel, String)>) {
    let mut asked = Vec::new();
    let mut notices = Vec::new();
    loop {
        let event = daemon.next_event().await.event;
        match event {
            Event::ApprovalRequested { approval } => {
                asked.push(approval.tool.clone());
                daemon
                    .call::<ApprovalRespond>(answer(&approval.approval_id, decision))
                    .await;
            }
            Event::Notice { level, message, .. } => notices.push((level, message)),
            Event::RunFinished { .. } => return (asked, notices),
            _ => {}
        }
    }
}

#[tokio::test]
async fn rules_of_the_config_file_allow_deny_and_leave_the_rest_asked() {
    let scratch = Scratch::new();
    scratch.write_config(
        "[sandbox]\nenabled = false\n[permissions]\nallow = [\"run_command(echo *)\"]\ndeny = [\"run_command(rm *)\"]\n",
    );
    let (mut daemon, session) = daemon_and_session(
        &scratch,
        vec![
            run_command_call("echo hi > out.txt"),
            run_command_call("rm -f out.txt"),
            run_command_call("echo a; touch b.txt"),
        ],
    )
    .await;
    daemon.send(&session, "go").await;
    let (asked, _) = answer_all(&mut daemon, ApprovalDecision::Deny).await;
    assert_eq!(asked, ["run_command"], "only the compound command is asked");
    assert_eq!(
        std::fs::read_to_string(scratch.workspace().join("out.txt")).unwrap(),
        "hi\n"
    );
    assert!(!scratch.workspace().join("b.txt").exists());
    let results = daemon.tool_results(&session).await;
    assert_eq!(
        results[1..].to_vec(),
        [
            (
                "denied".to_string(),
                format!(
                    "Refused by the deny rule `run_command(rm *)` in the config file {}, without asking the user. Do not retry it; ask the user how to proceed if needed.",
                    config_path(&scratch)
                )
            ),
            (
                "denied".to_string(),
                "The user denied this tool call. Do not retry it; ask the user how to proceed if needed.".to_string()
            ),
        ]
    );
    // The model is told which rule refused.
    let requests = scratch.requests();
    let told = requests[1].to_string();
    assert!(
        told.contains("Refused by the deny rule `run_command(rm *)`"),
        "{told}"
    );
    daemon.close().await;
}

#[tokio::test]
async fn a_project_file_adds_ask_and_deny_and_its_allow_is_ignored_with_a_notice() {
    let scratch = Scratch::new();
    // Without the sandbox, commands ask unless allowed.
    scratch.write_config("[sandbox]\nenabled = false\n");
    let project = write_project(
        &scratch,
        "[permissions]\nallow = [\"run_command\"]\nask = [\"read_file(*.md)\"]\ndeny = [\"run_command(touch *)\"]\n",
    );
    std::fs::write(scratch.workspace().join("notes.md"), "n\n").unwrap();
    let (mut daemon, session) = daemon_and_session(
        &scratch,
        vec![
            json!({"name": "read_file", "input": {"path": "notes.md"}}),
            run_command_call("touch made.txt"),
            run_command_call("echo unasked"),
        ],
    )
    .await;
    daemon.send(&session, "go").await;
    let (asked, notices) = answer_all(&mut daemon, ApprovalDecision::Deny).await;
    // read_file runs unasked by default: the ask rule forces the prompt. The project's allow
    // is ignored, so `echo` is asked as before.
    assert_eq!(asked, ["read_file", "run_command"]);
    assert_eq!(
        notices,
        [(
            NoticeLevel::Warning,
            format!(
                "Ignored the allow rules of the project file {project} (`run_command`): a project may only add ask and deny rules; allow rules belong in your own config file."
            )
        )]
    );
    assert!(!scratch.workspace().join("made.txt").exists());
    let results = daemon.tool_results(&session).await;
    assert_eq!(
        results[1],
        (
            "denied".to_string(),
            format!(
                "Refused by the deny rule `run_command(touch *)` in the project file {project}, without asking the user. Do not retry it; ask the user how to proceed if needed."
            )
        )
    );
    // The notice is stored with the session.
    let transcript = daemon.transcript(&session).await.to_string();
    assert!(transcript.contains("Ignored the allow rules of the project file"));
    daemon.close().await;
}

#[tokio::test]
async fn deny_beats_ask_and_ask_beats_allow_across_both_files() {
    let scratch = Scratch::new();
    scratch.write_config(
        "[permissions]\nallow = [\"run_command(echo *)\", \"write_file\"]\nask = [\"write_file(src/**)\"]\n",
    );
    let project = write_project(
        &scratch,
        "[permissions]\ndeny = [\"run_command(echo secret*)\"]\n",
    );
    std::fs::create_dir(scratch.workspace().join("src")).unwrap();
    let (mut daemon, session) = daemon_and_session(
        &scratch,
        vec![
            run_command_call("echo secret"),
            run_command_call("echo fine"),
            json!({"name": "write_file", "input": {"path": "top.txt", "content": "t"}}),
            json!({"name": "write_file", "input": {"path": "src/lib.rs", "content": "s"}}),
        ],
    )
    .await;
    daemon.send(&session, "go").await;
    let (asked, _) = answer_all(&mut daemon, ApprovalDecision::Allow).await;
    assert_eq!(asked, ["write_file"], "only the write under src/ is asked");
    let statuses: Vec<String> = daemon
        .tool_results(&session)
        .await
        .into_iter()
        .map(|(status, _)| status)
        .collect();
    assert_eq!(statuses, ["denied", "done", "done", "done"]);
    let results = daemon.tool_results(&session).await;
    assert!(
        results[0].1.contains(&format!(
            "the deny rule `run_command(echo secret*)` in the project file {project}"
        )),
        "{}",
        results[0].1
    );
    daemon.close().await;
}

#[tokio::test]
async fn a_rule_that_cannot_be_read_stops_the_daemon_naming_it() {
    let scratch = Scratch::new();
    scratch.write_config("[permissions]\ndeny = [\"run_comand(rm *)\"]\n");
    let output = crate::harness::command(&scratch.db(), &[])
        .stderr(std::process::Stdio::piped())
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("the deny rule `run_comand(rm *)` names no tool"),
        "{stderr}"
    );
}

#[tokio::test]
async fn an_ask_rule_asks_even_after_the_tool_was_allowed_for_the_session() {
    let scratch = Scratch::new();
    scratch.write_config("[permissions]\nask = [\"write_file(src/**)\"]\n");
    std::fs::create_dir(scratch.workspace().join("src")).unwrap();
    let write = |path: &str| json!({"name": "write_file", "input": {"path": path, "content": "x"}});
    let (mut daemon, session) = daemon_and_session(
        &scratch,
        vec![write("a.txt"), write("b.txt"), write("src/c.rs")],
    )
    .await;
    daemon.send(&session, "go").await;
    // The first answer allows write_file for the session: b.txt is not asked, src/c.rs is.
    let (asked, _) = answer_all(&mut daemon, ApprovalDecision::AllowAlways).await;
    assert_eq!(asked, ["write_file", "write_file"]);
    let statuses: Vec<String> = daemon
        .tool_results(&session)
        .await
        .into_iter()
        .map(|(status, _)| status)
        .collect();
    assert_eq!(statuses, ["done", "done", "done"]);
    daemon.close().await;
}
