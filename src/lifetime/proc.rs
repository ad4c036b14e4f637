//! What `/proc` says about processes: each one's parent, process group, state and start time,
//! and whether its environment holds a given entry. Everything here is a snapshot: a process
//! may end (and its id be reused) right after it was read, which is why a process is named by
//! its id *and* its start time wherever that matters.

use std::path::Path;

/// One process as `/proc/PID/stat` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub pid: i32,
    pub ppid: i32,
    /// Its process group.
    pub pgid: i32,
    /// Ended, waiting for its parent to reap it (or being reaped): nothing left to kill.
    pub zombie: bool,
    /// When it started, in clock ticks after boot (field 22): with the pid, a name no other
    /// process of this boot has.
    pub start: u64,
}

/// The process `pid`, if it exists.
pub fn stat(pid: i32) -> Option<Stat> {
    parse(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// This process's start time.
pub fn own_start() -> Option<u64> {
    parse(&std::fs::read_to_string("/proc/self/stat").ok()?).map(|s| s.start)
}

/// Every process that can be read now (none where there is no `/proc`).
pub fn all() -> Vec<Stat> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(stat)
        .collect()
}

/// Whether the environment process `pid` started with holds `entry` (`NAME=value`) exactly.
/// False for a process whose environment cannot be read (another user's, or a zombie's).
pub fn has_env_entry(pid: i32, entry: &str) -> bool {
    environ_has(
        &Path::new("/proc").join(pid.to_string()).join("environ"),
        entry,
    )
}

fn environ_has(path: &Path, entry: &str) -> bool {
    std::fs::read(path).is_ok_and(|environ| {
        environ
            .split(|b| *b == 0)
            .any(|item| item == entry.as_bytes())
    })
}

/// `pid (name) state ppid pgrp session … starttime …`: the name may hold spaces and
/// parentheses, so the fields are read after the last `)`.
fn parse(text: &str) -> Option<Stat> {
    let (head, rest) = text.rsplit_once(')')?;
    let pid = head.split_once('(')?.0.trim().parse().ok()?;
    let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
    // `rest` starts at field 3 (the state): field n is `fields[n - 3]`.
    let field = |n: usize| fields.get(n - 3).copied();
    Some(Stat {
        pid,
        zombie: matches!(field(3)?, "Z" | "X" | "x"),
        ppid: field(4)?.parse().ok()?,
        pgid: field(5)?.parse().ok()?,
        start: field(22)?.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn a_name_with_spaces_and_parentheses_is_skipped() {
        let text =
            "4242 (a (b) c) S 17 4242 4242 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(
            parse(text),
            Some(Stat {
                pid: 4242,
                ppid: 17,
                pgid: 4242,
                zombie: false,
                start: 987654,
            })
        );
        assert_eq!(
            parse("12 (z) Z 1 12 12 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5").map(|s| s.zombie),
            Some(true)
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn reads_this_process_and_its_environment() {
        let me = std::process::id() as i32;
        let own = stat(me).unwrap();
        assert_eq!(
            (own.pid, own.zombie, Some(own.start)),
            (me, false, own_start())
        );
        assert!(all().iter().any(|s| s.pid == me));
        let dir = tempfile::tempdir().unwrap();
        let environ = dir.path().join("environ");
        std::fs::write(&environ, b"A=1\0SIDECHAT_COMMAND=cmd_1\0B=2\0").unwrap();
        assert_eq!(
            [
                environ_has(&environ, "SIDECHAT_COMMAND=cmd_1"),
                environ_has(&environ, "SIDECHAT_COMMAND=cmd_"),
                environ_has(&dir.path().join("missing"), "A=1"),
            ],
            [true, false, false]
        );
    }
}
