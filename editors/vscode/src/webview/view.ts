/**
 * The chat page: the session list, the transcript, approval cards, changed files, waiting
 * messages, the context bar with cost, and the composer.
 *
 * Messages from the host are queued and applied once per animation frame, then only what
 * changed is redrawn (entries by revision, the rest by the model's `chromeRev`), so a fast
 * stream costs one render per frame however many deltas it carries. Everything from the model
 * or the daemon is inserted as text, except assistant Markdown, which is sanitised.
 */

import { SessionModel, taskOf, type AssistantEntry, type DelegationView, type Entry, type SummaryEntry, type ToolEntry } from '../model/session';
import type { DaemonStatus, HostToPage, PageSettings, PageToHost } from '../model/messages';
import type { AccountInfo, Attachment, BudgetSnapshot, CostSummary, PendingApproval, Reconciliation, Session, SessionSummary, TokenUsage, ToolCallStatus } from '../model/wire';
import { EffortPicker } from './effortPicker';
import { MarkdownBlock, NO_CODE_ACTIONS, type CodeActions } from './markdown';
import { Completion } from './completion';
import { formatBytes, ImageCache, ImageTray } from './attachments';
import type { AttachmentChip } from '../model/session';

export interface PageState {
  activeId?: string;
  draft?: string;
}

function el<K extends keyof HTMLElementTagNameMap>(tag: K, className?: string, text?: string): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function button(label: string, className: string, onClick: () => void, title?: string): HTMLButtonElement {
  const node = el('button', className, label);
  node.type = 'button';
  if (title) node.title = title;
  node.addEventListener('click', onClick);
  return node;
}

function formatTokens(n: number): string {
  return n.toLocaleString('en-US');
}

/** `1 request`, `2 requests`, `0 messages`: a count with its noun agreeing. */
export function countOf(n: number, singular: string, plural = `${singular}s`): string {
  return `${formatTokens(n)} ${n === 1 ? singular : plural}`;
}

/** A difference with its sign always shown: `+12`, `−795`, `±0`. */
export function signed(n: number): string {
  if (n === 0) return '±0';
  return n > 0 ? `+${formatTokens(n)}` : `−${formatTokens(-n)}`;
}

/** One line of the context popover: a part of what the next request sends, in tokens. */
export interface ContextRow {
  key: 'system' | 'instructions' | 'tools' | 'summary' | 'history' | 'turn' | 'estimate' | 'usable';
  label: string;
  tokens: number;
}

/**
 * The context popover's breakdown of a budget snapshot: each part as counted (before the
 * correction factor), then the estimate the provider is expected to bill and the usable window.
 */
export function contextRows(s: BudgetSnapshot): ContextRow[] {
  // The summary of compacted turns is part of the history; shown apart.
  const summary = Math.min(s.summaryTokens, s.historyTokens);
  const factor = s.correctionFactor === 1 ? '' : ` (× ${s.correctionFactor.toFixed(2)})`;
  return [
    { key: 'system', label: 'System prompt', tokens: s.systemTokens },
    { key: 'instructions', label: 'Instructions (AGENTS.md)', tokens: s.instructionsTokens ?? 0 },
    { key: 'tools', label: 'Tools', tokens: s.toolTokens },
    { key: 'summary', label: 'Summary of older turns', tokens: summary },
    { key: 'history', label: `History (${countOf(s.historyMessages, 'message')})`, tokens: s.historyTokens - summary },
    { key: 'turn', label: 'This turn', tokens: s.latestUserTokens },
    { key: 'estimate', label: s.exact ? 'Total' : `Estimate${factor}`, tokens: s.inputTokens },
    { key: 'usable', label: 'Usable window', tokens: s.usableTokens },
  ];
}

/** The last request's estimate against the provider's count, as the popover says it. */
export function reconciliationLine(actual: Reconciliation | undefined): string {
  if (!actual) return 'No request reported by the provider yet.';
  return `Last request: estimated ${formatTokens(actual.estimatedInputTokens)}, provider reported ${formatTokens(actual.actualInputTokens)} (${signed(actual.difference)})`;
}

const TOKEN_KINDS: [keyof TokenUsage, string][] = [
  ['input', 'Input'],
  ['output', 'Output'],
  ['cacheRead', 'Cache read'],
  ['cacheWrite', 'Cache write'],
  ['reasoning', 'Reasoning'],
];

/** How many model requests a cost summary counts. */
export function requestsOf(cost: CostSummary | undefined): number {
  return (cost?.byRequest ?? []).reduce((sum, r) => sum + r.lines, 0);
}

/** `$0.0123`, `$0.01 + unpriced`, `unpriced`, or nothing yet: never an amount for usage nothing priced. */
export function costLabel(cost: CostSummary | undefined): string {
  if (!cost) return '';
  const unpriced = cost.unpriced.lines > 0;
  const total = cost.pricedLines > 0 ? cost.totalUsd : undefined;
  if (total === undefined || total === null) return unpriced ? 'unpriced' : 'no cost yet';
  const usd = total < 0.01 ? total.toFixed(4) : total.toFixed(2);
  return unpriced || cost.partial ? `$${usd} + unpriced` : `$${usd}`;
}

/** The lines an approval card shows for what it would do. */
export function approvalPreview(approval: Pick<PendingApproval, 'tool' | 'input'>): { kind: 'command' | 'diff' | 'json'; lines: string[] } {
  const input = (approval.input ?? {}) as Record<string, unknown>;
  const str = (key: string) => (typeof input[key] === 'string' ? (input[key] as string) : undefined);
  const lines = (text: string | undefined) => (text ?? '').replace(/\n$/, '').split('\n');
  if (approval.tool === 'run_command' && str('command') !== undefined) {
    return { kind: 'command', lines: [`$ ${str('command')}`] };
  }
  if (approval.tool === 'write_file' && str('content') !== undefined) {
    return { kind: 'diff', lines: [`+++ ${str('path') ?? ''}`, ...lines(str('content')).map((l) => `+${l}`)] };
  }
  if (approval.tool === 'edit_file' && str('old_string') !== undefined) {
    return {
      kind: 'diff',
      lines: [
        `--- ${str('path') ?? ''}`,
        ...lines(str('old_string')).map((l) => `-${l}`),
        ...lines(str('new_string')).map((l) => `+${l}`),
      ],
    };
  }
  return { kind: 'json', lines: JSON.stringify(approval.input, null, 2).split('\n') };
}

/**
 * Where an approved `run_command` will run, as the card says it; nothing for other tools or
 * when the daemon did not say. A `"sandbox": false` call is the model asking to run a command
 * outside the sandbox (usually a rerun of one the sandbox refused): said in so many words.
 */
export function sandboxNote(approval: Pick<PendingApproval, 'tool' | 'input' | 'sandboxed'>): string | undefined {
  if (approval.tool !== 'run_command' || approval.sandboxed === undefined || approval.sandboxed === null) return undefined;
  if (approval.sandboxed) return 'Runs in the sandbox (writes only in the workspace and the temp folder).';
  const input = (approval.input ?? {}) as Record<string, unknown>;
  if (input.sandbox === false) return 'Runs outside the sandbox: the model asks to run this command without the sandbox, with all your rights.';
  return 'Runs outside the sandbox (the sandbox is off or unavailable here).';
}

const COMPACTION_REASONS: Record<string, string> = {
  share: 'the history passed its share of the window',
  window: 'the request would not have fit the window',
  command: '/compact',
  idle: 'idle longer than the idle rollover',
};

/** The one line a summary entry shows, folded or not. */
export function summaryHeading(entry: Pick<SummaryEntry, 'method' | 'messages'>): string {
  const messages = entry.messages === 1 ? '1 earlier message' : `${entry.messages} earlier messages`;
  switch (entry.method) {
    case 'summary':
      return `Summary of ${messages}`;
    case 'drop':
      return `${messages[0].toUpperCase()}${messages.slice(1)} left out of what the model is sent`;
    case 'carryOver':
      // A boundary: the model starts afresh from here, sent the note (folded under it).
      return 'New context — carried over';
  }
}

/** The range and, when the compaction was seen live, why and what it saved. */
export function summaryDetail(entry: Pick<SummaryEntry, 'fromSeq' | 'toSeq' | 'compaction'> & { method?: SummaryEntry['method'] }): string {
  const parts: string[] = [];
  if (entry.fromSeq !== undefined && entry.toSeq !== undefined) parts.push(`seq ${entry.fromSeq}–${entry.toSeq}`);
  const c = entry.compaction;
  if (c) {
    // The user's command that starts a new context is /new-context, not /compact.
    parts.push(c.reason === 'command' && entry.method === 'carryOver' ? '/new-context' : (COMPACTION_REASONS[c.reason] ?? c.reason));
    parts.push(`history ${formatTokens(c.tokensBefore)} → ${formatTokens(c.tokensAfter)} tokens`);
  }
  return parts.join(' · ');
}

/** A message's attachment chip: its name, then for a mention the lines and the size read. */
export function chipParts(chip: AttachmentChip): string[] {
  const parts = [chip.name];
  if (chip.range) parts.push(chip.range.start === chip.range.end ? `line ${chip.range.start}` : `lines ${chip.range.start}–${chip.range.end}`);
  if (chip.size !== undefined) parts.push(formatBytes(chip.size));
  return parts;
}

/** Who an entry is from, as its label shows it. */
export function roleLabel(entry: Pick<Entry, 'kind'> & { tool?: string }): string {
  switch (entry.kind) {
    case 'user':
      return 'You';
    case 'assistant':
      return 'Model';
    case 'tool':
      return entry.tool === 'delegate' ? 'Sub-agent' : 'Tool';
    case 'notice':
      return 'Notice';
    case 'note':
      return 'Note';
    case 'summary':
      return 'Summary';
  }
}

/** A user message longer than this (lines or characters) is shown folded, with "Show all". */
const FOLD_LINES = 12;
const FOLD_CHARS = 1500;

/** Whether a user message is long enough to fold. */
export function foldsLong(text: string): boolean {
  return text.length > FOLD_CHARS || text.split('\n').length > FOLD_LINES;
}

/** How many entries of a load are formatted at once; the rest when they come into view. */
const EAGER_ENTRIES = 60;

const TOOL_STATUS: Record<ToolCallStatus, string> = {
  pending: 'pending',
  awaitingApproval: 'needs approval',
  running: 'running',
  done: 'done',
  error: 'failed',
  denied: 'denied',
  cancelled: 'cancelled',
};

/** Where a sub-agent stands, as its `delegate` call shows it while it works or once it ended. */
export function delegationState(state: DelegationView['state']): string {
  switch (state) {
    case 'running':
      return 'working';
    case 'awaitingApproval':
      return 'waiting for your approval';
    case 'end_turn':
      return 'finished';
    case 'stopped':
      return 'stopped';
    case 'max_iterations':
      return 'used all its steps';
    case 'budget_spent':
      return 'reached a budget limit';
    case 'cut_off':
      return 'cut off';
    case 'refusal':
      return 'the model refused';
    case 'error':
      return 'failed';
  }
}

/** The label under an answer that did not end as an ordinary one. */
const ASSISTANT_STATUS: Partial<Record<AssistantEntry['status'], string>> = {
  stopped: 'stopped',
  failed: 'failed',
  refused: 'the model refused to answer',
};

/** What a `delegate` call shows under its head: the task, then the sub-agent at work or its answer. */
function delegationParts(entry: ToolEntry): HTMLElement[] {
  const parts = [el('div', 'task', taskOf(entry.input))];
  const view = entry.delegation;
  if (entry.output !== undefined) {
    parts.push(el('div', 'answer', entry.output));
    return parts;
  }
  if (!view) return parts;
  const agent = el('div', 'agent');
  agent.dataset.state = view.state;
  agent.append(el('span', 'state', delegationState(view.state)));
  if (view.step) {
    const step = el('div', 'step');
    step.dataset.status = view.step.status;
    step.append(el('span', 'summary', view.step.summary), el('span', 'status', ` · ${TOOL_STATUS[view.step.status]}`));
    agent.append(step);
  }
  if (view.text !== '') agent.append(el('div', 'said', view.text));
  parts.push(agent);
  return parts;
}

interface Sending {
  clientMessageId: string;
  text: string;
}

export class ChatView {
  private model: SessionModel | undefined;
  private sessions: SessionSummary[] = [];
  private title = '';
  private status: DaemonStatus = { state: 'starting' };
  private cost: CostSummary | undefined;
  private sending: Sending[] = [];
  private attachments: Attachment[] = [];
  private errors: string[] = [];
  private renaming: string | undefined;
  private sessionsOpen = false;
  /** The open session as `session/get` last read it (model, switches, tokens by kind). */
  private session: Session | undefined;
  /** What `initialize` listed, for the model picker. */
  private accounts: AccountInfo[] = [];
  private settings: PageSettings = { showContextMeter: true };
  private popoverOpen = false;
  private editingTitle = false;

  private queue: HostToPage[] = [];
  private scheduled = false;
  private uiRev = 1;
  private renderedUiRev = 0;
  private renderedChromeRev = -1;
  private renderedModel: SessionModel | undefined;
  private renderedStructure = -1;
  /** How many leading entries were last drawn as folded by a compaction. */
  private renderedFolded = 0;
  private readonly nodes = new Map<string, { node: HTMLElement; rev: number }>();
  /** The fold in front of each run of rewound entries, by the run's first entry, and those opened. */
  private readonly folds = new Map<string, HTMLElement>();
  private readonly openFolds = new Set<string>();
  /** Long user messages the user unfolded, by entry key. */
  private readonly unfolded = new Set<string>();
  private readonly markdown = new WeakMap<HTMLElement, MarkdownBlock[]>();
  /** Formats entries drawn as plain text once they come near the visible part. */
  private readonly observer: IntersectionObserver;
  private counter = 0;
  private readonly codeActions: CodeActions = {
    copy: (text) => this.post({ type: 'copy', text }),
    insert: (text) => this.post({ type: 'insert', text }),
  };

  private readonly root: HTMLElement;
  private readonly header = el('div', 'top');
  private readonly titleButton = el('button', 'session-title');
  private readonly titleInput = el('input', 'title-edit');
  private readonly editTitleButton: HTMLButtonElement;
  /** The second header line: the model picker, the context meter and the cost. */
  private readonly info = el('div', 'header-info');
  private readonly modelPicker = el('select', 'model-picker');
  private readonly effortPicker = new EffortPicker((sessionId, change) => this.post({ type: 'updateSession', sessionId, change }));
  private readonly popover = el('div', 'context-popover');
  private readonly statusLabel = el('span', 'daemon-status');
  private readonly sessionList = el('div', 'sessions');
  private readonly banner = el('div', 'banner');
  /** Scrolls the transcript; it follows the newest text unless the user has scrolled up. */
  private readonly scroller = el('div', 'transcript-scroller');
  /**
   * Whether the transcript follows its newest text: true until the user scrolls up, true again
   * once they scroll back to the bottom. Content growing (a reply, an entry unfolded, an entry
   * laid out at its real height) never turns it off, so the last entry is never left clipped.
   */
  private following = true;
  /** The scroller's distance from the bottom to restore once an older page is drawn above. */
  private keepFromBottom: number | undefined;
  /** The `olderBefore` an older page was asked for, so a scroll asks for each page once. */
  private askedOlder: number | undefined;
  private readonly transcript = el('div', 'transcript');
  private readonly plan = el('div', 'plan');
  private readonly approvals = el('div', 'approvals');
  private readonly files = el('div', 'files');
  private readonly waiting = el('div', 'waiting');
  /** Said when the last message has no answer (its request failed, or a crash cut the run off). */
  private readonly unanswered = el('div', 'unanswered');
  private readonly errorBox = el('div', 'errors');
  private readonly context = el('div', 'context');
  private readonly attachmentBox = el('div', 'attachments');
  private readonly input = el('textarea', 'input');
  private readonly sendButton: HTMLButtonElement;
  private readonly stopButton: HTMLButtonElement;
  /** `@` files and `/` commands as the user types. */
  private readonly completion: Completion;
  /** Images pasted or dropped into the composer. */
  private readonly images: ImageTray;
  /** The transcript's images, read once each. */
  private readonly thumbnails: ImageCache;

  constructor(
    root: HTMLElement,
    private readonly post: (message: PageToHost) => void,
    private readonly state: { get(): PageState; set(state: PageState): void },
  ) {
    this.root = root;
    this.titleButton.type = 'button';
    this.titleButton.title = 'Chats';
    this.titleButton.addEventListener('click', () => {
      this.sessionsOpen = !this.sessionsOpen;
      this.changed();
    });
    this.editTitleButton = button('✎', 'edit-title', () => this.startTitleEdit(), 'Rename this chat');
    this.editTitleButton.setAttribute('aria-label', 'Rename this chat');
    this.titleInput.type = 'text';
    this.titleInput.hidden = true;
    this.titleInput.setAttribute('aria-label', 'Chat title');
    this.titleInput.addEventListener('keydown', (e) => {
      if (e.key === 'Enter') {
        e.preventDefault();
        this.finishTitleEdit(true);
      } else if (e.key === 'Escape') {
        e.preventDefault();
        e.stopPropagation();
        this.finishTitleEdit(false);
      }
    });
    this.titleInput.addEventListener('blur', () => this.finishTitleEdit(true));
    this.modelPicker.setAttribute('aria-label', 'Model');
    this.modelPicker.title = 'The model of this chat, from the next request on';
    this.modelPicker.addEventListener('change', () => {
      const sessionId = this.model?.sessionId;
      if (!sessionId) return;
      const [account, model] = JSON.parse(this.modelPicker.value) as [string, string];
      this.post({ type: 'updateSession', sessionId, change: { account, model } });
    });
    this.context.setAttribute('role', 'button');
    this.context.tabIndex = 0;
    this.context.setAttribute('aria-haspopup', 'dialog');
    this.context.title = 'Context and cost: details';
    this.context.addEventListener('click', () => this.togglePopover());
    this.context.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' || e.key === ' ') {
        e.preventDefault();
        this.togglePopover();
      }
    });
    this.popover.setAttribute('role', 'dialog');
    this.popover.setAttribute('aria-label', 'Context and cost');
    this.popover.hidden = true;
    this.popover.addEventListener('keydown', (e) => {
      if (e.key === 'Escape') {
        e.stopPropagation();
        this.togglePopover();
        this.context.focus();
      }
    });
    this.info.append(this.modelPicker, this.effortPicker.element, this.context);
    this.header.append(
      this.titleButton,
      this.titleInput,
      this.editTitleButton,
      this.statusLabel,
      button('+', 'new-session', () => this.post({ type: 'newSession' }), 'New chat'),
    );
    this.sendButton = button('Send', 'send', () => this.submit(), 'Send (Enter)');
    this.stopButton = button('Stop', 'stop', () => this.post({ type: 'stop' }), 'Stop the run (Escape)');
    this.input.placeholder = 'Ask sidechat… (/ for commands, @ for files, paste images; Shift+Enter for a new line)';
    this.input.rows = 3;
    this.input.value = state.get().draft ?? '';
    this.input.setAttribute('aria-label', 'Message');
    this.completion = new Completion(this.input, (requestId, kind, query) => this.post({ type: 'complete', requestId, kind, query }));
    this.images = new ImageTray((message) => {
      this.errors.push(message);
      this.changed();
    });
    this.thumbnails = new ImageCache((imageId) => this.post({ type: 'image', imageId }));
    this.input.addEventListener('keydown', (e) => {
      if (this.completion.keydown(e)) return;
      if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        this.submit();
      } else if (e.key === 'ArrowUp' && !e.isComposing && this.input.value === '' && this.editLastWaiting()) {
        e.preventDefault();
      }
    });
    // Escape anywhere on the page (not taken by a field) closes the open popover, or else stops
    // the run.
    root.addEventListener('keydown', (e) => {
      if (e.key !== 'Escape' || e.defaultPrevented) return;
      if (this.popoverOpen) {
        e.preventDefault();
        this.togglePopover();
        this.context.focus();
        return;
      }
      const state = this.model?.state;
      if (state === 'running' || state === 'awaitingApproval') {
        e.preventDefault();
        this.post({ type: 'stop' });
      }
    });
    this.input.addEventListener('input', () => {
      this.state.set({ ...this.state.get(), draft: this.input.value });
      this.completion.update();
    });
    this.input.addEventListener('click', () => this.completion.update());
    // A pasted or dropped image joins the message as a chip.
    this.input.addEventListener('paste', (e) => {
      if (this.images.add([...(e.clipboardData?.files ?? [])])) e.preventDefault();
    });
    const composer = el('div', 'composer');
    composer.addEventListener('dragover', (e) => {
      if (e.dataTransfer?.types.includes('Files')) e.preventDefault();
    });
    composer.addEventListener('drop', (e) => {
      if (this.images.add([...(e.dataTransfer?.files ?? [])])) {
        e.preventDefault();
        this.input.focus();
      }
    });
    const buttons = el('div', 'buttons');
    buttons.append(this.sendButton, this.stopButton);
    composer.append(this.input, buttons);
    const dock = el('div', 'dock');
    dock.append(this.plan, this.approvals, this.files, this.unanswered, this.waiting, this.errorBox, this.attachmentBox, this.images.el, this.completion.el, composer);
    this.transcript.addEventListener('click', (e) => {
      const link = (e.target as HTMLElement).closest('a');
      if (link) {
        e.preventDefault();
        const href = link.getAttribute('href');
        if (href) this.post({ type: 'openLink', href });
      }
    });
    this.observer = new IntersectionObserver((seen) => this.formatDeferred(seen), { root: this.scroller, rootMargin: '1200px 0px' });
    // Screen readers hear new entries; while a run works the log is busy, so a reply is read once whole.
    this.transcript.setAttribute('role', 'log');
    this.transcript.setAttribute('aria-live', 'polite');
    this.transcript.setAttribute('aria-label', 'Conversation');
    this.scroller.append(this.transcript);
    this.scroller.addEventListener(
      'scroll',
      () => {
        this.following = this.scroller.scrollHeight - this.scroller.scrollTop - this.scroller.clientHeight < 40;
        this.loadOlderAtTop();
      },
      { passive: true },
    );
    // Entries change height after they are drawn (formatted late, laid out once in view, unfolded),
    // and the transcript's own box shrinks when a card, a banner or the popover appears: while
    // following, the bottom stays in view.
    const follow = new ResizeObserver(() => {
      if (this.following && this.keepFromBottom === undefined) this.scroller.scrollTop = this.scroller.scrollHeight;
    });
    follow.observe(this.transcript);
    follow.observe(this.scroller);
    root.append(this.header, this.info, this.popover, this.sessionList, this.banner, this.scroller, dock);
    this.render();
  }

  /** Takes a message from the host; it is applied on the next animation frame. */
  enqueue(message: HostToPage): void {
    this.queue.push(message);
    if (!this.scheduled) {
      this.scheduled = true;
      requestAnimationFrame(() => this.flush());
    }
  }

  /** A session's new title (the daemon named it): the header when it is the open one, and the list. */
  private retitle(sessionId: string, title: string): void {
    if (this.model?.sessionId === sessionId) this.title = title;
    this.sessions = this.sessions.map((s) => (s.id === sessionId ? { ...s, title } : s));
    this.uiRev++;
  }

  private togglePopover(): void {
    this.popoverOpen = !this.popoverOpen;
    this.changed();
  }

  private startTitleEdit(): void {
    if (!this.model) return;
    this.editingTitle = true;
    this.titleInput.value = this.title;
    this.changed();
    queueMicrotask(() => {
      this.titleInput.focus();
      this.titleInput.select();
    });
  }

  /** Ends the title's edit; `keep`: renames the chat (`session/update`) when the text changed. */
  private finishTitleEdit(keep: boolean): void {
    if (!this.editingTitle) return;
    this.editingTitle = false;
    const title = this.titleInput.value.trim();
    const sessionId = this.model?.sessionId;
    if (keep && sessionId && title !== '' && title !== this.title) {
      this.post({ type: 'renameSession', sessionId, title });
      this.title = title;
    }
    this.changed();
    queueMicrotask(() => this.editTitleButton.focus());
  }

  private flush(): void {
    this.scheduled = false;
    const queue = this.queue;
    this.queue = [];
    for (const message of queue) this.apply(message);
    this.render();
  }

  private changed(): void {
    this.uiRev++;
    if (!this.scheduled) {
      this.scheduled = true;
      requestAnimationFrame(() => this.flush());
    }
  }

  private apply(message: HostToPage): void {
    switch (message.type) {
      case 'daemon':
        this.status = message.status;
        if (message.status.state === 'ready') this.accounts = message.status.accounts ?? [];
        break;
      case 'settings':
        this.settings = message.settings;
        break;
      case 'sessions':
        this.sessions = message.sessions;
        this.title = message.sessions.find((s) => s.id === message.activeId)?.title ?? this.title;
        break;
      case 'reset':
        this.model = new SessionModel(message.sessionId);
        this.model.applyPage(message.transcript);
        this.cost = undefined;
        this.session = undefined;
        this.title = this.sessions.find((s) => s.id === message.sessionId)?.title ?? '';
        this.state.set({ ...this.state.get(), activeId: message.sessionId });
        break;
      case 'older':
        if (this.model?.sessionId === message.sessionId) {
          // What the user reads stays in place while the older page grows above it.
          this.keepFromBottom = this.scroller.scrollHeight - this.scroller.scrollTop;
          this.model.applyPage(message.transcript);
        }
        break;
      case 'merge':
        if (this.model?.sessionId === message.sessionId) this.model.applyTranscript(message.transcript, message.entriesOnly);
        break;
      case 'child':
        if (this.model?.sessionId === message.sessionId) this.model.applyChildTranscript(message.callId, message.transcript);
        break;
      case 'events':
        if (this.model?.sessionId === message.sessionId) for (const params of message.events) this.model.apply(params);
        for (const { sessionId, event } of message.events) if (event.kind === 'sessionUpdated') this.retitle(sessionId, event.title);
        break;
      case 'session':
        if (this.model?.sessionId === message.session.id) {
          this.model.setChangedFiles(message.session.changedFiles);
          this.model.setPlan(message.session.plan ?? undefined);
          this.title = message.session.title;
          this.session = message.session;
        }
        break;
      case 'budget':
        if (this.model?.sessionId === message.sessionId) this.model.setBudget(message.snapshot);
        break;
      case 'cost':
        if (this.model?.sessionId === message.sessionId) this.cost = message.cost;
        break;
      case 'sent':
        this.sending = this.sending.filter((s) => s.clientMessageId !== message.clientMessageId);
        if (message.error) this.errors.push(message.error);
        break;
      case 'attach':
        this.attachments.push(message.attachment);
        this.input.focus();
        break;
      case 'error':
        this.errors.push(message.message);
        this.answerRefused = true;
        for (const again of this.unanswered.querySelectorAll('button')) again.disabled = false;
        break;
      case 'completions':
        this.completion.receive(message.requestId, message.kind, message.query, message.items);
        return;
      case 'image':
        this.thumbnails.receive(message.imageId, message.mediaType, message.data, message.error);
        return;
    }
    // The model's own changes show in its `chromeRev`; a stream of deltas redraws no chrome.
    if (message.type !== 'events' && message.type !== 'merge') this.uiRev++;
  }

  /**
   * Up in an empty composer: the last message still waiting for the model comes back into the
   * composer to edit, withdrawn (`interjection/cancel`); sent again, it waits anew.
   */
  private editLastWaiting(): boolean {
    const waiting = [...(this.model?.waiting.values() ?? [])].filter((w) => w.status !== 'leased');
    const last = waiting[waiting.length - 1];
    if (!last) return false;
    this.post({ type: 'withdraw', pendingId: last.pendingId });
    this.input.value = last.text;
    this.state.set({ ...this.state.get(), draft: last.text });
    this.input.setSelectionRange(last.text.length, last.text.length);
    return true;
  }

  private submit(): void {
    const text = this.input.value;
    if (text.trim() === '' && this.attachments.length === 0 && this.images.count === 0) return;
    const state = this.model?.state;
    if (this.images.count > 0 && (state === 'running' || state === 'awaitingApproval')) {
      // The daemon takes images only with a new turn; they stay here until the run ends.
      this.errors.push('Images go with a new message once the run ends; they are kept in the composer until then.');
      this.changed();
      return;
    }
    if (!this.images.ready) {
      this.errors.push('An image is still being read; send again in a moment.');
      this.changed();
      return;
    }
    const clientMessageId = `cm_${Date.now().toString(36)}_${(this.counter++).toString(36)}`;
    const images = this.images.take();
    this.post({ type: 'send', text, attachments: this.attachments, ...(images.length > 0 ? { images } : {}), clientMessageId });
    this.sending.push({ clientMessageId, text });
    this.attachments = [];
    this.input.value = '';
    this.state.set({ ...this.state.get(), draft: '' });
    this.completion.update();
    this.changed();
  }

  private render(): void {
    this.renderTranscript();
    const chromeRev = this.model?.chromeRev ?? -1;
    if (this.renderedUiRev === this.uiRev && this.renderedChromeRev === chromeRev) return;
    this.renderedUiRev = this.uiRev;
    this.renderedChromeRev = chromeRev;
    this.renderHeader();
    this.renderBanner();
    this.renderPlan();
    this.renderApprovals();
    this.renderFiles();
    this.renderWaiting();
    this.renderUnanswered();
    this.renderErrors();
    this.renderContext();
    this.renderModelPicker();
    this.effortPicker.render(this.session, this.accounts);
    this.renderPopover();
    this.renderAttachments();
    const state = this.model?.state ?? 'idle';
    const working = state === 'running' || state === 'awaitingApproval';
    this.stopButton.disabled = !working;
    this.root.dataset.state = state;
    this.transcript.setAttribute('aria-busy', String(state === 'running'));
  }

  // ---- transcript ----------------------------------------------------------------------------

  private renderTranscript(): void {
    const model = this.model;
    if (model !== this.renderedModel) {
      this.transcript.replaceChildren();
      this.nodes.clear();
      this.folds.clear();
      this.renderedModel = model;
      this.renderedStructure = -1;
      this.renderedFolded = 0;
    }
    if (!model) return;
    const entries = model.list();
    const structural = model.structureRev !== this.renderedStructure;
    const atBottom = this.following;
    const stale = entries.filter((entry) => this.nodes.get(entry.key)?.rev !== entry.rev);
    // A long transcript at once (a load): only the newest entries are formatted now; the
    // others show their text plain until they come near the visible part.
    const formatFrom = stale.length > EAGER_ENTRIES ? stale.length - EAGER_ENTRIES : 0;
    stale.forEach((entry, i) => {
      const known = this.nodes.get(entry.key);
      const node = known?.node ?? this.entryNode(entry);
      this.fillEntry(node, entry, i < formatFrom);
      this.nodes.set(entry.key, { node, rev: entry.rev });
    });
    if (structural) {
      this.renderedStructure = model.structureRev;
      // Entries a compaction folded away are dimmed: still here to read, no longer sent.
      const folded = model.foldedCount();
      if (folded > 0 || this.renderedFolded > 0) {
        entries.forEach((entry, i) => this.nodes.get(entry.key)?.node.classList.toggle('folded', i < folded));
        this.renderedFolded = folded;
      }
      let cursor: ChildNode | null = this.transcript.firstChild;
      for (const node of this.withRewoundFolds(entries)) {
        if (node !== cursor) this.transcript.insertBefore(node, cursor);
        else cursor = cursor.nextSibling;
      }
      while (cursor) {
        const next: ChildNode | null = cursor.nextSibling;
        cursor.remove();
        cursor = next;
      }
    }
    if (this.keepFromBottom !== undefined) {
      this.scroller.scrollTop = this.scroller.scrollHeight - this.keepFromBottom;
      this.keepFromBottom = undefined;
    } else if (atBottom) this.scroller.scrollTop = this.scroller.scrollHeight;
    this.loadOlderAtTop();
  }

  /**
   * The entries' nodes in order, each run of rewound entries behind a fold ("N rewound
   * messages") that shows them when opened.
   */
  private withRewoundFolds(entries: Entry[]): HTMLElement[] {
    const out: HTMLElement[] = [];
    for (let i = 0; i < entries.length; i++) {
      const entry = entries[i];
      const node = this.nodes.get(entry.key)?.node;
      if (!entry.rewound) {
        if (node) out.push(node);
        continue;
      }
      let end = i;
      while (end < entries.length && entries[end].rewound) end++;
      const run = entries.slice(i, end);
      const foldKey = entry.key;
      const open = this.openFolds.has(foldKey);
      const messages = run.filter((e) => e.kind !== 'tool').length;
      const fold = this.folds.get(foldKey) ?? el('div', 'rewound-fold');
      this.folds.set(foldKey, fold);
      fold.dataset.open = String(open);
      fold.replaceChildren(
        button(`${open ? '▾' : '▸'} ${messages === 1 ? '1 rewound message' : `${messages} rewound messages`}`, 'toggle', () => {
          if (this.openFolds.has(foldKey)) this.openFolds.delete(foldKey);
          else this.openFolds.add(foldKey);
          this.renderedStructure = -1;
          this.changed();
        }, 'Taken back by an undo: kept to read, no longer sent to the model'),
      );
      out.push(fold);
      for (const e of run) {
        const n = this.nodes.get(e.key)?.node;
        if (!n) continue;
        n.classList.add('rewound');
        n.hidden = !open;
        out.push(n);
      }
      i = end - 1;
    }
    return out;
  }

  /** At the top of the transcript, with older entries not loaded: asks for the next page, once. */
  private loadOlderAtTop(): void {
    const before = this.model?.olderBefore;
    if (before === undefined || this.askedOlder === before || this.scroller.scrollTop > 40) return;
    this.askedOlder = before;
    this.post({ type: 'loadOlder' });
  }

  private entryNode(entry: Entry): HTMLElement {
    const node = el('div', `entry ${entry.kind}`);
    node.dataset.key = entry.key;
    // Shown by the stylesheet before the entry (so the entry's text stays what was said).
    node.dataset.role = roleLabel(entry);
    return node;
  }

  private formatDeferred(seen: IntersectionObserverEntry[]): void {
    for (const item of seen) {
      if (!item.isIntersecting) continue;
      const node = item.target as HTMLElement;
      this.observer.unobserve(node);
      const entry = node.dataset.key ? this.model?.get(node.dataset.key) : undefined;
      if (entry?.kind === 'assistant' && node.dataset.deferred === 'true') this.fillAssistant(node, entry, false);
    }
  }

  private fillEntry(node: HTMLElement, entry: Entry, defer = false): void {
    switch (entry.kind) {
      case 'user': {
        node.replaceChildren();
        node.classList.toggle('interjection', entry.source === 'interjection');
        if (entry.source === 'interjection') node.append(el('div', 'label', 'added while working'));
        if (entry.command) node.append(el('span', 'command-label', `/${entry.command.name}`));
        node.append(el('div', 'text', entry.text));
        if (entry.images && entry.images.length > 0) {
          const images = el('div', 'images');
          images.append(...entry.images.map((image) => this.thumbnails.thumbnail(image)));
          node.append(images);
        }
        if (entry.attachments.length > 0) {
          const chips = el('div', 'chips');
          for (const chip of entry.attachments) {
            const parts = chipParts(chip);
            const item = el('span', 'chip');
            item.title = parts.join(' · ');
            item.append(el('span', 'name', parts[0]), ...parts.slice(1).map((part) => el('span', 'detail', part)));
            chips.append(item);
          }
          node.append(chips);
        }
        // A long message folds to its first lines; "Show all" unfolds it (and stays so).
        const long = foldsLong(entry.text);
        node.classList.toggle('long', long);
        node.classList.toggle('expanded', this.unfolded.has(entry.key));
        if (long) {
          const key = entry.key;
          const lines = entry.text.split('\n').length;
          const toggle = button('', 'expand', () => {
            if (this.unfolded.has(key)) this.unfolded.delete(key);
            else this.unfolded.add(key);
            const open = this.unfolded.has(key);
            node.classList.toggle('expanded', open);
            toggle.dataset.label = open ? 'Show less' : `Show all (${countOf(lines, 'line')})`;
            toggle.setAttribute('aria-label', toggle.dataset.label);
            toggle.setAttribute('aria-expanded', String(open));
          });
          const open = this.unfolded.has(key);
          toggle.dataset.label = open ? 'Show less' : `Show all (${countOf(lines, 'line')})`;
          toggle.setAttribute('aria-label', toggle.dataset.label);
          toggle.setAttribute('aria-expanded', String(open));
          node.append(toggle);
        }
        node.classList.toggle('rewound', entry.rewound === true);
        // A turn of its own, still part of the conversation: it can be undone to or forked from.
        if (entry.source === 'turn' && !entry.rewound && entry.seq !== undefined) {
          const messageId = entry.key;
          const actions = el('div', 'message-actions');
          // Labelled by the stylesheet (from `data-label`): the message's text stays what was typed.
          const action = (label: string, className: string, type: 'undo' | 'fork', title: string) => {
            const b = button('', className, () => this.post({ type, messageId }), title);
            b.dataset.label = label;
            b.setAttribute('aria-label', label);
            return b;
          };
          actions.append(
            action('Undo to here', 'undo', 'undo', 'Take back the files and the conversation from this message on'),
            action('Fork from here', 'fork', 'fork', 'A new chat with the conversation up to this message'),
          );
          node.append(actions);
        }
        if (entry.command) {
          // What the model read in place of the typed text, folded.
          const prompt = el('details', 'command-prompt');
          prompt.append(el('summary', undefined, 'Prompt'), el('pre', undefined, entry.command.prompt));
          node.append(prompt);
        }
        return;
      }
      case 'assistant':
        this.fillAssistant(node, entry, defer && !entry.streaming);
        return;
      case 'tool': {
        node.replaceChildren();
        node.dataset.status = entry.status;
        node.dataset.role = roleLabel(entry);
        const head = el('div', 'head');
        // A delegation's task is drawn in full below its head.
        const summary = entry.tool === 'delegate' ? 'Sub-agent' : entry.summary;
        head.append(el('span', `badge status-${entry.status}`, TOOL_STATUS[entry.status]), el('span', 'summary', summary));
        node.append(head);
        if (entry.tool === 'delegate') {
          node.classList.add('delegate');
          node.append(...delegationParts(entry));
          return;
        }
        if (entry.output) {
          const details = el('details', 'output');
          details.append(el('summary', undefined, `Output (${countOf(entry.output.replace(/\n$/, '').split('\n').length, 'line')})`), el('pre', undefined, entry.output));
          node.append(details);
        }
        if (entry.images && entry.images.length > 0) {
          const images = el('div', 'images');
          images.append(...entry.images.map((image) => this.thumbnails.thumbnail(image)));
          node.append(images);
        }
        return;
      }
      case 'notice':
        node.replaceChildren(el('span', `notice-${entry.level}`, entry.message));
        node.dataset.level = entry.level;
        return;
      case 'note':
        node.replaceChildren(el('div', 'text', entry.text));
        return;
      case 'summary': {
        node.dataset.method = entry.method;
        const head = el('div', 'head', summaryHeading(entry));
        const detail = summaryDetail(entry);
        const parts: HTMLElement[] = [];
        if (entry.text.trim() === '') {
          parts.push(head);
        } else {
          // Folded: the summary is what the model reads, the transcript above is what was said.
          const details = el('details', 'summary-block');
          const heading = el('summary');
          heading.append(head);
          const body = new MarkdownBlock(this.codeActions);
          body.update(entry.text, true);
          details.append(heading, body.el);
          parts.push(details);
        }
        if (detail) parts.push(el('div', 'detail', detail));
        if (entry.method === 'carryOver') {
          const key = entry.key;
          parts.push(
            button('Delete note', 'delete-note', () => this.post({ type: 'deleteNote', messageId: key }), 'Delete this note: the model is no longer sent it'),
          );
        }
        node.replaceChildren(...parts);
        return;
      }
    }
  }

  private fillAssistant(node: HTMLElement, entry: AssistantEntry, defer: boolean): void {
    let blocks = this.markdown.get(node);
    const shape = entry.blocks.map((b) => b.type).join(',');
    if (!blocks || node.dataset.shape !== shape) {
      node.replaceChildren();
      blocks = [];
      for (const block of entry.blocks) {
        if (block.type === 'thinking') {
          const details = el('details', 'thinking');
          details.append(el('summary', undefined, 'Thinking'), el('div', 'thinking-text'));
          node.append(details);
          blocks.push(new MarkdownBlock(NO_CODE_ACTIONS));
        } else {
          const md = new MarkdownBlock(this.codeActions);
          node.append(md.el);
          blocks.push(md);
        }
      }
      node.append(el('div', 'status-line'));
      this.markdown.set(node, blocks);
      node.dataset.shape = shape;
    }
    const children = node.children;
    entry.blocks.forEach((block, i) => {
      if (block.type === 'thinking') {
        const text = children[i].querySelector('.thinking-text');
        if (text && text.textContent !== block.text) text.textContent = block.text;
      } else if (defer) {
        blocks[i].plain(block.text);
      } else {
        blocks[i].update(block.text, !entry.streaming);
      }
    });
    if (defer) {
      node.dataset.deferred = 'true';
      this.observer.observe(node);
    } else if (node.dataset.deferred) {
      delete node.dataset.deferred;
      this.observer.unobserve(node);
    }
    node.dataset.streaming = String(entry.streaming);
    node.dataset.status = entry.status;
    const status = node.lastElementChild as HTMLElement;
    status.textContent = ASSISTANT_STATUS[entry.status] ?? (entry.streaming ? '…' : '');
  }

  // ---- chrome --------------------------------------------------------------------------------

  private renderHeader(): void {
    this.titleButton.textContent = `☰ ${this.title || 'sidechat'}`;
    this.titleButton.hidden = this.editingTitle;
    this.titleInput.hidden = !this.editingTitle;
    this.editTitleButton.hidden = this.editingTitle || !this.model;
    const s = this.status;
    this.statusLabel.textContent =
      s.state === 'ready' ? [s.demo ? 'demo model' : '', s.attached ? 'shared' : ''].filter(Boolean).join(' · ') : s.state === 'starting' ? 'starting…' : s.state === 'crashed' ? 'restarting…' : 'not running';
    this.statusLabel.dataset.state = s.state;
    // A window attached to a listening daemon shares it with other windows (sidechat.connection).
    this.statusLabel.title = s.state === 'ready' && s.attached ? `Attached to the daemon at ${s.attached}, shared with other windows` : '';
    this.sessionList.hidden = !this.sessionsOpen;
    if (!this.sessionsOpen) return;
    const list = el('ul');
    for (const session of this.sessions) {
      const item = el('li');
      item.dataset.sessionId = session.id;
      if (session.id === this.model?.sessionId) item.classList.add('active');
      if (this.renaming === session.id) {
        const field = el('input', 'rename');
        field.value = session.title;
        field.addEventListener('keydown', (e) => {
          if (e.key === 'Enter' && field.value.trim() !== '') {
            this.post({ type: 'renameSession', sessionId: session.id, title: field.value.trim() });
            this.renaming = undefined;
            this.changed();
          } else if (e.key === 'Escape') {
            this.renaming = undefined;
            this.changed();
          }
        });
        item.append(field);
        queueMicrotask(() => field.focus());
      } else {
        item.append(
          button(session.title, 'open', () => {
            this.sessionsOpen = false;
            this.post({ type: 'switchSession', sessionId: session.id });
            this.changed();
          }),
          el('span', `state state-${session.state}`, session.state === 'idle' ? '' : session.state),
          button('✎', 'rename', () => {
            this.renaming = session.id;
            this.changed();
          }, 'Rename'),
          button('×', 'delete', () => this.post({ type: 'deleteSession', sessionId: session.id }), 'Delete'),
        );
      }
      list.append(item);
    }
    if (this.sessions.length === 0) list.append(el('li', 'empty', 'No chats in this workspace yet.'));
    this.sessionList.replaceChildren(list);
  }

  private renderBanner(): void {
    const s = this.status;
    this.banner.replaceChildren();
    this.banner.hidden = s.state === 'ready' || s.state === 'starting';
    this.banner.dataset.state = s.state;
    if (s.state === 'failed') {
      this.banner.append(el('div', 'message', s.message));
      if (s.tried.length > 0) this.banner.append(el('div', 'tried', `Tried: ${s.tried.join(', ')}`));
      // The setting helps only when the binary was not found; a daemon that kept crashing was.
      if (s.crashes === undefined) this.banner.append(button('Open setting', 'open-settings', () => this.post({ type: 'openSettings', setting: s.setting })));
      this.banner.append(button('Retry', 'retry', () => this.post({ type: 'restartDaemon' })));
    } else if (s.state === 'crashed') {
      this.banner.append(el('div', 'message', s.message));
    }
  }

  /** Text typed into an approval card (the rule to save, the deny's reason), by approval id. */
  private approvalDrafts = new Map<string, { rule?: string; reason?: string }>();

  /**
   * The cards drawn, by approval id, each with what it was drawn from. A card whose approval is
   * unchanged is kept as it is, never drawn again: a redraw (a budget figure, the session list)
   * would otherwise take the caret out of the reason the user is typing.
   */
  private approvalCards = new Map<string, { card: HTMLElement; drawnFrom: string }>();
  /** An answer was refused (the host told an error): the cards' controls are enabled again. */
  private answerRefused = false;

  private renderApprovals(): void {
    // The session's own, then those its sub-agents wait for, each saying who asks.
    const approvals: { approval: PendingApproval; task?: string }[] = [
      ...[...(this.model?.approvals.values() ?? [])].map((approval) => ({ approval })),
      ...[...(this.model?.delegatedApprovals.values() ?? [])].map((d) => ({ approval: d.approval, task: d.task })),
    ];
    const drawn = new Map<string, { card: HTMLElement; drawnFrom: string }>();
    for (const { approval, task } of approvals) {
      const drawnFrom = JSON.stringify([approval, task]);
      const known = this.approvalCards.get(approval.approvalId);
      drawn.set(approval.approvalId, known?.drawnFrom === drawnFrom ? known : { card: this.approvalCard(approval, task), drawnFrom });
    }
    this.approvalCards = drawn;
    const cards = [...drawn.values()].map((d) => d.card);
    if (this.answerRefused) {
      for (const card of cards) for (const control of card.querySelectorAll('button, input')) (control as HTMLButtonElement | HTMLInputElement).disabled = false;
      this.answerRefused = false;
    }
    const children = [...this.approvals.children];
    // Moving a card, even to where it is, would take the focus out of it.
    if (children.length !== cards.length || children.some((child, i) => child !== cards[i])) this.approvals.replaceChildren(...cards);
  }

  /** One approval's card: what is asked, its preview, and the answers. */
  private approvalCard(approval: PendingApproval, task: string | undefined): HTMLElement {
    const card = el('div', task === undefined ? 'approval' : 'approval delegated');
    card.dataset.approvalId = approval.approvalId;
    card.append(el('div', 'title', `Allow ${approval.tool}?`));
    if (task !== undefined) card.append(el('div', 'asked-by', `Asked by the sub-agent working on: ${task}`));
    card.append(el('div', 'summary', approval.summary));
    const preview = approvalPreview(approval);
    const pre = el('pre', `preview ${preview.kind}`);
    for (const line of preview.lines) {
      const kind = preview.kind === 'diff' ? (line.startsWith('+++') || line.startsWith('---') ? 'file' : line[0] === '+' ? 'add' : line[0] === '-' ? 'del' : '') : '';
      pre.append(el('span', `line ${kind}`, `${line}\n`));
    }
    if (approval.whyAsked) card.append(el('div', 'why', approval.whyAsked));
    const sandbox = sandboxNote(approval);
    if (sandbox !== undefined) {
      const note = el('div', 'sandbox', sandbox);
      note.dataset.sandboxed = String(approval.sandboxed);
      card.append(note);
    }
    const id = approval.approvalId;
    // What the user typed survives a redraw (an error shown, a refused rule): kept by approval.
    const draft = this.approvalDrafts.get(id) ?? {};
    const keep = (change: { rule?: string; reason?: string }) => this.approvalDrafts.set(id, { ...this.approvalDrafts.get(id), ...change });
    const actions = el('div', 'actions');
    const answer = (decision: 'allow' | 'allowAlways' | 'allowWorkspace' | 'deny', extra: { rule?: string; reason?: string } = {}) => () => {
      for (const b of card.querySelectorAll('button, input')) (b as HTMLButtonElement | HTMLInputElement).disabled = true;
      this.post({ type: 'approve', approvalId: id, decision, ...extra });
    };
    const reason = el('input', 'reason');
    reason.type = 'text';
    reason.placeholder = 'Reason for the model (optional)';
    reason.value = draft.reason ?? '';
    reason.addEventListener('input', () => keep({ reason: reason.value }));
    // "Always in this workspace" shows the rule it would save, editable, before saving it.
    const workspace = el('div', 'workspace-rule');
    const rule = el('input', 'rule');
    rule.type = 'text';
    rule.value = draft.rule ?? approval.proposedRule ?? '';
    rule.placeholder = 'tool(pattern), e.g. run_command(cargo test *)';
    rule.addEventListener('input', () => keep({ rule: rule.value }));
    workspace.append(
      el('label', 'label', 'Always allow in this workspace:'),
      rule,
      button('Save rule', 'save-rule', () => {
        const text = rule.value.trim();
        answer('allowWorkspace', text ? { rule: text } : {})();
      }),
      button('Cancel', 'cancel-rule', () => {
        this.approvalDrafts.set(id, { reason: this.approvalDrafts.get(id)?.reason });
        workspace.hidden = true;
      }),
    );
    workspace.hidden = draft.rule === undefined;
    actions.append(
      button('Allow once', 'allow', answer('allow')),
      button('Always', 'allow-always', answer('allowAlways'), `Allow ${approval.tool} for the rest of this chat`),
      button('Always in this workspace', 'allow-workspace', () => {
        keep({ rule: rule.value });
        workspace.hidden = false;
        rule.focus();
      }, 'Save an allow rule for this folder (you can edit it first); later chats here use it too'),
      button('Deny', 'deny', () => {
        const text = reason.value.trim();
        answer('deny', text ? { reason: text } : {})();
      }),
      reason,
    );
    card.append(pre, actions, workspace);
    return card;
  }

  /** The model's plan as a checklist, pinned above the composer while a run works. */
  private renderPlan(): void {
    const state = this.model?.state ?? 'idle';
    const plan = this.model?.plan;
    this.plan.replaceChildren();
    const working = state === 'running' || state === 'awaitingApproval';
    this.plan.hidden = !working || plan === undefined || plan.steps.length === 0;
    if (this.plan.hidden || plan === undefined) return;
    this.plan.append(el('div', 'label', 'Plan'));
    if (plan.explanation) this.plan.append(el('div', 'explanation', plan.explanation));
    const list = el('ul');
    for (const step of plan.steps) {
      const item = el('li');
      item.dataset.status = step.status;
      const mark = step.status === 'completed' ? '✓' : step.status === 'in_progress' ? '▸' : '○';
      item.append(el('span', 'mark', mark), el('span', 'step', step.step));
      list.append(item);
    }
    this.plan.append(list);
  }

  private renderFiles(): void {
    const files = [...(this.model?.changedFiles.values() ?? [])];
    this.files.replaceChildren();
    if (files.length === 0) return;
    this.files.append(el('div', 'label', 'Changed files'));
    const list = el('ul');
    for (const file of files) {
      const item = el('li');
      item.dataset.path = file.path;
      const child = file.childSessionId;
      const open = () => this.post(child ? { type: 'openDiff', path: file.path, childSessionId: child } : { type: 'openDiff', path: file.path });
      item.append(button(file.path, 'file', open, 'Show the diff'));
      if (file.added !== undefined) {
        item.append(el('span', 'added', `+${file.added}`), el('span', 'removed', `−${file.removed ?? 0}`));
      }
      if (child) {
        item.dataset.childSessionId = child;
        item.append(el('span', 'by', 'by sub-agent'));
      }
      list.append(item);
    }
    this.files.append(list);
  }

  private renderUnanswered(): void {
    const unanswered = this.model?.state === 'unanswered';
    this.unanswered.hidden = !unanswered;
    if (!unanswered) this.unanswered.replaceChildren();
    if (!unanswered || this.unanswered.childElementCount > 0) return;
    const again = button('Ask again', 'resume', () => {
      // Until the run starts (or the host tells an error, which enables it again).
      again.disabled = true;
      this.post({ type: 'resume' });
    }, 'Send the conversation to the model again (chat/resume)');
    this.unanswered.append(el('span', 'text', 'Your last message has no answer.'), again);
  }

  private renderWaiting(): void {
    const waiting = [...(this.model?.waiting.values() ?? [])];
    const items = waiting.map((w) => {
      const item = el('div', 'waiting-item');
      item.dataset.pendingId = w.pendingId;
      item.append(
        el('span', 'badge', w.status === 'leased' ? 'sending to the model' : 'waiting'),
        el('span', 'text', w.text),
        button('Withdraw', 'withdraw', () => this.post({ type: 'withdraw', pendingId: w.pendingId }), 'Withdraw this message'),
      );
      return item;
    });
    const sending = this.sending.map((s) => {
      const item = el('div', 'waiting-item sending');
      item.append(el('span', 'badge', 'sending'), el('span', 'text', s.text));
      return item;
    });
    this.waiting.replaceChildren(...items, ...sending);
  }

  private renderErrors(): void {
    this.errorBox.replaceChildren(
      ...this.errors.map((message, i) => {
        const item = el('div', 'error');
        item.append(
          el('span', 'text', message),
          button('×', 'dismiss', () => {
            this.errors.splice(i, 1);
            this.changed();
          }, 'Dismiss'),
        );
        return item;
      }),
    );
  }

  private renderContext(): void {
    const snapshot = this.model?.budget;
    this.context.replaceChildren();
    if (!snapshot) {
      this.context.hidden = this.cost === undefined;
      if (this.cost) this.context.append(el('span', 'cost', costLabel(this.cost)));
      return;
    }
    this.context.hidden = false;
    this.context.dataset.meter = this.settings.showContextMeter ? 'on' : 'off';
    this.context.dataset.pressure = snapshot.pressure;
    const usable = Math.max(1, snapshot.usableTokens);
    const scale = Math.max(1, snapshot.inputTokens / usable);
    const bar = el('div', 'bar');
    const segment = (name: string, tokens: number) => {
      const part = el('span', `segment ${name}`);
      part.style.width = `${Math.max(0, (tokens * snapshot.correctionFactor) / usable / scale) * 100}%`;
      part.title = `${name}: ${countOf(Math.round(tokens * snapshot.correctionFactor), 'token')}`;
      part.dataset.tokens = String(tokens);
      return part;
    };
    const summary = Math.min(snapshot.summaryTokens, snapshot.historyTokens);
    bar.append(segment('system', snapshot.systemTokens));
    if ((snapshot.instructionsTokens ?? 0) > 0) bar.append(segment('instructions', snapshot.instructionsTokens ?? 0));
    bar.append(segment('tools', snapshot.toolTokens));
    // The summary of compacted turns is part of the history; shown apart once there is one.
    if (summary > 0) bar.append(segment('summary', summary));
    bar.append(segment('history', snapshot.historyTokens - summary), segment('latest', snapshot.latestUserTokens));
    const remaining = el('span', 'segment remaining');
    remaining.style.flex = '1';
    remaining.title = `remaining: ${countOf(snapshot.remainingTokens, 'token')}`;
    bar.append(remaining);
    if (snapshot.historyLimitTokens > 0) {
      // Where the history's share of the window ends: past it, older turns are compacted.
      const at = snapshot.systemTokens + (snapshot.instructionsTokens ?? 0) + snapshot.toolTokens + snapshot.historyLimitTokens;
      const limit = el('span', 'limit');
      limit.style.left = `${Math.min(1, (at * snapshot.correctionFactor) / usable / scale) * 100}%`;
      limit.title = `older turns are compacted when the history passes ${countOf(Math.round(snapshot.historyLimitTokens * snapshot.correctionFactor), 'token')}`;
      limit.dataset.tokens = String(snapshot.historyLimitTokens);
      bar.append(limit);
    }
    const percent = Math.round(snapshot.utilisation * 1000) / 10;
    // Upper bounds (counted by bytes before the tokenizer was ready) say "at most".
    const approx = snapshot.estimate === 'upperBound' ? '≤' : snapshot.exact ? '' : '~';
    this.context.append(
      bar,
      el('span', 'label', `${approx}${percent}% of ${formatTokens(snapshot.usableTokens)}`),
      el('span', 'cost', costLabel(this.cost)),
    );
  }

  /** Accounts and their models, the session's own selected (listed even when no account names it). */
  private renderModelPicker(): void {
    const session = this.session;
    this.modelPicker.hidden = !session || this.accounts.length === 0;
    if (!session || this.accounts.length === 0) return;
    const current = JSON.stringify([session.account, session.model]);
    const groups = this.accounts.map((account) => {
      const group = el('optgroup');
      group.label = account.isDemo ? `${account.name} (demo)` : account.name;
      const models = [...new Set([account.defaultModel, ...(account.models ?? [])])];
      if (account.name === session.account && !models.includes(session.model)) models.unshift(session.model);
      for (const model of models) {
        const option = el('option', undefined, model);
        option.value = JSON.stringify([account.name, model]);
        group.append(option);
      }
      return group;
    });
    this.modelPicker.replaceChildren(...groups);
    this.modelPicker.value = current;
  }

  /** The context meter's popover: the parts of the next request, estimate against actual, tokens by kind, cost. */
  private renderPopover(): void {
    // The popover is drawn again as each budget, cost or session figure arrives: a control that
    // had the keyboard's focus gets it back in its new drawing.
    const focused = document.activeElement instanceof HTMLElement && this.popover.contains(document.activeElement)
      ? document.activeElement.dataset.control
      : undefined;
    this.context.setAttribute('aria-expanded', String(this.popoverOpen));
    this.popover.hidden = !this.popoverOpen;
    if (!this.popoverOpen) {
      this.popover.replaceChildren();
      return;
    }
    const parts: HTMLElement[] = [];
    const snapshot = this.model?.budget;
    if (snapshot) {
      const table = el('table', 'segments');
      table.append(el('caption', undefined, 'What the next request sends, in tokens'));
      for (const row of contextRows(snapshot)) {
        const tr = el('tr');
        tr.dataset.segment = row.key;
        tr.dataset.tokens = String(row.tokens);
        const head = el('th', undefined, row.label);
        head.scope = 'row';
        tr.append(head, el('td', 'tokens', formatTokens(row.tokens)));
        table.append(tr);
      }
      parts.push(table);
    } else {
      parts.push(el('p', 'empty', 'Nothing counted yet.'));
    }
    const actual = this.model?.actual;
    const reconcile = el('p', 'reconcile', reconciliationLine(actual));
    if (actual) {
      reconcile.dataset.estimated = String(actual.estimatedInputTokens);
      reconcile.dataset.actual = String(actual.actualInputTokens);
      reconcile.dataset.difference = String(actual.difference);
    }
    parts.push(reconcile);
    const tokens = this.session?.tokensByKind;
    if (tokens) {
      const table = el('table', 'by-kind');
      table.append(el('caption', undefined, 'This chat so far, tokens by kind'));
      for (const [key, label] of TOKEN_KINDS) {
        const tr = el('tr');
        tr.dataset.kind = key;
        tr.dataset.tokens = String(tokens[key]);
        const head = el('th', undefined, label);
        head.scope = 'row';
        tr.append(head, el('td', 'tokens', formatTokens(tokens[key])));
        table.append(tr);
      }
      parts.push(table);
    }
    parts.push(el('p', 'cost-line', `Cost: ${costLabel(this.cost) || 'no cost yet'} · ${countOf(requestsOf(this.cost), 'request')}`));
    const session = this.session;
    if (session) {
      const toggle = el('label', 'auto-compact');
      const box = el('input');
      box.type = 'checkbox';
      box.dataset.control = 'autoCompact';
      box.checked = session.autoCompact;
      box.addEventListener('change', () => this.post({ type: 'updateSession', sessionId: session.id, change: { autoCompact: box.checked } }));
      toggle.append(box, document.createTextNode(' Fold older turns automatically when the window fills'));
      parts.push(toggle);
    }
    this.popover.replaceChildren(...parts);
    if (focused) this.popover.querySelector<HTMLElement>(`[data-control="${focused}"]`)?.focus();
  }

  private renderAttachments(): void {
    this.attachmentBox.replaceChildren(
      ...this.attachments.map((a, i) => {
        const chip = el('span', 'chip', a.name);
        chip.append(
          button('×', 'remove', () => {
            this.attachments.splice(i, 1);
            this.changed();
          }, 'Remove'),
        );
        return chip;
      }),
    );
  }
}
