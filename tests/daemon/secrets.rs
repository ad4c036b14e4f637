//! API keys never reach the database, the logs or events, even when a provider echoes them.

use sidechat::protocol::{Event, FinishReason, Initialize, InitializeParams, SessionCreateParams};

use crate::harness::{Daemon, Scratch};
use crate::upstream::{Reply, start};

const KEY: &str = "sk-test-DO-NOT-LEAK-4242";

#[tokio::test]
async fn a_key_echoed_by_the_provider_is_redacted_everywhere() {
    let echo = format!(
        r#"{{"error":{{"message":"Incorrect API key provided: {KEY}","type":"invalid_request_error"}}}}"#
    );
    let upstream = start(vec![Reply::status(401, &echo)]);
    let scratch = Scratch::new();
    let log = scratch.dir.path().join("daemon.log");
    let env = vec![
        (
            "OPENAI_BASE_URL",
            format!("{}/v1?token={KEY}", upstream.url),
        ),
        ("OPENAI_API_KEY", KEY.to_string()),
        ("SIDECHAT_LOG", "trace".to_string()),
    ];
    let mut command = crate::harness::command(&scratch.db(), &env);
    command.arg("--log-file").arg(&log);
    let (conn, notes) =
        sidechat::client::Connection::spawn(command, sidechat::rpc::framing::Framing::Line)
            .unwrap();
    let mut daemon = Daemon { conn, notes };
    daemon.call::<Initialize>(InitializeParams::default()).await;
    let session = daemon.create_session(SessionCreateParams::default()).await;
    daemon.send(&session, "hi").await;
    let mut wire = String::new();
    let events = daemon.until_finished().await;
    for event in &events {
        wire.push_str(&serde_json::to_string(event).unwrap());
    }
    let Some(Event::RunFinished { reason, error }) = events.last().map(|e| &e.event) else {
        unreachable!()
    };
    assert_eq!(*reason, FinishReason::Error);
    let error = error.clone().unwrap();
    assert!(error.contains("401"), "{error}");
    daemon.close().await;

    let mut stored = Vec::new();
    for entry in std::fs::read_dir(scratch.db().parent().unwrap())
        .unwrap()
        .flatten()
    {
        stored.extend(std::fs::read(entry.path()).unwrap());
    }
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("401"), "the failure is logged");
    for (place, text) in [
        ("events", wire),
        ("logs", logged),
        ("database", String::from_utf8_lossy(&stored).into_owned()),
    ] {
        assert!(!text.contains(KEY), "the key reached the {place}");
    }
}
