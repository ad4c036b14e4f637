//! Fuzzing the stream parsers at scale: arbitrary bytes and mutated streams through the SSE
//! reader, and mutated event payloads through each provider's decoder (the OpenAI decoder
//! reads each chunk with its fast reader first, serde after). None may panic, and each ends in
//! events or an error, never a hang. A fixed number of cases from a fixed seed.

use std::time::Duration;

use futures::StreamExt;
use proptest::prelude::*;
use proptest::test_runner::RngSeed;

use super::anthropic::AnthropicDecoder;
use super::openai::OpenAiDecoder;
use super::sse::events;
use super::upstream::decode_all;

#[path = "../../tests/support/byte_edits.rs"]
mod byte_edits;
use byte_edits::{apply, cut, edits};

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        rng_seed: RngSeed::Fixed(18),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Payloads each provider really sends, the material mutations start from.
const ANTHROPIC: &[&str] = &[
    r#"{"type":"message_start","message":{"id":"m","model":"claude","usage":{"input_tokens":12,"cache_read_input_tokens":3}}}"#,
    r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
    r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hé😀 \ud83d"}}"#,
    r#"{"type":"content_block_start","index":1,"content_block":{"type":"thinking","thinking":""}}"#,
    r#"{"type":"content_block_delta","index":1,"delta":{"type":"thinking_delta","thinking":"hmm"}}"#,
    r#"{"type":"content_block_delta","index":1,"delta":{"type":"signature_delta","signature":"sig"}}"#,
    r#"{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"t1","name":"read_file","input":{}}}"#,
    r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"path\":"}}"#,
    r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"\"a.txt\"}"}}"#,
    r#"{"type":"content_block_stop","index":2}"#,
    r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":7}}"#,
    r#"{"type":"message_stop"}"#,
    r#"{"type":"ping"}"#,
    r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
];

const OPENAI: &[&str] = &[
    r#"{"id":"c","object":"chat.completion.chunk","model":"gpt","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
    r#"{"id":"c","choices":[{"index":0,"delta":{"content":"Hé😀 \ud83d \" \\ \n"},"logprobs":null,"finish_reason":null}],"usage":null}"#,
    r#"{"id":"c","choices":[{"index":0,"delta":{"reasoning_content":"think"},"finish_reason":null}]}"#,
    r#"{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"read_file","arguments":""}}]},"finish_reason":null}]}"#,
    r#"{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"path\":\"a\"}"}}]},"finish_reason":null}]}"#,
    r#"{"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
    r#"{"id":"c","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":2}}}"#,
    r#"{"error":{"message":"rate limited","type":"rate_limit"}}"#,
    "[DONE]",
];

/// Payloads picked from `real`, each edited a little (most left whole, so decoders get deep
/// into a stream before the damage).
fn payloads(real: &'static [&'static str]) -> impl Strategy<Value = Vec<String>> {
    let payload = (prop::sample::select(real), edits(0..4)).prop_map(|(text, edits)| {
        String::from_utf8_lossy(&apply(text.as_bytes().to_vec(), &edits)).into_owned()
    });
    prop::collection::vec(payload, 0..16)
}

/// The SSE text of `payloads` (named events for Anthropic), edited as bytes.
fn stream(real: &'static [&'static str]) -> impl Strategy<Value = Vec<u8>> {
    (payloads(real), edits(0..4)).prop_map(|(payloads, edits)| {
        let text: String = payloads
            .iter()
            .map(|p| format!("event: message\ndata: {p}\n\n"))
            .collect();
        apply(text.into_bytes(), &edits)
    })
}

/// Everything the SSE reader yields for `bytes` read in pieces cut at `cuts`.
fn read_events(bytes: &[u8], cuts: &[prop::sample::Index]) -> usize {
    let chunks = cut(bytes, cuts).into_iter().map(Ok::<_, std::io::Error>);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    runtime
        .block_on(events(futures::stream::iter(chunks), Duration::from_secs(5)).collect::<Vec<_>>())
        .len()
}

proptest! {
    #![proptest_config(config(3_000))]

    #[test]
    fn the_sse_reader_survives_any_bytes(
        bytes in prop::collection::vec(any::<u8>(), 0..512),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
    ) {
        read_events(&bytes, &cuts);
    }

    #[test]
    fn the_sse_reader_survives_damaged_streams(
        bytes in prop_oneof![stream(ANTHROPIC), stream(OPENAI)],
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
    ) {
        read_events(&bytes, &cuts);
    }

    #[test]
    fn the_anthropic_decoder_survives_damaged_events(events in payloads(ANTHROPIC)) {
        let events: Vec<&str> = events.iter().map(String::as_str).collect();
        let _ = decode_all::<AnthropicDecoder>("message", &events);
    }

    #[test]
    fn the_openai_decoder_survives_damaged_chunks(chunks in payloads(OPENAI)) {
        let chunks: Vec<&str> = chunks.iter().map(String::as_str).collect();
        let _ = decode_all::<OpenAiDecoder>("message", &chunks);
    }
}
