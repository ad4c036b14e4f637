/**
 * When to restart a daemon that exited unasked, the same policy as the Neovim plugin's
 * (`lua/sidechat/restart.lua`; see docs/editors.md): wait 0.5 s, doubling per crash up to 8 s;
 * at most five restarts within a minute (the sixth crash in it is left stopped); a run that lasted a minute was healthy and starts
 * the count afresh. Pure: the caller says when the crash happened and how long the daemon ran,
 * so tests drive it with their own clock.
 */

export interface RestartPolicyOptions {
  /** The wait before the first restart; it doubles with each crash after it. */
  firstDelayMs: number;
  /** The longest wait. */
  maxDelayMs: number;
  /** Restarts allowed within `windowMs`: the crash after them is left stopped. */
  maxRestarts: number;
  windowMs: number;
  /** A daemon that ran this long before it exited was healthy: the crash count starts again. */
  healthyMs: number;
}

export const DEFAULT_RESTART_POLICY: RestartPolicyOptions = {
  firstDelayMs: 500,
  maxDelayMs: 8_000,
  maxRestarts: 5,
  windowMs: 60_000,
  healthyMs: 60_000,
};

/** What to do about one crash: restart after `delayMs`, or give up after `crashes` of them. */
export type RestartDecision = { restart: true; delayMs: number } | { restart: false; crashes: number };

export class RestartPolicy {
  readonly options: RestartPolicyOptions;
  /** Crashes since the last healthy run: the exponent of the wait. */
  private streak = 0;
  /** When the crashes of the last `windowMs` happened. */
  private recent: number[] = [];

  constructor(options: Partial<RestartPolicyOptions> = {}) {
    this.options = { ...DEFAULT_RESTART_POLICY, ...options };
  }

  /** A crash at `nowMs` of a daemon that had run for `ranMs`. */
  crashed(nowMs: number, ranMs: number): RestartDecision {
    const o = this.options;
    if (ranMs >= o.healthyMs) this.reset();
    this.recent = this.recent.filter((at) => nowMs - at < o.windowMs);
    this.recent.push(nowMs);
    if (this.recent.length > o.maxRestarts) {
      const crashes = this.recent.length;
      // The next start is the user's: it gets the whole allowance again.
      this.reset();
      return { restart: false, crashes };
    }
    const delayMs = Math.min(o.firstDelayMs * 2 ** this.streak, o.maxDelayMs);
    this.streak++;
    return { restart: true, delayMs };
  }

  /** Forgets the crashes (a restart the user asked for). */
  reset(): void {
    this.streak = 0;
    this.recent = [];
  }
}
