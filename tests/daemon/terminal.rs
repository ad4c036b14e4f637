//! `sidechat chat` driven through a real terminal (tmux), and its one-shot mode and
//! `sidechat sessions` run as a script would run them.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::harness::{Daemon, Options, Scratch, clean_command};

/// A tmux server of its own (its own socket), started with a cleared environment: the chat
/// and the daemon it spawns see `PATH`, a UTF-8 locale and the test's own HOME and XDG
/// folders, and none of the machine's provider keys, `SIDECHAT_*` settings or config files.
struct Tmux {
    socket: String,
    home: PathBuf,
}

impl Tmux {
    /// Starts `command` (a shell line) in a 120×50 terminal; the pane is kept after it exits
    /// so its last words can be read.
    fn start(scratch: &Scratch, name: &str, command: &str) -> Self {
        let terminal = Self {
            socket: format!("sidechat-test-{}-{name}", std::process::id()),
            home: scratch.home(),
        };
        let command = format!("{command}; echo CHAT-EXITED-$?; sleep 60");
        terminal.run(&[
            "new-session",
            "-d",
            "-s",
            "chat",
            "-x",
            "120",
            "-y",
            "50",
            &command,
        ]);
        terminal
    }

    fn run(&self, args: &[&str]) -> String {
        let home = &self.home;
        let output = Command::new("tmux")
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("LANG", "C.UTF-8")
            .env("HOME", home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("XDG_DATA_HOME", home.join(".local/share"))
            .env("XDG_STATE_HOME", home.join(".local/state"))
            .env("XDG_CACHE_HOME", home.join(".cache"))
            .arg("-L")
            .arg(&self.socket)
            // No tmux configuration of the machine either.
            .arg("-f")
            .arg("/dev/null")
            .args(args)
            .output()
            .expect("tmux is installed (see .ci/run)");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Enters `text` at the prompt: pasted (as a terminal pastes, bracketed), and Enter
    /// pressed once the prompt shows it.
    fn type_line(&self, text: &str) {
        let shown = format!("› {}", text.lines().next().unwrap_or(""));
        let before = self.screen().matches(&shown).count();
        self.run(&["set-buffer", "-b", "typed", "--", text]);
        self.run(&["paste-buffer", "-p", "-d", "-b", "typed", "-t", "chat"]);
        self.wait_for_count(&shown, before + 1);
        self.run(&["send-keys", "-t", "chat", "Enter"]);
    }

    fn keys(&self, keys: &str) {
        self.run(&["send-keys", "-t", "chat", keys]);
    }

    /// Several keys (names such as `Enter`, or text) in one write, as a fast typist's burst.
    fn keys_in_one_go(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "chat"];
        args.extend_from_slice(keys);
        self.run(&args);
    }

    /// The whole pane, scroll-back included.
    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-J", "-S", "-500", "-t", "chat"])
    }

    /// Waits until the screen shows `needle` `times` times; the screen on failure.
    fn wait_for_count(&self, needle: &str, times: usize) -> String {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let screen = self.screen();
            if screen.matches(needle).count() >= times {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "the screen never showed {needle:?} {times} times:\n{screen}\n{}",
                self.daemon_logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The end of each log the chat's daemons wrote, for a failure's message: what the
    /// daemon was doing when the screen stopped changing.
    fn daemon_logs(&self) -> String {
        let dir = self.home.join(".local/share/sidechat/logs");
        let Ok(read) = std::fs::read_dir(&dir) else {
            return format!("(no daemon logs in {})", dir.display());
        };
        let mut logs = String::new();
        for entry in read.filter_map(Result::ok) {
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = &lines[lines.len().saturating_sub(80)..];
            logs.push_str(&format!(
                "--- {}\n{}\n",
                entry.path().display(),
                tail.join("\n")
            ));
        }
        logs
    }

    fn wait_for(&self, needle: &str) -> String {
        self.wait_for_count(needle, 1)
    }

    /// Quits the chat with `/quit` and waits until it has exited with 0; the last screen.
    fn quit(&self) -> String {
        self.type_line("/quit");
        self.wait_for("CHAT-EXITED-0")
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        self.run(&["kill-server"]);
    }
}

/// The shell line that runs `sidechat chat ARGS` in the scratch workspace.
fn chat_line(scratch: &Scratch, args: &str) -> String {
    format!(
        "cd {} && SIDECHAT_DEMO_DELAY_MS=15 {} chat --db {} {args}",
        scratch.workspace().display(),
        env!("CARGO_BIN_EXE_sidechat"),
        scratch.db().display()
    )
}

/// The session id in the line the chat prints when it quits.
fn resumed_id(screen: &str) -> String {
    let marker = "Resume it with: sidechat chat --session ";
    let at = screen.rfind(marker).expect("the quit line") + marker.len();
    screen[at..].split_whitespace().next().unwrap().to_string()
}

#[test]
fn chat_in_a_terminal_writes_a_file_after_approval() {
    let scratch = Scratch::new();
    let workspace = scratch.workspace();
    let terminal = Tmux::start(&scratch, "approval", &chat_line(&scratch, ""));
    let banner = terminal.wait_for("› ");
    assert!(banner.contains("OFFLINE DEMO"), "{banner}");
    assert!(banner.contains("account demo · model demo"), "{banner}");

    terminal.type_line("create notes.md with hello from the terminal");
    let prompt = terminal.wait_for("[a] allow once");
    assert!(
        prompt.contains("allow: write notes.md (1 line)"),
        "{prompt}"
    );
    assert!(prompt.contains("    + hello from the terminal"), "{prompt}");
    assert!(
        !workspace.join("notes.md").exists(),
        "nothing is written before approval"
    );

    terminal.type_line("a");
    terminal.wait_for("Done. The tool answered:");
    assert_eq!(
        std::fs::read_to_string(workspace.join("notes.md")).unwrap(),
        "hello from the terminal\n"
    );

    // An edit's approval shows the lines it changes.
    terminal.type_line("edit notes.md replace hello with goodbye");
    let diff = terminal.wait_for("allow: edit notes.md (replace 1 line with 1 line)");
    terminal.wait_for("    + goodbye");
    assert!(!diff.contains("AllowAlways"), "{diff}");
    terminal.type_line("d");
    terminal.wait_for("✗ not run: denied");

    // Ctrl-C stops a streaming run; the daemon survives it and the chat goes on.
    terminal.type_line("tell me a story");
    terminal.wait_for("Once upon a time");
    terminal.keys("C-c");
    terminal.wait_for("(stopped)");
    let screen = terminal.screen();
    assert!(!screen.contains("The daemon exited"), "{screen}");
    assert!(!screen.contains("Stopped"), "no enum names: {screen}");

    // Typing while a run waits for approval queues the text for the model, shown waiting.
    terminal.type_line("create later.md with soon");
    terminal.wait_for("allow: write later.md (1 line)");
    terminal.type_line("and say thanks");
    terminal.wait_for("↳ waiting: and say thanks");
    terminal.type_line("a");
    terminal.wait_for("your waiting message reached the model");

    let screen = terminal.quit();
    assert!(
        screen.contains("Resume it with: sidechat chat --session ses_"),
        "{screen}"
    );
}

#[test]
fn a_chat_continues_with_its_history_and_sessions_switch() {
    let scratch = Scratch::new();
    let first = Tmux::start(&scratch, "first", &chat_line(&scratch, "--new"));
    first.wait_for("› ");
    first.type_line("create a.md with one");
    first.wait_for("[a] allow once");
    first.type_line("a");
    first.wait_for("Done. The tool answered:");
    first.type_line("/title First chat");
    first.wait_for("Renamed to “First chat”.");
    let first_id = resumed_id(&first.quit());
    drop(first);

    // Without a flag the chat offers the folder's newest session; Enter takes it.
    let again = Tmux::start(&scratch, "again", &chat_line(&scratch, ""));
    again.wait_for("Continue this folder's last chat, “First chat”");
    again.keys("Enter");
    let history = again.wait_for("› ");
    assert!(history.contains("> create a.md with one"), "{history}");
    assert!(history.contains("⚙ write a.md (1 line)"), "{history}");
    assert!(history.contains("✓ Created a.md"), "{history}");
    assert_eq!(resumed_id(&again.quit()), first_id);
    drop(again);

    // A second session; /sessions lists both and switches back to the first.
    let second = Tmux::start(&scratch, "second", &chat_line(&scratch, "--new"));
    second.wait_for("› ");
    second.type_line("list files");
    second.wait_for("✓ a.md");
    second.type_line("/sessions");
    let list = second.wait_for("/sessions N switches");
    assert!(list.contains("2 chats in"), "{list}");
    assert!(list.contains(&first_id), "{list}");
    assert!(list.contains("list files"), "{list}");
    second.type_line("/sessions 2");
    // The switch is told, then the chat's history drawn below it.
    let switched = second.wait_for("> create a.md with one");
    let after = &switched[switched.rfind("Switched to “First chat”").unwrap()..];
    assert!(after.contains("> create a.md with one"), "{switched}");
    assert_eq!(resumed_id(&second.quit()), first_id);

    // --continue takes the newest without asking: the one /sessions left last.
    let cont = Tmux::start(&scratch, "continue", &chat_line(&scratch, "--continue"));
    let history = cont.wait_for("› ");
    assert!(!history.contains("Continue this folder"), "{history}");
    cont.quit();
}

/// `sidechat ARGS` with the test's clean environment; (status, stdout, stderr).
fn sidechat(scratch: &Scratch, args: &[&str], stdin: Option<&str>) -> (i32, String, String) {
    run_sidechat(scratch, &[], args, stdin)
}

/// [`sidechat`] with more environment variables and nothing on stdin.
fn sidechat_with(scratch: &Scratch, env: &[(&str, &str)], args: &[&str]) -> (i32, String, String) {
    run_sidechat(scratch, env, args, None)
}

fn run_sidechat(
    scratch: &Scratch,
    env: &[(&str, &str)],
    args: &[&str],
    stdin: Option<&str>,
) -> (i32, String, String) {
    let mut command = clean_command(&scratch.home()).into_std();
    command.envs(env.iter().copied());
    command
        .current_dir(scratch.workspace())
        .arg(args[0])
        .arg("--db")
        .arg(scratch.db())
        .args(&args[1..])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .stdin(std::process::Stdio::piped());
    let mut child = command.spawn().unwrap();
    {
        use std::io::Write;
        let mut input = child.stdin.take().unwrap();
        if let Some(text) = stdin {
            input.write_all(text.as_bytes()).unwrap();
        }
    }
    let output = child.wait_with_output().unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// A slash command in one-shot mode is answered by the daemon without a run: its note is
/// printed and the chat exits, instead of waiting for a run's end that never comes.
#[test]
fn one_shot_mode_prints_a_commands_answer_and_exits() {
    let scratch = Scratch::new();
    let (status, out, err) = sidechat(&scratch, &["chat", "-p", "/cost"], None);
    assert_eq!(status, 0, "{out}\n{err}");
    assert!(out.starts_with("Cost of this session"), "{out}");

    let (status, out, err) = sidechat(&scratch, &["chat", "-p", "/no-such-command"], None);
    assert_eq!(status, 1, "{out}\n{err}");
    assert!(out.starts_with("Unknown command /no-such-command"), "{out}");

    let (status, out, err) = sidechat(&scratch, &["chat", "--json", "-p", "/cost"], None);
    assert_eq!(status, 0, "{out}\n{err}");
    let event: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        (&event["event"]["kind"], &event["event"]["entry"]["role"]),
        (&json!("messageCompleted"), &json!("note"))
    );
}

#[test]
fn one_shot_mode_runs_one_turn_and_denies_what_is_not_allowed() {
    let scratch = Scratch::new();
    let workspace = scratch.workspace();

    let (status, out, err) = sidechat(&scratch, &["chat", "-p", "create a.md with hi"], None);
    assert_eq!(status, 0, "{out}\n{err}");
    assert!(
        err.contains(
            "✗ denied: write a.md (1 line) (one-shot mode allows only the tools named with --allow)"
        ),
        "{err}"
    );
    assert!(!workspace.join("a.md").exists());

    let (status, out, err) = sidechat(
        &scratch,
        &["chat", "-p", "create a.md with hi", "--allow", "write_file"],
        None,
    );
    assert_eq!(status, 0, "{out}\n{err}");
    assert_eq!(
        std::fs::read_to_string(workspace.join("a.md")).unwrap(),
        "hi\n"
    );
    assert!(out.contains("Done. The tool answered:"), "{out}");

    // Piped stdin is the message; --json prints the run's events, one per line.
    let (status, out, err) = sidechat(&scratch, &["chat", "--json"], Some("list files\n"));
    assert_eq!(status, 0, "{out}\n{err}");
    let kinds: Vec<String> = out
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["event"]["kind"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert!(kinds.iter().any(|k| k == "runStarted"), "{out}");
    assert_eq!(
        kinds.last().map(String::as_str),
        Some("runFinished"),
        "{out}"
    );

    // Nothing to send is an error, not a hang.
    let (status, _, err) = sidechat(&scratch, &["chat"], Some(""));
    assert_eq!(status, 2);
    assert!(err.contains("nothing to send"), "{err}");
}

/// Every entry `session/transcript` holds, read by the test's own client.
async fn stored_entries(db: &Path, session: &str) -> Value {
    let daemon = Daemon::start(db, Options::default()).await;
    let transcript = daemon.transcript(session).await;
    daemon.close().await;
    transcript["entries"].clone()
}

#[tokio::test]
async fn the_json_export_holds_every_stored_entry() {
    let scratch = Scratch::new();
    let script = json!({"turns": [
        {"text": "Looking around, slowly.", "delayMs": 100,
         "toolCalls": [{"name": "list_directory", "input": {"path": "."}}]},
        {"thinking": "Listing done.", "text": "Found nothing much."}
    ]});
    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(scratch.replay(script))).await;
    let session = daemon.create_session(scratch.replay_session()).await;
    daemon.send(&session, "look around").await;
    daemon
        .events_until(|e| matches!(e, sidechat::protocol::Event::TextDelta { .. }))
        .await;
    daemon.send(&session, "and mind the README").await;
    daemon.until_finished().await;
    daemon.send(&session, "/cost").await;
    daemon
        .events_until(|e| matches!(e, sidechat::protocol::Event::MessageCompleted { entry } if entry.role == sidechat::protocol::Role::Note))
        .await;
    daemon.close().await;

    let (status, out, err) = sidechat(
        &scratch,
        &["sessions", "export", &session, "--format", "json"],
        None,
    );
    assert_eq!(status, 0, "{err}");
    let export: Value = serde_json::from_str(&out).unwrap();
    let stored = stored_entries(&scratch.db(), &session).await;
    assert_eq!(export["entries"], stored);
    assert_eq!(export["session"]["id"], json!(session));
    let blocks: Vec<&str> = stored
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|e| e["blocks"].as_array().unwrap())
        .map(|b| b["type"].as_str().unwrap())
        .collect();
    for kind in ["toolCall", "toolResult", "interjection", "thinking"] {
        assert!(blocks.contains(&kind), "{kind} in {blocks:?}");
    }
    let roles: Vec<&str> = stored
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["role"].as_str().unwrap())
        .collect();
    assert!(roles.contains(&"note"), "{roles:?}");

    // The Markdown export has the same entries to read; list and delete close the circle.
    let (status, markdown, _) = sidechat(&scratch, &["sessions", "export", &session], None);
    assert_eq!(status, 0);
    for part in [
        "## User\n\nlook around",
        "**Tool call** `list_directory`",
        "**The user added** (typed while the run worked): and mind the README",
        "## Note",
    ] {
        assert!(markdown.contains(part), "{part:?} in:\n{markdown}");
    }
    let (_, listed, _) = sidechat(&scratch, &["sessions", "list"], None);
    assert!(listed.contains(&session), "{listed}");
    let (status, _, err) = sidechat(&scratch, &["sessions", "delete", &session], None);
    assert_eq!(status, 0, "{err}");
    let (_, listed, _) = sidechat(&scratch, &["sessions", "list", "--json"], None);
    assert_eq!(listed, "");
}

#[test]
fn a_multi_line_paste_is_one_message_and_markdown_is_drawn() {
    let scratch = Scratch::new();
    let reply = "# Plan\n\nThis is **bold**, *leaning* and `code`.\n\n- first point\n- second point\n\n1. one\n2. two\n\n```rust\nfn main() {\n    println!(\"hi\");\n}\n```\n\n> quoted words\n\nEND-OF-REPLY";
    let env: String = scratch
        .replay(json!({"turns": [{"text": reply, "thinking": "Let me think about the plan."}]}))
        .into_iter()
        .map(|(k, v)| format!("{k}={v} "))
        .collect();
    let terminal = Tmux::start(
        &scratch,
        "markdown",
        &format!("export {env}; {}", chat_line(&scratch, "")),
    );
    terminal.wait_for("account replay");
    terminal.wait_for("› ");
    terminal.type_line("first line of a paste\nsecond line of it");
    let screen = terminal.wait_for("END-OF-REPLY");
    let requests = scratch.requests();
    let sent: Vec<&Value> = requests[0]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .collect();
    assert_eq!(sent.len(), 1, "{requests:?}");
    assert_eq!(
        sent[0]["content"][0]["text"],
        "first line of a paste\nsecond line of it"
    );
    // From the folded thinking to the reply's last line (the prompt below it comes and goes).
    let start = screen.find("thought for").expect("folded thinking");
    let end = screen.find("END-OF-REPLY").unwrap() + "END-OF-REPLY".len();
    let drawn: Vec<&str> = screen[start..end].lines().map(str::trim_end).collect();
    insta::assert_snapshot!(drawn.join("\n"));
    terminal.quit();
}

#[test]
fn configuration_mistakes_are_named() {
    let scratch = Scratch::new();
    // A malformed file: the daemon's own error, with its line and column.
    scratch.write_config("[defaults]\nmax_steps = = 3\n");
    let terminal = Tmux::start(&scratch, "malformed", &chat_line(&scratch, ""));
    let screen = terminal.wait_for("CHAT-EXITED-2");
    assert!(screen.contains("is not valid configuration"), "{screen}");
    assert!(screen.contains("line 2, column"), "{screen}");
    assert!(!screen.contains("closed the connection"), "{screen}");
    drop(terminal);

    // An unknown default account is an error naming the accounts there are.
    scratch.write_config("default_account = \"nope\"\n");
    let terminal = Tmux::start(&scratch, "unknown", &chat_line(&scratch, ""));
    let screen = terminal.wait_for("CHAT-EXITED-2");
    assert!(
        screen.contains("names the account \"nope\", which does not exist; the accounts are: demo"),
        "{screen}"
    );
    drop(terminal);
    let (status, _, err) = sidechat_with(
        &scratch,
        &[("SIDECHAT_ACCOUNT", "ghost")],
        &["chat", "-p", "hi"],
    );
    assert_eq!(status, 2);
    assert!(
        err.contains("SIDECHAT_ACCOUNT names the account \"ghost\""),
        "{err}"
    );

    // An account whose key is missing is named in the banner with the reason; /model refuses
    // a model the account does not serve.
    scratch.write_config(
        "[accounts.work]\nkind = \"anthropic\"\napi_key_env = \"WORK_KEY_UNSET\"\ndefault_model = \"claude-sonnet-4-5\"\n",
    );
    let terminal = Tmux::start(&scratch, "unusable", &chat_line(&scratch, ""));
    let banner = terminal.wait_for("› ");
    assert!(
        banner.contains("The account work in your configuration cannot be used: its key variable WORK_KEY_UNSET is not set."),
        "{banner}"
    );
    terminal.type_line("/model gpt-5");
    terminal.wait_for("\"gpt-5\" is not a model the account demo is known to serve (demo)");
    terminal.quit();
}

/// Starts `sidechat chat ARGS` with the replay model scripted by `script`; the terminal, once
/// the prompt shows, and the screen then (the banner).
fn replay_chat(scratch: &Scratch, name: &str, script: Value, args: &str) -> (Tmux, String) {
    let env: String = scratch
        .replay(script)
        .into_iter()
        .map(|(k, v)| format!("{k}={v} "))
        .collect();
    let terminal = Tmux::start(
        scratch,
        name,
        &format!("export {env}; {}", chat_line(scratch, args)),
    );
    let banner = terminal.wait_for("› ");
    (terminal, banner)
}

#[test]
fn keys_typed_in_a_burst_while_a_reply_streams_all_show_at_once() {
    let scratch = Scratch::new();
    // A long reply streamed slowly, one paragraph (so one printed line) after another.
    let reply: String = (1..=400)
        .map(|n| format!("Paragraph {n} of a long reply.\n\n"))
        .collect();
    let (terminal, _) = replay_chat(
        &scratch,
        "burst",
        json!({"turns": [{"text": reply, "delayMs": 10}]}),
        "--new",
    );
    terminal.type_line("talk for a while");
    terminal.wait_for("Paragraph 3 of a long reply.");

    // One write of several keys, as a fast typist or an input method sends them; no key
    // follows it.
    terminal.run(&["send-keys", "-t", "chat", "-l", "typed in one go"]);
    let screen = terminal.wait_for("› typed in one go");
    assert!(
        !screen.contains("Paragraph 400 of a long reply."),
        "the keys were typed while the reply streamed:\n{screen}"
    );

    // Entered while the run works, the line waits for the model.
    terminal.keys("Enter");
    terminal.wait_for("↳ waiting: typed in one go");
    terminal.keys("C-c");
    terminal.wait_for("(stopped)");
    terminal.quit();
}

#[test]
fn account_switches_and_an_unknown_one_is_refused() {
    let scratch = Scratch::new();
    let (terminal, banner) = replay_chat(
        &scratch,
        "account",
        json!({"turns": [{"text": "REPLAY-ANSWER"}]}),
        "--new",
    );
    assert!(banner.contains("account replay · model replay"), "{banner}");

    terminal.type_line("/account");
    let list = terminal.wait_for("  demo (demo, default model demo)");
    assert!(list.contains("* replay ("), "{list}");

    terminal.type_line("/account ghost");
    let refused = terminal.wait_for("there is no account \"ghost\"");
    assert!(
        refused
            .contains("✗ there is no account \"ghost\"; the configured accounts are: demo, replay"),
        "{refused}"
    );

    terminal.type_line("/account demo");
    terminal.wait_for("Now using account demo with model demo.");
    // The next turn is the demo model's, and the scripted one is never asked.
    terminal.type_line("list files");
    terminal.wait_for("[demo model, offline]");
    terminal.wait_for("Done. The tool answered:");
    assert_eq!(scratch.requests(), Vec::<Value>::new());
    let id = resumed_id(&terminal.quit());
    drop(terminal);

    // The session keeps the account: reopened, its banner names it.
    let (again, banner) = replay_chat(
        &scratch,
        "account-again",
        json!({"turns": []}),
        &format!("--session {id}"),
    );
    assert!(banner.contains("account demo · model demo"), "{banner}");
    again.quit();
}

#[test]
fn alt_enter_adds_a_line_and_the_lines_go_as_one_message() {
    let scratch = Scratch::new();
    let (terminal, _) = replay_chat(
        &scratch,
        "alt-enter",
        json!({"turns": [{"text": "TWO-LINES-READ"}]}),
        "--new",
    );
    terminal.run(&["send-keys", "-t", "chat", "-l", "the first line"]);
    terminal.wait_for("› the first line");
    terminal.keys("M-Enter");
    terminal.run(&["send-keys", "-t", "chat", "-l", "the second line"]);
    let typed = terminal.wait_for("the second line");
    // Still one input, on two lines of the prompt: nothing was sent yet.
    assert!(
        typed.contains("› the first line\nthe second line"),
        "{typed}"
    );
    assert_eq!(scratch.requests(), Vec::<Value>::new());
    terminal.keys("Enter");
    terminal.wait_for("TWO-LINES-READ");
    let requests = scratch.requests();
    let sent: Vec<&Value> = requests[0]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .collect();
    assert_eq!(sent.len(), 1, "{requests:?}");
    assert_eq!(
        sent[0]["content"][0]["text"],
        "the first line\nthe second line"
    );
    terminal.quit();
}

#[test]
fn an_approval_waiting_when_the_chat_quit_is_asked_again_on_continue() {
    let scratch = Scratch::new();
    let workspace = scratch.workspace();
    let first = Tmux::start(&scratch, "waiting", &chat_line(&scratch, "--new"));
    first.wait_for("› ");
    first.type_line("create kept.md with answered later");
    first.wait_for("[a] allow once");
    first.quit();
    drop(first);
    assert!(!workspace.join("kept.md").exists());

    let again = Tmux::start(&scratch, "reattach", &chat_line(&scratch, "--continue"));
    let shown = again.wait_for("› ");
    let at = shown
        .rfind("allow: write kept.md (1 line)")
        .unwrap_or_else(|| panic!("the waiting approval is shown:\n{shown}"));
    assert!(
        shown[at..].contains("    + answered later"),
        "with its diff:\n{shown}"
    );
    assert!(shown[at..].contains("[a] allow once"), "{shown}");
    again.type_line("a");
    again.wait_for("Done. The tool answered:");
    assert_eq!(
        std::fs::read_to_string(workspace.join("kept.md")).unwrap(),
        "answered later\n"
    );
    again.quit();
}

/// The lines of the prompt's history file, as the chat left it.
fn history_lines(scratch: &Scratch) -> Vec<String> {
    let path = scratch
        .home()
        .join(".local/share/sidechat/chat-history.txt");
    std::fs::read_to_string(&path)
        .unwrap_or_default()
        .lines()
        // rustyline's file starts with a version line.
        .filter(|l| !l.starts_with("#V"))
        .map(str::to_string)
        .collect()
}

#[test]
fn lines_typed_in_one_burst_all_reach_the_daemon_in_order() {
    let scratch = Scratch::new();
    // Debug logs, for the failure message should it ever stall.
    let line = format!(
        "export SIDECHAT_LOG=sidechat=debug; {}",
        chat_line(&scratch, "--new")
    );
    let terminal = Tmux::start(&scratch, "burst-lines", &line);
    terminal.wait_for("› ");
    terminal.type_line("hello there");
    terminal.wait_for("(see the README).");

    // Four lines in one write, while the first of them (a command the daemon takes a moment
    // over) is still being answered.
    terminal.keys_in_one_go(&[
        "/compact", "Enter", "alpha", "Enter", "beta", "Enter", "/cost", "Enter",
    ]);
    terminal.wait_for("You said: \"beta\"");
    terminal.wait_for("Cost of this session");
    let id = resumed_id(&terminal.quit());
    assert_eq!(
        history_lines(&scratch),
        ["hello there", "/compact", "alpha", "beta", "/cost", "/quit"]
    );

    // In the transcript in the order typed: the /compact note before alpha, and the /cost
    // note after it; beta, typed while alpha's run worked, waited for it and then started the
    // next turn.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let entries = runtime.block_on(stored_entries(&scratch.db(), &id));
    let said: Vec<String> = entries
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["role"] == "user" || e["role"] == "note")
        .map(|e| {
            let text = e["blocks"][0]["text"].as_str().unwrap_or("");
            let first = text.split_whitespace().next().unwrap_or("");
            format!("{}: {first}", e["role"].as_str().unwrap())
        })
        .collect();
    let at = |what: &str| {
        said.iter()
            .position(|s| s == what)
            .unwrap_or_else(|| panic!("{what:?} in {said:?}"))
    };
    assert_eq!(said.len(), 5, "{said:?}");
    assert!(at("user: hello") < at("note: Compacted"), "{said:?}");
    assert!(at("note: Compacted") < at("user: alpha"), "{said:?}");
    assert!(at("user: alpha") < at("user: beta"), "{said:?}");
    assert!(at("user: alpha") < at("note: Cost"), "{said:?}");
}

#[test]
fn a_command_typed_while_a_reply_streams_does_not_split_its_lines() {
    let scratch = Scratch::new();
    let line = |n: usize| {
        format!(
            "Line {n} says alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa."
        )
    };
    let reply: String = (1..=60).map(|n| format!("{}\n\n", line(n))).collect();
    let (terminal, _) = replay_chat(
        &scratch,
        "split",
        json!({"turns": [{"text": reply, "delayMs": 10}]}),
        "--new",
    );
    terminal.type_line("talk for a while");
    terminal.wait_for("Line 4 says");
    terminal.type_line("/cost");
    terminal.wait_for("Cost of this session");
    terminal.type_line("and then some");
    terminal.wait_for("↳ waiting: and then some");
    let screen = terminal.wait_for(&line(60));
    assert!(
        screen.find("Cost of this session").unwrap() < screen.find(&line(60)).unwrap(),
        "the command was answered while the reply streamed:\n{screen}"
    );
    // Every line of the reply is on the screen whole, and nothing else holds a piece of one.
    let drawn: Vec<&str> = screen
        .lines()
        .map(str::trim_end)
        .filter(|l| l.contains("Line ") || l.contains(" papa.") || l.contains("alpha bravo"))
        .collect();
    let expected: Vec<String> = (1..=60).map(line).collect();
    assert_eq!(drawn, expected, "{screen}");
    terminal.quit();
}

#[test]
fn one_shot_sessions_are_marked_and_not_offered_to_continue() {
    let scratch = Scratch::new();
    let typed = Tmux::start(&scratch, "typed", &chat_line(&scratch, "--new"));
    typed.wait_for("› ");
    typed.type_line("/title Typed chat");
    typed.wait_for("Renamed to “Typed chat”.");
    let typed_id = resumed_id(&typed.quit());
    drop(typed);

    let (status, out, err) = sidechat(&scratch, &["chat", "-p", "hello once"], None);
    assert_eq!(status, 0, "{out}\n{err}");
    let (status, out, err) = sidechat(&scratch, &["chat"], Some("hello from a pipe\n"));
    assert_eq!(status, 0, "{out}\n{err}");

    let (_, listed, _) = sidechat(&scratch, &["sessions", "list", "--json"], None);
    let origins: Vec<(String, Value)> = listed
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|s| {
            (
                s["title"].as_str().unwrap().to_string(),
                s["origin"].clone(),
            )
        })
        .collect();
    assert_eq!(
        origins,
        [
            ("hello from a pipe".to_string(), json!("oneshot")),
            ("hello once".to_string(), json!("oneshot")),
            ("Typed chat".to_string(), json!("interactive")),
        ]
    );
    let (_, listed, _) = sidechat(&scratch, &["sessions", "list"], None);
    let marked: Vec<bool> = listed.lines().map(|l| l.contains(" [one-shot]")).collect();
    assert_eq!(marked, [true, true, false], "{listed}");

    // The question is about the newest chat typed here, not the one-shot runs after it.
    let again = Tmux::start(&scratch, "again", &chat_line(&scratch, ""));
    again.wait_for("Continue this folder's last chat, “Typed chat”");
    again.keys("Enter");
    again.wait_for("› ");
    assert_eq!(resumed_id(&again.quit()), typed_id);
}

#[test]
fn a_missing_config_file_named_by_sidechat_config_is_an_error() {
    let scratch = Scratch::new();
    let missing = scratch.home().join("nowhere/config.toml");
    let missing = missing.to_str().unwrap();
    let expected = format!("SIDECHAT_CONFIG names {missing}, which does not exist");
    let (status, out, err) = sidechat_with(
        &scratch,
        &[("SIDECHAT_CONFIG", missing)],
        &["chat", "-p", "hi"],
    );
    assert_eq!(status, 2, "{out}\n{err}");
    assert!(err.contains(&expected), "{err}");
    assert!(!out.contains("demo model"), "{out}");

    let (status, out, _) = sidechat_with(&scratch, &[("SIDECHAT_CONFIG", missing)], &["doctor"]);
    assert_eq!(status, 1, "{out}");
    assert!(out.contains(&expected), "{out}");
    assert!(!out.contains("No problems found"), "{out}");
}

#[test]
fn one_shot_refuses_an_unknown_tool_to_allow() {
    let scratch = Scratch::new();
    let (status, out, err) = sidechat(
        &scratch,
        &[
            "chat",
            "-p",
            "create a.md with hi",
            "--allow",
            "write_file",
            "nosuch",
        ],
        None,
    );
    assert_eq!(status, 2, "{out}\n{err}");
    assert!(
        err.contains(
            "--allow names the tool \"nosuch\", which does not exist; the tools are: read_file, list_directory, search_text, write_file, edit_file, run_command, update_plan, web_fetch, delegate (and an MCP server's, as mcp__SERVER__TOOL)"
        ),
        "{err}"
    );
    assert!(!scratch.workspace().join("a.md").exists());
    let (_, listed, _) = sidechat(&scratch, &["sessions", "list", "--json"], None);
    assert_eq!(listed, "", "no session was started");
}

/// `sessions list` shows the newest 50 unless told (a year of history is not a screen), says
/// on stderr that more are left, and `--all` lists every one.
#[test]
fn sessions_list_shows_the_newest_unless_asked_for_all() {
    let scratch = Scratch::new();
    for n in 1..=3 {
        let (status, _, err) = sidechat(&scratch, &["chat", "-p", &format!("question {n}")], None);
        assert_eq!(status, 0, "{err}");
    }
    let ids = |listed: &str| -> Vec<String> {
        listed
            .lines()
            .map(|line| {
                serde_json::from_str::<Value>(line).unwrap()["id"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect()
    };
    let (status, all, err) = sidechat(&scratch, &["sessions", "list", "--json", "--all"], None);
    assert_eq!((status, err.as_str()), (0, ""));
    let all = ids(&all);
    assert_eq!(all.len(), 3);

    let (status, newest, err) = sidechat(
        &scratch,
        &["sessions", "list", "--json", "--limit", "2"],
        None,
    );
    assert_eq!(status, 0, "{err}");
    assert_eq!(ids(&newest), all[..2].to_vec());
    assert_eq!(
        err,
        "the newest 2 sessions shown; more with --limit N or --all\n"
    );

    let (status, listed, err) = sidechat(&scratch, &["sessions", "list"], None);
    assert_eq!((status, err.as_str()), (0, ""));
    assert_eq!(listed.lines().count(), 3);
}

#[test]
fn the_approval_prompt_offers_the_workspace_rule_and_w_saves_an_edited_one() {
    let scratch = Scratch::new();
    let workspace = scratch.workspace();
    let terminal = Tmux::start(&scratch, "workspace-rule", &chat_line(&scratch, ""));
    terminal.wait_for("› ");

    terminal.type_line("create notes.md with hi");
    let prompt = terminal.wait_for("[a] allow once");
    assert!(
        prompt.contains("[w] always in this workspace: write_file(notes.md)"),
        "{prompt}"
    );
    assert!(prompt.contains("[s] for this session"), "{prompt}");
    // `w RULE` saves the rule typed instead of the proposed one.
    terminal.type_line("w write_file(*.md)");
    terminal.wait_for("allowed, and always in this workspace");
    terminal.wait_for("Done. The tool answered:");
    assert_eq!(
        std::fs::read_to_string(workspace.join("notes.md")).unwrap(),
        "hi\n"
    );

    // The saved rule covers the next Markdown write: no prompt.
    terminal.type_line("create other.md with more");
    let screen = terminal.wait_for_count("Done. The tool answered:", 2);
    assert!(!screen.contains("allow: write other.md"), "{screen}");
    assert_eq!(
        std::fs::read_to_string(workspace.join("other.md")).unwrap(),
        "more\n"
    );

    // Another file is asked; `d REASON` denies it.
    terminal.type_line("create draft.txt with x");
    terminal.wait_for("allow: write draft.txt (1 line)");
    terminal.type_line("d name it notes.txt");
    terminal.wait_for("✗ not run: denied");
    assert!(!workspace.join("draft.txt").exists());
    terminal.quit();
}

/// A chat the terminal starts is titled by the daemon after its first answer (the demo model
/// titles from the first words), and the chat says so; a one-shot session is named by its
/// message at once.
#[test]
fn the_daemon_titles_a_terminal_chat_and_a_one_shot_is_named_by_its_message() {
    let scratch = Scratch::new();
    let terminal = Tmux::start(&scratch, "titled", &chat_line(&scratch, "--new"));
    terminal.wait_for("› ");
    terminal.type_line("please explain how lifetimes work in rust");
    terminal.wait_for("This chat is now “please explain how lifetimes work in”.");
    // A change of model is a `sessionUpdated` too, sent before the next run's events; the
    // title stayed, so no second line says it.
    terminal.type_line("/model demo");
    terminal.wait_for("Now using account demo with model demo.");
    terminal.type_line("and again");
    let screen = terminal.wait_for("You said: \"and again\"");
    assert_eq!(screen.matches("This chat is now").count(), 1, "{screen}");
    terminal.quit();

    let (status, _, err) = sidechat(&scratch, &["chat", "-p", "  count the words here"], None);
    assert_eq!(status, 0, "{err}");
    let (status, listed, err) = sidechat(&scratch, &["sessions", "list", "--json"], None);
    assert_eq!(status, 0, "{err}");
    let titles: Vec<String> = listed
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["title"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        titles,
        [
            "count the words here",
            "please explain how lifetimes work in"
        ]
    );
}

#[test]
fn undo_in_the_terminal_takes_back_the_last_turn_and_its_file() {
    let scratch = Scratch::new();
    let workspace = scratch.workspace();
    let terminal = Tmux::start(&scratch, "undo", &chat_line(&scratch, "--new"));
    terminal.wait_for("› ");
    terminal.type_line("create notes.md with kept");
    terminal.wait_for("[a] allow once");
    terminal.type_line("a");
    terminal.wait_for("Done. The tool answered:");
    terminal.type_line("edit notes.md replace kept with changed");
    terminal.wait_for_count("[a] allow once", 2);
    terminal.type_line("a");
    terminal.wait_for_count("Done. The tool answered:", 2);
    assert_eq!(
        std::fs::read_to_string(workspace.join("notes.md")).unwrap(),
        "changed\n"
    );

    terminal.type_line("/undo");
    let screen = terminal.wait_for("Took back the last turn");
    assert!(screen.contains("  restored notes.md"), "{screen}");
    assert_eq!(
        std::fs::read_to_string(workspace.join("notes.md")).unwrap(),
        "kept\n"
    );
    // Once more: the first turn goes too, and the file it created with it.
    terminal.type_line("/undo");
    let screen = terminal.wait_for_count("Took back the last turn", 2);
    assert!(screen.contains("  removed notes.md"), "{screen}");
    assert!(!workspace.join("notes.md").exists());
    terminal.quit();
}

#[test]
fn an_image_attached_with_slash_image_goes_with_the_next_message() {
    let scratch = Scratch::new();
    let bytes = crate::images::png(320, 200);
    std::fs::write(scratch.workspace().join("shot.png"), &bytes).unwrap();
    std::fs::write(scratch.workspace().join("notes.txt"), "not an image").unwrap();
    let (terminal, _) = replay_chat(
        &scratch,
        "image",
        json!({"turns": [{"text": "A small picture."}]}),
        "--new",
    );
    terminal.type_line("/image notes.txt");
    terminal.wait_for("✗ notes.txt is not a PNG, JPEG, GIF or WebP image");
    terminal.type_line("/image shot.png");
    terminal
        .wait_for("attached shot.png (image/png, 33 bytes) to your next message (1 image in all)");
    terminal.type_line("what is this?");
    terminal.wait_for("A small picture.");
    terminal.quit();
    let requests = scratch.requests();
    let last = requests[0]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    use base64::Engine as _;
    assert_eq!(
        last["content"][1],
        json!({"type": "image", "imageId": crate::images::sha256(&bytes),
               "mediaType": "image/png", "width": 320, "height": 200,
               "data": base64::engine::general_purpose::STANDARD.encode(&bytes)})
    );
}

/// Tab completes `/` commands (listing them with their descriptions, a unique one hinted as
/// it is typed) and `@` paths (quoted when they hold a space); the mention's attachment is
/// drawn as a chip under the message, live and again when the transcript is shown.
#[test]
fn tab_completes_commands_and_paths_and_attachments_show_as_chips() {
    let scratch = Scratch::new();
    let workspace = scratch.workspace();
    std::fs::create_dir_all(workspace.join(".sidechat/commands")).unwrap();
    std::fs::write(
        workspace.join(".sidechat/commands/review.md"),
        "---\ndescription: Review a file\nargument-hint: <path>\n---\nReview $ARGUMENTS.",
    )
    .unwrap();
    std::fs::create_dir_all(workspace.join("docs")).unwrap();
    std::fs::write(workspace.join("docs/my notes.md"), "first\nsecond\n").unwrap();
    let terminal = Tmux::start(&scratch, "complete", &chat_line(&scratch, "--new"));
    terminal.wait_for("› ");

    // `/` and Tab twice: every command, with its description.
    terminal.keys("/");
    terminal.wait_for("› /");
    terminal.keys("Tab");
    terminal.keys("Tab");
    let listed = terminal.wait_for("Review a file");
    for row in [
        format!("{:<24} Review a file", "/review <path>"),
        format!("{:<24} summarise the earlier turns now", "/compact [focus]"),
        format!("{:<24} leaves", "/quit"),
    ] {
        assert!(listed.contains(&row), "{row:?} missing:\n{listed}");
    }

    // A command typed in part is hinted; Tab completes it.
    terminal.keys("rev");
    terminal.wait_for("› /review <path>  Review a file");
    terminal.keys("Tab");
    terminal.keys("@docs/my");
    terminal.wait_for("› /review @docs/my");
    terminal.keys("Tab");
    terminal.wait_for("› /review @\"docs/my notes.md\"");
    terminal.keys("closely");
    terminal.keys("Enter");
    let chip = "  ⧉ [docs/my notes.md · 13 B]";
    let live = terminal.wait_for(chip);
    assert!(
        live.contains("› /review @\"docs/my notes.md\" closely"),
        "{live}"
    );
    terminal.wait_for("[demo model, offline]");
    let id = resumed_id(&terminal.quit());

    let (status, shown, _) = sidechat(&scratch, &["sessions", "show", &id], None);
    assert_eq!(status, 0);
    let under: Vec<&str> = shown
        .lines()
        .skip_while(|l| !l.starts_with("> /review"))
        .take(3)
        .collect();
    assert_eq!(
        under,
        [
            "> /review @\"docs/my notes.md\" closely",
            "  (custom command /review)",
            chip
        ],
        "{shown}"
    );
}

#[test]
fn a_message_the_provider_failed_is_asked_again_with_resume() {
    use crate::upstream::{Reply, start};
    let upstream = start(vec![
        Reply::status(
            529,
            r#"{"error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        ),
        crate::long_context::text_reply("Answered at last.", 100, 4),
    ]);
    let scratch = Scratch::new();
    let env: String = crate::long_context::env(&upstream.url, 128_000)
        .into_iter()
        .map(|(k, v)| format!("{k}={v} "))
        .collect();
    let terminal = Tmux::start(
        &scratch,
        "retry",
        &format!("export {env}; {}", chat_line(&scratch, "--new")),
    );
    terminal.wait_for("› ");
    terminal.type_line("go");
    terminal.wait_for("HTTP 529");
    terminal.wait_for("! Your message has no answer: /resume asks again.");
    terminal.type_line("/resume");
    terminal.wait_for("Answered at last.");
    terminal.quit();
    // The same request again (a title request may follow it).
    let requests = upstream.bodies();
    assert_eq!(requests[1]["messages"], requests[0]["messages"]);
}
