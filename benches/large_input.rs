//! Large input through `sidechat serve`, as an editor sends it.
//!
//! Run with `cargo bench --bench large_input` (a release build; `--bench` mode refuses a debug
//! one). Without `--bench`, as under `cargo test --benches`, it runs once at a tenth of the
//! sizes to check that it works.
//!
//! - One newline-framed `chat/send` line of 10, 20 and 40 MiB (over the 8 MiB message limit,
//!   so each is read, parsed and refused with -32602), 3 rounds interleaved: the daemon's CPU
//!   time (the run time of each of its threads, from `/proc/<pid>/task/*/schedstat`, in
//!   nanoseconds) and the wall time from the first byte written to the refusal read. Reading a
//!   line is linear when the 40 MiB line costs at most 4.5× the 10 MiB one.
//! - Peak memory of a message at the size limit: a fresh daemon is sent one `chat/send` of
//!   exactly 8 MiB of text, which is stored, counted, announced and answered by the demo
//!   model; its peak resident set (`VmHWM`) is read once the run has finished. It is compared
//!   with the same figure at the start, and after a first small message, which builds what
//!   every daemon builds once whatever its messages weigh (the tokenizer's tables, the
//!   store's statements).
//!
//! The daemon gets an empty environment apart from `PATH` and a temporary `HOME`.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use sidechat::protocol::{
    ChatSend, Exit, Initialize, Notification, Request, SessionCreate, Shutdown,
};

const SIDECHAT: &str = env!("CARGO_BIN_EXE_sidechat");
const MIB: usize = 1024 * 1024;
const ROUNDS: usize = 3;

struct Daemon {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Daemon {
    fn start(home: &Path) -> Self {
        let mut child = Command::new(SIDECHAT)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", home)
            .env("XDG_CONFIG_HOME", home.join("config"))
            .env("XDG_DATA_HOME", home.join("data"))
            .env("SIDECHAT_DEMO_DELAY_MS", "0")
            .env("SIDECHAT_LOG", "warn")
            .arg("serve")
            .arg("--db")
            .arg(home.join("bench.db"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("cannot spawn `sidechat serve`");
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut daemon = Self {
            child,
            stdin,
            stdout,
        };
        daemon.send(&format!(
            r#"{{"jsonrpc":"2.0","id":"init","method":"{}","params":{{}}}}"#,
            Initialize::METHOD
        ));
        daemon.answer("\"init\"");
        daemon
    }

    fn send(&mut self, line: &str) {
        self.stdin
            .write_all(line.as_bytes())
            .and_then(|()| self.stdin.write_all(b"\n"))
            .and_then(|()| self.stdin.flush())
            .expect("cannot write to the daemon");
    }

    /// Lines until the answer to `id` (its JSON text); that answer.
    fn answer(&mut self, id: &str) -> String {
        let marker = format!(r#""id":{id}"#);
        self.line_with(&marker, r#""method""#)
    }

    /// The next line holding `marker` and not `unless`.
    fn line_with(&mut self, marker: &str, unless: &str) -> String {
        loop {
            let mut line = String::new();
            let n = self.stdout.read_line(&mut line).expect("cannot read");
            assert!(n > 0, "the daemon closed its output");
            if line.contains(marker) && !line.contains(unless) {
                return line;
            }
        }
    }

    fn session(&mut self) -> String {
        self.send(&format!(
            r#"{{"jsonrpc":"2.0","id":"s","method":"{}","params":{{}}}}"#,
            SessionCreate::METHOD
        ));
        let answer = self.answer("\"s\"");
        let value: serde_json::Value = serde_json::from_str(&answer).expect("JSON");
        value["result"]["id"]
            .as_str()
            .expect("a session id")
            .to_string()
    }

    /// The CPU time each live thread has run so far, in nanoseconds, by thread id. (The
    /// process's own figure in `/proc/<pid>/stat` counts in ticks of 10 ms, as coarse as a
    /// 10 MiB line's whole cost.)
    fn cpu(&self) -> std::collections::HashMap<String, u64> {
        let tasks = std::fs::read_dir(format!("/proc/{}/task", self.child.id()))
            .expect("cannot list /proc/<pid>/task");
        tasks
            .filter_map(|task| {
                let task = task.ok()?;
                let stat = std::fs::read_to_string(task.path().join("schedstat")).ok()?;
                let ran = stat.split(' ').next()?.parse().ok()?;
                Some((task.file_name().to_string_lossy().into_owned(), ran))
            })
            .collect()
    }

    /// A `/proc/<pid>/status` figure in KiB.
    fn status_kib(&self, name: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("cannot read /proc/<pid>/status");
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.trim().strip_suffix("kB"))
            .and_then(|kib| kib.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in /proc/<pid>/status"))
    }

    fn stop(mut self) {
        self.send(&format!(
            r#"{{"jsonrpc":"2.0","id":"bye","method":"{}"}}"#,
            Shutdown::METHOD
        ));
        self.answer("\"bye\"");
        self.send(&format!(
            r#"{{"jsonrpc":"2.0","method":"{}"}}"#,
            Exit::METHOD
        ));
        let status = self.child.wait().expect("cannot reap the daemon");
        assert!(status.success(), "the daemon exited with {status}");
    }
}

/// A `chat/send` line whose text is `size` bytes of words.
fn send_line(id: usize, session: &str, size: usize) -> String {
    let words = "lorem ipsum dolor sit amet ".repeat(size / 27 + 1);
    let text = &words[..size];
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{{"sessionId":"{session}","text":"{text}"}}}}"#,
        method = ChatSend::METHOD
    )
}

/// The CPU time the daemon's threads ran between two readings. A thread that ended meanwhile
/// loses only what it ran since `before`; one that started counts whole.
fn cpu_between(
    before: &std::collections::HashMap<String, u64>,
    after: &std::collections::HashMap<String, u64>,
) -> Duration {
    let ran = after
        .iter()
        .map(|(task, ran)| ran.saturating_sub(before.get(task).copied().unwrap_or(0)))
        .sum();
    Duration::from_nanos(ran)
}

/// One oversized line: the daemon's CPU time and the wall time until it is refused.
fn refuse_once(daemon: &mut Daemon, session: &str, id: usize, size: usize) -> (Duration, Duration) {
    let line = send_line(id, session, size);
    let cpu = daemon.cpu();
    let started = Instant::now();
    daemon.send(&line);
    let answer = daemon.answer(&id.to_string());
    let wall = started.elapsed();
    assert!(
        answer.contains("-32602") && answer.contains("8388608"),
        "not refused for its size: {}",
        &answer[..answer.len().min(300)]
    );
    (cpu_between(&cpu, &daemon.cpu()), wall)
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort_unstable();
    values[values.len() / 2]
}

fn main() {
    let bench_mode = std::env::args().any(|a| a == "--bench");
    if bench_mode && cfg!(debug_assertions) {
        eprintln!("large_input: this is a debug build; run `cargo bench --bench large_input`");
        std::process::exit(2);
    }
    let scale = if bench_mode { 1 } else { 10 };
    let limit = sidechat::runtime::MAX_MESSAGE_BYTES;

    let temp = tempfile::tempdir().expect("a temporary folder");
    let mut daemon = Daemon::start(temp.path());
    let session = daemon.session();
    let sizes = [10 * MIB, 20 * MIB, 40 * MIB].map(|s| (s / scale).max(limit + 1));
    let mut id = 0;
    let mut cpu = vec![Vec::new(); sizes.len()];
    let mut wall = vec![Vec::new(); sizes.len()];
    // A warm-up round, then the measured ones.
    for round in 0..=ROUNDS {
        for (i, size) in sizes.iter().enumerate() {
            id += 1;
            let (c, w) = refuse_once(&mut daemon, &session, id, *size);
            if round > 0 {
                cpu[i].push(c);
                wall[i].push(w);
            }
        }
    }
    daemon.stop();
    println!("one newline-framed chat/send line, read and refused (median of {ROUNDS}):");
    let cpu: Vec<Duration> = cpu.into_iter().map(median).collect();
    for (i, size) in sizes.iter().enumerate() {
        println!(
            "  {:>5.1} MiB: daemon CPU {:>7.1} ms, wall {:>7.1} ms",
            *size as f64 / MIB as f64,
            cpu[i].as_secs_f64() * 1e3,
            median(wall[i].clone()).as_secs_f64() * 1e3,
        );
    }
    println!(
        "  CPU of the largest over the smallest: {:.2}× (linear: ≤ 4.5×)",
        cpu[2].as_secs_f64() / cpu[0].as_secs_f64().max(1e-3)
    );

    let temp = tempfile::tempdir().expect("a temporary folder");
    let mut daemon = Daemon::start(temp.path());
    let session = daemon.session();
    let size = limit / scale;
    let start = daemon.status_kib("VmHWM:");
    // A first small message builds what every daemon builds once. Its run may finish before
    // its answer is read: only the run's end is waited for (the answer is skipped later).
    daemon.send(&send_line(1, &session, 100));
    daemon.line_with(r#""kind":"runFinished""#, "\u{0}");
    let before = daemon.status_kib("VmHWM:");
    daemon.send(&send_line(2, &session, size));
    let answer = daemon.answer("2");
    assert!(answer.contains("\"result\""), "not accepted: {answer}");
    daemon.line_with(r#""kind":"runFinished""#, "\u{0}");
    let peak = daemon.status_kib("VmHWM:");
    daemon.stop();
    let mib = |kib: u64| kib as f64 / 1024.0;
    let times = |kib: u64| kib as f64 * 1024.0 / size as f64;
    println!(
        "a message of {:.1} MiB ({} bytes of text), sent, stored and answered:",
        size as f64 / MIB as f64,
        size
    );
    println!(
        "  peak resident memory {:.1} MiB: {:.1} MiB over the {:.1} MiB at the start ({:.1}× the message)",
        mib(peak),
        mib(peak - start),
        mib(start),
        times(peak - start)
    );
    println!(
        "  {:.1} MiB over the {:.1} MiB after a first small message ({:.1}× the message)",
        mib(peak.saturating_sub(before)),
        mib(before),
        times(peak.saturating_sub(before))
    );
}
