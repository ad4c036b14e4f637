//! Event numbering across a crash: `seq` never repeats, even for events that were never
//! stored (streamed deltas).

use pretty_assertions::assert_eq;
use serde_json::json;
use sidechat::protocol::{ChatResume, Event, FinishReason};

use crate::harness::{Daemon, Options, Scratch, sid};

#[tokio::test]
async fn seq_keeps_increasing_after_a_daemon_killed_mid_stream() {
    let scratch = Scratch::new();
    // Slow enough that the daemon is killed while it streams.
    let script = json!({"turns": [{"text": "word ".repeat(400), "delayMs": 5}]});
    let mut daemon = Daemon::start(
        &scratch.db(),
        Options::with_env(scratch.replay(script.clone())),
    )
    .await;
    let session = daemon.create_session(scratch.replay_session()).await;
    daemon.send(&session, "talk").await;
    let mut seen = Vec::new();
    let mut deltas = 0;
    while deltas < 20 {
        let event = daemon.next_event().await;
        deltas += usize::from(matches!(event.event, Event::TextDelta { .. }));
        seen.push(event.seq);
    }
    // SIGKILL: nothing gets to run on the way out.
    daemon.process().kill().await.unwrap();
    let highest_before = *seen.iter().max().unwrap();

    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(scratch.replay(script))).await;
    let transcript = daemon.transcript(&session).await;
    assert_eq!(transcript["state"], "unanswered");
    daemon.call::<ChatResume>(sid(&session)).await;
    let events = daemon.until_finished().await;
    assert!(matches!(
        events.last().map(|e| &e.event),
        Some(Event::RunFinished {
            reason: FinishReason::EndTurn,
            ..
        })
    ));
    let after: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert!(
        after[0] > highest_before,
        "the first event after the restart has seq {} but {highest_before} was seen before",
        after[0]
    );
    assert!(
        after.windows(2).all(|w| w[0] < w[1]),
        "seq must increase: {after:?}"
    );
    // Committed messages keep the numbers their events carried.
    let transcript = daemon.transcript(&session).await;
    let stored: Vec<u64> = transcript["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert!(stored.windows(2).all(|w| w[0] < w[1]), "{stored:?}");
    assert!(
        stored.iter().skip(1).all(|s| *s > highest_before),
        "{stored:?}"
    );
    daemon.close().await;
}

#[tokio::test]
async fn seq_rises_by_one_across_reservation_blocks_and_never_repeats_after_a_restart() {
    let scratch = Scratch::new();
    // Over two blocks of reserved numbers (1,024 each) in each answer; the turn answered is
    // chosen by how many answers the transcript holds.
    let answer = json!({"text": "word ".repeat(2_500)});
    let script = json!({"turns": [answer, answer]});
    let run = async |daemon: &mut Daemon, session: &str| -> Vec<u64> {
        daemon.send(session, "talk").await;
        let events = daemon.until_finished().await;
        assert!(matches!(
            events.last().map(|e| &e.event),
            Some(Event::RunFinished {
                reason: FinishReason::EndTurn,
                ..
            })
        ));
        events.iter().map(|e| e.seq).collect()
    };
    let mut daemon = Daemon::start(
        &scratch.db(),
        Options::with_env(scratch.replay(script.clone())),
    )
    .await;
    let session = daemon.create_session(scratch.replay_session()).await;
    let before = run(&mut daemon, &session).await;
    assert!(before.len() > 2 * 1_024, "{} events", before.len());
    let rising: Vec<u64> = (before[0]..).take(before.len()).collect();
    assert!(before == rising, "seq must rise by one within a run");
    assert_eq!(daemon.close().await, 0);

    let mut daemon = Daemon::start(&scratch.db(), Options::with_env(scratch.replay(script))).await;
    let after = run(&mut daemon, &session).await;
    assert!(
        after[0] > before[before.len() - 1],
        "after a restart seq went on from {} at {}",
        before[before.len() - 1],
        after[0]
    );
    let rising: Vec<u64> = (after[0]..).take(after.len()).collect();
    assert!(after == rising, "seq must rise by one within a run");
    daemon.close().await;
}
