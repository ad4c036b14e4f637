//! Token counting with tiktoken's BPEs, exact for OpenAI models and an estimate for the rest.
//!
//! OpenAI publishes its tokenizers, so for its models the count is the one the API bills.
//! Anthropic, Google, DeepSeek and the local model families use tokenizers of their own that we
//! do not ship; for them o200k_base is a close enough stand-in (its 200K vocabulary splits text
//! much like theirs) and every count says it is an estimate. The budget then scales estimates by
//! a factor learned from the providers' reported usage (see `budget::CorrectionTable`).

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::ops::{Add, AddAssign};
use std::sync::{Mutex, OnceLock};
use std::thread::JoinHandle;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tiktoken_rs::CoreBPE;

use super::pieces::{Pattern, PieceCounter};
use crate::low_priority::Ahead;
use crate::util::lock;

/// Framing tokens OpenAI's chat format spends on every message (`<|start|>{role}<|message|>` …
/// `<|end|>`), as in OpenAI's cookbook and tiktoken-rs's `num_tokens_from_messages`. Other
/// providers frame messages too, with similar costs, so the same figure is used for them.
pub const TOKENS_PER_MESSAGE: u64 = 3;

/// Tokens that prime the reply (`<|start|>assistant<|message|>`), spent once per request.
pub const REPLY_PRIMING_TOKENS: u64 = 3;

/// Extra framing per tool call in an assistant message, as tiktoken-rs counts it.
pub const TOOL_CALL_OVERHEAD_TOKENS: u64 = 1;

/// Bytes per token assumed if a BPE could not be built (it is compiled in, so this should not
/// happen); about right for English prose and code.
const FALLBACK_BYTES_PER_TOKEN: u64 = 4;

/// The BPE a count uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Encoding {
    /// GPT-4o, GPT-4.1, GPT-4.5, GPT-5 and later, the o-series; the stand-in for other vendors.
    O200kBase,
    /// GPT-4 and GPT-3.5.
    Cl100kBase,
}

/// A token count, and whether it is what the provider will bill (`exact`) or an estimate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Counted {
    pub tokens: u64,
    pub exact: bool,
}

impl Counted {
    /// Nothing, exactly: the neutral element of `+`.
    pub const ZERO: Counted = Counted {
        tokens: 0,
        exact: true,
    };

    pub fn exact(tokens: u64) -> Self {
        Counted {
            tokens,
            exact: true,
        }
    }

    pub fn estimated(tokens: u64) -> Self {
        Counted {
            tokens,
            exact: false,
        }
    }
}

impl Default for Counted {
    fn default() -> Self {
        Counted::ZERO
    }
}

impl Add for Counted {
    type Output = Counted;

    /// A sum is exact only if every part of it is.
    fn add(self, other: Counted) -> Counted {
        Counted {
            tokens: self.tokens.saturating_add(other.tokens),
            exact: self.exact && other.exact,
        }
    }
}

impl AddAssign for Counted {
    fn add_assign(&mut self, other: Counted) {
        *self = *self + other;
    }
}

/// One part of a message, as far as counting is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part<'a> {
    /// Text, thinking, or a tool result's output.
    Text(&'a str),
    /// A tool call: its name and its arguments serialised as JSON.
    ToolCall { name: &'a str, arguments: &'a str },
    /// Text counted before, e.g. while it streamed in ([`super::StreamingCount`]).
    Counted(Counted),
}

#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("could not start the tokenizer warm-up thread: {0}")]
    Spawn(#[from] std::io::Error),
}

/// Test-only: how the daemon's tokenizer behaves, so a test can see either side of the first
/// request deterministically. `wait`: counts always wait for the tables, never count by bytes
/// (the daemon as it was before upper bounds; what tests of exact figures need). `gate:<path>`:
/// the tables are not built before the file `path` exists, so a request is counted by bytes
/// until the test creates it. Unset (every real use): neither. Logged when set.
pub const TOKENIZER_VAR: &str = "SIDECHAT_TEST_TOKENIZER";

/// What [`TOKENIZER_VAR`] says.
#[derive(Debug, Clone, PartialEq, Eq)]
enum TestMode {
    Off,
    Wait,
    Gate(std::path::PathBuf),
}

fn test_mode() -> &'static TestMode {
    static MODE: OnceLock<TestMode> = OnceLock::new();
    MODE.get_or_init(|| {
        let Some(value) = std::env::var(TOKENIZER_VAR).ok().filter(|v| !v.is_empty()) else {
            return TestMode::Off;
        };
        let mode = parse_test_mode(&value);
        tracing::info!(?mode, "{TOKENIZER_VAR} is set (tests only)");
        mode
    })
}

fn parse_test_mode(value: &str) -> TestMode {
    match value.strip_prefix("gate:") {
        Some(path) => TestMode::Gate(path.into()),
        None if value == "wait" => TestMode::Wait,
        None => {
            tracing::warn!(
                value,
                "{TOKENIZER_VAR} must be `wait` or `gate:<path>`; ignored"
            );
            TestMode::Off
        }
    }
}

thread_local! {
    /// Inside [`upper_bounds`]: whether a count there was a byte bound. `None` outside.
    static BOUNDED: std::cell::Cell<Option<bool>> = const { std::cell::Cell::new(None) };
}

/// Runs `work` counting each text, for an encoding whose tables are not built yet, as its UTF-8
/// byte size instead of waiting for them: every token is at least one byte, so such a count is
/// an upper bound of the exact one. Returns whether any count in `work` was such a bound (then
/// the figures are upper bounds, and exact ones follow once the tables are built). Counts made
/// once the tables are built are exact, as outside.
pub fn upper_bounds<R>(work: impl FnOnce() -> R) -> (R, bool) {
    if *test_mode() == TestMode::Wait {
        return (work(), false);
    }
    scoped(Some(false), work)
}

/// Whether a count in `work` was an upper bound (only ever inside [`upper_bounds`]); for what
/// must not keep a bound as if it were a count (a cache, a stored count).
pub fn tracking_bounds<R>(work: impl FnOnce() -> R) -> (R, bool) {
    match BOUNDED.with(|b| b.get()) {
        None => (work(), false),
        Some(_) => scoped(Some(false), work),
    }
}

/// Runs `work` with [`BOUNDED`] set to `state`, then restores it (a bound found inside is
/// found by the enclosing scope too); whether a bound was found inside.
fn scoped<R>(state: Option<bool>, work: impl FnOnce() -> R) -> (R, bool) {
    struct Restore(Option<bool>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let outer = self.0;
            BOUNDED.with(|b| {
                let inner = b.get() == Some(true);
                b.set(outer.map(|found| found || inner));
            });
        }
    }
    let restore = Restore(BOUNDED.with(|b| b.replace(state)));
    let result = work();
    let found = BOUNDED.with(|b| b.get()) == Some(true);
    drop(restore);
    (result, found)
}

/// The byte size of `text` as its count, when inside [`upper_bounds`] the tables for
/// `encoding` are not built yet; noted as a bound.
fn byte_bound(encoding: Encoding, text: &str) -> Option<u64> {
    let bounding = BOUNDED.with(|b| b.get()).is_some();
    if !bounding || Tokenizers::is_built(encoding) {
        return None;
    }
    BOUNDED.with(|b| b.set(Some(true)));
    Some(text.len() as u64)
}

static O200K: Ahead<Option<CoreBPE>> = Ahead::new("the o200k tables");
static CL100K: Ahead<Option<CoreBPE>> = Ahead::new("the cl100k tables");
static O200K_PIECES: Ahead<Option<PieceCounter>> = Ahead::new("the o200k piece counter");
static CL100K_PIECES: Ahead<Option<PieceCounter>> = Ahead::new("the cl100k piece counter");

/// The process-wide BPEs, built on first use.
///
/// Building one parses a 200K-entry vocabulary and takes a noticeable fraction of a second,
/// which should not land on the first keystroke's budget update: call
/// [`Tokenizers::warm_in_background`] at startup. That thread runs at lowered priority, so a
/// count that arrives before it is done does not wait for it but builds the tables itself
/// (see [`crate::low_priority`]); work that can as well be done later waits for it
/// ([`Tokenizers::wait_for_warm_up`]).
pub struct Tokenizers;

impl Tokenizers {
    /// Starts a thread that builds o200k, the BPE of every current OpenAI model and of the
    /// estimates for all others. cl100k (gpt-4, gpt-3.5) is built on first use instead: each
    /// BPE holds tens of MiB, and most sessions never need the older one. Joining is optional.
    pub fn warm_in_background() -> Result<JoinHandle<()>, TokenizerError> {
        Ok(O200K_PIECES.spawn_ahead("tokenizer-warm-up", || build_counter(Encoding::O200kBase))?)
    }

    /// Whether o200k is built, so counting for current models will not wait.
    pub fn is_warm() -> bool {
        Self::is_built(Encoding::O200kBase)
    }

    /// Whether counting with `encoding` will not wait for its tables.
    pub fn is_built(encoding: Encoding) -> bool {
        pieces_cell(encoding).get().is_some()
    }

    /// Blocks while the warm-up thread is building the tables for `encoding`: for counting
    /// that is as good later (it then does not build them a second time beside that thread).
    pub fn wait_for_warm_up(encoding: Encoding) {
        pieces_cell(encoding).wait_for_lowered();
    }

    /// The BPE for `encoding`, building it if needed; `None` only if it could not be built.
    fn bpe(encoding: Encoding) -> Option<&'static CoreBPE> {
        let cell = match encoding {
            Encoding::O200kBase => &O200K,
            Encoding::Cl100kBase => &CL100K,
        };
        cell.get_or_build(|| build_bpe(encoding)).as_ref()
    }

    /// The fast counter over the BPE for `encoding` (see [`super::pieces`]), building both if
    /// needed; `None` only if either could not be built.
    fn counter(encoding: Encoding) -> Option<&'static PieceCounter> {
        let cell = pieces_cell(encoding);
        if let Some(built) = cell.get() {
            return built.as_ref();
        }
        // Building takes a fraction of a second: not on an async worker, whose other sessions
        // would stall meanwhile.
        crate::util::off_worker(|| cell.get_or_build(|| build_counter(encoding))).as_ref()
    }
}

fn pieces_cell(encoding: Encoding) -> &'static Ahead<Option<PieceCounter>> {
    match encoding {
        Encoding::O200kBase => &O200K_PIECES,
        Encoding::Cl100kBase => &CL100K_PIECES,
    }
}

fn build_counter(encoding: Encoding) -> Option<PieceCounter> {
    let pattern = match encoding {
        Encoding::O200kBase => Pattern::O200k,
        Encoding::Cl100kBase => Pattern::Cl100k,
    };
    let bpe = Tokenizers::bpe(encoding)?;
    PieceCounter::new(bpe, pattern)
        .map_err(|e| tracing::error!(?encoding, "{e}; counting with tiktoken-rs alone"))
        .ok()
}

fn build_bpe(encoding: Encoding) -> Option<CoreBPE> {
    if let TestMode::Gate(path) = test_mode() {
        while !path.exists() {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
    let built = match encoding {
        Encoding::O200kBase => tiktoken_rs::o200k_base(),
        Encoding::Cl100kBase => tiktoken_rs::cl100k_base(),
    };
    built
        .map_err(|e| {
            tracing::error!(
                ?encoding,
                "cannot build tokenizer, estimating instead: {e:#}"
            )
        })
        .ok()
}

/// How to count for one model: which BPE, and whether its counts are the provider's own.
/// Cheap to copy; make one per model with [`TokenCounter::for_model`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TokenCounter {
    encoding: Encoding,
    exact: bool,
}

impl TokenCounter {
    /// The counter for a model name, decorated or not (`openai/gpt-4o`, `ft:gpt-4.1-…`).
    ///
    /// OpenAI names that we do not know yet (a future `gpt-7`, `o5`) get o200k_base and count
    /// as exact: OpenAI has kept o200k_base for every model since GPT-4o.
    pub fn for_model(model: &str) -> Self {
        let openai = super::name_candidates(model, true)
            .iter()
            .find_map(|name| openai_encoding(name));
        match openai {
            Some(encoding) => TokenCounter {
                encoding,
                exact: true,
            },
            None => TokenCounter {
                encoding: Encoding::O200kBase,
                exact: false,
            },
        }
    }

    pub fn encoding(&self) -> Encoding {
        self.encoding
    }

    /// Whether counts are the model's own tokenizer's (false: o200k_base as an estimate).
    pub fn is_exact(&self) -> bool {
        self.exact
    }

    /// Tokens of a piece of text.
    pub fn count_text(&self, text: &str) -> Counted {
        Counted {
            tokens: self.raw_count(text),
            exact: self.exact,
        }
    }

    /// Tokens of one message as the model sees it: framing, role and parts.
    ///
    /// For an OpenAI model this equals what tiktoken-rs's `num_tokens_from_messages` gives for
    /// the message, less the once-per-request [`REPLY_PRIMING_TOKENS`]; store this per message
    /// and let the budget add the priming.
    pub fn count_message(&self, role: &str, parts: &[Part<'_>]) -> Counted {
        let framing = Counted {
            tokens: TOKENS_PER_MESSAGE + self.raw_count(role),
            exact: self.exact,
        };
        parts
            .iter()
            .fold(framing, |sum, part| sum + self.count_part(part))
    }

    fn count_part(&self, part: &Part<'_>) -> Counted {
        match *part {
            Part::Text(text) => self.count_text(text),
            Part::ToolCall { name, arguments } => Counted {
                tokens: self.raw_count(name)
                    + self.raw_count(arguments)
                    + TOOL_CALL_OVERHEAD_TOKENS,
                exact: self.exact,
            },
            Part::Counted(counted) => counted,
        }
    }

    fn raw_count(&self, text: &str) -> u64 {
        if text.is_empty() {
            return 0;
        }
        if let Some(bound) = byte_bound(self.encoding, text) {
            return bound;
        }
        // With special tokens, as tiktoken-rs's chat counting does, so counts agree with it.
        if let Some(counter) = Tokenizers::counter(self.encoding) {
            return counter.count(text);
        }
        match Tokenizers::bpe(self.encoding) {
            Some(bpe) => bpe.encode_with_special_tokens(text).len() as u64,
            None => (text.len() as u64).div_ceil(FALLBACK_BYTES_PER_TOKEN),
        }
    }
}

/// The BPE of an OpenAI model name, or `None` if the name is not OpenAI's.
fn openai_encoding(name: &str) -> Option<Encoding> {
    const O200K_BEFORE_GPT4: [&str; 4] = ["gpt-4o", "gpt-4.1", "gpt-4.5", "chatgpt-4o"];
    const CL100K: [&str; 3] = ["gpt-4", "gpt-3.5", "gpt-35"];
    if O200K_BEFORE_GPT4.iter().any(|p| name.starts_with(p)) {
        return Some(Encoding::O200kBase);
    }
    if CL100K.iter().any(|p| name.starts_with(p)) {
        return Some(Encoding::Cl100kBase);
    }
    is_openai_name(name).then_some(Encoding::O200kBase)
}

/// `gpt-…`, `chatgpt-…`, `codex-…` and the o-series (`o1`, `o3-mini`, a future `o5`).
///
/// gpt-oss is excluded: it is an open-weights model served by local runtimes with their own
/// chat templates, so its counts are estimates even though its vocabulary is o200k's.
fn is_openai_name(name: &str) -> bool {
    let o_series = matches!(name.as_bytes(), [b'o', digit, ..] if digit.is_ascii_digit());
    let gpt = name.starts_with("gpt-") && !name.starts_with("gpt-oss");
    gpt || o_series || name.starts_with("chatgpt") || name.starts_with("codex")
}

/// Most entries [`CountCache`] keeps before it starts over.
const COUNT_CACHE_CAPACITY: usize = 256;

/// Counts of the system prompt and the tool definitions, by content hash.
///
/// Both are resent with every request and rarely change, yet are often the largest texts in
/// a short session (tool schemas run to thousands of tokens), so they are counted once per
/// distinct content. Keys hash the kind, the encoding and the text with std's `DefaultHasher`,
/// which is stable within a process; nothing is persisted. Shared behind `&self` so one cache
/// can serve every session.
#[derive(Debug)]
pub struct CountCache {
    entries: Mutex<HashMap<u64, Counted>>,
    capacity: usize,
}

impl Default for CountCache {
    fn default() -> Self {
        Self::new()
    }
}

#[derive(Hash)]
enum CachedKind {
    SystemPrompt,
    ToolDefinitions,
    Instructions,
}

impl CountCache {
    pub fn new() -> Self {
        Self::with_capacity(COUNT_CACHE_CAPACITY)
    }

    /// A cache that forgets everything when it would hold more than `capacity` entries: prompts
    /// and tool sets are few, so a full cache means churn, and starting over is the simplest
    /// bound.
    pub fn with_capacity(capacity: usize) -> Self {
        CountCache {
            entries: Mutex::new(HashMap::new()),
            capacity: capacity.max(1),
        }
    }

    /// The system prompt counted as a `system` message (framing included).
    pub fn system_prompt(&self, counter: TokenCounter, prompt: &str) -> Counted {
        self.get_or_count(CachedKind::SystemPrompt, counter, prompt, || {
            counter.count_message("system", &[Part::Text(prompt)])
        })
    }

    /// Tool definitions, given as the JSON text sent to the provider.
    ///
    /// Always an estimate: providers render definitions into a format of their own (OpenAI's is
    /// TypeScript-like and terser than JSON) and add a preamble we cannot see.
    pub fn tool_definitions(&self, counter: TokenCounter, definitions_json: &str) -> Counted {
        self.get_or_count(
            CachedKind::ToolDefinitions,
            counter,
            definitions_json,
            || Counted::estimated(counter.count_text(definitions_json).tokens),
        )
    }

    /// Project instructions: text appended to the system message, so no framing of their own.
    pub fn instructions(&self, counter: TokenCounter, text: &str) -> Counted {
        self.get_or_count(CachedKind::Instructions, counter, text, || {
            counter.count_text(text)
        })
    }

    /// Number of cached counts.
    pub fn len(&self) -> usize {
        lock(&self.entries).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn get_or_count(
        &self,
        kind: CachedKind,
        counter: TokenCounter,
        text: &str,
        count: impl FnOnce() -> Counted,
    ) -> Counted {
        let key = cache_key(&kind, counter, text);
        if let Some(hit) = lock(&self.entries).get(&key) {
            return *hit;
        }
        // Counted without the lock held: a long prompt must not stall other sessions.
        let (counted, bounded) = tracking_bounds(count);
        if bounded {
            // An upper bound is no count to keep: the next look counts again.
            return counted;
        }
        let mut entries = lock(&self.entries);
        if entries.len() >= self.capacity {
            entries.clear();
        }
        entries.insert(key, counted);
        counted
    }
}

fn cache_key(kind: &CachedKind, counter: TokenCounter, text: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    kind.hash(&mut hasher);
    counter.hash(&mut hasher);
    text.hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use tiktoken_rs::{ChatCompletionRequestMessage, FunctionCall, num_tokens_from_messages};

    const SAMPLES: [&str; 5] = [
        "Hello, world!",
        "fn main() {\n    println!(\"héllo {}\", 42);\n}\n",
        "Ünïcödé text — with dashes, emoji 🦀 and 中文字符.",
        "   leading spaces and\ttabs\n\n\nand blank lines   ",
        "<|endoftext|> is a special token string",
    ];

    fn tiktoken_message(role: &str, content: &str) -> ChatCompletionRequestMessage {
        ChatCompletionRequestMessage {
            role: role.to_owned(),
            content: Some(content.to_owned()),
            ..Default::default()
        }
    }

    #[test]
    fn models_get_the_right_encoding_and_exactness() {
        let cases = [
            ("gpt-4o", Encoding::O200kBase, true),
            ("gpt-4o-mini-2024-07-18", Encoding::O200kBase, true),
            ("gpt-4.1-nano", Encoding::O200kBase, true),
            ("gpt-5.4-pro", Encoding::O200kBase, true),
            ("o3-mini", Encoding::O200kBase, true),
            ("o1", Encoding::O200kBase, true),
            ("gpt-7-preview", Encoding::O200kBase, true),
            ("openai/gpt-4o", Encoding::O200kBase, true),
            ("ft:gpt-4o-mini:acme::abc", Encoding::O200kBase, true),
            ("gpt-4", Encoding::Cl100kBase, true),
            ("gpt-4-turbo", Encoding::Cl100kBase, true),
            ("gpt-3.5-turbo-0125", Encoding::Cl100kBase, true),
            ("GPT-35-Turbo", Encoding::Cl100kBase, true),
            ("claude-sonnet-4-5", Encoding::O200kBase, false),
            ("gemini-2.5-pro", Encoding::O200kBase, false),
            ("deepseek-chat", Encoding::O200kBase, false),
            ("llama3.1:8b", Encoding::O200kBase, false),
            ("qwen3:32b", Encoding::O200kBase, false),
            ("gpt-oss:20b", Encoding::O200kBase, false),
            ("omni-moderation", Encoding::O200kBase, false),
        ];
        let got: Vec<_> = cases
            .iter()
            .map(|(model, _, _)| {
                let counter = TokenCounter::for_model(model);
                (*model, counter.encoding(), counter.is_exact())
            })
            .collect();
        assert_eq!(got, cases.to_vec());
    }

    #[test]
    fn text_counts_equal_tiktokens_own() {
        for (model, bpe) in [
            ("gpt-4o", tiktoken_rs::o200k_base_singleton()),
            ("gpt-4", tiktoken_rs::cl100k_base_singleton()),
        ] {
            let counter = TokenCounter::for_model(model);
            let ours: Vec<Counted> = SAMPLES.iter().map(|s| counter.count_text(s)).collect();
            let theirs: Vec<Counted> = SAMPLES
                .iter()
                .map(|s| Counted::exact(bpe.encode_with_special_tokens(s).len() as u64))
                .collect();
            assert_eq!(ours, theirs, "{model}");
        }
    }

    #[test]
    fn message_counts_equal_tiktokens_chat_count() {
        for model in [
            "gpt-4o",
            "gpt-4.1-mini",
            "gpt-5",
            "o3",
            "gpt-4",
            "gpt-3.5-turbo",
        ] {
            let counter = TokenCounter::for_model(model);
            let roles = ["system", "user", "assistant", "user", "assistant"];
            let ours = roles
                .iter()
                .zip(SAMPLES)
                .fold(Counted::ZERO, |sum, (role, text)| {
                    sum + counter.count_message(role, &[Part::Text(text)])
                });
            let messages: Vec<_> = roles
                .iter()
                .zip(SAMPLES)
                .map(|(role, text)| tiktoken_message(role, text))
                .collect();
            let theirs = num_tokens_from_messages(model, &messages).map(|n| n as u64);
            assert_eq!(
                Ok(ours.tokens + REPLY_PRIMING_TOKENS),
                theirs.map_err(|e| e.to_string()),
                "{model}"
            );
            assert!(ours.exact, "{model}");
        }
    }

    #[test]
    fn tool_calls_count_like_tiktoken() {
        let counter = TokenCounter::for_model("gpt-4o");
        let arguments = r#"{"path":"src/main.rs","start":1}"#;
        let ours = counter.count_message(
            "assistant",
            &[Part::ToolCall {
                name: "read_file",
                arguments,
            }],
        );
        let message = ChatCompletionRequestMessage {
            role: "assistant".to_owned(),
            function_call: Some(FunctionCall {
                name: "read_file".to_owned(),
                arguments: arguments.to_owned(),
            }),
            ..Default::default()
        };
        let theirs = num_tokens_from_messages("gpt-4o", &[message]).map_err(|e| e.to_string());
        assert_eq!(
            Ok(ours.tokens + REPLY_PRIMING_TOKENS),
            theirs.map(|n| n as u64)
        );
    }

    #[test]
    fn other_vendors_are_counted_with_o200k_and_labelled_estimated() {
        let claude = TokenCounter::for_model("anthropic/claude-opus-4-6");
        let gpt = TokenCounter::for_model("gpt-4o");
        let text = SAMPLES[1];
        assert_eq!(
            claude.count_text(text),
            Counted::estimated(gpt.count_text(text).tokens)
        );
    }

    #[test]
    fn empty_text_is_zero_tokens() {
        let counter = TokenCounter::for_model("gpt-4o");
        assert_eq!(counter.count_text(""), Counted::exact(0));
        assert_eq!(
            counter.count_message("user", &[]),
            Counted::exact(TOKENS_PER_MESSAGE + 1)
        );
    }

    #[test]
    fn counting_before_the_warm_up_finishes_waits_for_it() {
        let handle = Tokenizers::warm_in_background();
        // Counting at once must neither panic nor build a second BPE; it waits for the first.
        let counted = TokenCounter::for_model("gpt-4").count_text("hello world");
        assert_eq!(counted, Counted::exact(2));
        assert!(handle.map(|h| h.join().is_ok()).unwrap_or(false));
        assert!(Tokenizers::is_warm());
    }

    #[test]
    fn cache_counts_each_content_once_per_encoding() {
        let cache = CountCache::new();
        let gpt = TokenCounter::for_model("gpt-4o");
        let old = TokenCounter::for_model("gpt-4");
        let prompt = "You are a careful coding assistant.";
        let first = cache.system_prompt(gpt, prompt);
        let again = cache.system_prompt(gpt, prompt);
        assert_eq!(first, gpt.count_message("system", &[Part::Text(prompt)]));
        assert_eq!(again, first);
        assert_eq!(cache.len(), 1);

        cache.system_prompt(old, prompt);
        let tools = r#"[{"name":"read_file","parameters":{"type":"object"}}]"#;
        let counted_tools = cache.tool_definitions(gpt, tools);
        assert_eq!(
            counted_tools,
            Counted::estimated(gpt.count_text(tools).tokens)
        );
        assert_eq!(cache.len(), 3);
    }

    #[test]
    fn a_full_cache_starts_over() {
        let cache = CountCache::with_capacity(2);
        let gpt = TokenCounter::for_model("gpt-4o");
        cache.system_prompt(gpt, "a");
        cache.system_prompt(gpt, "b");
        cache.system_prompt(gpt, "c");
        assert_eq!(cache.len(), 1);
    }
}
