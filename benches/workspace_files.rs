//! `workspace/files` on a large workspace: how long ranking the workspace's files for `@`
//! completion takes once the list is kept.
//!
//! Run with `cargo bench --bench workspace_files` (a release build) for the shape: a
//! generated workspace of 50,000 files in 500 folders of 100 (two levels deep), plus an ignored
//! `target/` of 5,000 more that must not be listed. Without `--bench`, as under
//! `cargo test --benches`, it makes the same measurements on 2,000 files to check that they work.
//!
//! Measured: the first answer (the walk that lists the files, then the ranking), then each of
//! 31 answers for queries of one to twelve characters, each checking the kept list for changes
//! (a `stat` per folder) and ranking every file. Goal: the median of those ≤ 20 ms.
//!
//! The generated folders are stamped just before the first answer; a list whose folders were
//! stamped that close to its walk is walked again (see `mentions::files`), so the measurements
//! start once the stamps are more than that margin old, as in a workspace the user opened.

use std::path::Path;
use std::time::{Duration, Instant};

use sidechat::mentions::{FileIndex, rank};

const GOAL_MEDIAN: Duration = Duration::from_millis(20);
const RUNS: usize = 31;
const QUERIES: &[&str] = &[
    "m",
    "lib",
    "mod.rs",
    "d42f7",
    "src/d1",
    "readme",
    "x",
    "d499/f99.rs",
    "nothing-matches-this",
];

fn generate(root: &Path, files: usize) {
    let per_folder = 100;
    for folder in 0..files.div_ceil(per_folder) {
        let dir = root.join(format!("src/d{}/d{folder}", folder % 10));
        std::fs::create_dir_all(&dir).expect("a folder");
        for file in 0..per_folder.min(files - folder * per_folder) {
            std::fs::write(dir.join(format!("f{file}.rs")), "").expect("a file");
        }
    }
    let ignored = root.join("target/debug");
    std::fs::create_dir_all(&ignored).expect("a folder");
    for file in 0..files / 10 {
        std::fs::write(ignored.join(format!("o{file}")), "").expect("a file");
    }
    std::fs::write(root.join(".gitignore"), "target/\n").expect("the ignore file");
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    if bench && cfg!(debug_assertions) {
        panic!("run the benchmark with `cargo bench` (release); debug figures mean nothing");
    }
    let files = if bench { 50_000 } else { 2_000 };
    let dir = tempfile::tempdir().expect("a temporary folder");
    let root = dir.path().canonicalize().expect("the folder's path");
    generate(&root, files);
    // Past the margin within which a folder's stamp is not trusted (two seconds).
    std::thread::sleep(Duration::from_millis(2_100));

    let index = FileIndex::default();
    let started = Instant::now();
    let listed = index.files(&root);
    let first_answer = rank(&listed, "lib", 50);
    let first = started.elapsed();
    assert_eq!(listed.len(), files + 1, "every file but the ignored ones");
    assert!(first_answer.is_empty(), "no file is named like lib");

    let mut times = Vec::with_capacity(RUNS);
    for run in 0..RUNS {
        let query = QUERIES[run % QUERIES.len()];
        let started = Instant::now();
        let listed = index.files(&root);
        let answer = rank(&listed, query, 50);
        times.push(started.elapsed());
        assert!(answer.len() <= 50);
    }
    let median = median(times.clone());
    let slowest = times.iter().max().copied().unwrap_or_default();
    println!(
        "workspace/files over {files} files: first answer {first:.1?}; later answers median {median:.2?}, slowest {slowest:.2?} (goal: median ≤ {GOAL_MEDIAN:?})"
    );
    if bench && median > GOAL_MEDIAN {
        eprintln!("the median misses the goal");
        std::process::exit(1);
    }
}
