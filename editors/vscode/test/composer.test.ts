// The composer against the real daemon: `@` and `/` completion (the host's answers, then the
// page in headless Chromium: keyboard, mouse, quoting, coalesced questions, stale answers
// dropped), images pasted and dropped (limits, removal, what the daemon stored), and the
// transcript's thumbnails and attachment chips. The axe scan runs with the list and chips shown.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import type { Page } from 'playwright-core';

import { ChatController } from '../src/host/controller';
import type { HostToPage, PageToHost } from '../src/model/messages';
import type { Block } from '../src/model/wire';
import { openChat, pageRig, recordingUi, Scratch, screenshot, STEP, until } from './harness';
import type { Daemon } from '../src/host/daemon';

/** The completion list's options once it shows the answer for what was typed last. */
const ANSWERED = '.completion[aria-busy="false"]:not([hidden]) [role="option"]';

/** A 4×4 PNG and a 1×1 GIF. */
const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAQAAAAECAYAAACp8Z5+AAAAJ0lEQVQIW2O8e/fufwYGBgZBQUEQxcCIIfDu3Tuwivfv30NUoAsAALHpFMMLqZlPAAAAAElFTkSuQmCC';
const GIF = 'R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7';

function imageBlock(base64: string, mediaType: string, width: number, height: number): Block {
  const bytes = Buffer.from(base64, 'base64');
  return { type: 'image', imageId: createHash('sha256').update(bytes).digest('hex'), mediaType, width, height, bytes: bytes.length };
}

const rig = pageRig();

/** A workspace with a few files, one with a space in its path, and a project command. */
function fillWorkspace(scratch: Scratch): void {
  mkdirSync(join(scratch.workspace, 'src'));
  mkdirSync(join(scratch.workspace, 'notes'));
  mkdirSync(join(scratch.workspace, '.sidechat', 'commands'), { recursive: true });
  writeFileSync(join(scratch.workspace, 'src', 'lib.rs'), 'fn one() {}\nfn two() {}\nfn three() {}\n');
  writeFileSync(join(scratch.workspace, 'src', 'main.rs'), 'fn main() {}\n');
  writeFileSync(join(scratch.workspace, 'notes', 'a b.md'), 'hello\n');
  writeFileSync(join(scratch.workspace, 'shot.png'), Buffer.from(PNG, 'base64'));
  writeFileSync(join(scratch.workspace, '.sidechat', 'commands', 'review.md'), '---\ndescription: Review a file with care\nargument-hint: <path>\n---\nReview $1.\n');
}

type Chat = Awaited<ReturnType<typeof openChat>>;

/** Runs `body` against a chat page on a daemon of its own, then closes and removes everything. */
async function withChat(name: string, env: (scratch: Scratch) => Record<string, string>, body: (t: { scratch: Scratch; daemon: Daemon; chat: Chat; page: Page }) => Promise<void>): Promise<void> {
  const scratch = new Scratch();
  fillWorkspace(scratch);
  const daemon = scratch.daemon(env(scratch));
  let chat: Chat | undefined;
  try {
    await daemon.start();
    chat = await openChat(rig.browser, rig.url, daemon, scratch.workspace);
    await body({ scratch, daemon, chat, page: chat.page });
    assert.deepEqual(chat.pageErrors, []);
  } catch (error) {
    if (chat) {
      await screenshot(chat.page, `failure-${name}`).catch(() => undefined);
      console.error('page errors:', chat.pageErrors);
    }
    throw error;
  } finally {
    chat?.controller.dispose();
    await chat?.page.close();
    await daemon.dispose();
    scratch.dispose();
  }
}

function replayOf(script: unknown): (scratch: Scratch) => Record<string, string> {
  return (scratch) => {
    const path = join(scratch.dir, 'script.json');
    writeFileSync(path, JSON.stringify(script));
    return { SIDECHAT_REPLAY_SCRIPT: path, SIDECHAT_ACCOUNT: 'replay' };
  };
}

async function waitIn(page: Page, predicate: () => boolean): Promise<void> {
  await until(() => page.evaluate(predicate), `the page: ${predicate.toString()}`);
}

function untilIdle(page: Page): Promise<void> {
  return waitIn(page, () => document.querySelector('#app')?.getAttribute('data-state') === 'idle');
}

/** The options of the completion list, as shown. */
function options(page: Page): Promise<string[]> {
  return page.locator('.completion [role="option"]').evaluateAll((nodes) => nodes.map((n) => n.textContent ?? ''));
}

/** Which option the text field names as the one in view, by its text. */
function activeOption(page: Page): Promise<string | undefined> {
  return page.evaluate(() => {
    const id = document.querySelector('textarea.input')?.getAttribute('aria-activedescendant');
    const option = id ? document.getElementById(id) : null;
    return option?.getAttribute('aria-selected') === 'true' ? (option.textContent ?? undefined) : undefined;
  });
}

/** The completion questions the page asked the host. */
function asked(chat: Chat): string[] {
  return chat.calls.toHost.flatMap((m) => (m.type === 'complete' ? [`${m.kind}:${m.query}`] : []));
}

/** axe-core's violations with a serious or critical impact, as `rule: targets`. */
async function seriousViolations(page: Page): Promise<string[]> {
  await page.evaluate(readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8'));
  const violations = await page.evaluate(async () => {
    const axe = (window as unknown as { axe: { run: (context: Document, options: unknown) => Promise<{ violations: { id: string; impact: string | null; nodes: { target: unknown[] }[] }[] }> } }).axe;
    const result = await axe.run(document, { resultTypes: ['violations'] });
    return result.violations.map((v) => ({ id: v.id, impact: v.impact, targets: v.nodes.map((n) => JSON.stringify(n.target)) }));
  });
  return violations.filter((v) => v.impact === 'serious' || v.impact === 'critical').map((v) => `${v.id}: ${v.targets.join(' ')}`);
}

/** Pastes files into the composer as a clipboard paste event carries them. */
async function paste(page: Page, files: { name: string; type: string; base64?: string; size?: number }[]): Promise<void> {
  await page.evaluate((list) => {
    const data = new DataTransfer();
    for (const f of list) {
      const bytes = f.base64 !== undefined ? Uint8Array.from(atob(f.base64), (c) => c.charCodeAt(0)) : new Uint8Array(f.size ?? 0);
      data.items.add(new File([bytes], f.name, { type: f.type }));
    }
    document.querySelector('textarea.input')?.dispatchEvent(new ClipboardEvent('paste', { clipboardData: data, bubbles: true, cancelable: true }));
  }, files);
}

/** Drops files on the composer as a drag from the desktop does. */
async function drop(page: Page, files: { name: string; type: string; base64: string }[]): Promise<void> {
  await page.evaluate((list) => {
    const data = new DataTransfer();
    for (const f of list) data.items.add(new File([Uint8Array.from(atob(f.base64), (c) => c.charCodeAt(0))], f.name, { type: f.type }));
    const target = document.querySelector('textarea.input');
    target?.dispatchEvent(new DragEvent('dragover', { dataTransfer: data, bubbles: true, cancelable: true }));
    target?.dispatchEvent(new DragEvent('drop', { dataTransfer: data, bubbles: true, cancelable: true }));
  }, files);
}

test('the host answers completions from the daemon: files by workspace/files, commands by session/commands with custom ones, a session started for them', { timeout: 120_000 }, async () => {
  const scratch = new Scratch();
  fillWorkspace(scratch);
  const daemon = scratch.daemon();
  const posted: HostToPage[] = [];
  const ui = recordingUi(posted);
  const controller = new ChatController(daemon, ui, { workspaceRoot: scratch.workspace });
  const answer = async (message: Extract<PageToHost, { type: 'complete' }>) => {
    await controller.handle(message);
    const found = posted.find((m) => m.type === 'completions' && m.requestId === message.requestId);
    assert.ok(found?.type === 'completions');
    return found;
  };
  try {
    await daemon.start();
    await controller.handle({ type: 'ready' });
    assert.equal(controller.activeSessionId, undefined, 'no chat yet');
    assert.deepEqual(await answer({ type: 'complete', requestId: 1, kind: 'command', query: 'RE' }), {
      type: 'completions',
      requestId: 1,
      kind: 'command',
      query: 'RE',
      items: [{ name: 'review', description: 'Review a file with care', argumentHint: '<path>' }],
    });
    assert.ok(controller.activeSessionId, 'a chat was started to ask about');
    assert.deepEqual((await answer({ type: 'complete', requestId: 2, kind: 'command', query: 'co' })).items.map((i) => i.name), ['cost', 'compact']);
    assert.deepEqual(await answer({ type: 'complete', requestId: 3, kind: 'file', query: 'lib' }), { type: 'completions', requestId: 3, kind: 'file', query: 'lib', items: [{ name: 'src/lib.rs' }] });
    assert.deepEqual((await answer({ type: 'complete', requestId: 4, kind: 'file', query: 'a b' })).items, [{ name: 'notes/a b.md' }]);
  } finally {
    controller.dispose();
    await daemon.dispose();
    scratch.dispose();
  }
});

test('@ completion in the page: the list follows the typing, keyboard and mouse pick, a path with spaces is quoted, questions are coalesced and stale answers dropped; sent mentions show as chips with lines and size', { timeout: 120_000 }, () =>
  withChat('at-completion', () => ({ SIDECHAT_DEMO_DELAY_MS: '0' }), async ({ chat, page, daemon }) => {
    await page.focus('textarea.input');
    await page.keyboard.type('compare @');
    await page.waitForSelector(ANSWERED, STEP);
    assert.equal(await page.getAttribute('.completion', 'role'), 'listbox');
    assert.equal(await page.getAttribute('.completion', 'aria-label'), 'Workspace files');
    assert.equal(await page.getAttribute('textarea.input', 'aria-controls'), await page.getAttribute('.completion', 'id'));
    // Shortest paths first for an empty query.
    assert.deepEqual((await options(page)).slice(0, 2), ['shot.png', 'src/lib.rs']);
    await page.keyboard.type('rs');
    await waitIn(page, () => [...document.querySelectorAll('.completion [role="option"]')].map((o) => o.textContent).join() === 'src/lib.rs,src/main.rs');
    assert.equal(await activeOption(page), 'src/lib.rs');
    await page.keyboard.press('ArrowDown');
    assert.equal(await activeOption(page), 'src/main.rs');
    await page.keyboard.press('ArrowUp');
    assert.equal(await activeOption(page), 'src/lib.rs');
    await page.keyboard.press('Tab');
    assert.equal(await page.inputValue('textarea.input'), 'compare @src/lib.rs ');
    assert.equal(await page.isHidden('.completion'), true);
    assert.equal(await page.getAttribute('textarea.input', 'aria-activedescendant'), null);

    // A path with spaces, picked by Enter, is written quoted; Escape closes and leaves the text.
    await page.keyboard.type('and @a b');
    // The space ended the unquoted mention: no list.
    assert.equal(await page.isHidden('.completion'), true);
    await page.fill('textarea.input', 'compare @src/lib.rs:2 and @"a b');
    await page.press('textarea.input', 'End');
    await page.waitForSelector(ANSWERED, STEP);
    await waitIn(page, () => document.querySelector('.completion [role="option"]')?.textContent === 'notes/a b.md');
    await screenshot(page, 'composer-at-completion');
    assert.deepEqual(await seriousViolations(page), [], 'axe with the completion list open');
    await page.keyboard.press('Enter');
    assert.equal(await page.inputValue('textarea.input'), 'compare @src/lib.rs:2 and @"notes/a b.md" ');
    await page.keyboard.type('@mai');
    await page.waitForSelector(ANSWERED, STEP);
    await page.keyboard.press('Escape');
    assert.equal(await page.isHidden('.completion'), true);
    assert.equal(await page.inputValue('textarea.input'), 'compare @src/lib.rs:2 and @"notes/a b.md" @mai');
    // The mouse picks too. (The mention Escape closed stays closed until a new one is begun.)
    for (let i = 0; i < 4; i++) await page.keyboard.press('Backspace');
    await page.keyboard.type('@main');
    await page.waitForSelector(ANSWERED, STEP);
    await page.click('.completion [role="option"]:has-text("src/main.rs")');
    assert.equal(await page.inputValue('textarea.input'), 'compare @src/lib.rs:2 and @"notes/a b.md" @src/main.rs ');
    // Escape in the list closed it without stopping or clearing anything, and the page said nothing.
    assert.deepEqual(chat.calls.toHost.filter((m) => m.type === 'stop'), []);

    // Typed faster than the host answers: one question at a time, the newest asked next, the
    // answer to an older query dropped.
    const before = asked(chat).length;
    await page.evaluate(() => {
      const input = document.querySelector('textarea.input') as HTMLTextAreaElement;
      for (const value of ['@m', '@ma', '@mai', '@lib']) {
        input.value = value;
        input.setSelectionRange(value.length, value.length);
        input.dispatchEvent(new Event('input', { bubbles: true }));
      }
    });
    await waitIn(page, () => [...document.querySelectorAll('.completion [role="option"]')].map((o) => o.textContent).join() === 'src/lib.rs');
    assert.deepEqual(asked(chat).slice(before), ['file:m', 'file:lib']);

    // Sent: the mentions are attached, and drawn as chips with their lines and size.
    await page.fill('textarea.input', 'compare @src/lib.rs:2 and @"notes/a b.md"');
    await page.press('textarea.input', 'Enter');
    await page.waitForSelector('.entry.user .chips .chip', STEP);
    await untilIdle(page);
    assert.deepEqual(
      await page.locator('.entry.user .chip').evaluateAll((chips) => chips.map((c) => [...c.children].map((p) => p.textContent))),
      [
        ['src/lib.rs', 'line 2', '38 B'],
        ['notes/a b.md', '6 B'],
      ],
    );
    const sessionId = chat.controller.activeSessionId ?? '';
    const { entries } = await daemon.request('session/transcript', { sessionId });
    const user = entries.find((e) => e.role === 'user');
    assert.deepEqual(
      user?.blocks.map((b) => (b.type === 'attachment' ? { name: b.name, range: b.range ?? null, size: b.size } : b)),
      [
        { type: 'text', text: 'compare @src/lib.rs:2 and @"notes/a b.md"' },
        { name: 'src/lib.rs', range: { start: 2, end: 2 }, size: 38 },
        { name: 'notes/a b.md', range: null, size: 6 },
      ],
    );
    await screenshot(page, 'composer-mention-chips');
  }),
);

test('/ completion in the page: built-in and custom commands with hints and descriptions, picked by keyboard, a command typed whole left to send', { timeout: 120_000 }, () =>
  withChat('slash-completion', () => ({ SIDECHAT_DEMO_DELAY_MS: '0' }), async ({ page }) => {
    await page.focus('textarea.input');
    await page.keyboard.type('/');
    await page.waitForSelector(ANSWERED, STEP);
    assert.equal(await page.getAttribute('.completion', 'aria-label'), 'Commands');
    const all = await options(page);
    assert.deepEqual(all.slice(0, 3), ['/costwhat this session has cost so far', '/model[--force] <id>switch the model (from the next request on)', '/effort[level]how hard the model thinks: minimal, low, medium, high or default']);
    assert.equal(all[all.length - 1], '/review<path>Review a file with care');
    await page.keyboard.type('rev');
    await page.waitForSelector(ANSWERED, STEP);
    assert.equal(await page.locator('.completion [role="option"]').count(), 1);
    assert.deepEqual(
      await page.$$eval('.completion [role="option"] > span', (spans) => spans.map((s) => `${s.className}=${s.textContent}`)),
      ['name=/review', 'hint=<path>', 'help=Review a file with care'],
    );
    await page.keyboard.press('Enter');
    // A command that takes an argument is followed by a space, ready for it.
    assert.equal(await page.inputValue('textarea.input'), '/review ');
    assert.equal(await page.isHidden('.completion'), true);
    // A `/` past the first word completes nothing.
    await page.keyboard.type('src/lib.rs');
    assert.equal(await page.isHidden('.completion'), true);
    // Typed whole and alone in the list, a command is not offered again: Enter sends it.
    await page.fill('textarea.input', '');
    await page.keyboard.type('/cost');
    // Once the answer to what was typed is in (the list is busy until then), no list is shown.
    await waitIn(page, () => document.querySelector('.completion')?.getAttribute('aria-busy') === 'false');
    assert.equal(await page.isHidden('.completion'), true);
    await page.keyboard.press('Enter');
    await page.waitForSelector('.entry.note', STEP);
    assert.match((await page.textContent('.entry.note')) ?? '', /^Cost of this session/);
  }),
);

test('images: pasted and dropped as chips, refused with a clear message past the limits, removable, sent with chat/send and stored, then drawn as thumbnails read with session/image', { timeout: 120_000 }, () =>
  withChat('images', () => ({ SIDECHAT_DEMO_DELAY_MS: '0' }), async ({ chat, page, daemon }) => {
    await page.fill('textarea.input', 'what is in these?');
    await paste(page, [{ name: 'shot.png', type: 'image/png', base64: PNG }]);
    await page.waitForSelector('.composer-images .image-chip img', STEP);
    await drop(page, [
      { name: 'dot.gif', type: 'image/gif', base64: GIF },
      { name: 'extra.png', type: 'image/png', base64: PNG },
    ]);
    await waitIn(page, () => document.querySelectorAll('.composer-images .image-chip img').length === 3);
    // The text typed is untouched by a paste of images.
    assert.equal(await page.inputValue('textarea.input'), 'what is in these?');
    // Refused at once, each with its reason: a type the daemon does not take, a file too big.
    await paste(page, [
      { name: 'scan.bmp', type: 'image/bmp', base64: 'Qk0=' },
      { name: 'huge.png', type: 'image/png', size: 5 * 1024 * 1024 + 1 },
    ]);
    await waitIn(page, () => document.querySelectorAll('.errors .error').length === 2);
    assert.deepEqual(await page.locator('.errors .error .text').allTextContents(), [
      'scan.bmp is not a PNG, JPEG, GIF or WebP image (image/bmp), so it cannot be sent.',
      'huge.png is 5,242,881 bytes, over the limit of 5,242,880 bytes (5 MiB) per image.',
    ]);
    assert.equal(await page.locator('.composer-images .image-chip').count(), 3);
    assert.deepEqual(await page.$$eval('.composer-images .image-chip img', (imgs) => imgs.map((i) => i.getAttribute('alt'))), ['shot.png (PNG, 96 B)', 'dot.gif (GIF, 42 B)', 'extra.png (PNG, 96 B)']);
    await screenshot(page, 'composer-image-chips');
    assert.deepEqual(await seriousViolations(page), [], 'axe with image chips');
    // The third is removed.
    await page.click('.composer-images .image-chip >> nth=2 >> button.remove');
    assert.equal(await page.locator('.composer-images .image-chip').count(), 2);

    await page.press('textarea.input', 'Enter');
    await page.waitForSelector('.composer-images', { state: 'hidden', ...STEP });
    assert.equal(await page.locator('.composer-images .image-chip').count(), 0);
    await page.waitForSelector('.entry.user .images .thumbnail', STEP);
    await untilIdle(page);
    const sessionId = chat.controller.activeSessionId ?? '';
    const { entries } = await daemon.request('session/transcript', { sessionId });
    assert.deepEqual(entries.find((e) => e.role === 'user')?.blocks, [
      { type: 'text', text: 'what is in these?' },
      imageBlock(PNG, 'image/png', 4, 4),
      imageBlock(GIF, 'image/gif', 1, 1),
    ]);
    // Drawn in the transcript from session/image, each image asked for once.
    await waitIn(page, () => [...document.querySelectorAll('.entry.user .images .thumbnail img')].every((i) => (i as HTMLImageElement).src.startsWith('data:')));
    assert.deepEqual(
      await page.$$eval('.entry.user .images .thumbnail img', (imgs) => imgs.map((i) => [(i as HTMLImageElement).src, i.getAttribute('alt')])),
      [
        [`data:image/png;base64,${PNG}`, 'Image (PNG, 4×4, 96 B)'],
        [`data:image/gif;base64,${GIF}`, 'Image (GIF, 1×1, 42 B)'],
      ],
    );
    // The chat drawn anew (opened again): the thumbnails come from the page's cache, each image
    // was asked for once.
    await page.evaluate(() => document.querySelector('.entry.user')?.setAttribute('data-old', 'yes'));
    await chat.controller.handle({ type: 'switchSession', sessionId });
    await page.waitForSelector('.entry.user:not([data-old]) .images .thumbnail img[src^="data:image/gif"]', STEP);
    assert.equal(chat.calls.toHost.filter((m) => m.type === 'image').length, 2);
    await screenshot(page, 'transcript-thumbnails');
  }),
);

test('a read_file of an image: its result is drawn with the image as a thumbnail', { timeout: 120_000 }, () =>
  withChat('read-image', replayOf({ turns: [{ toolCalls: [{ name: 'read_file', input: { path: 'shot.png' } }] }, { text: 'A tiny image.' }] }), async ({ page }) => {
    await page.fill('textarea.input', 'look at shot.png');
    await page.press('textarea.input', 'Enter');
    await page.waitForSelector('.entry.assistant:has-text("A tiny image.")', STEP);
    await untilIdle(page);
    await waitIn(page, () => (document.querySelector('.entry.tool .images .thumbnail img') as HTMLImageElement | null)?.src.startsWith('data:') === true);
    assert.deepEqual(
      await page.$$eval('.entry.tool .images .thumbnail img', (imgs) => imgs.map((i) => [(i as HTMLImageElement).src, i.getAttribute('alt')])),
      [[`data:image/png;base64,${PNG}`, 'Image (PNG, 4×4, 96 B)']],
    );
    // Drawn the same after a reload of the page (from session/transcript).
    await page.reload();
    await page.waitForSelector('.entry.tool .images .thumbnail img[src^="data:image/png"]', STEP);
    await screenshot(page, 'transcript-tool-image');
  }),
);

test('images while a run works: kept in the composer with a message saying why, and sent with the next turn; the 21st image of a message refused', { timeout: 120_000 }, () =>
  withChat('images-while-working', () => ({ SIDECHAT_DEMO_DELAY_MS: '0' }), async ({ chat, page, daemon }) => {
    await page.fill('textarea.input', 'create notes.md with hello');
    await page.press('textarea.input', 'Enter');
    await page.waitForSelector('.approval', STEP);
    await page.fill('textarea.input', 'and this one');
    await paste(page, [{ name: 'shot.png', type: 'image/png', base64: PNG }]);
    await page.waitForSelector('.composer-images .image-chip img', STEP);
    await page.press('textarea.input', 'Enter');
    await page.waitForSelector('.errors .error', STEP);
    assert.deepEqual(await page.locator('.errors .error .text').allTextContents(), ['Images go with a new message once the run ends; they are kept in the composer until then.']);
    assert.equal(await page.inputValue('textarea.input'), 'and this one');
    assert.equal(await page.locator('.composer-images .image-chip').count(), 1);
    assert.deepEqual(chat.calls.toHost.filter((m) => m.type === 'send').map((m) => m.type === 'send' && m.text), ['create notes.md with hello']);
    await page.click('.approval button.deny');
    await untilIdle(page);
    await page.press('textarea.input', 'Enter');
    await page.waitForSelector('.entry.user .images .thumbnail img[src^="data:image/png"]', STEP);
    await untilIdle(page);
    const { entries } = await daemon.request('session/transcript', { sessionId: chat.controller.activeSessionId ?? '' });
    assert.deepEqual(entries.filter((e) => e.role === 'user').at(-1)?.blocks, [{ type: 'text', text: 'and this one' }, imageBlock(PNG, 'image/png', 4, 4)]);

    // At most 20 images in a message: the 21st is refused, saying so.
    await paste(page, Array.from({ length: 21 }, (_, i) => ({ name: `dot${i + 1}.gif`, type: 'image/gif', base64: GIF })));
    await waitIn(page, () => document.querySelectorAll('.composer-images .image-chip img').length === 20);
    assert.deepEqual((await page.locator('.errors .error .text').allTextContents()).slice(-1), ['dot21.gif was not added: a message holds at most 20 images.']);
  }),
);
