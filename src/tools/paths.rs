//! Confinement of tool paths to the session's workspace root: the lexical part.
//!
//! `..` that climbs out and absolute paths elsewhere are refused here, before anything is
//! opened; symlinks are refused while opening (see [`super::confined`]), so a model cannot read
//! or write beyond the folder the user opened.

use std::path::{Component, Path, PathBuf};

use super::confined::Resolver;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PathError {
    #[error("{0:?} is outside the workspace; tools may only touch files under the workspace root")]
    Outside(String),
    #[error(
        "{0:?} goes through a symbolic link; tools do not follow symbolic links, so use the path of the file itself"
    )]
    Symlink(String),
    #[error("the workspace root {0:?} does not exist or is not a folder")]
    BadRoot(String),
}

/// The folder a session's tools may touch.
#[derive(Debug, Clone, PartialEq)]
pub struct Workspace {
    root: PathBuf,
    resolver: Resolver,
}

impl Workspace {
    pub fn new(root: &Path) -> Result<Self, PathError> {
        let root = root
            .canonicalize()
            .ok()
            .filter(|r| r.is_dir())
            .ok_or_else(|| PathError::BadRoot(root.display().to_string()))?;
        Ok(Self {
            root,
            resolver: Resolver::Best,
        })
    }

    /// The same workspace, opening paths by the walk only (never `openat2`), to test the walk.
    #[cfg(test)]
    pub(super) fn walking_only(mut self) -> Self {
        self.resolver = Resolver::Walk;
        self
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub(super) fn resolver(&self) -> Resolver {
        self.resolver
    }

    /// `requested` relative to the root, with `.` and `..` worked out: empty for the root.
    ///
    /// Only the words are checked here: whether a name is a symlink is checked when it is opened.
    pub fn relative(&self, requested: &str) -> Result<PathBuf, PathError> {
        let outside = || PathError::Outside(requested.to_string());
        let requested_path = Path::new(requested);
        let relative = if requested_path.is_absolute() {
            requested_path
                .strip_prefix(&self.root)
                .map_err(|_| outside())?
        } else {
            requested_path
        };
        let mut normal = PathBuf::new();
        for component in relative.components() {
            match component {
                Component::Normal(part) => normal.push(part),
                Component::CurDir => {}
                Component::ParentDir => {
                    if !normal.pop() {
                        return Err(outside());
                    }
                }
                Component::RootDir | Component::Prefix(_) => return Err(outside()),
            }
        }
        Ok(normal)
    }

    /// `path` relative to the root, with `/` separators, for display and records.
    pub fn display(&self, path: &Path) -> String {
        path.strip_prefix(&self.root)
            .map(shown)
            .unwrap_or_else(|_| ".".to_string())
    }
}

/// A path relative to the root as tools show it: `/` separators, `.` for the root itself.
pub fn shown(relative: &Path) -> String {
    let text = relative.to_string_lossy().replace('\\', "/");
    if text.is_empty() {
        ".".to_string()
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    fn workspace() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("src")).unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        (dir, ws)
    }

    #[test]
    fn inside_paths_are_made_relative() {
        let (_dir, ws) = workspace();
        let absolute = ws.root().join("src").display().to_string();
        let requested = [
            "src/new.rs",
            "src/../a/b.txt",
            "./a/./b",
            &absolute,
            ".",
            "src/..",
        ];
        let relative: Vec<_> = requested
            .into_iter()
            .map(|p| ws.relative(p).unwrap())
            .collect();
        assert_eq!(
            relative,
            ["src/new.rs", "a/b.txt", "a/b", "src", "", ""]
                .map(PathBuf::from)
                .to_vec()
        );
        assert_eq!(shown(&relative[4]), ".");
    }

    #[test]
    fn escapes_are_refused() {
        let (_dir, ws) = workspace();
        for bad in ["../x", "src/../../x", "/etc/passwd"] {
            assert_eq!(
                ws.relative(bad),
                Err(PathError::Outside(bad.to_string())),
                "{bad}"
            );
        }
    }
}
