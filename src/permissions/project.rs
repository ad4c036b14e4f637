//! The rules a workspace brings: `<workspace>/.sidechat/config.toml`, `[permissions]`.
//!
//! A project may add ask and deny rules only. A cloned repository is not the user, so an
//! `allow` there is ignored, and the user is told (naming the file) rather than left to wonder
//! why a rule does nothing. A rule that cannot be read is skipped with a notice too: the file
//! belongs to the project, and a mistake in it must not stop the daemon.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{List, Origin, Rule, Rules};

/// The project file's path under a workspace root.
pub fn path(root: &Path) -> PathBuf {
    root.join(".sidechat").join("config.toml")
}

/// The project's rules and what the user should be told about the file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProjectRules {
    pub rules: Rules,
    /// One line each: ignored allow rules, rules that cannot be read, a file that is not TOML.
    pub notices: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
struct ProjectFile {
    #[serde(default)]
    permissions: Option<ProjectPermissions>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProjectPermissions {
    #[serde(default)]
    allow: Vec<String>,
    #[serde(default)]
    ask: Vec<String>,
    #[serde(default)]
    deny: Vec<String>,
}

/// Reads the workspace's project file; no file, no rules.
pub fn load(root: &Path) -> ProjectRules {
    let file = path(root);
    let text = match std::fs::read_to_string(&file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return ProjectRules::default(),
        Err(e) => {
            return ProjectRules {
                rules: Rules::default(),
                notices: vec![format!(
                    "The project file {} cannot be read ({e}); its permission rules are not in force.",
                    file.display()
                )],
            };
        }
    };
    parse(&text, &file)
}

/// Reads the text of the project file at `file`.
pub fn parse(text: &str, file: &Path) -> ProjectRules {
    let mut project = ProjectRules::default();
    let permissions = match toml::from_str::<ProjectFile>(text) {
        Ok(parsed) => parsed.permissions.unwrap_or_default(),
        Err(e) => {
            project.notices.push(format!(
                "The project file {} is not valid ({}); its permission rules are not in force.",
                file.display(),
                e.message()
            ));
            return project;
        }
    };
    if !permissions.allow.is_empty() {
        let listed: Vec<String> = permissions.allow.iter().map(|r| format!("`{r}`")).collect();
        project.notices.push(format!(
            "Ignored the allow rules of the project file {} ({}): a project may only add ask and deny rules; allow rules belong in your own config file.",
            file.display(),
            listed.join(", ")
        ));
    }
    let origin = Origin::Project(file.to_path_buf());
    for (list, texts) in [
        (List::Ask, &permissions.ask),
        (List::Deny, &permissions.deny),
    ] {
        for text in texts {
            match Rule::parse(text, list, origin.clone()) {
                Ok(rule) => project.rules.push(rule),
                Err(e) => project.notices.push(format!(
                    "Ignored a rule of the project file {}: {e}.",
                    file.display()
                )),
            }
        }
    }
    project
}
