//! `serve --listen --web`: the chat page served from the daemon's own address, who may fetch
//! it, and `sidechat web`, which finds or starts a daemon serving it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use pretty_assertions::assert_eq;
use sidechat::rpc::listen::discovery::{self, ServeFile};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::harness::{Scratch, clean_command, command};

/// A guard against a hung daemon, not a performance assertion.
const HANG_GUARD: Duration = Duration::from_secs(60);

/// A daemon listening without stdio, with its serve file and log.
struct Listening {
    child: tokio::process::Child,
    file: ServeFile,
    log: PathBuf,
}

impl Listening {
    /// `host:port`.
    fn authority(&self) -> String {
        authority(&self.file)
    }
}

fn authority(file: &ServeFile) -> String {
    file.url
        .trim_start_matches("ws://")
        .trim_end_matches('/')
        .to_string()
}

/// `sidechat serve --listen 127.0.0.1:0 --no-stdio` (with `--web` when `web`), its serve file
/// in `<scratch>/<name>/sidechat/`, logging everything (`debug`) to `<scratch>/<name>.log`.
async fn listen(scratch: &Scratch, name: &str, web: bool) -> Listening {
    let runtime = scratch.dir.path().join(name);
    let log = scratch.dir.path().join(format!("{name}.log"));
    let mut command = command(&scratch.db(), &[("SIDECHAT_LOG", "debug".into())]);
    command
        .args(["--listen", "127.0.0.1:0", "--no-stdio", "--log-file"])
        .arg(&log)
        .env("XDG_RUNTIME_DIR", &runtime)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    if web {
        command.arg("--web");
    }
    let child = command.spawn().expect("spawn sidechat serve");
    let file = wait_for_serve_file(&runtime.join("sidechat/serve.json"), |_| true).await;
    Listening { child, file, log }
}

/// The serve file at `path` once it is there and `wanted` holds of it.
async fn wait_for_serve_file(path: &Path, wanted: impl Fn(&ServeFile) -> bool) -> ServeFile {
    let wait = async {
        loop {
            if let Ok(file) = discovery::read(path)
                && wanted(&file)
            {
                return file;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(HANG_GUARD, wait)
        .await
        .expect("no serve file")
}

/// What an HTTP `GET` was answered with.
#[derive(Debug)]
struct Answer {
    status: u16,
    content_type: Option<String>,
    body: Vec<u8>,
}

/// `GET target` on `authority` with `headers` (a `Host` naming `authority` unless given), as a
/// browser sends it.
async fn get(authority: &str, target: &str, headers: &[(&str, String)]) -> Answer {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(authority).await.unwrap();
        let mut request = format!("GET {target} HTTP/1.1\r\nConnection: close\r\n");
        if !headers
            .iter()
            .any(|(name, _)| name.eq_ignore_ascii_case("host"))
        {
            request.push_str(&format!("Host: {authority}\r\n"));
        }
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.unwrap();
        answer
    };
    let answer = tokio::time::timeout(HANG_GUARD, exchange)
        .await
        .expect("the request hung");
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("no end of headers");
    let head = String::from_utf8_lossy(&answer[..split]).to_string();
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let content_type = lines.find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("content-type")
            .then(|| value.trim().to_string())
    });
    Answer {
        status,
        content_type,
        body: answer[split + 4..].to_vec(),
    }
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

/// The built page as the repository holds it.
fn dist(file: &str) -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("editors/web/dist")
            .join(file),
    )
    .unwrap()
}

/// A `GET`: its name, the daemon asked, the target and the headers.
type Request<'a> = (&'a str, &'a Listening, String, Vec<(&'a str, String)>);

#[tokio::test]
async fn the_page_is_served_with_web_only_and_only_its_own_origin_reaches_the_daemon() {
    let scratch = Scratch::new();
    let web = listen(&scratch, "web", true).await;
    let plain = listen(&scratch, "plain", false).await;
    let (here, token) = (web.authority(), web.file.token.clone());
    let with_token = format!("/?token={token}");
    let attacker = ("Host", "attacker.example".to_string());
    let cases: Vec<Request> = vec![
        ("the page", &web, with_token.clone(), vec![]),
        ("its script", &web, "/app.js".into(), vec![]),
        ("its stylesheet", &web, "/app.css".into(), vec![]),
        ("the page without the token", &web, "/".into(), vec![]),
        (
            "the page with a wrong token",
            &web,
            "/?token=0".into(),
            vec![],
        ),
        (
            "another path",
            &web,
            format!("/etc/passwd?token={token}"),
            vec![],
        ),
        (
            "the page by another Host (DNS rebinding)",
            &web,
            with_token.clone(),
            vec![attacker.clone()],
        ),
        (
            "its script by another Host",
            &web,
            "/app.js".into(),
            vec![attacker],
        ),
        (
            "its script for another site's page",
            &web,
            "/app.js".into(),
            vec![("Origin", "http://attacker.example".into())],
        ),
        (
            "without --web: the page",
            &plain,
            format!("/?token={}", plain.file.token),
            vec![],
        ),
        (
            "without --web: its script",
            &plain,
            "/app.js".into(),
            vec![],
        ),
    ];
    let mut got = Vec::new();
    let mut bodies = Vec::new();
    for (name, daemon, target, headers) in &cases {
        let answer = get(&daemon.authority(), target, headers).await;
        if answer.status == 200 {
            bodies.push(answer.body.clone());
        }
        got.push((*name, answer.status, answer.content_type));
    }
    let html = Some("text/html; charset=utf-8".to_string());
    let text = Some("text/plain; charset=utf-8".to_string());
    assert_eq!(
        got,
        vec![
            ("the page", 200, html),
            (
                "its script",
                200,
                Some("text/javascript; charset=utf-8".into())
            ),
            (
                "its stylesheet",
                200,
                Some("text/css; charset=utf-8".into())
            ),
            ("the page without the token", 401, None),
            ("the page with a wrong token", 401, None),
            ("another path", 404, text),
            ("the page by another Host (DNS rebinding)", 403, None),
            ("its script by another Host", 403, None),
            ("its script for another site's page", 403, None),
            // jsonrpsee's answer to a request that is not a WebSocket handshake.
            ("without --web: the page", 403, Some("text/plain".into())),
            ("without --web: its script", 401, None),
        ]
    );
    assert!(
        bodies == vec![dist("index.html"), dist("app.js"), dist("app.css")],
        "the files served are not the built page"
    );

    // The page's WebSocket: its own origin is admitted; the same daemon named otherwise, or
    // another site, is not.
    let socket = format!("{}?token={token}", web.file.url);
    let port = here.rsplit_once(':').unwrap().1;
    let origins = [
        format!("http://{here}"),
        format!("http://localhost:{port}"),
        "http://attacker.example".to_string(),
    ];
    let mut admitted = Vec::new();
    for origin in &origins {
        admitted.push(handshake(&socket, &[("origin", origin.clone())]).await);
    }
    assert_eq!(admitted, vec![101, 403, 403]);

    // The token was in the query of most of those requests; it is in no log line.
    let log = std::fs::read_to_string(&web.log).unwrap();
    assert!(log.contains("refused a connection"), "{log}");
    assert!(!log.contains(&token), "the token is in the log");
    drop((web.child, plain.child));
}

/// Runs `sidechat web` as a user in `home` would, with the runtime folder `runtime`; its
/// standard output.
async fn sidechat_web(home: &Path, runtime: &Path, db: &Path, workspace: &Path) -> String {
    let mut command = clean_command(home);
    command
        .arg("web")
        .arg("--db")
        .arg(db)
        .arg("--workspace")
        .arg(workspace)
        .env("XDG_RUNTIME_DIR", runtime)
        .stdin(std::process::Stdio::null());
    let output = tokio::time::timeout(HANG_GUARD, command.output())
        .await
        .expect("sidechat web hung")
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    String::from_utf8(output.stdout).unwrap()
}

#[tokio::test]
async fn sidechat_web_starts_a_daemon_serving_the_page_then_attaches_to_it() {
    let scratch = Scratch::new();
    // A listening daemon on the same database that does not serve the page.
    let plain = listen(&scratch, "run", false).await;
    let runtime = scratch.dir.path().join("run");
    let serve_file = runtime.join("sidechat/serve.json");
    let workspace = scratch.dir.path().join("ws");
    let home = crate::harness::home_for(&scratch.db());

    let printed = sidechat_web(&home, &runtime, &scratch.db(), &workspace).await;
    let started = discovery::read(&serve_file).unwrap();
    assert_ne!(started.pid, plain.file.pid);
    let url = format!(
        "http://{}/?token={}&workspace={}",
        authority(&started),
        started.token,
        workspace.display()
    );
    assert_eq!(printed, format!("{url}\n"));
    let page = get(
        &authority(&started),
        &format!("/?token={}", started.token),
        &[],
    )
    .await;
    assert_eq!(
        (page.status, page.content_type),
        (200, Some("text/html; charset=utf-8".into()))
    );

    // Again: the daemon serving the page is found, not another started.
    let again = sidechat_web(&home, &runtime, &scratch.db(), &workspace).await;
    assert_eq!(again, printed);
    assert_eq!(discovery::read(&serve_file).unwrap(), started);

    // The started daemon logs to the data folder, never the token; SIGTERM ends it.
    let log = std::fs::read_to_string(home.join(".local/share/sidechat/logs/web.log")).unwrap();
    assert!(!log.contains(&started.token), "the token is in the log");
    let pid = rustix::process::Pid::from_raw(started.pid as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let gone = async {
        while serve_file.exists() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(HANG_GUARD, gone)
        .await
        .expect("the started daemon did not end on SIGTERM");
    drop(plain.child);
}
