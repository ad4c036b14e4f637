//! The sandbox of `run_command` (Landlock): commands run unasked inside it, writing only in
//! the workspace and the temp folder and connecting nowhere unless allowed; what it refused is
//! told as such, and a rerun outside it always asks. These tests need a kernel with Landlock
//! ABI 4 or later, as the machines the project runs on have.

use std::io::{Read, Write};
use std::net::TcpListener;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sidechat::protocol::{
    ApprovalDecision, ApprovalRespond, ClientInfo, Event, Initialize, InitializeParams,
    Initialized, InitializedParams, PendingApproval, SessionGet,
};

use crate::harness::{Daemon, Options, Scratch, answer, run_command_call, sid};

/// What the model is told after a command the sandbox refused.
const REFUSED: &str = "Refused by the sandbox: this command ran sandboxed, where it may write only in the workspace, the temp folder and the configured folders, and may not open network connections. If it needs more, call run_command again with \"sandbox\": false to run it outside the sandbox; the user will be asked first.";

/// The environment of a daemon whose model plays `turns`: its temp folder is a folder of its
/// own, so that `$HOME` (also in the scratch folder) is outside everything writable.
fn env(scratch: &Scratch, turns: Vec<Value>) -> Vec<(&'static str, String)> {
    let tmp = scratch.dir.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let mut env = scratch.replay(json!({ "turns": turns }));
    env.push(("TMPDIR", tmp.display().to_string()));
    env
}

/// Spawns the daemon and completes the handshake; the `initialize` result.
async fn start(
    scratch: &Scratch,
    turns: Vec<Value>,
) -> (Daemon, sidechat::protocol::InitializeResult) {
    let daemon = Daemon::spawn(&scratch.db(), Options::with_env(env(scratch, turns)));
    let init = daemon
        .call::<Initialize>(InitializeParams {
            client_info: Some(ClientInfo {
                name: "tests".into(),
                version: None,
            }),
            protocol_version: Some(1),
            capabilities: None,
        })
        .await;
    daemon.notify::<Initialized>(InitializedParams {}).await;
    (daemon, init)
}

/// Every approval asked until the run finishes, each answered with `decision`.
async fn approvals(daemon: &mut Daemon, decision: ApprovalDecision) -> Vec<PendingApproval> {
    let mut asked = Vec::new();
    loop {
        match daemon.next_event().await.event {
            Event::ApprovalRequested { approval } => {
                daemon
                    .call::<ApprovalRespond>(answer(&approval.approval_id, decision))
                    .await;
                asked.push(approval);
            }
            Event::RunFinished { .. } => return asked,
            _ => {}
        }
    }
}

fn pair(status: &str, output: &str) -> (String, String) {
    (status.to_string(), output.to_string())
}

#[tokio::test]
async fn sandboxed_commands_write_in_the_workspace_and_are_refused_outside_it_unasked() {
    let scratch = Scratch::new();
    let outside = scratch.home().join("outside.txt");
    std::fs::create_dir_all(scratch.home()).unwrap();
    let (mut daemon, init) = start(
        &scratch,
        vec![
            json!({"toolCalls": [
                run_command_call("echo inside > in.txt && cat in.txt"),
                run_command_call("echo outside > \"$HOME/outside.txt\""),
                run_command_call("echo temp > \"$TMPDIR/t.txt\" && cat \"$TMPDIR/t.txt\""),
            ]}),
            json!({"text": "done"}),
        ],
    )
    .await;
    assert!(init.sandbox.active, "{}", init.sandbox.detail);
    let session = daemon.create_session(scratch.replay_session()).await;
    daemon.send(&session, "go").await;
    assert_eq!(
        approvals(&mut daemon, ApprovalDecision::Deny).await,
        [],
        "sandboxed commands run without a prompt"
    );
    assert_eq!(
        std::fs::read_to_string(scratch.workspace().join("in.txt")).unwrap(),
        "inside\n"
    );
    assert!(!outside.exists(), "the write outside was refused");
    let results = daemon.tool_results(&session).await;
    assert_eq!(
        results,
        [
            pair("done", "exit code: 0\n--- stdout\ninside"),
            pair(
                "error",
                &format!(
                    "exit code: 2\n--- stderr\nsh: 1: cannot create {}: Permission denied\n\n{REFUSED}",
                    outside.display()
                )
            ),
            pair("done", "exit code: 0\n--- stdout\ntemp"),
        ]
    );
    // The model reads the same.
    let told = scratch.requests()[1].to_string();
    assert!(told.contains("Refused by the sandbox"), "{told}");
    daemon.close().await;
}

/// A listener on 127.0.0.1 answering one HTTP request with `ok`, on a thread; whether it was
/// reached is read with [`reached`].
fn listener() -> (TcpListener, u16) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    (listener, port)
}

/// Answers the connections that came, without waiting for more; how many there were.
fn reached(listener: &TcpListener) -> usize {
    listener.set_nonblocking(true).unwrap();
    let mut count = 0;
    while let Ok((mut stream, _)) = listener.accept() {
        count += 1;
        stream.set_nonblocking(false).unwrap();
        let mut buffer = [0; 1024];
        let _ = stream.read(&mut buffer);
        let _ = stream.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok");
    }
    count
}

/// `curl` to the listener, answered by a thread while the run goes on.
async fn curl_run(scratch: &Scratch, network: bool) -> (Vec<(String, String)>, usize) {
    if network {
        scratch.write_config("[sandbox]\nnetwork = true\n");
    }
    let (listener, port) = listener();
    let (mut daemon, init) = start(
        scratch,
        vec![
            json!({"toolCalls": [run_command_call(&format!("curl -sS --max-time 20 http://127.0.0.1:{port}/"))]}),
            json!({"text": "done"}),
        ],
    )
    .await;
    assert!(init.sandbox.active, "{}", init.sandbox.detail);
    let session = daemon.create_session(scratch.replay_session()).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopped = stop.clone();
    let answering = std::thread::spawn(move || {
        // Answers what comes until the run has finished.
        let mut count = 0;
        while !stopped.load(std::sync::atomic::Ordering::SeqCst) {
            count += reached(&listener);
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        count + reached(&listener)
    });
    daemon.send(&session, "go").await;
    let asked = approvals(&mut daemon, ApprovalDecision::Deny).await;
    assert_eq!(asked, []);
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let results = daemon.tool_results(&session).await;
    daemon.close().await;
    (results, answering.join().unwrap())
}

#[tokio::test]
async fn a_connection_is_refused_with_the_network_off_and_made_with_it_on() {
    let off = Scratch::new();
    let (results, connections) = curl_run(&off, false).await;
    assert_eq!(connections, 0, "no connection reached the listener");
    let (status, output) = &results[0];
    assert_eq!(status, "error");
    assert!(output.ends_with(REFUSED), "{output}");

    let on = Scratch::new();
    let (results, connections) = curl_run(&on, true).await;
    assert_eq!(connections, 1);
    assert_eq!(results, [pair("done", "exit code: 0\n--- stdout\nok")]);
}

#[tokio::test]
async fn a_command_the_sandbox_refused_reruns_outside_once_the_user_allows_it() {
    let scratch = Scratch::new();
    std::fs::create_dir_all(scratch.home()).unwrap();
    let outside = scratch.home().join("outside.txt");
    let line = "echo outside > \"$HOME/outside.txt\"";
    let (mut daemon, _) = start(
        &scratch,
        vec![
            json!({"toolCalls": [run_command_call(line)]}),
            json!({"toolCalls": [{"name": "run_command", "input": {"command": line, "sandbox": false}}]}),
            json!({"text": "done"}),
        ],
    )
    .await;
    let session = daemon.create_session(scratch.replay_session()).await;
    daemon.send(&session, "go").await;
    let asked = approvals(&mut daemon, ApprovalDecision::Allow).await;
    let prompts: Vec<(String, String, Option<bool>)> = asked
        .iter()
        .map(|a| (a.tool.clone(), a.summary.clone(), a.sandboxed))
        .collect();
    assert_eq!(
        prompts,
        [(
            "run_command".to_string(),
            format!("run `{line}`"),
            Some(false)
        )],
        "only the rerun outside asks, and says it runs outside the sandbox"
    );
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "outside\n");
    let results = daemon.tool_results(&session).await;
    assert_eq!(results[0].0, "error");
    assert!(results[0].1.ends_with(REFUSED), "{}", results[0].1);
    assert_eq!(results[1], pair("done", "exit code: 0"));
    daemon.close().await;
}

#[tokio::test]
async fn an_allow_for_the_session_does_not_skip_the_prompt_of_a_rerun_outside() {
    let scratch = Scratch::new();
    scratch.write_config("[permissions]\nallow = [\"run_command\"]\n");
    let input = json!({"name": "run_command", "input": {"command": "true", "sandbox": false}});
    let (mut daemon, _) = start(
        &scratch,
        vec![
            json!({"toolCalls": [input.clone()]}),
            json!({"text": "done"}),
        ],
    )
    .await;
    let session = daemon.create_session(scratch.replay_session()).await;
    daemon.send(&session, "go").await;
    let asked = approvals(&mut daemon, ApprovalDecision::Deny).await;
    assert_eq!(asked.len(), 1, "an allow rule does not cover a run outside");
    daemon.close().await;
}

#[tokio::test]
async fn session_get_and_prompts_say_whether_commands_run_sandboxed() {
    // On: an ask rule still asks, and the prompt says the command will run sandboxed.
    let on = Scratch::new();
    on.write_config("[permissions]\nask = [\"run_command(touch *)\"]\n");
    let (mut daemon, init) = start(
        &on,
        vec![
            json!({"toolCalls": [run_command_call("touch made.txt")]}),
            json!({"text": "done"}),
        ],
    )
    .await;
    assert!(init.sandbox.active);
    assert!(
        init.sandbox.detail.starts_with("Landlock ABI "),
        "{}",
        init.sandbox.detail
    );
    let session = daemon.create_session(on.replay_session()).await;
    let got = daemon.call::<SessionGet>(sid(&session)).await;
    assert!(got.commands_sandboxed);
    daemon.send(&session, "go").await;
    let (_, approval_id) = daemon.until_approval().await;
    let transcript = daemon.transcript(&session).await;
    assert_eq!(
        transcript["pendingApprovals"][0]["sandboxed"],
        json!(true),
        "{transcript}"
    );
    daemon
        .call::<ApprovalRespond>(answer(&approval_id, ApprovalDecision::Allow))
        .await;
    daemon.until_finished().await;
    assert!(on.workspace().join("made.txt").exists());
    daemon.close().await;

    // Off: commands ask as they did, and nothing says sandboxed.
    let off = Scratch::new();
    off.write_config("[sandbox]\nenabled = false\n");
    let (mut daemon, init) = start(
        &off,
        vec![
            json!({"toolCalls": [run_command_call("touch made.txt")]}),
            json!({"text": "done"}),
        ],
    )
    .await;
    assert_eq!(
        (init.sandbox.active, init.sandbox.detail.as_str()),
        (
            false,
            "off ([sandbox] enabled = false): commands ask before they run"
        )
    );
    let session = daemon.create_session(off.replay_session()).await;
    let got = daemon.call::<SessionGet>(sid(&session)).await;
    assert!(!got.commands_sandboxed);
    daemon.send(&session, "go").await;
    let asked = approvals(&mut daemon, ApprovalDecision::Allow).await;
    let sandboxed: Vec<Option<bool>> = asked.iter().map(|a| a.sandboxed).collect();
    assert_eq!(sandboxed, [Some(false)]);
    assert!(off.workspace().join("made.txt").exists());
    daemon.close().await;
}

/// What `sidechat doctor` prints.
async fn doctor(scratch: &Scratch) -> String {
    let output = crate::harness::clean_command(&scratch.home())
        .arg("doctor")
        .arg("--db")
        .arg(scratch.db())
        .output()
        .await
        .unwrap();
    String::from_utf8(output.stdout).unwrap()
}

#[tokio::test]
async fn doctor_says_whether_commands_run_sandboxed() {
    let scratch = Scratch::new();
    let report = doctor(&scratch).await;
    let line = report
        .lines()
        .skip_while(|l| *l != "Sandbox")
        .nth(1)
        .unwrap_or_default()
        .to_string();
    assert!(
        line.starts_with("  commands    Landlock ABI ")
            && line.ends_with(
                "commands run sandboxed (writes in the workspace, the temp folder; network refused)"
            ),
        "{report}"
    );
    scratch.write_config("[sandbox]\nenabled = false\n");
    let report = doctor(&scratch).await;
    assert!(
        report.contains(
            "Sandbox\n  commands    off ([sandbox] enabled = false): commands ask before they run\n"
        ),
        "{report}"
    );
}

#[tokio::test]
async fn the_hidden_mode_refuses_to_run_without_its_arguments() {
    let scratch = Scratch::new();
    let output = crate::harness::clean_command(&scratch.home())
        .args(["__sandbox-exec", "--workspace", "/"])
        .output()
        .await
        .unwrap();
    assert_ne!(output.status.code(), Some(0));
    let help = crate::harness::clean_command(&scratch.home())
        .arg("--help")
        .output()
        .await
        .unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    assert!(!help.contains("sandbox"), "hidden from --help: {help}");
}
