//! Checkpoints and the rewind journal.
//!
//! Before a file tool changes a file, the file's content (or its absence) is kept here with the
//! user turn the change belongs to, so the turn can be taken back. Contents are stored once by
//! their SHA-256 in `checkpoint_blobs`, however many turns hold them, inside the database: a
//! checkpoint is committed with the same crash safety as the transcript. A sub-agent's change
//! belongs to the parent's turn that delegated it, so rewinding that turn takes it back too.
//!
//! A rewind is journaled (`rewinds`): the files to put back are written down before the first
//! one changes and the journal is closed (conversation cut, checkpoints marked rewound) once
//! all are back, so a daemon killed in the middle finishes it on its next start.

use rusqlite::{OptionalExtension, Transaction, params};
use serde::{Deserialize, Serialize};

use super::{Store, StoreError, StoreResult, blob_delta};
use crate::util::now_ms;

/// The SHA-256 of `bytes`, in lower-case hex: a content's name in `checkpoint_blobs`.
pub fn content_hash(bytes: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = String::with_capacity(64);
    for byte in digest.as_ref() {
        out.push_str(&format!("{byte:02x}"));
    }
    out
}

/// One change a tool is about to make, kept before it makes it.
#[derive(Debug, Clone, PartialEq)]
pub struct NewCheckpoint<'a> {
    /// The session whose tool makes the change (a child session's own id for a sub-agent).
    pub session_id: &'a str,
    pub call_id: &'a str,
    /// Relative to the workspace root.
    pub path: &'a str,
    /// The content and permissions now; `None` when the file does not exist.
    pub before: Option<(&'a [u8], u32)>,
    /// What the tool writes; `None` when the change removes the file (a command did).
    pub after: Option<&'a [u8]>,
}

/// One file a rewind would take back: its content before the first change of the rewound
/// turns, and what the session's latest change to it wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedFile {
    pub path: String,
    /// The content to put back; `None`: the file did not exist and is removed.
    pub before_hash: Option<String>,
    pub before_mode: Option<u32>,
    /// What the latest change wrote, and what it found (equal to the file when that change
    /// never reached the disk).
    pub last_after_hash: Option<String>,
    pub last_before_hash: Option<String>,
    pub restorable: bool,
}

/// A file as a journaled rewind puts it back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RestoreStep {
    pub path: String,
    /// The blob to write; `None` removes the file.
    pub hash: Option<String>,
    pub mode: Option<u32>,
}

/// What a rewind takes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RewindScope {
    Files,
    Conversation,
    Both,
}

impl RewindScope {
    pub fn as_str(self) -> &'static str {
        match self {
            RewindScope::Files => "files",
            RewindScope::Conversation => "conversation",
            RewindScope::Both => "both",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "files" => Some(RewindScope::Files),
            "conversation" => Some(RewindScope::Conversation),
            "both" => Some(RewindScope::Both),
            _ => None,
        }
    }

    pub fn files(self) -> bool {
        matches!(self, RewindScope::Files | RewindScope::Both)
    }

    pub fn conversation(self) -> bool {
        matches!(self, RewindScope::Conversation | RewindScope::Both)
    }
}

/// A journaled rewind.
#[derive(Debug, Clone, PartialEq)]
pub struct RewindJournal {
    pub id: i64,
    pub session_id: String,
    pub message_id: String,
    pub target_seq: u64,
    pub scope: RewindScope,
    pub plan: Vec<RestoreStep>,
}

/// One user turn and the files its changes touched, for `/rewind`'s list.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnFiles {
    pub message_id: String,
    pub seq: u64,
    /// The turn's text (its first text block).
    pub blocks: String,
    pub paths: Vec<String>,
    /// Those of `paths` a command outside a git work tree changed: a rewind cannot put them
    /// back.
    pub not_restorable: Vec<String>,
}

/// Where a message stands: its session, number, role and whether it was rewound.
#[derive(Debug, Clone, PartialEq)]
pub struct MessagePlace {
    pub session_id: String,
    pub seq: u64,
    /// As stored: `user`, `assistant`, `tool`, `note`, ...
    pub role: String,
    pub rewound: bool,
}

/// The session and user turn a change by `session_id`'s tool belongs to: the session's own
/// latest live user message, or, for a child session, the parent's turn whose `delegate` call
/// started it.
fn owning_turn(tx: &Transaction<'_>, session_id: &str) -> StoreResult<Option<(String, String)>> {
    let parent: Option<(String, String)> = tx
        .query_row(
            "SELECT parent_id, call_id FROM delegations WHERE child_id = ?1",
            [session_id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    let turn = match parent {
        Some((parent_id, call_id)) => tx
            .query_row(
                "SELECT u.id FROM tool_calls AS c
                 JOIN messages AS a ON a.id = c.message_id
                 JOIN messages AS u ON u.session_id = a.session_id AND u.seq < a.seq
                 WHERE c.session_id = ?1 AND c.id = ?2 AND u.role = 'user' AND u.rewound = 0
                 ORDER BY u.seq DESC LIMIT 1",
                params![parent_id, call_id],
                |r| r.get::<_, String>(0),
            )
            .optional()?
            .map(|turn| (parent_id, turn)),
        None => tx
            .query_row(
                "SELECT id FROM messages WHERE session_id = ?1 AND role = 'user' AND rewound = 0
                 ORDER BY seq DESC LIMIT 1",
                [session_id],
                |r| r.get::<_, String>(0),
            )
            .optional()?
            .map(|turn| (session_id.to_string(), turn)),
    };
    Ok(turn)
}

/// The longest chain of deltas a kept content is rebuilt through: one whole content per this
/// many versions of a file bounds what rebuilding an old version costs.
const MAX_CHAIN: usize = 256;

/// Keeps `bytes` (whose hash is `hash`) unless a content with that hash is kept already.
///
/// The newest version of a file is stored whole, and the version the session kept before it
/// for the same path is rewritten as a delta against it (newest whole, older ones as deltas,
/// as version control does): a rewind mostly wants recent versions, which then cost one
/// lookup, while a small edit to a large file costs about the edit.
fn keep_blob(
    tx: &Transaction<'_>,
    owner: &str,
    path: &str,
    hash: &str,
    bytes: &[u8],
) -> StoreResult<()> {
    let inserted = tx.execute(
        "INSERT OR IGNORE INTO checkpoint_blobs (hash, content) VALUES (?1, ?2)",
        params![hash, bytes],
    )?;
    if inserted == 0 {
        return Ok(());
    }
    let previous: Option<String> = tx
        .query_row(
            "SELECT before_hash FROM checkpoints
             WHERE session_id = ?1 AND path = ?2 AND before_hash IS NOT NULL
             ORDER BY id DESC LIMIT 1",
            params![owner, path],
            |r| r.get(0),
        )
        .optional()?;
    let Some(previous) = previous else {
        return Ok(());
    };
    // Only a whole content is rewritten, so no delta's base ever turns into a delta of its
    // own descendant (the new content is new: nothing is based on it yet).
    let old: Option<(Vec<u8>, i64)> = tx
        .query_row(
            "SELECT content, chain FROM checkpoint_blobs WHERE hash = ?1 AND base IS NULL",
            [&previous],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    let Some((old, chain)) = old else {
        return Ok(());
    };
    if chain as usize >= MAX_CHAIN {
        return Ok(());
    }
    let delta = blob_delta::encode(bytes, &old);
    if delta.len() * 2 > old.len() {
        return Ok(());
    }
    tx.execute(
        "UPDATE checkpoint_blobs SET content = ?2, base = ?3, chain = 0 WHERE hash = ?1",
        params![previous, delta, hash],
    )?;
    tx.execute(
        "UPDATE checkpoint_blobs SET chain = ?2 WHERE hash = ?1",
        params![hash, chain + 1],
    )?;
    Ok(())
}

/// Deletes the kept contents no checkpoint needs any more, directly or as the base of a
/// delta one needs: after a session's checkpoints went with it.
pub(super) fn collect_blobs(tx: &Transaction<'_>) -> StoreResult<usize> {
    Ok(tx.execute(
        "WITH RECURSIVE live(hash) AS (
             SELECT before_hash FROM checkpoints WHERE before_hash IS NOT NULL
             UNION
             SELECT b.base FROM checkpoint_blobs AS b JOIN live ON b.hash = live.hash
             WHERE b.base IS NOT NULL
         )
         DELETE FROM checkpoint_blobs WHERE hash NOT IN (SELECT hash FROM live)",
        [],
    )?)
}

impl Store {
    /// The folder beside the database file where snapshots of work trees around commands are
    /// kept (`<database>-snapshots`); `None` for a database in memory.
    pub fn command_snapshot_dir(&self) -> Option<std::path::PathBuf> {
        self.read(|conn| Ok(conn.path().map(str::to_string)))
            .ok()
            .flatten()
            .filter(|p| !p.is_empty())
            .map(|p| std::path::PathBuf::from(format!("{p}-snapshots")))
    }

    /// Where the message `id` stands, or `None` when there is no such message.
    pub fn message_place(&self, id: &str) -> StoreResult<Option<MessagePlace>> {
        self.read(|conn| {
            Ok(conn
                .query_row(
                    "SELECT session_id, seq, role, rewound FROM messages WHERE id = ?1",
                    [id],
                    |r| {
                        Ok(MessagePlace {
                            session_id: r.get(0)?,
                            seq: r.get::<_, i64>(1)?.max(0) as u64,
                            role: r.get(2)?,
                            rewound: r.get(3)?,
                        })
                    },
                )
                .optional()?)
        })
    }

    /// How many of the session's messages from `seq` on are not rewound: what a rewind of
    /// the conversation there would mark.
    pub fn live_messages_from(&self, session_id: &str, seq: u64) -> StoreResult<u64> {
        self.read(|conn| {
            Ok(conn.query_row(
                "SELECT COUNT(*) FROM messages WHERE session_id = ?1 AND seq >= ?2 AND rewound = 0",
                params![session_id, seq as i64],
                |r| r.get::<_, i64>(0),
            )? as u64)
        })
    }

    /// Keeps a file's content before a tool changes it, tied to the turn the change belongs
    /// to. Fails when the session has no user turn to tie it to.
    pub fn keep_checkpoint(&self, new: &NewCheckpoint<'_>) -> StoreResult<()> {
        self.write(|conn| {
            let tx = conn.transaction()?;
            let Some((owner, turn)) = owning_turn(&tx, new.session_id)? else {
                return Err(StoreError::Corrupt(format!(
                    "session {} has no user turn to keep a checkpoint for",
                    new.session_id
                )));
            };
            let (before_hash, before_mode) = match new.before {
                Some((bytes, mode)) => {
                    let hash = content_hash(bytes);
                    keep_blob(&tx, &owner, new.path, &hash, bytes)?;
                    (Some(hash), Some(mode))
                }
                None => (None, None),
            };
            tx.execute(
                "INSERT INTO checkpoints (session_id, turn_id, call_id, by_session, path,
                                          before_hash, before_mode, after_hash, at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                params![
                    owner,
                    turn,
                    new.call_id,
                    new.session_id,
                    new.path,
                    before_hash,
                    before_mode,
                    new.after.map(content_hash),
                    now_ms()
                ],
            )?;
            tx.commit()?;
            Ok(())
        })
    }

    /// Records that a command outside a git work tree changed `path` (created, changed or
    /// removed it): the turn lists it, marked not restorable, since its content before was
    /// never read. Fails when the session has no user turn to tie it to.
    pub fn keep_unrestorable(
        &self,
        session_id: &str,
        call_id: &str,
        path: &str,
    ) -> StoreResult<()> {
        self.write(|conn| {
            let tx = conn.transaction()?;
            let Some((owner, turn)) = owning_turn(&tx, session_id)? else {
                return Err(StoreError::Corrupt(format!(
                    "session {session_id} has no user turn to keep a checkpoint for"
                )));
            };
            tx.execute(
                "INSERT INTO checkpoints (session_id, turn_id, call_id, by_session, path,
                                          restorable, at)
                 VALUES (?1, ?2, ?3, ?4, ?5, 0, ?6)",
                params![owner, turn, call_id, session_id, path, now_ms()],
            )?;
            tx.commit()?;
            Ok(())
        })
    }

    /// The newest checkpoint's id (0 for none): a command's snapshot before it remembers it,
    /// so that its snapshot after can tell the changes kept since by others.
    pub fn checkpoint_watermark(&self) -> StoreResult<i64> {
        self.read(|conn| {
            Ok(
                conn.query_row("SELECT COALESCE(MAX(id), 0) FROM checkpoints", [], |r| {
                    r.get(0)
                })?,
            )
        })
    }

    /// Whether another call of a session in the same workspace as `session_id` kept a change
    /// of `path` to the content `after_hash` after the checkpoint `since`: a command running
    /// meanwhile sees that change in its own snapshots, and it is not its own.
    pub fn kept_by_another_call(
        &self,
        session_id: &str,
        call_id: &str,
        since: i64,
        path: &str,
        after_hash: Option<&str>,
    ) -> StoreResult<bool> {
        self.read(|conn| {
            Ok(conn.query_row(
                "SELECT EXISTS (
                     SELECT 1 FROM checkpoints AS c
                     JOIN sessions AS them ON them.id = c.by_session
                     JOIN sessions AS me ON me.id = ?1
                     WHERE c.id > ?3 AND c.path = ?4 AND c.after_hash IS ?5
                       AND c.restorable = 1 AND them.workspace_root IS me.workspace_root
                       AND NOT (c.by_session = ?1 AND c.call_id = ?2)
                 )",
                params![session_id, call_id, since, path, after_hash],
                |r| r.get(0),
            )?)
        })
    }

    /// The files that rewinding `session_id` to the user message at `target_seq` would take
    /// back, in the order they were first changed.
    pub fn rewind_plan(&self, session_id: &str, target_seq: u64) -> StoreResult<Vec<PlannedFile>> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT c.path, c.before_hash, c.before_mode, c.after_hash, c.restorable
                 FROM checkpoints AS c JOIN messages AS m ON m.id = c.turn_id
                 WHERE c.session_id = ?1 AND c.rewound_by IS NULL AND m.seq >= ?2
                 ORDER BY c.id",
            )?;
            let rows = stmt.query_map(params![session_id, target_seq as i64], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, Option<String>>(1)?,
                    r.get::<_, Option<u32>>(2)?,
                    r.get::<_, Option<String>>(3)?,
                    r.get::<_, bool>(4)?,
                ))
            })?;
            let mut plan: Vec<PlannedFile> = Vec::new();
            for row in rows {
                let (path, before_hash, before_mode, after_hash, restorable) = row?;
                match plan.iter_mut().find(|p| p.path == path) {
                    Some(file) => {
                        file.last_before_hash = before_hash;
                        file.last_after_hash = after_hash;
                        file.restorable &= restorable;
                    }
                    None => plan.push(PlannedFile {
                        path,
                        last_before_hash: before_hash.clone(),
                        before_hash,
                        before_mode,
                        last_after_hash: after_hash,
                        restorable,
                    }),
                }
            }
            Ok(plan)
        })
    }

    /// The bytes of every kept content, for the benchmark of what checkpoints weigh.
    pub fn checkpoint_bytes(&self) -> StoreResult<u64> {
        self.read(|conn| {
            Ok(conn.query_row(
                "SELECT COALESCE(SUM(LENGTH(content)), 0) FROM checkpoint_blobs",
                [],
                |r| r.get::<_, i64>(0),
            )? as u64)
        })
    }

    /// A kept content, by its hash: the stored bytes when whole, else rebuilt from the whole
    /// content its chain of deltas ends at, and checked against the hash.
    pub fn checkpoint_blob(&self, hash: &str) -> StoreResult<Option<Vec<u8>>> {
        self.read(|conn| {
            let mut stmt =
                conn.prepare_cached("SELECT content, base FROM checkpoint_blobs WHERE hash = ?1")?;
            let mut deltas: Vec<Vec<u8>> = Vec::new();
            let mut next = hash.to_string();
            let whole = loop {
                let Some((content, base)) = stmt
                    .query_row([&next], |r| {
                        Ok((r.get::<_, Vec<u8>>(0)?, r.get::<_, Option<String>>(1)?))
                    })
                    .optional()?
                else {
                    return match deltas.is_empty() {
                        true => Ok(None),
                        false => Err(StoreError::Corrupt(format!(
                            "kept content {hash}: the base {next} of its delta is missing"
                        ))),
                    };
                };
                match base {
                    None => break content,
                    Some(base) => {
                        if deltas.len() > MAX_CHAIN * 2 {
                            return Err(StoreError::Corrupt(format!(
                                "kept content {hash}: its chain of deltas does not end"
                            )));
                        }
                        deltas.push(content);
                        next = base;
                    }
                }
            };
            let mut content = whole;
            for delta in deltas.iter().rev() {
                content = blob_delta::apply(&content, delta)
                    .map_err(|e| StoreError::Corrupt(format!("kept content {hash}: {e}")))?;
            }
            if content_hash(&content) != hash {
                return Err(StoreError::Corrupt(format!(
                    "kept content {hash} does not match its hash"
                )));
            }
            Ok(Some(content))
        })
    }

    /// How many kept contents there are and how many of them are stored as deltas.
    pub fn checkpoint_blob_counts(&self) -> StoreResult<(u64, u64)> {
        self.read(|conn| {
            Ok(conn.query_row(
                "SELECT COUNT(*), COUNT(base) FROM checkpoint_blobs",
                [],
                |r| Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64)),
            )?)
        })
    }

    /// Writes a rewind's journal before any file changes; its id.
    pub fn open_rewind(
        &self,
        session_id: &str,
        message_id: &str,
        target_seq: u64,
        scope: RewindScope,
        plan: &[RestoreStep],
    ) -> StoreResult<i64> {
        let plan = serde_json::to_string(plan)
            .map_err(|e| StoreError::Corrupt(format!("unserialisable rewind plan: {e}")))?;
        self.write(|conn| {
            conn.execute(
                "INSERT INTO rewinds (session_id, message_id, target_seq, restore, plan, started_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    session_id,
                    message_id,
                    target_seq as i64,
                    scope.as_str(),
                    plan,
                    now_ms()
                ],
            )?;
            Ok(conn.last_insert_rowid())
        })
    }

    /// Closes a rewind once its files are back: the conversation is cut (its later entries
    /// marked rewound) and the checkpoints taken back marked so, in one transaction. Answers
    /// how many messages were marked.
    pub fn close_rewind(&self, journal: &RewindJournal) -> StoreResult<u64> {
        self.write(|conn| {
            let tx = conn.transaction()?;
            let mut cut = 0;
            if journal.scope.conversation() {
                cut = tx.execute(
                    "UPDATE messages SET rewound = 1
                     WHERE session_id = ?1 AND seq >= ?2 AND rewound = 0",
                    params![journal.session_id, journal.target_seq as i64],
                )? as u64;
            }
            if journal.scope.files() {
                tx.execute(
                    "UPDATE checkpoints SET rewound_by = ?3
                     WHERE session_id = ?1 AND rewound_by IS NULL
                       AND turn_id IN (SELECT id FROM messages WHERE session_id = ?1 AND seq >= ?2)",
                    params![journal.session_id, journal.target_seq as i64, journal.id],
                )?;
            }
            tx.execute(
                "UPDATE rewinds SET finished_at = ?2 WHERE id = ?1",
                params![journal.id, now_ms()],
            )?;
            tx.commit()?;
            Ok(cut)
        })
    }

    /// Rewinds a killed daemon left open, oldest first.
    pub fn open_rewinds(&self) -> StoreResult<Vec<RewindJournal>> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT id, session_id, message_id, target_seq, restore, plan FROM rewinds
                 WHERE finished_at IS NULL ORDER BY id",
            )?;
            let rows = stmt
                .query_map([], |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, i64>(3)?,
                        r.get::<_, String>(4)?,
                        r.get::<_, String>(5)?,
                    ))
                })?
                .collect::<Result<Vec<_>, _>>()?;
            rows.into_iter()
                .map(|(id, session_id, message_id, seq, restore, plan)| {
                    let corrupt =
                        |what: String| StoreError::Corrupt(format!("rewind {id}: {what}"));
                    Ok(RewindJournal {
                        id,
                        session_id,
                        message_id,
                        target_seq: seq.max(0) as u64,
                        scope: RewindScope::parse(&restore)
                            .ok_or_else(|| corrupt(format!("unknown scope {restore:?}")))?,
                        plan: serde_json::from_str(&plan).map_err(|e| corrupt(e.to_string()))?,
                    })
                })
                .collect()
        })
    }

    /// The session's live user turns, oldest first, each with the files its changes touched
    /// (not yet taken back).
    pub fn turns_with_files(&self, session_id: &str) -> StoreResult<Vec<TurnFiles>> {
        self.read(|conn| {
            let mut turns = conn.prepare_cached(
                "SELECT id, seq, blocks FROM messages
                 WHERE session_id = ?1 AND role = 'user' AND rewound = 0 ORDER BY seq",
            )?;
            let mut turns: Vec<TurnFiles> = turns
                .query_map([session_id], |r| {
                    Ok(TurnFiles {
                        message_id: r.get(0)?,
                        seq: r.get::<_, i64>(1)?.max(0) as u64,
                        blocks: r.get(2)?,
                        paths: Vec::new(),
                        not_restorable: Vec::new(),
                    })
                })?
                .collect::<Result<Vec<_>, _>>()?;
            let mut files = conn.prepare_cached(
                "SELECT turn_id, path, restorable FROM checkpoints
                 WHERE session_id = ?1 AND rewound_by IS NULL ORDER BY id",
            )?;
            let rows = files.query_map([session_id], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, bool>(2)?,
                ))
            })?;
            for row in rows {
                let (turn, path, restorable) = row?;
                let Some(t) = turns.iter_mut().find(|t| t.message_id == turn) else {
                    continue;
                };
                if !restorable && !t.not_restorable.contains(&path) {
                    t.not_restorable.push(path.clone());
                }
                if !t.paths.contains(&path) {
                    t.paths.push(path);
                }
            }
            Ok(turns)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Block, Role};
    use crate::store::NewMessage;
    use crate::store::test_support::new_session as session;
    use pretty_assertions::assert_eq;

    fn user(store: &Store, id: &str, text: &str) -> u64 {
        let row = store.session(id).unwrap().unwrap();
        let mut new = NewMessage::new(
            id,
            None,
            Role::User,
            vec![Block::Text { text: text.into() }],
        );
        new.seq = row.next_free_seq();
        store.append_message(&new).unwrap().seq
    }

    fn keep(store: &Store, id: &str, path: &str, before: Option<&[u8]>, after: &[u8]) {
        store
            .keep_checkpoint(&NewCheckpoint {
                session_id: id,
                call_id: "c",
                path,
                before: before.map(|b| (b, 0o644)),
                after: Some(after),
            })
            .unwrap();
    }

    #[test]
    fn a_content_is_stored_once_and_the_plan_spans_the_rewound_turns() {
        let store = Store::open_in_memory().unwrap();
        let id = session(&store);
        let first = user(&store, &id, "one");
        keep(&store, &id, "a.txt", Some(b"v0"), b"v1");
        let second = user(&store, &id, "two");
        keep(&store, &id, "a.txt", Some(b"v1"), b"v2");
        keep(&store, &id, "new.txt", None, b"n");
        keep(&store, &id, "b.txt", Some(b"v0"), b"w");
        let blobs: i64 = store
            .read(|c| Ok(c.query_row("SELECT COUNT(*) FROM checkpoint_blobs", [], |r| r.get(0))?))
            .unwrap();
        assert_eq!(blobs, 2, "v0 is stored once for two files");
        let plan = store.rewind_plan(&id, second).unwrap();
        let paths: Vec<_> = plan
            .iter()
            .map(|p| (p.path.as_str(), p.before_hash.clone()))
            .collect();
        assert_eq!(
            paths,
            vec![
                ("a.txt", Some(content_hash(b"v1"))),
                ("new.txt", None),
                ("b.txt", Some(content_hash(b"v0")))
            ]
        );
        let whole = store.rewind_plan(&id, first).unwrap();
        assert_eq!(
            (
                whole[0].before_hash.clone(),
                whole[0].last_after_hash.clone()
            ),
            (Some(content_hash(b"v0")), Some(content_hash(b"v2")))
        );
        assert_eq!(
            store.checkpoint_blob(&content_hash(b"v1")).unwrap(),
            Some(b"v1".to_vec())
        );
    }

    fn blob_count(store: &Store) -> (u64, u64) {
        store.checkpoint_blob_counts().unwrap()
    }

    /// A file of `lines` 64-byte lines with line `edited` saying `turn`.
    fn version(lines: usize, edited: usize, turn: usize) -> Vec<u8> {
        (0..lines)
            .map(|i| match i == edited {
                true => format!("{:<63}\n", format!("line {i} turn {turn}")),
                false => format!("{:<63}\n", format!("line {i}")),
            })
            .collect::<String>()
            .into_bytes()
    }

    #[test]
    fn edits_of_one_file_keep_each_content_once_and_as_small_deltas() {
        let store = Store::open_in_memory().unwrap();
        let id = session(&store);
        let versions: Vec<Vec<u8>> = (0..30).map(|t| version(320, (t * 7) % 320, t)).collect();
        for turn in 0..29 {
            user(&store, &id, &format!("turn {turn}"));
            keep(
                &store,
                &id,
                "big.txt",
                Some(&versions[turn]),
                &versions[turn + 1],
            );
        }
        // Going back to an earlier content stores nothing new.
        user(&store, &id, "back");
        keep(&store, &id, "big.txt", Some(&versions[3]), &versions[29]);
        assert_eq!(
            blob_count(&store),
            (29, 28),
            "29 contents, all but the newest deltas"
        );
        for (i, content) in versions[..29].iter().enumerate() {
            assert_eq!(
                store
                    .checkpoint_blob(&content_hash(content))
                    .unwrap()
                    .as_deref(),
                Some(content.as_slice()),
                "version {i}"
            );
        }
        let kept = store.checkpoint_bytes().unwrap() as usize;
        assert!(
            kept < versions[0].len() + 28 * 100,
            "{kept} bytes kept for one 20 KB file and 28 one-line edits"
        );
    }

    #[test]
    fn deleting_a_session_deletes_the_contents_only_it_needed() {
        let store = Store::open_in_memory().unwrap();
        let gone = session(&store);
        let stays = session(&store);
        let versions: Vec<Vec<u8>> = (0..5).map(|t| version(100, t, t)).collect();
        user(&store, &gone, "one");
        for turn in 0..4 {
            keep(
                &store,
                &gone,
                "a.txt",
                Some(&versions[turn]),
                &versions[turn + 1],
            );
        }
        user(&store, &stays, "one");
        keep(&store, &stays, "b.txt", Some(&versions[1]), b"b");
        assert_eq!(blob_count(&store), (4, 3));
        assert!(store.delete_session(&gone).unwrap());
        // versions[1] is a delta on versions[2], which on versions[3]: the chain stays whole.
        assert_eq!(blob_count(&store), (3, 2));
        assert_eq!(
            store.checkpoint_blob(&content_hash(&versions[1])).unwrap(),
            Some(versions[1].clone())
        );
        assert!(store.delete_session(&stays).unwrap());
        assert_eq!(blob_count(&store), (0, 0));
    }

    #[test]
    fn a_closed_rewind_cuts_the_conversation_and_retires_its_checkpoints() {
        let store = Store::open_in_memory().unwrap();
        let id = session(&store);
        user(&store, &id, "one");
        let second = user(&store, &id, "two");
        keep(&store, &id, "a.txt", Some(b"v1"), b"v2");
        let step = RestoreStep {
            path: "a.txt".into(),
            hash: Some(content_hash(b"v1")),
            mode: Some(0o644),
        };
        let journal_id = store
            .open_rewind(
                &id,
                "m",
                second,
                RewindScope::Both,
                std::slice::from_ref(&step),
            )
            .unwrap();
        let open = store.open_rewinds().unwrap();
        assert_eq!(
            open,
            vec![RewindJournal {
                id: journal_id,
                session_id: id.clone(),
                message_id: "m".into(),
                target_seq: second,
                scope: RewindScope::Both,
                plan: vec![step],
            }]
        );
        assert_eq!(store.close_rewind(&open[0]).unwrap(), 1);
        assert_eq!(store.open_rewinds().unwrap(), vec![]);
        assert_eq!(store.rewind_plan(&id, second).unwrap(), vec![]);
        let turns: Vec<_> = store
            .turns_with_files(&id)
            .unwrap()
            .into_iter()
            .map(|t| t.seq)
            .collect();
        assert_eq!(turns.len(), 1);
    }
}
