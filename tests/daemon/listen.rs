//! `sidechat serve --listen`: WebSocket clients beside the stdio one, who may connect, and
//! many clients on one session.

use std::path::{Path, PathBuf};
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sidechat::client::Connection;
use sidechat::protocol::{
    ApprovalDecision, ApprovalRespond, ClientInfo, Event, Initialize, InitializeParams,
    Initialized, InitializedParams, SessionCreate, SessionCreateParams, SessionEventParams,
    SessionState, SessionSubscribe, SessionSubscribeResult, SessionTranscript,
    SessionTranscriptParams, SessionUnsubscribe, SessionUnsubscribeResult,
};
use sidechat::rpc::framing::Framing;
use sidechat::rpc::listen::discovery::{self, ServeFile};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::harness::{Daemon, Scratch, answer, command, json_of, kinds, sid};

/// A guard against a hung daemon, not a performance assertion.
pub(crate) const HANG_GUARD: Duration = Duration::from_secs(60);

/// The runtime folder of the scratch's daemons: `serve.json` goes in its `sidechat/`.
pub(crate) fn runtime_dir(scratch: &Scratch) -> PathBuf {
    scratch.dir.path().join("run")
}

pub(crate) fn serve_file(scratch: &Scratch) -> PathBuf {
    runtime_dir(scratch).join("sidechat/serve.json")
}

/// `sidechat serve --listen 127.0.0.1:0` with `env`, its stdio client initialised, and the
/// serve file it wrote once it listens.
pub(crate) async fn start_listening(
    scratch: &Scratch,
    env: &[(&str, String)],
) -> (Daemon, ServeFile) {
    start_listening_at(scratch, env, "127.0.0.1:0").await
}

/// [`start_listening`] on `addr` (`host:port` or `unix:PATH`).
pub(crate) async fn start_listening_at(
    scratch: &Scratch,
    env: &[(&str, String)],
    addr: &str,
) -> (Daemon, ServeFile) {
    let mut command = command(&scratch.db(), env);
    command
        .args(["--listen", addr])
        .env("XDG_RUNTIME_DIR", runtime_dir(scratch));
    let (conn, notes) = Connection::spawn(command, Framing::Line).expect("spawn sidechat");
    let daemon = Daemon { conn, notes };
    initialize(&daemon).await;
    let file = wait_for_serve_file(&serve_file(scratch)).await;
    (daemon, file)
}

/// Reads the serve file once it is there.
pub(crate) async fn wait_for_serve_file(path: &Path) -> ServeFile {
    let wait = async {
        loop {
            if let Ok(file) = discovery::read(path) {
                return file;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(HANG_GUARD, wait)
        .await
        .expect("the daemon never wrote its serve file")
}

pub(crate) async fn initialize(daemon: &Daemon) {
    daemon
        .call::<Initialize>(InitializeParams {
            client_info: Some(ClientInfo {
                name: "tests".into(),
                version: None,
            }),
            protocol_version: Some(1),
            capabilities: None,
        })
        .await;
    daemon.notify::<Initialized>(InitializedParams {}).await;
}

/// A WebSocket client of the daemon that wrote `file`, initialised.
pub(crate) async fn attach(file: &ServeFile) -> Daemon {
    let (conn, notes) =
        tokio::time::timeout(HANG_GUARD, Connection::attach(&file.url, &file.token))
            .await
            .expect("attaching hung")
            .expect("attach");
    let daemon = Daemon { conn, notes };
    initialize(&daemon).await;
    daemon
}

/// The HTTP status a WebSocket handshake to `url` with `headers` is answered with (101 when
/// the socket opens).
async fn handshake(url: &str, headers: &[(&str, String)]) -> u16 {
    let mut request = url.into_client_request().unwrap();
    for (name, value) in headers {
        let name = tokio_tungstenite::tungstenite::http::HeaderName::from_bytes(name.as_bytes());
        request
            .headers_mut()
            .insert(name.unwrap(), value.parse().unwrap());
    }
    let attempt = tokio::time::timeout(HANG_GUARD, tokio_tungstenite::connect_async(request))
        .await
        .expect("the handshake hung");
    match attempt {
        Ok((_, response)) => response.status().as_u16(),
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => response.status().as_u16(),
        Err(e) => panic!("the handshake failed: {e}"),
    }
}

/// A handshake: its name, URL and headers.
type Case<'a> = (&'a str, String, Vec<(&'a str, String)>);

#[tokio::test]
async fn only_a_client_with_the_token_from_the_daemons_own_address_is_served() {
    let scratch = Scratch::new();
    let (daemon, file) = start_listening(&scratch, &[]).await;
    let authority = file
        .url
        .trim_start_matches("ws://")
        .trim_end_matches('/')
        .to_string();
    let bearer = format!("Bearer {}", file.token);
    let with_query = format!("{}?token={}", file.url, file.token);
    let cases: Vec<Case> = vec![
        ("no token", file.url.clone(), vec![]),
        (
            "wrong token",
            file.url.clone(),
            vec![("authorization", format!("Bearer {}", "0".repeat(64)))],
        ),
        (
            "wrong token in the query",
            format!("{}?token=abc", file.url),
            vec![],
        ),
        (
            "right token",
            file.url.clone(),
            vec![("authorization", bearer.clone())],
        ),
        ("right token in the query", with_query.clone(), vec![]),
        (
            "another Host (DNS rebinding)",
            file.url.clone(),
            vec![
                ("authorization", bearer.clone()),
                ("host", "attacker.example:80".into()),
            ],
        ),
        (
            "another page's Origin",
            with_query.clone(),
            vec![("origin", "http://attacker.example".into())],
        ),
        (
            "the daemon's own Origin",
            with_query,
            vec![("origin", format!("http://{authority}"))],
        ),
    ];
    let mut got = Vec::new();
    for (name, url, headers) in &cases {
        got.push((*name, handshake(url, headers).await));
    }
    assert_eq!(
        got,
        vec![
            ("no token", 401),
            ("wrong token", 401),
            ("wrong token in the query", 401),
            ("right token", 101),
            ("right token in the query", 101),
            ("another Host (DNS rebinding)", 403),
            ("another page's Origin", 403),
            ("the daemon's own Origin", 101),
        ]
    );
    // The file holding the token is its owner's alone.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(serve_file(&scratch))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    assert_eq!(file.token.len(), 64);
    daemon.close().await;
    // A daemon that ends takes its serve file with it.
    assert!(!serve_file(&scratch).exists());
}

#[tokio::test]
async fn an_address_that_is_not_loopback_is_refused_unless_allowed() {
    let scratch = Scratch::new();
    let run = |extra: &[&str]| {
        let mut command = crate::harness::clean_command(&scratch.home());
        command
            .arg("serve")
            .arg("--db")
            .arg(scratch.db())
            .args(["--listen", "192.0.2.1:0"])
            .args(extra)
            .env("XDG_RUNTIME_DIR", runtime_dir(&scratch))
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        command
    };
    let output = tokio::time::timeout(HANG_GUARD, run(&[]).output())
        .await
        .unwrap()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        (
            output.status.code(),
            stderr.contains("not a loopback address")
        ),
        (Some(2), true),
        "{stderr}"
    );
    assert!(stderr.contains("--allow-remote"), "{stderr}");
    // With --allow-remote the address is tried (and here cannot be bound: it is not this
    // machine's), so the refusal above was the loopback rule.
    let output = tokio::time::timeout(HANG_GUARD, run(&["--allow-remote"]).output())
        .await
        .unwrap()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("not a loopback address"), "{stderr}");
    assert!(!serve_file(&scratch).exists());
}

/// A session whose one turn asks to write a file, then answers.
fn approval_script(scratch: &Scratch) -> Vec<(&'static str, String)> {
    scratch.replay(json!({"turns": [
        {"toolCalls": [{"name": "write_file", "input": {"path": "f.txt", "content": "x\n"}}]},
        {"text": "Wrote f.txt."},
    ]}))
}

/// `events` as JSON, for whole comparisons between clients.
fn as_json(events: &[SessionEventParams]) -> Vec<Value> {
    events.iter().map(json_of).collect()
}

#[tokio::test]
async fn two_websocket_clients_and_the_stdio_client_see_one_stream_and_one_approval() {
    let scratch = Scratch::new();
    let (mut stdio, file) = start_listening(&scratch, &approval_script(&scratch)).await;
    let mut first = attach(&file).await;
    let mut second = attach(&file).await;
    // The first creates the session (and so receives its events); the second subscribes.
    let session = first
        .call::<SessionCreate>(scratch.replay_session())
        .await
        .id;
    let subscribed = second.call::<SessionSubscribe>(sid(&session)).await;
    assert_eq!(subscribed, SessionSubscribeResult { last_seq: 0 });
    second.send(&session, "write f.txt").await;
    let (asked_stdio, approval) = stdio.until_approval().await;
    let (asked_first, approval_first) = first.until_approval().await;
    let (asked_second, approval_second) = second.until_approval().await;
    assert_eq!(
        (approval_first.as_str(), approval_second.as_str()),
        (approval.as_str(), approval.as_str())
    );
    assert_eq!(as_json(&asked_first), as_json(&asked_stdio));
    assert_eq!(as_json(&asked_second), as_json(&asked_stdio));
    // Answered in one, resolved in all.
    first
        .call::<ApprovalRespond>(answer(&approval, ApprovalDecision::Allow))
        .await;
    let rest_stdio = stdio.until_finished().await;
    let rest_first = first.until_finished().await;
    let rest_second = second.until_finished().await;
    assert_eq!(as_json(&rest_first), as_json(&rest_stdio));
    assert_eq!(as_json(&rest_second), as_json(&rest_stdio));
    let resolved = rest_stdio
        .iter()
        .filter(|e| matches!(&e.event, Event::ApprovalResolved { .. }))
        .count();
    assert_eq!(resolved, 1, "{:?}", kinds(&rest_stdio));
    // The seqs are the session's own: one after another, on every connection alike.
    let seqs: Vec<u64> = asked_stdio
        .iter()
        .chain(&rest_stdio)
        .map(|e| e.seq)
        .collect();
    let expected: Vec<u64> = (seqs[0]..seqs[0] + seqs.len() as u64).collect();
    assert_eq!(seqs, expected);
    // Unsubscribed, the second hears nothing more of the session; the first still does.
    assert_eq!(
        second.call::<SessionUnsubscribe>(sid(&session)).await,
        SessionUnsubscribeResult { subscribed: true }
    );
    assert_eq!(
        second.call::<SessionUnsubscribe>(sid(&session)).await,
        SessionUnsubscribeResult { subscribed: false }
    );
    first.send(&session, "again").await;
    first.until_finished().await;
    stdio.until_finished().await;
    assert!(second.notes.try_recv().is_err());
    // Subscribing to a session that does not exist is refused and subscribes to nothing.
    let refused = second
        .try_call::<SessionSubscribe>(sid("no-such-session"))
        .await
        .unwrap_err();
    assert_eq!(refused.code, -32001);
    drop((first, second));
    stdio.close().await;
}

#[tokio::test]
async fn a_client_dropped_mid_run_reconnects_and_refetches_from_its_last_seq() {
    let scratch = Scratch::new();
    let (mut stdio, file) = start_listening(&scratch, &approval_script(&scratch)).await;
    let mut client = attach(&file).await;
    let session = client
        .call::<SessionCreate>(scratch.replay_session())
        .await
        .id;
    client.send(&session, "write f.txt").await;
    let (seen, approval) = client.until_approval().await;
    let last_seq = seen.last().map(|e| e.seq).unwrap();
    // The client goes away while the run waits for its approval: the run waits on.
    drop(client);
    let mut client = attach(&file).await;
    // `lastSeq` is the last committed entry's; the client saw streamed events past it.
    let subscribed = client.call::<SessionSubscribe>(sid(&session)).await;
    assert!(subscribed.last_seq > 0, "{subscribed:?}");
    let missed = client
        .call::<SessionTranscript>(SessionTranscriptParams {
            session_id: session.clone(),
            after_seq: Some(last_seq),
            before_seq: None,
            limit: None,
        })
        .await;
    assert_eq!(missed.state, SessionState::AwaitingApproval);
    let pending: Vec<&str> = missed
        .pending_approvals
        .iter()
        .map(|a| a.approval_id.as_str())
        .collect();
    assert_eq!(pending, vec![approval.as_str()]);
    client
        .call::<ApprovalRespond>(answer(&approval, ApprovalDecision::Allow))
        .await;
    let after = client.until_finished().await;
    assert!(
        after.iter().all(|e| e.seq > last_seq),
        "{:?}",
        kinds(&after)
    );
    let stdio_after: Vec<SessionEventParams> = stdio
        .until_finished()
        .await
        .into_iter()
        .filter(|e| e.seq > last_seq)
        .collect();
    assert_eq!(
        as_json(&after),
        as_json(&stdio_after),
        "the reconnected client sees the rest of the run"
    );
    assert_eq!(
        std::fs::read_to_string(scratch.workspace().join("f.txt")).unwrap(),
        "x\n"
    );
    // `shutdown` from a WebSocket client ends nothing but its own say.
    client
        .conn
        .request("shutdown", Value::Null)
        .await
        .unwrap()
        .unwrap();
    let again = attach(&file).await;
    again
        .call::<SessionTranscript>(SessionTranscriptParams {
            session_id: session.clone(),
            after_seq: None,
            before_seq: None,
            limit: None,
        })
        .await;
    drop((client, again));
    stdio.close().await;
}

#[tokio::test]
async fn bad_params_on_a_websocket_get_the_same_error_as_on_stdio() {
    let scratch = Scratch::new();
    let (stdio, file) = start_listening(&scratch, &[]).await;
    let client = attach(&file).await;
    let ws = client
        .conn
        .request("session/get", json!({"sessionId": 7}))
        .await
        .unwrap()
        .unwrap_err();
    let direct = stdio
        .conn
        .request("session/get", json!({"sessionId": 7}))
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(ws, direct);
    assert_eq!(ws.code, -32602);
    let unknown = client
        .conn
        .request("no/such", json!({}))
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(unknown.code, -32601);
    let _ = client
        .call::<SessionCreate>(SessionCreateParams::default())
        .await;
    drop(client);
    stdio.close().await;
}

/// `sidechat chat --db <db> ARGS` in the scratch workspace, with the scratch's runtime folder;
/// its exit code, stdout and stderr.
pub(crate) async fn chat(scratch: &Scratch, args: &[&str]) -> (i32, String, String) {
    let mut command = crate::harness::clean_command(&scratch.home()).into_std();
    command
        .current_dir(scratch.workspace())
        .env("XDG_RUNTIME_DIR", runtime_dir(scratch))
        .arg("chat")
        .arg("--db")
        .arg(scratch.db())
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let output = tokio::time::timeout(
        HANG_GUARD,
        tokio::task::spawn_blocking(move || command.output()),
    )
    .await
    .expect("the chat hung")
    .unwrap()
    .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test]
async fn chat_attaches_to_a_listening_daemon_and_spawns_one_only_when_none_listens() {
    let scratch = Scratch::new();
    // Nothing listens: --attach says so; auto spawns a daemon of its own.
    let (status, _, err) = chat(&scratch, &["--attach", "-p", "hi"]).await;
    assert_eq!(status, 2, "{err}");
    assert!(err.contains("no listening daemon"), "{err}");
    let (status, out, err) = chat(&scratch, &["-p", "hi"]).await;
    assert_eq!(status, 0, "{out}\n{err}");

    let (mut stdio, _file) = start_listening(&scratch, &[]).await;
    for args in [&["--attach", "-p", "hi"][..], &["-p", "hi"][..]] {
        let (status, out, err) = chat(&scratch, args).await;
        assert_eq!(status, 0, "{args:?}: {out}\n{err}");
        // The run was this daemon's: its stdio client saw it end.
        let events = stdio.until_finished().await;
        let finished = events.last().map(|e| json_of(&e.event)["kind"].clone());
        assert_eq!(finished, Some(json!("runFinished")), "{args:?}");
    }
    // `--connection spawn` leaves the listening daemon alone.
    let (status, out, err) = chat(&scratch, &["--connection", "spawn", "-p", "hi"]).await;
    assert_eq!(status, 0, "{out}\n{err}");
    assert!(stdio.notes.try_recv().is_err());
    stdio.close().await;
}
