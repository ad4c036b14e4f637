/**
 * A stand-in for the `vscode` module in tests of the extension host (VS Code itself cannot be
 * run here). It implements just what the extension calls, records the calls, and lets a test
 * set settings, the active editor and the answers to prompts through `__stub`.
 */

type Fn = (...args: never[]) => unknown;
const disposable = { dispose: () => undefined };

export class Uri {
  private constructor(
    readonly scheme: string,
    readonly path: string,
    readonly query = '',
  ) {}
  static file(path: string): Uri {
    return new Uri('file', path);
  }
  static parse(value: string): Uri {
    const url = new URL(value);
    return new Uri(url.protocol.replace(/:$/, ''), url.pathname, url.search.replace(/^\?/, ''));
  }
  static from(parts: { scheme: string; path: string; query?: string }): Uri {
    return new Uri(parts.scheme, parts.path, parts.query ?? '');
  }
  static joinPath(base: Uri, ...segments: string[]): Uri {
    return new Uri(base.scheme, [base.path, ...segments].join('/').replace(/\/+/g, '/'), base.query);
  }
  get fsPath(): string {
    return this.path;
  }
  toString(): string {
    return `${this.scheme}://${this.path}${this.query ? `?${this.query}` : ''}`;
  }
}

export const __stub = {
  config: {} as Record<string, unknown>,
  commands: new Map<string, Fn>(),
  executed: [] as unknown[][],
  errors: [] as string[],
  /** The buttons each error message offered, in the order of `errors`. */
  errorItems: [] as string[][],
  /** How many times the output channel was shown. */
  outputShown: 0,
  infos: [] as string[],
  errorChoice: undefined as string | undefined,
  warningChoice: undefined as string | undefined,
  /** The label the next quick pick answers with (undefined: dismissed), and what it offered. */
  quickPickChoice: undefined as string | undefined,
  quickPicks: [] as { labels: string[]; descriptions: (string | undefined)[] }[],
  /** The text the next input box answers with (undefined: dismissed), checked by its validator. */
  inputBoxAnswer: undefined as string | undefined,
  output: [] as string[],
  clipboard: '',
  viewProviders: new Map<string, unknown>(),
  contentProviders: new Map<string, unknown>(),
  activeTextEditor: undefined as unknown,
  visibleTextEditors: [] as unknown[],
  workspaceFolders: undefined as { uri: Uri }[] | undefined,
  configListeners: [] as ((event: { affectsConfiguration(section: string): boolean }) => void)[],
  /** Changes settings as the Settings editor does, then tells the listeners which ones. */
  changeConfig(values: Record<string, unknown>): void {
    this.config = { ...this.config, ...values };
    const keys = Object.keys(values);
    const event = { affectsConfiguration: (section: string) => keys.some((k) => k === section || k.startsWith(`${section}.`)) };
    for (const listener of this.configListeners) listener(event);
  },
  reset(): void {
    this.config = {};
    this.commands.clear();
    this.executed = [];
    this.errors = [];
    this.errorItems = [];
    this.outputShown = 0;
    this.infos = [];
    this.errorChoice = undefined;
    this.warningChoice = undefined;
    this.quickPickChoice = undefined;
    this.quickPicks = [];
    this.inputBoxAnswer = undefined;
    this.output = [];
    this.clipboard = '';
    this.viewProviders.clear();
    this.contentProviders.clear();
    this.activeTextEditor = undefined;
    this.visibleTextEditors = [];
    this.workspaceFolders = undefined;
    this.configListeners = [];
  },
};

export const workspace = {
  getConfiguration: (section: string) => ({
    get: <T>(key: string): T | undefined => __stub.config[`${section}.${key}`] as T | undefined,
  }),
  get workspaceFolders() {
    return __stub.workspaceFolders;
  },
  registerTextDocumentContentProvider: (scheme: string, provider: unknown) => {
    __stub.contentProviders.set(scheme, provider);
    return disposable;
  },
  onDidChangeConfiguration: (listener: (event: { affectsConfiguration(section: string): boolean }) => void) => {
    __stub.configListeners.push(listener);
    return { dispose: () => void __stub.configListeners.splice(__stub.configListeners.indexOf(listener), 1) };
  },
};

export const window = {
  createOutputChannel: () => ({
    appendLine: (line: string) => void __stub.output.push(line),
    show: () => void __stub.outputShown++,
    dispose: () => undefined,
  }),
  registerWebviewViewProvider: (id: string, provider: unknown) => {
    __stub.viewProviders.set(id, provider);
    return disposable;
  },
  showErrorMessage: async (message: string, ...items: string[]) => {
    __stub.errors.push(message);
    __stub.errorItems.push(items);
    return __stub.errorChoice;
  },
  showInformationMessage: async (message: string) => {
    __stub.infos.push(message);
    return undefined;
  },
  showWarningMessage: async () => __stub.warningChoice,
  showQuickPick: async <T extends { label: string; description?: string }>(items: T[]) => {
    __stub.quickPicks.push({ labels: items.map((i) => i.label), descriptions: items.map((i) => i.description) });
    return items.find((i) => i.label === __stub.quickPickChoice);
  },
  showInputBox: async (options: { validateInput?: (text: string) => string | undefined }) => {
    const answer = __stub.inputBoxAnswer;
    if (answer === undefined) return undefined;
    const invalid = options.validateInput?.(answer);
    if (invalid) throw new Error(`the input box refused ${answer}: ${invalid}`);
    return answer;
  },
  get activeTextEditor() {
    return __stub.activeTextEditor;
  },
  get visibleTextEditors() {
    return __stub.visibleTextEditors;
  },
};

export const commands = {
  registerCommand: (id: string, handler: Fn) => {
    __stub.commands.set(id, handler);
    return disposable;
  },
  executeCommand: async (id: string, ...args: unknown[]) => {
    __stub.executed.push([id, ...args]);
    const handler = __stub.commands.get(id) as ((...a: unknown[]) => unknown) | undefined;
    return handler?.(...args);
  },
};

export const env = {
  clipboard: {
    writeText: async (text: string) => {
      __stub.clipboard = text;
    },
  },
  openExternal: async () => true,
};
