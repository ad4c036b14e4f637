//! Reading a `run_command` command line as the shell will, so rules match commands and not
//! text: `git status; rm -rf ~` is two commands, and only the first is `git status`.
//!
//! The parser is `brush-parser`, the parser of the brush shell: pure Rust (no C toolchain, unlike
//! `tree-sitter-bash`), maintained with the shell that runs on it, and it reads bash, not only
//! POSIX sh — the shell `run_command` uses. Its AST keeps every word's raw text, which
//! [`brush_parser::word::parse`] splits into quoted text, escapes and expansions.
//!
//! The result is the list of simple commands (each as its words, unquoted) and the hazards that
//! keep a line from being allowed by rules whatever its commands are: command and process
//! substitution, `eval`-like builtins, function definitions, expansions whose value is not known
//! before the line runs, writes through redirections outside the workspace, and anything the
//! parser cannot read. Deny rules still see the commands inside substitutions and `sh -c` strings.

use std::path::{Component, Path, PathBuf};

use brush_parser::ast::{
    self, Command, CommandPrefixOrSuffixItem, CompoundCommand, CompoundList, IoFileRedirectKind,
    IoFileRedirectTarget, IoRedirect, SimpleCommand,
};
use brush_parser::word::{WordPiece, WordPieceWithSource};
use brush_parser::{Parser, ParserOptions};

/// Builtins that run text as commands, replace the shell, or change what later names mean.
const EVALUATING: &[&str] = &[
    "eval", "exec", "source", ".", "trap", "alias", "enable", "builtin", "command", "shopt",
];

/// Commands that run their arguments as a command; deny rules look through them.
const WRAPPERS: &[&str] = &[
    "sudo", "doas", "env", "nohup", "nice", "time", "command", "builtin", "exec", "xargs",
];

/// Shells whose `-c` string deny rules read too.
const SHELLS: &[&str] = &["sh", "bash", "dash", "zsh", "ksh"];

/// Files a redirection may write although they are outside the workspace.
const HARMLESS_SINKS: &[&str] = &["/dev/null", "/dev/stdout", "/dev/stderr"];

/// How deep substitutions and `sh -c` strings are read for deny rules.
const MAX_DEPTH: usize = 4;

/// A command line as rules see it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Analysis {
    /// Each simple command's words, unquoted, prefix assignments first (`FOO=1 cargo test` is
    /// `["FOO=1", "cargo", "test"]`).
    pub commands: Vec<Vec<String>>,
    /// Further forms of the commands that deny rules also match: without prefix assignments,
    /// without wrappers such as `sudo`, with `/bin/rm` as `rm`, and the commands of
    /// substitutions and `sh -c` strings.
    pub deny_forms: Vec<Vec<String>>,
    /// Why no allow rule may let the line run, in order of discovery; empty when rules decide.
    pub hazards: Vec<String>,
}

impl Analysis {
    fn hazard(&mut self, why: impl Into<String>) {
        let why = why.into();
        if !self.hazards.contains(&why) {
            self.hazards.push(why);
        }
    }
}

/// Reads `line` as run in `root` (the workspace; `None`: every write is outside).
pub fn analyse(line: &str, root: Option<&Path>) -> Analysis {
    let mut analysis = Analysis::default();
    let mut reader = Reader {
        root,
        analysis: &mut analysis,
        depth: 0,
        changes_directory: false,
        writes: false,
    };
    reader.line(line);
    if reader.changes_directory && reader.writes {
        analysis.hazard("a redirection writes after the directory changes");
    }
    if analysis.commands.is_empty() && analysis.hazards.is_empty() {
        analysis.hazard("the command line is empty");
    }
    analysis
}

struct Reader<'a> {
    root: Option<&'a Path>,
    analysis: &'a mut Analysis,
    /// How many substitutions or `sh -c` strings deep the reader is; inside one, commands only
    /// feed deny rules.
    depth: usize,
    changes_directory: bool,
    writes: bool,
}

impl Reader<'_> {
    fn options() -> ParserOptions {
        ParserOptions::default()
    }

    fn line(&mut self, line: &str) {
        let mut parser = Parser::new(std::io::Cursor::new(line.as_bytes()), &Self::options());
        match parser.parse_program() {
            Ok(program) => {
                for list in &program.complete_commands {
                    self.list(list);
                }
            }
            Err(e) => self.analysis.hazard(format!(
                "the shell parser cannot read the command line ({e})"
            )),
        }
    }

    /// Reads a nested command line (a substitution's, an `sh -c` string) for deny rules only.
    fn nested(&mut self, line: &str) {
        if self.depth >= MAX_DEPTH {
            return;
        }
        self.depth += 1;
        self.line(line);
        self.depth -= 1;
    }

    fn list(&mut self, list: &CompoundList) {
        for item in &list.0 {
            let and_or = &item.0;
            self.pipeline(&and_or.first);
            for next in &and_or.additional {
                match next {
                    ast::AndOr::And(p) | ast::AndOr::Or(p) => self.pipeline(p),
                }
            }
        }
    }

    fn pipeline(&mut self, pipeline: &ast::Pipeline) {
        for command in &pipeline.seq {
            self.command(command);
        }
    }

    fn command(&mut self, command: &Command) {
        match command {
            Command::Simple(simple) => self.simple(simple),
            Command::Compound(compound, redirects) => {
                self.compound(compound);
                for redirect in redirects.iter().flat_map(|r| &r.0) {
                    self.redirect(redirect);
                }
            }
            Command::Function(function) => {
                self.analysis.hazard("it defines a shell function");
                self.compound(&function.body.0);
            }
            Command::ExtendedTest(_, redirects) => {
                self.analysis.hazard("it has a `[[ … ]]` test");
                for redirect in redirects.iter().flat_map(|r| &r.0) {
                    self.redirect(redirect);
                }
            }
        }
    }

    fn compound(&mut self, compound: &CompoundCommand) {
        match compound {
            CompoundCommand::BraceGroup(group) => self.list(&group.list),
            CompoundCommand::Subshell(subshell) => self.list(&subshell.list),
            CompoundCommand::IfClause(clause) => {
                self.list(&clause.condition);
                self.list(&clause.then);
                for branch in clause.elses.iter().flatten() {
                    if let Some(condition) = &branch.condition {
                        self.list(condition);
                    }
                    self.list(&branch.body);
                }
            }
            CompoundCommand::WhileClause(clause) | CompoundCommand::UntilClause(clause) => {
                self.list(&clause.0);
                self.list(&clause.1.list);
            }
            CompoundCommand::ForClause(clause) => {
                for value in clause.values.iter().flatten() {
                    self.word(&value.value, false);
                }
                self.list(&clause.body.list);
            }
            CompoundCommand::CaseClause(clause) => {
                self.word(&clause.value.value, false);
                for case in &clause.cases {
                    if let Some(body) = &case.cmd {
                        self.list(body);
                    }
                }
            }
            CompoundCommand::Arithmetic(_) | CompoundCommand::ArithmeticForClause(_) => {
                self.analysis.hazard("it has shell arithmetic");
            }
            CompoundCommand::Coprocess(coprocess) => {
                self.analysis.hazard("it starts a coprocess");
                self.command(&coprocess.body);
            }
        }
    }

    fn simple(&mut self, simple: &SimpleCommand) {
        let mut assignments = Vec::new();
        let mut words = Vec::new();
        for item in simple.prefix.iter().flat_map(|p| &p.0) {
            self.item(item, &mut assignments, &mut words);
        }
        if let Some(name) = &simple.word_or_name {
            words.push(self.word(&name.value, true));
        }
        for item in simple.suffix.iter().flat_map(|s| &s.0) {
            // After the name, `NAME=value` is an argument (`export FOO=1`).
            let mut arguments = Vec::new();
            self.item(item, &mut arguments, &mut words);
            words.extend(arguments);
        }
        if let Some(name) = words.first() {
            if EVALUATING.contains(&name.as_str()) {
                self.analysis
                    .hazard(format!("`{name}` runs text or changes the shell"));
            }
            if matches!(name.as_str(), "cd" | "pushd" | "popd") {
                self.changes_directory = true;
            }
        }
        self.deny_forms(&assignments, &words);
        if self.depth == 0 {
            let mut command = assignments;
            command.extend(words);
            self.analysis.commands.push(command);
        }
    }

    fn item(
        &mut self,
        item: &CommandPrefixOrSuffixItem,
        assignments: &mut Vec<String>,
        words: &mut Vec<String>,
    ) {
        match item {
            CommandPrefixOrSuffixItem::Word(word) => words.push(self.word(&word.value, false)),
            CommandPrefixOrSuffixItem::AssignmentWord(_, word) => {
                assignments.push(self.word(&word.value, false));
            }
            CommandPrefixOrSuffixItem::IoRedirect(redirect) => self.redirect(redirect),
            CommandPrefixOrSuffixItem::ProcessSubstitution(_, subshell) => {
                self.analysis.hazard("it has a process substitution");
                self.depth += 1;
                self.list(&subshell.list);
                self.depth -= 1;
            }
        }
    }

    /// Adds the forms of a command deny rules match beyond its words as written.
    fn deny_forms(&mut self, assignments: &[String], words: &[String]) {
        let mut forms = Vec::new();
        if self.depth > 0 {
            let mut whole = assignments.to_vec();
            whole.extend(words.iter().cloned());
            forms.push(whole);
        }
        let mut rest = words;
        forms.push(rest.to_vec());
        while let Some((name, args)) = rest.split_first() {
            let base = name.rsplit('/').next().unwrap_or(name);
            if base != name {
                let mut renamed = vec![base.to_string()];
                renamed.extend(args.iter().cloned());
                forms.push(renamed);
            }
            if SHELLS.contains(&base)
                && let Some(at) = args.iter().position(|a| a == "-c")
                && let Some(script) = args.get(at + 1)
            {
                self.analysis
                    .hazard(format!("`{base} -c` runs a command line"));
                let script = script.clone();
                self.nested(&script);
            }
            if !WRAPPERS.contains(&base) {
                break;
            }
            let skip = args
                .iter()
                .take_while(|a| a.starts_with('-') || a.contains('='))
                .count();
            rest = &args[skip..];
            if !rest.is_empty() {
                forms.push(rest.to_vec());
            }
        }
        for form in forms {
            if !form.is_empty() && !self.analysis.deny_forms.contains(&form) {
                self.analysis.deny_forms.push(form);
            }
        }
    }

    fn redirect(&mut self, redirect: &IoRedirect) {
        match redirect {
            IoRedirect::File(_, kind, target) => {
                let writes = matches!(
                    kind,
                    IoFileRedirectKind::Write
                        | IoFileRedirectKind::Append
                        | IoFileRedirectKind::Clobber
                        | IoFileRedirectKind::ReadAndWrite
                        | IoFileRedirectKind::DuplicateOutput
                );
                match target {
                    IoFileRedirectTarget::Fd(_) => {}
                    IoFileRedirectTarget::ProcessSubstitution(_, subshell) => {
                        self.analysis.hazard("it has a process substitution");
                        self.depth += 1;
                        self.list(&subshell.list);
                        self.depth -= 1;
                    }
                    IoFileRedirectTarget::Duplicate(word) => {
                        let text = word.value.as_str();
                        let is_fd =
                            text == "-" || text.trim_end_matches('-').parse::<u32>().is_ok();
                        if !is_fd && writes {
                            self.written(&word.value);
                        } else if !is_fd {
                            self.word(&word.value, false);
                        }
                    }
                    IoFileRedirectTarget::Filename(word) if writes => self.written(&word.value),
                    IoFileRedirectTarget::Filename(word) => {
                        self.word(&word.value, false);
                    }
                }
            }
            IoRedirect::OutputAndError(word, _) => self.written(&word.value),
            IoRedirect::HereString(_, word) => {
                self.word(&word.value, false);
            }
            IoRedirect::HereDocument(_, doc) => {
                if doc.requires_expansion {
                    match brush_parser::word::parse_heredoc(&doc.doc.value, &Self::options()) {
                        Ok(pieces) if pieces.iter().any(|p| expands(&p.piece)) => {
                            self.analysis
                                .hazard("a here-document has expansions or substitutions");
                            self.pieces(&pieces, &doc.doc.value, false, true);
                        }
                        Ok(_) => {}
                        Err(_) => self.analysis.hazard("a here-document cannot be read"),
                    }
                }
            }
        }
    }

    /// A redirection writes to the file `raw` names: fine inside the workspace, a hazard
    /// elsewhere or when the name is not known before the line runs.
    fn written(&mut self, raw: &str) {
        self.writes = true;
        let Some(path) = self.static_word(raw) else {
            self.analysis.hazard(format!(
                "a redirection writes to `{raw}`, which is not known before the line runs"
            ));
            return;
        };
        if HARMLESS_SINKS.contains(&path.as_str()) {
            return;
        }
        if !self.root.is_some_and(|root| inside(root, &path)) {
            self.analysis.hazard(format!(
                "a redirection writes to `{path}`, outside the workspace"
            ));
        }
    }

    /// The word's value when it has no expansion at all (quotes and escapes removed).
    fn static_word(&mut self, raw: &str) -> Option<String> {
        let pieces = brush_parser::word::parse(raw, &Self::options()).ok()?;
        if pieces
            .iter()
            .any(|p| expands(&p.piece) || is_tilde(&p.piece))
        {
            self.word(raw, false);
            return None;
        }
        if pieces
            .iter()
            .any(|p| matches!(&p.piece, WordPiece::Text(t) if t.contains(['*', '?', '['])))
        {
            return None;
        }
        Some(self.word(raw, false))
    }

    /// The word as rules match it: quotes and escapes removed, expansions kept as written.
    /// Records the hazards it carries: a substitution anywhere, an expansion in the command
    /// name, an unquoted parameter expansion anywhere (its value is split into words).
    fn word(&mut self, raw: &str, is_name: bool) -> String {
        match brush_parser::word::parse(raw, &Self::options()) {
            Ok(pieces) => {
                if is_name
                    && pieces.iter().any(|p| {
                        expands(&p.piece)
                            || matches!(&p.piece, WordPiece::Text(t) if t.contains(['*', '?', '[', '{']))
                    })
                {
                    self.analysis
                        .hazard(format!("the command name `{raw}` is not known before the line runs"));
                }
                self.pieces(&pieces, raw, false, false)
            }
            Err(_) => {
                self.analysis
                    .hazard(format!("the shell parser cannot read the word `{raw}`"));
                raw.to_string()
            }
        }
    }

    fn pieces(
        &mut self,
        pieces: &[WordPieceWithSource],
        raw: &str,
        quoted: bool,
        heredoc: bool,
    ) -> String {
        let mut text = String::new();
        for piece in pieces {
            let source = raw.get(piece.start_index..piece.end_index).unwrap_or("");
            match &piece.piece {
                WordPiece::Text(t) | WordPiece::SingleQuotedText(t) => text.push_str(t),
                WordPiece::AnsiCQuotedText(_) => text.push_str(source),
                WordPiece::EscapeSequence(e) => text.push_str(e.strip_prefix('\\').unwrap_or(e)),
                WordPiece::DoubleQuotedSequence(inner)
                | WordPiece::GettextDoubleQuotedSequence(inner) => {
                    // The inner pieces' indices are relative to the whole word.
                    text.push_str(&self.pieces(inner, raw, true, heredoc));
                }
                WordPiece::TildeExpansion(_) => text.push_str(source),
                WordPiece::ParameterExpansion(_) => {
                    if !quoted && !heredoc {
                        self.analysis.hazard(format!(
                            "`{source}` is expanded and split into words when the line runs"
                        ));
                    }
                    text.push_str(source);
                }
                WordPiece::CommandSubstitution(inner)
                | WordPiece::BackquotedCommandSubstitution(inner) => {
                    self.analysis.hazard("it has a command substitution");
                    self.nested(inner);
                    text.push_str(source);
                }
                WordPiece::ArithmeticExpression(_) => {
                    self.analysis.hazard("it has shell arithmetic");
                    text.push_str(source);
                }
            }
        }
        text
    }
}

fn expands(piece: &WordPiece) -> bool {
    match piece {
        WordPiece::ParameterExpansion(_)
        | WordPiece::CommandSubstitution(_)
        | WordPiece::BackquotedCommandSubstitution(_)
        | WordPiece::ArithmeticExpression(_) => true,
        WordPiece::DoubleQuotedSequence(inner) | WordPiece::GettextDoubleQuotedSequence(inner) => {
            inner.iter().any(|p| expands(&p.piece))
        }
        _ => false,
    }
}

fn is_tilde(piece: &WordPiece) -> bool {
    matches!(piece, WordPiece::TildeExpansion(_))
}

/// Whether `path` (absolute, or relative to `root`) stays under `root`, worked out lexically.
pub fn inside(root: &Path, path: &str) -> bool {
    relative_to(root, path).is_some()
}

/// `path` relative to `root` with `.` and `..` worked out; `None` when it leaves the root.
pub fn relative_to(root: &Path, path: &str) -> Option<PathBuf> {
    let requested = Path::new(path);
    let relative = match requested.is_absolute() {
        true => requested.strip_prefix(root).ok()?,
        false => requested,
    };
    let mut normal = PathBuf::new();
    for component in relative.components() {
        match component {
            Component::Normal(part) => normal.push(part),
            Component::CurDir => {}
            Component::ParentDir => {
                if !normal.pop() {
                    return None;
                }
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(normal)
}
