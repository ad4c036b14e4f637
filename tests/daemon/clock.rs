//! A daemon's clock a test moves forward instead of waiting (`SIDECHAT_TEST_CLOCK_FILE`, see
//! `sidechat::clock`): idle rollovers, time limits and expiries are reached at once.

use std::path::{Path, PathBuf};

use sidechat::clock::CLOCK_FILE_VAR;

/// The file of the daemons of one test that run on this clock.
pub struct TestClock {
    path: PathBuf,
}

impl TestClock {
    /// A clock beside the database `db`, at the system's time until moved.
    pub fn beside(db: &Path) -> Self {
        Self {
            path: db.with_file_name("clock-offset"),
        }
    }

    /// The variable a daemon on this clock is started with.
    pub fn env(&self) -> (&'static str, String) {
        (CLOCK_FILE_VAR, self.path.display().to_string())
    }

    /// Moves the clock `secs` seconds forward, for the daemons running on it and those
    /// started later.
    pub fn advance(&self, secs: u64) {
        let now: u64 = std::fs::read_to_string(&self.path)
            .map(|text| {
                text.trim()
                    .parse()
                    .expect("the clock file holds whole seconds")
            })
            .unwrap_or(0);
        std::fs::write(&self.path, (now + secs).to_string()).expect("write the clock file");
    }
}
