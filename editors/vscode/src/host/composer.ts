/**
 * The host's answers to the composer's questions that change nothing: the completion list for
 * `@` (workspace files, `workspace/files`) and `/` (commands, `session/commands`), and the bytes
 * of a transcript's image (`session/image`). Kept apart from the controller's ordered queue: a
 * completion asked while a message is being sent must not wait behind it.
 */

import type { CompletionItem, CompletionKind } from '../model/messages';
import type { Requests } from '../model/wire';

/** How many files an `@` completion lists. */
export const FILE_LIMIT = 50;

type Request = <M extends keyof Requests>(method: M, params: Requests[M]['params']) => Promise<Requests[M]['result']>;

/**
 * The completion list for `query` typed after `@` (files, best match first, as the daemon ranks
 * them) or after a leading `/` (the commands whose name starts with it, whatever the case,
 * built-in ones first as the daemon lists them).
 */
export async function completions(request: Request, sessionId: string, kind: CompletionKind, query: string): Promise<CompletionItem[]> {
  if (kind === 'file') {
    const { files } = await request('workspace/files', { sessionId, query, limit: FILE_LIMIT });
    return files.map((name) => ({ name }));
  }
  const { commands } = await request('session/commands', { sessionId });
  const prefix = query.toLowerCase();
  return commands
    .filter((c) => c.name.toLowerCase().startsWith(prefix))
    .map((c) => ({ name: c.name, description: c.description, ...(c.argumentHint ? { argumentHint: c.argumentHint } : {}) }));
}

/** The bytes of an image block of the session, base64. */
export async function imageOf(request: Request, sessionId: string, imageId: string): Promise<{ mediaType: string; data: string }> {
  const { mediaType, data } = await request('session/image', { sessionId, imageId });
  return { mediaType, data };
}
