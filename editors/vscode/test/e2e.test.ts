// End to end in a real browser: the real daemon (demo model) spawned by the extension's client
// layer, the real chat page in headless Chromium, `acquireVsCodeApi` bridged to the real host
// controller. Checks the DOM at each step and saves screenshots to artifacts/.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import type { Page } from 'playwright-core';

import type { Daemon } from '../src/host/daemon';
import type { Reconciliation } from '../src/model/wire';
import { openChat, pageRig, Scratch, screenshot, STEP, THEMES, until } from './harness';

const rig = pageRig();

async function send(page: Page, text: string): Promise<void> {
  await page.fill('textarea.input', text);
  await page.press('textarea.input', 'Enter');
}

const lastAssistant = '.transcript .entry.assistant >> nth=-1';

type Chat = Awaited<ReturnType<typeof openChat>>;

/** What a test gets from [`withChat`]. */
interface ChatTest {
  scratch: Scratch;
  daemon: Daemon;
  chat: Chat;
  page: Page;
  /** Another view (its own page and controller) of the same daemon, closed with the first. */
  openAnother: () => Promise<Chat>;
}

/**
 * Runs `body` against a chat page on a daemon of its own in a scratch home (`env(scratch)` its
 * extra environment; with `missingBinary`, looked for where there is none), then closes the
 * views, stops the daemon and removes the home. When `body` fails, each view's screenshot is saved as
 * `failure-<name>` and its page errors and entries are printed.
 */
async function withChat(
  name: string,
  options: { env?: (scratch: Scratch) => Record<string, string>; missingBinary?: boolean },
  body: (test: ChatTest) => Promise<void>,
): Promise<void> {
  const scratch = new Scratch();
  const env = options.env?.(scratch) ?? {};
  const daemon = options.missingBinary ? scratch.daemon(env, missingBinary(scratch)) : scratch.daemon(env);
  const chats: Chat[] = [];
  const open = async () => {
    const chat = await openChat(rig.browser, rig.url, daemon, scratch.workspace);
    chats.push(chat);
    return chat;
  };
  try {
    await daemon.start().catch((error) => {
      if (!options.missingBinary) throw error;
    });
    const chat = await open();
    await body({ scratch, daemon, chat, page: chat.page, openAnother: open });
  } catch (error) {
    for (const [i, chat] of chats.entries()) {
      await screenshot(chat.page, `failure-${name}${i ? `-${i + 1}` : ''}`).catch(() => undefined);
      console.error('page errors:', chat.pageErrors);
      console.error(await chat.page.evaluate(() => [...document.querySelectorAll('.entry')].map((e) => `${e.className} ${JSON.stringify((e as HTMLElement).dataset)} ${(e.textContent ?? '').slice(0, 80)}`).join('\n')).catch(() => ''));
    }
    throw error;
  } finally {
    for (const chat of chats) {
      chat.controller.dispose();
      await chat.page.close();
    }
    // As the extension deactivates: a request the controller still had on its way (a refresh
    // after the last event) cannot start another daemon, which would keep this file running.
    await daemon.dispose();
    scratch.dispose();
  }
}

/** Where the `missingBinary` daemon is looked for. */
function missingBinary(scratch: Scratch): string {
  return join(scratch.dir, 'no-such', 'sidechat');
}

/** The environment of a daemon that answers with the replay `script` (written into the home). */
function replayOf(script: unknown): (scratch: Scratch) => Record<string, string> {
  return (scratch) => {
    const path = join(scratch.dir, 'script.json');
    writeFileSync(path, JSON.stringify(script));
    return { SIDECHAT_REPLAY_SCRIPT: path, SIDECHAT_ACCOUNT: 'replay' };
  };
}

/** Waits until the page shows no run working. */
function untilIdle(page: Page): Promise<void> {
  return waitIn(page, () => document.querySelector('#app')?.getAttribute('data-state') === 'idle');
}

/** Waits until `count` assistant replies are whole. */
function untilReplies(page: Page, count: number): Promise<void> {
  return waitIn(page, (n) => document.querySelectorAll('.entry.assistant[data-streaming="false"]').length === n, count);
}

test('a chat in the page: stream, context bar, slash command, approval, interjection, reload, changed file, stop, HTML as text, copy, sessions', { timeout: 120_000 }, () =>
  withChat('chat', { env: () => ({ SIDECHAT_DEMO_DELAY_MS: '25' }) }, async ({ scratch, chat, page }) => {
    // 1. A streamed reply: seen while streaming, then whole.
    await send(page, 'hello there');
    await page.waitForSelector('.entry.assistant[data-streaming="true"]', STEP);
    await screenshot(page, '01-streaming');
    await page.waitForSelector('.entry.assistant[data-streaming="false"]', STEP);
    const reply = await page.textContent(lastAssistant);
    assert.match(reply ?? '', /\[demo model, offline\] You said: "hello there"/);
    assert.equal(await page.textContent('.entry.user >> nth=0'), 'hello there');

    // 2. The context bar and the cost.
    // The bar is drawn again as each budget figure arrives (on a loaded machine the first
    // request's upper bounds, then its exact figures): wait for the tools segment's width.
    await waitIn(page, () => (document.querySelector('.context .bar .segment.tools')?.getBoundingClientRect().width ?? 0) > 0);
    assert.match((await page.textContent('.context .label')) ?? '', /% of 123,904$/);
    await waitIn(page, () => document.querySelector('.context .cost')?.textContent === 'unpriced');
    assert.equal(await page.getAttribute('.context', 'data-pressure'), 'normal');

    // A slash command from the composer's list writes a note (never sent to the model).
    await page.fill('textarea.input', '/co');
    await page.waitForSelector('.completion[aria-busy="false"]:not([hidden]) li', STEP);
    assert.deepEqual(await page.locator('.completion li .name').allTextContents(), ['/cost', '/compact']);
    await page.click('.completion li');
    assert.equal(await page.inputValue('textarea.input'), '/cost');
    await page.press('textarea.input', 'Enter');
    await page.waitForSelector('.entry.note', STEP);
    assert.match((await page.textContent('.entry.note')) ?? '', /^Cost of this session/);

    // "Ask sidechat about the selection": the selection waits in the composer, then goes along.
    chat.controller.attach({ name: 'src/lib.rs:3-4', text: 'fn main() {}\n' });
    await page.waitForSelector('.attachments .chip', STEP);
    assert.equal(await page.textContent('.attachments .chip'), 'src/lib.rs:3-4×');
    await send(page, 'what does this do?');
    await page.waitForSelector('.entry.user .chip', STEP);
    assert.equal(await page.textContent('.entry.user .chip'), 'src/lib.rs:3-4');
    assert.equal(await page.locator('.attachments .chip').count(), 0);
    await untilIdle(page);

    // 3. An approval card showing the write, and a message typed while it waits.
    await send(page, 'create notes.md with hello');
    await page.waitForSelector('.approval', STEP);
    assert.equal(await page.textContent('.approval .title'), 'Allow write_file?');
    assert.equal(await page.textContent('.approval pre .line.add'), '+hello\n');
    await send(page, 'also check the README');
    await page.waitForSelector('.waiting-item[data-pending-id]', STEP);
    assert.equal(await page.textContent('.waiting-item[data-pending-id] .badge'), 'waiting');
    assert.equal(await page.textContent('.waiting-item[data-pending-id] .text'), 'also check the README');
    // A second waiting message, withdrawn before the model reads it.
    await send(page, 'never mind this one');
    await page.waitForSelector('.waiting-item[data-pending-id] .text:text-is("never mind this one")', STEP);
    await screenshot(page, '02-approval-and-waiting');
    await page.click('.waiting-item[data-pending-id]:has(.text:text-is("never mind this one")) button.withdraw');
    await page.waitForSelector('.waiting-item .text:text-is("never mind this one")', { state: 'detached', ...STEP });

    // 4. A reload rebuilds the view from the transcript: the card and the waiting message return.
    await page.reload();
    await page.waitForSelector('.approval', STEP);
    await page.waitForSelector('.waiting-item[data-pending-id]', STEP);
    assert.match((await page.textContent('.transcript')) ?? '', /You said: "hello there"/);

    // 5. Allow: the card goes, the write happens, the waiting message is delivered in place.
    await page.click('.approval button.allow');
    await page.waitForSelector('.approval', { state: 'detached', ...STEP });
    await page.waitForSelector('.entry.user.interjection', STEP);
    assert.match((await page.textContent('.entry.user.interjection')) ?? '', /also check the README/);
    await page.waitForSelector('.waiting-item[data-pending-id]', { state: 'detached', ...STEP });
    assert.equal(readFileSync(join(scratch.workspace, 'notes.md'), 'utf8'), 'hello\n');
    await page.waitForSelector('.entry.tool[data-status="done"]', STEP);

    // 6. The changed file with its counts opens the daemon's before and after.
    await page.waitForSelector('.files li[data-path="notes.md"] .added', STEP);
    assert.equal(await page.textContent('.files li[data-path="notes.md"] .added'), '+1');
    assert.equal(await page.textContent('.files li[data-path="notes.md"] .removed'), '−0');
    await page.click('.files li[data-path="notes.md"] button.file');
    await waitFor(() => chat.calls.diffs.length === 1);
    assert.deepEqual(chat.calls.diffs, [{ path: 'notes.md', before: '', after: 'hello\n' }]);
    await untilIdle(page);
    await screenshot(page, '03-after-allow');

    // 7. Stop mid-stream: the partial reply is kept and marked, and the run ends.
    await send(page, 'tell me a story');
    await waitIn(page, 
      () => {
        const last = [...document.querySelectorAll('.entry.assistant')].pop();
        return last?.getAttribute('data-streaming') === 'true' && (last.textContent ?? '').length > 60;
      },
    );
    await page.click('button.stop');
    await page.waitForSelector('.entry.assistant[data-status="stopped"]', STEP);
    await waitIn(page, () => (document.querySelector('button.stop') as HTMLButtonElement).disabled);
    await screenshot(page, '04-stopped');

    // 8. A reply carrying HTML and script is shown as text and runs nothing.
    const payload = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>';
    await send(page, payload);
    await waitIn(page, 
      () => {
        const last = [...document.querySelectorAll('.entry.assistant')].pop();
        return last?.getAttribute('data-streaming') === 'false' && (last.textContent ?? '').includes('You said');
      },
    );
    assert.ok(((await page.textContent(lastAssistant)) ?? '').includes('You said: "<img src=x onerror="window.__pwned=1"><script>'));
    assert.equal(await page.evaluate(() => (window as unknown as { __pwned?: number }).__pwned), undefined);
    assert.equal(await page.locator('.transcript img').count(), 0);
    assert.equal(await page.locator('.transcript script').count(), 0);
    await screenshot(page, '05-html-as-text');

    // A fenced code block in a reply gets a copy button that copies its code.
    // (Clicked once the reply is whole: while it streams, its last paragraph is redrawn each frame.)
    await send(page, 'see\n```\ncargo build --release\n```\nthis');
    await page.waitForSelector('.entry.assistant[data-streaming="false"] pre.code button.copy', STEP);
    await untilIdle(page);
    await page.click('.entry.assistant pre.code button.copy');
    await waitFor(() => chat.calls.copies.length === 1);
    assert.deepEqual(chat.calls.copies, ['cargo build --release\n']);

    // 9. The session list: rename, new, switch back, delete the other one.
    await page.click('button.session-title');
    await page.waitForSelector('.sessions li[data-session-id] button.rename', STEP);
    await page.click('.sessions li[data-session-id] button.rename');
    await page.fill('.sessions input.rename', 'Renamed chat');
    await page.press('.sessions input.rename', 'Enter');
    await page.waitForSelector('.sessions li[data-session-id] button.open:text-is("Renamed chat")', STEP);
    assert.equal(await page.textContent('button.session-title'), '☰ Renamed chat');
    await page.click('button.new-session');
    await waitIn(page, () => document.querySelectorAll('.sessions li[data-session-id]').length === 2);
    await waitIn(page, () => document.querySelectorAll('.transcript .entry').length === 0);
    await page.click('.sessions li[data-session-id] button.open:text-is("Renamed chat")');
    await waitIn(page, () => (document.querySelector('.transcript')?.textContent ?? '').includes('hello there'));
    await page.click('button.session-title');
    await page.click('.sessions li[data-session-id]:not(.active) button.delete');
    await waitIn(page, () => document.querySelectorAll('.sessions li[data-session-id]').length === 1);
    assert.deepEqual(chat.calls.confirms, ['Delete this chat and its transcript?']);
    await screenshot(page, '08-sessions');

    assert.deepEqual(chat.pageErrors, []);
  }),
);

test('a crash mid-run: the page says so until the daemon is ready again, a message sent meanwhile waits for it, and the state comes back', { timeout: 120_000 }, () =>
  withChat('crash', { env: () => ({ SIDECHAT_DEMO_DELAY_MS: '25' }) }, async ({ daemon, chat, page }) => {
    await send(page, 'hello there');
    await untilReplies(page, 1);
    await untilIdle(page);
    // A back-off long enough to send a message in it on a busy machine.
    daemon.configure({ restart: { firstDelayMs: 1500 } });
    await send(page, 'tell me a story');
    await page.waitForSelector('.entry.assistant[data-streaming="true"]', STEP);
    // Every state the page's daemon status takes from now on, and every banner it shows, so
    // that a busy machine cannot hide one between two looks.
    await page.evaluate(() => {
      const label = document.querySelector('.daemon-status') as HTMLElement;
      const banner = document.querySelector('.banner') as HTMLElement;
      const seen = { states: [label.dataset.state ?? ''], banners: [] as string[] };
      (window as unknown as { seen: typeof seen }).seen = seen;
      new MutationObserver(() => {
        const state = label.dataset.state ?? '';
        if (seen.states[seen.states.length - 1] !== state) seen.states.push(state);
        if (!banner.hidden) seen.banners.push(`${banner.dataset.state}: ${banner.textContent}`);
      }).observe(document.body, { attributes: true, childList: true, subtree: true, characterData: true });
    });
    const seen = () => page.evaluate(() => (window as unknown as { seen: { states: string[]; banners: string[] } }).seen);
    process.kill(daemon.pid ?? 0, 'SIGKILL');
    await waitIn(page, () => (window as unknown as { seen: { states: string[] } }).seen.states.includes('crashed'));
    await send(page, 'are you back?');
    await waitIn(page, () => document.querySelector('.daemon-status')?.getAttribute('data-state') === 'ready');
    // The recovered transcript: the restarted daemon closed the cut run with a notice, and the
    // message sent during the back-off reached it and was answered.
    await page.waitForSelector('.entry.notice[data-level="error"]:has-text("sidechat stopped during the run")', STEP);
    await untilReplies(page, 2);
    await untilIdle(page);
    assert.deepEqual(
      await page.locator('.transcript .entry').evaluateAll((nodes) => nodes.map((n) => `${n.classList[1]}${n.classList.contains('user') ? `: ${n.textContent}` : ''}`)),
      ['user: hello there', 'assistant', 'user: tell me a story', 'notice', 'user: are you back?', 'assistant'],
    );
    assert.equal(await page.locator('.entry.assistant[data-streaming="true"]').count(), 0);
    const { states, banners } = await seen();
    assert.deepEqual(states, ['ready', 'crashed', 'ready'], 'crashed until ready, with no "starting" between');
    assert.match(banners[0] ?? '', /^crashed: sidechat stopped unexpectedly \(SIGKILL\); restarting in 1\.5 s\.$/);
    await screenshot(page, '07-recovered');
    assert.deepEqual(chat.pageErrors, []);
  }),
);

test('thinking is folded, Markdown is formatted, and the context bar turns amber then red', { timeout: 120_000 }, () =>
  withChat('thinking', { env: replayOf({ turns: [{ thinking: 'First, the plan.', text: 'Here is **the answer**.' }] }) }, async ({ daemon, chat, page }) => {
    await send(page, 'think first');
    await page.waitForSelector('.entry.assistant[data-streaming="false"] strong', STEP);
    assert.equal(await page.textContent('.entry.assistant strong'), 'the answer');
    assert.equal(await page.getAttribute('.entry.assistant details.thinking', 'open'), null);
    assert.equal(await page.textContent('.entry.assistant details.thinking .thinking-text'), 'First, the plan.');
    await page.click('.entry.assistant details.thinking summary');
    assert.equal(await page.getAttribute('.entry.assistant details.thinking', 'open'), '');
    await page.waitForSelector('.context .bar', STEP);

    // The bar's colours follow the daemon's pressure levels.
    const sessionId = chat.controller.activeSessionId ?? '';
    const snapshot = (await daemon.request('session/budget', { sessionId })).snapshot;
    const colour = () => page.$eval('.context .label', (e) => getComputedStyle(e).color);
    const normal = await colour();
    chat.post({ type: 'budget', sessionId, snapshot: { ...snapshot, pressure: 'high', utilisation: 0.75 } });
    await page.waitForSelector('.context[data-pressure="high"]', STEP);
    assert.equal(await page.textContent('.context .label'), '~75% of 123,904');
    assert.equal(await colour(), 'rgb(204, 167, 0)');
    chat.post({ type: 'budget', sessionId, snapshot: { ...snapshot, pressure: 'critical', utilisation: 0.95 } });
    await page.waitForSelector('.context[data-pressure="critical"]', STEP);
    assert.equal(await colour(), 'rgb(248, 128, 112)');
    assert.notEqual(normal, 'rgb(204, 167, 0)');
    await screenshot(page, '09-thinking-and-critical');
    assert.deepEqual(chat.pageErrors, []);
  }),
);

test('/compact: the summary entry, the compaction, folded entries and the summary in the context bar', { timeout: 120_000 }, () =>
  withChat('compaction', { env: () => ({ SIDECHAT_DEMO_DELAY_MS: '5' }) }, async ({ daemon, chat, page }) => {
    await send(page, 'hello there');
    await page.waitForSelector('.entry.assistant[data-streaming="false"]', STEP);
    await untilIdle(page);
    await send(page, 'tell me a story');
    await untilReplies(page, 2);
    await untilIdle(page);
    await page.waitForSelector('.context .bar .segment.history', STEP);
    assert.equal(await page.locator('.context .segment.summary').count(), 0, 'no summary segment before a compaction');
    assert.equal(await page.locator('.transcript .entry.folded').count(), 0);
    // The history's share of the window is marked on the bar.
    const limit = Number(await page.getAttribute('.context .bar .limit', 'data-tokens'));
    const sessionId = chat.controller.activeSessionId ?? '';
    assert.equal(limit, (await daemon.request('session/budget', { sessionId })).snapshot.historyLimitTokens);

    // /compact folds the four messages into a summary the model reads instead.
    await send(page, '/compact');
    await page.waitForSelector('.entry.summary[data-method="summary"] .detail:has-text("history")', STEP);
    assert.equal(await page.textContent('.entry.summary .head'), 'Summary of 4 earlier messages');
    const detail = (await page.textContent('.entry.summary .detail')) ?? '';
    const numbers = /^seq 1–(\d+) · \/compact · history ([\d,]+) → ([\d,]+) tokens$/.exec(detail);
    assert.ok(numbers, `the compaction's range, reason and tokens: ${detail}`);
    assert.ok(Number(numbers[3].replace(/,/g, '')) < Number(numbers[2].replace(/,/g, '')), 'the history shrank');
    // Folded, the summary opens to its text, formatted like a reply.
    assert.equal(await page.getAttribute('.entry.summary details.summary-block', 'open'), null);
    await page.click('.entry.summary details.summary-block summary');
    assert.match((await page.textContent('.entry.summary .markdown')) ?? '', /Summary: the user asked/);
    // The messages it stands for stay readable, dimmed; what came after is not.
    assert.deepEqual(
      await page.locator('.transcript .entry').evaluateAll((nodes) => nodes.map((n) => `${n.classList[1]}${n.classList.contains('folded') ? ' folded' : ''}`)),
      ['user folded', 'assistant folded', 'user folded', 'assistant folded', 'summary', 'note'],
    );
    assert.match((await page.textContent('.entry.note')) ?? '', /^Compacted 4 messages/);
    // The context bar shows the summary as its own part of the history.
    await page.waitForSelector('.context .bar .segment.summary', STEP);
    const snapshot = (await daemon.request('session/budget', { sessionId })).snapshot;
    assert.ok(snapshot.summaryTokens > 0);
    assert.equal(Number(await page.getAttribute('.context .segment.summary', 'data-tokens')), snapshot.summaryTokens);
    assert.equal(Number(await page.getAttribute('.context .segment.history', 'data-tokens')), snapshot.historyTokens - snapshot.summaryTokens);
    assert.ok((await page.$eval('.context .segment.summary', (e) => e.getBoundingClientRect().width)) > 0);
    await screenshot(page, '11-compaction');

    // A reload shows the same from the transcript (the compaction's reason was only live).
    await page.reload();
    await page.waitForSelector('.entry.summary', STEP);
    assert.equal(await page.textContent('.entry.summary .head'), 'Summary of 4 earlier messages');
    assert.match((await page.textContent('.entry.summary .detail')) ?? '', /^seq 1–\d+$/);
    assert.equal(await page.locator('.transcript .entry.folded').count(), 4);
    await page.waitForSelector('.context .bar .segment.summary', STEP);

    // The next turn is not folded: it is sent beside the summary.
    await send(page, 'hello again');
    await untilReplies(page, 3);
    await untilIdle(page);
    assert.equal(await page.locator('.transcript .entry.folded').count(), 4);
    assert.deepEqual(chat.pageErrors, []);
  }),
);

test('an approval answered in another view of the same daemon (Always) leaves this one, the run goes on here, and a later write asks nobody', { timeout: 120_000 }, () =>
  withChat('approved-elsewhere', { env: (scratch) => {
    // Commands ask here as they do without the sandbox (where it runs them, none is asked).
    mkdirSync(join(scratch.dir, 'config', 'sidechat'), { recursive: true });
    writeFileSync(join(scratch.dir, 'config', 'sidechat', 'config.toml'), '[sandbox]\nenabled = false\n');
    return { SIDECHAT_DEMO_DELAY_MS: '5' };
  } }, async ({ scratch, daemon, chat: here, openAnother }) => {
    await send(here.page, 'create notes.md with hello');
    await here.page.waitForSelector('.approval', STEP);
    // A second client of the daemon (another view with its own controller) shows the same card.
    const there = await openAnother();
    await there.page.waitForSelector('.approval', STEP);
    assert.equal(await there.page.getAttribute('.approval', 'data-approval-id'), await here.page.getAttribute('.approval', 'data-approval-id'));
    await there.page.click('.approval button.allow-always');
    // Here, nobody clicked: the card goes, the tool runs and the reply follows.
    await here.page.waitForSelector('.approval', { state: 'detached', ...STEP });
    await here.page.waitForSelector('.entry.tool[data-status="done"]', STEP);
    await here.page.waitForSelector('.files li[data-path="notes.md"] .added', STEP);
    await untilIdle(here.page);
    assert.match((await here.page.textContent(lastAssistant)) ?? '', /Created notes\.md/);
    assert.equal(readFileSync(join(scratch.workspace, 'notes.md'), 'utf8'), 'hello\n');
    await there.page.waitForSelector('.approval', { state: 'detached', ...STEP });
    await screenshot(here.page, '12-approved-elsewhere');

    // "Always" covered the rest of the chat: the next write asks nobody.
    await send(here.page, 'create other.md with more');
    await waitIn(here.page, () => document.querySelectorAll('.entry.tool[data-status="done"]').length === 2);
    await untilIdle(here.page);
    assert.equal(readFileSync(join(scratch.workspace, 'other.md'), 'utf8'), 'more\n');
    assert.equal(await here.page.locator('.approval').count(), 0);
    assert.equal(await here.page.locator('.entry.tool[data-status="awaitingApproval"]').count(), 0);

    // The same for a denial, answered through the daemon directly (no page involved).
    await send(here.page, 'run ls -la');
    await here.page.waitForSelector('.approval', STEP);
    const approvalId = (await here.page.getAttribute('.approval', 'data-approval-id')) ?? '';
    const answered = await daemon.request('approval/respond', { approvalId, decision: 'deny' });
    assert.equal(answered.applied, true);
    await here.page.waitForSelector('.approval', { state: 'detached', ...STEP });
    await here.page.waitForSelector('.entry.tool[data-status="denied"]', STEP);
    await untilIdle(here.page);
    assert.deepEqual(here.pageErrors, []);
    assert.deepEqual(there.pageErrors, []);
  }),
);

test('a carry-over note: drawn as the boundary of a new context with the note folded; its Delete button calls note/delete and the noteDeleted event takes it off, here and after a reload', { timeout: 120_000 }, () =>
  withChat('note', { env: () => ({ SIDECHAT_DEMO_DELAY_MS: '5' }) }, async ({ daemon, chat, page }) => {
    const note = '.entry.summary[data-method="carryOver"]';
    await send(page, 'hello there');
    await untilReplies(page, 1);
    await untilIdle(page);
    await send(page, '/new-context');
    await page.waitForSelector(note, STEP);
    assert.equal(await page.textContent(`${note} .head`), 'New context — carried over');
    // The note is folded under the boundary and opens to its text.
    assert.equal(await page.getAttribute(`${note} details.summary-block`, 'open'), null);
    assert.equal(await page.isVisible(`${note} .markdown`), false);
    await page.click(`${note} details.summary-block summary`);
    assert.equal(await page.isVisible(`${note} .markdown`), true);
    assert.notEqual(((await page.textContent(`${note} .markdown`)) ?? '').trim(), '');
    const sessionId = chat.controller.activeSessionId ?? '';
    const stored = async () =>
      (await daemon.request('session/transcript', { sessionId })).entries.filter((e) => e.role === 'summary').map((e) => e.blocks);
    assert.notEqual(JSON.stringify(await stored()), '[]', 'the note is stored');
    await screenshot(page, '12-carry-over-note');

    await page.click(`${note} button.delete-note`);
    await waitIn(page, () => document.querySelector('.entry.summary[data-method="carryOver"]') === null);
    // Deleted for the daemon too: kept, emptied, never sent again.
    const blocks = await stored();
    assert.equal(blocks.length, 1);
    assert.equal(blocks[0][0].type === 'summary' && blocks[0][0].text, '');
    assert.equal(await page.locator('.transcript .entry.user').count(), 1, 'the conversation stays');

    await page.reload();
    await page.waitForSelector('.entry.assistant', STEP);
    assert.equal(await page.locator(note).count(), 0, 'not shown after a reload');
    assert.deepEqual(chat.pageErrors, []);
  }),
);

test('a message the provider failed before any answer: the page says it has none, and Ask again answers it', { timeout: 120_000 }, () =>
  withChat('ask-again', { env: replayOf({ turns: [{ text: 'Answered at last.', failures: 1 }] }) }, async ({ page }) => {
    await send(page, 'go');
    await page.waitForSelector('.unanswered:not([hidden]) button.resume', STEP);
    assert.equal(await page.textContent('.unanswered .text'), 'Your last message has no answer.');
    await page.waitForSelector('.entry.notice[data-level="error"]:has-text("HTTP 529")', STEP);
    await screenshot(page, '13-unanswered');
    await page.click('.unanswered button.resume');
    await page.waitForSelector('.entry.assistant:has-text("Answered at last.")', STEP);
    await untilIdle(page);
    assert.equal(await page.isHidden('.unanswered'), true);
  }),
);

test('a refusal: the answer is labelled as refused, not as an ordinary end', { timeout: 120_000 }, () =>
  withChat('refusal', { env: replayOf({ turns: [{ text: 'I cannot help with that.', refusal: true }, { text: 'Happy to.' }] }) }, async ({ chat, page }) => {
    await send(page, 'something it will not do');
    await page.waitForSelector('.entry.assistant[data-status="refused"]', STEP);
    assert.equal(await page.textContent('.entry.assistant[data-status="refused"] .status-line'), 'the model refused to answer');
    assert.match((await page.textContent('.entry.assistant[data-status="refused"]')) ?? '', /I cannot help with that\./);
    await untilIdle(page);
    // The next answer ends as an ordinary one: no label.
    await send(page, 'something else');
    await untilReplies(page, 2);
    await untilIdle(page);
    const last = page.locator('.transcript .entry.assistant').last();
    assert.equal(await last.getAttribute('data-status'), 'complete');
    assert.equal(await last.locator('.status-line').textContent(), '');
    assert.equal(await page.locator('.entry.assistant[data-status="refused"]').count(), 1);
    await screenshot(page, '13-refusal');
    assert.deepEqual(chat.pageErrors, []);
  }),
);

/** A parent that hands a task to a sub-agent twice; each sub-agent asks to write a file. */
const DELEGATING = {
  turns: [
    { text: 'Handing it over.', toolCalls: [{ name: 'delegate', input: { task: 'Write hello.txt saying hi', tools: 'all' } }] },
    { text: 'The sub-agent wrote hello.txt.' },
    { text: 'Once more.', toolCalls: [{ name: 'delegate', input: { task: 'Write hello.txt again', tools: 'all' } }] },
    { text: 'It was not allowed.' },
  ],
  delegated: {
    turns: [
      { text: 'Writing it now.', toolCalls: [{ name: 'write_file', input: { path: 'hello.txt', content: 'hi\n' } }] },
      { text: 'Wrote hello.txt.' },
    ],
  },
};

test('a delegation: the sub-agent works inside its call, its approval is answered at the root (allow, then deny), and a reload shows the same', { timeout: 120_000 }, () =>
  withChat('delegation', { env: replayOf(DELEGATING) }, async ({ scratch, chat, page }) => {
    const call = '.entry.tool.delegate';
    const card = '.approval.delegated';
    /** What the waiting delegation shows, read from the page. */
    const waitingShows = async () => {
      await page.waitForSelector(card, STEP);
      await page.waitForSelector(`${call}[data-status="awaitingApproval"] .agent[data-state="awaitingApproval"] .said`, STEP);
      return {
        title: await page.textContent(`${card} .title`),
        askedBy: await page.textContent(`${card} .asked-by`),
        summary: await page.textContent(`${card} .summary`),
        head: await page.textContent(`${call} .head .summary`),
        task: await page.textContent(`${call} .task`),
        agent: await page.textContent(`${call} .agent .state`),
        step: await page.textContent(`${call} .agent .step`),
        said: await page.textContent(`${call} .agent .said`),
        state: await page.getAttribute('#app', 'data-state'),
      };
    };
    const waiting = {
      title: 'Allow write_file?',
      askedBy: 'Asked by the sub-agent working on: Write hello.txt saying hi',
      summary: 'write hello.txt (1 line)',
      head: 'Sub-agent',
      task: 'Write hello.txt saying hi',
      agent: 'waiting for your approval',
      step: 'write hello.txt (1 line) · needs approval',
      said: 'Writing it now.',
      state: 'awaitingApproval',
    };

    await send(page, 'please write hello');
    assert.deepEqual(await waitingShows(), waiting);
    await screenshot(page, '14-delegated-approval');
    // A reload rebuilds the same from the transcript and the sub-agent's own.
    await page.reload();
    assert.deepEqual(await waitingShows(), waiting);

    await page.click(`${card} button.allow`);
    await page.waitForSelector(card, { state: 'detached', ...STEP });
    await page.waitForSelector(`${call}[data-status="done"] .answer`, STEP);
    await untilReplies(page, 2);
    await untilIdle(page);
    // The sub-agent's words, then the files it changed (which are the parent's changes too).
    const WROTE = 'Wrote hello.txt.\n\nfiles changed: hello.txt (+1 -0)';
    assert.equal(await page.textContent(`${call} .answer`), WROTE);
    assert.equal(await page.locator(`${call} .agent`).count(), 0, 'the answer stands for the sub-agent once it ended');
    assert.equal(readFileSync(join(scratch.workspace, 'hello.txt'), 'utf8'), 'hi\n');
    await screenshot(page, '15-delegation-answered');

    // The second sub-agent is denied: the call fails with the reason, and the run goes on.
    await send(page, 'and again');
    await page.waitForSelector(`${card} .asked-by:text-is("Asked by the sub-agent working on: Write hello.txt again")`, STEP);
    await page.click(`${card} button.deny`);
    await page.waitForSelector(card, { state: 'detached', ...STEP });
    await untilReplies(page, 4);
    await untilIdle(page);
    // The sub-agent's report: the denial ends it, and the parent reads why.
    const DENIED = [
      'status: failed',
      "note: the user denied the sub-agent's call: write hello.txt (1 line)",
      'last message: Writing it now.',
      'files changed: none',
      'failed calls:',
      '- write hello.txt (1 line): The user denied this tool call. Do not retry it; ask the user how to proceed if needed.',
    ].join('\n');
    const second = page.locator(call).nth(1);
    assert.equal(await second.getAttribute('data-status'), 'error');
    assert.equal(await second.locator('.answer').textContent(), DENIED);

    await page.reload();
    await untilReplies(page, 4);
    assert.deepEqual(await page.locator(`${call} .answer`).allTextContents(), [
      WROTE,
      DENIED,
    ]);
    assert.deepEqual(await page.locator(`${call} .task`).allTextContents(), ['Write hello.txt saying hi', 'Write hello.txt again']);
    assert.equal(await page.locator('.approval').count(), 0);
    assert.deepEqual(chat.pageErrors, []);
  }),
);

test('the plan: a checklist pinned above the composer while the run works, gone once it ends', { timeout: 120_000 }, () => {
  const steps = [
    { step: 'Read the notes', status: 'completed' },
    { step: 'Write the summary', status: 'in_progress' },
    { step: 'Check it', status: 'pending' },
  ];
  const script = {
    turns: [
      {
        toolCalls: [
          { name: 'update_plan', input: { explanation: 'notes first', steps } },
          { name: 'write_file', input: { path: 'summary.md', content: 'short\n' } },
        ],
      },
      { text: 'Written.' },
    ],
  };
  return withChat('plan', { env: replayOf(script) }, async ({ daemon, chat, page }) => {
    await send(page, 'summarise the notes');
    // The write waits for approval: the run works, and the plan shows above the composer.
    await page.waitForSelector('.approval', STEP);
    await page.waitForSelector('.dock .plan li', STEP);
    const shown = await page.$$eval('.dock .plan li', (items) =>
      items.map((li) => [(li as HTMLElement).dataset.status, li.querySelector('.mark')?.textContent, li.querySelector('.step')?.textContent]),
    );
    assert.deepEqual(shown, [
      ['completed', '✓', 'Read the notes'],
      ['in_progress', '▸', 'Write the summary'],
      ['pending', '○', 'Check it'],
    ]);
    assert.equal(await page.textContent('.dock .plan .explanation'), 'notes first');
    // Pinned above the composer: the plan comes before it in the dock.
    assert.equal(await page.$eval('.dock', (dock) => [...dock.children].indexOf(dock.querySelector('.plan') as Element) < [...dock.children].indexOf(dock.querySelector('.composer') as Element)), true);
    await screenshot(page, '15-plan');
    await page.click('.approval button.allow');
    await untilIdle(page);
    assert.equal(await page.locator('.dock .plan').isHidden(), true);
    // The daemon keeps it: session/get holds the same plan.
    const session = await daemon.request('session/get', { sessionId: chat.controller.activeSessionId ?? '' });
    assert.deepEqual(session.plan, { explanation: 'notes first', steps });
    assert.deepEqual(chat.pageErrors, []);
  });
});

test('a missing daemon: the page names the path tried and opens the setting', { timeout: 120_000 }, () =>
  withChat('missing-daemon', { missingBinary: true }, async ({ scratch, chat }) => {
    await chat.page.waitForSelector('.banner[data-state="failed"]', STEP);
    assert.match((await chat.page.textContent('.banner .message')) ?? '', /sidechat was not found at .*no-such\/sidechat/);
    assert.equal(await chat.page.textContent('.banner .tried'), `Tried: ${missingBinary(scratch)}`);
    await chat.page.click('.banner button.open-settings');
    await waitFor(() => chat.calls.settingsOpened === 1);
    await screenshot(chat.page, '10-missing-daemon');
  }),
);

test('a daemon given up after crashing: the banner offers Retry but not the setting, and Retry brings it back', { timeout: 120_000 }, () =>
  withChat('given-up', {}, async ({ daemon, page }) => {
    await waitIn(page, () => document.querySelector('.daemon-status')?.getAttribute('data-state') === 'ready');
    // No restart allowed: the first crash is given up on.
    daemon.configure({ restart: { maxRestarts: 0 } });
    process.kill(daemon.pid ?? 0, 'SIGKILL');
    await page.waitForSelector('.banner[data-state="failed"]', STEP);
    assert.match((await page.textContent('.banner .message')) ?? '', /sidechat stopped unexpectedly \(SIGKILL\), 1 times within 60 s/);
    assert.deepEqual(await page.$$eval('.banner button', (buttons) => buttons.map((b) => b.className)), ['retry']);
    await screenshot(page, '16-given-up');
    await page.click('.banner button.retry');
    await waitIn(page, () => document.querySelector('.daemon-status')?.getAttribute('data-state') === 'ready');
    assert.equal(await page.isHidden('.banner'), true);
  }),
);

test('a title the daemon gives the chat after its first answer shows in the header and the session list', { timeout: 120_000 }, () => {
  // The title comes well after the run ended (and the session list was fetched for it).
  const script = { turns: [{ text: 'Run cargo check first.' }], title: { text: 'Title: "Fixing the build."', delayMs: 400 } };
  const env = (scratch: Scratch) => ({ ...replayOf(script)(scratch), SIDECHAT_AUTO_TITLE: 'on' });
  return withChat('title', { env }, async ({ page }) => {
    await send(page, 'How do I fix the build?');
    await untilReplies(page, 1);
    await waitIn(page, () => document.querySelector('.session-title')?.textContent === '☰ Fixing the build');
    await page.click('.session-title');
    await page.waitForSelector('.sessions li button.open', STEP);
    assert.deepEqual(await page.$$eval('.sessions li button.open', (items) => items.map((b) => b.textContent)), ['Fixing the build']);
    await screenshot(page, '17-title');
  });
});

test('a run_command approval says whether it runs in the sandbox, and a "sandbox": false rerun that it runs outside', { timeout: 120_000 }, () => {
  const script = {
    turns: [
      { toolCalls: [{ name: 'run_command', input: { command: 'echo inside' } }] },
      { toolCalls: [{ name: 'run_command', input: { command: 'echo outside', sandbox: false } }] },
      { text: 'Both ran.' },
    ],
  };
  const env = (scratch: Scratch) => {
    // An ask rule: the sandboxed command is asked too, so its card shows.
    mkdirSync(join(scratch.dir, 'config', 'sidechat'), { recursive: true });
    writeFileSync(join(scratch.dir, 'config', 'sidechat', 'config.toml'), '[permissions]\nask = ["run_command(echo *)"]\n');
    return replayOf(script)(scratch);
  };
  return withChat('sandbox', { env }, async ({ page }) => {
    await send(page, 'run both');
    await page.waitForSelector('.approval', STEP);
    const note = () => page.$eval('.approval .sandbox', (n) => [(n as HTMLElement).dataset.sandboxed, n.textContent]);
    assert.deepEqual(await note(), ['true', 'Runs in the sandbox (writes only in the workspace and the temp folder).']);
    await page.click('.approval button.allow');
    await page.waitForSelector('.approval .preview:has-text("echo outside")', STEP);
    assert.deepEqual(await note(), ['false', 'Runs outside the sandbox: the model asks to run this command without the sandbox, with all your rights.']);
    await screenshot(page, '18-sandbox-off');
    await page.click('.approval button.allow');
    await untilReplies(page, 3);
    await untilIdle(page);
  });
});

test('a custom command: the user message shows what was typed with a /name label, and the prompt the model read folded', { timeout: 120_000 }, () =>
  withChat('custom-command', { env: () => ({ SIDECHAT_DEMO_DELAY_MS: '5' }) }, async ({ scratch, page }) => {
    mkdirSync(join(scratch.workspace, '.sidechat', 'commands'), { recursive: true });
    writeFileSync(join(scratch.workspace, '.sidechat', 'commands', 'review.md'), '---\ndescription: Review a file\n---\nReview $1 with care.\n');
    await send(page, '/review notes.md');
    await untilReplies(page, 1);
    await untilIdle(page);
    const user = '.entry.user >> nth=0';
    assert.equal(await page.textContent(`${user} >> .command-label`), '/review');
    assert.equal(await page.textContent(`${user} >> .text`), '/review notes.md');
    assert.equal(await page.$eval('.entry.user details.command-prompt', (d) => (d as HTMLDetailsElement).open), false);
    assert.equal(await page.isVisible('.entry.user details.command-prompt pre'), false);
    await page.click('.entry.user details.command-prompt summary');
    assert.equal(await page.isVisible('.entry.user details.command-prompt pre'), true);
    assert.match((await page.textContent('.entry.user details.command-prompt pre')) ?? '', /^Review notes\.md with care\.\s*$/);
    await screenshot(page, '19-custom-command');
  }),
);

test('undo and fork: Fork from here opens a fork; Undo to here lists the files, restores them and folds the rewound messages; a file changed since is overwritten when the user says so', { timeout: 120_000 }, () => {
  const write = (content: string) => ({ toolCalls: [{ name: 'write_file', input: { path: 'notes.md', content } }] });
  const script = { turns: [write('one\n'), { text: 'Written.' }, write('two\n'), { text: 'Changed.' }] };
  return withChat('undo', { env: replayOf(script) }, async ({ scratch, daemon, chat, page }) => {
    const notes = join(scratch.workspace, 'notes.md');
    for (const [i, text] of ['create notes.md', 'change it'].entries()) {
      await send(page, text);
      await page.waitForSelector('.approval', STEP);
      await page.click('.approval button.allow');
      await untilReplies(page, 2 * (i + 1));
      await untilIdle(page);
    }
    assert.equal(readFileSync(notes, 'utf8'), 'two\n');
    const original = chat.controller.activeSessionId ?? '';
    const users = () => page.$$eval('.transcript .entry.user', (nodes) => nodes.map((n) => [n.querySelector('.text')?.textContent, (n as HTMLElement).hidden, n.querySelectorAll('.message-actions button').length]));
    assert.deepEqual(await users(), [['create notes.md', false, 2], ['change it', false, 2]]);

    // Fork from the first message: a new chat holding it, opened.
    await page.click('.entry.user >> nth=0 >> button.fork');
    await waitFor(() => chat.controller.activeSessionId !== original);
    await waitIn(page, () => document.querySelectorAll('.transcript .entry').length === 1);
    assert.deepEqual(await users(), [['create notes.md', false, 2]]);
    const fork = await daemon.request('session/get', { sessionId: chat.controller.activeSessionId ?? '' });
    assert.equal(fork.forkedFrom, original);
    assert.equal(readFileSync(notes, 'utf8'), 'two\n', 'a fork touches no file');

    // Back to the original; undo to the second message.
    await page.click('.session-title');
    await page.click(`.sessions li[data-session-id="${original}"] button.open`);
    await waitFor(() => chat.controller.activeSessionId === original);
    await waitIn(page, () => document.querySelectorAll('.transcript .entry.user').length === 2);
    await page.click('.entry.user >> nth=1 >> button.undo');
    await page.waitForSelector('.rewound-fold', STEP);
    assert.deepEqual(chat.calls.confirms, ['Undo to here? The conversation from this message on is taken back. These files will be restored: notes.md.']);
    assert.equal(readFileSync(notes, 'utf8'), 'one\n');
    const fold = () => page.$eval('.rewound-fold', (n) => [(n as HTMLElement).dataset.open, n.textContent]);
    assert.deepEqual(await fold(), ['false', '▸ 3 rewound messages']);
    // Folded: hidden, and never to undo to or fork from.
    assert.deepEqual(await users(), [['create notes.md', false, 2], ['change it', true, 0]]);
    assert.equal(await page.locator('.transcript .entry.rewound').count(), 4);
    assert.equal(await page.locator('.transcript .entry.rewound:visible').count(), 0);
    await page.click('.rewound-fold button.toggle');
    await waitIn(page, () => document.querySelector('.rewound-fold')?.getAttribute('data-open') === 'true');
    assert.deepEqual(await fold(), ['true', '▾ 3 rewound messages']);
    assert.deepEqual(await users(), [['create notes.md', false, 2], ['change it', false, 0]]);
    await screenshot(page, '20-rewound');

    // Someone else changes the file; undoing the first message is refused, then overwrites it.
    writeFileSync(notes, 'mine\n');
    await page.click('.entry.user >> nth=0 >> button.undo');
    await waitIn(page, () => document.querySelectorAll('.transcript .entry.user.rewound').length === 2);
    assert.equal(chat.calls.confirms.length, 3);
    assert.equal(chat.calls.confirms[1], 'Undo to here? The conversation from this message on is taken back. These files will be restored: notes.md.');
    assert.match(chat.calls.confirms[2], /these files changed since the session last wrote them: notes\.md; rewind with force to overwrite them/);
    assert.equal(existsSync(notes), false, 'the file the session created is removed');
    assert.deepEqual(chat.pageErrors, []);
  });
});

/**
 * Polls `predicate` in the page until it holds. (Playwright's waitForFunction compiles its
 * predicate with eval, which the page's Content Security Policy rightly refuses.)
 */
async function waitIn(page: Page, predicate: (arg: number) => boolean, arg = 0): Promise<void> {
  await until(() => page.evaluate(predicate, arg), `the page: ${predicate.toString()}`);
}

async function waitFor(condition: () => boolean): Promise<void> {
  await until(condition, condition.toString());
}

test('an approval card saves an edited rule for the workspace (a refused one kept to fix), a matching write then asks nobody, and Deny tells the model the reason typed', { timeout: 120_000 }, () =>
  withChat('workspace-rule', { env: () => ({ SIDECHAT_DEMO_DELAY_MS: '5' }) }, async ({ scratch, daemon, chat, page }) => {
    await send(page, 'create notes.md with hello');
    await page.waitForSelector('.approval', STEP);
    assert.equal(await page.isVisible('.approval .workspace-rule'), false);
    await page.click('.approval button.allow-workspace');
    await page.waitForSelector('.approval .workspace-rule input.rule', STEP);
    assert.equal(await page.inputValue('.approval input.rule'), 'write_file(notes.md)');
    // A rule the daemon cannot read is refused, naming the problem; the card and the text stay.
    await page.fill('.approval input.rule', 'write_file(/etc/*)');
    await page.click('.approval button.save-rule');
    await page.waitForSelector('.error .text', STEP);
    assert.match((await page.textContent('.error .text')) ?? '', /gives an absolute path; patterns are relative to the workspace root/);
    await page.waitForSelector('.approval button.save-rule:not([disabled])', STEP);
    assert.equal(await page.inputValue('.approval input.rule'), 'write_file(/etc/*)');
    await screenshot(page, '15-workspace-rule');
    await page.fill('.approval input.rule', 'write_file(*.md)');
    await page.click('.approval button.save-rule');
    await page.waitForSelector('.approval', { state: 'detached', ...STEP });
    await untilIdle(page);
    assert.equal(readFileSync(join(scratch.workspace, 'notes.md'), 'utf8'), 'hello\n');
    const listed = await daemon.request('permissions/list', {});
    assert.deepEqual(listed.stored.map((r) => r.rule), ['write_file(*.md)']);

    // The saved rule covers the next write of a Markdown file: nobody is asked.
    await send(page, 'create other.md with more');
    await waitIn(page, () => document.querySelectorAll('.entry.tool[data-status="done"]').length === 2);
    await untilIdle(page);
    assert.equal(await page.locator('.approval').count(), 0);

    // Deny with a reason: the model is told it. A redraw while it is typed (here the budget
    // figure, which follows a request) leaves the card, the text and the caret where they were.
    await send(page, 'create draft.txt with x');
    await page.waitForSelector('.approval', STEP);
    await page.click('.approval input.reason');
    await page.keyboard.type('name it ');
    const [session] = (await daemon.request('session/list', {})).sessions;
    const { snapshot } = await daemon.request('session/budget', { sessionId: session.id });
    chat.post({ type: 'budget', sessionId: session.id, snapshot: { ...snapshot, inputTokens: snapshot.inputTokens + 1 } });
    await chat.settled();
    await page.evaluate(() => new Promise<void>((resolve) => requestAnimationFrame(() => resolve())));
    await page.keyboard.type('notes.txt');
    assert.equal(await page.inputValue('.approval input.reason'), 'name it notes.txt');
    await page.click('.approval button.deny');
    await page.waitForSelector('.entry.tool[data-status="denied"]', STEP);
    await untilIdle(page);
    const transcript = await daemon.request('session/transcript', { sessionId: session.id });
    const denied = transcript.entries.flatMap((e) => e.blocks).filter((b) => b.type === 'toolResult' && b.status === 'denied');
    assert.deepEqual(denied.map((b) => (b.type === 'toolResult' ? b.output : '')), [
      'The user denied this tool call and said why: name it notes.txt\nDo not retry it as it was; take what the user said into account, and ask the user how to proceed if needed.',
    ]);
  }),
);

test('a code block is coloured and named by its language, copies and inserts its code; a Markdown table is drawn as a table', { timeout: 120_000 }, () =>
  withChat(
    'code-and-tables',
    { env: replayOf({ turns: [{ text: 'Try:\n\n```rust\nfn main() {\n    let n = 42; // the answer\n}\n```\n\n| tool | use |\n| --- | --- |\n| cargo | build |\n| rustc | compile |\n\n```\nplain text\n```\n' }] }) },
    async ({ chat, page }) => {
      await send(page, 'show me');
      await page.waitForSelector('.entry.assistant[data-streaming="false"] pre.code[data-language="rust"]', STEP);
      await untilIdle(page);
      const rust = '.entry.assistant pre.code[data-language="rust"]';
      assert.equal(await page.textContent(`${rust} .code-head .lang`), 'rust');
      assert.deepEqual(await page.locator(`${rust} .hljs-keyword`).allTextContents(), ['fn', 'let']);
      assert.deepEqual(await page.locator(`${rust} .hljs-number`).allTextContents(), ['42']);
      assert.deepEqual(await page.locator(`${rust} .hljs-comment`).allTextContents(), ['// the answer']);
      // A block naming no language: no label, no colours, the same buttons.
      const plain = '.entry.assistant pre.code:not([data-language])';
      assert.equal(await page.textContent(`${plain} .code-head .lang`), '');
      assert.equal(await page.locator(`${plain} [class^="hljs-"]`).count(), 0);
      const code = 'fn main() {\n    let n = 42; // the answer\n}\n';
      await page.click(`${rust} button.copy`);
      await page.click(`${rust} button.insert`);
      await page.click(`${plain} button.insert`);
      await waitFor(() => chat.calls.copies.length === 1 && chat.calls.inserts.length === 2);
      assert.deepEqual(chat.calls.copies, [code]);
      assert.deepEqual(chat.calls.inserts, [code, 'plain text\n']);
      // The table, its header and rows as cells.
      const rows = await page.$$eval('.entry.assistant .table-wrap table tr', (trs) => trs.map((tr) => [...tr.children].map((c) => `${c.tagName.toLowerCase()}:${c.textContent}`)));
      assert.deepEqual(rows, [
        ['th:tool', 'th:use'],
        ['td:cargo', 'td:build'],
        ['td:rustc', 'td:compile'],
      ]);
      await screenshot(page, '10-code-and-table');
      assert.deepEqual(chat.pageErrors, []);
    },
  ),
);

test('the header: the title edited in place, the model picker from initialize, the context popover against session/budget, the automatic compaction switch, the meter hidden by its setting', { timeout: 120_000 }, () =>
  withChat('header', { env: replayOf({ turns: [{ text: 'First answer.', usage: { input: 900, output: 12, cacheRead: 100, cacheWrite: 0, reasoning: 3 } }] }) }, async ({ daemon, chat, page }) => {
    const budgets: Reconciliation[] = [];
    daemon.onEvent((p) => {
      if (p.event.kind === 'budget' && p.event.actual) budgets.push(p.event.actual);
    });
    await send(page, 'hello');
    await untilReplies(page, 1);
    await untilIdle(page);
    const sessionId = chat.controller.activeSessionId ?? '';

    // The title, edited in place: Enter renames the chat.
    await page.click('button.edit-title');
    await page.fill('input.title-edit', 'Header chat');
    await page.press('input.title-edit', 'Enter');
    await page.waitForSelector('button.session-title:text-is("☰ Header chat")', STEP);
    await until(async () => (await daemon.request('session/get', { sessionId })).title === 'Header chat', 'the new title');
    // Escape leaves it as it was.
    await page.click('button.edit-title');
    await page.fill('input.title-edit', 'Not this');
    await page.press('input.title-edit', 'Escape');
    assert.equal(await page.textContent('button.session-title'), '☰ Header chat');

    // The popover's figures are the daemon's: the budget of the next request, part by part.
    await page.click('.header-info .context');
    await page.waitForSelector('.context-popover tr[data-segment="system"]', STEP);
    assert.equal(await page.getAttribute('.header-info .context', 'aria-expanded'), 'true');
    const expected = async () => {
      const s = (await daemon.request('session/budget', { sessionId })).snapshot;
      const summary = Math.min(s.summaryTokens, s.historyTokens);
      return {
        system: s.systemTokens,
        instructions: s.instructionsTokens ?? 0,
        tools: s.toolTokens,
        summary,
        history: s.historyTokens - summary,
        turn: s.latestUserTokens,
        estimate: s.inputTokens,
        usable: s.usableTokens,
      };
    };
    const shown = () =>
      page.$$eval('.context-popover table.segments tr[data-segment]', (rows) =>
        Object.fromEntries(rows.map((r) => [(r as HTMLElement).dataset.segment, Number((r as HTMLElement).dataset.tokens)])),
      );
    await until(async () => JSON.stringify(await shown()) === JSON.stringify(await expected()), 'the popover showing session/budget');
    assert.deepEqual(await shown(), await expected());
    const want = await expected();
    assert.equal(await page.textContent('.context-popover tr[data-segment="usable"] td'), want.usable.toLocaleString('en-US'));
    // The estimate before the last request against the provider's count, the difference signed.
    await until(() => budgets.length > 0, 'a budget event with the provider actuals');
    const actual = budgets[budgets.length - 1];
    await page.waitForSelector(`.context-popover .reconcile[data-actual="${actual.actualInputTokens}"]`, STEP);
    const sign = actual.difference > 0 ? '+' : actual.difference < 0 ? '−' : '±';
    assert.equal(
      await page.textContent('.context-popover .reconcile'),
      `Last request: estimated ${actual.estimatedInputTokens.toLocaleString('en-US')}, provider reported ${actual.actualInputTokens.toLocaleString('en-US')} (${sign}${Math.abs(actual.difference).toLocaleString('en-US')})`,
    );
    // The chat's tokens by kind and its cost, as session/get and session/cost say.
    const byKind = () =>
      page.$$eval('.context-popover table.by-kind tr[data-kind]', (rows) =>
        Object.fromEntries(rows.map((r) => [(r as HTMLElement).dataset.kind, Number((r as HTMLElement).dataset.tokens)])),
      );
    const session = await daemon.request('session/get', { sessionId });
    await until(async () => JSON.stringify(await byKind()) === JSON.stringify(session.tokensByKind), 'tokens by kind');
    const { cost } = await daemon.request('session/cost', { sessionId });
    const requests = cost.byRequest.reduce((n, r) => n + r.lines, 0);
    assert.ok(requests >= 1);
    await waitIn(page, (n) => (document.querySelector('.context-popover .cost-line')?.textContent ?? '').endsWith(n === 1 ? ' · 1 request' : ` · ${n} requests`), requests);
    await screenshot(page, '11-context-popover');

    // The automatic compaction switch: session/update {autoCompact}, read back.
    assert.equal(await page.isChecked('.context-popover label.auto-compact input'), true);
    await page.click('.context-popover label.auto-compact input');
    await until(async () => (await daemon.request('session/get', { sessionId })).autoCompact === false, 'autoCompact off');
    await waitIn(page, () => (document.querySelector('.context-popover label.auto-compact input') as HTMLInputElement | null)?.checked === false);

    // The switch keeps the keyboard's focus while the popover is drawn again (here by the
    // session update its own change brings back).
    const box = '.context-popover label.auto-compact input';
    await page.focus(box);
    await page.$eval(box, (input) => {
      (input as HTMLElement).dataset.drawing = 'before';
    });
    await page.keyboard.press('Space');
    await until(async () => (await daemon.request('session/get', { sessionId })).autoCompact === true, 'autoCompact on');
    await waitIn(page, () => {
      const input = document.querySelector('.context-popover label.auto-compact input') as HTMLInputElement | null;
      return input !== null && input.dataset.drawing === undefined && input.checked;
    });
    assert.equal(await page.evaluate(() => document.activeElement?.matches('.context-popover label.auto-compact input')), true);

    // Escape closes the popover and gives the focus back to the meter.
    await page.keyboard.press('Escape');
    await page.waitForSelector('.context-popover', { state: 'hidden', ...STEP });
    assert.equal(await page.evaluate(() => document.activeElement?.classList.contains('context')), true);

    // The model picker lists initialize's accounts and models; a choice is session/update.
    const options = await page.$$eval('select.model-picker optgroup', (groups) =>
      groups.map((g) => [(g as HTMLOptGroupElement).label, [...g.querySelectorAll('option')].map((o) => o.textContent)]),
    );
    assert.deepEqual(options, [
      ['demo (demo)', ['demo']],
      ['replay', ['replay']],
    ]);
    assert.equal(await page.inputValue('select.model-picker'), JSON.stringify(['replay', 'replay']));
    await page.selectOption('select.model-picker', JSON.stringify(['demo', 'demo']));
    await until(async () => {
      const s = await daemon.request('session/get', { sessionId });
      return s.account === 'demo' && s.model === 'demo';
    }, 'the demo model chosen');
    await send(page, 'and now?');
    await untilReplies(page, 2);
    assert.match((await page.textContent(lastAssistant)) ?? '', /\[demo model, offline\] You said: "and now\?"/);

    // The setting hides the meter (the cost stays).
    chat.post({ type: 'settings', settings: { showContextMeter: false } });
    await page.waitForSelector('.header-info .context[data-meter="off"]', STEP);
    assert.equal(await page.isVisible('.header-info .context .bar'), false);
    assert.equal(await page.isVisible('.header-info .context .cost'), true);
    assert.deepEqual(chat.pageErrors, []);
  }),
);

/** axe-core's violations of the page with a serious or critical impact, as `rule: targets`. */
async function seriousViolations(page: Page): Promise<string[]> {
  // Evaluated through the debugging protocol, which the page's CSP does not govern.
  await page.evaluate(readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8'));
  const violations = await page.evaluate(async () => {
    const axe = (window as unknown as { axe: { run: (context: Document, options: unknown) => Promise<{ violations: { id: string; impact: string | null; nodes: { target: unknown[] }[] }[] }> } }).axe;
    const result = await axe.run(document, { resultTypes: ['violations'] });
    return result.violations.map((v) => ({ id: v.id, impact: v.impact, targets: v.nodes.map((n) => JSON.stringify(n.target)) }));
  });
  return violations.filter((v) => v.impact === 'serious' || v.impact === 'critical').map((v) => `${v.id}: ${v.targets.join(' ')}`);
}

test('light, dark and high-contrast: the main states drawn in each (screenshots), no serious or critical axe violation in any, roles labelled, a long message folded, the last entry whole', { timeout: 180_000 }, () =>
  withChat('themes', { env: replayOf({ turns: [
    { text: 'Here:\n\n```ts\nconst answer: number = 42;\n```\n\n| a | b |\n| - | - |\n| 1 | 2 |\n' },
    { text: 'Writing it.', toolCalls: [{ name: 'write_file', input: { path: 'notes.md', content: 'hello\n' } }] },
    { text: 'Done.' },
  ] }) }, async ({ page }) => {
    const long = Array.from({ length: 30 }, (_, i) => `line ${i + 1}`).join('\n');
    await send(page, long);
    await untilReplies(page, 1);
    await untilIdle(page);
    // The long message is folded to its first lines until "Show all".
    const expand = '.entry.user button.expand';
    assert.equal(await page.getAttribute(expand, 'data-label'), 'Show all (30 lines)');
    const folded = await page.$eval('.entry.user .text', (e) => e.scrollHeight > e.clientHeight);
    assert.equal(folded, true, 'the long message is cut to its first lines');
    await page.click(expand);
    assert.equal(await page.$eval('.entry.user .text', (e) => e.scrollHeight > e.clientHeight), false);
    assert.equal(await page.getAttribute(expand, 'data-label'), 'Show less');

    await send(page, 'write notes');
    await page.waitForSelector('.approval', STEP);
    // Roles at a glance.
    assert.deepEqual(
      await page.$$eval('.transcript .entry', (entries) => entries.map((e) => `${e.classList[1]}:${(e as HTMLElement).dataset.role}`)),
      ['user:You', 'assistant:Model', 'user:You', 'assistant:Model', 'tool:Tool'],
    );
    // The newest entry is drawn whole at the bottom of the transcript.
    const clipped = await page.evaluate(() => {
      const scroller = document.querySelector('.transcript-scroller') as HTMLElement;
      const entries = document.querySelectorAll('.transcript .entry');
      const last = entries[entries.length - 1] as HTMLElement;
      return last.getBoundingClientRect().bottom - scroller.getBoundingClientRect().bottom;
    });
    assert.ok(clipped <= 0, `the last entry reaches ${clipped}px past the transcript's bottom`);

    for (const theme of THEMES) {
      await page.goto(`${rig.url}?theme=${theme}`);
      await page.waitForSelector('.approval', STEP);
      await page.waitForSelector('.header-info .context .bar', STEP);
      await page.waitForSelector('.entry.assistant pre.code[data-language="ts"] .hljs-keyword', STEP);
      await screenshot(page, `theme-${theme}-approval`);
      assert.deepEqual(await seriousViolations(page), [], `axe in the ${theme} theme, approval card`);
      await page.click('.header-info .context');
      await page.waitForSelector('.context-popover tr[data-segment="system"]', STEP);
      await screenshot(page, `theme-${theme}-context`);
      assert.deepEqual(await seriousViolations(page), [], `axe in the ${theme} theme, context popover`);
    }
  }),
);

test('the keyboard: Shift+Enter a new line and Enter sends, Up takes the last waiting message back to edit, Escape stops, focus is visible', { timeout: 120_000 }, () =>
  withChat('keyboard', { env: () => ({ SIDECHAT_DEMO_DELAY_MS: '25' }) }, async ({ page }) => {
    await page.focus('textarea.input');
    await page.keyboard.type('first line');
    await page.keyboard.press('Shift+Enter');
    await page.keyboard.type('second line');
    await page.keyboard.press('Enter');
    await page.waitForSelector('.entry.user', STEP);
    assert.equal(await page.textContent('.entry.user .text'), 'first line\nsecond line');
    await untilReplies(page, 1);
    await untilIdle(page);

    // Up in the empty composer: the last waiting message comes back to edit, withdrawn.
    await send(page, 'create notes.md with hello');
    await page.waitForSelector('.approval', STEP);
    await send(page, 'also check the README');
    await page.waitForSelector('.waiting-item[data-pending-id]', STEP);
    await page.keyboard.press('ArrowUp');
    await page.waitForSelector('.waiting-item[data-pending-id]', { state: 'detached', ...STEP });
    assert.equal(await page.inputValue('textarea.input'), 'also check the README');
    await page.keyboard.type(' too');
    await page.keyboard.press('Enter');
    await page.waitForSelector('.waiting-item[data-pending-id] .text:text-is("also check the README too")', STEP);

    // The command list by keyboard: the first is picked unless Down moves on; Enter picks.
    await page.keyboard.type('/co');
    await page.waitForSelector('.completion[aria-busy="false"]:not([hidden]) li', STEP);
    await page.keyboard.press('ArrowDown');
    await page.keyboard.press('Enter');
    // `/compact` takes an argument: a space follows, ready for it.
    assert.equal(await page.inputValue('textarea.input'), '/compact ');
    assert.equal(await page.evaluate(() => document.activeElement?.classList.contains('input')), true);
    await page.fill('textarea.input', '');

    // Focus is visible on what the keyboard reaches.
    await page.keyboard.press('Tab');
    const outline = await page.evaluate(() => {
      const active = document.activeElement as HTMLElement;
      return `${active.className} ${getComputedStyle(active).outlineStyle}`;
    });
    assert.equal(outline, 'send solid');

    // Escape stops the run (here, waiting for the approval).
    await page.keyboard.press('Escape');
    await untilIdle(page);
    await page.waitForSelector('.approval', { state: 'detached', ...STEP });
  }),
);

test('a missing daemon in each theme: the banner drawn (screenshots) with no serious or critical axe violation', { timeout: 120_000 }, () =>
  withChat('themes-missing-daemon', { missingBinary: true }, async ({ page }) => {
    for (const theme of THEMES) {
      await page.goto(`${rig.url}?theme=${theme}`);
      await page.waitForSelector('.banner[data-state="failed"] button.retry', STEP);
      await screenshot(page, `theme-${theme}-missing-daemon`);
      assert.deepEqual(await seriousViolations(page), [], `axe in the ${theme} theme, missing daemon`);
    }
  }),
);

test('the transcript is a polite live region, busy while a reply streams so it is read once whole', { timeout: 120_000 }, () =>
  withChat('live-region', { env: () => ({ SIDECHAT_DEMO_DELAY_MS: '25' }) }, async ({ page }) => {
    assert.deepEqual(
      await page.$eval('.transcript', (t) => [t.getAttribute('role'), t.getAttribute('aria-live'), t.getAttribute('aria-label')]),
      ['log', 'polite', 'Conversation'],
    );
    await send(page, 'tell me a story');
    await page.waitForSelector('.entry.assistant[data-streaming="true"]', STEP);
    assert.equal(await page.getAttribute('.transcript', 'aria-busy'), 'true');
    await untilReplies(page, 1);
    await untilIdle(page);
    assert.equal(await page.getAttribute('.transcript', 'aria-busy'), 'false');
  }),
);
