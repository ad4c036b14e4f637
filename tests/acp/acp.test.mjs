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
const type = (name) => ajv.getSchema(`acp#/$defs/${name}`);
const sentTypes = {
  'session/update': type('SessionNotification'),
  'session/request_permission': type('RequestPermissionRequest'),
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
  const outer = check(envelope, message, 'envelope');
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
const GUARD_MS = 120_000;
const guard = setTimeout(() => {
  console.error('acp test: gave up after', GUARD_MS, 'ms');
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
  constructor(env, db) {
    this.child = spawn(bin, ['acp', '--db', db], { env, stdio: ['pipe', 'pipe', 'pipe'] });
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
    /** Answers `session/request_permission`; tests replace it. */
    this.onPermission = () => new Promise(() => {});
    this.permissions = [];

    // The client's requests, by id, so each answer is checked against its method's result.
    const asked = new Map();
    const fromAgent = lines((message) => {
      this.messages.push(message);
      const why = refusal(message, asked);
      if (why) this.invalid.push({ message, ...why });
    });
    const fromClient = lines((message) => {
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
      .onRequest('session/request_permission', ({ params }) => {
        this.permissions.push(params);
        this.events.emit('permission', params);
        return this.onPermission(params);
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

  /** Resolves with the next permission request. */
  nextPermission() {
    return new Promise((resolve) => this.events.once('permission', resolve));
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
  assert.deepEqual(init.agentCapabilities.promptCapabilities, { image: false, audio: false, embeddedContext: true });
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
  }]);
  const commands = await agent.update((u) => u.sessionId === sessionId && u.update.sessionUpdate === 'available_commands_update', from);
  assert.deepEqual(commands.update.availableCommands.map((c) => c.name), ['cost', 'model', 'system', 'clear', 'help']);
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

test('every message the agent wrote is valid ACP', () => {
  assert.ok(agent.messages.length > 10);
  assert.deepEqual(agent.invalid, []);
});
