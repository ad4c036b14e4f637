//! Server-sent events on top of a streamed HTTP body.
//!
//! Both providers stream their answers as SSE. The parser here follows the HTML spec's event
//! stream format (line framing with LF, CR or CRLF, comments, multi-line `data:`, a leading
//! byte order mark, UTF-8 characters split between network reads) and does work in proportion
//! to the bytes received, however many events one network read carries. On top of that comes
//! what a model stream needs: a stall timeout, because a provider that silently stops sending
//! would otherwise hang a run forever, and errors the drivers can classify.

use std::borrow::Cow;
use std::error::Error as StdError;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::{Stream, StreamExt};

use super::ProviderError;

/// One server-sent event: its type (`message` when the server named none) and its data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// Borrowed for the default type, which OpenAI-style streams use for every event.
    pub event: Cow<'static, str>,
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
    Events {
        chunks: Some(Box::pin(guard_stalls(bytes, stall_timeout))),
        parser: Parser::default(),
    }
}

/// The event stream over a byte stream. Polled by hand rather than built from a generic
/// `unfold`, which would move the parser in and out of a new future for every event.
struct Events<C> {
    /// `None` once the bytes have ended or failed.
    chunks: Option<Pin<Box<C>>>,
    parser: Parser,
}

impl<C, B> Stream for Events<C>
where
    C: Stream<Item = Result<B, SseError>>,
    B: AsRef<[u8]>,
{
    type Item = Result<SseEvent, SseError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        // Every field is `Unpin`: the byte stream is boxed.
        let this = self.get_mut();
        loop {
            // Every complete event already received goes out before the next read.
            if let Some(event) = this.parser.next_event() {
                return Poll::Ready(Some(Ok(event)));
            }
            let Some(chunks) = this.chunks.as_mut() else {
                return Poll::Ready(None);
            };
            match chunks.as_mut().poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(chunk))) => this.parser.push(chunk.as_ref()),
                Poll::Ready(Some(Err(error))) => {
                    this.chunks = None;
                    return Poll::Ready(Some(Err(error)));
                }
                Poll::Ready(None) => {
                    this.chunks = None;
                    return Poll::Ready(this.parser.finish().map(Err));
                }
            }
        }
    }
}

const BOM: &[u8] = "\u{feff}".as_bytes();

/// The event stream parser: bytes in, events out.
#[derive(Debug, Default)]
struct Parser {
    /// Received bytes not yet parsed into lines (from `parsed` on).
    buffer: Vec<u8>,
    parsed: usize,
    /// `buffer[..checked]` is valid UTF-8; what follows is a character still arriving.
    checked: usize,
    /// Past the start of the stream, where a byte order mark may stand.
    started: bool,
    /// The event being assembled: its type and its data lines, each followed by LF.
    event: String,
    data: String,
    /// The stream held bytes that are not UTF-8: nothing after them is parsed, and the error
    /// is reported when the stream ends.
    invalid: Option<String>,
}

impl Parser {
    fn push(&mut self, chunk: &[u8]) {
        if self.invalid.is_some() || chunk.is_empty() {
            return;
        }
        // Parsed bytes are dropped once per read, not once per line.
        if self.parsed > 0 {
            self.buffer.drain(..self.parsed);
            self.checked -= self.parsed;
            self.parsed = 0;
        }
        self.buffer.extend_from_slice(chunk);
        if !self.started {
            let head = &self.buffer[..self.buffer.len().min(BOM.len())];
            if head.len() < BOM.len() && BOM.starts_with(head) {
                // Too early to tell a byte order mark from text.
                return;
            }
            self.started = true;
            if head == BOM {
                self.buffer.drain(..BOM.len());
            }
        }
        match std::str::from_utf8(&self.buffer[self.checked..]) {
            Ok(_) => self.checked = self.buffer.len(),
            Err(error) => {
                self.checked += error.valid_up_to();
                if error.error_len().is_some() {
                    self.invalid = Some(utf8_problem(&self.buffer[self.checked..]));
                }
            }
        }
    }

    /// The next complete event among the bytes received so far.
    fn next_event(&mut self) -> Option<SseEvent> {
        loop {
            let rest = &self.buffer[self.parsed..self.checked];
            let end = memchr::memchr2(b'\n', b'\r', rest)?;
            let eol = match (rest[end], rest.get(end + 1)) {
                (b'\r', Some(b'\n')) => 2,
                // A CR ending what arrived may be the first half of a CRLF.
                (b'\r', None) => return None,
                _ => 1,
            };
            let start = self.parsed;
            self.parsed += end + eol;
            if end == 0 {
                if let Some(event) = self.dispatch() {
                    return Some(event);
                }
                continue;
            }
            let line = &self.buffer[start..start + end];
            if line[0] == b':' {
                continue; // a comment
            }
            let (name, value) = match memchr::memchr(b':', line) {
                Some(colon) => {
                    let value = &line[colon + 1..];
                    (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
                }
                None => (line, &b""[..]),
            };
            // Within the checked bytes and cut at ASCII bytes, so always UTF-8.
            let value = std::str::from_utf8(value).unwrap_or_default();
            match name {
                b"event" => value.clone_into(&mut self.event),
                b"data" => {
                    self.data.reserve(value.len() + 1);
                    self.data.push_str(value);
                    self.data.push('\n');
                }
                // `id` and `retry` matter for reconnecting, which a model stream never does.
                _ => {}
            }
        }
    }

    /// An empty line ends an event; one without data is no event.
    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = std::mem::take(&mut self.event);
        let mut data = std::mem::take(&mut self.data);
        if data.is_empty() {
            return None;
        }
        data.pop();
        let event = match event.is_empty() {
            true => Cow::Borrowed("message"),
            false => Cow::Owned(event),
        };
        Some(SseEvent { event, data })
    }

    /// The stream ended: an error if it carried bytes that are not UTF-8 or stopped inside a
    /// character. An event without its closing empty line is dropped.
    fn finish(&mut self) -> Option<SseError> {
        if let Some(problem) = self.invalid.take() {
            return Some(SseError::Malformed(problem));
        }
        let tail = &self.buffer[self.checked..];
        (!tail.is_empty()).then(|| SseError::Malformed(utf8_problem(tail)))
    }
}

/// What is wrong with bytes that start with an invalid or incomplete UTF-8 sequence.
fn utf8_problem(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(_) => "invalid UTF-8".to_owned(),
        Err(error) => error.to_string(),
    }
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
            event: event.to_owned().into(),
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

    #[tokio::test]
    async fn line_endings_fields_and_empty_events() {
        // CR alone, a CRLF split between reads, a field without a colon, an empty value, a
        // value without the optional space, an event type reset after each event, an event
        // without data (none is sent) and a last event without its empty line (dropped).
        let input = chunks(&[
            b"event: a\rdata\r\r",
            b"data:x\r",
            b"\n\r\nevent: b\n\nretry: 5\nid: 1\ndata: y\n\n",
            b"data: cut",
        ]);
        assert_eq!(
            collect(stream::iter(input)).await,
            vec![event("a", ""), event("message", "x"), event("message", "y")]
        );
    }

    #[tokio::test]
    async fn a_leading_byte_order_mark_is_skipped() {
        let input = chunks(&[b"\xef", b"\xbb\xbfdata: a\n\n", b"data: \xef\xbb\xbfb\n\n"]);
        assert_eq!(
            collect(stream::iter(input)).await,
            vec![event("message", "a"), event("message", "\u{feff}b")]
        );
    }

    #[tokio::test]
    async fn bytes_that_are_not_utf8_fail_the_stream_when_it_ends() {
        let input = chunks(&[b"data: a\n\ndata: \xff\n\n", b"data: b\n\n"]);
        assert_eq!(
            collect(stream::iter(input)).await,
            vec![
                event("message", "a"),
                Err(SseError::Malformed(
                    "invalid utf-8 sequence of 1 bytes from index 0".into()
                ))
            ]
        );
        let input = chunks(&[b"data: a\n\n\xe6\x97"]);
        assert_eq!(
            collect(stream::iter(input)).await,
            vec![
                event("message", "a"),
                Err(SseError::Malformed(
                    "incomplete utf-8 byte sequence from index 0".into()
                ))
            ]
        );
    }

    #[tokio::test]
    async fn many_events_in_one_read() {
        let text: String = (0..20_000)
            .map(|i| format!("data: {{\"n\":{i}}}\n\n"))
            .collect();
        let got = collect(stream::iter(chunks(&[text.as_bytes()]))).await;
        assert_eq!(got.len(), 20_000);
        assert_eq!(got[19_999], event("message", "{\"n\":19999}"));
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

/// The parser against `eventsource-stream`, a widely used implementation, on random streams
/// cut at random points (inside characters too).
#[cfg(test)]
mod same_as_eventsource_stream {
    use std::io;

    use eventsource_stream::{EventStreamError, Eventsource};
    use futures::{StreamExt, stream};
    use proptest::prelude::*;

    use super::*;

    fn reference(chunks: Vec<Vec<u8>>) -> Vec<Result<SseEvent, SseError>> {
        let input = stream::iter(chunks.into_iter().map(Ok::<_, io::Error>));
        futures::executor::block_on(
            input
                .eventsource()
                .map(|item| match item {
                    Ok(event) => Ok(SseEvent {
                        event: event.event.into(),
                        data: event.data,
                    }),
                    Err(EventStreamError::Utf8(error)) => {
                        Err(SseError::Malformed(error.to_string()))
                    }
                    Err(EventStreamError::Parser(error)) => {
                        Err(SseError::Malformed(error.to_string()))
                    }
                    Err(EventStreamError::Transport(error)) => {
                        Err(SseError::Transport(error.to_string()))
                    }
                })
                .collect(),
        )
    }

    fn parsed(chunks: Vec<Vec<u8>>) -> Vec<Result<SseEvent, SseError>> {
        let input = stream::iter(chunks.into_iter().map(Ok::<_, io::Error>));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        runtime.block_on(events(input, Duration::from_secs(5)).collect())
    }

    /// Streams made of lines that look like SSE (fields, comments, empty lines, every line
    /// ending), with some bytes that are not UTF-8 or not whole characters.
    fn stream_bytes() -> impl Strategy<Value = Vec<u8>> {
        let start = prop::sample::select(vec![
            &b"data: "[..],
            b"data:",
            b"data",
            b"event: ",
            b"event:",
            b"id: ",
            b"retry: ",
            b": ",
            b":",
            b"",
            b"x",
        ]);
        let value = prop::sample::select(vec![
            &b""[..],
            b"x",
            b" y",
            b":",
            "é日😀".as_bytes(),
            b"\xff",
            b"\xe6\x97",
        ]);
        let end = prop::sample::select(vec![&b"\n"[..], b"\r", b"\r\n", b"\n\n", b""]);
        let line = (start, prop::collection::vec(value, 0..3), end)
            .prop_map(|(start, value, end)| [start, &value.concat(), end].concat());
        prop::collection::vec(line, 0..24).prop_map(|lines| lines.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]
        #[test]
        fn same_events_and_errors(bytes in stream_bytes(), cuts in prop::collection::vec(any::<usize>(), 0..12)) {
            let mut points: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
            points.sort_unstable();
            let mut chunks = Vec::new();
            let mut start = 0;
            for point in points.into_iter().chain([bytes.len()]) {
                chunks.push(bytes[start..point].to_vec());
                start = point;
            }
            prop_assert_eq!(parsed(chunks.clone()), reference(chunks));
        }
    }
}
