//! Reading, listing, writing and editing files inside the workspace.
//!
//! Every path is opened through the workspace's confined opener ([`super::confined`]), which
//! never follows a symlink, and each file is read and replaced relative to the folder opened for
//! it, so a folder swapped for a symlink mid-call cannot send a read or a write outside.

use std::ffi::OsStr;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;

use serde_json::Value;

use super::confined::open_in;
use super::paths::shown;
use super::replace::replace_in;
use super::{
    Checkpoints, FileSnapshot, OpenError, OpenedParent, ToolOutcome, Workspace, str_arg, truncate,
};
use crate::protocol::ChangedFile;

/// Most bytes of a file shown to the model at once.
const READ_CAP: usize = 256 * 1024;
/// An image file read: described in the result's text, its bytes carried beside it for a
/// model that reads images (the run replaces the description for one that does not).
fn read_image(
    requested: &str,
    media_type: &'static str,
    bytes: Vec<u8>,
) -> Result<ToolOutcome, String> {
    let image = crate::images::input::check_bytes(0, media_type, bytes)
        .map_err(|e| format!("{requested} is an image that cannot be shown to the model: {e}"))?;
    let mut outcome = ToolOutcome::ok(format!(
        "{requested} is an image ({}).",
        crate::images::input::describe(&image)
    ));
    outcome.image = Some(image);
    Ok(outcome)
}

/// Most entries a listing shows.
const LIST_CAP: usize = 1000;

fn required<'a>(input: &'a Value, key: &str) -> Result<&'a str, String> {
    str_arg(input, key).ok_or_else(|| format!("The input needs a string field {key:?}."))
}

/// Runs blocking file-system work off the async threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| format!("The tool failed: {e}"))?
}

pub async fn read(ws: &Workspace, input: &Value) -> Result<ToolOutcome, String> {
    let requested = required(input, "path")?.to_string();
    let bytes = {
        let (ws, requested) = (ws.clone(), requested.clone());
        blocking(move || {
            let cannot = |e: std::io::Error| format!("Cannot read {requested}: {e}");
            let mut file = ws
                .open_file(&requested)
                .map_err(|e| e.shown(&format!("Cannot read {requested}")))?;
            let mut bytes = Vec::new();
            file.read_to_end(&mut bytes).map_err(cannot)?;
            Ok(bytes)
        })
        .await?
    };
    if let Some(media_type) = crate::images::media_type_of(&bytes) {
        return read_image(&requested, media_type, bytes);
    }
    let text =
        String::from_utf8(bytes).map_err(|_| format!("{requested} is not a UTF-8 text file."))?;
    let offset = input
        .get("offset")
        .and_then(Value::as_u64)
        .unwrap_or(1)
        .max(1) as usize;
    let limit = input
        .get("limit")
        .and_then(Value::as_u64)
        .map(|l| l as usize);
    let selected: Vec<String> = text
        .lines()
        .enumerate()
        .skip(offset - 1)
        .take(limit.unwrap_or(usize::MAX))
        .map(|(i, line)| numbered(i + 1, line))
        .collect();
    if selected.is_empty() {
        return Ok(ToolOutcome::ok(format!(
            "{requested} has no lines from line {offset} on."
        )));
    }
    Ok(ToolOutcome::ok(truncate(&selected.join("\n"), READ_CAP)))
}

/// One line as `read_file` shows it: its number, right-aligned, a tab, the line.
pub fn numbered(number: usize, line: &str) -> String {
    format!("{number:>6}\t{line}")
}

pub async fn list(ws: &Workspace, input: &Value) -> Result<ToolOutcome, String> {
    let requested = str_arg(input, "path").unwrap_or(".").to_string();
    let ws = ws.clone();
    let (names, shown_path) = blocking(move || folder_names(&ws, &requested)).await?;
    Ok(ToolOutcome::ok(listing(names, &shown_path)))
}

/// The names in a folder of the workspace, a folder's with a trailing `/`, and the folder's path
/// as shown; blocking.
pub fn folder_names(ws: &Workspace, requested: &str) -> Result<(Vec<String>, String), String> {
    let cannot = |e: std::io::Error| format!("Cannot list {requested}: {e}");
    let folder = ws
        .open_folder(requested)
        .map_err(|e| e.shown(&format!("Cannot list {requested}")))?;
    let entries = rustix::fs::Dir::read_from(&folder.fd).map_err(|e| cannot(e.into()))?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| cannot(e.into()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == "." || name == ".." {
            continue;
        }
        let is_dir = match entry.file_type() {
            rustix::fs::FileType::Unknown => rustix::fs::statat(
                &folder.fd,
                entry.file_name(),
                rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
            )
            .map(|s| rustix::fs::FileType::from_raw_mode(s.st_mode).is_dir())
            .unwrap_or(false),
            kind => kind.is_dir(),
        };
        names.push(if is_dir { format!("{name}/") } else { name });
    }
    Ok((names, shown(&folder.relative)))
}

/// A folder's listing as `list_directory` shows it: sorted, at most [`LIST_CAP`] names.
pub fn listing(mut names: Vec<String>, shown_path: &str) -> String {
    names.sort();
    if names.is_empty() {
        return format!("{shown_path} is empty.");
    }
    let total = names.len();
    names.truncate(LIST_CAP);
    let mut output = names.join("\n");
    if total > LIST_CAP {
        output.push_str(&format!("\n… and {} more entries", total - LIST_CAP));
    }
    output
}

/// A file about to be replaced: its opened folder, its name there, and what it holds now.
struct Existing {
    parent: OpenedParent,
    /// The bytes and permissions of the file, `None` when there is none yet.
    current: Option<(Vec<u8>, u32)>,
}

/// Opens the folder of `requested` (creating it when `create`) and reads the file there, if any.
fn open_existing(ws: &Workspace, requested: &str, create: bool) -> Result<Existing, String> {
    let cannot_open = if create {
        format!("Cannot create the folder for {requested}")
    } else {
        format!("Cannot read {requested}")
    };
    let parent = ws
        .open_parent(requested, create)
        .map_err(|e| e.shown(&cannot_open))?
        .ok_or_else(|| format!("{requested} is a folder."))?;
    let cannot = |e: std::io::Error| format!("Cannot read {requested}: {e}");
    let mut file = match open_in(requested, &parent.folder, &parent.name) {
        Ok(file) => file,
        Err(OpenError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Existing {
                parent,
                current: None,
            });
        }
        Err(e) => return Err(e.shown(&format!("Cannot read {requested}"))),
    };
    let metadata = file.metadata().map_err(cannot)?;
    if metadata.is_dir() {
        return Err(format!("{requested} is a folder."));
    }
    if !metadata.is_file() {
        return Err(format!("{requested} is not a regular file."));
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(cannot)?;
    Ok(Existing {
        parent,
        current: Some((bytes, metadata.permissions().mode())),
    })
}

/// Replaces the file in its opened folder, off the async threads.
async fn replace(
    requested: &str,
    folder: OwnedFd,
    name: std::ffi::OsString,
    content: String,
    mode: Option<u32>,
) -> Result<(), String> {
    let requested = requested.to_string();
    blocking(move || {
        replace_in(&folder, OsStr::new(&name), content.as_bytes(), mode)
            .map_err(|e| format!("Cannot write {requested}: {e}"))
    })
    .await
}

pub async fn write(
    ws: &Workspace,
    input: &Value,
    checkpoints: &dyn Checkpoints,
) -> Result<ToolOutcome, String> {
    let requested = required(input, "path")?;
    let content = required(input, "content")?;
    let existing = {
        let (ws, requested) = (ws.clone(), requested.to_string());
        blocking(move || open_existing(&ws, &requested, true)).await?
    };
    let Existing { parent, current } = existing;
    let shown_path = shown(&parent.relative);
    checkpoints.keep(
        &shown_path,
        current
            .as_ref()
            .map(|(bytes, mode)| (bytes.as_slice(), *mode)),
        content.as_bytes(),
    )?;
    let (old, mode) = match current {
        Some((bytes, mode)) => (
            Some(String::from_utf8_lossy(&bytes).into_owned()),
            Some(mode),
        ),
        None => (None, None),
    };
    replace(
        requested,
        parent.folder,
        parent.name,
        content.to_string(),
        mode,
    )
    .await?;
    let (added, removed) = line_changes(old.as_deref().unwrap_or(""), content);
    let verb = if old.is_some() {
        "Overwrote"
    } else {
        "Created"
    };
    Ok(ToolOutcome {
        image: None,
        output: format!("{verb} {shown_path} (+{added} -{removed} lines)."),
        is_error: false,
        changed: Some(ChangedFile {
            path: shown_path,
            added,
            removed,
            child_session_id: None,
        }),
        snapshot: Some(FileSnapshot {
            before: old,
            after: content.to_string(),
        }),
    })
}

pub async fn edit(
    ws: &Workspace,
    input: &Value,
    checkpoints: &dyn Checkpoints,
) -> Result<ToolOutcome, String> {
    let requested = required(input, "path")?;
    let old_string = required(input, "old_string")?;
    let new_string = required(input, "new_string")?;
    if old_string.is_empty() {
        return Err("old_string is empty; use write_file to create a file.".to_string());
    }
    let existing = {
        let (ws, requested) = (ws.clone(), requested.to_string());
        blocking(move || open_existing(&ws, &requested, false)).await?
    };
    let Existing { parent, current } = existing;
    let Some((bytes, mode)) = current else {
        let missing = std::io::Error::from(rustix::io::Errno::NOENT);
        return Err(format!("Cannot read {requested}: {missing}"));
    };
    let text = String::from_utf8(bytes)
        .map_err(|_| format!("Cannot read {requested}: stream did not contain valid UTF-8"))?;
    let found = text.matches(old_string).count();
    if found != 1 {
        return Err(match found {
            0 => format!(
                "old_string was not found in {requested}; read the file and copy the text exactly."
            ),
            n => format!(
                "old_string occurs {n} times in {requested}; include more context so it is unique."
            ),
        });
    }
    let updated = text.replacen(old_string, new_string, 1);
    let shown_path = shown(&parent.relative);
    checkpoints.keep(
        &shown_path,
        Some((text.as_bytes(), mode)),
        updated.as_bytes(),
    )?;
    replace(
        requested,
        parent.folder,
        parent.name,
        updated.clone(),
        Some(mode),
    )
    .await?;
    let (added, removed) = line_changes(&text, &updated);
    Ok(ToolOutcome {
        image: None,
        output: format!("Edited {shown_path} (+{added} -{removed} lines)."),
        is_error: false,
        changed: Some(ChangedFile {
            path: shown_path,
            added,
            removed,
            child_session_id: None,
        }),
        snapshot: Some(FileSnapshot {
            before: Some(text),
            after: updated,
        }),
    })
}

/// Lines added and removed between two texts: the lines between their common prefix and suffix.
pub fn line_changes(old: &str, new: &str) -> (u64, u64) {
    let old: Vec<&str> = old.lines().collect();
    let new: Vec<&str> = new.lines().collect();
    let prefix = old.iter().zip(&new).take_while(|(a, b)| a == b).count();
    let suffix = old[prefix..]
        .iter()
        .rev()
        .zip(new[prefix..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    (
        (new.len() - prefix - suffix) as u64,
        (old.len() - prefix - suffix) as u64,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::NoCheckpoints;
    use serde_json::json;

    #[test]
    fn line_changes_count_the_differing_middle() {
        assert_eq!(line_changes("", "a\nb\n"), (2, 0));
        assert_eq!(line_changes("a\nb\nc\n", "a\nB\nB2\nc\n"), (2, 1));
        assert_eq!(line_changes("a\n", "a\n"), (0, 0));
    }

    #[tokio::test]
    async fn write_then_edit_then_read() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        let written = write(
            &ws,
            &json!({"path": "d/n.md", "content": "one\ntwo\n"}),
            &NoCheckpoints,
        )
        .await
        .unwrap();
        assert_eq!(written.output, "Created d/n.md (+2 -0 lines).");
        let edited = edit(
            &ws,
            &json!({"path": "d/n.md", "old_string": "two", "new_string": "2\n3"}),
            &NoCheckpoints,
        )
        .await
        .unwrap();
        assert_eq!(
            edited.changed,
            Some(ChangedFile {
                path: "d/n.md".into(),
                added: 2,
                removed: 1,
                child_session_id: None,
            })
        );
        let read_back = read(&ws, &json!({"path": "d/n.md"})).await.unwrap();
        assert_eq!(read_back.output, "     1\tone\n     2\t2\n     3\t3");
        let ambiguous = edit(
            &ws,
            &json!({"path": "d/n.md", "old_string": "\n", "new_string": ""}),
            &NoCheckpoints,
        )
        .await;
        assert!(ambiguous.unwrap_err().contains("occurs 3 times"));
    }

    /// A hard link inside the workspace to a file outside it: writing or editing through the
    /// link replaces the name inside the workspace and leaves the outside file as it was.
    #[tokio::test]
    async fn writes_through_a_hard_link_never_reach_the_file_outside() {
        let outside = tempfile::tempdir().unwrap();
        let secret = outside.path().join("secret.txt");
        std::fs::write(&secret, "outside\n").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        for (name, tool) in [("written.txt", "write"), ("edited.txt", "edit")] {
            let link = dir.path().join(name);
            std::fs::hard_link(&secret, &link).unwrap();
            let done = match tool {
                "write" => {
                    let input = json!({"path": name, "content": "inside\n"});
                    write(&ws, &input, &NoCheckpoints).await
                }
                _ => {
                    let input =
                        json!({"path": name, "old_string": "outside", "new_string": "inside"});
                    edit(&ws, &input, &NoCheckpoints).await
                }
            };
            assert!(!done.unwrap().is_error);
            assert_eq!(
                (
                    std::fs::read_to_string(&link).unwrap(),
                    std::fs::read_to_string(&secret).unwrap()
                ),
                ("inside\n".to_string(), "outside\n".to_string()),
                "{tool}"
            );
        }
    }

    /// One kept change: the path, its content and mode before, and what is written.
    type Kept = (String, Option<(Vec<u8>, u32)>, Vec<u8>);

    /// Records what it is asked to keep; refuses when told to.
    struct Recording {
        kept: std::sync::Mutex<Vec<Kept>>,
        refuse: bool,
    }

    impl Checkpoints for Recording {
        fn keep(
            &self,
            path: &str,
            before: Option<(&[u8], u32)>,
            after: &[u8],
        ) -> Result<(), String> {
            if self.refuse {
                return Err("no room".into());
            }
            let before = before.map(|(b, m)| (b.to_vec(), m & 0o777));
            self.kept
                .lock()
                .unwrap()
                .push((path.into(), before, after.to_vec()));
            Ok(())
        }
    }

    #[tokio::test]
    async fn each_change_is_kept_before_it_is_made_and_a_refusal_stops_it() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        let kept = Recording {
            kept: Default::default(),
            refuse: false,
        };
        write(&ws, &json!({"path": "a.txt", "content": "one\n"}), &kept)
            .await
            .unwrap();
        std::fs::set_permissions(
            dir.path().join("a.txt"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        let input = json!({"path": "a.txt", "old_string": "one", "new_string": "two"});
        edit(&ws, &input, &kept).await.unwrap();
        assert_eq!(
            kept.kept.into_inner().unwrap(),
            vec![
                ("a.txt".to_string(), None, b"one\n".to_vec()),
                (
                    "a.txt".to_string(),
                    Some((b"one\n".to_vec(), 0o600)),
                    b"two\n".to_vec()
                ),
            ]
        );
        let refusing = Recording {
            kept: Default::default(),
            refuse: true,
        };
        let refused = write(
            &ws,
            &json!({"path": "a.txt", "content": "three\n"}),
            &refusing,
        )
        .await
        .unwrap_err();
        assert_eq!(
            (
                refused,
                std::fs::read_to_string(dir.path().join("a.txt")).unwrap()
            ),
            ("no room".to_string(), "two\n".to_string())
        );
    }

    #[tokio::test]
    async fn list_marks_folders() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("a.txt"), "").unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        assert_eq!(list(&ws, &json!({})).await.unwrap().output, "a.txt\nsub/");
    }
}
