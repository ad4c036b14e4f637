//! Recorded `session/event` streams: six scenarios (a tool run, an approval, an interjection,
//! a delegation, a compaction, a crash recovery) driven through the real daemon, normalised and
//! compared with `tests/fixtures/streams/NAME.jsonl`. The three renderers (the terminal's
//! [`SessionView`], the VS Code and Neovim session models) replay those files in their own
//! tests and must reduce each to `NAME.transcript.txt`, so the files must say what the daemon
//! sends today: `SIDECHAT_RECORD_STREAMS=1 cargo test --test daemon streams` rewrites them.
//!
//! A line is one `session/event` params object, or `{"transcript": …}`: the session's
//! `session/transcript` as a client loads it after the daemon restarted (it starts over from
//! it, since a restarted daemon numbers its events from the store).

use std::collections::HashMap;
use std::path::PathBuf;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sidechat::client::SessionView;
use sidechat::protocol::{
    ApprovalDecision, ApprovalRespond, ChatResume, ChatSend, ChatStop, Event, SessionCreateParams,
    SessionEventParams, SessionTranscriptResult,
};

use crate::harness::{Daemon, Options, Scratch, answer, say, sid};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/streams")
}

fn recording() -> bool {
    std::env::var_os("SIDECHAT_RECORD_STREAMS").is_some_and(|v| v == "1")
}

/// What a client of one session saw, normalised as it is recorded.
struct Recorder {
    session: String,
    /// The scratch workspace's path, written `<ws>`.
    workspace: String,
    lines: Vec<Value>,
}

impl Recorder {
    fn new(session: &str, scratch: &Scratch) -> Self {
        Self {
            session: session.to_string(),
            workspace: scratch.workspace().display().to_string(),
            lines: Vec::new(),
        }
    }

    /// The events of this session (a child session's own events are not its client's).
    fn events(&mut self, events: &[SessionEventParams]) {
        for event in events.iter().filter(|e| e.session_id == self.session) {
            self.lines.push(serde_json::to_value(event).unwrap());
        }
    }

    fn transcript(&mut self, transcript: Value) {
        self.lines.push(json!({ "transcript": transcript }));
    }

    /// The normalised lines, compared with (or, when recording, written to) the fixture; then
    /// the terminal's reading of them, compared with the transcript beside it.
    fn check(self, name: &str) {
        let mut ids = HashMap::new();
        let lines: Vec<String> = self
            .lines
            .iter()
            .map(|line| normalise(line, &self.workspace, &mut ids).to_string())
            .collect();
        let text = lines.join("\n") + "\n";
        let path = fixtures().join(format!("{name}.jsonl"));
        if recording() {
            std::fs::create_dir_all(fixtures()).unwrap();
            std::fs::write(&path, &text).unwrap();
        }
        let stored = std::fs::read_to_string(&path).unwrap_or_default();
        assert_eq!(
            stored,
            text,
            "{} is not what the daemon sends: SIDECHAT_RECORD_STREAMS=1 rewrites it",
            path.display()
        );
        reads_as_its_transcript(name, &text);
    }
}

/// The terminal's [`SessionView`] reduces the stream `text` to `NAME.transcript.txt` (written
/// from it when recording: review the change, the other clients' tests read the same file).
fn reads_as_its_transcript(name: &str, text: &str) {
    let mut view = SessionView::default();
    for line in text.lines() {
        let value: Value = serde_json::from_str(line).unwrap();
        match value.get("transcript") {
            Some(transcript) => {
                let transcript: SessionTranscriptResult =
                    serde_json::from_value(transcript.clone()).unwrap();
                view.load(&transcript);
            }
            None => view.apply(&serde_json::from_value(value).unwrap()),
        }
    }
    let read = view.normalised().join("\n") + "\n";
    let path = fixtures().join(format!("{name}.transcript.txt"));
    if recording() {
        std::fs::write(&path, &read).unwrap();
    }
    assert_eq!(
        std::fs::read_to_string(&path).unwrap_or_default(),
        read,
        "the terminal's reading of {name}.jsonl"
    );
}

/// Generated ids become `<kind-N>` numbered by first sight, times `<time>`, durations 0 and
/// the workspace `<ws>`, so that a recording is the same every time.
fn normalise(value: &Value, workspace: &str, ids: &mut HashMap<String, String>) -> Value {
    let generated = regex::Regex::new(r"^(ses|msg|run|apr|call|inj)_[0-9a-f_]+$").unwrap();
    let time = regex::Regex::new(r"^\d{4}-\d\d-\d\dT\d\d:\d\d").unwrap();
    match value {
        Value::String(s) if time.is_match(s) => json!("<time>"),
        Value::String(s) => match generated.captures(s) {
            Some(caps) => {
                let count = ids.len() + 1;
                let kind = caps[1].to_string();
                json!(
                    ids.entry(s.clone())
                        .or_insert_with(|| format!("<{kind}-{count}>"))
                        .clone()
                )
            }
            None => json!(s.replace(workspace, "<ws>")),
        },
        Value::Array(items) => {
            Value::Array(items.iter().map(|v| normalise(v, workspace, ids)).collect())
        }
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| match k.as_str() {
                    "durationMs" => (k.clone(), json!(0)),
                    _ => (k.clone(), normalise(v, workspace, ids)),
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

async fn replay_daemon(scratch: &Scratch, script: Value) -> (Daemon, String) {
    let daemon = Daemon::start(&scratch.db(), Options::with_env(scratch.replay(script))).await;
    let session = daemon.create_session(scratch.replay_session()).await;
    (daemon, session)
}

fn write_call(path: &str, content: &str) -> Value {
    json!([{"name": "write_file", "input": {"path": path, "content": content}}])
}

#[tokio::test]
async fn a_tool_run() {
    let scratch = Scratch::new();
    std::fs::write(scratch.workspace().join("a.txt"), "one\n").unwrap();
    let script = json!({"turns": [
        {"text": "Listing the workspace.", "toolCalls": [{"name": "list_directory", "input": {"path": "."}}]},
        {"text": "There is **one** file:\n\n- a.txt"},
    ]});
    let (mut daemon, session) = replay_daemon(&scratch, script).await;
    let mut recorder = Recorder::new(&session, &scratch);
    daemon.send(&session, "what is here?").await;
    recorder.events(&daemon.until_finished().await);
    recorder.check("tool_run");
    daemon.close().await;
}

#[tokio::test]
async fn an_approval() {
    let scratch = Scratch::new();
    let script = json!({"turns": [
        {"text": "Writing notes.md.", "toolCalls": write_call("notes.md", "hello\n")},
        {"text": "Wrote notes.md."},
        {"text": "Writing secret.md.", "toolCalls": write_call("secret.md", "no\n")},
        {"text": "It was not allowed."},
        {"text": "Writing later.md.", "toolCalls": write_call("later.md", "later\n")},
    ]});
    let (mut daemon, session) = replay_daemon(&scratch, script).await;
    let mut recorder = Recorder::new(&session, &scratch);
    // Allowed, denied, then left unanswered: the run is stopped while it waits.
    for (text, decision) in [
        ("write notes", ApprovalDecision::Allow),
        ("write a secret", ApprovalDecision::Deny),
    ] {
        daemon.send(&session, text).await;
        let (events, approval) = daemon.until_approval().await;
        recorder.events(&events);
        daemon
            .call::<ApprovalRespond>(answer(&approval, decision))
            .await;
        recorder.events(&daemon.until_finished().await);
    }
    daemon.send(&session, "write it later").await;
    let (events, _) = daemon.until_approval().await;
    recorder.events(&events);
    daemon.call::<ChatStop>(sid(&session)).await;
    recorder.events(&daemon.until_finished().await);
    recorder.check("approval");
    daemon.close().await;
}

#[tokio::test]
async fn an_interjection() {
    let scratch = Scratch::new();
    let script = json!({"turns": [
        {"text": "Writing notes.md.", "toolCalls": write_call("notes.md", "hello\n")},
        {"text": "Wrote notes.md, and noted the licence."},
    ]});
    let (mut daemon, session) = replay_daemon(&scratch, script).await;
    let mut recorder = Recorder::new(&session, &scratch);
    daemon.send(&session, "write notes").await;
    // Typed while the run waits for the approval: it is queued there, and goes to the model
    // with the tool's result.
    let (events, approval) = daemon.until_approval().await;
    recorder.events(&events);
    daemon.send(&session, "and check the licence").await;
    recorder.events(
        &daemon
            .events_until(|e| matches!(e, Event::InterjectionQueued { .. }))
            .await,
    );
    daemon
        .call::<ApprovalRespond>(answer(&approval, ApprovalDecision::Allow))
        .await;
    recorder.events(&daemon.until_finished().await);
    recorder.check("interjection");
    daemon.close().await;
}

#[tokio::test]
async fn a_delegation() {
    let scratch = Scratch::new();
    std::fs::write(scratch.workspace().join("a.txt"), "one\n").unwrap();
    let script = json!({
        "turns": [
            {"text": "Handing it over.", "toolCalls": [{"name": "delegate", "input": {"task": "List the workspace", "tools": "all"}}]},
            {"text": "The sub-agent found a.txt."},
        ],
        "delegated": {"turns": [
            {"text": "Listing.", "toolCalls": [{"name": "list_directory", "input": {"path": "."}}]},
            {"text": "Found a.txt."},
        ]},
    });
    let (mut daemon, session) = replay_daemon(&scratch, script).await;
    let mut recorder = Recorder::new(&session, &scratch);
    daemon.send(&session, "what is here? ask a sub-agent").await;
    let parent = session.clone();
    let events = daemon
        .events_until(|e| matches!(e, Event::RunFinished { .. }))
        .await;
    // The child's run finishes first (its own events, and the parent's `delegation` copy).
    let mut all = events;
    while !all
        .iter()
        .any(|e| e.session_id == parent && matches!(e.event, Event::RunFinished { .. }))
    {
        all.extend(daemon.until_finished().await);
    }
    recorder.events(&all);
    recorder.check("delegation");
    daemon.close().await;
}

#[tokio::test]
async fn a_compaction() {
    let scratch = Scratch::new();
    let mut daemon = Daemon::start(&scratch.db(), Options::default()).await;
    let session = daemon
        .create_session(SessionCreateParams {
            workspace_root: Some(scratch.workspace().display().to_string()),
            ..Default::default()
        })
        .await;
    let mut recorder = Recorder::new(&session, &scratch);
    for text in ["hello there", "hello again"] {
        daemon.send(&session, text).await;
        recorder.events(&daemon.until_finished().await);
    }
    daemon.call::<ChatSend>(say(&session, "/compact")).await;
    recorder.events(
        &daemon
            .events_until(|e| {
                matches!(e, Event::MessageCompleted { entry } if entry.role == sidechat::protocol::Role::Note)
            })
            .await,
    );
    recorder.check("compaction");
    daemon.close().await;
}

#[tokio::test]
async fn a_crash_recovery() {
    let scratch = Scratch::new();
    let script = json!({"turns": [
        {"text": "Once upon a time there was a daemon.", "delayMs": 300},
        {"text": "Once upon a time there was a daemon that came back."},
    ]});
    let (mut daemon, session) = replay_daemon(&scratch, script.clone()).await;
    let mut recorder = Recorder::new(&session, &scratch);
    daemon.send(&session, "tell me a story").await;
    // What the client saw when the daemon died: up to the first words of the answer.
    recorder.events(
        &daemon
            .events_until(|e| matches!(e, Event::TextDelta { .. }))
            .await,
    );
    daemon.process().kill().await.unwrap();

    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(scratch.replay(script))).await;
    let transcript = daemon.transcript(&session).await;
    recorder.transcript(transcript);
    daemon.call::<ChatResume>(sid(&session)).await;
    recorder.events(&daemon.until_finished().await);
    recorder.check("crash_recovery");
    daemon.close().await;
}
