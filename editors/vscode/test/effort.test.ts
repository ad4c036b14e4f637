// The effort levels a model takes, derived on the page as the daemon derives them: the same
// models as the daemon's own test of the table's reasoning styles (src/context/window.rs), and
// which provider sends them (src/provider/effort.rs).

import { test } from 'node:test';
import assert from 'node:assert/strict';

import { effortLevels, nameCandidates, reasoningStyle } from '../src/model/effort';

test("each family's reasoning style, by the longest prefix of any spelling, as the daemon reads the table", () => {
  const cases: [string, string | undefined][] = [
    ['claude-sonnet-4-5-20250929', 'thinking'],
    ['claude-3-7-sonnet-latest', 'thinking'],
    ['claude-3-5-haiku-latest', undefined],
    ['gpt-5-mini', 'effortMinimal'],
    ['gpt-5.1', 'effort'],
    ['gpt-5-chat-latest', undefined],
    ['o4-mini', 'effort'],
    ['o1-mini', undefined],
    ['gpt-4o', undefined],
    ['openai/gpt-oss-120b', 'effort'],
    ['llama3.1:8b', undefined],
    ['my-local-finetune', undefined],
  ];
  assert.deepEqual(
    cases.map(([model]) => [model, reasoningStyle(model)]),
    cases,
  );
  assert.deepEqual(nameCandidates(' OpenRouter/Anthropic/Claude-Sonnet-4-5 '), ['openrouter/anthropic/claude-sonnet-4-5', 'claude-sonnet-4-5']);
  assert.deepEqual(nameCandidates('us.anthropic.claude-opus-4-1-v1:0'), ['us.anthropic.claude-opus-4-1-v1:0', 'claude-opus-4-1-v1:0']);
  assert.deepEqual(nameCandidates('ft:gpt-4o-mini:acme::x1'), ['ft:gpt-4o-mini:acme::x1', 'gpt-4o-mini:acme::x1']);
});

test('the levels offered: thinking models through Anthropic and reasoning models through OpenAI; minimal only where the family has it; none elsewhere', () => {
  assert.deepEqual(
    [
      effortLevels('anthropic', 'claude-sonnet-4-5'),
      effortLevels('openai', 'gpt-5-mini'),
      effortLevels('openai', 'gpt-5.1'),
      effortLevels('openai', 'openrouter/openai/o4-mini'),
      effortLevels('openai', 'gpt-4o'),
      // A family sent through a provider that does not speak its field takes none.
      effortLevels('openai', 'claude-sonnet-4-5'),
      effortLevels('anthropic', 'gpt-5.1'),
      effortLevels('demo', 'demo'),
      effortLevels('replay', 'claude-sonnet-4-5'),
    ],
    [
      ['minimal', 'low', 'medium', 'high'],
      ['minimal', 'low', 'medium', 'high'],
      ['low', 'medium', 'high'],
      ['low', 'medium', 'high'],
      [],
      [],
      [],
      [],
      [],
    ],
  );
});
