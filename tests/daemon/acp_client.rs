//! A line-by-line client of `sidechat acp` for the tests that drive it by hand.

use std::path::Path;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{ChildStdin, ChildStdout};

use crate::harness::{clean_command, home_for};

/// A guard against a hung agent, not a performance assertion.
const HANG_GUARD: std::time::Duration = std::time::Duration::from_secs(60);

pub struct Agent {
    /// Killed when the client is dropped.
    _child: tokio::process::Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    next_id: u64,
}

impl Agent {
    /// `sidechat acp --db <db>` in a clean environment plus `env`.
    pub fn spawn(db: &Path, env: &[(&str, String)]) -> Self {
        let mut command = clean_command(&home_for(db));
        command.arg("acp").arg("--db").arg(db);
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn sidechat acp");
        Self {
            stdin: child.stdin.take().unwrap(),
            lines: BufReader::new(child.stdout.take().unwrap()).lines(),
            next_id: 0,
            _child: child,
        }
    }

    /// Sends a request; its result, after the frames before it.
    pub async fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
        self.stdin.flush().await.unwrap();
        loop {
            let frame = self.frame().await;
            if frame["id"] == json!(id) && frame.get("method").is_none() {
                return frame["result"].clone();
            }
        }
    }

    pub async fn frame(&mut self) -> Value {
        let line = tokio::time::timeout(HANG_GUARD, self.lines.next_line())
            .await
            .expect("the agent wrote nothing")
            .unwrap()
            .expect("the agent closed its output");
        serde_json::from_str(&line).unwrap()
    }

    /// The names of the next `available_commands_update`.
    pub async fn next_commands(&mut self) -> Vec<String> {
        loop {
            let frame = self.frame().await;
            let update = &frame["params"]["update"];
            if update["sessionUpdate"] == "available_commands_update" {
                return update["availableCommands"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| c["name"].as_str().unwrap().to_string())
                    .collect();
            }
        }
    }
}
