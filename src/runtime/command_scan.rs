//! The files a command changed in a workspace that is not snapshotted in git (outside a git
//! work tree, or in one over the snapshot cap): found by comparing each file's size and
//! modification time before and after the command.
//!
//! Only sizes and times are read, never contents, so what is found can be listed but not put
//! back: each such file is kept as a checkpoint marked not restorable, which a rewind reports
//! and leaves alone. The walk honours `.gitignore` files as git would (also outside a
//! repository), includes hidden files, and never enters `.git`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::store::Store;

/// What identifies a file's version without reading it: its size and modification time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
}

/// The workspace's regular files before a command, by path relative to the workspace root
/// (with `/` between parts).
pub(super) struct Listing {
    root: PathBuf,
    files: BTreeMap<String, Stamp>,
}

/// Walks `root`: every regular file not ignored, with its stamp. Blocking: run it off the
/// async workers.
fn walk(root: &Path) -> BTreeMap<String, Stamp> {
    let mut files = BTreeMap::new();
    let walker = ignore::WalkBuilder::new(root)
        .hidden(false)
        .parents(true)
        .ignore(false)
        .git_ignore(true)
        .git_exclude(true)
        .git_global(false)
        .require_git(false)
        .follow_links(false)
        .filter_entry(|entry| entry.file_name() != ".git")
        .build();
    for entry in walker {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => {
                tracing::debug!(error = %e, "a path the command scan cannot read");
                continue;
            }
        };
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        let Ok(metadata) = entry.metadata() else {
            continue;
        };
        let Ok(relative) = entry.path().strip_prefix(root) else {
            continue;
        };
        let parts: Vec<String> = relative
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        files.insert(
            parts.join("/"),
            Stamp {
                len: metadata.len(),
                modified: metadata.modified().ok(),
            },
        );
    }
    files
}

async fn walk_off_thread(root: PathBuf) -> Result<BTreeMap<String, Stamp>, String> {
    tokio::task::spawn_blocking(move || walk(&root))
        .await
        .map_err(|e| format!("the scan of the workspace failed: {e}"))
}

/// The paths whose stamp differs between `before` and `after`, or that only one has, in order.
fn differences(before: &BTreeMap<String, Stamp>, after: &BTreeMap<String, Stamp>) -> Vec<String> {
    let mut changed: Vec<String> = before
        .iter()
        .filter(|(path, stamp)| after.get(*path) != Some(stamp))
        .map(|(path, _)| path.clone())
        .collect();
    changed.extend(
        after
            .keys()
            .filter(|path| !before.contains_key(*path))
            .cloned(),
    );
    changed.sort();
    changed
}

impl Listing {
    /// The workspace's files before a command.
    pub(super) async fn take(root: &Path) -> Result<Self, String> {
        Ok(Self {
            root: root.to_path_buf(),
            files: walk_off_thread(root.to_path_buf()).await?,
        })
    }

    /// Lists the workspace again after the command and keeps each file that differs as a
    /// not-restorable checkpoint of `call_id`; how many files those are.
    pub(super) async fn keep_changes(
        self,
        store: &Store,
        session_id: &str,
        call_id: &str,
    ) -> Result<usize, String> {
        let after = walk_off_thread(self.root.clone()).await?;
        let changed = differences(&self.files, &after);
        for path in &changed {
            store
                .keep_unrestorable(session_id, call_id, path)
                .map_err(|e| format!("cannot list {path}: {e}"))?;
        }
        Ok(changed.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn the_walk_honours_gitignore_includes_hidden_files_and_skips_git() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join(".gitignore"), "*.log\nbuild/\n").unwrap();
        std::fs::write(root.join(".hidden"), "h").unwrap();
        std::fs::write(root.join("a.txt"), "a").unwrap();
        std::fs::write(root.join("x.log"), "log").unwrap();
        std::fs::create_dir_all(root.join("build")).unwrap();
        std::fs::write(root.join("build/out"), "o").unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::write(root.join(".git/HEAD"), "ref").unwrap();
        std::fs::create_dir_all(root.join("sub/deeper")).unwrap();
        std::fs::write(root.join("sub/deeper/b.txt"), "bb").unwrap();
        let files: Vec<(String, u64)> = walk(root)
            .into_iter()
            .map(|(path, stamp)| (path, stamp.len))
            .collect();
        assert_eq!(
            files,
            vec![
                (".gitignore".to_string(), 13),
                (".hidden".to_string(), 1),
                ("a.txt".to_string(), 1),
                ("sub/deeper/b.txt".to_string(), 2),
            ]
        );
    }

    #[test]
    fn differences_are_changed_created_and_removed_files() {
        let stamp = |len| Stamp {
            len,
            modified: None,
        };
        let before = BTreeMap::from([
            ("same".to_string(), stamp(1)),
            ("changed".to_string(), stamp(1)),
            ("removed".to_string(), stamp(1)),
        ]);
        let after = BTreeMap::from([
            ("same".to_string(), stamp(1)),
            ("changed".to_string(), stamp(2)),
            ("created".to_string(), stamp(1)),
        ]);
        assert_eq!(
            differences(&before, &after),
            vec!["changed", "created", "removed"]
        );
    }
}
