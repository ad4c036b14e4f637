// Drives the real `sidechat acp` with the official Agent Client Protocol client
// (@agentclientprotocol/sdk) against a local OpenAI-compatible upstream, and validates every
// message the agent writes against ACP's published JSON Schema (tests/fixtures/acp-schema).
//
//   npm ci && node --test acp.test.mjs
//
// SIDECHAT_BIN names the binary (default: ../../target/debug/sidechat, relative to this file).
// The agent runs with a cleared environment, its own HOME, XDG folders and database.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable, Writable } from 'node:stream';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { client, ndJsonStream } from '@agentclientprotocol/sdk';
import Ajv2020 from 'ajv/dist/2020.js';

import { startUpstream } from './upstream.mjs';

const bin = process.env.SIDECHAT_BIN || fileURLToPath(new URL('../../target/debug/sidechat', import.meta.url));
const schemaFile = fileURLToPath(new URL('../fixtures/acp-schema/v1/schema.json', import.meta.url));

// Every message the agent writes must be one of the schema's `Agent` messages, and its params
// or result the type its method names. (The envelope alone admits anything: extension
// messages take any params, so each payload is checked against its method's own type.)
const schema = JSON.parse(readFileSync(schemaFile, 'utf8'));
const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: false });
ajv.addSchema({ $id: 'acp', $defs: schema.$defs });
const envelope = ajv.compile({ $defs: schema.$defs, ...schema.anyOf[0] });
// `$/` notifications belong to neither side: the protocol level has its own envelope.
const protocolEnvelope = ajv.compile({ $defs: schema.$defs, ...schema.anyOf[2] });
const type = (name) => ajv.getSchema(`acp#/$defs/${name}`);
const sentTypes = {
  'session/update': type('SessionNotification'),
  'session/request_permission': type('RequestPermissionRequest'),
  '$/cancel_request': type('CancelRequestNotification'),
};
const resultTypes = {
  initialize: type('InitializeResponse'),
  authenticate: type('AuthenticateResponse'),
  'session/new': type('NewSessionResponse'),
  'session/load': type('LoadSessionResponse'),
  'session/resume': type('ResumeSessionResponse'),
  'session/list': type('ListSessionsResponse'),
  'session/close': type('CloseSessionResponse'),
  'session/prompt': type('PromptResponse'),
  'session/set_config_option': type('SetSessionConfigOptionResponse'),
};
const errorType = type('Error');

/**
 * Why `message`, written by the agent, is not valid ACP (null when it is). `asked` maps the ids
 * of the client's requests to their methods. Extension methods (starting with `_`) have no
 * schema beyond the envelope.
 */
function refusal(message, asked) {
  const check = (validate, value, what) => (validate(value) ? null : { what, errors: validate.errors.slice(0, 5) });
  const outer = check(message.method?.startsWith('$/') ? protocolEnvelope : envelope, message, 'envelope');
  if (outer) return outer;
  if ('method' in message) {
    const validate = sentTypes[message.method];
    if (validate) return check(validate, message.params, message.method);
    return message.method.startsWith('_') ? null : { what: `unknown method ${message.method}` };
  }
  if ('error' in message) return check(errorType, message.error, 'error');
  const method = asked.get(JSON.stringify(message.id));
  if (method === undefined) return { what: `an answer to no request (id ${JSON.stringify(message.id)})` };
  const validate = resultTypes[method];
  if (validate) return check(validate, message.result, `result of ${method}`);
  return method.startsWith('_') ? null : { what: `a result for unknown method ${method}` };
}

// A step waiting for something that never comes fails the run instead of hanging it.
const GUARD_MS = Number(process.env.GUARD_MS ?? 120_000);
const guard = setTimeout(() => {
  console.error('acp test: gave up after', GUARD_MS, 'ms');
  if (agent) console.error(JSON.stringify(agent.messages.slice(-6)), JSON.stringify(agent.sent.slice(-4)), agent.stderr.slice(-3000));
  process.exit(1);
}, GUARD_MS);
guard.unref();

/** A pass-through of newline-delimited JSON that hands each message to `record` on the way. */
function lines(record) {
  const decoder = new TextDecoder();
  let buffered = '';
  return new TransformStream({
    transform(bytes, controller) {
      buffered += decoder.decode(bytes, { stream: true });
      let end;
      while ((end = buffered.indexOf('\n')) >= 0) {
        const line = buffered.slice(0, end);
        buffered = buffered.slice(end + 1);
        if (line.trim()) record(JSON.parse(line));
      }
      controller.enqueue(bytes);
    },
  });
}

/** One running `sidechat acp` and the ACP client connected to it. */
class Agent {
  constructor(env, db, cwd = undefined) {
    this.child = spawn(bin, ['acp', '--db', db], { env, cwd, stdio: ['pipe', 'pipe', 'pipe'] });
    this.stderr = '';
    this.child.stderr.setEncoding('utf8');
    this.child.stderr.on('data', (c) => { this.stderr += c; });
    this.exited = new Promise((resolve) => this.child.on('exit', (code, signal) => resolve({ code, signal })));
    /** Every message the agent wrote, parsed, in order. */
    this.messages = [];
    /** Messages the schema refused, with the reasons. */
    this.invalid = [];
    this.updates = [];
    this.events = new EventEmitter();
    /** Answers `session/request_permission` (its params and the signal a `$/cancel_request`
     * for it aborts); tests replace it. */
    this.onPermission = () => new Promise(() => {});
    this.permissions = [];

    // The client's requests, by id, so each answer is checked against its method's result.
    const asked = new Map();
    const fromAgent = lines((message) => {
      this.messages.push(message);
      const why = refusal(message, asked);
      if (why) this.invalid.push({ message, ...why });
    });
    /** Every message the client wrote, in order. */
    this.sent = [];
    const fromClient = lines((message) => {
      this.sent.push(message);
      this.events.emit('sent', message);
      if ('method' in message && 'id' in message) asked.set(JSON.stringify(message.id), message.method);
    });
    const toAgent = fromClient.readable;
    toAgent.pipeTo(Writable.toWeb(this.child.stdin)).catch(() => {});
    const stream = ndJsonStream(fromClient.writable, Readable.toWeb(this.child.stdout).pipeThrough(fromAgent));
    const app = client({ name: 'sidechat acp test' })
      .onNotification('session/update', ({ params }) => {
        this.updates.push(params);
        this.events.emit('update', params);
      })
      .onRequest('session/request_permission', ({ params, signal }) => {
        this.permissions.push(params);
        this.events.emit('permission', params);
        return this.onPermission(params, signal);
      });
    this.connection = app.connect(stream);
    this.agent = this.connection.agent;
  }

  request(method, params) {
    return this.agent.request(method, params);
  }

  notify(method, params) {
    return this.agent.notify(method, params);
  }

  /** Resolves with the first update from `from` on that satisfies `match`. */
  update(match, from = 0) {
    return new Promise((resolve) => {
      const found = this.updates.slice(from).find(match);
      if (found) return resolve(found);
      const listener = (u) => {
        if (match(u)) {
          this.events.off('update', listener);
          resolve(u);
        }
      };
      this.events.on('update', listener);
    });
  }

  /** Resolves with the first message the client wrote that satisfies `match`. */
  sentWhere(match) {
    return new Promise((resolve) => {
      const found = this.sent.find(match);
      if (found) return resolve(found);
      const listener = (m) => {
        if (match(m)) {
          this.events.off('sent', listener);
          resolve(m);
        }
      };
      this.events.on('sent', listener);
    });
  }

  /** Resolves with the next permission request. */
  nextPermission() {
    return new Promise((resolve) => this.events.once('permission', resolve));
  }

  /** The id of the last `session/request_permission` the agent sent. */
  lastPermissionId() {
    return this.messages.findLast((m) => m.method === 'session/request_permission').id;
  }

  /** Where in `messages` the `$/cancel_request` for request `id` is, and where the answer to
   * the client's request of `method` sent last is (-1 when not written). */
  positions(id, method) {
    const asked = this.sent.findLast((m) => m.method === method).id;
    return {
      withdrawn: this.messages.findIndex((m) => m.method === '$/cancel_request' && m.params.requestId === id),
      answered: this.messages.findIndex((m) => m.id === asked && !('method' in m)),
    };
  }

  /** The updates of one session, from index `from` on. */
  of(sessionId, from = 0) {
    return this.updates.slice(from).filter((u) => u.sessionId === sessionId).map((u) => u.update);
  }

  async stop() {
    this.connection.close();
    this.child.stdin.end();
    return this.exited;
  }
}

const dir = mkdtempSync(join(tmpdir(), 'sidechat-acp-'));
const workspace = join(dir, 'workspace');
mkdirSync(workspace);
writeFileSync(join(workspace, 'README.md'), 'A project to test with.\n');
const db = join(dir, 'sidechat.db');
let upstream;
let env;
let agent;
/** Agents killed during the tests, whose messages are checked with the last one's. */
const retired = [];

const text = (updates, kind) => updates.filter((u) => u.sessionUpdate === kind).map((u) => u.content.text).join('');
const kinds = (updates) => updates.map((u) => u.sessionUpdate);

before(async () => {
  assert.ok(existsSync(bin), `no sidechat binary at ${bin}; run \`cargo build\` or set SIDECHAT_BIN`);
  upstream = await startUpstream();
  // A clean environment: no config or key of this machine adds accounts; only the fake
  // upstream (as an OpenAI-compatible account with a priced model) and the demo exist.
  env = {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    HOME: dir,
    XDG_CONFIG_HOME: join(dir, 'config'),
    XDG_DATA_HOME: join(dir, 'data'),
    OPENAI_BASE_URL: upstream.url,
    OPENAI_API_KEY: 'sk-test-not-a-secret',
    SIDECHAT_OPENAI_MODEL: upstream.model,
    SIDECHAT_MAX_RETRIES: '0',
    // No title request after a session's first answer, so each test sees its own requests
    // (the titles test turns them on).
    SIDECHAT_AUTO_TITLE: 'off',
  };
  agent = new Agent(env, db);
});

after(async () => {
  if (agent) await agent.stop();
  if (upstream) await upstream.close();
  rmSync(dir, { recursive: true, force: true });
});

let sessionId;

test('the schema check refuses what is not ACP', () => {
  const asked = new Map([['7', 'session/prompt']]);
  const update = (u) => ({ jsonrpc: '2.0', method: 'session/update', params: { sessionId: 's', update: u } });
  assert.equal(refusal(update({ sessionUpdate: 'agent_message_chunk', content: { type: 'text', text: 'hi' } }), asked), null);
  assert.equal(refusal({ jsonrpc: '2.0', id: 7, result: { stopReason: 'end_turn' } }, asked), null);
  for (const bad of [
    update({ sessionUpdate: 'agent_message_chunk', content: { type: 'bogus' } }),
    update({ sessionUpdate: 'tool_call_update', toolCallId: 'c', status: 'awaiting' }),
    update({ sessionUpdate: 'usage_update', used: 'many', size: 1 }),
    { jsonrpc: '2.0', id: 7, result: { stopReason: 'finished' } },
    { jsonrpc: '2.0', id: 8, result: {} },
    { jsonrpc: '2.0', id: 7, error: { message: 'no code' } },
  ]) {
    assert.notEqual(refusal(bad, asked), null, JSON.stringify(bad));
  }
});

test('initialize answers with honest capabilities', async () => {
  const init = await agent.request('initialize', {
    protocolVersion: 1,
    clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
    clientInfo: { name: 'acp-test', version: '0' },
  });
  assert.equal(init.protocolVersion, 1);
  assert.deepEqual(init.agentInfo, { name: 'sidechat', version: init.agentInfo.version });
  assert.deepEqual(init.authMethods, []);
  assert.deepEqual(init.agentCapabilities.loadSession, true);
  assert.deepEqual(init.agentCapabilities.promptCapabilities, { image: true, audio: false, embeddedContext: true });
  assert.deepEqual(init.agentCapabilities.sessionCapabilities, { list: {}, resume: {}, close: {} });
  assert.equal(init._meta.sidechat.promptWhileRunning, 'interjection');
  assert.equal(init._meta.sidechat.steering, '_session/steering');
});

test('a second initialize is refused and the connection goes on', async () => {
  await assert.rejects(agent.request('initialize', { protocolVersion: 1 }), (e) => e.code === -32600 && /already/.test(e.message));
});

test('session/new opens a session in the workspace with the model and the commands', async () => {
  const from = agent.updates.length;
  const created = await agent.request('session/new', { cwd: workspace, mcpServers: [] });
  sessionId = created.sessionId;
  assert.match(sessionId, /^ses_/);
  assert.deepEqual(created.configOptions, [{
    id: 'model',
    name: 'Model',
    description: 'The model that answers from the next request on',
    category: 'model',
    type: 'select',
    currentValue: upstream.model,
    options: [{ value: upstream.model, name: upstream.model }],
  }, {
    // gpt-5-mini takes a reasoning effort: the thought-level selector, at the account's default.
    id: 'effort',
    name: 'Effort',
    description: 'How hard the model thinks, from the next request on',
    category: 'thought_level',
    type: 'select',
    currentValue: 'default',
    options: [
      { value: 'default', name: "Default (the model's)" },
      { value: 'minimal', name: 'Minimal' },
      { value: 'low', name: 'Low' },
      { value: 'medium', name: 'Medium' },
      { value: 'high', name: 'High' },
    ],
  }]);
  const commands = await agent.update((u) => u.sessionId === sessionId && u.update.sessionUpdate === 'available_commands_update', from);
  assert.deepEqual(commands.update.availableCommands.map((c) => c.name), ['cost', 'model', 'system', 'clear', 'compact', 'new-context', 'instructions', 'undo', 'rewind', 'fork', 'help']);
});

test('a prompt streams thoughts and text, a title and the usage with its cost, then ends the turn', async () => {
  const from = agent.updates.length;
  const answer = await agent.request('session/prompt', { sessionId, prompt: [{ type: 'text', text: 'stream a greeting' }] });
  assert.deepEqual(answer, { stopReason: 'end_turn' });
  const updates = agent.of(sessionId, from);
  assert.equal(text(updates, 'agent_thought_chunk'), 'Thinking it over.');
  assert.equal(text(updates, 'agent_message_chunk'), 'Hello from the fake upstream.');
  const info = updates.find((u) => u.sessionUpdate === 'session_info_update');
  assert.equal(info.title, 'stream a greeting');
  const usage = updates.filter((u) => u.sessionUpdate === 'usage_update').at(-1);
  assert.ok(usage.size > 0 && usage.used > 0, JSON.stringify(usage));
  assert.equal(usage.cost.currency, 'USD');
  assert.ok(usage.cost.amount > 0, JSON.stringify(usage));
});

test('a slash command answers with its note and ends the turn', async () => {
  const from = agent.updates.length;
  const answer = await agent.request('session/prompt', { sessionId, prompt: [{ type: 'text', text: '/cost' }] });
  assert.deepEqual(answer, { stopReason: 'end_turn' });
  assert.match(text(agent.of(sessionId, from), 'agent_message_chunk'), /^Cost of this session: \$/);
});

test('a write asks permission; allowed, it runs and shows its diff', async () => {
  const from = agent.updates.length;
  agent.onPermission = async () => ({ outcome: { outcome: 'selected', optionId: 'allow' } });
  const answer = await agent.request('session/prompt', { sessionId, prompt: [{ type: 'text', text: 'please write notes.md' }] });
  assert.deepEqual(answer, { stopReason: 'end_turn' });
  const asked = agent.permissions.at(-1);
  assert.equal(asked.sessionId, sessionId);
  assert.deepEqual(asked.options.map((o) => [o.optionId, o.kind]), [['allow', 'allow_once'], ['allowWorkspace', 'allow_always'], ['allowAlways', 'allow_always'], ['deny', 'reject_once']]);
  const path = join(workspace, 'notes.md');
  assert.deepEqual(asked.toolCall, {
    toolCallId: asked.toolCall.toolCallId,
    title: 'write notes.md (1 line)',
    kind: 'edit',
    status: 'pending',
    locations: [{ path }],
    rawInput: { path: 'notes.md', content: 'written by the model\n' },
  });
  const updates = agent.of(sessionId, from);
  const call = updates.find((u) => u.sessionUpdate === 'tool_call');
  assert.deepEqual(call, {
    sessionUpdate: 'tool_call',
    toolCallId: asked.toolCall.toolCallId,
    title: 'write notes.md (1 line)',
    kind: 'edit',
    content: [{ type: 'diff', path, newText: 'written by the model\n' }],
    locations: [{ path }],
    rawInput: { path: 'notes.md', content: 'written by the model\n' },
  });
  const states = updates.filter((u) => u.sessionUpdate === 'tool_call_update' && u.toolCallId === call.toolCallId).map((u) => u.status);
  assert.deepEqual(states, ['pending', 'in_progress', 'completed']);
  assert.equal(readFileSync(path, 'utf8'), 'written by the model\n');
  assert.match(text(updates, 'agent_message_chunk'), /^Writing notes\.md\.Done: /);
});

test('update_plan is a plan update with every entry, asked nothing', async () => {
  const { sessionId: planning } = await agent.request('session/new', { cwd: workspace, mcpServers: [] });
  const from = agent.updates.length;
  const asked = agent.permissions.length;
  const answer = await agent.request('session/prompt', { sessionId: planning, prompt: [{ type: 'text', text: 'plan this fix' }] });
  assert.deepEqual(answer, { stopReason: 'end_turn' });
  assert.equal(agent.permissions.length, asked);
  const plans = agent.of(planning, from).filter((u) => u.sessionUpdate === 'plan');
  assert.deepEqual(plans, [{
    sessionUpdate: 'plan',
    entries: [
      { content: 'Read the code', priority: 'medium', status: 'completed' },
      { content: 'Fix it', priority: 'medium', status: 'in_progress' },
      { content: 'Test it', priority: 'medium', status: 'pending' },
    ],
    _meta: { sidechat: { explanation: 'one fix' } },
  }]);
  const call = agent.of(planning, from).find((u) => u.sessionUpdate === 'tool_call');
  assert.equal(call.kind, 'think');
});

test('session/load replays the latest plan as a plan update, after the history', async () => {
  const { sessionId: planning } = await agent.request('session/new', { cwd: workspace, mcpServers: [] });
  await agent.request('session/prompt', { sessionId: planning, prompt: [{ type: 'text', text: 'plan this fix' }] });
  const from = agent.messages.length;
  await agent.request('session/load', { sessionId: planning, cwd: workspace, mcpServers: [] });
  const id = agent.sent.findLast((m) => m.method === 'session/load').id;
  const answeredAt = agent.messages.findIndex((m, i) => i >= from && m.id === id && !('method' in m));
  const replayed = agent.messages.slice(from, answeredAt).filter((m) => m.method === 'session/update').map((m) => m.params.update);
  const plans = replayed.filter((u) => u.sessionUpdate === 'plan');
  // The live plan update is part of the history as a tool call; the replay sends the plan once.
  assert.deepEqual(plans, [{
    sessionUpdate: 'plan',
    entries: [
      { content: 'Read the code', priority: 'medium', status: 'completed' },
      { content: 'Fix it', priority: 'medium', status: 'in_progress' },
      { content: 'Test it', priority: 'medium', status: 'pending' },
    ],
    _meta: { sidechat: { explanation: 'one fix' } },
  }]);
  assert.deepEqual(kinds(replayed).slice(-3), ['plan', 'session_info_update', 'usage_update']);
});

test('a write the user denies does not run, and the turn goes on', async () => {
  const from = agent.updates.length;
  agent.onPermission = async () => ({ outcome: { outcome: 'selected', optionId: 'deny' } });
  const answer = await agent.request('session/prompt', { sessionId, prompt: [{ type: 'text', text: 'now write other.md' }] });
  assert.deepEqual(answer, { stopReason: 'end_turn' });
  const updates = agent.of(sessionId, from);
  const call = updates.find((u) => u.sessionUpdate === 'tool_call');
  const last = updates.filter((u) => u.sessionUpdate === 'tool_call_update' && u.toolCallId === call.toolCallId).at(-1);
  assert.equal(last.status, 'failed');
  assert.match(last.content[0].content.text, /denied/);
  assert.equal(existsSync(join(workspace, 'other.md')), false);
});

test('allow_always saves the workspace rule it names: the same write later runs unasked', async () => {
  agent.onPermission = async (params) => ({ outcome: { outcome: 'selected', optionId: params.options.find((o) => o.kind === 'allow_always').optionId } });
  const before = agent.permissions.length;
  assert.deepEqual(await agent.request('session/prompt', { sessionId, prompt: [{ type: 'text', text: 'please write kept.md' }] }), { stopReason: 'end_turn' });
  assert.equal(agent.permissions.length, before + 1);
  const offered = agent.permissions.at(-1).options.filter((o) => o.kind === 'allow_always');
  assert.deepEqual(offered.map((o) => [o.optionId, o.name]), [
    ['allowWorkspace', 'Always allow in this workspace: write_file(kept.md)'],
    ['allowAlways', 'Allow always (this session)'],
  ]);
  rmSync(join(workspace, 'kept.md'));
  agent.onPermission = async () => ({ outcome: { outcome: 'selected', optionId: 'deny' } });
  assert.deepEqual(await agent.request('session/prompt', { sessionId, prompt: [{ type: 'text', text: 'now write kept.md again' }] }), { stopReason: 'end_turn' });
  assert.equal(agent.permissions.length, before + 1, 'not asked again');
  assert.equal(readFileSync(join(workspace, 'kept.md'), 'utf8'), 'written by the model\n');
});

test('a delegated task is a tool call that follows the sub-agent, its permission asked in the session', async () => {
  const from = agent.updates.length;
  agent.onPermission = async () => ({ outcome: { outcome: 'selected', optionId: 'allow' } });
  const answer = await agent.request('session/prompt', { sessionId, prompt: [{ type: 'text', text: 'please delegate this' }] });
  assert.deepEqual(answer, { stopReason: 'end_turn' });
  const updates = agent.of(sessionId, from);
  const call = updates.find((u) => u.sessionUpdate === 'tool_call');
  assert.equal(call.rawInput.task, 'write sub.md');
  const asked = agent.permissions.at(-1);
  assert.equal(asked.sessionId, sessionId);
  assert.equal(asked.toolCall.toolCallId, call.toolCallId);
  assert.equal(asked.toolCall.title, 'write sub.md (1 line) (delegated task)');
  const contents = updates
    .filter((u) => u.sessionUpdate === 'tool_call_update' && u.toolCallId === call.toolCallId && u.content)
    .map((u) => u.content[0].content.text);
  assert.ok(contents.some((t) => t.includes('→ write sub.md (1 line)')), JSON.stringify(contents));
  assert.match(contents.at(-1), /^Done: /);
  assert.equal(readFileSync(join(workspace, 'sub.md'), 'utf8'), 'written by the model\n');
  // The sub-agent's own session never shows as a session of its own.
  assert.deepEqual(agent.updates.slice(from).filter((u) => u.sessionId !== sessionId), []);
});

test('session/cancel mid-turn answers the prompt with cancelled', async () => {
  const reached = upstream.reachedGate();
  const from = agent.updates.length;
  const prompting = agent.request('session/prompt', { sessionId, prompt: [{ type: 'text', text: 'a slow answer please' }] });
  await reached;
  await agent.update((u) => u.sessionId === sessionId && u.update.sessionUpdate === 'agent_message_chunk' && u.update.content.text.includes('long answer'), from);
  await agent.notify('session/cancel', { sessionId });
  assert.deepEqual(await prompting, { stopReason: 'cancelled' });
});

test('session/cancel withdraws an open permission request', async () => {
  let answer;
  const asked = agent.nextPermission();
  agent.onPermission = () => new Promise((resolve) => { answer = resolve; });
  const from = agent.updates.length;
  const prompting = agent.request('session/prompt', { sessionId, prompt: [{ type: 'text', text: 'run a command' }] });
  const request = await asked;
  assert.equal(request.toolCall.kind, 'execute');
  await agent.notify('session/cancel', { sessionId });
  // As ACP asks of a client that cancels: the open request is answered `cancelled`.
  answer({ outcome: { outcome: 'cancelled' } });
  assert.deepEqual(await prompting, { stopReason: 'cancelled' });
  const last = agent.of(sessionId, from).filter((u) => u.sessionUpdate === 'tool_call_update' && u.toolCallId === request.toolCall.toolCallId).at(-1);
  assert.equal(last.status, 'failed');
});

/** A client that answers a permission request only once it is withdrawn, with `answer`. */
const answerWhenWithdrawn = (answer) => (_params, signal) => new Promise((resolve) => {
  signal.addEventListener('abort', () => resolve(answer), { once: true });
});

test('session/cancel withdraws an open permission request with $/cancel_request', async () => {
  const { sessionId: cancelling } = await agent.request('session/new', { cwd: workspace, mcpServers: [] });
  const asked = agent.nextPermission();
  agent.onPermission = answerWhenWithdrawn({ outcome: { outcome: 'cancelled' } });
  const prompting = agent.request('session/prompt', { sessionId: cancelling, prompt: [{ type: 'text', text: 'run a command' }] });
  await asked;
  const id = agent.lastPermissionId();
  await agent.notify('session/cancel', { sessionId: cancelling });
  assert.deepEqual(await prompting, { stopReason: 'cancelled' });
  // The request is withdrawn before the prompt answers, and the client's `cancelled` follows.
  const { withdrawn, answered } = agent.positions(id, 'session/prompt');
  assert.ok(withdrawn >= 0 && withdrawn < answered, JSON.stringify({ withdrawn, answered }));
  await agent.sentWhere((m) => m.id === id && m.result?.outcome?.outcome === 'cancelled');
});

test('a choice sent after session/close withdrew its request changes nothing', async () => {
  const { sessionId: closing } = await agent.request('session/new', { cwd: workspace, mcpServers: [] });
  const asked = agent.nextPermission();
  // A person who clicks "allow" as the request goes away.
  agent.onPermission = answerWhenWithdrawn({ outcome: { outcome: 'selected', optionId: 'allow' } });
  const prompting = agent.request('session/prompt', { sessionId: closing, prompt: [{ type: 'text', text: 'write late.md' }] });
  const request = await asked;
  const id = agent.lastPermissionId();
  assert.deepEqual(await agent.request('session/close', { sessionId: closing }), {});
  assert.deepEqual(await prompting, { stopReason: 'cancelled' });
  assert.ok(agent.positions(id, 'session/close').withdrawn >= 0);
  await agent.sentWhere((m) => m.id === id && m.result?.outcome?.optionId === 'allow');
  // The late answer is not applied, and the session goes on once resumed.
  await agent.request('session/resume', { sessionId: closing, cwd: workspace, mcpServers: [] });
  assert.deepEqual(await agent.request('session/prompt', { sessionId: closing, prompt: [{ type: 'text', text: 'hello again' }] }), { stopReason: 'end_turn' });
  assert.equal(existsSync(join(workspace, 'late.md')), false);
  const last = agent.of(closing).filter((u) => u.sessionUpdate === 'tool_call_update' && u.toolCallId === request.toolCall.toolCallId).at(-1);
  assert.equal(last.status, 'failed');
});

test('a permission answered cancelled cancels the turn', async () => {
  const { sessionId: declining } = await agent.request('session/new', { cwd: workspace, mcpServers: [] });
  agent.onPermission = async () => ({ outcome: { outcome: 'cancelled' } });
  const answer = await agent.request('session/prompt', { sessionId: declining, prompt: [{ type: 'text', text: 'write never.md' }] });
  assert.deepEqual(answer, { stopReason: 'cancelled' });
  assert.equal(existsSync(join(workspace, 'never.md')), false);
});

test('session/load replays the history in order, before its answer', async () => {
  const from = agent.messages.length;
  const loaded = await agent.request('session/load', { sessionId, cwd: workspace, mcpServers: [] });
  assert.equal(loaded.configOptions[0].currentValue, upstream.model);
  const id = agent.sent.findLast((m) => m.method === 'session/load').id;
  const answeredAt = agent.messages.findIndex((m, i) => i >= from && m.id === id && !('method' in m));
  const replayed = agent.messages.slice(from, answeredAt).filter((m) => m.method === 'session/update').map((m) => m.params.update);
  const users = replayed.filter((u) => u.sessionUpdate === 'user_message_chunk').map((u) => u.content.text);
  // A slash command is not a message to the model: only its note is stored, and replayed.
  assert.deepEqual(users, ['stream a greeting', 'please write notes.md', 'now write other.md', 'please write kept.md', 'now write kept.md again', 'please delegate this', 'a slow answer please', 'run a command']);
  assert.match(text(replayed, 'agent_message_chunk'), /Cost of this session: \$/);
  assert.deepEqual(kinds(replayed).slice(0, 5), ['user_message_chunk', 'agent_thought_chunk', 'agent_message_chunk', 'agent_message_chunk', 'user_message_chunk']);
  const calls = replayed.filter((u) => u.sessionUpdate === 'tool_call').map((u) => u.kind);
  // The delegate call is of kind `other`, which ACP leaves out.
  assert.deepEqual(calls, ['edit', 'edit', 'edit', 'edit', undefined, 'execute']);
  const results = replayed.filter((u) => u.sessionUpdate === 'tool_call_update').map((u) => u.status);
  assert.deepEqual(results, ['completed', 'failed', 'completed', 'completed', 'completed', 'failed']);
  assert.equal(text(replayed.slice(0, 3), 'agent_message_chunk'), 'Hello from the fake upstream.');
  assert.deepEqual(kinds(replayed).slice(-2), ['session_info_update', 'usage_update']);
  const afterwards = agent.messages.slice(answeredAt + 1).filter((m) => m.method === 'session/update' && m.params.sessionId === sessionId);
  await agent.update((u) => u.sessionId === sessionId && u.update.sessionUpdate === 'available_commands_update', agent.updates.length - afterwards.length);
});

test('session/list finds the sessions of a folder, with titles', async () => {
  const listed = await agent.request('session/list', { cwd: workspace });
  const mine = listed.sessions.find((s) => s.sessionId === sessionId);
  assert.deepEqual({ ...mine, updatedAt: undefined }, { sessionId, cwd: workspace, title: 'stream a greeting', updatedAt: undefined });
  const elsewhere = await agent.request('session/list', { cwd: join(dir, 'elsewhere') });
  assert.deepEqual(elsewhere.sessions, []);
});

test('/fork makes a new session that session/list shows in the same folder', async () => {
  const from = agent.updates.length;
  const answer = await agent.request('session/prompt', { sessionId, prompt: [{ type: 'text', text: '/fork' }] });
  assert.deepEqual(answer, { stopReason: 'end_turn' });
  const note = text(agent.of(sessionId, from), 'agent_message_chunk');
  const fork = /Forked into session (ses_\w+)/.exec(note)?.[1];
  assert.ok(fork, note);
  const listed = await agent.request('session/list', { cwd: workspace });
  const found = listed.sessions.find((s) => s.sessionId === fork);
  assert.deepEqual({ ...found, updatedAt: undefined }, { sessionId: fork, cwd: workspace, title: 'stream a greeting (fork)', updatedAt: undefined });
});

test('a prompt sent mid-turn is queued, delivered, and both prompts answer', async () => {
  const { sessionId: busy } = await agent.request('session/new', { cwd: workspace, mcpServers: [] });
  const reached = upstream.reachedGate();
  const first = agent.request('session/prompt', { sessionId: busy, prompt: [{ type: 'text', text: 'queue some work' }] });
  await reached;
  const second = agent.request('session/prompt', { sessionId: busy, prompt: [{ type: 'text', text: 'also mention the tests' }] });
  // Requests are taken in arrival order: once this answers, the second prompt is queued.
  await agent.request('session/list', {});
  upstream.open('queue');
  assert.deepEqual(await first, { stopReason: 'end_turn' });
  assert.deepEqual(await second, { stopReason: 'end_turn' });
  const delivered = upstream.requests.at(-1).messages.at(-1);
  assert.match(JSON.stringify(delivered), /The user adds: also mention the tests/);
  assert.match(text(agent.of(busy), 'agent_message_chunk'), /Noted \(also mention the tests\)/);
});

test('_session/steering joins the running turn, or starts one', async () => {
  const { sessionId: steered } = await agent.request('session/new', { cwd: workspace, mcpServers: [] });
  const reached = upstream.reachedGate();
  const prompting = agent.request('session/prompt', { sessionId: steered, prompt: [{ type: 'text', text: 'queue a task' }] });
  await reached;
  const steering = await agent.request('_session/steering', { sessionId: steered, prompt: [{ type: 'text', text: 'and be brief' }] });
  assert.deepEqual(steering, { outcome: 'injected' });
  upstream.open('queue');
  assert.deepEqual(await prompting, { stopReason: 'end_turn' });
  assert.match(text(agent.of(steered), 'agent_message_chunk'), /Noted \(and be brief\)/);
  const from = agent.updates.length;
  const idle = await agent.request('_session/steering', { sessionId: steered, prompt: [{ type: 'text', text: 'one more thing' }] });
  assert.deepEqual(idle, { outcome: 'startedNewTurn' });
  await agent.update((u) => u.sessionId === steered && u.update.sessionUpdate === 'usage_update' && u.update.cost, from);
  await agent.update((u) => u.sessionId === steered && u.update.sessionUpdate === 'agent_message_chunk' && u.update.content.text === 'OK.', from);
});

test('the model is a config option the client can set', async () => {
  const { sessionId: other } = await agent.request('session/new', { cwd: workspace, mcpServers: [] });
  const set = await agent.request('session/set_config_option', { sessionId: other, configId: 'model', value: 'gpt-4o-mini' });
  assert.deepEqual(set.configOptions[0].currentValue, 'gpt-4o-mini');
  assert.deepEqual(set.configOptions[0].options.map((o) => o.value), ['gpt-4o-mini', upstream.model]);
  await assert.rejects(agent.request('session/set_config_option', { sessionId: other, configId: 'mode', value: 'x' }), (e) => e.code === -32602 && /unknown config option/.test(e.message));
});

test('bad input gets a clear error and the connection goes on', async () => {
  await assert.rejects(agent.request('session/fork', { sessionId }), (e) => e.code === -32601 && /session\/fork/.test(e.message));
  await assert.rejects(agent.request('session/prompt', { sessionId: 'ses_nope', prompt: [{ type: 'text', text: 'hi' }] }), (e) => e.code === -32002 && /ses_nope/.test(e.message));
  await assert.rejects(agent.request('session/prompt', { sessionId, prompt: [{ type: 'text', text: 'see' }, { type: 'image', data: 'AAAA', mimeType: 'image/png' }] }), (e) => e.code === -32602 && /image 0: the data is not a PNG/.test(e.message));
  await assert.rejects(agent.request('session/prompt', { sessionId, prompt: [] }), (e) => e.code === -32602 && /no text/.test(e.message));
  await assert.rejects(agent.request('session/prompt', { sessionId, prompt: [{ type: 'bogus', text: 'hi' }] }), (e) => e.code === -32602 && /session\/prompt.*bogus/.test(e.message));
  await assert.rejects(agent.request('session/new', { cwd: 'relative/path', mcpServers: [] }), (e) => e.code === -32602 && /absolute/.test(e.message));
  const { sessionId: closing } = await agent.request('session/new', { cwd: workspace, mcpServers: [] });
  assert.deepEqual(await agent.request('session/close', { sessionId: closing }), {});
  await assert.rejects(agent.request('session/prompt', { sessionId: closing, prompt: [{ type: 'text', text: 'hi' }] }), (e) => e.code === -32002 && /closed/.test(e.message));
  await agent.request('session/resume', { sessionId: closing, cwd: workspace, mcpServers: [] });
  assert.deepEqual(await agent.request('session/prompt', { sessionId: closing, prompt: [{ type: 'text', text: 'hi again' }] }), { stopReason: 'end_turn' });
});

test('a failed model request answers the prompt with an error a person can act on', async () => {
  const { sessionId: failing } = await agent.request('session/new', { cwd: workspace, mcpServers: [] });
  await assert.rejects(
    agent.request('session/prompt', { sessionId: failing, prompt: [{ type: 'text', text: 'are you overloaded?' }] }),
    (e) => e.code === -32603 && /^The model request failed: .*overloaded/.test(e.message),
  );
  // The notice that says so reaches the client too, marked as one.
  const notices = agent.of(failing).filter((u) => u.sessionUpdate === 'agent_message_chunk' && u._meta?.sidechat?.notice);
  assert.deepEqual(notices.map((u) => u._meta.sidechat.notice.level), ['error']);
  assert.match(notices[0].content.text, /^\n\nError: .*overloaded/);
  // The session goes on.
  assert.deepEqual(await agent.request('session/prompt', { sessionId: failing, prompt: [{ type: 'text', text: 'hello' }] }), { stopReason: 'end_turn' });
});

test('a refusal answers refusal, with the refusal and a notice shown, and replays', async () => {
  const { sessionId: refusing } = await agent.request('session/new', { cwd: workspace, mcpServers: [] });
  const answer = await agent.request('session/prompt', { sessionId: refusing, prompt: [{ type: 'text', text: 'please refuse this' }] });
  assert.deepEqual(answer, { stopReason: 'refusal' });
  const chunks = agent.of(refusing).filter((u) => u.sessionUpdate === 'agent_message_chunk');
  const notice = {
    sessionUpdate: 'agent_message_chunk',
    messageId: chunks.at(-1).messageId,
    content: { type: 'text', text: '\n\nWarning: The model declined to answer.\n\n' },
    _meta: { sidechat: { notice: { level: 'warning' } } },
  };
  assert.deepEqual(chunks.map((c) => c.content.text), ['I cannot help with that.', notice.content.text]);
  assert.deepEqual(chunks.at(-1), notice);
  assert.notEqual(chunks[0].messageId, notice.messageId);
  // Loading the session shows both again, the notice marked as before.
  const from = agent.updates.length;
  await agent.request('session/load', { sessionId: refusing, cwd: workspace, mcpServers: [] });
  const replayed = agent.of(refusing, from).filter((u) => u.sessionUpdate === 'agent_message_chunk');
  assert.deepEqual(replayed.map((c) => c.content.text), ['I cannot help with that.', notice.content.text]);
  assert.deepEqual(replayed.at(-1), notice);
});

test('an answer cut off by the output limit answers max_tokens, with a notice', async () => {
  const { sessionId: cut } = await agent.request('session/new', { cwd: workspace, mcpServers: [] });
  const answer = await agent.request('session/prompt', { sessionId: cut, prompt: [{ type: 'text', text: 'go on at length' }] });
  assert.deepEqual(answer, { stopReason: 'max_tokens' });
  const chunks = agent.of(cut).filter((u) => u.sessionUpdate === 'agent_message_chunk').map((u) => u.content.text);
  assert.deepEqual(chunks, ['A long answer that', '\n\nWarning: The answer got too long and was cut off.\n\n']);
});

/** Creates a session through `sidechat serve` (the native protocol) and returns its id. */
async function createWithServe(env, db, params) {
  const child = spawn(bin, ['serve', '--db', db], { env, stdio: ['pipe', 'pipe', 'pipe'] });
  const exited = new Promise((resolve) => child.on('exit', resolve));
  const send = (message) => child.stdin.write(`${JSON.stringify({ jsonrpc: '2.0', ...message })}\n`);
  send({ id: 1, method: 'initialize', params: { protocolVersion: 1, clientInfo: { name: 'acp-test' } } });
  send({ method: 'initialized', params: {} });
  send({ id: 2, method: 'session/create', params });
  let buffered = '';
  child.stdout.setEncoding('utf8');
  const created = await new Promise((resolve, reject) => {
    child.stdout.on('data', (data) => {
      buffered += data;
      for (const line of buffered.split('\n').slice(0, -1)) {
        const message = JSON.parse(line);
        if (message.id === 2) (message.result ? resolve(message.result) : reject(new Error(JSON.stringify(message.error))));
      }
      buffered = buffered.slice(buffered.lastIndexOf('\n') + 1);
    });
  });
  child.stdin.end();
  await exited;
  return created.id;
}

/** Agents started for one test with their own database and limits, checked at the end. */
const others = [];

/** A `sidechat acp` on a database of its own, with `limits` in its environment, in `cwd`. */
async function limitedAgent(name, limits, cwd = workspace) {
  const db = join(dir, `${name}.db`);
  const limited = new Agent({ ...env, ...limits }, db, cwd);
  others.push(limited);
  await limited.request('initialize', { protocolVersion: 1 });
  return { limited, db };
}

test('a session made without a workspace is listed in the agent folder and takes the folder it is loaded in', async () => {
  const db = join(dir, 'rootless.db');
  const rootless = await createWithServe(env, db, { title: 'made elsewhere' });
  const elsewhere = join(dir, 'elsewhere');
  mkdirSync(elsewhere, { recursive: true });
  const listing = new Agent(env, db, elsewhere);
  others.push(listing);
  await listing.request('initialize', { protocolVersion: 1 });
  const listed = await listing.request('session/list', {});
  assert.deepEqual(listed.sessions.map((s) => ({ ...s, updatedAt: undefined })), [
    { sessionId: rootless, cwd: elsewhere, title: 'made elsewhere', updatedAt: undefined, _meta: { sidechat: { workspaceRoot: null } } },
  ]);
  assert.deepEqual((await listing.request('session/list', { cwd: workspace })).sessions, []);
  await listing.request('session/load', { sessionId: rootless, cwd: workspace, mcpServers: [] });
  const mine = await listing.request('session/list', { cwd: workspace });
  assert.deepEqual(mine.sessions.map((s) => [s.sessionId, s.cwd, s._meta]), [[rootless, workspace, undefined]]);
  await listing.stop();
});

test('a spent budget answers the prompt with an error a person can act on', async () => {
  const { limited } = await limitedAgent('capped', { SIDECHAT_CAP_USD: '0.000001' });
  const { sessionId: capped } = await limited.request('session/new', { cwd: workspace, mcpServers: [] });
  const requests = upstream.requests.length;
  await assert.rejects(
    limited.request('session/prompt', { sessionId: capped, prompt: [{ type: 'text', text: 'hello' }] }),
    (e) => e.code === -32603 && /^The session's budget is spent: capUsd: .*Raise the limit to continue\.$/.test(e.message),
  );
  // Nothing was sent upstream, the client was told why, and the connection goes on.
  assert.equal(upstream.requests.length, requests);
  const notices = limited.of(capped).filter((u) => u._meta?.sidechat?.notice?.level === 'warning');
  assert.match(notices.at(-1).content.text, /capUsd/);
  assert.deepEqual(await limited.request('session/prompt', { sessionId: capped, prompt: [{ type: 'text', text: '/cost' }] }), { stopReason: 'end_turn' });
  await limited.stop();
});

test('a session is named by its first prompt at once, then by the daemon after the first answer', async () => {
  const { limited } = await limitedAgent('titled', { SIDECHAT_AUTO_TITLE: 'on' });
  const { sessionId: titled } = await limited.request('session/new', { cwd: workspace, mcpServers: [] });
  await limited.request('session/prompt', { sessionId: titled, prompt: [{ type: 'text', text: 'stream a greeting' }] });
  const info = (u) => u.sessionId === titled && u.update.sessionUpdate === 'session_info_update' && u.update.title !== 'stream a greeting';
  const named = await limited.update(info);
  const titles = limited.of(titled).filter((u) => u.sessionUpdate === 'session_info_update').map((u) => u.title);
  assert.deepEqual(titles, ['stream a greeting', 'A greeting from upstream']);
  assert.equal(named.update.title, 'A greeting from upstream');
  const listed = await limited.request('session/list', { cwd: workspace });
  assert.equal(listed.sessions.find((s) => s.sessionId === titled).title, 'A greeting from upstream');
  await limited.stop();
});

test('a run at its step limit answers max_turn_requests', async () => {
  const { limited } = await limitedAgent('stepped', { SIDECHAT_MAX_STEPS: '1' });
  const { sessionId: stepped } = await limited.request('session/new', { cwd: workspace, mcpServers: [] });
  limited.onPermission = async () => ({ outcome: { outcome: 'selected', optionId: 'allow' } });
  const answer = await limited.request('session/prompt', { sessionId: stepped, prompt: [{ type: 'text', text: 'write stepped.md' }] });
  assert.deepEqual(answer, { stopReason: 'max_turn_requests' });
  assert.equal(readFileSync(join(workspace, 'stepped.md'), 'utf8'), 'written by the model\n');
  await limited.stop();
});

test('a permission open when the agent is killed is asked again after a restart and a load', async () => {
  const { sessionId: killed } = await agent.request('session/new', { cwd: workspace, mcpServers: [] });
  const asked = agent.nextPermission();
  agent.onPermission = () => new Promise(() => {});
  const prompting = agent.request('session/prompt', { sessionId: killed, prompt: [{ type: 'text', text: 'write kill.md' }] });
  prompting.catch(() => {});
  const first = await asked;
  agent.child.kill('SIGKILL');
  await agent.exited;
  agent.connection.close();
  retired.push(agent);
  agent = new Agent(env, db);
  await agent.request('initialize', { protocolVersion: 1 });
  const askedAgain = agent.nextPermission();
  agent.onPermission = async () => ({ outcome: { outcome: 'selected', optionId: 'allow' } });
  await agent.request('session/load', { sessionId: killed, cwd: workspace, mcpServers: [] });
  const again = await askedAgain;
  assert.equal(again.toolCall.toolCallId, first.toolCall.toolCallId);
  assert.equal(again.sessionId, killed);
  await agent.update((u) => u.sessionId === killed && u.update.sessionUpdate === 'tool_call_update' && u.update.status === 'completed');
  await agent.update((u) => u.sessionId === killed && u.update.sessionUpdate === 'agent_message_chunk' && u.update.content.text.startsWith('Done'));
  assert.equal(readFileSync(join(workspace, 'kill.md'), 'utf8'), 'written by the model\n');
});

/** `session/budget` of a session, asked of `sidechat serve` on the same database. */
async function nativeBudget(id) {
  const child = spawn(bin, ['serve', '--db', db], { env, stdio: ['pipe', 'pipe', 'ignore'] });
  child.stdout.setEncoding('utf8');
  let buffered = '';
  const answered = new Promise((resolve, reject) => {
    child.stdout.on('data', (data) => {
      buffered += data;
      for (const line of buffered.split('\n').slice(0, -1)) {
        const message = JSON.parse(line);
        if (message.id === 2) resolve(message);
      }
      buffered = buffered.slice(buffered.lastIndexOf('\n') + 1);
    });
    child.on('exit', () => reject(new Error('sidechat serve exited before answering')));
  });
  const write = (message) => child.stdin.write(`${JSON.stringify({ jsonrpc: '2.0', ...message })}\n`);
  write({ id: 1, method: 'initialize', params: { protocolVersion: 1 } });
  write({ method: 'initialized', params: {} });
  write({ id: 2, method: 'session/budget', params: { sessionId: id } });
  const answer = await answered;
  child.stdin.end();
  assert.ok(answer.result, JSON.stringify(answer));
  return answer.result.snapshot;
}

test('usage_update reports what the next request holds, as session/budget does, growing with the conversation', async () => {
  const { sessionId: growing } = await agent.request('session/new', { cwd: workspace, mcpServers: [] });
  for (const said of ['hello', 'tell me more', 'and more again']) {
    assert.deepEqual(await agent.request('session/prompt', { sessionId: growing, prompt: [{ type: 'text', text: said }] }), { stopReason: 'end_turn' });
  }
  const used = agent.of(growing).filter((u) => u.sessionUpdate === 'usage_update').map((u) => u.used);
  assert.ok(used.length >= 6, JSON.stringify(used));
  // Never down (nothing was compacted), not up and down between two measures.
  assert.deepEqual(used, [...used].sort((a, b) => a - b), JSON.stringify(used));
  // The last one, sent before the last prompt answered, is the figure of the next request.
  const budget = await nativeBudget(growing);
  assert.equal(used.at(-1), budget.inputTokens, JSON.stringify({ used, budget }));
  assert.ok(used.at(-1) > used[0], JSON.stringify(used));
});

test('every message the agents wrote is valid ACP', () => {
  const agents = [...retired, agent];
  assert.ok(agents.every((a) => a.messages.length > 10));
  assert.deepEqual([...agents, ...others].flatMap((a) => a.invalid), []);
});
