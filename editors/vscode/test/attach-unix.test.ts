// A window attaching to a daemon that listens on a unix socket (`serve --listen unix:PATH`):
// serve.json names it as `ws+unix:///PATH`, and the window talks to it like to a TCP listener.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';

import { socketTarget } from '../src/host/socket';
import { Scratch } from './harness';

test('the ws+unix URL of serve.json becomes the address the ws package opens', () => {
  assert.deepEqual(
    [socketTarget('ws+unix:///run/user/1/sidechat/s.sock'), socketTarget('ws://127.0.0.1:7777')],
    ['ws+unix:/run/user/1/sidechat/s.sock:/', 'ws://127.0.0.1:7777'],
  );
});

test('a window attaches to a daemon listening on a unix socket and uses it', { timeout: 120_000 }, async () => {
  const scratch = new Scratch();
  const env = { SIDECHAT_ACCOUNT: 'demo' };
  const listening = await scratch.listening(env, `unix:${join(scratch.dir, 'run', 'sidechat.sock')}`);
  const window = scratch.daemon(env, undefined, { connection: 'attach' });
  try {
    assert.match(listening.file.url, /^ws\+unix:\/\/\//);
    await window.start();
    assert.equal(window.status.state === 'ready' && window.status.attached, listening.file.url);
    assert.equal(window.pid, undefined, 'no daemon of its own');
    const created = (await window.request('session/create', {})) as { id: string };
    const listed = (await window.request('session/list', {})) as { sessions: { id: string }[] };
    assert.deepEqual(listed.sessions.map((s) => s.id), [created.id]);
  } finally {
    await window.dispose();
    await listening.stop();
    scratch.dispose();
  }
});
