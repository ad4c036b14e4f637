//! What the model can take: token counts, the model's context window and the budget snapshot.
//!
//! Everything here is pure and cheap to call. Counting text is the one costly step, so the
//! budget works from per-message counts that are computed once, when a message is stored, and
//! summed incrementally ([`HistoryTally`]); a snapshot is then a handful of additions.

pub mod budget;
pub mod carry_over;
pub mod compaction;
pub mod instructions;
pub mod pieces;
pub mod projection;
pub mod redact;
pub mod streaming;
pub mod title;
pub mod tokens;
pub mod window;

pub use budget::{
    Actuals, BudgetInput, Correction, CorrectionTable, DEFAULT_RESPONSE_RESERVE, HistoryTally,
};
pub use streaming::StreamingCount;
pub use tokens::{
    CountCache, Counted, Encoding, Part, REPLY_PRIMING_TOKENS, TOKENS_PER_MESSAGE,
    TOOL_CALL_OVERHEAD_TOKENS, TokenCounter, TokenizerError, Tokenizers, tracking_bounds,
    upper_bounds,
};
pub use window::{
    DEFAULT_CONTEXT_WINDOW, DEFAULT_MAX_OUTPUT, FamilyEntry, ModelWindow, ReasoningStyle,
    WindowError, WindowSource, WindowTable, model_window, reasoning_style,
};

/// The lower-cased spellings under which a model name is looked up in a prefix table.
///
/// Model names reach us decorated: `anthropic/claude-…` from routers, `us.anthropic.claude-…`
/// from Bedrock, `ollama/llama3.1:8b`, `ft:gpt-4o-…:org::id` for fine-tunes. Each spelling is
/// tried and the longest matching prefix wins, so a decorated name finds the same entry as the
/// bare one. Ollama tags (`:8b`) need nothing special: the family name is a prefix of the tag.
/// `strip_fine_tune` is off for prices, because a fine-tune is billed differently from its base
/// model, and on for windows and tokenizers, which a fine-tune shares with its base.
pub(crate) fn name_candidates(model: &str, strip_fine_tune: bool) -> Vec<String> {
    let full = model.trim().to_ascii_lowercase();
    let mut out = vec![full.clone()];
    if let Some((_, last)) = full.rsplit_once('/') {
        push_unique(&mut out, last);
    }
    if let Some(at) = full.find("claude-").filter(|&at| at > 0) {
        push_unique(&mut out, &full[at..]);
    }
    if strip_fine_tune {
        let stripped: Vec<String> = out
            .iter()
            .filter_map(|name| name.strip_prefix("ft:").map(str::to_owned))
            .collect();
        for name in stripped {
            push_unique(&mut out, &name);
        }
    }
    out
}

fn push_unique(names: &mut Vec<String>, name: &str) {
    if !name.is_empty() && !names.iter().any(|n| n == name) {
        names.push(name.to_owned());
    }
}

/// The entry whose prefix is the longest one that any candidate spelling starts with.
pub(crate) fn longest_prefix<'a, T>(
    entries: &'a [T],
    prefix_of: impl Fn(&T) -> &str,
    candidates: &[String],
) -> Option<&'a T> {
    entries
        .iter()
        .filter(|entry| {
            let prefix = prefix_of(entry);
            !prefix.is_empty() && candidates.iter().any(|c| c.starts_with(prefix))
        })
        .max_by_key(|entry| prefix_of(entry).len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn candidates_cover_router_bedrock_and_fine_tune_spellings() {
        assert_eq!(
            name_candidates(" OpenRouter/Anthropic/Claude-Sonnet-4-5 ", false),
            vec![
                "openrouter/anthropic/claude-sonnet-4-5".to_owned(),
                "claude-sonnet-4-5".to_owned(),
            ]
        );
        assert_eq!(
            name_candidates("us.anthropic.claude-opus-4-1-v1:0", false),
            vec![
                "us.anthropic.claude-opus-4-1-v1:0".to_owned(),
                "claude-opus-4-1-v1:0".to_owned(),
            ]
        );
        assert_eq!(
            name_candidates("ft:gpt-4o-mini:acme::x1", true),
            vec![
                "ft:gpt-4o-mini:acme::x1".to_owned(),
                "gpt-4o-mini:acme::x1".to_owned(),
            ]
        );
    }

    #[test]
    fn longest_prefix_prefers_the_most_specific_entry() {
        let entries = ["gpt-4", "gpt-4o", "gpt-4o-mini", ""];
        let found = longest_prefix(&entries, |e| e, &name_candidates("gpt-4o-mini-2024", false));
        assert_eq!(found, Some(&"gpt-4o-mini"));
        let none = longest_prefix(&entries, |e| e, &name_candidates("llama3", false));
        assert_eq!(none, None);
    }
}
