//! Byte transport: a plain thread reads stdin (tokio's stdin cannot be cancelled) and one writer
//! task owns stdout. Nothing else in the process writes to stdout.

use std::io::{Read, Write};
use std::sync::{Arc, Mutex, OnceLock};

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
///
/// Messages are framed by the sender straight into one shared buffer, and the writer is
/// signalled only when that buffer goes from empty to non-empty: while it is writing, later
/// messages pile up behind it and go out with its next write, without waking it again.
#[derive(Clone)]
pub struct Outbox {
    shared: Arc<Shared>,
    /// Wakes the writer; it stops once every `Outbox` is gone.
    wake: mpsc::UnboundedSender<()>,
}

struct Shared {
    framing: Arc<OnceLock<Framing>>,
    queue: Mutex<Queue>,
}

#[derive(Default)]
struct Queue {
    /// Framed bytes not yet taken by the writer.
    wire: Vec<u8>,
    /// Flushes waiting for everything queued before them.
    waiters: Vec<tokio::sync::oneshot::Sender<()>>,
    /// The writer has stopped (the peer is gone); nothing is queued any more.
    closed: bool,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Outbox {
    /// Queues one message; dropped silently once the writer has stopped (the peer is gone).
    pub fn send(&self, json: String) {
        let framing = self.shared.framing.get().copied().unwrap_or(Framing::Line);
        let was_empty = {
            let mut queue = self.shared.lock();
            if queue.closed {
                return;
            }
            let was_empty = queue.wire.is_empty();
            framing.encode(&json, &mut queue.wire);
            was_empty
        };
        if was_empty {
            let _ = self.wake.send(());
        }
    }

    /// Waits until everything queued before this call has been written and flushed.
    pub async fn flush(&self) {
        let (done, wait) = tokio::sync::oneshot::channel();
        {
            let mut queue = self.shared.lock();
            if queue.closed {
                return;
            }
            queue.waiters.push(done);
        }
        if self.wake.send(()).is_ok() {
            let _ = wait.await;
        }
    }
}

/// Starts the writer task that owns `output`; messages are framed as the client chose.
pub fn spawn_writer<W: Write + Send + 'static>(
    mut output: W,
    framing: Arc<OnceLock<Framing>>,
) -> Outbox {
    let (wake, mut woken) = mpsc::unbounded_channel::<()>();
    let shared = Arc::new(Shared {
        framing,
        queue: Mutex::default(),
    });
    let queue = shared.clone();
    // Writes block, so they run on a blocking thread; each wake-up takes everything queued so
    // far, so a burst of deltas costs one write and one flush.
    tokio::task::spawn_blocking(move || {
        let mut wire = Vec::with_capacity(64 * 1024);
        let mut waiters = Vec::new();
        while woken.blocking_recv().is_some() {
            {
                let mut queue = queue.lock();
                std::mem::swap(&mut queue.wire, &mut wire);
                std::mem::swap(&mut queue.waiters, &mut waiters);
            }
            let written = if wire.is_empty() && waiters.is_empty() {
                Ok(())
            } else {
                output.write_all(&wire).and_then(|_| output.flush())
            };
            wire.clear();
            if wire.capacity() > 4 * 1024 * 1024 {
                wire = Vec::with_capacity(64 * 1024);
            }
            for done in waiters.drain(..) {
                let _ = done.send(());
            }
            if let Err(e) = written {
                tracing::warn!(error = %e, "writing output failed; the client is gone");
                let mut queue = queue.lock();
                queue.closed = true;
                queue.wire = Vec::new();
                queue.waiters.clear();
                break;
            }
        }
    });
    Outbox { shared, wake }
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
        assert!(outbox.shared.lock().wire.is_empty());
    }
}
