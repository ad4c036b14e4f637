//! Byte transport: a plain thread reads stdin (tokio's stdin cannot be cancelled) and one writer
//! task owns stdout. Nothing else in the process writes to stdout.

use std::io::{Read, Write};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::mpsc;

use super::backlog::Backlog;
use super::framing::{Decoded, FrameDecoder, Framing};
use super::readable::make_readable;
use crate::util::{lock, wait_while};

/// What the reader thread hands on.
#[derive(Debug, PartialEq, Eq)]
pub enum Input {
    /// One frame's text, made readable ([`make_readable`]).
    Frame(String),
    /// What the decoder found instead of a frame (never [`Decoded::Frame`]).
    NotAFrame(Decoded),
}

/// Reads `input` on a dedicated thread, decoding frames into the returned channel, each made
/// readable ([`make_readable`]).
///
/// The framing, once detected, is published in `framing` so replies can use it. The channel
/// closes when the input ends.
pub fn spawn_reader<R: Read + Send + 'static>(
    mut input: R,
    framing: Arc<OnceLock<Framing>>,
) -> mpsc::UnboundedReceiver<Input> {
    let (tx, rx) = mpsc::unbounded_channel();
    let spawned = std::thread::Builder::new()
        .name("sidechat-stdin".into())
        .spawn(move || {
            let mut decoder = FrameDecoder::default();
            let mut chunk = vec![0u8; 64 * 1024];
            let mut out = Vec::new();
            loop {
                let n = match input.read(&mut chunk) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        tracing::warn!(error = %e, "reading input failed");
                        break;
                    }
                };
                decoder.push(&chunk[..n], &mut out);
                if let Some(detected) = decoder.framing() {
                    let _ = framing.set(detected);
                }
                for item in out.drain(..) {
                    if tx.send(readable(item)).is_err() {
                        return;
                    }
                }
            }
            decoder.finish(&mut out);
            for item in out.drain(..) {
                let _ = tx.send(readable(item));
            }
        });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "cannot start the input thread");
    }
    rx
}

/// A frame with what no JSON parser would read replaced, on the input thread rather than the
/// dispatcher's.
fn readable(item: Decoded) -> Input {
    match item {
        Decoded::Frame(bytes) => Input::Frame(make_readable(bytes)),
        other => Input::NotAFrame(other),
    }
}

/// Sends serialised JSON-RPC messages to the writer thread.
///
/// Messages are framed by the sender straight into one shared buffer. The writer is woken only
/// when it sleeps with nothing to do: while it writes, and for a moment after each write, later
/// messages pile up behind it and go out together with its next write, with no wake-up. A
/// streamed answer's deltas therefore cost one `write` per batch rather than one write and one
/// thread wake-up each, which is most of what a delta would otherwise cost the daemon (and the
/// editor reading it).
#[derive(Clone)]
pub struct Outbox {
    /// The writer stops once every `Outbox` is gone; the last one's guard tells it.
    senders: Arc<SendersGuard>,
}

/// How long the writer waits after a write before looking for more, unless a full batch is
/// already waiting. Deltas that arrive meanwhile go out in the same write. Linux lets such a
/// sleep end up to 50 µs late (the default timer slack), so the wait is 50–100 µs: far below
/// what a person or an editor's frame rate could notice, and the first message after a quiet
/// spell goes out at once. (A tighter slack halved the wait but made more writes, costing the
/// daemon more CPU per delta when the provider sends one small segment at a time.)
const LINGER: Duration = Duration::from_micros(50);

/// Queued bytes that are written at once, without lingering first.
const FULL_BATCH: usize = 64 * 1024;

/// Bytes of frames waiting for a client (queued, or taken by the writer and not yet written)
/// at which runs stop reading their providers' streams until the client has read some: a
/// client that stops reading slows its runs, never grows the daemon (DESIGN.md, invariant
/// 10). Far above what a reading client leaves queued (the writer takes what is queued at
/// least every `LINGER`), so a client that keeps up never waits.
pub const OUTPUT_CAP: usize = 4 * 1024 * 1024;

struct Shared {
    framing: Arc<OnceLock<Framing>>,
    /// The bytes of frames not yet written: queued or being written.
    backlog: Backlog,
    queue: Mutex<Queue>,
    /// Signalled when the writer sleeps and there is something for it.
    wake: Condvar,
}

#[derive(Default)]
struct Queue {
    /// Framed bytes not yet taken by the writer.
    wire: Vec<u8>,
    /// Flushes waiting for everything queued before them.
    waiters: Vec<tokio::sync::oneshot::Sender<()>>,
    /// The writer sleeps on `wake` and must be signalled.
    asleep: bool,
    /// Where a `Content-Length` frame's body is rendered before its header is known.
    scratch: Vec<u8>,
    /// Every sender is gone: the writer ends once the queue is written.
    senders_gone: bool,
    /// The writer has stopped (the peer is gone); nothing is queued any more.
    closed: bool,
}

impl Shared {
    /// Runs `change` on the queue, then wakes the writer if it sleeps. Nothing happens once
    /// the writer has stopped.
    fn update(&self, change: impl FnOnce(&mut Queue)) -> bool {
        let wake = {
            let mut queue = lock(&self.queue);
            if queue.closed {
                return false;
            }
            let before = queue.wire.len();
            change(&mut queue);
            self.backlog.add(queue.wire.len().saturating_sub(before));
            std::mem::take(&mut queue.asleep)
        };
        if wake {
            self.wake.notify_one();
        }
        true
    }
}

/// Dropped with the last [`Outbox`].
struct SendersGuard(Arc<Shared>);

impl Drop for SendersGuard {
    fn drop(&mut self) {
        self.0.update(|queue| queue.senders_gone = true);
    }
}

impl Outbox {
    /// Queues one message; dropped silently once the writer has stopped (the peer is gone).
    pub fn send(&self, json: String) {
        let framing = self.framing();
        self.shared()
            .update(|queue| framing.encode(&json, &mut queue.wire));
    }

    /// Queues the message that `render` appends to the buffer it is given, rendered in place
    /// among the bytes waiting for the writer (the hot path of streamed deltas).
    pub fn send_with(&self, render: impl FnOnce(&mut Vec<u8>)) {
        let framing = self.framing();
        self.shared().update(|queue| {
            let Queue { wire, scratch, .. } = queue;
            framing.encode_with(wire, scratch, render);
        });
    }

    /// [`Outbox::send_with`] for a `render` that may fail part-way (serialising a value): then
    /// nothing of the message is queued, and the error is returned.
    pub fn try_send_with<E>(
        &self,
        render: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
    ) -> Result<(), E> {
        let framing = self.framing();
        let mut rendered = Ok(());
        self.shared().update(|queue| {
            let Queue { wire, scratch, .. } = queue;
            rendered = framing.try_encode_with(wire, scratch, render);
        });
        rendered
    }

    fn shared(&self) -> &Shared {
        &self.senders.0
    }

    /// Whether the client has read enough of what was sent: false once [`OUTPUT_CAP`] bytes
    /// wait for it. Nothing is refused either way; whoever sends in volume checks this first.
    pub fn has_room(&self) -> bool {
        self.shared().backlog.has_room()
    }

    /// Resolves once [`Outbox::has_room`] holds (or the client is gone).
    pub async fn room(&self) {
        self.shared().backlog.room().await;
    }

    /// Bytes of frames not yet written to the client.
    pub fn unwritten(&self) -> usize {
        self.shared().backlog.queued()
    }

    /// The client's framing; lines until its first frame has shown which.
    fn framing(&self) -> Framing {
        self.shared()
            .framing
            .get()
            .copied()
            .unwrap_or(Framing::Line)
    }

    /// Waits until everything queued before this call has been written and flushed.
    pub async fn flush(&self) {
        let (done, wait) = tokio::sync::oneshot::channel();
        if self.shared().update(|queue| queue.waiters.push(done)) {
            let _ = wait.await;
        }
    }
}

/// Starts the writer thread that owns `output`; messages are framed as the client chose.
pub fn spawn_writer<W: Write + Send + 'static>(
    output: W,
    framing: Arc<OnceLock<Framing>>,
) -> Outbox {
    let shared = Arc::new(Shared {
        framing,
        backlog: Backlog::new(OUTPUT_CAP),
        queue: Mutex::default(),
        wake: Condvar::new(),
    });
    let writer = shared.clone();
    // Writes block, so they run on a blocking thread.
    tokio::task::spawn_blocking(move || write_queued(&writer, output));
    Outbox {
        senders: Arc::new(SendersGuard(shared)),
    }
}

/// The writer thread: takes everything queued, writes it in one go, lingers briefly so that
/// what follows can join the next write, and sleeps when there is nothing to do.
fn write_queued<W: Write>(shared: &Shared, mut output: W) {
    let mut wire = Vec::with_capacity(64 * 1024);
    let mut waiters = Vec::new();
    // A write just happened: look again only after `LINGER`.
    let mut just_wrote = false;
    loop {
        {
            let mut queue = lock(&shared.queue);
            loop {
                let due = !queue.waiters.is_empty()
                    || queue.wire.len() >= FULL_BATCH
                    || (!queue.wire.is_empty() && !just_wrote);
                if due {
                    break;
                }
                if just_wrote {
                    drop(queue);
                    std::thread::sleep(LINGER);
                    just_wrote = false;
                    queue = lock(&shared.queue);
                    continue;
                }
                if queue.senders_gone {
                    return;
                }
                queue.asleep = true;
                queue = wait_while(&shared.wake, queue, |queue| queue.asleep);
            }
            std::mem::swap(&mut queue.wire, &mut wire);
            std::mem::swap(&mut queue.waiters, &mut waiters);
        }
        let written = output.write_all(&wire).and_then(|_| output.flush());
        just_wrote = true;
        shared.backlog.remove(wire.len());
        wire.clear();
        if wire.capacity() > 4 * 1024 * 1024 {
            wire = Vec::with_capacity(64 * 1024);
        }
        for done in waiters.drain(..) {
            let _ = done.send(());
        }
        if let Err(e) = written {
            tracing::warn!(error = %e, "writing output failed; the client is gone");
            let mut queue = lock(&shared.queue);
            queue.closed = true;
            queue.wire = Vec::new();
            queue.waiters.clear();
            shared.backlog.close();
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Default)]
    struct Sink {
        bytes: Arc<Mutex<Vec<u8>>>,
        fail: bool,
    }

    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.fail {
                return Err(std::io::Error::new(std::io::ErrorKind::BrokenPipe, "gone"));
            }
            self.bytes.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn frames_go_out_in_order_before_a_flush_returns() {
        let sink = Sink::default();
        let framing = Arc::new(OnceLock::from(Framing::ContentLength));
        let outbox = spawn_writer(sink.clone(), framing);
        for i in 0..1000 {
            outbox.send(format!("{{\"n\":{i}}}"));
        }
        outbox.flush().await;
        let mut expected = Vec::new();
        for i in 0..1000 {
            Framing::ContentLength.encode(&format!("{{\"n\":{i}}}"), &mut expected);
        }
        assert_eq!(*sink.bytes.lock().unwrap(), expected);
        // Nothing queued: a flush still returns.
        outbox.flush().await;
    }

    /// Records each `write` apart; the first one waits until the test opens the gate.
    #[derive(Clone)]
    struct GatedSink {
        writes: Arc<Mutex<Vec<Vec<u8>>>>,
        entered: std::sync::mpsc::Sender<()>,
        gate: Arc<(Mutex<bool>, Condvar)>,
    }

    impl Write for GatedSink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let _ = self.entered.send(());
            let (open, opened) = &*self.gate;
            drop(
                opened
                    .wait_while(open.lock().unwrap(), |open| !*open)
                    .unwrap(),
            );
            self.writes.lock().unwrap().push(buf.to_vec());
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn messages_queued_during_a_write_go_out_in_one_write() {
        let (entered, entering) = std::sync::mpsc::channel();
        let sink = GatedSink {
            writes: Arc::default(),
            entered,
            gate: Arc::default(),
        };
        let outbox = spawn_writer(sink.clone(), Arc::new(OnceLock::from(Framing::Line)));
        outbox.send("{\"n\":0}".into());
        entering
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("the writer starts writing");
        for i in 1..=100 {
            outbox.send_with(|out| out.extend_from_slice(format!("{{\"n\":{i}}}").as_bytes()));
        }
        let (open, opened) = &*sink.gate;
        *open.lock().unwrap() = true;
        opened.notify_all();
        outbox.flush().await;
        let frames = |range: std::ops::RangeInclusive<i32>| -> Vec<u8> {
            range
                .flat_map(|i| format!("{{\"n\":{i}}}\n").into_bytes())
                .collect()
        };
        assert_eq!(
            *sink.writes.lock().unwrap(),
            vec![frames(0..=0), frames(1..=100)]
        );
    }

    #[tokio::test]
    async fn a_client_that_does_not_read_leaves_no_room_until_it_reads() {
        let (entered, entering) = std::sync::mpsc::channel();
        let sink = GatedSink {
            writes: Arc::default(),
            entered,
            gate: Arc::default(),
        };
        let outbox = spawn_writer(sink.clone(), Arc::new(OnceLock::from(Framing::Line)));
        let frame = format!("{{\"t\":\"{}\"}}", "x".repeat(1000));
        let mut sent = 0;
        while outbox.has_room() {
            outbox.send(frame.clone());
            sent += frame.len() + 1;
        }
        entering
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("the writer starts writing");
        // Every byte is counted until it is written, whether queued or being written.
        assert_eq!(outbox.unwritten(), sent);
        assert!(sent >= OUTPUT_CAP && sent < OUTPUT_CAP + frame.len() + 1);
        let waiting = tokio::spawn({
            let outbox = outbox.clone();
            async move { outbox.room().await }
        });
        tokio::task::yield_now().await;
        assert!(
            !waiting.is_finished(),
            "no room while the client reads nothing"
        );
        // The client reads: the wait ends, and everything sent is written, in order.
        let (open, opened) = &*sink.gate;
        *open.lock().unwrap() = true;
        opened.notify_all();
        tokio::time::timeout(std::time::Duration::from_secs(30), waiting)
            .await
            .expect("room once the client read")
            .unwrap();
        outbox.flush().await;
        assert_eq!(outbox.unwritten(), 0);
        let written: Vec<u8> = sink.writes.lock().unwrap().concat();
        assert_eq!(
            written,
            format!("{frame}\n")
                .repeat(sent / (frame.len() + 1))
                .into_bytes()
        );
    }

    #[tokio::test]
    async fn rendered_frames_are_framed_as_sent_strings() {
        for framing in [Framing::ContentLength, Framing::Line] {
            let sink = Sink::default();
            let outbox = spawn_writer(sink.clone(), Arc::new(OnceLock::from(framing)));
            let messages: Vec<String> = (0..300)
                .map(|i| format!("{{\"n\":\"{}\"}}", "é".repeat(i)))
                .collect();
            for (i, message) in messages.iter().enumerate() {
                if i % 2 == 0 {
                    outbox.send_with(|out| out.extend_from_slice(message.as_bytes()));
                } else {
                    outbox.send(message.clone());
                }
            }
            outbox.flush().await;
            let mut expected = Vec::new();
            for message in &messages {
                framing.encode(message, &mut expected);
            }
            assert_eq!(*sink.bytes.lock().unwrap(), expected, "{framing:?}");
        }
    }

    #[tokio::test]
    async fn a_failed_write_drops_later_messages_and_releases_flushes() {
        let sink = Sink {
            fail: true,
            ..Sink::default()
        };
        let outbox = spawn_writer(sink.clone(), Arc::new(OnceLock::from(Framing::Line)));
        outbox.send("{}".into());
        tokio::time::timeout(std::time::Duration::from_secs(10), async {
            outbox.flush().await;
            outbox.send("{}".into());
            outbox.flush().await;
        })
        .await
        .expect("flushes return once the writer has stopped");
        assert!(lock(&outbox.shared().queue).wire.is_empty());
    }
}
