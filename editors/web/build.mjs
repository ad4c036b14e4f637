// Builds the chat page for a browser into dist/: index.html, app.js (the page with its host
// controller, minified) and app.css (theme, page styles). The files are committed, because the
// daemon compiles them in (`include_bytes!`) and `cargo install` runs no Node.
//
// esbuild and the page's libraries are the VS Code extension's (editors/vscode/node_modules):
// the page is that extension's, built for another host.
//
//   node editors/web/build.mjs          rebuild dist/
//   node editors/web/build.mjs --check  fail when dist/ is not what the sources build

import { createRequire } from 'node:module';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('.', import.meta.url));
const require = createRequire(join(root, '..', 'vscode', 'package.json'));
const { build } = require('esbuild');

const FILES = ['index.html', 'app.js', 'app.css'];

async function buildInto(out) {
  mkdirSync(out, { recursive: true });
  const common = { bundle: true, minify: true, legalComments: 'none', logLevel: 'warning', charset: 'utf8' };
  await build({
    ...common,
    entryPoints: [join(root, 'src', 'main.ts')],
    outfile: join(out, 'app.js'),
    platform: 'browser',
    format: 'iife',
    target: 'es2022',
  });
  await build({
    ...common,
    entryPoints: [join(root, 'src', 'page.css')],
    outfile: join(out, 'app.css'),
  });
  copyFileSync(join(root, 'src', 'index.html'), join(out, 'index.html'));
}

const dist = join(root, 'dist');
if (process.argv.includes('--check')) {
  const fresh = mkdtempSync(join(tmpdir(), 'sidechat-web-'));
  try {
    await buildInto(fresh);
    const stale = FILES.filter((file) => {
      try {
        return !readFileSync(join(fresh, file)).equals(readFileSync(join(dist, file)));
      } catch {
        return true;
      }
    });
    const extra = readdirSync(dist).filter((file) => !FILES.includes(file));
    if (stale.length > 0 || extra.length > 0) {
      console.error(`editors/web/dist is stale (${[...stale, ...extra].join(', ')}): run \`node editors/web/build.mjs\` and commit dist/`);
      process.exit(1);
    }
  } finally {
    rmSync(fresh, { recursive: true, force: true });
  }
} else {
  rmSync(dist, { recursive: true, force: true });
  await buildInto(dist);
}
