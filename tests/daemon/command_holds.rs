//! Commands that change what the model sees (`/compact`, `/new-context`, `/undo`) hold the
//! session while they work, so no run starts under them. A message sent meanwhile is queued,
//! as it would be for a run, and once the command's note is in it becomes the next turn and
//! is answered: it is neither refused nor left waiting for a run that never comes.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sidechat::protocol::{ChatSend, Event, SessionCreateParams, SessionGet};

use crate::first_request::until_requests;
use crate::harness::{Daemon, Options, Scratch, gated, json_of, say, sid, text};
use crate::long_context::{WINDOW, env, text_reply};
use crate::upstream::{Reply, Upstream, openai, start};

/// A summary (or carry-over note) whose words stream at once and whose end waits for the
/// test: the command holds the session until then.
fn held_summary(words: &str) -> (Reply, std::sync::mpsc::Sender<()>) {
    let (release, gate) = std::sync::mpsc::channel();
    let end = vec![
        openai::chunk(json!({}), Some("stop")),
        openai::usage(100, 0, 9),
    ];
    (gated(vec![text(words)], gate, end), release)
}

/// A daemon on the fake upstream with a session that has had one answered turn.
async fn answered_once(scratch: &Scratch, upstream: &Upstream) -> (Daemon, String) {
    let mut daemon =
        Daemon::start(&scratch.db(), Options::with_env(env(&upstream.url, WINDOW))).await;
    let session = daemon.create_session(SessionCreateParams::default()).await;
    daemon.send(&session, "Count: one").await;
    daemon.until_finished().await;
    (daemon, session)
}

/// The transcript's entries as `(role, first text)`, in order.
async fn entries(daemon: &Daemon, session: &str) -> Vec<(String, String)> {
    let transcript = daemon.transcript(session).await;
    transcript["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let text = e["blocks"][0]["text"].as_str().unwrap_or_default();
            (
                e["role"].as_str().unwrap().to_string(),
                text.chars().take(40).collect(),
            )
        })
        .collect()
}

/// Sends `command` and, once its model request is held at the upstream (request `held_at`),
/// `message`; then lets the command finish. The message's answer to `chat/send`.
async fn send_during(
    daemon: &Daemon,
    upstream: &Upstream,
    session: &str,
    command: &str,
    held_at: usize,
    release: std::sync::mpsc::Sender<()>,
    message: &str,
) -> Value {
    let commanded = daemon.call::<ChatSend>(say(session, command));
    let meanwhile = async {
        until_requests(upstream, held_at).await;
        let sent = json_of(daemon.send(session, message).await);
        release.send(()).unwrap();
        sent
    };
    let (_, sent) = tokio::join!(commanded, meanwhile);
    sent
}

/// Whether a `chat/send` answer queued its message (and for which claim's kind of id).
fn queued(sent: &Value) -> (Value, String) {
    let run = sent["runId"].as_str().unwrap_or_default();
    (
        sent["queued"].clone(),
        run.split('_').next().unwrap().to_string(),
    )
}

#[tokio::test]
async fn a_message_sent_during_a_compaction_is_answered_after_it() {
    let (summary, release) = held_summary("SUMMARY: they counted to one.");
    let upstream = start(vec![
        text_reply("1.", 100, 3),
        summary,
        text_reply("2.", 100, 3),
    ]);
    let scratch = Scratch::new();
    let (mut daemon, session) = answered_once(&scratch, &upstream).await;

    let sent = send_during(&daemon, &upstream, &session, "/compact", 2, release, "two").await;
    assert_eq!(queued(&sent), (json!(true), "cmp".to_string()));

    let events = daemon.until_finished().await;
    let promoted = events
        .iter()
        .find_map(|e| match &e.event {
            Event::InterjectionPromoted { pending_ids, .. } => Some(pending_ids.clone()),
            _ => None,
        })
        .expect("the queued message is promoted into a turn");
    assert_eq!(
        promoted,
        vec![sent["pendingId"].as_str().unwrap().to_string()]
    );
    let requests = upstream.bodies();
    assert_eq!(requests.len(), 3);
    let last_user = requests[2]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .unwrap()
        .to_string();
    assert!(last_user.contains("two"), "{last_user}");
    let state = json_of(daemon.call::<SessionGet>(sid(&session)).await)["state"].clone();
    assert_eq!(state, json!("idle"));
    let shown = entries(&daemon, &session).await;
    let roles: Vec<&str> = shown.iter().map(|(role, _)| role.as_str()).collect();
    assert_eq!(
        roles,
        ["user", "assistant", "summary", "note", "user", "assistant"]
    );
    assert_eq!((shown[4].1.as_str(), shown[5].1.as_str()), ("two", "2."));
    daemon.close().await;
}

#[tokio::test]
async fn a_message_sent_while_a_new_context_is_written_opens_it() {
    let (note, release) = held_summary("NOTE: they count upwards.");
    let upstream = start(vec![
        text_reply("1.", 100, 3),
        note,
        text_reply("2.", 100, 3),
    ]);
    let scratch = Scratch::new();
    let (mut daemon, session) = answered_once(&scratch, &upstream).await;

    let sent = send_during(
        &daemon,
        &upstream,
        &session,
        "/new-context",
        2,
        release,
        "two",
    )
    .await;
    assert_eq!(queued(&sent), (json!(true), "ctx".to_string()));

    daemon.until_finished().await;
    let requests = upstream.bodies();
    assert_eq!(requests.len(), 3);
    // The new context opens with the note, then the message sent while it was written.
    let opening = requests[2]["messages"].to_string();
    assert!(
        opening.contains("NOTE: they count upwards.") && opening.contains("two"),
        "{opening}"
    );
    assert!(!opening.contains("Count: one"), "{opening}");
    let state = json_of(daemon.call::<SessionGet>(sid(&session)).await)["state"].clone();
    assert_eq!(state, json!("idle"));
    daemon.close().await;
}
