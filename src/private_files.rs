//! Files only their owner may read. The database (with its `-wal` and `-shm`), the log file and
//! the folders made for them hold every conversation, so they are created 0600 (files) and
//! 0700 (folders) whatever the umask: a mode asked for at creation can only lose bits to the
//! umask, never gain them. Files and folders that already exist are left as they are.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;

#[cfg(unix)]
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};

/// Creates `dir` and any missing parents, each readable by the user only.
pub fn create_dir_all(dir: &Path) -> io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    builder.mode(0o700);
    builder.create(dir)
}

/// Creates `path` empty and readable by the user only, unless it exists. SQLite gives a
/// database's `-wal` and `-shm` files the mode of the database file, so creating the database
/// file first makes all three private.
pub fn create_file(path: &Path) -> io::Result<()> {
    match private().write(true).create_new(true).open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// Opens `path` for appending, creating it readable by the user only.
pub fn open_append(path: &Path) -> io::Result<File> {
    private().append(true).create(true).open(path)
}

fn private() -> OpenOptions {
    let mut options = OpenOptions::new();
    #[cfg(unix)]
    options.mode(0o600);
    options
}

#[cfg(all(test, unix))]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn created_private_and_existing_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let nested = dir.path().join("a/b");
        create_dir_all(&nested).unwrap();
        let file = nested.join("f");
        create_file(&file).unwrap();
        let log = nested.join("log");
        drop(open_append(&log).unwrap());
        assert_eq!(
            [
                mode(&dir.path().join("a")),
                mode(&nested),
                mode(&file),
                mode(&log)
            ],
            [0o700, 0o700, 0o600, 0o600]
        );
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
        std::fs::write(&file, "kept").unwrap();
        create_file(&file).unwrap();
        assert_eq!(
            (mode(&file), std::fs::read_to_string(&file).unwrap()),
            (0o640, "kept".into())
        );
    }
}
