//! `workspace/files`: the session's workspace files ranked for `@` completion.

use super::{Runtime, RuntimeError, RuntimeResult};
use crate::protocol::{MAX_WORKSPACE_FILES_LIMIT, WorkspaceFilesParams, WorkspaceFilesResult};

/// How many files an answer holds when the client does not say.
const DEFAULT_LIMIT: u32 = 50;

impl Runtime {
    /// The files of the session's workspace that best match `query`. The list is kept per
    /// workspace and listed again only when it changed (see [`crate::mentions::FileIndex`]).
    pub async fn list_workspace_files(
        &self,
        params: WorkspaceFilesParams,
    ) -> RuntimeResult<WorkspaceFilesResult> {
        let limit = params.limit.unwrap_or(DEFAULT_LIMIT);
        if limit > MAX_WORKSPACE_FILES_LIMIT {
            return Err(RuntimeError::InvalidParams(format!(
                "limit: {limit} is more than the {MAX_WORKSPACE_FILES_LIMIT} files an answer holds"
            )));
        }
        let session = self.session_row(&params.session_id)?;
        let Some(root) = session.workspace_root else {
            return Err(RuntimeError::InvalidParams(format!(
                "sessionId: session {} has no workspace, so it has no files to list",
                session.id
            )));
        };
        let index = self.inner.workspace_files.clone();
        let query = params.query;
        let files = tokio::task::spawn_blocking(move || {
            let files = index.files(std::path::Path::new(&root));
            crate::mentions::rank(&files, &query, limit as usize)
        })
        .await
        .map_err(|e| RuntimeError::Internal(format!("listing the workspace failed: {e}")))?;
        Ok(WorkspaceFilesResult {
            session_id: session.id,
            files,
        })
    }
}
