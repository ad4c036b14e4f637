//! `sidechat chat` driven through a real terminal (tmux): a demo run that writes a file after
//! the user allows it.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::harness::Scratch;

/// A tmux server of its own (its own socket), started with a cleared environment: the chat
/// and the daemon it spawns see `PATH`, a UTF-8 locale and the test's own HOME and XDG
/// folders, and none of the machine's provider keys, `SIDECHAT_*` settings or config files.
struct Tmux {
    socket: String,
    home: PathBuf,
}

fn tmux(terminal: &Tmux, args: &[&str]) -> String {
    let home = &terminal.home;
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
        .arg(&terminal.socket)
        // No tmux configuration of the machine either.
        .arg("-f")
        .arg("/dev/null")
        .args(args)
        .output()
        .expect("tmux is installed (see .ci/run)");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Waits until the screen shows `needle`; the screen on failure.
fn wait_for(terminal: &Tmux, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let screen = tmux(
            terminal,
            &["capture-pane", "-p", "-J", "-S", "-200", "-t", "chat"],
        );
        if screen.contains(needle) {
            return screen;
        }
        assert!(
            Instant::now() < deadline,
            "the screen never showed {needle:?}:\n{screen}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn chat_in_a_terminal_writes_a_file_after_approval() {
    let scratch = Scratch::new();
    let workspace = scratch.workspace();
    let terminal = Tmux {
        socket: format!("sidechat-test-{}", std::process::id()),
        home: scratch.home(),
    };
    let command = format!(
        "cd {} && SIDECHAT_DEMO_DELAY_MS=15 {} chat --db {}; echo CHAT-EXITED-$?; sleep 30",
        workspace.display(),
        env!("CARGO_BIN_EXE_sidechat"),
        scratch.db().display()
    );
    tmux(
        &terminal,
        &[
            "new-session",
            "-d",
            "-s",
            "chat",
            "-x",
            "200",
            "-y",
            "50",
            &command,
        ],
    );
    let banner = wait_for(&terminal, "> ");
    assert!(banner.contains("OFFLINE DEMO"), "{banner}");

    tmux(
        &terminal,
        &[
            "send-keys",
            "-t",
            "chat",
            "create notes.md with hello from the terminal",
            "Enter",
        ],
    );
    let prompt = wait_for(&terminal, "[a]llow once");
    assert!(prompt.contains("write notes.md (1 lines)"), "{prompt}");
    assert!(
        !workspace.join("notes.md").exists(),
        "nothing is written before approval"
    );

    tmux(&terminal, &["send-keys", "-t", "chat", "a", "Enter"]);
    wait_for(&terminal, "Done. The tool answered:");
    assert_eq!(
        std::fs::read_to_string(workspace.join("notes.md")).unwrap(),
        "hello from the terminal\n"
    );

    // Ctrl-C stops a streaming run; the daemon survives it and the chat goes on.
    tmux(
        &terminal,
        &["send-keys", "-t", "chat", "tell me a story", "Enter"],
    );
    wait_for(&terminal, "Once upon a time");
    tmux(&terminal, &["send-keys", "-t", "chat", "C-c", ""]);
    wait_for(&terminal, "[run ended: Stopped]");
    let screen = wait_for(&terminal, "> ");
    assert!(!screen.contains("The daemon exited"), "{screen}");

    // Typing while a run waits for approval queues the text for the model.
    tmux(
        &terminal,
        &[
            "send-keys",
            "-t",
            "chat",
            "create later.md with soon",
            "Enter",
        ],
    );
    wait_for(&terminal, "write later.md (1 lines)");
    tmux(
        &terminal,
        &["send-keys", "-t", "chat", "and say thanks", "Enter"],
    );
    wait_for(
        &terminal,
        "queued: the model reads it after the current step",
    );
    tmux(&terminal, &["send-keys", "-t", "chat", "a", "Enter"]);
    wait_for(&terminal, "your message reached the model");

    tmux(&terminal, &["send-keys", "-t", "chat", "/quit", "Enter"]);
    wait_for(&terminal, "CHAT-EXITED-0");
    tmux(&terminal, &["kill-server"]);
}
