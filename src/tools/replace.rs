//! Writing a file by replacing it: the new content goes to a temporary file in the same folder,
//! which is then renamed over the target.
//!
//! Writing into the existing file would write through every name it has, so a hard link inside
//! the workspace to a file outside it would let a write change the outside file. A rename only
//! replaces the name inside the workspace: the outside file keeps its content. The rename also
//! makes the write atomic: a reader sees the old file or the new one, never half of it.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Replaces (or creates) `path` with `content`, keeping the replaced file's permissions.
pub async fn replace_file(path: &Path, content: &str) -> io::Result<()> {
    let path = path.to_path_buf();
    let content = content.to_string();
    tokio::task::spawn_blocking(move || replace_file_blocking(&path, content.as_bytes()))
        .await
        .map_err(io::Error::other)?
}

fn replace_file_blocking(path: &Path, content: &[u8]) -> io::Result<()> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the path names no file",
        ));
    };
    // A script stays executable, a private file private.
    let permissions = match std::fs::metadata(path) {
        Ok(metadata) => Some(metadata.permissions()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    let (temp, mut file) = create_temp(dir, &name.to_string_lossy())?;
    let written = (|| {
        file.write_all(content)?;
        if let Some(permissions) = permissions {
            file.set_permissions(permissions)?;
        }
        file.sync_all()?;
        drop(file);
        std::fs::rename(&temp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written
}

/// A new file beside the target, with a name nothing else uses.
fn create_temp(dir: &Path, name: &str) -> io::Result<(PathBuf, std::fs::File)> {
    let mut last = None;
    for _ in 0..16 {
        let temp = dir.join(format!(
            ".{name}.{:08x}.sidechat-tmp",
            rand::random::<u32>()
        ));
        match OpenOptions::new().write(true).create_new(true).open(&temp) {
            Ok(file) => return Ok((temp, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no free temporary name")))
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    #[cfg(unix)]
    #[tokio::test]
    async fn replacing_keeps_permissions_and_leaves_no_temporary_file() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("run.sh");
        std::fs::write(&script, "old").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o751)).unwrap();
        replace_file(&script, "new").await.unwrap();
        let mode = std::fs::metadata(&script).unwrap().permissions().mode() & 0o777;
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(
            (std::fs::read_to_string(&script).unwrap(), mode, names),
            ("new".to_string(), 0o751, vec!["run.sh".to_string()])
        );
    }
}
