//! Permission rules: which tool calls run unasked, which always ask, which are refused.
//!
//! A rule names a tool and optionally a pattern of its key argument: `run_command(cargo test *)`,
//! `write_file(src/**)`, `edit_file(*.md)`, `mcp__github__*`, `delegate`. Rules sit in three
//! lists; a call is refused when a deny rule matches it, asked when an ask rule does (even for a
//! tool that would run unasked), run unasked when allow rules match it, and otherwise left to the
//! tool's default. Rules come from the user's config file and from the project's
//! `.sidechat/config.toml`, which may only add ask and deny rules: a cloned repository must not
//! be able to allow itself to run commands ([`project`]).
//!
//! Patterns:
//! - `run_command`: the command line is parsed ([`shell`]); the pattern matches each simple
//!   command's words, unquoted and joined by single spaces. `*` is any text, spaces included; a
//!   pattern ending in ` *` also matches without that last part, so `cargo test *` matches
//!   `cargo test` and `cargo test --lib` but not `cargo testify`. Prefix assignments are part of
//!   the words (`FOO=1 cargo test` is not allowed by `cargo test *`: variables such as
//!   `LD_PRELOAD` or `RUSTC_WRAPPER` change what a command does), but deny and ask rules also
//!   see each command without them, without wrappers such as `sudo` or `env`, and with `/bin/rm`
//!   as `rm`.
//! - file tools (`read_file`, `write_file`, `edit_file`, `list_directory`, `search_text`): a
//!   glob of the path relative to the workspace root; `*` stays within a folder, `**` crosses
//!   folders. A path outside the workspace matches no pattern, only a rule naming the tool alone.
//! - other tools (`delegate`, MCP tools) take no pattern; an MCP tool's name may end in `*`.

pub mod answers;
pub mod project;
pub mod shell;

use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// The built-in tools and the key argument a rule's pattern matches, if any.
const TOOLS: &[(&str, Key)] = &[
    ("run_command", Key::Command),
    ("read_file", Key::Path),
    ("write_file", Key::Path),
    ("edit_file", Key::Path),
    ("list_directory", Key::Path),
    ("search_text", Key::Path),
    ("delegate", Key::None),
    ("update_plan", Key::None),
    ("web_fetch", Key::Host),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    Command,
    Path,
    /// `web_fetch(host)`: the host of the call's URL, exactly (any case).
    Host,
    None,
}

/// The list a rule is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum List {
    Allow,
    Ask,
    Deny,
}

impl List {
    pub fn as_str(self) -> &'static str {
        match self {
            List::Allow => "allow",
            List::Ask => "ask",
            List::Deny => "deny",
        }
    }
}

/// Where a rule was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// The user's config file (`[permissions]`).
    User(PathBuf),
    /// The workspace's `.sidechat/config.toml`.
    Project(PathBuf),
    /// An "always in this workspace" answer saved in the database, by its id.
    Workspace(String),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::User(path) => write!(f, "the config file {}", path.display()),
            Origin::Project(path) => write!(f, "the project file {}", path.display()),
            Origin::Workspace(id) => write!(f, "the answers saved for this workspace (id {id})"),
        }
    }
}

/// A rule that could not be read, with its text.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("the {list} rule `{rule}` {problem}")]
pub struct RuleError {
    pub rule: String,
    pub list: &'static str,
    pub problem: String,
}

#[derive(Debug, Clone)]
enum Pattern {
    /// Matches every call of the tool.
    Any,
    Command(regex::Regex),
    Path(globset::GlobMatcher),
    Host(String),
}

/// One rule, read.
#[derive(Debug, Clone)]
pub struct Rule {
    text: String,
    list: List,
    origin: Origin,
    /// The tool's name, or its start when the rule ends in `*`.
    tool: String,
    tool_prefix: bool,
    pattern: Pattern,
}

impl PartialEq for Rule {
    fn eq(&self, other: &Self) -> bool {
        (&self.text, self.list, &self.origin) == (&other.text, other.list, &other.origin)
    }
}

impl Rule {
    /// Reads `text` (`tool` or `tool(pattern)`) as a rule of `list`.
    pub fn parse(text: &str, list: List, origin: Origin) -> Result<Self, RuleError> {
        let error = |problem: String| RuleError {
            rule: text.to_string(),
            list: list.as_str(),
            problem,
        };
        let trimmed = text.trim();
        let (name, argument) = match trimmed.find('(') {
            Some(open) => {
                let Some(inner) = trimmed[open + 1..].strip_suffix(')') else {
                    return Err(error(
                        "has no closing parenthesis at its end; write `tool(pattern)`".into(),
                    ));
                };
                (&trimmed[..open], Some(inner))
            }
            None => (trimmed, None),
        };
        if name.is_empty() {
            return Err(error("names no tool".into()));
        }
        let (tool, tool_prefix) = match name.strip_suffix('*') {
            Some(start) => (start, true),
            None => (name, false),
        };
        let valid_name = tool
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.');
        let builtin = TOOLS.iter().find(|(n, _)| *n == tool).map(|(_, key)| *key);
        let is_mcp = crate::mcp::names::is_mcp(tool);
        if !valid_name || (tool_prefix && !is_mcp) || (builtin.is_none() && !is_mcp) {
            let known: Vec<&str> = TOOLS.iter().map(|(n, _)| *n).collect();
            return Err(error(format!(
                "names no tool: the tools are {} and MCP tools (`mcp__SERVER__TOOL`, which may end in `*`)",
                known.join(", ")
            )));
        }
        let key = builtin.unwrap_or(Key::None);
        let pattern = match (argument.map(str::trim), key) {
            (None, _) => Pattern::Any,
            (Some(_), Key::None) => {
                return Err(error(format!("gives a pattern, but {name} takes none")));
            }
            (Some(""), _) => return Err(error("has an empty pattern".into())),
            (Some(pattern), Key::Host) => Pattern::Host(pattern.to_ascii_lowercase()),
            (Some(pattern), Key::Command) => Pattern::Command(
                command_pattern(pattern)
                    .map_err(|e| error(format!("has a pattern that cannot be matched: {e}")))?,
            ),
            (Some(pattern), Key::Path) => {
                if pattern.starts_with('/') || pattern.starts_with('~') {
                    return Err(error(
                        "gives an absolute path; patterns are relative to the workspace root"
                            .into(),
                    ));
                }
                if pattern.split('/').any(|part| part == "..") {
                    return Err(error(
                        "climbs out with `..`; patterns are relative to the workspace root".into(),
                    ));
                }
                let glob = globset::GlobBuilder::new(pattern)
                    .literal_separator(true)
                    .build()
                    .map_err(|e| error(format!("has a pattern that is not a glob: {e}")))?;
                Pattern::Path(glob.compile_matcher())
            }
        };
        Ok(Self {
            text: trimmed.to_string(),
            list,
            origin,
            tool: tool.to_string(),
            tool_prefix,
            pattern,
        })
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn list(&self) -> List {
        self.list
    }

    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    fn names(&self, tool: &str) -> bool {
        match self.tool_prefix {
            true => tool.starts_with(&self.tool),
            false => tool == self.tool,
        }
    }

    /// Whether the rule matches a command's words.
    fn matches_words(&self, words: &[String]) -> bool {
        match &self.pattern {
            Pattern::Any => true,
            Pattern::Command(regex) => regex.is_match(&words.join(" ")),
            Pattern::Path(_) | Pattern::Host(_) => false,
        }
    }
}

/// A command pattern as a regular expression over a simple command's joined words.
fn command_pattern(pattern: &str) -> Result<regex::Regex, regex::Error> {
    let (body, optional_tail) = match pattern.strip_suffix(" *") {
        Some(body) => (body, true),
        None => (pattern, false),
    };
    let mut source = String::from("^");
    for (i, part) in body.split('*').enumerate() {
        if i > 0 {
            source.push_str(".*");
        }
        source.push_str(&regex::escape(part));
    }
    if optional_tail {
        source.push_str("(?: .*)?");
    }
    source.push('$');
    regex::RegexBuilder::new(&source)
        .dot_matches_new_line(true)
        .build()
}

/// The rule that decided, and where it was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matched {
    pub rule: String,
    pub list: List,
    pub origin: Origin,
}

impl fmt::Display for Matched {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the {} rule `{}` in {}",
            self.list.as_str(),
            self.rule,
            self.origin
        )
    }
}

/// What the rules say about one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Refuse without asking.
    Deny(Matched),
    /// Ask the user, even when the tool would run unasked.
    Ask(Matched),
    /// Run without asking.
    Allow(Matched),
    /// No rule decides: the tool's default. `why` says what kept allow rules from applying
    /// to a command line (a substitution, a write outside), when something did.
    Default { why: Option<String> },
}

/// Rules in force, in the order they were written.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rules {
    rules: Vec<Rule>,
}

impl Rules {
    /// Reads the three lists; the first rule that cannot be read is the error.
    pub fn parse(
        allow: &[String],
        ask: &[String],
        deny: &[String],
        origin: &Origin,
    ) -> Result<Self, RuleError> {
        let mut rules = Vec::new();
        for (list, texts) in [(List::Allow, allow), (List::Ask, ask), (List::Deny, deny)] {
            for text in texts {
                rules.push(Rule::parse(text, list, origin.clone())?);
            }
        }
        Ok(Self { rules })
    }

    pub fn push(&mut self, rule: Rule) {
        self.rules.push(rule);
    }

    pub fn extend(&mut self, other: Rules) {
        self.rules.extend(other.rules);
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    fn of(&self, list: List, tool: &str) -> impl Iterator<Item = &Rule> {
        self.rules
            .iter()
            .filter(move |r| r.list == list && r.names(tool))
    }

    /// What the rules say about calling `tool` with `input` in the workspace `root`.
    pub fn decide(&self, tool: &str, input: &Value, root: Option<&Path>) -> Decision {
        let matched = |rule: &Rule| Matched {
            rule: rule.text.clone(),
            list: rule.list,
            origin: rule.origin.clone(),
        };
        if !self.rules.iter().any(|r| r.names(tool)) {
            return Decision::Default { why: None };
        }
        let key = TOOLS
            .iter()
            .find(|(n, _)| *n == tool)
            .map(|(_, key)| *key)
            .unwrap_or(Key::None);
        if key == Key::Command {
            let line = input.get("command").and_then(Value::as_str).unwrap_or("");
            return self.decide_command(tool, line, root, &matched);
        }
        let path = match key {
            Key::Path => {
                let requested = input.get("path").and_then(Value::as_str).unwrap_or(".");
                workspace_path(root, requested)
            }
            _ => None,
        };
        let host = match key {
            Key::Host => crate::tools::web_fetch::host_of(input),
            _ => None,
        };
        let applies = |rule: &Rule| match &rule.pattern {
            Pattern::Any => true,
            Pattern::Path(glob) => path.as_deref().is_some_and(|p| glob.is_match(p)),
            Pattern::Host(wanted) => host.as_deref() == Some(wanted.as_str()),
            Pattern::Command(_) => false,
        };
        for (list, decision) in [
            (List::Deny, Decision::Deny as fn(Matched) -> Decision),
            (List::Ask, Decision::Ask),
            (List::Allow, Decision::Allow),
        ] {
            if let Some(rule) = self.of(list, tool).find(|r| applies(r)) {
                return decision(matched(rule));
            }
        }
        Decision::Default { why: None }
    }

    fn decide_command(
        &self,
        tool: &str,
        line: &str,
        root: Option<&Path>,
        matched: &dyn Fn(&Rule) -> Matched,
    ) -> Decision {
        let analysis = shell::analyse(line, root);
        let forms: Vec<&Vec<String>> = analysis
            .commands
            .iter()
            .chain(&analysis.deny_forms)
            .collect();
        for (list, decision) in [
            (List::Deny, Decision::Deny as fn(Matched) -> Decision),
            (List::Ask, Decision::Ask),
        ] {
            let found = self.of(list, tool).find(|rule| {
                matches!(rule.pattern, Pattern::Any)
                    || forms.iter().any(|words| rule.matches_words(words))
            });
            if let Some(rule) = found {
                return decision(matched(rule));
            }
        }
        if let Some(why) = analysis.hazards.first() {
            return Decision::Default {
                why: Some(why.clone()),
            };
        }
        let mut first = None;
        for words in &analysis.commands {
            match self.of(List::Allow, tool).find(|r| r.matches_words(words)) {
                Some(rule) => {
                    first.get_or_insert(rule);
                }
                None => {
                    let why = (analysis.commands.len() > 1)
                        .then(|| format!("no allow rule matches `{}`", words.join(" ")));
                    return Decision::Default { why };
                }
            }
        }
        match first {
            Some(rule) => Decision::Allow(matched(rule)),
            None => Decision::Default { why: None },
        }
    }
}

/// The path a file tool's call names, relative to the workspace root with `/` separators;
/// `None` when it leaves the workspace (or there is none and the path is absolute).
fn workspace_path(root: Option<&Path>, requested: &str) -> Option<String> {
    let relative = match root {
        Some(root) => shell::relative_to(root, requested)?,
        None if Path::new(requested).is_absolute() => return None,
        None => shell::relative_to(Path::new("/"), requested)?,
    };
    Some(crate::tools::shown(&relative))
}

#[cfg(test)]
mod tests;
