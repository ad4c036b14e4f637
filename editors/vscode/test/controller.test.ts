// The host's batching: runs of deltas reach the page as one event each, and the page's model
// ends with what it would have from every event.

import { test } from 'node:test';
import assert from 'node:assert/strict';

import { coalesceDeltas } from '../src/host/controller';
import { SessionModel } from '../src/model/session';
import type { Event, SessionEventParams } from '../src/model/wire';

function numbered(events: Event[]): SessionEventParams[] {
  return events.map((event, i) => ({ sessionId: 's', seq: i + 1, runId: 'r', event }));
}

test('runs of deltas of one message and kind become one delta with the last seq', { timeout: 120_000 }, () => {
  const events = numbered([
    { kind: 'messageStarted', messageId: 'm1', role: 'assistant' },
    { kind: 'thinkingDelta', messageId: 'm1', text: 'let ' },
    { kind: 'thinkingDelta', messageId: 'm1', text: 'me see' },
    { kind: 'textDelta', messageId: 'm1', text: 'Hel' },
    { kind: 'textDelta', messageId: 'm1', text: 'lo ' },
    { kind: 'textDelta', messageId: 'm1', text: 'there' },
    { kind: 'usage', provider: 'p', model: 'm', input: 1, output: 1, cacheRead: 0, cacheWrite: 0, reasoning: 0, durationMs: 1 },
    { kind: 'textDelta', messageId: 'm1', text: '!' },
  ]);
  const batched = coalesceDeltas(events);
  assert.deepEqual(
    batched.map((p) => [p.seq, p.event.kind, 'text' in p.event ? p.event.text : '']),
    [
      [1, 'messageStarted', ''],
      [3, 'thinkingDelta', 'let me see'],
      [6, 'textDelta', 'Hello there'],
      [7, 'usage', ''],
      [8, 'textDelta', '!'],
    ],
  );
  const one = new SessionModel('s');
  for (const p of events) one.apply(p);
  const other = new SessionModel('s');
  for (const p of batched) other.apply(p);
  assert.deepEqual(other.list(), one.list().map((e) => ({ ...e, rev: other.get(e.key)?.rev })));
  assert.equal(other.lastSeq, one.lastSeq);
});
