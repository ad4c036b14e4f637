//! `sidechat sessions prune`: deletes the sessions left untouched for a while, through the
//! daemon's `session/delete` (so a session's delegated tasks go with it), and, when asked,
//! shrinks the database file afterwards.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::{Context, anyhow};

use super::daemon::Daemon;
use super::plural;
use crate::protocol::{SessionDelete, SessionIdParams, SessionState, SessionSummary};

/// What a prune does with one listed session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Updated since the cut-off.
    Recent,
    /// Old, but its run is still going (or waits for an approval): a prune never stops one.
    Busy,
    Delete,
}

fn verdict(session: &SessionSummary, cutoff: SystemTime) -> anyhow::Result<Verdict> {
    let updated = humantime::parse_rfc3339(&session.updated_at)
        .with_context(|| format!("session {}: unreadable updatedAt", session.id))?;
    Ok(if updated >= cutoff {
        Verdict::Recent
    } else if matches!(
        session.state,
        SessionState::Running | SessionState::AwaitingApproval
    ) {
        Verdict::Busy
    } else {
        Verdict::Delete
    })
}

/// Deletes the sessions not updated for `older_than`, telling on stderr what it did.
pub(super) async fn prune(daemon: &Daemon, older_than: Duration) -> anyhow::Result<()> {
    let cutoff = SystemTime::now()
        .checked_sub(older_than)
        .ok_or_else(|| anyhow!("--older-than reaches before the epoch"))?;
    let (mut deleted, mut busy) = (0u64, Vec::new());
    for session in daemon.sessions(None).await? {
        match verdict(&session, cutoff)? {
            Verdict::Recent => {}
            Verdict::Busy => busy.push(session.id),
            Verdict::Delete => {
                let answer = daemon
                    .call::<SessionDelete>(SessionIdParams {
                        session_id: session.id,
                    })
                    .await?;
                deleted += u64::from(answer.deleted);
            }
        }
    }
    eprintln!("deleted {}", plural(deleted, "session", "sessions"));
    for id in &busy {
        eprintln!("left {id}: its run is still going");
    }
    Ok(())
}

/// Rewrites the database without its free pages, once the daemon that pruned it has exited.
pub(super) fn vacuum(db: Option<&Path>) -> anyhow::Result<()> {
    let path = match db {
        Some(db) => db.to_path_buf(),
        None => crate::config::default_data_dir()
            .context("neither XDG_DATA_HOME nor HOME is set; pass --db")?
            .join("sidechat.db"),
    };
    let before = size(&path);
    crate::store::Store::open(&path)?.vacuum()?;
    eprintln!(
        "vacuumed {}: {} → {} MB",
        path.display(),
        megabytes(before),
        megabytes(size(&path))
    );
    Ok(())
}

/// The bytes of the database and its WAL.
fn size(db: &Path) -> u64 {
    let mut wal = PathBuf::from(db).into_os_string();
    wal.push("-wal");
    [db.to_path_buf(), PathBuf::from(wal)]
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum()
}

fn megabytes(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn summary(updated_at: &str, state: SessionState) -> SessionSummary {
        serde_json::from_value(serde_json::json!({
            "id": "ses_1", "title": "t", "account": "demo", "model": "demo",
            "updatedAt": updated_at, "state": state,
            "tokens": 0, "unpricedRequests": 0,
        }))
        .unwrap()
    }

    #[test]
    fn old_idle_sessions_are_deleted_and_old_running_ones_left() {
        let cutoff = humantime::parse_rfc3339("2026-01-01T00:00:00Z").unwrap();
        let cases = [
            ("2025-12-31T23:59:59.999Z", SessionState::Idle),
            ("2025-12-31T23:59:59.999Z", SessionState::Unanswered),
            ("2025-06-01T00:00:00.000Z", SessionState::Running),
            ("2025-06-01T00:00:00.000Z", SessionState::AwaitingApproval),
            ("2026-01-01T00:00:00.000Z", SessionState::Idle),
            ("2026-03-01T00:00:00.000Z", SessionState::Running),
        ];
        let verdicts: Vec<Verdict> = cases
            .iter()
            .map(|(at, state)| verdict(&summary(at, *state), cutoff).unwrap())
            .collect();
        assert_eq!(
            verdicts,
            [
                Verdict::Delete,
                Verdict::Delete,
                Verdict::Busy,
                Verdict::Busy,
                Verdict::Recent,
                Verdict::Recent
            ]
        );
    }
}
