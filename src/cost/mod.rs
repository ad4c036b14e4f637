//! What usage costs: the price book and usage lines.
//!
//! Usage lines are facts (tokens by kind, when, how long); prices are applied when the lines are
//! read, so a corrected price corrects history, and a model without a price shows as unpriced.
//! A price change is a new entry dated `since`: each line is priced by the entry in force at
//! its time, so the change does not re-price older usage.

pub mod prices;
pub mod usage;

pub use prices::{
    DatedPrice, ModelPrice, PriceBook, PriceEntry, PriceError, PriceMatch, PriceOverride,
    PriceTier, Rates, parse_price_table,
};
pub use usage::{SpendTally, UsageLine, cost_summary, line_cost};
