//! Two daemons writing one database at full speed: no client ever sees "database is locked",
//! and every acknowledged message is in the transcript exactly once.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::future::{BoxFuture, join_all};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sidechat::client::RpcError;
use sidechat::protocol::{
    ChatSend, ChatSendParams, Request, SessionCreate, SessionCreateParams, SessionGet,
    SessionIdParams, SessionState, SessionUpdate, SessionUpdateParams,
};

use crate::harness::{Daemon, Options, Scratch};

/// Requests each daemon sends, in all; each is at least one write, a send many more.
const REQUESTS: usize = 1500;
/// Requests in flight at once on each connection.
const IN_FLIGHT: usize = 25;
/// Sessions both daemons send to.
const SHARED: usize = 8;

fn options() -> Options<'static> {
    Options::with_env(vec![("SIDECHAT_LEASE_MS", "2000".into())])
}

/// One daemon's share: creates, renames and sends, `IN_FLIGHT` at a time. The texts it sent
/// and had acknowledged, by session.
async fn hammer(daemon: &Daemon, name: &str, shared: &[String]) -> Vec<(String, String)> {
    let mut sent = Vec::new();
    for batch in (0..REQUESTS).collect::<Vec<_>>().chunks(IN_FLIGHT) {
        let calls = batch.iter().map(|&i| {
            let session = shared[i % shared.len()].clone();
            let (method, answer, text): (_, BoxFuture<'_, Result<(), RpcError>>, _) = match i % 3 {
                0 => (
                    SessionCreate::METHOD,
                    Box::pin(async move {
                        daemon
                            .try_call::<SessionCreate>(SessionCreateParams {
                                title: Some(format!("{name} {i}")),
                                ..SessionCreateParams::default()
                            })
                            .await
                            .map(drop)
                    }),
                    None,
                ),
                1 => (
                    SessionUpdate::METHOD,
                    Box::pin(async move {
                        daemon
                            .try_call::<SessionUpdate>(SessionUpdateParams {
                                session_id: session,
                                title: Some(format!("renamed by {name} {i}")),
                                ..SessionUpdateParams::default()
                            })
                            .await
                            .map(drop)
                    }),
                    None,
                ),
                _ => {
                    let text = format!("message {name}-{i}");
                    let params = ChatSendParams {
                        session_id: session.clone(),
                        text: text.clone(),
                        client_message_id: None,
                        attachments: Vec::new(),
                        images: Vec::new(),
                    };
                    (
                        ChatSend::METHOD,
                        Box::pin(
                            async move { daemon.try_call::<ChatSend>(params).await.map(drop) },
                        ),
                        Some((session, text)),
                    )
                }
            };
            async move { (method, answer.await, text) }
        });
        for (method, answer, text) in join_all(calls).await {
            if let Err(e) = &answer {
                panic!("{name}: {method} failed: {e:?}");
            }
            sent.extend(text);
        }
    }
    sent
}

async fn settled(daemon: &Daemon, session: &str) -> bool {
    let state = daemon
        .call::<SessionGet>(SessionIdParams {
            session_id: session.into(),
        })
        .await
        .state;
    state != SessionState::Running
        && daemon.transcript(session).await["pendingInterjections"] == json!([])
}

/// The user's words in a transcript, whether sent as a turn or delivered or promoted from
/// the queue.
fn user_texts(transcript: &Value) -> Vec<String> {
    transcript["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["role"] == "user")
        .flat_map(|e| e["blocks"].as_array().unwrap().clone())
        .filter_map(|b| b["text"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test]
async fn three_thousand_writes_from_two_daemons_reach_no_client_as_a_lock_error() {
    let scratch = Scratch::new();
    let a = Daemon::start(&scratch.db(), options()).await;
    let b = Daemon::start(&scratch.db(), options()).await;
    let mut shared = Vec::new();
    for i in 0..SHARED {
        shared.push(
            a.create_session(SessionCreateParams {
                title: Some(format!("shared {i}")),
                ..SessionCreateParams::default()
            })
            .await,
        );
    }
    let (from_a, from_b) = tokio::join!(hammer(&a, "a", &shared), hammer(&b, "b", &shared));

    // Let every run and queue settle, then count each acknowledged message once.
    for session in &shared {
        let mut polls = 0;
        while !(settled(&a, session).await && settled(&b, session).await) {
            polls += 1;
            assert!(polls < 1200, "session {session} never settled");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let mut expected: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (session, text) in from_a.into_iter().chain(from_b) {
        expected.entry(session).or_default().push(text);
    }
    for session in &shared {
        let transcript = b.transcript(session).await;
        assert_eq!(transcript["hasMore"], json!(false));
        let mut seen = user_texts(&transcript);
        seen.sort();
        let mut sent = expected.remove(session).unwrap_or_default();
        sent.sort();
        assert_eq!(seen, sent, "session {session}");
        assert_eq!(transcript, a.transcript(session).await);
    }
    a.close().await;
    b.close().await;
}
