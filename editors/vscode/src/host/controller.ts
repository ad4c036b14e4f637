/**
 * The host side of the chat view: answers the page's messages with daemon requests, and feeds
 * the page the active session's transcript and events.
 *
 * It keeps its own `SessionModel` of the active session to notice gaps in `seq` (and refetch),
 * successful writes (and refresh changed files), spend (and refresh cost) and compactions (and
 * refresh the budget, which a `/compact` outside a run does not send). Events are batched
 * into one message per tick so a fast stream is a few messages, not thousands. After the daemon
 * restarts, the view is rebuilt from `session/transcript`; after an attachment to a listening
 * daemon drops and comes back, it goes on from its last seq.
 *
 * No `vscode` import: the extension supplies a `HostUi`; the end-to-end test supplies one that
 * talks to a page in Chromium.
 */

import { SessionModel } from '../model/session';
import type { CompletionKind, DaemonStatus, HostToPage, PageToHost } from '../model/messages';
import { completions, imageOf } from './composer';
import type { Attachment, ImageInput, Requests, Session, SessionEventParams, SessionFileDiffParams, SessionTranscriptResult } from '../model/wire';

/** What the controller needs of the daemon (`Daemon` provides it). */
export interface DaemonLike {
  status: DaemonStatus;
  request<M extends keyof Requests>(method: M, params: Requests[M]['params']): Promise<Requests[M]['result']>;
  onEvent(listener: (params: SessionEventParams) => void): () => void;
  onStatus(listener: (status: DaemonStatus) => void): () => void;
  restart(): Promise<void>;
  /** Asks for the events of the sessions shown (an attached daemon sends only those asked for). */
  follow?(sessionIds: string[]): void;
}

/** What the controller needs of the editor. */
export interface HostUi {
  post(message: HostToPage): void;
  /** Asks before an action; `action` labels the button that agrees (default `Delete`). */
  confirm(message: string, action?: string): Promise<boolean>;
  openDiff(path: string, before: string, after: string): Promise<void>;
  /** Opens the settings at `setting` (default `sidechat.path`). */
  openSettings(setting?: string): void;
  copy(text: string): void;
  /** Puts `text` at the cursor of the active editor, replacing its selection. */
  insert(text: string): Promise<void>;
  openLink(href: string): void;
  log(line: string): void;
}

export interface ControllerOptions {
  /** The open folder: sessions are listed for it and new ones are rooted there. */
  workspaceRoot?: string;
  /** How long events gather before they go to the page in one message. */
  batchMs?: number;
  /** Entries per `session/transcript` page (default 500). */
  pageSize?: number;
}

const PAGE = 500;

/** A `beforeSeq` past every seq: the newest page (the largest integer JSON keeps exact). */
const PAST_EVERY_SEQ = Number.MAX_SAFE_INTEGER;

export class ChatController {
  private active: SessionModel | undefined;
  /** Events that arrive while the active session's transcript loads. */
  private buffered: SessionEventParams[] | undefined;
  private outbox: SessionEventParams[] = [];
  private flushTimer: NodeJS.Timeout | undefined;
  private refreshTimers = new Map<string, NodeJS.Timeout>();
  private loading: Promise<void> | undefined;
  private readonly disposers: (() => void)[] = [];
  private pageReady = false;
  private wanted: string | undefined;
  private serial: Promise<void> = Promise.resolve();

  constructor(
    private readonly daemon: DaemonLike,
    private readonly ui: HostUi,
    private readonly options: ControllerOptions = {},
  ) {
    this.disposers.push(
      daemon.onEvent((params) => this.onEvent(params)),
      daemon.onStatus((status) => this.onStatus(status)),
    );
  }

  dispose(): void {
    for (const dispose of this.disposers) dispose();
    clearTimeout(this.flushTimer);
    for (const timer of this.refreshTimers.values()) clearTimeout(timer);
  }

  get activeSessionId(): string | undefined {
    return this.active?.sessionId;
  }

  /** The active session as the daemon has it now (`session/get`), if one is shown. */
  async activeSession(): Promise<Session | undefined> {
    const sessionId = this.active?.sessionId;
    return sessionId ? this.daemon.request('session/get', { sessionId }) : undefined;
  }

  /**
   * Sets the active session's idle rollover (`3h`, `1d`, `off`…) with `session/update`, then
   * shows the session as `session/get` reads it back. Undefined when no session is shown.
   */
  async setRollover(rollover: string): Promise<Session | undefined> {
    const model = this.active;
    if (!model) return undefined;
    const sessionId = model.sessionId;
    await this.daemon.request('session/update', { sessionId, rollover });
    const session = await this.daemon.request('session/get', { sessionId });
    if (this.active === model) this.ui.post({ type: 'session', session });
    return session;
  }

  /** Adds the selection to the composer. */
  attach(attachment: Attachment): void {
    this.ui.post({ type: 'attach', attachment });
  }

  /** Handles the page's messages one at a time, in order, so a load never races a send. */
  handle(message: PageToHost): Promise<void> {
    // Questions that change nothing are answered at once, not behind a send or a load.
    if (message.type === 'complete') return this.complete(message.requestId, message.kind, message.query);
    if (message.type === 'image') return this.image(message.imageId);
    return this.serially(() => this.dispatch(message));
  }

  /**
   * The composer's completion list. Before the first message there is no session to ask about:
   * one is started, as sending would. A question the daemon refuses (a session without a
   * workspace lists no files) gets an empty list, and the reason goes to the log.
   */
  private async complete(requestId: number, kind: CompletionKind, query: string): Promise<void> {
    let items: Awaited<ReturnType<typeof completions>> = [];
    try {
      if (this.loading) await this.loading;
      if (!this.active) {
        await this.serially(async () => {
          if (this.active) return;
          await this.load((await this.createSession()).id);
          await this.refreshSessions();
        });
      }
      const sessionId = this.active?.sessionId;
      if (sessionId) items = await completions((m, p) => this.daemon.request(m, p), sessionId, kind, query);
    } catch (error) {
      this.ui.log(`completing ${kind === 'file' ? '@' : '/'}${query} failed: ${errorText(error)}`);
    }
    this.ui.post({ type: 'completions', requestId, kind, query, items });
  }

  /** An image of the open session's transcript, for the page to draw. */
  private async image(imageId: string): Promise<void> {
    const sessionId = this.active?.sessionId;
    if (!sessionId) return;
    try {
      this.ui.post({ type: 'image', imageId, ...(await imageOf((m, p) => this.daemon.request(m, p), sessionId, imageId)) });
    } catch (error) {
      this.ui.post({ type: 'image', imageId, error: errorText(error) });
    }
  }

  private serially(task: () => Promise<void>): Promise<void> {
    const run = this.serial.then(task).catch((error) => this.ui.post({ type: 'error', message: errorText(error) }));
    this.serial = run;
    return run;
  }

  private async dispatch(message: PageToHost): Promise<void> {
    switch (message.type) {
      case 'ready':
        this.pageReady = true;
        this.wanted = message.activeId ?? this.active?.sessionId;
        this.active = undefined;
        this.ui.post({ type: 'daemon', status: this.daemon.status });
        if (this.daemon.status.state === 'ready') await this.rebuild();
        return;
      case 'loadOlder':
        return this.loadOlder();
      case 'send':
        return this.send(message.text, message.attachments, message.images ?? [], message.clientMessageId);
      case 'complete':
      case 'image':
        // Answered by `handle` outside the queue.
        return;
      case 'stop':
        if (this.active) await this.daemon.request('chat/stop', { sessionId: this.active.sessionId });
        return;
      case 'approve':
        await this.daemon.request('approval/respond', {
          approvalId: message.approvalId,
          decision: message.decision,
          ...(message.rule !== undefined ? { rule: message.rule } : {}),
          ...(message.reason !== undefined ? { reason: message.reason } : {}),
        });
        return;
      case 'resume':
        if (this.active) await this.daemon.request('chat/resume', { sessionId: this.active.sessionId });
        return;
      case 'withdraw':
        await this.daemon.request('interjection/cancel', { pendingId: message.pendingId });
        return;
      case 'deleteNote':
        // The page drops the note when the daemon's `noteDeleted` event comes back.
        await this.daemon.request('note/delete', { messageId: message.messageId });
        return;
      case 'newSession':
        await this.load((await this.createSession()).id);
        await this.refreshSessions();
        return;
      case 'switchSession':
        await this.load(message.sessionId);
        await this.refreshSessions();
        return;
      case 'renameSession':
        await this.daemon.request('session/update', { sessionId: message.sessionId, title: message.title });
        await this.refreshSessions();
        return;
      case 'updateSession': {
        await this.daemon.request('session/update', { sessionId: message.sessionId, ...message.change });
        // Read back: the page shows what the daemon holds, a model or switch it refused included.
        const session = await this.daemon.request('session/get', { sessionId: message.sessionId });
        if (this.active?.sessionId === session.id) this.ui.post({ type: 'session', session });
        // A new model has another window and tokenizer.
        if (message.change.model !== undefined || message.change.account !== undefined) {
          const { snapshot } = await this.daemon.request('session/budget', { sessionId: session.id });
          if (this.active?.sessionId === session.id) this.ui.post({ type: 'budget', sessionId: session.id, snapshot });
        }
        return;
      }
      case 'deleteSession': {
        if (!(await this.ui.confirm('Delete this chat and its transcript?'))) return;
        await this.daemon.request('session/delete', { sessionId: message.sessionId });
        if (this.active?.sessionId === message.sessionId) {
          this.active = undefined;
          const list = await this.listSessions();
          if (list[0]) await this.load(list[0].id);
        }
        await this.refreshSessions();
        return;
      }
      case 'openDiff': {
        if (!this.active) return;
        const diff = await this.daemon.request('session/fileDiff', fileDiffParams(this.active.sessionId, message));
        if (diff.omitted) {
          this.ui.post({ type: 'error', message: `${message.path} is too large to keep a copy of; open the file to see it.` });
          return;
        }
        await this.ui.openDiff(message.path, diff.before ?? '', diff.after ?? '');
        return;
      }
      case 'copy':
        this.ui.copy(message.text);
        return;
      case 'insert':
        await this.ui.insert(message.text);
        return;
      case 'openLink':
        this.ui.openLink(message.href);
        return;
      case 'openSettings':
        this.ui.openSettings(message.setting);
        return;
      case 'restartDaemon':
        await this.daemon.restart();
        return;
      case 'undo':
        return this.undo(message.messageId);
      case 'fork': {
        if (!this.active) return;
        const fork = await this.daemon.request('session/fork', { sessionId: this.active.sessionId, messageId: message.messageId });
        await this.load(fork.id);
        await this.refreshSessions();
        return;
      }
    }
  }

  /**
   * Undo to a user message: says which files come back and asks, then rewinds files and
   * conversation. The files are the daemon's own answer (a dry run), so those a command or a
   * sub-agent changed are named too. Files someone changed since are refused by the daemon
   * (-32602 naming them); the user may then overwrite them. The `rewound` event reloads the
   * transcript in every view.
   */
  private async undo(messageId: string): Promise<void> {
    const model = this.active;
    if (!model) return;
    const { files, notRestorable } = await this.filesRestoredBy(model.sessionId, messageId);
    const restored = files.length > 0 ? `These files will be restored: ${files.join(', ')}.` : 'No file will be restored.';
    const left = notRestorable.length > 0 ? ` Not restorable (changed by a command outside git), left as they are: ${notRestorable.join(', ')}.` : '';
    if (!(await this.ui.confirm(`Undo to here? The conversation from this message on is taken back. ${restored}${left}`, 'Undo'))) return;
    const params = { sessionId: model.sessionId, messageId, restore: 'both' as const };
    try {
      await this.daemon.request('session/rewind', params);
    } catch (error) {
      if (!isRewindConflict(error)) throw error;
      if (!(await this.ui.confirm(`${errorText(error)}.`, 'Overwrite'))) return;
      await this.daemon.request('session/rewind', { ...params, force: true });
    }
  }

  /**
   * The files undoing to `messageId` puts back, as the daemon's dry run answers: those it
   * restores and those it would refuse as changed since (which the user may overwrite); and
   * those a command changed outside git, which it cannot restore.
   */
  private async filesRestoredBy(sessionId: string, messageId: string): Promise<{ files: string[]; notRestorable: string[] }> {
    const planned = await this.daemon.request('session/rewind', { sessionId, messageId, restore: 'both', dryRun: true });
    const paths = (prefix: string) => planned.skipped.filter((f) => f.reason.startsWith(prefix)).map((f) => f.path);
    return { files: [...planned.restored.map((f) => f.path), ...paths('changed since')], notRestorable: paths('changed by a command outside git') };
  }

  private async send(text: string, attachments: Attachment[], images: ImageInput[], clientMessageId: string): Promise<void> {
    try {
      if (!this.active) await this.load((await this.createSession()).id);
      if (this.loading) await this.loading;
      const sessionId = this.active?.sessionId;
      if (!sessionId) throw new Error('no session to send to');
      const result = await this.daemon.request('chat/send', {
        sessionId,
        text,
        clientMessageId,
        ...(attachments.length > 0 ? { attachments } : {}),
        ...(images.length > 0 ? { images } : {}),
      });
      this.ui.post({ type: 'sent', clientMessageId, queued: result.queued });
      this.scheduleRefresh('sessions', () => this.refreshSessions());
    } catch (error) {
      this.ui.post({ type: 'sent', clientMessageId, queued: false, error: errorText(error) });
    }
  }

  private createSession() {
    return this.daemon.request('session/create', this.options.workspaceRoot ? { workspaceRoot: this.options.workspaceRoot } : {});
  }

  /** The sessions of the list, whose run states and titles it shows (followed when attached). */
  private async listSessions() {
    const { sessions } = await this.daemon.request('session/list', this.options.workspaceRoot ? { workspaceRoot: this.options.workspaceRoot, limit: 200 } : { limit: 200 });
    this.daemon.follow?.(sessions.map((s) => s.id));
    return sessions;
  }

  private async refreshSessions(): Promise<void> {
    const sessions = await this.listSessions();
    this.ui.post({ type: 'sessions', sessions, activeId: this.active?.sessionId });
  }

  /** After the page (re)loads or the daemon restarts: the list, then the session in view. */
  private async rebuild(): Promise<void> {
    const sessions = await this.listSessions();
    const wanted = this.wanted ?? this.active?.sessionId;
    const target = sessions.find((s) => s.id === wanted) ?? sessions[0];
    this.active = undefined;
    if (target) await this.load(target.id);
    this.ui.post({ type: 'sessions', sessions, activeId: this.activeSessionId });
  }

  /** Makes `sessionId` the session in view: the newest page of its transcript, then live events. */
  private load(sessionId: string): Promise<void> {
    this.flush();
    this.wanted = sessionId;
    const model = new SessionModel(sessionId);
    this.active = model;
    this.buffered = [];
    const loading = (async () => {
      const transcript = await this.daemon.request('session/transcript', {
        sessionId,
        beforeSeq: PAST_EVERY_SEQ,
        limit: this.pageSize,
      });
      if (this.active !== model) return;
      model.applyPage(transcript);
      this.ui.post({ type: 'reset', sessionId, transcript });
      const buffered = this.buffered ?? [];
      this.buffered = undefined;
      for (const params of buffered) this.accept(model, params);
      this.flush();
      await this.refreshDetails(model);
    })();
    const tracked: Promise<void> = loading
      .catch(() => undefined)
      .finally(() => {
        if (this.loading === tracked) this.loading = undefined;
      });
    this.loading = tracked;
    return loading;
  }

  private get pageSize(): number {
    return this.options.pageSize ?? PAGE;
  }

  /** The page before the oldest entry shown, when one remains: the user scrolled to the top. */
  private async loadOlder(): Promise<void> {
    const model = this.active;
    const beforeSeq = model?.olderBefore;
    if (!model || beforeSeq === undefined) return;
    const transcript = await this.daemon.request('session/transcript', {
      sessionId: model.sessionId,
      beforeSeq,
      limit: this.pageSize,
    });
    if (this.active !== model || model.olderBefore !== beforeSeq) return;
    model.applyPage(transcript);
    this.ui.post({ type: 'older', sessionId: model.sessionId, transcript });
  }

  /** Every entry after `afterSeq`, following `hasMore`, as one result. */
  private async fetchTranscript(sessionId: string, afterSeq: number): Promise<SessionTranscriptResult> {
    let result = await this.daemon.request('session/transcript', { sessionId, afterSeq, limit: this.pageSize });
    const entries = [...result.entries];
    while (result.hasMore && result.entries.length > 0) {
      const last = result.entries[result.entries.length - 1].seq;
      result = await this.daemon.request('session/transcript', { sessionId, afterSeq: last, limit: this.pageSize });
      entries.push(...result.entries);
    }
    return { ...result, entries, hasMore: false };
  }

  /**
   * The session's header, files and plan, then its sub-agents; its context and cost are posted
   * as each comes, not waited for: a daemon just started answers `session/budget` only once its
   * tokenizer is built, and the page (and every message after this one) must not wait for it.
   */
  private async refreshDetails(model: SessionModel): Promise<void> {
    const sessionId = model.sessionId;
    const told = (what: string) => (error: unknown) => this.ui.log(`reading the session's ${what} failed: ${errorText(error)}`);
    void this.daemon.request('session/budget', { sessionId }).then(({ snapshot }) => {
      if (this.active === model) this.ui.post({ type: 'budget', sessionId, snapshot });
    }, told('context'));
    void this.daemon.request('session/cost', { sessionId }).then(({ cost }) => {
      if (this.active === model) this.ui.post({ type: 'cost', sessionId, cost });
    }, told('cost'));
    const session = await this.daemon.request('session/get', { sessionId });
    if (this.active !== model) return;
    model.setChangedFiles(session.changedFiles);
    model.setPlan(session.plan ?? undefined);
    this.ui.post({ type: 'session', session });
    await this.loadDelegations(model, session.children ?? []).catch(told('sub-agents'));
  }

  /**
   * After a load: where each `delegate` call still working stands, from its child session's
   * transcript (the `delegation` events that told it live were before the load).
   */
  private async loadDelegations(model: SessionModel, children: string[]): Promise<void> {
    const open = new Set(model.unfinishedDelegations());
    for (const childId of children) {
      if (open.size === 0) return;
      const child = await this.daemon.request('session/get', { sessionId: childId });
      const callId = child.parentCallId;
      if (!callId || !open.has(callId)) continue;
      open.delete(callId);
      const transcript = await this.fetchTranscript(childId, 0);
      if (this.active !== model) return;
      model.applyChildTranscript(callId, transcript);
      this.ui.post({ type: 'child', sessionId: model.sessionId, callId, transcript });
    }
  }

  private onEvent(params: SessionEventParams): void {
    const model = this.active;
    if (!model || params.sessionId !== model.sessionId) {
      const kind = params.event.kind;
      // Another session's state or title shows in the session list.
      if (kind === 'runStarted' || kind === 'runFinished' || kind === 'sessionUpdated') this.scheduleRefresh('sessions', () => this.refreshSessions());
      return;
    }
    if (this.buffered) {
      this.buffered.push(params);
      return;
    }
    this.accept(model, params);
  }

  private accept(model: SessionModel, params: SessionEventParams): void {
    const applied = model.apply(params);
    if (applied.duplicate) return;
    this.outbox.push(params);
    if (this.flushTimer === undefined) this.flushTimer = setTimeout(() => this.flush(), this.options.batchMs ?? 16);
    if (applied.gapAfter !== undefined) void this.refetch(model, applied.gapAfter);
    const sessionId = model.sessionId;
    if (applied.filesChanged) {
      this.scheduleRefresh('session', () => this.refreshSession(model));
    }
    if (applied.spendChanged) {
      this.scheduleRefresh('cost', async () => {
        const { cost } = await this.daemon.request('session/cost', { sessionId });
        if (this.active === model) this.ui.post({ type: 'cost', sessionId, cost });
      });
      // The session's tokens by kind, for the context popover.
      this.scheduleRefresh('session', () => this.refreshSession(model));
    }
    if (applied.budgetChanged) {
      this.scheduleRefresh('budget', async () => {
        const { snapshot } = await this.daemon.request('session/budget', { sessionId });
        if (this.active === model) this.ui.post({ type: 'budget', sessionId, snapshot });
      });
    }
    const kind = params.event.kind;
    if (kind === 'runStarted' || kind === 'runFinished' || kind === 'sessionUpdated') this.scheduleRefresh('sessions', () => this.refreshSessions());
    // The header (title, model, effort) follows the session as the daemon has it now.
    if (kind === 'sessionUpdated') this.scheduleRefresh('session', () => this.refreshSession(model));
    // A rewind marked entries rewound: the transcript is read again to show them folded.
    if (kind === 'rewound') void this.serially(() => (this.active === model ? this.load(sessionId) : Promise.resolve()));
  }

  /** The session as `session/get` reads it now: its changed files, plan and header. */
  private async refreshSession(model: SessionModel): Promise<void> {
    const session = await this.daemon.request('session/get', { sessionId: model.sessionId });
    if (this.active !== model) return;
    model.setChangedFiles(session.changedFiles);
    model.setPlan(session.plan ?? undefined);
    this.ui.post({ type: 'session', session });
  }

  private async refetch(model: SessionModel, afterSeq: number): Promise<void> {
    try {
      const asked = model.lastSeq;
      const transcript = await this.fetchTranscript(model.sessionId, afterSeq);
      if (this.active !== model) return;
      // Events that came meanwhile (a run that started) may be newer than the result's state.
      const entriesOnly = model.lastSeq > asked;
      model.applyTranscript(transcript, entriesOnly);
      this.flush();
      this.ui.post({ type: 'merge', sessionId: model.sessionId, transcript, ...(entriesOnly ? { entriesOnly } : {}) });
    } catch (error) {
      this.ui.log(`refetch after a gap failed: ${errorText(error)}`);
    }
  }

  private flush(): void {
    clearTimeout(this.flushTimer);
    this.flushTimer = undefined;
    if (this.outbox.length === 0 || !this.active) {
      this.outbox = [];
      return;
    }
    const events = coalesceDeltas(this.outbox);
    this.outbox = [];
    this.ui.post({ type: 'events', sessionId: this.active.sessionId, events });
  }

  /** Runs `task` once shortly, however many times it is asked for meanwhile. */
  private scheduleRefresh(name: string, task: () => Promise<void>): void {
    if (this.refreshTimers.has(name)) return;
    this.refreshTimers.set(
      name,
      setTimeout(() => {
        this.refreshTimers.delete(name);
        task().catch((error) => this.ui.log(`refreshing ${name} failed: ${errorText(error)}`));
      }, 50),
    );
  }

  private onStatus(status: DaemonStatus): void {
    this.ui.post({ type: 'daemon', status });
    if (status.state !== 'ready' || !this.pageReady) return;
    // Attached again to a listening daemon, the session shown goes on from its last seq; a
    // daemon started afresh is read anew.
    void this.serially(() => (status.attached && this.active ? this.resume(this.active) : this.rebuild()));
  }

  /**
   * After an attachment dropped and came back: the session's events again (`session/subscribe`),
   * then what was missed meanwhile (`session/transcript` after the last seq shown), merged as a
   * gap is; the details and the list as they are now.
   */
  private async resume(model: SessionModel): Promise<void> {
    this.flush();
    await this.daemon.request('session/subscribe', { sessionId: model.sessionId });
    await this.refetch(model, model.lastSeq);
    await this.refreshDetails(model);
    await this.refreshSessions();
  }
}

/**
 * Joins runs of text (or thinking) deltas of one message into one delta carrying the last
 * `seq`: a batch of thousands of tokens reaches the page as a few events. The host has already
 * checked the sequence, so the page only needs the order and the text.
 */
export function coalesceDeltas(events: SessionEventParams[]): SessionEventParams[] {
  const out: SessionEventParams[] = [];
  let pieces: string[] = [];
  const close = () => {
    const last = out[out.length - 1];
    if (pieces.length > 1 && last && (last.event.kind === 'textDelta' || last.event.kind === 'thinkingDelta')) {
      out[out.length - 1] = { ...last, event: { ...last.event, text: pieces.join('') } };
    }
    pieces = [];
  };
  for (const params of events) {
    const event = params.event;
    const last = out[out.length - 1];
    if (
      (event.kind === 'textDelta' || event.kind === 'thinkingDelta') &&
      last &&
      last.event.kind === event.kind &&
      last.event.messageId === event.messageId &&
      last.runId === params.runId
    ) {
      pieces.push(event.text);
      out[out.length - 1] = { ...params, event: last.event };
      continue;
    }
    close();
    out.push(params);
    if (event.kind === 'textDelta' || event.kind === 'thinkingDelta') pieces = [event.text];
  }
  close();
  return out;
}

/** A rewind refused because files changed since the session wrote them (force overwrites). */
function isRewindConflict(error: unknown): boolean {
  const code = typeof error === 'object' && error !== null && 'code' in error ? (error as { code: unknown }).code : undefined;
  return code === -32602 && /changed since the session last wrote them/.test(errorText(error));
}

function errorText(error: unknown): string {
  if (error instanceof Error) return error.message;
  if (typeof error === 'object' && error !== null && 'message' in error) return String((error as { message: unknown }).message);
  return String(error);
}

/** `session/fileDiff`'s params for a file of the list: a sub-agent's change names its child. */
export function fileDiffParams(sessionId: string, file: { path: string; childSessionId?: string }): SessionFileDiffParams {
  return file.childSessionId ? { sessionId, path: file.path, childSessionId: file.childSessionId } : { sessionId, path: file.path };
}
