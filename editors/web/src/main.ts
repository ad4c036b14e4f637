/**
 * The chat page in a browser, served by `sidechat serve --listen ADDR --web`: the VS Code
 * extension's page (the same view and session model) with the extension's host controller
 * running in the page itself, over the daemon's WebSocket at the page's own origin.
 *
 * The page's address carries the daemon's token (`?token=`) and the folder new chats work in
 * (`&workspace=`), as `sidechat web` prints it.
 */

import { ChatController } from '../../vscode/src/host/controller';
import type { PageState } from '../../vscode/src/webview/view';
import { ChatView } from '../../vscode/src/webview/view';
import { SocketDaemon } from './socket';
import { BrowserUi } from './ui';

/** Where the page keeps the open chat and the draft between visits. */
const STATE_KEY = 'sidechat.page';

function loadState(): PageState {
  try {
    return (JSON.parse(localStorage.getItem(STATE_KEY) ?? 'null') as PageState | null) ?? {};
  } catch {
    return {};
  }
}

const root = document.getElementById('app');
if (root) {
  const query = new URLSearchParams(location.search);
  const socketUrl = new URL('/', location.href);
  socketUrl.protocol = location.protocol === 'https:' ? 'wss:' : 'ws:';
  socketUrl.search = new URLSearchParams({ token: query.get('token') ?? '' }).toString();
  const workspaceRoot = query.get('workspace') ?? undefined;

  const daemon = new SocketDaemon(socketUrl.toString());
  let controller: ChatController | undefined;
  const view = new ChatView(root, (message) => void controller?.handle(message), {
    get: loadState,
    set: (state) => localStorage.setItem(STATE_KEY, JSON.stringify(state)),
  });
  const ui = new BrowserUi((message) => view.enqueue(message));
  controller = new ChatController(daemon, ui, workspaceRoot ? { workspaceRoot } : {});
  if (workspaceRoot) document.title = `sidechat · ${workspaceRoot.split('/').filter(Boolean).pop() ?? workspaceRoot}`;
  daemon.connect();
  void controller.handle({ type: 'ready', activeId: loadState().activeId });
}
