// A gap refetch answered while the next run's events came in: the result may say where the run
// stood before them (idle), so it merges its entries and leaves the run's state to the events.
// Seen when a second window opens a chat after a run and the next run starts: the window
// refetches the events it missed while its events arrive, and stayed "idle" mid-stream.

import { test } from 'node:test';
import assert from 'node:assert/strict';

import { SessionModel } from '../src/model/session';
import type { SessionTranscriptResult, TranscriptEntry } from '../src/model/wire';

const SID = 'ses_1';

function entry(id: string, seq: number, role: TranscriptEntry['role'], text: string): TranscriptEntry {
  return { id, seq, role, blocks: [{ type: 'text', text }], status: 'complete', createdAt: '2026-01-01T00:00:00Z' };
}

/** What `session/transcript {afterSeq: 6}` answered before the run started. */
const beforeTheRun: SessionTranscriptResult = { sessionId: SID, state: 'idle', entries: [entry('u2', 9, 'user', 'again')], hasMore: false, lastSeq: 9, pendingApprovals: [], pendingInterjections: [] };

function streaming(): SessionModel {
  const model = new SessionModel(SID);
  model.applyPage({ sessionId: SID, state: 'idle', entries: [entry('u1', 1, 'user', 'hi'), entry('a1', 2, 'assistant', 'Hello.')], hasMore: false, lastSeq: 6, pendingApprovals: [], pendingInterjections: [] });
  // Seq 7 and 8 were missed: 9 is a gap, refetched after 6; meanwhile the run starts and streams.
  const events = [
    { seq: 9, event: { kind: 'messageCompleted' as const, entry: entry('u2', 9, 'user', 'again') } },
    { seq: 10, event: { kind: 'runStarted' as const, model: 'replay' } },
    { seq: 11, event: { kind: 'messageStarted' as const, messageId: 'a2', role: 'assistant' as const } },
    { seq: 12, event: { kind: 'textDelta' as const, messageId: 'a2', text: 'Here ' } },
  ];
  for (const { seq, event } of events) model.apply({ sessionId: SID, seq, runId: 'run_2', event });
  return model;
}

test('a refetch answered after newer events merges its entries and keeps the state the events set', () => {
  const model = streaming();
  model.applyTranscript(beforeTheRun, true);
  assert.equal(model.state, 'running');
  assert.deepEqual(
    model.list().map((e) => [e.key, e.kind, e.kind === 'assistant' ? e.streaming : undefined]),
    [
      ['u1', 'user', undefined],
      ['a1', 'assistant', false],
      ['u2', 'user', undefined],
      ['a2', 'assistant', true],
    ],
  );
  assert.equal(model.lastSeq, 12);
});

test('taken whole, the same result would end the stream: that is what entriesOnly prevents', () => {
  const model = streaming();
  model.applyTranscript(beforeTheRun);
  assert.equal(model.state, 'idle');
});
