//! The names MCP tools are offered to the model under: `mcp__server__tool`, within what every
//! provider accepts (`^[A-Za-z0-9_-]{1,64}$`). The original name is kept beside it for the call.

use super::spec::Fnv;

/// The longest tool name the providers accept.
pub const MAX_LEN: usize = 64;

/// Every tool name the model sees for an MCP tool starts with this.
pub const PREFIX: &str = "mcp__";

/// `mcp__server__tool` with characters outside `[A-Za-z0-9_-]` replaced by `_`; when that is
/// too long, or had to replace anything, it ends with a hash of the original names, so two
/// tools whose names differ only in replaced characters still get different names.
pub fn exposed(server: &str, tool: &str) -> String {
    let raw = format!("{PREFIX}{server}__{tool}");
    let clean: String = raw
        .chars()
        .map(
            |c| match c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                true => c,
                false => '_',
            },
        )
        .collect();
    if clean == raw && clean.len() <= MAX_LEN {
        return clean;
    }
    let mut hash = Fnv::default();
    hash.write(server.as_bytes());
    hash.write(tool.as_bytes());
    let suffix = format!("_{:08x}", hash.finish() as u32);
    let keep = MAX_LEN - suffix.len();
    // `clean` is ASCII, so any byte index is a character boundary.
    let head = &clean[..clean.len().min(keep)];
    format!("{head}{suffix}")
}

/// Whether a name the model used belongs to an MCP tool.
pub fn is_mcp(name: &str) -> bool {
    name.starts_with(PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn valid(name: &str) -> bool {
        !name.is_empty()
            && name.len() <= MAX_LEN
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    }

    #[test]
    fn plain_names_stay_readable() {
        assert_eq!(exposed("fs", "read_file"), "mcp__fs__read_file");
    }

    #[test]
    fn replaced_characters_and_long_names_get_a_hash_suffix() {
        let dotted = exposed("fs", "files.read");
        let spaced = exposed("fs", "files read");
        let long = exposed("server", &"x".repeat(100));
        assert_eq!(dotted.len(), "mcp__fs__files_read".len() + 9);
        assert!(dotted.starts_with("mcp__fs__files_read_"));
        assert_ne!(dotted, spaced);
        assert_eq!(long.len(), MAX_LEN);
        assert!(
            [dotted, spaced, long, exposed("ü", "ö/ä")]
                .iter()
                .all(|n| valid(n))
        );
    }
}
