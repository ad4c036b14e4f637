//! The cost of the sandbox's extra exec: `sh -c true` run plainly, as `run_command` runs a
//! command outside the sandbox, and through `sidechat __sandbox-exec`, which restricts itself
//! with Landlock and then execs the same shell, as `run_command` runs it inside.
//!
//! Run with `cargo bench --bench sandbox_exec` (a release build; figures from a debug build
//! mean nothing, so `--bench` mode refuses one). Without `--bench`, as under
//! `cargo test --benches`, it makes two quick runs of each to check that they work.
//!
//! The two are measured interleaved, after warm-up runs; each is timed from spawn to exit.
//! The report gives each one's median and the difference, the extra cost a sandboxed command
//! pays.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SIDECHAT: &str = env!("CARGO_BIN_EXE_sidechat");

const WARM_UP: usize = 5;
const RUNS: usize = 101;

/// Runs `command` to its end; the time it took. It must succeed.
fn timed(command: &mut Command) -> Duration {
    let started = Instant::now();
    let status = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("the command starts");
    let elapsed = started.elapsed();
    assert!(status.success(), "{command:?} failed: {status}");
    elapsed
}

fn plain() -> Command {
    let mut command = Command::new("sh");
    command.args(["-c", "true"]);
    command
}

fn sandboxed(workspace: &std::path::Path) -> Command {
    let mut command = Command::new(SIDECHAT);
    command
        .arg("__sandbox-exec")
        .arg("--workspace")
        .arg(workspace)
        .args(["--", "sh", "-c", "true"]);
    command
}

fn median(times: &mut [Duration]) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn main() {
    let bench_mode = std::env::args().any(|a| a == "--bench");
    if bench_mode && cfg!(debug_assertions) {
        eprintln!(
            "sandbox_exec: this is a debug build; run `cargo bench --bench sandbox_exec` for figures that mean something"
        );
        std::process::exit(2);
    }
    let (warm_up, runs) = if bench_mode { (WARM_UP, RUNS) } else { (0, 2) };
    let workspace = tempfile::tempdir().expect("a temporary workspace");
    for _ in 0..warm_up {
        timed(&mut plain());
        timed(&mut sandboxed(workspace.path()));
    }
    let (mut plain_times, mut sandboxed_times) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        plain_times.push(timed(&mut plain()));
        sandboxed_times.push(timed(&mut sandboxed(workspace.path())));
    }
    let plain_median = median(&mut plain_times);
    let sandboxed_median = median(&mut sandboxed_times);
    let profile = if cfg!(debug_assertions) {
        "debug build: not a measurement"
    } else {
        "release build"
    };
    println!("sandbox_exec ({profile}, {runs} runs each, medians)");
    println!("  sh -c true                                  {plain_median:>10.2?}");
    println!("  sidechat __sandbox-exec -- sh -c true       {sandboxed_median:>10.2?}");
    println!(
        "  extra cost of the sandbox                   {:>10.2?}",
        sandboxed_median.saturating_sub(plain_median)
    );
}
