//! Small helpers shared by every module: clocks, ids and locks.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Takes a lock whose data stays consistent between statements: a panic while it was held
/// (which poisons it) must not take every later caller down too.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
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

/// Milliseconds since the Unix epoch; what the store keeps.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

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
