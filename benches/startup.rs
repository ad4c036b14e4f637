//! Start-up cost of `sidechat serve`, as an editor sees it when it spawns the daemon.
//!
//! Run with `cargo bench --bench startup` (a release build; figures from a debug build mean
//! nothing, so `--bench` mode refuses one). Without `--bench`, as under
//! `cargo test --benches`, it makes two quick runs of each measurement to check that they work.
//!
//! Measured in the same run, interleaved, after warm-up runs:
//! - `serve`, fresh database: spawn `sidechat serve --db <new file>`, write an `initialize`
//!   request (one JSON object per line), read the reply line; the time from spawn to reply. The
//!   daemon's resident memory (`VmRSS`) is read after the reply, then it is sent `shutdown` and
//!   `exit` and reaped. A new file per run is the first start on a machine: it includes creating
//!   the schema.
//! - `serve`, existing database: the same against one database that earlier runs created,
//!   as on every later start.
//! - `acp`, existing database: spawn `sidechat acp --db <file>`, write an ACP `initialize`
//!   request, read the reply line; then close its stdin and reap it (an ACP agent ends with
//!   its input). The same handshake as `serve`, through the ACP adapter.
//! - `sidechat --version` until it exits: exec, loading and argument parsing, without the
//!   database or the async runtime.
//! - `/bin/true` until it exits: the baseline.
//!
//! The daemon gets an empty environment apart from `PATH` and a temporary `HOME` and XDG
//! folders, so no config file or provider key of the machine changes what it does.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use agent_client_protocol_schema::v1 as acp;
use sidechat::protocol::{Exit, Initialize, Notification, Request, Shutdown};

const SIDECHAT: &str = env!("CARGO_BIN_EXE_sidechat");
const TRIVIAL: &str = "/bin/true";

const WARM_UP: usize = 3;
const RUNS: usize = 31;

const GOAL_MEDIAN: Duration = Duration::from_millis(5);
const GOAL_RATIO: f64 = 3.0;
const GOAL_RSS_MIB: f64 = 30.0;

/// The daemon's `initialize` request, one JSON object on a line.
fn initialize_line() -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"{}","params":{{"clientInfo":{{"name":"startup-bench","version":"1"}},"protocolVersion":1,"capabilities":{{}}}}}}"#,
        Initialize::METHOD
    )
}

/// ACP's `initialize` request.
fn acp_initialize_line() -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"{}","params":{{"protocolVersion":1,"clientCapabilities":{{}},"clientInfo":{{"name":"startup-bench","version":"1"}}}}}}"#,
        acp::AGENT_METHOD_NAMES.initialize
    )
}

fn shutdown_line() -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":2,"method":"{}"}}"#,
        Shutdown::METHOD
    )
}

fn exit_line() -> String {
    format!(r#"{{"jsonrpc":"2.0","method":"{}"}}"#, Exit::METHOD)
}

/// One `serve` run: time from spawn to the `initialize` reply, and VmRSS after it, in KiB.
struct ServeRun {
    elapsed: Duration,
    rss_kib: u64,
}

/// `sidechat` with a clean environment whose home is `home`.
fn sidechat_command(home: &Path) -> Command {
    let mut command = Command::new(SIDECHAT);
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_DATA_HOME", home.join("data"));
    command
}

/// A daemon mode the benchmark starts: its subcommand, its `initialize` request and a piece of
/// the reply that shows the handshake succeeded.
#[derive(Clone, Copy)]
struct Mode {
    subcommand: &'static str,
    initialize: fn() -> String,
    answered: &'static str,
}

const SERVE: Mode = Mode {
    subcommand: "serve",
    initialize: initialize_line,
    answered: r#""result""#,
};

const ACP: Mode = Mode {
    subcommand: "acp",
    initialize: acp_initialize_line,
    answered: r#""agentCapabilities""#,
};

/// Spawns `sidechat <mode> --db <db>` and completes the `initialize` handshake: the time from
/// spawn to the reply, VmRSS after it in KiB, and the live daemon.
fn initialized(
    home: &Path,
    db: &Path,
    mode: Mode,
) -> (ServeRun, Child, ChildStdin, BufReader<ChildStdout>) {
    let initialize = (mode.initialize)();
    let started = Instant::now();
    let mut child = sidechat_command(home)
        .arg(mode.subcommand)
        .arg("--db")
        .arg(db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot spawn `sidechat {}`: {e}", mode.subcommand));
    let mut stdin = child.stdin.take().expect("the child's stdin is piped");
    let mut stdout = BufReader::new(child.stdout.take().expect("the child's stdout is piped"));
    send(&mut stdin, &initialize);
    let reply = read_reply(&mut stdout, &mut child);
    let elapsed = started.elapsed();
    assert!(
        reply.contains(r#""id":1"#) && reply.contains(mode.answered),
        "unexpected reply to the initialize of `sidechat {}`: {reply}",
        mode.subcommand
    );
    let rss_kib = vm_rss_kib(child.id());
    (ServeRun { elapsed, rss_kib }, child, stdin, stdout)
}

/// One `serve` run, ended with `shutdown` and `exit`.
fn serve_once(home: &Path, db: &Path) -> ServeRun {
    let (run, child, stdin, stdout) = initialized(home, db, SERVE);
    stop(child, stdin, stdout);
    run
}

/// One `acp` run, ended by closing its input (an ACP agent ends with its input).
fn acp_once(home: &Path, db: &Path) -> ServeRun {
    let (run, mut child, stdin, _stdout) = initialized(home, db, ACP);
    drop(stdin);
    let status = child.wait().expect("cannot reap the agent");
    assert!(
        status.success(),
        "the agent exited with {status} when its input closed"
    );
    run
}

fn send(stdin: &mut ChildStdin, line: &str) {
    stdin
        .write_all(format!("{line}\n").as_bytes())
        .and_then(|()| stdin.flush())
        .expect("cannot write to the daemon's stdin");
}

fn read_reply(stdout: &mut BufReader<ChildStdout>, child: &mut Child) -> String {
    let mut line = String::new();
    let n = stdout
        .read_line(&mut line)
        .expect("cannot read the daemon's stdout");
    if n == 0 {
        let status = child.wait().expect("cannot reap the daemon");
        panic!("the daemon closed stdout without replying ({status})");
    }
    line
}

/// Sends `shutdown` and `exit`, and checks the daemon exits with 0.
fn stop(mut child: Child, mut stdin: ChildStdin, mut stdout: BufReader<ChildStdout>) {
    send(&mut stdin, &shutdown_line());
    let reply = read_reply(&mut stdout, &mut child);
    assert!(
        reply.contains(r#""id":2"#) && reply.contains(r#""result":null"#),
        "unexpected reply to shutdown: {reply}"
    );
    send(&mut stdin, &exit_line());
    drop(stdin);
    let status = child.wait().expect("cannot reap the daemon");
    assert!(
        status.success(),
        "the daemon exited with {status} after shutdown and exit"
    );
}

/// The resident set of a live process, from `/proc/<pid>/status`.
fn vm_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .expect("cannot read /proc/<pid>/status of the daemon");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().strip_suffix("kB"))
        .and_then(|kib| kib.trim().parse().ok())
        .expect("no VmRSS line in /proc/<pid>/status")
}

/// Spawns `command` with no input or output and waits for it to exit successfully.
fn run_to_exit(mut command: Command) -> Duration {
    let started = Instant::now();
    let status = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("cannot spawn the process");
    let elapsed = started.elapsed();
    assert!(status.success(), "{command:?} exited with {status}");
    elapsed
}

fn version_once(home: &Path) -> Duration {
    let mut command = sidechat_command(home);
    command.arg("--version");
    run_to_exit(command)
}

fn trivial_once() -> Duration {
    run_to_exit(Command::new(TRIVIAL))
}

/// Nearest-rank percentile of sorted values.
fn percentile<T: Copy>(sorted: &[T], p: f64) -> T {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn median<T: Copy>(sorted: &[T]) -> T {
    percentile(sorted, 50.0)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "MISSED" }
}

fn main() {
    let bench_mode = std::env::args().any(|a| a == "--bench");
    if bench_mode && cfg!(debug_assertions) {
        eprintln!(
            "startup: this is a debug build; run `cargo bench --bench startup` for figures that mean something"
        );
        std::process::exit(2);
    }
    let (warm_up, runs) = if bench_mode { (WARM_UP, RUNS) } else { (0, 2) };

    let temp = tempfile::tempdir().expect("cannot create a temporary folder");
    let home = temp.path();
    let dbs = home.join("dbs");
    std::fs::create_dir(&dbs).expect("cannot create the folder for the databases");
    let mut next_db = 0usize;
    let mut fresh_db = || {
        next_db += 1;
        dbs.join(format!("run-{next_db}.db"))
    };
    let existing_db = dbs.join("existing.db");
    serve_once(home, &existing_db);

    for _ in 0..warm_up {
        serve_once(home, &fresh_db());
        serve_once(home, &existing_db);
        acp_once(home, &existing_db);
        version_once(home);
        trivial_once();
    }
    let mut fresh = Vec::with_capacity(runs);
    let mut rss = Vec::with_capacity(runs);
    let mut existing = Vec::with_capacity(runs);
    let mut acp = Vec::with_capacity(runs);
    let mut acp_rss = Vec::with_capacity(runs);
    let mut version = Vec::with_capacity(runs);
    let mut trivial = Vec::with_capacity(runs);
    for _ in 0..runs {
        let run = serve_once(home, &fresh_db());
        fresh.push(run.elapsed);
        rss.push(run.rss_kib);
        existing.push(serve_once(home, &existing_db).elapsed);
        let run = acp_once(home, &existing_db);
        acp.push(run.elapsed);
        acp_rss.push(run.rss_kib);
        version.push(version_once(home));
        trivial.push(trivial_once());
    }
    for values in [
        &mut fresh,
        &mut existing,
        &mut acp,
        &mut version,
        &mut trivial,
    ] {
        values.sort();
    }
    rss.sort();
    acp_rss.sort();

    let profile = if cfg!(debug_assertions) {
        "debug build"
    } else {
        "release build"
    };
    println!(
        "sidechat start-up: {runs} runs each after {warm_up} warm-up runs, interleaved ({profile})"
    );
    println!("binary: {SIDECHAT}");
    println!();
    println!(
        "{:<46} {:>9} {:>9} {:>9} {:>9}",
        "spawn -> ...", "median", "p90", "min", "max"
    );
    let row = |name: &str, sorted: &[Duration]| {
        println!(
            "{name:<46} {:>6.2} ms {:>6.2} ms {:>6.2} ms {:>6.2} ms",
            ms(median(sorted)),
            ms(percentile(sorted, 90.0)),
            ms(sorted[0]),
            ms(sorted[sorted.len() - 1]),
        );
    };
    row("serve, fresh database: initialize reply", &fresh);
    row("serve, existing database: initialize reply", &existing);
    row("acp, existing database: initialize reply", &acp);
    row("sidechat --version: exit", &version);
    row("/bin/true: exit (baseline)", &trivial);
    println!(
        "{:<46} {:>5.1} MiB {:>5.1} MiB {:>5.1} MiB {:>5.1} MiB",
        "serve, fresh database: VmRSS after initialize",
        mib(median(&rss)),
        mib(percentile(&rss, 90.0)),
        mib(rss[0]),
        mib(rss[rss.len() - 1]),
    );
    println!(
        "{:<46} {:>5.1} MiB {:>5.1} MiB {:>5.1} MiB {:>5.1} MiB",
        "acp, existing database: VmRSS after initialize",
        mib(median(&acp_rss)),
        mib(percentile(&acp_rss, 90.0)),
        mib(acp_rss[0]),
        mib(acp_rss[acp_rss.len() - 1]),
    );
    let ratio = ms(median(&fresh)) / ms(median(&trivial));
    let ratio_existing = ms(median(&existing)) / ms(median(&trivial));
    println!();
    println!(
        "ratio of medians to the baseline: fresh database {ratio:.1}x, existing database {ratio_existing:.1}x"
    );
    if !bench_mode {
        return;
    }
    println!();
    println!(
        "goal: median <= {} ms (fresh database): {}",
        GOAL_MEDIAN.as_millis(),
        verdict(median(&fresh) <= GOAL_MEDIAN)
    );
    println!(
        "goal: median <= {GOAL_RATIO}x baseline (fresh database): {}",
        verdict(ratio <= GOAL_RATIO)
    );
    println!(
        "goal: VmRSS <= {GOAL_RSS_MIB} MiB: {}",
        verdict(mib(median(&rss)) <= GOAL_RSS_MIB)
    );
}
