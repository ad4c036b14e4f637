//! The price book: USD per million tokens by model name prefix, with long-context tiers.
//!
//! Prices are applied when usage is read, never stored with it, so a corrected price fixes old
//! sessions' costs too. A price may say `since` when it applies: each usage line is priced by
//! the entry in force at the line's time, so a price change (a new dated entry) leaves usage
//! from before it at the old price. An entry without `since` applies from the beginning of
//! time. The built-in table (`data/prices.json`) carries the date it is as of; a user's
//! configured prices (overrides) beat it for any model they match, because the user may have a
//! negotiated rate, a proxy's markup, or a local model they want to price at zero.

use std::collections::HashMap;
use std::sync::OnceLock;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::protocol::PriceSource;

const BUILTIN_JSON: &str = include_str!("../../data/prices.json");

/// Picodollars (1e-12 USD) per token are the same unit as microdollars per million tokens, so a
/// per-million price with up to six decimals becomes an exact integer rate, and costs add up
/// without floating-point drift.
const PICO_PER_USD: f64 = 1e12;
const RATE_SCALE: f64 = 1e6;

#[derive(Debug, thiserror::Error)]
pub enum PriceError {
    #[error("price table is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("price for {model:?}: {problem}")]
    Invalid { model: String, problem: String },
}

/// Prices of one model in USD per million tokens.
///
/// A kind without its own price is billed like plain input: that is how OpenAI and Google bill
/// cache writes, and a cache read without a discount is still a read of input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelPrice {
    pub input: f64,
    /// Cache read (a cache hit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input: Option<f64>,
    /// Cache write (for Anthropic, the default five-minute cache).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write: Option<f64>,
    pub output: f64,
    /// Higher prices for requests with many input tokens, lowest threshold first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tiers: Vec<PriceTier>,
}

/// Prices that apply to a whole request once its input exceeds a threshold.
///
/// "Input" is every prompt token, cached or not, as Anthropic, Google and OpenAI count it for
/// their long-context prices. A kind the tier leaves out keeps the base price of that kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PriceTier {
    /// The tier applies when input tokens are strictly more than this.
    pub above_input_tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<f64>,
}

/// Rates of one tier in picodollars per token, every kind resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rates {
    pub input: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    pub output: u64,
}

/// A price ready to apply: base rates and tiers, highest threshold first.
#[derive(Debug, Clone, PartialEq)]
struct Compiled {
    base: Rates,
    tiers: Vec<(u64, Rates)>,
}

impl Compiled {
    fn rates_for(&self, input_tokens: u64) -> Rates {
        self.tiers
            .iter()
            .find(|(above, _)| input_tokens > *above)
            .map_or(self.base, |(_, rates)| *rates)
    }
}

/// One row of the built-in table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PriceEntry {
    /// Lower-case model name prefix.
    pub prefix: String,
    pub provider: String,
    /// When the price starts to apply (see [`DatedPrice::since`]); absent: always.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    #[serde(flatten)]
    pub price: ModelPrice,
    /// Where the figure comes from when it is not models.json, or why it differs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A configured price and the time it applies from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DatedPrice {
    /// A date (`YYYY-MM-DD`, from midnight UTC) or an RFC 3339 time in UTC from which the price
    /// applies to usage; absent: from the beginning of time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    #[serde(flatten)]
    pub price: ModelPrice,
}

/// A configured price override of one model: one price, or a list of dated ones (a price
/// change adds an entry, so usage from before it keeps the price it had).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum PriceOverride {
    One(DatedPrice),
    Dated(Vec<DatedPrice>),
}

impl PriceOverride {
    pub fn entries(&self) -> &[DatedPrice] {
        match self {
            PriceOverride::One(one) => std::slice::from_ref(one),
            PriceOverride::Dated(all) => all,
        }
    }
}

impl From<ModelPrice> for PriceOverride {
    fn from(price: ModelPrice) -> Self {
        PriceOverride::One(DatedPrice { since: None, price })
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PriceFile {
    as_of: String,
    models: Vec<PriceEntry>,
}

#[derive(Debug, Clone, PartialEq)]
struct Row {
    prefix: String,
    provider: Option<String>,
    /// Milliseconds since the Unix epoch from which the row applies (`i64::MIN`: always).
    since: i64,
    price: ModelPrice,
    compiled: Compiled,
}

/// The built-in rows, parsed once.
#[derive(Debug, Clone, PartialEq)]
struct BuiltinPrices {
    as_of: String,
    rows: Vec<Row>,
}

/// The price found for a model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PriceMatch<'a> {
    pub source: PriceSource,
    /// The table key that matched.
    pub prefix: &'a str,
    pub provider: Option<&'a str>,
    pub price: &'a ModelPrice,
    compiled: &'a Compiled,
}

impl PriceMatch<'_> {
    /// The rates for a request with `input_tokens` prompt tokens (cached ones included).
    pub fn rates_for(&self, input_tokens: u64) -> Rates {
        self.compiled.rates_for(input_tokens)
    }
}

/// The built-in prices plus the user's overrides.
#[derive(Debug, Clone, PartialEq)]
pub struct PriceBook {
    builtin: &'static BuiltinPrices,
    overrides: Vec<Row>,
}

impl Default for PriceBook {
    fn default() -> Self {
        PriceBook::builtin()
    }
}

impl PriceBook {
    /// The built-in prices alone.
    pub fn builtin() -> Self {
        PriceBook {
            builtin: builtin_prices(),
            overrides: Vec::new(),
        }
    }

    /// The built-in prices with configured overrides, keyed by model name or prefix. An override
    /// in force wins over every built-in entry for a model it matches; among overrides the
    /// longest prefix wins.
    pub fn with_overrides(overrides: &HashMap<String, PriceOverride>) -> Result<Self, PriceError> {
        let mut rows = overrides
            .iter()
            .flat_map(|(model, prices)| {
                prices
                    .entries()
                    .iter()
                    .map(move |dated| row(model, None, dated.price.clone(), dated.since.as_deref()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        rows.sort_by(|a, b| a.prefix.cmp(&b.prefix));
        Ok(PriceBook {
            builtin: builtin_prices(),
            overrides: rows,
        })
    }

    /// The date the built-in prices are as of (`YYYY-MM-DD`).
    pub fn as_of(&self) -> &str {
        &self.builtin.as_of
    }

    /// The price of `model` now, or `None` if it is unpriced.
    pub fn lookup(&self, model: &str) -> Option<PriceMatch<'_>> {
        self.lookup_at(model, crate::util::now_ms())
    }

    /// The price of `model` in force at `at` (milliseconds since the Unix epoch), or `None` if
    /// it was unpriced then: usage is priced at the time it happened.
    pub fn lookup_at(&self, model: &str, at: i64) -> Option<PriceMatch<'_>> {
        let candidates = crate::context::name_candidates(model, false);
        find(&self.overrides, &candidates, at, PriceSource::Override)
            .or_else(|| find(&self.builtin.rows, &candidates, at, PriceSource::Builtin))
    }

    /// Every built-in entry, for listing.
    pub fn builtin_entries(&self) -> impl Iterator<Item = (&str, Option<&str>, &ModelPrice)> {
        self.builtin
            .rows
            .iter()
            .map(|r| (r.prefix.as_str(), r.provider.as_deref(), &r.price))
    }
}

/// Among the rows in force at `at`, the longest prefix that a candidate name starts with; of
/// several entries of that prefix, the one that took effect last.
fn find<'a>(
    rows: &'a [Row],
    candidates: &[String],
    at: i64,
    source: PriceSource,
) -> Option<PriceMatch<'a>> {
    rows.iter()
        .filter(|r| r.since <= at && candidates.iter().any(|c| c.starts_with(&r.prefix)))
        .max_by_key(|r| (r.prefix.len(), r.since))
        .map(|row| row.as_match(source))
}

impl Row {
    fn as_match(&self, source: PriceSource) -> PriceMatch<'_> {
        PriceMatch {
            source,
            prefix: &self.prefix,
            provider: self.provider.as_deref(),
            price: &self.price,
            compiled: &self.compiled,
        }
    }
}

/// Parses a table in the format of `data/prices.json`, returning its date and entries.
pub fn parse_price_table(json: &str) -> Result<(String, Vec<PriceEntry>), PriceError> {
    let file: PriceFile = serde_json::from_str(json)?;
    Ok((file.as_of, file.models))
}

fn builtin_prices() -> &'static BuiltinPrices {
    static PRICES: OnceLock<BuiltinPrices> = OnceLock::new();
    PRICES.get_or_init(|| {
        load_builtin(BUILTIN_JSON).unwrap_or_else(|e| {
            // A test guarantees the shipped table loads; if not, every model is unpriced, which
            // is reported as such, never as $0.
            tracing::error!("built-in price table unusable: {e}");
            BuiltinPrices {
                as_of: String::new(),
                rows: Vec::new(),
            }
        })
    })
}

fn load_builtin(json: &str) -> Result<BuiltinPrices, PriceError> {
    let (as_of, entries) = parse_price_table(json)?;
    let rows = entries
        .into_iter()
        .map(|e| row(&e.prefix, Some(e.provider), e.price, e.since.as_deref()))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(BuiltinPrices { as_of, rows })
}

fn row(
    prefix: &str,
    provider: Option<String>,
    price: ModelPrice,
    since: Option<&str>,
) -> Result<Row, PriceError> {
    let prefix = prefix.trim().to_ascii_lowercase();
    let invalid = |problem: String| PriceError::Invalid {
        model: prefix.clone(),
        problem,
    };
    if prefix.is_empty() {
        return Err(invalid("empty model name".to_owned()));
    }
    let compiled = compile(&price).map_err(invalid)?;
    let since = since.map_or(Ok(i64::MIN), parse_since).map_err(invalid)?;
    Ok(Row {
        prefix,
        provider,
        since,
        price,
        compiled,
    })
}

/// `YYYY-MM-DD` (midnight UTC) or an RFC 3339 time in UTC → milliseconds since the epoch.
fn parse_since(since: &str) -> Result<i64, String> {
    let since = since.trim();
    let full = match since.len() {
        10 => format!("{since}T00:00:00Z"),
        _ => since.to_owned(),
    };
    let time = humantime::parse_rfc3339(&full).map_err(|_| {
        format!("since {since:?} is not a date (YYYY-MM-DD) or an RFC 3339 time in UTC")
    })?;
    let ms = time
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| format!("since {since:?} is before 1970"))?
        .as_millis();
    i64::try_from(ms).map_err(|_| format!("since {since:?} is too far ahead"))
}

fn compile(price: &ModelPrice) -> Result<Compiled, String> {
    let base = Rates {
        input: rate(price.input)?,
        cache_read: rate(price.cached_input.unwrap_or(price.input))?,
        cache_write: rate(price.cache_write.unwrap_or(price.input))?,
        output: rate(price.output)?,
    };
    let mut tiers = price
        .tiers
        .iter()
        .map(|tier| Ok((tier.above_input_tokens, tier_rates(price, tier)?)))
        .collect::<Result<Vec<_>, String>>()?;
    tiers.sort_by_key(|(above, _)| std::cmp::Reverse(*above));
    Ok(Compiled { base, tiers })
}

/// A tier's rates: its own prices, else the base price of the kind, else (for cache kinds
/// without any price) the tier's input price.
fn tier_rates(price: &ModelPrice, tier: &PriceTier) -> Result<Rates, String> {
    let input = tier.input.unwrap_or(price.input);
    let cache_read = tier.cached_input.or(price.cached_input).unwrap_or(input);
    let cache_write = tier.cache_write.or(price.cache_write).unwrap_or(input);
    Ok(Rates {
        input: rate(input)?,
        cache_read: rate(cache_read)?,
        cache_write: rate(cache_write)?,
        output: rate(tier.output.unwrap_or(price.output))?,
    })
}

/// USD per million tokens → picodollars per token, rounded to the unit.
fn rate(usd_per_million: f64) -> Result<u64, String> {
    if !usd_per_million.is_finite() || usd_per_million < 0.0 {
        return Err(format!("{usd_per_million} is not a price"));
    }
    let scaled = (usd_per_million * RATE_SCALE).round();
    if scaled > u64::MAX as f64 {
        return Err(format!("{usd_per_million} is too large"));
    }
    Ok(scaled as u64)
}

/// Picodollars → USD.
pub(crate) fn usd(picodollars: u128) -> f64 {
    picodollars as f64 / PICO_PER_USD
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn price(input: f64, output: f64) -> ModelPrice {
        ModelPrice {
            input,
            cached_input: None,
            cache_write: None,
            output,
            tiers: Vec::new(),
        }
    }

    #[test]
    fn builtin_table_loads_with_a_date() {
        let loaded = load_builtin(BUILTIN_JSON).map(|b| b.rows.len());
        assert!(matches!(loaded, Ok(n) if n > 100), "{loaded:?}");
        assert_eq!(PriceBook::builtin().as_of(), "2026-11-29");
    }

    #[test]
    fn builtin_prices_are_per_million_tokens() {
        let book = PriceBook::builtin();
        let found = book
            .lookup("claude-sonnet-4-5-20250929")
            .map(|m| (m.prefix, m.price.clone()));
        assert_eq!(
            found,
            Some((
                "claude-sonnet-4-5",
                ModelPrice {
                    input: 3.0,
                    cached_input: Some(0.3),
                    cache_write: Some(3.75),
                    output: 15.0,
                    tiers: vec![PriceTier {
                        above_input_tokens: 200_000,
                        input: Some(6.0),
                        cached_input: Some(0.6),
                        cache_write: Some(7.5),
                        output: Some(22.5),
                    }],
                }
            ))
        );
        // models.json: 1.25e-07 $/token = $0.125 / M, 6e-09 $/token = $0.006 / M.
        let cached = |model: &str| book.lookup(model).and_then(|m| m.price.cached_input);
        assert_eq!(cached("gemini/gemini-2.5-pro"), Some(0.125));
        assert_eq!(cached("deepseek-v4-flash"), Some(0.006));
    }

    #[test]
    fn lookup_uses_the_longest_prefix_and_provider_spellings() {
        let book = PriceBook::builtin();
        let prefix = |model: &str| book.lookup(model).map(|m| m.prefix.to_owned());
        let cases = [
            ("gpt-4o-mini-2024-07-18", Some("gpt-4o-mini")),
            ("gpt-4o-2024-05-13", Some("gpt-4o-2024-05-13")),
            ("gpt-4o-2024-11-20", Some("gpt-4o")),
            ("openai/gpt-5.4-pro", Some("gpt-5.4-pro")),
            ("gpt-5.1-codex-max", Some("gpt-5")),
            ("anthropic/claude-opus-4-6", Some("claude-opus-4-6")),
            (
                "us.anthropic.claude-opus-4-1-20250805-v1:0",
                Some("claude-opus-4"),
            ),
            (
                "gemini/gemini-2.5-flash-lite",
                Some("gemini-2.5-flash-lite"),
            ),
            ("deepseek/deepseek-chat", Some("deepseek-chat")),
            (
                "ft:gpt-4o-mini-2024-07-18:acme::x1",
                Some("ft:gpt-4o-mini-2024-07-18"),
            ),
            ("ft:gpt-5:acme::x1", None),
            ("llama3.1:8b", None),
            ("my-model", None),
        ];
        let got: Vec<_> = cases.iter().map(|(m, _)| (*m, prefix(m))).collect();
        let want: Vec<_> = cases
            .iter()
            .map(|(m, p)| (*m, p.map(str::to_owned)))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn rates_resolve_missing_kinds_and_tiers() {
        let book = PriceBook::builtin();
        let rates = |model: &str, input| book.lookup(model).map(|m| m.rates_for(input));
        // gpt-5.4: $2.50 in, $0.25 cached, no cache-write price (billed as input), $15 out;
        // above 272K: $5 in, $22.50 out, cached keeps its base $0.25.
        assert_eq!(
            [rates("gpt-5.4", 272_000), rates("gpt-5.4", 272_001)],
            [
                Some(Rates {
                    input: 2_500_000,
                    cache_read: 250_000,
                    cache_write: 2_500_000,
                    output: 15_000_000
                }),
                Some(Rates {
                    input: 5_000_000,
                    cache_read: 250_000,
                    cache_write: 5_000_000,
                    output: 22_500_000
                }),
            ]
        );
        // o1-pro has no cache prices at all: both cache kinds cost plain input, $150 / M.
        assert_eq!(
            rates("o1-pro", 10),
            Some(Rates {
                input: 150_000_000,
                cache_read: 150_000_000,
                cache_write: 150_000_000,
                output: 600_000_000
            })
        );
    }

    #[test]
    fn overrides_beat_the_builtin_table() {
        let overrides = HashMap::from([
            ("claude".to_owned(), price(1.0, 2.0).into()),
            ("llama3.1".to_owned(), price(0.0, 0.0).into()),
            ("GPT-4o".to_owned(), price(2.0, 8.0).into()),
        ]);
        let book = PriceBook::with_overrides(&overrides).map_err(|e| e.to_string());
        let Ok(book) = book else {
            panic!("{book:?}");
        };
        let found = |model: &str| book.lookup(model).map(|m| (m.source, m.prefix.to_owned()));
        assert_eq!(
            [
                found("claude-sonnet-4-5"),
                found("llama3.1:8b"),
                found("gpt-4o-mini"),
                found("gpt-5"),
            ],
            [
                // A shorter override prefix still beats the longer built-in entry.
                Some((PriceSource::Override, "claude".to_owned())),
                Some((PriceSource::Override, "llama3.1".to_owned())),
                Some((PriceSource::Override, "gpt-4o".to_owned())),
                Some((PriceSource::Builtin, "gpt-5".to_owned())),
            ]
        );
    }

    #[test]
    fn invalid_overrides_are_rejected() {
        let overrides = HashMap::from([("x".to_owned(), price(-1.0, 2.0).into())]);
        assert_eq!(
            PriceBook::with_overrides(&overrides).map_err(|e| e.to_string()),
            Err("price for \"x\": -1 is not a price".to_owned())
        );
        let nan = HashMap::from([("y".to_owned(), price(1.0, f64::NAN).into())]);
        assert!(PriceBook::with_overrides(&nan).is_err());
        let undated = HashMap::from([(
            "z".to_owned(),
            PriceOverride::One(DatedPrice {
                since: Some("next tuesday".to_owned()),
                price: price(1.0, 2.0),
            }),
        )]);
        assert_eq!(
            PriceBook::with_overrides(&undated).map_err(|e| e.to_string()),
            Err("price for \"z\": since \"next tuesday\" is not a date (YYYY-MM-DD) or an RFC 3339 time in UTC".to_owned())
        );
    }

    /// 2026-06-01T00:00:00Z in milliseconds.
    const JUNE: i64 = 1_780_272_000_000;

    #[test]
    fn each_time_gets_the_price_in_force_then() {
        let dated = |since: Option<&str>, input| DatedPrice {
            since: since.map(str::to_owned),
            price: price(input, 10.0),
        };
        let overrides = HashMap::from([
            (
                "my-model".to_owned(),
                PriceOverride::Dated(vec![
                    dated(Some("2026-06-01"), 2.0),
                    dated(None, 1.0),
                    dated(Some("2026-09-01T12:00:00Z"), 3.0),
                ]),
            ),
            // Only from June on: before, the built-in price of gpt-4o applies.
            (
                "gpt-4o".to_owned(),
                PriceOverride::One(dated(Some("2026-06-01"), 9.0)),
            ),
        ]);
        let Ok(book) = PriceBook::with_overrides(&overrides) else {
            panic!("valid overrides");
        };
        let input_at =
            |model: &str, at: i64| book.lookup_at(model, at).map(|m| (m.source, m.price.input));
        let september = 1_788_264_000_000; // 2026-09-01T12:00:00Z
        assert_eq!(
            [
                input_at("my-model", 0),
                input_at("my-model", JUNE - 1),
                input_at("my-model", JUNE),
                input_at("my-model", september - 1),
                input_at("my-model", september),
                input_at("gpt-4o", JUNE - 1),
                input_at("gpt-4o", JUNE),
            ],
            [
                Some((PriceSource::Override, 1.0)),
                Some((PriceSource::Override, 1.0)),
                Some((PriceSource::Override, 2.0)),
                Some((PriceSource::Override, 2.0)),
                Some((PriceSource::Override, 3.0)),
                Some((PriceSource::Builtin, 2.5)),
                Some((PriceSource::Override, 9.0)),
            ]
        );
    }

    #[test]
    fn a_dated_entry_is_unpriced_before_its_date_and_the_table_reads_since() {
        let table = r#"{"asOf": "2026-11-29", "models": [
            {"prefix": "new-model", "provider": "acme", "since": "2026-06-01", "input": 1, "output": 2}
        ]}"#;
        let loaded = load_builtin(table).map_err(|e| e.to_string());
        let Ok(builtin) = loaded else {
            panic!("{loaded:?}");
        };
        let book = PriceBook {
            builtin: Box::leak(Box::new(builtin)),
            overrides: Vec::new(),
        };
        assert_eq!(
            [
                book.lookup_at("new-model", JUNE - 1).map(|m| m.price.input),
                book.lookup_at("new-model", JUNE).map(|m| m.price.input),
            ],
            [None, Some(1.0)]
        );
    }

    #[test]
    fn per_million_prices_become_exact_integer_rates() {
        assert_eq!(rate(0.006), Ok(6_000));
        assert_eq!(rate(15.625), Ok(15_625_000));
        assert_eq!(rate(1.25e-07 * 1e6), Ok(125_000));
        assert_eq!(usd(540_000_000_000), 0.54);
    }
}
