/**
 * Which reasoning-effort levels a session's model takes, derived as the daemon derives them:
 * the wire does not say (`initialize` lists accounts and models, not their levels), so the same
 * model table the daemon is built with (`data/context_windows.json`, its `reasoning` field) is
 * read here, by the same longest-prefix match over the same name spellings
 * (`src/context/mod.rs`), with the same rule of which provider sends it
 * (`src/provider/effort.rs`): Anthropic's thinking-budget models and OpenAI's reasoning models
 * take `low`, `medium` and `high`, with `minimal` where the family has it (thinking models and
 * `gpt-5`); any other model, and the demo and replay models, take none.
 */

import table from '../../../../data/context_windows.json';
import type { Effort, ProviderKind } from './wire';

/** How a family takes an effort (the table's `reasoning`). */
export type ReasoningStyle = 'thinking' | 'effort' | 'effortMinimal';

interface Family {
  prefix: string;
  reasoning?: string;
}

const FAMILIES: Family[] = (table.families as Family[]).map((f) => ({ ...f, prefix: f.prefix.trim().toLowerCase() }));

/** Every level, lowest first. */
export const EFFORTS: Effort[] = ['minimal', 'low', 'medium', 'high'];

/**
 * The spellings a model name is matched under: itself lower-cased, its last path segment
 * (`openrouter/…/claude-x`), from `claude-` on (`us.anthropic.claude-…`), and without `ft:`.
 */
export function nameCandidates(model: string): string[] {
  const full = model.trim().toLowerCase();
  const out = [full];
  const push = (name: string) => {
    if (name !== '' && !out.includes(name)) out.push(name);
  };
  const slash = full.lastIndexOf('/');
  if (slash >= 0) push(full.slice(slash + 1));
  const at = full.indexOf('claude-');
  if (at > 0) push(full.slice(at));
  for (const name of [...out]) if (name.startsWith('ft:')) push(name.slice(3));
  return out;
}

/** How `model` takes an effort, by the longest table prefix any spelling starts with. */
export function reasoningStyle(model: string): ReasoningStyle | undefined {
  const candidates = nameCandidates(model);
  let best: Family | undefined;
  for (const family of FAMILIES) {
    if (family.prefix === '' || !candidates.some((c) => c.startsWith(family.prefix))) continue;
    if (!best || family.prefix.length > best.prefix.length) best = family;
  }
  const style = best?.reasoning;
  return style === 'thinking' || style === 'effort' || style === 'effortMinimal' ? style : undefined;
}

/** The levels `model` served by an account of `kind` takes; none when it takes no effort. */
export function effortLevels(kind: ProviderKind, model: string): Effort[] {
  const style = reasoningStyle(model);
  if (kind === 'anthropic' && style === 'thinking') return EFFORTS;
  if (kind === 'openai' && style === 'effortMinimal') return EFFORTS;
  if (kind === 'openai' && style === 'effort') return EFFORTS.filter((e) => e !== 'minimal');
  return [];
}
