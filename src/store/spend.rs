//! The `session_spend` table: each session's spend as last totalled, so that a daemon started
//! on a year of history does not price all of it to list sessions.
//!
//! It is a cache and nothing else: every row can be rebuilt from the usage lines, a row made
//! with another price book is ignored, and a row is written off the request path (by the
//! heartbeat and at shutdown), never by a read that a client waits for.

use rusqlite::{OptionalExtension, params};

use super::{Store, StoreResult};

/// A session's own usage lines totalled through line `through`, priced with the price book
/// whose fingerprint is `prices`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptSpend {
    pub through: i64,
    pub prices: String,
    pub tokens: u64,
    pub cost_pico: u128,
    pub priced_lines: u64,
    pub unpriced_lines: u64,
}

impl Store {
    pub fn kept_spend(&self, session_id: &str) -> StoreResult<Option<KeptSpend>> {
        self.read(|conn| {
            let row = conn
                .prepare_cached(
                    "SELECT through_line, prices, tokens, cost_pico, priced_lines, unpriced_lines
                     FROM session_spend WHERE session_id = ?1",
                )?
                .query_row([session_id], |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, i64>(2)?,
                        r.get::<_, String>(3)?,
                        r.get::<_, i64>(4)?,
                        r.get::<_, i64>(5)?,
                    ))
                })
                .optional()?;
            // A row that does not read back (hand-edited, say) is as good as none.
            Ok(
                row.and_then(|(through, prices, tokens, cost, priced, unpriced)| {
                    Some(KeptSpend {
                        through,
                        prices,
                        tokens: tokens as u64,
                        cost_pico: cost.parse().ok()?,
                        priced_lines: priced as u64,
                        unpriced_lines: unpriced as u64,
                    })
                }),
            )
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
                                                priced_lines, unpriced_lines)
                     SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7 WHERE EXISTS (SELECT 1 FROM sessions WHERE id = ?1)
                     ON CONFLICT (session_id) DO UPDATE SET
                         through_line = excluded.through_line, prices = excluded.prices,
                         tokens = excluded.tokens, cost_pico = excluded.cost_pico,
                         priced_lines = excluded.priced_lines,
                         unpriced_lines = excluded.unpriced_lines
                     WHERE excluded.through_line > session_spend.through_line
                        OR excluded.prices <> session_spend.prices",
                )?;
                for (session_id, kept) in spends {
                    upsert.execute(params![
                        session_id,
                        kept.through,
                        kept.prices,
                        kept.tokens as i64,
                        kept.cost_pico.to_string(),
                        kept.priced_lines as i64,
                        kept.unpriced_lines as i64,
                    ])?;
                }
            }
            tx.commit()?;
            Ok(())
        })
    }
}
