//! The plans SQLite makes for the queries whose cost must not grow with the database: each
//! reads through an index, never a scan of a table. A schema or query change that loses an
//! index fails here, where a benchmark would only be slower.

use pretty_assertions::assert_eq;
use rusqlite::Connection;

use super::{Store, images, listing, messages, sessions, spend, tool_calls, usage};

/// The `detail` column of `EXPLAIN QUERY PLAN sql`, one line per step, in order.
fn plan(conn: &Connection, sql: &str) -> Vec<String> {
    let mut stmt = conn
        .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
        .expect("a query SQLite can plan");
    // The values do not change the plan, which SQLite makes when it prepares the query.
    let nulls = vec![rusqlite::types::Null; stmt.parameter_count()];
    stmt.query_map(rusqlite::params_from_iter(nulls), |r| r.get::<_, String>(3))
        .expect("the plan")
        .collect::<Result<_, _>>()
        .expect("the plan's rows")
}

fn plan_of(sql: &str) -> Vec<String> {
    let store = Store::open_in_memory().expect("a store");
    let conn = store.hold_writer();
    plan(&conn, sql)
}

#[test]
fn a_folders_sessions_are_listed_through_their_index() {
    assert_eq!(
        plan_of(&sessions::list_query(true)),
        [
            "SEARCH sessions USING INDEX sessions_by_root (workspace_root=? AND updated_at<?)",
            "USING INDEX sqlite_autoindex_delegations_1 FOR IN-OPERATOR",
            "LIST SUBQUERY 2",
            "SEARCH delegations USING INDEX delegations_by_call (parent_id=?)",
            "CREATE BLOOM FILTER",
        ]
    );
}

#[test]
fn all_sessions_are_listed_through_the_update_index() {
    assert_eq!(
        plan_of(&sessions::list_query(false)),
        [
            "SEARCH sessions USING INDEX sessions_by_update (updated_at<?)",
            "USING INDEX sqlite_autoindex_delegations_1 FOR IN-OPERATOR",
            "LIST SUBQUERY 2",
            "SEARCH delegations USING INDEX delegations_by_call (parent_id=?)",
            "CREATE BLOOM FILTER",
        ]
    );
}

#[test]
fn transcript_pages_read_only_their_range() {
    assert_eq!(
        plan_of(messages::MESSAGES_AFTER),
        ["SEARCH messages USING INDEX messages_by_seq (session_id=? AND seq>?)"]
    );
    assert_eq!(
        plan_of(messages::MESSAGES_BEFORE),
        ["SEARCH messages USING INDEX messages_by_seq (session_id=? AND seq>? AND seq<?)"]
    );
}

#[test]
fn a_sessions_usage_is_read_through_its_index() {
    assert_eq!(
        plan_of(usage::USAGE_OF_SESSION),
        ["SEARCH usage_lines USING INDEX usage_by_session (session_id=?)"]
    );
    assert_eq!(
        plan_of(usage::USAGE_OF_SESSION_AFTER),
        ["SEARCH usage_lines USING INDEX usage_by_session_line (session_id=? AND id>?)"]
    );
}

/// Listing a page of sessions reads, for each, its fork, its parent, its lease, its last
/// message and that message's run, each by key: a year of other sessions adds nothing.
#[test]
fn a_listed_sessions_facts_are_read_by_key() {
    assert_eq!(
        plan_of(messages::LAST_MODEL_MESSAGE),
        ["SEARCH messages USING INDEX messages_by_seq (session_id=?)"]
    );
    assert_eq!(
        plan_of(tool_calls::PENDING_APPROVALS),
        [
            "SEARCH approvals USING INDEX approvals_by_session (session_id=?)",
            "USE TEMP B-TREE FOR ORDER BY"
        ]
    );
}

/// A page of listed sessions is read with its ids as one JSON array: each fact of each
/// session is still found by key, so the page costs its own size, not the database's.
#[test]
fn a_pages_facts_are_read_by_key_for_the_whole_page() {
    assert_eq!(
        plan_of(listing::LISTED_FACTS),
        [
            "SCAN j VIRTUAL TABLE INDEX 1:",
            "SEARCH s USING INDEX sqlite_autoindex_sessions_1 (id=?)",
            "SEARCH d USING INDEX sqlite_autoindex_delegations_1 (child_id=?) LEFT-JOIN",
            "CORRELATED SCALAR SUBQUERY 1",
            "SEARCH a USING COVERING INDEX approvals_pending (session_id=?)",
            "CORRELATED SCALAR SUBQUERY 2",
            "SEARCH c USING INDEX delegations_by_call (parent_id=?)",
            "SEARCH a USING COVERING INDEX approvals_pending (session_id=?)",
            "CORRELATED SCALAR SUBQUERY 3",
            "SEARCH m USING INDEX messages_by_seq (session_id=? AND seq=?)",
        ]
    );
    assert_eq!(
        plan_of(listing::CHILDREN_OF),
        [
            "SEARCH delegations USING INDEX delegations_by_call (parent_id=?)",
            "LIST SUBQUERY 1",
            "SCAN json_each VIRTUAL TABLE INDEX 1:",
        ]
    );
    assert_eq!(
        plan_of(&listing::leases_of()),
        [
            "SEARCH run_leases USING INDEX sqlite_autoindex_run_leases_1 (session_id=?)",
            "LIST SUBQUERY 1",
            "SCAN json_each VIRTUAL TABLE INDEX 1:",
        ]
    );
    assert_eq!(
        plan_of(spend::KEPT_SPENDS),
        [
            "SEARCH session_spend USING INDEX sqlite_autoindex_session_spend_1 (session_id=?)",
            "LIST SUBQUERY 1",
            "SCAN json_each VIRTUAL TABLE INDEX 1:",
        ]
    );
}

/// The session-row facts a list shows are kept by triggers (migration 28) that find their
/// rows by key too: a finished run's sessions through `sessions_by_last_model_run`, a
/// rewound last message's predecessor by searching `messages_by_seq` backwards.
#[test]
fn the_kept_list_facts_are_written_by_key() {
    assert_eq!(
        plan_of("UPDATE sessions SET last_model_run_reason = ?2 WHERE last_model_run_id = ?1"),
        ["SEARCH sessions USING INDEX sessions_by_last_model_run (last_model_run_id=?)"]
    );
    assert_eq!(
        plan_of(
            "SELECT m.seq, m.role, m.run_id, r.reason
             FROM messages AS m LEFT JOIN runs AS r ON r.id = m.run_id
             WHERE m.session_id = ?1 AND m.role NOT IN ('note', 'notice', 'summary')
               AND m.rewound = 0
             ORDER BY m.seq DESC LIMIT 1"
        ),
        [
            "SEARCH m USING INDEX messages_by_seq (session_id=?)",
            "SEARCH r USING INDEX sqlite_autoindex_runs_1 (id=?) LEFT-JOIN",
        ]
    );
}

/// Deleting a session collects its images through `session_images`' index on the image,
/// and reads an image of a session by its key: neither reads any message.
#[test]
fn a_sessions_images_are_found_by_key() {
    assert_eq!(
        plan_of(images::COLLECT_IMAGE),
        [
            "SEARCH images USING INDEX sqlite_autoindex_images_1 (id=?)",
            "SCALAR SUBQUERY 1",
            "SEARCH session_images USING COVERING INDEX session_images_by_image (image_id=?)",
        ]
    );
    assert_eq!(
        plan_of(images::SESSION_REFERS_TO_IMAGE),
        ["SEARCH session_images USING PRIMARY KEY (session_id=? AND image_id=?)"]
    );
}

/// The usage lines written since each listed session's kept total, through
/// `usage_by_session_line`, for the whole page at once, and only for a session whose row has
/// a newer line.
#[test]
fn a_pages_new_usage_lines_are_read_through_their_index() {
    assert_eq!(
        plan_of(listing::USAGE_AFTER_EACH),
        [
            "SCAN j VIRTUAL TABLE INDEX 1:",
            "SEARCH s USING INDEX sqlite_autoindex_sessions_1 (id=?)",
            "SEARCH u USING INDEX usage_by_session_line (session_id=? AND id>?)",
        ]
    );
}

/// A cached statement is compiled once per connection: binding new values to it (a page's
/// `LIMIT`, another session) does not make SQLite plan it again, on the writer or a reader.
#[test]
fn statements_are_not_planned_again_for_new_values() {
    let dir = tempfile::tempdir().expect("a folder");
    let store = Store::open(&dir.path().join("db")).expect("a store");
    // Each statement with its first value for two sessions, `a` and `b`.
    let run_three_times = |conn: &Connection, sql: &str, [a, b]: [&str; 2]| -> i32 {
        let mut stmt = conn.prepare_cached(sql).expect("a statement");
        for (key, limit) in [(a, 51i64), (b, 41), (a, 51)] {
            let mut values: Vec<rusqlite::types::Value> = vec![key.to_string().into()];
            values.resize(stmt.parameter_count(), limit.into());
            let mut rows = stmt
                .query(rusqlite::params_from_iter(values))
                .expect("rows");
            while rows.next().expect("a row").is_some() {}
        }
        stmt.get_status(rusqlite::StatementStatus::RePrepare)
    };
    let statements = [
        (sessions::list_query(true), ["/a", "/b"]),
        (messages::MESSAGES_BEFORE.to_string(), ["a", "b"]),
        (messages::MESSAGES_AFTER.to_string(), ["a", "b"]),
        (listing::LISTED_FACTS.to_string(), [r#"["a"]"#, r#"["b"]"#]),
        (
            listing::USAGE_AFTER_EACH.to_string(),
            [r#"[["a", 1]]"#, r#"[["b", 2]]"#],
        ),
    ];
    for (sql, keys) in &statements {
        assert_eq!(
            run_three_times(&store.hold_writer(), sql, *keys),
            0,
            "writer: {sql}"
        );
        let on_reader = store
            .read(|conn| Ok(run_three_times(conn, sql, *keys)))
            .expect("a read");
        assert_eq!(on_reader, 0, "reader: {sql}");
    }
}

/// Deleting a session deletes its rows in every table that refers to it (`ON DELETE
/// CASCADE`); each of those finds them through an index, or a prune of old sessions would
/// read every table once per session.
#[test]
fn every_table_that_refers_to_sessions_finds_a_sessions_rows_through_an_index() {
    let store = Store::open_in_memory().expect("a store");
    let conn = store.hold_writer();
    let mut stmt = conn
        .prepare(
            "SELECT m.name, f.\"from\" FROM sqlite_master m, pragma_foreign_key_list(m.name) f
             WHERE m.type = 'table' AND f.\"table\" = 'sessions' ORDER BY m.name, f.\"from\"",
        )
        .expect("the foreign keys");
    let references: Vec<(String, String)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("the foreign keys")
        .collect::<Result<_, _>>()
        .expect("the foreign keys' rows");
    let plans: Vec<(String, Vec<String>)> = references
        .iter()
        .map(|(table, column)| {
            (
                format!("{table}.{column}"),
                plan(&conn, &format!("SELECT 1 FROM {table} WHERE {column} = ?1")),
            )
        })
        .collect();
    let expected =
        |reference: &str, detail: &str| (reference.to_string(), vec![detail.to_string()]);
    assert_eq!(
        plans,
        vec![
            expected(
                "allowed_tools.session_id",
                "SEARCH allowed_tools USING COVERING INDEX sqlite_autoindex_allowed_tools_1 (session_id=?)"
            ),
            expected(
                "approvals.session_id",
                "SEARCH approvals USING COVERING INDEX approvals_by_session (session_id=?)"
            ),
            expected(
                "changed_files.session_id",
                "SEARCH changed_files USING COVERING INDEX sqlite_autoindex_changed_files_1 (session_id=?)"
            ),
            expected(
                "checkpoints.session_id",
                "SEARCH checkpoints USING COVERING INDEX checkpoints_by_session (session_id=?)"
            ),
            expected(
                "delegations.child_id",
                "SEARCH delegations USING COVERING INDEX sqlite_autoindex_delegations_1 (child_id=?)"
            ),
            expected(
                "delegations.parent_id",
                "SEARCH delegations USING COVERING INDEX delegations_by_call (parent_id=?)"
            ),
            expected(
                "file_changes.session_id",
                "SEARCH file_changes USING COVERING INDEX file_changes_by_path (session_id=?)"
            ),
            expected(
                "messages.session_id",
                "SEARCH messages USING COVERING INDEX messages_by_seq (session_id=?)"
            ),
            expected(
                "pending_input.session_id",
                "SEARCH pending_input USING COVERING INDEX pending_by_session (session_id=?)"
            ),
            expected(
                "rewinds.session_id",
                "SEARCH rewinds USING COVERING INDEX rewinds_by_session (session_id=?)"
            ),
            expected(
                "run_leases.session_id",
                "SEARCH run_leases USING COVERING INDEX sqlite_autoindex_run_leases_1 (session_id=?)"
            ),
            expected(
                "runs.session_id",
                "SEARCH runs USING COVERING INDEX runs_by_session (session_id=?)"
            ),
            expected(
                "sends.session_id",
                "SEARCH sends USING COVERING INDEX sqlite_autoindex_sends_1 (session_id=?)"
            ),
            expected(
                "session_images.session_id",
                "SEARCH session_images USING PRIMARY KEY (session_id=?)"
            ),
            expected(
                "session_mcp_servers.session_id",
                "SEARCH session_mcp_servers USING COVERING INDEX sqlite_autoindex_session_mcp_servers_1 (session_id=?)"
            ),
            expected(
                "session_plans.session_id",
                "SEARCH session_plans USING COVERING INDEX sqlite_autoindex_session_plans_1 (session_id=?)"
            ),
            expected(
                "session_spend.session_id",
                "SEARCH session_spend USING COVERING INDEX sqlite_autoindex_session_spend_1 (session_id=?)"
            ),
            expected(
                "tool_calls.session_id",
                "SEARCH tool_calls USING COVERING INDEX sqlite_autoindex_tool_calls_1 (session_id=?)"
            ),
            expected(
                "usage_lines.session_id",
                "SEARCH usage_lines USING COVERING INDEX usage_by_session_line (session_id=?)"
            ),
        ]
    );
}
