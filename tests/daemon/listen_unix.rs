//! `sidechat serve --listen unix:PATH`: the WebSocket protocol on a unix socket, private to its
//! owner, replaced when stale, refused when another daemon holds it.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sidechat::protocol::{SessionCreate, SessionCreateParams, SessionList, SessionListParams};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::harness::{Scratch, json_of};
use crate::listen::{
    HANG_GUARD, attach, chat, runtime_dir, serve_file, start_listening_at, wait_for_serve_file,
};

/// A socket in a folder that does not exist yet.
fn socket_path(scratch: &Scratch) -> PathBuf {
    scratch.dir.path().join("sockets/private/sidechat.sock")
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// The HTTP status of a WebSocket handshake on the socket at `path` with `authorization`
/// (101 when the socket opens).
async fn handshake(path: &Path, authorization: Option<&str>) -> u16 {
    let stream = tokio::net::UnixStream::connect(path).await.unwrap();
    let mut request = "ws://localhost/".into_client_request().unwrap();
    if let Some(value) = authorization {
        request
            .headers_mut()
            .insert("authorization", value.parse().unwrap());
    }
    let attempt =
        tokio::time::timeout(HANG_GUARD, tokio_tungstenite::client_async(request, stream))
            .await
            .expect("the handshake hung");
    match attempt {
        Ok((_, response)) => response.status().as_u16(),
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => response.status().as_u16(),
        Err(e) => panic!("the handshake failed: {e}"),
    }
}

#[tokio::test]
async fn a_unix_socket_serves_the_protocol_privately_and_still_asks_for_the_token() {
    let scratch = Scratch::new();
    let path = socket_path(&scratch);
    let (mut stdio, file) =
        start_listening_at(&scratch, &[], &format!("unix:{}", path.display())).await;
    assert_eq!(file.url, format!("ws+unix://{}", path.display()));
    assert_eq!(
        (
            mode(&path),
            mode(path.parent().unwrap()),
            mode(&serve_file(&scratch))
        ),
        (0o600, 0o700, 0o600)
    );
    let bearer = format!("Bearer {}", file.token);
    let wrong = format!("Bearer {}", "0".repeat(64));
    assert_eq!(
        [
            handshake(&path, None).await,
            handshake(&path, Some(&wrong)).await,
            handshake(&path, Some(&bearer)).await,
        ],
        [401, 401, 101]
    );
    // An attached client gets the session's events as the stdio client does.
    let mut client = attach(&file).await;
    let session = client
        .call::<SessionCreate>(SessionCreateParams::default())
        .await
        .id;
    client.send(&session, "hi").await;
    let over_socket = client.until_finished().await;
    let over_stdio = stdio.until_finished().await;
    assert_eq!(
        over_socket.iter().map(json_of).collect::<Vec<Value>>(),
        over_stdio.iter().map(json_of).collect::<Vec<Value>>()
    );
    drop(client);
    assert_eq!(stdio.close().await, 0);
    // A daemon that ends takes its socket and serve file with it.
    assert_eq!(
        (path.exists(), serve_file(&scratch).exists()),
        (false, false)
    );
}

/// `sidechat serve --listen unix:PATH` with no stdin: its exit code and stderr.
async fn serve_once(scratch: &Scratch, path: &Path) -> (Option<i32>, String) {
    let mut command = crate::harness::clean_command(&scratch.home());
    command
        .arg("serve")
        .arg("--db")
        .arg(scratch.db())
        .arg("--listen")
        .arg(format!("unix:{}", path.display()))
        .env("XDG_RUNTIME_DIR", runtime_dir(scratch))
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let output = tokio::time::timeout(HANG_GUARD, command.output())
        .await
        .expect("the daemon hung")
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test]
async fn a_stale_socket_is_replaced_and_a_live_daemons_socket_is_refused() {
    let scratch = Scratch::new();
    let path = socket_path(&scratch);
    // A socket nobody listens on any more, as a killed daemon leaves it.
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(path.exists());
    let (stdio, file) =
        start_listening_at(&scratch, &[], &format!("unix:{}", path.display())).await;
    let client = attach(&file).await;
    // A second daemon on the same path is refused, and the first one goes on serving.
    let (code, stderr) = serve_once(&scratch, &path).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("another daemon listens on it"), "{stderr}");
    let listed = client
        .call::<SessionList>(SessionListParams::default())
        .await;
    assert_eq!(json_of(&listed)["sessions"], json!([]));
    assert_eq!(wait_for_serve_file(&serve_file(&scratch)).await, file);
    drop(client);
    assert_eq!(stdio.close().await, 0);
    assert!(!path.exists());
}

#[tokio::test]
async fn chat_attaches_over_a_unix_socket() {
    let scratch = Scratch::new();
    let path = socket_path(&scratch);
    let (mut stdio, _file) =
        start_listening_at(&scratch, &[], &format!("unix:{}", path.display())).await;
    let (status, out, err) = chat(&scratch, &["--attach", "-p", "hi"]).await;
    assert_eq!(status, 0, "{out}\n{err}");
    // The run was this daemon's: its stdio client saw it end.
    let events = stdio.until_finished().await;
    let finished = events.last().map(|e| json_of(&e.event)["kind"].clone());
    assert_eq!(finished, Some(json!("runFinished")));
    stdio.close().await;
}
