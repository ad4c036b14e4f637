//! Confinement of tool paths to the session's workspace root.
//!
//! `..` that climbs out, absolute paths elsewhere and symlinks whose target lies outside are all
//! refused, so a model cannot read or write beyond the folder the user opened.

use std::path::{Component, Path, PathBuf};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PathError {
    #[error("{0:?} is outside the workspace; tools may only touch files under the workspace root")]
    Outside(String),
    #[error("the workspace root {0:?} does not exist or is not a folder")]
    BadRoot(String),
}

/// The folder a session's tools may touch.
#[derive(Debug, Clone, PartialEq)]
pub struct Workspace {
    root: PathBuf,
}

impl Workspace {
    pub fn new(root: &Path) -> Result<Self, PathError> {
        let root = root
            .canonicalize()
            .ok()
            .filter(|r| r.is_dir())
            .ok_or_else(|| PathError::BadRoot(root.display().to_string()))?;
        Ok(Self { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The absolute path for `requested`, guaranteed inside the root (following symlinks).
    pub fn resolve(&self, requested: &str) -> Result<PathBuf, PathError> {
        let outside = || PathError::Outside(requested.to_string());
        let requested_path = Path::new(requested);
        let relative = if requested_path.is_absolute() {
            requested_path
                .strip_prefix(&self.root)
                .map_err(|_| outside())?
        } else {
            requested_path
        };
        // Lexical pass: no component may climb above the root.
        let mut joined = self.root.clone();
        for component in relative.components() {
            match component {
                Component::Normal(part) => joined.push(part),
                Component::CurDir => {}
                Component::ParentDir => {
                    if joined == self.root || !joined.pop() {
                        return Err(outside());
                    }
                }
                Component::RootDir | Component::Prefix(_) => return Err(outside()),
            }
        }
        // Symlink pass: the deepest existing ancestor, resolved, must still be inside.
        let mut existing = joined.as_path();
        let mut rest = Vec::new();
        while !existing.exists() {
            // A dangling symlink also "does not exist"; refuse it rather than write through it.
            if existing.symlink_metadata().is_ok() {
                return Err(outside());
            }
            match (existing.parent(), existing.file_name()) {
                (Some(parent), Some(name)) => {
                    rest.push(name.to_os_string());
                    existing = parent;
                }
                _ => return Err(outside()),
            }
        }
        let mut real = existing.canonicalize().map_err(|_| outside())?;
        if !real.starts_with(&self.root) {
            return Err(outside());
        }
        real.extend(rest.iter().rev());
        Ok(real)
    }

    /// `path` relative to the root, with `/` separators, for display and records.
    pub fn display(&self, path: &Path) -> String {
        path.strip_prefix(&self.root)
            .map(|p| p.to_string_lossy().replace('\\', "/"))
            .ok()
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| ".".to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("src")).unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        (dir, ws)
    }

    #[test]
    fn inside_paths_resolve() {
        let (_dir, ws) = workspace();
        assert_eq!(
            ws.resolve("src/new.rs").unwrap(),
            ws.root().join("src/new.rs")
        );
        assert_eq!(
            ws.resolve("src/../a/b.txt").unwrap(),
            ws.root().join("a/b.txt")
        );
        let absolute = ws.root().join("src").display().to_string();
        assert_eq!(ws.resolve(&absolute).unwrap(), ws.root().join("src"));
    }

    #[test]
    fn escapes_are_refused() {
        let (_dir, ws) = workspace();
        for bad in ["../x", "src/../../x", "/etc/passwd"] {
            assert_eq!(
                ws.resolve(bad),
                Err(PathError::Outside(bad.to_string())),
                "{bad}"
            );
        }
    }

    #[test]
    fn symlinks_that_escape_are_refused() {
        let (_dir, ws) = workspace();
        let elsewhere = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), ws.root().join("link")).unwrap();
        std::os::unix::fs::symlink("/nonexistent/target", ws.root().join("dangling")).unwrap();
        assert!(ws.resolve("link/file").is_err());
        assert!(ws.resolve("link").is_err());
        assert!(ws.resolve("dangling").is_err());
        std::os::unix::fs::symlink(ws.root().join("src"), ws.root().join("inner")).unwrap();
        assert_eq!(ws.resolve("inner/a").unwrap(), ws.root().join("src/a"));
    }
}
