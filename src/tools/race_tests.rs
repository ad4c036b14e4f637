//! Tools racing a folder that keeps turning into a symlink to a folder outside the workspace:
//! no write lands outside (not even a temporary file) and no read returns outside content.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use pretty_assertions::assert_eq;
use serde_json::json;

use super::{NoCheckpoints, Workspace, execute};
use crate::lifetime::NoLedger;

/// How many tool calls race the swapping folder.
const TRIES: usize = 900;

/// A workspace whose `sub` is swapped, again and again, between a real folder and a symlink to
/// a folder outside the workspace (`RENAME_EXCHANGE` with a symlink kept beside it, so `sub`
/// always exists as one or the other).
struct Race {
    dir: Option<tempfile::TempDir>,
    root: PathBuf,
    outside: PathBuf,
    stop: Arc<AtomicBool>,
    swaps: Arc<AtomicU64>,
    swapper: Option<std::thread::JoinHandle<()>>,
}

impl Race {
    /// Starts swapping once `sub` holds the `inside` files and the folder outside the `outside`
    /// ones.
    fn start(inside: &[(&str, &str)], outside_files: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::create_dir(&outside).unwrap();
        for (name, text) in inside {
            std::fs::write(root.join("sub").join(name), text).unwrap();
        }
        for (name, text) in outside_files {
            std::fs::write(outside.join(name), text).unwrap();
        }
        std::os::unix::fs::symlink(&outside, root.join(".swap")).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let swaps = Arc::new(AtomicU64::new(0));
        let swapper = {
            let (stop, swaps, root) = (stop.clone(), swaps.clone(), root.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    rustix::fs::renameat_with(
                        rustix::fs::CWD,
                        root.join("sub"),
                        rustix::fs::CWD,
                        root.join(".swap"),
                        rustix::fs::RenameFlags::EXCHANGE,
                    )
                    .unwrap();
                    swaps.fetch_add(1, Ordering::Relaxed);
                }
            })
        };
        Self {
            dir: Some(dir),
            root,
            outside,
            stop,
            swaps,
            swapper: Some(swapper),
        }
    }

    /// The workspace, opening paths by `openat2` or, with `walk`, by the walk.
    fn workspace(&self, walk: bool) -> Workspace {
        let ws = Workspace::new(&self.root).unwrap();
        if walk { ws.walking_only() } else { ws }
    }

    /// Stops the swapping, leaving `sub` a real folder; returns the scratch folder (deleted when
    /// dropped) and how many swaps were made.
    fn finish(mut self) -> (Option<tempfile::TempDir>, u64) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(swapper) = self.swapper.take() {
            swapper.join().unwrap();
        }
        if self
            .root
            .join("sub")
            .symlink_metadata()
            .unwrap()
            .is_symlink()
        {
            std::fs::rename(self.root.join("sub"), self.root.join(".tmp-link")).unwrap();
            std::fs::rename(self.root.join(".swap"), self.root.join("sub")).unwrap();
        }
        (self.dir.take(), self.swaps.load(Ordering::Relaxed))
    }
}

impl Drop for Race {
    /// A failed test still stops the swapping before its folder is deleted.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(swapper) = self.swapper.take() {
            let _ = swapper.join();
        }
    }
}

fn names(folder: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(folder)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

async fn writes_race(walk: bool) {
    let race = Race::start(&[], &[]);
    let ws = race.workspace(walk);
    let mut refused = 0;
    for i in 0..TRIES {
        let input = json!({"path": format!("sub/f{i}.txt"), "content": "inside\n"});
        let outcome = execute(Some(&ws), "write_file", &input, &NoLedger, &NoCheckpoints).await;
        if outcome.is_error {
            assert!(
                outcome.output.contains("symbolic link"),
                "{}",
                outcome.output
            );
            refused += 1;
        }
    }
    let outside = race.outside.clone();
    let root = race.root.clone();
    let (_dir, swaps) = race.finish();
    assert!(swaps > 0);
    let written = names(&root.join("sub"));
    assert_eq!(
        (names(&outside), written.len() + refused),
        (Vec::<String>::new(), TRIES),
        "{written:?}"
    );
    assert!(
        written
            .iter()
            .all(|n| n.ends_with(".txt") && !n.starts_with('.')),
        "a temporary file was left: {written:?}"
    );
}

async fn reads_race(walk: bool) {
    let race = Race::start(
        &[("note.txt", "inside\n")],
        &[("note.txt", "outside\n"), ("outside-only.txt", "")],
    );
    let ws = race.workspace(walk);
    let mut outputs = std::collections::BTreeSet::new();
    for _ in 0..TRIES {
        let read = execute(
            Some(&ws),
            "read_file",
            &json!({"path": "sub/note.txt"}),
            &NoLedger,
            &NoCheckpoints,
        )
        .await;
        let listed = execute(
            Some(&ws),
            "list_directory",
            &json!({"path": "sub"}),
            &NoLedger,
            &NoCheckpoints,
        )
        .await;
        let searched = execute(
            Some(&ws),
            "search_text",
            &json!({"pattern": "side", "path": "sub"}),
            &NoLedger,
            &NoCheckpoints,
        )
        .await;
        for outcome in [read, listed, searched] {
            if outcome.is_error {
                assert!(
                    outcome.output.contains("symbolic link"),
                    "{}",
                    outcome.output
                );
            } else {
                outputs.insert(outcome.output);
            }
        }
    }
    let (_dir, swaps) = race.finish();
    assert!(swaps > 0);
    let leaked: Vec<_> = outputs.iter().filter(|o| o.contains("outside")).collect();
    assert_eq!(leaked, Vec::<&String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_racing_a_swapped_symlink_never_land_outside() {
    writes_race(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_racing_a_swapped_symlink_never_land_outside_by_the_walk() {
    writes_race(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_racing_a_swapped_symlink_never_return_outside_content() {
    reads_race(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_racing_a_swapped_symlink_never_return_outside_content_by_the_walk() {
    reads_race(true).await;
}
