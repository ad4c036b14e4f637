/**
 * The header's reasoning-effort picker, beside the model picker: the levels the daemon says
 * the session's model takes (`session.effortLevels`) and "default", the account's own default
 * (named when the account sets one, from `initialize`). "default" is selected while the
 * session has no level of its own (`effortInherited`, or no effort at all); the picker hides
 * for a model that takes none. A choice is `session/update {effort}` (`null` for "default"),
 * read back like the model.
 */

import type { SessionChange } from '../model/messages';
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
    const levels = session?.effortLevels ?? [];
    this.element.hidden = levels.length === 0;
    if (!session || levels.length === 0) return;
    const accountDefault = accounts.find((a) => a.name === session.account)?.effort;
    const own = session.effortInherited ? undefined : session.effort;
    const current = own ?? DEFAULT;
    // A level of the session's own that the list lacks still shows.
    const shown = current === DEFAULT || levels.includes(current) ? levels : [...levels, current];
    const options = [DEFAULT, ...shown].map((level) => {
      const option = document.createElement('option');
      option.value = level;
      option.textContent =
        level !== DEFAULT ? `effort: ${level}` : accountDefault ? `effort: default (${accountDefault})` : 'effort: default';
      return option;
    });
    this.element.replaceChildren(...options);
    this.element.value = current;
  }
}
