//! `sidechat chat` driven through a real terminal (tmux): a demo run that writes a file after
//! the user allows it.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::harness::Scratch;

fn tmux(socket: &str, args: &[&str]) -> String {
    let output = Command::new("tmux")
        .arg("-L")
        .arg(socket)
        .args(args)
        .output()
        .expect("tmux is installed (see .ci/run)");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Waits until the screen shows `needle`; the screen on failure.
fn wait_for(socket: &str, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let screen = tmux(
            socket,
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
    let socket = format!("sidechat-test-{}", std::process::id());
    let command = format!(
        "cd {} && SIDECHAT_DEMO_DELAY_MS=15 {} chat --db {}; echo CHAT-EXITED-$?; sleep 30",
        workspace.display(),
        env!("CARGO_BIN_EXE_sidechat"),
        scratch.db().display()
    );
    tmux(
        &socket,
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
    let banner = wait_for(&socket, "> ");
    assert!(banner.contains("OFFLINE DEMO"), "{banner}");

    tmux(
        &socket,
        &[
            "send-keys",
            "-t",
            "chat",
            "create notes.md with hello from the terminal",
            "Enter",
        ],
    );
    let prompt = wait_for(&socket, "[a]llow once");
    assert!(prompt.contains("write notes.md (1 lines)"), "{prompt}");
    assert!(
        !workspace.join("notes.md").exists(),
        "nothing is written before approval"
    );

    tmux(&socket, &["send-keys", "-t", "chat", "a", "Enter"]);
    wait_for(&socket, "Done. The tool answered:");
    assert_eq!(
        std::fs::read_to_string(workspace.join("notes.md")).unwrap(),
        "hello from the terminal\n"
    );

    // Ctrl-C stops a streaming run; the daemon survives it and the chat goes on.
    tmux(
        &socket,
        &["send-keys", "-t", "chat", "tell me a story", "Enter"],
    );
    wait_for(&socket, "Once upon a time");
    tmux(&socket, &["send-keys", "-t", "chat", "C-c", ""]);
    wait_for(&socket, "[run ended: Stopped]");
    let screen = wait_for(&socket, "> ");
    assert!(!screen.contains("The daemon exited"), "{screen}");

    // Typing while a run waits for approval queues the text for the model.
    tmux(
        &socket,
        &[
            "send-keys",
            "-t",
            "chat",
            "create later.md with soon",
            "Enter",
        ],
    );
    wait_for(&socket, "write later.md (1 lines)");
    tmux(
        &socket,
        &["send-keys", "-t", "chat", "and say thanks", "Enter"],
    );
    wait_for(&socket, "queued: the model reads it after the current step");
    tmux(&socket, &["send-keys", "-t", "chat", "a", "Enter"]);
    wait_for(&socket, "your message reached the model");

    tmux(&socket, &["send-keys", "-t", "chat", "/quit", "Enter"]);
    wait_for(&socket, "CHAT-EXITED-0");
    tmux(&socket, &["kill-server"]);
}
