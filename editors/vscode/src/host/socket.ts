/**
 * JSON-RPC over a WebSocket to a listening daemon (`sidechat serve --listen`): one message per
 * WebSocket text message, as the daemon's jsonrpsee server speaks it, under the same
 * vscode-jsonrpc connection the spawned daemon's stdio gets.
 *
 * The `ws` package, bundled into the extension: VS Code's extension host runs the Node of its
 * Electron (18 for VS Code 1.85, the oldest this extension supports), which has no global
 * WebSocket, and Node 20's is behind a flag; a browser-style WebSocket also cannot send the
 * `Authorization` header, which keeps the token out of URLs and logs.
 */

import { AbstractMessageReader, AbstractMessageWriter, type DataCallback, type Disposable, type Message, type MessageReader, type MessageWriter } from 'vscode-jsonrpc/node';
import WebSocket from 'ws';

/**
 * The address `ws` opens for a `serve.json` URL: a unix socket's `ws+unix:///path` becomes
 * `ws+unix:/path:/` (`ws` reads the socket path up to a `:` and the request path after it).
 */
export function socketTarget(url: string): string {
  const unix = /^ws\+unix:\/\/(\/[^:]*)$/.exec(url);
  return unix ? `ws+unix:${unix[1]}:/` : url;
}

/** Opens `url` with the daemon's `token`; rejects with what the daemon answered (401, 403…). */
export function openSocket(url: string, token: string): Promise<WebSocket> {
  return new Promise((resolve, reject) => {
    let socket: WebSocket;
    try {
      // A guard against a peer that never answers, not a measure of anything.
      socket = new WebSocket(socketTarget(url), { headers: { authorization: `Bearer ${token}` }, handshakeTimeout: 10_000 });
    } catch (error) {
      reject(new Error(`${url} is not a WebSocket URL: ${error instanceof Error ? error.message : String(error)}`));
      return;
    }
    const fail = (why: string) => {
      socket.removeAllListeners();
      socket.on('error', () => undefined);
      socket.terminate();
      reject(new Error(`cannot attach to the daemon at ${url}: ${why}`));
    };
    socket.once('open', () => {
      socket.removeAllListeners();
      resolve(socket);
    });
    socket.once('unexpected-response', (_request, response) => fail(`it answered HTTP ${response.statusCode}${response.statusCode === 401 ? ' (the token in serve.json is not this daemon’s)' : ''}`));
    socket.once('error', (error) => fail(error.message));
  });
}

/** Each text message of the socket is one JSON-RPC message. */
export class SocketReader extends AbstractMessageReader implements MessageReader {
  private callback: DataCallback | undefined;

  constructor(socket: WebSocket) {
    super();
    socket.on('message', (data, isBinary) => {
      try {
        const text = isBinary ? Buffer.from(data as Buffer).toString('utf8') : String(data);
        this.callback?.(JSON.parse(text) as Message);
      } catch (error) {
        this.fireError(error);
      }
    });
    socket.on('error', (error) => this.fireError(error));
    socket.on('close', () => this.fireClose());
  }

  listen(callback: DataCallback): Disposable {
    this.callback = callback;
    return { dispose: () => (this.callback = undefined) };
  }
}

/** Writes each JSON-RPC message as one text message. */
export class SocketWriter extends AbstractMessageWriter implements MessageWriter {
  constructor(private readonly socket: WebSocket) {
    super();
  }

  write(message: Message): Promise<void> {
    return new Promise((resolve, reject) => {
      if (this.socket.readyState !== WebSocket.OPEN) {
        const error = new Error('the connection to the daemon is closed');
        this.fireError(error, message);
        reject(error);
        return;
      }
      this.socket.send(JSON.stringify(message), (error) => {
        if (error) {
          this.fireError(error, message);
          reject(error);
        } else resolve();
      });
    });
  }

  end(): void {
    this.socket.close();
  }
}
