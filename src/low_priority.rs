//! Work done ahead of need on threads of lowered priority, which never holds up a request.
//!
//! A new daemon builds its tokenizer's tables and compiles its redaction patterns before any
//! request needs them: a fraction of a second of CPU each. At full priority that work competes,
//! on a machine with two cores, with the daemon's first requests (a session list, the first
//! message). Lowered, it gives way to them, but on a loaded machine it may then starve for
//! seconds, so nothing a user waits for may wait for it: a caller that needs a value not built
//! yet builds it itself at its own priority ([`Ahead::get_or_build`]), and the lowered thread
//! offers its value only if none is there by then (the later one is dropped).

use std::cell::Cell;
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use crate::util::{lock, wait};

/// The nice value of lowered threads (19 yields most): they run whenever a core is idle and
/// give way to the daemon's requests and streams when none is.
const NICENESS: i32 = 10;

thread_local! {
    /// Whether [`lower_this_thread`] lowered the calling thread.
    static LOWERED: Cell<bool> = const { Cell::new(false) };
}

/// Lowers the calling thread's priority to [`NICENESS`], for background work that should not
/// compete with requests. There is no way back up (raising a priority needs a privilege), so
/// call it only on a thread of its own.
pub fn lower_this_thread() {
    LOWERED.set(true);
    set_niceness();
}

/// Whether the calling thread was lowered by [`lower_this_thread`].
pub fn is_lowered() -> bool {
    LOWERED.get()
}

/// The crate's one `unsafe` call: the standard library has no safe way to set a thread's nice
/// value, and `libc::setpriority` is a plain system call.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn set_niceness() {
    // SAFETY: `setpriority` takes plain integers and touches no memory of ours. On Linux the
    // nice value belongs to a thread, and `PRIO_PROCESS` with id 0 names the calling one.
    let failed = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, NICENESS) } != 0;
    if failed {
        tracing::debug!(error = %std::io::Error::last_os_error(), "cannot lower a thread's priority");
    }
}

/// Elsewhere the nice value is the whole process's, so it is left alone.
#[cfg(not(target_os = "linux"))]
fn set_niceness() {}

/// A value built once per process, ahead of need on a lowered thread or by the first caller
/// that cannot wait, whichever comes first.
pub struct Ahead<T> {
    /// What the value is, for the log.
    name: &'static str,
    value: OnceLock<T>,
    /// How many lowered threads are building the value.
    building: Mutex<usize>,
    /// Told when a lowered thread is done building (its value offered, or its build failed).
    built: Condvar,
}

impl<T> Ahead<T> {
    pub const fn new(name: &'static str) -> Self {
        Self {
            name,
            value: OnceLock::new(),
            building: Mutex::new(0),
            built: Condvar::new(),
        }
    }

    /// The value, if it is built.
    pub fn get(&self) -> Option<&T> {
        self.value.get()
    }

    /// The value, built on the calling thread if it is not yet.
    ///
    /// At full priority this never waits for a lowered thread building it ahead (only for
    /// another full-priority caller building it, whose build it would repeat). A lowered
    /// caller waits for a lowered thread already building it instead of building a second
    /// copy beside it: it would not be sooner, only larger.
    pub fn get_or_build(&self, build: impl FnOnce() -> T) -> &T {
        if let Some(value) = self.value.get() {
            return value;
        }
        if is_lowered() {
            self.wait_for_lowered();
            return self.build_ahead(build);
        }
        self.value.get_or_init(|| {
            // Logged so that a build the warm-up should have spared shows (tests look for it).
            tracing::debug!(
                value = self.name,
                "building at full priority: needed before it was built ahead"
            );
            build()
        })
    }

    /// Builds the value unless it is there, holding no one up while building: the value is
    /// built outside the cell, then offered. Meant for a lowered thread.
    fn build_ahead(&self, build: impl FnOnce() -> T) -> &T {
        if let Some(value) = self.value.get() {
            return value;
        }
        self.offer(Building::start(self), build)
    }

    /// Starts a lowered thread named `name` that builds the value ahead of need. Until it is
    /// done, [`Ahead::wait_for_lowered`] waits for it, even before the thread runs.
    pub fn spawn_ahead(
        &'static self,
        name: &str,
        build: impl FnOnce() -> T + Send + 'static,
    ) -> std::io::Result<std::thread::JoinHandle<()>>
    where
        T: Send + Sync,
    {
        let building = Building::start(self);
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                lower_this_thread();
                if self.value.get().is_none() {
                    self.offer(building, build);
                }
            })
    }

    /// Builds with `building` counted, and offers the value: taken as is when the cell is
    /// empty; dropped when a caller that could not wait built one meanwhile (or is building
    /// one: then this waits for it). The build stops counting only once the cell is filled.
    fn offer(&self, building: Building<'_, T>, build: impl FnOnce() -> T) -> &T {
        let value = build();
        let offered = self.value.get_or_init(move || value);
        drop(building);
        offered
    }

    /// Blocks while a lowered thread is building the value, for work that may as well be done
    /// once it is there (and otherwise builds it itself).
    pub fn wait_for_lowered(&self) {
        let mut building = lock(&self.building);
        while *building > 0 && self.value.get().is_none() {
            building = wait(&self.built, building);
        }
    }
}

/// Work beside a request that needs what a lowered thread is building (a first request's exact
/// figures, a first prompt's redacted title): it starts once that thread is done, or when its
/// result is asked for ([`Deferred::result`]), whichever comes first. Starting sooner would
/// build the value a second time beside that thread, at full priority; waiting for the thread
/// alone could wait for seconds on a loaded machine, and the request's end with it.
pub struct Deferred<R> {
    task: tokio::task::JoinHandle<Option<R>>,
    needed: Arc<tokio::sync::Notify>,
}

impl<R: Send + 'static> Deferred<R> {
    /// Runs `work` on a blocking thread once `warm_up` (which blocks while the lowered thread
    /// builds: [`Ahead::wait_for_lowered`]) returns or the result is asked for.
    pub fn spawn(
        warm_up: impl FnOnce() + Send + 'static,
        work: impl FnOnce() -> R + Send + 'static,
    ) -> Self {
        let needed = Arc::new(tokio::sync::Notify::new());
        let asked = needed.clone();
        let task = tokio::spawn(async move {
            tokio::select! {
                _ = tokio::task::spawn_blocking(warm_up) => {}
                _ = asked.notified() => {}
            }
            tokio::task::spawn_blocking(work).await.ok()
        });
        Self { task, needed }
    }

    /// The work's result, starting it now if it has not started; `None` if it panicked.
    pub async fn result(mut self) -> Option<R> {
        self.needed.notify_one();
        (&mut self.task).await.ok().flatten()
    }
}

impl<R> Drop for Deferred<R> {
    /// Work whose result no one will ask for is not started.
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Counts a lowered thread's build in [`Ahead::building`] while it lasts, a panic included, so
/// that no waiter waits for a build that ended.
struct Building<'a, T>(&'a Ahead<T>);

impl<'a, T> Building<'a, T> {
    fn start(ahead: &'a Ahead<T>) -> Self {
        *lock(&ahead.building) += 1;
        Self(ahead)
    }
}

impl<T> Drop for Building<'_, T> {
    fn drop(&mut self) {
        *lock(&self.0.building) -= 1;
        self.0.built.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;

    use pretty_assertions::assert_eq;

    use super::*;

    #[test]
    fn a_caller_at_full_priority_builds_rather_than_wait_for_a_lowered_build() {
        let ahead: Arc<Ahead<&str>> = Arc::new(Ahead::new("test value"));
        let (started, was_started) = mpsc::channel();
        let (release, released) = mpsc::channel::<()>();
        let lowered = {
            let ahead = ahead.clone();
            std::thread::spawn(move || {
                lower_this_thread();
                *ahead.build_ahead(|| {
                    started.send(()).unwrap();
                    released.recv().unwrap();
                    "ahead"
                })
            })
        };
        was_started.recv().unwrap();
        // The lowered build is held until after this caller is answered: were it waited for,
        // this would never return.
        assert_eq!(*ahead.get_or_build(|| "caller"), "caller");
        release.send(()).unwrap();
        assert_eq!(lowered.join().unwrap(), "caller");
        assert_eq!(ahead.get(), Some(&"caller"));
    }

    #[test]
    fn a_lowered_caller_waits_for_a_lowered_build_instead_of_building_again() {
        let ahead: Arc<Ahead<u32>> = Arc::new(Ahead::new("test value"));
        let builds = Arc::new(AtomicUsize::new(0));
        let (started, was_started) = mpsc::channel();
        let (release, released) = mpsc::channel::<()>();
        let warm_up = {
            let (ahead, builds) = (ahead.clone(), builds.clone());
            std::thread::spawn(move || {
                lower_this_thread();
                *ahead.build_ahead(|| {
                    builds.fetch_add(1, Ordering::SeqCst);
                    started.send(()).unwrap();
                    released.recv().unwrap();
                    7
                })
            })
        };
        was_started.recv().unwrap();
        let other = {
            let (ahead, builds) = (ahead.clone(), builds.clone());
            std::thread::spawn(move || {
                lower_this_thread();
                *ahead.get_or_build(|| {
                    builds.fetch_add(1, Ordering::SeqCst);
                    8
                })
            })
        };
        release.send(()).unwrap();
        assert_eq!((warm_up.join().unwrap(), other.join().unwrap()), (7, 7));
        assert_eq!(builds.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_failed_lowered_build_leaves_the_value_to_the_next_caller() {
        let ahead: Arc<Ahead<u32>> = Arc::new(Ahead::new("test value"));
        let panicked = {
            let ahead = ahead.clone();
            std::thread::spawn(move || {
                lower_this_thread();
                ahead.build_ahead(|| panic!("a build that fails"));
            })
            .join()
        };
        assert!(panicked.is_err());
        ahead.wait_for_lowered();
        assert_eq!(*ahead.get_or_build(|| 3), 3);
    }

    #[test]
    fn a_spawned_build_is_waited_for_from_the_start() {
        let ahead: &'static Ahead<u32> = Box::leak(Box::new(Ahead::new("test value")));
        let (release, released) = mpsc::channel::<()>();
        let thread = ahead
            .spawn_ahead("test-ahead", move || {
                released.recv().unwrap();
                5
            })
            .unwrap();
        // Counted before the thread runs, so a waiter that comes first still waits.
        assert_eq!(*lock(&ahead.building), 1);
        release.send(()).unwrap();
        ahead.wait_for_lowered();
        assert_eq!(ahead.get(), Some(&5));
        thread.join().unwrap();
        assert_eq!(*lock(&ahead.building), 0);
    }

    #[tokio::test]
    async fn deferred_work_starts_when_asked_for_though_the_warm_up_is_not_done() {
        let (release, released) = mpsc::channel::<()>();
        let deferred = Deferred::spawn(
            move || {
                let _ = released.recv();
            },
            || 4,
        );
        assert_eq!(deferred.result().await, Some(4));
        drop(release);
    }

    #[tokio::test]
    async fn deferred_work_starts_once_the_warm_up_is_done_unasked() {
        let (done, was_done) = tokio::sync::oneshot::channel();
        let (release, released) = mpsc::channel::<()>();
        let deferred = Deferred::spawn(
            move || {
                let _ = released.recv();
            },
            move || {
                let _ = done.send(());
            },
        );
        release.send(()).unwrap();
        was_done
            .await
            .expect("the work ran before its result was asked for");
        assert_eq!(deferred.result().await, Some(()));
    }

    #[test]
    fn only_a_lowered_thread_says_it_is_lowered() {
        assert!(!is_lowered());
        assert!(
            std::thread::spawn(|| {
                lower_this_thread();
                is_lowered()
            })
            .join()
            .unwrap()
        );
    }
}
