// The chat page in a browser, end to end: `sidechat web` starts the real daemon (demo model)
// serving the page, and headless Chromium opens the address it prints. The page reaches the
// daemon over its WebSocket at its own origin: send, stream, approve a tool call, stop, and a
// reload that rebuilds the view from the daemon. Screenshots go to artifacts/web-*.png.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';

import type { Browser, Page } from 'playwright-core';

import { launchChromium, Scratch, screenshot, sidechatBinary, until } from './harness';

/** A guard against a hung step, not a performance assertion. */
const STEP = { timeout: 30_000 };

let browser: Browser;

before(async () => {
  browser = await launchChromium();
});

after(async () => {
  await browser?.close();
});

async function send(page: Page, text: string): Promise<void> {
  await page.fill('textarea.input', text);
  await page.press('textarea.input', 'Enter');
}

async function waitIn(page: Page, predicate: () => boolean): Promise<void> {
  await until(() => page.evaluate(predicate), `the page: ${predicate.toString()}`);
}

/** The daemon `sidechat web` started, from the serve file it wrote. */
function startedDaemon(runtime: string): { pid: number; url: string; token: string } {
  return JSON.parse(readFileSync(join(runtime, 'sidechat', 'serve.json'), 'utf8'));
}

test('the page served by the daemon: send, stream, approve a write, stop, reload', { timeout: 120_000 }, async () => {
  const scratch = new Scratch();
  const runtime = join(scratch.dir, 'run');
  const env = scratch.env({ XDG_RUNTIME_DIR: runtime, SIDECHAT_DEMO_DELAY_MS: '25' });
  let pid: number | undefined;
  const page = await browser.newPage({ viewport: { width: 900, height: 900 } });
  const pageErrors: string[] = [];
  page.on('pageerror', (error) => pageErrors.push(String(error)));
  // Playwright would dismiss a dialog; the page asks none here.
  page.on('dialog', (dialog) => {
    pageErrors.push(`dialog: ${dialog.message()}`);
    void dialog.dismiss();
  });
  try {
    const { stdout } = await promisify(execFile)(
      sidechatBinary(),
      ['web', '--db', join(scratch.dir, 'sidechat.db'), '--workspace', scratch.workspace],
      { env, timeout: 60_000 },
    );
    const daemon = startedDaemon(runtime);
    pid = daemon.pid;
    const origin = daemon.url.replace('ws://', 'http://').replace(/\/$/, '');
    const url = stdout.trim();
    assert.equal(url, `${origin}/?token=${daemon.token}&workspace=${scratch.workspace}`);

    // Every request of the page goes to the daemon's own origin.
    const requested: string[] = [];
    page.on('request', (request) => requested.push(new URL(request.url()).origin));
    await page.goto(url);
    await page.waitForSelector('.daemon-status[data-state="ready"]', STEP);
    assert.equal(await page.textContent('.daemon-status'), 'demo model');

    // 1. Send: the reply streams, then is whole.
    await send(page, 'hello there');
    await page.waitForSelector('.entry.assistant[data-streaming="true"]', STEP);
    await screenshot(page, 'web-01-streaming');
    await page.waitForSelector('.entry.assistant[data-streaming="false"]', STEP);
    assert.match((await page.textContent('.entry.assistant >> nth=-1')) ?? '', /\[demo model, offline\] You said: "hello there"/);
    assert.equal(await page.textContent('.entry.user >> nth=0'), 'hello there');

    // 2. A write waits for approval in the workspace the address named; Allow writes it.
    await send(page, 'create notes.md with hello');
    await page.waitForSelector('.approval', STEP);
    assert.equal(await page.textContent('.approval .title'), 'Allow write_file?');
    await screenshot(page, 'web-02-approval');
    await page.click('.approval button.allow');
    await page.waitForSelector('.approval', { state: 'detached', ...STEP });
    await page.waitForSelector('.entry.tool[data-status="done"]', STEP);
    assert.equal(readFileSync(join(scratch.workspace, 'notes.md'), 'utf8'), 'hello\n');
    await waitIn(page, () => document.querySelector('#app')?.getAttribute('data-state') === 'idle');

    // 3. Stop mid-stream: the partial reply is kept and marked stopped.
    await send(page, 'tell me a story');
    await waitIn(page, () => {
      const last = [...document.querySelectorAll('.entry.assistant')].pop();
      return last?.getAttribute('data-streaming') === 'true' && (last.textContent ?? '').length > 60;
    });
    await page.click('button.stop');
    await page.waitForSelector('.entry.assistant[data-status="stopped"]', STEP);
    await waitIn(page, () => (document.querySelector('button.stop') as HTMLButtonElement).disabled);
    await screenshot(page, 'web-03-stopped');

    // 4. A reload rebuilds the same chat from the daemon.
    const before = await page.locator('.entry').count();
    await page.reload();
    await page.waitForSelector('.entry.assistant[data-status="stopped"]', STEP);
    await waitIn(page, () => document.querySelector('#app')?.getAttribute('data-state') === 'idle');
    assert.equal(await page.locator('.entry').count(), before);

    assert.deepEqual([...new Set(requested)], [origin]);
    assert.deepEqual(pageErrors, []);
  } catch (error) {
    await screenshot(page, 'web-failure').catch(() => undefined);
    console.error('page errors:', pageErrors);
    throw error;
  } finally {
    await page.close();
    if (pid !== undefined) {
      process.kill(pid, 'SIGTERM');
      const serveFile = join(runtime, 'sidechat', 'serve.json');
      await until(() => !existsSync(serveFile), 'the daemon to end').catch(() => undefined);
    }
    scratch.dispose();
  }
});
