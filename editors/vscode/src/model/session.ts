/**
 * The session model: one session's transcript as a client draws it, built from
 * `session/transcript` results and `session/event` notifications.
 *
 * Pure TypeScript with no `vscode` import, so the extension host (gap detection, refreshes) and
 * the chat page (rendering) run the same code on the same events. It tolerates what a stream
 * over a restartable process delivers: deltas before their message, duplicated events, gaps
 * (reported through `gapAfter` so the owner can refetch) and approvals resolved elsewhere.
 */

import type {
  Block,
  BudgetSnapshot,
  LineRange,
  ChangedFile,
  CompactionMethod,
  CompactionReason,
  CostSummary,
  DelegatedApproval,
  Event,
  FinishReason,
  MessageStatus,
  NoticeLevel,
  PendingApproval,
  PendingInterjection,
  Plan,
  Reconciliation,
  SessionEventParams,
  SessionState,
  SessionTranscriptResult,
  ToolCallStatus,
  TranscriptEntry,
} from './wire';

export type AssistantBlock = { type: 'text' | 'thinking'; text: string };

interface EntryBase {
  /** Stable key: message id, `tool:<callId>` or `inj:<pendingId>`. */
  key: string;
  /** The `seq` that placed it; live entries not yet committed have none. */
  seq?: number;
  /** Taken back by `session/rewind`: shown folded, never sent to a model again. */
  rewound?: boolean;
  /** Increases whenever the entry changes, so a renderer redraws only what changed. */
  rev: number;
}

/** An image of a message, as the transcript refers to it (`session/image` gives its bytes). */
export type ImageRef = Omit<Extract<Block, { type: 'image' }>, 'type'>;

/** What a message's attachment chip shows: its name and, for a mention, the lines and size. */
export interface AttachmentChip {
  name: string;
  range?: LineRange;
  /** Bytes of the file (or listing) as read, for a mention. */
  size?: number;
}

export interface UserEntry extends EntryBase {
  kind: 'user';
  text: string;
  attachments: AttachmentChip[];
  /** Images sent with the message. */
  images?: ImageRef[];
  /** `interjection` when typed while a run worked and delivered with tool results. */
  source: 'turn' | 'interjection';
  /** A custom slash command's use: its name and the prompt the model read for the typed text. */
  command?: { name: string; prompt: string };
}

export interface AssistantEntry extends EntryBase {
  kind: 'assistant';
  blocks: AssistantBlock[];
  streaming: boolean;
  /** As stored, or `refused` when its run ended because the model declined (seen live). */
  status: MessageStatus | 'refused';
}

export interface ToolEntry extends EntryBase {
  kind: 'tool';
  callId: string;
  tool: string;
  summary: string;
  input: unknown;
  status: ToolCallStatus;
  output?: string;
  /** Images the call read (`read_file` on an image), attached to its result. */
  images?: ImageRef[];
  /** For a `delegate` call: the sub-agent working on its task, as far as it has been seen. */
  delegation?: DelegationView;
}

/** The sub-agent's latest step: one of its tool calls and where that stands. */
export interface DelegationStep {
  callId: string;
  summary: string;
  status: ToolCallStatus;
}

/**
 * What a `delegate` call's sub-agent (a child session) is doing, from the `delegation` events
 * of the parent or, after a reload, from the child's own transcript. The task is the call's
 * input, its final answer the call's output.
 */
export interface DelegationView {
  childSessionId: string;
  /** The child's highest `seq` seen: older events (already in a child transcript) are skipped. */
  childSeq: number;
  /** Whether the child's run works, waits for an approval, or how it ended. */
  state: 'running' | 'awaitingApproval' | FinishReason;
  step?: DelegationStep;
  /** The words of the child's latest message. */
  text: string;
}

export interface NoticeEntry extends EntryBase {
  kind: 'notice';
  level: NoticeLevel;
  message: string;
}

export interface NoteEntry extends EntryBase {
  kind: 'note';
  text: string;
}

/** How a compaction went, from its `compaction` event (seen live, not kept in the transcript). */
export interface CompactionInfo {
  reason: CompactionReason;
  tokensBefore: number;
  tokensAfter: number;
}

/**
 * What stands for older entries in what the model is sent: their summary, a marker that they
 * were left out (`drop`, empty text), or a note carried over from an earlier context.
 */
export interface SummaryEntry extends EntryBase {
  kind: 'summary';
  method: CompactionMethod;
  text: string;
  /** The folded range by `seq`, inclusive; absent for a carry-over note. */
  fromSeq?: number;
  toSeq?: number;
  /** How many messages the range held. */
  messages: number;
  compaction?: CompactionInfo;
}

export type Entry = UserEntry | AssistantEntry | ToolEntry | NoticeEntry | NoteEntry | SummaryEntry;

/** A message typed while a run works, not yet delivered or folded into the next turn. */
export interface Waiting {
  pendingId: string;
  text: string;
  /** `leased` while a model request carrying it is on its way. */
  status: string;
}

/** Changed file as listed; counts are absent until `session/get` reports them. */
export interface ChangedFileView {
  path: string;
  added?: number;
  removed?: number;
  /** The sub-agent (child session) that changed the file; absent for the session's own. */
  childSessionId?: string;
}

/** The key of a changed file: its path, or for a sub-agent's change, the child and the path. */
export function changedFileKey(file: { path: string; childSessionId?: string | null }): string {
  return file.childSessionId ? `${file.childSessionId}:${file.path}` : file.path;
}

/** What applying one event did, for the owner to react. */
export interface Applied {
  /** Already seen (its `seq` is not above the last one). */
  duplicate: boolean;
  /** Events were missed: refetch `session/transcript` after this `seq`. */
  gapAfter?: number;
  /** A write or edit succeeded: `session/get` has new changed-file counts. */
  filesChanged: boolean;
  /** The run used tokens or ended: budget and cost are worth asking again. */
  spendChanged: boolean;
  /** The history was compacted: the budget is worth asking again (no run may follow). */
  budgetChanged: boolean;
}

const WRITING_TOOLS = new Set(['write_file', 'edit_file']);

/** The words of a message: its text, and interjections promoted into it. */
function imagesOf(blocks: TranscriptEntry['blocks']): ImageRef[] {
  return blocks.flatMap((b) => (b.type === 'image' ? [{ imageId: b.imageId, mediaType: b.mediaType, width: b.width, height: b.height, bytes: b.bytes }] : []));
}

function chipsOf(blocks: TranscriptEntry['blocks']): AttachmentChip[] {
  return blocks.flatMap((b) =>
    b.type === 'attachment' ? [{ name: b.name, ...(b.range ? { range: b.range } : {}), ...(typeof b.size === 'number' ? { size: b.size } : {}) }] : [],
  );
}

/** The daemon's words in a result whose image goes with it (see `tool_phase.rs`). */
const IMAGE_ATTACHED = 'It is attached to this result.';

function textOf(blocks: TranscriptEntry['blocks']): string {
  return blocks
    .map((b) => (b.type === 'text' || (b.type === 'interjection' && b.promoted) ? b.text : ''))
    .filter((t) => t.length > 0)
    .join('\n\n');
}

function pathOf(input: unknown): string | undefined {
  if (typeof input === 'object' && input !== null && 'path' in input) {
    const path = (input as { path: unknown }).path;
    return typeof path === 'string' ? path : undefined;
  }
  return undefined;
}

export class SessionModel {
  readonly sessionId: string;
  state: SessionState = 'idle';
  lastSeq = 0;
  /**
   * Older entries than those loaded remain, before this seq: a long session is loaded from its
   * newest page, and older pages as the user scrolls back.
   */
  olderBefore: number | undefined;
  /** The running run's id, when one is known. */
  runId: string | undefined;
  budget: BudgetSnapshot | undefined;
  /** The last request's estimate beside what the provider reported (from a `budget` event). */
  actual: Reconciliation | undefined;
  cost: CostSummary | undefined;
  approvals = new Map<string, PendingApproval>();
  /** Approvals the session's sub-agents wait for, answered from here as any other. */
  delegatedApprovals = new Map<string, DelegatedApproval>();
  waiting = new Map<string, Waiting>();
  changedFiles = new Map<string, ChangedFileView>();
  /** The model's latest plan (`update_plan`), from a `plan` event or `session/get`. */
  plan: Plan | undefined;
  /** Increases on any change of state, approvals, waiting messages, files, budget or cost. */
  chromeRev = 0;

  private entries = new Map<string, Entry>();
  /** `compaction` events whose summary entry has not arrived yet, by its message id. */
  private compactions = new Map<string, CompactionInfo>();
  private order: string[] = [];
  private orderRev = 0;
  private revCounter = 0;

  constructor(sessionId: string) {
    this.sessionId = sessionId;
  }

  /**
   * Whether a run that ended for `reason` failed before the model said anything (the provider
   * refused the request): its answer is empty and the turn has none, as the daemon's
   * `unanswered` says. (A user message last is not enough: input promoted at a run's end is
   * committed before that run's `runFinished`, and the next run answers it.)
   */
  private unansweredAfter(reason: FinishReason): boolean {
    if (reason !== 'error') return false;
    const said = this.list().filter((e) => !e.rewound && (e.kind === 'user' || e.kind === 'assistant' || e.kind === 'tool'));
    const last = said[said.length - 1];
    return last?.kind === 'assistant' && last.status === 'failed' && last.blocks.length === 0;
  }

  /** Entries in display order. */
  list(): Entry[] {
    return this.order.map((key) => this.entries.get(key)).filter((e): e is Entry => e !== undefined);
  }

  get(key: string): Entry | undefined {
    return this.entries.get(key);
  }

  /** Changes whenever entries are added, removed or reordered. */
  get structureRev(): number {
    return this.orderRev;
  }

  /**
   * Builds or merges from a `session/transcript` result (a load, a reload, or a gap refetch).
   * `entriesOnly`: events came in while it was asked for, so it may say where the run stood
   * before them; its entries merge, and the run's state, approvals and waiting messages stay as
   * those events set them.
   */
  applyTranscript(result: SessionTranscriptResult, entriesOnly = false): void {
    for (const entry of result.entries) this.applyEntry(entry);
    if (entriesOnly) {
      this.lastSeq = Math.max(this.lastSeq, result.lastSeq);
      this.chromeRev++;
      return;
    }
    this.state = result.state;
    this.approvals = new Map(result.pendingApprovals.map((a) => [a.approvalId, a]));
    this.delegatedApprovals = new Map((result.delegatedApprovals ?? []).map((d) => [d.approval.approvalId, d]));
    this.waiting = new Map(result.pendingInterjections.map((p) => [p.pendingId, waitingOf(p)]));
    for (const approval of result.pendingApprovals) this.markTool(approval.callId, 'awaitingApproval');
    for (const delegated of this.delegatedApprovals.values()) {
      this.markTool(delegated.callId, 'awaitingApproval');
      const view = this.delegationOf(delegated.callId, delegated.childSessionId);
      if (view) {
        view.state = 'awaitingApproval';
        view.step = { callId: delegated.approval.callId, summary: delegated.approval.summary, status: 'awaitingApproval' };
      }
    }
    if (result.state === 'idle' || result.state === 'unanswered') this.endStreaming(undefined);
    this.lastSeq = Math.max(this.lastSeq, result.lastSeq);
    this.chromeRev++;
  }

  /**
   * Merges a page read backwards (`session/transcript` with `beforeSeq`: the newest page of a
   * load, or an older one): its entries, and whether older ones remain before it.
   */
  applyPage(result: SessionTranscriptResult): void {
    this.applyTranscript(result);
    const first = result.entries[0];
    this.olderBefore = result.hasMore && first !== undefined ? first.seq : undefined;
    this.chromeRev++;
  }

  /** Applies one `session/event`. */
  apply(params: SessionEventParams): Applied {
    const applied: Applied = { duplicate: false, filesChanged: false, spendChanged: false, budgetChanged: false };
    if (params.seq <= this.lastSeq) {
      applied.duplicate = true;
      return applied;
    }
    if (params.seq > this.lastSeq + 1) applied.gapAfter = this.lastSeq;
    this.lastSeq = params.seq;
    const event = params.event;
    switch (event.kind) {
      case 'runStarted':
        this.runId = params.runId ?? undefined;
        this.setState('running');
        break;
      case 'messageStarted':
        if (event.role === 'assistant') this.assistant(event.messageId);
        break;
      case 'textDelta':
      case 'thinkingDelta': {
        const entry = this.assistant(event.messageId);
        const type = event.kind === 'textDelta' ? 'text' : 'thinking';
        const last = entry.blocks[entry.blocks.length - 1];
        if (last && last.type === type) last.text += event.text;
        else entry.blocks.push({ type, text: event.text });
        this.touch(entry);
        break;
      }
      case 'messageCompleted':
        this.applyEntry(event.entry);
        break;
      case 'toolCallStarted': {
        const tool = this.tool(event.callId, event.tool, event.input);
        // An entry a sub-agent's event made first knows only the call's id.
        tool.input = event.input;
        tool.summary = event.summary;
        this.touch(tool);
        break;
      }
      case 'toolCallUpdated': {
        const tool = this.entries.get(`tool:${event.callId}`);
        if (tool && tool.kind === 'tool') {
          // A `running` that comes after its sub-agent asked for an approval does not hide it.
          tool.status = event.status === 'running' && this.delegatedWaitsFor(event.callId) ? 'awaitingApproval' : event.status;
          if (event.output !== undefined && event.output !== null) tool.output = event.output;
          this.touch(tool);
          if (event.status === 'done' && WRITING_TOOLS.has(tool.tool)) {
            const path = pathOf(tool.input);
            if (path !== undefined && !this.changedFiles.has(path)) this.changedFiles.set(path, { path });
            applied.filesChanged = true;
            this.chromeRev++;
          }
        } else if (event.status === 'done') {
          // A tool we never saw start (missed events): the counts come from `session/get`.
          applied.filesChanged = true;
        }
        break;
      }
      case 'approvalRequested':
        this.approvals.set(event.approval.approvalId, event.approval);
        this.tool(event.approval.callId, event.approval.tool, event.approval.input);
        this.markTool(event.approval.callId, 'awaitingApproval');
        this.setState('awaitingApproval');
        break;
      case 'approvalResolved':
        if (this.approvals.delete(event.approvalId)) this.chromeRev++;
        this.leaveAwaiting();
        break;
      case 'interjectionQueued':
        this.waiting.set(event.pendingId, { pendingId: event.pendingId, text: event.text, status: 'pending' });
        this.chromeRev++;
        break;
      case 'interjectionDelivered':
      case 'interjectionPromoted':
        for (const id of event.pendingIds) {
          const waiting = this.waiting.get(id);
          this.waiting.delete(id);
          if (event.kind === 'interjectionDelivered' && waiting && !this.entries.has(`inj:${id}`)) {
            // The tool message carrying it may come later; show the words where they went.
            this.insert({ kind: 'user', key: `inj:${id}`, rev: 0, text: waiting.text, attachments: [], source: 'interjection' });
          }
        }
        this.chromeRev++;
        break;
      case 'interjectionCancelled':
        if (this.waiting.delete(event.pendingId)) this.chromeRev++;
        break;
      case 'notice':
        // Stored as a `notice` entry with this id; a reload shows the same entry.
        if (!this.entries.has(event.messageId)) {
          this.insert({ kind: 'notice', key: event.messageId, seq: params.seq, rev: 0, level: event.level, message: event.message });
        }
        break;
      case 'budget':
        this.budget = event.snapshot;
        if (event.actual) this.actual = event.actual;
        this.chromeRev++;
        break;
      case 'usage':
        applied.spendChanged = true;
        break;
      case 'compaction': {
        const info: CompactionInfo = { reason: event.reason, tokensBefore: event.tokensBefore, tokensAfter: event.tokensAfter };
        const summary = this.entries.get(event.messageId);
        if (summary && summary.kind === 'summary') {
          summary.compaction = info;
          this.touch(summary);
        } else {
          this.compactions.set(event.messageId, info);
        }
        applied.budgetChanged = true;
        break;
      }
      case 'noteDeleted':
        // The daemon keeps the entry, emptied; it is no longer a note to show.
        this.remove(event.messageId);
        applied.budgetChanged = true;
        break;
      case 'runFinished':
        this.endStreaming(event.reason === 'stopped' ? 'stopped' : event.reason === 'error' ? 'failed' : undefined);
        if (event.reason === 'refusal') this.markRefused();
        this.runId = undefined;
        for (const [id, approval] of this.approvals) {
          if (approval.runId === params.runId) this.approvals.delete(id);
        }
        // The run's sub-agents ended with it.
        if (this.delegatedApprovals.size > 0) {
          this.delegatedApprovals.clear();
          this.chromeRev++;
        }
        this.setState(this.approvals.size > 0 ? 'awaitingApproval' : this.unansweredAfter(event.reason) ? 'unanswered' : 'idle');
        applied.spendChanged = true;
        // What the next request would send now holds the run's messages.
        applied.budgetChanged = true;
        break;
      case 'plan':
        this.plan = event.plan;
        this.chromeRev++;
        break;
      case 'delegation':
        this.applyDelegated(event.callId, event.childSessionId, event.childSeq, event.event);
        // The sub-agent's spend counts in this session's cost.
        if (event.event.kind === 'usage') applied.spendChanged = true;
        if (event.event.kind === 'toolCallUpdated' && event.event.status === 'done') applied.filesChanged = true;
        break;
    }
    return applied;
  }

  /**
   * Fills a `delegate` call's sub-agent from the child's own transcript (after a load, when
   * the events that told it are gone): its latest step, latest words and state.
   */
  applyChildTranscript(callId: string, child: SessionTranscriptResult): void {
    const view = this.delegationOf(callId, child.sessionId);
    if (!view || view.childSeq >= child.lastSeq) return;
    view.childSeq = child.lastSeq;
    const results = new Map<string, ToolCallStatus>();
    const calls: { id: string; name: string; input: unknown }[] = [];
    for (const entry of child.entries) {
      for (const block of entry.blocks) {
        if (block.type === 'toolCall') calls.push(block);
        else if (block.type === 'toolResult') results.set(block.callId, block.status);
      }
      if (entry.role === 'assistant') {
        const text = textOf(entry.blocks);
        if (text !== '') view.text = text;
      }
    }
    const last = calls[calls.length - 1];
    if (last) {
      // An approval carries the daemon's own words for the call.
      const waiting = child.pendingApprovals.find((a) => a.callId === last.id);
      const status = results.get(last.id) ?? (waiting ? 'awaitingApproval' : 'running');
      view.step = { callId: last.id, summary: waiting?.summary ?? toolSummary(last.name, last.input), status };
    }
    if (child.state === 'awaitingApproval') view.state = 'awaitingApproval';
    else if (child.state === 'running') view.state = 'running';
    const tool = this.entries.get(`tool:${callId}`);
    if (tool) this.touch(tool);
  }

  /** The `delegate` calls whose sub-agent has not answered yet (a load shows where they stand). */
  unfinishedDelegations(): string[] {
    return this.list().flatMap((e) => (e.kind === 'tool' && e.tool === 'delegate' && e.output === undefined ? [e.callId] : []));
  }

  /** One event of a sub-agent, forwarded to this session: drawn inside its `delegate` call. */
  private applyDelegated(callId: string, childSessionId: string, childSeq: number, event: Event): void {
    const view = this.delegationOf(callId, childSessionId, 'delegate');
    if (!view || childSeq <= view.childSeq) return;
    view.childSeq = childSeq;
    switch (event.kind) {
      case 'runStarted':
        view.state = 'running';
        break;
      case 'messageStarted':
        if (event.role === 'assistant') view.text = '';
        break;
      case 'textDelta':
        view.text += event.text;
        break;
      case 'messageCompleted':
        if (event.entry.role === 'assistant' && textOf(event.entry.blocks) !== '') view.text = textOf(event.entry.blocks);
        break;
      case 'toolCallStarted':
        view.step = { callId: event.callId, summary: event.summary, status: 'pending' };
        break;
      case 'toolCallUpdated':
        if (view.step?.callId === event.callId) view.step.status = event.status;
        break;
      case 'approvalRequested': {
        const approval = event.approval;
        const tool = this.entries.get(`tool:${callId}`);
        this.delegatedApprovals.set(approval.approvalId, { childSessionId, callId, task: taskOf(tool?.kind === 'tool' ? tool.input : undefined), approval });
        view.state = 'awaitingApproval';
        view.step = { callId: approval.callId, summary: approval.summary, status: 'awaitingApproval' };
        this.setState('awaitingApproval');
        this.chromeRev++;
        break;
      }
      case 'approvalResolved':
        if (this.delegatedApprovals.delete(event.approvalId)) this.chromeRev++;
        if (view.state === 'awaitingApproval') view.state = 'running';
        this.leaveAwaiting();
        break;
      case 'runFinished':
        view.state = event.reason;
        break;
      default:
        // Budgets, usage, notices and the rest of the child's bookkeeping: not drawn here.
        return;
    }
    const tool = this.entries.get(`tool:${callId}`);
    if (tool) this.touch(tool);
  }

  /** A `delegate` call's sub-agent view, made on first sight; none for a call of another tool. */
  private delegationOf(callId: string, childSessionId: string, name?: string): DelegationView | undefined {
    const existing = this.entries.get(`tool:${callId}`);
    const tool = existing?.kind === 'tool' ? existing : name !== undefined ? this.tool(callId, name, {}) : undefined;
    if (!tool || tool.tool !== 'delegate') return undefined;
    tool.delegation ??= { childSessionId, childSeq: 0, state: 'running', text: '' };
    return tool.delegation;
  }

  /** Whether a sub-agent of the `delegate` call `callId` waits for an approval. */
  private delegatedWaitsFor(callId: string): boolean {
    for (const delegated of this.delegatedApprovals.values()) if (delegated.callId === callId) return true;
    return false;
  }

  /** Back to running once no approval, its own or a sub-agent's, is left to answer. */
  private leaveAwaiting(): void {
    if (this.state === 'awaitingApproval' && this.approvals.size === 0 && this.delegatedApprovals.size === 0) this.setState('running');
  }

  /** The authoritative list from `session/get`, sub-agents' changes included. */
  setChangedFiles(files: ChangedFile[]): void {
    this.changedFiles = new Map(
      files.map((f) => {
        const view: ChangedFileView = { path: f.path, added: f.added, removed: f.removed };
        if (f.childSessionId) view.childSessionId = f.childSessionId;
        return [changedFileKey(f), view];
      }),
    );
    this.chromeRev++;
  }

  /** The plan `session/get` reports; absent there means the model gave none yet. */
  setPlan(plan: Plan | undefined): void {
    this.plan = plan;
    this.chromeRev++;
  }

  setBudget(snapshot: BudgetSnapshot): void {
    this.budget = snapshot;
    this.chromeRev++;
  }

  setCost(cost: CostSummary): void {
    this.cost = cost;
    this.chromeRev++;
  }

  private setState(state: SessionState): void {
    if (this.state !== state) {
      this.state = state;
      this.chromeRev++;
    }
  }

  private touch(entry: Entry): void {
    entry.rev = ++this.revCounter;
  }

  /** Appends, or for an entry with a `seq`, inserts before the first later committed entry. */
  private insert(entry: Entry, after?: string): void {
    this.entries.set(entry.key, entry);
    this.touch(entry);
    let at = this.order.length;
    if (after !== undefined) {
      const index = this.order.indexOf(after);
      if (index >= 0) {
        at = index + 1;
        // Keep entries already placed after `after` for the same message (its other tool calls).
        while (at < this.order.length && this.entries.get(this.order[at])?.kind === 'tool') at++;
      }
    } else if (entry.seq !== undefined) {
      const seq = entry.seq;
      const last = this.entries.get(this.order[this.order.length - 1]);
      if (last === undefined || (last.seq !== undefined && last.seq < seq)) {
        // The common case (a load, a new message): it goes last.
        this.order.push(entry.key);
        this.orderRev++;
        return;
      }
      // Before anything committed later, and before a reply still streaming (it commits later).
      const later = this.order.findIndex((key) => {
        const other = this.entries.get(key);
        if (!other) return false;
        if (other.seq !== undefined) return other.seq > seq;
        return other.kind === 'assistant' && other.streaming;
      });
      if (later >= 0) at = later;
    }
    this.order.splice(at, 0, entry.key);
    this.orderRev++;
  }

  private remove(key: string): void {
    if (!this.entries.delete(key)) return;
    this.order = this.order.filter((k) => k !== key);
    this.orderRev++;
  }

  /** The run's answer, the last assistant entry after the last user turn, says it was refused. */
  private markRefused(): void {
    for (let i = this.order.length - 1; i >= 0; i--) {
      const entry = this.entries.get(this.order[i]);
      if (entry?.kind === 'user' && entry.source === 'turn') return;
      if (entry?.kind === 'assistant') {
        entry.status = 'refused';
        this.touch(entry);
        return;
      }
    }
  }

  private assistant(messageId: string): AssistantEntry {
    const existing = this.entries.get(messageId);
    if (existing && existing.kind === 'assistant') return existing;
    const entry: AssistantEntry = { kind: 'assistant', key: messageId, rev: 0, blocks: [], streaming: true, status: 'complete' };
    this.insert(entry);
    return entry;
  }

  private tool(callId: string, name: string, input: unknown, after?: string): ToolEntry {
    const key = `tool:${callId}`;
    const existing = this.entries.get(key);
    if (existing && existing.kind === 'tool') return existing;
    const entry: ToolEntry = { kind: 'tool', key, rev: 0, callId, tool: name, summary: toolSummary(name, input), input, status: 'pending' };
    this.insert(entry, after);
    return entry;
  }

  private markTool(callId: string, status: ToolCallStatus): void {
    const tool = this.entries.get(`tool:${callId}`);
    if (tool && tool.kind === 'tool' && tool.status !== status) {
      tool.status = status;
      this.touch(tool);
    }
  }

  private endStreaming(status: MessageStatus | undefined): void {
    for (const entry of this.entries.values()) {
      if (entry.kind === 'assistant' && entry.streaming) {
        entry.streaming = false;
        if (status) entry.status = status;
        this.touch(entry);
      }
    }
  }

  /** One committed transcript entry; a rewound one marks what it drew (its tool calls too). */
  private applyEntry(wire: TranscriptEntry): void {
    if (!wire.rewound) return this.applyWireEntry(wire);
    const known = new Set(this.order);
    this.applyWireEntry(wire);
    for (const key of this.order) {
      const entry = this.entries.get(key);
      if (entry && (key === wire.id || !known.has(key)) && !entry.rewound) {
        entry.rewound = true;
        this.touch(entry);
      }
    }
  }

  /** One committed transcript entry, as `session/transcript` or `messageCompleted` gives it. */
  private applyWireEntry(wire: TranscriptEntry): void {
    const role = wire.role as string;
    if (role === 'assistant') {
      const blocks: AssistantBlock[] = wire.blocks.flatMap((b) =>
        b.type === 'text' || b.type === 'thinking' ? [{ type: b.type, text: b.text }] : [],
      );
      const existing = this.entries.get(wire.id);
      let entry: AssistantEntry;
      if (existing && existing.kind === 'assistant') {
        entry = existing;
        entry.blocks = blocks;
        entry.streaming = false;
        entry.status = wire.status;
        this.touch(entry);
        this.place(entry, wire.seq);
      } else {
        entry = { kind: 'assistant', key: wire.id, seq: wire.seq, rev: 0, blocks, streaming: false, status: wire.status };
        this.insert(entry);
      }
      let previous = entry.key;
      for (const block of wire.blocks) {
        if (block.type === 'toolCall') {
          const tool = this.tool(block.id, block.name, block.input, previous);
          tool.input = block.input;
          previous = tool.key;
        }
      }
      return;
    }
    // Delivered interjections: the user's words, where the model read them.
    let previous: string | undefined;
    // A tool message's images follow all its results: each goes to a result that says it has
    // one, in order; any left over to the last result.
    const toolImages = role === 'tool' ? imagesOf(wire.blocks) : [];
    let lastTool: ToolEntry | undefined;
    const giveImage = (tool: ToolEntry, image: ImageRef) => {
      if (!(tool.images ?? []).some((i) => i.imageId === image.imageId)) tool.images = [...(tool.images ?? []), image];
      this.touch(tool);
    };
    for (const block of wire.blocks) {
      if (block.type === 'toolResult') {
        const tool = this.entries.get(`tool:${block.callId}`);
        if (tool && tool.kind === 'tool') {
          tool.status = block.status;
          tool.output = block.output;
          lastTool = tool;
          const image = block.output.endsWith(IMAGE_ATTACHED) ? toolImages.shift() : undefined;
          if (image) giveImage(tool, image);
          this.touch(tool);
          previous = tool.key;
        }
      } else if (block.type === 'interjection') {
        this.waiting.delete(block.pendingId);
        // Folded into a turn of its own: shown as that turn's text, below.
        if (block.promoted) continue;
        const key = `inj:${block.pendingId}`;
        const existing = this.entries.get(key);
        if (existing) {
          if (existing.seq === undefined) existing.seq = wire.seq;
        } else {
          this.insert({ kind: 'user', key, seq: wire.seq, rev: 0, text: block.text, attachments: [], source: 'interjection' }, previous);
        }
        previous = key;
        this.chromeRev++;
      }
    }
    if (lastTool) for (const image of toolImages) giveImage(lastTool, image);
    if (role === 'tool' || this.entries.has(wire.id)) return;
    const text = textOf(wire.blocks);
    if (role === 'notice') {
      for (const block of wire.blocks) {
        if (block.type === 'notice') this.insert({ kind: 'notice', key: wire.id, seq: wire.seq, rev: 0, level: block.level, message: block.text });
      }
    } else if (role === 'user') {
      const attachments = chipsOf(wire.blocks);
      const images = imagesOf(wire.blocks);
      if (text === '' && attachments.length === 0 && images.length === 0) return;
      const command = wire.blocks.find((b) => b.type === 'command');
      this.insert({
        kind: 'user',
        key: wire.id,
        seq: wire.seq,
        rev: 0,
        text,
        attachments,
        ...(images.length > 0 ? { images } : {}),
        source: 'turn',
        ...(command?.type === 'command' ? { command: { name: command.name, prompt: command.prompt } } : {}),
      });
    } else if (role === 'note') {
      this.insert({ kind: 'note', key: wire.id, seq: wire.seq, rev: 0, text });
    } else if (role === 'summary') {
      const summary = summaryEntry(wire, this.compactions.get(wire.id));
      // A carry-over note deleted with `note/delete` is kept stored, emptied: nothing to show.
      if (summary.method === 'carryOver' && summary.text === '') return;
      this.insert(summary);
      this.compactions.delete(wire.id);
    }
  }

  /**
   * How many of `list()`'s first entries the model is no longer sent: those before the newest
   * summary that folds a range (a summary or a drop), up to the range's end. A renderer dims them.
   */
  foldedCount(): number {
    for (let i = this.order.length - 1; i >= 0; i--) {
      const entry = this.entries.get(this.order[i]);
      if (entry?.kind !== 'summary' || entry.toSeq === undefined) continue;
      const toSeq = entry.toSeq;
      let count = 0;
      for (let j = 0; j < i; j++) {
        const seq = this.entries.get(this.order[j])?.seq;
        if (seq !== undefined && seq > toSeq) break;
        count = j + 1;
      }
      return count;
    }
    return 0;
  }

  /** Gives a live entry its committed `seq`, moving it if entries committed later precede it. */
  private place(entry: Entry, seq: number): void {
    if (entry.seq === seq) return;
    entry.seq = seq;
    const index = this.order.lastIndexOf(entry.key);
    const laterBefore = this.order.slice(0, index).some((key) => {
      const other = this.entries.get(key);
      return other?.seq !== undefined && other.seq > seq && other.kind !== 'tool';
    });
    if (laterBefore) {
      this.order.splice(index, 1);
      this.entries.delete(entry.key);
      this.insert(entry);
    }
  }
}

/** A `delegate` call's task, from its input. */
export function taskOf(input: unknown): string {
  if (typeof input === 'object' && input !== null && 'task' in input) {
    const task = (input as { task: unknown }).task;
    if (typeof task === 'string') return task;
  }
  return '';
}

/**
 * One line for a tool call whose `toolCallStarted` summary was not seen (e.g. after a reload),
 * worded as the daemon words it.
 */
export function toolSummary(name: string, input: unknown): string {
  const fields = typeof input === 'object' && input !== null ? (input as Record<string, unknown>) : {};
  const str = (key: string) => (typeof fields[key] === 'string' ? (fields[key] as string) : undefined);
  const path = str('path') ?? '.';
  const lines = (key: string) => {
    const text = str(key) ?? '';
    const count = text === '' ? 0 : text.replace(/\n$/, '').split('\n').length;
    return `${count} ${count === 1 ? 'line' : 'lines'}`;
  };
  const firstLine = (key: string) => (str(key) ?? '').split('\n')[0];
  switch (name) {
    case 'read_file':
      return `read ${path}`;
    case 'list_directory':
      return `list ${path}`;
    case 'search_text':
      return `search for ${JSON.stringify(str('pattern') ?? '')}`;
    case 'write_file':
      return `write ${path} (${lines('content')})`;
    case 'edit_file':
      return `edit ${path} (replace ${lines('old_string')} with ${lines('new_string')})`;
    case 'run_command':
      return `run \`${firstLine('command')}\`${(str('command') ?? '').replace(/\n$/, '').includes('\n') ? ' …' : ''}`;
    case 'delegate':
      return `delegate ${JSON.stringify(truncate(firstLine('task'), 80))}`;
    default:
      return `${name} ${truncate(JSON.stringify(input ?? null), 80)}`;
  }
}

/** At most `max` bytes of UTF-8 (cut at a character), marked as the daemon marks a cut. */
function truncate(text: string, max: number): string {
  const bytes = new TextEncoder().encode(text);
  if (bytes.length <= max) return text;
  let end = max;
  // A UTF-8 continuation byte (10xxxxxx) is inside a character.
  while (end > 0 && (bytes[end] & 0xc0) === 0x80) end--;
  return `${new TextDecoder().decode(bytes.slice(0, end))}… [cut: ${bytes.length - end} more bytes]`;
}

/** A `summary` entry from its stored form (a `summary` block; plain text from older daemons). */
function summaryEntry(wire: TranscriptEntry, compaction: CompactionInfo | undefined): SummaryEntry {
  const entry: SummaryEntry = { kind: 'summary', key: wire.id, seq: wire.seq, rev: 0, method: 'summary', text: textOf(wire.blocks), messages: 0 };
  for (const block of wire.blocks) {
    if (block.type !== 'summary') continue;
    entry.method = block.method;
    entry.text = block.text;
    entry.messages = block.messages;
    if (block.fromSeq !== undefined && block.fromSeq !== null) entry.fromSeq = block.fromSeq;
    if (block.toSeq !== undefined && block.toSeq !== null) entry.toSeq = block.toSeq;
  }
  if (compaction) entry.compaction = compaction;
  return entry;
}

function waitingOf(p: PendingInterjection): Waiting {
  return { pendingId: p.pendingId, text: p.text, status: p.status };
}
