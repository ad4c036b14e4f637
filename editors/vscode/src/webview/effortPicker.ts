/**
 * The header's reasoning-effort picker, beside the model picker: the levels the session's
 * model takes (`model/effort.ts`) and "default", which is the account's own default (its
 * `effort` in the config, else the provider's). It shows the level in effect as `session/get`
 * reads it (the session's own, else the account's) and hides for a model that takes none. A
 * choice is `session/update {effort}` (`null` for "default"), read back like the model.
 */

import type { SessionChange } from '../model/messages';
import { effortLevels } from '../model/effort';
import type { AccountInfo, Effort, Session } from '../model/wire';

/** The option that sends `effort: null`. */
const DEFAULT = '';

export class EffortPicker {
  readonly element: HTMLSelectElement = document.createElement('select');
  private sessionId: string | undefined;

  constructor(private readonly change: (sessionId: string, change: SessionChange) => void) {
    this.element.className = 'effort-picker';
    this.element.setAttribute('aria-label', 'Reasoning effort');
    this.element.title = "How hard the model thinks, from the next request on (default: the account's)";
    this.element.addEventListener('change', () => {
      if (!this.sessionId) return;
      const value = this.element.value;
      this.change(this.sessionId, { effort: value === DEFAULT ? null : (value as Effort) });
    });
  }

  /** Draws the picker for `session` (hidden without one, or when its model takes no effort). */
  render(session: Session | undefined, accounts: AccountInfo[]): void {
    this.sessionId = session?.id;
    const kind = accounts.find((a) => a.name === session?.account)?.kind;
    const levels = session && kind ? effortLevels(kind, session.model) : [];
    this.element.hidden = levels.length === 0;
    if (!session || levels.length === 0) return;
    const current = session.effort ?? DEFAULT;
    // A level in effect that the list lacks (an account default the model refuses) still shows.
    const shown = current === DEFAULT || levels.includes(current) ? levels : [...levels, current];
    const options = [DEFAULT, ...shown].map((level) => {
      const option = document.createElement('option');
      option.value = level;
      option.textContent = level === DEFAULT ? 'effort: default' : `effort: ${level}`;
      return option;
    });
    this.element.replaceChildren(...options);
    this.element.value = current;
  }
}
