//! A year of history costs nothing: what a client waits for on a database as a year of daily
//! use leaves it, beside the same on a near-empty one, in one run.
//!
//! Run with `cargo bench --bench history` (a release build). Without `--bench`, as under
//! `cargo test --benches`, it makes one quick round on a small database to check that it
//! works; its figures mean nothing.
//!
//! The year: [`YEAR_SESSIONS`] sessions across [`YEAR_WORKSPACES`] folders, 500 messages each
//! on average ([`BIG_SESSIONS`] of them hold [`BIG_MESSAGES`]), in turns of a user message, an
//! assistant message calling a tool, the tool's result (500 bytes of a file) and the answer,
//! each turn with its run, its tool call and two usage lines, and a carry-over note opening a
//! new context every [`TURNS_PER_CONTEXT`] turns: about 1 GB. It is written with bulk SQL in
//! one transaction into a file under the target folder and kept there for later runs (its name
//! holds the schema version and the scale). `SIDECHAT_HISTORY_SCALE=0.1` makes a tenth of
//! the sessions (the big ones keep their length) for quick runs; `SIDECHAT_HISTORY_ROUNDS`
//! sets the number of rounds. The near-empty database holds the same page shapes in about
//! 0.5 MB: two folders of 40 one-turn sessions, the largest session 104 messages long.
//!
//! Measured against each, interleaved (which goes first alternates), medians of [`ROUNDS`]:
//! - spawn `sidechat serve` → its `initialize` reply;
//! - `session/list` of one folder, and of all folders (first page);
//! - `session/get` and `session/transcript` of the last 100 entries of the largest session;
//! - `chat/send` → the fake upstream has the request, in the largest session (10,000
//!   messages in the year);
//! - `sidechat sessions list` and `sidechat doctor`, as processes, start to exit.
//!
//! Goal: each at most [`GOAL_RATIO`] × its near-empty figure. It also reports the year's
//! bytes per message, and the WAL's size after the rounds of `chat/send` (steady use).

// Only the daemon's command is used here; requests go through the client's `Connection`.
#[path = "support/stdio.rs"]
mod stdio;
#[path = "../tests/support/upstream.rs"]
mod upstream;
#[path = "support/words.rs"]
mod words;

use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, params};
use serde_json::{Value, json};
use sidechat::client::Connection as RpcConnection;
use sidechat::protocol::{
    Block, ChatSend, CompactionMethod, FinishReason, Initialize, Initialized, InitializedParams,
    MessageStatus, Request, Role, SessionGet, SessionList, SessionTranscript,
};
use sidechat::rpc::framing::Framing;
use sidechat::store::{RunStatus, SCHEMA_VERSION, Store};

const YEAR_SESSIONS: usize = 2000;
const YEAR_WORKSPACES: usize = 50;
const BIG_SESSIONS: usize = 5;
const BIG_MESSAGES: u64 = 10_000;
const MEAN_MESSAGES: u64 = 500;
/// Turns between carry-over notes: a new context a day or so.
const TURNS_PER_CONTEXT: u64 = 50;
/// Medians of this many rounds: a new daemon's first answers move by a few milliseconds from
/// round to round on a shared 2-core machine (the store opening, the tokenizer warming up).
const ROUNDS: usize = 21;
const SMOKE_ROUNDS: usize = 1;
/// Part of the cached year's name with the schema version: raised whenever [`build`] writes
/// something different, so that no run measures a year an older builder left.
const BUILDER_VERSION: u32 = 2;
const GOAL_RATIO: f64 = 1.5;
const MODEL: &str = "gpt-4o";
const SCALE_VAR: &str = "SIDECHAT_HISTORY_SCALE";
/// How many measured rounds ([`ROUNDS`] under `--bench`, else one).
const ROUNDS_VAR: &str = "SIDECHAT_HISTORY_ROUNDS";

/// The shape of a database to build.
#[derive(Debug, Clone, Copy)]
struct Shape {
    sessions: usize,
    workspaces: usize,
    big: usize,
    big_messages: u64,
    mean_messages: u64,
}

impl Shape {
    fn year(scale: f64) -> Self {
        Self {
            sessions: ((YEAR_SESSIONS as f64 * scale).round() as usize).max(10),
            workspaces: ((YEAR_WORKSPACES as f64 * scale).round() as usize).max(2),
            big: ((BIG_SESSIONS as f64 * scale).round() as usize).max(1),
            big_messages: BIG_MESSAGES,
            mean_messages: MEAN_MESSAGES,
        }
    }

    /// The year's page shapes in a tiny file (about 0.5 MB): two folders of 40 sessions, so
    /// that listing one folder answers 40 as in the year and listing all a full page of 50,
    /// the others of one turn each, and a largest session of 104 messages, so that its
    /// transcript page holds 100 entries as the year's does.
    fn near_empty() -> Self {
        Self {
            sessions: 80,
            workspaces: 2,
            big: 1,
            big_messages: 104,
            mean_messages: 4,
        }
    }

    /// How many messages session `index` holds: the big ones first, the others spread around
    /// the mean that keeps the whole at `sessions × mean_messages`.
    fn messages(&self, index: usize) -> u64 {
        if index < self.big {
            return self.big_messages;
        }
        let rest = self.sessions - self.big;
        let total = (self.sessions as u64 * self.mean_messages)
            .saturating_sub(self.big as u64 * self.big_messages)
            .max(rest as u64 * 4);
        let mean = total / rest as u64;
        // 20% to 180% of the mean, evenly.
        let spread = mix(index as u64) % 161 + 20;
        (mean * spread / 100).max(4) / 4 * 4
    }
}

/// A cheap, fixed pseudo-random number from `seed`.
fn mix(seed: u64) -> u64 {
    let mut x = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// About `bytes` of words, different for each `seed`.
fn words(seed: u64, bytes: usize) -> String {
    let mut out = String::with_capacity(bytes + 16);
    let mut state = seed;
    while out.len() < bytes {
        state = mix(state);
        out.push_str(words::WORDS[(state % words::WORDS.len() as u64) as usize]);
        out.push(' ');
    }
    out
}

fn name<T: serde::Serialize>(value: T) -> String {
    match serde_json::to_value(value) {
        Ok(Value::String(name)) => name,
        other => panic!("not a name: {other:?}"),
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Writes a database of `shape` at `path` with bulk SQL in one transaction, the schema made by
/// the store itself; the folders it names are made under `root`. Answers the largest
/// session's id.
fn build(path: &Path, root: &Path, shape: Shape) -> String {
    let _ = std::fs::remove_file(path);
    drop(Store::open(path).expect("cannot create the database"));
    let mut conn = Connection::open(path).expect("cannot open the database");
    conn.pragma_update(None, "journal_mode", "DELETE")
        .expect("journal mode");
    conn.pragma_update(None, "synchronous", "OFF")
        .expect("synchronous");
    conn.pragma_update(None, "journal_mode", "OFF")
        .expect("journal mode");
    conn.pragma_update(None, "foreign_keys", "OFF")
        .expect("foreign keys");
    let tx = conn.transaction().expect("a transaction");
    let year_ms: i64 = 365 * 24 * 3600 * 1000;
    let started = now_ms() - year_ms;
    let (user, assistant, tool, summary) = (
        name(Role::User),
        name(Role::Assistant),
        name(Role::Tool),
        name(Role::Summary),
    );
    let complete = name(MessageStatus::Complete);
    let (finished, end_turn) = (name(RunStatus::Finished), name(FinishReason::EndTurn));
    let done = name(sidechat::protocol::ToolCallStatus::Done);
    {
        // Each row is written before what refers to it, as the daemon writes them, so that
        // the store's triggers keep on the session's row what a list shows of it.
        let mut session_row = tx
            .prepare(
                "INSERT INTO sessions (id, title, account, model, workspace_root, max_steps,
                   created_at, updated_at) VALUES (?1, ?2, 'openai', ?3, ?4, 25, ?5, ?5)",
            )
            .expect("prepare");
        let mut session_end = tx
            .prepare(
                "UPDATE sessions SET updated_at = ?2, last_seq = ?3, seq_reserved = ?3,
                   context_start_seq = ?4 WHERE id = ?1",
            )
            .expect("prepare");
        let mut message = tx
            .prepare(
                "INSERT INTO messages (id, session_id, seq, run_id, role, blocks, status,
                   created_at, tokens, tokens_exact) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 0)",
            )
            .expect("prepare");
        let mut run = tx
            .prepare(
                "INSERT INTO runs (id, session_id, model, status, reason, steps, started_at,
                   finished_at) VALUES (?1, ?2, ?3, ?4, ?5, 2, ?6, ?7)",
            )
            .expect("prepare");
        let mut call = tx
            .prepare(
                "INSERT INTO tool_calls (id, session_id, run_id, message_id, position, name, input,
                   status, output, is_error) VALUES (?1, ?2, ?3, ?4, 0, 'read_file', ?5, ?6, ?7, 0)",
            )
            .expect("prepare");
        let mut usage = tx
            .prepare(
                "INSERT INTO usage_lines (session_id, run_id, provider, model, input, output,
                   cache_read, cache_write, reasoning, at, duration_ms, kind)
                 VALUES (?1, ?2, 'openai', ?3, ?4, ?5, ?6, 0, 0, ?7, ?8, 'turn')",
            )
            .expect("prepare");
        let next_id = std::cell::Cell::new(0u64);
        let id = |prefix: &str| {
            next_id.set(next_id.get() + 1);
            format!("{prefix}_{:032x}", next_id.get())
        };
        for index in 0..shape.sessions {
            let session = format!("ses_{:032x}", index + 1);
            let folder = root.join(format!("project-{:02}", index % shape.workspaces));
            std::fs::create_dir_all(&folder).expect("a workspace folder");
            let messages = shape.messages(index);
            // Sessions spread over the year; each message a minute after the one before.
            let opened = started + (year_ms / shape.sessions as i64) * index as i64;
            session_row
                .execute(params![
                    session,
                    format!("Session {index}"),
                    MODEL,
                    folder.display().to_string(),
                    opened
                ])
                .expect("insert a session");
            let mut seq = 0u64;
            let mut context_start = 0u64;
            let mut at = opened;
            let mut add = |role: &str, run: Option<&str>, blocks: &[Block], at: i64, seq: u64| {
                let blocks = serde_json::to_string(blocks).expect("blocks");
                let msg = id("msg");
                message
                    .execute(params![
                        msg,
                        session,
                        seq as i64,
                        run,
                        role,
                        blocks,
                        complete,
                        at,
                        (blocks.len() / 4) as i64
                    ])
                    .expect("insert a message");
                msg
            };
            let turns = messages / 4;
            for turn in 0..turns {
                let seed = mix(index as u64 * 1_000_003 + turn);
                if turn > 0 && turn % TURNS_PER_CONTEXT == 0 {
                    // A new context opens with a carry-over note.
                    context_start = seq;
                    seq += 1;
                    add(
                        &summary,
                        None,
                        &[Block::Summary {
                            method: CompactionMethod::CarryOver,
                            text: words(seed ^ 7, 600),
                            from_seq: None,
                            to_seq: None,
                            messages: TURNS_PER_CONTEXT * 4,
                        }],
                        at,
                        seq,
                    );
                }
                let run_id = id("run");
                let call_id = id("call");
                let input = json!({"path": format!("src/module_{}.rs", seed % 97)});
                let output = words(seed ^ 3, 500);
                run.execute(params![
                    run_id,
                    session,
                    MODEL,
                    finished,
                    end_turn,
                    at,
                    at + 6_000
                ])
                .expect("insert a run");
                seq += 1;
                add(
                    &user,
                    Some(&run_id),
                    &[Block::Text {
                        text: words(seed, 200),
                    }],
                    at,
                    seq,
                );
                seq += 1;
                let asked = add(
                    &assistant,
                    Some(&run_id),
                    &[
                        Block::Text {
                            text: words(seed ^ 1, 80),
                        },
                        Block::ToolCall {
                            id: call_id.clone(),
                            name: "read_file".into(),
                            input: input.clone(),
                        },
                    ],
                    at + 2_000,
                    seq,
                );
                call.execute(params![
                    call_id,
                    session,
                    run_id,
                    asked,
                    input.to_string(),
                    done,
                    output
                ])
                .expect("insert a tool call");
                seq += 1;
                add(
                    &tool,
                    Some(&run_id),
                    &[Block::ToolResult {
                        call_id: call_id.clone(),
                        output,
                        is_error: false,
                        status: sidechat::protocol::ToolCallStatus::Done,
                    }],
                    at + 2_100,
                    seq,
                );
                seq += 1;
                add(
                    &assistant,
                    Some(&run_id),
                    &[Block::Text {
                        text: words(seed ^ 2, 300),
                    }],
                    at + 6_000,
                    seq,
                );
                for (step, at) in [(0, at + 2_000), (1, at + 6_000)] {
                    usage
                        .execute(params![
                            session,
                            run_id,
                            MODEL,
                            3_000 + (turn % TURNS_PER_CONTEXT) as i64 * 900,
                            200 + step * 100,
                            2_000 + (turn % TURNS_PER_CONTEXT) as i64 * 800,
                            at,
                            1_800
                        ])
                        .expect("insert a usage line");
                }
                at += 60_000 * 4;
            }
            session_end
                .execute(params![session, at, seq as i64, context_start as i64])
                .expect("end a session");
        }
    }
    tx.commit().expect("commit");
    conn.pragma_update(None, "journal_mode", "WAL")
        .expect("journal mode");
    format!("ses_{:032x}", 1)
}

/// The database of `shape` under `dir` named `label`, built unless a finished one is there.
fn database(dir: &Path, label: &str, shape: Shape) -> (PathBuf, String) {
    let path = dir.join(format!("{label}.db"));
    let largest = format!("ses_{:032x}", 1);
    if path.exists() {
        return (path, largest);
    }
    let building = dir.join(format!("{label}.building"));
    let started = Instant::now();
    let built = build(&building, dir, shape);
    std::fs::rename(&building, &path).expect("keep the built database");
    eprintln!(
        "built {label} ({} sessions) in {:.1} s",
        shape.sessions,
        started.elapsed().as_secs_f64()
    );
    assert_eq!(built, largest);
    (path, largest)
}

/// A copy of the cached `db` in `dir` for this run's daemons to write to, so that no run
/// measures what the runs before it wrote (the largest session's context would grow by their
/// turns, and with it the request `chat/send` builds).
fn fresh_copy(db: &Path, dir: &Path) -> PathBuf {
    let conn = Connection::open(db).expect("open the cached database");
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .expect("checkpoint the cached database");
    drop(conn);
    let copy = dir.join("year.db");
    std::fs::copy(db, &copy).expect("copy the cached database");
    // Written out before the rounds, so that the kernel's writeback of a gigabyte does not
    // run beside them.
    std::fs::File::open(&copy)
        .and_then(|file| file.sync_all())
        .expect("write the copy out");
    copy
}

/// The fake provider: `replies` short answers, each noting first when its request arrived.
fn start_upstream(replies: usize) -> (upstream::Upstream, Receiver<Instant>) {
    let (tx, arrivals) = channel();
    let replies = (0..replies)
        .map(|_| {
            let tx = tx.clone();
            upstream::Reply::writer(move |socket| {
                let _ = tx.send(Instant::now());
                let chunks = upstream::openai::text(&["Noted."], 100, 2);
                for chunk in &chunks {
                    std::io::Write::write_all(socket, upstream::openai::event(chunk).as_bytes())?;
                }
                std::io::Write::write_all(socket, upstream::openai::DONE.as_bytes())
            })
        })
        .collect();
    (upstream::start(replies), arrivals)
}

struct Daemon {
    conn: RpcConnection,
    notes: tokio::sync::mpsc::UnboundedReceiver<Value>,
}

impl Daemon {
    /// Spawns `sidechat serve` on `db`; answers it with the time to its `initialize` reply.
    async fn spawn(home: &Path, db: &Path, upstream: &str) -> (Self, Duration) {
        let started = Instant::now();
        let mut command = stdio::serve_command(home, db, upstream, "warn");
        command.env("SIDECHAT_OPENAI_MODEL", MODEL);
        let command = tokio::process::Command::from(command);
        let (conn, notes) = RpcConnection::spawn(command, Framing::Line).expect("cannot spawn");
        let daemon = Self { conn, notes };
        daemon
            .call(Initialize::METHOD, json!({"protocolVersion": 1}))
            .await;
        let initialized = started.elapsed();
        daemon
            .conn
            .notify::<Initialized>(InitializedParams {})
            .await
            .expect("initialized");
        (daemon, initialized)
    }

    async fn call(&self, method: &str, params: Value) -> Value {
        match self.conn.request(method, params).await {
            Ok(Ok(result)) => result,
            other => panic!("{method} failed: {other:?}"),
        }
    }

    async fn timed(&self, method: &str, params: Value) -> Duration {
        let started = Instant::now();
        self.call(method, params).await;
        started.elapsed()
    }

    /// Sends `text` to `session`; the time until the fake provider had the request.
    async fn timed_send(
        &mut self,
        session: &str,
        text: &str,
        arrivals: &Receiver<Instant>,
    ) -> Duration {
        let sent = Instant::now();
        self.call(
            ChatSend::METHOD,
            json!({"sessionId": session, "text": text}),
        )
        .await;
        self.until_finished(session).await;
        let arrived = arrivals
            .recv_timeout(Duration::from_secs(60))
            .expect("the request never reached the provider");
        arrived.duration_since(sent)
    }

    async fn until_finished(&mut self, session: &str) {
        loop {
            let note = tokio::time::timeout(Duration::from_secs(60), self.notes.recv())
                .await
                .expect("no event within a minute")
                .expect("the daemon closed its output");
            let params = &note["params"];
            if params["sessionId"] == session && params["event"]["kind"] == "runFinished" {
                assert_eq!(params["event"]["reason"], "end_turn", "{note}");
                return;
            }
        }
    }
}

/// `sidechat <args> --db <db>` run to its end: how long it took.
fn timed_process(home: &Path, db: &Path, args: &[&str]) -> Duration {
    let started = Instant::now();
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_sidechat"))
        .args(args)
        .arg("--db")
        .arg(db)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_DATA_HOME", home.join("data"))
        .env("SIDECHAT_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("run sidechat");
    let took = started.elapsed();
    assert!(status.success(), "sidechat {args:?} failed: {status}");
    took
}

/// The figures measured against one database.
#[derive(Default)]
struct Samples {
    initialize: Vec<Duration>,
    list_folder: Vec<Duration>,
    list_all: Vec<Duration>,
    get: Vec<Duration>,
    transcript: Vec<Duration>,
    send: Vec<Duration>,
    cli_list: Vec<Duration>,
    doctor: Vec<Duration>,
}

/// One database under measurement: its file, a home folder, its largest session and the
/// folder of that session.
struct Subject {
    db: PathBuf,
    home: PathBuf,
    largest: String,
    folder: String,
    samples: Samples,
}

impl Subject {
    fn new(db: PathBuf, home: PathBuf, largest: String) -> Self {
        let conn = Connection::open(&db).expect("open");
        let folder: String = conn
            .query_row(
                "SELECT workspace_root FROM sessions WHERE id = ?1",
                [&largest],
                |r| r.get(0),
            )
            .expect("the largest session's folder");
        Self {
            db,
            home,
            largest,
            folder,
            samples: Samples::default(),
        }
    }

    /// One round of every measurement; kept when `keep`.
    async fn round(&mut self, upstream: &str, arrivals: &Receiver<Instant>, keep: bool) {
        let (mut daemon, initialize) = Daemon::spawn(&self.home, &self.db, upstream).await;
        let list_folder = daemon
            .timed(SessionList::METHOD, json!({"workspaceRoot": self.folder}))
            .await;
        let list_all = daemon.timed(SessionList::METHOD, json!({})).await;
        let get = daemon
            .timed(SessionGet::METHOD, json!({"sessionId": self.largest}))
            .await;
        let transcript = daemon
            .timed(
                SessionTranscript::METHOD,
                json!({"sessionId": self.largest, "beforeSeq": (1u64 << 53) - 1, "limit": 100}),
            )
            .await;
        let send = daemon
            .timed_send(&self.largest, "What changed since yesterday?", arrivals)
            .await;
        daemon.conn.close().await.expect("close");
        let cli_list = timed_process(&self.home, &self.db, &["sessions", "list"]);
        let doctor = timed_process(&self.home, &self.db, &["doctor"]);
        if keep {
            let s = &mut self.samples;
            s.initialize.push(initialize);
            s.list_folder.push(list_folder);
            s.list_all.push(list_all);
            s.get.push(get);
            s.transcript.push(transcript);
            s.send.push(send);
            s.cli_list.push(cli_list);
            s.doctor.push(doctor);
        }
    }
}

fn median(samples: &[Duration]) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    sorted[sorted.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn file_size(path: &Path, suffix: &str) -> u64 {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    std::fs::metadata(PathBuf::from(name)).map_or(0, |m| m.len())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    if bench && cfg!(debug_assertions) {
        panic!("run the benchmark with `cargo bench` (release); debug figures mean nothing");
    }
    let scale: f64 = match std::env::var(SCALE_VAR) {
        Ok(value) => value
            .parse()
            .expect("SIDECHAT_HISTORY_SCALE is a number, e.g. 0.1"),
        Err(_) if bench => 1.0,
        Err(_) => 0.01,
    };
    let rounds = match std::env::var(ROUNDS_VAR) {
        Ok(value) => value
            .parse()
            .expect("SIDECHAT_HISTORY_ROUNDS is a number of rounds"),
        Err(_) if bench => ROUNDS,
        Err(_) => SMOKE_ROUNDS,
    };
    let year_shape = Shape::year(scale);
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("history");
    std::fs::create_dir_all(&cache).expect("the cache folder");
    let label = format!("year-v{SCHEMA_VERSION}-b{BUILDER_VERSION}-x{scale}");
    let (cached_year, year_largest) = database(&cache, &label, year_shape);
    let dir = tempfile::tempdir().expect("a temporary folder");
    let year_db = fresh_copy(&cached_year, dir.path());
    let (empty_db, empty_largest) = database(dir.path(), "near-empty", Shape::near_empty());

    let conn = Connection::open(&year_db).expect("open");
    let messages: i64 = conn
        .query_row("SELECT COUNT(*) FROM messages", [], |r| r.get(0))
        .expect("count");
    let sessions: i64 = conn
        .query_row("SELECT COUNT(*) FROM sessions", [], |r| r.get(0))
        .expect("count");
    drop(conn);
    let year_bytes = file_size(&year_db, "") + file_size(&year_db, "-wal");
    println!(
        "year database: {sessions} sessions, {messages} messages, {:.1} MB, {:.0} bytes per message (its runs, tool calls and usage lines included)",
        year_bytes as f64 / 1e6,
        year_bytes as f64 / messages as f64
    );

    let (upstream, arrivals) = start_upstream((rounds + 1) * 2 + 2);
    let mut subjects = [
        Subject::new(empty_db, dir.path().join("home-empty"), empty_largest),
        Subject::new(year_db.clone(), dir.path().join("home-year"), year_largest),
    ];
    for round in 0..=rounds {
        // Which database goes first alternates: a round's second daemon starts right after
        // the first one's processes exit, on a machine still busy with them.
        if round % 2 == 1 {
            subjects.reverse();
        }
        for subject in &mut subjects {
            // Round 0 warms the page cache and the binary up.
            subject.round(&upstream.url, &arrivals, round > 0).await;
        }
        if round % 2 == 1 {
            subjects.reverse();
        }
    }
    let wal = file_size(&year_db, "-wal");

    let [empty, year] = &subjects;
    println!(
        "medians of {rounds} rounds, near-empty → year ({} sessions):",
        sessions
    );
    let mut missed = Vec::new();
    let rows: [(&str, &Vec<Duration>, &Vec<Duration>); 8] = [
        (
            "spawn → initialize",
            &empty.samples.initialize,
            &year.samples.initialize,
        ),
        (
            "session/list, one folder",
            &empty.samples.list_folder,
            &year.samples.list_folder,
        ),
        (
            "session/list, all",
            &empty.samples.list_all,
            &year.samples.list_all,
        ),
        (
            "session/get, largest",
            &empty.samples.get,
            &year.samples.get,
        ),
        (
            "session/transcript, last 100",
            &empty.samples.transcript,
            &year.samples.transcript,
        ),
        (
            "chat/send → upstream, largest",
            &empty.samples.send,
            &year.samples.send,
        ),
        (
            "sidechat sessions list",
            &empty.samples.cli_list,
            &year.samples.cli_list,
        ),
        (
            "sidechat doctor",
            &empty.samples.doctor,
            &year.samples.doctor,
        ),
    ];
    for (what, near_empty, full) in rows {
        let (a, b) = (median(near_empty), median(full));
        let ratio = b.as_secs_f64() / a.as_secs_f64();
        if ratio > GOAL_RATIO {
            missed.push(what);
        }
        println!("  {what:<32} {:>10}  {:>10}  {ratio:.2}×", ms(a), ms(b));
    }
    println!("  WAL after the rounds: {:.1} MB", wal as f64 / 1e6);
    if bench {
        match missed.is_empty() {
            true => println!("  goal ≤ {GOAL_RATIO}×: met"),
            false => println!("  goal ≤ {GOAL_RATIO}×: NOT met for {}", missed.join(", ")),
        }
    } else {
        println!("  (a smoke run; its figures mean nothing)");
    }
}
