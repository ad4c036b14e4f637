//! Counting a text while it streams in, so that a long answer is counted by the time it ends.
//!
//! Counting takes about 14 ns a byte here (`context::pieces`; tiktoken-rs alone takes about
//! 40): a 700 KB answer takes ~10 ms, which, done when the answer is committed, would delay the
//! end of the run by that much and hold an async worker. Instead the streamed text is cut into
//! pieces as it arrives and each piece is counted on a thread of its own, at a lower priority
//! so that it does not delay the streaming. When the answer ends, what that thread has not
//! reached yet is counted at normal priority beside it.
//!
//! The counts of the pieces add up to the count of the whole only if each cut falls where
//! tiktoken's pre-tokenizer splits the whole text anyway, and where that split does not depend
//! on what follows. Both of its patterns (o200k_base and cl100k_base) split text into pieces that
//! are each a run of letters (with one leading non-letter), up to three digits, punctuation, or
//! whitespace, and only whitespace pieces look ahead. `is_cut` accepts two cases that follow
//! from this:
//!
//! - after a line feed that is followed by an ASCII letter: the piece holding the line feed is
//!   whitespace or punctuation and cannot take the letter, and its alternatives are tried
//!   before the one with the look-ahead;
//! - before a space that follows an ASCII letter or digit and precedes an ASCII letter: the
//!   letters or digits end at the space, and the space starts the next word's piece.
//!
//! Neither can fall inside a special token such as `<|endoftext|>`. A test checks the sums
//! against whole counts for both encodings.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use super::tokens::{Counted, TokenCounter};
use crate::util::{lock, wait};

/// Text is handed to the counting thread once this much is waiting and a cut is found.
const PIECE_BYTES: usize = 2 * 1024;

/// Bytes per token of English prose and code, for the estimate given if counting failed.
const BYTES_PER_TOKEN_GUESS: u64 = 4;

/// The token count of a text that arrives in parts.
pub struct StreamingCount {
    counter: TokenCounter,
    /// Received text not yet handed to the counting thread.
    pending: String,
    /// `pending[..searched]` holds no cut; searching resumes near there.
    searched: usize,
    /// Started with the first piece; short texts never need one.
    worker: Option<Worker>,
    /// The thread could not be started: everything is counted at the end.
    no_worker: bool,
    /// Everything pushed so far, for the fallback estimate.
    bytes: u64,
}

/// Pieces waiting to be counted, shared by the low-priority thread that counts them while the
/// text streams and the helper that joins in at normal priority once it has ended.
struct Worker {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    state: Mutex<Queue>,
    changed: Condvar,
}

#[derive(Default)]
struct Queue {
    pieces: VecDeque<String>,
    /// No more pieces will come.
    closed: bool,
    /// Pieces taken but not yet added to `total`.
    counting: usize,
    total: Counted,
    /// A count panicked (a tokenizer bug): `total` is incomplete.
    failed: bool,
}

impl StreamingCount {
    pub fn new(counter: TokenCounter) -> Self {
        Self {
            counter,
            pending: String::new(),
            searched: 0,
            worker: None,
            no_worker: false,
            bytes: 0,
        }
    }

    /// Adds the next part of the text; once enough has come, a thread starts counting it.
    pub fn push(&mut self, text: &str) {
        self.pending.push_str(text);
        self.bytes += text.len() as u64;
        if self.pending.len() < PIECE_BYTES || self.no_worker {
            return;
        }
        match last_cut(self.pending.as_bytes(), self.searched) {
            Some(cut) => {
                let rest = self.pending.split_off(cut);
                let piece = std::mem::replace(&mut self.pending, rest);
                self.searched = 0;
                self.send(piece);
            }
            // A cut needs the byte after it, so the last one is searched again next time.
            None => self.searched = self.pending.len().saturating_sub(1),
        }
    }

    /// The count of everything pushed. What the low-priority thread has not counted yet is
    /// counted at normal priority, beside it, on a blocking thread.
    pub async fn finish(mut self) -> Counted {
        let Some(worker) = self.worker.take() else {
            // A short text (no thread was needed), or the thread could not be started.
            return self.counter.count_text(&self.pending);
        };
        {
            let mut queue = lock(&worker.shared.state);
            queue.pieces.push_back(std::mem::take(&mut self.pending));
            queue.closed = true;
        }
        worker.shared.changed.notify_all();
        let counter = self.counter;
        let shared = worker.shared.clone();
        let helped = tokio::task::spawn_blocking(move || help_until_counted(&shared, counter));
        match helped.await {
            Ok(Some(total)) => total,
            // Only a tokenizer bug could stop a count: fall back to a rough estimate.
            _ => Counted::estimated(self.bytes.div_ceil(BYTES_PER_TOKEN_GUESS)),
        }
    }

    fn send(&mut self, piece: String) {
        if self.worker.is_none() {
            match spawn_worker(self.counter) {
                Ok(worker) => self.worker = Some(worker),
                Err(error) => {
                    tracing::warn!(%error, "cannot start a counting thread; counting at the end");
                    self.no_worker = true;
                    self.pending.insert_str(0, &piece);
                    return;
                }
            }
        }
        if let Some(worker) = &self.worker {
            lock(&worker.shared.state).pieces.push_back(piece);
            worker.shared.changed.notify_all();
        }
    }
}

/// A count given up (the run failed before its answer was committed) lets its thread end.
impl Drop for StreamingCount {
    fn drop(&mut self) {
        if let Some(worker) = self.worker.take() {
            {
                let mut queue = lock(&worker.shared.state);
                queue.pieces.clear();
                queue.closed = true;
            }
            worker.shared.changed.notify_all();
        }
    }
}

fn spawn_worker(counter: TokenCounter) -> std::io::Result<Worker> {
    let shared = Arc::new(Shared::default());
    let theirs = shared.clone();
    std::thread::Builder::new()
        .name("sidechat-count".into())
        .spawn(move || {
            // Counting is background work: on a machine with few cores a thread counting at
            // full priority for milliseconds at a time delays the deltas streamed beside it.
            crate::low_priority::lower_this_thread();
            count_pieces(&theirs, counter);
        })?;
    Ok(Worker { shared })
}

/// The low-priority thread: counts pieces as they come until the text has ended and no piece
/// is left.
fn count_pieces(shared: &Shared, counter: TokenCounter) {
    let mut queue = lock(&shared.state);
    loop {
        if let Some(piece) = queue.pieces.pop_front() {
            queue = count_one(shared, queue, counter, piece);
        } else if queue.closed {
            return;
        } else {
            queue = wait(&shared.changed, queue);
        }
    }
}

/// The helper at the end: counts what is left, waits for the piece the thread may be on, and
/// returns the total (`None` if a count failed).
fn help_until_counted(shared: &Shared, counter: TokenCounter) -> Option<Counted> {
    let mut queue = lock(&shared.state);
    loop {
        if let Some(piece) = queue.pieces.pop_front() {
            queue = count_one(shared, queue, counter, piece);
        } else if queue.counting > 0 {
            queue = wait(&shared.changed, queue);
        } else {
            return (!queue.failed).then_some(queue.total);
        }
    }
}

/// Counts one piece with the lock released, and adds it to the total.
fn count_one<'a>(
    shared: &'a Shared,
    mut queue: MutexGuard<'a, Queue>,
    counter: TokenCounter,
    piece: String,
) -> MutexGuard<'a, Queue> {
    queue.counting += 1;
    drop(queue);
    let counted = std::panic::catch_unwind(|| counter.count_text(&piece));
    let mut queue = lock(&shared.state);
    queue.counting -= 1;
    match counted {
        Ok(counted) => queue.total += counted,
        Err(_) => queue.failed = true,
    }
    shared.changed.notify_all();
    queue
}

/// The last cut in `text` at or after `from`, if any.
fn last_cut(text: &[u8], from: usize) -> Option<usize> {
    (from.max(1)..text.len()).rev().find(|&at| is_cut(text, at))
}

/// Whether counting `text[..at]` and `text[at..]` apart gives the count of `text`.
fn is_cut(text: &[u8], at: usize) -> bool {
    let (Some(&before), Some(&after)) = (text.get(at.wrapping_sub(1)), text.get(at)) else {
        return false;
    };
    if before == b'\n' {
        return after.is_ascii_alphabetic();
    }
    after == b' '
        && before.is_ascii_alphanumeric()
        && text.get(at + 1).is_some_and(u8::is_ascii_alphabetic)
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;
    use proptest::prelude::*;

    use super::*;
    use crate::context::Encoding;

    fn counters() -> [TokenCounter; 2] {
        [
            TokenCounter::for_model("gpt-4o"),
            TokenCounter::for_model("gpt-4"),
        ]
    }

    /// Counts `parts` pushed one by one, in a runtime.
    fn streamed(counter: TokenCounter, parts: &[&str]) -> Counted {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async {
            let mut count = StreamingCount::new(counter);
            for part in parts {
                count.push(part);
            }
            count.finish().await
        })
    }

    #[test]
    fn cuts_fall_after_line_feeds_and_between_words() {
        let text = b"one two\nThree 4 five,six 7x  y\n\nz";
        let cuts: Vec<usize> = (0..=text.len()).filter(|&at| is_cut(text, at)).collect();
        // Before " two", before "Three", before " five" and before "z"; not before " 4" (a
        // digit follows), " 7x" or the second of two spaces.
        assert_eq!(cuts, vec![3, 8, 15, 32]);
    }

    #[test]
    fn a_long_answer_counts_as_the_whole() {
        let paragraph = "The quick brown fox jumps over the lazy dog, again and again.\n\
                         Numbers 12345 and code `let x = 1;` and émigré words\n";
        let text = paragraph.repeat(2_000);
        let parts: Vec<&str> = text
            .as_bytes()
            .chunks(7)
            .map(|chunk| std::str::from_utf8(chunk).unwrap_or("?"))
            .collect();
        // Chunks of 7 bytes split `é`; rebuild the text the parts really make.
        let sent: String = parts.concat();
        for counter in counters() {
            assert_eq!(streamed(counter, &parts), counter.count_text(&sent));
        }
    }

    #[test]
    fn a_text_without_cuts_is_counted_at_the_end() {
        let text = "x".repeat(3 * PIECE_BYTES);
        let parts: Vec<&str> = (0..text.len())
            .step_by(1000)
            .map(|at| &text[at..(at + 1000).min(text.len())])
            .collect();
        let counter = TokenCounter::for_model("gpt-4o");
        assert_eq!(streamed(counter, &parts), counter.count_text(&text));
    }

    #[test]
    fn a_count_given_up_ends_its_thread() {
        let mut count = StreamingCount::new(TokenCounter::for_model("gpt-4o"));
        count.push(&"many words in a row ".repeat(1_000));
        let shared = count
            .worker
            .as_ref()
            .expect("a thread was started")
            .shared
            .clone();
        drop(count);
        // The thread holds the other reference until it returns.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while Arc::strong_count(&shared) > 1 {
            assert!(
                std::time::Instant::now() < deadline,
                "the counting thread never ended"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    #[test]
    fn estimates_stay_estimates() {
        let counter = TokenCounter::for_model("claude-sonnet-4-5");
        assert_eq!(counter.encoding(), Encoding::O200kBase);
        let text = "word ".repeat(10_000);
        let counted = streamed(counter, &[&text, "end"]);
        assert!(!counted.exact);
        assert_eq!(counted, counter.count_text(&(text + "end")));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Every cut splits the text where its count adds up, for both encodings.
        #[test]
        fn counts_add_up_at_every_cut(
            text in "([a-zA-Z0-9]{1,6}|[ \n\t.,;'!?/<|>()\u{e9}\u{4e2d}\u{1f600}\r]{1,3}|'s|<\\|endoftext\\|>){1,60}"
        ) {
            for counter in counters() {
                let whole = counter.count_text(&text);
                for at in (1..text.len()).filter(|&at| is_cut(text.as_bytes(), at)) {
                    let sum = counter.count_text(&text[..at]) + counter.count_text(&text[at..]);
                    prop_assert_eq!(sum, whole, "cut at {} of {:?}", at, text);
                }
            }
        }
    }
}
