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
        let rendered: Result<(), std::convert::Infallible> =
            self.try_encode_with(out, scratch, |body| {
                render(body);
                Ok(())
            });
        let Ok(()) = rendered;
    }

    /// [`Framing::encode_with`] for a `render` that may fail part-way: then nothing of the
    /// frame is left in `out`.
    pub fn try_encode_with<E>(
        self,
        out: &mut Vec<u8>,
        scratch: &mut Vec<u8>,
        render: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
    ) -> Result<(), E> {
        match self {
            Framing::ContentLength => {
                scratch.clear();
                let rendered = render(scratch);
                if rendered.is_ok() {
                    content_length_header(scratch.len(), out);
                    out.extend_from_slice(scratch);
                }
                rendered
            }
            Framing::Line => {
                let start = out.len();
                let rendered = render(out);
                match rendered {
                    Ok(()) => out.push(b'\n'),
                    Err(_) => out.truncate(start),
                }
                rendered
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
/// A frame at least this long is handed over in the buffer it was read into rather than
/// copied out of it (only the few bytes read after it are copied instead).
const HAND_OVER_BYTES: usize = 256 * 1024;
/// How much of a refused line is kept to find its id in.
const HEAD_BYTES: usize = 4 * 1024;

/// What the decoder found in the byte stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// The body of one frame (not yet parsed as JSON).
    Frame(Vec<u8>),
    /// Bytes that were not a frame were skipped.
    Garbage { skipped: usize },
    /// A frame announced or grew past the limit; it is skipped without being buffered.
    /// `size` is the length a header announced (one that does not fit in a `usize` reads as
    /// `usize::MAX`), or the bytes of a line read when it passed the limit: the rest of the
    /// line is dropped as it arrives. `head` is a line's first bytes (up to 4 KiB), so the
    /// refusal can answer the id they show; empty for a `Content-Length` frame, whose body is
    /// not read.
    TooLarge { size: usize, head: Vec<u8> },
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
    /// Reading the first bytes of an oversized frame's body (up to [`HEAD_BYTES`]), where its
    /// id may be found; the rest is then skipped.
    Refuse {
        len: usize,
    },
    /// Discarding the body of an oversized frame, up to `remaining` bytes or the next header
    /// block, whichever comes first.
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
    /// Bytes after `pos` already searched for the end of the current line: each byte of a
    /// long line is looked at once, however many reads it arrives in.
    scanned: usize,
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
            scanned: 0,
            max_frame,
            in_garbage: false,
        }
    }

    /// The framing detected so far.
    pub fn framing(&self) -> Option<Framing> {
        self.framing
    }

    /// Feeds bytes and appends whatever they complete to `out`.
    pub fn push(&mut self, mut bytes: &[u8], out: &mut Vec<Decoded>) {
        if self.state == State::SkipLine {
            // The rest of a refused line is dropped as it arrives, never buffered.
            match memchr::memchr(b'\n', bytes) {
                Some(i) => {
                    bytes = &bytes[i + 1..];
                    self.state = State::Line;
                }
                None => return,
            }
        }
        self.buf.extend_from_slice(bytes);
        while self.step(out) {}
        if self.state == State::SkipLine {
            // All that was buffered belonged to the refused line: give its memory back rather
            // than keep a buffer of the limit's size for the rest of the connection.
            self.buf = Vec::new();
            self.pos = 0;
            self.scanned = 0;
            return;
        }
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
            State::Body { .. } | State::Refuse { .. } | State::Skip { .. } | State::SkipLine => {
                true
            }
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
        self.scanned = 0;
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
                let frame = self.take(len, len);
                out.push(Decoded::Frame(frame));
                self.state = State::Headers;
                true
            }
            State::Refuse { len } => self.refuse(len, out),
            State::Skip { remaining } => self.skip_body(remaining),
            State::Line => self.line(out),
            State::SkipLine => match memchr::memchr(b'\n', self.rest()) {
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

    /// The frame of `len` bytes at `pos`, consuming `consumed` bytes. A large frame takes the
    /// buffer itself, so it is never copied and the decoder keeps only what follows it.
    fn take(&mut self, len: usize, consumed: usize) -> Vec<u8> {
        let start = self.pos;
        self.pos += consumed;
        self.scanned = 0;
        if len < HAND_OVER_BYTES || start > HAND_OVER_BYTES {
            return self.buf[start..start + len].to_vec();
        }
        let tail = self.buf.split_off(self.pos);
        let mut frame = std::mem::replace(&mut self.buf, tail);
        self.pos = 0;
        frame.truncate(start + len);
        frame.drain(..start);
        frame
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
        match memchr::memchr(b'\n', &rest[self.scanned..]) {
            Some(i) => {
                let end = self.scanned + i;
                let line = &rest[..end];
                let lead = line.iter().take_while(|b| b.is_ascii_whitespace()).count();
                let len = trim_ascii(line).len();
                if len > self.max_frame {
                    out.push(Decoded::TooLarge {
                        size: len,
                        head: head_of(&line[lead..]),
                    });
                    self.pos += end + 1;
                    self.scanned = 0;
                    // Keep only what follows the line, in a buffer of its own size.
                    self.buf = self.buf.split_off(self.pos);
                    self.pos = 0;
                } else if len == 0 {
                    self.pos += end + 1;
                    self.scanned = 0;
                } else {
                    self.pos += lead;
                    let frame = self.take(len, end + 1 - lead);
                    out.push(Decoded::Frame(frame));
                }
                true
            }
            None if rest.len() > self.max_frame => {
                let lead = rest.iter().take_while(|b| b.is_ascii_whitespace()).count();
                out.push(Decoded::TooLarge {
                    size: rest.len() - lead,
                    head: head_of(&rest[lead..]),
                });
                self.pos = self.buf.len();
                self.scanned = 0;
                self.state = State::SkipLine;
                false
            }
            None => {
                self.scanned = rest.len();
                false
            }
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
        match header_block(rest) {
            HeaderBlock::Length { len, body_start } => {
                self.pos += body_start;
                self.in_garbage = false;
                self.state = if len > self.max_frame {
                    State::Refuse { len }
                } else {
                    State::Body { len }
                };
                true
            }
            HeaderBlock::Invalid => self.skip_garbage(out),
            HeaderBlock::Incomplete => false,
        }
    }

    /// Refuses an oversized frame once its body's first bytes are in, so the refusal names the
    /// id they show, as a refused line's does; its body is then skipped. The head ends where a
    /// header block may start ([`FrameDecoder::skip_body`]): the announced length was false,
    /// and waiting for more would hold the refusal until the client's next frame.
    fn refuse(&mut self, len: usize, out: &mut Vec<Decoded>) -> bool {
        let rest = self.rest();
        let want = len.min(HEAD_BYTES);
        let window = &rest[..rest.len().min(want)];
        let head = match find_ignore_case(window, CONTENT_LENGTH) {
            Some(at) => &window[..at],
            None if window.len() == want => window,
            None => return false,
        };
        out.push(Decoded::TooLarge {
            size: len,
            head: head.to_vec(),
        });
        self.state = State::Skip { remaining: len };
        true
    }

    /// Discards an oversized frame's body. A valid header block inside it starts the next
    /// frame at once: a JSON body can never hold one (it would need a bare `Content-Length`
    /// or a raw line break inside a string), so the announced length was false, and the
    /// client's next request is read rather than swallowed by a length such as 2^64−1.
    fn skip_body(&mut self, remaining: usize) -> bool {
        let rest = self.rest();
        let window = &rest[..rest.len().min(remaining)];
        let mut from = 0;
        while let Some(i) = find_ignore_case(&window[from..], CONTENT_LENGTH) {
            let at = from + i;
            match header_block(&rest[at..]) {
                HeaderBlock::Length { .. } => {
                    self.pos += at;
                    self.state = State::Headers;
                    return true;
                }
                HeaderBlock::Incomplete => {
                    // Wait for the rest of what may be a header block.
                    self.pos += at;
                    self.state = State::Skip {
                        remaining: remaining - at,
                    };
                    return false;
                }
                HeaderBlock::Invalid => from = at + 1,
            }
        }
        if window.len() == remaining {
            self.pos += remaining;
            self.state = State::Headers;
            return true;
        }
        // Keep what may be the start of `Content-Length` for the next read.
        let drop = window.len().saturating_sub(CONTENT_LENGTH.len() - 1);
        self.pos += drop;
        self.state = State::Skip {
            remaining: remaining - drop,
        };
        false
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

/// The first bytes of a refused line, where its id may be found.
fn head_of(line: &[u8]) -> Vec<u8> {
    line[..line.len().min(HEAD_BYTES)].to_vec()
}

/// What the bytes at the start of a header block hold.
#[derive(Debug, PartialEq, Eq)]
enum HeaderBlock {
    /// A complete block naming the body's length; the body starts at `body_start`.
    Length { len: usize, body_start: usize },
    /// Not a header block.
    Invalid,
    /// Possibly a header block, not yet complete.
    Incomplete,
}

/// Reads a header block at the start of `bytes`. It ends at the first empty line; lines may
/// end in CRLF (as LSP says) or in LF alone (as some clients send).
fn header_block(bytes: &[u8]) -> HeaderBlock {
    let window = &bytes[..bytes.len().min(MAX_HEADER_BYTES)];
    match header_end(window) {
        Some((end, body_start)) => match parse_header_block(&window[..end]) {
            Some(len) => HeaderBlock::Length { len, body_start },
            None => HeaderBlock::Invalid,
        },
        None if window.len() >= MAX_HEADER_BYTES || !could_be_header_start(window) => {
            HeaderBlock::Invalid
        }
        None => HeaderBlock::Incomplete,
    }
}

/// Where the header lines end and where the body starts: after the first line break that is
/// followed by an empty line (`\n\n` or `\n\r\n`).
fn header_end(window: &[u8]) -> Option<(usize, usize)> {
    memchr::memchr_iter(b'\n', window).find_map(|j| match window.get(j + 1..) {
        Some([b'\n', ..]) => Some((j, j + 2)),
        Some([b'\r', b'\n', ..]) => Some((j, j + 3)),
        _ => None,
    })
}

/// Whether `bytes` (no empty line yet) may still grow into a valid header block.
fn could_be_header_start(bytes: &[u8]) -> bool {
    let lines = bytes.split(|&b| b == b'\n').count();
    bytes.split(|&b| b == b'\n').enumerate().all(|(i, line)| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let complete = i + 1 < lines;
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
            length = Some(parse_length(value)?);
        }
    }
    length
}

/// A decimal length; one too large for a `usize` reads as `usize::MAX` (it is refused as
/// too large either way, and must not read as garbage).
fn parse_length(digits: &[u8]) -> Option<usize> {
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(digits.iter().fold(0usize, |n, d| {
        n.saturating_mul(10).saturating_add(usize::from(d - b'0'))
    }))
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

/// The first place `needle` (lowercase ASCII letters and `-`) occurs in `haystack`, ignoring
/// case; candidates are found by their first byte, so the cost stays linear.
fn find_ignore_case(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    let first = needle.first()?;
    memchr::memchr2_iter(*first, first.to_ascii_uppercase(), haystack).find(|&i| {
        haystack
            .get(i..i + needle.len())
            .is_some_and(|w| w.eq_ignore_ascii_case(needle))
    })
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

    /// A `Content-Length` frame refused for the length it announced.
    fn too_large(size: usize) -> Decoded {
        Decoded::TooLarge {
            size,
            head: Vec::new(),
        }
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
            vec![
                Decoded::TooLarge {
                    size: 2000,
                    head: vec![b'x'; 2000]
                },
                frame("{}")
            ]
        );
        let mut line = vec![b'{'; 3000];
        line.extend_from_slice(b"\n{}\n");
        assert_eq!(
            decode(&[&line[..1500], &line[1500..]]),
            vec![
                Decoded::TooLarge {
                    size: 1500,
                    head: vec![b'{'; 1500]
                },
                frame("{}")
            ]
        );
    }

    #[test]
    fn headers_ending_in_lf_alone_are_read() {
        assert_eq!(
            decode(&[
                b"Content-Length: 2\n\n{}",
                b"Content-Type: x\ncontent-length: 3\r\n\r\n[1]",
                b"Content-Length: 5\n\r\n[2,3]"
            ]),
            vec![frame("{}"), frame("[1]"), frame("[2,3]")]
        );
    }

    #[test]
    fn a_length_past_the_limit_is_refused_and_the_next_frame_read() {
        // Up to 2^64−1 and beyond: refused at once, and the frame that follows is read
        // rather than swallowed by the announced length.
        for length in ["18446744073709551615", "99999999999999999999999", "2000"] {
            let input = format!("Content-Length: {length}\r\n\r\nContent-Length: 2\r\n\r\n{{}}");
            let size = length.parse::<usize>().unwrap_or(usize::MAX);
            assert_eq!(
                decode(&[input.as_bytes()]),
                vec![too_large(size), frame("{}")],
                "{length}"
            );
        }
        // A body cut into pieces that each end inside a possible header still resyncs.
        let input = b"Content-Length: 5000\r\n\r\nxxContent-Length: 2\r\n\r\n{}";
        let pieces: Vec<&[u8]> = input.chunks(3).collect();
        assert_eq!(
            decode(&pieces),
            vec![
                Decoded::TooLarge {
                    size: 5000,
                    head: b"xx".to_vec()
                },
                frame("{}")
            ]
        );
    }

    #[test]
    fn an_oversized_frame_shows_its_first_bytes_in_both_framings() {
        let body = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":7,\"params\":\"{}\"}}",
            "x".repeat(6000)
        );
        let head = body.as_bytes()[..HEAD_BYTES].to_vec();
        for framing in [Framing::ContentLength, Framing::Line] {
            let mut wire = Vec::new();
            framing.encode(&body, &mut wire);
            framing.encode("{}", &mut wire);
            let mut decoder = FrameDecoder::new(1024);
            let mut out = Vec::new();
            for chunk in wire.chunks(700) {
                decoder.push(chunk, &mut out);
            }
            let Some(Decoded::TooLarge { head: seen, .. }) = out.first() else {
                panic!("{framing:?}: {out:?}");
            };
            assert!(head.starts_with(seen), "{framing:?}");
            assert!(seen.len() >= 1024, "{framing:?}: {} bytes", seen.len());
            assert_eq!(out.get(1), Some(&frame("{}")), "{framing:?}");
        }
    }

    #[test]
    fn a_long_line_in_many_reads_is_one_frame() {
        let mut decoder = FrameDecoder::new(4 * HAND_OVER_BYTES);
        let mut out = Vec::new();
        let text = format!("{{\"t\":\"{}\"}}", "é".repeat(HAND_OVER_BYTES));
        let wire = format!("{{}}\n  {text} \n{{\"n\":1}}\n");
        for chunk in wire.as_bytes().chunks(1000) {
            decoder.push(chunk, &mut out);
        }
        assert_eq!(out, vec![frame("{}"), frame(&text), frame("{\"n\":1}")]);
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

        /// A line past the limit is refused once it passes it, whatever the reads it arrives
        /// in: no more than the limit and one read is ever buffered, the rest of the line is
        /// dropped, the buffer's memory is given back, and the frames around it are read.
        #[test]
        fn a_line_past_the_limit_is_refused_as_it_passes_it_and_not_kept(
            before in proptest::collection::vec(message(), 0..3),
            after in proptest::collection::vec(message(), 1..3),
            over in 1usize..5000,
            read in 1usize..700,
        ) {
            const LIMIT: usize = 2048;
            let long = format!("{{\"id\":7,\"params\":\"{}\"}}", "x".repeat(LIMIT + over));
            let mut wire = Vec::new();
            for m in before.iter().chain([&long]).chain(&after) {
                Framing::Line.encode(m, &mut wire);
            }
            let mut decoder = FrameDecoder::new(LIMIT);
            let mut out = Vec::new();
            for chunk in wire.chunks(read) {
                let refused_before = out.len() > before.len();
                decoder.push(chunk, &mut out);
                prop_assert!(decoder.buf.len() <= LIMIT + read, "{} buffered", decoder.buf.len());
                if !refused_before && out.len() > before.len() {
                    // The read that refused the line left at most what followed it.
                    prop_assert!(decoder.buf.capacity() <= read, "{} kept", decoder.buf.capacity());
                }
            }
            decoder.finish(&mut out);
            let refused = out.iter().position(|d| matches!(d, Decoded::TooLarge { .. }));
            prop_assert_eq!(refused, Some(before.len()));
            let Decoded::TooLarge { size, head } = &out[before.len()] else { unreachable!() };
            prop_assert!(*size > LIMIT && *size <= long.len(), "size {}", size);
            prop_assert!(long.as_bytes().starts_with(head) && head.len() >= LIMIT.min(HEAD_BYTES));
            let mut expected: Vec<Decoded> = before.iter().map(|m| Decoded::Frame(m.clone().into_bytes())).collect();
            expected.push(out[before.len()].clone());
            expected.extend(after.iter().map(|m| Decoded::Frame(m.clone().into_bytes())));
            prop_assert_eq!(out, expected);
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
