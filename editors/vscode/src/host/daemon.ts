/**
 * The daemon and its JSON-RPC connection (vscode-jsonrpc): a `sidechat serve` process spawned
 * over stdio, or a listening daemon (`serve --listen`) attached to over WebSocket, as the
 * `sidechat.connection` setting says (`spawn`, `attach`, or `auto`: attach when one answers,
 * spawn otherwise).
 *
 * Spawning finds the binary (the `sidechat.path` setting, else `PATH`, else `~/.cargo/bin`),
 * completes the `initialize` handshake, sends its stderr to a log, and when it exits without
 * being asked to, restarts it as `RestartPolicy` says (back-off, giving up on a daemon that keeps
 * crashing). An attachment is not the window's daemon: the policy does not apply, stopping only
 * leaves, and a dropped one attaches again at once (or, in `auto`, spawns when none answers).
 * Listeners hear every status change, so the view can say what happened and rebuild itself (or
 * refetch from its last seq) once the daemon is ready again.
 *
 * No `vscode` import: the extension wires it to settings and an output channel, and the tests
 * drive the real daemon through it.
 */

import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { accessSync, constants, statSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { createMessageConnection, StreamMessageReader, StreamMessageWriter, type MessageConnection } from 'vscode-jsonrpc/node';

import type { DaemonStatus } from '../model/messages';
import type { InitializeResult, Requests, SessionEventParams } from '../model/wire';
import { RestartPolicy, type RestartPolicyOptions } from './restart';
import { databaseOf, findListening, type ServeFile } from './serveFile';
import { openSocket, SocketReader, SocketWriter } from './socket';
import type WebSocket from 'ws';

/** `sidechat.connection`. */
export type ConnectionMode = 'auto' | 'spawn' | 'attach';

/** The time and the timer the restart policy runs on; tests pass their own. */
export interface Clock {
  now(): number;
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

const SYSTEM_CLOCK: Clock = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
};

export interface DaemonOptions {
  /** The `sidechat.path` setting; empty or undefined to search. */
  configuredPath?: string;
  /** Arguments after `serve`. */
  args?: string[];
  /** The child's whole environment. */
  env: NodeJS.ProcessEnv;
  /** For `~/.cargo/bin`. */
  home: string;
  /** Receives the daemon's stderr and our own lifecycle lines. */
  log: (line: string) => void;
  clientName?: string;
  /** When to restart after a crash (defaults: `DEFAULT_RESTART_POLICY`). */
  restart?: Partial<RestartPolicyOptions>;
  clock?: Clock;
  /** Spawn a daemon, attach to a listening one, or attach when one answers (default `spawn`). */
  connection?: ConnectionMode;
}

/** The binary to start, or every path tried when there is none. */
export function resolveBinary(
  configured: string | undefined,
  envPath: string | undefined,
  home: string,
): { path?: string; tried: string[] } {
  const name = process.platform === 'win32' ? 'sidechat.exe' : 'sidechat';
  if (configured && configured.trim() !== '') {
    const path = configured.trim().replace(/^~(?=$|[\\/])/, home);
    return isExecutable(path) ? { path, tried: [path] } : { tried: [path] };
  }
  const candidates = [
    ...(envPath ?? '').split(delimiter).filter((dir) => dir !== '').map((dir) => join(dir, name)),
    join(home, '.cargo', 'bin', name),
  ];
  const path = candidates.find(isExecutable);
  return path ? { path, tried: candidates.slice(0, candidates.indexOf(path) + 1) } : { tried: candidates };
}

function isExecutable(path: string): boolean {
  try {
    if (!statSync(path).isFile()) return false;
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

type Listener<T> = (value: T) => void;

/** How a promise handed out before its daemon exists is settled. */
interface Waiting {
  resolve: (connection: MessageConnection) => void;
  reject: (error: Error) => void;
}

export class Daemon {
  status: DaemonStatus = { state: 'starting' };
  info: InitializeResult | undefined;

  private child: ChildProcessWithoutNullStreams | undefined;
  /** The WebSocket to a listening daemon, when attached. */
  private socket: WebSocket | undefined;
  /** Sessions whose events this attachment asked for (`session/subscribe`), so each is asked once. */
  private subscribed = new Set<string>();
  private connection: MessageConnection | undefined;
  private ready: Promise<MessageConnection> | undefined;
  private stopping = false;
  /** Stopped for good: a late request (a refresh still on its way) must not start another. */
  private disposed = false;
  private policy: RestartPolicy;
  private restartTimer: unknown;
  /**
   * After a crash, the requests made during the back-off wait here for the daemon it starts
   * (a request must not start one early: the restart would then find it running, and the view
   * would be told "starting" while the crash still stands).
   */
  private scheduled: Waiting | undefined;
  private readonly eventListeners = new Set<Listener<SessionEventParams>>();
  private readonly statusListeners = new Set<Listener<DaemonStatus>>();

  constructor(private options: DaemonOptions) {
    this.policy = new RestartPolicy(options.restart);
  }

  private get clock(): Clock {
    return this.options.clock ?? SYSTEM_CLOCK;
  }

  onEvent(listener: Listener<SessionEventParams>): () => void {
    this.eventListeners.add(listener);
    return () => this.eventListeners.delete(listener);
  }

  onStatus(listener: Listener<DaemonStatus>): () => void {
    this.statusListeners.add(listener);
    return () => this.statusListeners.delete(listener);
  }

  /** New settings take effect at the next start. */
  configure(options: Partial<DaemonOptions>): void {
    this.options = { ...this.options, ...options };
    if (options.restart) this.policy = new RestartPolicy(this.options.restart);
  }

  /** Starts the daemon unless it is running; resolves once `initialize` has answered. */
  start(): Promise<MessageConnection> {
    if (this.disposed) return Promise.reject(new Error('sidechat has been shut down with the extension'));
    if (!this.ready) {
      this.stopping = false;
      this.ready = (this.options.connection ?? 'spawn') === 'spawn' ? this.spawn() : this.attachOrSpawn();
      this.ready.catch(() => undefined);
    }
    return this.ready;
  }

  /**
   * Stops and starts again at once, with the current settings. Requests waiting for a restart
   * after a crash are answered by this one.
   */
  async restart(): Promise<void> {
    const waiting = this.scheduled;
    this.scheduled = undefined;
    await this.stop();
    this.policy.reset();
    const started = this.start();
    if (waiting) started.then(waiting.resolve, waiting.reject);
    await started.catch(() => undefined);
  }

  async request<M extends keyof Requests>(method: M, params: Requests[M]['params']): Promise<Requests[M]['result']> {
    const connection = await this.start();
    return (await connection.sendRequest(method, params)) as Requests[M]['result'];
  }

  /**
   * Asks an attached daemon for the events of `sessionIds` (those the window shows), each once
   * per connection: a listening daemon sends a connection only the sessions it created, opened
   * or subscribed to. A spawned daemon sends them all, so nothing is asked there.
   */
  follow(sessionIds: string[]): void {
    const connection = this.connection;
    if (!this.socket || !connection) return;
    for (const sessionId of sessionIds) {
      if (this.subscribed.has(sessionId)) continue;
      this.subscribed.add(sessionId);
      connection.sendRequest('session/subscribe', { sessionId }).catch(() => this.subscribed.delete(sessionId));
    }
  }

  /** Stops the daemon for good, as the extension deactivates: later requests fail at once. */
  dispose(): Promise<void> {
    this.disposed = true;
    return this.stop();
  }

  /** `shutdown` and `exit`, then a kill if it lingers; an attachment only closes its socket. */
  async stop(): Promise<void> {
    this.stopping = true;
    if (this.restartTimer !== undefined) this.clock.clearTimeout(this.restartTimer);
    this.restartTimer = undefined;
    const waiting = this.scheduled;
    this.scheduled = undefined;
    waiting?.reject(new Error('sidechat was stopped before it restarted'));
    const child = this.child;
    const connection = this.connection;
    const socket = this.socket;
    this.ready = undefined;
    this.connection = undefined;
    this.socket = undefined;
    if (socket) {
      // The daemon serves other windows: leaving is closing the socket.
      const closed = new Promise<void>((resolve) => (socket.readyState === socket.CLOSED ? resolve() : socket.once('close', () => resolve())));
      socket.close();
      const killer = setTimeout(() => socket.terminate(), 1000);
      await closed;
      clearTimeout(killer);
      connection?.dispose();
      return;
    }
    if (!child) return;
    const exited = new Promise<void>((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) resolve();
      else child.once('exit', () => resolve());
    });
    if (connection) {
      const handshake = (async () => {
        await connection.sendRequest('shutdown', null);
        await connection.sendNotification('exit');
      })();
      // A daemon that does not answer in time is killed below.
      await Promise.race([handshake.catch(() => undefined), delay(1000)]);
    }
    const killer = setTimeout(() => child.kill('SIGKILL'), 2000);
    await exited;
    clearTimeout(killer);
    connection?.dispose();
    // A request while this one exited may have started the next daemon: keep hold of that one.
    if (this.child === child) this.child = undefined;
  }

  private setStatus(status: DaemonStatus): void {
    this.status = status;
    for (const listener of this.statusListeners) listener(status);
  }

  private spawn(): Promise<MessageConnection> {
    const options = this.options;
    const { path, tried } = resolveBinary(options.configuredPath, options.env.PATH, options.home);
    if (!path) {
      const message = options.configuredPath
        ? `sidechat was not found at ${tried[0]} (the sidechat.path setting).`
        : `sidechat was not found on PATH or in ~/.cargo/bin. Install it (cargo install --path .) or set sidechat.path.`;
      this.options.log(`${message} Tried: ${tried.join(', ')}`);
      this.setStatus({ state: 'failed', message, tried });
      return Promise.reject(new Error(message));
    }
    // After a crash the view keeps saying so (and when it restarts) until the daemon is ready.
    if (this.status.state !== 'crashed') this.setStatus({ state: 'starting' });
    const args = ['serve', ...(options.args ?? [])];
    options.log(`starting ${path} ${args.join(' ')}`);
    const started = this.clock.now();
    let child: ChildProcessWithoutNullStreams;
    try {
      child = spawn(path, args, { env: options.env, stdio: ['pipe', 'pipe', 'pipe'] });
    } catch (error) {
      const message = `sidechat could not be started from ${path}: ${String(error)}`;
      this.setStatus({ state: 'failed', message, tried });
      return Promise.reject(new Error(message));
    }
    this.child = child;
    child.stderr.setEncoding('utf8');
    let partial = '';
    child.stderr.on('data', (chunk: string) => {
      const lines = (partial + chunk).split('\n');
      partial = lines.pop() ?? '';
      for (const line of lines) options.log(line);
    });
    const connection = createMessageConnection(new StreamMessageReader(child.stdout), new StreamMessageWriter(child.stdin));
    connection.onNotification('session/event', (params: SessionEventParams) => {
      for (const listener of this.eventListeners) listener(params);
    });
    connection.onError(() => undefined);
    connection.listen();
    this.connection = connection;

    const exited = new Promise<never>((_, reject) => {
      child.once('error', (error) => reject(new Error(`sidechat could not be started from ${path}: ${error.message}`)));
      child.once('exit', (code, signal) => {
        if (partial) options.log(partial);
        reject(new Error(`sidechat exited (${signal ?? `code ${code}`}) before it was ready`));
        this.onExit(child, code, signal, this.clock.now() - started);
      });
    });
    exited.catch(() => undefined);
    return Promise.race([this.handshake(connection), exited]).then((info) => this.becameReady(connection, info));
  }

  /** `initialize` and `initialized`. */
  private async handshake(connection: MessageConnection): Promise<InitializeResult> {
    const info = (await connection.sendRequest('initialize', {
      clientInfo: { name: this.options.clientName ?? 'sidechat-vscode' },
      protocolVersion: 1,
    })) as InitializeResult;
    await connection.sendNotification('initialized', {});
    return info;
  }

  /** The handshake answered: the daemon is ready (`attached` names a listening one). */
  private becameReady(connection: MessageConnection, info: InitializeResult, attached?: string): MessageConnection {
    this.info = info;
    const demo = info.accounts.find((a) => a.name === info.defaultAccount)?.isDemo ?? false;
    const server = `${info.serverInfo.name} ${info.serverInfo.version}`;
    this.options.log(attached ? `attached to ${attached}: ${server}` : `ready: ${server}`);
    this.setStatus({ state: 'ready', server, demo, accounts: info.accounts, ...(attached ? { attached } : {}) });
    return connection;
  }

  /**
   * `attach` and `auto`: the listening daemon `serve.json` names for this window's database;
   * when none answers, `auto` spawns one and `attach` says so and stops until the user retries.
   */
  private async attachOrSpawn(): Promise<MessageConnection> {
    const options = this.options;
    const found = findListening(options.env, options.home, databaseOf(options.args ?? [], options.env, options.home));
    let reason = 'reason' in found ? found.reason : '';
    if ('file' in found) {
      try {
        return await this.attach(found.file);
      } catch (error) {
        reason = error instanceof Error ? error.message : String(error);
      }
    }
    if (options.connection === 'auto') {
      options.log(`no daemon to attach to (${reason}); starting one`);
      return this.spawn();
    }
    const message = `No sidechat daemon to attach to: ${reason}. Start one with \`sidechat serve --listen 127.0.0.1:0 --no-stdio\`, or set sidechat.connection to "auto" or "spawn".`;
    options.log(message);
    this.setStatus({ state: 'failed', message, tried: found.path ? [found.path] : [], setting: 'sidechat.connection' });
    throw new Error(message);
  }

  /** Connects to the listening daemon `file` names and completes the handshake. */
  private async attach(file: ServeFile): Promise<MessageConnection> {
    this.options.log(`attaching to ${file.url}`);
    if (this.status.state !== 'crashed' && this.status.state !== 'starting') this.setStatus({ state: 'starting' });
    const socket = await openSocket(file.url, file.token);
    if (this.stopping) {
      socket.close();
      throw new Error('sidechat was stopped while it attached');
    }
    this.socket = socket;
    this.subscribed = new Set();
    const connection = createMessageConnection(new SocketReader(socket), new SocketWriter(socket));
    connection.onNotification('session/event', (params: SessionEventParams) => {
      for (const listener of this.eventListeners) listener(params);
    });
    connection.onError(() => undefined);
    connection.listen();
    this.connection = connection;
    let attached = false;
    const closed = new Promise<never>((_, reject) => {
      socket.once('close', () => {
        if (attached) return this.onDrop(socket, file.url);
        // Closed during the handshake: the caller says why (or spawns); nothing to attach again.
        if (this.socket === socket) {
          connection.dispose();
          this.connection = undefined;
          this.socket = undefined;
        }
        reject(new Error(`the daemon at ${file.url} closed the connection before it was ready`));
      });
    });
    closed.catch(() => undefined);
    const info = await Promise.race([this.handshake(connection), closed]);
    attached = true;
    return this.becameReady(connection, info, file.url);
  }

  /**
   * An attachment dropped without being asked to: attach again at once (a new `serve.json`
   * read, so a daemon started since is found), with the requests made meanwhile waiting for it.
   * No back-off and no crash count: the window did not start that daemon.
   */
  private onDrop(socket: WebSocket, url: string): void {
    if (this.socket !== socket) return;
    this.connection?.dispose();
    this.connection = undefined;
    this.socket = undefined;
    this.ready = undefined;
    if (this.stopping) return;
    this.options.log(`the connection to the daemon at ${url} dropped; attaching again`);
    const again = new Promise<MessageConnection>((resolve, reject) => {
      this.scheduled = { resolve, reject };
    });
    again.catch(() => undefined);
    this.ready = again;
    this.restartTimer = this.clock.setTimeout(() => {
      this.restartTimer = undefined;
      const waiting = this.scheduled;
      this.scheduled = undefined;
      if (this.ready === again) this.ready = undefined;
      const started = this.start();
      if (waiting) started.then(waiting.resolve, waiting.reject);
    }, 0);
    this.setStatus({ state: 'starting' });
  }

  /** Drops the attachment as a network failure would (for tests). */
  dropAttachment(): void {
    this.socket?.terminate();
  }

  private onExit(child: ChildProcessWithoutNullStreams, code: number | null, signal: NodeJS.Signals | null, ranMs: number): void {
    if (this.child !== child) return;
    this.connection?.dispose();
    this.connection = undefined;
    this.child = undefined;
    this.ready = undefined;
    if (this.stopping) return;
    const how = signal ?? `exit code ${code}`;
    const decision = this.policy.crashed(this.clock.now(), ranMs);
    if (!decision.restart) {
      const message = `sidechat stopped unexpectedly (${how}), ${decision.crashes} times within ${Math.round(this.policy.options.windowMs / 1000)} s; it is not restarted until you retry.`;
      this.options.log(message);
      this.setStatus({ state: 'failed', message, tried: [], crashes: decision.crashes });
      return;
    }
    const restartInMs = decision.delayMs;
    const message = `sidechat stopped unexpectedly (${how}); restarting in ${Math.round(restartInMs / 100) / 10} s.`;
    this.options.log(message);
    // Set before the status is told, so that a listener's request already waits for it.
    const restarted = new Promise<MessageConnection>((resolve, reject) => {
      this.scheduled = { resolve, reject };
    });
    restarted.catch(() => undefined);
    this.ready = restarted;
    this.restartTimer = this.clock.setTimeout(() => {
      this.restartTimer = undefined;
      const waiting = this.scheduled;
      this.scheduled = undefined;
      if (this.ready === restarted) this.ready = undefined;
      const started = this.start();
      if (waiting) started.then(waiting.resolve, waiting.reject);
    }, restartInMs);
    this.setStatus({ state: 'crashed', message, restartInMs });
  }

  /** The process id, for tests that kill it. */
  get pid(): number | undefined {
    return this.child?.pid;
  }
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
