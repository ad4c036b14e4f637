// The chat page's script, built as the packaged extension ships it (minified), stays under its
// budget: the panel loads it each time the view opens.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { build } from 'esbuild';

import { EXTENSION_ROOT } from './harness';

/** The page's budget: 400 KB minified, the syntax highlighter's languages included. */
const BUDGET_BYTES = 400 * 1024;

test('the chat page script, minified, is under 400 KB', { timeout: 120_000 }, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'sidechat-bundle-'));
  try {
    const outfile = join(dir, 'webview.js');
    await build({
      entryPoints: [join(EXTENSION_ROOT, 'src/webview/main.ts')],
      outfile,
      bundle: true,
      platform: 'browser',
      format: 'iife',
      target: 'es2022',
      minify: true,
      logLevel: 'warning',
    });
    const size = statSync(outfile).size;
    console.log(`webview.js minified: ${(size / 1024).toFixed(1)} KB`);
    assert.ok(size < BUDGET_BYTES, `webview.js is ${size} bytes, over the ${BUDGET_BYTES}-byte budget`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
