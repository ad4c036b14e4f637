//! A fresh daemon's first request does not wait for the tokenizer when it cannot matter: a
//! request whose UTF-8 size fits the window is sent at once, counted by its bytes (an upper
//! bound of its tokens), and its exact figures follow. One that could pass the window by its
//! bytes waits for its exact count. `SIDECHAT_TEST_TOKENIZER=gate:<file>` keeps the tokenizer
//! unbuilt until the test creates the file, so each side is seen without timing.

use std::path::{Path, PathBuf};

use pretty_assertions::assert_eq;
use sidechat::protocol::{
    BudgetEstimate, BudgetSnapshot, Event, FinishReason, SessionCreateParams, SessionEventParams,
};

use crate::harness::{Daemon, Options, Scratch};
use crate::long_context::{WINDOW, env, finish, text_reply};
use crate::upstream::{Upstream, start};

/// The window of a real model: a short message certainly fits by its bytes.
const LARGE_WINDOW: u64 = 128_000;

/// A daemon whose tokenizer is not built before `gate` exists, logging at info level.
async fn gated_daemon(scratch: &Scratch, upstream: &Upstream, window: u64) -> (Daemon, PathBuf) {
    let gate = scratch.dir.path().join("tokenizer-gate");
    let mut settings = env(&upstream.url, window);
    settings.push((
        "SIDECHAT_TEST_TOKENIZER",
        format!("gate:{}", gate.display()),
    ));
    settings.push(("SIDECHAT_LOG", "info".into()));
    (
        Daemon::start(&scratch.db(), Options::with_env(settings)).await,
        gate,
    )
}

/// The same conversation on a daemon whose counts wait for the tokenizer: the figures and
/// stored counts to compare with.
async fn counted_run(
    text: &str,
    answer: &str,
    window: u64,
) -> (Vec<BudgetSnapshot>, Vec<Option<i64>>) {
    let scratch = Scratch::new();
    let upstream = start(vec![text_reply(answer, 100, 3)]);
    let mut daemon =
        Daemon::start(&scratch.db(), Options::with_env(env(&upstream.url, window))).await;
    let session = daemon.create_session(SessionCreateParams::default()).await;
    daemon.send(&session, text).await;
    let events = daemon.until_finished().await;
    daemon.close().await;
    (budgets(&events), stored_counts(&scratch.db()))
}

fn budgets(events: &[SessionEventParams]) -> Vec<BudgetSnapshot> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            Event::Budget { snapshot, .. } => Some(*snapshot),
            _ => None,
        })
        .collect()
}

/// The stored token count of each message, oldest first.
fn stored_counts(db: &Path) -> Vec<Option<i64>> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut stmt = conn
        .prepare("SELECT tokens FROM messages ORDER BY seq")
        .unwrap();
    stmt.query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// Polls until `upstream` has had `n` requests (a guard against a hang only).
pub(crate) async fn until_requests(upstream: &Upstream, n: usize) {
    let mut polls = 0;
    while upstream.bodies().len() < n {
        polls += 1;
        assert!(polls < 600, "the upstream never got request {n}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

const WAITS: &str = "it waits for its exact count";

#[tokio::test]
async fn a_fresh_daemons_first_request_goes_out_before_the_tokenizer_is_built_and_its_exact_figures_follow()
 {
    let text = "Hello there, what does this project do?";
    let scratch = Scratch::new();
    let upstream = start(vec![text_reply("Hi.", 100, 3)]);
    let (mut daemon, gate) = gated_daemon(&scratch, &upstream, LARGE_WINDOW).await;
    let session = daemon.create_session(SessionCreateParams::default()).await;
    daemon.send(&session, text).await;

    // The tokenizer cannot be built yet, and the request reaches the upstream all the same,
    // after a budget event of upper bounds.
    until_requests(&upstream, 1).await;
    let before = daemon
        .events_until(|e| matches!(e, Event::Budget { .. }))
        .await;
    let bounds = budgets(&before)[0];
    assert_eq!(bounds.estimate, BudgetEstimate::UpperBound);
    assert!(!bounds.exact);

    // Once it is built the step's budget event carries the exact figures: those of a daemon
    // that waited for them.
    std::fs::write(&gate, "").unwrap();
    let events = daemon.until_finished().await;
    assert_eq!(finish(&events).0, FinishReason::EndTurn);
    let counted = budgets(&events);
    assert_eq!(
        counted.len(),
        1,
        "one budget event follows, beside the usage"
    );
    let (expected, expected_counts) = counted_run(text, "Hi.", LARGE_WINDOW).await;
    assert_eq!(counted[0], expected[0]);
    assert_eq!(counted[0].estimate, BudgetEstimate::Counted);
    // Each bound is at least its exact figure.
    for (bound, exact) in [
        (bounds.latest_user_tokens, counted[0].latest_user_tokens),
        (bounds.tool_tokens, counted[0].tool_tokens),
        (bounds.raw_input_tokens, counted[0].raw_input_tokens),
    ] {
        assert!(bound >= exact, "{bound} < {exact}");
    }
    assert!(bounds.latest_user_tokens > counted[0].latest_user_tokens);
    // The user's message, stored before its count could be made, has its exact count now.
    daemon.close().await;
    assert_eq!(stored_counts(&scratch.db()), expected_counts);
}

#[tokio::test]
async fn a_request_that_could_pass_the_window_by_its_bytes_waits_for_its_exact_count() {
    // Larger than the usable window in bytes, well inside it in tokens.
    let text = "请帮我重构这个函数，让它更容易测试。🙂🚀 ".repeat(60);
    assert!(text.len() as u64 > WINDOW / 2);
    let scratch = Scratch::new();
    let upstream = start(vec![text_reply("好的", 100, 3)]);
    let (mut daemon, gate) = gated_daemon(&scratch, &upstream, WINDOW).await;
    let session = daemon.create_session(SessionCreateParams::default()).await;
    daemon.send(&session, &text).await;

    // The daemon says the request waits; while the tokenizer cannot be built nothing is sent.
    let mut polls = 0;
    while !daemon.conn.stderr_tail().iter().any(|l| l.contains(WAITS)) {
        polls += 1;
        assert!(
            polls < 600,
            "the request never waited: {:?}",
            daemon.conn.stderr_tail()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(upstream.bodies().len(), 0);

    std::fs::write(&gate, "").unwrap();
    let events = daemon.until_finished().await;
    assert_eq!(finish(&events).0, FinishReason::EndTurn);
    // Counted exactly before it went: the same figures as a daemon that waited from the start,
    // and no upper bounds told.
    let (expected, expected_counts) = counted_run(&text, "好的", WINDOW).await;
    assert_eq!(budgets(&events), expected);
    assert_eq!(upstream.bodies().len(), 1);
    daemon.close().await;
    assert_eq!(stored_counts(&scratch.db()), expected_counts);
}
