//! Images sent with a message: checked before anything is stored, stored once by content,
//! shown by reference, read back by `session/image`, counted in the budget and sent in each
//! provider's own shape.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sidechat::protocol::{
    ApprovalDecision, ChatResume, ChatSend, ChatSendParams, Event, ImageInput, SessionBudget,
    SessionCreateParams, SessionDelete, SessionDeleteResult, SessionFork, SessionForkParams,
    SessionImage, SessionImageParams, SessionImageResult, ToolCallStatus,
};

use crate::harness::{Daemon, Options, Scratch, answer, say, sid};
use crate::upstream::{Reply, anthropic, openai, start};

/// A PNG of `width` × `height`: its signature and header chunk, all a header reader reads.
pub fn png(width: u32, height: u32) -> Vec<u8> {
    let mut bytes = vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a];
    bytes.extend(13u32.to_be_bytes());
    bytes.extend(b"IHDR");
    bytes.extend(width.to_be_bytes());
    bytes.extend(height.to_be_bytes());
    bytes.extend([8, 6, 0, 0, 0, 0, 0, 0, 0]);
    bytes
}

fn image(media_type: &str, bytes: &[u8]) -> ImageInput {
    ImageInput {
        media_type: media_type.into(),
        data: STANDARD.encode(bytes),
    }
}

fn with_images(session: &str, text: &str, images: Vec<ImageInput>) -> ChatSendParams {
    ChatSendParams {
        images,
        ..say(session, text)
    }
}

pub fn sha256(bytes: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The user entries' blocks of a session's transcript.
async fn user_blocks(daemon: &Daemon, session: &str) -> Vec<Value> {
    let transcript = daemon.transcript(session).await;
    transcript["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["role"] == "user")
        .map(|e| e["blocks"].clone())
        .collect()
}

#[tokio::test]
async fn an_image_is_stored_once_shown_by_reference_read_back_and_sent_to_the_model() {
    let scratch = Scratch::new();
    let script = json!({"turns": [{"text": "A chart."}, {"text": "Still a chart."}]});
    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(scratch.replay(script))).await;
    let session = daemon.create_session(scratch.replay_session()).await;
    let bytes = png(640, 480);
    let id = sha256(&bytes);
    for text in ["What is this?", "And now?"] {
        daemon
            .call::<ChatSend>(with_images(
                &session,
                text,
                vec![image("image/png", &bytes)],
            ))
            .await;
        daemon.until_finished().await;
    }
    let reference = json!({"type": "image", "imageId": id, "mediaType": "image/png",
                           "width": 640, "height": 480, "bytes": bytes.len()});
    assert_eq!(
        user_blocks(&daemon, &session).await,
        vec![
            json!([{"type": "text", "text": "What is this?"}, reference]),
            json!([{"type": "text", "text": "And now?"}, reference]),
        ]
    );
    assert_eq!(
        daemon
            .call::<SessionImage>(SessionImageParams {
                session_id: session.clone(),
                image_id: id.clone(),
            })
            .await,
        SessionImageResult {
            media_type: "image/png".into(),
            data: STANDARD.encode(&bytes),
        }
    );
    // Another session cannot read it, nor can an id that is no image.
    let other = daemon.create_session(scratch.replay_session()).await;
    for (session_id, image_id) in [(other.as_str(), id.as_str()), (&session, "nope")] {
        let refused = daemon
            .try_call::<SessionImage>(SessionImageParams {
                session_id: session_id.into(),
                image_id: image_id.into(),
            })
            .await
            .unwrap_err();
        assert!(
            refused.message.contains("no image in this session"),
            "{refused:?}"
        );
    }
    // The model got the bytes with the second request's last user message.
    let requests = scratch.requests();
    let last = requests[1]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        last["content"],
        json!([{"type": "text", "text": "And now?"},
               {"type": "image", "imageId": id, "mediaType": "image/png", "width": 640,
                "height": 480, "data": STANDARD.encode(&bytes)}])
    );
    // Two 640 × 480 images by OpenAI's formula (the scripted model is not Claude): two tiles,
    // 85 + 2 × 170 each.
    let budget = daemon.call::<SessionBudget>(sid(&session)).await;
    assert_eq!(budget.snapshot.image_tokens, 2 * 425);
    // Stored once.
    let conn = rusqlite::Connection::open(scratch.db()).unwrap();
    let stored: i64 = conn
        .query_row("SELECT count(*) FROM images", [], |r| r.get(0))
        .unwrap();
    assert_eq!(stored, 1);
    daemon.close().await;
}

#[tokio::test]
async fn bad_images_are_refused_naming_the_image_and_the_limit_and_nothing_is_stored() {
    let scratch = Scratch::new();
    let mut daemon = Daemon::start(&scratch.db(), Options::default()).await;
    let session = daemon.create_session(SessionCreateParams::default()).await;
    let good = image("image/png", &png(10, 10));
    let cases = [
        (
            vec![
                good.clone(),
                ImageInput {
                    media_type: "image/png".into(),
                    data: "%%%".into(),
                },
            ],
            "image 1: its data is not valid base64",
        ),
        (
            vec![image("image/jpeg", &png(10, 10))],
            "image 0: declared image/jpeg but the data is image/png",
        ),
        (
            vec![image("image/svg+xml", b"<svg/>")],
            "image 0: media type \"image/svg+xml\" is not accepted",
        ),
        (
            vec![
                good.clone(),
                image("image/png", &vec![0; 5 * 1024 * 1024 + 1]),
            ],
            "image 1: 5242881 bytes, over the limit of 5242880 bytes (5 MiB) per image",
        ),
        (
            vec![good.clone(); 21],
            "the message has 21 images, over the limit of 20 per message",
        ),
    ];
    for (images, expected) in cases {
        let refused = daemon
            .try_call::<ChatSend>(with_images(&session, "look", images))
            .await
            .unwrap_err();
        assert_eq!(refused.code, -32602, "{refused:?}");
        assert!(refused.message.contains(expected), "{refused:?}");
    }
    assert_eq!(user_blocks(&daemon, &session).await, Vec::<Value>::new());
    let conn = rusqlite::Connection::open(scratch.db()).unwrap();
    let stored: i64 = conn
        .query_row("SELECT count(*) FROM images", [], |r| r.get(0))
        .unwrap();
    assert_eq!(stored, 0);
    // Nothing was lost: the same session takes a good message afterwards.
    daemon
        .call::<ChatSend>(with_images(&session, "look", vec![good]))
        .await;
    daemon.until_finished().await;
    daemon.close().await;
}

fn openai_env(url: &str, model: &str) -> Vec<(&'static str, String)> {
    vec![
        ("OPENAI_BASE_URL", format!("{url}/v1")),
        ("OPENAI_API_KEY", "sk-test".into()),
        ("SIDECHAT_OPENAI_MODEL", model.into()),
    ]
}

#[tokio::test]
async fn a_model_without_image_input_is_refused_by_name_before_anything_is_sent() {
    let upstream = start(Vec::new());
    let scratch = Scratch::new();
    let daemon = Daemon::start(
        &scratch.db(),
        Options::with_env(openai_env(&upstream.url, "gpt-3.5-turbo")),
    )
    .await;
    let session = daemon.create_session(SessionCreateParams::default()).await;
    let refused = daemon
        .try_call::<ChatSend>(with_images(
            &session,
            "look",
            vec![image("image/png", &png(10, 10))],
        ))
        .await
        .unwrap_err();
    assert_eq!(refused.code, -32602);
    assert!(
        refused
            .message
            .contains("the model gpt-3.5-turbo does not accept images"),
        "{refused:?}"
    );
    assert_eq!(upstream.bodies(), Vec::<Value>::new());
    assert_eq!(user_blocks(&daemon, &session).await, Vec::<Value>::new());
    daemon.close().await;
}

/// Sends "What is it?" with the PNG `bytes` and waits for the run; the last message of the
/// first request the upstream got.
async fn ask_about_png(
    daemon: &mut Daemon,
    upstream: &crate::upstream::Upstream,
    session: &str,
    bytes: &[u8],
) -> Value {
    daemon
        .call::<ChatSend>(with_images(
            session,
            "What is it?",
            vec![image("image/png", bytes)],
        ))
        .await;
    daemon.until_finished().await;
    let body = &upstream.bodies()[0];
    body["messages"].as_array().unwrap().last().unwrap().clone()
}

#[tokio::test]
async fn openai_is_sent_image_url_parts_with_a_data_url() {
    let upstream = start(vec![Reply::sse(&openai::text(&["A cat."], 900, 3))]);
    let scratch = Scratch::new();
    let mut daemon = Daemon::start(
        &scratch.db(),
        Options::with_env(openai_env(&upstream.url, "gpt-4o")),
    )
    .await;
    let session = daemon.create_session(SessionCreateParams::default()).await;
    let bytes = png(1024, 1024);
    let last = ask_about_png(&mut daemon, &upstream, &session, &bytes).await;
    assert_eq!(
        last,
        json!({"role": "user", "content": [
            {"type": "text", "text": "What is it?"},
            {"type": "image_url", "image_url": {
                "url": format!("data:image/png;base64,{}", STANDARD.encode(&bytes)),
                "detail": "high"}},
        ]})
    );
    // 1024 × 1024 at high detail: scaled to 768 × 768, four tiles.
    let budget = daemon.call::<SessionBudget>(sid(&session)).await;
    assert_eq!(budget.snapshot.image_tokens, 765);
    daemon.close().await;
}

#[tokio::test]
async fn anthropic_is_sent_image_blocks_with_a_base64_source() {
    let upstream = start(vec![Reply::anthropic(&anthropic::text(
        &["A cat."],
        900,
        3,
    ))]);
    let scratch = Scratch::new();
    let env = vec![
        ("ANTHROPIC_BASE_URL", upstream.url.clone()),
        ("ANTHROPIC_API_KEY", "x".into()),
        ("SIDECHAT_ANTHROPIC_MODEL", "claude-sonnet-4-5".into()),
    ];
    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(env)).await;
    let session = daemon.create_session(SessionCreateParams::default()).await;
    let bytes = png(1092, 1092);
    let last = ask_about_png(&mut daemon, &upstream, &session, &bytes).await;
    assert_eq!(
        last,
        json!({"role": "user", "content": [
            {"type": "text", "text": "What is it?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": STANDARD.encode(&bytes)},
             "cache_control": {"type": "ephemeral"}},
        ]})
    );
    // 1092 × 1092 is sent unscaled: 1092² / 750, rounded up.
    let budget = daemon.call::<SessionBudget>(sid(&session)).await;
    assert_eq!(budget.snapshot.image_tokens, 1590);
    daemon.close().await;
}

#[tokio::test]
async fn read_file_of_a_png_gives_a_model_that_reads_images_the_image() {
    let scratch = Scratch::new();
    let bytes = png(320, 200);
    std::fs::write(scratch.workspace().join("shot.png"), &bytes).unwrap();
    let script = json!({"turns": [
        {"toolCalls": [{"name": "read_file", "input": {"path": "shot.png"}}]},
        {"text": "A small picture."},
    ]});
    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(scratch.replay(script))).await;
    let session = daemon.create_session(scratch.replay_session()).await;
    daemon.send(&session, "look at shot.png").await;
    daemon.until_finished().await;
    let requests = scratch.requests();
    let last = requests[1]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    let call_id = last["content"][0]["callId"].clone();
    assert_eq!(
        last["content"],
        json!([
            {"type": "toolResult", "callId": call_id, "isError": false,
             "output": "shot.png is an image (image/png, 320×200, 33 bytes). It is attached to this result."},
            {"type": "image", "imageId": sha256(&bytes), "mediaType": "image/png",
             "width": 320, "height": 200, "data": STANDARD.encode(&bytes)},
        ])
    );
    daemon.close().await;
}

#[tokio::test]
async fn read_file_of_a_png_tells_a_text_only_model_in_words() {
    let call = openai::chunk(
        json!({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_1", "type": "function",
            "function": {"name": "read_file", "arguments": "{\"path\":\"shot.png\"}"}}]}),
        None,
    );
    let upstream = start(vec![
        Reply::sse(&[
            call,
            openai::chunk(json!({}), Some("tool_calls")),
            openai::usage(50, 0, 5),
        ]),
        Reply::sse(&openai::text(&["Noted."], 60, 2)),
    ]);
    let scratch = Scratch::new();
    std::fs::write(scratch.workspace().join("shot.png"), png(320, 200)).unwrap();
    let mut daemon = Daemon::start(
        &scratch.db(),
        Options::with_env(openai_env(&upstream.url, "gpt-3.5-turbo")),
    )
    .await;
    let session = daemon
        .create_session(SessionCreateParams {
            workspace_root: Some(scratch.workspace().display().to_string()),
            ..SessionCreateParams::default()
        })
        .await;
    daemon.send(&session, "look at shot.png").await;
    daemon.until_finished().await;
    let second = &upstream.bodies()[1];
    let tools: Vec<&Value> = second["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert_eq!(
        tools,
        vec![&json!({"role": "tool", "tool_call_id": "call_1",
               "content": "shot.png is an image (image/png, 320×200, 33 bytes). The model gpt-3.5-turbo does not read images, so it is not attached."})]
    );
    assert!(!second.to_string().contains("image_url"), "{second}");
    daemon.close().await;
}

/// The ids of the stored images, sorted.
fn stored_images(scratch: &Scratch) -> Vec<String> {
    let conn = rusqlite::Connection::open(scratch.db()).unwrap();
    let mut stmt = conn.prepare("SELECT id FROM images ORDER BY id").unwrap();
    stmt.query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn sorted(mut ids: Vec<String>) -> Vec<String> {
    ids.sort();
    ids
}

#[tokio::test]
async fn deleting_a_session_deletes_the_images_only_it_referred_to() {
    let scratch = Scratch::new();
    let script = json!({"turns": [{"text": "One."}, {"text": "Two."}, {"text": "Three."}]});
    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(scratch.replay(script))).await;
    let (shared, forked, own) = (png(10, 10), png(20, 20), png(30, 30));
    let ids = [sha256(&shared), sha256(&forked), sha256(&own)];
    let gone = daemon.create_session(scratch.replay_session()).await;
    let other = daemon.create_session(scratch.replay_session()).await;
    let sends = [
        (&gone, vec![&shared, &forked]),
        (&other, vec![&shared]),
        (&gone, vec![&own]),
    ];
    let mut fork = String::new();
    for (turn, (session, images)) in sends.into_iter().enumerate() {
        let images = images.into_iter().map(|b| image("image/png", b)).collect();
        daemon
            .call::<ChatSend>(with_images(session, "look", images))
            .await;
        daemon.until_finished().await;
        if turn == 0 {
            // The fork holds the first turn: `shared` and `forked`, not `own`.
            fork = daemon
                .call::<SessionFork>(SessionForkParams {
                    session_id: gone.clone(),
                    message_id: None,
                })
                .await
                .id;
        }
    }
    assert_eq!(stored_images(&scratch), sorted(ids.to_vec()));

    let deleted = daemon.call::<SessionDelete>(sid(&gone)).await;
    assert_eq!(deleted, SessionDeleteResult { deleted: true });
    assert_eq!(
        stored_images(&scratch),
        sorted(vec![ids[0].clone(), ids[1].clone()]),
        "the other session's and the fork's images stay"
    );
    let read = daemon
        .call::<SessionImage>(SessionImageParams {
            session_id: fork.clone(),
            image_id: ids[1].clone(),
        })
        .await;
    assert_eq!(read.data, STANDARD.encode(&forked));

    daemon.call::<SessionDelete>(sid(&fork)).await;
    assert_eq!(stored_images(&scratch), vec![ids[0].clone()]);
    daemon.call::<SessionDelete>(sid(&other)).await;
    assert_eq!(stored_images(&scratch), Vec::<String>::new());
    daemon.close().await;
}

#[tokio::test]
async fn a_read_file_image_is_still_sent_after_a_kill_before_the_next_request() {
    let scratch = Scratch::new();
    let bytes = png(320, 200);
    std::fs::write(scratch.workspace().join("shot.png"), &bytes).unwrap();
    // The image is read; the command beside it is still running when the daemon is killed,
    // so the tool message was not written yet.
    let script = json!({"turns": [
        {"toolCalls": [
            {"name": "read_file", "input": {"path": "shot.png"}},
            {"name": "run_command", "input": {"command": "sleep 30", "sandbox": false}},
        ]},
        {"text": "A small picture."},
    ]});
    let mut daemon = Daemon::start(
        &scratch.db(),
        Options::with_env(scratch.replay(script.clone())),
    )
    .await;
    let session = daemon.create_session(scratch.replay_session()).await;
    daemon.send(&session, "look at shot.png").await;
    let (_, approval) = daemon.until_approval().await;
    daemon
        .call::<sidechat::protocol::ApprovalRespond>(answer(&approval, ApprovalDecision::Allow))
        .await;
    daemon
        .events_until(|e| {
            matches!(
                e,
                Event::ToolCallUpdated {
                    status: ToolCallStatus::Running,
                    ..
                }
            )
        })
        .await;
    daemon.process().kill().await.unwrap();

    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(scratch.replay(script))).await;
    daemon.call::<ChatResume>(sid(&session)).await;
    daemon.until_finished().await;
    let requests = scratch.requests();
    let tool = requests[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["content"][0]["type"] == "toolResult")
        .unwrap_or_else(|| panic!("no tool results in {}", requests[1]))
        .clone();
    let read_id = tool["content"][0]["callId"].clone();
    let command_id = tool["content"][1]["callId"].clone();
    assert_eq!(
        tool["content"],
        json!([
            {"type": "toolResult", "callId": read_id, "isError": false,
             "output": "shot.png is an image (image/png, 320×200, 33 bytes). It is attached to this result."},
            {"type": "toolResult", "callId": command_id, "isError": true,
             "output": "Interrupted: sidechat stopped before this tool call finished, so its outcome is unknown."},
            {"type": "image", "imageId": sha256(&bytes), "mediaType": "image/png",
             "width": 320, "height": 200, "data": STANDARD.encode(&bytes)},
        ])
    );
    daemon.close().await;
}
