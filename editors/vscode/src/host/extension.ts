/**
 * The extension: starts the daemon, registers the chat view and the commands.
 *
 * Everything that does not need `vscode` lives in `daemon.ts` and `controller.ts`; this file
 * only adapts them to VS Code (settings, output channel, webview, diff editor, clipboard).
 */

import { homedir } from 'node:os';
import { relative } from 'node:path';
import * as vscode from 'vscode';

import type { DaemonStatus, HostToPage, PageSettings, PageToHost } from '../model/messages';
import { chatHtml, randomNonce } from '../webview/html';
import { ChatController, type HostUi } from './controller';
import { Daemon, type ConnectionMode, type DaemonOptions } from './daemon';

const DIFF_SCHEME = 'sidechat-diff';

/** The settings `sidechat serve` is started (or attached to) with: a change restarts it. */
const DAEMON_SETTINGS = ['path', 'extraArgs', 'env', 'connection'];

/** `sidechat.connection`, `auto` when unset or unknown. */
export function connectionMode(value: string | undefined): ConnectionMode {
  return value === 'spawn' || value === 'attach' ? value : 'auto';
}

/** The page's settings from the `sidechat.*` settings. */
export function pageSettings(): PageSettings {
  return { showContextMeter: vscode.workspace.getConfiguration('sidechat').get<boolean>('showContextMeter') ?? true };
}

/** Daemon options from the `sidechat.*` settings. */
export function daemonOptions(log: (line: string) => void): DaemonOptions {
  const config = vscode.workspace.getConfiguration('sidechat');
  const extraEnv = config.get<Record<string, string>>('env') ?? {};
  return {
    configuredPath: config.get<string>('path') ?? '',
    args: config.get<string[]>('extraArgs') ?? [],
    env: { ...process.env, ...extraEnv },
    home: homedir(),
    log,
    clientName: 'sidechat-vscode',
    connection: connectionMode(config.get<string>('connection')),
  };
}

/** Texts of the diff editor's two sides, by URI. */
class DiffContents implements vscode.TextDocumentContentProvider {
  private readonly texts = new Map<string, string>();
  private counter = 0;

  put(text: string, path: string, side: 'before' | 'after'): vscode.Uri {
    const uri = vscode.Uri.from({ scheme: DIFF_SCHEME, path: `/${path}`, query: `${side}-${this.counter++}` });
    this.texts.set(uri.toString(), text);
    return uri;
  }

  provideTextDocumentContent(uri: vscode.Uri): string {
    return this.texts.get(uri.toString()) ?? '';
  }
}

export class ChatViewProvider implements vscode.WebviewViewProvider {
  static readonly viewType = 'sidechat.chat';
  private controller: ChatController | undefined;
  private view: vscode.WebviewView | undefined;
  private pendingAttachment: { name: string; text: string } | undefined;

  constructor(
    private readonly context: vscode.ExtensionContext,
    private readonly daemon: Daemon,
    private readonly output: vscode.OutputChannel,
    private readonly diffs: DiffContents,
  ) {}

  resolveWebviewView(view: vscode.WebviewView): void {
    this.view = view;
    const media = vscode.Uri.joinPath(this.context.extensionUri, 'media');
    const dist = vscode.Uri.joinPath(this.context.extensionUri, 'dist');
    view.webview.options = { enableScripts: true, localResourceRoots: [media, dist] };
    view.webview.html = chatHtml({
      cspSource: view.webview.cspSource,
      nonce: randomNonce(),
      scriptUri: view.webview.asWebviewUri(vscode.Uri.joinPath(dist, 'webview.js')).toString(),
      styleUri: view.webview.asWebviewUri(vscode.Uri.joinPath(media, 'chat.css')).toString(),
    });
    const ui: HostUi = {
      post: (message) => void view.webview.postMessage(message),
      confirm: async (message, action = 'Delete') => (await vscode.window.showWarningMessage(message, { modal: true }, action)) === action,
      openDiff: async (path, before, after) => {
        const left = this.diffs.put(before, path, 'before');
        const right = this.diffs.put(after, path, 'after');
        await vscode.commands.executeCommand('vscode.diff', left, right, `${path} (sidechat's changes)`);
      },
      openSettings: (setting = 'sidechat.path') => void vscode.commands.executeCommand('workbench.action.openSettings', setting),
      copy: (text) => void vscode.env.clipboard.writeText(text),
      insert: (text) => insertAtCursor(text),
      openLink: (href) => {
        if (/^https?:/i.test(href)) void vscode.env.openExternal(vscode.Uri.parse(href));
      },
      log: (line) => this.output.appendLine(line),
    };
    this.controller?.dispose();
    const controller = new ChatController(this.daemon, ui, {
      workspaceRoot: vscode.workspace.workspaceFolders?.[0]?.uri.fsPath,
    });
    this.controller = controller;
    view.webview.onDidReceiveMessage(async (message: PageToHost) => {
      if (message.type === 'ready') this.postSettings();
      await controller.handle(message);
      if (message.type === 'ready' && this.pendingAttachment) {
        controller.attach(this.pendingAttachment);
        this.pendingAttachment = undefined;
      }
    });
    view.onDidDispose(() => {
      controller.dispose();
      if (this.controller === controller) this.controller = undefined;
    });
  }

  /** Tells the page the settings it follows (at its start and when they change). */
  postSettings(): void {
    void this.view?.webview.postMessage({ type: 'settings', settings: pageSettings() } satisfies HostToPage);
  }

  /** Puts the selection into the composer, opening the view first if needed. */
  async attach(attachment: { name: string; text: string }): Promise<void> {
    if (this.controller && this.view?.visible) {
      this.controller.attach(attachment);
      this.view.show(false);
      return;
    }
    this.pendingAttachment = attachment;
    await vscode.commands.executeCommand(`${ChatViewProvider.viewType}.focus`);
    if (this.controller && this.pendingAttachment) {
      this.controller.attach(this.pendingAttachment);
      this.pendingAttachment = undefined;
    }
  }

  newSession(): void {
    void this.controller?.handle({ type: 'newSession' });
  }

  /**
   * "Set idle rollover": after how long without a turn the shown chat starts a new context
   * with a carry-over note (`session/update`'s `rollover`), from a quick pick.
   */
  async setRollover(): Promise<void> {
    const controller = this.controller;
    if (!controller?.activeSessionId) {
      void vscode.window.showInformationMessage('Open a chat first: the idle rollover is set per chat.');
      return;
    }
    try {
      const current = (await controller.activeSession())?.rollover ?? 'off';
      const value = await pickRollover(current);
      if (value === undefined) return;
      const session = await controller.setRollover(value);
      const now = session?.rollover ?? 'off';
      void vscode.window.showInformationMessage(
        now === 'off' ? 'This chat never starts a new context by itself.' : `This chat starts a new context after ${now} without a turn.`,
      );
    } catch (error) {
      void vscode.window.showErrorMessage(`Setting the idle rollover failed: ${error instanceof Error ? error.message : String(error)}`);
    }
  }
}

/** What `rollover` accepts: `off`, or a whole number of seconds, minutes, hours or days. */
export const ROLLOVER_PATTERN = /^(off|[1-9][0-9]*[smhd])$/;

/** The quick pick of "Set idle rollover" (and an input box for another time). */
async function pickRollover(current: string): Promise<string | undefined> {
  const choices: { label: string; value: string; description?: string }[] = [
    { label: 'off', value: 'off', description: 'never start a new context by itself' },
    { label: '1h', value: '1h' },
    { label: '3h', value: '3h', description: 'the default' },
    { label: '1d', value: '1d' },
    { label: 'Custom…', value: '', description: 'another idle time, e.g. 90m or 7d' },
  ];
  const items = choices.map((c) => (c.value === current ? { ...c, description: [c.description, 'current'].filter(Boolean).join(' · ') } : c));
  const picked = await vscode.window.showQuickPick(items, {
    title: 'Idle rollover',
    placeHolder: `Start a new context, with a carry-over note, after this idle time (now ${current})`,
  });
  if (!picked) return undefined;
  if (picked.value !== '') return picked.value;
  const typed = await vscode.window.showInputBox({
    title: 'Idle rollover',
    prompt: 'off, or a whole number of s, m, h or d',
    value: current,
    validateInput: (text) => (ROLLOVER_PATTERN.test(text.trim()) ? undefined : 'off, or a whole number with s, m, h or d, e.g. 90m or 7d'),
  });
  return typed === undefined ? undefined : typed.trim();
}

/** `src/a.ts:3-9` with the selected text, for "Ask sidechat about the selection". */
export function selectionAttachment(editor: vscode.TextEditor, workspaceRoot: string | undefined): { name: string; text: string } | undefined {
  const selection = editor.selection;
  if (selection.isEmpty) return undefined;
  const file = editor.document.uri.fsPath;
  const shown = workspaceRoot && file.startsWith(workspaceRoot) ? relative(workspaceRoot, file) : file;
  const start = selection.start.line + 1;
  const end = selection.end.character === 0 && selection.end.line > selection.start.line ? selection.end.line : selection.end.line + 1;
  const lines = start === end ? `${start}` : `${start}-${end}`;
  return { name: `${shown}:${lines}`, text: editor.document.getText(selection) };
}

/**
 * Tells the user once each time the daemon stops for good, offering what helps: a missing or
 * unstartable binary needs the `sidechat.path` setting (no daemon to attach to,
 * `sidechat.connection`); a daemon given up after crashing again
 * and again was found and started, so the setting is no help there, but a restart (which gets
 * the whole allowance again) and its log are. Returns the unsubscribe.
 */
export function tellFailures(daemon: Daemon, output: vscode.OutputChannel): () => void {
  let lastState: DaemonStatus['state'] | undefined;
  return daemon.onStatus((status) => {
    if (status.state === 'failed' && lastState !== 'failed') {
      if (status.crashes !== undefined) {
        void vscode.window.showErrorMessage(status.message, 'Restart', 'Show log').then((choice) => {
          if (choice === 'Restart') void daemon.restart();
          else if (choice === 'Show log') output.show(true);
        });
      } else {
        void vscode.window.showErrorMessage(status.message, 'Open setting').then((choice) => {
          if (choice === 'Open setting') void vscode.commands.executeCommand('workbench.action.openSettings', status.setting ?? 'sidechat.path');
        });
      }
    }
    lastState = status.state;
  });
}

export function activate(context: vscode.ExtensionContext): void {
  const output = vscode.window.createOutputChannel('sidechat');
  const daemon = new Daemon(daemonOptions((line) => output.appendLine(line)));
  const diffs = new DiffContents();
  const provider = new ChatViewProvider(context, daemon, output, diffs);

  const unsubscribe = tellFailures(daemon, output);

  context.subscriptions.push(
    output,
    { dispose: unsubscribe },
    // Returned so that a caller that can wait (the tests) waits for the process to end.
    { dispose: () => daemon.dispose() },
    vscode.workspace.registerTextDocumentContentProvider(DIFF_SCHEME, diffs),
    vscode.window.registerWebviewViewProvider(ChatViewProvider.viewType, provider, {
      webviewOptions: { retainContextWhenHidden: true },
    }),
    vscode.commands.registerCommand('sidechat.askAboutSelection', async () => {
      const editor = vscode.window.activeTextEditor;
      const attachment = editor && selectionAttachment(editor, vscode.workspace.workspaceFolders?.[0]?.uri.fsPath);
      if (!attachment) {
        void vscode.window.showInformationMessage('Select some text first.');
        return;
      }
      await provider.attach(attachment);
    }),
    vscode.commands.registerCommand('sidechat.newSession', () => provider.newSession()),
    vscode.commands.registerCommand('sidechat.restartDaemon', () => daemon.restart()),
    vscode.commands.registerCommand('sidechat.setRollover', () => provider.setRollover()),
    vscode.workspace.onDidChangeConfiguration((event) => {
      if (event.affectsConfiguration('sidechat.showContextMeter')) provider.postSettings();
      // Only the settings the daemon is started with restart it.
      if (DAEMON_SETTINGS.some((name) => event.affectsConfiguration(`sidechat.${name}`))) {
        daemon.configure(daemonOptions((line) => output.appendLine(line)));
        void daemon.restart();
      }
    }),
  );
  void daemon.start().catch(() => undefined);
}

export function deactivate(): void {
  // The daemon is stopped by its disposable in `context.subscriptions`.
}

/**
 * A code block's Insert: the code replaces each selection (at a bare cursor, goes in there) of
 * the editor last used; the chat view has the focus, so that is the active or first visible one.
 */
async function insertAtCursor(text: string): Promise<void> {
  const editor = vscode.window.activeTextEditor ?? vscode.window.visibleTextEditors[0];
  if (!editor) {
    void vscode.window.showInformationMessage('Open a file to insert the code into.');
    return;
  }
  await editor.edit((edit) => {
    for (const selection of editor.selections) edit.replace(selection, text);
  });
}
