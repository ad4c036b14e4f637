// Drives `sidechat serve` with vscode-jsonrpc, the JSON-RPC library VS Code extensions use,
// over Content-Length framing: initialize, session/create, session/list, shutdown, exit.
//
//   npm ci && node interop.mjs
//
// SIDECHAT_BIN names the binary (default: ../../target/debug/sidechat, relative to this file).
// Exits 0 when every step passes, 1 otherwise; never runs longer than 30 s.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import rpc from 'vscode-jsonrpc/node';

const { createMessageConnection, StreamMessageReader, StreamMessageWriter } = rpc;

const GUARD_MS = 30_000;
const TITLE = 'interop: vscode-jsonrpc';

const bin = process.env.SIDECHAT_BIN || fileURLToPath(new URL('../../target/debug/sidechat', import.meta.url));
const version = packageVersion(fileURLToPath(new URL('../../Cargo.toml', import.meta.url)));

/** The `version` of the [package] table, which the server reports in serverInfo. */
function packageVersion(manifest) {
  const text = readFileSync(manifest, 'utf8');
  const section = text.split(/^\[/m).find((s) => s.startsWith('package]'));
  const match = section && /^version\s*=\s*"([^"]+)"/m.exec(section);
  if (!match) {
    throw new Error(`no [package] version in ${manifest}`);
  }
  return match[1];
}

if (!existsSync(bin)) {
  console.error(`interop: no sidechat binary at ${bin}; run \`cargo build\` or set SIDECHAT_BIN`);
  process.exit(1);
}

const dir = mkdtempSync(join(tmpdir(), 'sidechat-interop-'));
const db = join(dir, 'sidechat.db');

// A clean environment with a temporary home: no config file or provider key of this machine
// adds accounts, so only the demo account is configured.
const env = {
  PATH: process.env.PATH ?? '/usr/bin:/bin',
  HOME: dir,
  XDG_CONFIG_HOME: join(dir, 'config'),
  XDG_DATA_HOME: join(dir, 'data'),
};
const child = spawn(bin, ['serve', '--db', db], { env, stdio: ['pipe', 'pipe', 'pipe'] });

let stderr = '';
child.stderr.setEncoding('utf8');
child.stderr.on('data', (chunk) => {
  stderr += chunk;
});
const exited = new Promise((resolve) => {
  child.on('exit', (code, signal) => resolve({ code, signal }));
});
// A spawn failure or an exit before `exit` ends the pending step instead of leaving it waiting.
let exitSent = false;
const stopped = Promise.race([
  new Promise((_, reject) => {
    child.on('error', (e) => reject(new Error(`cannot run ${bin}: ${e.message}`)));
  }),
  exited.then(({ code, signal }) => {
    if (!exitSent) {
      throw new Error(`the server exited before \`exit\` (code ${code}, signal ${signal})`);
    }
    return new Promise(() => {});
  }),
]);
stopped.catch(() => {});

const connection = createMessageConnection(
  new StreamMessageReader(child.stdout),
  new StreamMessageWriter(child.stdin),
);
const unexpected = [];
connection.onUnhandledNotification((message) => unexpected.push(message.method));
connection.onError(([error]) => console.error(`  connection error: ${error.message}`));
connection.listen();

let passed = 0;
let failed = 0;

function cleanUp() {
  connection.dispose();
  if (child.exitCode === null && child.signalCode === null) {
    child.kill('SIGKILL');
  }
  rmSync(dir, { recursive: true, force: true });
}

function report(error) {
  console.error(`  ${error.stack ?? error}`);
  const tail = stderr.trim().split('\n').slice(-20).join('\n  | ');
  if (tail) {
    console.error(`  server stderr (last lines):\n  | ${tail}`);
  }
}

const guard = setTimeout(() => {
  console.error(`FAIL: interop did not finish within ${GUARD_MS / 1000} s; killing the server`);
  report(new Error('timed out'));
  cleanUp();
  console.log(`interop: ${passed} passed, ${failed + 1} failed`);
  process.exit(1);
}, GUARD_MS);

/** Runs one step, racing it against the server failing to start or stopping early. */
async function step(number, name, body) {
  const started = performance.now();
  try {
    await Promise.race([body(), stopped]);
  } catch (error) {
    error.step = `${number} - ${name}`;
    throw error;
  }
  const ms = (performance.now() - started).toFixed(1);
  passed += 1;
  console.log(`ok ${number} - ${name} (${ms} ms)`);
}

let session;
/** Whether this machine's daemon runs commands sandboxed, as `initialize` said. */
let sandboxed;

try {
  await step(1, 'initialize + initialized', async () => {
    const result = await connection.sendRequest('initialize', {
      clientInfo: { name: 'sidechat-interop', version: '1.0.0' },
      protocolVersion: 1,
      capabilities: {},
    });
    // Whether commands run sandboxed depends on the machine's kernel: its shape is checked.
    const { capabilities, sandbox, ...rest } = result;
    assert.equal(typeof sandbox.active, 'boolean');
    assert.equal(typeof sandbox.detail, 'string');
    sandboxed = sandbox.active;
    assert.deepEqual(rest, {
      serverInfo: { name: 'sidechat', version },
      protocolVersion: 1,
      accounts: [
        { name: 'demo', kind: 'demo', isDemo: true, defaultModel: 'demo', models: ['demo'] },
      ],
      defaultAccount: 'demo',
      unavailableAccounts: [],
    });
    for (const method of ['initialize', 'session/create', 'session/list', 'shutdown']) {
      assert.ok(capabilities.methods.includes(method), `capabilities.methods lacks ${method}`);
    }
    assert.deepEqual([...capabilities.methods].sort(), capabilities.methods, 'capabilities.methods is sorted');
    assert.ok(
      capabilities.events.length > 0 && capabilities.events.every((e) => typeof e === 'string'),
      'capabilities.events is a list of names',
    );
    await connection.sendNotification('initialized', {});
  });

  await step(2, 'session/create', async () => {
    session = await connection.sendRequest('session/create', { title: TITLE, workspaceRoot: dir });
    const { id, createdAt, updatedAt, ...rest } = session;
    assert.deepEqual(rest, {
      title: TITLE,
      account: 'demo',
      model: 'demo',
      workspaceRoot: dir,
      maxSteps: 25,
      rollover: '3h',
      state: 'idle',
      lastSeq: 0,
      tokens: 0,
      unpricedRequests: 0,
      changedFiles: [],
      delegation: true,
      autoCompact: true,
      tokensByKind: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, reasoning: 0 },
      commandsSandboxed: sandboxed,
    });
    assert.match(id, /^ses_[0-9a-f]{32}$/);
    assert.match(createdAt, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/);
    assert.equal(updatedAt, createdAt);
    assert.ok(Math.abs(Date.parse(createdAt) - Date.now()) < 60_000, `createdAt ${createdAt} is not now`);
  });

  await step(3, 'session/list', async () => {
    const list = await connection.sendRequest('session/list', { limit: 10 });
    assert.deepEqual(list, {
      sessions: [
        {
          id: session.id,
          title: TITLE,
          account: 'demo',
          model: 'demo',
          workspaceRoot: dir,
          state: 'idle',
          updatedAt: session.updatedAt,
          tokens: 0,
          unpricedRequests: 0,
        },
      ],
    });
  });

  await step(4, 'shutdown', async () => {
    assert.equal(await connection.sendRequest('shutdown'), null);
  });

  await step(5, 'exit (process ends with code 0)', async () => {
    exitSent = true;
    await connection.sendNotification('exit');
    assert.deepEqual(await exited, { code: 0, signal: null });
    assert.deepEqual(unexpected, [], 'the server sent no notifications');
  });
} catch (error) {
  failed += 1;
  console.log(`not ok ${error.step ?? passed + 1}: ${error.message.split('\n')[0]}`);
  report(error);
}

clearTimeout(guard);
cleanUp();
if (failed === 0) {
  console.log(`interop: ${passed} passed, 0 failed`);
  process.exit(0);
}
console.log(`interop: ${passed} passed, ${failed} failed (later steps skipped)`);
process.exit(1);
