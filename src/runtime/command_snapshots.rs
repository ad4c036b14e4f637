//! Snapshots of a git work tree around each `run_command`, so that a rewind puts back the
//! files a command changed.
//!
//! Before a command runs, the workspace's files (tracked ones and untracked ones that are not
//! ignored) are added to an index and an object store of sidechat's own, beside the database
//! (`git` with `GIT_DIR`, `GIT_INDEX_FILE` and `GIT_WORK_TREE` set): the user's `.git`, index,
//! refs and stash are never touched. After it, the same again; the two trees' differences are
//! kept as checkpoints of the call, as a file tool's change would be. The index stays between
//! snapshots, so a snapshot reads only the files whose size or time changed.
//!
//! Outside a git work tree, or in one with more files than `[undo] max_snapshot_files` not yet
//! in the private index, the files a command changed are found by a scan of sizes and times
//! instead ([`super::command_scan`]) and kept marked not restorable; a work tree over the cap
//! is said once per session, as a notice the session's model and user read.
//!
//! Sessions and daemons running commands in one work tree at once share its private index and
//! objects: each snapshot holds an OS lock on a file beside them (`<store>.lock`) while it uses
//! them, so no two write the index at once. A command's snapshot after it may also see what a
//! command running meanwhile changed: a change another call has kept since the snapshot before
//! (same path, same content after) is that call's, and is left out.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;

use tokio::io::AsyncWriteExt;

use super::command_scan::Listing;
use crate::lifetime::reaper;
use crate::store::{NewCheckpoint, Store};

/// The tree git names for an empty folder (SHA-1 object format).
const EMPTY_TREE: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";

/// Where snapshots are kept, and the workspaces found too large to snapshot.
pub(super) struct CommandSnapshots {
    /// `None` for a database in memory: nothing is snapshotted in git.
    dir: Option<PathBuf>,
    /// `[undo] max_snapshot_files`.
    max_files: usize,
    too_large: Mutex<HashSet<PathBuf>>,
    /// The sessions told that their workspace is too large, with the workspace: told once.
    told: Mutex<HashSet<(String, PathBuf)>>,
}

/// A workspace before a command, to compare it after the command with.
pub(super) enum Before {
    /// Its tree in the private store: what changed is kept and restorable.
    Git(GitBefore),
    /// Its files' sizes and times: what changed is listed, not restorable.
    Scan(Listing),
}

/// A work tree's tree before a command.
pub(super) struct GitBefore {
    repo: Repo,
    tree: String,
    /// The newest checkpoint then: changes kept after it by other calls are theirs.
    watermark: i64,
}

/// What looking at the workspace before a command found.
pub(super) struct Taken {
    /// `None` when nothing can be compared (git failed, the scan failed).
    pub before: Option<Before>,
    /// The work tree has more files than the cap, and this session has not been told yet.
    pub tell_too_large: bool,
}

/// The private object store for one work tree, and where in it the workspace is.
#[derive(Clone)]
struct Repo {
    git_dir: PathBuf,
    /// The lock file serialising the snapshots of this work tree, beside `git_dir`.
    lock: PathBuf,
    top: PathBuf,
    workspace: PathBuf,
    /// The workspace relative to the top of the work tree, `""` or ending with `/`.
    prefix: String,
}

impl Repo {
    /// A `git` command in the private store, run in the workspace.
    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut command = git_command(&self.workspace);
        command
            .env("GIT_DIR", &self.git_dir)
            .env("GIT_WORK_TREE", &self.top)
            .env("GIT_INDEX_FILE", self.git_dir.join("index"))
            .args(args);
        command
    }

    async fn run(&self, args: &[&str], input: Option<Vec<u8>>) -> Result<Vec<u8>, String> {
        output(self.command(args), input).await
    }

    /// Adds the workspace's files to the private index and writes its tree.
    async fn tree(&self) -> Result<String, String> {
        self.run(&["add", "--all", "--ignore-errors", "--", "."], None)
            .await?;
        let tree = match self.prefix.is_empty() {
            true => self.run(&["write-tree"], None).await,
            false => {
                self.run(&["write-tree", &format!("--prefix={}", self.prefix)], None)
                    .await
            }
        };
        match tree {
            Ok(tree) => Ok(String::from_utf8_lossy(&tree).trim().to_string()),
            // `--prefix` names no tree when the workspace has no file.
            Err(_) if !self.prefix.is_empty() => Ok(EMPTY_TREE.to_string()),
            Err(e) => Err(e),
        }
    }

    /// How many files the workspace has that the index does not hold yet, up to `cap + 1`.
    async fn untracked_count(&self, cap: usize) -> Result<usize, String> {
        let listed = self
            .run(
                &[
                    "ls-files",
                    "--others",
                    "--exclude-standard",
                    "-z",
                    "--",
                    ".",
                ],
                None,
            )
            .await?;
        Ok(listed.iter().filter(|b| **b == 0).take(cap + 1).count())
    }
}

/// `git` run read-only with respect to the user's repository unless told otherwise: no
/// optional locks, no fsmonitor (a repository's config must not run a command of its choosing),
/// no prompt, no line-ending conversion (the bytes are what is put back).
fn git_command(cwd: &Path) -> tokio::process::Command {
    let mut command = tokio::process::Command::new("git");
    command
        .arg("--no-optional-locks")
        .args(["-c", "core.fsmonitor=false", "-c", "core.autocrlf=false"])
        .args(["-c", "core.safecrlf=false", "-c", "core.quotepath=false"])
        .current_dir(cwd)
        .env("GIT_OPTIONAL_LOCKS", "0")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE")
        .env_remove("GIT_OBJECT_DIRECTORY")
        .env_remove("GIT_ALTERNATE_OBJECT_DIRECTORIES")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// Runs `command` (through the reaper, which reaps every child the daemon did not record),
/// feeding it `input`; its standard output, or why it failed.
async fn output(
    mut command: tokio::process::Command,
    input: Option<Vec<u8>>,
) -> Result<Vec<u8>, String> {
    if input.is_some() {
        command.stdin(Stdio::piped());
    }
    let mut child = reaper::spawn(&mut command).map_err(|e| format!("cannot run git: {e}"))?;
    if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
        // Written while the output is read, so a large answer cannot block the writer.
        tokio::spawn(async move {
            let _ = stdin.write_all(&input).await;
        });
    }
    let out = child
        .wait_with_output()
        .await
        .map_err(|e| format!("git failed: {e}"))?;
    match out.status.success() {
        true => Ok(out.stdout),
        false => Err(format!(
            "git failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
    }
}

/// Takes the OS lock on `path` (created 0600 when missing), waiting while another snapshot
/// (of this daemon or another) holds it; released when the file is dropped.
async fn lock_tree(path: &Path) -> Result<std::fs::File, String> {
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let file = crate::private_files::open_append(&path)
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        file.lock()
            .map_err(|e| format!("cannot lock {}: {e}", path.display()))?;
        Ok(file)
    })
    .await
    .map_err(|e| format!("the lock of the snapshots failed: {e}"))?
}

/// One file the two trees differ in.
#[derive(Debug, Clone, PartialEq)]
struct Changed {
    path: String,
    /// Mode and object before; `None`: the file did not exist.
    before: Option<(u32, String)>,
    /// Object after; `None`: the file was removed.
    after: Option<String>,
}

/// The records of `git diff-tree -r -z --no-renames`: `:old new oldsha newsha status\0path\0`.
/// Symbolic links and submodules are left out: only regular files are put back.
fn parse_diff(raw: &[u8]) -> Vec<Changed> {
    let mut changed = Vec::new();
    let mut fields = raw.split(|b| *b == 0);
    while let (Some(head), Some(path)) = (fields.next(), fields.next()) {
        let head = String::from_utf8_lossy(head);
        let parts: Vec<&str> = head.trim_start_matches(':').split(' ').collect();
        let [old_mode, new_mode, old_sha, new_sha, _status] = parts[..] else {
            continue;
        };
        let regular = |mode: &str| matches!(mode, "100644" | "100755");
        let absent = |mode: &str| mode == "000000";
        if !(regular(old_mode) || absent(old_mode)) || !(regular(new_mode) || absent(new_mode)) {
            continue;
        }
        let mode = |m: &str| match m {
            "100755" => 0o755,
            _ => 0o644,
        };
        changed.push(Changed {
            path: String::from_utf8_lossy(path).into_owned(),
            before: (!absent(old_mode)).then(|| (mode(old_mode), old_sha.to_string())),
            after: (!absent(new_mode)).then(|| new_sha.to_string()),
        });
    }
    changed
}

/// The contents of `objects` from `git cat-file --batch`, in order.
async fn read_objects(repo: &Repo, objects: &[&str]) -> Result<Vec<Vec<u8>>, String> {
    if objects.is_empty() {
        return Ok(Vec::new());
    }
    let input: String = objects.iter().map(|o| format!("{o}\n")).collect();
    let raw = repo
        .run(&["cat-file", "--batch"], Some(input.into_bytes()))
        .await?;
    let mut contents = Vec::with_capacity(objects.len());
    let mut at = 0;
    for object in objects {
        let end = raw[at..]
            .iter()
            .position(|b| *b == b'\n')
            .map(|p| at + p)
            .ok_or_else(|| format!("git's answer for {object} is cut short"))?;
        let header = String::from_utf8_lossy(&raw[at..end]).into_owned();
        let size: usize = header
            .rsplit(' ')
            .next()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("git cannot read {object}: {header}"))?;
        let start = end + 1;
        let content = raw
            .get(start..start + size)
            .ok_or_else(|| format!("git's answer for {object} is cut short"))?;
        contents.push(content.to_vec());
        at = start + size + 1;
    }
    Ok(contents)
}

impl CommandSnapshots {
    /// Snapshots kept in `dir` (beside the database), of work trees with at most `max_files`
    /// files to add; `None`: none are taken in git.
    pub(super) fn new(dir: Option<PathBuf>, max_files: usize) -> Self {
        Self {
            dir,
            max_files,
            too_large: Mutex::default(),
            told: Mutex::default(),
        }
    }

    /// The private store for the work tree `workspace` is in; `None` outside a work tree.
    /// The store itself is created under its lock, by [`Self::snapshot`].
    async fn repo(&self, workspace: &Path) -> Option<Repo> {
        let dir = self.dir.as_ref()?;
        let read = |args: &[&str]| {
            let mut command = git_command(workspace);
            command.args(args);
            output(command, None)
        };
        let inside = read(&["rev-parse", "--is-inside-work-tree"]).await.ok()?;
        if String::from_utf8_lossy(&inside).trim() != "true" {
            return None;
        }
        let top = read(&["rev-parse", "--show-toplevel"]).await.ok()?;
        let prefix = read(&["rev-parse", "--show-prefix"]).await.ok()?;
        let top = PathBuf::from(String::from_utf8_lossy(&top).trim());
        let name = crate::store::content_hash(top.as_os_str().as_encoded_bytes());
        if let Err(e) = crate::private_files::create_dir_all(dir) {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot create the command snapshots' folder");
            return None;
        }
        Some(Repo {
            git_dir: dir.join(&name[..16]),
            lock: dir.join(format!("{}.lock", &name[..16])),
            top,
            workspace: workspace.to_path_buf(),
            prefix: String::from_utf8_lossy(&prefix).trim().to_string(),
        })
    }

    /// Looks at `workspace` before a command of `session_id` runs there: its snapshot in
    /// git, or else the scan of its files.
    pub(super) async fn before(&self, store: &Store, session_id: &str, workspace: &Path) -> Taken {
        let too_large = crate::util::lock(&self.too_large).contains(workspace);
        let git = match too_large {
            true => Git::TooLarge,
            false => match self.repo(workspace).await {
                Some(repo) => self.snapshot(store, repo).await,
                None => Git::Outside,
            },
        };
        let tell_too_large = matches!(git, Git::TooLarge)
            && crate::util::lock(&self.told)
                .insert((session_id.to_string(), workspace.to_path_buf()));
        let before = match git {
            Git::Snapshot(before) => Some(Before::Git(before)),
            Git::Failed => None,
            Git::Outside | Git::TooLarge => match Listing::take(workspace).await {
                Ok(listing) => Some(Before::Scan(listing)),
                Err(e) => {
                    tracing::warn!(workspace = %workspace.display(), error = %e, "cannot scan the workspace before a command");
                    None
                }
            },
        };
        Taken {
            before,
            tell_too_large,
        }
    }

    /// The snapshot in git before a command, under the work tree's lock: the store created
    /// when missing, and the work tree counted while its index is new (later snapshots add
    /// only what changed).
    async fn snapshot(&self, store: &Store, repo: Repo) -> Git {
        let workspace = repo.workspace.clone();
        let failed = |what: &str, e: String| {
            tracing::warn!(workspace = %workspace.display(), error = %e, "{what}");
            Git::Failed
        };
        let _held = match lock_tree(&repo.lock).await {
            Ok(held) => held,
            Err(e) => return failed("cannot lock the command snapshots", e),
        };
        if !repo.git_dir.join("HEAD").exists() {
            let mut init = git_command(&repo.workspace);
            init.args(["init", "--quiet", "--bare"]).arg(&repo.git_dir);
            if let Err(e) = output(init, None).await {
                return failed("cannot create a command snapshot store", e);
            }
        }
        if !repo.git_dir.join("index").exists() {
            match repo.untracked_count(self.max_files).await {
                Ok(n) if n > self.max_files => {
                    crate::util::lock(&self.too_large).insert(repo.workspace.clone());
                    return Git::TooLarge;
                }
                Ok(_) => {}
                Err(e) => return failed("cannot count the workspace's files", e),
            }
        }
        let watermark = match store.checkpoint_watermark() {
            Ok(watermark) => watermark,
            Err(e) => return failed("cannot read the checkpoints", e.to_string()),
        };
        match repo.tree().await {
            Ok(tree) => Git::Snapshot(GitBefore {
                repo,
                tree,
                watermark,
            }),
            Err(e) => failed("cannot snapshot the workspace before a command", e),
        }
    }
}

/// What the snapshot in git before a command came to.
enum Git {
    Snapshot(GitBefore),
    /// Not in a git work tree (or git is missing): the scan stands in.
    Outside,
    /// More files than the cap: the scan stands in.
    TooLarge,
    /// Git failed: nothing is kept (said in the log).
    Failed,
}

impl Before {
    /// Looks at the workspace again after the command and keeps each file it changed as a
    /// checkpoint of `call_id`: restorable from a snapshot in git, listed as not restorable
    /// from a scan. How many files those are.
    pub(super) async fn keep_changes(
        self,
        store: &Store,
        session_id: &str,
        call_id: &str,
    ) -> Result<usize, String> {
        match self {
            Before::Git(before) => before.keep_changes(store, session_id, call_id).await,
            Before::Scan(listing) => listing.keep_changes(store, session_id, call_id).await,
        }
    }
}

impl GitBefore {
    /// Takes the snapshot after the command and keeps each file it changed, and no other
    /// call kept since, as a checkpoint of `call_id`, as if a file tool had changed it; how
    /// many files those are. The work tree's lock is held throughout, so a snapshot of another
    /// command after this one sees the checkpoints kept here.
    async fn keep_changes(
        self,
        store: &Store,
        session_id: &str,
        call_id: &str,
    ) -> Result<usize, String> {
        let _held = lock_tree(&self.repo.lock).await?;
        let after = self.repo.tree().await?;
        if after == self.tree {
            return Ok(0);
        }
        let raw = self
            .repo
            .run(
                &["diff-tree", "-r", "-z", "--no-renames", &self.tree, &after],
                None,
            )
            .await?;
        let changed = parse_diff(&raw);
        let mut objects: Vec<&str> = Vec::new();
        for file in &changed {
            if let Some((_, sha)) = &file.before {
                objects.push(sha);
            }
            if let Some(sha) = &file.after {
                objects.push(sha);
            }
        }
        // One content per object asked for, in order (else `read_objects` fails).
        let mut contents = read_objects(&self.repo, &objects).await?.into_iter();
        let mut next = || {
            contents
                .next()
                .ok_or_else(|| "git answered fewer objects than asked for".to_string())
        };
        let mut kept = 0;
        for file in &changed {
            let before = match &file.before {
                Some((mode, _)) => Some((next()?, *mode)),
                None => None,
            };
            let after = match &file.after {
                Some(_) => Some(next()?),
                None => None,
            };
            let after_hash = after.as_deref().map(crate::store::content_hash);
            let theirs = store
                .kept_by_another_call(
                    session_id,
                    call_id,
                    self.watermark,
                    &file.path,
                    after_hash.as_deref(),
                )
                .map_err(|e| format!("cannot read the checkpoints: {e}"))?;
            if theirs {
                continue;
            }
            store
                .keep_checkpoint(&NewCheckpoint {
                    session_id,
                    call_id,
                    path: &file.path,
                    before: before.as_ref().map(|(b, m)| (b.as_slice(), *m)),
                    after: after.as_deref(),
                })
                .map_err(|e| format!("cannot keep {}: {e}", file.path))?;
            kept += 1;
        }
        Ok(kept)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn a_diff_names_regular_files_and_leaves_links_out() {
        let raw = b":100644 100755 aaa bbb M\0run.sh\0:000000 100644 000 ccc A\0new file.txt\0:100644 000000 ddd 000 D\0gone.txt\0:000000 120000 000 eee A\0link\0";
        assert_eq!(
            parse_diff(raw),
            vec![
                Changed {
                    path: "run.sh".into(),
                    before: Some((0o644, "aaa".into())),
                    after: Some("bbb".into()),
                },
                Changed {
                    path: "new file.txt".into(),
                    before: None,
                    after: Some("ccc".into()),
                },
                Changed {
                    path: "gone.txt".into(),
                    before: Some((0o644, "ddd".into())),
                    after: None,
                },
            ]
        );
    }
}
