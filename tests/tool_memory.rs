//! `run_command` holds at most its output cap of a command's output, however much the command
//! prints: this test binary counts the bytes its heap holds and compares the peak during a
//! command that prints 64 MiB with the cap.
//!
//! A test binary of its own, because it replaces the global allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;
use sidechat::tools::{self, Workspace};

/// The system allocator, counting the bytes in use and their peak.
struct Counting;

static IN_USE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; only counters are added.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is the system allocator's.
        let pointer = unsafe { System.alloc(layout) };
        if !pointer.is_null() {
            let now = IN_USE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        pointer
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(pointer, layout) };
        IN_USE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const PRINTED: usize = 64 * 1024 * 1024;
const CAP: usize = 64 * 1024;

#[tokio::test]
async fn a_command_printing_64_mib_costs_about_its_cap_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = Workspace::new(dir.path()).unwrap();
    let input = json!({ "command": format!("yes | head -c {PRINTED}") });
    let before = IN_USE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let outcome = tools::execute(
        Some(&workspace),
        "run_command",
        &input,
        &sidechat::lifetime::NoLedger,
        &tools::NoCheckpoints,
    )
    .await;
    let growth = PEAK.load(Ordering::Relaxed) - before;
    let cut = format!("… [cut: {} more bytes]", PRINTED - CAP);
    assert!(
        !outcome.is_error && outcome.output.ends_with(&cut),
        "{}",
        &outcome.output[outcome.output.len().saturating_sub(200)..]
    );
    // The kept output, read buffers and the tool's own bookkeeping, far below what was printed.
    assert!(
        growth < 16 * CAP,
        "the heap grew by {growth} bytes while the command printed {PRINTED}"
    );
}
