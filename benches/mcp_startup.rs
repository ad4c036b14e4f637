//! MCP servers must not slow an editor down: `initialize`, and the first `chat/send` until the
//! provider receives the request, with five configured MCP servers (one of which never
//! answers `initialize`) beside the same with none, measured in one run, interleaved.
//!
//! Run with `cargo bench --bench mcp_startup` (a release build). Without `--bench`, as under
//! `cargo test --benches`, it makes one quick run of each to check that they work.
//!
//! Each run spawns `sidechat serve` on a database of its variant (created by a warm-up run,
//! as on every later start), with a fake OpenAI-compatible upstream on 127.0.0.1. It measures
//! spawn → `initialize` reply, then sends `session/create` and `chat/send` and measures
//! `chat/send` written → the upstream has the request. The servers are the tests' fixture
//! (`examples/mcp_fixture.rs`): four answer, one hangs (its start-up timeout is 600 s).
//! Goal: the medians with servers ≤ 1.2 × the medians without.

#[path = "../tests/support/mcp_fixture.rs"]
mod mcp_fixture;
#[path = "support/stdio.rs"]
mod stdio;
#[path = "../tests/support/upstream.rs"]
mod upstream;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::json;
use sidechat::protocol::{ChatSend, Initialize, Initialized, Notification, Request, SessionCreate};

const SIDECHAT: &str = env!("CARGO_BIN_EXE_sidechat");
const WARM_UP: usize = 2;
const RUNS: usize = 15;
const GOAL_RATIO: f64 = 1.2;

/// A home folder whose config file configures `servers` (none, or five).
fn home(dir: &Path, name: &str, with_servers: bool) -> PathBuf {
    let home = dir.join(name);
    let config = home.join("config/sidechat/config.toml");
    std::fs::create_dir_all(config.parent().expect("a folder")).expect("create the config folder");
    let mut toml = String::new();
    if with_servers {
        let fixture = mcp_fixture::mcp_fixture(Path::new(SIDECHAT));
        for (index, mode) in ["normal", "normal", "normal", "normal", "hang"]
            .iter()
            .enumerate()
        {
            let state = home.join(format!("server{index}"));
            std::fs::create_dir_all(&state).expect("a state folder");
            toml.push_str(&format!(
                "[mcp_servers.s{index}]\ncommand = {:?}\nargs = [\"--state\", {:?}, \"--mode\", {mode:?}]\nstartup_timeout_secs = 600\n",
                fixture.display().to_string(),
                state.display().to_string(),
            ));
        }
    }
    std::fs::write(&config, toml).expect("write the config");
    home
}

/// One run: (spawn → initialize reply, chat/send → upstream request).
fn run_once(home: &Path) -> (Duration, Duration) {
    let fake = upstream::start(vec![upstream::Reply::sse(&upstream::openai::text(
        &["hi"],
        10,
        1,
    ))]);
    let started = Instant::now();
    let mut daemon = stdio::Process::spawn(stdio::serve_command(
        home,
        &home.join("sidechat.db"),
        &fake.url,
        "warn",
    ));
    daemon.call(
        Initialize::METHOD,
        json!({"clientInfo": {"name": "mcp-bench"}, "protocolVersion": 1, "capabilities": {}}),
    );
    let initialize = started.elapsed();
    daemon.notify(Initialized::METHOD, json!({}));
    let session = daemon.call(SessionCreate::METHOD, json!({}))["id"]
        .as_str()
        .expect("an id")
        .to_string();
    let sent = Instant::now();
    let id = daemon.request(
        ChatSend::METHOD,
        json!({"sessionId": session, "text": "hello"}),
    );
    while fake.seen().is_empty() {
        std::thread::sleep(Duration::from_micros(100));
    }
    let first_request = sent.elapsed();
    daemon.result(id);
    daemon.shut_down();
    (initialize, first_request)
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    if bench && cfg!(debug_assertions) {
        panic!("run the benchmark with `cargo bench` (release); debug figures mean nothing");
    }
    let (warm_up, runs) = if bench { (WARM_UP, RUNS) } else { (1, 1) };
    let dir = tempfile::tempdir().expect("a temporary folder");
    let none = home(dir.path(), "none", false);
    let five = home(dir.path(), "five", true);
    for _ in 0..warm_up {
        run_once(&none);
        run_once(&five);
    }
    let mut results: [(Vec<Duration>, Vec<Duration>); 2] = Default::default();
    for _ in 0..runs {
        for (index, home) in [&none, &five].into_iter().enumerate() {
            let (initialize, first) = run_once(home);
            results[index].0.push(initialize);
            results[index].1.push(first);
        }
    }
    let [(init_none, first_none), (init_five, first_five)] = results;
    let (init_none, first_none) = (median(init_none), median(first_none));
    let (init_five, first_five) = (median(init_five), median(first_five));
    let ratio = |with: Duration, without: Duration| with.as_secs_f64() / without.as_secs_f64();
    println!("MCP start-up, medians of {runs} runs each, interleaved:");
    println!(
        "  initialize:               none {}  five servers (one hanging) {}  ratio {:.2}",
        ms(init_none),
        ms(init_five),
        ratio(init_five, init_none)
    );
    println!(
        "  chat/send → upstream:     none {}  five servers (one hanging) {}  ratio {:.2}",
        ms(first_none),
        ms(first_five),
        ratio(first_five, first_none)
    );
    if bench {
        for (what, r) in [
            ("initialize", ratio(init_five, init_none)),
            ("first request", ratio(first_five, first_none)),
        ] {
            println!(
                "  goal ≤ {GOAL_RATIO}× for {what}: {}",
                if r <= GOAL_RATIO { "met" } else { "NOT met" }
            );
        }
    }
}
