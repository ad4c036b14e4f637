//! Small helpers shared by every module: clocks, ids and locks.

use std::sync::{Condvar, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, UNIX_EPOCH};

/// Takes a lock whose data stays consistent between statements: a panic while it was held
/// (which poisons it) must not take every later caller down too.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// [`lock`] for a lock that may be held while its holder waits for the store (a slow disk, or
/// a database another program holds): taken at once when free; when not, waited for off the
/// async worker ([`off_worker`]), so the wait holds up only the task that needs the lock, never
/// the other tasks of its worker (the other sessions' streams).
pub fn lock_off_worker<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    match mutex.try_lock() {
        Ok(guard) => guard,
        Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
        Err(TryLockError::WouldBlock) => off_worker(|| lock(mutex)),
    }
}

/// Runs blocking work without holding up an async worker: on a multi-threaded tokio runtime
/// the worker's other tasks move to another thread while `work` runs (`block_in_place`).
/// Elsewhere (no runtime, a blocking thread, a current-thread runtime in unit tests) it simply
/// runs.
pub fn off_worker<R>(work: impl FnOnce() -> R) -> R {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(work)
        }
        _ => work(),
    }
}

/// Waits on `condvar` with the lock [`lock`] took, tolerating poison the same way.
pub fn wait<'a, T>(condvar: &Condvar, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    condvar
        .wait(guard)
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Waits on `condvar` while `condition` holds, tolerating poison the same way as [`lock`].
pub fn wait_while<'a, T>(
    condvar: &Condvar,
    guard: MutexGuard<'a, T>,
    condition: impl FnMut(&mut T) -> bool,
) -> MutexGuard<'a, T> {
    condvar
        .wait_while(guard, condition)
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Milliseconds since the Unix epoch; what the store keeps (see [`crate::clock`]).
pub use crate::clock::now_ms;

/// An RFC 3339 timestamp with milliseconds, what the wire carries.
pub fn rfc3339(ms: i64) -> String {
    let time = UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(time).to_string()
}

/// A new time-ordered id with a prefix saying what it names (`ses_…`, `msg_…`).
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::now_v7().simple())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_contended_lock_is_waited_for_off_the_only_async_worker() {
        let mutex = std::sync::Arc::new(Mutex::new(0));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let held = lock(&mutex);
        let (waiting, started) = std::sync::mpsc::channel();
        let waiter = runtime.spawn({
            let mutex = mutex.clone();
            async move {
                waiting.send(()).unwrap();
                *lock_off_worker(&mutex) += 1;
            }
        });
        started.recv().unwrap();
        // Another task runs on the one worker while the first waits for the lock.
        let (ticked, ticks) = std::sync::mpsc::channel();
        runtime.spawn(async move {
            for _ in 0..5 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            ticked.send(()).unwrap();
        });
        ticks
            .recv_timeout(Duration::from_secs(60))
            .expect("the ticks waited for the lock");
        assert!(!waiter.is_finished());
        drop(held);
        runtime.block_on(waiter).unwrap();
        assert_eq!(*lock(&mutex), 1);
    }

    #[test]
    fn rfc3339_has_millis_and_utc() {
        assert_eq!(rfc3339(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
    }

    #[test]
    fn ids_carry_their_prefix_and_differ() {
        let a = new_id("ses");
        let b = new_id("ses");
        assert!(a.starts_with("ses_"));
        assert_ne!(a, b);
    }
}
