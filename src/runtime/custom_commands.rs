//! Custom slash commands: Markdown files whose body is a prompt, `/NAME` for
//! `.sidechat/commands/NAME.md` in the workspace (shared through the repository) or
//! `$XDG_CONFIG_HOME/sidechat/commands/NAME.md` (the user's own).
//!
//! Files are read when a command is looked up or listed, so an edited file counts from the
//! next message on without a restart; a folder holds a handful of small files.

use std::path::{Path, PathBuf};

use crate::protocol::{CommandInfo, CommandSource};

/// The built-in commands: name, argument hint, description. They win over files of the same
/// name.
pub const BUILTINS: &[(&str, &str, &str)] = &[
    ("cost", "", "what this session has cost so far"),
    (
        "model",
        "[--force] <id>",
        "switch the model (from the next request on)",
    ),
    (
        "effort",
        "[level]",
        "how hard the model thinks: minimal, low, medium, high or default",
    ),
    (
        "system",
        "[text]",
        "set the system prompt; alone, remove it",
    ),
    (
        "clear",
        "",
        "the model starts fresh; earlier messages stay readable",
    ),
    ("compact", "[focus]", "summarise the earlier turns now"),
    (
        "new-context",
        "",
        "start afresh with a short note carried over",
    ),
    (
        "instructions",
        "",
        "the instruction files (AGENTS.md) sent with every request",
    ),
    ("help", "", "the commands"),
];

/// A command file, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomCommand {
    pub name: String,
    pub description: Option<String>,
    pub argument_hint: Option<String>,
    /// The model this command's turn runs on, when the file names one.
    pub model: Option<String>,
    /// The prompt, before expansion.
    pub body: String,
    pub path: PathBuf,
    pub source: CommandSource,
}

/// The project's command folder in a workspace.
pub fn project_dir(workspace: &Path) -> PathBuf {
    workspace.join(".sidechat").join("commands")
}

/// The user's command folder in their sidechat folder.
pub fn user_dir(user: &Path) -> PathBuf {
    user.join("commands")
}

/// Whether `name` is a command name a file may define: what `/NAME` parses as.
fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '-')
}

/// Splits front matter (`---` lines around `key: value` lines) from the body.
pub fn parse(name: &str, text: &str, path: &Path, source: CommandSource) -> CustomCommand {
    let mut command = CustomCommand {
        name: name.to_string(),
        description: None,
        argument_hint: None,
        model: None,
        body: text.to_string(),
        path: path.to_path_buf(),
        source,
    };
    let mut lines = text.split_inclusive('\n');
    if lines.next().map(str::trim_end) != Some("---") {
        return command;
    }
    let mut consumed = text.find('\n').map_or(text.len(), |i| i + 1);
    let mut closed = false;
    for line in lines {
        consumed += line.len();
        let line = line.trim_end();
        if line == "---" {
            closed = true;
            break;
        }
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = unquote(value.trim());
        let value = Some(value.to_string()).filter(|v| !v.is_empty());
        match key.trim() {
            "description" => command.description = value,
            "argument-hint" => command.argument_hint = value,
            "model" => command.model = value,
            _ => {}
        }
    }
    if closed {
        command.body = text[consumed..]
            .trim_start_matches(['\r', '\n'])
            .to_string();
    }
    command
}

fn unquote(value: &str) -> &str {
    for quote in ['"', '\''] {
        if let Some(inner) = value
            .strip_prefix(quote)
            .and_then(|v| v.strip_suffix(quote))
        {
            return inner;
        }
    }
    value
}

/// The words of `arguments` as a shell splits them: whitespace separates, single quotes keep
/// everything, double quotes keep all but `\"` and `\\`, a backslash outside quotes escapes the
/// next character. An unclosed quote runs to the end.
pub fn words(arguments: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = arguments.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                for c in chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                    word.push(c);
                }
            }
            '"' => {
                in_word = true;
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => match chars.next() {
                            Some(next @ ('"' | '\\')) => word.push(next),
                            Some(next) => {
                                word.push('\\');
                                word.push(next);
                            }
                            None => word.push('\\'),
                        },
                        c => word.push(c),
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(next) = chars.next() {
                    word.push(next);
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// The prompt `body` makes with `arguments`: `$ARGUMENTS` is all of them as typed, `$1`…`$9`
/// their words (empty when there are fewer). A body that uses neither gets the arguments
/// appended, so what was typed after the command is never lost.
pub fn expand(body: &str, arguments: &str) -> String {
    let words = words(arguments);
    let mut out = String::with_capacity(body.len() + arguments.len());
    let mut used = false;
    let mut rest = body;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix("ARGUMENTS") {
            out.push_str(arguments);
            used = true;
            rest = tail;
        } else if let Some(digit) = after.chars().next().and_then(|c| c.to_digit(10))
            && (1..=9).contains(&digit)
        {
            out.push_str(words.get(digit as usize - 1).map_or("", String::as_str));
            used = true;
            rest = &after[1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    if !used && !arguments.is_empty() {
        out = format!("{}\n\n{arguments}", out.trim_end());
    }
    out
}

/// Reads the commands of one folder, by name.
fn read_folder(dir: &Path, source: CommandSource) -> Vec<CustomCommand> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut commands: Vec<CustomCommand> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let path = entry.path();
            let name = path
                .file_name()?
                .to_str()?
                .strip_suffix(".md")?
                .to_lowercase();
            if !valid_name(&name) || !path.is_file() {
                return None;
            }
            let text = std::fs::read_to_string(&path)
                .map_err(|e| tracing::warn!(path = %path.display(), error = %e, "cannot read a command file"))
                .ok()?;
            Some(parse(&name, &text, &path, source))
        })
        .collect();
    commands.sort_by(|a, b| a.name.cmp(&b.name));
    commands
}

/// Where a session's commands come from.
#[derive(Debug, Clone, Default)]
pub struct Folders {
    pub project: Option<PathBuf>,
    pub user: Option<PathBuf>,
}

/// The custom commands in force, by name (a project command beats a user one of the same
/// name), and the files a built-in command shadows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Found {
    pub commands: Vec<CustomCommand>,
    pub shadowed: Vec<CustomCommand>,
}

impl Folders {
    pub fn read(&self) -> Found {
        let mut found = Found::default();
        let project = self
            .project
            .as_deref()
            .map(|d| read_folder(d, CommandSource::Project))
            .unwrap_or_default();
        let user = self
            .user
            .as_deref()
            .map(|d| read_folder(d, CommandSource::User))
            .unwrap_or_default();
        for command in project.into_iter().chain(user) {
            if BUILTINS.iter().any(|(name, ..)| *name == command.name) {
                found.shadowed.push(command);
            } else if !found.commands.iter().any(|c| c.name == command.name) {
                found.commands.push(command);
            }
        }
        found.commands.sort_by(|a, b| a.name.cmp(&b.name));
        found
    }

    /// A listing's stamp: each command file's path, size and modification time, so a watcher
    /// can tell that the commands changed.
    pub fn stamp(&self) -> Vec<(PathBuf, u64, Option<std::time::SystemTime>)> {
        let mut stamp = Vec::new();
        for dir in [&self.project, &self.user].into_iter().flatten() {
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            for entry in entries.filter_map(Result::ok) {
                if let Ok(meta) = entry.metadata() {
                    stamp.push((entry.path(), meta.len(), meta.modified().ok()));
                }
            }
        }
        stamp.sort();
        stamp
    }
}

/// The listing `session/commands` answers: built-ins first, then the custom commands.
pub fn infos(found: &Found) -> Vec<CommandInfo> {
    let builtins = BUILTINS
        .iter()
        .map(|(name, hint, description)| CommandInfo {
            name: name.to_string(),
            description: description.to_string(),
            argument_hint: Some(hint.to_string()).filter(|h| !h.is_empty()),
            source: CommandSource::Builtin,
            path: None,
        });
    let custom = found.commands.iter().map(|c| CommandInfo {
        name: c.name.clone(),
        description: c.description.clone().unwrap_or_else(|| first_line(&c.body)),
        argument_hint: c.argument_hint.clone(),
        source: c.source,
        path: Some(c.path.display().to_string()),
    });
    builtins.chain(custom).collect()
}

/// A description for a file without one: its prompt's first line, shortened.
fn first_line(body: &str) -> String {
    let line = body.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let line = line.trim();
    match line.char_indices().nth(60) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn front_matter_gives_the_description_hint_and_model() {
        let text = "---\ndescription: Review a file\nargument-hint: \"<path>\"\nmodel: gpt-4o-mini\n---\n\nReview $1 carefully.\n";
        let command = parse(
            "review",
            text,
            Path::new("/w/review.md"),
            CommandSource::Project,
        );
        assert_eq!(
            command,
            CustomCommand {
                name: "review".into(),
                description: Some("Review a file".into()),
                argument_hint: Some("<path>".into()),
                model: Some("gpt-4o-mini".into()),
                body: "Review $1 carefully.\n".into(),
                path: "/w/review.md".into(),
                source: CommandSource::Project,
            }
        );
        let plain = parse(
            "p",
            "Just a prompt.",
            Path::new("/p.md"),
            CommandSource::User,
        );
        assert_eq!(
            (plain.description, plain.body),
            (None, "Just a prompt.".into())
        );
    }

    #[test]
    fn words_split_like_a_shell() {
        assert_eq!(
            words(r#"src/lib.rs "two words" 'it''s' a\ b "q\"x" """#),
            vec!["src/lib.rs", "two words", "its", "a b", "q\"x", ""]
        );
        assert_eq!(words("   "), Vec::<String>::new());
    }

    #[test]
    fn arguments_and_words_are_substituted() {
        assert_eq!(
            expand(
                "Review $1 then $2 ($ARGUMENTS); $9 stays empty, $x and $ stay.",
                r#"a.rs "b c.rs""#
            ),
            r#"Review a.rs then b c.rs (a.rs "b c.rs");  stays empty, $x and $ stay."#
        );
        assert_eq!(expand("Summarise.\n", "briefly"), "Summarise.\n\nbriefly");
        assert_eq!(expand("Summarise.\n", ""), "Summarise.\n");
    }

    #[test]
    fn a_project_command_beats_a_users_and_a_builtin_beats_both() {
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path().join("p");
        let user = dir.path().join("u");
        std::fs::create_dir_all(&project).unwrap();
        std::fs::create_dir_all(&user).unwrap();
        std::fs::write(project.join("review.md"), "project review").unwrap();
        std::fs::write(user.join("review.md"), "user review").unwrap();
        std::fs::write(user.join("Fix.md"), "user fix").unwrap();
        std::fs::write(project.join("help.md"), "not used").unwrap();
        std::fs::write(project.join("not a name.md"), "ignored").unwrap();
        let found = Folders {
            project: Some(project.clone()),
            user: Some(user.clone()),
        }
        .read();
        let names = |list: &[CustomCommand]| {
            list.iter()
                .map(|c| (c.name.clone(), c.body.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            (names(&found.commands), names(&found.shadowed)),
            (
                vec![
                    ("fix".to_string(), "user fix".to_string()),
                    ("review".to_string(), "project review".to_string())
                ],
                vec![("help".to_string(), "not used".to_string())]
            )
        );
    }
}
