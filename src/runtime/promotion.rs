//! Queued input that no run will deliver becomes the session's next user turn.
//!
//! Shared by a run's end (the next run answers the turn at once) and start-up recovery (the
//! session reports `unanswered` until `chat/resume`), so both keep the same words and ids.

use crate::protocol::Role;
use crate::store::{NewMessage, PendingRow, Settle, Settled};

/// The user turn made of `rows`, in order, each block keeping its `pendingId` and followed by
/// the row's attachments; committing it
/// settles the rows as promoted in the same transaction. `None` when nothing is queued.
pub fn promoted_turn(session_id: &str, rows: Vec<PendingRow>) -> Option<NewMessage> {
    if rows.is_empty() {
        return None;
    }
    let pending_ids = rows.iter().map(|r| r.id.clone()).collect();
    let blocks = rows.into_iter().flat_map(|r| r.into_blocks(true)).collect();
    let mut message = NewMessage::new(session_id, None, Role::User, blocks);
    message.settles = Some(Settle {
        pending_ids,
        status: Settled::Promoted,
    });
    Some(message)
}
