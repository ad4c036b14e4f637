//! The `session_spend` table: each session's spend as last totalled, so that a daemon started
//! on a year of history does not price all of it to list sessions.
//!
//! It is a cache and nothing else: every row can be rebuilt from the usage lines, a row made
//! with another price book is ignored, and a row is written off the request path (by the
//! heartbeat and at shutdown), never by a read that a client waits for.

use rusqlite::params;

use super::{Store, StoreResult};
use crate::protocol::TokenUsage;

/// A session's own usage lines totalled through line `through`, priced with the price book
/// whose fingerprint is `prices`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptSpend {
    pub through: i64,
    pub prices: String,
    /// The lines' tokens of each kind.
    pub tokens: TokenUsage,
    pub cost_pico: u128,
    pub priced_lines: u64,
    pub unpriced_lines: u64,
}

/// [`Store::kept_spends`]'s query (its plan is checked in the store's tests).
pub(super) const KEPT_SPENDS: &str =
    "SELECT session_id, through_line, prices, cost_pico, priced_lines, unpriced_lines,
            input, output, cache_read, cache_write, reasoning
     FROM session_spend WHERE session_id IN (SELECT value FROM json_each(?1))";

impl Store {
    /// The kept totals of the sessions named, in one query: `(session id, total)` of each that
    /// has one, in no particular order.
    pub fn kept_spends(&self, session_ids: &[&str]) -> StoreResult<Vec<(String, KeptSpend)>> {
        let ids = super::listing::id_list(session_ids)?;
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(KEPT_SPENDS)?;
            let rows = stmt.query_map([ids], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, i64>(4)?,
                    r.get::<_, i64>(5)?,
                    [
                        r.get::<_, i64>(6)?,
                        r.get(7)?,
                        r.get(8)?,
                        r.get(9)?,
                        r.get(10)?,
                    ],
                ))
            })?;
            let mut kept = Vec::new();
            for row in rows {
                let (id, through, prices, cost, priced, unpriced, tokens) = row?;
                // A row that does not read back (hand-edited, say) is as good as none.
                let Ok(cost_pico) = cost.parse() else {
                    continue;
                };
                let [input, output, cache_read, cache_write, reasoning] =
                    tokens.map(|n| n.max(0) as u64);
                kept.push((
                    id,
                    KeptSpend {
                        through,
                        prices,
                        tokens: TokenUsage {
                            input,
                            output,
                            cache_read,
                            cache_write,
                            reasoning,
                        },
                        cost_pico,
                        priced_lines: priced as u64,
                        unpriced_lines: unpriced as u64,
                    },
                ));
            }
            Ok(kept)
        })
    }

    /// Keeps each session's total in one transaction. A row already further along (another
    /// daemon's) is left as it is, and a session deleted meanwhile is skipped.
    pub fn keep_spends(&self, spends: &[(String, KeptSpend)]) -> StoreResult<()> {
        self.write(|conn| {
            let tx = conn.transaction()?;
            {
                let mut upsert = tx.prepare_cached(
                    "INSERT INTO session_spend (session_id, through_line, prices, tokens, cost_pico,
                                                priced_lines, unpriced_lines, input, output,
                                                cache_read, cache_write, reasoning)
                     SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12
                     WHERE EXISTS (SELECT 1 FROM sessions WHERE id = ?1)
                     ON CONFLICT (session_id) DO UPDATE SET
                         through_line = excluded.through_line, prices = excluded.prices,
                         tokens = excluded.tokens, cost_pico = excluded.cost_pico,
                         priced_lines = excluded.priced_lines,
                         unpriced_lines = excluded.unpriced_lines,
                         input = excluded.input, output = excluded.output,
                         cache_read = excluded.cache_read, cache_write = excluded.cache_write,
                         reasoning = excluded.reasoning
                     WHERE excluded.through_line > session_spend.through_line
                        OR excluded.prices <> session_spend.prices",
                )?;
                for (session_id, kept) in spends {
                    upsert.execute(params![
                        session_id,
                        kept.through,
                        kept.prices,
                        kept.tokens.total() as i64,
                        kept.cost_pico.to_string(),
                        kept.priced_lines as i64,
                        kept.unpriced_lines as i64,
                        kept.tokens.input as i64,
                        kept.tokens.output as i64,
                        kept.tokens.cache_read as i64,
                        kept.tokens.cache_write as i64,
                        kept.tokens.reasoning as i64,
                    ])?;
                }
            }
            tx.commit()?;
            Ok(())
        })
    }
}
