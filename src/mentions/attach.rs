//! Reading what a message's mentions name, confined to the workspace like the file tools.
//!
//! A file is attached numbered as `read_file` shows it, so the model reads a mention and a tool
//! result alike; a folder is attached as `list_directory` lists it. A mention that cannot be
//! attached is left in the text as typed, with a reason for a notice, except a bare word that
//! names nothing (`@alice`), which was never meant as a path.

use std::io::Read;

use super::parse::{Mention, parse};
use crate::protocol::{Block, LineRange};
use crate::tools::{OpenError, PathError, Workspace, folder_names, listing, numbered, shown};

/// The largest file a mention reads: past it even a range of lines is better read with
/// `read_file`'s offset and limit.
const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// A mention's text, ready to be stored as an attachment.
#[derive(Debug, Clone, PartialEq)]
pub struct Attached {
    /// The path relative to the workspace root; a folder's ends with `/`.
    pub name: String,
    /// The lines attached, for a mention that named some.
    pub range: Option<LineRange>,
    /// The bytes of the file (or the listing) as read.
    pub size: u64,
    /// Their SHA-256, lower-case hex.
    pub hash: String,
    /// What the model reads: numbered lines, or the listing.
    pub text: String,
}

impl Attached {
    pub fn into_block(self) -> Block {
        Block::Attachment {
            name: self.name,
            text: self.text,
            range: self.range,
            size: Some(self.size),
            hash: Some(self.hash),
        }
    }
}

/// What a message's mentions came to: the attachments, and why any mention was left as typed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Resolved {
    pub attachments: Vec<Attached>,
    pub notices: Vec<String>,
}

/// Why a mention was not attached.
enum Left {
    /// Not meant as a path: plain text, nothing to say.
    Silently,
    Because(String),
}

/// Reads every mention in `text` below `workspace`, attaching at most `max_bytes` of text in
/// all (a mention past the cap is left as typed). Blocking: run it off the async threads.
pub fn resolve(workspace: &Workspace, text: &str, max_bytes: u64) -> Resolved {
    let mut resolved = Resolved::default();
    let mut used = 0u64;
    for mention in parse(text) {
        match read(workspace, &mention) {
            Ok(attached) => {
                let again = resolved
                    .attachments
                    .iter()
                    .any(|a| a.name == attached.name && a.range == attached.range);
                if again {
                    continue;
                }
                let len = attached.text.len() as u64;
                if used + len > max_bytes {
                    resolved.notices.push(format!(
                        "{} is left as typed: its {len} bytes would take this message's mentions \
                         past their cap of {max_bytes} bytes ([mentions] max_bytes)",
                        mention.typed
                    ));
                    continue;
                }
                used += len;
                resolved.attachments.push(attached);
            }
            Err(Left::Silently) => {}
            Err(Left::Because(why)) => resolved
                .notices
                .push(format!("{} is left as typed: {why}", mention.typed)),
        }
    }
    resolved
}

/// The attachment one mention names.
fn read(workspace: &Workspace, mention: &Mention) -> Result<Attached, Left> {
    let path = mention.path.as_str();
    let relative = workspace.relative(path).map_err(|e| refused(&e))?;
    let mut file = match workspace.open_relative_file(path, &relative) {
        Ok(file) => file,
        Err(OpenError::Path(e)) => return Err(refused(&e)),
        Err(OpenError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(if mention.looks_like_a_path() {
                Left::Because("there is no such file or folder in the workspace".into())
            } else {
                Left::Silently
            });
        }
        Err(OpenError::Io(e)) => return Err(Left::Because(format!("it cannot be read: {e}"))),
    };
    let cannot = |e: std::io::Error| Left::Because(format!("it cannot be read: {e}"));
    let metadata = file.metadata().map_err(cannot)?;
    let name = shown(&relative);
    if metadata.is_dir() {
        if mention.lines.is_some() {
            return Err(Left::Because("it is a folder, which has no lines".into()));
        }
        let (names, shown_path) = folder_names(workspace, path).map_err(Left::Because)?;
        let text = listing(names, &shown_path);
        return Ok(Attached {
            name: format!("{}/", name.trim_end_matches('/')),
            range: None,
            size: text.len() as u64,
            hash: crate::store::content_hash(text.as_bytes()),
            text,
        });
    }
    if !metadata.is_file() {
        return Err(Left::Because("it is not a regular file".into()));
    }
    if metadata.len() > MAX_FILE_BYTES {
        return Err(Left::Because(format!(
            "it holds {} bytes, more than a mention reads ({MAX_FILE_BYTES}); ask for the part you need",
            metadata.len()
        )));
    }
    let mut bytes = Vec::new();
    (&mut file)
        .take(MAX_FILE_BYTES)
        .read_to_end(&mut bytes)
        .map_err(cannot)?;
    let binary = || Left::Because("it is a binary file, not text".into());
    if bytes.contains(&0) {
        return Err(binary());
    }
    let text = std::str::from_utf8(&bytes).map_err(|_| binary())?;
    let lines: Vec<&str> = text.lines().collect();
    let (range, first, last) = match mention.lines {
        None => (None, 1, lines.len()),
        Some(asked) => {
            let (first, last) = lines_within(asked, lines.len(), &name)?;
            let range = LineRange {
                start: first as u64,
                end: last as u64,
            };
            (Some(range), first, last)
        }
    };
    let numbered_text = lines
        .get(first.saturating_sub(1)..last)
        .unwrap_or_default()
        .iter()
        .enumerate()
        .map(|(i, line)| numbered(first + i, line))
        .collect::<Vec<_>>()
        .join("\n");
    Ok(Attached {
        name,
        range,
        size: bytes.len() as u64,
        hash: crate::store::content_hash(&bytes),
        text: numbered_text,
    })
}

/// The lines of a range that the file has (its end cut to the file's last line), or why none.
fn lines_within(asked: LineRange, count: usize, name: &str) -> Result<(usize, usize), Left> {
    if asked.start == 0 {
        return Err(Left::Because("lines are counted from 1".into()));
    }
    if asked.end < asked.start {
        return Err(Left::Because(format!(
            "the range {}-{} ends before it starts",
            asked.start, asked.end
        )));
    }
    let start = usize::try_from(asked.start).unwrap_or(usize::MAX);
    if start > count {
        let has = match count {
            1 => "1 line".to_string(),
            n => format!("{n} lines"),
        };
        return Err(Left::Because(format!("{name} has {has}")));
    }
    let end = usize::try_from(asked.end).unwrap_or(usize::MAX).min(count);
    Ok((start, end))
}

/// A path the workspace refuses, said for a mention.
fn refused(error: &PathError) -> Left {
    Left::Because(match error {
        PathError::Outside(_) => {
            "it is outside the workspace, and mentions attach only files under the workspace root"
                .into()
        }
        PathError::Symlink(_) => {
            "it goes through a symbolic link, which mentions do not follow".into()
        }
        PathError::BadRoot(_) => error.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn workspace() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("src")).unwrap();
        std::fs::write(dir.path().join("src/a.rs"), "one\ntwo\nthree\n").unwrap();
        std::fs::write(dir.path().join("blob.bin"), b"\x00\x01\x02").unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        (dir, ws)
    }

    #[test]
    fn a_file_a_range_and_a_folder_are_attached() {
        let (_dir, ws) = workspace();
        let resolved = resolve(&ws, "@src/a.rs @src/a.rs:2-9 @src", 1 << 20);
        let whole = "one\ntwo\nthree\n";
        let hash = crate::store::content_hash(whole.as_bytes());
        assert_eq!(
            resolved,
            Resolved {
                attachments: vec![
                    Attached {
                        name: "src/a.rs".into(),
                        range: None,
                        size: 14,
                        hash: hash.clone(),
                        text: "     1\tone\n     2\ttwo\n     3\tthree".into(),
                    },
                    Attached {
                        name: "src/a.rs".into(),
                        range: Some(LineRange { start: 2, end: 3 }),
                        size: 14,
                        hash,
                        text: "     2\ttwo\n     3\tthree".into(),
                    },
                    Attached {
                        name: "src/".into(),
                        range: None,
                        size: 4,
                        hash: crate::store::content_hash(b"a.rs"),
                        text: "a.rs".into(),
                    },
                ],
                notices: vec![],
            }
        );
    }

    #[test]
    fn what_cannot_be_attached_is_left_as_typed_with_a_reason() {
        let (_dir, ws) = workspace();
        let text =
            "@blob.bin @gone.rs @../up.rs @src/a.rs:7 @src/a.rs:0 @src/a.rs:3-2 @src:1 @alice";
        let resolved = resolve(&ws, text, 1 << 20);
        assert_eq!(
            resolved,
            Resolved {
                attachments: vec![],
                notices: vec![
                    "@blob.bin is left as typed: it is a binary file, not text".into(),
                    "@gone.rs is left as typed: there is no such file or folder in the workspace"
                        .into(),
                    "@../up.rs is left as typed: it is outside the workspace, and mentions attach only files under the workspace root".into(),
                    "@src/a.rs:7 is left as typed: src/a.rs has 3 lines".into(),
                    "@src/a.rs:0 is left as typed: lines are counted from 1".into(),
                    "@src/a.rs:3-2 is left as typed: the range 3-2 ends before it starts".into(),
                    "@src:1 is left as typed: it is a folder, which has no lines".into(),
                ],
            }
        );
    }

    #[test]
    fn the_cap_leaves_out_the_mention_that_would_pass_it() {
        let (_dir, ws) = workspace();
        let resolved = resolve(&ws, "@src/a.rs:1 @src/a.rs:2-3", 12);
        assert_eq!(
            (
                resolved
                    .attachments
                    .iter()
                    .map(|a| a.text.as_str())
                    .collect::<Vec<_>>(),
                resolved.notices
            ),
            (
                vec!["     1\tone"],
                vec![
                    "@src/a.rs:2-3 is left as typed: its 23 bytes would take this message's mentions past their cap of 12 bytes ([mentions] max_bytes)".to_string()
                ]
            )
        );
    }
}
