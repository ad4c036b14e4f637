//! The budget snapshot after appending one message to a 10,000-message session, beside
//! recounting the whole history with tiktoken-rs, in one run.
//!
//! The snapshot counts only the new message and adds it to the running tally; the recount is
//! what a naive implementation would do on every message. Prints both medians (per iteration,
//! over criterion's measured samples) and their ratio. Goal: median ≤ 1 ms and ≥ 100× faster.

use std::cell::RefCell;
use std::hint::black_box;
use std::rc::Rc;
use std::time::{Duration, Instant};

use criterion::Criterion;
use sidechat::context::{
    BudgetInput, CountCache, Counted, HistoryTally, Part, TokenCounter, Tokenizers, model_window,
};
use sidechat::protocol::BudgetSnapshot;

const MODEL: &str = "gpt-4o";
const SESSION_MESSAGES: usize = 10_000;
const SNAPSHOT_SAMPLES: usize = 100;
const RECOUNT_SAMPLES: usize = 10;

const WORDS: &[&str] = &[
    "the",
    "function",
    "returns",
    "a",
    "value",
    "when",
    "error",
    "should",
    "we",
    "handle",
    "configuration",
    "request",
    "session",
    "token",
    "budget",
    "model",
    "because",
    "file",
    "line",
    "test",
    "fails",
    "with",
    "timeout",
    "after",
    "retry",
    "cannot",
    "find",
    "module",
    "import",
    "please",
    "refactor",
    "this",
    "into",
    "smaller",
    "pieces",
    "and",
    "explain",
    "why",
    "it",
    "compiles",
    "on",
    "my",
    "machine",
    "but",
    "not",
    "in",
    "CI",
    "struct",
    "trait",
    "async",
];

const CODE: &str = "fn parse(input: &str) -> Result<Config, Error> {\n    let value: toml::Value = \
                    input.parse()?;\n    Ok(Config { name: value[\"name\"].to_string(), retries: 3 })\n}\n";

const SYSTEM_PROMPT: &str = "You are a careful coding assistant working inside the user's \
                             editor. Prefer small, reviewable changes. Explain what you change \
                             and why. Ask before running commands.";

const TOOLS_JSON: &str = r#"[{"name":"read_file","description":"Read a file of the workspace","parameters":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}},{"name":"write_file","description":"Write a file of the workspace","parameters":{"type":"object","properties":{"path":{"type":"string"},"content":{"type":"string"}},"required":["path","content"]}},{"name":"run","description":"Run a command in the workspace","parameters":{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}}]"#;

/// A deterministic transcript: user questions, assistant answers with code, tool output.
struct Session {
    messages: Vec<(&'static str, String)>,
    new_message: String,
}

impl Session {
    fn build(count: usize) -> Session {
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let messages = (0..count)
            .map(|i| {
                let role = ["user", "assistant", "tool"][i % 3];
                let words = if role == "user" { 40 } else { 120 };
                let mut text = sentence(&mut seed, words);
                if role != "user" {
                    text.push_str(CODE);
                }
                (role, text)
            })
            .collect();
        Session {
            messages,
            new_message: sentence(&mut seed, 60),
        }
    }
}

fn sentence(seed: &mut u64, words: usize) -> String {
    let mut out = String::new();
    for _ in 0..words {
        *seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        out.push_str(WORDS[(*seed >> 33) as usize % WORDS.len()]);
        out.push(' ');
    }
    out
}

fn count_message(counter: TokenCounter, role: &str, text: &str) -> Counted {
    counter.count_message(role, &[Part::Text(text)])
}

/// What the runtime does when a message is appended: count it, add it, take a snapshot.
fn snapshot_after_append(
    base: &BudgetInput,
    tally: &mut HistoryTally,
    cache: &CountCache,
    counter: TokenCounter,
    text: &str,
) -> BudgetSnapshot {
    let latest = count_message(counter, "user", text);
    let mut input = *base;
    input.system = cache.system_prompt(counter, SYSTEM_PROMPT);
    input.tools = cache.tool_definitions(counter, TOOLS_JSON);
    input.history = *tally;
    input.latest_user = latest;
    let snapshot = input.snapshot();
    tally.add(latest);
    snapshot
}

/// The naive alternative: count every stored message again.
fn snapshot_by_recount(
    base: &BudgetInput,
    session: &Session,
    cache: &CountCache,
    counter: TokenCounter,
) -> BudgetSnapshot {
    let history: HistoryTally = session
        .messages
        .iter()
        .map(|(role, text)| count_message(counter, role, text))
        .collect();
    let mut input = *base;
    input.system = cache.system_prompt(counter, SYSTEM_PROMPT);
    input.tools = cache.tool_definitions(counter, TOOLS_JSON);
    input.history = history;
    input.latest_user = count_message(counter, "user", &session.new_message);
    input.snapshot()
}

/// Per-iteration times of every call criterion made; the last `samples` are its measurements
/// (earlier ones are warm-up).
type Recorded = Rc<RefCell<Vec<Duration>>>;

fn timed(recorded: &Recorded, iters: u64, mut routine: impl FnMut()) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        routine();
    }
    let elapsed = start.elapsed();
    let per_iter = elapsed / u32::try_from(iters.max(1)).unwrap_or(u32::MAX);
    recorded.borrow_mut().push(per_iter);
    elapsed
}

fn median_of_last(recorded: &Recorded, samples: usize) -> Option<Duration> {
    let all = recorded.borrow();
    let mut last: Vec<Duration> = all.iter().rev().take(samples).copied().collect();
    if last.is_empty() {
        return None;
    }
    last.sort_unstable();
    let mid = last.len() / 2;
    Some(if last.len().is_multiple_of(2) {
        (last[mid - 1] + last[mid]) / 2
    } else {
        last[mid]
    })
}

fn main() {
    if let Ok(warm) = Tokenizers::warm_in_background() {
        let _ = warm.join();
    }
    let counter = TokenCounter::for_model(MODEL);
    let session = Session::build(SESSION_MESSAGES);
    let cache = CountCache::new();
    let base = BudgetInput::new(&model_window(MODEL, None), counter);
    let stored: HistoryTally = session
        .messages
        .iter()
        .map(|(role, text)| count_message(counter, role, text))
        .collect();
    println!(
        "session: {} messages, {} tokens stored",
        stored.messages(),
        stored.tokens()
    );

    let fast: Recorded = Rc::default();
    let slow: Recorded = Rc::default();
    let mut criterion = Criterion::default().configure_from_args();
    let mut group = criterion.benchmark_group("budget");
    group.sample_size(SNAPSHOT_SAMPLES);
    group.bench_function("snapshot_after_append_10k", |b| {
        let mut tally = stored;
        b.iter_custom(|iters| {
            timed(&fast, iters, || {
                black_box(snapshot_after_append(
                    &base,
                    &mut tally,
                    &cache,
                    counter,
                    black_box(&session.new_message),
                ));
            })
        })
    });
    group
        .sample_size(RECOUNT_SAMPLES)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(20))
        .sampling_mode(criterion::SamplingMode::Flat);
    group.bench_function("recount_history_10k", |b| {
        b.iter_custom(|iters| {
            timed(&slow, iters, || {
                black_box(snapshot_by_recount(
                    &base,
                    black_box(&session),
                    &cache,
                    counter,
                ));
            })
        })
    });
    group.finish();
    criterion.final_summary();
    report(
        median_of_last(&fast, SNAPSHOT_SAMPLES),
        median_of_last(&slow, RECOUNT_SAMPLES),
    );
}

fn report(fast: Option<Duration>, slow: Option<Duration>) {
    let (Some(fast), Some(slow)) = (fast, slow) else {
        println!("budget: both benchmarks must run to compare them");
        return;
    };
    let ratio = slow.as_secs_f64() / fast.as_secs_f64().max(f64::MIN_POSITIVE);
    let met = fast <= Duration::from_millis(1) && ratio >= 100.0;
    println!("budget: snapshot after append, median {fast:?} per message");
    println!("budget: recount of 10,000 messages, median {slow:?}");
    println!(
        "budget: ratio {ratio:.0}x; goal (<= 1 ms and >= 100x) {}",
        if met { "met" } else { "NOT met" }
    );
}
