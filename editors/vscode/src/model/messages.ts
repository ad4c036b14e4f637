/**
 * The messages between the extension host and the chat page (`postMessage` both ways).
 *
 * The host owns the daemon connection; the page owns the DOM. Both keep a `SessionModel` of the
 * active session, fed with the same transcript results and events.
 */

import type {
  AccountInfo,
  Attachment,
  ApprovalDecision,
  CostSummary,
  Effort,
  BudgetSnapshot,
  ImageInput,
  Session,
  SessionEventParams,
  SessionSummary,
  SessionTranscriptResult,
} from './wire';

/** Where the daemon is, as the page shows it. */
export type DaemonStatus =
  | { state: 'starting' }
  /**
   * `accounts`: what `initialize` listed, for the model picker. `attached`: the URL of the
   * listening daemon this window attached to (`sidechat.connection`), when it did not spawn one.
   */
  | { state: 'ready'; server: string; demo: boolean; accounts: AccountInfo[]; attached?: string }
  | { state: 'crashed'; message: string; restartInMs: number }
  /**
   * Stopped until the user retries. `crashes` is set when restarting was given up after that many
   * crashes within the restart window: the binary was found, so its setting is no help there.
   * `setting`: the setting that helps (default `sidechat.path`), e.g. `sidechat.connection`
   * when there was no daemon to attach to.
   */
  | { state: 'failed'; message: string; tried: string[]; crashes?: number; setting?: string };

export type HostToPage =
  | { type: 'daemon'; status: DaemonStatus }
  | { type: 'sessions'; sessions: SessionSummary[]; activeId: string | undefined }
  /** Start over with this session: the newest page of its transcript (`hasMore`: older remain). */
  | { type: 'reset'; sessionId: string; transcript: SessionTranscriptResult }
  /** An older page of the transcript (read backwards as the user scrolls up), merged in. */
  | { type: 'older'; sessionId: string; transcript: SessionTranscriptResult }
  /**
   * Entries fetched after a gap, merged into what is shown; `entriesOnly`: events came while they
   * were fetched, and the run's state is theirs (`SessionModel.applyTranscript`).
   */
  | { type: 'merge'; sessionId: string; transcript: SessionTranscriptResult; entriesOnly?: boolean }
  /** Where a `delegate` call's sub-agent stands, from the child session's transcript (after a load). */
  | { type: 'child'; sessionId: string; callId: string; transcript: SessionTranscriptResult }
  /** Events of the active session, in order, batched. */
  | { type: 'events'; sessionId: string; events: SessionEventParams[] }
  | { type: 'session'; session: Session }
  | { type: 'budget'; sessionId: string; snapshot: BudgetSnapshot }
  | { type: 'cost'; sessionId: string; cost: CostSummary }
  /** A send finished: its local "sending" mark can go. */
  | { type: 'sent'; clientMessageId: string; queued: boolean; error?: string }
  | { type: 'attach'; attachment: Attachment }
  | { type: 'error'; message: string }
  /** The `sidechat.*` settings the page follows. */
  | { type: 'settings'; settings: PageSettings }
  /** The answer to a `complete` of the same `requestId` (empty when nothing could be listed). */
  | { type: 'completions'; requestId: number; kind: CompletionKind; query: string; items: CompletionItem[] }
  /** The bytes of an image of the transcript (`session/image`), or why they could not be read. */
  | { type: 'image'; imageId: string; mediaType?: string; data?: string; error?: string };

/** What the composer completes: `@` workspace files or `/` commands. */
export type CompletionKind = 'file' | 'command';

/** One entry of the composer's completion list. */
export interface CompletionItem {
  /** A file's path, or a command's name without the slash. */
  name: string;
  /** A command's description. */
  description?: string;
  /** What a command takes, e.g. `<path>`. */
  argumentHint?: string;
}

/** The settings of the page (VS Code's `sidechat.*`). */
export interface PageSettings {
  /** `sidechat.showContextMeter`: the context meter in the header. */
  showContextMeter: boolean;
}

/** What the header changes of the open session (`session/update`). */
export interface SessionChange {
  account?: string;
  model?: string;
  autoCompact?: boolean;
  /** The reasoning effort; `null` goes back to the account's default. */
  effort?: Effort | null;
}

export type PageToHost =
  | { type: 'ready'; activeId?: string }
  /** `images`: pasted or dropped into the composer, sent with `chat/send`'s `images`. */
  | { type: 'send'; text: string; attachments: Attachment[]; images?: ImageInput[]; clientMessageId: string }
  /** The composer's completion list for what follows an `@` or a leading `/`; answered by `completions`. */
  | { type: 'complete'; requestId: number; kind: CompletionKind; query: string }
  /** The bytes of an `image` block of the open session, to draw it; answered by `image`. */
  | { type: 'image'; imageId: string }
  | { type: 'stop' }
  /** Answers the open session's turn that has no answer (`chat/resume`): a failed request, a crash. */
  | { type: 'resume' }
  /** `rule` goes with `allowWorkspace` (the rule to save), `reason` with `deny` (told to the model). */
  | { type: 'approve'; approvalId: string; decision: Exclude<ApprovalDecision, 'cancelled'>; rule?: string; reason?: string }
  | { type: 'withdraw'; pendingId: string }
  /** Deletes a carry-over note (`note/delete`): the model is no longer sent it. */
  | { type: 'deleteNote'; messageId: string }
  | { type: 'newSession' }
  | { type: 'switchSession'; sessionId: string }
  | { type: 'renameSession'; sessionId: string; title: string }
  /** The header's model picker or the context popover's automatic compaction switch. */
  | { type: 'updateSession'; sessionId: string; change: SessionChange }
  | { type: 'deleteSession'; sessionId: string }
  | { type: 'openDiff'; path: string; childSessionId?: string }
  | { type: 'copy'; text: string }
  /** A code block's Insert: the code at the cursor (replacing the selection) of the active editor. */
  | { type: 'insert'; text: string }
  | { type: 'openLink'; href: string }
  /** Opens a setting (default `sidechat.path`). */
  | { type: 'openSettings'; setting?: string }
  | { type: 'restartDaemon' }
  /** The transcript was scrolled to its top: the next older page, if any remains. */
  | { type: 'loadOlder' }
  /** Files and conversation back to before this user message (`session/rewind`), once confirmed. */
  | { type: 'undo'; messageId: string }
  /** A new session with the conversation up to this message (`session/fork`), then opened. */
  | { type: 'fork'; messageId: string };
