//! Starting a session's model afresh with a carry-over note: after the session's idle time
//! (`rollover`), or by hand (`/new-context`); and deleting such a note (`note/delete`).
//!
//! The old context stays in the transcript, readable; the model is sent the note and what
//! follows it. The note is written by the session's summariser within a few hundred tokens
//! and the summary time limit; when that fails, a note copied from the conversation is used.
//! Either way it is redacted before it is stored (`context::carry_over`).

use super::{Inner, Runtime, RuntimeError, RuntimeResult};
use crate::context::TokenCounter;
use crate::context::carry_over::{
    NOTE_MAX_CHARS, NOTE_MAX_OUTPUT, NOTE_SYSTEM, copied_note, finish_note, note_prompt,
    note_source, with_state,
};
use crate::context::projection::count_summary;
use crate::protocol::*;
use crate::provider::{ModelContent, ModelMessage, ModelRequest, ModelRole};
use crate::store::{NewMessage, NoteDeletion, SessionRow};

/// Why a new context starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// The session was idle for `idle_secs`, at least its rollover period `limit_secs`.
    Idle { idle_secs: u64, limit_secs: u64 },
    /// The user typed `/new-context`.
    Command,
}

impl From<Why> for CompactionReason {
    /// The `reason` of the `compaction` event and the log line.
    fn from(why: Why) -> Self {
        match why {
            Why::Idle { .. } => CompactionReason::Idle,
            Why::Command => CompactionReason::Command,
        }
    }
}

/// What starting a new context did.
#[derive(Debug, Clone, PartialEq)]
pub struct CarriedOver {
    /// The `summary` entry holding the note.
    pub message_id: String,
    /// Messages of the old context the note stands for.
    pub messages: u64,
    /// Why the model's note was not used, when the note was copied.
    pub fallback: Option<String>,
}

impl Inner {
    /// How long the session's context has been idle, when that is at least its rollover period:
    /// the time since its newest message that a model was sent (nothing when the context is
    /// empty, as after `/clear` or a rollover).
    pub(super) fn idle_past_rollover(&self, session: &SessionRow) -> RuntimeResult<Option<Why>> {
        let Some(limit_secs) = session.rollover_secs else {
            return Ok(None);
        };
        let Some(at) = self
            .store
            .last_model_message_at(&session.id, session.context_start_seq)?
        else {
            return Ok(None);
        };
        let idle_secs = crate::util::now_ms().saturating_sub(at).max(0) as u64 / 1000;
        Ok((idle_secs >= limit_secs).then_some(Why::Idle {
            idle_secs,
            limit_secs,
        }))
    }

    /// Starts a new context for the session's model, opening with a note about the old one.
    /// `None` when the context is empty: there is nothing to carry over. The caller holds the
    /// session's claim, so no run changes the transcript meanwhile.
    pub(super) async fn carry_over(
        &self,
        session: &SessionRow,
        why: Why,
    ) -> RuntimeResult<Option<CarriedOver>> {
        let entries = self.stored_entries(session)?;
        let sent: Vec<u64> = entries
            .iter()
            .filter(|s| matches!(s.entry.role, Role::User | Role::Assistant | Role::Tool))
            .map(|s| s.entry.seq)
            .collect();
        let (Some(&from_seq), Some(&to_seq)) = (sent.first(), sent.last()) else {
            return Ok(None);
        };
        let messages = sent.len() as u64;
        let tokens_before = self
            .prepare_from(session, &entries, None, &[])
            .projection
            .tokens();
        let source = note_source(&entries);
        let (written, fallback) = match self.write_note(session, &source).await {
            Ok(text) => (text, None),
            Err(why) => (copied_note(&entries), Some(why)),
        };
        // The workspace's state is added by the daemon, after the cut: it is read, not written.
        let state = match &session.workspace_root {
            Some(root) => super::workspace_state::read(std::path::Path::new(root)).await,
            None => None,
        };
        let note = with_state(finish_note(&written), state.as_ref());
        let block = Block::Summary {
            method: CompactionMethod::CarryOver,
            text: note.clone(),
            from_seq: None,
            to_seq: None,
            messages,
        };
        let tokens = count_summary(TokenCounter::for_model(&session.model), &block);
        self.store.clear_context(&session.id)?;
        let mut message = NewMessage::new(&session.id, None, Role::Summary, vec![block]);
        message.tokens = Some(tokens);
        let entry = self.commit(message)?;
        let (idle_secs, rollover_secs) = match why {
            Why::Idle {
                idle_secs,
                limit_secs,
            } => (Some(idle_secs), Some(limit_secs)),
            Why::Command => (None, None),
        };
        tracing::info!(
            session_id = %session.id,
            reason = CompactionReason::from(why).as_str(),
            idle_secs,
            rollover_secs,
            messages,
            context_tokens = tokens_before,
            source_chars = source.chars().count(),
            written_chars = written.chars().count(),
            note_chars = note.chars().count(),
            git_state = state.is_some(),
            note_limit_chars = NOTE_MAX_CHARS,
            note = if fallback.is_some() { "copied" } else { "model" },
            fallback = ?fallback,
            "started a new context with a carry-over note"
        );
        self.events.emit(
            &self.store,
            &session.id,
            None,
            Event::Compaction {
                method: CompactionMethod::CarryOver,
                message_id: entry.id.clone(),
                from_seq,
                to_seq,
                messages,
                tokens_before,
                tokens_after: tokens.tokens,
                reason: why.into(),
            },
        );
        if let Some(why) = &fallback {
            self.notice(
                &session.id,
                None,
                NoticeLevel::Warning,
                format!(
                    "The model could not write the carry-over note ({why}); the note was copied from the conversation instead."
                ),
            )?;
        }
        Ok(Some(CarriedOver {
            message_id: entry.id,
            messages,
            fallback,
        }))
    }

    /// Asks the summariser for the note: the newest user and assistant text, the tools' names.
    async fn write_note(&self, session: &SessionRow, source: &str) -> Result<String, String> {
        let request = ModelRequest {
            model: self.summary_model(session),
            system: Some(NOTE_SYSTEM.into()),
            messages: vec![ModelMessage {
                role: ModelRole::User,
                content: vec![ModelContent::Text {
                    text: note_prompt(source),
                }],
            }],
            tools: Vec::new(),
            max_output_tokens: NOTE_MAX_OUTPUT,
            delegated: false,
            reasoning: None,
        };
        self.ask_summariser(session, request).await
    }
}

impl Runtime {
    /// Before a new turn: a context idle past the session's rollover period starts afresh,
    /// opening with a carry-over note.
    pub(super) async fn roll_over_if_idle(&self, session: &SessionRow) -> RuntimeResult<()> {
        if let Some(why) = self.inner.idle_past_rollover(session)? {
            self.inner.carry_over(session, why).await?;
        }
        Ok(())
    }

    /// `/new-context`: starts the model afresh now, with a carry-over note. What the note says
    /// to the user. The caller holds the session ([`Runtime::command`]).
    pub(super) async fn new_context_command(&self, session: &SessionRow) -> RuntimeResult<String> {
        match self.inner.carry_over(session, Why::Command).await? {
            None => Err(RuntimeError::Conflict(
                "nothing to carry over: the model's context is already empty".into(),
            )),
            Some(done) => Ok(describe(&done)),
        }
    }

    /// `note/delete`: empties a carry-over note, so that it is never sent again.
    pub fn delete_note(&self, params: NoteDeleteParams) -> RuntimeResult<NoteDeleteResult> {
        let id = params.message_id;
        match self.inner.store.delete_carry_over_note(&id)? {
            NoteDeletion::NotFound => Err(RuntimeError::NotFound { what: "note", id }),
            NoteDeletion::NotANote(role) => Err(RuntimeError::InvalidParams(format!(
                "message {id} is a {role:?} message, not a carry-over note; only carry-over notes can be deleted"
            ))),
            NoteDeletion::AlreadyDeleted => Ok(NoteDeleteResult { deleted: false }),
            NoteDeletion::Deleted { session_id } => {
                tracing::info!(%session_id, message_id = %id, "deleted a carry-over note");
                self.inner.events.emit(
                    &self.inner.store,
                    &session_id,
                    None,
                    Event::NoteDeleted { message_id: id },
                );
                Ok(NoteDeleteResult { deleted: true })
            }
        }
    }
}

/// The note `/new-context` leaves.
fn describe(done: &CarriedOver) -> String {
    let how = match &done.fallback {
        None => "written by the model".to_string(),
        Some(why) => {
            format!("copied from the conversation, because the model could not write it ({why})")
        }
    };
    format!(
        "New context: the model starts afresh from the next message. The {} earlier messages stay here to read; a carry-over note {how} stands for them, and is sent until you delete it.",
        done.messages
    )
}
