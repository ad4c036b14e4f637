// The chat page's pure helpers: the lines a summary entry shows for each way older messages
// were folded, and the compaction's details.

import { test } from 'node:test';
import assert from 'node:assert/strict';

import { fileDiffParams } from '../src/host/controller';
import type { CostSummary } from '../src/model/wire';
import { costLabel, summaryDetail, summaryHeading } from '../src/webview/view';

function costOf(totalUsd: number | undefined, pricedLines: number, unpricedLines: number): CostSummary {
  const tokens = { input: 10, output: 1, cacheRead: 0, cacheWrite: 0, reasoning: 0 };
  return {
    ...(totalUsd === undefined ? {} : { totalUsd }),
    byModel: [],
    pricedLines,
    unpriced: { lines: unpricedLines, tokens, models: unpricedLines ? ['qwen3:8b'] : [] },
    partial: unpricedLines > 0,
    pricesAsOf: '2026-11-29',
    byRequest: [{ kind: 'turn', lines: pricedLines + unpricedLines, tokens, partial: unpricedLines > 0 }],
  };
}

test('the cost shows no amount where nothing was priced', { timeout: 120_000 }, () => {
  assert.deepEqual(
    [costOf(undefined, 0, 2), costOf(undefined, 0, 0), costOf(0.5, 1, 1), costOf(0.0012, 3, 0), costOf(undefined, 1, 0)].map(costLabel),
    ['unpriced', 'no cost yet', '$0.50 + unpriced', '$0.0012', 'no cost yet'],
  );
});

test("a sub-agent's file is asked for by its child session", { timeout: 120_000 }, () => {
  assert.deepEqual(fileDiffParams('ses_1', { path: 'a.md', childSessionId: 'ses_c' }), { sessionId: 'ses_1', path: 'a.md', childSessionId: 'ses_c' });
  assert.deepEqual(fileDiffParams('ses_1', { path: 'a.md' }), { sessionId: 'ses_1', path: 'a.md' });
});

test('a summary entry is headed by how the older messages were folded', { timeout: 120_000 }, () => {
  assert.equal(summaryHeading({ method: 'summary', messages: 4 }), 'Summary of 4 earlier messages');
  assert.equal(summaryHeading({ method: 'summary', messages: 1 }), 'Summary of 1 earlier message');
  assert.equal(summaryHeading({ method: 'drop', messages: 12 }), '12 earlier messages left out of what the model is sent');
  assert.equal(summaryHeading({ method: 'carryOver', messages: 30 }), 'New context — carried over');
});

test('its detail line: the range, and when seen live, why and the tokens before and after', { timeout: 120_000 }, () => {
  assert.equal(summaryDetail({ fromSeq: 1, toSeq: 170 }), 'seq 1–170');
  assert.equal(
    summaryDetail({ fromSeq: 3, toSeq: 4096, compaction: { reason: 'share', tokensBefore: 61_900, tokensAfter: 12_034 } }),
    'seq 3–4096 · the history passed its share of the window · history 61,900 → 12,034 tokens',
  );
  assert.equal(
    summaryDetail({ fromSeq: 3, toSeq: 9, compaction: { reason: 'window', tokensBefore: 900, tokensAfter: 400 } }),
    'seq 3–9 · the request would not have fit the window · history 900 → 400 tokens',
  );
  assert.equal(summaryDetail({ compaction: { reason: 'command', tokensBefore: 227, tokensAfter: 127 } }), '/compact · history 227 → 127 tokens');
  // A new context: the command that starts one, or the idle rollover.
  assert.equal(summaryDetail({ method: 'carryOver', compaction: { reason: 'command', tokensBefore: 101, tokensAfter: 265 } }), '/new-context · history 101 → 265 tokens');
  assert.equal(summaryDetail({ method: 'carryOver', compaction: { reason: 'idle', tokensBefore: 2, tokensAfter: 1 } }), 'idle longer than the idle rollover · history 2 → 1 tokens');
  // A reason this page does not know yet is shown as the daemon named it.
  assert.equal(summaryDetail({ compaction: { reason: 'later' as 'idle', tokensBefore: 2, tokensAfter: 1 } }), 'later · history 2 → 1 tokens');
  assert.equal(summaryDetail({}), '');
});
