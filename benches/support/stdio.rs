//! What the benchmarks that drive `sidechat serve` (or `sidechat acp`) over its stdio share:
//! the command with a clean environment, request lines, reading answers, and memory figures.

// Each benchmark uses a part of this module.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use serde_json::{Value, json};
use sidechat::protocol::{Exit, Notification, Request, Shutdown};

/// `sidechat serve --db <db>` with an empty environment apart from `PATH`, `HOME` and XDG
/// folders inside `home` (so no config file or provider key of the machine is read), the
/// OpenAI variables pointing at the fake server `upstream`, and `SIDECHAT_LOG=<log>`. No
/// title request follows a session's first answer: the fake server sees only the requests a
/// benchmark makes, and a benchmark that waits for its n-th request waits for its own. Its
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
        .env("SIDECHAT_AUTO_TITLE", "off")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    command
}

/// `sidechat acp --db <db>` in the environment of [`serve_command`].
pub fn acp_command(home: &Path, db: &Path, upstream: &str, log: &str) -> Command {
    let serve = serve_command(home, db, upstream, log);
    let mut acp = Command::new(serve.get_program());
    acp.arg("acp").arg("--db").arg(db).env_clear();
    for (key, value) in serve.get_envs() {
        if let Some(value) = value {
            acp.env(key, value);
        }
    }
    acp.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    acp
}

/// A spawned `sidechat` whose stdout is read line by line, one frame a line; its stderr is
/// dropped.
pub struct Process {
    pub child: Child,
    pub requests: Requests,
    stdout: BufReader<ChildStdout>,
}

impl Process {
    pub fn spawn(mut command: Command) -> Self {
        let mut child = command
            .stderr(Stdio::null())
            .spawn()
            .expect("cannot spawn sidechat");
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        Self {
            child,
            requests: Requests::new(stdin),
            stdout,
        }
    }

    /// Writes a request; its id.
    pub fn request(&mut self, method: &str, params: Value) -> u64 {
        self.requests.start_call(method, params)
    }

    /// Writes a notification.
    pub fn notify(&mut self, method: &str, params: Value) {
        self.requests
            .send(&json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// The result of request `id`, which must succeed; notifications on the way are skipped.
    pub fn result(&mut self, id: u64) -> Value {
        let mut line = String::new();
        loop {
            line.clear();
            let n = self.stdout.read_line(&mut line).expect("read sidechat");
            assert!(n > 0, "sidechat closed its output");
            let message: Value = serde_json::from_str(&line).expect("a JSON line");
            if message["id"] == id && message.get("method").is_none() {
                assert!(
                    message.get("error").is_none(),
                    "request {id} failed: {message}"
                );
                return message["result"].clone();
            }
        }
    }

    /// Writes a request and waits for its result.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.request(method, params);
        self.result(id)
    }

    /// `sidechat serve`'s end: `shutdown`, `exit`, then [`Process::close`].
    pub fn shut_down(mut self) {
        self.requests.start_call(Shutdown::METHOD, Value::Null);
        self.notify(Exit::METHOD, Value::Null);
        self.close();
    }

    /// Closes stdin and waits for the process to end.
    pub fn close(self) {
        let Self {
            mut child,
            requests,
            stdout: _unread,
        } = self;
        drop(requests);
        let _ = child.wait();
    }
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
