//! The daemon's wall clock: milliseconds since the Unix epoch. It is what the store keeps, and
//! what every time-dependent decision measures against a stored time: a session's idle
//! rollover, a run's time limit (`maxSeconds`), a delegated approval's expiry, leases.
//!
//! Test-only: [`CLOCK_FILE_VAR`] (`SIDECHAT_TEST_CLOCK_FILE`) names a file holding a number of
//! seconds this clock runs ahead of the system's (missing or empty: none). The file is read at
//! each reading, so a test moves the daemon's time forward by rewriting it, and an idle hour or
//! an expired approval needs no waiting. The variable is looked up once per process; unset, a
//! reading costs one check more than the system clock. Logged when set.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

/// Test-only: the file holding how many seconds the clock runs ahead (see the module doc).
pub const CLOCK_FILE_VAR: &str = "SIDECHAT_TEST_CLOCK_FILE";

/// Milliseconds since the Unix epoch, ahead by [`CLOCK_FILE_VAR`]'s offset when it is set.
pub fn now_ms() -> i64 {
    let system = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    match clock_file() {
        None => system,
        Some(path) => system.saturating_add(offset_ms(path)),
    }
}

/// The file [`CLOCK_FILE_VAR`] names, looked up once.
fn clock_file() -> Option<&'static PathBuf> {
    static FILE: OnceLock<Option<PathBuf>> = OnceLock::new();
    FILE.get_or_init(|| {
        let path = std::env::var_os(CLOCK_FILE_VAR).filter(|v| !v.is_empty())?;
        tracing::info!(
            path = %PathBuf::from(&path).display(),
            "{CLOCK_FILE_VAR} is set: the clock runs ahead by the seconds this file holds (tests only)"
        );
        Some(PathBuf::from(path))
    })
    .as_ref()
}

/// The file's offset in milliseconds: none while it is missing or empty; a value that is not a
/// number of seconds is logged and counts as none.
fn offset_ms(path: &PathBuf) -> i64 {
    let Ok(text) = std::fs::read_to_string(path) else {
        return 0;
    };
    match parse_offset_ms(&text) {
        Some(ms) => ms,
        None => {
            tracing::warn!(value = %text.trim(), "{CLOCK_FILE_VAR}'s file must hold a number of seconds");
            0
        }
    }
}

/// Seconds, whole or not, as milliseconds; blank text is no offset.
fn parse_offset_ms(text: &str) -> Option<i64> {
    let text = text.trim();
    if text.is_empty() {
        return Some(0);
    }
    let seconds: f64 = text.parse().ok()?;
    seconds
        .is_finite()
        .then(|| (seconds * 1000.0).round() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn offsets_are_seconds_whole_or_not_and_blank_is_none() {
        let parsed: Vec<Option<i64>> = ["", " \n", "3", "7200\n", "1.5", "-2", "soon", "NaN"]
            .iter()
            .map(|t| parse_offset_ms(t))
            .collect();
        assert_eq!(
            parsed,
            vec![
                Some(0),
                Some(0),
                Some(3_000),
                Some(7_200_000),
                Some(1_500),
                Some(-2_000),
                None,
                None
            ]
        );
    }

    #[test]
    fn the_offset_is_read_from_the_file_at_each_reading() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("clock");
        assert_eq!(offset_ms(&path), 0, "a missing file is no offset");
        std::fs::write(&path, "2").unwrap();
        assert_eq!(offset_ms(&path), 2_000);
        std::fs::write(&path, "3600\n").unwrap();
        assert_eq!(offset_ms(&path), 3_600_000);
    }
}
