//! Versioned schema migrations, tracked in SQLite's `user_version`.
//!
//! Each entry runs once, in order, inside a transaction. Never edit a released entry: add one.

use rusqlite::{Connection, TransactionBehavior};

use super::{StoreError, StoreResult};

const MIGRATIONS: &[&str] = &[
    // 1: sessions and their transcript.
    r#"
    CREATE TABLE sessions (
        id             TEXT PRIMARY KEY,
        title          TEXT NOT NULL,
        account        TEXT NOT NULL,
        model          TEXT NOT NULL,
        system_prompt  TEXT,
        workspace_root TEXT,
        max_steps      INTEGER NOT NULL,
        created_at     INTEGER NOT NULL,
        updated_at     INTEGER NOT NULL,
        last_seq       INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX sessions_by_update ON sessions (updated_at DESC, id DESC);
    CREATE INDEX sessions_by_root ON sessions (workspace_root, updated_at DESC, id DESC);

    CREATE TABLE messages (
        id          TEXT PRIMARY KEY,
        session_id  TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        seq         INTEGER NOT NULL,
        run_id      TEXT,
        role        TEXT NOT NULL,
        blocks      TEXT NOT NULL,
        status      TEXT NOT NULL,
        created_at  INTEGER NOT NULL
    );
    CREATE UNIQUE INDEX messages_by_seq ON messages (session_id, seq);
    "#,
    // 2: runs, their tool calls, approvals, permissions and changed files.
    r#"
    CREATE TABLE runs (
        id          TEXT PRIMARY KEY,
        session_id  TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        model       TEXT NOT NULL,
        status      TEXT NOT NULL,          -- running | finished
        reason      TEXT,
        error       TEXT,
        steps       INTEGER NOT NULL DEFAULT 0,
        started_at  INTEGER NOT NULL,
        finished_at INTEGER
    );
    CREATE INDEX runs_open ON runs (status) WHERE status <> 'finished';

    CREATE TABLE tool_calls (
        id          TEXT NOT NULL,          -- the model's call id
        session_id  TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        run_id      TEXT NOT NULL,
        message_id  TEXT NOT NULL,
        position    INTEGER NOT NULL,
        name        TEXT NOT NULL,
        input       TEXT NOT NULL,
        status      TEXT NOT NULL,
        output      TEXT,
        is_error    INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (session_id, id)
    );
    CREATE INDEX tool_calls_by_message ON tool_calls (message_id, position);

    CREATE TABLE approvals (
        id          TEXT PRIMARY KEY,
        session_id  TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        run_id      TEXT NOT NULL,
        call_id     TEXT NOT NULL,
        tool        TEXT NOT NULL,
        input       TEXT NOT NULL,
        summary     TEXT NOT NULL,
        status      TEXT NOT NULL,          -- pending | allow | allowAlways | deny | cancelled
        created_at  INTEGER NOT NULL,
        resolved_at INTEGER
    );
    CREATE INDEX approvals_pending ON approvals (session_id) WHERE status = 'pending';

    CREATE TABLE allowed_tools (
        session_id  TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        tool        TEXT NOT NULL,
        PRIMARY KEY (session_id, tool)
    );

    CREATE TABLE changed_files (
        session_id  TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        path        TEXT NOT NULL,
        added       INTEGER NOT NULL,
        removed     INTEGER NOT NULL,
        PRIMARY KEY (session_id, path)
    );
    "#,
    // 3: usage lines: facts of each model request; prices are applied when read.
    r#"
    CREATE TABLE usage_lines (
        id           INTEGER PRIMARY KEY,
        session_id   TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        run_id       TEXT NOT NULL,
        provider     TEXT NOT NULL,
        model        TEXT NOT NULL,
        input        INTEGER NOT NULL,
        output       INTEGER NOT NULL,
        cache_read   INTEGER NOT NULL,
        cache_write  INTEGER NOT NULL,
        reasoning    INTEGER NOT NULL,
        at           INTEGER NOT NULL,
        duration_ms  INTEGER NOT NULL
    );
    CREATE INDEX usage_by_session ON usage_lines (session_id, at);
    "#,
    // 4: input typed while a run works, and the answers to sends, for idempotency.
    r#"
    CREATE TABLE pending_input (
        id                TEXT PRIMARY KEY,
        session_id        TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        client_message_id TEXT,
        text              TEXT NOT NULL,
        status            TEXT NOT NULL,    -- pending | leased | delivered | promoted | cancelled
        run_id            TEXT,
        message_id        TEXT,
        created_at        INTEGER NOT NULL,
        updated_at        INTEGER NOT NULL
    );
    CREATE INDEX pending_open ON pending_input (session_id) WHERE status IN ('pending', 'leased');
    CREATE UNIQUE INDEX pending_by_client ON pending_input (session_id, client_message_id)
        WHERE client_message_id IS NOT NULL;

    CREATE TABLE sends (
        session_id        TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        client_message_id TEXT NOT NULL,
        message_id        TEXT NOT NULL,
        run_id            TEXT,
        PRIMARY KEY (session_id, client_message_id)
    );
    "#,
    // 5: token counts per message, run budgets, and where the model's context starts (/clear).
    r#"
    ALTER TABLE messages ADD COLUMN tokens INTEGER;
    ALTER TABLE messages ADD COLUMN tokens_exact INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE sessions ADD COLUMN cap_usd REAL;
    ALTER TABLE sessions ADD COLUMN max_seconds INTEGER;
    ALTER TABLE sessions ADD COLUMN context_start_seq INTEGER NOT NULL DEFAULT 0;
    "#,
    // 6: each successful write's file contents before and after, so a client can show a diff.
    r#"
    CREATE TABLE file_changes (
        id          INTEGER PRIMARY KEY,
        session_id  TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        call_id     TEXT NOT NULL,
        path        TEXT NOT NULL,
        before      TEXT,                   -- NULL: the file did not exist (or omitted)
        after       TEXT,                   -- NULL only when omitted
        omitted     INTEGER NOT NULL DEFAULT 0,
        at          INTEGER NOT NULL
    );
    CREATE INDEX file_changes_by_path ON file_changes (session_id, path, id);
    "#,
    // 7: the highest event `seq` reserved for a session, persisted before any event uses it,
    // so a restarted daemon never hands out a number a client has already seen.
    r#"
    ALTER TABLE sessions ADD COLUMN seq_reserved INTEGER NOT NULL DEFAULT 0;
    "#,
    // 8: what a usage line paid for (a turn's step or a summary), and a session's rollover.
    r#"
    ALTER TABLE usage_lines ADD COLUMN kind TEXT NOT NULL DEFAULT 'turn';
    ALTER TABLE sessions ADD COLUMN rollover_secs INTEGER;
    "#,
    // 9: the MCP servers a session was given, and every server configuration's last tool list.
    r#"
    CREATE TABLE session_mcp_servers (
        session_id  TEXT PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
        servers     TEXT NOT NULL
    );
    CREATE TABLE mcp_tool_cache (
        config_key  TEXT PRIMARY KEY,
        tools       TEXT NOT NULL,
        updated_at  INTEGER NOT NULL
    );
    "#,
    // 10: which daemon drives a session's run: a lease kept alive by a heartbeat, so a second
    // daemon on the same file leaves a live run alone and takes over only an expired one; and
    // who answered an approval, so the run's owner can tell its clients about an answer given
    // through another daemon.
    r#"
    CREATE TABLE run_leases (
        session_id     TEXT PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
        run_id         TEXT NOT NULL,
        owner          TEXT NOT NULL,
        pid            INTEGER NOT NULL,
        host           TEXT,                -- the machine and process namespace of `pid`
        acquired_at    INTEGER NOT NULL,
        heartbeat_at   INTEGER NOT NULL,
        expires_at     INTEGER NOT NULL,
        stop_requested INTEGER NOT NULL DEFAULT 0
    );
    ALTER TABLE approvals ADD COLUMN resolved_by TEXT;
    "#,
    // 11: delegations: a child session answers one `delegate` tool call of its parent's run,
    // and a session may turn the `delegate` tool off.
    r#"
    CREATE TABLE delegations (
        child_id       TEXT PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
        parent_id      TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        parent_run_id  TEXT NOT NULL,
        call_id        TEXT NOT NULL,
        tools          TEXT NOT NULL,       -- read-only | all
        task           TEXT NOT NULL,
        created_at     INTEGER NOT NULL
    );
    CREATE UNIQUE INDEX delegations_by_call ON delegations (parent_id, call_id);
    ALTER TABLE sessions ADD COLUMN delegation_off INTEGER NOT NULL DEFAULT 0;
    "#,
    // 12: which kind of client started a session (interactive | oneshot; NULL: not said).
    r#"
    ALTER TABLE sessions ADD COLUMN origin TEXT;
    "#,
    // 13: the commands running now and the daemon running each, so the next daemon on the
    // file can end what a killed one left.
    r#"
    CREATE TABLE command_processes (
        tag          TEXT PRIMARY KEY,      -- SIDECHAT_COMMAND in the command's environment
        owner        TEXT NOT NULL,         -- the daemon running it
        owner_pid    INTEGER NOT NULL,
        owner_start  INTEGER,               -- the daemon's start time, clock ticks after boot
        host         TEXT,                  -- the machine and process namespace of the pids
        pgid         INTEGER NOT NULL,      -- the shell's pid and process group
        start        INTEGER NOT NULL,      -- the shell's start time
        started_at   INTEGER NOT NULL
    );
    "#,
    // 14: a session's rows by the session, in every table that cascades from it, so that
    // deleting (or pruning) one session reads its own rows rather than every session's.
    r#"
    CREATE INDEX runs_by_session ON runs (session_id);
    CREATE INDEX approvals_by_session ON approvals (session_id);
    CREATE INDEX pending_by_session ON pending_input (session_id);
    "#,
    // 15: a session's usage lines in the order they were written, so that its spend can be
    // brought up to date by reading only the lines written since it was last totalled.
    r#"
    CREATE INDEX usage_by_session_line ON usage_lines (session_id, id);
    "#,
    // 16: each session's spend as last totalled (a cache: it can always be rebuilt from the
    // usage lines), so that a new daemon does not price a year of usage to list sessions.
    r#"
    CREATE TABLE session_spend (
        session_id      TEXT PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
        through_line    INTEGER NOT NULL,   -- the newest usage line counted
        prices          TEXT NOT NULL,      -- the price book it was priced with
        tokens          INTEGER NOT NULL,
        cost_pico       TEXT NOT NULL,      -- picodollars, in decimal (they can pass 2^63)
        priced_lines    INTEGER NOT NULL,
        unpriced_lines  INTEGER NOT NULL
    );
    "#,
    // 17: "always in this workspace" answers: an allow rule per workspace root, in force in
    // every session of that root; and what an approval prompt proposed and said, and the
    // reason given with a deny, so a run reading the answer (maybe another daemon's) has it.
    r#"
    CREATE TABLE workspace_rules (
        id             TEXT PRIMARY KEY,
        workspace_root TEXT NOT NULL,       -- resolved (symbolic links followed)
        rule           TEXT NOT NULL,
        created_at     INTEGER NOT NULL
    );
    CREATE UNIQUE INDEX workspace_rules_by_root ON workspace_rules (workspace_root, rule);
    ALTER TABLE approvals ADD COLUMN proposed_rule TEXT;
    ALTER TABLE approvals ADD COLUMN why_asked TEXT;
    ALTER TABLE approvals ADD COLUMN reason TEXT;
    "#,
    // 18: where a session's title came from (`given` by a client, `placeholder` until the
    // daemon titles it after the first answer, `titling` while it asks, `auto` once titled),
    // and whether older turns are folded automatically (NULL: the config's default).
    r#"
    ALTER TABLE sessions ADD COLUMN title_state TEXT NOT NULL DEFAULT 'given';
    UPDATE sessions SET title_state = 'placeholder' WHERE title = 'New chat';
    ALTER TABLE sessions ADD COLUMN auto_compact INTEGER;
    "#,
    // 19: the latest plan a session's model gave (`update_plan`), as the protocol's JSON.
    r#"
    CREATE TABLE session_plans (
        session_id  TEXT PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
        plan        TEXT NOT NULL,
        updated_at  INTEGER NOT NULL
    );
    "#,
    // 20: checkpoints: each file's content before a tool changed it, stored once by its
    // SHA-256, tied to the user turn it belongs to; the journal of rewinds, so a rewind a crash
    // cut short is finished by the next daemon; rewound messages; a fork's origin.
    r#"
    CREATE TABLE checkpoint_blobs (
        hash        TEXT PRIMARY KEY,       -- SHA-256 of content, hex
        content     BLOB NOT NULL
    );
    CREATE TABLE checkpoints (
        id          INTEGER PRIMARY KEY,
        session_id  TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        turn_id     TEXT NOT NULL,          -- the user message the change belongs to
        call_id     TEXT NOT NULL,
        by_session  TEXT NOT NULL,          -- the session whose tool made it (a child's own id)
        path        TEXT NOT NULL,          -- relative to the workspace root
        before_hash TEXT,                   -- NULL: the file did not exist
        before_mode INTEGER,
        after_hash  TEXT,                   -- what the tool writes
        restorable  INTEGER NOT NULL DEFAULT 1,
        rewound_by  INTEGER,                -- the rewind that took it back
        at          INTEGER NOT NULL
    );
    CREATE INDEX checkpoints_by_session ON checkpoints (session_id, id);
    CREATE TABLE rewinds (
        id          INTEGER PRIMARY KEY,
        session_id  TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        message_id  TEXT NOT NULL,
        target_seq  INTEGER NOT NULL,       -- the message's seq: what is taken back starts there
        restore     TEXT NOT NULL,          -- files | conversation | both
        plan        TEXT NOT NULL,          -- JSON: the files to put back
        started_at  INTEGER NOT NULL,
        finished_at INTEGER
    );
    CREATE INDEX rewinds_open ON rewinds (id) WHERE finished_at IS NULL;
    CREATE INDEX rewinds_by_session ON rewinds (session_id);
    ALTER TABLE messages ADD COLUMN rewound INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE sessions ADD COLUMN forked_from TEXT;
    "#,
    // 21: kept contents as deltas: a content whose `base` is set holds the delta that rebuilds
    // it from that base (the newer version of the same file), and `chain` on a whole content
    // counts the deltas chained onto it. Existing contents stay whole; those no checkpoint
    // needs (their sessions were deleted) go.
    r#"
    ALTER TABLE checkpoint_blobs ADD COLUMN base TEXT;
    ALTER TABLE checkpoint_blobs ADD COLUMN chain INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX checkpoints_by_path ON checkpoints (session_id, path, id);
    CREATE INDEX checkpoints_by_before ON checkpoints (before_hash) WHERE before_hash IS NOT NULL;
    DELETE FROM checkpoint_blobs
     WHERE hash NOT IN (SELECT before_hash FROM checkpoints WHERE before_hash IS NOT NULL);
    "#,
    // 22: a session's own reasoning effort (`low`, `medium`, …); NULL: the account's default.
    r#"
    ALTER TABLE sessions ADD COLUMN effort TEXT;
    "#,
    // 23: images sent with messages, stored once by the SHA-256 of their bytes; a message's
    // `image` block names one by that id.
    r#"
    CREATE TABLE images (
        id          TEXT PRIMARY KEY,       -- SHA-256 of data, hex
        media_type  TEXT NOT NULL,
        width       INTEGER NOT NULL,
        height      INTEGER NOT NULL,
        data        BLOB NOT NULL,
        created_at  INTEGER NOT NULL
    );
    "#,
    // 24: the model a custom command's front matter gave its run; NULL: the session's model,
    // read at each step.
    r#"
    ALTER TABLE runs ADD COLUMN command_model TEXT;
    "#,
    // 25: the `@`-mention attachments of queued input (a JSON array of `attachment` blocks),
    // delivered or promoted with its text; NULL: none.
    r#"
    ALTER TABLE pending_input ADD COLUMN attachments TEXT;
    "#,
    // 26: the image a tool call read (`read_file` of an image), as its `image` block (JSON),
    // recorded with its result: a tool message rebuilt after a stop still carries it.
    r#"
    ALTER TABLE tool_calls ADD COLUMN image TEXT;
    "#,
    // 27: each kept spend total's tokens by kind, so that `session/get`'s `tokensByKind` is
    // topped up with the lines written since, as the spend is, instead of summed over every
    // line. Totals kept before have no kinds: they are dropped (a cache, priced again once).
    r#"
    DELETE FROM session_spend;
    ALTER TABLE session_spend ADD COLUMN input INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE session_spend ADD COLUMN output INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE session_spend ADD COLUMN cache_read INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE session_spend ADD COLUMN cache_write INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE session_spend ADD COLUMN reasoning INTEGER NOT NULL DEFAULT 0;
    "#,
    // 28: what `session/list` shows of a session's last message to the model (its seq, role and
    // run, and how that run ended), kept on the session's row by triggers as messages are
    // written, rewound and their runs end, so that a page of sessions reads its own rows
    // instead of searching each session's messages and runs on a 1 GB file; and its newest
    // usage line's id, so that a page's spend looks for new lines only where there are some.
    // Messages and usage lines are deleted only with their session, so no delete needs a
    // trigger.
    r#"
    ALTER TABLE sessions ADD COLUMN last_usage_line INTEGER;
    UPDATE sessions SET last_usage_line =
        (SELECT MAX(id) FROM usage_lines WHERE session_id = sessions.id);
    CREATE TRIGGER last_usage_line_on_insert AFTER INSERT ON usage_lines
    BEGIN
        UPDATE sessions SET last_usage_line = NEW.id WHERE id = NEW.session_id;
    END;
    ALTER TABLE sessions ADD COLUMN last_model_seq INTEGER;
    ALTER TABLE sessions ADD COLUMN last_model_role TEXT;
    ALTER TABLE sessions ADD COLUMN last_model_run_id TEXT;
    ALTER TABLE sessions ADD COLUMN last_model_run_reason TEXT;
    CREATE INDEX sessions_by_last_model_run ON sessions (last_model_run_id)
        WHERE last_model_run_id IS NOT NULL;
    UPDATE sessions SET (last_model_seq, last_model_role, last_model_run_id, last_model_run_reason) =
        (SELECT m.seq, m.role, m.run_id, r.reason
         FROM messages AS m LEFT JOIN runs AS r ON r.id = m.run_id
         WHERE m.session_id = sessions.id AND m.role NOT IN ('note', 'notice', 'summary')
           AND m.rewound = 0
         ORDER BY m.seq DESC LIMIT 1);
    CREATE TRIGGER last_model_on_insert AFTER INSERT ON messages
    WHEN NEW.role NOT IN ('note', 'notice', 'summary') AND NEW.rewound = 0
    BEGIN
        UPDATE sessions SET last_model_seq = NEW.seq, last_model_role = NEW.role,
                            last_model_run_id = NEW.run_id,
                            last_model_run_reason = (SELECT reason FROM runs WHERE id = NEW.run_id)
        WHERE id = NEW.session_id AND (last_model_seq IS NULL OR last_model_seq < NEW.seq);
    END;
    CREATE TRIGGER last_model_on_rewound AFTER UPDATE OF rewound ON messages
    WHEN NEW.rewound = 1 AND OLD.rewound = 0
        AND NEW.seq = (SELECT last_model_seq FROM sessions WHERE id = NEW.session_id)
    BEGIN
        UPDATE sessions
        SET (last_model_seq, last_model_role, last_model_run_id, last_model_run_reason) =
            (SELECT m.seq, m.role, m.run_id, r.reason
             FROM messages AS m LEFT JOIN runs AS r ON r.id = m.run_id
             WHERE m.session_id = NEW.session_id AND m.role NOT IN ('note', 'notice', 'summary')
               AND m.rewound = 0
             ORDER BY m.seq DESC LIMIT 1)
        WHERE id = NEW.session_id;
    END;
    CREATE TRIGGER last_model_on_run_end AFTER UPDATE OF reason ON runs
    BEGIN
        UPDATE sessions SET last_model_run_reason = NEW.reason WHERE last_model_run_id = NEW.id;
    END;
    "#,
    // 29: which sessions refer to each stored image, recorded as the image is stored (before
    // the message that shows it is written) and kept by triggers as messages and tool calls
    // name images (a fork's copies too; a message's blocks are rewritten only to empty a
    // deleted note, which adds no image). Deleting a session collects the images no other
    // session refers to by this index, instead of searching every message's text of the file
    // for each, and an image stored for a message not yet written is not collected meanwhile
    // by another session's delete.
    r#"
    CREATE TABLE session_images (
        session_id  TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        image_id    TEXT NOT NULL,
        PRIMARY KEY (session_id, image_id)
    ) WITHOUT ROWID;
    CREATE INDEX session_images_by_image ON session_images (image_id);
    INSERT OR IGNORE INTO session_images (session_id, image_id)
        SELECT m.session_id, b.value ->> '$.imageId'
        FROM messages AS m, json_each(m.blocks) AS b
        WHERE instr(m.blocks, '"imageId"') > 0 AND b.value ->> '$.type' = 'image'
          AND b.value ->> '$.imageId' IS NOT NULL;
    INSERT OR IGNORE INTO session_images (session_id, image_id)
        SELECT session_id, image ->> '$.imageId' FROM tool_calls
        WHERE image IS NOT NULL AND image ->> '$.imageId' IS NOT NULL;
    CREATE TRIGGER session_images_on_message AFTER INSERT ON messages
    WHEN instr(NEW.blocks, '"imageId"') > 0
    BEGIN
        INSERT OR IGNORE INTO session_images (session_id, image_id)
            SELECT NEW.session_id, b.value ->> '$.imageId' FROM json_each(NEW.blocks) AS b
            WHERE b.value ->> '$.type' = 'image' AND b.value ->> '$.imageId' IS NOT NULL;
    END;
    CREATE TRIGGER session_images_on_tool_call AFTER UPDATE OF image ON tool_calls
    WHEN NEW.image ->> '$.imageId' IS NOT NULL
    BEGIN
        INSERT OR IGNORE INTO session_images (session_id, image_id)
            VALUES (NEW.session_id, NEW.image ->> '$.imageId');
    END;
    "#,
];

/// The schema version this build writes: the number of migrations.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Brings the schema to the newest version this build knows.
///
/// Two daemons may open a new file at the same moment: each migration is applied in a
/// transaction that holds the write lock and reads the version again under it, so the second
/// one finds the first one's work done instead of applying it twice ("table already exists").
pub fn apply(conn: &mut Connection) -> StoreResult<()> {
    let known = MIGRATIONS.len() as i64;
    // Already current (every start but the first): no write lock needed.
    if current_version(conn, known)? == known {
        return Ok(());
    }
    loop {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let current = current_version(&tx, known)?;
        if current == known {
            return Ok(());
        }
        tx.execute_batch(MIGRATIONS[current as usize])?;
        tx.pragma_update(None, "user_version", current + 1)?;
        tx.commit()?;
        tracing::debug!(version = current + 1, "applied migration");
    }
}

/// The schema version of the database; an error when a newer build wrote it.
fn current_version(conn: &Connection, known: i64) -> StoreResult<i64> {
    let current: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if current > known {
        return Err(StoreError::TooNew {
            found: current,
            known,
        });
    }
    Ok(current)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn applies_all_and_is_idempotent() {
        let mut conn = Connection::open_in_memory().unwrap();
        apply(&mut conn).unwrap();
        apply(&mut conn).unwrap();
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(version, MIGRATIONS.len() as i64);
    }

    /// A database as the migrations before `version` left it.
    fn at_version(version: usize) -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        for migration in &MIGRATIONS[..version] {
            conn.execute_batch(migration).unwrap();
        }
        conn.pragma_update(None, "user_version", version as i64)
            .unwrap();
        conn
    }

    /// A database written before the sessions' images were recorded gets them from its
    /// messages' image blocks and its tool calls' images.
    #[test]
    fn the_images_sessions_refer_to_are_recorded_for_existing_sessions() {
        let mut conn = at_version(28);
        conn.execute_batch(
            r#"INSERT INTO sessions (id, title, account, model, max_steps, created_at, updated_at)
               VALUES ('ses_a', 't', 'demo', 'demo', 25, 1, 1), ('ses_b', 't', 'demo', 'demo', 25, 1, 1);
               INSERT INTO messages (id, session_id, seq, run_id, role, blocks, status, created_at)
               VALUES ('m1', 'ses_a', 1, NULL, 'user',
                       '[{"type":"text","text":"look"},{"type":"image","imageId":"aa"},{"type":"image","imageId":"bb"}]',
                       'complete', 1),
                      ('m2', 'ses_b', 1, NULL, 'user', '[{"type":"text","text":"imageId"}]', 'complete', 1);
               INSERT INTO tool_calls (id, session_id, run_id, message_id, position, name, input,
                                       status, image)
               VALUES ('call_1', 'ses_b', 'run_1', 'm2', 0, 'read_file', '{}', 'done',
                       '{"type":"image","imageId":"cc"}');"#,
        )
        .unwrap();
        apply(&mut conn).unwrap();
        let mut stmt = conn
            .prepare("SELECT session_id, image_id FROM session_images ORDER BY 1, 2")
            .unwrap();
        let recorded = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        assert_eq!(
            recorded,
            [
                ("ses_a".to_string(), "aa".to_string()),
                ("ses_a".into(), "bb".into()),
                ("ses_b".into(), "cc".into()),
            ]
        );
    }

    /// A database written before the session rows kept their last message to the model and
    /// their newest usage line gets them from its messages, runs and usage lines when it is
    /// brought up to date.
    #[test]
    fn the_last_model_message_is_filled_in_for_existing_sessions() {
        let mut conn = at_version(27);
        conn.execute_batch(
            "INSERT INTO sessions (id, title, account, model, max_steps, created_at, updated_at)
             VALUES ('ses_a', 't', 'demo', 'demo', 25, 1, 1),
                    ('ses_quiet', 't', 'demo', 'demo', 25, 1, 1);
             INSERT INTO runs (id, session_id, model, status, reason, started_at)
             VALUES ('run_1', 'ses_a', 'demo', 'finished', 'stopped', 1);
             INSERT INTO usage_lines (id, session_id, run_id, provider, model, input, output,
                                      cache_read, cache_write, reasoning, at, duration_ms, kind)
             VALUES (7, 'ses_a', 'run_1', 'demo', 'demo', 1, 1, 0, 0, 0, 1, 1, 'turn'),
                    (9, 'ses_a', 'run_1', 'demo', 'demo', 1, 1, 0, 0, 0, 1, 1, 'turn');
             INSERT INTO messages (id, session_id, seq, run_id, role, blocks, status, created_at,
                                   rewound)
             VALUES ('m1', 'ses_a', 1, NULL, 'user', '[]', 'complete', 1, 0),
                    ('m2', 'ses_a', 2, 'run_1', 'assistant', '[]', 'complete', 1, 0),
                    ('m3', 'ses_a', 3, NULL, 'notice', '[]', 'complete', 1, 0),
                    ('m4', 'ses_a', 4, NULL, 'user', '[]', 'complete', 1, 1);",
        )
        .unwrap();
        apply(&mut conn).unwrap();
        let kept = |id: &str| {
            conn.query_row(
                "SELECT last_model_seq, last_model_role, last_model_run_id, last_model_run_reason,
                        last_usage_line
                 FROM sessions WHERE id = ?1",
                [id],
                |r| {
                    Ok((
                        r.get::<_, Option<i64>>(0)?,
                        r.get::<_, Option<String>>(1)?,
                        r.get::<_, Option<String>>(2)?,
                        r.get::<_, Option<String>>(3)?,
                        r.get::<_, Option<i64>>(4)?,
                    ))
                },
            )
            .unwrap()
        };
        assert_eq!(
            kept("ses_a"),
            (
                Some(2),
                Some("assistant".into()),
                Some("run_1".into()),
                Some("stopped".into()),
                Some(9)
            )
        );
        assert_eq!(kept("ses_quiet"), (None, None, None, None, None));
    }

    #[test]
    fn refuses_a_newer_database() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.pragma_update(None, "user_version", 999).unwrap();
        assert!(matches!(
            apply(&mut conn),
            Err(StoreError::TooNew { found: 999, .. })
        ));
    }
}
