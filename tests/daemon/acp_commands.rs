//! `sidechat acp` offers a session's custom slash commands in `available_commands_update`, and
//! sends the list again when a command file changes.

use agent_client_protocol_schema::v1::AGENT_METHOD_NAMES;
use pretty_assertions::assert_eq;
use serde_json::json;

use crate::acp_client::Agent;
use crate::harness::Scratch;

#[tokio::test]
async fn custom_commands_are_offered_and_offered_again_when_a_file_changes() {
    let scratch = Scratch::new();
    let commands = scratch.workspace().join(".sidechat/commands");
    std::fs::create_dir_all(&commands).unwrap();
    std::fs::write(
        commands.join("review.md"),
        "---\ndescription: Review a file\nargument-hint: <path>\n---\nReview $1.",
    )
    .unwrap();
    let mut agent = Agent::spawn(&scratch.db(), &[]);
    agent
        .request(AGENT_METHOD_NAMES.initialize, json!({"protocolVersion": 1}))
        .await;
    let created = agent
        .request(
            AGENT_METHOD_NAMES.session_new,
            json!({"cwd": scratch.workspace(), "mcpServers": []}),
        )
        .await;
    assert!(created["sessionId"].is_string(), "{created}");
    let builtin = [
        "cost",
        "model",
        "system",
        "clear",
        "compact",
        "new-context",
        "instructions",
        "undo",
        "rewind",
        "fork",
        "help",
    ]
    .map(String::from);
    let with = |extra: &[&str]| {
        let mut names = builtin.to_vec();
        names.extend(extra.iter().map(|s| s.to_string()));
        names
    };
    assert_eq!(agent.next_commands().await, with(&["review"]));

    std::fs::write(commands.join("fix.md"), "Fix the tests.").unwrap();
    assert_eq!(agent.next_commands().await, with(&["fix", "review"]));
}
