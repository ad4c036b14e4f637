//! Byte-level input through the real binary: what a client may send that a strict reader
//! would refuse, answered as the client meant it (ids compared as the JSON text they were
//! sent as, so `1e2` must come back as `1e2`, not as `100.0`).

use pretty_assertions::assert_eq;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use sidechat::client::read_frames;
use sidechat::protocol::{
    Attachment, ChatSend, ChatSendParams, Exit, Initialize, InitializeParams, Notification,
    Request, SessionCreate, SessionCreateParams, SessionList, SessionListParams, SessionTranscript,
    SessionTranscriptParams, SessionUpdate, Shutdown,
};
use sidechat::rpc::framing::Framing;
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, ChildStdin};
use tokio::sync::mpsc;

use crate::harness::{Scratch, command, say};

/// A guard against a hung daemon, not a performance assertion.
const HANG_GUARD: std::time::Duration = std::time::Duration::from_secs(60);

/// `sidechat serve` spoken to in raw bytes; its frames are kept as the bytes it sent.
pub struct Raw {
    child: Child,
    stdin: ChildStdin,
    frames: mpsc::UnboundedReceiver<Vec<u8>>,
}

/// The parts of an answer a test looks at, with its id as the JSON text it was written as.
#[derive(Debug, Deserialize)]
pub struct Answer {
    id: Option<Box<RawValue>>,
    method: Option<String>,
    result: Option<Value>,
    error: Option<Value>,
}

/// A frame read as `T`, or why it cannot be.
fn parse_frame<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    serde_json::from_slice(bytes).map_err(|e| {
        format!(
            "a frame that is not JSON ({e}): {}",
            String::from_utf8_lossy(bytes)
        )
    })
}

impl Raw {
    pub fn spawn(scratch: &Scratch) -> Self {
        let mut child = command(&scratch.db(), &[])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn sidechat");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, frames) = mpsc::unbounded_channel();
        tokio::spawn(read_frames(stdout, move |bytes| {
            let _ = tx.send(bytes);
        }));
        Self {
            child,
            stdin,
            frames,
        }
    }

    pub async fn write(&mut self, bytes: &[u8]) {
        self.stdin.write_all(bytes).await.unwrap();
        self.stdin.flush().await.unwrap();
    }

    /// The next frame that is not a notification, as the id's JSON text and the frame.
    async fn next_answer(&mut self) -> (String, Answer) {
        self.try_next_answer()
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Raw::next_answer`], or what went wrong: no answer, or a frame that is not JSON.
    pub async fn try_next_answer(&mut self) -> Result<(String, Answer), String> {
        loop {
            let bytes = tokio::time::timeout(HANG_GUARD, self.frames.recv())
                .await
                .map_err(|_| "the daemon did not answer".to_string())?
                .ok_or("the daemon closed its output")?;
            if bytes.first() == Some(&b'[') {
                // A batch's answer: JSON, and never a probe's.
                parse_frame::<Vec<Answer>>(&bytes)?;
                continue;
            }
            let answer: Answer = parse_frame(&bytes)?;
            if answer.method.is_none() {
                let id = answer
                    .id
                    .as_deref()
                    .map_or("null", RawValue::get)
                    .to_string();
                return Ok((id, answer));
            }
        }
    }

    /// The next answer, which must be an error: its id's JSON text and its error code.
    async fn next_error_code(&mut self) -> (String, Value) {
        let (id, answer) = self.next_answer().await;
        let error = answer
            .error
            .unwrap_or_else(|| panic!("answer {id} is not an error: {:?}", answer.result));
        (id, error["code"].clone())
    }

    /// Writes request `M` with `id` framed as `framing` and returns its answer's result,
    /// checking that the answer carries `id` exactly as written.
    pub async fn call<M: Request>(
        &mut self,
        framing: Framing,
        id: &str,
        params: M::Params,
    ) -> Value {
        let method = M::METHOD;
        let params = serde_json::to_value(params).unwrap();
        let request =
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#);
        let mut wire = Vec::new();
        framing.encode(&request, &mut wire);
        self.write(&wire).await;
        let (answered, answer) = self.next_answer().await;
        assert_eq!(answered, id);
        answer
            .result
            .unwrap_or_else(|| panic!("{method} failed: {:?}", answer.error))
    }

    pub async fn exit(mut self, framing: Framing) {
        let mut wire = Vec::new();
        framing.encode(
            &json!({"jsonrpc": "2.0", "id": "bye", "method": Shutdown::METHOD}).to_string(),
            &mut wire,
        );
        self.write(&wire).await;
        let (id, answer) = self.next_answer().await;
        assert_eq!((id.as_str(), answer.error), ("\"bye\"", None));
        wire.clear();
        framing.encode(
            &json!({"jsonrpc": "2.0", "method": Exit::METHOD}).to_string(),
            &mut wire,
        );
        self.write(&wire).await;
        let status = tokio::time::timeout(HANG_GUARD, self.child.wait())
            .await
            .expect("the daemon did not exit")
            .unwrap();
        assert_eq!(status.code(), Some(0));
    }
}

#[tokio::test]
async fn numeric_ids_of_any_json_number_are_answered_as_sent() {
    let scratch = Scratch::new();
    let mut daemon = Raw::spawn(&scratch);
    daemon
        .call::<Initialize>(Framing::Line, "-1", InitializeParams::default())
        .await;
    for id in [
        "-1",
        "1.5",
        "1e2",
        "-0.25E-3",
        "0",
        "18446744073709551616",
        "\"x\\u0079\"",
    ] {
        let listed = daemon
            .call::<SessionList>(
                Framing::Line,
                id,
                SessionListParams {
                    limit: Some(1),
                    ..SessionListParams::default()
                },
            )
            .await;
        assert!(listed["sessions"].is_array(), "{listed}");
    }
    // An error answer carries the id as sent too.
    daemon
        .write(b"{\"jsonrpc\":\"2.0\",\"id\":2.50,\"method\":\"no/such\"}\n")
        .await;
    let (id, code) = daemon.next_error_code().await;
    assert_eq!((id.as_str(), code), ("2.50", json!(-32601)));
    daemon.exit(Framing::Line).await;
}

#[tokio::test]
async fn a_lone_surrogate_is_stored_as_a_replacement_character_and_answered_with_its_id() {
    let scratch = Scratch::new();
    let mut daemon = Raw::spawn(&scratch);
    daemon
        .call::<Initialize>(Framing::Line, "1", InitializeParams::default())
        .await;
    let session = daemon
        .call::<SessionCreate>(Framing::Line, "2", SessionCreateParams::default())
        .await;
    let session = session["id"].as_str().unwrap().to_string();
    // What `JSON.stringify` writes for a string cut inside an emoji; raw here so nothing on
    // the way re-encodes it.
    let method = ChatSend::METHOD;
    let send = format!(
        r#"{{"jsonrpc":"2.0","id":3,"method":"{method}","params":{{"sessionId":"{session}","text":"cut \ud83d here \udE00 and \ud83d\ude00 whole"}}}}"#
    );
    daemon.write(format!("{send}\n").as_bytes()).await;
    let (id, answer) = daemon.next_answer().await;
    assert_eq!(id, "3");
    let message_id = answer.result.expect("the send succeeded")["messageId"].clone();
    let transcript = daemon
        .call::<SessionTranscript>(
            Framing::Line,
            "4",
            SessionTranscriptParams {
                session_id: session.clone(),
                after_seq: None,
                before_seq: None,
                limit: None,
            },
        )
        .await;
    let user = transcript["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|entry| entry["id"] == message_id)
        .unwrap_or_else(|| panic!("the message is stored: {transcript}"));
    assert_eq!(
        user["blocks"][0]["text"],
        json!("cut \u{fffd} here \u{fffd} and 😀 whole")
    );
    // A frame whose body does not parse is still answered with its own id.
    let broken = format!(
        r#"{{"jsonrpc":"2.0","id":"b-5","method":"{method}","params":{{"sessionId":"{session}","text":tru}}}}"#
    );
    daemon.write(format!("{broken}\n").as_bytes()).await;
    let (id, code) = daemon.next_error_code().await;
    assert_eq!((id.as_str(), code), ("\"b-5\"", json!(-32700)));
    // Bytes that are not UTF-8 are read as replacement characters.
    let method = SessionUpdate::METHOD;
    let mut latin1 = format!(
        r#"{{"jsonrpc":"2.0","id":6,"method":"{method}","params":{{"sessionId":"{session}","title":"caf"#
    )
    .into_bytes();
    latin1.extend_from_slice(b"\xe9\"}}\n");
    daemon.write(&latin1).await;
    let (id, answer) = daemon.next_answer().await;
    assert_eq!(id, "6");
    assert_eq!(answer.result.unwrap()["title"], json!("caf\u{fffd}"));
    daemon.exit(Framing::Line).await;
}

#[tokio::test]
async fn headers_ending_in_lf_alone_are_read() {
    let scratch = Scratch::new();
    let mut daemon = Raw::spawn(&scratch);
    let lf = |body: &str| format!("Content-Length: {}\n\n{body}", body.len()).into_bytes();
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": Initialize::METHOD, "params": {}});
    daemon.write(&lf(&initialize.to_string())).await;
    assert_eq!(daemon.next_answer().await.0, "1");
    // Mixed: one header in LF, one in CRLF, and an LF-only blank line after a CRLF line.
    let body =
        json!({"jsonrpc": "2.0", "id": 2, "method": SessionList::METHOD, "params": {}}).to_string();
    let mixed = format!(
        "Content-Type: application/vscode-jsonrpc; charset=utf-8\nContent-Length: {}\r\n\n{body}",
        body.len()
    );
    daemon.write(mixed.as_bytes()).await;
    let (id, answer) = daemon.next_answer().await;
    assert_eq!(id, "2");
    assert!(answer.result.unwrap()["sessions"].is_array());
    daemon.exit(Framing::ContentLength).await;
}

#[tokio::test]
async fn a_content_length_past_the_limit_is_refused_at_once_and_the_next_request_answered() {
    let scratch = Scratch::new();
    let mut daemon = Raw::spawn(&scratch);
    daemon
        .call::<Initialize>(Framing::ContentLength, "1", InitializeParams::default())
        .await;
    for (length, id) in [("18446744073709551615", "2"), ("67108865", "3")] {
        let mut wire = format!("Content-Length: {length}\r\n\r\n").into_bytes();
        Framing::ContentLength.encode(
            &format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"{}","params":{{}}}}"#,
                SessionList::METHOD
            ),
            &mut wire,
        );
        daemon.write(&wire).await;
        let (refused, answer) = daemon.next_answer().await;
        let error = answer.error.expect("an error");
        assert_eq!(
            (refused.as_str(), error["code"].clone()),
            ("null", json!(-32600))
        );
        // The same words as for an oversized line: the answer does not depend on the framing.
        assert_eq!(
            error["message"],
            json!(
                "Message exceeds the limit of 67108864 bytes; it was refused and the rest of it skipped"
            ),
            "{length}"
        );
        let (answered, answer) = daemon.next_answer().await;
        assert_eq!(answered, id);
        assert!(answer.result.unwrap()["sessions"].is_array());
    }
    daemon.exit(Framing::ContentLength).await;
}

#[tokio::test]
async fn a_message_over_the_size_limit_is_refused_naming_the_limit() {
    use crate::harness::{Daemon, Options};
    const LIMIT: usize = sidechat::runtime::MAX_MESSAGE_BYTES;
    let scratch = Scratch::new();
    let mut daemon = Daemon::start(&scratch.db(), Options::default()).await;
    let session = daemon.create_session(SessionCreateParams::default()).await;
    let over = [
        say(&session, &"x".repeat(LIMIT + 1)),
        ChatSendParams {
            attachments: vec![Attachment {
                name: "a.txt".into(),
                text: "y".repeat(LIMIT / 2),
            }],
            ..say(&session, &"x".repeat(LIMIT / 2))
        },
    ];
    for params in over {
        let error = daemon.try_call::<ChatSend>(params).await.unwrap_err();
        assert_eq!(error.code, -32602);
        assert!(
            error.message.contains(&LIMIT.to_string()) && error.message.contains("8 MiB"),
            "{}",
            error.message
        );
    }
    // Nothing was stored, and the session takes a message of ordinary size.
    assert_eq!(daemon.transcript(&session).await["entries"], json!([]));
    daemon.send(&session, "small").await;
    daemon.until_finished().await;
    assert_eq!(daemon.close().await, 0);
}
