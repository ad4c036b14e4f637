//! Shell commands run in the workspace root, with a timeout and an output cap.
//!
//! Each command runs in a process group of its own, tagged in its environment, and everything
//! it started (its group, whatever carries its tag, and their descendants: see
//! [`crate::lifetime::sweep`]) is killed when the command ends, times out or the run is
//! stopped, so nothing it started outlives it, not even what it moved into a session of its
//! own. While it runs it is recorded in the store, so that a daemon killed meanwhile leaves
//! the next one enough to end it. The command has ended when its shell has exited: a background process that still holds the
//! output open (`server &`) does not keep the tool waiting. Output is read as it comes,
//! keeping at most [`OUTPUT_CAP`] bytes of each stream and counting the rest, so a command that
//! prints gigabytes costs no more memory than one that prints a page.

use std::os::fd::AsFd;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt};

use super::{ToolOutcome, Workspace, str_arg};
use crate::lifetime::{COMMAND_VAR, CommandLedger, Tracked};

const DEFAULT_TIMEOUT_SECS: u64 = 120;
const MAX_TIMEOUT_SECS: u64 = 600;
/// Most bytes of each stream shown to the model.
const OUTPUT_CAP: usize = 64 * 1024;
/// Size of each read from a stream.
const READ_CHUNK: usize = 16 * 1024;

#[cfg(test)]
pub async fn run(
    ws: &Workspace,
    input: &Value,
    ledger: &dyn CommandLedger,
) -> Result<ToolOutcome, String> {
    run_in(ws, input, ledger, None).await
}

/// Runs the command, inside the sandbox when `sandbox` is given ([`crate::sandbox`]): then
/// the shell is started by this binary's hidden mode, restricted first, and a failure that
/// looks like a refusal of the sandbox is told as one.
pub async fn run_in(
    ws: &Workspace,
    input: &Value,
    ledger: &dyn CommandLedger,
    sandbox: Option<&crate::sandbox::Settings>,
) -> Result<ToolOutcome, String> {
    let command = str_arg(input, "command")
        .filter(|c| !c.trim().is_empty())
        .ok_or("The input needs a non-empty string field \"command\".")?;
    let timeout = input
        .get("timeout_seconds")
        .and_then(Value::as_u64)
        .unwrap_or(DEFAULT_TIMEOUT_SECS)
        .clamp(1, MAX_TIMEOUT_SECS);
    let tag = crate::util::new_id("cmd");
    let mut shell = match sandbox {
        Some(settings) => {
            let binary = crate::sandbox::exec_binary()
                .map_err(|e| format!("Cannot find the sidechat binary to run the sandbox: {e}"))?;
            let mut shell = tokio::process::Command::new(binary);
            shell.args(crate::sandbox::exec_args(ws.root(), settings, command));
            shell
        }
        None => {
            let mut shell = tokio::process::Command::new("sh");
            shell.arg("-c").arg(command);
            shell
        }
    };
    shell
        .current_dir(ws.root())
        // Inherited by everything the command starts, wherever it goes.
        .env(COMMAND_VAR, &tag)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // A group of its own, led by the shell, so everything it starts can be killed at once.
        .process_group(0)
        .kill_on_drop(true);
    let mut child = crate::lifetime::reaper::spawn(&mut shell)
        .map_err(|e| format!("Cannot start the shell: {e}"))?;
    // Made before anything that can return, so every way out (the end, the timeout, an error,
    // or this future being dropped when the run stops) kills what the command started.
    let _ender = Ender::start(&child, tag, ledger);
    let mut stdout = child.stdout.take().ok_or("no stdout")?;
    let mut stderr = child.stderr.take().ok_or("no stderr")?;
    let (mut out, mut err) = (Captured::default(), Captured::default());
    let waited = tokio::time::timeout(
        Duration::from_secs(timeout),
        finish(&mut child, &mut stdout, &mut stderr, &mut out, &mut err),
    )
    .await;
    let status = match waited {
        Err(_) => {
            let mut output = format!("The command was stopped after {timeout} seconds.");
            output.push_str(&streams(&out, &err));
            return Ok(ToolOutcome::error(output.trim_end()));
        }
        Ok(Err(e)) => return Err(format!("The command failed: {e}")),
        Ok(Ok(status)) => status,
    };
    let code = status
        .code()
        .map_or("a signal".to_string(), |c| c.to_string());
    let mut output = format!("exit code: {code}{}", streams(&out, &err));
    if sandbox.is_some() && crate::sandbox::refusal::refused(status.success(), &err.text()) {
        output = format!("{}\n\n{}", output.trim_end(), crate::sandbox::refusal::TOLD);
    }
    Ok(ToolOutcome {
        output: output.trim_end().to_string(),
        is_error: !status.success(),
        changed: None,
        snapshot: None,
        image: None,
    })
}

/// Each non-empty stream under its name, each line starting with a newline.
fn streams(out: &Captured, err: &Captured) -> String {
    let mut text = String::new();
    for (name, captured) in [("stdout", out), ("stderr", err)] {
        if !captured.is_empty() {
            text.push_str(&format!("\n--- {name}\n{}", captured.text()));
        }
    }
    text
}

/// Reads both streams until the shell exits (or both streams end, then waits for the exit),
/// then takes what is already buffered in the pipes and stops: what background processes
/// write after that is not the command's output.
async fn finish(
    child: &mut tokio::process::Child,
    stdout: &mut tokio::process::ChildStdout,
    stderr: &mut tokio::process::ChildStderr,
    out: &mut Captured,
    err: &mut Captured,
) -> std::io::Result<ExitStatus> {
    enum First {
        Read(std::io::Result<()>),
        Exited(std::io::Result<ExitStatus>),
    }
    let first = {
        let reading = async {
            tokio::try_join!(
                read_capped(&mut *stdout, out),
                read_capped(&mut *stderr, err)
            )
            .map(|_| ())
        };
        tokio::select! {
            read = reading => First::Read(read),
            status = child.wait() => First::Exited(status),
        }
    };
    match first {
        First::Read(read) => {
            read?;
            child.wait().await
        }
        First::Exited(status) => {
            drain_buffered(&*stdout, out);
            drain_buffered(&*stderr, err);
            status
        }
    }
}

/// Reads `source` to its end, keeping what `into` has room for.
async fn read_capped(
    mut source: impl AsyncRead + Unpin,
    into: &mut Captured,
) -> std::io::Result<()> {
    let mut chunk = vec![0; READ_CHUNK];
    loop {
        let read = source.read(&mut chunk).await?;
        if read == 0 {
            return Ok(());
        }
        into.push(&chunk[..read]);
    }
}

/// Takes what a pipe holds right now without waiting (the pipe is non-blocking): everything
/// the shell wrote before it exited is there.
fn drain_buffered(pipe: impl AsFd, into: &mut Captured) {
    let mut chunk = vec![0; READ_CHUNK];
    loop {
        match rustix::io::read(&pipe, &mut chunk[..]) {
            Ok(0) => return,
            Ok(read) => into.push(&chunk[..read]),
            Err(rustix::io::Errno::INTR) => {}
            // `AGAIN`: nothing more is buffered.
            Err(_) => return,
        }
    }
}

/// The first [`OUTPUT_CAP`] bytes of a stream and a count of the rest.
#[derive(Debug, Default)]
struct Captured {
    kept: Vec<u8>,
    cut: u64,
}

impl Captured {
    fn push(&mut self, bytes: &[u8]) {
        let room = OUTPUT_CAP.saturating_sub(self.kept.len()).min(bytes.len());
        self.kept.extend_from_slice(&bytes[..room]);
        self.cut += (bytes.len() - room) as u64;
    }

    fn is_empty(&self) -> bool {
        self.kept.is_empty() && self.cut == 0
    }

    /// The kept text, saying how much was cut; a character split by the cap counts as cut.
    fn text(&self) -> String {
        let (mut kept, mut cut) = (&self.kept[..], self.cut);
        if cut > 0
            && let Err(e) = std::str::from_utf8(kept)
            && e.error_len().is_none()
        {
            cut += (kept.len() - e.valid_up_to()) as u64;
            kept = &kept[..e.valid_up_to()];
        }
        let text = String::from_utf8_lossy(kept);
        if cut == 0 {
            text.into_owned()
        } else {
            format!("{text}… [cut: {cut} more bytes]")
        }
    }
}

/// Ends a command when dropped: kills what it started and removes its record.
struct Ender<'a> {
    command: Option<Tracked>,
    ledger: &'a dyn CommandLedger,
}

impl<'a> Ender<'a> {
    fn start(child: &tokio::process::Child, tag: String, ledger: &'a dyn CommandLedger) -> Self {
        let command = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(|pid| Tracked::new(tag, pid));
        if let Some(command) = &command {
            ledger.started(command);
        }
        Self { command, ledger }
    }
}

impl Drop for Ender<'_> {
    fn drop(&mut self) {
        if let Some(command) = self.command.take() {
            // Reads `/proc` and may pause between kills: off the async worker.
            crate::util::off_worker(|| crate::lifetime::end_command(&command));
            self.ledger.ended(&command);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    /// The tool outside a daemon: nothing is recorded.
    async fn run(ws: &Workspace, input: &Value) -> Result<ToolOutcome, String> {
        super::run(ws, input, &crate::lifetime::NoLedger).await
    }

    /// A guard against a hung test, not a performance assertion.
    const HANG_GUARD: Duration = Duration::from_secs(60);

    fn workspace() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        (dir, ws)
    }

    /// Whether the process is gone (or a zombie waiting for its new parent to reap it).
    fn is_gone(pid: u32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            // The state follows the parenthesised name, which may itself contain spaces.
            Ok(stat) => stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
        }
    }

    /// Waits (up to the hang guard) until `pid` is gone; false if it never goes.
    async fn gone(pid: u32) -> bool {
        let deadline = tokio::time::Instant::now() + HANG_GUARD;
        while tokio::time::Instant::now() < deadline {
            if is_gone(pid) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    /// The pid a command wrote to `file` (a whole line), once it is there.
    async fn written_pid(file: &std::path::Path) -> u32 {
        loop {
            if let Ok(text) = std::fs::read_to_string(file)
                && text.ends_with('\n')
            {
                return text.trim().parse().unwrap();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn runs_in_the_root_and_reports_the_exit_code() {
        let (dir, ws) = workspace();
        std::fs::write(dir.path().join("marker"), "").unwrap();
        let ok = run(&ws, &json!({"command": "ls"})).await.unwrap();
        assert_eq!(ok, ToolOutcome::ok("exit code: 0\n--- stdout\nmarker"));
        let failed = run(&ws, &json!({"command": "echo oops >&2; exit 3"}))
            .await
            .unwrap();
        assert_eq!(failed, ToolOutcome::error("exit code: 3\n--- stderr\noops"));
    }

    #[tokio::test]
    async fn times_out() {
        let (_dir, ws) = workspace();
        let slow = run(&ws, &json!({"command": "sleep 30", "timeout_seconds": 1}))
            .await
            .unwrap();
        assert_eq!(
            slow,
            ToolOutcome::error("The command was stopped after 1 seconds.")
        );
    }

    #[tokio::test]
    async fn output_over_the_cap_is_cut_and_counted() {
        let (_dir, ws) = workspace();
        // 3 MiB of "y\n" on stdout, and a 2-byte character straddling the cap on stderr.
        let command = format!(
            "yes | head -c 3145728; printf '%{}s\\303\\251tail' '' >&2",
            OUTPUT_CAP - 1
        );
        let outcome = run(&ws, &json!({ "command": command })).await.unwrap();
        let expected = format!(
            "exit code: 0\n--- stdout\n{}… [cut: {} more bytes]\n--- stderr\n{}… [cut: 6 more bytes]",
            "y\n".repeat(OUTPUT_CAP / 2),
            3 * 1024 * 1024 - OUTPUT_CAP,
            " ".repeat(OUTPUT_CAP - 1),
        );
        assert_eq!(outcome, ToolOutcome::ok(expected));
    }

    #[test]
    fn the_capture_never_holds_more_than_the_cap() {
        let mut captured = Captured::default();
        let chunk = vec![b'x'; READ_CHUNK];
        for _ in 0..1000 {
            captured.push(&chunk);
        }
        assert_eq!(
            (captured.kept.len(), captured.cut),
            (OUTPUT_CAP, (1000 * READ_CHUNK - OUTPUT_CAP) as u64)
        );
    }

    #[tokio::test]
    async fn a_background_child_holding_the_output_does_not_keep_the_command_running() {
        let (_dir, ws) = workspace();
        let outcome = tokio::time::timeout(
            HANG_GUARD,
            run(&ws, &json!({"command": "sleep 300 & echo $!; echo hi"})),
        )
        .await
        .expect("the command returned when its shell exited")
        .unwrap();
        let pid: u32 = outcome.output.lines().nth(2).unwrap().parse().unwrap();
        assert_eq!(
            outcome,
            ToolOutcome::ok(format!("exit code: 0\n--- stdout\n{pid}\nhi"))
        );
        assert!(gone(pid).await, "the background sleep was killed");
    }

    #[tokio::test]
    async fn the_timeout_kills_what_the_command_started() {
        let (dir, ws) = workspace();
        let outcome = run(
            &ws,
            &json!({"command": "sleep 300 & echo $! > pid; echo started; wait", "timeout_seconds": 1}),
        )
        .await
        .unwrap();
        assert_eq!(
            outcome,
            ToolOutcome::error("The command was stopped after 1 seconds.\n--- stdout\nstarted")
        );
        let pid = written_pid(&dir.path().join("pid")).await;
        assert!(gone(pid).await, "the grandchild sleep was killed");
    }

    #[tokio::test]
    async fn stopping_kills_what_the_command_started() {
        let (dir, ws) = workspace();
        let pid_file = dir.path().join("pid");
        let input = json!({"command": "sleep 300 & echo $! > pid; wait"});
        // The run's stop drops the tool's future, as here once the pid is known.
        let pid = tokio::select! {
            outcome = run(&ws, &input) => panic!("the command ended by itself: {outcome:?}"),
            pid = written_pid(&pid_file) => pid,
        };
        assert!(gone(pid).await, "the grandchild sleep was killed");
    }

    #[tokio::test]
    async fn what_the_command_moved_into_a_session_of_its_own_is_killed_at_its_end() {
        let (dir, ws) = workspace();
        let command = "setsid sh -c 'echo $$ > pid; exec sleep 300' & \
                       while [ ! -s pid ]; do sleep 0.01; done; echo started";
        let outcome = run(&ws, &json!({ "command": command })).await.unwrap();
        assert_eq!(
            outcome,
            ToolOutcome::ok("exit code: 0\n--- stdout\nstarted")
        );
        let pid = written_pid(&dir.path().join("pid")).await;
        assert!(gone(pid).await, "the sleep in its own session was killed");
    }
}
