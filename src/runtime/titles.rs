//! Titling a session after its first answer, and each session's `autoCompact` setting.
//!
//! A session created without a title holds [`PLACEHOLDER`]. Once a run of it ends with an
//! answer, the daemon asks the session's summariser (the account's `summary_model`, else the
//! session's model) for a title in one short request, beside the session's work: its usage is
//! a line of kind `title`, counted against the spend cap, and a `sessionUpdated` event carries
//! the title. A title a client set is never replaced, even one set while the request is out;
//! a failed request is logged and leaves the title as it is (the next answer tries again).

use std::sync::Arc;

use super::{Inner, Runtime, RuntimeResult};
use crate::context::title::{self, MAX_OUTPUT_TOKENS, TITLE_SYSTEM};
use crate::protocol::*;
use crate::provider::{ModelContent, ModelMessage, ModelRequest, ModelRole};
use crate::store::SessionRow;

/// The title of a session nobody named yet.
pub(super) const PLACEHOLDER: &str = "New chat";

impl Inner {
    /// Whether the session folds older turns automatically: its own setting, else the config's.
    pub(super) fn auto_compact(&self, session_id: &str) -> RuntimeResult<bool> {
        Ok(self
            .store
            .auto_compact(session_id)?
            .unwrap_or(self.config.budget.auto_compact))
    }

    /// After a run of the session ended with an answer: titles the session in the background
    /// when its title is still a placeholder (claimed first, so one request at most is out).
    pub(super) fn title_after_answer(self: &Arc<Self>, session_id: &str) {
        if !self.config.budget.auto_title {
            return;
        }
        match self.store.claim_titling(session_id) {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                tracing::warn!(session_id, error = %e, "cannot claim the session's title");
                return;
            }
        }
        let inner = Arc::clone(self);
        let session_id = session_id.to_string();
        tokio::spawn(async move {
            let titled = inner.ask_title(&session_id).await;
            inner.finish_title(&session_id, titled);
        });
    }

    /// Writes the title (unless a client set one meanwhile) and tells the clients, or gives
    /// the placeholder back after a failure.
    fn finish_title(self: &Arc<Self>, session_id: &str, titled: Result<String, String>) {
        let title = match titled {
            Ok(title) => title,
            Err(why) => {
                tracing::warn!(session_id, reason = %why, "the session was not titled");
                if let Err(e) = self.store.finish_titling(session_id, None) {
                    tracing::warn!(session_id, error = %e, "cannot release the session's title");
                }
                return;
            }
        };
        match self.store.finish_titling(session_id, Some(&title)) {
            Ok(true) => {
                tracing::info!(session_id, title, "titled the session");
                let runtime = Runtime {
                    inner: Arc::clone(self),
                };
                if let Err(e) = runtime.announce_session(session_id) {
                    tracing::warn!(session_id, error = %e, "cannot tell the clients the title");
                }
            }
            Ok(false) => tracing::info!(session_id, "kept the title a client set meanwhile"),
            Err(e) => tracing::warn!(session_id, error = %e, "cannot store the session's title"),
        }
    }

    /// One request for a title from the session's first exchange; why there is none, otherwise.
    async fn ask_title(&self, session_id: &str) -> Result<String, String> {
        let session = self
            .store
            .session(session_id)
            .map_err(|e| e.to_string())?
            .ok_or("the session is gone")?;
        self.refuse_title_past_cap(&session)?;
        let (asked, answered) = self.first_exchange(&session)?;
        let request = ModelRequest {
            model: self.summary_model(&session),
            system: Some(TITLE_SYSTEM.into()),
            messages: vec![ModelMessage {
                role: ModelRole::User,
                content: vec![ModelContent::Text {
                    text: title::prompt(&asked, &answered),
                }],
            }],
            tools: Vec::new(),
            max_output_tokens: MAX_OUTPUT_TOKENS,
            delegated: false,
            reasoning: None,
        };
        let answer = self
            .ask_for_text(&session, request, UsageKind::Title)
            .await?;
        title::from_answer(&answer).ok_or_else(|| format!("no title in the answer {answer:?}"))
    }

    /// A title request is not made once the session's spend cap is used up.
    fn refuse_title_past_cap(&self, session: &SessionRow) -> Result<(), String> {
        let Some(cap) = session.cap_usd else {
            return Ok(());
        };
        let cost = self.cost_summary(&session.id).map_err(|e| e.to_string())?;
        match cost.total_usd.unwrap_or(0.0) >= cap {
            true => Err(format!("the spend cap of ${cap:.2} is used up")),
            false => Ok(()),
        }
    }

    /// The text of the session's first user message and of the first answer to it.
    fn first_exchange(&self, session: &SessionRow) -> Result<(String, String), String> {
        let entries = self.stored_entries(session).map_err(|e| e.to_string())?;
        let text_of = |role: Role| {
            entries
                .iter()
                .filter(|s| s.entry.role == role)
                .map(|s| {
                    s.entry
                        .blocks
                        .iter()
                        .filter_map(|b| match b {
                            Block::Text { text } => Some(text.as_str()),
                            _ => None,
                        })
                        .collect::<Vec<_>>()
                        .join("\n")
                })
                .find(|t| !t.trim().is_empty())
        };
        let asked = text_of(Role::User).ok_or("no message of the user's to title from")?;
        let answered = text_of(Role::Assistant).unwrap_or_default();
        Ok((asked, answered))
    }
}

impl Runtime {
    /// Names a session provisionally (ACP names a session after its first prompt at once): a
    /// placeholder like the one it replaces, so the daemon's title after the first answer
    /// still replaces it, and a title a client set is kept. The session when it was renamed.
    pub fn set_provisional_title(
        &self,
        session_id: &str,
        title: &str,
    ) -> RuntimeResult<Option<Session>> {
        if !self.inner.store.set_provisional_title(session_id, title)? {
            return Ok(None);
        }
        self.get_session(session_id).map(Some)
    }
}
