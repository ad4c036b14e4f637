//! `workspace/files`: the session's workspace files ranked by a fuzzy match of the query, for
//! `@` completion; ignored files are left out, and a file added later is found.

use pretty_assertions::assert_eq;
use serde_json::json;
use sidechat::protocol::{WorkspaceFiles, WorkspaceFilesParams, WorkspaceFilesResult};

use crate::harness::{Daemon, Options, Scratch};

fn files(params: (&str, &str, Option<u32>)) -> WorkspaceFilesParams {
    WorkspaceFilesParams {
        session_id: params.0.into(),
        query: params.1.into(),
        limit: params.2,
    }
}

#[tokio::test]
async fn files_are_ranked_by_the_query_and_ignored_ones_left_out() {
    let scratch = Scratch::new();
    let ws = scratch.workspace();
    for path in [
        "src/main.rs",
        "src/mentions/mod.rs",
        "tests/daemon/main.rs",
        "docs/main_page.md",
        "benches/domain.rs",
        "README.md",
        "target/debug/main",
        "build.log",
    ] {
        std::fs::create_dir_all(ws.join(path).parent().unwrap()).unwrap();
        std::fs::write(ws.join(path), "").unwrap();
    }
    std::fs::write(ws.join(".gitignore"), "target/\n*.log\n").unwrap();
    let script = json!({"turns": [], "fallback": {"text": "Done."}});
    let daemon = Daemon::start(&scratch.db(), Options::with_env(scratch.replay(script))).await;
    let session = daemon.create_session(scratch.replay_session()).await;

    let answer = daemon
        .call::<WorkspaceFiles>(files((&session, "main", None)))
        .await;
    assert_eq!(
        answer,
        WorkspaceFilesResult {
            session_id: session.clone(),
            files: vec![
                "src/main.rs".into(),
                "tests/daemon/main.rs".into(),
                "docs/main_page.md".into(),
                "benches/domain.rs".into(),
            ],
        }
    );
    let answer = daemon
        .call::<WorkspaceFiles>(files((&session, "", Some(3))))
        .await;
    assert_eq!(answer.files, vec!["README.md", ".gitignore", "src/main.rs"]);

    // A file added since is listed.
    std::fs::write(ws.join("src/mainline.rs"), "").unwrap();
    let answer = daemon
        .call::<WorkspaceFiles>(files((&session, "mainl", None)))
        .await;
    assert_eq!(answer.files, vec!["src/mainline.rs"]);

    let refused = daemon
        .try_call::<WorkspaceFiles>(files((&session, "x", Some(5000))))
        .await
        .unwrap_err();
    assert_eq!(
        (refused.code, refused.message),
        (
            -32602,
            "invalid params: limit: 5000 is more than the 1000 files an answer holds".to_string()
        )
    );
    daemon.close().await;
}
