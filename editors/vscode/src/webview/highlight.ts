/**
 * Syntax colouring for code blocks: highlight.js's core with the languages people paste most,
 * bundled into the page (no network, no worker). Each language is registered by hand rather than
 * taking highlight.js's full bundle (about 190 languages), which alone would pass the page's
 * 400 KB budget. A block in another language, or none, is shown uncoloured: guessing the
 * language of every block would cost each streamed frame a full auto-detection.
 */

import hljs from 'highlight.js/lib/core';
import bash from 'highlight.js/lib/languages/bash';
import c from 'highlight.js/lib/languages/c';
import cpp from 'highlight.js/lib/languages/cpp';
import csharp from 'highlight.js/lib/languages/csharp';
import css from 'highlight.js/lib/languages/css';
import diff from 'highlight.js/lib/languages/diff';
import dockerfile from 'highlight.js/lib/languages/dockerfile';
import go from 'highlight.js/lib/languages/go';
import ini from 'highlight.js/lib/languages/ini';
import java from 'highlight.js/lib/languages/java';
import javascript from 'highlight.js/lib/languages/javascript';
import json from 'highlight.js/lib/languages/json';
import kotlin from 'highlight.js/lib/languages/kotlin';
import lua from 'highlight.js/lib/languages/lua';
import makefile from 'highlight.js/lib/languages/makefile';
import markdown from 'highlight.js/lib/languages/markdown';
import php from 'highlight.js/lib/languages/php';
import python from 'highlight.js/lib/languages/python';
import ruby from 'highlight.js/lib/languages/ruby';
import rust from 'highlight.js/lib/languages/rust';
import shell from 'highlight.js/lib/languages/shell';
import sql from 'highlight.js/lib/languages/sql';
import swift from 'highlight.js/lib/languages/swift';
import typescript from 'highlight.js/lib/languages/typescript';
import xml from 'highlight.js/lib/languages/xml';
import yaml from 'highlight.js/lib/languages/yaml';

const LANGUAGES = {
  bash, c, cpp, csharp, css, diff, dockerfile, go, ini, java, javascript, json, kotlin, lua, makefile,
  markdown, php, python, ruby, rust, shell, sql, swift, typescript, xml, yaml,
};
for (const [name, language] of Object.entries(LANGUAGES)) hljs.registerLanguage(name, language);

/** The registered language a fence's info string names (`ts`, `rust`, `sh`…), if any. */
export function languageOf(info: string): string | undefined {
  const name = info.trim().split(/\s+/)[0]?.toLowerCase() ?? '';
  if (name === '') return undefined;
  const language = hljs.getLanguage(name);
  if (!language) return undefined;
  // The canonical name: `ts` and `typescript` are one language.
  return Object.keys(LANGUAGES).find((key) => hljs.getLanguage(key) === language) ?? name;
}

/**
 * The code as highlight.js markup (spans with `hljs-*` classes, text escaped), or undefined for
 * a language not registered here.
 */
export function highlight(code: string, info: string): string | undefined {
  const language = languageOf(info);
  if (!language) return undefined;
  return hljs.highlight(code, { language, ignoreIllegals: true }).value;
}
