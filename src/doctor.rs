//! `sidechat doctor`: what a user needs to say what is wrong, without starting a daemon or
//! changing anything. The database is opened read-only (never migrated, never repaired), and
//! accounts are shown by name, kind, model and where their key comes from, never the key.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags, OptionalExtension};

use crate::config::{Account, AccountKind, Config, ConfigError};
use crate::store::{LeaseRow, SCHEMA_VERSION};

/// How long an account's server may take to answer before it counts as unreachable.
const REACH_TIMEOUT: Duration = Duration::from_secs(5);

/// What `sidechat doctor` looks at.
pub struct Checkup {
    pub db: PathBuf,
    /// The config file looked for, if any place for one is known.
    pub config_path: Option<PathBuf>,
    pub config: Result<Config, ConfigError>,
    /// The largest database whose integrity is checked ([`INTEGRITY_LIMIT`] by default);
    /// `None` checks any (`--integrity`).
    pub integrity_limit: Option<u64>,
}

/// The largest database `doctor` checks the integrity of unless asked (`--integrity`): the
/// check reads every page, seconds for a year of history, while the rest of the checkup reads
/// only the file's header and a few rows.
pub const INTEGRITY_LIMIT: u64 = 256 * 1024 * 1024;

/// The printed report and the problems found in it.
pub struct Report {
    pub text: String,
    pub problems: Vec<String>,
}

impl Checkup {
    pub async fn run(self) -> Report {
        let mut report = Report {
            text: String::new(),
            problems: Vec::new(),
        };
        report.line(format!("sidechat {}", env!("CARGO_PKG_VERSION")));
        report.line("");
        report.line("Database");
        database(&self.db, self.integrity_limit, &mut report);
        report.line("");
        report.line("Configuration");
        let config = match (&self.config_path, self.config) {
            (Some(path), Ok(config)) if path.exists() => {
                report.field("file", format!("{} (read)", path.display()));
                Some(config)
            }
            (Some(path), Ok(config)) => {
                report.field("file", format!("none ({} does not exist)", path.display()));
                Some(config)
            }
            (None, Ok(config)) => {
                report.field("file", "none (neither XDG_CONFIG_HOME nor HOME is set)");
                Some(config)
            }
            (_, Err(e)) => {
                report.field("file", format!("unreadable: {e}"));
                report
                    .problems
                    .push(format!("the configuration is unreadable: {e}"));
                None
            }
        };
        if let Some(config) = config {
            report.line("");
            report.line("Accounts");
            accounts(&config, &mut report).await;
            report.line("");
            report.line("Sandbox");
            let status = crate::sandbox::status(&config.sandbox, crate::sandbox::support());
            report.field("commands", status.detail);
        }
        report.line("");
        match report.problems.len() {
            0 => report.line("No problems found."),
            n => {
                let listed = report.problems.join("; ");
                report.line(format!(
                    "{n} problem{}: {listed}",
                    if n == 1 { "" } else { "s" }
                ));
            }
        }
        report
    }
}

impl Report {
    fn line(&mut self, text: impl AsRef<str>) {
        self.text.push_str(text.as_ref());
        self.text.push('\n');
    }

    fn field(&mut self, name: &str, value: impl AsRef<str>) {
        let _ = writeln!(self.text, "  {name:<12}{}", value.as_ref());
    }
}

fn database(path: &Path, integrity_limit: Option<u64>, report: &mut Report) {
    report.field("path", path.display().to_string());
    if !path.exists() {
        report.field(
            "state",
            "not created yet (the first `sidechat serve` or `sidechat acp` creates it)",
        );
        return;
    }
    report.field("size", sizes(path));
    report.field("permissions", permissions(path));
    let conn = match Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    ) {
        Ok(conn) => conn,
        Err(e) => {
            report.field("open", format!("cannot open: {e}"));
            report
                .problems
                .push(format!("the database cannot be opened: {e}"));
            return;
        }
    };
    let _ = conn.busy_timeout(Duration::from_secs(5));
    match conn.pragma_query_value(None, "user_version", |r| r.get::<_, i64>(0)) {
        Ok(version) if version == SCHEMA_VERSION => {
            report.field("schema", format!("version {version} (current)"));
        }
        Ok(version) if version < SCHEMA_VERSION => report.field(
            "schema",
            format!(
                "version {version}; this build upgrades it to {SCHEMA_VERSION} when it next opens it"
            ),
        ),
        Ok(version) => {
            report.field(
                "schema",
                format!("version {version}, newer than this build's {SCHEMA_VERSION}"),
            );
            report.problems.push(format!(
                "the database was written by a newer sidechat (schema {version}); this build refuses it"
            ));
        }
        Err(e) => {
            report.field("schema", format!("unreadable: {e}"));
            report.problems.push(format!("the database is unreadable: {e}"));
            return;
        }
    }
    let size = std::fs::metadata(path).map_or(0, |m| m.len());
    match integrity_limit.filter(|limit| size > *limit) {
        Some(_) => report.field(
            "integrity",
            format!(
                "not checked ({} to read; `sidechat doctor --integrity` checks it)",
                bytes(size)
            ),
        ),
        None => check_integrity(&conn, report),
    }
    match leases(&conn) {
        Ok(None) => report.field("leases", "none (this database keeps no leases)"),
        Ok(Some((_, leases))) if leases.is_empty() => report.field("leases", "none held"),
        Ok(Some((held, leases))) => {
            let ended = leases.len() - held;
            let summary = match (held, ended) {
                (held, 0) => format!("{held} held:"),
                (0, ended) => format!("none held, {ended} released:"),
                (held, ended) => format!("{held} held, {ended} released:"),
            };
            report.field("leases", summary);
            for lease in leases {
                report.line(format!("    {lease}"));
            }
        }
        Err(e) => report.field("leases", format!("unreadable: {e}")),
    }
}

/// `PRAGMA integrity_check`, reported.
fn check_integrity(conn: &Connection, report: &mut Report) {
    match integrity(conn) {
        Ok(findings) if findings == ["ok"] => report.field("integrity", "ok"),
        Ok(findings) => {
            report.field("integrity", format!("{} finding(s):", findings.len()));
            for finding in findings.iter().take(20) {
                report.line(format!("    {finding}"));
            }
            report
                .problems
                .push("the database failed its integrity check".into());
        }
        Err(e) => {
            report.field("integrity", format!("not checked: {e}"));
            report
                .problems
                .push(format!("the integrity check failed to run: {e}"));
        }
    }
}

/// The database's size, with its `-wal` and `-shm` files.
fn sizes(path: &Path) -> String {
    let size = |suffix: &str| {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        std::fs::metadata(PathBuf::from(name)).map(|m| m.len()).ok()
    };
    let parts: Vec<(&str, u64)> = [("file", ""), ("-wal", "-wal"), ("-shm", "-shm")]
        .into_iter()
        .filter_map(|(label, suffix)| size(suffix).map(|n| (label, n)))
        .collect();
    let total: u64 = parts.iter().map(|(_, n)| n).sum();
    let detail: Vec<String> = parts
        .iter()
        .map(|(label, n)| format!("{label} {}", bytes(*n)))
        .collect();
    format!("{} ({})", bytes(total), detail.join(", "))
}

fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["bytes", "KiB", "MiB", "GiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} bytes")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(unix)]
fn permissions(path: &Path) -> String {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| {
        std::fs::metadata(p)
            .map(|m| format!("{:04o}", m.permissions().mode() & 0o7777))
            .unwrap_or_else(|e| format!("unknown ({e})"))
    };
    let folder = path.parent().filter(|p| !p.as_os_str().is_empty());
    match folder {
        Some(folder) => format!("file {}, folder {}", mode(path), mode(folder)),
        None => format!("file {}", mode(path)),
    }
}

#[cfg(not(unix))]
fn permissions(_: &Path) -> String {
    "not shown on this system".into()
}

/// `PRAGMA integrity_check`'s findings: `["ok"]` when there are none.
fn integrity(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    let mut statement = conn.prepare("PRAGMA integrity_check")?;
    let rows = statement.query_map([], |row| row.get::<_, String>(0))?;
    rows.collect()
}

/// The run leases in the database: how many are held, and one line each; `None` when it
/// keeps none (a database from before leases).
///
/// A row stays after its lease ends when another daemon took it over, or when its daemon was
/// killed: those are told as released, as the daemons themselves treat them, not as held.
fn leases(conn: &Connection) -> rusqlite::Result<Option<(usize, Vec<String>)>> {
    let table: Option<String> = conn
        .query_row(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'run_leases'",
            [],
            |row| row.get(0),
        )
        .optional()?;
    if table.is_none() {
        return Ok(None);
    }
    let now = crate::util::now_ms();
    let mut statement = conn.prepare(
        "SELECT session_id, run_id, owner, pid, host, acquired_at, heartbeat_at, expires_at
         FROM run_leases ORDER BY acquired_at",
    )?;
    let rows = statement.query_map([], |row| {
        Ok(LeaseRow {
            session_id: row.get(0)?,
            run_id: row.get(1)?,
            owner: row.get(2)?,
            pid: row.get(3)?,
            host: row.get(4)?,
            acquired_at: row.get(5)?,
            heartbeat_at: row.get(6)?,
            expires_at: row.get(7)?,
            stop_requested: false,
        })
    })?;
    let mut held = 0;
    let mut lines = Vec::new();
    for lease in rows {
        let lease = lease?;
        let daemon = format!(
            "daemon {} (pid {}{})",
            lease.owner,
            lease.pid,
            lease
                .host
                .as_deref()
                .map(|h| format!(" on {h}"))
                .unwrap_or_default()
        );
        let state = if lease.expires_at <= 0 {
            format!("released (last held by {daemon})")
        } else if lease.is_live() {
            held += 1;
            format!(
                "{daemon}, last heartbeat {} ago, expires in {}",
                seconds(now - lease.heartbeat_at),
                seconds(lease.expires_at - now)
            )
        } else if lease.owner_is_gone() {
            format!(
                "released (its daemon {}, pid {}{}, is no longer running)",
                lease.owner,
                lease.pid,
                lease
                    .host
                    .as_deref()
                    .map(|h| format!(" on {h}"))
                    .unwrap_or_default()
            )
        } else {
            format!(
                "{daemon}, last heartbeat {} ago, expired {} ago (the next daemon to run the session takes it over)",
                seconds(now - lease.heartbeat_at),
                seconds(now - lease.expires_at)
            )
        };
        lines.push(format!(
            "session {}, run {}: {state}",
            lease.session_id, lease.run_id
        ));
    }
    Ok(Some((held, lines)))
}

fn seconds(ms: i64) -> String {
    format!("{:.1} s", ms.max(0) as f64 / 1000.0)
}

async fn accounts(config: &Config, report: &mut Report) {
    let checks = config.accounts.iter().map(|account| async move {
        let reach = reachability(account).await;
        (account, reach)
    });
    for (account, reach) in futures::future::join_all(checks).await {
        let default = if account.name == config.default_account {
            " (default)"
        } else {
            ""
        };
        report.line(format!("  {}{default}", account.name));
        report.line(format!(
            "    {}, model {}",
            account.kind.name(),
            account.default_model
        ));
        if let Some(remote) = remote(&account.kind) {
            report.line(format!("    server {}", shown_url(&remote.base_url)));
            report.line(format!(
                "    key    {}",
                match remote.key_env.as_deref() {
                    Some(name) if remote.api_key().is_some() => format!("from ${name} (set)"),
                    Some(name) => format!("from ${name} (not set)"),
                    None => "none configured".into(),
                }
            ));
        }
        match reach {
            Reach::Local(what) => report.line(format!("    reach  {what}")),
            Reach::Answered { status, elapsed } => report.line(format!(
                "    reach  reachable (HTTP {status} in {} ms)",
                elapsed.as_millis()
            )),
            Reach::Unreachable(why) => {
                report.line(format!("    reach  unreachable: {why}"));
                report
                    .problems
                    .push(format!("account {} is unreachable: {why}", account.name));
            }
        }
    }
    // Named by the configuration but left out of it, with what to fix.
    for unavailable in &config.unavailable {
        report.line(format!("  {}", unavailable.name));
        report.line(format!("    cannot be used: {}", unavailable.reason));
        report.problems.push(format!(
            "account {} cannot be used: {}",
            unavailable.name, unavailable.reason
        ));
    }
}

fn remote(kind: &AccountKind) -> Option<&crate::config::Remote> {
    match kind {
        AccountKind::Anthropic(remote) | AccountKind::OpenAi { remote, .. } => Some(remote),
        AccountKind::Demo { .. } | AccountKind::Replay { .. } => None,
    }
}

/// A base URL without what may be secret in it (a password, a query).
fn shown_url(base_url: &str) -> String {
    match reqwest::Url::parse(base_url) {
        Ok(mut url) => {
            let _ = url.set_password(None);
            let _ = url.set_username("");
            url.set_query(None);
            url.set_fragment(None);
            url.to_string()
        }
        Err(_) => "(not a valid URL)".into(),
    }
}

enum Reach {
    /// Served in this process.
    Local(String),
    /// The server answered, whatever it said: the account's server is reachable.
    Answered {
        status: u16,
        elapsed: Duration,
    },
    Unreachable(String),
}

/// Whether the account's server answers at all: one GET of its base URL, without the key
/// (any HTTP answer counts, even an error status; the model is not asked anything).
async fn reachability(account: &Account) -> Reach {
    let remote = match &account.kind {
        AccountKind::Demo { .. } => return Reach::Local("offline model, always available".into()),
        AccountKind::Replay { script, .. } => {
            return match script.exists() {
                true => Reach::Local(format!("replays {}", script.display())),
                false => Reach::Unreachable(format!("{} does not exist", script.display())),
            };
        }
        AccountKind::Anthropic(remote) | AccountKind::OpenAi { remote, .. } => remote,
    };
    let url = match reqwest::Url::parse(&remote.base_url) {
        Ok(url) => url,
        Err(e) => return Reach::Unreachable(format!("the server's URL is not valid: {e}")),
    };
    let client = match crate::http_client::builder() {
        Ok(builder) => builder
            .connect_timeout(REACH_TIMEOUT)
            .timeout(REACH_TIMEOUT)
            .build(),
        Err(e) => return Reach::Unreachable(format!("no TLS configuration: {e}")),
    };
    let client = match client {
        Ok(client) => client,
        Err(e) => return Reach::Unreachable(root_cause(&e)),
    };
    let started = Instant::now();
    match client.get(url).send().await {
        Ok(response) => Reach::Answered {
            status: response.status().as_u16(),
            elapsed: started.elapsed(),
        },
        Err(e) if e.is_timeout() => {
            Reach::Unreachable(format!("no answer within {} s", REACH_TIMEOUT.as_secs()))
        }
        Err(e) => Reach::Unreachable(root_cause(&e.without_url())),
    }
}

/// The innermost cause of an error ("Connection refused (os error 111)"), which says more
/// than the outer "error sending request".
fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = error;
    while let Some(source) = cause.source() {
        cause = source;
    }
    cause.to_string()
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    #[test]
    fn urls_are_shown_without_secrets() {
        assert_eq!(
            shown_url("https://user:pw@example.com/v1?key=sk-123#x"),
            "https://example.com/v1"
        );
        assert_eq!(shown_url("not a url"), "(not a valid URL)");
    }

    /// The integrity lines of a checkup of a new database with `integrity_limit`.
    fn integrity_lines(integrity_limit: Option<u64>) -> Vec<String> {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("sidechat.db");
        drop(crate::store::Store::open(&db).unwrap());
        let mut report = Report {
            text: String::new(),
            problems: Vec::new(),
        };
        database(&db, integrity_limit, &mut report);
        let size = bytes(std::fs::metadata(&db).unwrap().len());
        report
            .text
            .lines()
            .filter(|line| line.trim_start().starts_with("integrity"))
            .map(|line| line.replace(&size, "SIZE"))
            .collect()
    }

    #[test]
    fn a_database_past_the_limit_is_not_read_whole_unless_asked() {
        assert_eq!(
            integrity_lines(Some(0)),
            ["  integrity   not checked (SIZE to read; `sidechat doctor --integrity` checks it)"]
        );
        assert_eq!(integrity_lines(Some(INTEGRITY_LIMIT)), ["  integrity   ok"]);
        assert_eq!(integrity_lines(None), ["  integrity   ok"]);
    }

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(
            [bytes(0), bytes(1023), bytes(1536), bytes(5 * 1024 * 1024)],
            ["0 bytes", "1023 bytes", "1.5 KiB", "5.0 MiB"].map(String::from)
        );
    }
}
