//! Text search over the workspace that honours .gitignore.

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
    let start = ws
        .resolve(str_arg(input, "path").unwrap_or("."))
        .map_err(|e| e.to_string())?;
    let ws = ws.clone();
    tokio::task::spawn_blocking(move || scan(&ws, &start, &regex))
        .await
        .map_err(|e| format!("The search failed: {e}"))
}

fn scan(ws: &Workspace, start: &std::path::Path, regex: &regex::Regex) -> ToolOutcome {
    let mut matches = Vec::new();
    let mut more = false;
    // `require_git(false)`: honour .gitignore even when the folder is not a git checkout.
    let walker = ignore::WalkBuilder::new(start).require_git(false).build();
    'files: for entry in walker.flatten() {
        let path = entry.path();
        let small = entry
            .metadata()
            .map(|m| m.is_file() && m.len() <= MAX_FILE_BYTES);
        if !small.unwrap_or(false) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(path) else {
            continue;
        };
        for (number, line) in text.lines().enumerate() {
            if regex.is_match(line) {
                if matches.len() == MAX_MATCHES {
                    more = true;
                    break 'files;
                }
                let line = super::truncate(line.trim_end(), 300);
                matches.push(format!("{}:{}: {line}", ws.display(path), number + 1));
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
