//! A long session costs no more per turn than a new one: from `chat/send` to the provider
//! receiving the request, for a session of 10,000 stored messages with a summary, beside the
//! same for a new session, in one run.
//!
//! Run with `cargo bench --bench long_session` (a release build). Without `--bench`, as under
//! `cargo test --bench long_session`, it makes a few rounds to check that it works; its
//! figures mean nothing.
//!
//! The database is written beforehand through the library's store: one session of
//! [`MESSAGES`] messages (user and assistant in turns, each a sentence of about 40 words with
//! its token count stored, as the daemon stores them), then a `summary` entry folding all but
//! the newest [`KEPT`] of them, the session's context starting after the folded range, as a
//! compaction leaves it. The measured daemon (`sidechat serve`, release build) is then spawned
//! on it, pointed at the tests' fake OpenAI-compatible server on 127.0.0.1
//! (`tests/support/upstream.rs`, threads of this process), which notes the instant each
//! request arrived, whole, before it answers with a short text.
//!
//! Each round sends one short message to the long session and one to a session created just
//! before (not timed), in alternating order, and waits for each run's `runFinished`. A sample
//! is the time from writing the `chat/send` frame to the fake server having read the request.
//! The goal: the long session's median at most [`GOAL_RATIO`] times the new session's.
//!
//! The daemon gets an empty environment apart from `PATH`, a temporary `HOME` and XDG folders
//! (so no config file of the machine is read), the provider variables and `SIDECHAT_LOG=warn`.

#[path = "support/long_session.rs"]
mod long_session;
#[path = "support/words.rs"]
mod words;
// Only the daemon's command is used here; requests go through the client's `Connection`.
#[path = "support/stdio.rs"]
mod stdio;
#[path = "../tests/support/upstream.rs"]
mod upstream;

use std::path::Path;
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sidechat::client::Connection;
use sidechat::protocol::{
    Block, ChatSend, CompactionMethod, Initialize, Initialized, InitializedParams, Request, Role,
    SessionCreate,
};
use sidechat::rpc::framing::Framing;
use sidechat::store::Store;

use long_session::{LongSession, sentence};

/// Stored messages of the long session, besides its summary.
const MESSAGES: u64 = 10_000;
/// The newest messages the summary leaves verbatim.
const KEPT: u64 = 40;
/// Rounds of a `--bench` run; each sends once to each session.
const ROUNDS: usize = 41;
const SMOKE_ROUNDS: usize = 3;
const GOAL_RATIO: f64 = 2.0;
const MODEL: &str = "gpt-4o";

/// Writes the long session into the database at `db`; its id.
fn write_long_session(db: &Path) -> String {
    let store = Store::open(db).expect("cannot open the database");
    let long =
        LongSession::create(&store, "openai", MODEL, None).expect("cannot create the session");
    long.append_turns(MESSAGES, |seq, _| sentence(seq))
        .expect("cannot append");
    let folded_to = MESSAGES - KEPT;
    long.append(
        MESSAGES + 1,
        Role::Summary,
        vec![Block::Summary {
            method: CompactionMethod::Summary,
            text: sentence(0).repeat(10),
            from_seq: Some(1),
            to_seq: Some(folded_to),
            messages: folded_to,
        }],
    )
    .expect("cannot append");
    long.session.id
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
    conn: Connection,
    notes: tokio::sync::mpsc::UnboundedReceiver<Value>,
}

impl Daemon {
    async fn spawn(home: &Path, db: &Path, upstream: &str) -> Self {
        let mut command = stdio::serve_command(home, db, upstream, "warn");
        command.env("SIDECHAT_OPENAI_MODEL", MODEL);
        let command = tokio::process::Command::from(command);
        let (conn, notes) = Connection::spawn(command, Framing::Line).expect("cannot spawn");
        let daemon = Self { conn, notes };
        daemon
            .call(Initialize::METHOD, json!({"protocolVersion": 1}))
            .await;
        daemon
            .conn
            .notify::<Initialized>(InitializedParams {})
            .await
            .expect("initialized");
        daemon
    }

    async fn call(&self, method: &str, params: Value) -> Value {
        match self.conn.request(method, params).await {
            Ok(Ok(result)) => result,
            other => panic!("{method} failed: {other:?}"),
        }
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

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let rounds = if bench { ROUNDS } else { SMOKE_ROUNDS };
    let dir = tempfile::tempdir().expect("a temporary folder");
    let db = dir.path().join("sidechat.db");
    let written = Instant::now();
    let long = write_long_session(&db);
    eprintln!(
        "wrote {MESSAGES} messages and a summary in {:.1} s",
        written.elapsed().as_secs_f64()
    );
    let (upstream, arrivals) = start_upstream(rounds * 2 + 4);
    let mut daemon = Daemon::spawn(dir.path(), &db, &upstream.url).await;
    let mut long_samples = Vec::new();
    let mut new_samples = Vec::new();
    for round in 0..=rounds {
        let fresh = daemon
            .call(SessionCreate::METHOD, json!({"title": "new"}))
            .await;
        let fresh = fresh["id"].as_str().expect("an id").to_string();
        let text = format!("Round {round}: what changed since last time?");
        let (first, second) = match round % 2 {
            0 => (&long, &fresh),
            _ => (&fresh, &long),
        };
        let a = daemon.timed_send(first, &text, &arrivals).await;
        let b = daemon.timed_send(second, &text, &arrivals).await;
        // Round 0 warms up.
        if round == 0 {
            continue;
        }
        let (to_long, to_new) = if first == &long { (a, b) } else { (b, a) };
        long_samples.push(to_long);
        new_samples.push(to_new);
    }
    // The long session's requests carried the summary and the kept turns, the new ones not.
    let bodies = upstream.bodies();
    let longest = bodies
        .iter()
        .map(|b| b["messages"].as_array().map_or(0, Vec::len))
        .max()
        .unwrap_or(0);
    assert!(
        longest as u64 > KEPT,
        "the long session's requests were short: {longest}"
    );
    assert!(bodies.iter().any(|b| {
        b.to_string()
            .contains("Summary of the earlier conversation")
    }));
    daemon.conn.close().await.expect("close");

    let long_median = median(&mut long_samples);
    let new_median = median(&mut new_samples);
    let ratio = long_median.as_secs_f64() / new_median.as_secs_f64();
    println!(
        "chat/send → request at the provider ({} rounds, medians):",
        long_samples.len()
    );
    println!(
        "  session of {MESSAGES} messages with a summary: {}",
        ms(long_median)
    );
    println!(
        "  new session:                                  {}",
        ms(new_median)
    );
    println!(
        "  ratio: {ratio:.2}× (goal ≤ {GOAL_RATIO}×){}",
        if bench {
            ""
        } else {
            " — a smoke run; its figures mean nothing"
        }
    );
}
