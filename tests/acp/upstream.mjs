// A local OpenAI-compatible Chat Completions server that streams scripted SSE answers, chosen
// by what the request holds, so the real `sidechat acp` runs real HTTP streams in the tests.
//
// The last message picks the answer: a tool result is acknowledged, an interjection is noted,
// and a user message is answered by the first keyword it contains (see `answer`). Gated answers
// stop after their first chunk until the test opens the gate, so "mid-turn" is a state the test
// controls rather than a race.

import { createServer } from 'node:http';

const MODEL = 'gpt-5-mini';

function chunk(delta, finish = null) {
  return { id: 'chatcmpl-fake', object: 'chat.completion.chunk', model: MODEL, choices: [{ index: 0, delta, finish_reason: finish }] };
}

function usage(prompt, completion) {
  return { id: 'chatcmpl-fake', object: 'chat.completion.chunk', model: MODEL, choices: [], usage: { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion } };
}

function text(content) {
  return (typeof content === 'string' ? content : (content ?? []).map((p) => p.text ?? '').join(''));
}

let calls = 0;
function toolCall(name, args) {
  calls += 1;
  return chunk({ tool_calls: [{ index: 0, id: `call_fake_${calls}`, type: 'function', function: { name, arguments: JSON.stringify(args) } }] });
}

/** The scripted answer: `{ before, gate?, after }` lists of SSE payloads. */
function answer(messages) {
  const last = messages[messages.length - 1];
  const said = text(last.content);
  const done = [usage(120, 8)];
  // The daemon's title request after a session's first answer.
  if (messages[0].role === 'system' && text(messages[0].content).startsWith('You name conversations.')) {
    return { before: [chunk({ content: 'A greeting from upstream' }), chunk({}, 'stop'), usage(60, 5)] };
  }
  if (last.role === 'tool') {
    return { before: [chunk({ role: 'assistant', content: 'Done: ' }), chunk({ content: text(last.content).split('\n')[0] }), chunk({}, 'stop'), ...done] };
  }
  if (said.includes('The user adds:')) {
    return { before: [chunk({ content: `Noted (${said.slice(said.indexOf('The user adds:') + 15)})` }), chunk({}, 'stop'), ...done] };
  }
  if (said.includes('delegate this')) {
    return { before: [toolCall('delegate', { task: 'write sub.md', tools: 'all' }), chunk({}, 'tool_calls'), ...done] };
  }
  if (said.includes('plan this')) {
    const steps = [{ step: 'Read the code', status: 'completed' }, { step: 'Fix it', status: 'in_progress' }, { step: 'Test it', status: 'pending' }];
    return { before: [toolCall('update_plan', { explanation: 'one fix', steps }), chunk({}, 'tool_calls'), ...done] };
  }
  const file = /\bwrite (\S+)/.exec(said);
  if (file) {
    return { before: [chunk({ content: `Writing ${file[1]}.` }), toolCall('write_file', { path: file[1], content: `written by the model\n` }), chunk({}, 'tool_calls'), ...done] };
  }
  if (said.includes('command')) {
    return { before: [toolCall('run_command', { command: 'echo from-the-command', sandbox: false }), chunk({}, 'tool_calls'), ...done] };
  }
  if (said.includes('at length')) {
    return { before: [chunk({ role: 'assistant', content: 'A long answer that' }), chunk({}, 'length'), ...done] };
  }
  if (said.includes('refuse')) {
    // OpenAI streams a refusal in its own field, then says `stop`.
    return { before: [chunk({ role: 'assistant', content: null, refusal: '' }), chunk({ refusal: 'I cannot help with that.' }), chunk({}, 'stop'), ...done] };
  }
  if (said.includes('slow')) {
    return { before: [chunk({ content: 'Starting a long answer' })], gate: 'slow', after: [chunk({ content: ' that was never meant to end.' }), chunk({}, 'stop'), ...done] };
  }
  if (said.includes('queue')) {
    return { before: [chunk({ content: 'Reading first.' })], gate: 'queue', after: [toolCall('read_file', { path: 'README.md' }), chunk({}, 'tool_calls'), ...done] };
  }
  if (said.includes('stream')) {
    return { before: [chunk({ role: 'assistant', reasoning_content: 'Thinking it over.' }), chunk({ content: 'Hello from ' }), chunk({ content: 'the fake upstream.' }), chunk({}, 'stop'), ...done] };
  }
  return { before: [chunk({ content: 'OK.' }), chunk({}, 'stop'), ...done] };
}

/** Starts the server on 127.0.0.1:0. */
export async function startUpstream() {
  const requests = [];
  const gates = new Map();
  const waiting = new Map();
  const arrivals = [];
  const gate = (name) => {
    if (!gates.has(name)) {
      let open;
      const opened = new Promise((resolve) => { open = resolve; });
      gates.set(name, { opened, open });
    }
    return gates.get(name);
  };
  const server = createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c) => { body += c; });
    req.on('end', async () => {
      if (req.method !== 'POST' || !req.url.endsWith('/chat/completions')) {
        res.writeHead(404).end();
        return;
      }
      const request = JSON.parse(body);
      requests.push(request);
      const last = request.messages[request.messages.length - 1];
      if (last.role === 'user' && text(last.content).trimEnd().endsWith('overloaded?')) {
        res.writeHead(500, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: { message: 'the fake upstream is overloaded', type: 'server_error' } }));
        return;
      }
      const script = answer(request.messages);
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      const send = (payload) => res.write(`data: ${JSON.stringify(payload)}\n\n`);
      script.before.forEach(send);
      if (script.gate) {
        const { opened } = gate(script.gate);
        for (const notify of arrivals.splice(0)) notify(script.gate);
        const closed = new Promise((resolve) => res.on('close', resolve));
        const outcome = await Promise.race([opened.then(() => 'open'), closed.then(() => 'closed')]);
        if (outcome === 'closed') return;
        gates.delete(script.gate);
      }
      (script.after ?? []).forEach(send);
      res.end('data: [DONE]\n\n');
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  return {
    url: `http://127.0.0.1:${port}/v1`,
    model: MODEL,
    requests,
    /** Lets the gated answer named `name` go on. */
    open(name) { gate(name).open(); },
    /** Resolves when a gated answer has sent its first part and waits. */
    reachedGate() { return new Promise((resolve) => arrivals.push(resolve)); },
    close() { server.closeAllConnections(); return new Promise((resolve) => server.close(resolve)); },
  };
}
