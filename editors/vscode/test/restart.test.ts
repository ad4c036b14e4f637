// The restart policy (the same as the Neovim plugin's): the waits it gives, when it gives up,
// and a healthy run starting the count afresh; then the daemon process following it, against a
// daemon that cannot start and against the real daemon, on a clock the test moves; and what the
// user is offered once it is given up.

import { afterEach, test } from 'node:test';
import assert from 'node:assert/strict';
import { chmodSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import * as vscode from 'vscode';
import { __stub } from './stubs/vscode';
import type { Clock, Daemon } from '../src/host/daemon';
import { tellFailures } from '../src/host/extension';
import { RestartPolicy, type RestartDecision } from '../src/host/restart';
import type { DaemonStatus } from '../src/model/messages';
import { Scratch, until } from './harness';

const cleanups: (() => Promise<void> | void)[] = [];

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  __stub.reset();
});

/** Time that moves when the test says, and timers that fire when the test says. */
class TestClock implements Clock {
  time = 0;
  timers: { fn: () => void; ms: number }[] = [];
  now(): number {
    return this.time;
  }
  setTimeout(fn: () => void, ms: number): unknown {
    const timer = { fn, ms };
    this.timers.push(timer);
    return timer;
  }
  clearTimeout(handle: unknown): void {
    this.timers = this.timers.filter((t) => t !== handle);
  }
  /** Fires the one waiting timer; its wait. */
  fire(): number {
    assert.equal(this.timers.length, 1, 'one restart waiting');
    const [timer] = this.timers.splice(0);
    timer.fn();
    return timer.ms;
  }
}

test('the policy: 0.5 s doubling to 8 s, at most five restarts within a minute, afresh after a healthy minute', () => {
  const policy = new RestartPolicy();
  const at = (seconds: number, ranSeconds: number): RestartDecision => policy.crashed(seconds * 1000, ranSeconds * 1000);
  // Crashes 20 s apart: the oldest leave the minute, the wait goes on doubling to its cap.
  assert.deepEqual(
    [at(0, 1), at(20, 19), at(40, 19), at(60, 19), at(80, 19), at(100, 19)],
    [500, 1000, 2000, 4000, 8000, 8000].map((delayMs) => ({ restart: true, delayMs })),
  );
  // A healthy minute: the first wait again.
  assert.deepEqual(at(200, 60), { restart: true, delayMs: 500 });
  // Six crashes within a minute (that one the first): given up; the next start has the whole
  // allowance again.
  assert.deepEqual(
    [at(201, 0), at(202, 0), at(203, 0), at(204, 0), at(205, 0)],
    [
      { restart: true, delayMs: 1000 },
      { restart: true, delayMs: 2000 },
      { restart: true, delayMs: 4000 },
      { restart: true, delayMs: 8000 },
      { restart: false, crashes: 6 },
    ],
  );
  assert.deepEqual(at(206, 0), { restart: true, delayMs: 500 });
});

test('a daemon that exits at once: restarted after 0.5, 1, 2, 4 and 8 s, then given up at the sixth crash and told; a retry starts it again', { timeout: 120_000 }, async () => {
  const scratch = new Scratch();
  cleanups.push(() => scratch.dispose());
  const script = join(scratch.dir, 'crashing-sidechat');
  writeFileSync(script, '#!/bin/sh\nexit 3\n');
  chmodSync(script, 0o755);
  const clock = new TestClock();
  const daemon = scratch.daemon({}, script);
  const lines: string[] = [];
  daemon.configure({ clock, restart: {}, log: (line) => lines.push(line) });
  cleanups.push(() => daemon.stop());
  const seen: DaemonStatus[] = [];
  daemon.onStatus((status) => seen.push(status));

  // It fails as its input closes or as it exits, whichever the handshake meets first.
  await assert.rejects(daemon.start());
  const waits: number[] = [];
  for (let crash = 1; crash <= 5; crash++) {
    await until(() => clock.timers.length === 1, `the restart after crash ${crash}`);
    waits.push(clock.fire());
  }
  await until(() => daemon.status.state === 'failed', 'giving up');
  assert.deepEqual(waits, [500, 1000, 2000, 4000, 8000]);
  assert.deepEqual(clock.timers, []);
  const told = 'sidechat stopped unexpectedly (exit code 3), 6 times within 60 s; it is not restarted until you retry.';
  assert.deepEqual(seen, [
    { state: 'starting' },
    { state: 'crashed', message: 'sidechat stopped unexpectedly (exit code 3); restarting in 0.5 s.', restartInMs: 500 },
    { state: 'crashed', message: 'sidechat stopped unexpectedly (exit code 3); restarting in 1 s.', restartInMs: 1000 },
    { state: 'crashed', message: 'sidechat stopped unexpectedly (exit code 3); restarting in 2 s.', restartInMs: 2000 },
    { state: 'crashed', message: 'sidechat stopped unexpectedly (exit code 3); restarting in 4 s.', restartInMs: 4000 },
    { state: 'crashed', message: 'sidechat stopped unexpectedly (exit code 3); restarting in 8 s.', restartInMs: 8000 },
    { state: 'failed', message: told, tried: [], crashes: 6 },
  ]);
  assert.equal(lines.filter((line) => line.startsWith('starting ')).length, 6);

  // A request after giving up starts it again, with the whole allowance.
  await assert.rejects(daemon.request('session/list', {}));
  await until(() => clock.timers.length === 1, 'the restart after the retry');
  assert.equal(clock.fire(), 500);
});

test('the real daemon killed: the wait doubles per crash, and a minute of healthy running brings it back to 0.5 s', { timeout: 120_000 }, async () => {
  const scratch = new Scratch();
  cleanups.push(() => scratch.dispose());
  const clock = new TestClock();
  const daemon = scratch.daemon();
  daemon.configure({ clock, restart: {} });
  cleanups.push(() => daemon.stop());

  const crashAfter = async (ranMs: number): Promise<number> => {
    const pid = daemon.pid;
    clock.time += ranMs;
    process.kill(pid ?? 0, 'SIGKILL');
    await until(() => clock.timers.length === 1, 'the crash');
    const wait = clock.fire();
    await daemon.start();
    assert.notEqual(daemon.pid, pid);
    return wait;
  };
  await daemon.start();
  const waits = [await crashAfter(1_000), await crashAfter(1_000), await crashAfter(60_000), await crashAfter(59_999)];
  assert.deepEqual(waits, [500, 1000, 500, 1000]);
  assert.equal((await daemon.request('session/list', {})).sessions.length, 0);
});

/** A daemon whose binary exits at once, on `clock`, with its lines in `lines`. */
function crashingDaemon(clock: TestClock, lines: string[]): Daemon {
  const scratch = new Scratch();
  cleanups.push(() => scratch.dispose());
  const script = join(scratch.dir, 'crashing-sidechat');
  writeFileSync(script, '#!/bin/sh\nexit 3\n');
  chmodSync(script, 0o755);
  const daemon = scratch.daemon({}, script);
  daemon.configure({ clock, restart: {}, log: (line) => lines.push(line) });
  cleanups.push(() => daemon.stop());
  return daemon;
}

/** Starts `daemon` and lets it crash until it is given up and the user told (the answer may restart it at once). */
async function crashUntilGivenUp(daemon: Daemon, clock: TestClock): Promise<void> {
  await assert.rejects(daemon.start());
  for (let crash = 1; crash <= 5; crash++) {
    await until(() => clock.timers.length === 1, `the restart after crash ${crash}`);
    clock.fire();
  }
  await until(() => __stub.errors.length === 1, 'giving up to be told');
}

test('given up after crashes, the message offers a restart and the log, not the setting; Restart starts it again with the whole allowance', { timeout: 120_000 }, async () => {
  const clock = new TestClock();
  const lines: string[] = [];
  const daemon = crashingDaemon(clock, lines);
  const output = vscode.window.createOutputChannel('sidechat');
  cleanups.push(tellFailures(daemon, output as never));
  __stub.errorChoice = 'Restart';

  await crashUntilGivenUp(daemon, clock);
  assert.deepEqual(__stub.errors, ['sidechat stopped unexpectedly (exit code 3), 6 times within 60 s; it is not restarted until you retry.']);
  assert.deepEqual(__stub.errorItems, [['Restart', 'Show log']]);
  // Restart: a seventh start, which crashes and waits the first delay again.
  await until(() => clock.timers.length === 1, 'the restart the user asked for to crash');
  assert.equal(lines.filter((line) => line.startsWith('starting ')).length, 7);
  assert.equal(clock.fire(), 500);
  assert.deepEqual(__stub.executed, []);
  assert.equal(__stub.outputShown, 0);
});

test('given up after crashes, Show log shows the output and starts nothing', { timeout: 120_000 }, async () => {
  const clock = new TestClock();
  const lines: string[] = [];
  const daemon = crashingDaemon(clock, lines);
  const output = vscode.window.createOutputChannel('sidechat');
  cleanups.push(tellFailures(daemon, output as never));
  __stub.errorChoice = 'Show log';

  await crashUntilGivenUp(daemon, clock);
  await until(() => __stub.outputShown === 1, 'the log to be shown');
  assert.deepEqual(__stub.errorItems, [['Restart', 'Show log']]);
  assert.equal(lines.filter((line) => line.startsWith('starting ')).length, 6);
  assert.deepEqual(clock.timers, []);
  assert.equal(daemon.status.state, 'failed');
});
