/**
 * The daemon as the chat page reaches it in a browser: JSON-RPC over the WebSocket of
 * `sidechat serve --listen --web`, at the page's own origin, with the token from the page's own
 * address. It offers the host controller what the extension's spawned daemon offers
 * (`DaemonLike`): requests, `session/event` notifications and a status.
 *
 * A closed socket is a "crash": pending requests fail, the status says so, and the socket is
 * opened again after a growing delay. Once it is open again it is initialised and subscribed
 * (`session/subscribe`) to the sessions it showed, then reported ready, and the controller
 * rebuilds the view from `session/transcript`, so nothing that happened meanwhile is missed.
 */

import type { DaemonLike } from '../../vscode/src/host/controller';
import type { DaemonStatus } from '../../vscode/src/model/messages';
import type { InitializeResult, Requests, SessionEventParams } from '../../vscode/src/model/wire';

/** An error answer of the daemon, with its JSON-RPC code (the controller reads it). */
export class RpcError extends Error {
  constructor(
    readonly code: number,
    message: string,
    readonly data?: unknown,
  ) {
    super(message);
  }
}

interface Pending {
  resolve(result: unknown): void;
  reject(error: Error): void;
}

/** The first delay before opening a closed socket again, doubled up to the last. */
const FIRST_RETRY_MS = 500;
const LAST_RETRY_MS = 8_000;
/** Sockets in a row that never opened before the page stops trying on its own. */
const GIVE_UP_AFTER = 3;

export class SocketDaemon implements DaemonLike {
  status: DaemonStatus = { state: 'starting' };
  private socket: WebSocket | undefined;
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private readonly eventListeners = new Set<(params: SessionEventParams) => void>();
  private readonly statusListeners = new Set<(status: DaemonStatus) => void>();
  /** Sessions whose events this page wants: subscribed again on every new socket. */
  private readonly subscribed = new Set<string>();
  private retryMs = FIRST_RETRY_MS;
  private failedOpens = 0;
  private retryTimer: ReturnType<typeof setTimeout> | undefined;

  /** `url`: the daemon's WebSocket address, with `?token=`. */
  constructor(private readonly url: string) {}

  /** Opens the socket (again), initialises it and reports the daemon ready. */
  connect(): void {
    clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
    const socket = new WebSocket(this.url);
    this.socket = socket;
    let opened = false;
    socket.onopen = () => {
      opened = true;
      void this.initialise(socket);
    };
    socket.onmessage = (message) => {
      if (this.socket === socket && typeof message.data === 'string') this.receive(message.data);
    };
    socket.onclose = () => {
      if (this.socket !== socket) return;
      this.socket = undefined;
      this.failPending('the connection to the daemon closed');
      this.failedOpens = opened ? 0 : this.failedOpens + 1;
      if (this.failedOpens >= GIVE_UP_AFTER) {
        // Until the user retries: the daemon has stopped, or refuses this page's token.
        const message = 'Cannot reach the daemon: it has stopped, or this address is of an earlier one. Run `sidechat web` for the current address.';
        this.setStatus({ state: 'failed', message, tried: [], crashes: this.failedOpens });
        return;
      }
      const restartInMs = this.retryMs;
      this.retryMs = Math.min(this.retryMs * 2, LAST_RETRY_MS);
      this.setStatus({ state: 'crashed', message: 'The connection to the daemon closed; opening it again.', restartInMs });
      this.retryTimer = setTimeout(() => this.connect(), restartInMs);
    };
  }

  /** The user asked to retry now. */
  async restart(): Promise<void> {
    const socket = this.socket;
    this.socket = undefined;
    socket?.close();
    this.failPending('the connection to the daemon was reopened');
    this.retryMs = FIRST_RETRY_MS;
    this.failedOpens = 0;
    this.setStatus({ state: 'starting' });
    this.connect();
  }

  request<M extends keyof Requests>(method: M, params: Requests[M]['params']): Promise<Requests[M]['result']> {
    const socket = this.socket;
    if (!socket || socket.readyState !== WebSocket.OPEN) return Promise.reject(new Error('not connected to the daemon'));
    return this.send(socket, method, params).then((result) => {
      // The socket now receives this session's events (`session/transcript` subscribes it).
      if (method === 'session/transcript' || method === 'session/subscribe') {
        this.subscribed.add((params as { sessionId: string }).sessionId);
      }
      return result as Requests[M]['result'];
    });
  }

  onEvent(listener: (params: SessionEventParams) => void): () => void {
    this.eventListeners.add(listener);
    return () => this.eventListeners.delete(listener);
  }

  onStatus(listener: (status: DaemonStatus) => void): () => void {
    this.statusListeners.add(listener);
    return () => this.statusListeners.delete(listener);
  }

  private async initialise(socket: WebSocket): Promise<void> {
    try {
      const info = (await this.send(socket, 'initialize', {
        clientInfo: { name: 'sidechat-web' },
        protocolVersion: 1,
      })) as InitializeResult;
      socket.send(JSON.stringify({ jsonrpc: '2.0', method: 'initialized', params: {} }));
      for (const sessionId of this.subscribed) {
        await this.send(socket, 'session/subscribe', { sessionId }).catch(() => this.subscribed.delete(sessionId));
      }
      if (this.socket !== socket) return;
      this.retryMs = FIRST_RETRY_MS;
      const demo = info.accounts.find((a) => a.name === info.defaultAccount)?.isDemo ?? false;
      this.setStatus({ state: 'ready', server: `${info.serverInfo.name} ${info.serverInfo.version}`, demo, accounts: info.accounts });
    } catch (error) {
      if (this.socket === socket) socket.close();
    }
  }

  private send(socket: WebSocket, method: string, params: unknown): Promise<unknown> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      socket.send(JSON.stringify({ jsonrpc: '2.0', id, method, params }));
    });
  }

  private receive(text: string): void {
    let message: { id?: number; result?: unknown; error?: { code: number; message: string; data?: unknown }; method?: string; params?: unknown };
    try {
      message = JSON.parse(text);
    } catch {
      return;
    }
    if (message.method === 'session/event') {
      const params = message.params as SessionEventParams;
      for (const listener of this.eventListeners) listener(params);
      return;
    }
    if (typeof message.id !== 'number') return;
    const pending = this.pending.get(message.id);
    if (!pending) return;
    this.pending.delete(message.id);
    if (message.error) pending.reject(new RpcError(message.error.code, message.error.message, message.error.data));
    else pending.resolve(message.result);
  }

  private failPending(reason: string): void {
    const pending = [...this.pending.values()];
    this.pending.clear();
    for (const p of pending) p.reject(new Error(reason));
  }

  private setStatus(status: DaemonStatus): void {
    this.status = status;
    for (const listener of this.statusListeners) listener(status);
  }
}
