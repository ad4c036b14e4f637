//! The `runs` table: one row per agent run, open until it finishes.

use rusqlite::{OptionalExtension, params};

use super::{Store, StoreResult};
use crate::protocol::FinishReason;
use crate::util::now_ms;

/// Whether a run is still open. A run the daemon stopped under stays `running` until start-up
/// recovery closes or resumes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RunStatus {
    Running,
    Finished,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RunRow {
    pub id: String,
    pub session_id: String,
    pub model: String,
    pub finished: bool,
    pub steps: u32,
    /// When the run began (milliseconds since the epoch): the start of the turn it answers,
    /// which its time limit counts from, across suspensions and restarts.
    pub started_at: i64,
    /// The model a custom command gave this run, which every step of it uses; `None`: the
    /// session's model, read at each step (so `/model` applies from the next request on).
    pub command_model: Option<String>,
}

impl Store {
    pub fn insert_run(&self, id: &str, session_id: &str, model: &str) -> StoreResult<()> {
        self.insert_command_run(id, session_id, model, None)
    }

    /// [`Store::insert_run`] for a run whose model a custom command chose (`command_model`),
    /// kept with the run so that a run resumed after a restart still uses it.
    pub fn insert_command_run(
        &self,
        id: &str,
        session_id: &str,
        model: &str,
        command_model: Option<&str>,
    ) -> StoreResult<()> {
        self.write(|conn| {
            conn.execute(
                "INSERT INTO runs (id, session_id, model, status, started_at, command_model) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![id, session_id, command_model.unwrap_or(model), RunStatus::Running, now_ms(), command_model],
            )?;
            Ok(())
        })
    }

    pub fn run(&self, id: &str) -> StoreResult<Option<RunRow>> {
        self.read(|conn| {
            Ok(conn
                .query_row(
                    "SELECT id, session_id, model, status, steps, started_at, command_model FROM runs WHERE id = ?1",
                    [id],
                    |r| {
                        Ok(RunRow {
                            id: r.get(0)?,
                            session_id: r.get(1)?,
                            model: r.get(2)?,
                            finished: r.get::<_, RunStatus>(3)? == RunStatus::Finished,
                            steps: r.get(4)?,
                            started_at: r.get(5)?,
                            command_model: r.get(6)?,
                        })
                    },
                )
                .optional()?)
        })
    }

    /// Runs that never finished (the daemon stopped under them).
    pub fn open_runs(&self) -> StoreResult<Vec<RunRow>> {
        self.read(|conn| {
            let mut stmt = conn.prepare(
                "SELECT id, session_id, model, status, steps, started_at, command_model FROM runs WHERE status <> 'finished' ORDER BY started_at",
            )?;
            let rows = stmt
                .query_map([], |r| {
                    Ok(RunRow {
                        id: r.get(0)?,
                        session_id: r.get(1)?,
                        model: r.get(2)?,
                        finished: false,
                        steps: r.get(4)?,
                        started_at: r.get(5)?,
                        command_model: r.get(6)?,
                    })
                })?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
    }

    /// The unfinished run of a session that waits for an approval (its own, or one its
    /// delegated task waits for), whether or not a task drives it: a new turn must not start
    /// beside it.
    pub fn suspended_run(&self, session_id: &str) -> StoreResult<Option<RunRow>> {
        for approval in self.pending_approvals(session_id)? {
            if let Some(run) = self.run(&approval.run_id)?.filter(|r| !r.finished) {
                return Ok(Some(run));
            }
        }
        self.run_waiting_on_child(session_id)
    }

    /// How a finished run ended; `None` while it is open (or for an unknown id).
    pub fn set_run_steps(&self, id: &str, steps: u32) -> StoreResult<()> {
        self.write(|conn| {
            conn.execute(
                "UPDATE runs SET steps = ?2 WHERE id = ?1",
                params![id, steps],
            )?;
            Ok(())
        })
    }

    /// Records how a run ended; the first end recorded stays (a daemon that lost its run to a
    /// takeover must not overwrite the end the other daemon recorded).
    pub fn finish_run(
        &self,
        id: &str,
        reason: FinishReason,
        error: Option<&str>,
    ) -> StoreResult<()> {
        self.write(|conn| {
            conn.execute(
                "UPDATE runs SET status = ?2, reason = ?3, error = ?4, finished_at = ?5
                 WHERE id = ?1 AND status <> 'finished'",
                params![id, RunStatus::Finished, reason, error, now_ms()],
            )?;
            Ok(())
        })
    }
}
