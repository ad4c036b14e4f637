// The header's effort picker against the real daemon, in headless Chromium: the levels of the
// session's model beside the model picker, the level in effect selected, a choice sent as
// `session/update {effort}` and read back, "default" sent as `null` (the account's default),
// the levels following a change of model, and no picker for a model that takes none.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import type { Page } from 'playwright-core';

import { openChat, pageRig, Scratch, screenshot, STEP, until, waitIn } from './harness';

const rig = pageRig();

/** Two accounts whose models take an effort (no request is sent, so no upstream is needed). */
const CONFIG = `default_account = "claude"

[accounts.claude]
kind = "anthropic"
api_key_env = "TEST_ANTHROPIC_KEY"
default_model = "claude-sonnet-4-5"
effort = "medium"

[accounts.gpt]
kind = "openai"
api_key_env = "TEST_OPENAI_KEY"
base_url = "http://127.0.0.1:9/v1"
default_model = "gpt-5.1"
`;

function options(page: Page): Promise<string[]> {
  return page.$$eval('select.effort-picker option', (all) => all.map((o) => o.textContent ?? ''));
}

test('the effort picker: the levels the model takes, the level in effect, a choice set with session/update, default as the account\'s, none for a model without effort', { timeout: 120_000 }, async () => {
  const scratch = new Scratch();
  mkdirSync(join(scratch.dir, 'config', 'sidechat'), { recursive: true });
  writeFileSync(join(scratch.dir, 'config', 'sidechat', 'config.toml'), CONFIG);
  const daemon = scratch.daemon({ TEST_ANTHROPIC_KEY: 'test-key', TEST_OPENAI_KEY: 'test-key' });
  let chat: Awaited<ReturnType<typeof openChat>> | undefined;
  try {
    await daemon.start();
    chat = await openChat(rig.browser, rig.url, daemon, scratch.workspace);
    const page = chat.page;
    await page.click('button.new-session');
    await page.waitForSelector('select.effort-picker', { state: 'visible', ...STEP });
    const sessionId = await until(() => chat?.controller.activeSessionId, 'the new chat');
    const effort = async () => (await daemon.request('session/get', { sessionId })).effort ?? null;

    // Claude through Anthropic thinks with a budget: every level; the account's medium is the
    // default, in effect while the session has no level of its own.
    assert.deepEqual(await options(page), ['effort: default (medium)', 'effort: minimal', 'effort: low', 'effort: medium', 'effort: high']);
    assert.equal(await page.inputValue('select.effort-picker'), '');
    assert.equal(await effort(), 'medium');
    assert.equal(await page.getAttribute('select.effort-picker', 'aria-label'), 'Reasoning effort');
    // Beside the model picker.
    assert.deepEqual(await page.$$eval('.header-info > *', (all) => all.slice(0, 2).map((e) => e.className)), ['model-picker', 'effort-picker']);

    await page.selectOption('select.effort-picker', 'high');
    await until(async () => (await effort()) === 'high', 'effort high');
    await waitIn(page, () => (document.querySelector('select.effort-picker') as HTMLSelectElement).value === 'high');
    await screenshot(page, 'effort-picker');

    // Default: the session's own level goes (null), the account's medium applies again.
    await page.selectOption('select.effort-picker', '');
    await until(async () => (await effort()) === 'medium', "the account's default");
    await waitIn(page, () => (document.querySelector('select.effort-picker') as HTMLSelectElement).value === '');

    // gpt-5.1 through OpenAI takes reasoning_effort without minimal; its account sets no default,
    // and the session has none of its own (default above sent null), so none is in effect.
    await page.selectOption('select.model-picker', JSON.stringify(['gpt', 'gpt-5.1']));
    await until(async () => (await daemon.request('session/get', { sessionId })).model === 'gpt-5.1', 'gpt-5.1 chosen');
    await waitIn(page, () => document.querySelectorAll('select.effort-picker option').length === 4);
    assert.deepEqual(await options(page), ['effort: default', 'effort: low', 'effort: medium', 'effort: high']);
    assert.equal(await effort(), null);
    assert.equal(await page.inputValue('select.effort-picker'), '');
    await page.selectOption('select.effort-picker', 'low');
    await until(async () => (await effort()) === 'low', 'effort low');

    // The demo model takes no effort: no picker.
    await page.selectOption('select.model-picker', JSON.stringify(['demo', 'demo']));
    await page.waitForSelector('select.effort-picker', { state: 'hidden', ...STEP });
    assert.deepEqual(chat.pageErrors, []);
  } catch (error) {
    if (chat) await screenshot(chat.page, 'failure-effort-picker').catch(() => undefined);
    throw error;
  } finally {
    chat?.controller.dispose();
    await chat?.page.close();
    await daemon.dispose();
    scratch.dispose();
  }
});
