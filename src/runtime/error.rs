//! What the runtime answers when a request cannot be done. Each variant says what went wrong in
//! words a user can act on; the RPC layer maps it to a JSON-RPC error code
//! (`rpc::error`), and ACP to its own.

use crate::store::StoreError;

/// Why a request to the runtime failed; the RPC layer maps each to a JSON-RPC error code.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("no session with id {0:?}")]
    SessionNotFound(String),
    #[error("invalid params: {0}")]
    InvalidParams(String),
    #[error(
        "session {session_id} is busy with run {run_id}; wait for runFinished or send chat/stop"
    )]
    Busy { session_id: String, run_id: String },
    /// Another daemon on the same database drives the session's run.
    #[error(
        "session {session_id} is busy with run {run_id} in {owner}; wait for it to finish there, or send chat/stop"
    )]
    RunElsewhere {
        session_id: String,
        run_id: String,
        owner: String,
    },
    #[error("no {what} with id {id:?}")]
    NotFound { what: &'static str, id: String },
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Provider(String),
    #[error("{0}")]
    BudgetExhausted(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A run waiting for an approval was left suspended by a shutdown.
    #[error("the run was suspended by a shutdown")]
    Suspended,
    #[error("internal error: {0}")]
    Internal(String),
}

impl RuntimeError {
    /// Maps a registry refusal (the run already there) to `Busy` for `session_id`.
    pub fn busy(session_id: &str) -> impl FnOnce(String) -> RuntimeError + '_ {
        move |run_id| RuntimeError::Busy {
            session_id: session_id.to_string(),
            run_id,
        }
    }
}

impl RuntimeError {
    /// The refusal that names the daemon holding `lease`.
    pub fn elsewhere(lease: &crate::store::LeaseRow) -> RuntimeError {
        RuntimeError::RunElsewhere {
            session_id: lease.session_id.clone(),
            run_id: lease.run_id.clone(),
            owner: lease.describe_owner(),
        }
    }
}

pub type RuntimeResult<T> = Result<T, RuntimeError>;
