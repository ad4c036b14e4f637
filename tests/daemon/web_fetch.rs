//! `web_fetch` at the daemon: each host is asked about, "allow for this session" covers that
//! host's later calls, an allowed page reaches the model and a denied fetch tells it so,
//! without anything being fetched. Pages come from a local server listed in `allow_hosts`.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sidechat::protocol::{ApprovalDecision, ApprovalRespond};

use crate::harness::{Daemon, Options, Scratch, answer};
use crate::upstream::{Body, Reply, start};

/// A `200 text/plain` page.
fn page(text: &str) -> Reply {
    Reply {
        status: 200,
        headers: vec![("content-type", "text/plain".into())],
        body: Body::Whole(text.into()),
    }
}

/// The pending approval of a session: its tool, input and proposed rule.
async fn pending(daemon: &Daemon, session: &str) -> Value {
    let transcript = daemon.transcript(session).await;
    let approval = &transcript["pendingApprovals"][0];
    json!({"tool": approval["tool"], "input": approval["input"],
           "proposedRule": approval["proposedRule"]})
}

#[tokio::test]
async fn web_fetch_asks_per_host_once_for_the_session_and_a_denial_reaches_the_model() {
    let server = start(vec![page("first page"), page("second page")]);
    let port = server.url.rsplit(':').next().unwrap().to_string();
    let scratch = Scratch::new();
    scratch.write_config("[tools.web_fetch]\nallow_hosts = [\"127.0.0.1\", \"localhost\"]\n");
    let (one, two) = (format!("{}/one", server.url), format!("{}/two", server.url));
    let three = format!("http://localhost:{port}/three");
    let script = json!({"turns": [
        {"toolCalls": [{"name": "web_fetch", "input": {"url": one}}]},
        {"toolCalls": [{"name": "web_fetch", "input": {"url": two}}]},
        {"toolCalls": [{"name": "web_fetch", "input": {"url": three}}]},
        {"text": "Done."},
    ]});
    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(scratch.replay(script))).await;
    let session = daemon.create_session(scratch.replay_session()).await;
    daemon.send(&session, "read the docs").await;

    let (_, first) = daemon.until_approval().await;
    assert_eq!(
        pending(&daemon, &session).await,
        json!({"tool": "web_fetch", "input": {"url": one}, "proposedRule": "web_fetch(127.0.0.1)"})
    );
    daemon
        .call::<ApprovalRespond>(answer(&first, ApprovalDecision::AllowAlways))
        .await;
    // The second call, to the same host, is not asked: the next approval is the third's.
    let (_, other) = daemon.until_approval().await;
    assert_eq!(
        pending(&daemon, &session).await,
        json!({"tool": "web_fetch", "input": {"url": three}, "proposedRule": "web_fetch(localhost)"})
    );
    daemon
        .call::<ApprovalRespond>(answer(&other, ApprovalDecision::Deny))
        .await;
    daemon.until_finished().await;

    let paths: Vec<String> = server.seen().into_iter().map(|s| s.path).collect();
    assert_eq!(paths, ["/one", "/two"], "the denied page was not fetched");
    // What the model read after each call: the pages, then the denial.
    let told: Vec<Value> = scratch.requests()[1..4]
        .iter()
        .map(|r| r["messages"].as_array().unwrap().last().unwrap()["content"][0].clone())
        .map(|mut result| {
            result.as_object_mut().unwrap().remove("callId");
            result
        })
        .collect();
    let fetched = |path: &str, text: &str| {
        json!({"type": "toolResult", "isError": false,
               "output": format!("{}{path} (200 OK)\n\n{text}", server.url)})
    };
    assert_eq!(
        told,
        [
            fetched("/one", "first page"),
            fetched("/two", "second page"),
            json!({"type": "toolResult", "isError": true,
                   "output": "The user denied this tool call. Do not retry it; ask the user how to proceed if needed."}),
        ]
    );
    daemon.close().await;
}
