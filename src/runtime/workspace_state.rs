//! Where the work stands in a git work tree, read for the end of a carry-over note: the branch,
//! the last commit and the uncommitted files.
//!
//! Read with the `git` command line, read-only: no optional locks (so `git status` does not
//! refresh the index), no fsmonitor (a repository's config must not run a command of its
//! choosing), no prompt, and a time limit after which the child is killed and nothing is
//! added. Outside a work tree, or without `git`, nothing is added either.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use crate::context::carry_over::WorkspaceState;
use crate::lifetime::reaper;

/// How long reading the state may take, all commands together.
const TIME_LIMIT: Duration = Duration::from_secs(3);

/// The state of the work tree at `root`, if it is in one.
pub async fn read(root: &Path) -> Option<WorkspaceState> {
    match tokio::time::timeout(TIME_LIMIT, read_all(root)).await {
        Ok(state) => state,
        Err(_) => {
            tracing::warn!(root = %root.display(), "reading the git state took too long; the note has none");
            None
        }
    }
}

async fn read_all(root: &Path) -> Option<WorkspaceState> {
    if git(root, &["rev-parse", "--is-inside-work-tree"])
        .await?
        .trim()
        != "true"
    {
        return None;
    }
    // `symbolic-ref` names the branch even before its first commit; it fails when detached.
    let branch = git(root, &["symbolic-ref", "--short", "-q", "HEAD"])
        .await
        .map(|b| b.trim().to_string())
        .filter(|b| !b.is_empty());
    let last_commit = git(root, &["log", "-1", "--format=%h %s"])
        .await
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty());
    let status = git(root, &["status", "--porcelain", "-z"]).await?;
    Some(WorkspaceState {
        branch,
        last_commit,
        uncommitted: porcelain_paths(&status),
    })
}

/// The paths of `git status --porcelain -z`: `XY path`, NUL-ended, and for a rename or a
/// copy the original path after it, which is skipped.
pub fn porcelain_paths(status: &str) -> Vec<String> {
    let mut paths = Vec::new();
    let mut records = status.split('\0').filter(|r| !r.is_empty());
    while let Some(record) = records.next() {
        let (Some(code), Some(path)) = (record.get(..2), record.get(3..)) else {
            continue;
        };
        paths.push(path.to_string());
        if code.contains('R') || code.contains('C') {
            records.next();
        }
    }
    paths
}

/// One read-only `git` command's output in `root`; `None` when it fails.
/// Spawned through [`reaper::spawn`]: the daemon reaps every child it did not record, and a
/// `git` it reaped first would read as a failure.
async fn git(root: &Path, args: &[&str]) -> Option<String> {
    let mut command = tokio::process::Command::new("git");
    command
        .arg("--no-optional-locks")
        .args(["-c", "core.fsmonitor=false", "-c", "core.quotepath=false"])
        .arg("-C")
        .arg(root)
        .args(args)
        .env("GIT_OPTIONAL_LOCKS", "0")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let output = reaper::spawn(&mut command)
        .ok()?
        .wait_with_output()
        .await
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn porcelain_paths_skip_a_renames_origin() {
        let status = " M src/a.rs\0R  new name.rs\0old name.rs\0?? notes/\0A  b.rs\0";
        assert_eq!(
            porcelain_paths(status),
            vec!["src/a.rs", "new name.rs", "notes/", "b.rs"]
        );
        assert_eq!(porcelain_paths(""), Vec::<String>::new());
    }

    #[tokio::test]
    async fn outside_a_work_tree_there_is_nothing() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path()).await, None);
    }
}
