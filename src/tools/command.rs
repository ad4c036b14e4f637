//! Shell commands run in the workspace root, with a timeout and an output cap.

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::AsyncReadExt;

use super::{ToolOutcome, Workspace, str_arg};

const DEFAULT_TIMEOUT_SECS: u64 = 120;
const MAX_TIMEOUT_SECS: u64 = 600;
/// Most bytes of each stream shown to the model.
const OUTPUT_CAP: usize = 64 * 1024;

pub async fn run(ws: &Workspace, input: &Value) -> Result<ToolOutcome, String> {
    let command = str_arg(input, "command")
        .filter(|c| !c.trim().is_empty())
        .ok_or("The input needs a non-empty string field \"command\".")?;
    let timeout = input
        .get("timeout_seconds")
        .and_then(Value::as_u64)
        .unwrap_or(DEFAULT_TIMEOUT_SECS)
        .clamp(1, MAX_TIMEOUT_SECS);
    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .current_dir(ws.root())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Dropping the future (stop, timeout) must not leave the command running.
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("Cannot start the shell: {e}"))?;
    let mut stdout = child.stdout.take().ok_or("no stdout")?;
    let mut stderr = child.stderr.take().ok_or("no stderr")?;
    let collect = async {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let (a, b) = tokio::join!(stdout.read_to_end(&mut out), stderr.read_to_end(&mut err));
        a.and(b).map(|_| (out, err))
    };
    let waited = tokio::time::timeout(Duration::from_secs(timeout), async {
        let (out, err) = collect.await?;
        let status = child.wait().await?;
        Ok::<_, std::io::Error>((status, out, err))
    })
    .await;
    let (status, out, err) = match waited {
        Err(_) => {
            return Ok(ToolOutcome::error(format!(
                "The command was stopped after {timeout} seconds."
            )));
        }
        Ok(Err(e)) => return Err(format!("The command failed: {e}")),
        Ok(Ok(done)) => done,
    };
    let code = status
        .code()
        .map_or("a signal".to_string(), |c| c.to_string());
    let mut output = format!("exit code: {code}\n");
    for (name, bytes) in [("stdout", out), ("stderr", err)] {
        if !bytes.is_empty() {
            let text = String::from_utf8_lossy(&bytes);
            output.push_str(&format!(
                "--- {name}\n{}\n",
                super::truncate(&text, OUTPUT_CAP)
            ));
        }
    }
    Ok(ToolOutcome {
        output: output.trim_end().to_string(),
        is_error: !status.success(),
        changed: None,
        snapshot: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn runs_in_the_root_and_reports_the_exit_code() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("marker"), "").unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        let ok = run(&ws, &json!({"command": "ls"})).await.unwrap();
        assert_eq!(ok, ToolOutcome::ok("exit code: 0\n--- stdout\nmarker"));
        let failed = run(&ws, &json!({"command": "echo oops >&2; exit 3"}))
            .await
            .unwrap();
        assert_eq!(failed, ToolOutcome::error("exit code: 3\n--- stderr\noops"));
    }

    #[tokio::test]
    async fn times_out() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        let slow = run(&ws, &json!({"command": "sleep 30", "timeout_seconds": 1}))
            .await
            .unwrap();
        assert_eq!(
            slow,
            ToolOutcome::error("The command was stopped after 1 seconds.")
        );
    }
}
