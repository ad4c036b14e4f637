//! Text search over the workspace that honours .gitignore.

use std::io::Read;

use serde_json::Value;

use super::{ToolOutcome, Workspace, str_arg};

const MAX_MATCHES: usize = 200;
/// Files larger than this are skipped: they are build outputs or data, not source.
const MAX_FILE_BYTES: u64 = 2 * 1024 * 1024;

pub async fn search(ws: &Workspace, input: &Value) -> Result<ToolOutcome, String> {
    let pattern = str_arg(input, "pattern")
        .filter(|p| !p.is_empty())
        .ok_or("The input needs a non-empty string field \"pattern\".")?;
    let regex = regex::Regex::new(pattern)
        .or_else(|_| regex::Regex::new(&regex::escape(pattern)))
        .map_err(|e| format!("Bad pattern: {e}"))?;
    let requested = str_arg(input, "path").unwrap_or(".").to_string();
    let ws = ws.clone();
    tokio::task::spawn_blocking(move || {
        // Opening the start refuses a symlink on the way to it, with the reason.
        ws.open_file(&requested)
            .map_err(|e| e.shown(&format!("Cannot search {requested}")))?;
        let start = ws
            .root()
            .join(ws.relative(&requested).map_err(|e| e.to_string())?);
        Ok(scan(&ws, &start, &regex))
    })
    .await
    .map_err(|e| format!("The search failed: {e}"))?
}

/// Walks the folder by name to find candidate files, but reads each through the confined
/// opener: if a folder is swapped for a symlink mid-walk, the walk may name files outside, yet
/// opening them is refused, so no outside content is ever matched.
fn scan(ws: &Workspace, start: &std::path::Path, regex: &regex::Regex) -> ToolOutcome {
    let mut matches = Vec::new();
    let mut more = false;
    // `require_git(false)`: honour .gitignore even when the folder is not a git checkout.
    let walker = ignore::WalkBuilder::new(start).require_git(false).build();
    'files: for entry in walker.flatten() {
        let Ok(relative) = entry.path().strip_prefix(ws.root()) else {
            continue;
        };
        let shown = ws.display(entry.path());
        let Some(text) = read_small(ws, &shown, relative) else {
            continue;
        };
        for (number, line) in text.lines().enumerate() {
            if regex.is_match(line) {
                if matches.len() == MAX_MATCHES {
                    more = true;
                    break 'files;
                }
                let line = super::truncate(line.trim_end(), 300);
                matches.push(format!("{shown}:{}: {line}", number + 1));
            }
        }
    }
    if matches.is_empty() {
        return ToolOutcome::ok(format!("No matches for {:?}.", regex.as_str()));
    }
    let mut output = matches.join("\n");
    if more {
        output.push_str(&format!(
            "\n… stopped after {MAX_MATCHES} matches; narrow the pattern or path"
        ));
    }
    ToolOutcome::ok(output)
}

/// The text of a regular file of at most [`MAX_FILE_BYTES`], opened without following a
/// symlink; `None` for anything else.
fn read_small(ws: &Workspace, shown: &str, relative: &std::path::Path) -> Option<String> {
    let mut file = ws.open_relative_file(shown, relative).ok()?;
    let metadata = file.metadata().ok()?;
    if !metadata.is_file() || metadata.len() > MAX_FILE_BYTES {
        return None;
    }
    let mut text = String::new();
    file.read_to_string(&mut text).ok()?;
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn finds_matches_and_skips_ignored_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(".gitignore"), "target/\n").unwrap();
        std::fs::create_dir(dir.path().join("target")).unwrap();
        std::fs::write(dir.path().join("target/out.txt"), "needle\n").unwrap();
        std::fs::write(dir.path().join("a.rs"), "fn x() {}\nlet needle = 1;\n").unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        let found = search(&ws, &json!({"pattern": "needle"})).await.unwrap();
        assert_eq!(found.output, "a.rs:2: let needle = 1;");
    }
}
