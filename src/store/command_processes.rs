//! `command_processes`: the commands running now, each with the daemon that runs it, so that
//! the next daemon on the file ends what a killed one left (design invariant 9). A row lives
//! from just after the command's shell started until everything it started is killed.

use rusqlite::params;

use super::leases::host_identity;
use super::{Store, StoreResult};
use crate::lifetime::{CommandLedger, Tracked, proc};
use crate::util::now_ms;

/// One recorded command.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandRow {
    pub command: Tracked,
    /// The daemon running it (see [`Store::owner`]).
    pub owner: String,
    pub owner_pid: i32,
    /// The daemon's start time, so a process reusing its pid is not taken for it.
    pub owner_start: Option<u64>,
    /// Where the pids mean something (see [`host_identity`]).
    pub host: Option<String>,
}

impl CommandRow {
    /// Whether its daemon is known to be gone: it ran here, and no process with its pid and
    /// start time is alive. A daemon elsewhere is never judged gone.
    pub fn daemon_is_gone(&self) -> bool {
        let here = host_identity();
        if here.is_none() || self.host.as_deref() != here {
            return false;
        }
        !proc::stat(self.owner_pid).is_some_and(|daemon| {
            !daemon.zombie && self.owner_start.is_none_or(|start| start == daemon.start)
        })
    }
}

impl Store {
    /// Records a command this daemon has started.
    pub fn record_command(&self, command: &Tracked) -> StoreResult<()> {
        let owner_start = proc::own_start().and_then(|s| i64::try_from(s).ok());
        self.write(|conn| {
            conn.execute(
                "INSERT OR REPLACE INTO command_processes
                 (tag, owner, owner_pid, owner_start, host, pgid, start, started_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![
                    command.tag,
                    self.owner(),
                    std::process::id(),
                    owner_start,
                    host_identity(),
                    command.pgid,
                    i64::try_from(command.start).unwrap_or(i64::MAX),
                    now_ms(),
                ],
            )?;
            Ok(())
        })
    }

    /// Forgets a command once nothing of it is left.
    pub fn forget_command(&self, tag: &str) -> StoreResult<()> {
        self.write(|conn| {
            conn.execute("DELETE FROM command_processes WHERE tag = ?1", [tag])?;
            Ok(())
        })
    }

    /// The commands recorded by other daemons whose process is gone.
    pub fn commands_left(&self) -> StoreResult<Vec<CommandRow>> {
        let rows = self.read(|conn| {
            let mut statement = conn.prepare(
                "SELECT tag, owner, owner_pid, owner_start, host, pgid, start
                 FROM command_processes WHERE owner <> ?1 ORDER BY started_at",
            )?;
            let rows = statement
                .query_map([self.owner()], |row| {
                    Ok(CommandRow {
                        command: Tracked {
                            tag: row.get(0)?,
                            pgid: row.get(5)?,
                            start: row.get::<_, i64>(6)?.try_into().unwrap_or(0),
                        },
                        owner: row.get(1)?,
                        owner_pid: row.get(2)?,
                        owner_start: row
                            .get::<_, Option<i64>>(3)?
                            .and_then(|s| u64::try_from(s).ok()),
                        host: row.get(4)?,
                    })
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(rows)
        })?;
        Ok(rows
            .into_iter()
            .filter(CommandRow::daemon_is_gone)
            .collect())
    }
}

/// The daemon's record of its commands. A command the database cannot record (it is locked)
/// still runs, and is still killed by this daemon; only a daemon killed meanwhile would leave
/// it to nobody.
impl CommandLedger for Store {
    fn started(&self, command: &Tracked) {
        if let Err(e) = self.record_command(command) {
            tracing::warn!(error = %e, "cannot record a running command");
        }
    }

    fn ended(&self, command: &Tracked) {
        if let Err(e) = self.forget_command(&command.tag) {
            tracing::warn!(error = %e, "cannot forget an ended command");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn only_commands_of_a_gone_daemon_are_left() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("db.sqlite")).unwrap();
        let command = |tag: &str| Tracked {
            tag: tag.into(),
            pgid: 4242,
            start: 7,
        };
        store.record_command(&command("mine")).unwrap();
        let other = Store::open(&dir.path().join("db.sqlite")).unwrap();
        other.record_command(&command("alive")).unwrap();
        other.record_command(&command("gone")).unwrap();
        other.record_command(&command("elsewhere")).unwrap();
        other
            .write(|conn| {
                // No process has a pid above `pid_max`.
                conn.execute(
                    "UPDATE command_processes SET owner = 'gone', owner_pid = 2147483647 WHERE tag = 'gone'",
                    [],
                )?;
                conn.execute(
                    "UPDATE command_processes SET owner = 'x', owner_pid = 2147483647, host = 'another' WHERE tag = 'elsewhere'",
                    [],
                )?;
                Ok(())
            })
            .unwrap();
        let left: Vec<String> = store
            .commands_left()
            .unwrap()
            .into_iter()
            .map(|row| row.command.tag)
            .collect();
        assert_eq!(left, ["gone"]);
        store.forget_command("gone").unwrap();
        assert_eq!(store.commands_left().unwrap(), []);
    }
}
