//! Finding and killing what a command started.
//!
//! A command's processes are found three ways, and whatever descends from one found (by
//! parent links in `/proc`) is found with it:
//! - its process group, led by its shell (what a pipeline or `cmd &` starts stays in it);
//! - its tag: the shell runs with [`COMMAND_VAR`] set to a name no other command has, which
//!   everything it starts inherits, even through a double fork or `setsid` (a process that
//!   replaces its whole environment loses it);
//! - while this daemon runs it is the subreaper of what it starts ([`super::reaper`]), so a
//!   process that left the group and lost its parent is one of the daemon's children, and the
//!   tag says which command it came from.
//!
//! Each process is killed through a pidfd opened before its start time is checked again, so a
//! process id reused since `/proc` was read is never hit. Killing repeats until a look finds
//! nothing, since a process may fork while the others are being killed.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use super::proc::{self, Stat};

/// The environment variable that tags every process of a command with the command's name.
pub const COMMAND_VAR: &str = "SIDECHAT_COMMAND";

/// Most looks for what is left, a short pause apart: enough for processes forking while
/// they are killed; one in uninterruptible sleep dies of its pending `SIGKILL` later.
const ROUNDS: usize = 50;
const PAUSE: Duration = Duration::from_millis(10);

/// One command's processes: its tag, and its shell, which leads its process group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tracked {
    /// The value of [`COMMAND_VAR`] in the command's environment.
    pub tag: String,
    /// The shell's pid, which is also the id of its process group.
    pub pgid: i32,
    /// The shell's start time (see [`Stat::start`]).
    pub start: u64,
}

impl Tracked {
    /// The command whose shell is `pid`, started with `tag`. A shell whose start time cannot
    /// be read (no `/proc`) gets 0, which no shell started after boot has.
    pub fn new(tag: String, pid: i32) -> Self {
        let start = proc::stat(pid).map_or(0, |s| s.start);
        Self {
            tag,
            pgid: pid,
            start,
        }
    }

    fn env_entry(&self) -> String {
        format!("{COMMAND_VAR}={}", self.tag)
    }

    fn is_leader(&self, stat: &Stat) -> bool {
        stat.pid == self.pgid && stat.start == self.start
    }
}

/// Kills what remains of a command of this daemon: at its end (whatever its shell left
/// running), on its timeout, or when its run is stopped.
pub fn end_command(command: &Tracked) {
    if command.pgid <= 1 {
        return;
    }
    if let Some(group) = rustix::process::Pid::from_raw(command.pgid) {
        // Fails only when no process of the group is left. The group's id cannot name anyone
        // else while a process of it lives.
        let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
    }
    let entry = command.env_entry();
    let me = std::process::id() as i32;
    let adopting = super::reaper::is_subreaper();
    kill_until_none(|all| {
        all.iter()
            .filter(|s| {
                s.pgid == command.pgid
                    || command.is_leader(s)
                    // Orphans are this daemon's children; without a subreaper they went to
                    // init, and every process has to be looked at.
                    || ((!adopting || s.ppid == me) && proc::has_env_entry(s.pid, &entry))
            })
            .map(|s| s.pid)
            .collect()
    });
}

/// Kills what remains of a command whose daemon is gone: the processes carrying its tag, and
/// its process group while the shell that leads it is still the one recorded (same pid and
/// start time; a process that merely reuses the pid is left alone).
pub fn end_left(command: &Tracked) {
    if command.pgid <= 1 {
        return;
    }
    let entry = command.env_entry();
    kill_until_none(|all| {
        let group_is_ours = all.iter().any(|s| command.is_leader(s));
        all.iter()
            .filter(|s| {
                (group_is_ours && s.pgid == command.pgid) || proc::has_env_entry(s.pid, &entry)
            })
            .map(|s| s.pid)
            .collect()
    });
}

/// Kills every descendant of this process, as the daemon exits: as a subreaper it is the
/// ancestor of everything its commands and servers started, whatever they did to leave. A
/// daemon that started no process has none, and does not read every process's `/proc` entry
/// to find that out (a `sidechat sessions list` ends this way).
pub fn end_descendants() {
    if !super::reaper::has_spawned() {
        return;
    }
    let me = std::process::id() as i32;
    kill_until_none(|all| all.iter().filter(|s| s.ppid == me).map(|s| s.pid).collect());
}

/// Kills the processes `seeds` picks from a look at every process, and their descendants,
/// until a look finds none alive. Never this process or one of its ancestors.
fn kill_until_none(seeds: impl Fn(&[Stat]) -> Vec<i32>) {
    for _ in 0..ROUNDS {
        let all = proc::all();
        let found = with_descendants(&all, seeds(&all));
        if found.is_empty() {
            return;
        }
        for process in &found {
            kill(process);
        }
        std::thread::sleep(PAUSE);
    }
    tracing::warn!("processes of a command were still alive after being killed");
}

/// The live processes among `seeds` and everything below them in `all`, except this process,
/// what is below it, and its ancestors (whose other descendants are still found).
fn with_descendants(all: &[Stat], seeds: Vec<i32>) -> Vec<Stat> {
    let me = std::process::id() as i32;
    let by_pid: HashMap<i32, &Stat> = all.iter().map(|s| (s.pid, s)).collect();
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for s in all {
        children.entry(s.ppid).or_default().push(s.pid);
    }
    let mut ancestors = HashSet::new();
    let mut next = by_pid.get(&me).map(|s| s.ppid);
    while let Some(pid) = next.filter(|p| *p > 0 && ancestors.insert(*p)) {
        next = by_pid.get(&pid).map(|s| s.ppid);
    }
    let mut seen = HashSet::new();
    let mut queue = seeds;
    while let Some(pid) = queue.pop() {
        if pid == me || !seen.insert(pid) {
            continue;
        }
        queue.extend(children.get(&pid).into_iter().flatten());
    }
    let mut found: Vec<Stat> = seen
        .into_iter()
        .filter(|pid| !ancestors.contains(pid))
        .filter_map(|pid| by_pid.get(&pid).copied().copied())
        .filter(|s| !s.zombie)
        .collect();
    found.sort_by_key(|s| s.pid);
    found
}

/// Sends `SIGKILL` to `process` if it is still the one that was read: through a pidfd, which
/// keeps naming that process even if it ends, its start time checked once the pidfd is open.
fn kill(process: &Stat) {
    let Some(pid) = rustix::process::Pid::from_raw(process.pid) else {
        return;
    };
    let same = || proc::stat(process.pid).is_some_and(|now| now.start == process.start);
    #[cfg(target_os = "linux")]
    match rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()) {
        Ok(pidfd) => {
            if same() {
                let _ = rustix::process::pidfd_send_signal(&pidfd, rustix::process::Signal::KILL);
            }
            return;
        }
        // Kernels before 5.3: checked just before, as near as can be.
        Err(rustix::io::Errno::NOSYS) => {}
        // Gone already.
        Err(_) => return,
    }
    if same() {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn stat(pid: i32, ppid: i32) -> Stat {
        Stat {
            pid,
            ppid,
            pgid: pid,
            zombie: false,
            start: 1,
        }
    }

    #[test]
    fn descendants_are_found_and_this_process_and_its_ancestors_spared() {
        let me = std::process::id() as i32;
        let (parent, sibling) = (me + 100_000, me + 100_001);
        let all = [
            stat(parent, 1),
            stat(me, parent),
            stat(sibling, parent),
            stat(10, me),
            stat(11, 10),
            Stat {
                zombie: true,
                ..stat(12, 10)
            },
            stat(13, 1),
        ];
        let pids = |found: Vec<Stat>| found.iter().map(|s| s.pid).collect::<Vec<_>>();
        assert_eq!(pids(with_descendants(&all, vec![10])), [10, 11]);
        // The daemon inside a command it is asked to end: it, its parent and what it started
        // are spared; the rest of the command is not.
        assert_eq!(pids(with_descendants(&all, vec![parent])), [sibling]);
    }
}
