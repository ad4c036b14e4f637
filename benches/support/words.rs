//! The vocabulary the benchmarks' generated messages are drawn from: words of a programmer's
//! chat, so the text tokenizes as such text does. Shared so that every bench writes the same
//! kind of message.

/// Picked by the benches with their own pseudo-random sequences.
pub const WORDS: &[&str] = &[
    "the",
    "parser",
    "returns",
    "an",
    "error",
    "when",
    "input",
    "ends",
    "early",
    "so",
    "we",
    "retry",
    "with",
    "a",
    "larger",
    "buffer",
    "and",
    "log",
    "which",
    "file",
    "changed",
    "tests",
    "pass",
    "now",
    "but",
    "the",
    "benchmark",
    "regressed",
    "by",
    "ten",
    "percent",
];
