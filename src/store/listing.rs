//! What `session/list` shows of each session on a page, read for the whole page at once.
//!
//! A page of 50 read one session at a time cost about a dozen statements per session; these
//! queries take the page's ids as one JSON array (`json_each`) and answer every session's
//! facts in one pass, each fact still found by key through an index, so a page costs a few
//! statements whatever its size and however much history lies behind it.

use std::collections::HashMap;

use rusqlite::params;

use super::leases::{LeaseRow, lease_row};
use super::{Store, StoreError, StoreResult, UsageRow};
use crate::protocol::{FinishReason, Role};

/// The newest message of a session that a model would answer next (neither a note nor a
/// summary), and how its run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct LastModelMessage {
    pub seq: u64,
    pub role: Role,
    /// Whether the message belongs to a run.
    pub in_run: bool,
    /// How that run ended, when it has.
    pub run_reason: Option<FinishReason>,
    /// An answer with nothing in it, left by a run that failed before the model said anything
    /// (the provider refused the request, or its stream broke at once): the turn it was to
    /// answer still has no answer.
    pub empty_failure: bool,
}

/// One listed session's facts beside its row.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListedFacts {
    pub forked_from: Option<String>,
    /// The session it is a delegated task of.
    pub parent_id: Option<String>,
    /// Its delegated tasks.
    pub children: Vec<String>,
    /// Whether one of its tool calls waits for an answer.
    pub pending_approval: bool,
    /// Whether a tool call of one of its delegated tasks waits for an answer.
    pub delegated_approval: bool,
    /// The lease on its run, live or not.
    pub lease: Option<LeaseRow>,
    pub last_model_message: Option<LastModelMessage>,
}

/// The ids as the JSON array the page queries read with `json_each`.
pub(super) fn id_list(ids: &[&str]) -> StoreResult<String> {
    serde_json::to_string(ids).map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// [`Store::listed_facts`]' query of each session's own facts: its row, its link to a parent,
/// its and its children's pending approvals, and its last message to the model with that
/// message's run, as the session's row keeps them (migration 28's triggers keep them as
/// [`super::messages::LAST_MODEL_MESSAGE`] would find them), so a page reads no message or run.
pub(super) const LISTED_FACTS: &str = "SELECT j.value, s.forked_from, d.parent_id,
        EXISTS (SELECT 1 FROM approvals AS a
                WHERE a.session_id = j.value AND a.status = 'pending'),
        EXISTS (SELECT 1 FROM delegations AS c JOIN approvals AS a ON a.session_id = c.child_id
                WHERE c.parent_id = j.value AND a.status = 'pending'),
        s.last_model_seq, s.last_model_role, s.last_model_run_id, s.last_model_run_reason,
        s.last_model_role = 'assistant' AND s.last_model_run_reason = 'error'
            AND EXISTS (SELECT 1 FROM messages AS m
                        WHERE m.session_id = j.value AND m.seq = s.last_model_seq
                          AND m.blocks = '[]')
     FROM json_each(?1) AS j
     JOIN sessions AS s ON s.id = j.value
     LEFT JOIN delegations AS d ON d.child_id = j.value";

/// [`Store::listed_facts`]' query of the sessions' delegated tasks (in no particular order:
/// they are summed).
pub(super) const CHILDREN_OF: &str = "SELECT parent_id, child_id FROM delegations
     WHERE parent_id IN (SELECT value FROM json_each(?1))";

/// [`Store::listed_facts`]' query of the sessions' run leases.
pub(super) fn leases_of() -> String {
    format!(
        "SELECT {} FROM run_leases WHERE session_id IN (SELECT value FROM json_each(?1))",
        super::leases::COLUMNS
    )
}

/// [`Store::usage_lines_after_each`]'s query: each session's lines past the one given for it
/// (`[[id, line], …]`), through `usage_by_session_line`, searched only for a session whose row
/// says it has a newer line (most listed sessions have none since their kept total). Its first
/// eleven columns are [`super::usage::USAGE_OF_SESSION_AFTER`]'s.
pub(super) const USAGE_AFTER_EACH: &str =
    "SELECT u.run_id, u.provider, u.model, u.input, u.output, u.cache_read, u.cache_write,
            u.reasoning, u.at, u.duration_ms, u.kind, u.id, u.session_id
     FROM json_each(?1) AS j
     JOIN sessions AS s ON s.id = j.value ->> 0 AND s.last_usage_line > j.value ->> 1
     JOIN usage_lines AS u ON u.session_id = s.id AND u.id > j.value ->> 1";

impl Store {
    /// The facts `session/list` shows of each of `ids`, in three statements for the whole
    /// page. A session that does not exist (deleted meanwhile) is left out.
    pub fn listed_facts(&self, ids: &[&str]) -> StoreResult<HashMap<String, ListedFacts>> {
        let list = id_list(ids)?;
        self.read(|conn| {
            let mut facts = HashMap::with_capacity(ids.len());
            let mut stmt = conn.prepare_cached(LISTED_FACTS)?;
            let mut rows = stmt.query(params![list])?;
            while let Some(r) = rows.next()? {
                let seq: Option<i64> = r.get(5)?;
                let last_model_message = match seq {
                    Some(seq) => Some(LastModelMessage {
                        seq: seq as u64,
                        role: r.get(6)?,
                        in_run: r.get::<_, Option<String>>(7)?.is_some(),
                        run_reason: r.get(8)?,
                        empty_failure: r.get::<_, Option<bool>>(9)?.unwrap_or(false),
                    }),
                    None => None,
                };
                facts.insert(
                    r.get::<_, String>(0)?,
                    ListedFacts {
                        forked_from: r.get(1)?,
                        parent_id: r.get(2)?,
                        pending_approval: r.get(3)?,
                        delegated_approval: r.get(4)?,
                        last_model_message,
                        ..ListedFacts::default()
                    },
                );
            }
            let mut stmt = conn.prepare_cached(CHILDREN_OF)?;
            let mut rows = stmt.query(params![list])?;
            while let Some(r) = rows.next()? {
                let parent: String = r.get(0)?;
                if let Some(facts) = facts.get_mut(&parent) {
                    facts.children.push(r.get(1)?);
                }
            }
            let mut stmt = conn.prepare_cached(&leases_of())?;
            let mut rows = stmt.query(params![list])?;
            while let Some(r) = rows.next()? {
                let lease = lease_row(r)?;
                if let Some(facts) = facts.get_mut(&lease.session_id) {
                    facts.lease = Some(lease);
                }
            }
            Ok(facts)
        })
    }

    /// Each session's usage lines written after the line given for it (0: all of them), with
    /// the line's id and its session's, in one query: [`Store::usage_lines_after`] for a
    /// page of sessions.
    pub fn usage_lines_after_each(
        &self,
        after: &[(&str, i64)],
    ) -> StoreResult<Vec<(String, i64, UsageRow)>> {
        let pairs = serde_json::to_string(after).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(USAGE_AFTER_EACH)?;
            let rows = stmt
                .query_map(params![pairs], |r| {
                    Ok((
                        r.get::<_, String>(12)?,
                        r.get::<_, i64>(11)?,
                        super::usage::usage_row(r)?,
                    ))
                })?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Block, TokenUsage, UsageKind};
    use crate::store::test_support::new_session;
    use crate::store::{NewMessage, RewindJournal, RewindScope, SeqClaim};
    use pretty_assertions::assert_eq;
    use rusqlite::OptionalExtension;

    fn line(run_id: &str, input: u64) -> UsageRow {
        UsageRow {
            run_id: run_id.into(),
            provider: "openai".into(),
            model: "gpt-4o".into(),
            tokens: TokenUsage {
                input,
                output: 1,
                ..TokenUsage::default()
            },
            at: 1,
            duration_ms: 2,
            kind: UsageKind::Turn,
        }
    }

    #[test]
    fn a_pages_facts_are_each_sessions_own() {
        let store = Store::open_in_memory().unwrap();
        let plain = new_session(&store);
        let talked = new_session(&store);
        store
            .append_message(&NewMessage {
                seq: 1,
                ..NewMessage::new(
                    &talked,
                    None,
                    Role::User,
                    vec![Block::Text { text: "hi".into() }],
                )
            })
            .unwrap();
        store
            .append_message(&NewMessage {
                seq: 2,
                ..NewMessage::new(
                    &talked,
                    None,
                    Role::Notice,
                    vec![Block::Text {
                        text: "a notice is not answered".into(),
                    }],
                )
            })
            .unwrap();
        let facts = store
            .listed_facts(&[&plain, &talked, "ses_missing"])
            .unwrap();
        assert_eq!(
            facts,
            HashMap::from([
                (plain.clone(), ListedFacts::default()),
                (
                    talked.clone(),
                    ListedFacts {
                        last_model_message: Some(LastModelMessage {
                            seq: 1,
                            role: Role::User,
                            in_run: false,
                            run_reason: None,
                            empty_failure: false,
                        }),
                        ..ListedFacts::default()
                    }
                ),
            ])
        );
    }

    /// The last message to the model as the messages and runs themselves say, found the
    /// way the list found it before the session's row kept it.
    fn recomputed(store: &Store, session: &str) -> Option<LastModelMessage> {
        store
            .read(|conn| {
                Ok(conn
                    .query_row(
                        "SELECT m.seq, m.role, m.run_id, r.reason,
                                m.role = 'assistant' AND r.reason = 'error' AND m.blocks = '[]'
                         FROM messages AS m LEFT JOIN runs AS r ON r.id = m.run_id
                         WHERE m.session_id = ?1 AND m.role NOT IN ('note', 'notice', 'summary')
                           AND m.rewound = 0
                         ORDER BY m.seq DESC LIMIT 1",
                        [session],
                        |r| {
                            Ok(LastModelMessage {
                                seq: r.get::<_, i64>(0)? as u64,
                                role: r.get(1)?,
                                in_run: r.get::<_, Option<String>>(2)?.is_some(),
                                run_reason: r.get(3)?,
                                empty_failure: r.get::<_, Option<bool>>(4)?.unwrap_or(false),
                            })
                        },
                    )
                    .optional()?)
            })
            .unwrap()
    }

    fn kept(store: &Store, session: &str) -> Option<LastModelMessage> {
        store
            .listed_facts(&[session])
            .unwrap()
            .remove(session)
            .unwrap()
            .last_model_message
    }

    fn say(store: &Store, session: &str, seq: u64, run: Option<&str>, role: Role) {
        store
            .append_message(&NewMessage {
                seq,
                ..NewMessage::new(
                    session,
                    run,
                    role,
                    vec![Block::Text {
                        text: format!("message {seq}"),
                    }],
                )
            })
            .unwrap();
    }

    fn rewind_from(store: &Store, session: &str, target_seq: u64) {
        let id = store
            .open_rewind(session, "msg_x", target_seq, RewindScope::Conversation, &[])
            .unwrap();
        store
            .close_rewind(&RewindJournal {
                id,
                session_id: session.into(),
                message_id: "msg_x".into(),
                target_seq,
                scope: RewindScope::Conversation,
                plan: vec![],
            })
            .unwrap();
    }

    /// What the session's row keeps of its last message to the model is, after every kind
    /// of write, what the messages and runs say: a message in and out of a run, a run's
    /// end, a notice, a message written out of order, a fork, rewinds.
    #[test]
    fn the_kept_last_model_message_follows_every_write() {
        let store = Store::open_in_memory().unwrap();
        let a = new_session(&store);
        let check = |session: &str, expected: Option<(u64, Role, bool, Option<FinishReason>)>| {
            let expected = expected.map(|(seq, role, in_run, run_reason)| LastModelMessage {
                seq,
                role,
                in_run,
                run_reason,
                empty_failure: false,
            });
            assert_eq!(recomputed(&store, session), expected, "the messages say");
            assert_eq!(kept(&store, session), expected, "the session's row keeps");
        };
        check(&a, None);
        say(&store, &a, 1, None, Role::User);
        check(&a, Some((1, Role::User, false, None)));
        store.insert_run("run_1", &a, "demo").unwrap();
        say(&store, &a, 2, Some("run_1"), Role::Assistant);
        say(&store, &a, 3, Some("run_1"), Role::Tool);
        check(&a, Some((3, Role::Tool, true, None)));
        store
            .finish_run("run_1", FinishReason::Stopped, None)
            .unwrap();
        check(&a, Some((3, Role::Tool, true, Some(FinishReason::Stopped))));
        say(&store, &a, 4, None, Role::Notice);
        check(&a, Some((3, Role::Tool, true, Some(FinishReason::Stopped))));
        let source = store.session(&a).unwrap().unwrap();
        let fork = store.fork_session(&source, 3, "fork").unwrap();
        check(
            &fork,
            Some((3, Role::Tool, true, Some(FinishReason::Stopped))),
        );
        // A message published before it could be stored takes its place behind a later one.
        store.insert_run("run_2", &a, "demo").unwrap();
        say(&store, &a, 6, Some("run_2"), Role::User);
        store
            .append_message(&NewMessage {
                seq: 5,
                seq_claim: SeqClaim::Published,
                ..NewMessage::new(&a, Some("run_2"), Role::Assistant, vec![])
            })
            .unwrap();
        check(&a, Some((6, Role::User, true, None)));
        store
            .finish_run("run_2", FinishReason::Error, None)
            .unwrap();
        check(&a, Some((6, Role::User, true, Some(FinishReason::Error))));
        rewind_from(&store, &a, 5);
        check(&a, Some((3, Role::Tool, true, Some(FinishReason::Stopped))));
        // A rewind of the source leaves its fork as it was.
        check(
            &fork,
            Some((3, Role::Tool, true, Some(FinishReason::Stopped))),
        );
        rewind_from(&store, &a, 1);
        check(&a, None);
        say(&store, &a, 7, None, Role::User);
        check(&a, Some((7, Role::User, false, None)));
        // The empty answer of a run that failed leaves the turn without an answer; one with
        // text in it, or an empty one of a run that ended otherwise, answers it.
        let answer = |seq: u64, run: &str, blocks: Vec<Block>, reason: FinishReason| {
            store.insert_run(run, &a, "demo").unwrap();
            store
                .append_message(&NewMessage {
                    seq,
                    ..NewMessage::new(&a, Some(run), Role::Assistant, blocks)
                })
                .unwrap();
            store.finish_run(run, reason, None).unwrap();
            let found = (recomputed(&store, &a), kept(&store, &a));
            assert_eq!(found.0, found.1);
            found.0.map(|m| m.empty_failure)
        };
        assert_eq!(answer(8, "run_3", vec![], FinishReason::Error), Some(true));
        let text = vec![Block::Text {
            text: "Half".into(),
        }];
        assert_eq!(answer(9, "run_4", text, FinishReason::Error), Some(false));
        assert_eq!(
            answer(10, "run_5", vec![], FinishReason::Stopped),
            Some(false)
        );
    }

    #[test]
    fn each_sessions_lines_after_its_own_mark() {
        let store = Store::open_in_memory().unwrap();
        let a = new_session(&store);
        let b = new_session(&store);
        for (session, input) in [(&a, 10), (&b, 20), (&a, 30), (&b, 40)] {
            store.insert_usage(session, &line("run_1", input)).unwrap();
        }
        let all_of_b = store.usage_lines_after(&b, 0).unwrap();
        let mut read = store
            .usage_lines_after_each(&[(&a, 1), (&b, 0)])
            .unwrap()
            .into_iter()
            .map(|(session, id, row)| (session, id, row.tokens.input))
            .collect::<Vec<_>>();
        read.sort();
        assert_eq!(
            read,
            vec![
                (a.clone(), 3, 30),
                (b.clone(), all_of_b[0].0, 20),
                (b.clone(), all_of_b[1].0, 40),
            ]
        );
    }
}
