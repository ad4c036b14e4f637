//! `sidechat attach`: an editor speaking `Content-Length` frames on stdio shares a listening
//! daemon through the bridge.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sidechat::client::Connection;
use sidechat::protocol::{
    ClientInfo, Initialize, InitializeParams, Initialized, InitializedParams, SessionCreate,
    SessionCreateParams,
};
use sidechat::rpc::framing::Framing;

use crate::harness::{Daemon, Scratch, clean_command, json_of};
use crate::listen::{HANG_GUARD, runtime_dir, start_listening};

/// `sidechat attach --db <db> ARGS` with the scratch's runtime folder.
fn attach_command(scratch: &Scratch, args: &[&str]) -> tokio::process::Command {
    let mut command = clean_command(&scratch.home());
    command
        .arg("attach")
        .arg("--db")
        .arg(scratch.db())
        .args(args)
        .env("XDG_RUNTIME_DIR", runtime_dir(scratch));
    command
}

/// A bridge spoken to as an editor speaks to `sidechat serve`, initialised.
async fn bridge(scratch: &Scratch) -> Daemon {
    let (conn, notes) = Connection::spawn(attach_command(scratch, &[]), Framing::ContentLength)
        .expect("spawn sidechat attach");
    let bridge = Daemon { conn, notes };
    let init = bridge
        .call::<Initialize>(InitializeParams {
            client_info: Some(ClientInfo {
                name: "editor".into(),
                version: None,
            }),
            protocol_version: Some(1),
            capabilities: None,
        })
        .await;
    assert!(!init.accounts.is_empty(), "{init:?}");
    bridge.notify::<Initialized>(InitializedParams {}).await;
    bridge
}

#[tokio::test]
async fn an_editor_on_stdio_shares_a_listening_daemon_through_the_bridge() {
    let scratch = Scratch::new();
    let (mut stdio, _file) = start_listening(&scratch, &[]).await;
    let mut editor = bridge(&scratch).await;
    let session = editor
        .call::<SessionCreate>(SessionCreateParams::default())
        .await
        .id;
    editor.send(&session, "hi").await;
    let through_bridge = editor.until_finished().await;
    let on_stdio = stdio.until_finished().await;
    assert_eq!(
        through_bridge.iter().map(json_of).collect::<Vec<Value>>(),
        on_stdio.iter().map(json_of).collect::<Vec<Value>>()
    );
    // Errors come back as the daemon gives them.
    let bad = editor
        .conn
        .request("session/get", json!({"sessionId": 7}))
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(bad.code, -32602);
    // A frame that is not JSON is answered with a parse error, and the bridge goes on.
    editor
        .conn
        .write_raw(b"Content-Length: 5\r\n\r\nnope!")
        .await
        .unwrap();
    let parse_error = editor.next_note().await;
    assert_eq!(parse_error["error"]["code"], json!(-32700), "{parse_error}");
    // `shutdown` and `exit` end the bridge (0), not the daemon: another editor attaches.
    assert_eq!(editor.close().await, 0);
    let mut other = bridge(&scratch).await;
    // The daemon goes away: the bridge ends too, and says it was the daemon (1).
    assert_eq!(stdio.close().await, 0);
    let status = tokio::time::timeout(HANG_GUARD, other.process().wait())
        .await
        .expect("the bridge outlived its daemon")
        .unwrap();
    assert_eq!(status.code(), Some(1));
}

#[tokio::test]
async fn attach_says_so_when_no_daemon_listens() {
    let scratch = Scratch::new();
    let mut command = attach_command(&scratch, &[]);
    command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let output = tokio::time::timeout(HANG_GUARD, command.output())
        .await
        .expect("attach hung")
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no listening daemon"), "{stderr}");
}
