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
//! Outside a git work tree, or in one with more files than `MAX_FILES`, nothing is kept: the
//! second case is said once per workspace, as a note the session's model and user read.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;

use tokio::io::AsyncWriteExt;

use crate::lifetime::reaper;
use crate::store::{NewCheckpoint, Store};

/// A workspace with more files than this is not snapshotted: adding them all before each
/// command would cost more than the command.
pub const MAX_FILES: usize = 50_000;

/// The tree git names for an empty folder (SHA-1 object format).
const EMPTY_TREE: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";

/// Where snapshots are kept, and the workspaces found too large to snapshot.
pub(super) struct CommandSnapshots {
    /// `None` for a database in memory: nothing is snapshotted.
    dir: Option<PathBuf>,
    too_large: Mutex<HashSet<PathBuf>>,
}

/// A workspace's tree before a command, to compare the tree after it with.
pub(super) struct Before {
    repo: Repo,
    tree: String,
}

/// What taking the snapshot before a command found.
pub(super) enum Taken {
    Snapshot(Before),
    /// Outside a git work tree, or git is missing or failed: nothing to compare.
    Nothing,
    /// More files than [`MAX_FILES`]; `true` the first time for this workspace.
    TooLarge {
        first: bool,
    },
}

/// The private object store for one work tree, and where in it the workspace is.
#[derive(Clone)]
struct Repo {
    git_dir: PathBuf,
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
    /// Snapshots kept in `dir` (beside the database); `None`: none are taken.
    pub(super) fn new(dir: Option<PathBuf>) -> Self {
        Self {
            dir,
            too_large: Mutex::default(),
        }
    }

    /// The private store for the work tree `workspace` is in, created when missing; `None`
    /// outside a work tree.
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
        let git_dir = dir.join(&name[..16]);
        if !git_dir.join("HEAD").exists() {
            if let Err(e) = crate::private_files::create_dir_all(dir) {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot create the command snapshots' folder");
                return None;
            }
            let mut init = git_command(workspace);
            init.args(["init", "--quiet", "--bare"]).arg(&git_dir);
            if let Err(e) = output(init, None).await {
                tracing::warn!(error = %e, "cannot create a command snapshot store");
                return None;
            }
        }
        Some(Repo {
            git_dir,
            top,
            workspace: workspace.to_path_buf(),
            prefix: String::from_utf8_lossy(&prefix).trim().to_string(),
        })
    }

    /// The snapshot before a command runs in `workspace`.
    pub(super) async fn before(&self, workspace: &Path) -> Taken {
        if crate::util::lock(&self.too_large).contains(workspace) {
            return Taken::TooLarge { first: false };
        }
        let Some(repo) = self.repo(workspace).await else {
            return Taken::Nothing;
        };
        // The count is taken while the index is new: later snapshots add only what changed.
        if !repo.git_dir.join("index").exists() {
            match repo.untracked_count(MAX_FILES).await {
                Ok(n) if n > MAX_FILES => {
                    crate::util::lock(&self.too_large).insert(workspace.to_path_buf());
                    return Taken::TooLarge { first: true };
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "cannot count the workspace's files");
                    return Taken::Nothing;
                }
            }
        }
        match repo.tree().await {
            Ok(tree) => Taken::Snapshot(Before { repo, tree }),
            Err(e) => {
                tracing::warn!(workspace = %workspace.display(), error = %e, "cannot snapshot the workspace before a command");
                Taken::Nothing
            }
        }
    }
}

impl Before {
    /// Takes the snapshot after the command and keeps each file it changed as a checkpoint of
    /// `call_id`, as if a file tool had changed it; how many files those are.
    pub(super) async fn keep_changes(
        self,
        store: &Store,
        session_id: &str,
        call_id: &str,
    ) -> Result<usize, String> {
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
