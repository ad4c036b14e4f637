/**
 * Test plumbing: the real daemon in a scratch home, and the real chat page in headless
 * Chromium with `acquireVsCodeApi` bridged to the real host-side controller.
 */

import { spawn } from 'node:child_process';
import { after, before } from 'node:test';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, existsSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { AddressInfo } from 'node:net';

import { chromium, type Browser, type Page } from 'playwright-core';

import { ChatController, type DaemonLike, type HostUi } from '../src/host/controller';
import { Daemon, type DaemonOptions } from '../src/host/daemon';
import { serveFilePath, type ServeFile } from '../src/host/serveFile';
import type { HostToPage, PageToHost } from '../src/model/messages';
import { chatHtml, randomNonce } from '../src/webview/html';

/** editors/vscode */
export const EXTENSION_ROOT = fileURLToPath(new URL('../..', import.meta.url));
export const REPO_ROOT = join(EXTENSION_ROOT, '..', '..');
export const ARTIFACTS = join(EXTENSION_ROOT, 'artifacts');

export function sidechatBinary(): string {
  const bin = process.env.SIDECHAT_BIN ?? join(REPO_ROOT, 'target', 'debug', 'sidechat');
  if (!existsSync(bin)) throw new Error(`no sidechat binary at ${bin}: run \`cargo build\` or set SIDECHAT_BIN`);
  return bin;
}

/**
 * Waits for what `find` looks for: resolves with its first answer that is neither `undefined`
 * nor `false`, polling it (it may be async) until then. The guard only ends a wait that would
 * otherwise hang; no test depends on how long anything takes.
 */
export async function until<T>(find: () => T | undefined | false | Promise<T | undefined | false>, what: string, guardMs = 60_000): Promise<T> {
  const start = Date.now();
  for (;;) {
    const found = await find();
    if (found !== undefined && found !== false) return found;
    if (Date.now() - start > guardMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

export function chromiumPath(): string {
  return process.env.CHROMIUM ?? '/usr/bin/chromium';
}

/** A scratch home: database, config and data folders, and a workspace, all removed by `dispose`. */
export class Scratch {
  readonly dir = mkdtempSync(join(tmpdir(), 'sidechat-vscode-'));
  readonly workspace = join(this.dir, 'ws');
  constructor() {
    mkdirSync(this.workspace);
  }
  /** A cleared environment: nothing of this machine's config or keys reaches the daemon. */
  env(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
    return {
      PATH: '/usr/bin:/bin',
      HOME: this.dir,
      XDG_CONFIG_HOME: join(this.dir, 'config'),
      XDG_DATA_HOME: join(this.dir, 'data'),
      SIDECHAT_LOG: 'warn',
      ...extra,
    };
  }
  /** The extension's client of a daemon on this home; `options.connection` to attach. */
  daemon(extraEnv: Record<string, string> = {}, configuredPath = sidechatBinary(), options: Partial<DaemonOptions> = {}): Daemon {
    return new Daemon({
      configuredPath,
      args: ['--db', join(this.dir, 'sidechat.db')],
      env: this.env(extraEnv),
      home: this.dir,
      log: (line) => {
        if (process.env.SIDECHAT_TEST_LOG) console.error(`[daemon] ${line}`);
      },
      clientName: 'sidechat-vscode-tests',
      restart: { firstDelayMs: 200 },
      ...options,
    });
  }

  /**
   * A daemon serving this home's database over WebSocket only (`serve --listen 127.0.0.1:0
   * --no-stdio`, or another `address` such as `unix:PATH`), as a user starts one for several
   * windows; ready once its `serve.json` names it.
   */
  async listening(extraEnv: Record<string, string> = {}, address = '127.0.0.1:0'): Promise<Listening> {
    const env = this.env(extraEnv);
    const child = spawn(sidechatBinary(), ['serve', '--listen', address, '--no-stdio', '--db', join(this.dir, 'sidechat.db')], { env, stdio: ['ignore', 'ignore', 'pipe'] });
    const stderr: string[] = [];
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => stderr.push(chunk));
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    const path = serveFilePath(env, this.dir) ?? '';
    const file = await until(() => {
      if (child.exitCode !== null) throw new Error(`the listening daemon exited: ${stderr.join('')}`);
      if (!existsSync(path)) return undefined;
      const found = JSON.parse(readFileSync(path, 'utf8')) as ServeFile;
      return found.pid === child.pid && found;
    }, 'the listening daemon\'s serve.json');
    return {
      file,
      path,
      stop: async () => {
        if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
        await exited;
      },
    };
  }
  dispose(): void {
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** A listening daemon of a test: what its `serve.json` says, and how to stop it (SIGTERM). */
export interface Listening {
  file: ServeFile;
  path: string;
  stop(): Promise<void>;
}

/** The themes the tests draw the page in: VS Code's default dark, light and high-contrast. */
export const THEMES = ['dark', 'light', 'high-contrast'] as const;
export type Theme = (typeof THEMES)[number];

/**
 * Serves the page the way the webview does: our HTML (with its CSP), script and stylesheet,
 * and in front of the stylesheet the `--vscode-*` variables of a theme, as VS Code sets them
 * (`?theme=light|dark|high-contrast`, dark by default).
 */
export async function servePage(): Promise<{ url: string; server: Server }> {
  const server = createServer((req, res) => {
    const origin = `http://${req.headers.host}`;
    const [path, query] = (req.url ?? '/').split('?');
    const files: Record<string, [string, string]> = {
      '/dist/webview.js': [join(EXTENSION_ROOT, 'dist', 'webview.js'), 'text/javascript'],
      '/media/chat.css': [join(EXTENSION_ROOT, 'media', 'chat.css'), 'text/css'],
    };
    for (const theme of THEMES) files[`/theme/${theme}.css`] = [join(EXTENSION_ROOT, 'test', 'themes', `${theme}.css`), 'text/css'];
    if (path === '/') {
      const asked = new URLSearchParams(query ?? '').get('theme');
      const theme = THEMES.find((t) => t === asked) ?? 'dark';
      const html = chatHtml({ cspSource: origin, nonce: randomNonce(), scriptUri: `${origin}/dist/webview.js`, styleUri: `${origin}/media/chat.css` });
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
      res.end(html.replace('<link rel="stylesheet"', `<link rel="stylesheet" href="${origin}/theme/${theme}.css">\n<link rel="stylesheet"`).replace('<body>', `<body class="vscode-${theme}">`));
      return;
    }
    const file = files[path];
    if (!file) {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { 'content-type': file[1] });
    res.end(readFileSync(file[0]));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}/`, server };
}

/** Debian's Chromium; Playwright gives each launch a fresh, temporary profile folder. */
export async function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: chromiumPath(),
    args: [
      '--no-sandbox',
      '--headless',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--no-first-run',
    ],
  });
}

/** What the page asked of the editor, for assertions. */
export interface UiCalls {
  diffs: { path: string; before: string; after: string }[];
  copies: string[];
  /** Code the page asked to insert at the editor's cursor. */
  inserts: string[];
  settingsOpened: number;
  confirms: string[];
  /** Every message the page sent the host, in order. */
  toHost: PageToHost[];
}

/**
 * Opens the chat page and wires it to a controller over `daemon`, exactly as the extension's
 * webview provider does, with `acquireVsCodeApi` bridged through Playwright bindings.
 */
export async function openChat(browser: Browser, url: string, daemon: DaemonLike, workspaceRoot: string) {
  const page = await browser.newPage({ viewport: { width: 480, height: 900 } });
  const calls: UiCalls = { diffs: [], copies: [], inserts: [], settingsOpened: 0, confirms: [], toHost: [] };
  const pageErrors: string[] = [];
  page.on('pageerror', (error) => pageErrors.push(String(error)));
  page.on('dialog', (dialog) => {
    pageErrors.push(`dialog: ${dialog.message()}`);
    void dialog.dismiss();
  });
  let chain: Promise<unknown> = Promise.resolve();
  const ui: HostUi = {
    post: (message: HostToPage) => {
      if (process.env.SIDECHAT_TEST_LOG) {
        const t = message.type;
        const detail = t === 'reset' || t === 'merge' ? `${message.transcript.entries.length} entries, lastSeq ${message.transcript.lastSeq}, state ${message.transcript.state}` : t === 'events' ? message.events.map((e) => `${e.seq}:${e.event.kind}`).join(' ').slice(0, 300) : t === 'daemon' ? JSON.stringify(message.status) : '';
        console.error(`[post] ${t} ${detail}`);
      }
      // As a webview's postMessage does, the message crosses as JSON.
      const json = JSON.stringify(message);
      chain = chain
        .then(() => page.evaluate((m) => window.dispatchEvent(new MessageEvent('message', { data: JSON.parse(m) })), json))
        .catch(() => undefined);
    },
    confirm: async (message) => {
      calls.confirms.push(message);
      return true;
    },
    openDiff: async (path, before, after) => {
      calls.diffs.push({ path, before, after });
    },
    openSettings: () => {
      calls.settingsOpened++;
    },
    copy: (text) => calls.copies.push(text),
    insert: async (text) => void calls.inserts.push(text),
    openLink: () => undefined,
    log: () => undefined,
  };
  const controller = new ChatController(daemon, ui, { workspaceRoot });
  await page.exposeBinding('__sidechatToHost', (_source, message: PageToHost) => {
    calls.toHost.push(message);
    void controller.handle(message);
  });
  await page.addInitScript(() => {
    const w = window as unknown as { acquireVsCodeApi: () => unknown; __sidechatToHost: (m: unknown) => void };
    w.acquireVsCodeApi = () => ({
      postMessage: (message: unknown) => w.__sidechatToHost(message),
      getState: () => JSON.parse(sessionStorage.getItem('vscode-state') ?? 'null') ?? undefined,
      setState: (state: unknown) => sessionStorage.setItem('vscode-state', JSON.stringify(state)),
    });
  });
  await page.goto(url);
  return { page, controller, calls, pageErrors, post: ui.post, settled: () => chain };
}

export async function screenshot(page: Page, name: string): Promise<void> {
  mkdirSync(ARTIFACTS, { recursive: true });
  await page.screenshot({ path: join(ARTIFACTS, `${name}.png`), fullPage: true });
}

/**
 * Waits until `predicate(arg)` holds in the page, polled through `page.evaluate` (which the
 * page's CSP does not govern, unlike Playwright's `waitForFunction`, which evaluates a string).
 */
export async function waitIn(page: Page, predicate: (arg: string) => boolean, arg = ''): Promise<void> {
  await until(() => page.evaluate(predicate, arg), `the page: ${predicate.toString()}`);
}

/** A guard against a hung step in a page test, not a performance assertion. */
export const STEP = { timeout: 30_000 };

/** What the page tests of one file share: headless Chromium and the server of the page. */
export interface PageRig {
  browser: Browser;
  url: string;
}

/**
 * Starts headless Chromium and the page's server before the file's tests and closes both after
 * them; the returned object is filled in once they run.
 */
/** What keeps the process running: its open resources, and any child process by its command. */
function openHandles(): string[] {
  const handles = (process as unknown as { _getActiveHandles(): { pid?: number; spawnargs?: string[] }[] })._getActiveHandles();
  const children = handles.filter((h) => h.pid !== undefined).map((h) => `child ${h.pid} (${h.spawnargs?.join(' ')})`);
  return [...process.getActiveResourcesInfo(), ...children];
}

export function pageRig(): PageRig {
  const rig = {} as PageRig;
  let server: Server | undefined;
  before(async () => {
    rig.browser = await launchChromium();
    const served = await servePage();
    rig.url = served.url;
    server = served.server;
  });
  after(async () => {
    await rig.browser?.close();
    server?.close();
    // Keep-alive connections the browser left would keep the file's process running.
    server?.closeAllConnections();
    // Anything else left open would keep it running silently after its last test: name it and
    // fail instead. Unreferenced, so a process with nothing left open exits at once.
    setTimeout(() => {
      console.error(`still running 30 s after the last test; open handles: ${openHandles().join(', ')}`);
      process.exit(1);
    }, 30_000).unref();
  });
  return rig;
}

/** An editor that keeps what the controller posts to the page in `posted`, and does nothing else. */
export function recordingUi(posted: HostToPage[]): HostUi {
  return {
    post: (message) => void posted.push(message),
    confirm: async () => true,
    openDiff: async () => undefined,
    openSettings: () => undefined,
    copy: () => undefined,
    insert: async () => undefined,
    openLink: () => undefined,
    log: () => undefined,
  };
}
