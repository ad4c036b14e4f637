/**
 * Finding a listening daemon (`sidechat serve --listen`) the way `sidechat chat --attach` does
 * (`src/client/daemon.rs`): its `serve.json` (URL, token, pid, database) in
 * `$XDG_RUNTIME_DIR/sidechat/`, or in the data folder (`$XDG_DATA_HOME/sidechat/`, else
 * `~/.local/share/sidechat/`) without a runtime folder; a daemon on another database than the
 * one this window would spawn a daemon on is not attached to, so two windows on one database
 * share one daemon and a window on its own database keeps its own.
 *
 * The environment is the one a spawned daemon would get (the host's with `sidechat.env`), so
 * both look in the same folder. No `vscode` import.
 */

import { readFileSync, realpathSync } from 'node:fs';
import { isAbsolute, join, resolve } from 'node:path';

/** The contents of `serve.json`. */
export interface ServeFile {
  /** `ws://host:port/`. */
  url: string;
  token: string;
  pid: number;
  /** The database the daemon serves. */
  db?: string;
}

/** A daemon to attach to, or why there is none (said to the user). */
export type Found = { file: ServeFile; path: string } | { reason: string; path?: string };

/** Where `serve.json` is, as the daemon writes it; undefined when no folder is known. */
export function serveFilePath(env: NodeJS.ProcessEnv, home: string): string | undefined {
  const runtime = env.XDG_RUNTIME_DIR;
  if (runtime) return join(runtime, 'sidechat', 'serve.json');
  const data = dataDir(env, home);
  return data && join(data, 'serve.json');
}

function dataDir(env: NodeJS.ProcessEnv, home: string): string | undefined {
  if (env.XDG_DATA_HOME) return join(env.XDG_DATA_HOME, 'sidechat');
  const base = env.HOME || home;
  return base ? join(base, '.local', 'share', 'sidechat') : undefined;
}

/**
 * The database a daemon spawned with `args` (after `serve`) and `env` would open: `--db`,
 * else `SIDECHAT_DB`, else `sidechat.db` in the data folder.
 */
export function databaseOf(args: string[], env: NodeJS.ProcessEnv, home: string): string | undefined {
  let db: string | undefined;
  for (let i = 0; i < args.length; i++) {
    if (args[i] === '--db' && i + 1 < args.length) db = args[i + 1];
    else if (args[i].startsWith('--db=')) db = args[i].slice('--db='.length);
  }
  db ??= env.SIDECHAT_DB || undefined;
  if (db) return isAbsolute(db) ? db : resolve(db);
  const data = dataDir(env, home);
  return data && join(data, 'sidechat.db');
}

/** The listening daemon `serve.json` names for database `db`, or why there is none. */
export function findListening(env: NodeJS.ProcessEnv, home: string, db: string | undefined): Found {
  const path = serveFilePath(env, home);
  if (!path) return { reason: 'neither XDG_RUNTIME_DIR, XDG_DATA_HOME nor HOME is set' };
  let file: ServeFile;
  try {
    file = parse(readFileSync(path, 'utf8'));
  } catch (error) {
    const missing = (error as NodeJS.ErrnoException).code === 'ENOENT';
    return { path, reason: missing ? `no daemon is listening (there is no ${path})` : `${path} is not a serve file: ${errorText(error)}` };
  }
  if (!alive(file.pid)) return { path, reason: `the daemon ${path} names (pid ${file.pid}) is not running` };
  if (file.db && db && !samePath(file.db, db)) return { path, reason: `the listening daemon at ${file.url} serves ${file.db}, not ${db}` };
  return { file, path };
}

function parse(text: string): ServeFile {
  const value = JSON.parse(text) as Partial<ServeFile>;
  if (typeof value.url !== 'string' || typeof value.token !== 'string' || typeof value.pid !== 'number') {
    throw new Error('it lacks url, token or pid');
  }
  return { url: value.url, token: value.token, pid: value.pid, ...(typeof value.db === 'string' ? { db: value.db } : {}) };
}

/** Whether process `pid` exists (a file left by a killed daemon names one that does not). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: it exists, as another user's.
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function samePath(a: string, b: string): boolean {
  if (a === b) return true;
  try {
    return realpathSync(a) === realpathSync(b);
  } catch {
    return false;
  }
}

function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
