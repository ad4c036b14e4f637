//! `sidechat web`: the chat page in a browser. Prints the page's address with the daemon's
//! token, from the listening daemon `serve.json` names when that daemon serves the page (on the
//! same database), else from a daemon it starts for the purpose: `sidechat serve --listen
//! 127.0.0.1:0 --no-stdio --web`, detached (its own process group, no terminal, its logs in
//! `<data>/logs/web.log`), which runs until it is sent SIGTERM.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::daemon::listening_daemon;
use crate::rpc::listen::discovery::{self, ServeFile};

/// How long a started daemon may take to write its `serve.json`: opening (and repairing) a
/// large database can take a while; a daemon that fails says so by exiting sooner.
const START_GUARD: Duration = Duration::from_secs(60);

/// How long a daemon may take to answer whether it serves the page.
const PROBE_GUARD: Duration = Duration::from_secs(5);

/// `sidechat web`'s options.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct WebArgs {
    /// The SQLite database of the daemon (default: $XDG_DATA_HOME/sidechat/sidechat.db).
    #[arg(long, env = "SIDECHAT_DB")]
    pub db: Option<PathBuf>,
    /// The folder the page's new chats work in (default: the current folder).
    #[arg(long)]
    pub workspace: Option<PathBuf>,
    /// Also open the page in the default browser.
    #[arg(long)]
    pub open: bool,
}

pub async fn run(args: WebArgs) -> anyhow::Result<i32> {
    let workspace = match args.workspace {
        Some(folder) => folder,
        None => std::env::current_dir().context("cannot tell the current folder")?,
    };
    let workspace = std::path::absolute(&workspace)
        .with_context(|| format!("cannot resolve {}", workspace.display()))?;
    let db = args.db.as_deref();
    let attached = match listening_daemon(db) {
        Ok(file) => serves_page(&file).await.then_some(file),
        Err(e) => {
            tracing::debug!(error = %e, "no listening daemon to attach to");
            None
        }
    };
    let file = match attached {
        Some(file) => file,
        None => start(db).await?,
    };
    let url = page_url(&file, &workspace)?;
    println!("{url}");
    if args.open {
        open_browser(&url);
    }
    Ok(0)
}

/// `http://host:port/` of the daemon whose WebSocket is at `ws://host:port/`.
fn page_address(file: &ServeFile) -> anyhow::Result<String> {
    let authority = file
        .url
        .strip_prefix("ws://")
        .map(|rest| rest.trim_end_matches('/'))
        .with_context(|| format!("the daemon's address {} is not ws://", file.url))?;
    Ok(format!("http://{authority}/"))
}

/// The page's address with the token and the workspace in its query.
fn page_url(file: &ServeFile, workspace: &Path) -> anyhow::Result<String> {
    Ok(format!(
        "{}?token={}&workspace={}",
        page_address(file)?,
        encode(&file.token),
        encode(&workspace.to_string_lossy())
    ))
}

/// Percent-encodes everything but the characters a query value may hold as they are.
fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => {
                out.push(byte as char)
            }
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

/// Whether the daemon `file` names answers and serves the page (it was started with `--web`).
async fn serves_page(file: &ServeFile) -> bool {
    let Ok(address) = page_address(file) else {
        return false;
    };
    let client = crate::http_client::builder().map(|b| b.no_proxy().timeout(PROBE_GUARD).build());
    let Ok(Ok(client)) = client else {
        return false;
    };
    let answer = client
        .get(format!("{address}?token={}", encode(&file.token)))
        .send()
        .await;
    match answer {
        Ok(response) => {
            let html = response
                .headers()
                .get(http::header::CONTENT_TYPE)
                .and_then(|t| t.to_str().ok())
                .is_some_and(|t| t.starts_with("text/html"));
            response.status() == http::StatusCode::OK && html
        }
        Err(e) => {
            tracing::debug!(error = %e, "the listening daemon does not answer");
            false
        }
    }
}

/// Starts a detached daemon serving the page and waits for its `serve.json`.
async fn start(db: Option<&Path>) -> anyhow::Result<ServeFile> {
    let exe = std::env::current_exe().context("cannot find the sidechat executable")?;
    let log = log_file()?;
    let mut command = std::process::Command::new(exe);
    command.args(["serve", "--listen", "127.0.0.1:0", "--no-stdio", "--web"]);
    if let Some(db) = db {
        command.arg("--db").arg(db);
    }
    command
        .arg("--log-file")
        .arg(&log)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // Its own process group: Ctrl-C in this terminal, or the terminal closing, is not for it.
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    let mut child = command
        .spawn()
        .context("cannot start `sidechat serve --web`")?;
    let serve_file = discovery::serve_file_path()?;
    let began = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            bail!(
                "`sidechat serve --web` stopped ({status}) before listening; see {}",
                log.display()
            );
        }
        if let Ok(file) = discovery::read(&serve_file)
            && file.pid == child.id()
        {
            eprintln!(
                "sidechat: started a daemon serving the chat page (pid {}, log {})",
                file.pid,
                log.display()
            );
            return Ok(file);
        }
        if began.elapsed() > START_GUARD {
            bail!(
                "`sidechat serve --web` did not start listening; see {}",
                log.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `<data>/logs/web.log`, in a private folder: the logs tell of every conversation.
fn log_file() -> anyhow::Result<PathBuf> {
    let dir = crate::config::default_data_dir()
        .context("neither XDG_DATA_HOME nor HOME is set")?
        .join("logs");
    crate::private_files::create_dir_all(&dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(dir.join("web.log"))
}

/// Hands `url` to the desktop's browser; a failure is only reported (the address is printed).
fn open_browser(url: &str) {
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    let started = std::process::Command::new(opener)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    if let Err(e) = started {
        eprintln!("sidechat: cannot open a browser with {opener}: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn the_page_url_carries_the_token_and_the_encoded_workspace() {
        let file = ServeFile {
            url: "ws://127.0.0.1:4321/".into(),
            token: "ab12".into(),
            pid: 1,
            db: None,
        };
        assert_eq!(
            page_url(&file, Path::new("/home/me/my project&co")).unwrap(),
            "http://127.0.0.1:4321/?token=ab12&workspace=/home/me/my%20project%26co"
        );
    }
}
