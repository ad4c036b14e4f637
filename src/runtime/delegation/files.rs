//! The files a session's delegated tasks changed are the session's changes too: its
//! `changedFiles` lists them (marked with the child session) and `session/fileDiff` serves
//! them, so a client sees everything its request led to, whoever wrote it.

use crate::protocol::ChangedFile;
use crate::store::FileDiffRow;

use super::super::{Inner, RuntimeError, RuntimeResult};

impl Inner {
    /// The session's own changed files, then each child's (marked with its id), by path.
    pub(in crate::runtime) fn changed_files_with_children(
        &self,
        session_id: &str,
    ) -> RuntimeResult<Vec<ChangedFile>> {
        let mut files = self.store.changed_files(session_id)?;
        for child in self.store.delegations_of_parent(session_id)? {
            files.extend(
                self.store
                    .changed_files(&child.child_id)?
                    .into_iter()
                    .map(|file| ChangedFile {
                        child_session_id: Some(child.child_id.clone()),
                        ..file
                    }),
            );
        }
        // Stable: a path's own entry first, then its children's in the order they were made.
        files.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(files)
    }

    /// The change to `path` by the session itself (`child` absent) or by its child `child`;
    /// without `child`, a path only children changed is served from the newest such child.
    /// Returns whose change it is along with it.
    pub(in crate::runtime) fn file_diff_with_children(
        &self,
        session_id: &str,
        path: &str,
        child: Option<&str>,
    ) -> RuntimeResult<(Option<String>, FileDiffRow)> {
        let not_found = || RuntimeError::NotFound {
            what: "changed file",
            id: path.to_string(),
        };
        let children = self.store.delegations_of_parent(session_id)?;
        if let Some(child) = child {
            if !children.iter().any(|c| c.child_id == child) {
                return Err(RuntimeError::NotFound {
                    what: "delegated task of this session",
                    id: child.to_string(),
                });
            }
            let diff = self.store.file_diff(child, path)?.ok_or_else(not_found)?;
            return Ok((Some(child.to_string()), diff));
        }
        if let Some(diff) = self.store.file_diff(session_id, path)? {
            return Ok((None, diff));
        }
        for child in children.iter().rev() {
            if let Some(diff) = self.store.file_diff(&child.child_id, path)? {
                return Ok((Some(child.child_id.clone()), diff));
            }
        }
        Err(not_found())
    }
}
