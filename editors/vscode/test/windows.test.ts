// Two windows sharing one listening daemon (`sidechat serve --listen 127.0.0.1:0 --no-stdio`):
// each window's client layer attaches through serve.json as `sidechat.connection: "attach"`
// does, with its own controller and page in headless Chromium. Both see the same stream, an
// approval answered in one leaves the other, and a window whose attachment drops attaches again
// and fetches what it missed from its last seq.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import type { Page } from 'playwright-core';

import type { Clock, Daemon } from '../src/host/daemon';
import type { Requests } from '../src/model/wire';
import { openChat, pageRig, Scratch, screenshot, STEP, until, waitIn } from './harness';

const rig = pageRig();

async function send(page: Page, text: string): Promise<void> {
  await page.fill('textarea.input', text);
  await page.press('textarea.input', 'Enter');
}

/** Every entry the page shows, as `role: text`, for comparing two windows whole. */
function entries(page: Page): Promise<string[]> {
  return page.$$eval('.transcript .entry', (nodes) => nodes.map((n) => `${(n as HTMLElement).dataset.role}: ${n.textContent?.trim()}`));
}

function untilIdle(page: Page): Promise<unknown> {
  return waitIn(page, () => document.querySelector('#app')?.getAttribute('data-state') === 'idle');
}

/** A clock whose timers run when the test says: the re-attachment waits for the test. */
function heldClock(): Clock & { pending: (() => void)[] } {
  const pending: (() => void)[] = [];
  return {
    pending,
    now: () => Date.now(),
    setTimeout: (fn) => pending.push(fn),
    clearTimeout: () => undefined,
  };
}

/** Records the requests `daemon` sends, method and params. */
function recordRequests(daemon: Daemon): { method: string; params: unknown }[] {
  const sent: { method: string; params: unknown }[] = [];
  const request = daemon.request.bind(daemon);
  daemon.request = (<M extends keyof Requests>(method: M, params: Requests[M]['params']) => {
    sent.push({ method, params });
    return request(method, params);
  }) as Daemon['request'];
  return sent;
}

test('two windows on one listening daemon: the same stream in both, an approval answered in one leaves the other, a dropped window attaches again and fetches what it missed', { timeout: 180_000 }, async () => {
  const scratch = new Scratch();
  // Commands ask here as they do without the sandbox; the demo model writes files when asked.
  mkdirSync(join(scratch.dir, 'config', 'sidechat'), { recursive: true });
  writeFileSync(join(scratch.dir, 'config', 'sidechat', 'config.toml'), '[sandbox]\nenabled = false\n');
  const env = { SIDECHAT_DEMO_DELAY_MS: '1', SIDECHAT_ACCOUNT: 'demo' };
  const listening = await scratch.listening(env);
  const clock = heldClock();
  const one = scratch.daemon(env, undefined, { connection: 'attach', clock });
  const two = scratch.daemon(env, undefined, { connection: 'attach' });
  const chats: Awaited<ReturnType<typeof openChat>>[] = [];
  try {
    // The last seq of each session the first window was sent: it fetches from there after the drop.
    const lastSeq = new Map<string, number>();
    one.onEvent((params) => lastSeq.set(params.sessionId, Math.max(lastSeq.get(params.sessionId) ?? 0, params.seq)));
    await one.start();
    assert.equal(one.status.state === 'ready' && one.status.attached, listening.file.url);
    assert.equal(one.pid, undefined, 'no daemon of its own');
    const first = await openChat(rig.browser, rig.url, one, scratch.workspace);
    chats.push(first);
    // The header says the daemon is shared, and where it is.
    await first.page.waitForSelector('.daemon-status:text-is("demo model · shared")', STEP);
    assert.equal(await first.page.getAttribute('.daemon-status', 'title'), `Attached to the daemon at ${listening.file.url}, shared with other windows`);
    await send(first.page, 'hello');
    await first.page.waitForSelector('.entry.assistant[data-streaming="false"]', STEP);
    await untilIdle(first.page);

    // The second window opens the same chat and follows it from there.
    await two.start();
    const second = await openChat(rig.browser, rig.url, two, scratch.workspace);
    chats.push(second);
    await second.page.waitForSelector('.entry.assistant[data-streaming="false"]', STEP);
    assert.equal(second.controller.activeSessionId, first.controller.activeSessionId);

    // A write asks in both windows; the second answers, and the first's card goes.
    await send(first.page, 'create notes.md with hello');
    await first.page.waitForSelector('.approval', STEP);
    await second.page.waitForSelector('.approval', STEP);
    assert.equal(await second.page.getAttribute('.approval', 'data-approval-id'), await first.page.getAttribute('.approval', 'data-approval-id'));
    await screenshot(second.page, 'windows-approval-in-both');
    await second.page.click('.approval button.allow');
    await first.page.waitForSelector('.approval', { state: 'detached', ...STEP });
    await first.page.waitForSelector('.entry.tool[data-status="done"]', STEP);
    await untilIdle(first.page);
    await untilIdle(second.page);
    assert.equal(readFileSync(join(scratch.workspace, 'notes.md'), 'utf8'), 'hello\n');
    // The same stream, entry for entry.
    await until(async () => JSON.stringify(await entries(first.page)) === JSON.stringify(await entries(second.page)), 'the same entries in both windows');
    assert.deepEqual(await entries(first.page), await entries(second.page));

    // The first window's connection drops; while it is away the second sends and is answered.
    const sent = recordRequests(one);
    const seenBeforeDrop = lastSeq.get(first.controller.activeSessionId ?? '');
    one.dropAttachment();
    await until(() => clock.pending.length === 1, 'the re-attachment waiting');
    await first.page.waitForSelector('.daemon-status[data-state="starting"]', STEP);
    await send(second.page, 'and while it was away?');
    await waitIn(second.page, () => document.querySelectorAll('.entry.assistant[data-streaming="false"]').length === 3);
    await untilIdle(second.page);

    // It attaches again, asks for the chat's events, and fetches from its last seq, not anew.
    clock.pending.shift()?.();
    await until(() => one.status.state === 'ready', 'attached again');
    await until(async () => JSON.stringify(await entries(first.page)) === JSON.stringify(await entries(second.page)), 'the missed entries fetched');
    assert.deepEqual(await entries(first.page), await entries(second.page));
    const sessionId = first.controller.activeSessionId ?? '';
    assert.deepEqual(
      sent.filter((r) => r.method === 'session/subscribe' || r.method === 'session/transcript').slice(0, 2),
      [
        { method: 'session/subscribe', params: { sessionId } },
        { method: 'session/transcript', params: { sessionId, afterSeq: seenBeforeDrop, limit: 500 } },
      ],
    );
    assert.equal(sent.some((r) => r.method === 'session/transcript' && 'beforeSeq' in (r.params as object)), false, 'no reload from the newest page');
    // And it is live again: the next reply streams into both.
    await send(first.page, 'back again');
    await waitIn(first.page, () => document.querySelectorAll('.entry.assistant[data-streaming="false"]').length === 4);
    await waitIn(second.page, () => document.querySelectorAll('.entry.assistant[data-streaming="false"]').length === 4);
    for (const chat of chats) assert.deepEqual(chat.pageErrors, []);
  } catch (error) {
    for (const [i, chat] of chats.entries()) await screenshot(chat.page, `failure-windows-${i + 1}`).catch(() => undefined);
    throw error;
  } finally {
    for (const chat of chats) {
      chat.controller.dispose();
      await chat.page.close();
    }
    await one.dispose();
    await two.dispose();
    await listening.stop();
    scratch.dispose();
  }
});
