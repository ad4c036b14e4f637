//! A stream written as straight-line async code, for [`super::upstream`]'s request loop.
//!
//! Why not `async-stream`'s `stream!`: its `yield` works only in the macro's own body, so the
//! request loop (retries around attempts, each forwarding what its decoder produced) would
//! become two nested generators that every delta passes through, or one long body; here the
//! body runs on until it has queued [`QUEUED`] events or must wait, and the stream hands them
//! out without polling it again. The delta path is the one the deltas benchmark
//! (`cargo bench --bench deltas`) holds to its goal, so this stays until that benchmark shows
//! the other keeps the speed; the comparison has not been made yet.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures::Stream;

use super::{ModelEvent, ModelStream, ProviderError};
use crate::util::lock;

type Item = Result<ModelEvent, ProviderError>;

/// Items a [`generate`]d body may emit before the stream's reader takes them.
const QUEUED: usize = 16;

type Queue = Arc<Mutex<VecDeque<Item>>>;

/// The sending half of a [`generate`]d stream.
pub struct Emitter {
    queue: Queue,
}

impl Emitter {
    pub async fn emit(&mut self, item: Item) {
        let full = {
            let mut queue = lock(&self.queue);
            queue.push_back(item);
            queue.len() >= QUEUED
        };
        if full {
            // The stream hands out what is queued before it polls the body again.
            YieldOnce(false).await;
        }
    }
}

/// Pending once, then ready. No waker is needed: the body runs inside the stream's own
/// `poll_next`, which returns a queued item instead of waiting.
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            Poll::Pending
        }
    }
}

/// A stream written as straight-line async code: `body` emits items and the stream ends when it
/// returns. Nothing runs until the stream is polled and dropping the stream cancels `body`
/// (closing the HTTP connection), so no task is spawned and none can leak. The body is polled
/// by the stream itself, so handing an item over is a push onto a queue, with no channel and no
/// wake-up.
pub fn generate<F, Fut>(body: F) -> ModelStream
where
    F: FnOnce(Emitter) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let queue = Queue::default();
    let producer = body(Emitter {
        queue: queue.clone(),
    });
    Box::pin(Generated {
        body: Some(Box::pin(producer)),
        queue,
    })
}

struct Generated<Fut> {
    /// `None` once the body has returned.
    body: Option<Pin<Box<Fut>>>,
    queue: Queue,
}

impl<Fut: Future<Output = ()>> Stream for Generated<Fut> {
    type Item = Item;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Item>> {
        let this = self.get_mut();
        loop {
            if let Some(item) = lock(&this.queue).pop_front() {
                return Poll::Ready(Some(item));
            }
            let Some(body) = this.body.as_mut() else {
                return Poll::Ready(None);
            };
            match body.as_mut().poll(cx) {
                Poll::Ready(()) => this.body = None,
                Poll::Pending if lock(&this.queue).is_empty() => return Poll::Pending,
                Poll::Pending => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;
    use pretty_assertions::assert_eq;

    use super::*;

    #[tokio::test]
    async fn generated_streams_keep_order_past_the_queue_and_cancel_on_drop() {
        let stream = generate(|mut out| async move {
            for i in 0..100 {
                out.emit(Ok(ModelEvent::TextDelta(i.to_string()))).await;
                if i % 7 == 0 {
                    tokio::task::yield_now().await;
                }
            }
        });
        let items: Vec<_> = stream.collect().await;
        let expected: Vec<_> = (0..100)
            .map(|i| Ok(ModelEvent::TextDelta(i.to_string())))
            .collect();
        assert_eq!(items, expected);

        let started = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = started.clone();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let mut stream = generate(|mut out| async move {
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
            out.emit(Ok(ModelEvent::TextDelta("a".into()))).await;
            let _keep = tx;
            std::future::pending::<()>().await;
        });
        assert!(!started.load(std::sync::atomic::Ordering::SeqCst));
        assert_eq!(
            stream.next().await,
            Some(Ok(ModelEvent::TextDelta("a".into())))
        );
        drop(stream);
        // Dropping the stream dropped the body, and with it the sender.
        assert!(rx.await.is_err());
    }

    #[tokio::test]
    async fn generated_streams_end_when_the_body_returns() {
        let stream = generate(|mut out| async move {
            out.emit(Ok(ModelEvent::TextDelta("a".into()))).await;
            out.emit(Err(ProviderError::Stalled(1))).await;
        });
        let items: Vec<_> = stream.collect().await;
        assert_eq!(
            items,
            vec![
                Ok(ModelEvent::TextDelta("a".into())),
                Err(ProviderError::Stalled(1))
            ]
        );
    }
}
