// A reply while it streams, drawn in the light, dark and high-contrast themes: three pages on
// one daemon, each with its own controller, whose events are held after the reply's first words
// (held by count, not by time), so each page shows the same moment of the stream for its
// screenshot (artifacts/theme-<theme>-streaming.png, beside the other theme screenshots). Let
// go, every page ends with the whole reply. On failure each page's screenshot is saved.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

import type { DaemonLike } from '../src/host/controller';
import type { Daemon } from '../src/host/daemon';
import type { SessionEventParams } from '../src/model/wire';
import { openChat, pageRig, Scratch, screenshot, STEP, THEMES, until, waitIn } from './harness';

const rig = pageRig();

/**
 * The daemon's events as the controllers get them, held from the `words + 1`-th text delta on
 * once `holdAfter` is called, until `release`.
 */
class Gate {
  private readonly listeners = new Set<(params: SessionEventParams) => void>();
  private held: SessionEventParams[] | undefined;
  private words = 0;
  private limit: number | undefined;

  constructor(private readonly daemon: Daemon) {
    daemon.onEvent((params) => this.pass(params));
  }

  holdAfter(words: number): void {
    this.limit = words;
    this.words = 0;
  }

  get holding(): boolean {
    return this.held !== undefined;
  }

  release(): void {
    const held = this.held ?? [];
    this.held = undefined;
    this.limit = undefined;
    for (const params of held) this.emit(params);
  }

  /** A client of the daemon whose events pass through the gate. */
  client(): DaemonLike {
    const daemon = this.daemon;
    return {
      get status() {
        return daemon.status;
      },
      request: (method, params) => daemon.request(method, params),
      onEvent: (listener) => {
        this.listeners.add(listener);
        return () => this.listeners.delete(listener);
      },
      onStatus: (listener) => daemon.onStatus(listener),
      restart: () => daemon.restart(),
    };
  }

  private pass(params: SessionEventParams): void {
    if (this.held) {
      this.held.push(params);
      return;
    }
    if (this.limit !== undefined && params.event.kind === 'textDelta' && ++this.words > this.limit) {
      this.held = [params];
      return;
    }
    this.emit(params);
  }

  private emit(params: SessionEventParams): void {
    for (const listener of this.listeners) listener(params);
  }
}

const REPLY = 'Here is how the parser recovers: it skips to the next statement boundary, records the error with its span, and carries on so that one typo reports once.';

test('a streaming reply in each theme: the same first words and the working state in every page (screenshots), then the whole reply', { timeout: 180_000 }, async () => {
  const scratch = new Scratch();
  const script = join(scratch.dir, 'script.json');
  writeFileSync(script, JSON.stringify({ turns: [{ text: 'Hello.' }, { thinking: 'The parser question: recovery.', text: REPLY }], title: { text: 'Parser recovery' } }));
  const daemon = scratch.daemon({ SIDECHAT_REPLAY_SCRIPT: script, SIDECHAT_ACCOUNT: 'replay' });
  const gate = new Gate(daemon);
  const chats: (Awaited<ReturnType<typeof openChat>> & { theme: string })[] = [];
  try {
    await daemon.start();
    const [first, ...others] = THEMES;
    chats.push({ ...(await openChat(rig.browser, `${rig.url}?theme=${first}`, gate.client(), scratch.workspace)), theme: first });
    const page = chats[0].page;
    await page.fill('textarea.input', 'hello');
    await page.press('textarea.input', 'Enter');
    await page.waitForSelector('.entry.assistant[data-streaming="false"]', STEP);
    await waitIn(page, () => document.querySelector('#app')?.getAttribute('data-state') === 'idle');
    // The title is the first exchange's last event: the other pages open the chat after it, so
    // each has every event before the next run and none misses one (which it would refetch).
    await page.waitForSelector('button.session-title:text-is("☰ Parser recovery")', STEP);
    // The other themes' pages open the same chat.
    for (const theme of others) {
      const chat = await openChat(rig.browser, `${rig.url}?theme=${theme}`, gate.client(), scratch.workspace);
      chats.push({ ...chat, theme });
      await chat.page.waitForSelector('.entry.assistant[data-streaming="false"]', STEP);
    }

    gate.holdAfter(8);
    await page.fill('textarea.input', 'How does the parser recover from errors?');
    await page.press('textarea.input', 'Enter');
    await until(() => gate.holding, 'the reply held after its first words');
    const firstWords = REPLY.split(' ').slice(0, 8).join(' ');
    for (const chat of chats) {
      await waitIn(
        chat.page,
        (words) => {
          const entry = document.querySelector('.entry.assistant[data-streaming="true"]');
          return document.querySelector('#app')?.getAttribute('data-state') === 'running' && (entry?.textContent ?? '').includes(words);
        },
        firstWords,
      );
      assert.equal(await chat.page.isVisible('button.stop'), true, `Stop offered in the ${chat.theme} theme`);
      await screenshot(chat.page, `theme-${chat.theme}-streaming`);
    }

    gate.release();
    for (const chat of chats) {
      await waitIn(chat.page, () => document.querySelectorAll('.entry.assistant[data-streaming="false"]').length === 2);
      await waitIn(chat.page, () => document.querySelector('#app')?.getAttribute('data-state') === 'idle');
      assert.match((await chat.page.textContent('.transcript .entry.assistant >> nth=-1')) ?? '', /one typo reports once\./);
      assert.deepEqual(chat.pageErrors, []);
    }
  } catch (error) {
    for (const chat of chats) await screenshot(chat.page, `failure-streaming-${chat.theme}`).catch(() => undefined);
    throw error;
  } finally {
    for (const chat of chats) {
      chat.controller.dispose();
      await chat.page.close();
    }
    await daemon.dispose();
    scratch.dispose();
  }
});
