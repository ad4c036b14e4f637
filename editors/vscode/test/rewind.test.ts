// The session model's part in undo: entries a rewind took back are marked (their tool calls
// too). Which files an undo puts back is the daemon's answer (`session/rewind` with `dryRun`),
// which the controller asks for; the e2e undo test checks it.

import { test } from 'node:test';
import assert from 'node:assert/strict';

import { SessionModel } from '../src/model/session';
import type { SessionTranscriptResult, TranscriptEntry } from '../src/model/wire';

const SID = 'ses_1';

function entry(id: string, seq: number, role: TranscriptEntry['role'], blocks: TranscriptEntry['blocks'], rewound = false): TranscriptEntry {
  return { id, seq, role, blocks, status: 'complete', createdAt: '2026-01-01T00:00:00Z', ...(rewound ? { rewound } : {}) };
}

function transcript(entries: TranscriptEntry[]): SessionTranscriptResult {
  return { sessionId: SID, state: 'idle', entries, hasMore: false, lastSeq: entries[entries.length - 1].seq, pendingApprovals: [], pendingInterjections: [] };
}

/** A turn: the user's message, a write of `path` and its result, and the answer. */
function turn(n: number, path: string, rewound = false): TranscriptEntry[] {
  const seq = n * 10;
  return [
    entry(`u${n}`, seq, 'user', [{ type: 'text', text: `turn ${n}` }], rewound),
    entry(`a${n}`, seq + 1, 'assistant', [{ type: 'toolCall', id: `call_${n}`, name: n % 2 ? 'write_file' : 'edit_file', input: { path } }], rewound),
    entry(`t${n}`, seq + 2, 'tool', [{ type: 'toolResult', callId: `call_${n}`, output: 'ok', isError: false, status: 'done' }], rewound),
    entry(`r${n}`, seq + 3, 'assistant', [{ type: 'text', text: 'Done.' }], rewound),
  ];
}

test('rewound entries are marked, their tool calls with them; the others are not', () => {
  const model = new SessionModel(SID);
  model.applyPage(transcript([...turn(1, 'a.md'), ...turn(2, 'b.md', true)]));
  assert.deepEqual(
    model.list().map((e) => [e.kind, e.rewound === true]),
    [
      ['user', false],
      ['assistant', false],
      ['tool', false],
      ['assistant', false],
      ['user', true],
      ['assistant', true],
      ['tool', true],
      ['assistant', true],
    ],
  );
});
