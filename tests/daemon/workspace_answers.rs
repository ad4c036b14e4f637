//! Approval answers beyond allow and deny: "always in this workspace" saves an allow rule for
//! the workspace root (kept across restarts, in force in its sessions only), a deny may carry a
//! reason the model is told, and the saved rules are listed, removed and shown.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sidechat::protocol::{
    ApprovalDecision, ApprovalRespond, ApprovalRespondParams, ApprovalRespondResult, Event,
    PermissionsList, PermissionsListParams, PermissionsListResult, PermissionsRemove,
    PermissionsRemoveParams, RuleInForce, RuleList, RuleSource, SessionCreateParams,
};

use crate::harness::{Daemon, Scratch, answer, daemon_making, run_command_call};

/// Commands ask here as they do without the sandbox (where the sandbox runs them, they ask
/// only when a rule says so): these tests are about the answers to those prompts.
const NO_SANDBOX: &str = "[sandbox]\nenabled = false\n";

fn in_workspace(root: &std::path::Path) -> SessionCreateParams {
    SessionCreateParams {
        account: Some("replay".into()),
        workspace_root: Some(root.display().to_string()),
        ..SessionCreateParams::default()
    }
}

/// Sends a message and answers every approval with `decide`, until the run finishes; the
/// approvals asked, as their events carried them (`approvalId` and `createdAt` left out).
async fn run_answering(
    daemon: &mut Daemon,
    session: &str,
    decide: impl Fn(&str) -> ApprovalRespondParams,
) -> Vec<Value> {
    daemon.send(session, "go").await;
    let mut asked = Vec::new();
    loop {
        match daemon.next_event().await.event {
            Event::ApprovalRequested { approval } => {
                let mut shown = serde_json::to_value(&approval).unwrap();
                for volatile in ["approvalId", "createdAt", "runId", "callId"] {
                    shown.as_object_mut().unwrap().remove(volatile);
                }
                asked.push(shown);
                daemon
                    .call::<ApprovalRespond>(decide(&approval.approval_id))
                    .await;
            }
            Event::RunFinished { .. } => return asked,
            _ => {}
        }
    }
}

fn workspace_answer(approval: &str, rule: Option<&str>) -> ApprovalRespondParams {
    ApprovalRespondParams {
        rule: rule.map(String::from),
        ..answer(approval, ApprovalDecision::AllowWorkspace)
    }
}

fn list(root: Option<&std::path::Path>) -> PermissionsListParams {
    PermissionsListParams {
        workspace_root: root.map(|r| r.display().to_string()),
    }
}

#[tokio::test]
async fn a_workspace_answer_survives_a_restart_and_applies_in_that_workspace_only() {
    let scratch = Scratch::new();
    scratch.write_config(NO_SANDBOX);
    let other = scratch.dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let other = other.canonicalize().unwrap();
    let workspace = scratch.workspace();
    let mut daemon = daemon_making(&scratch, vec![run_command_call("echo built --quiet")]).await;
    let session = daemon.create_session(in_workspace(&workspace)).await;
    let asked = run_answering(&mut daemon, &session, |id| workspace_answer(id, None)).await;
    assert_eq!(
        asked,
        [json!({
            "tool": "run_command",
            "input": {"command": "echo built --quiet"},
            "summary": "run `echo built --quiet`",
            "proposedRule": "run_command(echo built *)",
            "sandboxed": false,
        })]
    );
    let listed = daemon.call::<PermissionsList>(list(None)).await;
    assert_eq!(listed.stored.len(), 1);
    let saved = listed.stored[0].clone();
    assert_eq!(
        (saved.workspace_root.as_str(), saved.rule.as_str()),
        (
            workspace.display().to_string().as_str(),
            "run_command(echo built *)"
        )
    );
    assert_eq!(daemon.close().await, 0);

    // A new daemon, a new session in the same workspace: not asked.
    let mut daemon = daemon_making(&scratch, vec![run_command_call("echo built --quiet")]).await;
    let again = daemon.create_session(in_workspace(&workspace)).await;
    let asked = run_answering(&mut daemon, &again, |id| answer(id, ApprovalDecision::Deny)).await;
    assert_eq!(asked, Vec::<Value>::new());
    // Another workspace: asked, and its listing holds no saved answer.
    let elsewhere = daemon.create_session(in_workspace(&other)).await;
    let asked = run_answering(&mut daemon, &elsewhere, |id| {
        answer(id, ApprovalDecision::Deny)
    })
    .await;
    assert_eq!(asked.len(), 1);
    assert_eq!(
        daemon.call::<PermissionsList>(list(Some(&other))).await,
        PermissionsListResult {
            stored: Vec::new(),
            in_force: Some(Vec::new()),
            notices: Vec::new(),
        }
    );
    // Listed for its workspace, with where it comes from; removed, it no longer applies.
    assert_eq!(
        daemon.call::<PermissionsList>(list(Some(&workspace))).await,
        PermissionsListResult {
            stored: vec![saved.clone()],
            in_force: Some(vec![RuleInForce {
                rule: "run_command(echo built *)".into(),
                list: RuleList::Allow,
                source: RuleSource::Workspace,
                file: None,
                id: Some(saved.id.clone()),
            }]),
            notices: Vec::new(),
        }
    );
    let removed = daemon
        .call::<PermissionsRemove>(PermissionsRemoveParams {
            id: saved.id.clone(),
        })
        .await;
    assert_eq!(removed.removed, saved);
    let unknown = daemon
        .try_call::<PermissionsRemove>(PermissionsRemoveParams {
            id: saved.id.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(
        (unknown.code, unknown.message),
        (
            -32602,
            format!(
                "invalid params: id: no saved workspace answer has the id {:?}; permissions/list shows them",
                saved.id
            )
        )
    );
    let third = daemon.create_session(in_workspace(&workspace)).await;
    let asked = run_answering(&mut daemon, &third, |id| answer(id, ApprovalDecision::Deny)).await;
    assert_eq!(asked.len(), 1);
    daemon.close().await;
}

#[tokio::test]
async fn an_edited_rule_is_saved_and_a_bad_one_is_refused_naming_the_problem() {
    let scratch = Scratch::new();
    scratch.write_config(NO_SANDBOX);
    let mut daemon = daemon_making(
        &scratch,
        vec![
            run_command_call("echo first"),
            run_command_call("echo second"),
        ],
    )
    .await;
    let session = daemon.create_session(scratch.replay_session()).await;
    daemon.send(&session, "go").await;
    let (_, approval) = daemon.until_approval().await;
    let refused = |params| {
        let daemon = &daemon;
        async move {
            let e = daemon
                .try_call::<ApprovalRespond>(params)
                .await
                .unwrap_err();
            (e.code, e.message)
        }
    };
    assert_eq!(
        refused(workspace_answer(&approval, Some("run_comand(echo *)"))).await,
        (
            -32602,
            "invalid params: rule: the allow rule `run_comand(echo *)` names no tool: the tools are run_command, read_file, write_file, edit_file, list_directory, search_text, delegate, update_plan, web_fetch and MCP tools (`mcp__SERVER__TOOL`, which may end in `*`)".to_string()
        )
    );
    assert_eq!(
        refused(workspace_answer(&approval, Some("write_file(/etc/**)"))).await,
        (
            -32602,
            "invalid params: rule: the allow rule `write_file(/etc/**)` gives an absolute path; patterns are relative to the workspace root".to_string()
        )
    );
    assert_eq!(
        refused(ApprovalRespondParams {
            rule: Some("run_command(echo *)".into()),
            ..answer(&approval, ApprovalDecision::Allow)
        })
        .await,
        (
            -32602,
            "invalid params: rule: only allowWorkspace takes a rule (the one to save for the workspace)"
                .to_string()
        )
    );
    // Nothing was lost: the approval still waits, and the edited rule applies to the second
    // call of the same turn.
    let applied = daemon
        .call::<ApprovalRespond>(workspace_answer(&approval, Some(" run_command(echo *) ")))
        .await;
    assert_eq!(
        applied,
        ApprovalRespondResult {
            decision: ApprovalDecision::AllowWorkspace,
            applied: true,
            message: None,
        }
    );
    let events = daemon.until_finished().await;
    let asked = events
        .iter()
        .filter(|e| matches!(e.event, Event::ApprovalRequested { .. }))
        .count();
    assert_eq!(asked, 0, "the second echo runs under the saved rule");
    let rules: Vec<String> = daemon
        .call::<PermissionsList>(list(None))
        .await
        .stored
        .into_iter()
        .map(|r| r.rule)
        .collect();
    assert_eq!(rules, ["run_command(echo *)"]);
    daemon.close().await;
}

#[tokio::test]
async fn a_deny_reason_reaches_the_model() {
    let scratch = Scratch::new();
    let mut daemon = daemon_making(
        &scratch,
        vec![json!({"name": "write_file", "input": {"path": "draft.txt", "content": "x"}})],
    )
    .await;
    let session = daemon.create_session(scratch.replay_session()).await;
    let asked = run_answering(&mut daemon, &session, |id| ApprovalRespondParams {
        reason: Some("write it to notes.md instead".into()),
        ..answer(id, ApprovalDecision::Deny)
    })
    .await;
    assert_eq!(asked[0]["proposedRule"], json!("write_file(draft.txt)"));
    assert!(!scratch.workspace().join("draft.txt").exists());
    let told = "The user denied this tool call and said why: write it to notes.md instead\nDo not retry it as it was; take what the user said into account, and ask the user how to proceed if needed.";
    let requests = scratch.requests();
    let sent = requests[1].to_string();
    assert!(
        sent.contains(&serde_json::to_string(told).unwrap()),
        "{sent}"
    );
    daemon.close().await;
}

#[tokio::test]
async fn the_prompt_says_why_an_allow_rule_did_not_apply_and_slash_permissions_lists_every_rule() {
    let scratch = Scratch::new();
    scratch.write_config(&format!(
        "{NO_SANDBOX}[permissions]\nallow = [\"run_command(echo *)\"]\n"
    ));
    let config = scratch.home().join(".config/sidechat/config.toml");
    let project_dir = scratch.workspace().join(".sidechat");
    std::fs::create_dir_all(&project_dir).unwrap();
    std::fs::write(
        project_dir.join("config.toml"),
        "[permissions]\ndeny = [\"run_command(rm *)\"]\n",
    )
    .unwrap();
    let outside = scratch.dir.path().join("outside.txt");
    let line = format!("echo hi > {}", outside.display());
    let mut daemon = daemon_making(
        &scratch,
        vec![run_command_call(&line), run_command_call("touch a.txt")],
    )
    .await;
    let session = daemon.create_session(scratch.replay_session()).await;
    let asked = run_answering(&mut daemon, &session, |id| workspace_answer(id, None)).await;
    assert_eq!(
        asked[0]["whyAsked"],
        json!(format!(
            "No allow rule applies: a redirection writes to `{}`, outside the workspace.",
            outside.display()
        ))
    );
    assert_eq!(asked[1]["proposedRule"], json!("run_command(touch *)"));
    let sent = daemon.send(&session, "/permissions").await;
    let transcript = daemon.transcript(&session).await;
    let note = transcript["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == json!(sent.message_id))
        .unwrap();
    let saved = daemon.call::<PermissionsList>(list(None)).await.stored;
    let ids: Vec<&str> = saved.iter().map(|r| r.id.as_str()).collect();
    let workspace = scratch.workspace();
    assert_eq!(
        note["blocks"][0]["text"],
        json!(format!(
            "Permission rules in force in {ws} (deny wins, then ask, then allow, then the tool's default):
  deny  run_command(rm *)  from the project file {ws}/.sidechat/config.toml
  allow run_command(echo *)  from the config file {config}
  allow run_command(echo hi *)  from the answers saved for this workspace (id {first})
  allow run_command(touch *)  from the answers saved for this workspace (id {second})
Answer a prompt \"always in this workspace\" to save an allow rule here; permissions/remove deletes a saved one.",
            ws = workspace.display(),
            config = config.display(),
            first = ids[0],
            second = ids[1],
        ))
    );
    daemon.close().await;
}
