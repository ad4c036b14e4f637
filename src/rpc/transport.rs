//! Byte transport: a plain thread reads stdin (tokio's stdin cannot be cancelled) and one writer
//! task owns stdout. Nothing else in the process writes to stdout.

use std::io::{Read, Write};
use std::sync::{Arc, OnceLock};

use tokio::sync::mpsc;

use super::framing::{Decoded, FrameDecoder, Framing};

/// Reads `input` on a dedicated thread, decoding frames into the returned channel.
///
/// The framing, once detected, is published in `framing` so replies can use it. The channel
/// closes when the input ends.
pub fn spawn_reader<R: Read + Send + 'static>(
    mut input: R,
    framing: Arc<OnceLock<Framing>>,
) -> mpsc::UnboundedReceiver<Decoded> {
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
                    if tx.send(item).is_err() {
                        return;
                    }
                }
            }
            decoder.finish(&mut out);
            for item in out.drain(..) {
                let _ = tx.send(item);
            }
        });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "cannot start the input thread");
    }
    rx
}

/// Sends serialised JSON-RPC messages to the writer task.
#[derive(Clone)]
pub struct Outbox {
    tx: mpsc::UnboundedSender<OutMessage>,
}

enum OutMessage {
    Frame(String),
    Flush(tokio::sync::oneshot::Sender<()>),
}

impl Outbox {
    /// Queues one message; dropped silently once the writer has stopped (the peer is gone).
    pub fn send(&self, json: String) {
        let _ = self.tx.send(OutMessage::Frame(json));
    }

    /// Waits until everything queued before this call has been written and flushed.
    pub async fn flush(&self) {
        let (done, wait) = tokio::sync::oneshot::channel();
        if self.tx.send(OutMessage::Flush(done)).is_ok() {
            let _ = wait.await;
        }
    }
}

/// Starts the writer task that owns `output`; messages are framed as the client chose.
pub fn spawn_writer<W: Write + Send + 'static>(
    mut output: W,
    framing: Arc<OnceLock<Framing>>,
) -> Outbox {
    let (tx, mut rx) = mpsc::unbounded_channel::<OutMessage>();
    // Writes block, so they run on a blocking thread; batches are drained so a burst of
    // deltas costs one write and one flush.
    tokio::task::spawn_blocking(move || {
        let mut wire = Vec::with_capacity(64 * 1024);
        let mut waiters = Vec::new();
        while let Some(first) = rx.blocking_recv() {
            let framing = framing.get().copied().unwrap_or(Framing::Line);
            let mut next = Some(first);
            while let Some(message) = next {
                match message {
                    OutMessage::Frame(json) => framing.encode(&json, &mut wire),
                    OutMessage::Flush(done) => waiters.push(done),
                }
                next = if wire.len() < 1024 * 1024 {
                    rx.try_recv().ok()
                } else {
                    None
                };
            }
            let written = output.write_all(&wire).and_then(|_| output.flush());
            wire.clear();
            for done in waiters.drain(..) {
                let _ = done.send(());
            }
            if let Err(e) = written {
                tracing::warn!(error = %e, "writing output failed; the client is gone");
                break;
            }
        }
    });
    Outbox { tx }
}
