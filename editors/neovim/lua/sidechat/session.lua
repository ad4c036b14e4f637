--- One session as the plugin knows it: the committed transcript, the message being streamed,
--- tool-call states, pending approvals and waiting messages. Events are applied in `seq` order;
--- a gap, an attach or a daemon restart refetches `session/transcript` after the last committed
--- entry. Pure state: no buffers, no windows; listeners are told when something changed.
local M = {}

---@class sidechat.Session
local Session = {}
Session.__index = Session

---@param client sidechat.Client
---@param id string
function M.new(client, id)
  return setmetatable({
    client = client,
    id = id,
    info = nil, -- the `session/get` result
    entries = {}, -- committed transcript entries, by seq
    index = {}, -- entry id -> position in `entries`
    committed_seq = 0, -- highest seq of a committed entry we hold
    event_seq = 0, -- seq of the last event applied
    live = {}, -- messages being streamed, in start order: { id, role, text, thinking, partial }
    tools = {}, -- call id -> { status, output } from events
    results = {}, -- call id -> the committed toolResult block
    render_cache = {}, -- entry id -> its rendered lines (see render.entry)
    approvals = {}, -- pending approvals, oldest first
    waiting = {}, -- interjections not yet delivered: { pendingId, text }
    state = "idle",
    budget = nil, -- the latest budget snapshot
    compactions = {}, -- summary entry id -> its `compaction` event (reason, tokens), seen live
    notices = {}, -- { level, message } of a daemon that does not store its notices
    fetching = false,
    buffered = {}, -- events that arrived while fetching
    loaded = false,
    listeners = {},
  }, Session)
end

function Session:on_change(fn)
  table.insert(self.listeners, fn)
end

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

function Session:add_entry(entry)
  local at = self.index[entry.id]
  if at then
    self.entries[at] = entry
  else
    table.insert(self.entries, entry)
    if #self.entries > 1 and self.entries[#self.entries - 1].seq > entry.seq then
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
  for _, block in ipairs(entry.blocks) do
    if block.type == "toolResult" then
      self.results[block.callId] = block
    end
  end
  if entry.seq > self.committed_seq then
    self.committed_seq = entry.seq
  end
end

--- What the session looks like after one event.
function Session:apply(params)
  local ev = params.event
  local kind = ev.kind
  if kind == "messageCompleted" then
    self:add_entry(ev.entry)
  elseif kind == "runStarted" then
    self.state = "running"
  elseif kind == "messageStarted" then
    self:live_message(ev.messageId, ev.role)
  elseif kind == "textDelta" then
    local m = self:live_message(ev.messageId)
    m.text = m.text .. ev.text
  elseif kind == "thinkingDelta" then
    local m = self:live_message(ev.messageId)
    m.thinking = m.thinking .. ev.text
  elseif kind == "toolCallStarted" then
    self.tools[ev.callId] = { status = "pending" }
  elseif kind == "toolCallUpdated" then
    local t = self.tools[ev.callId] or {}
    t.status = ev.status
    t.output = ev.output or t.output
    self.tools[ev.callId] = t
  elseif kind == "approvalRequested" then
    remove_where(self.approvals, function(a)
      return a.approvalId == ev.approval.approvalId
    end)
    table.insert(self.approvals, ev.approval)
    self.state = "awaitingApproval"
  elseif kind == "approvalResolved" then
    remove_where(self.approvals, function(a)
      return a.approvalId == ev.approvalId
    end)
    if #self.approvals == 0 and self.state == "awaitingApproval" then
      self.state = "running"
    end
  elseif kind == "interjectionQueued" then
    remove_where(self.waiting, function(w)
      return w.pendingId == ev.pendingId
    end)
    table.insert(self.waiting, { pendingId = ev.pendingId, text = ev.text })
  elseif kind == "interjectionDelivered" or kind == "interjectionPromoted" or kind == "interjectionCancelled" then
    local gone = {}
    for _, id in ipairs(ev.pendingIds or { ev.pendingId }) do
      gone[id] = true
    end
    remove_where(self.waiting, function(w)
      return gone[w.pendingId]
    end)
  elseif kind == "notice" then
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
  elseif kind == "compaction" then
    self.compactions[ev.messageId] = { reason = ev.reason, tokensBefore = ev.tokensBefore, tokensAfter = ev.tokensAfter }
    -- Its summary entry is drawn already (committed first): draw it again with these details.
    self.render_cache[ev.messageId] = nil
    self.render_prefix = nil
  elseif kind == "noteDeleted" then
    -- The note's entry stays, emptied, as session/transcript returns it from now on; a new
    -- table, so that its cached lines are drawn again.
    local at = self.index[ev.messageId]
    local entry = at and self.entries[at]
    if entry then
      local blocks = {}
      for i, block in ipairs(entry.blocks) do
        blocks[i] = block.type == "summary" and vim.tbl_extend("force", block, { text = "" }) or block
      end
      self:add_entry(vim.tbl_extend("force", entry, { blocks = blocks }))
    end
  elseif kind == "budget" then
    self.budget = ev.snapshot
  elseif kind == "runFinished" then
    self.state = "idle"
    self.live = {}
    self.approvals = {}
    self.last_finish = { reason = ev.reason, error = ev.error }
  end
  return kind
end

--- Takes one `session/event` notification of this session.
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
---@param done fun(err: table?)?
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
  local function page(after)
    client:request("session/transcript", { sessionId = self.id, afterSeq = after }, function(err, result)
      if err then
        return finish(err)
      end
      for _, entry in ipairs(result.entries) do
        self:add_entry(entry)
      end
      if result.hasMore and #result.entries > 0 then
        return page(result.entries[#result.entries].seq)
      end
      if reset then
        self.live = {}
        self.tools = {}
        self.event_seq = result.lastSeq
        self.notices = {}
      else
        self.event_seq = math.max(self.event_seq, result.lastSeq)
      end
      self.state = result.state
      self.approvals = result.pendingApprovals
      self.waiting = {}
      for _, w in ipairs(result.pendingInterjections) do
        table.insert(self.waiting, { pendingId = w.pendingId, text = w.text })
      end
      finish(nil)
    end)
  end
  client:request("session/get", { sessionId = self.id }, function(err, info)
    if err then
      return finish(err)
    end
    self.info = info
    page(self.committed_seq)
  end)
end

--- Refreshes the session's title, spend and changed files.
function Session:refresh_info(done)
  self.client:request("session/get", { sessionId = self.id }, function(err, info)
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
  local t = self.tools[call_id]
  if t then
    return t.status, t.output
  end
  return "pending"
end

return M
