//! Background threads of the daemon yield to the threads answering clients.
//!
//! On a machine with few cores a thread counting streamed text at full priority for
//! milliseconds at a time delays the deltas being written beside it. The tokenizer's warm-up
//! thread keeps full priority: a `session/budget` waits for its tables, and at a lower
//! priority a loaded machine starved it for seconds.

/// How much a background thread yields to the rest of the process (a nice value; 19 yields
/// most).
const BACKGROUND_NICENESS: i32 = 10;

/// Lowers the calling thread's priority to [`BACKGROUND_NICENESS`]; called first thing by a
/// thread that does background work.
///
/// The crate's one `unsafe` call: the standard library has no safe way to set a thread's nice
/// value, and `libc::setpriority` is a plain system call.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub fn yield_to_the_process() {
    // SAFETY: `setpriority` takes plain integers and touches no memory of ours. On Linux the
    // nice value belongs to a thread, and `PRIO_PROCESS` with id 0 names the calling one.
    let failed = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, BACKGROUND_NICENESS) } != 0;
    if failed {
        tracing::debug!(error = %std::io::Error::last_os_error(), "cannot lower a background thread's priority");
    }
}

/// Elsewhere the nice value is the whole process's, so it is left alone.
#[cfg(not(target_os = "linux"))]
pub fn yield_to_the_process() {}
