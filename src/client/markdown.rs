//! Markdown for the terminal, drawn line by line as the text streams in.
//!
//! A line is drawn once it is complete (or once it is wider than the terminal, up to the last
//! word that fits), and never redrawn: nothing flickers, and what is on the screen is final.
//! Headings, lists, quotes and rules are read from the start of each line; emphasis, inline
//! code and links by pulldown-cmark within it; fenced code is coloured by syntect.

use std::sync::OnceLock;

use pulldown_cmark::{Event, Parser, Tag, TagEnd};
use syntect::easy::HighlightLines;
use syntect::highlighting::{Theme, ThemeSet};
use syntect::parsing::SyntaxSet;

use super::style::{Paint, Style};

/// The syntax definitions and colour theme, loaded once when the first code block shows.
fn highlighting() -> &'static (SyntaxSet, Theme) {
    static LOADED: OnceLock<(SyntaxSet, Theme)> = OnceLock::new();
    LOADED.get_or_init(|| {
        let syntaxes = SyntaxSet::load_defaults_newlines();
        let mut themes = ThemeSet::load_defaults().themes;
        let theme = themes
            .remove("base16-ocean.dark")
            .or_else(|| themes.into_values().next())
            .unwrap_or_default();
        (syntaxes, theme)
    })
}

/// How a line starts: what is drawn before its text, on its first and on wrapped lines.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Lead {
    first: String,
    rest: String,
    /// Columns the lead takes.
    width: usize,
    /// Attributes of the whole line (headings).
    paints: Vec<Paint>,
}

/// An open fenced code block.
struct Fence {
    marker: String,
    highlighter: Option<HighlightLines<'static>>,
}

/// Draws one message's Markdown as its text arrives.
pub struct Markdown {
    style: Style,
    fence: Option<Fence>,
    /// The text of the current line not drawn yet.
    pending: String,
    /// The lead of the current line, once part of it was drawn.
    open: Option<Lead>,
}

impl Markdown {
    pub fn new(style: Style) -> Self {
        Self {
            style,
            fence: None,
            pending: String::new(),
            open: None,
        }
    }

    /// Adds streamed text; the screen lines it completed.
    pub fn push(&mut self, text: &str) -> Vec<String> {
        let mut lines = Vec::new();
        self.pending.push_str(text);
        while let Some(end) = self.pending.find('\n') {
            let line: String = self.pending.drain(..=end).collect();
            self.line(line.trim_end_matches(['\n', '\r']), &mut lines);
        }
        self.cut_long_line(&mut lines);
        lines
    }

    /// The rest of the message: its last line, however short.
    pub fn finish(&mut self) -> Vec<String> {
        let mut lines = Vec::new();
        if !self.pending.is_empty() || self.open.is_some() {
            let rest = std::mem::take(&mut self.pending);
            self.line(&rest, &mut lines);
        }
        self.fence = None;
        lines
    }

    /// A whole text at once (a stored message).
    pub fn render(style: Style, text: &str) -> Vec<String> {
        let mut markdown = Self::new(style);
        let mut lines = markdown.push(text);
        lines.extend(markdown.finish());
        lines
    }

    /// Draws the words of a line wider than the screen that fit, keeping the rest.
    fn cut_long_line(&mut self, lines: &mut Vec<String>) {
        if self.fence.is_some() || looks_like_fence(&self.pending) {
            return;
        }
        loop {
            let (lead, skip) = match &self.open {
                Some(lead) => (lead.clone(), 0),
                None => {
                    let (lead, body) = self.lead(&self.pending);
                    let skip = self.pending.len() - body.len();
                    (lead, skip)
                }
            };
            let body = &self.pending[skip..];
            let room = self.style.width.saturating_sub(lead.width).max(20);
            if body.chars().count() <= room {
                return;
            }
            let Some(cut) = last_space_within(body, room) else {
                return;
            };
            let piece = body[..cut].trim_end().to_string();
            let rest = body[cut..].trim_start().to_string();
            let prefix = match self.open {
                None => &lead.first,
                Some(_) => &lead.rest,
            };
            lines.push(format!("{prefix}{}", self.inline(&piece, &lead.paints)));
            self.pending = rest;
            self.open = Some(lead);
        }
    }

    /// Draws one complete line (or the rest of one that was cut).
    fn line(&mut self, line: &str, lines: &mut Vec<String>) {
        if let Some(open) = self.open.take() {
            self.wrapped(&open, line, false, lines);
            return;
        }
        if self.fence.is_some() {
            self.code_line(line, lines);
            return;
        }
        let trimmed = line.trim_start();
        if looks_like_fence(trimmed) {
            let marker: String = trimmed
                .chars()
                .take_while(|c| *c == '`' || *c == '~')
                .collect();
            let language = trimmed[marker.len()..].trim();
            let highlighter = (self.style.color && !language.is_empty())
                .then(|| {
                    let (syntaxes, theme) = highlighting();
                    let token = language.split_whitespace().next().unwrap_or(language);
                    syntaxes
                        .find_syntax_by_token(token)
                        .map(|syntax| HighlightLines::new(syntax, theme))
                })
                .flatten();
            let label = if language.is_empty() {
                "code"
            } else {
                language
            };
            lines.push(self.style.paint(&[Paint::Dim], &format!("  ┌ {label}")));
            self.fence = Some(Fence {
                marker,
                highlighter,
            });
            return;
        }
        if is_rule(trimmed) {
            let width = self.style.width.clamp(10, 60);
            lines.push(self.style.paint(&[Paint::Dim], &"─".repeat(width)));
            return;
        }
        let (lead, body) = self.lead(line);
        self.wrapped(&lead, body, true, lines);
    }

    /// A line of a fenced block, coloured when a highlighter knows its language.
    fn code_line(&mut self, line: &str, lines: &mut Vec<String>) {
        let Some(fence) = self.fence.as_mut() else {
            return;
        };
        let trimmed = line.trim();
        if trimmed.starts_with(fence.marker.as_str())
            && trimmed.chars().all(|c| c == '`' || c == '~')
        {
            self.fence = None;
            lines.push(self.style.paint(&[Paint::Dim], "  └"));
            return;
        }
        let gutter = self.style.paint(&[Paint::Dim], "  │ ");
        let code = match fence.highlighter.as_mut() {
            Some(highlighter) => {
                let (syntaxes, _) = highlighting();
                let with_newline = format!("{line}\n");
                match highlighter.highlight_line(&with_newline, syntaxes) {
                    Ok(ranges) => {
                        let text = syntect::util::as_24_bit_terminal_escaped(&ranges, false);
                        format!("{}\x1b[0m", text.trim_end_matches('\n'))
                    }
                    Err(_) => line.to_string(),
                }
            }
            None => line.to_string(),
        };
        lines.push(format!("{gutter}{code}"));
    }

    /// Draws `body` after `lead`, wrapped to the screen.
    fn wrapped(&self, lead: &Lead, body: &str, first: bool, lines: &mut Vec<String>) {
        let room = self.style.width.saturating_sub(lead.width).max(20);
        for (n, piece) in wrap(body, room).into_iter().enumerate() {
            let prefix = if first && n == 0 {
                &lead.first
            } else {
                &lead.rest
            };
            lines.push(format!("{prefix}{}", self.inline(&piece, &lead.paints)));
        }
    }

    /// How a line starts, and its text after that.
    fn lead<'a>(&self, line: &'a str) -> (Lead, &'a str) {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let pad = " ".repeat(indent);
        let hashes = trimmed.chars().take_while(|c| *c == '#').count();
        if (1..=6).contains(&hashes) && trimmed[hashes..].starts_with(' ') {
            let paints = match hashes {
                1 => vec![Paint::Bold, Paint::Underline],
                _ => vec![Paint::Bold],
            };
            let lead = Lead {
                first: String::new(),
                rest: String::new(),
                width: 0,
                paints,
            };
            return (lead, trimmed[hashes..].trim_start());
        }
        for bullet in ["- ", "* ", "+ "] {
            if let Some(body) = trimmed.strip_prefix(bullet) {
                let (mark, body) = match body
                    .strip_prefix("[ ] ")
                    .map(|b| ("☐ ", b))
                    .or_else(|| body.strip_prefix("[x] ").map(|b| ("☑ ", b)))
                {
                    Some(task) => task,
                    None => ("• ", body),
                };
                let lead = Lead {
                    first: format!("{pad}{}", self.style.paint(&[Paint::Cyan], mark)),
                    rest: format!("{pad}  "),
                    width: indent + 2,
                    paints: Vec::new(),
                };
                return (lead, body);
            }
        }
        let digits = trimmed.chars().take_while(char::is_ascii_digit).count();
        if digits > 0
            && let Some(body) = trimmed[digits..]
                .strip_prefix(". ")
                .or_else(|| trimmed[digits..].strip_prefix(") "))
        {
            let number = &trimmed[..digits + 1];
            let lead = Lead {
                first: format!("{pad}{} ", self.style.paint(&[Paint::Cyan], number)),
                rest: " ".repeat(indent + digits + 2),
                width: indent + digits + 2,
                paints: Vec::new(),
            };
            return (lead, body);
        }
        if let Some(body) = trimmed.strip_prefix('>') {
            let bar = self.style.paint(&[Paint::Dim], "│ ");
            let lead = Lead {
                first: format!("{pad}{bar}"),
                rest: format!("{pad}{bar}"),
                width: indent + 2,
                paints: vec![Paint::Italic],
            };
            return (lead, body.strip_prefix(' ').unwrap_or(body));
        }
        let lead = Lead {
            first: pad.clone(),
            rest: pad,
            width: indent,
            paints: Vec::new(),
        };
        (lead, trimmed)
    }

    /// Emphasis, inline code, links and strike-through within one line.
    fn inline(&self, text: &str, base: &[Paint]) -> String {
        let mut out = String::new();
        let mut paints: Vec<Paint> = base.to_vec();
        let mut links: Vec<String> = Vec::new();
        let options = pulldown_cmark::Options::ENABLE_STRIKETHROUGH;
        for event in Parser::new_ext(text, options) {
            match event {
                Event::Text(t) => out.push_str(&self.style.paint(&paints, &t)),
                Event::Code(t) => {
                    let mut code = paints.clone();
                    code.push(Paint::Yellow);
                    out.push_str(&self.style.paint(&code, &t));
                }
                Event::Html(t) | Event::InlineHtml(t) => out.push_str(&t),
                Event::SoftBreak | Event::HardBreak => out.push(' '),
                Event::Start(Tag::Emphasis) => paints.push(Paint::Italic),
                Event::Start(Tag::Strong) => paints.push(Paint::Bold),
                Event::Start(Tag::Strikethrough) => paints.push(Paint::Strike),
                Event::Start(Tag::Link { dest_url, .. }) => {
                    paints.push(Paint::Underline);
                    links.push(dest_url.to_string());
                }
                Event::End(TagEnd::Emphasis | TagEnd::Strong | TagEnd::Strikethrough) => {
                    paints.pop();
                }
                Event::End(TagEnd::Link) => {
                    paints.pop();
                    if let Some(url) = links.pop() {
                        out.push_str(&self.style.paint(&[Paint::Dim], &format!(" ({url})")));
                    }
                }
                _ => {}
            }
        }
        // pulldown-cmark reads a line of only `-` or `=` as a heading underline, and drops
        // leading markers it took for structure: fall back to the text as written.
        if out.is_empty() && !text.trim().is_empty() {
            return self.style.paint(base, text);
        }
        out
    }
}

fn looks_like_fence(line: &str) -> bool {
    let line = line.trim_start();
    line.starts_with("```") || line.starts_with("~~~")
}

fn is_rule(line: &str) -> bool {
    let line = line.trim();
    line.len() >= 3
        && ["-", "*", "_"]
            .iter()
            .any(|c| line.chars().all(|x| x.to_string() == *c || x == ' '))
        && line.chars().filter(|c| !c.is_whitespace()).count() >= 3
}

/// The byte index of the last space at or before `room` characters.
fn last_space_within(text: &str, room: usize) -> Option<usize> {
    text.char_indices()
        .take(room + 1)
        .filter(|(_, c)| *c == ' ')
        .map(|(i, _)| i)
        .last()
        .filter(|i| *i > 0)
}

/// Splits `text` into lines of at most `room` characters at spaces (a longer word stands
/// alone).
fn wrap(text: &str, room: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut current = String::new();
    for word in text.split(' ') {
        let needed =
            current.chars().count() + usize::from(!current.is_empty()) + word.chars().count();
        if !current.is_empty() && needed > room {
            lines.push(std::mem::take(&mut current));
        }
        if !current.is_empty() {
            current.push(' ');
        }
        current.push_str(word);
    }
    lines.push(current);
    lines
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    #[test]
    fn plain_markdown_drops_the_markup() {
        let text = "# Plan\n\nSome **bold** and `code`.\n\n- one\n- two\n1. first\n> quoted\n\n```rust\nfn main() {}\n```\n---\n";
        assert_eq!(
            Markdown::render(Style::plain(80), text),
            [
                "Plan",
                "",
                "Some bold and code.",
                "",
                "• one",
                "• two",
                "1. first",
                "│ quoted",
                "",
                "  ┌ rust",
                "  │ fn main() {}",
                "  └",
                &"─".repeat(60),
            ]
        );
    }

    #[test]
    fn streaming_draws_the_same_lines_as_a_whole_text() {
        let text = "Intro line that is rather long and has to wrap around the edge of a narrow screen.\n\n- a list item that also runs past the edge of the narrow screen for sure\n\n```\ncode stays whole even when it is long long long long long long long long\n```\ndone";
        let whole = Markdown::render(Style::plain(30), text);
        let mut streamed = Markdown::new(Style::plain(30));
        let mut lines = Vec::new();
        for chunk in text.split_inclusive(' ') {
            lines.extend(streamed.push(chunk));
        }
        lines.extend(streamed.finish());
        assert_eq!(lines, whole);
        assert!(
            whole
                .iter()
                .all(|l| l.chars().count() <= 30 || l.contains("long long")),
            "{whole:#?}"
        );
        assert_eq!(whole[1], "and has to wrap around the");
    }

    #[test]
    fn colour_marks_emphasis_and_code() {
        let style = Style {
            color: true,
            width: 80,
        };
        let lines = Markdown::render(style, "*it* **b**\n```rust\nlet x = 1;\n```");
        assert_eq!(lines[0], "\x1b[3mit\x1b[0m \x1b[1mb\x1b[0m");
        assert!(lines[2].contains("\x1b[38;2;"), "{:?}", lines[2]);
    }
}
