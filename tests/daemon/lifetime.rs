//! Nothing a command started outlives its stop or the daemon: a command that starts `sleep`s
//! every way a shell can (in the foreground, with `&`, double-forked, and in a session of its
//! own with `setsid`) leaves none of them after a stop, a `SIGTERM` or `SIGHUP` of the daemon,
//! or (once the next daemon on the database has started) a `SIGKILL`. Each `sleep` is found by
//! its argument, a number no other test uses.

use std::time::Duration;

use pretty_assertions::assert_eq;
use rustix::process::{Pid, Signal};
use serde_json::json;
use sidechat::protocol::{ApprovalDecision, ApprovalRespond, ChatStop, Event};

use crate::harness::{Daemon, Options, Scratch, answer, sid};

/// A guard against a hung test, not a performance assertion.
const HANG_GUARD: Duration = Duration::from_secs(60);

/// The arguments of the `sleep`s of one command: long enough never to end by themselves, and
/// unique to the test.
struct Markers([String; 4]);

impl Markers {
    fn new() -> Self {
        let nonce: u32 = rand::random();
        Self(std::array::from_fn(|n| format!("{}.{nonce}", 7000 + n)))
    }

    /// Foreground, `&`, double fork, `setsid`.
    fn command(&self) -> String {
        let [plain, background, forked, session] = &self.0;
        format!("sleep {background} & (sleep {forked} &); setsid sleep {session} & sleep {plain}")
    }

    /// How many of the `sleep`s are running (a zombie has no arguments left to show).
    fn running(&self) -> usize {
        let mut found = 0;
        for pid in all_pids() {
            let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                continue;
            };
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            if args.first().is_some_and(|a| a.ends_with(b"sleep"))
                && args
                    .get(1)
                    .is_some_and(|a| self.0.iter().any(|m| m.as_bytes() == *a))
            {
                found += 1;
            }
        }
        found
    }
}

fn all_pids() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// The `/proc/PID/stat` fields after the name, from the state (field 3) on.
fn stat_fields(pid: i32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().map(String::from).collect())
}

/// The zombie children of `parent`: ended, and never reaped.
fn zombie_children(parent: i32) -> usize {
    all_pids()
        .into_iter()
        .filter_map(stat_fields)
        .filter(|f| f[1] == parent.to_string() && f[0] == "Z")
        .count()
}

/// Waits (up to the hang guard) until `condition` holds; false if it never does.
async fn until(mut condition: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + HANG_GUARD;
    while tokio::time::Instant::now() < deadline {
        if condition() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// A daemon running the markers' command (allowed), once all four `sleep`s run; the session.
async fn running_command(scratch: &Scratch, markers: &Markers) -> (Daemon, String) {
    let script = json!({"turns": [
        // Outside the sandbox, so that it asks (and runs as a plain shell).
        {"toolCalls": [{"name": "run_command", "input": {"command": markers.command(), "sandbox": false}}]},
        {"text": "Done."},
    ]});
    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(scratch.replay(script))).await;
    let session = daemon.create_session(scratch.replay_session()).await;
    daemon.send(&session, "run it").await;
    let (_, approval) = daemon.until_approval().await;
    daemon
        .call::<ApprovalRespond>(answer(&approval, ApprovalDecision::Allow))
        .await;
    assert!(
        until(|| markers.running() == 4).await,
        "the command started its four sleeps ({} seen)",
        markers.running()
    );
    (daemon, session)
}

fn daemon_pid(daemon: &mut Daemon) -> Pid {
    let id = daemon.process().id().expect("the daemon runs");
    Pid::from_raw(id as i32).unwrap()
}

/// Sends `signal` to the daemon; its exit code once it has exited.
async fn signalled(mut daemon: Daemon, signal: Signal) -> Option<i32> {
    rustix::process::kill_process(daemon_pid(&mut daemon), signal).unwrap();
    let status = tokio::time::timeout(HANG_GUARD, daemon.process().wait())
        .await
        .expect("the daemon exited")
        .unwrap();
    status.code()
}

async fn a_signal_ends_the_daemon_and_every_process_of_its_command(signal: Signal) {
    let scratch = Scratch::new();
    let markers = Markers::new();
    let (daemon, _) = running_command(&scratch, &markers).await;
    // As when its input ends without `exit`.
    assert_eq!(signalled(daemon, signal).await, Some(1));
    assert!(
        until(|| markers.running() == 0).await,
        "{} sleeps outlived the daemon",
        markers.running()
    );
}

#[tokio::test]
async fn sigterm_ends_the_daemon_and_every_process_of_its_command() {
    a_signal_ends_the_daemon_and_every_process_of_its_command(Signal::TERM).await;
}

#[tokio::test]
async fn sighup_ends_the_daemon_and_every_process_of_its_command() {
    a_signal_ends_the_daemon_and_every_process_of_its_command(Signal::HUP).await;
}

#[tokio::test]
async fn stop_kills_every_process_of_the_command_and_the_daemon_reaps_them() {
    let scratch = Scratch::new();
    let markers = Markers::new();
    let (mut daemon, session) = running_command(&scratch, &markers).await;
    let pid = daemon_pid(&mut daemon).as_raw_nonzero().get();
    daemon.call::<ChatStop>(sid(&session)).await;
    daemon
        .events_until(|e| matches!(e, Event::RunFinished { .. }))
        .await;
    assert!(
        until(|| markers.running() == 0).await,
        "{} sleeps outlived the stop",
        markers.running()
    );
    // The sleeps the daemon adopted as their parents ended are reaped, not left as zombies.
    assert!(
        until(|| zombie_children(pid) == 0).await,
        "{} zombie children",
        zombie_children(pid)
    );
    assert_eq!(daemon.close().await, 0);
}

#[tokio::test]
async fn the_next_daemon_kills_what_a_killed_daemons_command_left() {
    let scratch = Scratch::new();
    let markers = Markers::new();
    let (daemon, _) = running_command(&scratch, &markers).await;
    assert_eq!(signalled(daemon, Signal::KILL).await, None);
    assert_eq!(markers.running(), 4, "a killed daemon can end nothing");
    let daemon = Daemon::start(&scratch.db(), Options::default()).await;
    assert!(
        until(|| markers.running() == 0).await,
        "{} sleeps outlived the restart",
        markers.running()
    );
    assert_eq!(daemon.close().await, 0);
}

/// A `sleep` of the test's own, in a process group of its own (as a command's shell is), and
/// its start time.
fn own_sleep() -> (std::process::Child, i64) {
    use std::os::unix::process::CommandExt;
    let child = std::process::Command::new("sleep")
        .arg("600")
        .process_group(0)
        .spawn()
        .unwrap();
    let start = stat_fields(child.id() as i32).unwrap()[19].parse().unwrap();
    (child, start)
}

#[tokio::test]
async fn a_recorded_command_whose_pid_was_reused_is_left_alone() {
    let scratch = Scratch::new();
    Daemon::start(&scratch.db(), Options::default())
        .await
        .close()
        .await;
    // Two commands of a daemon that is gone: one whose shell still runs, and one whose pid
    // (and process group) another process has since been given, as its start time shows.
    let (mut left, left_start) = own_sleep();
    let (mut reused, reused_start) = own_sleep();
    let db = rusqlite::Connection::open(scratch.db()).unwrap();
    for (tag, child, start) in [
        ("cmd_left", &left, left_start),
        ("cmd_reused", &reused, reused_start + 1),
    ] {
        db.execute(
            "INSERT INTO command_processes
             (tag, owner, owner_pid, owner_start, host, pgid, start, started_at)
             VALUES (?1, 'pid1-gone', 2147483647, NULL, ?2, ?3, ?4, 0)",
            rusqlite::params![tag, sidechat::store::host_identity(), child.id(), start],
        )
        .unwrap();
    }
    let count = || -> i64 {
        db.query_row("SELECT count(*) FROM command_processes", [], |r| r.get(0))
            .unwrap()
    };

    let daemon = Daemon::start(&scratch.db(), Options::default()).await;
    assert!(until(|| count() == 0).await, "the records were handled");
    let ended = tokio::time::timeout(HANG_GUARD, async {
        loop {
            if let Some(status) = left.try_wait().unwrap() {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the left shell was killed");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        (ended.signal(), reused.try_wait().unwrap()),
        (Some(9), None),
        "the command's own process was killed, the one with its pid was not"
    );
    reused.kill().unwrap();
    reused.wait().unwrap();
    assert_eq!(daemon.close().await, 0);
}
