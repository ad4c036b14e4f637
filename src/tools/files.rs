//! Reading, listing, writing and editing files inside the workspace.

use serde_json::Value;

use super::replace::replace_file;
use super::{FileSnapshot, ToolOutcome, Workspace, str_arg, truncate};
use crate::protocol::ChangedFile;

/// Most bytes of a file shown to the model at once.
const READ_CAP: usize = 256 * 1024;
/// Most entries a listing shows.
const LIST_CAP: usize = 1000;

fn required<'a>(input: &'a Value, key: &str) -> Result<&'a str, String> {
    str_arg(input, key).ok_or_else(|| format!("The input needs a string field {key:?}."))
}

pub async fn read(ws: &Workspace, input: &Value) -> Result<ToolOutcome, String> {
    let requested = required(input, "path")?;
    let path = ws.resolve(requested).map_err(|e| e.to_string())?;
    let bytes = tokio::fs::read(&path)
        .await
        .map_err(|e| format!("Cannot read {requested}: {e}"))?;
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
        .map(|(i, line)| format!("{:>6}\t{line}", i + 1))
        .collect();
    if selected.is_empty() {
        return Ok(ToolOutcome::ok(format!(
            "{requested} has no lines from line {offset} on."
        )));
    }
    Ok(ToolOutcome::ok(truncate(&selected.join("\n"), READ_CAP)))
}

pub async fn list(ws: &Workspace, input: &Value) -> Result<ToolOutcome, String> {
    let requested = str_arg(input, "path").unwrap_or(".");
    let path = ws.resolve(requested).map_err(|e| e.to_string())?;
    let mut reader = tokio::fs::read_dir(&path)
        .await
        .map_err(|e| format!("Cannot list {requested}: {e}"))?;
    let mut names = Vec::new();
    while let Some(entry) = reader
        .next_entry()
        .await
        .map_err(|e| format!("Cannot list {requested}: {e}"))?
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        let is_dir = entry.file_type().await.map(|t| t.is_dir()).unwrap_or(false);
        names.push(if is_dir { format!("{name}/") } else { name });
    }
    names.sort();
    if names.is_empty() {
        return Ok(ToolOutcome::ok(format!("{} is empty.", ws.display(&path))));
    }
    let total = names.len();
    names.truncate(LIST_CAP);
    let mut output = names.join("\n");
    if total > LIST_CAP {
        output.push_str(&format!("\n… and {} more entries", total - LIST_CAP));
    }
    Ok(ToolOutcome::ok(output))
}

pub async fn write(ws: &Workspace, input: &Value) -> Result<ToolOutcome, String> {
    let requested = required(input, "path")?;
    let content = required(input, "content")?;
    let path = ws.resolve(requested).map_err(|e| e.to_string())?;
    if path.is_dir() {
        return Err(format!("{requested} is a folder."));
    }
    let old = match tokio::fs::read(&path).await {
        Ok(bytes) => Some(String::from_utf8_lossy(&bytes).into_owned()),
        Err(_) => None,
    };
    if let Some(parent) = path.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(|e| format!("Cannot create the folder for {requested}: {e}"))?;
    }
    replace_file(&path, content)
        .await
        .map_err(|e| format!("Cannot write {requested}: {e}"))?;
    let (added, removed) = line_changes(old.as_deref().unwrap_or(""), content);
    let verb = if old.is_some() {
        "Overwrote"
    } else {
        "Created"
    };
    let shown = ws.display(&path);
    Ok(ToolOutcome {
        output: format!("{verb} {shown} (+{added} -{removed} lines)."),
        is_error: false,
        changed: Some(ChangedFile {
            path: shown,
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

pub async fn edit(ws: &Workspace, input: &Value) -> Result<ToolOutcome, String> {
    let requested = required(input, "path")?;
    let old_string = required(input, "old_string")?;
    let new_string = required(input, "new_string")?;
    if old_string.is_empty() {
        return Err("old_string is empty; use write_file to create a file.".to_string());
    }
    let path = ws.resolve(requested).map_err(|e| e.to_string())?;
    let text = tokio::fs::read_to_string(&path)
        .await
        .map_err(|e| format!("Cannot read {requested}: {e}"))?;
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
    replace_file(&path, &updated)
        .await
        .map_err(|e| format!("Cannot write {requested}: {e}"))?;
    let (added, removed) = line_changes(&text, &updated);
    let shown = ws.display(&path);
    Ok(ToolOutcome {
        output: format!("Edited {shown} (+{added} -{removed} lines)."),
        is_error: false,
        changed: Some(ChangedFile {
            path: shown,
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
        let written = write(&ws, &json!({"path": "d/n.md", "content": "one\ntwo\n"}))
            .await
            .unwrap();
        assert_eq!(written.output, "Created d/n.md (+2 -0 lines).");
        let edited = edit(
            &ws,
            &json!({"path": "d/n.md", "old_string": "two", "new_string": "2\n3"}),
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
                "write" => write(&ws, &json!({"path": name, "content": "inside\n"})).await,
                _ => {
                    let input =
                        json!({"path": name, "old_string": "outside", "new_string": "inside"});
                    edit(&ws, &input).await
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

    #[tokio::test]
    async fn list_marks_folders() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("a.txt"), "").unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        assert_eq!(list(&ws, &json!({})).await.unwrap().output, "a.txt\nsub/");
    }
}
