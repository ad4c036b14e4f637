//! `serve.json`: how a client on this machine finds a listening daemon and proves it may
//! connect. It holds the URL and the daemon's token, so it is readable by its owner only
//! (0600, in a 0700 folder), in `$XDG_RUNTIME_DIR/sidechat/` (a per-login tmpfs the system
//! empties at logout) or, without a runtime folder, in the data folder.

use std::io::Write;
use std::path::{Path, PathBuf};

use rand::RngCore;
use serde::{Deserialize, Serialize};

/// The contents of `serve.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServeFile {
    /// `ws://host:port/`.
    pub url: String,
    pub token: String,
    /// The daemon's process, so a client can tell a file left by a killed daemon.
    pub pid: u32,
    /// The database it serves, so a client attaches only to a daemon on its own database.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub db: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    #[error("neither XDG_RUNTIME_DIR, XDG_DATA_HOME nor HOME is set")]
    NoFolder,
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a serve file: {source}")]
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
}

/// Where `serve.json` lives.
pub fn serve_file_path() -> Result<PathBuf, DiscoveryError> {
    let runtime = std::env::var_os("XDG_RUNTIME_DIR")
        .filter(|dir| !dir.is_empty())
        .map(|dir| PathBuf::from(dir).join("sidechat"));
    runtime
        .or_else(crate::config::default_data_dir)
        .map(|dir| dir.join("serve.json"))
        .ok_or(DiscoveryError::NoFolder)
}

/// A new random token of 256 bits, as 64 hex digits, from the thread's CSPRNG (seeded by the
/// operating system).
pub fn new_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes `file` to `path`, readable by the owner only: a new file renamed over the old one,
/// so a reader never sees half of it.
pub fn write(path: &Path, file: &ServeFile) -> Result<(), DiscoveryError> {
    let failed = |source| DiscoveryError::Write {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        crate::private_files::create_dir_all(dir).map_err(failed)?;
    }
    let fresh = path.with_extension(format!("json.{}", std::process::id()));
    let _ = std::fs::remove_file(&fresh);
    crate::private_files::create_file(&fresh).map_err(failed)?;
    let text = serde_json::to_vec_pretty(file).map_err(|e| failed(e.into()))?;
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&fresh)
        .map_err(failed)?;
    out.write_all(&text).map_err(failed)?;
    out.sync_all().map_err(failed)?;
    std::fs::rename(&fresh, path).map_err(failed)
}

/// Reads `serve.json` at `path`.
pub fn read(path: &Path) -> Result<ServeFile, DiscoveryError> {
    let text = std::fs::read(path).map_err(|source| DiscoveryError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_slice(&text).map_err(|source| DiscoveryError::Parse {
        path: path.to_path_buf(),
        source,
    })
}

/// Removes `path` if it still names the daemon with `token`: another daemon may have
/// written its own since.
pub fn remove_own(path: &Path, token: &str) {
    if read(path).is_ok_and(|file| file.token == token)
        && let Err(e) = std::fs::remove_file(path)
    {
        tracing::warn!(path = %path.display(), error = %e, "cannot remove the serve file");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn tokens_are_256_bits_and_differ() {
        let (a, b) = (new_token(), new_token());
        assert_eq!(
            (a.len(), a.chars().all(|c| c.is_ascii_hexdigit())),
            (64, true)
        );
        assert_ne!(a, b);
    }

    #[test]
    fn the_file_round_trips_and_only_its_own_daemon_removes_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sidechat/serve.json");
        let file = ServeFile {
            url: "ws://127.0.0.1:1/".into(),
            token: "a".into(),
            pid: 7,
            db: Some("/data/sidechat.db".into()),
        };
        write(&path, &file).unwrap();
        assert_eq!(read(&path).unwrap(), file);
        remove_own(&path, "b");
        assert!(path.exists());
        remove_own(&path, "a");
        assert!(!path.exists());
    }
}
