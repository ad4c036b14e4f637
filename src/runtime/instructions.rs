//! Finding and reading a session's instruction files: the user's AGENTS.md, then each folder's
//! from the top of the workspace's git work tree down to the workspace root.
//!
//! Files are kept as read, by path, with their size and modification time; a file is read
//! again only when either changed, so the check each request makes is a few `stat` calls.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use super::{Inner, RuntimeResult};
use crate::context::instructions::{Assembled, Source, assemble};
use crate::protocol::NoticeLevel;
use crate::store::SessionRow;
use crate::util::lock;

/// The file read in a folder, and the one read instead when it is missing.
const NAMES: [&str; 2] = ["AGENTS.md", "CLAUDE.md"];

/// A file as last read.
struct Read {
    len: u64,
    modified: Option<SystemTime>,
    text: Option<Arc<str>>,
}

/// Instruction files as last read, and the notices each session was last given.
#[derive(Default)]
pub struct InstructionFiles {
    read: Mutex<HashMap<PathBuf, Read>>,
    /// Per session, the notices given for its instructions; given again only when they change.
    told: Mutex<HashMap<String, Vec<String>>>,
}

impl InstructionFiles {
    /// The file's text, read again only when its size or modification time changed; `None`
    /// when it is not there (or not a file).
    fn source(&self, path: &Path) -> Option<Source> {
        let meta = std::fs::metadata(path).ok().filter(|m| m.is_file())?;
        let (len, modified) = (meta.len(), meta.modified().ok());
        if let Some(read) = lock(&self.read).get(path)
            && read.len == len
            && read.modified == modified
        {
            return Some(Source {
                path: path.to_path_buf(),
                text: read.text.clone(),
            });
        }
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot read an instruction file");
                return None;
            }
        };
        let text: Option<Arc<str>> = String::from_utf8(bytes).ok().map(Arc::from);
        lock(&self.read).insert(
            path.to_path_buf(),
            Read {
                len,
                modified,
                text: text.clone(),
            },
        );
        Some(Source {
            path: path.to_path_buf(),
            text,
        })
    }

    /// The first of [`NAMES`] there is in `folder`.
    fn in_folder(&self, folder: &Path) -> Option<Source> {
        NAMES
            .iter()
            .find_map(|name| self.source(&folder.join(name)))
    }
}

/// The folders whose instructions apply to `root`, outermost first: from the top of its git
/// work tree (the nearest folder holding `.git`) down to it, or `root` alone outside git.
pub fn levels(root: &Path) -> Vec<PathBuf> {
    let top = root.ancestors().find(|dir| dir.join(".git").exists());
    match top {
        Some(top) => {
            let mut folders: Vec<PathBuf> = root
                .ancestors()
                .take_while(|dir| *dir != top)
                .map(Path::to_path_buf)
                .collect();
            folders.push(top.to_path_buf());
            folders.reverse();
            folders
        }
        None => vec![root.to_path_buf()],
    }
}

impl Inner {
    /// The instructions the session's next request carries.
    pub(super) fn instructions(&self, session: &SessionRow) -> Assembled {
        let settings = self.config.instructions;
        if !settings.enabled {
            return Assembled::default();
        }
        let files = &self.instruction_files;
        let mut sources = Vec::new();
        if let Some(dir) = &self.config.user_dir {
            sources.extend(files.source(&dir.join(NAMES[0])));
        }
        if let Some(root) = &session.workspace_root {
            for folder in levels(Path::new(root)) {
                sources.extend(files.in_folder(&folder));
            }
        }
        assemble(&sources, settings.max_bytes)
    }

    /// Tells the session what its instructions' notices say, once for each new set of them.
    pub(super) fn tell_instruction_notices(
        &self,
        session_id: &str,
        run_id: Option<&str>,
        instructions: &Assembled,
    ) -> RuntimeResult<()> {
        {
            let mut told = lock(&self.instruction_files.told);
            let before = told.get(session_id).map(Vec::as_slice).unwrap_or_default();
            if before == instructions.notices.as_slice() {
                return Ok(());
            }
            told.insert(session_id.to_string(), instructions.notices.clone());
        }
        for notice in &instructions.notices {
            self.notice(session_id, run_id, NoticeLevel::Warning, notice.clone())?;
        }
        Ok(())
    }

    /// The `/instructions` note: the files in force and what was skipped or cut.
    pub(super) fn describe_instructions(&self, session: &SessionRow) -> String {
        if !self.config.instructions.enabled {
            return "Instructions are off ([instructions] enabled = false in the config file)."
                .to_string();
        }
        let instructions = self.instructions(session);
        let mut lines = match instructions.files.is_empty() {
            true => vec![format!(
                "No instruction files. sidechat reads {} in each folder from the top of the git work tree down to the workspace root ({} where there is none), and your own {}.",
                NAMES[0],
                NAMES[1],
                self.config
                    .user_dir
                    .as_ref()
                    .map(|d| d.join(NAMES[0]).display().to_string())
                    .unwrap_or_else(|| "$XDG_CONFIG_HOME/sidechat/AGENTS.md".into())
            )],
            false => {
                let mut lines =
                    vec!["Instructions sent with every request, in this order:".to_string()];
                lines.extend(
                    instructions
                        .files
                        .iter()
                        .map(|f| format!("  {} ({} bytes)", f.path, f.bytes)),
                );
                lines
            }
        };
        lines.extend(instructions.notices.iter().map(|n| format!("  {n}")));
        lines.join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn levels_run_from_the_git_top_down_to_the_workspace() {
        let dir = tempfile::tempdir().unwrap();
        let top = dir.path().join("repo");
        let root = top.join("a/b");
        std::fs::create_dir_all(&root).unwrap();
        assert_eq!(levels(&root), vec![root.clone()], "outside git");
        std::fs::create_dir(top.join(".git")).unwrap();
        assert_eq!(
            levels(&root),
            vec![top.clone(), top.join("a"), root.clone()]
        );
        assert_eq!(levels(&top), vec![top.clone()]);
    }

    #[test]
    fn a_file_is_read_again_only_when_it_changed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("AGENTS.md");
        std::fs::write(&path, "one").unwrap();
        let files = InstructionFiles::default();
        let text = |files: &InstructionFiles| {
            files
                .source(&path)
                .and_then(|s| s.text)
                .map(|t| t.to_string())
        };
        assert_eq!(text(&files), Some("one".to_string()));
        // Kept as read while size and time are unchanged.
        lock(&files.read).get_mut(&path).unwrap().text = Some("kept".into());
        assert_eq!(text(&files), Some("kept".to_string()));
        std::fs::write(&path, "three").unwrap();
        assert_eq!(text(&files), Some("three".to_string()));
        std::fs::write(&path, [0xff, 0xfe]).unwrap();
        assert_eq!(files.source(&path).map(|s| s.text), Some(None));
        std::fs::remove_file(&path).unwrap();
        assert_eq!(files.source(&path), None);
    }
}
