// Bundles the extension (Node, CommonJS, `vscode` external), the chat page (browser IIFE) and
// the tests and benchmark (Node ESM; tests of host code get a stub in place of `vscode`).

import { build } from 'esbuild';
import { readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';

const root = fileURLToPath(new URL('..', import.meta.url));
const production = process.argv.includes('--production');

await Promise.all([
  build({
    entryPoints: [join(root, 'src/host/extension.ts')],
    outfile: join(root, 'dist/extension.js'),
    bundle: true,
    platform: 'node',
    format: 'cjs',
    target: 'node18',
    external: ['vscode'],
    sourcemap: !production,
    minify: production,
    logLevel: 'warning',
  }),
  build({
    entryPoints: [join(root, 'src/webview/main.ts')],
    outfile: join(root, 'dist/webview.js'),
    bundle: true,
    platform: 'browser',
    format: 'iife',
    target: 'es2022',
    sourcemap: !production,
    minify: production,
    logLevel: 'warning',
  }),
  build({
    entryPoints: [
      ...readdirSync(join(root, 'test')).filter((f) => f.endsWith('.test.ts')).map((f) => join(root, 'test', f)),
      join(root, 'bench/bench.ts'),
    ],
    outdir: join(root, 'out'),
    outbase: root,
    outExtension: { '.js': '.mjs' },
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    sourcemap: true,
    external: ['playwright-core', 'esbuild', 'axe-core'],
    alias: { vscode: join(root, 'test/stubs/vscode.ts') },
    banner: { js: "import { createRequire as __cr } from 'node:module'; const require = __cr(import.meta.url);" },
    logLevel: 'warning',
  }),
]);
