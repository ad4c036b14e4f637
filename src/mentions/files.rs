//! The workspace's files for `@` completion (`workspace/files`): listed once per workspace root
//! through the `ignore` crate (so `.gitignore` and `.ignore` are honoured, inside git or not),
//! kept, and listed again only when a folder or an ignore file changes.
//!
//! A change is seen by the modification time of each folder listed (a file added, removed or
//! renamed changes its folder's) and of each ignore file. Checking is a `stat` per folder, far
//! cheaper than a walk; folders left out by the ignore files are neither walked nor checked,
//! so a busy `target/` costs nothing. File systems stamp times coarsely (a clock tick, or a
//! whole second), so a folder stamped within [`RACY`] of the listing may have changed again
//! unseen right after it: such a listing is taken again at the next question, as git does
//! with its "racily clean" entries.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// How close to a listing a folder's stamp may be before the listing is not trusted.
const RACY: Duration = Duration::from_secs(2);

/// One workspace's files as last listed, and what tells whether they changed since.
struct Listing {
    files: Arc<Vec<String>>,
    /// Each folder walked and each ignore file read, with its modification time then.
    watched: Vec<(PathBuf, Option<SystemTime>)>,
    /// When the walk started.
    listed_at: SystemTime,
}

impl Listing {
    /// Whether the listing still holds: no watched path changed, and none changed so close
    /// to the listing that a later change could carry the same stamp.
    fn current(&self) -> bool {
        let trusted_until = self
            .listed_at
            .checked_sub(RACY)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        self.watched.iter().all(|(path, then)| {
            let now = modified(path);
            now == *then && now.is_none_or(|t| t < trusted_until)
        })
    }
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::symlink_metadata(path)
        .and_then(|m| m.modified())
        .ok()
}

/// The kept listings, by workspace root. One lock per root, so two workspaces list at once
/// and two questions about one workspace wait for a single walk.
#[derive(Default)]
pub struct FileIndex {
    roots: Mutex<HashMap<PathBuf, Arc<Mutex<Option<Listing>>>>>,
}

impl FileIndex {
    /// The files below `root` (relative, with `/`), listed again when anything changed.
    /// Blocking: run it off the async threads.
    pub fn files(&self, root: &Path) -> Arc<Vec<String>> {
        let slot = {
            let mut roots = self.roots.lock().unwrap_or_else(|e| e.into_inner());
            roots.entry(root.to_path_buf()).or_default().clone()
        };
        let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
        match &*slot {
            Some(listing) if listing.current() => listing.files.clone(),
            _ => {
                let listing = walk(root);
                let files = listing.files.clone();
                *slot = Some(listing);
                files
            }
        }
    }
}

/// Names of the files that say what a walk leaves out.
const IGNORE_FILES: &[&str] = &[".gitignore", ".ignore"];

/// Lists the regular files below `root`, honouring ignore files; hidden files are listed
/// (`.github/`, `.sidechat/`), `.git` is not, and symbolic links are not (mentions and the
/// file tools refuse them).
fn walk(root: &Path) -> Listing {
    let listed_at = SystemTime::now();
    let mut files = Vec::new();
    let mut watched = vec![(root.join(".git/info/exclude"), None)];
    watched[0].1 = modified(&watched[0].0);
    let walker = ignore::WalkBuilder::new(root)
        .hidden(false)
        .require_git(false)
        .follow_links(false)
        .filter_entry(|entry| entry.file_name() != ".git")
        .build();
    for entry in walker {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => {
                tracing::debug!(error = %e, "skipped a path while listing the workspace");
                continue;
            }
        };
        let Some(kind) = entry.file_type() else {
            continue;
        };
        let path = entry.path();
        if kind.is_dir() {
            watched.push((path.to_path_buf(), modified(path)));
            continue;
        }
        if !kind.is_file() {
            continue;
        }
        if IGNORE_FILES.iter().any(|name| entry.file_name() == *name) {
            watched.push((path.to_path_buf(), modified(path)));
        }
        if let Ok(relative) = path.strip_prefix(root) {
            files.push(relative.to_string_lossy().replace('\\', "/"));
        }
    }
    files.sort();
    Listing {
        files: Arc::new(files),
        watched,
        listed_at,
    }
}

/// The `limit` files that best match `query`, best first. A file matches when the query's
/// characters appear in its path in order, whatever the case; see [`score`] for the order.
/// An empty query gives the shortest paths.
pub fn rank(files: &[String], query: &str, limit: usize) -> Vec<String> {
    let query: Vec<char> = query
        .chars()
        .filter(|c| !c.is_whitespace())
        .flat_map(char::to_lowercase)
        .collect();
    let mut scored: Vec<(i64, &String)> = files
        .iter()
        .filter(|path| in_order(&query, path))
        .filter_map(|path| score(&query, path).map(|s| (s, path)))
        .collect();
    scored.sort_by(|a, b| {
        b.0.cmp(&a.0)
            .then(a.1.len().cmp(&b.1.len()))
            .then(a.1.cmp(b.1))
    });
    scored
        .into_iter()
        .take(limit)
        .map(|(_, path)| path.clone())
        .collect()
}

/// Whether the query's characters appear in `path` in order: a check without allocation that
/// spares most paths the scoring.
fn in_order(query: &[char], path: &str) -> bool {
    let mut chars = path.chars().flat_map(char::to_lowercase);
    query.iter().all(|wanted| chars.any(|c| c == *wanted))
}

/// How well `path` matches `query` (lower case), or `None` when it does not. Each matched
/// character counts, more when it follows the one before (a run of the query typed whole),
/// more when it starts a word (after `/`, `_`, `-`, `.` or at a capital), more again in the
/// file's own name; a match found in the file name alone beats one spread over the folders.
/// Longer names and paths lose a little, so `main.rs` comes before `main_page.md`, and of two
/// equal matches the nearer file comes first. An empty query scores every path 0.
pub fn score(query: &[char], path: &str) -> Option<i64> {
    if query.is_empty() {
        return Some(0);
    }
    let chars: Vec<char> = path.chars().collect();
    let name_start = chars
        .iter()
        .rposition(|&c| c == '/')
        .map_or(0, |slash| slash + 1);
    let whole = score_from(query, &chars, 0, name_start)?;
    let in_name = score_from(query, &chars, name_start, name_start).map(|s| s + 20);
    let name_len = (chars.len() - name_start) as i64;
    Some(whole.max(in_name.unwrap_or(i64::MIN)) - name_len / 3 - chars.len() as i64 / 8)
}

/// [`score`] for a match that starts at `from`: each query character is taken at its first
/// place after the one before, preferring a place that starts a word when one is near.
fn score_from(query: &[char], chars: &[char], from: usize, name_start: usize) -> Option<i64> {
    let mut total = 0i64;
    let mut at = from;
    let mut previous: Option<usize> = None;
    for &wanted in query {
        let first = (at..chars.len()).find(|&i| lower(chars[i]) == wanted)?;
        // A word start a little further on is a better place for it than a letter mid-word,
        // unless this one continues the run of the character before.
        let continues = previous.is_some_and(|p| p + 1 == first);
        let place = if continues || word_start(chars, first) {
            first
        } else {
            (first..chars.len().min(first + 24))
                .find(|&i| lower(chars[i]) == wanted && word_start(chars, i))
                .unwrap_or(first)
        };
        total += 1;
        if previous.is_some_and(|p| p + 1 == place) {
            total += 6;
        }
        if word_start(chars, place) {
            total += 8;
        }
        if place >= name_start {
            total += 3;
        }
        if let Some(p) = previous {
            total -= (place - p - 1).min(8) as i64;
        }
        previous = Some(place);
        at = place + 1;
    }
    Some(total)
}

fn lower(c: char) -> char {
    c.to_lowercase().next().unwrap_or(c)
}

/// Whether the character at `i` starts a word of the path.
fn word_start(chars: &[char], i: usize) -> bool {
    match i.checked_sub(1).map(|p| chars[p]) {
        None => true,
        Some(before) => {
            matches!(before, '/' | '_' | '-' | '.' | ' ')
                || (chars[i].is_uppercase() && before.is_lowercase())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn paths(list: &[&str]) -> Vec<String> {
        list.iter().map(|p| p.to_string()).collect()
    }

    #[test]
    fn matches_rank_the_file_name_and_word_starts_first() {
        let files = paths(&[
            "benches/domain.rs",
            "docs/main_page.md",
            "src/mentions/mod.rs",
            "src/main.rs",
            "tests/daemon/main.rs",
            "src/client/markdown.rs",
            "README.md",
        ]);
        let cases: Vec<(&str, Vec<&str>)> = vec![
            (
                "main",
                vec![
                    "src/main.rs",
                    "tests/daemon/main.rs",
                    "docs/main_page.md",
                    "benches/domain.rs",
                ],
            ),
            ("smm", vec!["src/mentions/mod.rs", "docs/main_page.md"]),
            ("MENT", vec!["src/mentions/mod.rs"]),
            ("zzz", vec![]),
            ("", vec!["README.md", "src/main.rs"]),
        ];
        for (query, expected) in cases {
            let limit = if query.is_empty() { 2 } else { 10 };
            assert_eq!(rank(&files, query, limit), paths(&expected), "{query:?}");
        }
    }

    #[test]
    fn the_list_honours_ignore_files_and_follows_changes() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::create_dir_all(root.join("target/debug")).unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::write(root.join(".gitignore"), "target/\n*.log\n").unwrap();
        std::fs::write(root.join("src/lib.rs"), "").unwrap();
        std::fs::write(root.join("run.log"), "").unwrap();
        std::fs::write(root.join("target/debug/out"), "").unwrap();
        std::fs::write(root.join(".git/HEAD"), "").unwrap();
        let index = FileIndex::default();
        assert_eq!(*index.files(root), paths(&[".gitignore", "src/lib.rs"]));
        std::fs::write(root.join("src/new.rs"), "").unwrap();
        assert_eq!(
            *index.files(root),
            paths(&[".gitignore", "src/lib.rs", "src/new.rs"])
        );
    }
}
