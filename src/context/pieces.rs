//! Counting tokens the way tiktoken does, at a fraction of its cost.
//!
//! tiktoken first cuts text into pieces with a regular expression (words with their leading
//! space, up to three digits, punctuation runs, whitespace), then runs BPE on each piece.
//! tiktoken-rs matches that expression with `fancy-regex`, whose backtracking engine costs
//! about a microsecond per piece here: almost all of a count, and most of what a streamed delta
//! costs the daemon. The one construct that needs backtracking is the look-ahead in
//! `\s+(?!\S)`. This module matches the same expression without that alternative on the
//! `regex` crate's automata (the same Unicode classes, and the same leftmost-first choice among
//! alternatives as a backtracking engine), and redoes the look-ahead by hand: a whitespace run
//! that the look-ahead would have stopped short gives back its last character (see
//! `Pieces::next`).
//!
//! Pieces repeat (common words, indentation, digits), so each piece's token count is kept in a
//! bounded cache; a piece not seen before is counted by tiktoken-rs itself, alone, which cuts
//! it no further. Special tokens such as `<|endoftext|>` count one each, as in
//! `encode_with_special_tokens`. Tests compare every count with tiktoken-rs's own.

use std::sync::Mutex;

use regex::Regex;
// The hash tiktoken-rs itself uses for its vocabulary: the keys are short, and a count is a
// lookup per piece.
use rustc_hash::FxHashMap as HashMap;
use tiktoken_rs::CoreBPE;

use crate::util::lock;

/// Pieces whose counts are remembered; the cache starts over when it is full. Each entry is a
/// short string and a number, so the cache stays around a few MiB.
const CACHED_PIECES: usize = 64 * 1024;

/// Pieces longer than this are counted without being cached: long words and long runs of
/// symbols or whitespace rarely repeat exactly.
const CACHED_PIECE_BYTES: usize = 32;

/// The alternative of tiktoken-rs's `O200K_BASE_PAT_STR` that needs a look-ahead; the rest of
/// that pattern is used as it is, so it follows tiktoken-rs if the pattern ever changes.
const O200K_LOOK_AHEAD: &str = r"|\s+(?!\S)";

/// cl100k_base's pre-tokenizer as tiktoken-rs writes it (inline, not as a constant we could
/// take), with its possessive quantifiers made greedy (nothing after them could take back what they match, so it changes no match) and its
/// `\s+(?!\S)|\s` written as `\s+`, with the look-ahead redone by hand.
const CL100K_PIECES: &str = concat!(
    r"'(?i:[sdmt]|ll|ve|re)",
    r"|[^\r\n\p{L}\p{N}]?\p{L}+",
    r"|\p{N}{1,3}",
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*",
    r"|\s+$",
    r"|\s*[\r\n]",
    r"|\s+",
);

/// o200k_base's pre-tokenizer without its look-ahead alternative.
fn o200k_pieces() -> Result<String, PieceError> {
    let pattern = tiktoken_rs::O200K_BASE_PAT_STR;
    match pattern.matches(O200K_LOOK_AHEAD).count() {
        1 => Ok(pattern.replacen(O200K_LOOK_AHEAD, "", 1)),
        _ => Err(PieceError::Pattern),
    }
}

/// Which pre-tokenizer a [`PieceCounter`] uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    O200k,
    Cl100k,
}

#[derive(Debug, thiserror::Error)]
pub enum PieceError {
    #[error("cannot build the pre-tokenizer: {0}")]
    Regex(#[from] regex::Error),
    #[error("tiktoken-rs's o200k pattern no longer has the alternative `{O200K_LOOK_AHEAD}` once")]
    Pattern,
}

/// Counts tokens as `bpe.encode_with_special_tokens(text).len()` does.
pub struct PieceCounter {
    bpe: &'static CoreBPE,
    pieces: Pieces,
    /// Any of the BPE's special tokens; `None` if it has none.
    specials: Option<Regex>,
    cache: Mutex<HashMap<Box<str>, u32>>,
}

impl PieceCounter {
    /// `pattern` must be the pre-tokenizer `bpe` was built with.
    pub fn new(bpe: &'static CoreBPE, pattern: Pattern) -> Result<Self, PieceError> {
        let pieces = Pieces::new(&match pattern {
            Pattern::O200k => o200k_pieces()?,
            Pattern::Cl100k => CL100K_PIECES.to_owned(),
        })?;
        let mut specials: Vec<&str> = bpe.special_tokens().into_iter().collect();
        // Longest first, so that of two specials starting at the same place the longer wins.
        specials.sort_by(|a, b| b.len().cmp(&a.len()).then(a.cmp(b)));
        let specials = match specials.is_empty() {
            true => None,
            false => Some(Regex::new(
                &specials
                    .iter()
                    .map(|s| regex::escape(s))
                    .collect::<Vec<_>>()
                    .join("|"),
            )?),
        };
        Ok(Self {
            bpe,
            pieces,
            specials,
            cache: Mutex::new(HashMap::default()),
        })
    }

    /// The number of tokens of `text`, special tokens included.
    pub fn count(&self, text: &str) -> u64 {
        let Some(specials) = &self.specials else {
            return self.count_ordinary(text);
        };
        let mut total = 0;
        let mut start = 0;
        for special in specials.find_iter(text) {
            total += self.count_ordinary(&text[start..special.start()]) + 1;
            start = special.end();
        }
        total + self.count_ordinary(&text[start..])
    }

    /// Tokens of text without special tokens.
    fn count_ordinary(&self, text: &str) -> u64 {
        let mut total = 0;
        let mut at = 0;
        while let Some((start, end)) = self.pieces.next(text, at) {
            total += u64::from(self.count_piece(&text[start..end]));
            at = end;
        }
        total
    }

    fn count_piece(&self, piece: &str) -> u32 {
        if piece.len() > CACHED_PIECE_BYTES {
            return self.bpe_count(piece);
        }
        if let Some(&count) = lock(&self.cache).get(piece) {
            return count;
        }
        let count = self.bpe_count(piece);
        let mut cache = lock(&self.cache);
        if cache.len() >= CACHED_PIECES {
            cache.clear();
        }
        cache.insert(piece.into(), count);
        count
    }

    /// tiktoken-rs's count of one piece; its pre-tokenizer finds the piece whole.
    fn bpe_count(&self, piece: &str) -> u32 {
        u32::try_from(self.bpe.encode_ordinary(piece).len()).unwrap_or(u32::MAX)
    }
}

/// The pre-tokenizer's expression, compiled twice.
struct Pieces {
    /// Anchored at the start of the haystack. Every character starts a piece (some alternative
    /// takes any character), so the next piece starts where the last one ended, and an anchored
    /// search needs only the forward pass of the automaton.
    anchored: Regex,
    /// For a character no alternative would take, should there be one: skipped, as tiktoken's
    /// `find_iter` skips it.
    unanchored: Regex,
}

impl Pieces {
    fn new(pattern: &str) -> Result<Self, regex::Error> {
        Ok(Self {
            anchored: Regex::new(&format!("^(?:{pattern})"))?,
            unanchored: Regex::new(pattern)?,
        })
    }

    /// The next piece of `text` at or after `at`, as the full pattern with `\s+(?!\S)` would
    /// find it: `(start, end)` in bytes.
    ///
    /// A match made only of whitespace that ends neither in a line break nor at the end of the
    /// text can only come from the closing `\s+` (the other whitespace alternatives end in a
    /// line break or at the end), and is followed by a non-space, since `\s+` is greedy.
    /// There `\s+(?!\S)`, tried first, would have matched all but its last character, or, for
    /// a single character, failed and left it to `\s+` (`\s` in cl100k). So a run of two or
    /// more characters gives back its last one, which then starts the next piece (usually as
    /// the space before a word).
    fn next(&self, text: &str, at: usize) -> Option<(usize, usize)> {
        // `$` means the end of `text` in both: the rest of `text` is searched, to its end.
        let (start, end) = match self.anchored.find(&text[at..]) {
            Some(found) => (at, at + found.end()),
            None => {
                let found = self.unanchored.find_at(text, at)?;
                (found.start(), found.end())
            }
        };
        let piece = &text[start..end];
        let stopped_short = end < text.len()
            && !piece.ends_with(['\r', '\n'])
            && piece.chars().all(char::is_whitespace);
        if stopped_short {
            let mut chars = piece.char_indices();
            // The first character stays; with more than one, the last is given back.
            chars.next();
            if let Some((last, _)) = chars.next_back() {
                return Some((start, start + last));
            }
        }
        Some((start, end))
    }
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;
    use proptest::prelude::*;

    use super::*;

    fn counters() -> [(&'static str, &'static CoreBPE, PieceCounter); 2] {
        let o200k = tiktoken_rs::o200k_base_singleton();
        let cl100k = tiktoken_rs::cl100k_base_singleton();
        [
            (
                "o200k",
                o200k,
                PieceCounter::new(o200k, Pattern::O200k).unwrap(),
            ),
            (
                "cl100k",
                cl100k,
                PieceCounter::new(cl100k, Pattern::Cl100k).unwrap(),
            ),
        ]
    }

    /// Per encoding: tiktoken-rs's count, ours, and ours again (from the cache).
    fn counts(counters: &[(&str, &CoreBPE, PieceCounter)], text: &str) -> Vec<(String, [u64; 3])> {
        counters
            .iter()
            .map(|(name, bpe, counter)| {
                let expected = bpe.encode_with_special_tokens(text).len() as u64;
                (
                    name.to_string(),
                    [expected, counter.count(text), counter.count(text)],
                )
            })
            .collect()
    }

    /// What [`counts`] must be when the counts agree.
    fn agreeing(
        counters: &[(&str, &CoreBPE, PieceCounter)],
        text: &str,
    ) -> Vec<(String, [u64; 3])> {
        counts(counters, text)
            .into_iter()
            .map(|(name, [expected, ..])| (name, [expected; 3]))
            .collect()
    }

    fn check(counters: &[(&str, &CoreBPE, PieceCounter)], text: &str) {
        assert_eq!(counts(counters, text), agreeing(counters, text), "{text:?}");
    }

    #[test]
    fn counts_agree_with_tiktoken_on_tricky_texts() {
        let counters = counters();
        for text in [
            "",
            " ",
            "  ",
            "a",
            "hello world",
            "  hello   world  ",
            "fn main() {\n    println!(\"hi\");\n}\n",
            "\n\n\n  \n\t\tx",
            "a \u{3000}\u{3000}b \u{a0} c",
            "It's THEY'RE we'VE i'M you'LL he'd O'Neil 's 'S",
            "12345678 1,234.5 ३४५६ ½",
            "x<|endoftext|>y <|endofprompt|><|fim_prefix|>",
            "<|endoftext",
            "e\u{301}te\u{301} ÉTÉ naïve ﬁ",
            "😀😀 👩‍👩‍👧 🇫🇷",
            "path/to/file.rs:12\r\n\r\n//comment",
            "   \r\n   ",
            "tabs\t\t\tand spaces   \tmixed",
            "w0 w1 w2 w3 w4 w5 w6 w7 w8 w9 w10 w11",
            // Found by the property test below when the pattern or the look-ahead was wrong.
            "\u{a0} '",
            "a'Rer",
        ] {
            check(&counters, text);
        }
    }

    #[test]
    fn counts_agree_with_tiktoken_on_this_crates_sources() {
        let counters = counters();
        for path in [
            "README.md",
            "src/context/pieces.rs",
            "src/provider/anthropic.rs",
            "data/prices.json",
        ] {
            let text = std::fs::read_to_string(path).unwrap();
            check(&counters, &text);
        }
    }

    /// Characters from every class the pattern tells apart, most of them ASCII.
    fn tricky_char() -> impl Strategy<Value = char> {
        prop_oneof![
            4 => proptest::char::range('a', 'z'),
            2 => proptest::char::range('A', 'Z'),
            2 => proptest::char::range('0', '9'),
            3 => proptest::sample::select(vec![' ', ' ', '\n', '\r', '\t', '\u{a0}', '\u{3000}', '\u{2028}', '\u{b}', '\u{c}']),
            2 => proptest::sample::select(vec!['\'', '"', '/', '.', ',', '!', '-', '_', '(', ')', '<', '|', '>', '{', '}', '#']),
            1 => proptest::sample::select(vec!['é', 'É', '\u{301}', 'ß', 'ǅ', 'ʰ', '中', 'ж', 'Ж', '५', '½', '😀', '\u{200d}', 'ﬁ', 'ⅷ']),
            1 => any::<char>(),
        ]
    }

    fn tricky_text() -> impl Strategy<Value = String> {
        let words = prop_oneof![
            4 => proptest::collection::vec(tricky_char(), 1..6).prop_map(|c| c.into_iter().collect::<String>()),
            1 => proptest::sample::select(vec!["'s", "'LL", "'Re", "<|endoftext|>", "<|endofprompt|>", "<|fim_middle|>", "   ", "\r\n", " \n ", "'t"]).prop_map(str::to_owned),
        ];
        proptest::collection::vec(words, 0..24).prop_map(|words| words.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn any_text_counts_as_tiktoken_counts_it(text in tricky_text()) {
            thread_local! {
                static COUNTERS: [(&'static str, &'static CoreBPE, PieceCounter); 2] = counters();
            }
            COUNTERS.with(|counters| {
                prop_assert_eq!(counts(counters, &text), agreeing(counters, &text), "{:?}", text);
                Ok(())
            })?;
        }
    }
}
