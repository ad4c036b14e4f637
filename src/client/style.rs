//! Terminal colour and width: ANSI styles when the output is a terminal and `NO_COLOR` is not
//! set, plain text otherwise.

use std::io::IsTerminal;

/// Whether and how wide to draw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Style {
    pub color: bool,
    /// Columns of the terminal (80 when unknown).
    pub width: usize,
}

/// One ANSI attribute or colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Paint {
    Bold,
    Dim,
    Italic,
    Underline,
    Strike,
    Red,
    Green,
    Yellow,
    Cyan,
}

impl Paint {
    fn code(self) -> &'static str {
        match self {
            Paint::Bold => "1",
            Paint::Dim => "2",
            Paint::Italic => "3",
            Paint::Underline => "4",
            Paint::Strike => "9",
            Paint::Red => "31",
            Paint::Green => "32",
            Paint::Yellow => "33",
            Paint::Cyan => "36",
        }
    }
}

impl Style {
    /// What stdout supports: colour unless `NO_COLOR` is set (to anything) or stdout is not a
    /// terminal; the terminal's width.
    pub fn detect() -> Self {
        let color = std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
            && std::io::stdout().is_terminal();
        Self {
            color,
            width: terminal_width().unwrap_or(80),
        }
    }

    pub fn plain(width: usize) -> Self {
        Self {
            color: false,
            width,
        }
    }

    /// `text` in the given attributes (as is without colour).
    pub fn paint(&self, paints: &[Paint], text: &str) -> String {
        if !self.color || paints.is_empty() || text.is_empty() {
            return text.to_string();
        }
        let codes: Vec<&str> = paints.iter().map(|p| p.code()).collect();
        format!("\x1b[{}m{text}\x1b[0m", codes.join(";"))
    }
}

/// The width of the terminal on stdout (or `COLUMNS`), if there is one.
fn terminal_width() -> Option<usize> {
    #[cfg(unix)]
    if let Ok(size) = rustix::termios::tcgetwinsize(std::io::stdout())
        && size.ws_col > 0
    {
        return Some(size.ws_col.into());
    }
    std::env::var("COLUMNS").ok()?.parse().ok()
}

/// The terminal's height in rows, if known.
pub fn terminal_height() -> Option<usize> {
    #[cfg(unix)]
    if let Ok(size) = rustix::termios::tcgetwinsize(std::io::stdout())
        && size.ws_row > 0
    {
        return Some(size.ws_row.into());
    }
    std::env::var("LINES").ok()?.parse().ok()
}
