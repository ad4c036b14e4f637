//! Server-sent events on top of a streamed HTTP body.
//!
//! Both providers stream their answers as SSE. Parsing (line framing, multi-line `data:`,
//! UTF-8 characters split between network reads) is left to `eventsource-stream`; this module
//! adds what a model stream needs on top: a stall timeout, because a provider that silently
//! stops sending would otherwise hang a run forever, and errors the drivers can classify.

use std::error::Error as StdError;
use std::time::Duration;

use eventsource_stream::{EventStreamError, Eventsource};
use futures::{Stream, StreamExt};

use super::ProviderError;

/// One server-sent event: its type (`message` when the server named none) and its data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    pub event: String,
    pub data: String,
}

/// Why an event stream ended early. Kept apart from [`ProviderError`] so the caller can tell a
/// lost connection (worth a retry before any output) from a malformed stream (not worth one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    #[error("the connection was lost: {0}")]
    Transport(String),
    #[error("the provider sent nothing for {0} seconds")]
    Stalled(u64),
    #[error("the provider sent a malformed event stream: {0}")]
    Malformed(String),
}

impl SseError {
    /// True when the stream failed in transit rather than because of what the provider sent.
    pub fn is_transient(&self) -> bool {
        !matches!(self, Self::Malformed(_))
    }
}

impl From<SseError> for ProviderError {
    fn from(error: SseError) -> Self {
        match error {
            SseError::Stalled(seconds) => ProviderError::Stalled(seconds),
            other => ProviderError::Stream(other.to_string()),
        }
    }
}

/// The events of a streamed HTTP response, failing with [`SseError::Stalled`] when no bytes at
/// all arrive for `stall_timeout`.
pub fn response_events(
    response: reqwest::Response,
    stall_timeout: Duration,
) -> impl Stream<Item = Result<SseEvent, SseError>> + Send {
    events(response.bytes_stream(), stall_timeout)
}

/// Parses any byte stream as SSE; generic so it can be exercised without a network.
pub fn events<S, B, E>(
    bytes: S,
    stall_timeout: Duration,
) -> impl Stream<Item = Result<SseEvent, SseError>> + Send
where
    S: Stream<Item = Result<B, E>> + Send + 'static,
    B: AsRef<[u8]> + Send + 'static,
    E: StdError + Send + 'static,
{
    guard_stalls(bytes, stall_timeout)
        .eventsource()
        .map(|item| match item {
            Ok(event) => Ok(SseEvent {
                event: event.event,
                data: event.data,
            }),
            Err(EventStreamError::Transport(error)) => Err(error),
            Err(EventStreamError::Utf8(error)) => Err(SseError::Malformed(error.to_string())),
            Err(EventStreamError::Parser(error)) => Err(SseError::Malformed(error.to_string())),
        })
}

/// Wraps a byte stream so that waiting longer than `stall_timeout` for the next chunk ends it
/// with an error. The stream also ends after its first error: a body that failed once is not
/// read again.
fn guard_stalls<S, B, E>(
    bytes: S,
    stall_timeout: Duration,
) -> impl Stream<Item = Result<B, SseError>> + Send
where
    S: Stream<Item = Result<B, E>> + Send + 'static,
    B: Send + 'static,
    E: StdError + Send + 'static,
{
    let stalled_after = whole_seconds(stall_timeout);
    futures::stream::unfold(Some(Box::pin(bytes)), move |state| async move {
        let mut bytes = state?;
        match tokio::time::timeout(stall_timeout, bytes.next()).await {
            Ok(Some(Ok(chunk))) => Some((Ok(chunk), Some(bytes))),
            Ok(Some(Err(error))) => Some((Err(SseError::Transport(error_chain(&error))), None)),
            Ok(None) => None,
            Err(_) => Some((Err(SseError::Stalled(stalled_after)), None)),
        }
    })
}

/// Seconds for a user-facing message, never "0 seconds" for a sub-second timeout.
pub fn whole_seconds(duration: Duration) -> u64 {
    let seconds = duration.as_secs();
    if duration.subsec_nanos() > 0 || seconds == 0 {
        seconds + 1
    } else {
        seconds
    }
}

/// An error and its sources on one line. HTTP client errors hide the useful part ("connection
/// reset", "unexpected EOF") in their sources.
pub fn error_chain(error: &dyn StdError) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use std::io;

    use futures::stream;
    use pretty_assertions::assert_eq;

    use super::*;

    fn chunks(parts: &[&[u8]]) -> Vec<Result<Vec<u8>, io::Error>> {
        parts.iter().map(|part| Ok(part.to_vec())).collect()
    }

    async fn collect(
        input: impl Stream<Item = Result<Vec<u8>, io::Error>> + Send + 'static,
    ) -> Vec<Result<SseEvent, SseError>> {
        events(input, Duration::from_secs(5)).collect().await
    }

    fn event(event: &str, data: &str) -> Result<SseEvent, SseError> {
        Ok(SseEvent {
            event: event.into(),
            data: data.into(),
        })
    }

    #[tokio::test]
    async fn parses_named_and_unnamed_events_split_anywhere() {
        let text = "event: ping\ndata: {}\n\n: comment\ndata: {\"a\":\"日本\"}\n\n";
        let bytes = text.as_bytes();
        // Split inside the field name and inside the three-byte character.
        let split_char = text.find('日').unwrap_or(0) + 1;
        let input = chunks(&[&bytes[..3], &bytes[3..split_char], &bytes[split_char..]]);
        assert_eq!(
            collect(stream::iter(input)).await,
            vec![event("ping", "{}"), event("message", "{\"a\":\"日本\"}")]
        );
    }

    #[tokio::test]
    async fn joins_multi_line_data_and_accepts_crlf() {
        let input = chunks(&[b"data: one\r\ndata: two\r\n\r\n"]);
        assert_eq!(
            collect(stream::iter(input)).await,
            vec![event("message", "one\ntwo")]
        );
    }

    #[tokio::test]
    async fn transport_error_ends_the_stream() {
        let input = vec![
            Ok(b"data: a\n\n".to_vec()),
            Err(io::Error::new(
                io::ErrorKind::ConnectionReset,
                "reset by peer",
            )),
            Ok(b"data: b\n\n".to_vec()),
        ];
        assert_eq!(
            collect(stream::iter(input)).await,
            vec![
                event("message", "a"),
                Err(SseError::Transport("reset by peer".into()))
            ]
        );
    }

    #[tokio::test]
    async fn silence_is_a_stall() {
        let input = stream::iter(chunks(&[b"data: a\n\n"])).chain(stream::pending());
        let got: Vec<_> = events(input, Duration::from_millis(50)).collect().await;
        assert_eq!(got, vec![event("message", "a"), Err(SseError::Stalled(1))]);
    }

    #[test]
    fn stall_seconds_round_up() {
        assert_eq!(whole_seconds(Duration::from_millis(10)), 1);
        assert_eq!(whole_seconds(Duration::from_secs(30)), 30);
        assert_eq!(whole_seconds(Duration::from_millis(30_500)), 31);
    }

    #[test]
    fn only_malformed_streams_are_not_transient() {
        assert!(SseError::Transport("x".into()).is_transient());
        assert!(SseError::Stalled(1).is_transient());
        assert!(!SseError::Malformed("x".into()).is_transient());
        assert_eq!(
            ProviderError::from(SseError::Stalled(3)),
            ProviderError::Stalled(3)
        );
    }
}
