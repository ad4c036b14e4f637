/**
 * The chat page's entry point: connects the view to the host through `acquireVsCodeApi`.
 */

import type { HostToPage, PageToHost } from '../model/messages';
import { ChatView, type PageState } from './view';

interface VsCodeApi {
  postMessage(message: PageToHost): void;
  getState(): PageState | undefined;
  setState(state: PageState): void;
}

declare function acquireVsCodeApi(): VsCodeApi;

const vscode = acquireVsCodeApi();
const root = document.getElementById('app');
if (root) {
  const view = new ChatView(root, (message) => vscode.postMessage(message), {
    get: () => vscode.getState() ?? {},
    set: (state) => vscode.setState(state),
  });
  window.addEventListener('message', (event: MessageEvent<HostToPage>) => view.enqueue(event.data));
  vscode.postMessage({ type: 'ready', activeId: vscode.getState()?.activeId });
}
