// The recorded event streams of tests/fixtures/streams/ (what the real daemon sends in six
// scenarios; tests/daemon/streams.rs keeps them current), replayed through the session model
// the chat page draws from: each must read as its NAME.transcript.txt, as it does for the
// terminal and the Neovim plugin (the form is described in that folder's README).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

import { SessionModel, type Entry } from '../src/model/session';
import type { SessionEventParams, SessionTranscriptResult } from '../src/model/wire';
import { REPO_ROOT } from './harness';

const STREAMS = join(REPO_ROOT, 'tests', 'fixtures', 'streams');

/** A text on one line: its line breaks written `\n`. */
const oneLine = (text: string) => text.replace(/\n/g, '\\n');

/** One entry as the normalised transcript writes it. */
function entryLines(e: Entry): string[] {
  switch (e.kind) {
    case 'user':
      return [`${e.source === 'interjection' ? 'user (interjection)' : 'user'}: ${oneLine(e.text)}`];
    case 'assistant': {
      const text = e.blocks.filter((b) => b.type === 'text' && b.text !== '').map((b) => b.text).join('\n\n');
      if (text === '') return [];
      const status = e.streaming ? ' (streaming)' : e.status === 'complete' ? '' : ` (${e.status})`;
      return [`assistant${status}: ${oneLine(text)}`];
    }
    case 'tool': {
      const output = e.output === undefined ? '' : ` → ${e.output.split('\n')[0]}`;
      const lines = [`tool: ${e.summary} [${e.status}]${output}`];
      if (e.delegation) lines.push(`  sub-agent [${e.delegation.state}]: ${oneLine(e.delegation.text)}`);
      return lines;
    }
    case 'notice':
      return [`notice ${e.level}: ${oneLine(e.message)}`];
    case 'note':
      return [`note: ${oneLine(e.text)}`];
    case 'summary': {
      const c = e.compaction;
      const how = c ? ` (${c.reason}: ${c.tokensBefore} → ${c.tokensAfter} tokens)` : '';
      return [`summary ${e.method} of ${e.messages} messages${how}: ${oneLine(e.text)}`];
    }
  }
}

/** The model as the normalised transcript writes it. */
function normalised(model: SessionModel): string[] {
  return [
    ...model.list().flatMap(entryLines),
    `state: ${model.state}`,
    ...[...model.waiting.values()].map((w) => `waiting: ${oneLine(w.text)}`),
    ...[...model.approvals.values()].map((a) => `approval: ${a.summary}`),
  ];
}

/** Replays a stream as the chat page does: events in order; a transcript starts over. */
function replay(name: string): SessionModel {
  let model: SessionModel | undefined;
  for (const line of readFileSync(join(STREAMS, `${name}.jsonl`), 'utf8').split('\n')) {
    if (line === '') continue;
    const value = JSON.parse(line) as { transcript: SessionTranscriptResult } | SessionEventParams;
    if ('transcript' in value) {
      model = new SessionModel(value.transcript.sessionId);
      model.applyTranscript(value.transcript);
    } else {
      model ??= new SessionModel(value.sessionId);
      const applied = model.apply(value);
      assert.equal(applied.gapAfter, undefined, `${name}: a gap before seq ${value.seq}`);
    }
  }
  assert.ok(model, `${name}: an empty stream`);
  return model;
}

const names = readdirSync(STREAMS)
  .filter((f) => f.endsWith('.jsonl'))
  .map((f) => f.slice(0, -'.jsonl'.length))
  .sort();

test('every recorded stream is here', () => {
  assert.deepEqual(names, ['approval', 'compaction', 'crash_recovery', 'delegation', 'interjection', 'tool_run']);
});

for (const name of names) {
  test(`the ${name} stream reads as its transcript`, () => {
    const expected = readFileSync(join(STREAMS, `${name}.transcript.txt`), 'utf8');
    assert.equal(normalised(replay(name)).join('\n') + '\n', expected);
  });
}
