//! Opening the workspace's files and folders so that no symlink is ever followed, even when a
//! folder is swapped for a symlink while a tool is working.
//!
//! Checking a path and then opening it by name leaves a gap: a folder checked as real can be a
//! symlink to a folder outside by the time it is opened. So the check is the opening: every path
//! is opened relative to an opened workspace root, by the kernel, refusing any symlink along the
//! way. On Linux that is one `openat2` call with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`; where
//! `openat2` is missing (kernels before 5.6, other systems, sandboxes that filter it), a walk
//! opens one folder name at a time with `O_NOFOLLOW`, each relative to the folder opened before.
//! Both refuse the same paths. A file is then opened (or its temporary replacement created and
//! renamed) relative to its opened folder, again without following a symlink, so what a tool
//! touches is always the folder it checked.
//!
//! Symlinks inside the workspace are refused even when they point inside: following one safely
//! would mean resolving it in the same race-free way, and a refusal that names the link tells
//! the model which path to use instead.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

use super::paths::{PathError, Workspace};

/// Why a path could not be opened: a refusal of the path itself, or an error of the file system.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    Path(#[from] PathError),
    #[error(transparent)]
    Io(#[from] io::Error),
}

impl OpenError {
    /// The text a tool shows: a refusal as it is, a file-system error after `doing` (such as
    /// "Cannot read notes.md").
    pub fn shown(&self, doing: &str) -> String {
        match self {
            Self::Path(refused) => refused.to_string(),
            Self::Io(e) => format!("{doing}: {e}"),
        }
    }
}

/// How paths below the root are opened; tests choose the walk to check it as well.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Resolver {
    /// `openat2` where the kernel has it, the walk otherwise.
    Best,
    /// Always the walk, one `O_NOFOLLOW` step per folder.
    #[cfg_attr(not(test), allow(dead_code))]
    Walk,
}

/// Cleared once `openat2` is found missing, so the walk is used from then on.
static OPENAT2: AtomicBool = AtomicBool::new(true);

/// A folder of the workspace, opened, with its path relative to the root.
pub struct OpenedFolder {
    pub fd: OwnedFd,
    pub relative: PathBuf,
}

/// The folder that holds a path's last name, opened, and that name.
pub struct OpenedParent {
    pub folder: OwnedFd,
    pub name: OsString,
    /// The whole path relative to the root.
    pub relative: PathBuf,
}

impl Workspace {
    /// The folder `requested` names. A path that goes through a symlink is refused.
    pub fn open_folder(&self, requested: &str) -> Result<OpenedFolder, OpenError> {
        let relative = self.relative(requested)?;
        let fd = self.open_below(requested, &relative, false)?;
        Ok(OpenedFolder { fd, relative })
    }

    /// The folder holding `requested`'s last name, created with its missing ancestors when
    /// `create` is set. `None` when `requested` is the root itself.
    pub fn open_parent(
        &self,
        requested: &str,
        create: bool,
    ) -> Result<Option<OpenedParent>, OpenError> {
        let relative = self.relative(requested)?;
        let (Some(parent), Some(name)) = (relative.parent(), relative.file_name()) else {
            return Ok(None);
        };
        let folder = self.open_below(requested, parent, create)?;
        Ok(Some(OpenedParent {
            folder,
            name: name.to_os_string(),
            relative,
        }))
    }

    /// The file (or folder) `requested` names, opened for reading. A FIFO is opened without
    /// waiting for a writer.
    pub fn open_file(&self, requested: &str) -> Result<File, OpenError> {
        let relative = self.relative(requested)?;
        self.open_relative_file(requested, &relative)
    }

    /// [`Workspace::open_file`] for a path already relative to the root, such as one a folder
    /// walk found; `requested` is the name errors show.
    pub fn open_relative_file(&self, requested: &str, relative: &Path) -> Result<File, OpenError> {
        match (relative.parent(), relative.file_name()) {
            (Some(parent), Some(name)) => {
                let folder = self.open_below(requested, parent, false)?;
                open_in(requested, &folder, name)
            }
            _ => Ok(File::from(self.open_below(requested, relative, false)?)),
        }
    }

    fn open_root(&self, requested: &str) -> Result<OwnedFd, OpenError> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW;
        rustix::fs::open(self.root(), flags, Mode::empty()).map_err(|e| refusal(requested, e))
    }

    /// The folder at `relative` (already checked to stay below the root), opened from the root.
    fn open_below(
        &self,
        requested: &str,
        relative: &Path,
        create: bool,
    ) -> Result<OwnedFd, OpenError> {
        let mut names = Vec::new();
        for component in relative.components() {
            match component {
                Component::Normal(name) => names.push(name),
                _ => return Err(PathError::Outside(requested.to_string()).into()),
            }
        }
        let root = self.open_root(requested)?;
        if names.is_empty() {
            return Ok(root);
        }
        if self.resolver() == Resolver::Best && OPENAT2.load(Ordering::Relaxed) {
            match open_beneath(&root, relative) {
                Ok(fd) => return Ok(fd),
                // Missing in this kernel or filtered out by a sandbox: walk instead, from now on.
                Err(Errno::NOSYS | Errno::PERM) => OPENAT2.store(false, Ordering::Relaxed),
                Err(Errno::NOENT) if create => {}
                Err(e) => return Err(refusal(requested, e)),
            }
        }
        walk(root, &names, create).map_err(|e| refusal(requested, e))
    }
}

/// `relative` below `root` in one call, refusing any symlink and any way out.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn open_beneath(root: &OwnedFd, relative: &Path) -> Result<OwnedFd, Errno> {
    use rustix::fs::ResolveFlags;
    rustix::fs::openat2(
        root,
        relative,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS,
    )
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn open_beneath(_root: &OwnedFd, _relative: &Path) -> Result<OwnedFd, Errno> {
    Err(Errno::NOSYS)
}

/// Opens `names` one folder at a time, each relative to the one before and none through a
/// symlink, creating the missing ones when `create` is set.
fn walk(root: OwnedFd, names: &[&OsStr], create: bool) -> Result<OwnedFd, Errno> {
    let mut folder = root;
    for name in names {
        folder = match open_folder_in(&folder, name) {
            Err(Errno::NOENT) if create => {
                match rustix::fs::mkdirat(&folder, *name, Mode::from_raw_mode(0o777)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(e),
                }
                open_folder_in(&folder, name)?
            }
            opened => opened?,
        };
    }
    Ok(folder)
}

/// The folder `name` in `folder`, never through a symlink (reported as `ELOOP`).
#[cfg(any(target_os = "linux", target_os = "android"))]
fn open_folder_in(folder: &OwnedFd, name: &OsStr) -> Result<OwnedFd, Errno> {
    use rustix::fs::FileType;
    // `O_PATH | O_NOFOLLOW` opens a symlink itself instead of failing, so what the entry is can
    // be asked of the opened entry, not of a name that may be swapped meanwhile.
    let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let entry = rustix::fs::openat(folder, name, flags, Mode::empty())?;
    match FileType::from_raw_mode(rustix::fs::fstat(&entry)?.st_mode) {
        // "." of an opened folder is that folder: reopened so it can be listed.
        FileType::Directory => rustix::fs::openat(
            &entry,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        ),
        FileType::Symlink => Err(Errno::LOOP),
        _ => Err(Errno::NOTDIR),
    }
}

/// The folder `name` in `folder`, never through a symlink (reported as `ELOOP`).
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn open_folder_in(folder: &OwnedFd, name: &OsStr) -> Result<OwnedFd, Errno> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW;
    match rustix::fs::openat(folder, name, flags, Mode::empty()) {
        // `O_DIRECTORY` is checked before `O_NOFOLLOW`: a symlink shows as "not a directory"
        // (asked again by name, so a swap meanwhile can only change which error is shown).
        Err(Errno::NOTDIR) if is_symlink(folder, name) => Err(Errno::LOOP),
        opened => opened,
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn is_symlink(folder: &OwnedFd, name: &OsStr) -> bool {
    rustix::fs::statat(folder, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
        .map(|stat| {
            rustix::fs::FileType::from_raw_mode(stat.st_mode) == rustix::fs::FileType::Symlink
        })
        .unwrap_or(false)
}

/// The entry `name` of an opened folder, for reading, never through a symlink.
pub fn open_in(requested: &str, folder: &OwnedFd, name: &OsStr) -> Result<File, OpenError> {
    let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW | OFlags::NONBLOCK;
    rustix::fs::openat(folder, name, flags, Mode::empty())
        .map(File::from)
        .map_err(|e| refusal(requested, e))
}

/// A symlink met on the way (`ELOOP`) or a way out (`EXDEV`, from `RESOLVE_BENEATH`) is a
/// refusal of the path; anything else is the file system's error.
fn refusal(requested: &str, e: Errno) -> OpenError {
    match e {
        Errno::LOOP => PathError::Symlink(requested.to_string()).into(),
        Errno::XDEV => PathError::Outside(requested.to_string()).into(),
        other => OpenError::Io(other.into()),
    }
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    /// A workspace with `src/a.txt`, a symlink `out` to a folder outside, `inner` to `src`, a
    /// dangling `dangling` and `file_link` to `src/a.txt`; once per way of opening.
    fn workspaces() -> (tempfile::TempDir, tempfile::TempDir, Vec<Workspace>) {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.txt"), "secret").unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("src")).unwrap();
        std::fs::write(root.join("src/a.txt"), "a").unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("out")).unwrap();
        std::os::unix::fs::symlink(root.join("src"), root.join("inner")).unwrap();
        std::os::unix::fs::symlink("/nonexistent/target", root.join("dangling")).unwrap();
        std::os::unix::fs::symlink("src/a.txt", root.join("file_link")).unwrap();
        let ws = Workspace::new(root).unwrap();
        (dir, outside, vec![ws.clone(), ws.walking_only()])
    }

    fn refusal(result: Result<impl Sized, OpenError>) -> Option<PathError> {
        match result {
            Err(OpenError::Path(refused)) => Some(refused),
            _ => None,
        }
    }

    #[test]
    fn every_symlinked_component_is_refused_wherever_it_points() {
        let (_dir, _outside, workspaces) = workspaces();
        for ws in workspaces {
            let paths = [
                "out/secret.txt",
                "out",
                "inner/a.txt",
                "inner",
                "dangling",
                "dangling/x",
                "file_link",
            ];
            let refused: Vec<_> = paths.iter().map(|p| refusal(ws.open_file(p))).collect();
            let expected: Vec<_> = paths
                .iter()
                .map(|p| Some(PathError::Symlink(p.to_string())))
                .collect();
            assert_eq!(refused, expected, "{:?}", ws.resolver());
            let folders = ["out", "inner", "inner/deeper"];
            let refused: Vec<_> = folders.iter().map(|p| refusal(ws.open_folder(p))).collect();
            let expected: Vec<_> = folders
                .iter()
                .map(|p| Some(PathError::Symlink(p.to_string())))
                .collect();
            assert_eq!(refused, expected, "{:?}", ws.resolver());
            assert_eq!(
                refusal(ws.open_parent("inner/new/file.txt", true)),
                Some(PathError::Symlink("inner/new/file.txt".into()))
            );
            assert!(!ws.root().join("src/new").exists());
        }
    }

    #[test]
    fn real_paths_open_and_missing_folders_are_created() {
        let (_dir, _outside, workspaces) = workspaces();
        for (i, ws) in workspaces.into_iter().enumerate() {
            let mut text = String::new();
            std::io::Read::read_to_string(
                &mut ws.open_file("src/../src/a.txt").unwrap(),
                &mut text,
            )
            .unwrap();
            assert_eq!(text, "a");
            assert!(ws.open_file(".").unwrap().metadata().unwrap().is_dir());
            let made = format!("made{i}/deeper/file.txt");
            let parent = ws.open_parent(&made, true).unwrap().unwrap();
            assert_eq!(
                (parent.name, parent.relative),
                ("file.txt".into(), PathBuf::from(&made))
            );
            assert!(ws.root().join(format!("made{i}/deeper")).is_dir());
            assert!(matches!(ws.open_parent(".", true), Ok(None)));
            assert!(matches!(
                ws.open_file("missing/a.txt"),
                Err(OpenError::Io(e)) if e.kind() == io::ErrorKind::NotFound
            ));
        }
    }
}
