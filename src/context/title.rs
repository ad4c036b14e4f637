//! A session's title: the request that asks a model for one after the first answer, how its
//! answer is cleaned, and the short form every title takes (at most [`MAX_CHARS`]).

/// The longest title, in characters.
pub const MAX_CHARS: usize = 60;

/// The title request's system prompt. Drivers that script their answers (the demo and replay
/// models) recognise a title request by it.
pub const TITLE_SYSTEM: &str = "You name conversations. Answer with a title of at most six \
words for the conversation below: plain words in the conversation's language, no quotes, no \
trailing period, nothing else.";

/// The most output a title request may take.
pub const MAX_OUTPUT_TOKENS: u32 = 32;

/// How much of the user's message and of the answer a title request quotes.
const QUOTED_CHARS: usize = 2000;

/// The user message of a title request: the first exchange, each side cut to
/// [`QUOTED_CHARS`] and redacted.
pub fn prompt(asked: &str, answered: &str) -> String {
    format!(
        "<conversation>\nUser: {}\nAssistant: {}\n</conversation>",
        quoted(asked),
        quoted(answered)
    )
}

fn quoted(text: &str) -> String {
    let cut: String = text.chars().take(QUOTED_CHARS).collect();
    crate::context::redact::redact(cut.trim())
}

/// The user's words a title request quotes (what the demo model titles from).
pub fn asked_in(prompt: &str) -> Option<&str> {
    let start = prompt.find("\nUser: ")? + "\nUser: ".len();
    let end = prompt.rfind("\nAssistant: ")?;
    prompt.get(start..end)
}

/// A model's answer made a title: its first non-empty line without a `Title:` label,
/// Markdown marks, quotes or a trailing period, redacted and shortened; `None` when nothing
/// is left.
pub fn from_answer(answer: &str) -> Option<String> {
    let line = answer.lines().map(str::trim).find(|l| !l.is_empty())?;
    let line = line
        .strip_prefix("Title:")
        .or_else(|| line.strip_prefix("title:"))
        .unwrap_or(line);
    let line = line
        .trim()
        .trim_start_matches('#')
        .trim()
        .trim_matches(|c: char| matches!(c, '"' | '\'' | '*' | '`' | '“' | '”'))
        .trim()
        .trim_end_matches('.')
        .trim();
    let title = shorten(&crate::context::redact::redact(line));
    (!title.is_empty()).then_some(title)
}

/// A title from a message's own words: its first non-empty line, redacted (before the cut,
/// so that no part of a key is left at its edge), shortened.
pub fn from_words(text: &str) -> String {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    shorten(&crate::context::redact::redact(line))
}

/// `text` in at most [`MAX_CHARS`] characters: whole when it fits, else cut (at a word end
/// when one is near) with an ellipsis.
pub fn shorten(text: &str) -> String {
    let text = text.trim();
    if text.chars().count() <= MAX_CHARS {
        return text.to_string();
    }
    let cut: String = text.chars().take(MAX_CHARS - 1).collect();
    let at_word = match cut.rfind(char::is_whitespace) {
        Some(space) if cut[..space].chars().count() >= MAX_CHARS / 2 => cut[..space].trim_end(),
        _ => cut.as_str(),
    };
    format!("{at_word}…")
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    #[test]
    fn answers_are_cleaned_into_one_short_line() {
        assert_eq!(
            from_answer("\n  Title: \"Fixing the build.\"\nmore").as_deref(),
            Some("Fixing the build")
        );
        assert_eq!(
            from_answer("## **Rust lifetimes**").as_deref(),
            Some("Rust lifetimes")
        );
        assert_eq!(from_answer(" \n\"\" \n"), None);
    }

    #[test]
    fn titles_are_at_most_sixty_characters_cut_at_a_word() {
        let long = "word ".repeat(30);
        let title = shorten(&long);
        assert!(title.chars().count() <= MAX_CHARS, "{title}");
        assert_eq!(title, format!("{}…", ["word"; 11].join(" ")));
        let unbroken = "x".repeat(70);
        assert_eq!(shorten(&unbroken), format!("{}…", "x".repeat(59)));
        assert_eq!(shorten("  short  "), "short");
    }

    #[test]
    fn the_prompt_quotes_the_first_exchange_and_gives_back_the_question() {
        let prompt = prompt("How do I\nfix the build?", "Run cargo check.");
        assert_eq!(
            prompt,
            "<conversation>\nUser: How do I\nfix the build?\nAssistant: Run cargo check.\n</conversation>"
        );
        assert_eq!(asked_in(&prompt), Some("How do I\nfix the build?"));
    }

    #[test]
    fn words_titles_take_the_first_line_redacted() {
        assert_eq!(from_words("\n  Fix the build  \nplease"), "Fix the build");
        let keyed = from_words(&format!("{} AKIAIOSFODNN7EXAMPLE", "x".repeat(45)));
        assert!(!keyed.contains("AKIA"), "{keyed}");
    }
}
