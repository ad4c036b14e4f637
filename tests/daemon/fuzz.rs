//! Fuzzing through the real binary. The frame reader: hostile byte streams (mutated requests,
//! odd ids, lone surrogates, random bytes, lying and oversized lengths, batches) written to one
//! daemon, each followed by a probe request that must be answered with its id; every frame the
//! daemon writes must be JSON. The stream parsers: damaged provider streams each answer a run,
//! which must end, after which the daemon answers. A fixed number of cases from a fixed seed,
//! so a run of `cargo test` is repeatable (the parsers are fuzzed at a larger scale in process,
//! in `provider::fuzz` and the framing's property tests).

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};
use sidechat::protocol::{
    CancelRequest, ChatStop, Event, Exit, Initialize, InitializeParams, InterjectionCancel,
    Notification, Request, SessionBudget, SessionCreateParams, SessionGet, SessionList,
    SessionListParams, SessionTranscript, Shutdown,
};
use sidechat::rpc::framing::Framing;

use crate::byte_edits::{apply, cut, edits};
use crate::bytes::Raw;
use crate::harness::{Daemon, Options, Scratch, json_of, sid};
use crate::upstream::{Part, Reply, anthropic, openai, start};

/// Cases per framing: 1,500 byte streams of up to five pieces each.
const CASES: u32 = 1_500;

/// A well-formed request or notification, with an id of any kind (some invalid) and text that
/// holds escapes, lone surrogates and characters of every width.
fn request() -> impl Strategy<Value = String> {
    let method = prop::sample::select(vec![
        SessionList::METHOD,
        SessionGet::METHOD,
        SessionTranscript::METHOD,
        SessionBudget::METHOD,
        InterjectionCancel::METHOD,
        "no/such",
        Initialize::METHOD,
        CancelRequest::METHOD,
        "",
    ]);
    let id = prop::sample::select(vec![
        "1",
        "-1",
        "1.5",
        "1e2",
        "-0.0",
        "18446744073709551616",
        "\"a\"",
        "\"\\ud83d\"",
        "null",
        "true",
        "{}",
        "[]",
    ]);
    let text = prop::sample::select(vec![
        "",
        "plain",
        "\\ud83d",
        "\\ude00 x",
        "\\ud83d\\ude00",
        "\\\\ud83d",
        "é😀",
        "\\u0000",
        "\\\"",
    ]);
    (method, prop::option::of(id), prop::collection::vec(text, 0..3)).prop_map(
        |(method, id, text)| {
            let id = id.map(|id| format!(r#""id":{id},"#)).unwrap_or_default();
            let text = text.concat();
            format!(
                r#"{{"jsonrpc":"2.0",{id}"method":"{method}","params":{{"sessionId":"ses_{text}","limit":1,"pendingId":"{text}","id":1}}}}"#
            )
        },
    )
}

/// A frame body: a request as written, a request edited at random, a batch, or random bytes.
fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        request().prop_map(String::into_bytes),
        (request(), edits(1..6)).prop_map(|(r, edits)| apply(r.into_bytes(), &edits)),
        prop::collection::vec(request(), 0..4)
            .prop_map(|r| format!("[{}]", r.join(",")).into_bytes()),
        prop::collection::vec(any::<u8>(), 0..64),
    ]
    // Ending the connection or the lifecycle is not what is being probed.
    .prop_filter("no exit or shutdown", |b| {
        let holds = |name: &str| b.windows(name.len()).any(|w| w == name.as_bytes());
        !holds(Exit::METHOD) && !holds(Shutdown::METHOD)
    })
}

/// One line: a body without line breaks, or a blank line.
fn line() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => body().prop_map(|mut b| {
            b.retain(|&c| c != b'\n');
            b.push(b'\n');
            b
        }),
        1 => Just(b"\r\n".to_vec()),
    ]
}

/// One `Content-Length` frame with headers in any case, CRLF or LF, extra headers, and a
/// length that is exact or short (the rest reads as garbage); or a length past the limit with
/// no body; or header lines that are not a frame.
fn frame() -> impl Strategy<Value = Vec<u8>> {
    let name = prop::sample::select(vec!["Content-Length", "content-length", "CONTENT-LENGTH"]);
    let end = prop::sample::select(vec!["\r\n", "\n"]);
    let extra = prop::option::of(Just(
        "Content-Type: application/vscode-jsonrpc; charset=utf-8",
    ));
    prop_oneof![
        4 => (name, end, extra, body(), 0usize..3).prop_map(|(name, end, extra, body, short)| {
            let mut wire = Vec::new();
            if let Some(extra) = extra {
                wire.extend_from_slice(format!("{extra}{end}").as_bytes());
            }
            let len = body.len().saturating_sub(short);
            wire.extend_from_slice(format!("{name}: {len}{end}{end}").as_bytes());
            wire.extend_from_slice(&body);
            wire
        }),
        1 => prop::sample::select(vec!["67108865", "18446744073709551615", "99999999999999999999999"])
            .prop_map(|len| format!("Content-Length: {len}\r\n\r\n").into_bytes()),
        1 => "[A-Za-z-]{0,12}(: [ -~]{0,12})?\r\n\r\n".prop_map(String::into_bytes),
    ]
}

/// Writes each case's bytes and then a probe to one daemon; the probe must be answered.
fn run(framing: Framing, piece: BoxedStrategy<Vec<u8>>) {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let scratch = Scratch::new();
    let daemon = tokio.block_on(async {
        let mut daemon = Raw::spawn(&scratch);
        daemon
            .call::<Initialize>(framing, "0", InitializeParams::default())
            .await;
        daemon
    });
    let mut runner = TestRunner::new(Config {
        cases: CASES,
        rng_seed: RngSeed::Fixed(18),
        failure_persistence: None,
        // A daemon that failed once is not a fresh one to shrink against.
        max_shrink_iters: 0,
        ..Config::default()
    });
    let daemon = std::cell::RefCell::new(daemon);
    let probe = std::cell::Cell::new(0u64);
    let outcome = runner.run(&prop::collection::vec(piece, 1..6), |pieces| {
        probe.set(probe.get() + 1);
        let id = format!("\"probe-{}\"", probe.get());
        let mut daemon = daemon.borrow_mut();
        let request = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"{}","params":{{"limit":1}}}}"#,
            SessionList::METHOD
        );
        let mut wire = pieces.concat();
        framing.encode(&request, &mut wire);
        tokio.block_on(async {
            daemon.write(&wire).await;
            loop {
                match daemon.try_next_answer().await {
                    Ok((answered, _)) if answered == id => return Ok(()),
                    Ok(_) => {}
                    Err(e) => {
                        return Err(TestCaseError::fail(format!(
                            "{e} after {}",
                            String::from_utf8_lossy(&wire)
                        )));
                    }
                }
            }
        })
    });
    if let Err(e) = outcome {
        panic!("{e}");
    }
    tokio.block_on(daemon.into_inner().exit(framing));
}

#[test]
fn hostile_lines_never_stop_the_daemon_answering() {
    run(Framing::Line, line().boxed());
}

#[test]
fn hostile_content_length_frames_never_stop_the_daemon_answering() {
    run(Framing::ContentLength, frame().boxed());
}

/// A provider's stream, as its SSE text, damaged by a few byte edits and cut into HTTP chunks
/// at random points.
fn damaged_stream(events: Vec<String>) -> impl Strategy<Value = Vec<Part>> {
    let text = events.concat().into_bytes();
    (
        edits(0..4),
        prop::collection::vec(any::<prop::sample::Index>(), 0..6),
    )
        .prop_map(move |(edits, cuts)| {
            let bytes = apply(text.clone(), &edits);
            cut(&bytes, &cuts).into_iter().map(Part::Bytes).collect()
        })
}

fn openai_stream() -> Vec<String> {
    let mut chunks = openai::text(&["Hé😀 ", "\u{fffd}", "\" \\ \n"], 12, 4);
    chunks.insert(
        1,
        openai::chunk(serde_json::json!({"reasoning_content": "think"}), None),
    );
    let mut events: Vec<String> = chunks.iter().map(openai::event).collect();
    events.push(openai::DONE.to_string());
    events
}

fn anthropic_stream() -> Vec<String> {
    anthropic::text(&["Hé😀 ", "\" \\ \n", "done"], 12, 4)
        .iter()
        .map(anthropic::event)
        .collect()
}

/// Damaged provider streams answer one run each; whatever the run makes of its stream, it
/// ends, and the daemon then answers a request.
#[tokio::test]
async fn damaged_provider_streams_end_their_run_and_the_daemon_answers() {
    const STREAMS: usize = 40;
    let mut runner = TestRunner::new(Config {
        rng_seed: RngSeed::Fixed(18),
        ..Config::default()
    });
    let mut replies = Vec::new();
    let mut accounts = Vec::new();
    for case in 0..STREAMS {
        let (account, stream) = match case % 2 {
            0 => ("openai", damaged_stream(openai_stream()).boxed()),
            _ => ("anthropic", damaged_stream(anthropic_stream()).boxed()),
        };
        let parts = stream.new_tree(&mut runner).unwrap().current();
        replies.push(Reply::parts(parts));
        accounts.push(account);
    }
    let upstream = start(replies);
    let scratch = Scratch::new();
    let env = vec![
        ("OPENAI_BASE_URL", format!("{}/v1", upstream.url)),
        ("OPENAI_API_KEY", "sk-test".to_string()),
        ("SIDECHAT_OPENAI_MODEL", "gpt-test".to_string()),
        ("ANTHROPIC_BASE_URL", upstream.url.clone()),
        ("ANTHROPIC_API_KEY", "sk-ant-test".to_string()),
        ("SIDECHAT_ANTHROPIC_MODEL", "claude-test".to_string()),
        // One request per run, so each run reads the stream meant for it.
        ("SIDECHAT_MAX_RETRIES", "0".to_string()),
    ];
    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(env)).await;
    for (case, account) in accounts.iter().enumerate() {
        let session = daemon
            .create_session(SessionCreateParams {
                account: Some(account.to_string()),
                max_steps: Some(1),
                ..SessionCreateParams::default()
            })
            .await;
        daemon.send(&session, &format!("case {case}")).await;
        let events = daemon
            .events_until(|e| {
                matches!(
                    e,
                    Event::RunFinished { .. } | Event::ApprovalRequested { .. }
                )
            })
            .await;
        if matches!(
            events.last().map(|e| &e.event),
            Some(Event::ApprovalRequested { .. })
        ) {
            daemon.call::<ChatStop>(sid(&session)).await;
            daemon.until_finished().await;
        }
        let listed = json_of(
            daemon
                .call::<SessionList>(SessionListParams {
                    limit: Some(1),
                    ..SessionListParams::default()
                })
                .await,
        );
        assert!(listed["sessions"].is_array(), "case {case}: {listed}");
    }
    assert_eq!(daemon.close().await, 0);
}
