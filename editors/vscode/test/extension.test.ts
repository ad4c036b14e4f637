// The extension host with a stubbed `vscode` module and the real daemon: activation, the
// webview's HTML and CSP, the page's first messages, a send, "Ask sidechat about the
// selection", a restart when a sidechat setting changes, a missing binary, and finding the
// binary.

import { test, afterEach } from 'node:test';
import assert from 'node:assert/strict';
import { chmodSync, existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import * as vscode from 'vscode';
import { __stub } from './stubs/vscode';
import { activate, type ChatViewProvider } from '../src/host/extension';
import { resolveBinary } from '../src/host/daemon';
import type { DaemonStatus, HostToPage, PageToHost } from '../src/model/messages';
import { Scratch, sidechatBinary, until } from './harness';

const contexts: { subscriptions: { dispose(): unknown }[] }[] = [];
const scratches: Scratch[] = [];

afterEach(async () => {
  for (const context of contexts.splice(0)) for (const s of context.subscriptions) await s.dispose();
  for (const scratch of scratches.splice(0)) scratch.dispose();
  __stub.reset();
});

function activateWith(config: Record<string, unknown>) {
  // The daemon inherits the host's environment: keep this machine's keys and settings out.
  for (const key of Object.keys(process.env)) {
    if (/^(SIDECHAT_|ANTHROPIC_|OPENAI_)/.test(key)) delete process.env[key];
  }
  const scratch = new Scratch();
  scratches.push(scratch);
  __stub.config = config;
  __stub.workspaceFolders = [{ uri: vscode.Uri.file(scratch.workspace) }];
  const context = { subscriptions: [] as { dispose(): unknown }[], extensionUri: vscode.Uri.file('/ext') };
  contexts.push(context);
  activate(context as never);
  return { scratch, context };
}

/** A webview view as VS Code hands it to the provider, recording what the host posts. */
function fakeView() {
  const posted: HostToPage[] = [];
  let receive: ((message: PageToHost) => Promise<void>) | undefined;
  const view = {
    visible: true,
    show: () => undefined,
    onDidDispose: () => ({ dispose: () => undefined }),
    webview: {
      options: {} as Record<string, unknown>,
      html: '',
      cspSource: 'https://webview.test',
      asWebviewUri: (uri: vscode.Uri) => uri,
      postMessage: async (message: HostToPage) => {
        posted.push(message);
        return true;
      },
      onDidReceiveMessage: (handler: (message: PageToHost) => Promise<void>) => {
        receive = handler;
        return { dispose: () => undefined };
      },
    },
  };
  return { view, posted, send: (message: PageToHost) => receive?.(message) ?? Promise.resolve() };
}

test('activation serves a strict page, and the page drives the real daemon', { timeout: 120_000 }, async () => {
  const scratch0 = new Scratch();
  scratches.push(scratch0);
  const { scratch } = activateWith({
    'sidechat.path': sidechatBinary(),
    'sidechat.extraArgs': ['--db', join(scratch0.dir, 'sidechat.db')],
    'sidechat.env': { HOME: scratch0.dir, XDG_CONFIG_HOME: join(scratch0.dir, 'c'), XDG_DATA_HOME: join(scratch0.dir, 'd'), SIDECHAT_DEMO_DELAY_MS: '0', SIDECHAT_ACCOUNT: 'demo' },
  });
  const provider = __stub.viewProviders.get('sidechat.chat') as ChatViewProvider;
  assert.ok(provider, 'the chat view provider is registered');
  assert.deepEqual([...__stub.commands.keys()].sort(), ['sidechat.askAboutSelection', 'sidechat.newSession', 'sidechat.restartDaemon', 'sidechat.setRollover']);

  const { view, posted, send } = fakeView();
  provider.resolveWebviewView(view as never);
  const html = view.webview.html;
  const nonce = /script-src 'nonce-([A-Za-z0-9]+)'/.exec(html)?.[1];
  assert.ok(nonce, 'the CSP allows scripts by nonce only');
  assert.match(html, new RegExp(`<script nonce="${nonce}" src="file:///ext/dist/webview.js"></script>`));
  assert.match(html, /default-src 'none'/);
  assert.doesNotMatch(html, /unsafe-inline|unsafe-eval/);
  assert.equal(view.webview.options.enableScripts, true);

  await send({ type: 'ready' });
  await until(() => posted.find((m) => m.type === 'daemon' && m.status.state === 'ready'), 'the daemon to be ready');
  await send({ type: 'send', text: 'hello', attachments: [], clientMessageId: 'c1' });
  const sent = await until(() => posted.find((m) => m.type === 'sent'), 'the send to be answered');
  assert.deepEqual(sent, { type: 'sent', clientMessageId: 'c1', queued: false });
  const reset = await until(() => posted.find((m) => m.type === 'reset'), 'the new session to load');
  assert.equal(reset.type === 'reset' && reset.transcript.sessionId.startsWith('ses_'), true);
  await until(
    () => posted.find((m) => m.type === 'events' && m.events.some((e) => e.event.kind === 'runFinished')),
    'the run to finish',
  );
  const sessions = await until(() => [...posted].reverse().find((m) => m.type === 'sessions' && m.sessions.length === 1), 'the session list');
  assert.equal(sessions.type === 'sessions' && sessions.sessions[0].workspaceRoot, scratch.workspace);

  // Ask about the selection: the file, relative to the workspace, and its line range.
  __stub.activeTextEditor = {
    selection: { isEmpty: false, start: { line: 1, character: 0 }, end: { line: 2, character: 5 } },
    document: { uri: vscode.Uri.file(join(scratch.workspace, 'src', 'a.ts')), getText: () => 'const a = 1;\nlet b' },
  };
  await vscode.commands.executeCommand('sidechat.askAboutSelection');
  const attach = posted.find((m) => m.type === 'attach');
  assert.deepEqual(attach, { type: 'attach', attachment: { name: 'src/a.ts:2-3', text: 'const a = 1;\nlet b' } });

  // Copy from a code block goes to the editor's clipboard.
  await send({ type: 'copy', text: 'cargo build' });
  assert.equal(__stub.clipboard, 'cargo build');

  // Insert from a code block replaces each selection of the editor last used.
  const edits: { at: unknown; text: string }[] = [];
  const selections = [{ start: { line: 0, character: 0 }, end: { line: 0, character: 5 } }, { start: { line: 3, character: 2 }, end: { line: 3, character: 2 } }];
  __stub.activeTextEditor = {
    selections,
    edit: async (build: (edit: { replace(at: unknown, text: string): void }) => void) => {
      build({ replace: (at, text) => void edits.push({ at, text }) });
      return true;
    },
  };
  await send({ type: 'insert', text: 'fn main() {}\n' });
  assert.deepEqual(edits, selections.map((at) => ({ at, text: 'fn main() {}\n' })));
  // With no editor open, the user is told where the code would go.
  __stub.activeTextEditor = undefined;
  await send({ type: 'insert', text: 'x' });
  assert.deepEqual(__stub.infos, ['Open a file to insert the code into.']);
});

test('changing a sidechat setting the daemon starts with restarts it, and the view follows; the page\'s own setting (showContextMeter) only goes to the page', { timeout: 120_000 }, async () => {
  const scratch0 = new Scratch();
  scratches.push(scratch0);
  const env = { HOME: scratch0.dir, XDG_CONFIG_HOME: join(scratch0.dir, 'c'), XDG_DATA_HOME: join(scratch0.dir, 'd'), SIDECHAT_DEMO_DELAY_MS: '0', SIDECHAT_ACCOUNT: 'demo' };
  const first = join(scratch0.dir, 'first.db');
  const second = join(scratch0.dir, 'second.db');
  activateWith({ 'sidechat.path': sidechatBinary(), 'sidechat.extraArgs': ['--db', first], 'sidechat.env': env });
  const provider = __stub.viewProviders.get('sidechat.chat') as ChatViewProvider;
  const { view, posted, send } = fakeView();
  provider.resolveWebviewView(view as never);
  await send({ type: 'ready' });
  await until(() => posted.find((m) => m.type === 'daemon' && m.status.state === 'ready'), 'the daemon to be ready');
  await send({ type: 'send', text: 'hello', attachments: [], clientMessageId: 'c1' });
  await until(() => posted.find((m) => m.type === 'events' && m.events.some((e) => e.event.kind === 'runFinished')), 'the run to finish');
  const starts = () => __stub.output.filter((line) => line.startsWith('starting ')).length;
  assert.equal(starts(), 1);
  // The page is told the settings it follows when it starts.
  assert.deepEqual(posted.filter((m) => m.type === 'settings'), [{ type: 'settings', settings: { showContextMeter: true } }]);

  // Another extension's setting: the daemon keeps running. (A restart would stop it at once, so
  // the next request would find a new process.)
  __stub.changeConfig({ 'editor.fontSize': 14 });
  posted.length = 0;
  await send({ type: 'send', text: 'again', attachments: [], clientMessageId: 'c2' });
  await until(() => posted.find((m) => m.type === 'events' && m.events.some((e) => e.event.kind === 'runFinished')), 'the second run to finish');
  assert.equal(starts(), 1);
  assert.deepEqual(posted.filter((m) => m.type === 'daemon'), []);

  // sidechat.showContextMeter is the page's: the page is told, the daemon keeps running.
  posted.length = 0;
  __stub.changeConfig({ 'sidechat.showContextMeter': false });
  assert.deepEqual(posted.filter((m) => m.type === 'settings'), [{ type: 'settings', settings: { showContextMeter: false } }]);
  await send({ type: 'send', text: 'once more', attachments: [], clientMessageId: 'c3' });
  await until(() => posted.find((m) => m.type === 'events' && m.events.some((e) => e.event.kind === 'runFinished')), 'the third run to finish');
  assert.equal(starts(), 1);
  assert.deepEqual(posted.filter((m) => m.type === 'daemon'), []);

  // sidechat.extraArgs: restarted with the new database; the view rebuilds from it (no chats yet).
  posted.length = 0;
  __stub.changeConfig({ 'sidechat.extraArgs': ['--db', second] });
  await until(() => posted.find((m) => m.type === 'sessions' && m.sessions.length === 0), 'the view to show the new database');
  assert.deepEqual(
    posted.flatMap((m) => (m.type === 'daemon' ? [m.status.state] : [])),
    ['starting', 'ready'],
  );
  assert.equal(starts(), 2);
  assert.equal(__stub.output.filter((line) => line.startsWith('starting ')).pop(), `starting ${sidechatBinary()} serve --db ${second}`);
  assert.ok(existsSync(second));

  // sidechat.path pointing nowhere: the daemon stops, and the view and a message say why.
  posted.length = 0;
  __stub.changeConfig({ 'sidechat.path': join(scratch0.dir, 'missing', 'sidechat') });
  const failed = await until(() => posted.find((m) => m.type === 'daemon' && m.status.state === 'failed'), 'the failure');
  assert.equal(failed.type === 'daemon' && failed.status.state === 'failed' && failed.status.message, `sidechat was not found at ${join(scratch0.dir, 'missing', 'sidechat')} (the sidechat.path setting).`);
  assert.equal(__stub.errors.length, 1);

  // Set back: it starts again on its own.
  posted.length = 0;
  __stub.changeConfig({ 'sidechat.path': sidechatBinary() });
  await until(() => posted.find((m) => m.type === 'daemon' && m.status.state === 'ready'), 'the daemon to be ready again');
  await until(() => posted.find((m) => m.type === 'sessions'), 'the view to be rebuilt');
  assert.equal(starts(), 3);
});

test('once the extension is deactivated, a late request starts no daemon', { timeout: 120_000 }, async () => {
  const scratch0 = new Scratch();
  scratches.push(scratch0);
  const env = { HOME: scratch0.dir, XDG_CONFIG_HOME: join(scratch0.dir, 'c'), XDG_DATA_HOME: join(scratch0.dir, 'd'), SIDECHAT_ACCOUNT: 'demo' };
  const { context } = activateWith({ 'sidechat.path': sidechatBinary(), 'sidechat.extraArgs': ['--db', join(scratch0.dir, 'sidechat.db')], 'sidechat.env': env });
  const provider = __stub.viewProviders.get('sidechat.chat') as ChatViewProvider;
  const { view, posted, send } = fakeView();
  provider.resolveWebviewView(view as never);
  await send({ type: 'ready' });
  await until(() => posted.find((m) => m.type === 'daemon' && m.status.state === 'ready'), 'the daemon to be ready');
  for (const s of context.subscriptions.splice(0)) await s.dispose();

  // The view's controller outlives the daemon (a refresh on its way does the same).
  await send({ type: 'send', text: 'too late', attachments: [], clientMessageId: 'c1' });
  const sent = await until(() => posted.find((m) => m.type === 'sent'), 'the send to be answered');
  assert.deepEqual(sent, { type: 'sent', clientMessageId: 'c1', queued: false, error: 'sidechat has been shut down with the extension' });
  assert.equal(__stub.output.filter((line) => line.startsWith('starting ')).length, 1);
});

test('a missing binary: an error naming the path, with a button that opens the setting', { timeout: 120_000 }, async () => {
  __stub.errorChoice = 'Open setting';
  activateWith({ 'sidechat.path': '/nowhere/sidechat' });
  await until(() => __stub.errors[0], 'the error message');
  assert.equal(__stub.errors[0], 'sidechat was not found at /nowhere/sidechat (the sidechat.path setting).');
  assert.deepEqual(__stub.errorItems, [['Open setting']]);
  await until(() => __stub.executed.find((c) => c[0] === 'workbench.action.openSettings'), 'the settings to open');
  assert.deepEqual(
    __stub.executed.find((c) => c[0] === 'workbench.action.openSettings'),
    ['workbench.action.openSettings', 'sidechat.path'],
  );
  assert.ok(__stub.output.some((line) => line.includes('Tried: /nowhere/sidechat')));
});

test('the binary is found in the setting, then PATH, then ~/.cargo/bin', { timeout: 120_000 }, () => {
  const scratch = new Scratch();
  scratches.push(scratch);
  const make = (dir: string) => {
    mkdirSync(dir, { recursive: true });
    const path = join(dir, 'sidechat');
    writeFileSync(path, '#!/bin/sh\n');
    chmodSync(path, 0o755);
    return path;
  };
  const home = scratch.dir;
  const onPath = join(home, 'bin2');
  const empty = join(home, 'bin1');
  mkdirSync(empty);
  const cargo = make(join(home, '.cargo', 'bin'));
  assert.deepEqual(resolveBinary('', `${empty}:${onPath}`, home), {
    path: cargo,
    tried: [join(empty, 'sidechat'), join(onPath, 'sidechat'), cargo],
  });
  const first = make(onPath);
  assert.deepEqual(resolveBinary(undefined, `${empty}:${onPath}`, home), { path: first, tried: [join(empty, 'sidechat'), first] });
  assert.deepEqual(resolveBinary('~/.cargo/bin/sidechat', '', home), { path: cargo, tried: [cargo] });
  const notExecutable = join(home, 'plain');
  writeFileSync(notExecutable, '');
  assert.deepEqual(resolveBinary(notExecutable, onPath, home), { tried: [notExecutable] });
});

test('a daemon that keeps dying is restarted with a doubling delay', { timeout: 120_000 }, async () => {
  const scratch = new Scratch();
  scratches.push(scratch);
  const daemon = scratch.daemon();
  const seen: DaemonStatus[] = [];
  daemon.onStatus((status) => seen.push(status));
  try {
    await daemon.start();
    for (let crash = 0; crash < 2; crash++) {
      const readies = seen.filter((s) => s.state === 'ready').length;
      process.kill(daemon.pid ?? 0, 'SIGKILL');
      await until(() => (seen.filter((s) => s.state === 'ready').length > readies ? true : undefined), 'the restart');
    }
    const delays = seen.flatMap((s) => (s.state === 'crashed' ? [s.restartInMs] : []));
    assert.deepEqual(delays, [200, 400]);
    assert.deepEqual(
      seen.map((s) => s.state),
      ['starting', 'ready', 'crashed', 'ready', 'crashed', 'ready'],
    );
  } finally {
    await daemon.stop();
  }
});

test('"Set idle rollover" sets the shown chat\'s rollover in the daemon, which session/get reads back', { timeout: 120_000 }, async () => {
  const scratch0 = new Scratch();
  scratches.push(scratch0);
  const env = { HOME: scratch0.dir, XDG_CONFIG_HOME: join(scratch0.dir, 'c'), XDG_DATA_HOME: join(scratch0.dir, 'd'), SIDECHAT_DEMO_DELAY_MS: '0', SIDECHAT_ACCOUNT: 'demo' };
  activateWith({ 'sidechat.path': sidechatBinary(), 'sidechat.extraArgs': ['--db', join(scratch0.dir, 'sidechat.db')], 'sidechat.env': env });
  const provider = __stub.viewProviders.get('sidechat.chat') as ChatViewProvider;
  const { view, posted, send } = fakeView();

  // No chat shown yet: nothing to set.
  await vscode.commands.executeCommand('sidechat.setRollover');
  assert.deepEqual(__stub.infos, ['Open a chat first: the idle rollover is set per chat.']);

  provider.resolveWebviewView(view as never);
  await send({ type: 'ready' });
  await until(() => posted.find((m) => m.type === 'daemon' && m.status.state === 'ready'), 'the daemon to be ready');
  await send({ type: 'send', text: 'hello', attachments: [], clientMessageId: 'c1' });
  await until(() => posted.find((m) => m.type === 'events' && m.events.some((e) => e.event.kind === 'runFinished')), 'the run to finish');
  /** The rollover of the newest session the view was given (`off` when it has none). */
  const newest = () => {
    const last = posted.filter((m) => m.type === 'session').pop();
    return last?.type === 'session' ? (last.session.rollover ?? 'off') : undefined;
  };
  /** Waits until the view has been given the session with `rollover` (reads may come between). */
  const shown = (rollover: string) => until(() => newest() === rollover && rollover, `the session read back with rollover ${rollover}`);
  await until(() => newest(), 'the session read back');

  __stub.quickPickChoice = '1d';
  await vscode.commands.executeCommand('sidechat.setRollover');
  assert.equal(await shown('1d'), '1d');
  assert.deepEqual(__stub.quickPicks[0].labels, ['off', '1h', '3h', '1d', 'Custom…']);

  // Another time, typed; the pick now marks 1d as the current one.
  __stub.quickPickChoice = 'Custom…';
  __stub.inputBoxAnswer = '90m';
  await vscode.commands.executeCommand('sidechat.setRollover');
  assert.equal(await shown('90m'), '90m');
  assert.equal(__stub.quickPicks[1].descriptions[3], 'current');

  // Off: session/get has no rollover any more.
  __stub.quickPickChoice = 'off';
  await vscode.commands.executeCommand('sidechat.setRollover');
  assert.equal(await shown('off'), 'off');
  const last = posted.filter((m) => m.type === 'session').pop();
  assert.equal(last?.type === 'session' && last.session.rollover, undefined);

  // Dismissed: nothing is set (and nothing said).
  __stub.quickPickChoice = undefined;
  await vscode.commands.executeCommand('sidechat.setRollover');
  assert.equal(newest(), 'off');
  assert.deepEqual(__stub.errors, []);
  assert.deepEqual(__stub.infos.slice(1), [
    'This chat starts a new context after 1d without a turn.',
    'This chat starts a new context after 90m without a turn.',
    'This chat never starts a new context by itself.',
  ]);
});

test('sidechat.connection "attach": the extension attaches to the listening daemon serve.json names and starts none; once that daemon is gone it says so; "auto" then starts one', { timeout: 120_000 }, async () => {
  const scratch0 = new Scratch();
  scratches.push(scratch0);
  const runtime = join(scratch0.dir, 'run');
  const listening = await scratch0.listening({ XDG_RUNTIME_DIR: runtime, SIDECHAT_DEMO_DELAY_MS: '0' });
  assert.equal(listening.path, join(runtime, 'sidechat', 'serve.json'));
  const env = { HOME: scratch0.dir, XDG_CONFIG_HOME: join(scratch0.dir, 'config'), XDG_DATA_HOME: join(scratch0.dir, 'data'), XDG_RUNTIME_DIR: runtime, SIDECHAT_DEMO_DELAY_MS: '0' };
  try {
    activateWith({
      'sidechat.path': sidechatBinary(),
      'sidechat.connection': 'attach',
      'sidechat.extraArgs': ['--db', join(scratch0.dir, 'sidechat.db')],
      'sidechat.env': env,
    });
    const provider = __stub.viewProviders.get('sidechat.chat') as ChatViewProvider;
    const { view, posted, send } = fakeView();
    provider.resolveWebviewView(view as never);
    await send({ type: 'ready' });
    const ready = await until(() => posted.find((m) => m.type === 'daemon' && m.status.state === 'ready'), 'the attachment');
    assert.equal(ready.type === 'daemon' && ready.status.state === 'ready' && ready.status.attached, listening.file.url);
    await send({ type: 'send', text: 'hello', attachments: [], clientMessageId: 'c1' });
    await until(() => posted.find((m) => m.type === 'events' && m.events.some((e) => e.event.kind === 'runFinished')), 'the run to finish');
    const chat = await until(() => posted.find((m) => m.type === 'reset'), 'the chat');
    assert.deepEqual(__stub.output.filter((line) => line.startsWith('starting ')), [], 'no daemon of its own');
    assert.ok(__stub.output.includes(`attached to ${listening.file.url}: ${ready.type === 'daemon' && ready.status.state === 'ready' ? ready.status.server : ''}`));

    // The listening daemon stops: the window tries again, finds none, and says what to do.
    posted.length = 0;
    await listening.stop();
    const failed = await until(() => posted.find((m) => m.type === 'daemon' && m.status.state === 'failed'), 'the failure');
    assert.equal(failed.type === 'daemon' && failed.status.state === 'failed' && failed.status.setting, 'sidechat.connection');
    assert.match(
      failed.type === 'daemon' && failed.status.state === 'failed' ? failed.status.message : '',
      /^No sidechat daemon to attach to: .+\. Start one with `sidechat serve --listen 127\.0\.0\.1:0 --no-stdio`, or set sidechat\.connection to "auto" or "spawn"\.$/,
    );
    assert.equal(__stub.errors.length, 1);
    assert.deepEqual(__stub.output.filter((line) => line.startsWith('starting ')), []);

    // "auto" with none running starts the window's own daemon on the same database.
    posted.length = 0;
    __stub.changeConfig({ 'sidechat.connection': 'auto' });
    const spawned = await until(() => posted.find((m) => m.type === 'daemon' && m.status.state === 'ready'), 'the daemon to be ready');
    assert.equal(spawned.type === 'daemon' && spawned.status.state === 'ready' && spawned.status.attached, undefined);
    assert.equal(__stub.output.filter((line) => line.startsWith('starting ')).length, 1);
    // The chat made through the listening daemon is in the database the new one serves.
    const sessions = await until(() => posted.find((m) => m.type === 'sessions' && m.sessions.length === 1), 'the chat listed');
    assert.equal(sessions.type === 'sessions' && sessions.sessions[0].id, chat.type === 'reset' && chat.sessionId);
  } finally {
    await listening.stop();
  }
});
