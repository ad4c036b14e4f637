// The chat page's pure helpers for the header and transcript: counts that agree with their
// nouns, signed differences, the context popover's rows, who an entry is from, which user
// messages fold, and which fences are coloured.

import { test } from 'node:test';
import assert from 'node:assert/strict';

import type { BudgetSnapshot } from '../src/model/wire';
import { contextRows, countOf, foldsLong, reconciliationLine, requestsOf, roleLabel, signed } from '../src/webview/view';
import { highlight, languageOf } from '../src/webview/highlight';

const snapshot: BudgetSnapshot = {
  contextWindow: 128_000,
  responseReserve: 4_096,
  usableTokens: 123_904,
  systemTokens: 310,
  instructionsTokens: 42,
  toolTokens: 788,
  historyTokens: 1_200,
  historyMessages: 1,
  summaryTokens: 200,
  historyLimitTokens: 60_000,
  latestUserTokens: 15,
  rawInputTokens: 2_368,
  inputTokens: 2_984,
  correctionFactor: 1.26,
  countedByEstimate: true,
  exact: false,
  remainingTokens: 120_920,
  utilisation: 0.024,
  pressure: 'normal',
  thresholds: {} as BudgetSnapshot['thresholds'],
};

test('counts agree with their nouns', () => {
  assert.deepEqual([countOf(0, 'request'), countOf(1, 'request'), countOf(2, 'request'), countOf(1_500, 'line')], ['0 requests', '1 request', '2 requests', '1,500 lines']);
  assert.deepEqual([signed(204), signed(-795), signed(0), signed(-1_000)], ['+204', '−795', '±0', '−1,000']);
});

test("the context popover's rows: each part as counted, the summary apart from the history, the estimate and the window", () => {
  assert.deepEqual(contextRows(snapshot), [
    { key: 'system', label: 'System prompt', tokens: 310 },
    { key: 'instructions', label: 'Instructions (AGENTS.md)', tokens: 42 },
    { key: 'tools', label: 'Tools', tokens: 788 },
    { key: 'summary', label: 'Summary of older turns', tokens: 200 },
    { key: 'history', label: 'History (1 message)', tokens: 1_000 },
    { key: 'turn', label: 'This turn', tokens: 15 },
    { key: 'estimate', label: 'Estimate (× 1.26)', tokens: 2_984 },
    { key: 'usable', label: 'Usable window', tokens: 123_904 },
  ]);
  const exact = contextRows({ ...snapshot, exact: true, correctionFactor: 1, instructionsTokens: undefined, historyMessages: 3 });
  assert.deepEqual(exact.map((r) => `${r.label}=${r.tokens}`), [
    'System prompt=310',
    'Instructions (AGENTS.md)=0',
    'Tools=788',
    'Summary of older turns=200',
    'History (3 messages)=1000',
    'This turn=15',
    'Total=2984',
    'Usable window=123904',
  ]);
});

test('the estimate against the provider, and the requests a cost counts', () => {
  assert.equal(reconciliationLine(undefined), 'No request reported by the provider yet.');
  assert.equal(
    reconciliationLine({ estimatedInputTokens: 796, actualInputTokens: 1_000, actualOutputTokens: 12, difference: 204, correctionFactor: 1.26, learned: true }),
    'Last request: estimated 796, provider reported 1,000 (+204)',
  );
  const tokens = { input: 1, output: 1, cacheRead: 0, cacheWrite: 0, reasoning: 0 };
  assert.equal(requestsOf(undefined), 0);
  assert.equal(
    requestsOf({ byModel: [], pricedLines: 0, unpriced: { lines: 3, tokens, models: [] }, partial: true, pricesAsOf: '2026-11-29', byRequest: [{ kind: 'turn', lines: 2, tokens, partial: true }, { kind: 'title', lines: 1, tokens, partial: true }] }),
    3,
  );
});

test('who an entry is from, and which user messages fold', () => {
  assert.deepEqual(
    [roleLabel({ kind: 'user' }), roleLabel({ kind: 'assistant' }), roleLabel({ kind: 'tool', tool: 'read_file' }), roleLabel({ kind: 'tool', tool: 'delegate' }), roleLabel({ kind: 'notice' }), roleLabel({ kind: 'note' }), roleLabel({ kind: 'summary' })],
    ['You', 'Model', 'Tool', 'Sub-agent', 'Notice', 'Note', 'Summary'],
  );
  assert.equal(foldsLong('short'), false);
  assert.equal(foldsLong(Array.from({ length: 12 }, () => 'x').join('\n')), false);
  assert.equal(foldsLong(Array.from({ length: 13 }, () => 'x').join('\n')), true);
  assert.equal(foldsLong('x'.repeat(1_501)), true);
});

test('a fence is coloured when it names a bundled language, under any of its names', () => {
  assert.deepEqual(['rust', 'ts', 'TypeScript', 'sh', 'py', 'cobol', '', ' js extra'].map(languageOf), ['rust', 'typescript', 'typescript', 'bash', 'python', undefined, undefined, 'javascript']);
  assert.equal(highlight('let x = 1;', 'rust'), '<span class="hljs-keyword">let</span> <span class="hljs-variable">x</span> = <span class="hljs-number">1</span>;');
  assert.equal(highlight('<b>', 'cobol'), undefined);
});
