// The host controller: runs of deltas reach the page as one event each, and a gap in seq is
// filled by a refetch, so the page ends with what a fresh load shows.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { ChatController, coalesceDeltas, type DaemonLike, type HostUi } from '../src/host/controller';
import type { HostToPage } from '../src/model/messages';
import { SessionModel } from '../src/model/session';
import type { Event, SessionEventParams } from '../src/model/wire';
import { recordingUi, Scratch, until } from './harness';

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

test('a gap in seq makes the host refetch, and the page ends as a fresh load would', { timeout: 120_000 }, async () => {
  const scratch = new Scratch();
  const daemon = scratch.daemon({ SIDECHAT_DEMO_DELAY_MS: '0' });
  const posted: HostToPage[] = [];
  let dropped: string | undefined;
  // The real daemon, with one event lost on the way, as a restartable stream may lose it.
  const lossy: DaemonLike = {
    get status() {
      return daemon.status;
    },
    request: (method, params) => daemon.request(method, params),
    onStatus: (listener) => daemon.onStatus(listener),
    restart: () => daemon.restart(),
    onEvent: (listener) =>
      daemon.onEvent((p) => {
        if (!dropped && p.event.kind === 'messageCompleted' && p.event.entry.role === 'assistant') {
          dropped = p.event.entry.id;
          return;
        }
        listener(p);
      }),
  };
  const ui = recordingUi(posted);
  const controller = new ChatController(lossy, ui, { workspaceRoot: scratch.workspace, batchMs: 5 });
  try {
    await daemon.start();
    await controller.handle({ type: 'ready' });
    await controller.handle({ type: 'send', text: 'hello', attachments: [], clientMessageId: 'c1' });
    await until(() => posted.some((m) => m.type === 'merge'), 'the refetch after the gap');
    const merge = posted.find((m) => m.type === 'merge');
    assert.ok(dropped && merge?.type === 'merge' && merge.transcript.entries.some((e) => e.id === dropped));

    // What the page builds from the messages it was posted, beside a fresh load.
    let page: SessionModel | undefined;
    for (const message of posted) {
      if (message.type === 'reset') {
        page = new SessionModel(message.sessionId);
        page.applyTranscript(message.transcript);
      } else if (message.type === 'merge') page?.applyTranscript(message.transcript);
      else if (message.type === 'events') for (const e of message.events) page?.apply(e);
    }
    assert.ok(page);
    const fresh = new SessionModel(page.sessionId);
    fresh.applyTranscript(await daemon.request('session/transcript', { sessionId: page.sessionId }));
    const shape = (m: SessionModel) => m.list().map((e) => ({ ...e, rev: 0 }));
    assert.deepEqual(shape(page), shape(fresh));
  } finally {
    controller.dispose();
    await daemon.dispose();
    scratch.dispose();
  }
});

test('a chat opens with its header and the session list while a new daemon still builds its tokenizer, and its context follows', { timeout: 120_000 }, async () => {
  const scratch = new Scratch();
  // The tokenizer's tables stay unbuilt, and session/budget unanswered, until the gate exists.
  const gate = join(scratch.dir, 'tokenizer-gate');
  const daemon = scratch.daemon({ SIDECHAT_TEST_TOKENIZER: `gate:${gate}` });
  const posted: HostToPage[] = [];
  const controller = new ChatController(daemon, recordingUi(posted), { workspaceRoot: scratch.workspace, batchMs: 5 });
  try {
    await daemon.start();
    await daemon.request('session/create', { workspaceRoot: scratch.workspace });
    const ready = controller.handle({ type: 'ready' });
    await until(() => posted.some((m) => m.type === 'sessions'), 'the session list');
    const shown = () => posted.map((m) => m.type).filter((t) => t === 'reset' || t === 'session' || t === 'sessions' || t === 'budget');
    assert.deepEqual(shown(), ['reset', 'session', 'sessions']);
    await ready;
    writeFileSync(gate, '');
    await until(() => posted.some((m) => m.type === 'budget'), 'the context once the tokenizer is built');
    assert.deepEqual(shown(), ['reset', 'session', 'sessions', 'budget']);
  } finally {
    controller.dispose();
    await daemon.dispose();
    scratch.dispose();
  }
});

test('a session opens at its newest page, and scrolling to the top loads the older ones until the page holds the whole transcript', { timeout: 120_000 }, async () => {
  const scratch = new Scratch();
  const daemon = scratch.daemon({ SIDECHAT_DEMO_DELAY_MS: '0' });
  const posted: HostToPage[] = [];
  const ui = recordingUi(posted);
  const controller = new ChatController(daemon, ui, { workspaceRoot: scratch.workspace, batchMs: 5, pageSize: 4 });
  try {
    await daemon.start();
    let finished = 0;
    daemon.onEvent((p) => {
      if (p.event.kind === 'runFinished') finished++;
    });
    const session = await daemon.request('session/create', { workspaceRoot: scratch.workspace });
    for (const [i, text] of ['one', 'two', 'three'].entries()) {
      await daemon.request('chat/send', { sessionId: session.id, text });
      await until(() => finished > i, `turn ${text} to finish`);
    }
    const whole = await daemon.request('session/transcript', { sessionId: session.id });
    assert.equal(whole.entries.length, 6);

    await controller.handle({ type: 'ready' });
    const reset = posted.find((m) => m.type === 'reset');
    assert.ok(reset?.type === 'reset');
    assert.deepEqual(reset.transcript, { ...whole, entries: whole.entries.slice(2), hasMore: true });

    await controller.handle({ type: 'loadOlder' });
    const older = posted.filter((m) => m.type === 'older');
    assert.equal(older.length, 1);
    assert.ok(older[0].type === 'older');
    assert.deepEqual(older[0].transcript, { ...whole, entries: whole.entries.slice(0, 2), hasMore: false });
    // Nothing older remains: another scroll to the top asks nothing.
    await controller.handle({ type: 'loadOlder' });
    assert.equal(posted.filter((m) => m.type === 'older').length, 1);

    // What the page builds from the messages it was posted, beside a load of the whole.
    let page: SessionModel | undefined;
    for (const message of posted) {
      if (message.type === 'reset') {
        page = new SessionModel(message.sessionId);
        page.applyPage(message.transcript);
      } else if (message.type === 'older') page?.applyPage(message.transcript);
      else if (message.type === 'events') for (const e of message.events) page?.apply(e);
    }
    assert.ok(page);
    assert.equal(page.olderBefore, undefined);
    const fresh = new SessionModel(page.sessionId);
    fresh.applyTranscript(whole);
    const shape = (m: SessionModel) => m.list().map((e) => ({ ...e, rev: 0 }));
    assert.deepEqual(shape(page), shape(fresh));
  } finally {
    controller.dispose();
    await daemon.dispose();
    scratch.dispose();
  }
});

test('Undo to here names a file a command changed outside git as not restorable, and leaves it', { timeout: 120_000 }, async () => {
  const scratch = new Scratch();
  const daemon = scratch.daemon({ SIDECHAT_DEMO_DELAY_MS: '0' });
  const confirms: string[] = [];
  const ui: HostUi = {
    post: () => undefined,
    insert: async () => undefined,
    confirm: async (message) => {
      confirms.push(message);
      return true;
    },
    openDiff: async () => undefined,
    openSettings: () => undefined,
    copy: () => undefined,
    openLink: () => undefined,
    log: () => undefined,
  };
  const controller = new ChatController(daemon, ui, { workspaceRoot: scratch.workspace, batchMs: 5 });
  try {
    await daemon.start();
    let finished = 0;
    const skipped: unknown[] = [];
    daemon.onEvent((p) => {
      if (p.event.kind === 'runFinished') finished++;
      if (p.event.kind === 'rewound') skipped.push(p.event.skipped);
      // Sandboxed, the command runs unasked; without a sandbox it asks.
      if (p.event.kind === 'approvalRequested') void daemon.request('approval/respond', { approvalId: p.event.approval.approvalId, decision: 'allow' });
    });
    const session = await daemon.request('session/create', { workspaceRoot: scratch.workspace });
    const sent = await daemon.request('chat/send', { sessionId: session.id, text: 'run echo left > left.txt' });
    await until(() => finished > 0, 'the command’s turn to finish');
    const left = join(scratch.workspace, 'left.txt');
    assert.equal(readFileSync(left, 'utf8'), 'left\n');

    await controller.handle({ type: 'ready' });
    await controller.handle({ type: 'undo', messageId: sent.messageId ?? '' });
    assert.deepEqual(confirms, [
      'Undo to here? The conversation from this message on is taken back. No file will be restored. Not restorable (changed by a command outside git), left as they are: left.txt.',
    ]);
    await until(() => skipped.length > 0, 'the rewind');
    assert.deepEqual(skipped, [[{ path: 'left.txt', reason: 'changed by a command outside git: cannot be restored' }]]);
    assert.equal(readFileSync(left, 'utf8'), 'left\n');
  } finally {
    controller.dispose();
    await daemon.dispose();
    scratch.dispose();
  }
});

test('Undo to here names the files the daemon says it restores, a command’s in a git work tree too, and restores them', { timeout: 120_000 }, async () => {
  const scratch = new Scratch();
  execFileSync('git', ['init', '-q', scratch.workspace]);
  const daemon = scratch.daemon({ SIDECHAT_DEMO_DELAY_MS: '0' });
  const confirms: string[] = [];
  const ui: HostUi = {
    post: () => undefined,
    insert: async () => undefined,
    confirm: async (message) => {
      confirms.push(message);
      return true;
    },
    openDiff: async () => undefined,
    openSettings: () => undefined,
    copy: () => undefined,
    openLink: () => undefined,
    log: () => undefined,
  };
  const controller = new ChatController(daemon, ui, { workspaceRoot: scratch.workspace, batchMs: 5 });
  try {
    await daemon.start();
    let finished = 0;
    daemon.onEvent((p) => {
      if (p.event.kind === 'runFinished') finished++;
      // Sandboxed, the command runs unasked; without a sandbox it asks.
      if (p.event.kind === 'approvalRequested') void daemon.request('approval/respond', { approvalId: p.event.approval.approvalId, decision: 'allow' });
    });
    const session = await daemon.request('session/create', { workspaceRoot: scratch.workspace });
    const sent = await daemon.request('chat/send', { sessionId: session.id, text: 'run echo made > made.txt' });
    await until(() => finished > 0, 'the command’s turn to finish');
    const made = join(scratch.workspace, 'made.txt');
    assert.equal(readFileSync(made, 'utf8'), 'made\n');

    await controller.handle({ type: 'ready' });
    await controller.handle({ type: 'undo', messageId: sent.messageId ?? '' });
    assert.deepEqual(confirms, ['Undo to here? The conversation from this message on is taken back. These files will be restored: made.txt.']);
    await until(() => !existsSync(made), 'made.txt removed');
  } finally {
    controller.dispose();
    await daemon.dispose();
    scratch.dispose();
  }
});
