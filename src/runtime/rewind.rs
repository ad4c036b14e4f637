//! Checkpoints, rewinds and forks.
//!
//! A file tool keeps a file's content through [`CallCheckpoints`] before it changes it. A
//! rewind (`session/rewind`) puts back what the session's tools changed since a user message
//! and/or cuts the conversation there; it refuses to overwrite a file someone else changed
//! since the session last wrote it, unless forced. It is journaled: the files to put back are
//! stored before the first changes, each is replaced by a temporary file renamed over it
//! (inside the workspace's confined opener), and the journal is closed at the end; a daemon
//! killed in between finishes it on its next start ([`finish_open_rewinds`]), so a rewind is
//! whole or not at all. A fork (`session/fork`) copies the transcript into a new session and
//! touches no file.

use std::io::Read;

use super::{Runtime, RuntimeError, RuntimeResult};
use crate::protocol::*;
use crate::store::{
    NewCheckpoint, PlannedFile, RestoreStep, RewindJournal, RewindScope, Store, content_hash,
};
use crate::tools::{Checkpoints, OpenError, Workspace, replace_in};

/// Keeps the content a tool call is about to change, for the turn the call belongs to.
pub(super) struct CallCheckpoints<'a> {
    pub store: &'a Store,
    /// The session whose tool runs (a child session's own id for a sub-agent).
    pub session_id: &'a str,
    pub call_id: &'a str,
}

impl Checkpoints for CallCheckpoints<'_> {
    fn keep(&self, path: &str, before: Option<(&[u8], u32)>, after: &[u8]) -> Result<(), String> {
        self.store
            .keep_checkpoint(&NewCheckpoint {
                session_id: self.session_id,
                call_id: self.call_id,
                path,
                before,
                after: Some(after),
            })
            .map_err(|e| {
                format!(
                    "Cannot keep {path}'s content so that the change could be undone; nothing was written: {e}"
                )
            })
    }
}

fn scope_of(restore: RewindRestore) -> RewindScope {
    match restore {
        RewindRestore::Files => RewindScope::Files,
        RewindRestore::Conversation => RewindScope::Conversation,
        RewindRestore::Both => RewindScope::Both,
    }
}

fn restore_of(scope: RewindScope) -> RewindRestore {
    match scope {
        RewindScope::Files => RewindRestore::Files,
        RewindScope::Conversation => RewindRestore::Conversation,
        RewindScope::Both => RewindRestore::Both,
    }
}

/// The hash of what is at `path` now; `None` when there is nothing.
fn current_hash(ws: &Workspace, path: &str) -> Result<Option<String>, String> {
    match ws.open_file(path) {
        Ok(mut file) => {
            let metadata = file.metadata().map_err(|e| e.to_string())?;
            if !metadata.is_file() {
                return Err("it is no longer a regular file".into());
            }
            let mut bytes = Vec::new();
            file.read_to_end(&mut bytes).map_err(|e| e.to_string())?;
            Ok(Some(content_hash(&bytes)))
        }
        Err(OpenError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.shown("it cannot be read")),
    }
}

/// Puts one file back: its kept content written to a temporary file renamed over it, or the
/// file removed. Doing it twice does what doing it once did, so a journal can be replayed.
fn restore_step(ws: &Workspace, store: &Store, step: &RestoreStep) -> Result<(), String> {
    let cannot = |e: &dyn std::fmt::Display| format!("Cannot restore {}: {e}", step.path);
    match &step.hash {
        Some(hash) => {
            let content = store
                .checkpoint_blob(hash)
                .map_err(|e| cannot(&e))?
                .ok_or_else(|| cannot(&"its kept content is missing"))?;
            let parent = ws
                .open_parent(&step.path, true)
                .map_err(|e| e.shown(&format!("Cannot restore {}", step.path)))?
                .ok_or_else(|| cannot(&"it names the workspace root"))?;
            replace_in(&parent.folder, &parent.name, &content, step.mode).map_err(|e| cannot(&e))
        }
        None => {
            let parent = match ws.open_parent(&step.path, false) {
                Ok(Some(parent)) => parent,
                Ok(None) => return Err(cannot(&"it names the workspace root")),
                Err(OpenError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Ok(());
                }
                Err(e) => return Err(e.shown(&format!("Cannot remove {}", step.path))),
            };
            match rustix::fs::unlinkat(&parent.folder, &parent.name, rustix::fs::AtFlags::empty()) {
                Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
                Err(e) => Err(cannot(&e)),
            }
        }
    }
}

/// Replays a journal's steps and closes it; how many messages it marked rewound.
fn complete(ws: Option<&Workspace>, store: &Store, journal: &RewindJournal) -> RuntimeResult<u64> {
    if !journal.plan.is_empty() {
        let ws = ws.ok_or_else(|| {
            RuntimeError::Internal(format!(
                "rewind {} has files to restore but its session has no workspace",
                journal.id
            ))
        })?;
        for step in &journal.plan {
            restore_step(ws, store, step).map_err(RuntimeError::Internal)?;
        }
    }
    Ok(store.close_rewind(journal)?)
}

fn workspace_of(store: &Store, session_id: &str) -> RuntimeResult<Option<Workspace>> {
    let root = store
        .session(session_id)?
        .and_then(|s| s.workspace_root)
        .map(std::path::PathBuf::from);
    root.map(|root| {
        Workspace::new(&root)
            .map_err(|e| RuntimeError::InvalidParams(format!("the workspace root: {e}")))
    })
    .transpose()
}

/// Start-up: finishes every rewind a killed daemon left open, so each is whole.
pub(super) fn finish_open_rewinds(store: &Store) -> RuntimeResult<()> {
    for journal in store.open_rewinds()? {
        tracing::info!(session_id = %journal.session_id, rewind = journal.id, files = journal.plan.len(), "finishing a rewind a stopped sidechat left open");
        let ws = workspace_of(store, &journal.session_id)?;
        complete(ws.as_ref(), store, &journal)?;
    }
    Ok(())
}

/// Why a rewind leaves a file a command outside a git work tree changed: only its size and
/// time were seen, never its content, so there is nothing to put back.
pub const NOT_RESTORABLE: &str = "changed by a command outside git: cannot be restored";

/// Which planned files a rewind changes, which it leaves, and which conflict.
struct Sorted {
    steps: Vec<RestoreStep>,
    skipped: Vec<SkippedFile>,
    conflicts: Vec<String>,
}

fn sort_plan(ws: Option<&Workspace>, plan: Vec<PlannedFile>, force: bool) -> Sorted {
    let mut sorted = Sorted {
        steps: Vec::new(),
        skipped: Vec::new(),
        conflicts: Vec::new(),
    };
    for file in plan {
        let Some(ws) = ws else {
            sorted.skipped.push(SkippedFile {
                path: file.path,
                reason: "the session has no workspace".into(),
            });
            continue;
        };
        if !file.restorable {
            sorted.skipped.push(SkippedFile {
                path: file.path,
                reason: NOT_RESTORABLE.into(),
            });
            continue;
        }
        let current = current_hash(ws, &file.path);
        match &current {
            Ok(now) if *now == file.before_hash => {
                sorted.skipped.push(SkippedFile {
                    path: file.path,
                    reason: "already as it was".into(),
                });
                continue;
            }
            Ok(now) if *now == file.last_after_hash || *now == file.last_before_hash => {}
            _ if force => {}
            Ok(_) => {
                sorted.conflicts.push(file.path);
                continue;
            }
            Err(why) => {
                sorted.conflicts.push(format!("{} ({why})", file.path));
                continue;
            }
        }
        sorted.steps.push(RestoreStep {
            path: file.path,
            hash: file.before_hash,
            mode: file.before_mode,
        });
    }
    sorted
}

/// What a rewind would do, changing nothing: a conflict is one of the files it would leave.
fn dry_run(
    store: &Store,
    session_id: &str,
    place: &crate::store::MessagePlace,
    scope: RewindScope,
    sorted: Sorted,
) -> RuntimeResult<SessionRewindResult> {
    let mut skipped = sorted.skipped;
    skipped.extend(sorted.conflicts.into_iter().map(|path| SkippedFile {
        path,
        reason: "changed since the session last wrote it; a forced rewind overwrites it".into(),
    }));
    let rewound_messages = match scope.conversation() {
        true => store.live_messages_from(session_id, place.seq)?,
        false => 0,
    };
    Ok(SessionRewindResult {
        restored: sorted
            .steps
            .iter()
            .map(|step| RewoundFile {
                path: step.path.clone(),
                removed: step.hash.is_none(),
            })
            .collect(),
        skipped,
        rewound_messages,
    })
}

impl Runtime {
    /// `session/rewind`: takes the session back to just before a user message.
    pub async fn rewind(&self, params: SessionRewindParams) -> RuntimeResult<SessionRewindResult> {
        let session = self.session_row(&params.session_id)?;
        if let Some(run_id) = self.inner.runs.active_run(&session.id) {
            return Err(RuntimeError::Busy {
                session_id: session.id.clone(),
                run_id,
            });
        }
        self.refuse_if_suspended(&session.id)?;
        // A dry run changes nothing, so it holds no claim: an editor asks one per turn at
        // once (a rewind picker), and claiming made all but one of them busy.
        if params.dry_run {
            return self.plan_and_rewind(&session.id, params);
        }
        let _held = self.inner.claim_for_command(&session.id, "rwd")?;
        self.plan_and_rewind(&session.id, params)
    }

    fn plan_and_rewind(
        &self,
        session_id: &str,
        params: SessionRewindParams,
    ) -> RuntimeResult<SessionRewindResult> {
        let store = &self.inner.store;
        let place = store
            .message_place(&params.message_id)?
            .filter(|p| p.session_id == session_id)
            .ok_or_else(|| {
                RuntimeError::InvalidParams(format!(
                    "messageId {:?} is no message of session {session_id}",
                    params.message_id
                ))
            })?;
        if place.role != "user" {
            return Err(RuntimeError::InvalidParams(format!(
                "messageId {:?} is a {} message; a rewind goes back to just before a user message",
                params.message_id, place.role
            )));
        }
        if place.rewound {
            return Err(RuntimeError::InvalidParams(format!(
                "message {:?} was already rewound",
                params.message_id
            )));
        }
        let scope = scope_of(params.restore);
        let plan = match scope.files() {
            true => store.rewind_plan(session_id, place.seq)?,
            false => Vec::new(),
        };
        let ws = match plan.is_empty() {
            true => None,
            false => workspace_of(store, session_id)?,
        };
        let sorted = sort_plan(ws.as_ref(), plan, params.force);
        if params.dry_run {
            return dry_run(store, session_id, &place, scope, sorted);
        }
        if !sorted.conflicts.is_empty() {
            return Err(RuntimeError::InvalidParams(format!(
                "these files changed since the session last wrote them: {}; rewind with force to overwrite them",
                sorted.conflicts.join(", ")
            )));
        }
        for step in &sorted.steps {
            if let Some(hash) = &step.hash
                && store.checkpoint_blob(hash)?.is_none()
            {
                return Err(RuntimeError::Internal(format!(
                    "the kept content of {} is missing",
                    step.path
                )));
            }
        }
        let journal_id = store.open_rewind(
            session_id,
            &params.message_id,
            place.seq,
            scope,
            &sorted.steps,
        )?;
        let journal = RewindJournal {
            id: journal_id,
            session_id: session_id.to_string(),
            message_id: params.message_id.clone(),
            target_seq: place.seq,
            scope,
            plan: sorted.steps,
        };
        let rewound_messages = complete(ws.as_ref(), store, &journal)?;
        let restored: Vec<RewoundFile> = journal
            .plan
            .iter()
            .map(|step| RewoundFile {
                path: step.path.clone(),
                removed: step.hash.is_none(),
            })
            .collect();
        tracing::info!(%session_id, message_id = %params.message_id, files = restored.len(), rewound_messages, "rewound");
        self.inner.events.emit(
            store,
            session_id,
            None,
            Event::Rewound {
                message_id: params.message_id,
                restore: restore_of(scope),
                restored: restored.clone(),
                skipped: sorted.skipped.clone(),
                rewound_messages,
            },
        );
        Ok(SessionRewindResult {
            restored,
            skipped: sorted.skipped,
            rewound_messages,
        })
    }

    /// `session/fork`: a new session with the transcript up to and including a message.
    pub fn fork(&self, params: SessionForkParams) -> RuntimeResult<Session> {
        let session = self.session_row(&params.session_id)?;
        let through = match &params.message_id {
            None => session.last_seq,
            Some(id) => {
                let place = self
                    .inner
                    .store
                    .message_place(id)?
                    .filter(|p| p.session_id == session.id)
                    .ok_or_else(|| {
                        RuntimeError::InvalidParams(format!(
                            "messageId {id:?} is no message of session {}",
                            session.id
                        ))
                    })?;
                if place.rewound {
                    return Err(RuntimeError::InvalidParams(format!(
                        "message {id:?} was rewound; fork from a message still in the conversation"
                    )));
                }
                place.seq
            }
        };
        let title = format!("{} (fork)", session.title);
        let id = self.inner.store.fork_session(&session, through, &title)?;
        tracing::info!(from = %session.id, fork = %id, through, "forked a session");
        self.get_session(&id)
    }
}

/// A user turn's text on one line, cut to `max` characters.
fn turn_text(blocks: &str, max: usize) -> String {
    let blocks: Vec<Block> = serde_json::from_str(blocks).unwrap_or_default();
    let text = blocks
        .iter()
        .find_map(|b| match b {
            Block::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .unwrap_or("");
    let line = text.lines().next().unwrap_or("");
    match line.chars().count() > max {
        true => format!("{}…", line.chars().take(max).collect::<String>()),
        false => line.to_string(),
    }
}

/// What a rewind did, as a note says it.
fn describe_rewind(turns: usize, done: &SessionRewindResult) -> String {
    let mut lines = vec![format!(
        "Took back the last {} ({} messages).",
        match turns {
            1 => "turn".to_string(),
            n => format!("{n} turns"),
        },
        done.rewound_messages
    )];
    for file in &done.restored {
        let how = if file.removed { "removed" } else { "restored" };
        lines.push(format!("  {how} {}", file.path));
    }
    for file in &done.skipped {
        lines.push(format!("  left {}: {}", file.path, file.reason));
    }
    lines.join("\n")
}

impl Runtime {
    /// `/rewind` alone: the live turns, newest first, numbered as `/rewind <n>` counts them,
    /// each with the files its changes touched.
    pub(super) fn turns_note(&self, session: &crate::store::SessionRow) -> RuntimeResult<String> {
        let turns = self.inner.store.turns_with_files(&session.id)?;
        if turns.is_empty() {
            return Ok("There is no turn to take back.".into());
        }
        let mut lines = vec!["Turns (type /rewind <n> to take back the last n):".to_string()];
        for (back, turn) in turns.iter().rev().enumerate() {
            let files = match turn.paths.is_empty() {
                true => "no files changed".to_string(),
                false => turn
                    .paths
                    .iter()
                    .map(|path| match turn.not_restorable.contains(path) {
                        true => format!("{path} (not restorable)"),
                        false => path.clone(),
                    })
                    .collect::<Vec<_>>()
                    .join(", "),
            };
            lines.push(format!(
                "  {:>2}  {} — {files}",
                back + 1,
                turn_text(&turn.blocks, 60)
            ));
        }
        Ok(lines.join("\n"))
    }

    /// `/undo` and `/rewind <n>`: files and conversation back to before the `count`th-last
    /// turn; `rest` may say `--force`. The caller holds the session ([`Runtime::command`]).
    pub(super) fn rewind_command(
        &self,
        session: &crate::store::SessionRow,
        count: &str,
        rest: &str,
    ) -> RuntimeResult<String> {
        let force = match rest.trim() {
            "" => false,
            "--force" => true,
            other => {
                return Err(RuntimeError::InvalidParams(format!(
                    "unexpected {other:?}; the only option is --force"
                )));
            }
        };
        let back: usize = match count.parse() {
            Ok(n) if n > 0 => n,
            _ => {
                return Err(RuntimeError::InvalidParams(format!(
                    "/rewind takes a number of turns (1 or more), not {count:?}"
                )));
            }
        };
        let turns = self.inner.store.turns_with_files(&session.id)?;
        let Some(turn) = turns.len().checked_sub(back).and_then(|i| turns.get(i)) else {
            return Err(RuntimeError::InvalidParams(format!(
                "the session has {} turns to take back, not {back}",
                turns.len()
            )));
        };
        let done = self.plan_and_rewind(
            &session.id,
            SessionRewindParams {
                session_id: session.id.clone(),
                message_id: turn.message_id.clone(),
                restore: RewindRestore::Both,
                force,
                dry_run: false,
            },
        )?;
        Ok(describe_rewind(back, &done))
    }

    /// `/fork`: a new session with the whole conversation.
    pub(super) fn fork_command(&self, session: &crate::store::SessionRow) -> RuntimeResult<String> {
        let fork = self.fork(SessionForkParams {
            session_id: session.id.clone(),
            message_id: None,
        })?;
        Ok(format!(
            "Forked into session {} (“{}”); this one goes on as it was. Open it with: sidechat chat --session {}",
            fork.id, fork.title, fork.id
        ))
    }
}
