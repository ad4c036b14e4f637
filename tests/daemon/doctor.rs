//! `sidechat doctor` against a real database and real servers: what it prints about the
//! database and each account, never a key, and its exit code.

use pretty_assertions::assert_eq;
use sidechat::protocol::{SessionCreateParams, SessionGet};
use sidechat::store::SCHEMA_VERSION;

use crate::harness::{Daemon, Options, Scratch, clean_command, home_for, json_of};
use crate::harness::{env, gated, session, text};
use crate::upstream::{Reply, start};

const KEY: &str = "sk-doctor-secret-4242";

/// `sidechat doctor --db <db>`: its exit code and what it printed.
async fn doctor(scratch: &Scratch) -> (i32, String) {
    let output = clean_command(&home_for(&scratch.db()))
        .env("LOCAL_KEY", KEY)
        .env("DOWN_KEY", KEY)
        .arg("doctor")
        .arg("--db")
        .arg(scratch.db())
        .output()
        .await
        .expect("run sidechat doctor");
    let text = String::from_utf8(output.stdout).expect("UTF-8 output");
    (output.status.code().unwrap_or(-1), text)
}

/// The report with what changes from run to run replaced: the scratch folder, sizes,
/// timings and ports.
fn redacted(text: &str, scratch: &Scratch) -> String {
    let text = text.replace(&scratch.dir.path().display().to_string(), "<dir>");
    let timing = regex::Regex::new(r"in \d+ ms").unwrap();
    let port = regex::Regex::new(r"127\.0\.0\.1:\d+").unwrap();
    text.lines()
        .map(|line| {
            if line.starts_with("  size ") {
                "  size        <size>".to_string()
            } else {
                port.replace_all(&timing.replace_all(line, "in <ms> ms"), "127.0.0.1:<port>")
                    .into_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// What the report says about the account without its key, checked to name the variable.
fn unavailable_reason(text: &str) -> String {
    let reason = text
        .lines()
        .find_map(|line| line.strip_prefix("    cannot be used: "))
        .unwrap_or_else(|| panic!("no account that cannot be used:\n{text}"));
    assert!(reason.contains("NOKEY_KEY"), "{reason}");
    reason.to_string()
}

/// What the report says of the sandbox, which depends on the machine's kernel
/// (`sandbox::doctor_says_whether_commands_run_sandboxed` checks it).
fn sandbox_line(text: &str) -> String {
    let start = text.find("  commands    ").expect("a sandbox line") + "  commands    ".len();
    text[start..].lines().next().unwrap().to_string()
}

#[tokio::test]
async fn doctor_reports_the_database_and_each_account_without_keys() {
    let scratch = Scratch::new();
    // Before any daemon has run there is no database, and that is not a problem.
    let (code, text) = doctor(&scratch).await;
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("not created yet"), "{text}");

    let daemon = Daemon::start(&scratch.db(), Options::default()).await;
    let session = daemon.create_session(SessionCreateParams::default()).await;
    daemon.send(&session, "hello").await;
    assert_eq!(daemon.close().await, 0);

    let upstream = start(vec![Reply::status(404, r#"{"error":"no such path"}"#)]);
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_port = closed.local_addr().unwrap().port();
    drop(closed);
    scratch.write_config(&format!(
        r#"
default_account = "local"

[accounts.local]
kind = "openai"
base_url = "{}/v1?key={KEY}"
api_key_env = "LOCAL_KEY"
default_model = "local-model"

[accounts.down]
kind = "anthropic"
base_url = "http://user:{KEY}@127.0.0.1:{closed_port}"
api_key_env = "DOWN_KEY"
default_model = "claude-test"

[accounts.nokey]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
api_key_env = "NOKEY_KEY"
default_model = "m"
"#,
        upstream.url
    ));
    let (code, text) = doctor(&scratch).await;
    assert!(!text.contains(KEY), "a key was printed:\n{text}");
    let expected = format!(
        "sidechat {version}

Database
  path        <dir>/data/sidechat.db
  size        <size>
  permissions file 0600, folder 0700
  schema      version {SCHEMA_VERSION} (current)
  integrity   ok
  leases      none held

Configuration
  file        <dir>/data/home/.config/sidechat/config.toml (read)

Accounts
  demo
    demo, model demo
    reach  offline model, always available
  down
    anthropic, model claude-test
    server http://127.0.0.1:<port>/
    key    from $DOWN_KEY (set)
    reach  unreachable: Connection refused (os error 111)
  local (default)
    openai, model local-model
    server http://127.0.0.1:<port>/v1
    key    from $LOCAL_KEY (set)
    reach  reachable (HTTP 404 in <ms> ms)
  nokey
    cannot be used: {nokey}

Sandbox
  commands    {sandbox}

2 problems: account down is unreachable: Connection refused (os error 111); account nokey cannot be used: {nokey}",
        version = env!("CARGO_PKG_VERSION"),
        nokey = unavailable_reason(&text),
        sandbox = sandbox_line(&text),
    );
    assert_eq!(redacted(&text, &scratch), expected);
    assert_eq!(code, 1);
    // The reachability probe carried no key either.
    let seen = upstream.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        (seen[0].header("authorization"), seen[0].header("x-api-key")),
        (None, None)
    );

    // A database from a newer build is a problem, said so.
    let conn = rusqlite::Connection::open(scratch.db()).unwrap();
    conn.pragma_update(None, "user_version", SCHEMA_VERSION + 5)
        .unwrap();
    drop(conn);
    scratch.write_config("");
    let (code, text) = doctor(&scratch).await;
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains(&format!(
            "version {}, newer than this build's {SCHEMA_VERSION}",
            SCHEMA_VERSION + 5
        )),
        "{text}"
    );
}

#[tokio::test]
async fn doctor_names_the_lease_of_a_run_in_progress_and_none_once_it_ends() {
    let (gate, held) = std::sync::mpsc::channel();
    let upstream = start(vec![gated(
        vec![text("Thinking.")],
        held,
        vec![text(" Done.")],
    )]);
    let scratch = Scratch::new();
    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(env(&upstream.url))).await;
    let session = session(&daemon, &scratch).await;
    let run_id = json_of(daemon.send(&session, "think").await)["runId"]
        .as_str()
        .unwrap()
        .to_string();
    daemon
        .events_until(|e| matches!(e, sidechat::protocol::Event::TextDelta { .. }))
        .await;

    // What the database says, read through the store the daemon itself uses.
    let held_leases = sidechat::store::Store::open(&scratch.db())
        .unwrap()
        .held_leases()
        .unwrap();
    assert_eq!(
        held_leases
            .iter()
            .map(|l| (l.session_id.as_str(), l.run_id.as_str()))
            .collect::<Vec<_>>(),
        vec![(session.as_str(), run_id.as_str())]
    );
    let lease = &held_leases[0];
    let (_, report) = doctor(&scratch).await;
    let timing = regex::Regex::new(r"\d+\.\d s").unwrap();
    let shown: Vec<String> = report
        .lines()
        .skip_while(|line| !line.starts_with("  leases"))
        .take(2)
        .map(|line| timing.replace_all(line, "<s>").into_owned())
        .collect();
    assert_eq!(
        shown,
        vec![
            "  leases      1 held:".to_string(),
            format!(
                "    session {session}, run {run_id}: daemon {} (pid {}{}), last heartbeat <s> ago, expires in <s>",
                lease.owner,
                lease.pid,
                lease
                    .host
                    .as_ref()
                    .map(|h| format!(" on {h}"))
                    .unwrap_or_default(),
            ),
        ],
        "{report}"
    );

    // Once the run has finished, its lease is given back.
    gate.send(()).unwrap();
    daemon.until_finished().await;
    let (_, report) = doctor(&scratch).await;
    assert!(report.contains("\n  leases      none held\n"), "{report}");
    assert_eq!(daemon.close().await, 0);
}

/// The lease lines of a report, durations replaced.
fn lease_lines(report: &str) -> Vec<String> {
    let timing = regex::Regex::new(r"\d+\.\d s").unwrap();
    report
        .lines()
        .skip_while(|line| !line.starts_with("  leases"))
        .take_while(|line| line.starts_with("  leases") || line.starts_with("    "))
        .map(|line| timing.replace_all(line, "<s>").into_owned())
        .collect()
}

#[tokio::test]
async fn doctor_shows_the_lease_of_a_killed_run_as_released() {
    let (_gate, held) = std::sync::mpsc::channel::<()>();
    let upstream = start(vec![gated(vec![text("Thinking.")], held, vec![])]);
    let scratch = Scratch::new();
    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(env(&upstream.url))).await;
    let session = session(&daemon, &scratch).await;
    let run_id = json_of(daemon.send(&session, "think").await)["runId"]
        .as_str()
        .unwrap()
        .to_string();
    daemon
        .events_until(|e| matches!(e, sidechat::protocol::Event::TextDelta { .. }))
        .await;
    let lease = sidechat::store::Store::open(&scratch.db())
        .unwrap()
        .held_leases()
        .unwrap()
        .remove(0);
    daemon.process().kill().await.unwrap();
    daemon.process().wait().await.unwrap();

    // Killed: the lease is still in the database, but nothing holds it.
    let (_, report) = doctor(&scratch).await;
    let host = lease
        .host
        .as_ref()
        .map(|h| format!(" on {h}"))
        .unwrap_or_default();
    assert_eq!(
        lease_lines(&report),
        vec![
            "  leases      none held, 1 released:".to_string(),
            format!(
                "    session {session}, run {run_id}: released (its daemon {}, pid {}{host}, is no longer running)",
                lease.owner, lease.pid
            ),
        ],
        "{report}"
    );

    // The next daemon closes the run and releases the lease in its own name.
    let daemon = Daemon::start(&scratch.db(), Options::with_env(env(&upstream.url))).await;
    daemon
        .call::<SessionGet>(crate::harness::sid(&session))
        .await;
    assert_eq!(daemon.close().await, 0);
    let (_, report) = doctor(&scratch).await;
    let lines = lease_lines(&report);
    assert!(
        lines == ["  leases      none held"]
            || (lines[0] == "  leases      none held, 1 released:"
                && lines[1].starts_with(&format!("    session {session}, run {run_id}: released"))),
        "{report}"
    );
    assert!(!report.contains("expired"), "{report}");
}
