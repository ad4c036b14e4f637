//! Project instructions (AGENTS.md, CLAUDE.md) as the system prompt carries them.
//!
//! Finding and reading the files is the runtime's (`runtime::instructions`); this puts what was
//! read together: each file under a heading naming it, outermost first, within a byte cap.
//! When the files pass the cap, the outermost are cut first: the files nearest the workspace
//! are the most specific, so they are the ones to keep.

use std::path::PathBuf;
use std::sync::Arc;

use crate::protocol::InstructionFile;

/// One instruction file as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub path: PathBuf,
    /// The file's text, or `None` when it is not UTF-8.
    pub text: Option<Arc<str>>,
}

/// The instructions a request carries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Assembled {
    /// What is appended to the system prompt; empty when there are no instructions.
    pub text: String,
    /// The files sent, outermost first, with the bytes of each sent.
    pub files: Vec<InstructionFile>,
    /// What the user should know: files skipped or cut, and why.
    pub notices: Vec<String>,
}

/// The heading a file's text is sent under.
fn heading(path: &std::path::Path) -> String {
    format!("# Instructions from {}", path.display())
}

/// Puts `sources` (outermost first) together within `max_bytes` of file text.
pub fn assemble(sources: &[Source], max_bytes: u64) -> Assembled {
    let mut notices = Vec::new();
    let mut texts: Vec<(&PathBuf, &str)> = Vec::new();
    for source in sources {
        match &source.text {
            Some(text) => texts.push((&source.path, text)),
            None => notices.push(format!(
                "The instruction file {} is not UTF-8 text; it was skipped.",
                source.path.display()
            )),
        }
    }
    let total = |texts: &[(&PathBuf, &str)]| texts.iter().map(|(_, t)| t.len() as u64).sum::<u64>();
    let mut cut = Vec::new();
    while texts.len() > 1 && total(&texts) > max_bytes {
        let (path, _) = texts.remove(0);
        cut.push(path.display().to_string());
    }
    if !cut.is_empty() {
        notices.push(format!(
            "The instruction files pass the {max_bytes}-byte cap ([instructions] max_bytes); left out, outermost first: {}.",
            cut.join(", ")
        ));
    }
    let mut shortened = None;
    if let Some((path, text)) = texts.first_mut()
        && text.len() as u64 > max_bytes
    {
        let mut end = usize::try_from(max_bytes).unwrap_or(usize::MAX);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        *text = &text[..end];
        shortened = Some(format!(
            "The instruction file {} passes the {max_bytes}-byte cap ([instructions] max_bytes); only its first {end} bytes are sent.",
            path.display()
        ));
    }
    notices.extend(shortened);
    let files = texts
        .iter()
        .map(|(path, text)| InstructionFile {
            path: path.display().to_string(),
            bytes: text.len() as u64,
        })
        .collect();
    let text = texts
        .iter()
        .map(|(path, text)| format!("{}\n\n{}", heading(path), text.trim_end()))
        .collect::<Vec<_>>()
        .join("\n\n");
    Assembled {
        text,
        files,
        notices,
    }
}

/// The system prompt a request sends: the session's own, then the instructions.
pub fn system_prompt(own: Option<&str>, instructions: &Assembled) -> Option<String> {
    let own = own.filter(|p| !p.is_empty());
    match (own, instructions.text.is_empty()) {
        (None, true) => None,
        (Some(own), true) => Some(own.to_string()),
        (None, false) => Some(instructions.text.clone()),
        (Some(own), false) => Some(format!("{own}\n\n{}", instructions.text)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn source(path: &str, text: &str) -> Source {
        Source {
            path: PathBuf::from(path),
            text: Some(text.into()),
        }
    }

    fn file(path: &str, bytes: u64) -> InstructionFile {
        InstructionFile {
            path: path.into(),
            bytes,
        }
    }

    #[test]
    fn files_come_outermost_first_each_under_its_heading() {
        let sources = [
            source("/home/u/.config/sidechat/AGENTS.md", "Be terse.\n"),
            source("/repo/AGENTS.md", "Use tabs."),
            source("/repo/app/CLAUDE.md", "Run make."),
        ];
        assert_eq!(
            assemble(&sources, 1024),
            Assembled {
                text: "# Instructions from /home/u/.config/sidechat/AGENTS.md\n\nBe terse.\n\n\
                       # Instructions from /repo/AGENTS.md\n\nUse tabs.\n\n\
                       # Instructions from /repo/app/CLAUDE.md\n\nRun make."
                    .into(),
                files: vec![
                    file("/home/u/.config/sidechat/AGENTS.md", 10),
                    file("/repo/AGENTS.md", 9),
                    file("/repo/app/CLAUDE.md", 9),
                ],
                notices: vec![],
            }
        );
    }

    #[test]
    fn the_cap_cuts_the_outermost_files_first_and_says_so() {
        let sources = [
            source("/u/AGENTS.md", "aaaa"),
            source("/r/AGENTS.md", "bbbb"),
            source("/r/w/AGENTS.md", "cccc"),
        ];
        let assembled = assemble(&sources, 9);
        assert_eq!(
            (assembled.files, assembled.notices),
            (
                vec![file("/r/AGENTS.md", 4), file("/r/w/AGENTS.md", 4)],
                vec![
                    "The instruction files pass the 9-byte cap ([instructions] max_bytes); left out, outermost first: /u/AGENTS.md."
                        .to_string()
                ]
            )
        );
    }

    #[test]
    fn one_file_over_the_cap_is_shortened_on_a_character_boundary() {
        let assembled = assemble(&[source("/w/AGENTS.md", "ééé")], 3);
        assert_eq!(
            (assembled.text, assembled.files, assembled.notices),
            (
                "# Instructions from /w/AGENTS.md\n\né".to_string(),
                vec![file("/w/AGENTS.md", 2)],
                vec!["The instruction file /w/AGENTS.md passes the 3-byte cap ([instructions] max_bytes); only its first 2 bytes are sent.".to_string()]
            )
        );
    }

    #[test]
    fn a_file_that_is_not_utf8_is_skipped_with_a_notice() {
        let sources = [
            Source {
                path: "/r/AGENTS.md".into(),
                text: None,
            },
            source("/r/w/AGENTS.md", "ok"),
        ];
        let assembled = assemble(&sources, 100);
        assert_eq!(
            (assembled.files, assembled.notices),
            (
                vec![file("/r/w/AGENTS.md", 2)],
                vec![
                    "The instruction file /r/AGENTS.md is not UTF-8 text; it was skipped."
                        .to_string()
                ]
            )
        );
    }

    #[test]
    fn the_system_prompt_is_the_sessions_own_then_the_instructions() {
        let some = assemble(&[source("/w/AGENTS.md", "x")], 100);
        let none = Assembled::default();
        assert_eq!(
            [
                system_prompt(Some("Own."), &some),
                system_prompt(None, &some),
                system_prompt(Some("Own."), &none),
                system_prompt(Some(""), &none),
            ],
            [
                Some("Own.\n\n# Instructions from /w/AGENTS.md\n\nx".to_string()),
                Some("# Instructions from /w/AGENTS.md\n\nx".to_string()),
                Some("Own.".to_string()),
                None,
            ]
        );
    }
}
