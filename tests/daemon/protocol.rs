//! Handshake, session methods, paging and persistence, in both framings.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sidechat::protocol::{
    ClientInfo, Exit, Initialize, InitializeParams, Initialized, InitializedParams, Notification,
    Request, SessionCreate, SessionCreateParams, SessionDelete, SessionGet, SessionList,
    SessionListParams, SessionUpdate, SessionUpdateParams, Shutdown,
};
use sidechat::rpc::framing::Framing;

use crate::harness::{Daemon, Options, Scratch, json_of, sid};

async fn crud_round_trip(framing: Framing) {
    let scratch = Scratch::new();
    let daemon = Daemon::spawn(
        &scratch.db(),
        Options {
            framing,
            ..Options::default()
        },
    );
    let init = json_of(
        daemon
            .call::<Initialize>(InitializeParams {
                client_info: Some(ClientInfo {
                    name: "t".into(),
                    version: Some("1".into()),
                }),
                protocol_version: Some(1),
                capabilities: None,
            })
            .await,
    );
    assert_eq!(init["serverInfo"]["name"], "sidechat");
    assert_eq!(init["protocolVersion"], 1);
    assert_eq!(init["defaultAccount"], "demo");
    assert_eq!(
        init["accounts"],
        json!([{"name": "demo", "kind": "demo", "defaultModel": "demo", "isDemo": true, "models": ["demo"]}])
    );
    daemon.notify::<Initialized>(InitializedParams {}).await;

    let root = scratch.workspace().display().to_string();
    let created = json_of(
        daemon
            .call::<SessionCreate>(SessionCreateParams {
                title: Some("First".into()),
                workspace_root: Some(root.clone()),
                system_prompt: Some("Be brief.".into()),
                ..SessionCreateParams::default()
            })
            .await,
    );
    let id = created["id"].as_str().unwrap().to_string();
    assert_eq!(
        json!({
            "title": created["title"], "account": created["account"], "model": created["model"],
            "systemPrompt": created["systemPrompt"], "workspaceRoot": created["workspaceRoot"],
            "maxSteps": created["maxSteps"], "state": created["state"], "lastSeq": created["lastSeq"],
            "changedFiles": created["changedFiles"],
        }),
        json!({
            "title": "First", "account": "demo", "model": "demo", "systemPrompt": "Be brief.",
            "workspaceRoot": root, "maxSteps": 25, "state": "idle", "lastSeq": 0, "changedFiles": [],
        })
    );
    assert_eq!(json_of(daemon.call::<SessionGet>(sid(&id)).await), created);

    let updated = json_of(
        daemon
            .call::<SessionUpdate>(SessionUpdateParams {
                session_id: id.clone(),
                title: Some("Renamed".into()),
                system_prompt: Some(String::new()),
                ..SessionUpdateParams::default()
            })
            .await,
    );
    assert_eq!(
        (
            updated["title"].clone(),
            updated.get("systemPrompt").cloned()
        ),
        (json!("Renamed"), None)
    );

    let listed = json_of(
        daemon
            .call::<SessionList>(SessionListParams::default())
            .await,
    );
    assert_eq!(listed["sessions"][0]["id"], json!(id));
    assert_eq!(listed["sessions"][0]["title"], "Renamed");
    assert_eq!(listed.get("nextCursor"), None);

    let transcript = daemon.transcript(&id).await;
    assert_eq!(
        transcript,
        json!({"sessionId": id, "state": "idle", "entries": [], "hasMore": false, "lastSeq": 0, "pendingApprovals": [], "pendingInterjections": []})
    );

    assert_eq!(
        json_of(daemon.call::<SessionDelete>(sid(&id)).await),
        json!({"deleted": true})
    );
    let gone = daemon.try_call::<SessionGet>(sid(&id)).await.unwrap_err();
    assert_eq!(gone.code, -32001);
    assert_eq!(daemon.close().await, 0);
}

#[tokio::test]
async fn crud_over_line_framing() {
    crud_round_trip(Framing::Line).await;
}

#[tokio::test]
async fn crud_over_content_length_framing() {
    crud_round_trip(Framing::ContentLength).await;
}

#[tokio::test]
async fn list_pages_newest_first_and_filters_by_root() {
    let scratch = Scratch::new();
    let daemon = Daemon::start(&scratch.db(), Options::default()).await;
    // Roots must exist: `session/create` refuses one that does not.
    let root_named = |name: &str| {
        let root = scratch.dir.path().join(name);
        std::fs::create_dir_all(&root).unwrap();
        root.display().to_string()
    };
    let (even, odd) = (root_named("even"), root_named("odd"));
    let mut made = Vec::new();
    for i in 0..5 {
        let root = if i % 2 == 0 { &even } else { &odd };
        made.push(
            daemon
                .create_session(SessionCreateParams {
                    title: Some(format!("s{i}")),
                    workspace_root: Some(root.clone()),
                    ..SessionCreateParams::default()
                })
                .await,
        );
    }
    let mut seen = Vec::new();
    let mut cursor = None;
    let mut pages = 0;
    loop {
        let params = SessionListParams {
            cursor: cursor.take(),
            limit: Some(2),
            ..SessionListParams::default()
        };
        let page = json_of(daemon.call::<SessionList>(params).await);
        pages += 1;
        seen.extend(
            page["sessions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["id"].as_str().unwrap().to_string()),
        );
        match page.get("nextCursor") {
            Some(next) => cursor = Some(next.as_str().expect("a string cursor").to_string()),
            None => break,
        }
    }
    made.reverse();
    assert_eq!((seen, pages), (made.clone(), 3));

    let odd = json_of(
        daemon
            .call::<SessionList>(SessionListParams {
                workspace_root: Some(odd.clone()),
                ..Default::default()
            })
            .await,
    );
    let odd_ids: Vec<_> = odd["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].clone())
        .collect();
    assert_eq!(odd_ids, vec![json!(made[1]), json!(made[3])]);

    let bad = daemon
        .try_call::<SessionList>(SessionListParams {
            cursor: Some("nonsense".into()),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code, -32602);
    daemon.close().await;
}

#[tokio::test]
async fn sessions_survive_a_restart_and_exit_codes_follow_lsp() {
    let scratch = Scratch::new();
    let daemon = Daemon::start(&scratch.db(), Options::default()).await;
    let id = daemon
        .create_session(SessionCreateParams {
            title: Some("Kept".into()),
            ..Default::default()
        })
        .await;
    assert_eq!(daemon.close().await, 0);

    let daemon = Daemon::start(
        &scratch.db(),
        Options {
            framing: Framing::ContentLength,
            ..Options::default()
        },
    )
    .await;
    let session = json_of(daemon.call::<SessionGet>(sid(&id)).await);
    assert_eq!(session["title"], "Kept");
    // `exit` without `shutdown` is exit code 1.
    daemon.notify::<Exit>(None).await;
    let mut daemon = daemon;
    let status = daemon.process().wait().await.unwrap();
    assert_eq!(status.code(), Some(1));
}

#[tokio::test]
async fn default_database_location_follows_xdg_data_home() {
    let scratch = Scratch::new();
    let data_home = scratch.dir.path().join("xdg");
    let mut command = crate::harness::clean_command(&scratch.home());
    command.arg("serve").env("XDG_DATA_HOME", &data_home);
    let (conn, _notes) = sidechat::client::Connection::spawn(command, Framing::Line).unwrap();
    conn.call::<Initialize>(InitializeParams::default())
        .await
        .unwrap()
        .unwrap();
    conn.call::<SessionCreate>(SessionCreateParams::default())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(conn.close().await.unwrap(), 0);
    assert!(data_home.join("sidechat/sidechat.db").exists());
}

#[tokio::test]
async fn only_frames_reach_stdout_even_with_verbose_logs() {
    let scratch = Scratch::new();
    let log = scratch.dir.path().join("logs/daemon.log");
    let mut command =
        crate::harness::command(&scratch.db(), &[("SIDECHAT_LOG", "trace".to_string())]);
    command.arg("--log-file").arg(&log);
    let output_dir = scratch.dir.path().join("stdout.txt");
    let stdout = std::fs::File::create(&output_dir).unwrap();
    let mut child = command
        .stdin(std::process::Stdio::piped())
        .stdout(stdout)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    use tokio::io::AsyncWriteExt;
    let frames = [
        json!({"jsonrpc": "2.0", "id": 1, "method": Initialize::METHOD}),
        json!({"jsonrpc": "2.0", "id": 2, "method": SessionCreate::METHOD}),
        json!({"jsonrpc": "2.0", "id": 3, "method": Shutdown::METHOD}),
        json!({"jsonrpc": "2.0", "method": Exit::METHOD}),
    ];
    let lines: String = frames.iter().map(|frame| format!("{frame}\n")).collect();
    stdin.write_all(lines.as_bytes()).await.unwrap();
    assert_eq!(child.wait().await.unwrap().code(), Some(0));
    let written = std::fs::read_to_string(&output_dir).unwrap();
    let ids: Vec<Value> = written
        .lines()
        .map(|line| {
            serde_json::from_str::<Value>(line).expect("every stdout line is a JSON frame")["id"]
                .clone()
        })
        .collect();
    assert_eq!(ids, vec![json!(1), json!(2), json!(3)]);
    assert!(
        std::fs::read_to_string(&log)
            .unwrap()
            .contains("serving on stdio")
    );
}

#[tokio::test]
async fn a_database_that_cannot_be_opened_is_reported_on_every_request() {
    let scratch = Scratch::new();
    let blocker = scratch.dir.path().join("not-a-folder");
    std::fs::write(&blocker, "").unwrap();
    let daemon = Daemon::spawn(&blocker.join("sidechat.db"), Options::default());
    let init = json_of(daemon.call::<Initialize>(InitializeParams::default()).await);
    assert_eq!(
        init["serverInfo"]["name"], "sidechat",
        "the handshake does not wait for the store"
    );
    let error = daemon
        .try_call::<SessionList>(SessionListParams::default())
        .await
        .unwrap_err();
    assert_eq!(error.code, -32603);
    assert!(
        error
            .message
            .starts_with("sidechat cannot open its database"),
        "{}",
        error.message
    );
    assert_eq!(daemon.close().await, 0);
}
