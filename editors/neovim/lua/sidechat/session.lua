--- One session as the plugin knows it: the committed transcript, the message being streamed,
--- tool-call states, pending approvals and waiting messages. Events are applied in `seq` order;
--- a gap, an attach or a daemon restart refetches `session/transcript` after the last committed
--- entry. Pure state: no buffers, no windows; listeners are told when something changed.
local protocol = require("sidechat.protocol")

local M = {}

--- Entries per `session/transcript` page: a long session opens at its newest page.
M.page_size = 500
--- A `beforeSeq` past every seq (the newest page); it encodes to JSON as an integer.
M.PAST_EVERY_SEQ = 1000000000000

--- A transcript entry as `session/transcript` returns it.
---@class sidechat.Entry
---@field id string
---@field seq integer
---@field role "user"|"assistant"|"tool"|"note"|"notice"|"summary"
---@field blocks table[] its blocks (`type` = "text", "thinking", "toolCall", "toolResult"…)
---@field status string?
---@field rewound boolean? taken back by `session/rewind`: shown folded, never sent to a model

--- A message being streamed.
---@class sidechat.LiveMessage
---@field id string
---@field role string
---@field text string
---@field thinking string
---@field partial boolean true until its `messageStarted` arrived

--- One session as the plugin knows it.
---@class sidechat.Session
---@field client sidechat.Client
---@field id string
---@field info sidechat.SessionInfo? the `session/get` result (title, model, account, spend, changed files…)
---@field entries sidechat.Entry[] committed entries, by seq
---@field index table<string, integer?> entry id -> position in `entries`
---@field committed_seq integer highest seq of a committed entry held
---@field older_before integer? older entries remain before this seq
---@field loading_older boolean
---@field event_seq integer seq of the last event applied
---@field live sidechat.LiveMessage[] messages being streamed, in start order
---@field tools table<string, { status: string, output: string? }?> tool states from events
---@field results table<string, table?> call id -> its committed toolResult block
---@field render_cache table<string, table> entry id -> its rendered lines
---@field approvals table[] pending approvals, oldest first
---@field delegated table[] approvals the session's sub-agents wait for
---@field delegations table<string, table> delegate call id -> its sub-agent as seen
---@field calls table<string, table> call id -> its committed toolCall block
---@field waiting { pendingId: string, text: string }[] messages not yet delivered
---@field state "idle"|"running"|"awaitingApproval"|"unanswered"
---@field budget table? the latest budget snapshot
---@field compactions table<string, table> summary entry id -> its `compaction` event
---@field notices { level: string, message: string }[]
---@field fetching boolean
---@field buffered table[] events that arrived while fetching
---@field loaded boolean
---@field last_finish { reason: string, error: string? }?
---@field listeners fun(session: sidechat.Session, what: string)[]
---@field plan table? the model's latest plan from a `plan` event (else `info.plan`)
---@field fetch_waiters fun(err: sidechat.RpcError?)[] callbacks of a refetch under way
---@field render_prefix table? the rendered lines of the entries that can no longer change
local Session = {}
Session.__index = Session

---@param client sidechat.Client
---@param id string
---@return sidechat.Session
function M.new(client, id)
  return setmetatable({
    client = client,
    id = id,
    info = nil, -- the `session/get` result
    entries = {}, -- committed transcript entries, by seq
    index = {}, -- entry id -> position in `entries`
    committed_seq = 0, -- highest seq of a committed entry we hold
    older_before = nil, -- older entries than we hold remain before this seq (see Session:load_older)
    loading_older = false,
    event_seq = 0, -- seq of the last event applied
    live = {}, -- messages being streamed, in start order: { id, role, text, thinking, partial }
    tools = {}, -- call id -> { status, output } from events
    results = {}, -- call id -> the committed toolResult block
    render_cache = {}, -- entry id -> its rendered lines (see render.entry)
    approvals = {}, -- pending approvals, oldest first
    delegated = {}, -- approvals the session's sub-agents wait for (`delegatedApprovals`), oldest first
    delegations = {}, -- delegate call id -> its sub-agent as seen (see Session:delegation)
    calls = {}, -- call id -> its committed toolCall block
    waiting = {}, -- interjections not yet delivered: { pendingId, text }
    state = "idle",
    budget = nil, -- the latest budget snapshot
    plan = nil, -- the model's latest plan from a `plan` event (else `info.plan`)
    compactions = {}, -- summary entry id -> its `compaction` event (reason, tokens), seen live
    notices = {}, -- { level, message } of a daemon that does not store its notices
    fetching = false,
    buffered = {}, -- events that arrived while fetching
    loaded = false,
    listeners = {},
  }, Session)
end

--- Calls `fn(session, what)` after each change.
---@param fn fun(session: sidechat.Session, what: string)
function Session:on_change(fn)
  table.insert(self.listeners, fn)
end

---@param what string the event kind or reason that changed it
function Session:changed(what)
  for _, fn in ipairs(self.listeners) do
    fn(self, what)
  end
end

local function remove_where(list, pred)
  for i = #list, 1, -1 do
    if pred(list[i]) then
      table.remove(list, i)
    end
  end
end

---@param id string
---@param role string?
---@return sidechat.LiveMessage
function Session:live_message(id, role)
  for _, m in ipairs(self.live) do
    if m.id == id then
      return m
    end
  end
  local m = { id = id, role = role or "assistant", text = "", thinking = "", partial = role == nil }
  table.insert(self.live, m)
  return m
end

---@param entry sidechat.Entry
function Session:add_entry(entry)
  local at = self.index[entry.id]
  if at then
    self.entries[at] = entry
  else
    table.insert(self.entries, entry)
    local previous = self.entries[#self.entries - 1]
    if previous and previous.seq > entry.seq then
      table.sort(self.entries, function(a, b)
        return a.seq < b.seq
      end)
      self.index = {}
      for i, e in ipairs(self.entries) do
        self.index[e.id] = i
      end
    else
      self.index[entry.id] = #self.entries
    end
  end
  remove_where(self.live, function(m)
    return m.id == entry.id
  end)
  self:index_tool_blocks(entry)
  if entry.seq > self.committed_seq then
    self.committed_seq = entry.seq
  end
end

--- What the session looks like after one event.
---@param params table `session/event` params
---@return string kind the event's kind
function Session:apply(params)
  local ev = params.event
  local kind = ev.kind
  if kind == protocol.event.messageCompleted then
    self:add_entry(ev.entry)
  elseif kind == protocol.event.runStarted then
    self.state = "running"
  elseif kind == protocol.event.messageStarted then
    self:live_message(ev.messageId, ev.role)
  elseif kind == protocol.event.textDelta then
    local m = self:live_message(ev.messageId)
    m.text = m.text .. ev.text
  elseif kind == protocol.event.thinkingDelta then
    local m = self:live_message(ev.messageId)
    m.thinking = m.thinking .. ev.text
  elseif kind == protocol.event.toolCallStarted then
    self.tools[ev.callId] = { status = "pending" }
  elseif kind == protocol.event.toolCallUpdated then
    local t = self.tools[ev.callId] or { status = ev.status }
    t.status = ev.status
    t.output = ev.output or t.output
    self.tools[ev.callId] = t
  elseif kind == protocol.event.approvalRequested then
    remove_where(self.approvals, function(a)
      return a.approvalId == ev.approval.approvalId
    end)
    table.insert(self.approvals, ev.approval)
    self.state = "awaitingApproval"
  elseif kind == protocol.event.approvalResolved then
    remove_where(self.approvals, function(a)
      return a.approvalId == ev.approvalId
    end)
    self:leave_awaiting()
  elseif kind == protocol.event.interjectionQueued then
    remove_where(self.waiting, function(w)
      return w.pendingId == ev.pendingId
    end)
    table.insert(self.waiting, { pendingId = ev.pendingId, text = ev.text })
  elseif kind == protocol.event.interjectionDelivered or kind == protocol.event.interjectionPromoted or kind == protocol.event.interjectionCancelled then
    local gone = {}
    for _, id in ipairs(ev.pendingIds or { ev.pendingId }) do
      gone[id] = true
    end
    remove_where(self.waiting, function(w)
      return gone[w.pendingId]
    end)
  elseif kind == protocol.event.notice then
    if ev.messageId then
      -- Stored as a transcript entry under this event's seq, as session/transcript returns it.
      self:add_entry({
        id = ev.messageId,
        seq = params.seq,
        role = "notice",
        status = "complete",
        runId = params.runId,
        blocks = { { type = "notice", level = ev.level, text = ev.message } },
      })
    else
      table.insert(self.notices, { level = ev.level, message = ev.message })
    end
  elseif kind == protocol.event.compaction then
    self.compactions[ev.messageId] = { reason = ev.reason, tokensBefore = ev.tokensBefore, tokensAfter = ev.tokensAfter }
    -- Its summary entry is drawn already (committed first): draw it again with these details.
    self.render_cache[ev.messageId] = nil
    self.render_prefix = nil
  elseif kind == protocol.event.noteDeleted then
    -- The note's entry stays, emptied, as session/transcript returns it from now on; a new
    -- table, so that its cached lines are drawn again.
    local at = self.index[ev.messageId]
    local entry = at and self.entries[at]
    if entry then
      local blocks = {}
      for i, block in ipairs(entry.blocks) do
        blocks[i] = block.type == "summary" and vim.tbl_extend("force", block, { text = "" }) or block
      end
      self:add_entry(vim.tbl_extend("force", entry, { blocks = blocks }) --[[@as sidechat.Entry]])
    end
  elseif kind == protocol.event.budget then
    self.budget = ev.snapshot
  elseif kind == protocol.event.runFinished then
    self.state = self:unanswered_after(ev.reason) and "unanswered" or "idle"
    self.live = {}
    self.approvals = {}
    -- The run's sub-agents ended with it.
    self.delegated = {}
    self.last_finish = { reason = ev.reason, error = ev.error }
  elseif kind == protocol.event.delegation then
    self:delegated_event(ev)
  elseif kind == protocol.event.sessionUpdated then
    -- The daemon titled the session, or a client changed its settings: the event carries
    -- the whole session.
    self.info = ev.session or vim.tbl_extend("force", self.info or {}, { title = ev.title }) --[[@as sidechat.SessionInfo]]
  elseif kind == protocol.event.plan then
    self.plan = ev.plan
  elseif kind == protocol.event.rewound then
    self:mark_rewound(ev)
  end
  return kind
end

--- After `session/rewind`: the entries from the message on are now rewound (unless only files
--- were restored), as `session/transcript` returns them from now on; new tables, so that their
--- cached lines are drawn again (folded).
---@param ev table the `rewound` event
function Session:mark_rewound(ev)
  if ev.restore == "files" then
    return
  end
  local at = self.index[ev.messageId]
  -- A message on an older page not loaded yet precedes every entry loaded.
  local anchor = at and self.entries[at]
  local from = anchor and anchor.seq or (self.older_before and 0)
  if not from then
    return
  end
  for i, entry in ipairs(self.entries) do
    if entry.seq >= from and not entry.rewound then
      self.entries[i] = vim.tbl_extend("force", entry, { rewound = true }) --[[@as sidechat.Entry]]
    end
  end
  self.render_prefix = nil
end

--- Back to running once no approval, its own or a sub-agent's, is left to answer.
function Session:leave_awaiting()
  if #self.approvals == 0 and #self.delegated == 0 and self.state == "awaitingApproval" then
    self.state = "running"
  end
end

--- The words of a message: its text blocks.
local function text_of(blocks)
  local parts = {}
  for _, block in ipairs(blocks) do
    if block.type == "text" and block.text ~= "" then
      table.insert(parts, block.text)
    end
  end
  return table.concat(parts, "\n\n")
end

--- A `delegate` call's task, from its committed input.
function Session:task_of(call_id)
  local call = self.calls[call_id]
  local input = call and call.input
  return type(input) == "table" and type(input.task) == "string" and input.task or ""
end

--- The sub-agent working for the `delegate` call `call_id`, made on first sight:
--- `{ childSessionId, childSeq, state, step = { callId, summary, status }?, text }`, where
--- `state` is "running", "awaitingApproval" or the child run's finish reason, `step` its latest
--- tool call and `text` the words of its latest message.
function Session:delegation(call_id, child_id)
  local d = self.delegations[call_id]
  if not d then
    d = { childSessionId = child_id, childSeq = 0, state = "running", text = "" }
    self.delegations[call_id] = d
  end
  return d
end

--- One event of a sub-agent, forwarded to this session as a `delegation` event.
function Session:delegated_event(ev)
  local d = self:delegation(ev.callId, ev.childSessionId)
  if ev.childSeq <= d.childSeq then
    return
  end
  d.childSeq = ev.childSeq
  local inner = ev.event
  local kind = inner.kind
  if kind == protocol.event.runStarted then
    d.state = "running"
  elseif kind == protocol.event.messageStarted and inner.role == "assistant" then
    d.text = ""
  elseif kind == protocol.event.textDelta then
    d.text = d.text .. inner.text
  elseif kind == protocol.event.messageCompleted and inner.entry.role == "assistant" then
    local text = text_of(inner.entry.blocks)
    if text ~= "" then
      d.text = text
    end
  elseif kind == protocol.event.toolCallStarted then
    d.step = { callId = inner.callId, summary = inner.summary, status = "pending" }
  elseif kind == protocol.event.toolCallUpdated then
    if d.step and d.step.callId == inner.callId then
      d.step.status = inner.status
    end
  elseif kind == protocol.event.approvalRequested then
    local a = inner.approval
    remove_where(self.delegated, function(x)
      return x.approval.approvalId == a.approvalId
    end)
    table.insert(self.delegated, {
      childSessionId = ev.childSessionId,
      callId = ev.callId,
      task = self:task_of(ev.callId),
      approval = a,
    })
    d.state = "awaitingApproval"
    d.step = { callId = a.callId, summary = a.summary, status = "awaitingApproval" }
    self.state = "awaitingApproval"
  elseif kind == protocol.event.approvalResolved then
    remove_where(self.delegated, function(x)
      return x.approval.approvalId == inner.approvalId
    end)
    if d.state == "awaitingApproval" then
      d.state = "running"
    end
    self:leave_awaiting()
  elseif kind == protocol.event.runFinished then
    d.state = inner.reason
  end
end

--- Whether a run that ended for `reason` failed before the model said anything (the provider
--- refused the request): its answer is empty and the turn has none, as the daemon's
--- `unanswered` says. (A user message last is not enough: input promoted at a run's end is
--- committed before that run's `runFinished`, and the next run answers it.)
---@param reason string
---@return boolean
function Session:unanswered_after(reason)
  if reason ~= "error" then
    return false
  end
  for i = #self.entries, 1, -1 do
    local e = self.entries[i]
    if not e.rewound and (e.role == "user" or e.role == "tool") then
      return false
    elseif not e.rewound and e.role == "assistant" then
      return e.status == "failed" and #(e.blocks or {}) == 0
    end
  end
  return false
end

--- Fills a `delegate` call's sub-agent from the child session's own transcript (after an
--- attach or a restart, when the events that told it live are gone).
function Session:apply_child_transcript(call_id, child)
  local d = self:delegation(call_id, child.sessionId)
  if d.childSeq >= child.lastSeq then
    return
  end
  d.childSeq = child.lastSeq
  local results = {}
  ---@type table? the child's latest tool call
  local last = nil
  for _, entry in ipairs(child.entries) do
    for _, block in ipairs(entry.blocks) do
      if block.type == "toolCall" then
        last = block
      elseif block.type == "toolResult" then
        results[block.callId] = block.status
      end
    end
    if entry.role == "assistant" then
      local text = text_of(entry.blocks)
      if text ~= "" then
        d.text = text
      end
    end
  end
  if last then
    -- An approval carries the daemon's own words for the call.
    local waiting
    for _, a in ipairs(child.pendingApprovals) do
      if a.callId == last.id then
        waiting = a
      end
    end
    d.step = {
      callId = last.id,
      summary = waiting and waiting.summary or require("sidechat.render").summary(last.name, last.input),
      status = results[last.id] or (waiting and "awaitingApproval" or "running"),
    }
  end
  if child.state == "awaitingApproval" or child.state == "running" then
    d.state = child.state
  end
end

--- The `delegate` calls of the transcript without a result yet.
function Session:unfinished_delegations()
  local open = {}
  for id, call in pairs(self.calls) do
    if call.name == "delegate" and not self.results[id] then
      open[id] = true
    end
  end
  return open
end

--- Reads where each unfinished `delegate` call's sub-agent stands from its child session
--- (`children` of `session/get`), then `done()`; what cannot be read is left as it is.
function Session:load_children(done)
  local open = self:unfinished_delegations()
  local children = vim.deepcopy((self.info and self.info.children) or {})
  local function next_child()
    local child_id = table.remove(children, 1)
    if not child_id or next(open) == nil then
      return done()
    end
    self.client:request(protocol.method.sessionGet, { sessionId = child_id }, function(err, child)
      local call_id = not err and child.parentCallId
      if not call_id or call_id == vim.NIL or not open[call_id] then
        return next_child()
      end
      open[call_id] = nil
      self.client:request(protocol.method.sessionTranscript, { sessionId = child_id }, function(e, transcript)
        if not e then
          self:apply_child_transcript(call_id, transcript)
        end
        next_child()
      end)
    end)
  end
  next_child()
end

--- Every approval waiting for the user in this session: its own, then its sub-agents' (each
--- with `asked_by`, the task of the sub-agent that asks).
---@return table[]
function Session:pending_approvals()
  local all = vim.list_extend({}, self.approvals)
  for _, d in ipairs(self.delegated) do
    table.insert(all, vim.tbl_extend("force", d.approval, { asked_by = d.task }))
  end
  return all
end

--- Takes one `session/event` notification of this session.
---@param params table `session/event` params
function Session:event(params)
  if self.fetching or not self.loaded then
    table.insert(self.buffered, params)
    return
  end
  if params.seq <= self.event_seq then
    return
  end
  if params.seq > self.event_seq + 1 then
    -- Missed events: what was committed meanwhile comes from the transcript.
    table.insert(self.buffered, params)
    self:refetch(false)
    return
  end
  self.event_seq = params.seq
  local kind = self:apply(params)
  self:changed(kind)
end

--- Applies the events that arrived while fetching, skipping what the transcript covered.
function Session:drain()
  local buffered = self.buffered
  self.buffered = {}
  table.sort(buffered, function(a, b)
    return a.seq < b.seq
  end)
  for _, params in ipairs(buffered) do
    if params.seq > self.event_seq then
      if params.seq > self.event_seq + 1 then
        -- Deltas are not stored: a message streamed across the gap shows what arrives next.
        for _, m in ipairs(self.live) do
          m.partial = true
        end
      end
      self.event_seq = params.seq
      self:apply(params)
    end
  end
end

--- Reads the transcript after the last committed entry. `reset` (attach, daemon restart)
--- also forgets streamed state, since a restarted daemon numbers its events from the store.
---@param reset boolean
---@param done fun(err: sidechat.RpcError?)?
function Session:refetch(reset, done)
  if self.fetching then
    if done then
      table.insert(self.fetch_waiters, done)
    end
    return
  end
  self.fetching = true
  self.fetch_waiters = done and { done } or {}
  local client = self.client
  local function finish(err)
    self.fetching = false
    if err then
      -- Keep what was buffered for the next attempt (after a restart, a refetch follows).
      self.loaded = self.loaded or false
    else
      self.loaded = true
      self:drain()
    end
    local waiters = self.fetch_waiters
    self.fetch_waiters = {}
    self:changed(err and "error" or "fetched")
    for _, fn in ipairs(waiters) do
      fn(err)
    end
  end
  -- A first load reads the newest page only (older ones come with Session:load_older); a
  -- refetch reads forward from the last committed entry it holds.
  local newest = self.committed_seq == 0
  local function page(after)
    local params = { sessionId = self.id, afterSeq = after }
    if newest then
      params = { sessionId = self.id, beforeSeq = M.PAST_EVERY_SEQ, limit = M.page_size }
    end
    client:request(protocol.method.sessionTranscript, params, function(err, result)
      if err then
        return finish(err)
      end
      for _, entry in ipairs(result.entries) do
        self:add_entry(entry)
      end
      if newest then
        self.older_before = result.hasMore and result.entries[1] and result.entries[1].seq or nil
      elseif result.hasMore and #result.entries > 0 then
        return page(result.entries[#result.entries].seq)
      end
      if reset then
        self.live = {}
        self.tools = {}
        self.delegations = {}
        self.event_seq = result.lastSeq
        self.notices = {}
      else
        self.event_seq = math.max(self.event_seq, result.lastSeq)
      end
      self.state = result.state
      self.approvals = result.pendingApprovals
      self.delegated = result.delegatedApprovals or {}
      for _, x in ipairs(self.delegated) do
        local d = self:delegation(x.callId, x.childSessionId)
        d.state = "awaitingApproval"
        d.step = { callId = x.approval.callId, summary = x.approval.summary, status = "awaitingApproval" }
      end
      self.waiting = {}
      for _, w in ipairs(result.pendingInterjections) do
        table.insert(self.waiting, { pendingId = w.pendingId, text = w.text })
      end
      self:load_children(function()
        finish(nil)
      end)
    end)
  end
  client:request(protocol.method.sessionGet, { sessionId = self.id }, function(err, info)
    if err then
      return finish(err)
    end
    self.info = info
    page(self.committed_seq)
  end)
end

--- Keeps an entry's tool calls and results by id, where approvals and outputs find them.
---@param entry table
function Session:index_tool_blocks(entry)
  for _, block in ipairs(entry.blocks) do
    if block.type == "toolResult" then
      self.results[block.callId] = block
    elseif block.type == "toolCall" then
      self.calls[block.id] = block
    end
  end
end

--- Reads the page of entries before the oldest one held, when one remains, and puts it first.
---@param done fun(err: sidechat.RpcError?, loaded: boolean)?
function Session:load_older(done)
  local before = self.older_before
  if not before or self.loading_older then
    if done then
      done(nil, false)
    end
    return
  end
  self.loading_older = true
  local params = { sessionId = self.id, beforeSeq = before, limit = M.page_size }
  self.client:request(protocol.method.sessionTranscript, params, function(err, result)
    self.loading_older = false
    if err or self.older_before ~= before then
      if done then
        done(err, false)
      end
      return
    end
    -- Every entry of the page is older than those held: they go first, in order.
    local entries = {}
    for _, entry in ipairs(result.entries) do
      if not self.index[entry.id] then
        table.insert(entries, entry)
        self:index_tool_blocks(entry)
      end
    end
    vim.list_extend(entries, self.entries)
    self.entries = entries
    self.index = {}
    for i, e in ipairs(self.entries) do
      self.index[e.id] = i
    end
    self.older_before = result.hasMore and result.entries[1] and result.entries[1].seq or nil
    self:changed("older")
    if done then
      done(nil, true)
    end
  end)
end

--- Refreshes the session's title, spend and changed files.
---@param done fun(err: sidechat.RpcError?)?
function Session:refresh_info(done)
  self.client:request(protocol.method.sessionGet, { sessionId = self.id }, function(err, info)
    if not err then
      self.info = info
      self:changed("info")
    end
    if done then
      done(err)
    end
  end)
end

--- The status of one tool call: its committed result, else what events said, else whether an
--- approval waits for it.
---@param call_id string
---@return string status, string? output
function Session:tool_status(call_id)
  local result = self.results[call_id]
  if result then
    return result.status, result.output
  end
  for _, a in ipairs(self.approvals) do
    if a.callId == call_id then
      return "awaitingApproval"
    end
  end
  for _, d in ipairs(self.delegated) do
    if d.callId == call_id then
      return "awaitingApproval"
    end
  end
  local t = self.tools[call_id]
  if t then
    return t.status, t.output
  end
  return "pending"
end

return M
