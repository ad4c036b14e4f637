//! Writing a file by replacing it: the new content goes to a temporary file in the same folder,
//! which is then renamed over the target.
//!
//! Writing into the existing file would write through every name it has, so a hard link inside
//! the workspace to a file outside it would let a write change the outside file. A rename only
//! replaces the name inside the workspace: the outside file keeps its content. The rename also
//! makes the write atomic: a reader sees the old file or the new one, never half of it.
//!
//! The folder is one the caller opened (see [`super::confined`]): the temporary file is created,
//! renamed and, on failure, removed relative to it, so none of the three can be redirected out
//! of the workspace by a folder swapped for a symlink meanwhile.

use std::ffi::{OsStr, OsString};
use std::io::{self, Write};
use std::os::fd::OwnedFd;

use rustix::fs::{AtFlags, Mode, OFlags};

/// Replaces (or creates) `name` in `folder` with `content`; `mode` is the replaced file's
/// permissions, kept so a script stays executable and a private file private.
pub fn replace_in(
    folder: &OwnedFd,
    name: &OsStr,
    content: &[u8],
    mode: Option<u32>,
) -> io::Result<()> {
    let (temp, file) = create_temp(folder, name)?;
    let mut file = std::fs::File::from(file);
    let written = (|| {
        file.write_all(content)?;
        if let Some(mode) = mode {
            rustix::fs::fchmod(&file, Mode::from_raw_mode(mode))?;
        }
        file.sync_all()?;
        drop(file);
        rustix::fs::renameat(folder, &temp, folder, name)?;
        Ok(())
    })();
    if written.is_err() {
        let _ = rustix::fs::unlinkat(folder, &temp, AtFlags::empty());
    }
    written
}

/// A new file beside the target, with a name nothing else uses.
fn create_temp(folder: &OwnedFd, name: &OsStr) -> io::Result<(OsString, OwnedFd)> {
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut last = None;
    for _ in 0..16 {
        let mut temp = OsString::from(".");
        temp.push(name);
        temp.push(format!(".{:08x}.sidechat-tmp", rand::random::<u32>()));
        match rustix::fs::openat(folder, &temp, flags, Mode::from_raw_mode(0o666)) {
            Ok(file) => return Ok((temp, file)),
            Err(e) if e == rustix::io::Errno::EXIST => last = Some(e.into()),
            Err(e) => return Err(e.into()),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no free temporary name")))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use pretty_assertions::assert_eq;

    use super::*;

    fn opened(dir: &std::path::Path) -> OwnedFd {
        OwnedFd::from(std::fs::File::open(dir).unwrap())
    }

    fn names(dir: &std::path::Path) -> Vec<String> {
        let mut names: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn replacing_keeps_permissions_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("run.sh");
        std::fs::write(&script, "old").unwrap();
        replace_in(
            &opened(dir.path()),
            OsStr::new("run.sh"),
            b"new",
            Some(0o751),
        )
        .unwrap();
        let mode = std::fs::metadata(&script).unwrap().permissions().mode() & 0o777;
        assert_eq!(
            (
                std::fs::read_to_string(&script).unwrap(),
                mode,
                names(dir.path())
            ),
            ("new".to_string(), 0o751, vec!["run.sh".to_string()])
        );
    }

    /// A write whose rename fails (here: a folder holds the name) removes its temporary file.
    #[test]
    fn a_failed_replacement_removes_its_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("taken")).unwrap();
        std::fs::write(dir.path().join("taken/inner"), "").unwrap();
        let failed = replace_in(&opened(dir.path()), OsStr::new("taken"), b"new", None);
        assert!(failed.is_err());
        assert_eq!(names(dir.path()), vec!["taken".to_string()]);
    }
}
