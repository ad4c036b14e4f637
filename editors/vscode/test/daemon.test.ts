// The client layer's daemon process against the real daemon: what a crash looks like to the
// view and to requests, and a write to a daemon whose input has just closed.

import { afterEach, test } from 'node:test';
import assert from 'node:assert/strict';
import type { ChildProcessWithoutNullStreams } from 'node:child_process';

import type { Daemon } from '../src/host/daemon';
import type { DaemonStatus } from '../src/model/messages';
import { Scratch, until } from './harness';

const cleanups: (() => Promise<void> | void)[] = [];

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** A daemon in a scratch home that logs into `lines` and reports its statuses into `seen`. */
function daemonWithLog(firstDelayMs = 200) {
  const scratch = new Scratch();
  const lines: string[] = [];
  const daemon = scratch.daemon();
  daemon.configure({ log: (line) => lines.push(line), restart: { firstDelayMs } });
  const seen: DaemonStatus[] = [];
  daemon.onStatus((status) => seen.push(status));
  cleanups.push(() => scratch.dispose(), () => daemon.stop());
  return { daemon, lines, seen, starts: () => lines.filter((line) => line.startsWith('starting ')).length };
}

test('a crash: the status stays "crashed" until the daemon is ready, and a request in the back-off waits for the restart instead of starting a daemon of its own', { timeout: 120_000 }, async () => {
  const { daemon, seen, starts } = daemonWithLog();
  await daemon.start();
  const created = await daemon.request('session/create', {});
  const firstPid = daemon.pid;

  // The request is made the moment the crash is told, so it lands in the back-off for sure.
  let during: Promise<unknown> | undefined;
  let startsWhenAsked = 0;
  let statusWhenAsked: DaemonStatus['state'] | undefined;
  const stopListening = daemon.onStatus((status) => {
    if (status.state !== 'crashed' || during) return;
    during = daemon.request('session/get', { sessionId: created.id });
    startsWhenAsked = starts();
    statusWhenAsked = daemon.status.state;
  });
  cleanups.push(stopListening);
  process.kill(firstPid ?? 0, 'SIGKILL');
  await until(() => during !== undefined, 'the crash');
  assert.equal(startsWhenAsked, 1, 'the request started no daemon during the back-off');
  assert.equal(statusWhenAsked, 'crashed');

  // It is answered by the daemon the back-off started, once it is ready.
  const got = (await during) as { id: string };
  assert.equal(got.id, created.id);
  assert.equal(starts(), 2);
  assert.notEqual(daemon.pid, firstPid);
  assert.deepEqual(
    seen.map((s) => s.state),
    ['starting', 'ready', 'crashed', 'ready'],
  );
  // And it goes on working.
  assert.equal((await daemon.request('session/list', {})).sessions.length, 1);
  assert.equal(starts(), 2);
});

test('a restart asked for during the back-off answers the requests waiting for it; a stop fails them', { timeout: 120_000 }, async () => {
  // A back-off long enough never to end inside this test.
  const { daemon, seen, starts } = daemonWithLog(600_000);
  await daemon.start();
  process.kill(daemon.pid ?? 0, 'SIGKILL');
  await until(() => daemon.status.state === 'crashed', 'the crash');
  const waiting = daemon.request('session/list', {});
  await daemon.restart();
  assert.deepEqual((await waiting).sessions, []);
  assert.equal(starts(), 2);
  assert.deepEqual(
    seen.map((s) => s.state),
    ['starting', 'ready', 'crashed', 'ready'],
  );

  process.kill(daemon.pid ?? 0, 'SIGKILL');
  await until(() => daemon.status.state === 'crashed', 'the second crash');
  const orphan = daemon.request('session/list', {});
  await daemon.stop();
  await assert.rejects(orphan, /sidechat was stopped before it restarted/);
  assert.equal(starts(), 2);
});

test('a request written as the daemon\'s input closes fails as that request, with no unhandled rejection', { timeout: 120_000 }, async () => {
  const unhandled: unknown[] = [];
  const record = (reason: unknown) => unhandled.push(reason);
  process.on('unhandledRejection', record);
  cleanups.push(() => void process.off('unhandledRejection', record));
  const { daemon } = daemonWithLog(600_000);
  await daemon.start();
  // The pipe to the daemon goes as it does when the daemon dies; the write comes before the
  // connection has heard of it.
  const child = (daemon as unknown as { child: ChildProcessWithoutNullStreams }).child;
  child.stdin.destroy();
  await assert.rejects(daemon.request('session/list', {}));
  // Unhandled rejections are reported as the turn that made them ends (the request has failed,
  // so its turn is over): the next turn of the event loop comes after any report of it.
  await new Promise((resolve) => setImmediate(resolve));
  assert.deepEqual(unhandled.map(String), []);
});
