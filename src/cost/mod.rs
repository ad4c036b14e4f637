//! What usage costs: the price book and usage lines.
//!
//! Usage lines are facts (tokens by kind, when, how long); prices are applied when the lines are
//! read, so a corrected price corrects history, and a model without a price shows as unpriced.

pub mod prices;
pub mod usage;

pub use prices::{
    ModelPrice, PriceBook, PriceEntry, PriceError, PriceMatch, PriceTier, Rates, parse_price_table,
};
pub use usage::{UsageLine, cost_summary, line_cost};
