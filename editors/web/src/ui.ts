/**
 * The editor's part of the chat page, played by the browser: what the host controller asks of
 * VS Code (confirmations, a diff, the clipboard, links) done with the page's own means.
 */

import type { HostUi } from '../../vscode/src/host/controller';
import type { HostToPage } from '../../vscode/src/model/messages';

export class BrowserUi implements HostUi {
  /** `deliver`: hands a message to the page's view, as a webview's `postMessage` does. */
  constructor(private readonly deliver: (message: HostToPage) => void) {}

  post(message: HostToPage): void {
    // A webview's message is a copy: the host's model and the page's never share objects.
    this.deliver(structuredClone(message));
  }

  async confirm(message: string): Promise<boolean> {
    return window.confirm(message);
  }

  /** The file before and after the session's changes, side by side in a dialog. */
  async openDiff(path: string, before: string, after: string): Promise<void> {
    const dialog = document.createElement('dialog');
    dialog.className = 'diff';
    const heading = document.createElement('div');
    heading.className = 'heading';
    const title = document.createElement('span');
    title.textContent = path;
    const close = document.createElement('button');
    close.type = 'button';
    close.className = 'close';
    close.textContent = 'Close';
    close.addEventListener('click', () => dialog.close());
    heading.append(title, close);
    const sides = document.createElement('div');
    sides.className = 'sides';
    for (const [label, text] of [
      ['Before', before],
      ['After', after],
    ]) {
      const side = document.createElement('section');
      const name = document.createElement('h3');
      name.textContent = label;
      const pre = document.createElement('pre');
      pre.textContent = text;
      side.append(name, pre);
      sides.append(side);
    }
    dialog.append(heading, sides);
    dialog.addEventListener('close', () => dialog.remove());
    document.body.append(dialog);
    dialog.showModal();
  }

  openSettings(): void {
    this.post({ type: 'error', message: 'The daemon is configured in ~/.config/sidechat/config.toml.' });
  }

  copy(text: string): void {
    void navigator.clipboard?.writeText(text).catch(() => undefined);
  }

  /** There is no editor here: the code goes to the clipboard, to paste where it belongs. */
  async insert(text: string): Promise<void> {
    this.copy(text);
  }

  openLink(href: string): void {
    window.open(href, '_blank', 'noopener,noreferrer');
  }

  log(line: string): void {
    console.info(`sidechat: ${line}`);
  }
}
