//! The `messages` table: the canonical transcript, notes included.

use rusqlite::{OptionalExtension, Row, params};

use super::pending::Settle;
use super::{Store, StoreError, StoreResult};
use crate::context::Counted;
use crate::protocol::{Block, CompactionMethod, MessageStatus, Role, TranscriptEntry};
use crate::util::{new_id, now_ms, rfc3339};

/// A message to append. The caller numbers it: the runtime owns each session's `seq` counter
/// so that events and messages share one sequence without a write per streamed delta.
#[derive(Debug, Clone)]
pub struct NewMessage {
    /// The id announced while the message streamed; a fresh one when `None`.
    pub id: Option<String>,
    pub session_id: String,
    pub seq: u64,
    pub run_id: Option<String>,
    pub role: Role,
    pub blocks: Vec<Block>,
    pub status: MessageStatus,
    /// The client's id for the send this message answers, remembered for retries.
    pub client_message_id: Option<String>,
    /// Interjections this message carries, settled in the same transaction.
    pub settles: Option<Settle>,
    /// The message's token count for the session's model, counted once when it is complete.
    pub tokens: Option<Counted>,
    /// Also reserve event numbers up to this one in the same transaction (0: none beyond
    /// `seq`), so the event counter seldom needs a write of its own.
    pub reserve_seq_through: u64,
    /// Why `seq` is this writer's to use (see [`SeqClaim`]).
    pub seq_claim: SeqClaim,
}

/// Why a message's `seq` is free for it, checked in the commit's transaction, so that two
/// daemons writing one session never collide and its transcript keeps the order of commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqClaim {
    /// Any number above every one handed out so far (`sessions.last_seq` and `seq_reserved`).
    Fresh,
    /// A number inside a block this writer claimed, whose highest number is `top`: nobody else
    /// hands it out; it must still follow the session's last message.
    Owned { top: u64 },
    /// A number this writer already published the message under, before it could be stored
    /// (a notice that the database is locked): nobody else hands it out, and the message takes
    /// its place among what was committed meanwhile, where its clients saw it.
    Published,
}

/// What `note/delete` found.
#[derive(Debug, Clone, PartialEq)]
pub enum NoteDeletion {
    NotFound,
    /// The message exists but is no carry-over note; its role.
    NotANote(Role),
    /// The note was already empty; nothing changed.
    AlreadyDeleted,
    /// The note's text is gone.
    Deleted {
        session_id: String,
    },
}

impl NewMessage {
    /// A complete message with nothing extra; `seq` is assigned when it is committed.
    pub fn new(session_id: &str, run_id: Option<&str>, role: Role, blocks: Vec<Block>) -> Self {
        Self {
            id: None,
            session_id: session_id.to_string(),
            seq: 0,
            run_id: run_id.map(str::to_string),
            role,
            blocks,
            status: MessageStatus::Complete,
            client_message_id: None,
            settles: None,
            tokens: None,
            reserve_seq_through: 0,
            seq_claim: SeqClaim::Fresh,
        }
    }
}

struct RawMessage {
    id: String,
    seq: i64,
    run_id: Option<String>,
    role: Role,
    blocks: String,
    status: MessageStatus,
    created_at: i64,
    rewound: bool,
}

/// The JSON text of `value` in a buffer of exactly its length: measured by a first pass that
/// writes nowhere, so a message of megabytes is written once into one allocation rather than
/// through buffers of doubling size.
fn json_exact<T: serde::Serialize>(value: &T) -> Result<String, String> {
    /// Counts the bytes written to it.
    struct Measure(usize);
    impl std::io::Write for Measure {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut measure = Measure(0);
    serde_json::to_writer(&mut measure, value).map_err(|e| e.to_string())?;
    let mut out = Vec::with_capacity(measure.0);
    serde_json::to_writer(&mut out, value).map_err(|e| e.to_string())?;
    String::from_utf8(out).map_err(|e| e.to_string())
}

fn raw(row: &Row<'_>) -> rusqlite::Result<RawMessage> {
    Ok(RawMessage {
        id: row.get(0)?,
        seq: row.get(1)?,
        run_id: row.get(2)?,
        role: row.get(3)?,
        blocks: row.get(4)?,
        status: row.get(5)?,
        created_at: row.get(6)?,
        rewound: row.get("rewound")?,
    })
}

/// A row of `raw`'s columns followed by `tokens, tokens_exact`.
fn counted_raw(row: &Row<'_>) -> rusqlite::Result<(RawMessage, Option<Counted>)> {
    let tokens: Option<i64> = row.get(7)?;
    let exact: bool = row.get(8)?;
    Ok((
        raw(row)?,
        tokens.map(|t| Counted {
            tokens: t as u64,
            exact,
        }),
    ))
}

impl RawMessage {
    fn into_entry(self) -> StoreResult<TranscriptEntry> {
        Ok(TranscriptEntry {
            blocks: serde_json::from_str(&self.blocks)
                .map_err(|e| StoreError::Corrupt(format!("message {}: {e}", self.id)))?,
            id: self.id,
            seq: self.seq as u64,
            role: self.role,
            status: self.status,
            run_id: self.run_id,
            created_at: rfc3339(self.created_at),
            rewound: self.rewound,
        })
    }
}

/// [`Store::last_model_message`]'s query, run for each listed session (its plan is checked in
/// the store's tests).
pub(super) const LAST_MODEL_MESSAGE: &str =
    "SELECT id, seq, run_id, role, blocks, status, created_at, rewound FROM messages
     WHERE session_id = ?1 AND role NOT IN ('note', 'notice', 'summary') AND rewound = 0
     ORDER BY seq DESC LIMIT 1";

impl Store {
    /// Appends a message and raises the session's `last_seq` to it, in one transaction.
    pub fn append_message(&self, new: &NewMessage) -> StoreResult<TranscriptEntry> {
        let (mut entry, _) = self.append_message_claimed(new)?;
        entry.blocks = new.blocks.clone();
        Ok(entry)
    }

    /// [`Store::append_message`], also answering the highest `seq` the writer now owns: its
    /// reservation extended through `reserve_seq_through`, or `None` when it was not (another
    /// writer holds a later block, or nothing was asked).
    ///
    /// The entry it answers has no blocks: they are the caller's `new.blocks`, which the
    /// caller moves in rather than have a message of up to the size limit copied here.
    ///
    /// Fails with [`StoreError::StaleSeq`] when `seq` no longer follows the session's last
    /// message, and with [`StoreError::LeaseLost`] when the message belongs to a run whose
    /// session another daemon has taken over: nothing is written then.
    pub fn append_message_claimed(
        &self,
        new: &NewMessage,
    ) -> StoreResult<(TranscriptEntry, Option<u64>)> {
        self.write(|conn| {
        self.slow_commit(&new.session_id);
        let tx = conn.transaction()?;
        let seq = new.seq;
        let (last_seq, reserved): (i64, i64) = tx
            .query_row(
                "SELECT last_seq, seq_reserved FROM sessions WHERE id = ?1",
                [&new.session_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?
            .unwrap_or((0, 0));
        let (last_seq, reserved) = (last_seq.max(0) as u64, reserved.max(0) as u64);
        let may_extend = match new.seq_claim {
            SeqClaim::Fresh => {
                if seq <= last_seq.max(reserved) {
                    return Err(StoreError::StaleSeq(new.session_id.clone()));
                }
                true
            }
            SeqClaim::Owned { top } => {
                if seq <= last_seq || seq > top {
                    return Err(StoreError::StaleSeq(new.session_id.clone()));
                }
                reserved <= top
            }
            SeqClaim::Published => false,
        };
        if let Some(run_id) = &new.run_id
            && let Some(lease) = super::leases::lease_of(&tx, &new.session_id)?
            && lease.owner != self.owner()
        {
            return Err(StoreError::LeaseLost {
                session_id: new.session_id.clone(),
                run_id: run_id.clone(),
            });
        }
        let extended = (may_extend && new.reserve_seq_through > seq).then_some(new.reserve_seq_through);
        record_seq(&tx, &new.session_id, seq, extended.unwrap_or(seq))?;
        let id = new.id.clone().unwrap_or_else(|| new_id("msg"));
        let now = now_ms();
        let blocks = json_exact(&new.blocks)
            .map_err(|e| StoreError::Corrupt(format!("unserialisable blocks: {e}")))?;
        tx.execute(
            "INSERT INTO messages (id, session_id, seq, run_id, role, blocks, status, created_at,
                                   tokens, tokens_exact)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            params![
                id,
                new.session_id,
                seq as i64,
                new.run_id,
                new.role,
                blocks,
                new.status,
                now,
                new.tokens.map(|c| c.tokens as i64),
                new.tokens.is_some_and(|c| c.exact)
            ],
        )?;
        if let Some(run_id) = new.run_id.as_deref() {
            let calls: Vec<_> = new
                .blocks
                .iter()
                .filter_map(|block| match block {
                    Block::ToolCall { id, name, input } => {
                        Some((id.as_str(), name.as_str(), input))
                    }
                    _ => None,
                })
                .collect();
            super::tool_calls::insert_calls(&tx, &new.session_id, run_id, &id, &calls)?;
        }
        if let Some(client_id) = &new.client_message_id {
            tx.execute(
                "INSERT INTO sends (session_id, client_message_id, message_id, run_id) VALUES (?1, ?2, ?3, ?4)",
                params![new.session_id, client_id, id, new.run_id],
            )?;
        }
        if let Some(settle) = &new.settles {
            super::pending::settle(&tx, settle, &id)?;
        }
        tx.commit()?;
        let entry = TranscriptEntry {
            id,
            seq,
            role: new.role,
            blocks: Vec::new(),
            status: new.status,
            run_id: new.run_id.clone(),
            created_at: rfc3339(now),
            rewound: false,
        };
        Ok((entry, extended))
            })
    }

    /// The newest message that is neither a note nor a summary: what the model would answer
    /// next.
    pub fn last_model_message(&self, session_id: &str) -> StoreResult<Option<TranscriptEntry>> {
        self.read(|conn| {
            let row = conn
                .prepare_cached(LAST_MODEL_MESSAGE)?
                .query_row([session_id], raw)
                .optional()?;
            row.map(RawMessage::into_entry).transpose()
        })
    }

    /// When the newest message after `after_seq` that a model is sent was committed, in
    /// milliseconds since the epoch: how long the session's context has been idle.
    pub fn last_model_message_at(
        &self,
        session_id: &str,
        after_seq: u64,
    ) -> StoreResult<Option<i64>> {
        self.read(|conn| {
            Ok(conn
                .query_row(
                    "SELECT created_at FROM messages
                     WHERE session_id = ?1 AND seq > ?2 AND role IN ('user', 'assistant', 'tool')
                       AND rewound = 0
                     ORDER BY seq DESC LIMIT 1",
                    params![session_id, after_seq as i64],
                    |r| r.get(0),
                )
                .optional()?)
        })
    }

    /// Stores the count of a message stored without one (committed while the tokenizer was not
    /// ready); a message that has a count keeps it.
    pub fn fill_message_tokens(&self, id: &str, tokens: Counted) -> StoreResult<()> {
        self.write(|conn| {
            conn.execute(
                "UPDATE messages SET tokens = ?2, tokens_exact = ?3 WHERE id = ?1 AND tokens IS NULL",
                params![id, tokens.tokens as i64, tokens.exact],
            )?;
            Ok(())
        })
    }

    /// Empties a carry-over note's text (and its count), so that it is never sent again; the
    /// entry stays, so the transcript still shows where a context started.
    pub fn delete_carry_over_note(&self, id: &str) -> StoreResult<NoteDeletion> {
        self.write(|conn| {
            let tx = conn.transaction()?;
            let found = tx
                .query_row(
                    "SELECT id, seq, run_id, role, blocks, status, created_at, session_id, rewound
                     FROM messages WHERE id = ?1",
                    [id],
                    |r| Ok((raw(r)?, r.get::<_, String>(7)?)),
                )
                .optional()?;
            let Some((raw, session_id)) = found else {
                return Ok(NoteDeletion::NotFound);
            };
            let mut entry = raw.into_entry()?;
            let Some(Block::Summary {
                method: CompactionMethod::CarryOver,
                text,
                ..
            }) = entry.blocks.first_mut()
            else {
                return Ok(NoteDeletion::NotANote(entry.role));
            };
            if text.is_empty() {
                return Ok(NoteDeletion::AlreadyDeleted);
            }
            text.clear();
            let blocks = serde_json::to_string(&entry.blocks)
                .map_err(|e| StoreError::Corrupt(format!("unserialisable blocks: {e}")))?;
            tx.execute(
                "UPDATE messages SET blocks = ?2, tokens = 0, tokens_exact = 1 WHERE id = ?1",
                params![id, blocks],
            )?;
            tx.commit()?;
            Ok(NoteDeletion::Deleted { session_id })
        })
    }

    /// Entries after `after_seq`, oldest first, each with its stored token count (`None` where
    /// none was stored): what a projection is made from.
    pub fn messages_with_counts(
        &self,
        session_id: &str,
        after_seq: u64,
    ) -> StoreResult<Vec<(TranscriptEntry, Option<Counted>)>> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT id, seq, run_id, role, blocks, status, created_at, tokens, tokens_exact, rewound
                 FROM messages WHERE session_id = ?1 AND seq > ?2 AND rewound = 0 ORDER BY seq",
            )?;
            let rows = stmt
                .query_map(params![session_id, after_seq as i64], counted_raw)?
                .collect::<Result<Vec<_>, _>>()?;
            drop(stmt);
            rows.into_iter()
                .map(|(raw, count)| Ok((raw.into_entry()?, count)))
                .collect()
        })
    }

    /// What a projection of the model's context starting after `context_start` is made from,
    /// oldest first, with stored counts: its carry-over note, when it opens with one, then
    /// everything after the range the newest summary folded (that summary included).
    ///
    /// A carry-over note is the first message of its context (a new context starts right
    /// before it), and stays there while compactions fold what follows it; reading only past
    /// the folded range keeps each request's read to what it can send.
    pub fn context_entries(
        &self,
        session_id: &str,
        context_start: u64,
    ) -> StoreResult<Vec<(TranscriptEntry, Option<Counted>)>> {
        let note = self.read(|conn| {
            let first = conn
                .query_row(
                    "SELECT id, seq, run_id, role, blocks, status, created_at, tokens, tokens_exact, rewound
                     FROM messages WHERE session_id = ?1 AND seq > ?2 AND rewound = 0
                     ORDER BY seq LIMIT 1",
                    params![session_id, context_start as i64],
                    counted_raw,
                )
                .optional()?;
            let Some((raw, count)) = first else {
                return Ok(None);
            };
            let entry = raw.into_entry()?;
            Ok(matches!(
                entry.blocks.first(),
                Some(Block::Summary {
                    method: CompactionMethod::CarryOver,
                    ..
                })
            )
            .then_some((entry, count)))
        })?;
        let folded_through = self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT blocks FROM messages WHERE session_id = ?1 AND seq > ?2 AND role = 'summary'
                   AND rewound = 0
                 ORDER BY seq DESC",
            )?;
            let mut rows = stmt.query(params![session_id, context_start as i64])?;
            while let Some(row) = rows.next()? {
                let blocks: String = row.get(0)?;
                let blocks: Vec<Block> = serde_json::from_str(&blocks)
                    .map_err(|e| StoreError::Corrupt(format!("a summary's blocks: {e}")))?;
                match blocks.first() {
                    Some(Block::Summary {
                        method: CompactionMethod::CarryOver,
                        ..
                    }) => continue,
                    Some(Block::Summary { to_seq, .. }) => return Ok(*to_seq),
                    _ => continue,
                }
            }
            Ok(None)
        })?;
        let after = folded_through.unwrap_or(0).max(context_start);
        let mut entries = self.messages_with_counts(session_id, after)?;
        if let Some((note, count)) = note
            && note.seq <= after
        {
            entries.insert(0, (note, count));
        }
        Ok(entries)
    }

    /// Entries with `seq` greater than `after_seq`, oldest first, at most `limit`.
    pub fn messages_after(
        &self,
        session_id: &str,
        after_seq: u64,
        limit: usize,
    ) -> StoreResult<Vec<TranscriptEntry>> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(MESSAGES_AFTER)?;
            let rows = stmt
                .query_map(params![session_id, after_seq as i64, limit as i64], raw)?
                .collect::<Result<Vec<_>, _>>()?;
            drop(stmt);
            rows.into_iter().map(RawMessage::into_entry).collect()
        })
    }

    /// The newest `limit` entries with `seq` between `after_seq` and `before_seq` (both
    /// excluded), oldest first: a page of the transcript read backwards from its end, through
    /// the `(session_id, seq)` index in reverse, however long the session is.
    pub fn messages_before(
        &self,
        session_id: &str,
        before_seq: u64,
        after_seq: u64,
        limit: usize,
    ) -> StoreResult<Vec<TranscriptEntry>> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(MESSAGES_BEFORE)?;
            let mut rows = stmt
                .query_map(
                    params![
                        session_id,
                        before_seq.min(i64::MAX as u64) as i64,
                        after_seq.min(i64::MAX as u64) as i64,
                        limit as i64
                    ],
                    raw,
                )?
                .collect::<Result<Vec<_>, _>>()?;
            drop(stmt);
            rows.reverse();
            rows.into_iter().map(RawMessage::into_entry).collect()
        })
    }
}

/// [`Store::messages_after`]'s query (its plan is checked in the store's tests).
pub(super) const MESSAGES_AFTER: &str =
    "SELECT id, seq, run_id, role, blocks, status, created_at, rewound FROM messages
     WHERE session_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3";

/// [`Store::messages_before`]'s query (its plan is checked in the store's tests).
pub(super) const MESSAGES_BEFORE: &str =
    "SELECT id, seq, run_id, role, blocks, status, created_at, rewound FROM messages
     WHERE session_id = ?1 AND seq < ?2 AND seq > ?3 ORDER BY seq DESC LIMIT ?4";

/// Raises the session's `last_seq` to `seq` and its reserved mark to `reserve_through`, and
/// touches it, inside a transaction.
pub(super) fn record_seq(
    tx: &rusqlite::Transaction<'_>,
    session_id: &str,
    seq: u64,
    reserve_through: u64,
) -> StoreResult<()> {
    tx.execute(
        "UPDATE sessions SET last_seq = MAX(last_seq, ?2), updated_at = ?3,
                             seq_reserved = MAX(seq_reserved, ?4)
         WHERE id = ?1",
        params![session_id, seq as i64, now_ms(), reserve_through as i64],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::new_session;
    use pretty_assertions::assert_eq;

    #[test]
    fn blocks_are_written_as_serde_json_writes_them_in_a_buffer_of_their_length() {
        let blocks = vec![
            Block::Text {
                text: "é \" \u{1} 😀".repeat(1000),
            },
            Block::ToolCall {
                id: "c".into(),
                name: "n".into(),
                input: serde_json::json!({"b": 1.5, "a": [null]}),
            },
        ];
        let json = json_exact(&blocks).unwrap();
        assert_eq!(json, serde_json::to_string(&blocks).unwrap());
        assert_eq!(json.capacity(), json.len());
    }

    #[test]
    fn appends_with_increasing_seq_and_reads_back_after_seq() {
        let store = Store::open_in_memory().unwrap();
        let session = new_session(&store);
        let mut written = Vec::new();
        for (seq, text) in [(1, "one"), (2, "two"), (5, "three")] {
            written.push(
                store
                    .append_message(&NewMessage {
                        seq,
                        ..NewMessage::new(
                            &session,
                            None,
                            Role::User,
                            vec![Block::Text { text: text.into() }],
                        )
                    })
                    .unwrap(),
            );
        }
        assert_eq!(
            written.iter().map(|m| m.seq).collect::<Vec<_>>(),
            vec![1, 2, 5]
        );
        assert_eq!(
            store.messages_after(&session, 1, 10).unwrap(),
            written[1..].to_vec()
        );
        assert_eq!(store.session(&session).unwrap().unwrap().last_seq, 5);
    }
}
