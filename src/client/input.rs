//! The prompt: a line editor (rustyline) on a thread of its own, with history kept in the data
//! folder. Alt-Enter adds a new line; a paste stays one message.
//!
//! The editor asks for the next line only when the chat says so ([`Prompt::next`]), so the
//! terminal is back in its normal mode whenever the chat ends. Lines typed meanwhile, or in one
//! burst, wait in the terminal or in the editor's read buffer, which rustyline keeps from one
//! line to the next only with its `buffer-redux` feature (without it every line of a burst
//! after the first was dropped, from the chat and the history alike): each is read, kept in
//! the history and sent in the order typed.
//!
//! Output is printed above the prompt through rustyline's external printer. Version 19 or later
//! is needed for it: earlier ones, once a printer existed, waited on the terminal and the
//! printer while the rest of a burst of keys (typed fast, or sent at once by an input method)
//! sat unread in their own buffer, so those keys showed only when the next key came.

use std::path::PathBuf;
use std::sync::mpsc as std_mpsc;

use rustyline::config::Configurer;
use rustyline::error::ReadlineError;
use rustyline::{
    Cmd, CompletionType, Config, Editor, EventHandler, ExternalPrinter, KeyCode, KeyEvent,
};
use rustyline::{Modifiers, history::DefaultHistory};
use tokio::sync::mpsc;

use super::complete::Completion;
use super::render::Sink;

/// What the user did at the prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    Line(String),
    /// Ctrl-C.
    Interrupt,
    /// Ctrl-D on an empty line, or the terminal closed.
    End,
}

/// The line editor's thread and the way to print above its prompt.
pub struct Prompt {
    pub inputs: mpsc::UnboundedReceiver<Input>,
    /// Lets the editor read the next line.
    pub next: std_mpsc::Sender<()>,
}

/// Prints whole lines above the prompt.
struct Above<P: ExternalPrinter + Send>(P);

impl<P: ExternalPrinter + Send> Sink for Above<P> {
    fn lines(&mut self, lines: Vec<String>) {
        let mut text = lines.join("\n");
        text.push('\n');
        let _ = self.0.print(text);
    }
}

/// Where the prompt's history is kept: `<data>/chat-history.txt`.
fn history_file() -> Option<PathBuf> {
    Some(crate::config::default_data_dir()?.join("chat-history.txt"))
}

impl Prompt {
    /// Starts the editor, completing with `completion`; the sink that prints above its
    /// prompt. It reads the first line at once.
    ///
    /// Tab completes as a shell does: the first press inserts what the candidates share, the
    /// second lists them (a command with its description).
    pub fn start(completion: Completion) -> anyhow::Result<(Self, Box<dyn Sink>)> {
        let config = Config::builder()
            .max_history_size(2000)?
            .history_ignore_dups(true)?
            .auto_add_history(false)
            .bracketed_paste(true)
            .completion_type(CompletionType::List)
            .build();
        let mut editor: Editor<Completion, DefaultHistory> = Editor::with_config(config)?;
        editor.set_helper(Some(completion));
        // Terminals that defer drawing inside a synchronised update (tmux among them) would
        // leave a quickly typed line undrawn until the next key.
        editor.enable_synchronized_output(false);
        editor.bind_sequence(
            KeyEvent(KeyCode::Enter, Modifiers::ALT),
            EventHandler::Simple(Cmd::Newline),
        );
        let history = history_file();
        if let Some(path) = &history {
            let _ = editor.load_history(path);
        }
        let printer = editor.create_external_printer()?;
        let (inputs_tx, inputs) = mpsc::unbounded_channel();
        let (next, next_rx) = std_mpsc::channel::<()>();
        std::thread::Builder::new()
            .name("prompt".into())
            .spawn(move || {
                loop {
                    let input = match editor.readline("› ") {
                        Ok(line) => {
                            if !line.trim().is_empty() {
                                let _ = editor.add_history_entry(line.as_str());
                                if let Some(path) = &history {
                                    // Private, like the daemon's folders (rustyline makes
                                    // the file itself 0600).
                                    if let Some(dir) = path.parent() {
                                        let _ = crate::private_files::create_dir_all(dir);
                                    }
                                    let _ = editor.append_history(path);
                                }
                            }
                            Input::Line(line)
                        }
                        Err(ReadlineError::Interrupted) => Input::Interrupt,
                        Err(_) => Input::End,
                    };
                    let end = input == Input::End;
                    if inputs_tx.send(input).is_err() || end || next_rx.recv().is_err() {
                        return;
                    }
                }
            })?;
        Ok((Self { inputs, next }, Box::new(Above(printer))))
    }
}
