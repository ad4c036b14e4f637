/**
 * Assistant text as Markdown: markdown-it with raw HTML off (so `<script>` in a reply is shown
 * as text), code blocks coloured by highlight.js (see `highlight.ts`), tables as tables, then
 * DOMPurify over its output as a second wall, then on each code block its language and Copy and
 * Insert-at-cursor buttons.
 *
 * A streaming message is rendered in chunks: the text up to its last blank line outside a code
 * fence is rendered once, chunk by chunk, and only the unfinished tail is rendered again on each
 * frame. A long reply therefore costs each frame only its newest paragraph. When the message is
 * complete it is rendered whole once, so constructs that span chunks come out right; past
 * 16 KiB its chunks are kept instead (rendering it again would cost as much as the whole stream).
 */

import DOMPurify from 'dompurify';
import MarkdownIt from 'markdown-it';

import { highlight } from './highlight';

/** What a code block's buttons do with its code (the page posts it to the extension host). */
export interface CodeActions {
  copy(code: string): void;
  /** Puts the code at the cursor of the active editor. */
  insert(code: string): void;
}

/** Code blocks' buttons that do nothing (thinking, which shows no buttons' worth of code). */
export const NO_CODE_ACTIONS: CodeActions = { copy: () => undefined, insert: () => undefined };

const md = new MarkdownIt({
  html: false,
  linkify: true,
  breaks: false,
  // Empty: markdown-it escapes the code itself.
  highlight: (code, info) => highlight(code, info) ?? '',
});
// Only links with a scheme or `www.`: a file name such as notes.md is not a web address.
md.linkify.set({ fuzzyLink: false });

/** Markdown to sanitised HTML. */
export function renderMarkdown(text: string): string {
  return DOMPurify.sanitize(md.render(text), { USE_PROFILES: { html: true } });
}

function codeButton(label: string, className: string, title: string, onClick: (button: HTMLButtonElement) => void): HTMLButtonElement {
  const button = document.createElement('button');
  button.className = className;
  button.type = 'button';
  button.textContent = label;
  button.title = title;
  button.addEventListener('click', () => onClick(button));
  return button;
}

/**
 * Fills `target` with the rendered text and heads each code block with its language (when the
 * fence names one) and its Copy and Insert buttons. Wide tables scroll on their own.
 */
function fill(target: HTMLElement, text: string, actions: CodeActions): void {
  // A fragment straight from the sanitiser: no second HTML parse.
  target.replaceChildren(DOMPurify.sanitize(md.render(text), { USE_PROFILES: { html: true }, RETURN_DOM_FRAGMENT: true }));
  for (const pre of target.querySelectorAll('pre')) {
    const code = pre.textContent ?? '';
    const language = /(?:^|\s)language-(\S+)/.exec(pre.querySelector('code')?.className ?? '')?.[1];
    const head = document.createElement('div');
    head.className = 'code-head';
    const label = document.createElement('span');
    label.className = 'lang';
    label.textContent = language ?? '';
    head.append(
      label,
      codeButton('Copy', 'copy', 'Copy the code', (button) => {
        actions.copy(code);
        button.textContent = 'Copied';
        setTimeout(() => (button.textContent = 'Copy'), 1200);
      }),
      codeButton('Insert', 'insert', 'Insert the code at the cursor in the editor', () => actions.insert(code)),
    );
    pre.classList.add('code');
    if (language) pre.dataset.language = language;
    pre.prepend(head);
  }
  for (const table of target.querySelectorAll('table')) {
    const wrap = document.createElement('div');
    wrap.className = 'table-wrap';
    table.replaceWith(wrap);
    wrap.append(table);
  }
}

const FENCE = /^ {0,3}(```|~~~)/;

/** Above this size a finished stream keeps its chunks instead of being rendered again whole. */
const KEEP_CHUNKS_FROM = 16 * 1024;

export class MarkdownBlock {
  readonly el: HTMLElement;
  private text = '';
  /** Length of the text already rendered into finished chunks. */
  private stableEnd = 0;
  /** Where scanning for chunk boundaries resumes (a line start). */
  private scanned = 0;
  private inFence = false;
  private boundary = 0;
  private tail: HTMLElement | undefined;
  /** The text of the finished rendering, once there is one. */
  private finalText: string | undefined;

  constructor(private readonly actions: CodeActions) {
    this.el = document.createElement('div');
    this.el.className = 'markdown';
  }

  update(text: string, final: boolean): void {
    if (final) {
      if (this.finalText === text) return;
      if (text.length >= KEEP_CHUNKS_FROM && this.tail && this.finalText === undefined && text.startsWith(this.text)) {
        this.stream(text);
      } else {
        this.reset();
        this.text = text;
        fill(this.el, text, this.actions);
      }
      this.finalText = text;
      return;
    }
    if (this.finalText !== undefined || !text.startsWith(this.text)) this.reset();
    if (text === this.text && this.tail) return;
    this.stream(text);
  }

  /** Shows the text unformatted, for an entry out of sight; `update` formats it later. */
  plain(text: string): void {
    this.reset();
    this.el.classList.add('plain');
    this.el.textContent = text;
  }

  private stream(text: string): void {
    this.text = text;
    this.scan();
    if (this.boundary > this.stableEnd) {
      const chunk = document.createElement('div');
      chunk.className = 'chunk';
      fill(chunk, text.slice(this.stableEnd, this.boundary), this.actions);
      this.el.insertBefore(chunk, this.tail ?? null);
      this.stableEnd = this.boundary;
    }
    if (!this.tail) {
      this.tail = document.createElement('div');
      this.tail.className = 'chunk tail';
      this.el.appendChild(this.tail);
    }
    fill(this.tail, text.slice(this.stableEnd), this.actions);
  }

  /** Moves `boundary` to the end of the last blank line outside a fence, over complete lines. */
  private scan(): void {
    const text = this.text;
    let start = this.scanned;
    for (;;) {
      const end = text.indexOf('\n', start);
      if (end < 0) break;
      const line = text.slice(start, end);
      if (FENCE.test(line)) this.inFence = !this.inFence;
      else if (!this.inFence && line.trim() === '') this.boundary = end + 1;
      start = end + 1;
    }
    this.scanned = start;
  }

  private reset(): void {
    this.el.replaceChildren();
    this.el.classList.remove('plain');
    this.text = '';
    this.stableEnd = 0;
    this.scanned = 0;
    this.inFence = false;
    this.boundary = 0;
    this.tail = undefined;
    this.finalText = undefined;
  }
}
