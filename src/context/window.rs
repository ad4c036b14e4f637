//! How much a model can take: its context window and its largest reply, by model family.
//!
//! The table (`data/context_windows.json`) is keyed by name prefix so that dated snapshots,
//! size tags and router decorations (`claude-sonnet-4-5-20250929`, `llama3.1:8b`,
//! `anthropic/claude-…`) find their family without listing every name. A per-account override
//! beats the table, because local servers in particular run models with a smaller window than
//! the model supports (Ollama's `num_ctx`), and only the user knows.

use std::sync::OnceLock;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Window assumed for a model the table does not know: what most current chat models take.
pub const DEFAULT_CONTEXT_WINDOW: u64 = 128_000;

/// Largest reply assumed for a model the table does not know: enough not to cut the default
/// response reserve, small enough for any current model to accept.
pub const DEFAULT_MAX_OUTPUT: u64 = 8_192;

const BUILTIN_JSON: &str = include_str!("../../data/context_windows.json");

#[derive(Debug, thiserror::Error)]
pub enum WindowError {
    #[error("context window table is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("context window entry {prefix:?}: {problem}")]
    Entry {
        prefix: String,
        problem: &'static str,
    },
}

/// Where a [`ModelWindow`] came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum WindowSource {
    /// The account's configured window.
    Override,
    /// A family of the built-in table.
    Table,
    /// Nothing matched: [`DEFAULT_CONTEXT_WINDOW`].
    Default,
}

/// The limits to plan a request against.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelWindow {
    /// Most tokens the prompt may hold. For providers that also count the reply against it
    /// (most do) the budget subtracts a response reserve.
    pub context_window: u64,
    /// Most tokens one reply may have.
    pub max_output: u64,
    pub source: WindowSource,
    /// The table family that matched (e.g. `claude`, `llama`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family: Option<String>,
}

/// One row of the table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FamilyEntry {
    /// Lower-case name prefix, e.g. `claude-sonnet-4-5` or `llama3.1`.
    pub prefix: String,
    pub family: String,
    pub context_window: u64,
    pub max_output: u64,
    /// Where the figure comes from when it is not models.json, or why it differs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// How the family takes a reasoning effort; absent when it takes none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<ReasoningStyle>,
}

/// How a model family is told how hard to think (`provider::effort` maps the levels).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ReasoningStyle {
    /// Anthropic's extended thinking: a budget of thinking tokens.
    Thinking,
    /// OpenAI's `reasoning_effort`: `low`, `medium`, `high`.
    Effort,
    /// `reasoning_effort` with `minimal` as well (the `gpt-5` models).
    EffortMinimal,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WindowFile {
    as_of: String,
    families: Vec<FamilyEntry>,
}

/// Model families with their windows, as of a date.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowTable {
    as_of: String,
    families: Vec<FamilyEntry>,
}

impl WindowTable {
    /// The table shipped in the binary, parsed once.
    ///
    /// A test guarantees it parses; should it not, every model gets the default window (and the
    /// error is logged) rather than the daemon refusing to start.
    pub fn builtin() -> &'static WindowTable {
        static TABLE: OnceLock<WindowTable> = OnceLock::new();
        TABLE.get_or_init(|| {
            WindowTable::from_json(BUILTIN_JSON).unwrap_or_else(|e| {
                tracing::error!("built-in context window table unusable: {e}");
                WindowTable {
                    as_of: String::new(),
                    families: Vec::new(),
                }
            })
        })
    }

    /// Parses a table in the format of `data/context_windows.json`.
    pub fn from_json(json: &str) -> Result<WindowTable, WindowError> {
        let file: WindowFile = serde_json::from_str(json)?;
        let families = file
            .families
            .into_iter()
            .map(validated)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(WindowTable {
            as_of: file.as_of,
            families,
        })
    }

    /// The date the figures are as of (`YYYY-MM-DD`).
    pub fn as_of(&self) -> &str {
        &self.as_of
    }

    pub fn families(&self) -> &[FamilyEntry] {
        &self.families
    }

    /// The window of `model` by longest prefix, or the default for an unknown model.
    pub fn lookup(&self, model: &str) -> ModelWindow {
        let candidates = super::name_candidates(model, true);
        match super::longest_prefix(&self.families, |f| f.prefix.as_str(), &candidates) {
            Some(entry) => ModelWindow {
                context_window: entry.context_window,
                max_output: entry.max_output,
                source: WindowSource::Table,
                family: Some(entry.family.clone()),
            },
            None => ModelWindow {
                context_window: DEFAULT_CONTEXT_WINDOW,
                max_output: DEFAULT_MAX_OUTPUT,
                source: WindowSource::Default,
                family: None,
            },
        }
    }

    /// How `model` takes a reasoning effort, by longest prefix; `None` for a family that takes
    /// none and for a model the table does not know.
    pub fn reasoning(&self, model: &str) -> Option<ReasoningStyle> {
        let candidates = super::name_candidates(model, true);
        super::longest_prefix(&self.families, |f| f.prefix.as_str(), &candidates)
            .and_then(|entry| entry.reasoning)
    }

    /// Like [`lookup`](Self::lookup), but an account's configured window wins whenever set.
    ///
    /// The override replaces the window only; the reply limit stays the family's, capped at the
    /// new window. A zero override is treated as unset: no model has an empty window, so it can
    /// only be a configuration default.
    pub fn resolve(&self, model: &str, account_override: Option<u64>) -> ModelWindow {
        let found = self.lookup(model);
        match account_override.filter(|&window| window > 0) {
            Some(window) => ModelWindow {
                context_window: window,
                max_output: found.max_output.min(window),
                source: WindowSource::Override,
                family: found.family,
            },
            None => found,
        }
    }
}

/// How `model` takes a reasoning effort, from the built-in table.
pub fn reasoning_style(model: &str) -> Option<ReasoningStyle> {
    WindowTable::builtin().reasoning(model)
}

/// The window of `model` from the built-in table, with the account's override if any.
pub fn model_window(model: &str, account_override: Option<u64>) -> ModelWindow {
    WindowTable::builtin().resolve(model, account_override)
}

fn validated(mut entry: FamilyEntry) -> Result<FamilyEntry, WindowError> {
    let problem = if entry.prefix.trim().is_empty() {
        Some("empty prefix")
    } else if entry.context_window == 0 {
        Some("zero context window")
    } else if entry.max_output == 0 {
        Some("zero max output")
    } else {
        None
    };
    if let Some(problem) = problem {
        return Err(WindowError::Entry {
            prefix: entry.prefix,
            problem,
        });
    }
    entry.prefix = entry.prefix.trim().to_ascii_lowercase();
    Ok(entry)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn table(window: u64, output: u64, family: &str) -> ModelWindow {
        ModelWindow {
            context_window: window,
            max_output: output,
            source: WindowSource::Table,
            family: Some(family.to_owned()),
        }
    }

    #[test]
    fn builtin_table_parses_with_a_date_and_unique_prefixes() {
        let parsed = WindowTable::from_json(BUILTIN_JSON).map_err(|e| e.to_string());
        assert!(parsed.is_ok(), "{parsed:?}");
        let builtin = WindowTable::builtin();
        assert_eq!(builtin.as_of(), "2026-11-29");
        let mut prefixes: Vec<&str> = builtin
            .families()
            .iter()
            .map(|f| f.prefix.as_str())
            .collect();
        let count = prefixes.len();
        prefixes.sort_unstable();
        prefixes.dedup();
        assert_eq!(prefixes.len(), count);
    }

    #[test]
    fn reasoning_styles_follow_the_families() {
        let cases = [
            ("claude-sonnet-4-5-20250929", Some(ReasoningStyle::Thinking)),
            ("claude-3-7-sonnet-latest", Some(ReasoningStyle::Thinking)),
            ("claude-3-5-haiku-latest", None),
            ("gpt-5-mini", Some(ReasoningStyle::EffortMinimal)),
            ("gpt-5.1", Some(ReasoningStyle::Effort)),
            ("gpt-5-chat-latest", None),
            ("o4-mini", Some(ReasoningStyle::Effort)),
            ("o1-mini", None),
            ("gpt-4o", None),
            ("openai/gpt-oss-120b", Some(ReasoningStyle::Effort)),
            ("llama3.1:8b", None),
            ("my-local-finetune", None),
        ];
        let found: Vec<_> = cases
            .iter()
            .map(|(model, _)| (*model, reasoning_style(model)))
            .collect();
        assert_eq!(found, cases.to_vec());
    }

    #[test]
    fn unknown_models_get_the_default_window() {
        let expected = ModelWindow {
            context_window: 128_000,
            max_output: 8_192,
            source: WindowSource::Default,
            family: None,
        };
        for model in ["my-local-finetune", "", "acme/grokky-9"] {
            assert_eq!(model_window(model, None), expected, "{model:?}");
        }
    }

    #[test]
    fn families_match_by_longest_prefix() {
        let cases = [
            (
                "claude-sonnet-4-5-20250929",
                table(200_000, 64_000, "claude"),
            ),
            ("claude-sonnet-4-6", table(1_000_000, 128_000, "claude")),
            ("claude-sonnet-4-20250514", table(200_000, 64_000, "claude")),
            ("claude-opus-4-1-20250805", table(200_000, 32_000, "claude")),
            ("claude-3-5-haiku-latest", table(200_000, 8_192, "claude")),
            ("gpt-5", table(272_000, 128_000, "gpt-5")),
            ("gpt-5.1-chat-latest", table(128_000, 16_384, "gpt-5")),
            ("gpt-5.4-2026-03-05", table(1_050_000, 128_000, "gpt-5")),
            ("gpt-4.1-mini", table(1_047_576, 32_768, "gpt-4.1")),
            ("gpt-4o-mini", table(128_000, 16_384, "gpt-4o")),
            ("gpt-4", table(8_192, 4_096, "gpt-4")),
            ("o1-mini", table(128_000, 65_536, "o-series")),
            ("o3-pro", table(200_000, 100_000, "o-series")),
            ("o4-mini-2025-04-16", table(200_000, 100_000, "o-series")),
            ("gemini-2.5-pro", table(1_048_576, 65_536, "gemini")),
            ("gemini-3.1-pro-preview", table(1_048_576, 65_536, "gemini")),
            ("deepseek-reasoner", table(131_072, 65_536, "deepseek")),
            ("deepseek-v4-pro", table(1_000_000, 393_216, "deepseek")),
        ];
        let got: Vec<_> = cases
            .iter()
            .map(|(m, _)| (*m, model_window(m, None)))
            .collect();
        assert_eq!(got, cases.to_vec());
    }

    #[test]
    fn provider_prefixes_and_case_do_not_matter() {
        let cases = [
            (
                "anthropic/claude-sonnet-4-5",
                table(200_000, 64_000, "claude"),
            ),
            (
                "OpenRouter/Anthropic/Claude-Opus-4-6",
                table(1_000_000, 128_000, "claude"),
            ),
            (
                "us.anthropic.claude-haiku-4-5-20251001-v1:0",
                table(200_000, 64_000, "claude"),
            ),
            ("openai/gpt-4o", table(128_000, 16_384, "gpt-4o")),
            (
                "ft:gpt-4o-mini-2024-07-18:acme::x1",
                table(128_000, 16_384, "gpt-4o"),
            ),
            (
                "gemini/gemini-2.5-flash",
                table(1_048_576, 65_536, "gemini"),
            ),
            ("deepseek/deepseek-chat", table(131_072, 8_192, "deepseek")),
        ];
        let got: Vec<_> = cases
            .iter()
            .map(|(m, _)| (*m, model_window(m, None)))
            .collect();
        assert_eq!(got, cases.to_vec());
    }

    #[test]
    fn ollama_tags_match_their_family() {
        let cases = [
            ("llama3.1:8b", table(131_072, 8_192, "llama")),
            ("llama3:70b", table(8_192, 8_192, "llama")),
            (
                "ollama/llama3.2:3b-instruct-q4_K_M",
                table(131_072, 8_192, "llama"),
            ),
            ("qwen2.5-coder:7b", table(32_768, 8_192, "qwen")),
            ("qwen3:30b-a3b", table(32_768, 8_192, "qwen")),
            ("qwen3-coder:480b-cloud", table(262_144, 65_536, "qwen")),
            ("mistral:7b", table(32_768, 8_192, "mistral")),
            ("mistral-nemo:12b", table(131_072, 8_192, "mistral")),
            ("gemma3:27b", table(131_072, 8_192, "gemma")),
            ("gemma3:1b", table(32_768, 8_192, "gemma")),
            ("gemma2:9b", table(8_192, 8_192, "gemma")),
            ("phi4:14b", table(16_384, 4_096, "phi")),
            ("phi3:mini-128k", table(131_072, 4_096, "phi")),
            ("phi3:3.8b", table(4_096, 4_096, "phi")),
            (
                "meta-llama/Llama-3.3-70B-Instruct",
                table(131_072, 8_192, "llama"),
            ),
            ("gpt-oss:20b", table(131_072, 131_072, "gpt-oss")),
        ];
        let got: Vec<_> = cases
            .iter()
            .map(|(m, _)| (*m, model_window(m, None)))
            .collect();
        assert_eq!(got, cases.to_vec());
    }

    #[test]
    fn an_account_override_always_wins() {
        assert_eq!(
            model_window("llama3.1:8b", Some(8_192)),
            ModelWindow {
                context_window: 8_192,
                max_output: 8_192,
                source: WindowSource::Override,
                family: Some("llama".to_owned()),
            }
        );
        assert_eq!(
            model_window("claude-opus-4-6", Some(200_000)),
            ModelWindow {
                context_window: 200_000,
                max_output: 128_000,
                source: WindowSource::Override,
                family: Some("claude".to_owned()),
            }
        );
        assert_eq!(
            model_window("something-unknown", Some(32_000)),
            ModelWindow {
                context_window: 32_000,
                max_output: 8_192,
                source: WindowSource::Override,
                family: None,
            }
        );
        assert_eq!(
            model_window("gpt-4o", Some(0)),
            model_window("gpt-4o", None),
            "a zero override is unset"
        );
    }

    #[test]
    fn bad_tables_are_rejected() {
        let zero = r#"{"asOf":"2026-01-01","families":[{"prefix":"x","family":"x","contextWindow":0,"maxOutput":1}]}"#;
        assert_eq!(
            WindowTable::from_json(zero).map_err(|e| e.to_string()),
            Err("context window entry \"x\": zero context window".to_owned())
        );
        assert!(WindowTable::from_json("{").is_err());
    }
}
