// The session model against the event sequences the daemon produces, including the ones a
// restartable stream produces: deltas before their message, duplicates, gaps, approvals
// resolved by another client.

import { test } from 'node:test';
import assert from 'node:assert/strict';

import { SessionModel, toolSummary, type Entry } from '../src/model/session';
import type { Event, SessionEventParams, SessionTranscriptResult, TranscriptEntry } from '../src/model/wire';

const SID = 'ses_1';

/** Feeds events numbered from `from`. */
function feed(model: SessionModel, events: Event[], from = model.lastSeq + 1, runId = 'run_1') {
  return events.map((event, i) => model.apply({ sessionId: SID, seq: from + i, runId, event } satisfies SessionEventParams));
}

function entry(id: string, seq: number, role: TranscriptEntry['role'], blocks: TranscriptEntry['blocks']): TranscriptEntry {
  return { id, seq, role, blocks, status: 'complete', createdAt: '2026-01-01T00:00:00Z' };
}

function transcript(entries: TranscriptEntry[], extra: Partial<SessionTranscriptResult> = {}): SessionTranscriptResult {
  return {
    sessionId: SID,
    state: 'idle',
    entries,
    hasMore: false,
    lastSeq: entries.length ? entries[entries.length - 1].seq : 0,
    pendingApprovals: [],
    pendingInterjections: [],
    ...extra,
  };
}

/** A compact view of entries: kind and main text. */
function shape(entries: Entry[]): string[] {
  return entries.map((e) => {
    switch (e.kind) {
      case 'user':
        return `${e.source === 'interjection' ? 'user+' : 'user'}: ${e.text}`;
      case 'assistant':
        return `assistant${e.streaming ? '…' : ''}: ${e.blocks.map((b) => (b.type === 'thinking' ? `(${b.text})` : b.text)).join('|')}`;
      case 'tool':
        return `tool ${e.tool} ${e.status}${e.output ? `: ${e.output}` : ''}`;
      case 'notice':
        return `notice ${e.level}: ${e.message}`;
      case 'note':
        return `note: ${e.text}`;
      case 'summary':
        return `summary ${e.method}${e.toSeq === undefined ? '' : ` ${e.fromSeq}-${e.toSeq}`}: ${e.text}`;
    }
  });
}

test('a plain turn streams, then the committed text replaces the deltas', { timeout: 120_000 }, () => {
  const model = new SessionModel(SID);
  feed(model, [
    { kind: 'messageCompleted', entry: entry('m1', 1, 'user', [{ type: 'text', text: 'hi' }]) },
    { kind: 'runStarted', model: 'demo' },
    { kind: 'messageStarted', messageId: 'm2', role: 'assistant' },
    { kind: 'thinkingDelta', messageId: 'm2', text: 'hmm' },
    { kind: 'textDelta', messageId: 'm2', text: 'Hel' },
    { kind: 'textDelta', messageId: 'm2', text: 'lo' },
  ]);
  assert.equal(model.state, 'running');
  assert.deepEqual(shape(model.list()), ['user: hi', 'assistant…: (hmm)|Hello']);
  const streamedRev = model.get('m2')?.rev;
  feed(model, [{ kind: 'messageCompleted', entry: entry('m2', 7, 'assistant', [{ type: 'thinking', text: 'hmm' }, { type: 'text', text: 'Hello' }]) }]);
  assert.notEqual(model.get('m2')?.rev, streamedRev, 'completion is a change a renderer must redraw');
  feed(model, [{ kind: 'runFinished', reason: 'end_turn' }]);
  assert.deepEqual(shape(model.list()), ['user: hi', 'assistant: (hmm)|Hello']);
  assert.equal(model.state, 'idle');
});

test('deltas before their message start an entry that the message then completes', { timeout: 120_000 }, () => {
  const model = new SessionModel(SID);
  feed(model, [
    { kind: 'textDelta', messageId: 'm2', text: 'early ' },
    { kind: 'messageStarted', messageId: 'm2', role: 'assistant' },
    { kind: 'textDelta', messageId: 'm2', text: 'words' },
  ]);
  assert.deepEqual(shape(model.list()), ['assistant…: early words']);
  feed(model, [{ kind: 'messageCompleted', entry: entry('m2', 4, 'assistant', [{ type: 'text', text: 'early words' }]) }]);
  assert.deepEqual(shape(model.list()), ['assistant: early words']);
});

test('a duplicated event changes nothing', { timeout: 120_000 }, () => {
  const model = new SessionModel(SID);
  feed(model, [
    { kind: 'messageStarted', messageId: 'm1', role: 'assistant' },
    { kind: 'textDelta', messageId: 'm1', text: 'once' },
  ]);
  const again = model.apply({ sessionId: SID, seq: 2, event: { kind: 'textDelta', messageId: 'm1', text: 'once' } });
  assert.equal(again.duplicate, true);
  assert.deepEqual(shape(model.list()), ['assistant…: once']);
});

test('a gap is reported with the seq to refetch after, and the refetch fills it', { timeout: 120_000 }, () => {
  const model = new SessionModel(SID);
  feed(model, [{ kind: 'messageCompleted', entry: entry('m1', 1, 'user', [{ type: 'text', text: 'q' }]) }]);
  const [applied] = feed(model, [{ kind: 'runFinished', reason: 'end_turn' }], 9);
  assert.equal(applied.gapAfter, 1);
  assert.equal(model.lastSeq, 9);
  model.applyTranscript(
    transcript([entry('m2', 8, 'assistant', [{ type: 'text', text: 'missed answer' }])], { lastSeq: 9 }),
  );
  assert.deepEqual(shape(model.list()), ['user: q', 'assistant: missed answer']);
  const [next] = feed(model, [{ kind: 'notice', level: 'info', message: 'after', messageId: 'n9' }]);
  assert.equal(next.gapAfter, undefined);
});

test('a refetched entry lands in seq order among the ones already shown', { timeout: 120_000 }, () => {
  const model = new SessionModel(SID);
  model.applyTranscript(transcript([entry('a', 1, 'user', [{ type: 'text', text: 'one' }]), entry('c', 5, 'user', [{ type: 'text', text: 'three' }])]));
  model.applyTranscript(transcript([entry('b', 3, 'assistant', [{ type: 'text', text: 'two' }])], { lastSeq: 5 }));
  assert.deepEqual(shape(model.list()), ['user: one', 'assistant: two', 'user: three']);
});

test('an approval resolved by another client disappears, and the tool goes on', { timeout: 120_000 }, () => {
  const model = new SessionModel(SID);
  const approval = { approvalId: 'apr_1', runId: 'run_1', callId: 'call_1', tool: 'write_file', input: { path: 'a.md', content: 'x\n' }, summary: 'write a.md (1 line)', createdAt: 't' };
  feed(model, [
    { kind: 'runStarted', model: 'demo' },
    { kind: 'messageCompleted', entry: entry('m1', 2, 'assistant', [{ type: 'text', text: 'Writing.' }, { type: 'toolCall', id: 'call_1', name: 'write_file', input: approval.input }]) },
    { kind: 'toolCallStarted', callId: 'call_1', tool: 'write_file', input: approval.input, summary: approval.summary },
    { kind: 'approvalRequested', approval },
  ]);
  assert.equal(model.state, 'awaitingApproval');
  assert.deepEqual([...model.approvals.keys()], ['apr_1']);
  assert.deepEqual(shape(model.list()), ['assistant: Writing.', 'tool write_file awaitingApproval']);
  feed(model, [
    { kind: 'approvalResolved', approvalId: 'apr_1', decision: 'allow' },
    { kind: 'toolCallUpdated', callId: 'call_1', status: 'running' },
  ]);
  assert.equal(model.approvals.size, 0);
  assert.equal(model.state, 'running');
  assert.deepEqual(shape(model.list()), ['assistant: Writing.', 'tool write_file running']);
});

test('a pending approval reappears from the transcript after a reload', { timeout: 120_000 }, () => {
  const model = new SessionModel(SID);
  const approval = { approvalId: 'apr_1', runId: 'run_1', callId: 'call_1', tool: 'run_command', input: { command: 'ls' }, summary: 'run ls', createdAt: 't' };
  model.applyTranscript(
    transcript([entry('m1', 3, 'assistant', [{ type: 'toolCall', id: 'call_1', name: 'run_command', input: { command: 'ls' } }])], {
      state: 'awaitingApproval',
      pendingApprovals: [approval],
    }),
  );
  assert.equal(model.state, 'awaitingApproval');
  assert.deepEqual(shape(model.list()), ['assistant: ', 'tool run_command awaitingApproval']);
  assert.deepEqual([...model.approvals.values()], [approval]);
});

test('changed files are listed only when a write succeeds', { timeout: 120_000 }, () => {
  const model = new SessionModel(SID);
  const input = (path: string) => ({ path, content: 'x' });
  const results = feed(model, [
    { kind: 'toolCallStarted', callId: 'c1', tool: 'write_file', input: input('bad.md'), summary: 'write bad.md' },
    { kind: 'toolCallUpdated', callId: 'c1', status: 'error', output: 'Cannot write' },
    { kind: 'toolCallStarted', callId: 'c2', tool: 'write_file', input: input('no.md'), summary: 'write no.md' },
    { kind: 'toolCallUpdated', callId: 'c2', status: 'denied' },
    { kind: 'toolCallStarted', callId: 'c3', tool: 'read_file', input: input('r.md'), summary: 'read r.md' },
    { kind: 'toolCallUpdated', callId: 'c3', status: 'done', output: 'text' },
  ]);
  assert.deepEqual([...model.changedFiles.keys()], []);
  assert.equal(results.some((r) => r.filesChanged), false);
  const [done] = feed(model, [
    { kind: 'toolCallStarted', callId: 'c4', tool: 'write_file', input: input('ok.md'), summary: 'write ok.md' },
    { kind: 'toolCallUpdated', callId: 'c4', status: 'done', output: 'Created ok.md (+1 -0 lines).' },
  ]).slice(1);
  assert.equal(done.filesChanged, true);
  assert.deepEqual([...model.changedFiles.values()], [{ path: 'ok.md' }]);
  model.setChangedFiles([{ path: 'ok.md', added: 1, removed: 0 }]);
  assert.deepEqual([...model.changedFiles.values()], [{ path: 'ok.md', added: 1, removed: 0 }]);
});

test("a sub-agent's changed files are listed beside the session's own, marked with the child", { timeout: 120_000 }, () => {
  const model = new SessionModel(SID);
  model.setChangedFiles([
    { path: 'a.md', added: 1, removed: 0, childSessionId: 'ses_child' },
    { path: 'ok.md', added: 2, removed: 1 },
    { path: 'ok.md', added: 3, removed: 0, childSessionId: 'ses_child' },
  ]);
  assert.deepEqual(
    [...model.changedFiles.values()],
    [
      { path: 'a.md', added: 1, removed: 0, childSessionId: 'ses_child' },
      { path: 'ok.md', added: 2, removed: 1 },
      { path: 'ok.md', added: 3, removed: 0, childSessionId: 'ses_child' },
    ],
  );
});

test('an interjection waits, then is delivered with the tool results in the users words', { timeout: 120_000 }, () => {
  const model = new SessionModel(SID);
  feed(model, [
    { kind: 'runStarted', model: 'demo' },
    { kind: 'messageCompleted', entry: entry('m1', 2, 'assistant', [{ type: 'toolCall', id: 'c1', name: 'read_file', input: { path: 'a' } }]) },
    { kind: 'interjectionQueued', pendingId: 'inj_1', text: 'also check b' },
  ]);
  assert.deepEqual([...model.waiting.values()], [{ pendingId: 'inj_1', text: 'also check b', status: 'pending' }]);
  feed(model, [
    { kind: 'toolCallUpdated', callId: 'c1', status: 'done', output: 'A' },
    { kind: 'messageCompleted', entry: entry('m2', 5, 'tool', [{ type: 'toolResult', callId: 'c1', output: 'A', isError: false, status: 'done' }]) },
    { kind: 'messageStarted', messageId: 'm4', role: 'assistant' },
    { kind: 'messageCompleted', entry: entry('m3', 7, 'user', [{ type: 'interjection', pendingId: 'inj_1', text: 'also check b' }]) },
    { kind: 'interjectionDelivered', pendingIds: ['inj_1'], step: 2, messageId: 'm3' },
    { kind: 'textDelta', messageId: 'm4', text: 'Reading b.' },
    { kind: 'messageCompleted', entry: entry('m4', 10, 'assistant', [{ type: 'text', text: 'Reading b.' }]) },
  ]);
  assert.equal(model.waiting.size, 0);
  // It went with the next request, whose reply was already streaming: the words stay above it.
  assert.deepEqual(shape(model.list()), ['assistant: ', 'tool read_file done: A', 'user+: also check b', 'assistant: Reading b.']);
  // The same session loaded afresh shows the same entries.
  const reloaded = new SessionModel(SID);
  reloaded.applyTranscript(
    transcript([
      entry('m1', 2, 'assistant', [{ type: 'toolCall', id: 'c1', name: 'read_file', input: { path: 'a' } }]),
      entry('m2', 5, 'tool', [{ type: 'toolResult', callId: 'c1', output: 'A', isError: false, status: 'done' }]),
      entry('m3', 7, 'user', [{ type: 'interjection', pendingId: 'inj_1', text: 'also check b' }]),
      entry('m4', 10, 'assistant', [{ type: 'text', text: 'Reading b.' }]),
    ]),
  );
  assert.deepEqual(shape(reloaded.list()), shape(model.list()));
});

test('an interjection promoted to the next turn, and one withdrawn', { timeout: 120_000 }, () => {
  const model = new SessionModel(SID);
  feed(model, [
    { kind: 'runStarted', model: 'demo' },
    { kind: 'interjectionQueued', pendingId: 'inj_1', text: 'next' },
    { kind: 'interjectionQueued', pendingId: 'inj_2', text: 'never mind' },
    { kind: 'interjectionCancelled', pendingId: 'inj_2' },
  ]);
  assert.deepEqual([...model.waiting.keys()], ['inj_1']);
  feed(model, [
    { kind: 'messageCompleted', entry: entry('m5', 5, 'user', [{ type: 'interjection', pendingId: 'inj_1', text: 'next', promoted: true }]) },
    { kind: 'interjectionPromoted', pendingIds: ['inj_1'], messageId: 'm5' },
    { kind: 'runFinished', reason: 'end_turn' },
  ]);
  assert.equal(model.waiting.size, 0);
  assert.deepEqual(shape(model.list()), ['user: next']);
});

test('waiting interjections reappear from the transcript after a reload', { timeout: 120_000 }, () => {
  const model = new SessionModel(SID);
  model.applyTranscript(
    transcript([], { state: 'running', lastSeq: 4, pendingInterjections: [{ pendingId: 'inj_1', text: 'wait', status: 'pending', createdAt: 't' }] }),
  );
  assert.deepEqual([...model.waiting.values()], [{ pendingId: 'inj_1', text: 'wait', status: 'pending' }]);
  assert.equal(model.state, 'running');
});

test('stop ends streaming and marks the cut message', { timeout: 120_000 }, () => {
  const model = new SessionModel(SID);
  feed(model, [
    { kind: 'runStarted', model: 'demo' },
    { kind: 'messageStarted', messageId: 'm1', role: 'assistant' },
    { kind: 'textDelta', messageId: 'm1', text: 'partial' },
    { kind: 'runFinished', reason: 'stopped' },
  ]);
  const [assistant] = model.list();
  assert.equal(assistant.kind === 'assistant' && assistant.status, 'stopped');
  assert.equal(model.state, 'idle');
});

test('notes, notices and a summary entry are shown in order', { timeout: 120_000 }, () => {
  const model = new SessionModel(SID);
  const summary = entry('s1', 1, 'summary', [{ type: 'summary', method: 'carryOver', text: 'Earlier: the user set up a project.', messages: 12 }]);
  model.applyTranscript(transcript([summary, entry('n1', 2, 'note', [{ type: 'text', text: 'Cost: unpriced' }])]));
  feed(model, [{ kind: 'notice', level: 'warning', message: 'retrying', messageId: 'n3' }]);
  const expected = ['summary carryOver: Earlier: the user set up a project.', 'note: Cost: unpriced', 'notice warning: retrying'];
  assert.deepEqual(shape(model.list()), expected);
  // The stored notice, fetched again (after a gap), is the same entry, not a second one.
  model.applyTranscript(transcript([entry('n3', 3, 'notice', [{ type: 'notice', level: 'warning', text: 'retrying' }])]));
  assert.deepEqual(shape(model.list()), expected);
  const fresh = new SessionModel(SID);
  fresh.applyTranscript(transcript([summary, entry('n1', 2, 'note', [{ type: 'text', text: 'Cost: unpriced' }]), entry('n3', 3, 'notice', [{ type: 'notice', level: 'warning', text: 'retrying' }])]));
  assert.deepEqual(shape(fresh.list()), expected);
});

test('a deleted carry-over note leaves the model, live and from the transcript', { timeout: 120_000 }, () => {
  const model = new SessionModel(SID);
  const note = entry('s1', 1, 'summary', [{ type: 'summary', method: 'carryOver', text: 'Earlier: the user set up a project.', messages: 12 }]);
  model.applyTranscript(transcript([note, entry('m2', 2, 'user', [{ type: 'text', text: 'go on' }])]));
  const structure = model.structureRev;
  const [applied] = feed(model, [{ kind: 'noteDeleted', messageId: 's1' }]);
  assert.deepEqual(shape(model.list()), ['user: go on']);
  assert.notEqual(model.structureRev, structure, 'a renderer redraws the list');
  assert.equal(applied.budgetChanged, true, 'the note no longer counts in the budget');
  assert.equal(model.get('s1'), undefined);
  // Stored emptied, it is not shown when the transcript is read again.
  const emptied = entry('s1', 1, 'summary', [{ type: 'summary', method: 'carryOver', text: '', messages: 12 }]);
  const fresh = new SessionModel(SID);
  fresh.applyTranscript(transcript([emptied, entry('m2', 2, 'user', [{ type: 'text', text: 'go on' }])]));
  assert.deepEqual(shape(fresh.list()), ['user: go on']);
  // A drop's summary has no text either, and stays.
  const dropped = new SessionModel(SID);
  dropped.applyTranscript(transcript([entry('s2', 3, 'summary', [{ type: 'summary', method: 'drop', text: '', fromSeq: 1, toSeq: 2, messages: 2 }])]));
  assert.deepEqual(shape(dropped.list()), ['summary drop 1-2: ']);
});

test('a run the model refused marks its answer refused; other ends do not', { timeout: 120_000 }, () => {
  const model = new SessionModel(SID);
  feed(model, [
    { kind: 'messageCompleted', entry: entry('m1', 1, 'user', [{ type: 'text', text: 'do it' }]) },
    { kind: 'runStarted', model: 'demo' },
    { kind: 'messageStarted', messageId: 'm2', role: 'assistant' },
    { kind: 'textDelta', messageId: 'm2', text: 'No.' },
    { kind: 'messageCompleted', entry: entry('m2', 5, 'assistant', [{ type: 'text', text: 'No.' }]) },
    { kind: 'notice', level: 'warning', message: 'The model declined to answer.', messageId: 'n6' },
    { kind: 'runFinished', reason: 'refusal' },
  ]);
  const refused = model.get('m2');
  assert.equal(refused?.kind === 'assistant' && refused.status, 'refused');
  feed(model, [
    { kind: 'messageCompleted', entry: entry('m3', 9, 'user', [{ type: 'text', text: 'then this' }]) },
    { kind: 'runStarted', model: 'demo' },
    { kind: 'messageCompleted', entry: entry('m4', 11, 'assistant', [{ type: 'text', text: 'Sure.' }]) },
    { kind: 'runFinished', reason: 'end_turn' },
  ]);
  const ordinary = model.get('m4');
  assert.equal(ordinary?.kind === 'assistant' && ordinary.status, 'complete');
  // A refusal with no answer at all marks nothing earlier than its own turn.
  feed(model, [
    { kind: 'messageCompleted', entry: entry('m5', 13, 'user', [{ type: 'text', text: 'and this' }]) },
    { kind: 'runStarted', model: 'demo' },
    { kind: 'runFinished', reason: 'refusal' },
  ]);
  assert.equal(ordinary?.kind === 'assistant' && ordinary.status, 'complete');
});

test('budget and usage events update the chrome and ask for fresh spend', { timeout: 120_000 }, () => {
  const model = new SessionModel(SID);
  const before = model.chromeRev;
  const snapshot = {
    contextWindow: 1000, responseReserve: 100, usableTokens: 900, systemTokens: 10, toolTokens: 20, historyTokens: 600,
    historyMessages: 4, summaryTokens: 0, historyLimitTokens: 450, latestUserTokens: 5, rawInputTokens: 635, inputTokens: 635, correctionFactor: 1,
    countedByEstimate: false, exact: true, remainingTokens: 265, utilisation: 0.705, pressure: 'high' as const,
    thresholds: { high: 0.7, critical: 0.9 },
  };
  const [budget, usage] = feed(model, [
    { kind: 'budget', snapshot },
    { kind: 'usage', provider: 'p', model: 'm', input: 1, output: 1, cacheRead: 0, cacheWrite: 0, reasoning: 0, durationMs: 1 },
  ]);
  assert.equal(budget.spendChanged, false);
  assert.equal(usage.spendChanged, true);
  assert.equal(model.budget?.pressure, 'high');
  assert.ok(model.chromeRev > before);
});

/** The four messages of two plain turns, seq 1 to 8. */
function twoTurns(): TranscriptEntry[] {
  return [
    entry('u1', 1, 'user', [{ type: 'text', text: 'one' }]),
    entry('a1', 4, 'assistant', [{ type: 'text', text: 'first' }]),
    entry('u2', 5, 'user', [{ type: 'text', text: 'two' }]),
    entry('a2', 8, 'assistant', [{ type: 'text', text: 'second' }]),
  ];
}

test('a compaction: its summary entry, then its event, fold the entries before it', { timeout: 120_000 }, () => {
  const model = new SessionModel(SID);
  model.applyTranscript(transcript(twoTurns()));
  assert.equal(model.foldedCount(), 0);
  const summary = entry('s1', 10, 'summary', [{ type: 'summary', method: 'summary', text: 'They counted to two.', fromSeq: 1, toSeq: 8, messages: 4 }]);
  const [completed, compacted] = feed(
    model,
    [
      { kind: 'messageCompleted', entry: summary },
      { kind: 'compaction', method: 'summary', messageId: 's1', fromSeq: 1, toSeq: 8, messages: 4, tokensBefore: 227, tokensAfter: 127, reason: 'command' },
    ],
    10,
  );
  assert.equal(completed.budgetChanged, false);
  assert.equal(compacted.budgetChanged, true, 'the budget is asked again: a /compact outside a run sends none');
  assert.deepEqual(shape(model.list()), ['user: one', 'assistant: first', 'user: two', 'assistant: second', 'summary summary 1-8: They counted to two.']);
  const shown = model.get('s1');
  assert.deepEqual(shown?.kind === 'summary' && { messages: shown.messages, compaction: shown.compaction }, {
    messages: 4,
    compaction: { reason: 'command', tokensBefore: 227, tokensAfter: 127 },
  });
  assert.equal(model.foldedCount(), 4);
  // What follows is sent beside the summary: not folded.
  feed(model, [{ kind: 'messageCompleted', entry: entry('u3', 12, 'user', [{ type: 'text', text: 'three' }]) }]);
  assert.equal(model.foldedCount(), 4);
  // Loaded afresh: the same entries and fold, without the live-only details of the event.
  const reloaded = new SessionModel(SID);
  reloaded.applyTranscript(transcript([...twoTurns(), summary, entry('u3', 12, 'user', [{ type: 'text', text: 'three' }])]));
  assert.deepEqual(shape(reloaded.list()), shape(model.list()));
  assert.equal(reloaded.foldedCount(), 4);
  const again = reloaded.get('s1');
  assert.equal(again?.kind === 'summary' && again.compaction, undefined);
});

test('a compaction event before its summary entry (a refetch after a gap) is kept for it', { timeout: 120_000 }, () => {
  const model = new SessionModel(SID);
  model.applyTranscript(transcript(twoTurns()));
  // The summary's messageCompleted (seq 10) was lost; the event arrives, then the refetch.
  const [applied] = feed(
    model,
    [{ kind: 'compaction', method: 'drop', messageId: 's1', fromSeq: 1, toSeq: 4, messages: 2, tokensBefore: 900, tokensAfter: 400, reason: 'window' }],
    11,
  );
  assert.equal(applied.gapAfter, 8);
  assert.equal(model.foldedCount(), 0);
  model.applyTranscript(
    transcript([entry('s1', 10, 'summary', [{ type: 'summary', method: 'drop', text: '', fromSeq: 1, toSeq: 4, messages: 2 }])], { lastSeq: 11 }),
  );
  assert.deepEqual(shape(model.list()), ['user: one', 'assistant: first', 'user: two', 'assistant: second', 'summary drop 1-4: ']);
  const shown = model.get('s1');
  assert.deepEqual(shown?.kind === 'summary' && shown.compaction, { reason: 'window', tokensBefore: 900, tokensAfter: 400 });
  // Only the dropped range is folded; the turn after it is still sent.
  assert.equal(model.foldedCount(), 2);
});

test('a carry-over note folds nothing, and a later compaction folds up to its own range', { timeout: 120_000 }, () => {
  const model = new SessionModel(SID);
  model.applyTranscript(
    transcript([entry('c0', 1, 'summary', [{ type: 'summary', method: 'carryOver', text: 'Notes from before.', messages: 30 }]), ...twoTurns().map((e) => ({ ...e, seq: e.seq + 1 }))]),
  );
  assert.equal(model.foldedCount(), 0);
  feed(model, [{ kind: 'messageCompleted', entry: entry('s1', 12, 'summary', [{ type: 'summary', method: 'summary', text: 'Counted.', fromSeq: 1, toSeq: 5, messages: 3 }]) }], 12);
  // The note and the first turn (seq 1, 2 and 5) are folded; the second turn (6 and 9) is not.
  assert.equal(model.foldedCount(), 3);
  assert.deepEqual(shape(model.list()).slice(0, 3), ['summary carryOver: Notes from before.', 'user: one', 'assistant: first']);
});

test('a tool call drawn from the transcript is summed up in the daemon\'s words', { timeout: 120_000 }, () => {
  assert.deepEqual(
    [
      toolSummary('read_file', { path: 'notes.txt' }),
      toolSummary('list_directory', {}),
      toolSummary('search_text', { pattern: 'fn "main"' }),
      toolSummary('write_file', { path: 'a.md', content: 'x\ny\n' }),
      toolSummary('write_file', { path: 'b.md', content: 'x' }),
      toolSummary('edit_file', { path: 'a.md', old_string: 'x', new_string: '' }),
      toolSummary('run_command', { command: 'echo hi' }),
      toolSummary('run_command', { command: 'echo hi\necho there' }),
      toolSummary('delegate', { task: 'Write hello.txt saying hi\nthen stop' }),
      toolSummary('delegate', { task: 'é'.repeat(50) }),
    ],
    [
      'read notes.txt',
      'list .',
      'search for "fn \\"main\\""',
      'write a.md (2 lines)',
      'write b.md (1 line)',
      'edit a.md (replace 1 line with 0 lines)',
      'run `echo hi`',
      'run `echo hi` …',
      'delegate "Write hello.txt saying hi"',
      `delegate "${'é'.repeat(40)}… [cut: 20 more bytes]"`,
    ],
  );
});

/** A parent's `delegate` call (`call_d`) whose sub-agent is `ses_c`. */
const DELEGATE_INPUT = { task: 'Write hello.txt', tools: 'all' };
const CHILD_APPROVAL = {
  approvalId: 'apr_c',
  runId: 'run_c',
  callId: 'call_w',
  tool: 'write_file',
  input: { path: 'hello.txt', content: 'hi\n' },
  summary: 'write hello.txt (1 line)',
  createdAt: 't',
};

/** The delegate call while the writing child waits for CHILD_APPROVAL, live or after a reload. */
const CHILD_WAITING = {
  status: 'awaitingApproval',
  output: undefined,
  childSessionId: 'ses_c',
  childSeq: 8,
  state: 'awaitingApproval',
  step: { callId: 'call_w', summary: 'write hello.txt (1 line)', status: 'awaitingApproval' },
  text: 'Writing it.',
};

function delegated(childSeq: number, event: Event): Event {
  return { kind: 'delegation', callId: 'call_d', childSessionId: 'ses_c', childSeq, event };
}

function delegationOf(model: SessionModel) {
  const tool = model.get('tool:call_d');
  assert.ok(tool && tool.kind === 'tool');
  return { status: tool.status, output: tool.output, ...tool.delegation };
}

test('a sub-agent works inside its delegate call, its approval waits at the root, and its answer ends it', { timeout: 120_000 }, () => {
  const model = new SessionModel(SID);
  feed(model, [
    { kind: 'runStarted', model: 'replay' },
    { kind: 'messageCompleted', entry: entry('m1', 2, 'assistant', [{ type: 'toolCall', id: 'call_d', name: 'delegate', input: DELEGATE_INPUT }]) },
    { kind: 'toolCallStarted', callId: 'call_d', tool: 'delegate', input: DELEGATE_INPUT, summary: 'delegate "Write hello.txt"' },
    delegated(2, { kind: 'runStarted', model: 'replay' }),
    { kind: 'toolCallUpdated', callId: 'call_d', status: 'running' },
    delegated(4, { kind: 'messageStarted', messageId: 'c1', role: 'assistant' }),
    delegated(5, { kind: 'textDelta', messageId: 'c1', text: 'Writing ' }),
    delegated(6, { kind: 'textDelta', messageId: 'c1', text: 'it.' }),
    delegated(7, { kind: 'toolCallStarted', callId: 'call_w', tool: 'write_file', input: CHILD_APPROVAL.input, summary: CHILD_APPROVAL.summary }),
    // The same child event again (a duplicate forward) changes nothing.
    delegated(7, { kind: 'textDelta', messageId: 'c1', text: 'again' }),
    delegated(8, { kind: 'approvalRequested', approval: CHILD_APPROVAL }),
    { kind: 'toolCallUpdated', callId: 'call_d', status: 'awaitingApproval' },
  ]);
  assert.equal(model.state, 'awaitingApproval');
  assert.deepEqual([...model.delegatedApprovals.values()], [{ childSessionId: 'ses_c', callId: 'call_d', task: 'Write hello.txt', approval: CHILD_APPROVAL }]);
  assert.deepEqual(delegationOf(model), CHILD_WAITING);

  const applied = feed(model, [
    delegated(9, { kind: 'approvalResolved', approvalId: 'apr_c', decision: 'allow' }),
    { kind: 'toolCallUpdated', callId: 'call_d', status: 'running' },
    delegated(10, { kind: 'toolCallUpdated', callId: 'call_w', status: 'done', output: 'Created hello.txt' }),
    delegated(11, { kind: 'usage', provider: 'replay', model: 'replay', input: 1, output: 1, cacheRead: 0, cacheWrite: 0, reasoning: 0, durationMs: 1 }),
    delegated(12, { kind: 'messageStarted', messageId: 'c2', role: 'assistant' }),
    delegated(13, { kind: 'textDelta', messageId: 'c2', text: 'Wrote hello.txt.' }),
    delegated(14, { kind: 'runFinished', reason: 'end_turn' }),
    { kind: 'toolCallUpdated', callId: 'call_d', status: 'done', output: 'Wrote hello.txt.' },
  ]);
  assert.equal(model.state, 'running');
  assert.equal(model.delegatedApprovals.size, 0);
  assert.deepEqual(
    applied.map((a) => [a.filesChanged, a.spendChanged]),
    [[false, false], [false, false], [true, false], [false, true], [false, false], [false, false], [false, false], [false, false]],
  );
  assert.deepEqual(delegationOf(model), {
    status: 'done',
    output: 'Wrote hello.txt.',
    childSessionId: 'ses_c',
    childSeq: 14,
    state: 'end_turn',
    step: { callId: 'call_w', summary: 'write hello.txt (1 line)', status: 'done' },
    text: 'Wrote hello.txt.',
  });
});

test('a sub-agent\'s events before its call is announced running are kept, and a late running does not hide its approval', { timeout: 120_000 }, () => {
  const model = new SessionModel(SID);
  feed(model, [
    { kind: 'runStarted', model: 'replay' },
    { kind: 'messageCompleted', entry: entry('m1', 2, 'assistant', [{ type: 'toolCall', id: 'call_d', name: 'delegate', input: DELEGATE_INPUT }]) },
    { kind: 'toolCallStarted', callId: 'call_d', tool: 'delegate', input: DELEGATE_INPUT, summary: 'delegate "Write hello.txt"' },
    delegated(1, { kind: 'messageCompleted', entry: entry('c0', 1, 'user', [{ type: 'text', text: 'Write hello.txt' }]) }),
    delegated(2, { kind: 'runStarted', model: 'replay' }),
    delegated(4, { kind: 'messageStarted', messageId: 'c1', role: 'assistant' }),
    delegated(5, { kind: 'textDelta', messageId: 'c1', text: 'Writing it.' }),
    delegated(7, { kind: 'toolCallStarted', callId: 'call_w', tool: 'write_file', input: CHILD_APPROVAL.input, summary: CHILD_APPROVAL.summary }),
    { kind: 'toolCallUpdated', callId: 'call_d', status: 'awaitingApproval' },
    delegated(8, { kind: 'approvalRequested', approval: CHILD_APPROVAL }),
    { kind: 'toolCallUpdated', callId: 'call_d', status: 'running' },
  ]);
  assert.equal(model.state, 'awaitingApproval');
  assert.deepEqual(delegationOf(model), CHILD_WAITING);
  // Once answered, `running` is the call's status again.
  feed(model, [
    delegated(9, { kind: 'approvalResolved', approvalId: 'apr_c', decision: 'allow' }),
    { kind: 'toolCallUpdated', callId: 'call_d', status: 'running' },
  ]);
  assert.deepEqual(delegationOf(model), { ...CHILD_WAITING, status: 'running', state: 'running', childSeq: 9 });
});

test('after a reload, a waiting sub-agent comes back from delegatedApprovals and the child\'s transcript', { timeout: 120_000 }, () => {
  const model = new SessionModel(SID);
  model.applyTranscript(
    transcript([entry('m1', 2, 'assistant', [{ type: 'toolCall', id: 'call_d', name: 'delegate', input: DELEGATE_INPUT }])], {
      state: 'awaitingApproval',
      lastSeq: 2,
      delegatedApprovals: [{ childSessionId: 'ses_c', callId: 'call_d', task: 'Write hello.txt', approval: CHILD_APPROVAL }],
    }),
  );
  assert.equal(model.state, 'awaitingApproval');
  assert.deepEqual(model.unfinishedDelegations(), ['call_d']);
  model.applyChildTranscript('call_d', {
    ...transcript([
      entry('c0', 1, 'user', [{ type: 'text', text: 'Write hello.txt' }]),
      entry('c1', 8, 'assistant', [{ type: 'text', text: 'Writing it.' }, { type: 'toolCall', id: 'call_w', name: 'write_file', input: CHILD_APPROVAL.input }]),
    ]),
    sessionId: 'ses_c',
    state: 'awaitingApproval',
    lastSeq: 8,
    pendingApprovals: [CHILD_APPROVAL],
  });
  assert.deepEqual(delegationOf(model), CHILD_WAITING);
  // A forwarded event the child's transcript already held is skipped; a newer one applies.
  feed(model, [delegated(8, { kind: 'approvalResolved', approvalId: 'apr_c', decision: 'allow' })], 3);
  assert.equal(model.delegatedApprovals.size, 1);
  feed(model, [delegated(9, { kind: 'approvalResolved', approvalId: 'apr_c', decision: 'deny' })]);
  assert.equal(model.delegatedApprovals.size, 0);
  assert.equal(model.state, 'running');
  // The call's result ends it, as stored.
  model.applyTranscript(
    transcript([entry('t1', 20, 'tool', [{ type: 'toolResult', callId: 'call_d', output: 'status: failed', isError: true, status: 'error' }])], {
      state: 'idle',
    }),
  );
  assert.deepEqual(model.unfinishedDelegations(), []);
  assert.equal(delegationOf(model).output, 'status: failed');
});

test("a tool message's images go to the results that say they carry one; a user message keeps its images and its attachments' lines and size", { timeout: 120_000 }, () => {
  const image = (id: string) => ({ type: 'image' as const, imageId: id, mediaType: 'image/png', width: 4, height: 4, bytes: 96 });
  const model = new SessionModel(SID);
  model.applyTranscript(
    transcript([
      entry('u1', 1, 'user', [
        { type: 'text', text: 'look @a.rs:2' },
        { type: 'attachment', name: 'a.rs', text: '     2\tfn two() {}\n', range: { start: 2, end: 2 }, size: 38, hash: 'ab' },
        { type: 'attachment', name: 'sel.rs:3-4', text: 'x' },
        image('i0'),
      ]),
      entry('m1', 2, 'assistant', [
        { type: 'toolCall', id: 'c1', name: 'read_file', input: { path: 'a.rs' } },
        { type: 'toolCall', id: 'c2', name: 'read_file', input: { path: 'shot.png' } },
        { type: 'toolCall', id: 'c3', name: 'read_file', input: { path: 'other.png' } },
      ]),
      entry('t1', 3, 'tool', [
        { type: 'toolResult', callId: 'c1', output: 'fn two() {}', isError: false, status: 'done' },
        { type: 'toolResult', callId: 'c2', output: 'shot.png is an image (image/png, 4×4). It is attached to this result.', isError: false, status: 'done' },
        { type: 'toolResult', callId: 'c3', output: 'other.png is an image (image/png, 4×4). It is attached to this result.', isError: false, status: 'done' },
        image('i1'),
        image('i2'),
      ]),
    ]),
  );
  const [user, , c1, c2, c3] = model.list();
  assert.deepEqual(user.kind === 'user' && [user.attachments, user.images], [
    [{ name: 'a.rs', range: { start: 2, end: 2 }, size: 38 }, { name: 'sel.rs:3-4' }],
    [{ imageId: 'i0', mediaType: 'image/png', width: 4, height: 4, bytes: 96 }],
  ]);
  assert.deepEqual(
    [c1, c2, c3].map((e) => (e.kind === 'tool' ? (e.images ?? []).map((i) => i.imageId) : undefined)),
    [[], ['i1'], ['i2']],
  );
});
