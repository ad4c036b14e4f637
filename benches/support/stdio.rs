//! What the benchmarks that drive `sidechat serve` over its stdio share: the daemon's command
//! with a clean environment, request lines, and its memory figures.

use std::io::Write;
use std::path::Path;
use std::process::{ChildStdin, Command, Stdio};

use serde_json::{Value, json};

/// `sidechat serve --db <db>` with an empty environment apart from `PATH`, `HOME` and XDG
/// folders inside `home` (so no config file or provider key of the machine is read), the
/// OpenAI variables pointing at the fake server `upstream`, and `SIDECHAT_LOG=<log>`. Its
/// stdin and stdout are piped; stderr is this process's.
pub fn serve_command(home: &Path, db: &Path, upstream: &str, log: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_sidechat"));
    command
        .arg("serve")
        .arg("--db")
        .arg(db)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_DATA_HOME", home.join("data"))
        .env("OPENAI_BASE_URL", format!("{upstream}/v1"))
        .env("OPENAI_API_KEY", "x")
        .env("SIDECHAT_LOG", log)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    command
}

/// The daemon's stdin: one JSON object per line, requests numbered from 1.
pub struct Requests {
    stdin: ChildStdin,
    next_id: u64,
}

impl Requests {
    pub fn new(stdin: ChildStdin) -> Self {
        Self { stdin, next_id: 1 }
    }

    pub fn send(&mut self, message: &Value) {
        let mut line = message.to_string();
        line.push('\n');
        self.stdin
            .write_all(line.as_bytes())
            .and_then(|()| self.stdin.flush())
            .expect("cannot write to the daemon's stdin");
    }

    /// Sends a request and returns its id, without waiting for the answer.
    pub fn start_call(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }
}

/// A figure of `/proc/<pid>/status` in KiB: `VmRSS:` (resident now) or `VmHWM:` (its peak).
pub fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .expect("cannot read /proc/<pid>/status of the daemon");
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.trim().strip_suffix("kB"))
        .and_then(|kib| kib.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} line in /proc/<pid>/status"))
}
