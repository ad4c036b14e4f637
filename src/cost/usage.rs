//! Usage lines (what each model request consumed) and what they cost.
//!
//! A line holds facts only; the price book is applied when lines are read. A line whose model
//! has no price is counted as unpriced and the summary says it is partial: reporting such usage
//! as $0 would tell the user something false.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::AddAssign;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::prices::{PriceBook, PriceMatch, Rates, usd};
use crate::protocol::{
    CostSummary, KindCosts, ModelCost, PriceSource, RequestKindCost, SessionSpend, TokenUsage,
    UnpricedUsage, UsageKind,
};

/// What one model request consumed. No prices: they are applied when read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UsageLine {
    pub provider: String,
    pub model: String,
    pub tokens: TokenUsage,
    /// When the request finished, in milliseconds since the Unix epoch.
    pub at: i64,
    pub duration_ms: u64,
    #[serde(default)]
    pub kind: UsageKind,
    /// The child session that made the request, for a line counted in its parent's cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegated_to: Option<String>,
}

/// Exact costs in picodollars until the summary is read out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct PicoCosts {
    input: u128,
    output: u128,
    cache_read: u128,
    cache_write: u128,
}

impl PicoCosts {
    fn of(tokens: &TokenUsage, rates: Rates) -> Self {
        let times = |tokens: u64, rate: u64| u128::from(tokens) * u128::from(rate);
        PicoCosts {
            input: times(tokens.input, rates.input),
            output: times(tokens.output, rates.output),
            cache_read: times(tokens.cache_read, rates.cache_read),
            cache_write: times(tokens.cache_write, rates.cache_write),
        }
    }

    fn total(&self) -> u128 {
        self.input + self.output + self.cache_read + self.cache_write
    }

    fn in_usd(&self) -> KindCosts {
        KindCosts {
            input: usd(self.input),
            output: usd(self.output),
            cache_read: usd(self.cache_read),
            cache_write: usd(self.cache_write),
        }
    }
}

impl AddAssign for PicoCosts {
    fn add_assign(&mut self, other: PicoCosts) {
        self.input += other.input;
        self.output += other.output;
        self.cache_read += other.cache_read;
        self.cache_write += other.cache_write;
    }
}

/// The cost of one request, or `None` if its model was unpriced at the request's time.
///
/// The tier is chosen by the request's own prompt tokens, as providers bill it.
pub fn line_cost(line: &UsageLine, book: &PriceBook) -> Option<KindCosts> {
    book.lookup_at(&line.model, line.at)
        .map(|found| price_line(&line.tokens, &found).in_usd())
}

fn price_line(tokens: &TokenUsage, found: &PriceMatch<'_>) -> PicoCosts {
    PicoCosts::of(tokens, found.rates_for(tokens.prompt_tokens()))
}

#[derive(Default)]
struct ModelAcc {
    lines: u64,
    tokens: TokenUsage,
    costs: PicoCosts,
    source: Option<PriceSource>,
}

/// Totals, per-model and per-kind costs of `lines`, and what could not be priced.
pub fn cost_summary<'a>(
    lines: impl IntoIterator<Item = &'a UsageLine>,
    book: &PriceBook,
) -> CostSummary {
    let mut models: BTreeMap<ModelKey<'_>, ModelAcc> = BTreeMap::new();
    let mut unpriced = UnpricedUsage::default();
    let mut unpriced_models = BTreeSet::new();
    // Per kind: what it sums, its priced lines' cost, and how many lines were priced.
    let mut by_request: BTreeMap<UsageKind, (RequestKindCost, PicoCosts, u64)> = BTreeMap::new();
    for line in lines {
        // The price in force when the request was made: a later price change leaves it alone.
        let found = book.lookup_at(&line.model, line.at);
        let (kind, kind_costs, priced) = by_request.entry(line.kind).or_insert_with(|| {
            (
                RequestKindCost {
                    kind: line.kind,
                    lines: 0,
                    tokens: TokenUsage::default(),
                    total_usd: None,
                    partial: false,
                },
                PicoCosts::default(),
                0,
            )
        });
        kind.lines += 1;
        kind.tokens += line.tokens;
        match &found {
            Some(found) => {
                *kind_costs += price_line(&line.tokens, found);
                *priced += 1;
            }
            None => kind.partial = true,
        }
        let Some(found) = found else {
            unpriced.lines += 1;
            unpriced.tokens += line.tokens;
            unpriced_models.insert(line.model.clone());
            continue;
        };
        let acc = models
            .entry((
                line.provider.as_str(),
                line.model.as_str(),
                line.delegated_to.as_deref(),
            ))
            .or_default();
        acc.lines += 1;
        acc.tokens += line.tokens;
        acc.costs += price_line(&line.tokens, &found);
        acc.source = Some(found.source);
    }
    unpriced.models = unpriced_models.into_iter().collect();
    let mut summary = summarise(models, unpriced, book);
    summary.by_request = by_request
        .into_values()
        .map(|(mut kind, costs, priced)| {
            // Nothing priced is unpriced, not $0.
            kind.total_usd = (priced > 0).then(|| usd(costs.total()));
            kind
        })
        .collect();
    summary
}

/// What a session's spend line totals (tokens, priced cost, unpriced requests), added up line
/// by line so that a later read need add only the lines written since.
///
/// Its figures are the ones [`cost_summary`] gives for the same lines: each line priced at
/// the rates in force at its time, in exact picodollars until read out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpendTally {
    /// The lines' tokens of each kind (what `session/get` answers as `tokensByKind`).
    pub tokens: TokenUsage,
    /// Picodollars of the priced lines.
    pub costs: u128,
    pub priced_lines: u64,
    pub unpriced_lines: u64,
}

impl SpendTally {
    pub fn add(&mut self, line: &UsageLine, book: &PriceBook) {
        self.tokens += line.tokens;
        match book.lookup_at(&line.model, line.at) {
            Some(found) => {
                self.costs += price_line(&line.tokens, &found).total();
                self.priced_lines += 1;
            }
            None => self.unpriced_lines += 1,
        }
    }

    pub fn spend(&self) -> SessionSpend {
        SessionSpend {
            tokens: self.tokens.total(),
            // Nothing priced is unpriced, not $0.
            cost_usd: (self.priced_lines > 0).then(|| usd(self.costs)),
            unpriced_requests: self.unpriced_lines,
        }
    }
}

impl AddAssign for SpendTally {
    fn add_assign(&mut self, other: SpendTally) {
        self.tokens += other.tokens;
        self.costs += other.costs;
        self.priced_lines += other.priced_lines;
        self.unpriced_lines += other.unpriced_lines;
    }
}

/// Lines are summed per provider, model and the child session that made them (if any).
type ModelKey<'a> = (&'a str, &'a str, Option<&'a str>);

fn summarise(
    models: BTreeMap<ModelKey<'_>, ModelAcc>,
    unpriced: UnpricedUsage,
    book: &PriceBook,
) -> CostSummary {
    let mut all = PicoCosts::default();
    let mut priced_lines = 0;
    let by_model = models
        .into_iter()
        .map(|((provider, model, delegated_to), acc)| {
            all += acc.costs;
            priced_lines += acc.lines;
            ModelCost {
                provider: provider.to_owned(),
                model: model.to_owned(),
                lines: acc.lines,
                tokens: acc.tokens,
                by_kind: acc.costs.in_usd(),
                total_usd: usd(acc.costs.total()),
                price_source: acc.source.unwrap_or(PriceSource::Builtin),
                delegated_to: delegated_to.map(str::to_owned),
            }
        })
        .collect();
    CostSummary {
        total_usd: (priced_lines > 0).then(|| usd(all.total())),
        by_kind: (priced_lines > 0).then(|| all.in_usd()),
        by_model,
        priced_lines,
        partial: unpriced.lines > 0,
        unpriced,
        prices_as_of: book.as_of().to_owned(),
        by_request: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::prices::{DatedPrice, ModelPrice, PriceOverride};
    use pretty_assertions::assert_eq;
    use std::collections::HashMap;

    fn line(provider: &str, model: &str, tokens: TokenUsage) -> UsageLine {
        UsageLine {
            provider: provider.to_owned(),
            model: model.to_owned(),
            tokens,
            at: 1_764_400_000_000,
            duration_ms: 1_200,
            kind: UsageKind::Turn,
            delegated_to: None,
        }
    }

    fn tokens(input: u64, cache_read: u64, cache_write: u64, output: u64) -> TokenUsage {
        TokenUsage {
            input,
            output,
            cache_read,
            cache_write,
            reasoning: 0,
        }
    }

    /// Claude Sonnet 4.5 below and above its 200K tier, GPT-4o mini with a cache read, Gemini
    /// 2.5 Pro above its tier with reasoning, and a local model nobody priced.
    fn session() -> Vec<UsageLine> {
        vec![
            line(
                "anthropic",
                "claude-sonnet-4-5",
                tokens(100_000, 50_000, 20_000, 10_000),
            ),
            line(
                "anthropic",
                "claude-sonnet-4-5",
                tokens(150_000, 40_000, 20_000, 10_000),
            ),
            line(
                "openai",
                "gpt-4o-mini",
                tokens(1_000_000, 200_000, 0, 100_000),
            ),
            line(
                "google",
                "gemini-2.5-pro",
                TokenUsage {
                    reasoning: 1_000,
                    ..tokens(250_000, 0, 0, 4_000)
                },
            ),
            line("ollama", "llama3.1:8b", tokens(5_000, 0, 0, 500)),
        ]
    }

    #[test]
    fn summary_matches_hand_worked_totals() {
        // Prices per million tokens (data/prices.json):
        //   claude-sonnet-4-5  in 3, cache read 0.30, cache write 3.75, out 15;
        //                      above 200K prompt tokens: 6, 0.60, 7.50, 22.50
        //   gpt-4o-mini        in 0.15, cache read 0.075, out 0.60
        //   gemini-2.5-pro     above 200K: in 2.50, out 15
        // Line 1 (prompt 170,000 → base):
        //   100,000 × 3 = 0.30; 50,000 × 0.30 = 0.015; 20,000 × 3.75 = 0.075; 10,000 × 15 = 0.15
        //   = 0.54
        // Line 2 (prompt 150,000 + 40,000 + 20,000 = 210,000 > 200,000 → tier):
        //   150,000 × 6 = 0.90; 40,000 × 0.60 = 0.024; 20,000 × 7.50 = 0.15;
        //   10,000 × 22.50 = 0.225 = 1.299
        // Line 3: 1,000,000 × 0.15 = 0.15; 200,000 × 0.075 = 0.015; 100,000 × 0.60 = 0.06
        //   = 0.225
        // Line 4 (prompt 250,000 → tier): 250,000 × 2.50 = 0.625; 4,000 × 15 = 0.06 = 0.685
        // Line 5: unpriced.
        // By kind: input 0.30 + 0.90 + 0.15 + 0.625 = 1.975; cache read 0.015 + 0.024 + 0.015
        //   = 0.054; cache write 0.075 + 0.15 = 0.225; output 0.15 + 0.225 + 0.06 + 0.06 = 0.495
        // Total 0.54 + 1.299 + 0.225 + 0.685 = 2.749.
        // Line 3 was a summary request: 0.225 of the total, the rest is turns.
        let mut lines = session();
        lines[2].kind = UsageKind::Summary;
        let mut turn_tokens = TokenUsage::default();
        for (i, line) in lines.iter().enumerate() {
            if i != 2 {
                turn_tokens += line.tokens;
            }
        }
        let summary = cost_summary(&lines, &PriceBook::builtin());
        assert_eq!(
            summary,
            CostSummary {
                total_usd: Some(2.749),
                by_kind: Some(KindCosts {
                    input: 1.975,
                    output: 0.495,
                    cache_read: 0.054,
                    cache_write: 0.225,
                }),
                by_model: vec![
                    ModelCost {
                        provider: "anthropic".to_owned(),
                        model: "claude-sonnet-4-5".to_owned(),
                        lines: 2,
                        tokens: tokens(250_000, 90_000, 40_000, 20_000),
                        by_kind: KindCosts {
                            input: 1.2,
                            output: 0.375,
                            cache_read: 0.039,
                            cache_write: 0.225,
                        },
                        total_usd: 1.839,
                        price_source: PriceSource::Builtin,
                        delegated_to: None,
                    },
                    ModelCost {
                        provider: "google".to_owned(),
                        model: "gemini-2.5-pro".to_owned(),
                        lines: 1,
                        tokens: TokenUsage {
                            reasoning: 1_000,
                            ..tokens(250_000, 0, 0, 4_000)
                        },
                        by_kind: KindCosts {
                            input: 0.625,
                            output: 0.06,
                            cache_read: 0.0,
                            cache_write: 0.0,
                        },
                        total_usd: 0.685,
                        price_source: PriceSource::Builtin,
                        delegated_to: None,
                    },
                    ModelCost {
                        provider: "openai".to_owned(),
                        model: "gpt-4o-mini".to_owned(),
                        lines: 1,
                        tokens: tokens(1_000_000, 200_000, 0, 100_000),
                        by_kind: KindCosts {
                            input: 0.15,
                            output: 0.06,
                            cache_read: 0.015,
                            cache_write: 0.0,
                        },
                        total_usd: 0.225,
                        price_source: PriceSource::Builtin,
                        delegated_to: None,
                    },
                ],
                priced_lines: 4,
                unpriced: UnpricedUsage {
                    lines: 1,
                    tokens: tokens(5_000, 0, 0, 500),
                    models: vec!["llama3.1:8b".to_owned()],
                },
                partial: true,
                prices_as_of: "2026-11-29".to_owned(),
                by_request: vec![
                    RequestKindCost {
                        kind: UsageKind::Turn,
                        lines: 4,
                        tokens: turn_tokens,
                        total_usd: Some(2.524),
                        partial: true,
                    },
                    RequestKindCost {
                        kind: UsageKind::Summary,
                        lines: 1,
                        tokens: tokens(1_000_000, 200_000, 0, 100_000),
                        total_usd: Some(0.225),
                        partial: false,
                    },
                ],
            }
        );
    }

    #[test]
    fn the_tier_starts_strictly_above_its_threshold() {
        let book = PriceBook::builtin();
        // Prompt 150,000 + 30,000 + 20,000 = exactly 200,000 → base prices:
        //   150,000 × 3 = 0.45; 30,000 × 0.30 = 0.009; 20,000 × 3.75 = 0.075; 1,000 × 15 = 0.015
        //   → 0.549
        let at = line(
            "anthropic",
            "claude-sonnet-4-5",
            tokens(150_000, 30_000, 20_000, 1_000),
        );
        // One more input token → 200,001 > 200,000 → tier:
        //   150,001 × 6 = 0.900006; 30,000 × 0.60 = 0.018; 20,000 × 7.50 = 0.15;
        //   1,000 × 22.50 = 0.0225 → 1.090506
        let above = line(
            "anthropic",
            "claude-sonnet-4-5",
            tokens(150_001, 30_000, 20_000, 1_000),
        );
        let total = |l: &UsageLine| cost_summary([l], &book).total_usd;
        assert_eq!((total(&at), total(&above)), (Some(0.549), Some(1.090_506)));
    }

    #[test]
    fn gpt_5_4_long_context_keeps_the_base_cache_read_price() {
        // gpt-5.4 above 272K: in 5, out 22.50; cache read keeps 0.25.
        //   200,000 × 5 = 1.00; 100,000 × 0.25 = 0.025; 2,000 × 22.50 = 0.045 → 1.07
        let l = line("openai", "gpt-5.4", tokens(200_000, 100_000, 0, 2_000));
        assert_eq!(
            line_cost(&l, &PriceBook::builtin()),
            Some(KindCosts {
                input: 1.0,
                output: 0.045,
                cache_read: 0.025,
                cache_write: 0.0,
            })
        );
    }

    #[test]
    fn cache_writes_without_a_price_cost_plain_input() {
        // gpt-4o has no cache-write price: 10,000 × 2.50 = 0.025, like input.
        let l = line("openai", "gpt-4o", tokens(0, 0, 10_000, 0));
        assert_eq!(
            line_cost(&l, &PriceBook::builtin()).map(|c| c.cache_write),
            Some(0.025)
        );
    }

    #[test]
    fn overrides_price_what_the_table_does_not_and_beat_what_it_does() {
        let overrides = HashMap::from([
            (
                "llama3.1".to_owned(),
                PriceOverride::from(ModelPrice {
                    input: 0.0,
                    cached_input: None,
                    cache_write: None,
                    output: 0.0,
                    tiers: Vec::new(),
                }),
            ),
            (
                "gpt-4o-mini".to_owned(),
                PriceOverride::from(ModelPrice {
                    input: 1.0,
                    cached_input: Some(0.5),
                    cache_write: None,
                    output: 2.0,
                    tiers: Vec::new(),
                }),
            ),
        ]);
        let Ok(book) = PriceBook::with_overrides(&overrides) else {
            panic!("valid overrides");
        };
        let lines = &session()[2..];
        let summary = cost_summary(lines, &book);
        // gpt-4o-mini at the override: 1,000,000 × 1 = 1.00; 200,000 × 0.50 = 0.10;
        //   100,000 × 2 = 0.20 → 1.30. Gemini as before: 0.685. llama3.1: $0 by choice.
        // Total 1.30 + 0.685 + 0 = 1.985; nothing unpriced.
        // Sorted by provider, then model: google, ollama, openai.
        let per_model: Vec<_> = summary
            .by_model
            .iter()
            .map(|m| (m.model.as_str(), m.total_usd, m.price_source))
            .collect();
        assert_eq!(
            per_model,
            vec![
                ("gemini-2.5-pro", 0.685, PriceSource::Builtin),
                ("llama3.1:8b", 0.0, PriceSource::Override),
                ("gpt-4o-mini", 1.3, PriceSource::Override),
            ]
        );
        assert_eq!(
            (summary.total_usd, summary.partial, summary.unpriced),
            (Some(1.985), false, UnpricedUsage::default())
        );
    }

    #[test]
    fn unpriced_usage_is_never_reported_as_zero_dollars() {
        let lines = [
            line("ollama", "qwen3:8b", tokens(1_000, 0, 0, 100)),
            line("acme", "mystery-1", tokens(2_000, 0, 0, 200)),
            line("ollama", "qwen3:8b", tokens(3_000, 0, 0, 300)),
        ];
        let summary = cost_summary(&lines, &PriceBook::builtin());
        assert_eq!(
            summary,
            CostSummary {
                total_usd: None,
                by_kind: None,
                by_model: Vec::new(),
                priced_lines: 0,
                unpriced: UnpricedUsage {
                    lines: 3,
                    tokens: tokens(6_000, 0, 0, 600),
                    models: vec!["mystery-1".to_owned(), "qwen3:8b".to_owned()],
                },
                partial: true,
                prices_as_of: "2026-11-29".to_owned(),
                by_request: vec![RequestKindCost {
                    kind: UsageKind::Turn,
                    lines: 3,
                    tokens: tokens(6_000, 0, 0, 600),
                    total_usd: None,
                    partial: true,
                }],
            }
        );
        assert_eq!(line_cost(&lines[0], &PriceBook::builtin()), None);
    }

    #[test]
    fn a_price_change_does_not_reprice_usage_from_before_it() {
        let dated = |since: Option<&str>, input| DatedPrice {
            since: since.map(str::to_owned),
            price: ModelPrice {
                input,
                cached_input: None,
                cache_write: None,
                output: 0.0,
                tiers: Vec::new(),
            },
        };
        // $1 / M until 2025-12-01, $4 / M from then on.
        let overrides = HashMap::from([(
            "my-model".to_owned(),
            PriceOverride::Dated(vec![dated(None, 1.0), dated(Some("2025-12-01"), 4.0)]),
        )]);
        let Ok(book) = PriceBook::with_overrides(&overrides) else {
            panic!("valid overrides");
        };
        // 1,000,000 tokens before the change (2025-11-29) → $1; after (2025-12-02) → $4.
        let before = line("local", "my-model", tokens(1_000_000, 0, 0, 0));
        let after = UsageLine {
            at: 1_764_633_600_000,
            ..before.clone()
        };
        let summary = cost_summary([&before, &after], &book);
        assert_eq!(
            (
                line_cost(&before, &book).map(|c| c.input),
                line_cost(&after, &book).map(|c| c.input),
                summary.total_usd,
            ),
            (Some(1.0), Some(4.0), Some(5.0))
        );
    }

    #[test]
    fn usage_lines_serialise_in_camel_case() {
        let json =
            serde_json::to_value(line("openai", "gpt-4o", tokens(1, 2, 3, 4))).unwrap_or_default();
        assert_eq!(json["tokens"]["cacheRead"], 2);
        assert_eq!(json["durationMs"], 1_200);
    }
}
