// The generated wire types (src/model/wire.ts): each shared type of schema/ is emitted once,
// so that a field and the definition it refers to are one TypeScript type.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

test('no wire type is emitted twice under a numbered name', { timeout: 120_000 }, () => {
  const wire = readFileSync(join(process.cwd(), 'src', 'model', 'wire.ts'), 'utf8');
  const names = new Set([...wire.matchAll(/^export (?:type|interface) (\w+)/gm)].map((m) => m[1]));
  const copies = [...names].filter((name) => /\d$/.test(name) && names.has(name.replace(/\d+$/, '')));
  assert.deepEqual(copies, []);
});
