/**
 * The composer's completion list: workspace files after `@`, commands after a leading `/`.
 *
 * The list is a listbox under the composer; focus stays in the text field, which names the
 * option in view with `aria-activedescendant` (the combobox pattern), so typing goes on while
 * Up and Down move, Enter or Tab pick and Escape closes. The host is asked for the list as the
 * user types: at most one question at a time, the newest query asked once the answer to the
 * previous one is in, and an answer for a query no longer typed dropped.
 */

import type { CompletionItem, CompletionKind } from '../model/messages';

/** What is being completed: the kind, the text typed after the trigger, and where it lies. */
export interface Trigger {
  kind: CompletionKind;
  query: string;
  /** Index of the `@` or `/`. */
  start: number;
  /** Index just past the word being completed (it may go on after the cursor). */
  end: number;
}

/**
 * What the cursor at `cursor` in `text` completes, if anything: a `/` starting the message, the
 * cursor in its first word; or an `@` at the start of a word (not inside `bob@example.com`),
 * the cursor in the path after it (`@"…` for a path with spaces, until its closing quote).
 */
export function triggerAt(text: string, cursor: number): Trigger | undefined {
  const before = text.slice(0, cursor);
  if (/^\/[^\s/]*$/.test(before)) {
    const rest = /^\S*/.exec(text.slice(cursor))?.[0] ?? '';
    return { kind: 'command', query: before.slice(1), start: 0, end: cursor + rest.length };
  }
  const quoted = /(^|\s)@"([^"\n]*)$/.exec(before);
  if (quoted) {
    const start = before.length - quoted[2].length - 2;
    const rest = /^[^"\n]*"?/.exec(text.slice(cursor))?.[0] ?? '';
    return { kind: 'file', query: quoted[2], start, end: cursor + rest.length };
  }
  const plain = /(^|\s)@([^\s"]*)$/.exec(before);
  if (plain) {
    const start = before.length - plain[2].length - 1;
    const rest = /^\S*/.exec(text.slice(cursor))?.[0] ?? '';
    return { kind: 'file', query: plain[2], start, end: cursor + rest.length };
  }
  return undefined;
}

/** How a picked file is written: `@path`, or `@"path"` when it holds a space. */
export function mentionOf(path: string): string {
  return /\s/.test(path) ? `@"${path}"` : `@${path}`;
}

/** What picking `item` puts in place of the trigger's word, and the text after it. */
export function insertionOf(kind: CompletionKind, item: CompletionItem): string {
  if (kind === 'file') return `${mentionOf(item.name)} `;
  return item.argumentHint ? `/${item.name} ` : `/${item.name}`;
}

let lists = 0;

export class Completion {
  /** The listbox, for the page to place under the composer. */
  readonly el = document.createElement('ul');
  private items: CompletionItem[] = [];
  private kind: CompletionKind = 'file';
  private active = 0;
  private trigger: Trigger | undefined;
  /** The question on its way to the host, if any. */
  private inFlight: { requestId: number; kind: CompletionKind; query: string } | undefined;
  private requests = 0;
  /** The trigger Escape closed (by start and kind): it stays closed until another is typed. */
  private dismissed: { start: number; kind: CompletionKind } | undefined;
  private readonly id = `completion-${++lists}`;

  constructor(
    private readonly input: HTMLTextAreaElement,
    private readonly ask: (requestId: number, kind: CompletionKind, query: string) => void,
  ) {
    this.el.className = 'completion';
    this.el.id = this.id;
    this.el.setAttribute('role', 'listbox');
    this.el.hidden = true;
    input.setAttribute('aria-autocomplete', 'list');
    input.setAttribute('aria-controls', this.id);
    // A click picks without taking the focus from the text field.
    this.el.addEventListener('mousedown', (e) => e.preventDefault());
    this.el.addEventListener('click', (e) => {
      const option = (e.target as HTMLElement).closest<HTMLElement>('[role="option"]');
      if (option?.dataset.index !== undefined) this.pick(Number(option.dataset.index));
    });
  }

  get open(): boolean {
    return !this.el.hidden;
  }

  /** The text field changed (typed, pasted, cursor moved): asks for the list it now needs. */
  update(): void {
    const cursor = this.input.selectionStart ?? this.input.value.length;
    const trigger = this.input.selectionStart === this.input.selectionEnd ? triggerAt(this.input.value, cursor) : undefined;
    if (this.dismissed && (trigger?.start !== this.dismissed.start || trigger.kind !== this.dismissed.kind)) this.dismissed = undefined;
    this.trigger = trigger && !this.dismissed ? trigger : undefined;
    if (!this.trigger) {
      this.close();
      return;
    }
    if (!this.inFlight) this.send(this.trigger.kind, this.trigger.query);
  }

  /** The host's answer to a `complete`. */
  receive(requestId: number, kind: CompletionKind, query: string, items: CompletionItem[]): void {
    if (this.inFlight?.requestId !== requestId) return;
    this.inFlight = undefined;
    this.el.setAttribute('aria-busy', 'false');
    const wanted = this.trigger;
    if (!wanted) return;
    // Typed on since it was asked: this answer is stale; the newest query goes instead.
    if (wanted.kind !== kind || wanted.query !== query) {
      this.send(wanted.kind, wanted.query);
      return;
    }
    this.kind = kind;
    // A command typed whole that is the only match needs no list: Enter sends it.
    const typed = this.input.value.slice(wanted.start, wanted.end);
    const done = kind === 'command' && items.length === 1 && typed === `/${items[0].name}`;
    this.items = done ? [] : items;
    this.active = 0;
    this.render();
  }

  /**
   * A key in the text field: Up and Down move through the list, Enter and Tab pick, Escape
   * closes. Answers whether the key was taken (the caller then does nothing more with it).
   */
  keydown(e: KeyboardEvent): boolean {
    if (!this.open || e.isComposing) return false;
    const count = this.items.length;
    if (e.key === 'ArrowDown' || e.key === 'ArrowUp') {
      this.active = (this.active + (e.key === 'ArrowDown' ? 1 : count - 1)) % count;
      this.render();
    } else if ((e.key === 'Enter' && !e.shiftKey) || (e.key === 'Tab' && !e.shiftKey)) {
      this.pick(this.active);
    } else if (e.key === 'Escape') {
      if (this.trigger) this.dismissed = { start: this.trigger.start, kind: this.trigger.kind };
      this.trigger = undefined;
      this.close();
    } else {
      return false;
    }
    e.preventDefault();
    e.stopPropagation();
    return true;
  }

  /** Puts the item in place of the word being completed, and closes the list. */
  private pick(index: number): void {
    const item = this.items[index];
    const trigger = this.trigger;
    if (!item || !trigger) return;
    const value = this.input.value;
    const insert = insertionOf(this.kind, item);
    // A space already after the word is kept rather than doubled.
    const end = insert.endsWith(' ') && value[trigger.end] === ' ' ? trigger.end + 1 : trigger.end;
    this.input.value = value.slice(0, trigger.start) + insert + value.slice(end);
    const at = trigger.start + insert.length;
    this.input.setSelectionRange(at, at);
    this.input.focus();
    this.trigger = undefined;
    this.close();
    // The draft is kept as typed ones are.
    this.input.dispatchEvent(new Event('input', { bubbles: true }));
  }

  private send(kind: CompletionKind, query: string): void {
    const requestId = ++this.requests;
    this.inFlight = { requestId, kind, query };
    // Busy until the answer is in: what the list shows is not yet what was typed.
    this.el.setAttribute('aria-busy', 'true');
    this.ask(requestId, kind, query);
  }

  private close(): void {
    this.items = [];
    this.render();
  }

  private render(): void {
    const open = this.items.length > 0;
    this.el.hidden = !open;
    this.el.setAttribute('aria-label', this.kind === 'file' ? 'Workspace files' : 'Commands');
    this.el.replaceChildren(
      ...this.items.map((item, i) => {
        const option = document.createElement('li');
        option.id = `${this.id}-${i}`;
        option.setAttribute('role', 'option');
        option.setAttribute('aria-selected', String(i === this.active));
        option.dataset.index = String(i);
        const name = document.createElement('span');
        name.className = 'name';
        name.textContent = this.kind === 'file' ? item.name : `/${item.name}`;
        option.append(name);
        if (item.argumentHint) {
          const hint = document.createElement('span');
          hint.className = 'hint';
          hint.textContent = item.argumentHint;
          option.append(hint);
        }
        if (item.description) {
          const help = document.createElement('span');
          help.className = 'help';
          help.textContent = item.description;
          option.append(help);
        }
        return option;
      }),
    );
    if (open) {
      this.input.setAttribute('aria-activedescendant', `${this.id}-${this.active}`);
      this.el.querySelector('[aria-selected="true"]')?.scrollIntoView({ block: 'nearest' });
    } else {
      this.input.removeAttribute('aria-activedescendant');
    }
  }
}
