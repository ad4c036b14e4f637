//! Incremental frame decoder for both framings a client may choose.
//!
//! The framing is detected from the first non-blank byte of the connection: `C` means LSP-style
//! `Content-Length` headers, anything else one JSON object per line. The decoder never panics on
//! any input, resynchronises after garbage, and refuses frames over the size limit without
//! buffering them.

/// How frames are delimited on this connection; replies use the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// `Content-Length: N\r\n\r\n` followed by N bytes of JSON.
    ContentLength,
    /// One JSON value per `\n`-terminated line.
    Line,
}

impl Framing {
    /// Wraps one serialised message for the wire.
    pub fn encode(self, json: &str, out: &mut Vec<u8>) {
        match self {
            Framing::ContentLength => {
                content_length_header(json.len(), out);
                out.extend_from_slice(json.as_bytes());
            }
            Framing::Line => {
                out.extend_from_slice(json.as_bytes());
                out.push(b'\n');
            }
        }
    }

    /// Appends the frame of the body that `render` appends to the buffer it is given. With
    /// line framing that is `out` itself; a `Content-Length` header needs the body's length
    /// first, so the body is rendered into `scratch` (kept by the caller, so its allocation is
    /// reused) and copied.
    pub fn encode_with(
        self,
        out: &mut Vec<u8>,
        scratch: &mut Vec<u8>,
        render: impl FnOnce(&mut Vec<u8>),
    ) {
        match self {
            Framing::ContentLength => {
                scratch.clear();
                render(scratch);
                content_length_header(scratch.len(), out);
                out.extend_from_slice(scratch);
            }
            Framing::Line => {
                render(out);
                out.push(b'\n');
            }
        }
    }
}

fn content_length_header(length: usize, out: &mut Vec<u8>) {
    out.extend_from_slice(b"Content-Length: ");
    out.extend_from_slice(itoa::Buffer::new().format(length).as_bytes());
    out.extend_from_slice(b"\r\n\r\n");
}

/// The largest frame accepted: 64 MiB.
pub const MAX_FRAME_BYTES: usize = 64 * 1024 * 1024;
/// A header block longer than this is garbage.
const MAX_HEADER_BYTES: usize = 8 * 1024;
const CONTENT_LENGTH: &[u8] = b"content-length";

/// What the decoder found in the byte stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// The body of one frame (not yet parsed as JSON).
    Frame(Vec<u8>),
    /// Bytes that were not a frame were skipped.
    Garbage { skipped: usize },
    /// A frame announced or grew past the limit; it is skipped without being buffered.
    TooLarge { size: usize },
    /// The stream ended inside a frame.
    Truncated { buffered: usize },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Waiting for the first non-blank byte.
    Detect,
    Headers,
    Body {
        len: usize,
    },
    /// Discarding the rest of an oversized frame.
    Skip {
        remaining: usize,
    },
    Line,
    /// Discarding the rest of an oversized line.
    SkipLine,
}

#[derive(Debug)]
pub struct FrameDecoder {
    state: State,
    framing: Option<Framing>,
    buf: Vec<u8>,
    pos: usize,
    max_frame: usize,
    /// Inside a run of garbage already reported, so one run yields one error.
    in_garbage: bool,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        Self::new(MAX_FRAME_BYTES)
    }
}

impl FrameDecoder {
    pub fn new(max_frame: usize) -> Self {
        Self {
            state: State::Detect,
            framing: None,
            buf: Vec::new(),
            pos: 0,
            max_frame,
            in_garbage: false,
        }
    }

    /// The framing detected so far.
    pub fn framing(&self) -> Option<Framing> {
        self.framing
    }

    /// Feeds bytes and appends whatever they complete to `out`.
    pub fn push(&mut self, bytes: &[u8], out: &mut Vec<Decoded>) {
        self.buf.extend_from_slice(bytes);
        while self.step(out) {}
        // Compact: drop what was consumed so the buffer holds only the unfinished tail.
        if self.pos > 0 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
    }

    /// The stream ended; reports an unfinished frame, if any.
    pub fn finish(&mut self, out: &mut Vec<Decoded>) {
        let rest = &self.buf[self.pos..];
        let unfinished = match self.state {
            State::Body { .. } | State::Skip { .. } | State::SkipLine => true,
            State::Headers | State::Line | State::Detect => {
                rest.iter().any(|b| !b.is_ascii_whitespace())
            }
        };
        if unfinished {
            out.push(Decoded::Truncated {
                buffered: rest.len(),
            });
        }
        self.buf.clear();
        self.pos = 0;
    }

    fn rest(&self) -> &[u8] {
        &self.buf[self.pos..]
    }

    /// Makes one unit of progress; false when more bytes are needed.
    fn step(&mut self, out: &mut Vec<Decoded>) -> bool {
        match self.state {
            State::Detect => self.detect(),
            State::Headers => self.headers(out),
            State::Body { len } => {
                if self.rest().len() < len {
                    return false;
                }
                out.push(Decoded::Frame(self.rest()[..len].to_vec()));
                self.pos += len;
                self.state = State::Headers;
                true
            }
            State::Skip { remaining } => {
                let take = remaining.min(self.rest().len());
                self.pos += take;
                if take == remaining {
                    self.state = State::Headers;
                    true
                } else {
                    self.state = State::Skip {
                        remaining: remaining - take,
                    };
                    false
                }
            }
            State::Line => self.line(out),
            State::SkipLine => match self.rest().iter().position(|&b| b == b'\n') {
                Some(i) => {
                    self.pos += i + 1;
                    self.state = State::Line;
                    true
                }
                None => {
                    self.pos = self.buf.len();
                    false
                }
            },
        }
    }

    fn detect(&mut self) -> bool {
        let skip = self
            .rest()
            .iter()
            .take_while(|b| b.is_ascii_whitespace())
            .count();
        self.pos += skip;
        let Some(&first) = self.rest().first() else {
            return false;
        };
        let framing = if first.eq_ignore_ascii_case(&b'C') {
            Framing::ContentLength
        } else {
            Framing::Line
        };
        self.framing = Some(framing);
        self.state = match framing {
            Framing::ContentLength => State::Headers,
            Framing::Line => State::Line,
        };
        true
    }

    fn line(&mut self, out: &mut Vec<Decoded>) -> bool {
        let rest = self.rest();
        match rest.iter().position(|&b| b == b'\n') {
            Some(i) => {
                let line = trim_ascii(&rest[..i]);
                if line.len() > self.max_frame {
                    out.push(Decoded::TooLarge { size: line.len() });
                } else if !line.is_empty() {
                    out.push(Decoded::Frame(line.to_vec()));
                }
                self.pos += i + 1;
                true
            }
            None if rest.len() > self.max_frame => {
                out.push(Decoded::TooLarge { size: rest.len() });
                self.pos = self.buf.len();
                self.state = State::SkipLine;
                false
            }
            None => false,
        }
    }

    fn headers(&mut self, out: &mut Vec<Decoded>) -> bool {
        // Blank lines between frames are harmless.
        let blank = self
            .rest()
            .iter()
            .take_while(|b| b.is_ascii_whitespace())
            .count();
        self.pos += blank;
        let rest = self.rest();
        if rest.is_empty() {
            return false;
        }
        let window = &rest[..rest.len().min(MAX_HEADER_BYTES)];
        match find(window, b"\r\n\r\n") {
            Some(end) => match parse_header_block(&rest[..end]) {
                Some(len) => {
                    self.pos += end + 4;
                    self.in_garbage = false;
                    self.state = if len > self.max_frame {
                        out.push(Decoded::TooLarge { size: len });
                        State::Skip { remaining: len }
                    } else {
                        State::Body { len }
                    };
                    true
                }
                None => self.skip_garbage(out),
            },
            None if rest.len() >= MAX_HEADER_BYTES || !could_be_header_start(rest) => {
                self.skip_garbage(out)
            }
            None => false,
        }
    }

    /// Drops bytes up to the next `Content-Length` (or all but a possible prefix of one).
    fn skip_garbage(&mut self, out: &mut Vec<Decoded>) -> bool {
        let rest = self.rest();
        let skipped = match find_ignore_case(&rest[1..], CONTENT_LENGTH) {
            Some(i) => i + 1,
            None => rest.len().saturating_sub(CONTENT_LENGTH.len() - 1).max(1),
        };
        self.pos += skipped;
        if !self.in_garbage {
            out.push(Decoded::Garbage { skipped });
            self.in_garbage = true;
        }
        !self.rest().is_empty()
    }
}

/// Whether `bytes` (no `\r\n\r\n` yet) may still grow into a valid header block.
fn could_be_header_start(bytes: &[u8]) -> bool {
    bytes.split(|&b| b == b'\n').enumerate().all(|(i, line)| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let complete = i + 1 < bytes.split(|&b| b == b'\n').count();
        match line.iter().position(|&b| b == b':') {
            Some(colon) => is_token(&line[..colon]),
            None => !complete && is_token(line),
        }
    })
}

fn is_token(bytes: &[u8]) -> bool {
    bytes
        .iter()
        .all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_')
}

/// Parses `Name: value` lines; the body length if they are valid and name one.
fn parse_header_block(block: &[u8]) -> Option<usize> {
    let mut length = None;
    for line in block.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let colon = line.iter().position(|&b| b == b':')?;
        let (name, value) = (&line[..colon], trim_ascii(&line[colon + 1..]));
        if name.is_empty() || !is_token(name) {
            return None;
        }
        if name.eq_ignore_ascii_case(CONTENT_LENGTH) {
            let text = std::str::from_utf8(value).ok()?;
            length = Some(text.parse::<usize>().ok()?);
        }
    }
    length
}

fn trim_ascii(bytes: &[u8]) -> &[u8] {
    let start = bytes.iter().take_while(|b| b.is_ascii_whitespace()).count();
    let end = bytes.len()
        - bytes[start..]
            .iter()
            .rev()
            .take_while(|b| b.is_ascii_whitespace())
            .count();
    &bytes[start..end]
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn find_ignore_case(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|w| w.eq_ignore_ascii_case(needle))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn decode(chunks: &[&[u8]]) -> Vec<Decoded> {
        let mut decoder = FrameDecoder::new(1024);
        let mut out = Vec::new();
        for chunk in chunks {
            decoder.push(chunk, &mut out);
        }
        decoder.finish(&mut out);
        out
    }

    fn frame(s: &str) -> Decoded {
        Decoded::Frame(s.as_bytes().to_vec())
    }

    #[test]
    fn content_length_frames_with_extra_headers() {
        let input = b"Content-Length: 2\r\n\r\n{}Content-Type: application/json\r\ncontent-length: 4\r\n\r\n[1,]";
        // The second block starts with Content-Type, which is still a valid header block.
        let mut decoder = FrameDecoder::new(1024);
        let mut out = Vec::new();
        decoder.push(b"Content-Length: 2\r\n\r\n{}", &mut out);
        decoder.push(&input[23..], &mut out);
        assert_eq!(out, vec![frame("{}"), frame("[1,]")]);
        assert_eq!(decoder.framing(), Some(Framing::ContentLength));
    }

    #[test]
    fn lines_skip_blanks_and_crlf() {
        assert_eq!(
            decode(&[b"\n{\"a\":1}\r\n\n{\"b\"", b":2}\n"]),
            vec![frame("{\"a\":1}"), frame("{\"b\":2}")]
        );
    }

    #[test]
    fn garbage_before_a_header_is_skipped_once() {
        let out = decode(&[b"Cxx\x00\xffzz\r\n\r\nContent-Length: 2\r\n\r\n{}"]);
        assert_eq!(out, vec![Decoded::Garbage { skipped: 11 }, frame("{}")]);
    }

    #[test]
    fn truncated_header_is_garbage_then_resyncs() {
        let out = decode(&[b"Content-Len\r\n\r\nContent-Length: 2\r\n\r\n{}"]);
        assert_eq!(out, vec![Decoded::Garbage { skipped: 15 }, frame("{}")]);
    }

    #[test]
    fn oversized_frames_are_refused_and_skipped() {
        let mut input = b"Content-Length: 2000\r\n\r\n".to_vec();
        input.extend(std::iter::repeat_n(b'x', 2000));
        input.extend_from_slice(b"Content-Length: 2\r\n\r\n{}");
        assert_eq!(
            decode(&[&input]),
            vec![Decoded::TooLarge { size: 2000 }, frame("{}")]
        );
        let mut line = vec![b'{'; 3000];
        line.extend_from_slice(b"\n{}\n");
        assert_eq!(
            decode(&[&line[..1500], &line[1500..]]),
            vec![Decoded::TooLarge { size: 1500 }, frame("{}")]
        );
    }

    #[test]
    fn end_of_stream_inside_a_frame_is_reported() {
        assert_eq!(
            decode(&[b"Content-Length: 10\r\n\r\n{\"a\""]),
            vec![Decoded::Truncated { buffered: 4 }]
        );
    }

    #[test]
    fn encode_matches_decode() {
        for framing in [Framing::ContentLength, Framing::Line] {
            let mut wire = Vec::new();
            framing.encode("{\"x\":\"é\"}", &mut wire);
            framing.encode("{}", &mut wire);
            assert_eq!(decode(&[&wire]), vec![frame("{\"x\":\"é\"}"), frame("{}")]);
        }
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    fn message() -> impl Strategy<Value = String> {
        ("[a-z]{0,12}", any::<u32>(), "[ -~é€😀]{0,40}").prop_map(|(method, id, text)| {
            serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {"text": text}}).to_string()
        })
    }

    fn decode_in_chunks(wire: &[u8], cuts: &[usize]) -> Vec<Decoded> {
        let mut decoder = FrameDecoder::new(MAX_FRAME_BYTES);
        let mut out = Vec::new();
        let mut start = 0;
        let mut points: Vec<usize> = cuts.iter().map(|c| c % (wire.len() + 1)).collect();
        points.sort_unstable();
        for point in points.into_iter().chain([wire.len()]) {
            decoder.push(&wire[start..point.max(start)], &mut out);
            start = point.max(start);
        }
        decoder.finish(&mut out);
        out
    }

    proptest! {
        #[test]
        fn any_split_decodes_to_the_same_messages(
            messages in proptest::collection::vec(message(), 1..8),
            cuts in proptest::collection::vec(any::<usize>(), 0..12),
            content_length in any::<bool>(),
        ) {
            let framing = if content_length { Framing::ContentLength } else { Framing::Line };
            let mut wire = Vec::new();
            for m in &messages {
                framing.encode(m, &mut wire);
            }
            let expected: Vec<Decoded> = messages.iter().map(|m| Decoded::Frame(m.clone().into_bytes())).collect();
            prop_assert_eq!(decode_in_chunks(&wire, &cuts), expected);
        }

        #[test]
        fn any_bytes_never_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..2048),
            cuts in proptest::collection::vec(any::<usize>(), 0..8),
        ) {
            let _ = decode_in_chunks(&bytes, &cuts);
            let mut prefixed = b"Content-Length: 5\r\n\r\n".to_vec();
            prefixed.extend_from_slice(&bytes);
            let _ = decode_in_chunks(&prefixed, &cuts);
        }
    }
}
