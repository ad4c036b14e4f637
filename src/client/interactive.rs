//! The interactive chat: a prompt below the streamed transcript.

use serde_json::Value;

use super::complete::{Completion, Question};
use super::daemon::{Daemon, Notes, check_account, check_model};
use super::input::{Input, Prompt};
use super::open::{self, Ask};
use super::render::{Plain, Screen};
use super::sessions::list_line;
use super::style::{Paint, Style, terminal_height};
use super::view::SessionView;
use super::{ChatArgs, plural};
use crate::protocol::{
    ApprovalDecision, ApprovalRespond, ApprovalRespondParams, ChatResume, ChatSend, ChatSendParams,
    ChatStop, Event, ImageInput, InitializeResult, Session, SessionCommands, SessionEventParams,
    SessionIdParams, SessionState, SessionUpdate, SessionUpdateParams, WorkspaceFiles,
};

/// How many of the folder's chats `/sessions` numbers: the newest, a screenful.
const SESSIONS_SHOWN: usize = 50;

const HELP: &str = "\
Commands:
  /sessions          this folder's chats; /sessions N switches to the N-th
  /title TEXT        renames this chat
  /model [NAME]      lists the account's models, or switches (NAME --force: any name)
  /account [NAME]    lists the accounts, or switches (to the account's default model)
  /stop              stops the run (Ctrl-C does too)
  /resume            answers a last message no run answered
  /image PATH        attaches an image (PNG, JPEG, GIF, WebP) to your next message
  /quit              leaves (Ctrl-D does too)
  /help              this list
Other /commands (/cost, /compact, /clear …) go to sidechat.
Alt-Enter adds a new line; a pasted text stays one message.";

pub async fn run(args: ChatArgs) -> anyhow::Result<i32> {
    let (daemon, notes) = Daemon::connect(args.db.as_deref(), args.connection_mode()).await?;
    let style = Style::detect();
    let mut screen = Screen::new(
        Box::new(Plain(std::io::stdout())),
        style,
        args.show_thinking,
    );
    let (session, existed) = open::choose(&daemon, &args, Ask::User, None).await?;
    banner(&mut screen, &daemon.init, &session);
    let mut chat = Chat {
        daemon,
        screen,
        session,
        view: SessionView::default(),
        interrupts: 0,
        images: Vec::new(),
    };
    if existed {
        chat.reattach().await?;
    }
    let (asks_tx, asks) = tokio::sync::mpsc::unbounded_channel();
    let completion = Completion::new(asks_tx, chat.screen.style.color);
    let (prompt, sink) = Prompt::start(completion)?;
    chat.screen.set_sink(sink);
    let outcome = chat.run(prompt, notes, asks).await;
    let Chat {
        daemon, session, ..
    } = chat;
    println!(
        "Session {} (“{}”). Resume it with: sidechat chat --session {}",
        session.id, session.title, session.id
    );
    let clean = daemon.close().await.unwrap_or(false);
    outcome?;
    Ok(if clean { 0 } else { 1 })
}

/// The banner: which account and model, and what the tools may do.
fn banner(screen: &mut Screen, init: &InitializeResult, session: &Session) {
    let style = screen.style;
    screen.line(&format!(
        "{} {} · account {} · model {} · “{}”",
        style.paint(&[Paint::Bold], "sidechat"),
        init.server_info.version,
        style.paint(&[Paint::Bold], &session.account),
        style.paint(&[Paint::Bold], &session.model),
        session.title
    ));
    for unavailable in &init.unavailable_accounts {
        screen.styled(
            &[Paint::Yellow],
            &format!(
                "! The account {} in your configuration cannot be used: {}.",
                unavailable.name, unavailable.reason
            ),
        );
    }
    let account = init.accounts.iter().find(|a| a.name == session.account);
    if account.is_some_and(|a| a.is_demo) {
        screen.styled(
            &[Paint::Yellow],
            "Using the built-in OFFLINE DEMO model: it is scripted, not a real model.\n\
             Set ANTHROPIC_API_KEY or OPENAI_API_KEY (or configure an account) to talk to a real one. Try: create notes.md with hello",
        );
    }
    if let Some(root) = &session.workspace_root {
        screen.styled(
            &[Paint::Dim],
            &format!(
                "Tools work in {root}; commands run for real once you allow them.\n\
                 Alt-Enter: new line · Ctrl-C: stop a run · /help · Ctrl-D: quit"
            ),
        );
    }
}

struct Chat {
    daemon: Daemon,
    screen: Screen,
    session: Session,
    /// The session as its events and transcript say: whether a run works, which approval waits.
    view: SessionView,
    /// Ctrl-C presses since the last line or run: the second one quits.
    interrupts: u32,
    /// Images `/image` attached, sent with the next message.
    images: Vec<ImageInput>,
}

impl Chat {
    async fn run(
        &mut self,
        prompt: Prompt,
        mut notes: Notes,
        mut asks: tokio::sync::mpsc::UnboundedReceiver<Question>,
    ) -> anyhow::Result<()> {
        let Prompt { mut inputs, next } = prompt;
        let mut ctrl_c = CtrlC::listen()?;
        loop {
            tokio::select! {
                note = notes.recv() => {
                    let Some(note) = note else {
                        self.screen.styled(&[Paint::Red], "The daemon exited; press Enter to leave.");
                        // The editor gives the terminal back once its line is read.
                        let _ = inputs.recv().await;
                        return Ok(());
                    };
                    if let Some(event) = as_event(&note)
                        && event.session_id == self.session.id
                    {
                        self.event(&event);
                    }
                }
                input = inputs.recv() => {
                    let keep_going = match input {
                        None | Some(Input::End) => false,
                        Some(Input::Interrupt) => self.interrupt().await?,
                        Some(Input::Line(line)) => {
                            self.interrupts = 0;
                            self.line(line).await?
                        }
                    };
                    if !keep_going {
                        return Ok(());
                    }
                    let _ = next.send(());
                }
                Some(ask) = asks.recv() => self.answer(ask).await,
                _ = ctrl_c.pressed() => {
                    if !self.interrupt().await? {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Answers the prompt's completion question about the chat's session; a failure answers
    /// nothing to complete (the prompt beeps) and is logged.
    async fn answer(&self, ask: Question) {
        match ask {
            Question::Commands(answer) => {
                let commands = match self.daemon.call::<SessionCommands>(self.session_id()).await {
                    Ok(result) => result.commands,
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot list the commands to complete");
                        Vec::new()
                    }
                };
                let _ = answer.send(commands);
            }
            Question::Files { query, answer } => {
                let params = Question::files_params(&self.session.id, &query);
                let files = match self.daemon.call::<WorkspaceFiles>(params).await {
                    Ok(result) => result.files,
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot list the files to complete");
                        Vec::new()
                    }
                };
                let _ = answer.send(files);
            }
        }
    }

    fn event(&mut self, params: &SessionEventParams) {
        self.view.apply(params);
        if let Event::SessionUpdated { title, session } = &params.event {
            // Also sent for a change of model or effort: the line says only a new title.
            let renamed = *title != self.session.title;
            self.session = session.as_ref().clone();
            if renamed {
                self.screen
                    .styled(&[Paint::Dim], &format!("This chat is now “{title}”."));
            }
        }
        if matches!(params.event, Event::RunFinished { .. }) {
            self.interrupts = 0;
        }
        self.screen.event(&params.event);
    }

    /// `/image PATH`: reads an image file to send with the next message. Its type comes from
    /// its bytes; the daemon checks the rest (size, count, whether the model reads images).
    fn attach_image(&mut self, path: &str) {
        if path.is_empty() {
            self.screen
                .styled(&[Paint::Red], "✗ /image needs a path: /image PATH");
            return;
        }
        let path = expand_home(path);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) => {
                self.screen.styled(
                    &[Paint::Red],
                    &format!("✗ cannot read {}: {e}", path.display()),
                );
                return;
            }
        };
        let Some(media_type) = crate::images::media_type_of(&bytes) else {
            self.screen.styled(
                &[Paint::Red],
                &format!("✗ {} is not a PNG, JPEG, GIF or WebP image", path.display()),
            );
            return;
        };
        self.images.push(ImageInput {
            media_type: media_type.to_string(),
            data: crate::images::input::encode(&bytes),
        });
        self.screen.styled(
            &[Paint::Dim],
            &format!(
                "attached {} ({media_type}, {} bytes) to your next message ({} in all)",
                path.display(),
                bytes.len(),
                plural(self.images.len() as u64, "image", "images"),
            ),
        );
    }

    /// Ctrl-C: stops a run; at the prompt the line is cleared and a second press quits.
    async fn interrupt(&mut self) -> anyhow::Result<bool> {
        self.interrupts += 1;
        if self.interrupts > 1 {
            return Ok(false);
        }
        if self.view.running() {
            self.screen
                .styled(&[Paint::Dim], "^C stopping the run (Ctrl-C again quits)");
            self.stop().await?;
        } else {
            self.screen
                .styled(&[Paint::Dim], "^C (Ctrl-C again or Ctrl-D quits)");
        }
        Ok(true)
    }

    /// One line typed at the prompt; false to quit.
    async fn line(&mut self, line: String) -> anyhow::Result<bool> {
        let text = line.trim();
        if text.is_empty() {
            return Ok(true);
        }
        let (command, rest) = match text.split_once(char::is_whitespace) {
            Some((command, rest)) => (command, rest.trim()),
            None => (text, ""),
        };
        match command {
            "/quit" | "/exit" => return Ok(false),
            "/help" => self.screen.line(HELP),
            "/stop" => self.stop().await?,
            "/sessions" => self.sessions(rest).await?,
            "/title" => self.title(rest).await?,
            "/model" => self.model(rest).await?,
            "/account" => self.account(rest).await?,
            "/image" => self.attach_image(rest),
            "/resume" => {
                let said = self.daemon.call::<ChatResume>(self.session_id());
                if let Err(e) = said.await {
                    self.screen.styled(&[Paint::Red], &format!("✗ {e}"));
                }
            }
            _ => {
                if let Some(approval_id) =
                    self.view.pending_approval().map(|a| a.approval_id.clone())
                    && let Some(typed) = parse_answer(text)
                {
                    let answer = self
                        .daemon
                        .call::<ApprovalRespond>(typed.params(approval_id));
                    if let Err(e) = answer.await {
                        self.screen.styled(&[Paint::Red], &format!("✗ {e}"));
                    }
                    return Ok(true);
                }
                self.send(line.trim_end()).await?;
            }
        }
        Ok(true)
    }

    async fn send(&mut self, text: &str) -> anyhow::Result<()> {
        let images = std::mem::take(&mut self.images);
        let sent = self.daemon.call::<ChatSend>(ChatSendParams {
            session_id: self.session.id.clone(),
            text: text.to_string(),
            client_message_id: None,
            attachments: Vec::new(),
            images: images.clone(),
        });
        if let Err(e) = sent.await {
            self.screen
                .styled(&[Paint::Red], &format!("✗ not sent: {e}"));
            // Kept for the next try, unless they were what the daemon refused.
            if !e.to_string().contains("image") {
                self.images = images;
            }
            return Ok(());
        }
        Ok(())
    }

    /// The params of the requests that name this session and nothing else.
    fn session_id(&self) -> SessionIdParams {
        SessionIdParams {
            session_id: self.session.id.clone(),
        }
    }

    async fn stop(&mut self) -> anyhow::Result<()> {
        if let Err(e) = self.daemon.call::<ChatStop>(self.session_id()).await {
            self.screen.styled(&[Paint::Red], &format!("✗ {e}"));
        }
        Ok(())
    }

    /// `/title TEXT`: renames the session (shows the title without text).
    async fn title(&mut self, title: &str) -> anyhow::Result<()> {
        if title.is_empty() {
            let line = format!(
                "This chat is “{}”. /title TEXT renames it.",
                self.session.title
            );
            self.screen.line(&line);
            return Ok(());
        }
        match self
            .daemon
            .call::<SessionUpdate>(SessionUpdateParams {
                session_id: self.session.id.clone(),
                title: Some(title.to_string()),
                ..SessionUpdateParams::default()
            })
            .await
        {
            Ok(session) => {
                self.session = session;
                self.screen
                    .line(&format!("Renamed to “{}”.", self.session.title));
            }
            Err(e) => self.screen.styled(&[Paint::Red], &format!("✗ {e}")),
        }
        Ok(())
    }

    /// `/model`: the account's known models; `/model NAME` switches, refusing a model the
    /// account is not known to serve unless `--force` follows.
    async fn model(&mut self, rest: &str) -> anyhow::Result<()> {
        let force = rest.split_whitespace().any(|w| w == "--force");
        let name = rest.split_whitespace().find(|w| *w != "--force");
        let Some(name) = name else {
            let models = self
                .daemon
                .init
                .accounts
                .iter()
                .find(|a| a.name == self.session.account)
                .map(|a| a.models.clone())
                .unwrap_or_default();
            let mut lines = vec![format!("Models of the account {}:", self.session.account)];
            for model in models {
                let mark = if model == self.session.model {
                    "*"
                } else {
                    " "
                };
                lines.push(format!("{mark} {model}"));
            }
            lines.push("/model NAME switches (/model NAME --force for one not listed).".into());
            self.screen.lines(lines);
            return Ok(());
        };
        if let Err(e) = check_model(&self.daemon.init, &self.session.account, name, force) {
            self.screen.styled(&[Paint::Red], &format!("✗ {e}"));
            return Ok(());
        }
        self.update(SessionUpdateParams {
            session_id: self.session.id.clone(),
            model: Some(name.to_string()),
            ..SessionUpdateParams::default()
        })
        .await
    }

    /// `/account`: the accounts; `/account NAME` switches to it (and its default model).
    async fn account(&mut self, name: &str) -> anyhow::Result<()> {
        if name.is_empty() {
            let mut lines = vec!["Accounts:".to_string()];
            for account in &self.daemon.init.accounts {
                let mark = if account.name == self.session.account {
                    "*"
                } else {
                    " "
                };
                lines.push(format!(
                    "{mark} {} ({}, default model {})",
                    account.name,
                    account.kind.as_str(),
                    account.default_model
                ));
            }
            for unavailable in &self.daemon.init.unavailable_accounts {
                lines.push(format!(
                    "  {} cannot be used: {}",
                    unavailable.name, unavailable.reason
                ));
            }
            self.screen.lines(lines);
            return Ok(());
        }
        if let Err(e) = check_account(&self.daemon.init, name) {
            self.screen.styled(&[Paint::Red], &format!("✗ {e}"));
            return Ok(());
        }
        self.update(SessionUpdateParams {
            session_id: self.session.id.clone(),
            account: Some(name.to_string()),
            ..SessionUpdateParams::default()
        })
        .await
    }

    /// `session/update`, then says which account and model the session now uses.
    async fn update(&mut self, params: SessionUpdateParams) -> anyhow::Result<()> {
        match self.daemon.call::<SessionUpdate>(params).await {
            Ok(session) => {
                self.session = session;
                let line = format!(
                    "Now using account {} with model {}.",
                    self.session.account, self.session.model
                );
                self.screen.line(&line);
            }
            Err(e) => self.screen.styled(&[Paint::Red], &format!("✗ {e}")),
        }
        Ok(())
    }

    /// `/sessions`: this folder's sessions, numbered; `/sessions N` (or an id) switches.
    async fn sessions(&mut self, choice: &str) -> anyhow::Result<()> {
        let folder = self.session.workspace_root.clone();
        let (sessions, more) = self
            .daemon
            .newest_sessions(folder.as_deref(), SESSIONS_SHOWN)
            .await?;
        if choice.is_empty() {
            let mut lines = vec![format!(
                "{}{} in {}:",
                if more { "the newest " } else { "" },
                plural(sessions.len() as u64, "chat", "chats"),
                folder.as_deref().unwrap_or("(no folder)")
            )];
            for (n, session) in sessions.iter().enumerate() {
                let mark = if session.id == self.session.id {
                    "*"
                } else {
                    " "
                };
                lines.push(format!("{mark}{:>3}. {}", n + 1, list_line(session)));
            }
            lines.push("/sessions N switches to the N-th.".into());
            if more {
                lines.push("`sidechat sessions list --all` lists every one.".into());
            }
            self.screen.lines(lines);
            return Ok(());
        }
        let chosen = choice
            .parse::<usize>()
            .ok()
            .and_then(|n| sessions.get(n.wrapping_sub(1)))
            .map(|s| s.id.clone())
            .unwrap_or_else(|| choice.to_string());
        match self.daemon.session(&chosen).await {
            Ok(session) => {
                self.session = session;
                self.view = SessionView::default();
                self.screen
                    .set_workspace(self.session.workspace_root.as_deref());
                let line = format!(
                    "Switched to “{}” ({}).",
                    self.session.title, self.session.id
                );
                self.screen.styled(&[Paint::Bold], &line);
                self.reattach().await?;
            }
            Err(e) => self.screen.styled(&[Paint::Red], &format!("✗ {e:#}")),
        }
        Ok(())
    }

    /// Prints the end of the stored transcript (two screens of it), what waits for the user,
    /// and how much more there is.
    async fn reattach(&mut self) -> anyhow::Result<()> {
        self.screen
            .set_workspace(self.session.workspace_root.as_deref());
        let transcript = self.daemon.transcript(&self.session.id).await?;
        let mut lines = Vec::new();
        for entry in &transcript.entries {
            lines.extend(self.screen.entry(entry));
        }
        let shown = 2 * terminal_height().unwrap_or(24);
        if lines.len() > shown {
            let above = lines.len() - shown;
            lines.drain(..above);
            let note = format!(
                "… {} above (sidechat sessions show {} prints all {})",
                plural(above as u64, "earlier line", "earlier lines"),
                self.session.id,
                plural(transcript.entries.len() as u64, "entry", "entries"),
            );
            lines.insert(0, self.screen.style.paint(&[Paint::Dim], &note));
        }
        for approval in &transcript.pending_approvals {
            lines.extend(self.screen.approval(approval));
        }
        for waiting in &transcript.pending_interjections {
            lines.push(self.screen.waiting_line(&waiting.text));
        }
        self.view.load(&transcript);
        if transcript.state == SessionState::Unanswered {
            lines.push(self.screen.style.paint(
                &[Paint::Yellow],
                "! The last message has no answer (the run did not finish): /resume asks again.",
            ));
        }
        self.screen.lines(lines);
        Ok(())
    }
}

/// Ctrl-C presses while the line editor is not reading (it reads them itself as keys), heard
/// by one listener kept for the whole chat.
struct CtrlC {
    #[cfg(unix)]
    signal: tokio::signal::unix::Signal,
}

impl CtrlC {
    fn listen() -> std::io::Result<Self> {
        Ok(Self {
            #[cfg(unix)]
            signal: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?,
        })
    }

    async fn pressed(&mut self) {
        #[cfg(unix)]
        if self.signal.recv().await.is_none() {
            std::future::pending::<()>().await;
        }
        #[cfg(not(unix))]
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

pub(crate) fn as_event(note: &Value) -> Option<SessionEventParams> {
    if note.get("method")?.as_str()?
        != <crate::protocol::SessionEvent as crate::protocol::Notification>::METHOD
    {
        return None;
    }
    serde_json::from_value(note.get("params")?.clone()).ok()
}

/// An answer typed at an approval prompt: the decision, and the text after it (the rule to
/// save with `w`, the reason with `d`).
#[derive(Debug, Clone, PartialEq)]
struct Typed {
    decision: ApprovalDecision,
    text: Option<String>,
}

impl Typed {
    fn params(self, approval_id: String) -> ApprovalRespondParams {
        let (rule, reason) = match self.decision {
            ApprovalDecision::AllowWorkspace => (self.text, None),
            _ => (None, self.text),
        };
        ApprovalRespondParams {
            approval_id,
            decision: self.decision,
            rule,
            reason,
        }
    }
}

/// What the user typed at an approval prompt: `a` once, `s` for the session, `w` always in
/// this workspace (`w RULE` saves that rule instead of the proposed one), `d` deny (`d REASON`
/// tells the model why). Anything else is a message.
fn parse_answer(line: &str) -> Option<Typed> {
    let line = line.trim();
    let plain = |decision| {
        Some(Typed {
            decision,
            text: None,
        })
    };
    match line.to_lowercase().as_str() {
        "a" | "y" | "yes" | "allow" => return plain(ApprovalDecision::Allow),
        "s" | "always" | "allow always" => return plain(ApprovalDecision::AllowAlways),
        "w" => return plain(ApprovalDecision::AllowWorkspace),
        "d" | "n" | "no" | "deny" => return plain(ApprovalDecision::Deny),
        _ => {}
    }
    let (word, rest) = line.split_once(char::is_whitespace)?;
    let decision = match word.to_lowercase().as_str() {
        "w" => ApprovalDecision::AllowWorkspace,
        "d" => ApprovalDecision::Deny,
        _ => return None,
    };
    Some(Typed {
        decision,
        text: Some(rest.trim().to_string()),
    })
}

/// A path typed at the prompt, `~/` read as the home folder.
fn expand_home(path: &str) -> std::path::PathBuf {
    match (path.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => std::path::PathBuf::from(home).join(rest),
        _ => std::path::PathBuf::from(path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typed(decision: ApprovalDecision, text: Option<&str>) -> Option<Typed> {
        Some(Typed {
            decision,
            text: text.map(String::from),
        })
    }

    #[test]
    fn decisions() {
        assert_eq!(parse_answer("A"), typed(ApprovalDecision::Allow, None));
        assert_eq!(
            parse_answer("always"),
            typed(ApprovalDecision::AllowAlways, None)
        );
        assert_eq!(
            parse_answer("s"),
            typed(ApprovalDecision::AllowAlways, None)
        );
        assert_eq!(
            parse_answer("w"),
            typed(ApprovalDecision::AllowWorkspace, None)
        );
        assert_eq!(
            parse_answer("w run_command(cargo *)"),
            typed(
                ApprovalDecision::AllowWorkspace,
                Some("run_command(cargo *)")
            )
        );
        assert_eq!(parse_answer("deny"), typed(ApprovalDecision::Deny, None));
        assert_eq!(
            parse_answer("d use nextest instead"),
            typed(ApprovalDecision::Deny, Some("use nextest instead"))
        );
        assert_eq!(parse_answer("what?"), None);
        assert_eq!(parse_answer("do it this way"), None);
    }
}
