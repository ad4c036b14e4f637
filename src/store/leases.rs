//! `run_leases`: which daemon drives a session's run.
//!
//! Several daemons may share one database (two editor windows on the default file). A run is
//! driven by exactly one of them: the one holding the session's lease, which it renews with a
//! heartbeat. Another daemon leaves a session with a live lease alone: it queues input there
//! for the owner, hands approvals and stops over through the database, and takes the run over
//! (closing it as interrupted) only once the lease has expired, because its owner stopped
//! renewing it (it was killed, or its machine stopped).
//!
//! A lease is taken before the run's row is written and given back only after the run is
//! recorded as finished (or suspended on an approval), so an open run without a live lease
//! belongs to nobody.

use std::time::Duration;

use rusqlite::{OptionalExtension, Row, params};

use super::{Store, StoreResult};
use crate::util::now_ms;

/// Test-only: the lease duration in milliseconds (heartbeats come four times per lease), so
/// tests of a takeover need not wait long. Logged when set.
pub const LEASE_MS_VAR: &str = "SIDECHAT_LEASE_MS";

/// How long a lease lasts without a heartbeat, unless [`LEASE_MS_VAR`] says otherwise.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// One held (or expired but not yet taken over) lease.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseRow {
    pub session_id: String,
    pub run_id: String,
    /// The daemon holding it (see [`Store::owner`]).
    pub owner: String,
    /// The owner's process id, for a person reading `sidechat doctor`.
    pub pid: u32,
    /// Where `pid` means something: this boot of this machine, in this process namespace.
    pub host: Option<String>,
    pub acquired_at: i64,
    pub heartbeat_at: i64,
    pub expires_at: i64,
    /// Another daemon asked the owner to stop the run.
    pub stop_requested: bool,
}

impl LeaseRow {
    /// Whether its owner still holds it: it has not expired, and its owner, when it runs
    /// beside this process, is still running (a daemon killed a moment ago leaves a lease that
    /// would otherwise hold its session for the rest of the lease).
    pub fn is_live(&self) -> bool {
        self.expires_at > now_ms() && !self.owner_is_gone()
    }

    /// Its owner ran on this machine, in this process namespace, and its process is gone. A
    /// reused process id only makes the lease last until it expires.
    pub fn owner_is_gone(&self) -> bool {
        let here = host_identity();
        here.is_some() && self.host.as_deref() == here && !process_runs(self.pid)
    }

    /// How an error names the daemon that holds it.
    pub fn describe_owner(&self) -> String {
        format!(
            "another sidechat process (pid {}, {})",
            self.pid, self.owner
        )
    }
}

/// What taking a lease found.
#[derive(Debug, Clone, PartialEq)]
pub enum LeaseClaim {
    /// Taken. `displaced` is an expired lease of another daemon it replaced: that daemon's run
    /// is abandoned and must be recovered before a new one starts.
    Taken { displaced: Option<LeaseRow> },
    /// Another daemon holds a live lease on the session.
    Held(LeaseRow),
}

pub(super) const COLUMNS: &str =
    "session_id, run_id, owner, pid, acquired_at, heartbeat_at, expires_at, stop_requested, host";

/// A row of [`COLUMNS`].
pub(super) fn lease_row(row: &Row<'_>) -> rusqlite::Result<LeaseRow> {
    Ok(LeaseRow {
        session_id: row.get(0)?,
        run_id: row.get(1)?,
        owner: row.get(2)?,
        pid: row.get(3)?,
        acquired_at: row.get(4)?,
        heartbeat_at: row.get(5)?,
        expires_at: row.get(6)?,
        stop_requested: row.get(7)?,
        host: row.get(8)?,
    })
}

/// Whether process `pid` exists and has not exited (a killed process its parent has not
/// reaped yet is a zombie: gone for this purpose).
fn process_runs(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // `pid (name) state …`: the name may hold spaces and parentheses, so read after the last.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    !matches!(state, Some('Z' | 'X'))
}

/// This boot of this machine and this process namespace, where a process id names one
/// process; `None` where that cannot be known (then only expiry ends a lease).
pub fn host_identity() -> Option<&'static str> {
    static HOST: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    HOST.get_or_init(|| {
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        let namespace = std::fs::read_link("/proc/self/ns/pid").ok()?;
        Some(format!("{}/{}", boot.trim(), namespace.display()))
    })
    .as_deref()
}

pub(super) fn lease_of(
    conn: &rusqlite::Connection,
    session_id: &str,
) -> rusqlite::Result<Option<LeaseRow>> {
    conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM run_leases WHERE session_id = ?1"
    ))?
    .query_row([session_id], lease_row)
    .optional()
}

/// The lease duration [`LEASE_MS_VAR`] sets, if it is set; the bad value otherwise.
pub(super) fn lease_from_env() -> Result<Option<Duration>, String> {
    match std::env::var(LEASE_MS_VAR).ok().filter(|v| !v.is_empty()) {
        None => Ok(None),
        Some(value) => parse_lease_ms(&value).map(Some),
    }
}

/// Milliseconds, at least 100 (a heartbeat comes every quarter of it).
fn parse_lease_ms(value: &str) -> Result<Duration, String> {
    match value.trim().parse::<u64>() {
        Ok(ms) if ms >= 100 => Ok(Duration::from_millis(ms)),
        _ => Err(value.to_string()),
    }
}

impl Store {
    /// This daemon's name in leases and approvals: its process id and a random part, so a
    /// restarted daemon with a reused process id is still someone else.
    pub fn owner(&self) -> &str {
        &self.shared.owner
    }

    /// How long a lease lasts without a heartbeat.
    pub fn lease_duration(&self) -> Duration {
        self.shared.lease
    }

    fn lease_expiry(&self, now: i64) -> i64 {
        now + self.shared.lease.as_millis() as i64
    }

    /// Takes the session's lease for `run_id`, unless another daemon holds a live one. Taking
    /// it over from this daemon's own earlier run (a promoted turn) is allowed.
    pub fn acquire_lease(&self, session_id: &str, run_id: &str) -> StoreResult<LeaseClaim> {
        self.write(|conn| {
            let tx = conn.transaction()?;
            let now = now_ms();
            let existing = lease_of(&tx, session_id)?;
            if let Some(held) = existing
                .as_ref()
                .filter(|l| l.owner != self.owner() && l.is_live())
            {
                return Ok(LeaseClaim::Held(held.clone()));
            }
            tx.execute(
                &format!(
                    "INSERT OR REPLACE INTO run_leases ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6, 0, ?7)"
                ),
                params![
                    session_id,
                    run_id,
                    self.owner(),
                    std::process::id(),
                    now,
                    self.lease_expiry(now),
                    host_identity()
                ],
            )?;
            tx.commit()?;
            Ok(LeaseClaim::Taken {
                displaced: existing.filter(|l| l.owner != self.owner()),
            })
        })
    }

    /// Moves this daemon's lease on a session from one run to the next (a promoted turn is
    /// answered by a new run without letting go of the session); false when it is not held.
    pub fn transfer_lease(&self, session_id: &str, from: &str, to: &str) -> StoreResult<bool> {
        self.write(|conn| {
            let now = now_ms();
            Ok(conn.execute(
                "UPDATE run_leases SET run_id = ?4, heartbeat_at = ?5, expires_at = ?6,
                        stop_requested = 0
                 WHERE session_id = ?1 AND run_id = ?2 AND owner = ?3",
                params![
                    session_id,
                    from,
                    self.owner(),
                    to,
                    now,
                    self.lease_expiry(now)
                ],
            )? > 0)
        })
    }

    /// Gives back this daemon's lease of `run_id`. With `only_if_queue_empty`, keeps it when
    /// input is waiting (queued by another daemon since the run last looked) and answers
    /// false: the owner must deliver or promote it first. Queueing through a lease and giving
    /// it back are each one statement, so no input can slip between.
    pub fn release_lease(
        &self,
        session_id: &str,
        run_id: &str,
        only_if_queue_empty: bool,
    ) -> StoreResult<bool> {
        self.write(|conn| {
            let removed = conn.execute(
                "DELETE FROM run_leases WHERE session_id = ?1 AND run_id = ?2 AND owner = ?3
                   AND (NOT ?4 OR NOT EXISTS (
                        SELECT 1 FROM pending_input
                        WHERE session_id = ?1 AND status IN ('pending', 'leased')))",
                params![session_id, run_id, self.owner(), only_if_queue_empty],
            )?;
            if removed > 0 {
                return Ok(true);
            }
            // Not held (taken over, or never taken) is not "kept".
            let kept = conn
                .query_row(
                    "SELECT 1 FROM run_leases WHERE session_id = ?1 AND run_id = ?2 AND owner = ?3",
                    params![session_id, run_id, self.owner()],
                    |_| Ok(()),
                )
                .optional()?;
            Ok(kept.is_none())
        })
    }

    /// Ends this daemon's lease on a session after it repaired what another daemon left,
    /// keeping the row (expired) in its name: the daemon it was taken from, should it wake up,
    /// finds it lost its run and writes nothing more to it.
    pub fn expire_lease(&self, session_id: &str, run_id: &str) -> StoreResult<()> {
        self.write(|conn| {
            conn.execute(
                "UPDATE run_leases SET expires_at = 0, stop_requested = 0
                 WHERE session_id = ?1 AND run_id = ?2 AND owner = ?3",
                params![session_id, run_id, self.owner()],
            )?;
            Ok(())
        })
    }

    /// The heartbeat: extends every lease this daemon holds; the leases still held, each with
    /// whether another daemon asked for a stop. A lease missing from the answer was lost (it
    /// expired and another daemon took it over).
    pub fn renew_leases(&self) -> StoreResult<Vec<LeaseRow>> {
        self.write(|conn| {
            let now = now_ms();
            let mut stmt = conn.prepare_cached(&format!(
                "UPDATE run_leases SET heartbeat_at = ?2, expires_at = ?3
                 WHERE owner = ?1 AND expires_at > 0
                 RETURNING {COLUMNS}"
            ))?;
            let rows = stmt
                .query_map(
                    params![self.owner(), now, self.lease_expiry(now)],
                    lease_row,
                )?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
    }

    /// The session's lease, live or expired, if any row is left.
    pub fn lease(&self, session_id: &str) -> StoreResult<Option<LeaseRow>> {
        self.read(|conn| Ok(lease_of(conn, session_id)?))
    }

    /// A live lease another daemon holds on the session.
    pub fn foreign_lease(&self, session_id: &str) -> StoreResult<Option<LeaseRow>> {
        Ok(self
            .lease(session_id)?
            .filter(|l| l.owner != self.owner() && l.is_live()))
    }

    /// Every lease row, oldest first, expired ones included: what `sidechat doctor` shows.
    pub fn held_leases(&self) -> StoreResult<Vec<LeaseRow>> {
        self.read(|conn| {
            let mut stmt = conn.prepare(&format!(
                "SELECT {COLUMNS} FROM run_leases ORDER BY acquired_at, session_id"
            ))?;
            let rows = stmt
                .query_map([], lease_row)?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
    }

    /// Asks the daemon driving `run_id` to stop it; false when no live lease of that run is
    /// held (the run ended, or its owner is gone).
    pub fn request_stop(&self, session_id: &str, run_id: &str) -> StoreResult<bool> {
        self.write(|conn| {
            Ok(conn.execute(
                "UPDATE run_leases SET stop_requested = 1
                 WHERE session_id = ?1 AND run_id = ?2 AND expires_at > ?3",
                params![session_id, run_id, now_ms()],
            )? > 0)
        })
    }

    /// Open runs nobody drives any more: no lease, or an expired one. Runs suspended on an
    /// approval are among them; the caller tells them apart.
    pub fn abandoned_runs(&self) -> StoreResult<Vec<super::RunRow>> {
        let mut abandoned = Vec::new();
        for run in self.open_runs()? {
            let driven = self
                .lease(&run.session_id)?
                .is_some_and(|lease| lease.run_id == run.id && lease.is_live());
            if !driven {
                abandoned.push(run);
            }
        }
        Ok(abandoned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::NewSession;
    use pretty_assertions::assert_eq;

    fn session(store: &Store) -> String {
        store
            .insert_session(&NewSession {
                title: "t".into(),
                account: "demo".into(),
                model: "demo".into(),
                system_prompt: None,
                workspace_root: None,
                max_steps: 25,
                cap_usd: None,
                max_seconds: None,
                rollover_secs: None,
            })
            .unwrap()
            .id
    }

    /// Two daemons on one file: two stores opened separately.
    fn two_daemons() -> (tempfile::TempDir, Store, Store) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let a = Store::open(&path).unwrap();
        let b = Store::open(&path).unwrap();
        (dir, a, b)
    }

    #[test]
    fn a_lease_of_a_process_that_is_gone_is_not_live() {
        let (_dir, a, b) = two_daemons();
        let id = session(&a);
        a.acquire_lease(&id, "run_a").unwrap();
        // A process id no process has (above the kernel's limit).
        a.write(|conn| {
            conn.execute("UPDATE run_leases SET pid = 2147483647", [])?;
            Ok(())
        })
        .unwrap();
        let gone = b.lease(&id).unwrap().unwrap();
        assert_eq!(gone.is_live(), host_identity().is_none());
        if host_identity().is_some() {
            assert!(matches!(
                b.acquire_lease(&id, "run_b").unwrap(),
                LeaseClaim::Taken { displaced: Some(_) }
            ));
        }
    }

    #[test]
    fn a_live_lease_is_refused_to_another_daemon_and_named() {
        let (_dir, a, b) = two_daemons();
        assert_ne!(a.owner(), b.owner());
        let id = session(&a);
        assert_eq!(
            a.acquire_lease(&id, "run_a").unwrap(),
            LeaseClaim::Taken { displaced: None }
        );
        let LeaseClaim::Held(held) = b.acquire_lease(&id, "run_b").unwrap() else {
            panic!("b took a live lease");
        };
        assert_eq!(
            (held.run_id.as_str(), held.owner.as_str()),
            ("run_a", a.owner())
        );
        assert_eq!(b.foreign_lease(&id).unwrap(), Some(held.clone()));
        assert_eq!(a.foreign_lease(&id).unwrap(), None);
        assert_eq!(b.held_leases().unwrap(), vec![held]);
    }

    #[test]
    fn an_expired_lease_is_taken_over_and_its_owner_loses_it() {
        let (_dir, a, b) = two_daemons();
        let id = session(&a);
        a.acquire_lease(&id, "run_a").unwrap();
        a.write(|conn| {
            conn.execute("UPDATE run_leases SET expires_at = 0", [])?;
            Ok(())
        })
        .unwrap();
        let LeaseClaim::Taken {
            displaced: Some(displaced),
        } = b.acquire_lease(&id, "run_b").unwrap()
        else {
            panic!("b could not take an expired lease over");
        };
        assert_eq!(displaced.run_id, "run_a");
        // A's heartbeat no longer finds it; B's does.
        assert_eq!(a.renew_leases().unwrap(), vec![]);
        let renewed: Vec<_> = b
            .renew_leases()
            .unwrap()
            .into_iter()
            .map(|l| l.run_id)
            .collect();
        assert_eq!(renewed, vec!["run_b".to_string()]);
    }

    #[test]
    fn a_lease_is_kept_while_input_waits_and_stops_are_passed_on() {
        let (_dir, a, b) = two_daemons();
        let id = session(&a);
        a.acquire_lease(&id, "run_a").unwrap();
        assert!(b.request_stop(&id, "run_a").unwrap());
        assert!(!b.request_stop(&id, "run_other").unwrap());
        assert!(a.renew_leases().unwrap()[0].stop_requested);
        b.insert_pending(&id, "run_a", None, "one more thing")
            .unwrap();
        assert!(!a.release_lease(&id, "run_a", true).unwrap());
        assert!(a.release_lease(&id, "run_a", false).unwrap());
        assert_eq!(a.lease(&id).unwrap(), None);
        // Releasing what is not held is not refused.
        assert!(a.release_lease(&id, "run_a", true).unwrap());
    }

    #[test]
    fn the_lease_duration_setting_is_checked() {
        assert_eq!(parse_lease_ms("2000"), Ok(Duration::from_millis(2000)));
        for bad in ["50", "soon", "-1"] {
            assert_eq!(parse_lease_ms(bad), Err(bad.to_string()));
        }
    }
}
