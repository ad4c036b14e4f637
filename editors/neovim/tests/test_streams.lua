-- The recorded event streams of tests/fixtures/streams/ (what the real daemon sends in six
-- scenarios; tests/daemon/streams.rs keeps them current), replayed through the plugin's session
-- model: each must read as its NAME.transcript.txt, as it does for the terminal and VS Code
-- (the form is described in that folder's README).
local H = dofile(vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h") .. "/helpers.lua")
local session_mod = require("sidechat.session")
local render = require("sidechat.render")
local protocol = require("sidechat.protocol")

local streams = vim.fn.fnamemodify(H.plugin, ":h:h") .. "/tests/fixtures/streams"

--- A text on one line: its line breaks written `\n`.
local function one_line(text)
  return (text:gsub("\n", "\\n"))
end

--- The words of a message: its text blocks and, for a user turn, the interjections promoted
--- into it.
local function words(blocks, promoted)
  local parts = {}
  for _, b in ipairs(blocks) do
    if (b.type == "text" or (promoted and b.type == "interjection" and b.promoted)) and b.text ~= "" then
      table.insert(parts, b.text)
    end
  end
  return table.concat(parts, "\n\n")
end

--- The session as the normalised transcript writes it.
local function normalised(s)
  local lines = {}
  local function add(line)
    table.insert(lines, line)
  end
  for _, entry in ipairs(s.entries) do
    for _, b in ipairs(entry.blocks) do
      if b.type == "interjection" and not b.promoted then
        add("user (interjection): " .. one_line(b.text))
      end
    end
    local role = entry.role
    if role == "user" then
      local text = words(entry.blocks, true)
      if text ~= "" then
        add("user: " .. one_line(text))
      end
    elseif role == "assistant" then
      local text = words(entry.blocks, false)
      if text ~= "" then
        local status = entry.status == "complete" and "" or (" (%s)"):format(entry.status)
        add(("assistant%s: %s"):format(status, one_line(text)))
      end
      for _, b in ipairs(entry.blocks) do
        if b.type == "toolCall" then
          local status, output = s:tool_status(b.id)
          local first = output and (" → " .. output:match("^[^\n]*")) or ""
          add(("tool: %s [%s]%s"):format(render.summary(b.name, b.input), status, first))
          local d = s.delegations[b.id]
          if d then
            add(("  sub-agent [%s]: %s"):format(d.state, one_line(d.text)))
          end
        end
      end
    elseif role == "notice" then
      for _, b in ipairs(entry.blocks) do
        if b.type == "notice" then
          add(("notice %s: %s"):format(b.level, one_line(b.text)))
        end
      end
    elseif role == "note" then
      add("note: " .. one_line(words(entry.blocks, false)))
    elseif role == "summary" then
      for _, b in ipairs(entry.blocks) do
        if b.type == "summary" and not (b.method == "carryOver" and b.text == "") then
          local c = s.compactions[entry.id]
          local how = c and (" (%s: %d → %d tokens)"):format(c.reason, c.tokensBefore, c.tokensAfter) or ""
          add(("summary %s of %d messages%s: %s"):format(b.method, b.messages, how, one_line(b.text)))
        end
      end
    end
  end
  for _, m in ipairs(s.live) do
    add("assistant (streaming): " .. one_line(m.text))
  end
  add("state: " .. s.state)
  for _, w in ipairs(s.waiting) do
    add("waiting: " .. one_line(w.text))
  end
  for _, a in ipairs(s:pending_approvals()) do
    add("approval: " .. a.summary)
  end
  return lines
end

--- A client that answers `session/get` and `session/transcript` from `state.transcript`, as the
--- daemon would, so the session loads through its own code.
local function client_of(state)
  return {
    request = function(_, method, params, callback)
      local t = state.transcript
      if method == protocol.method.sessionGet then
        callback(nil, { id = t.sessionId, children = {} })
      elseif method == protocol.method.sessionTranscript then
        local after = vim.tbl_filter(function(e)
          return e.seq > (params.afterSeq or 0)
        end, t.entries)
        callback(nil, vim.tbl_extend("force", t, { entries = after, hasMore = false }))
      else
        error("unexpected request " .. method)
      end
    end,
  }
end

--- Replays a stream as the plugin does: loaded first (an empty session), events in order, and
--- a transcript line as the refetch after a daemon restart.
local function replay(name)
  local state = {}
  local s
  for _, line in ipairs(vim.fn.readfile(("%s/%s.jsonl"):format(streams, name))) do
    local value = vim.json.decode(line, { luanil = { object = true } })
    if not s then
      local id = value.transcript and value.transcript.sessionId or value.sessionId
      state.transcript = {
        sessionId = id,
        state = "idle",
        entries = {},
        hasMore = false,
        lastSeq = 0,
        pendingApprovals = {},
        pendingInterjections = {},
      }
      s = session_mod.new(client_of(state), id)
      s:refetch(true)
    end
    if value.transcript then
      state.transcript = value.transcript
      s:refetch(true)
    else
      s:event(value)
    end
    H.eq(false, s.fetching, name .. ": fetching after seq " .. tostring(value.seq))
  end
  return s
end

local names = {}
for file in vim.fs.dir(streams) do
  local name = file:match("^(.*)%.jsonl$")
  if name then
    table.insert(names, name)
  end
end
table.sort(names)

local cases = {
  {
    "every recorded stream is here",
    function()
      H.eq({ "approval", "compaction", "crash_recovery", "delegation", "interjection", "tool_run" }, names, "streams")
    end,
  },
}
for _, name in ipairs(names) do
  table.insert(cases, {
    ("the %s stream reads as its transcript"):format(name),
    function()
      local expected = vim.fn.readfile(("%s/%s.transcript.txt"):format(streams, name))
      H.eq(expected, normalised(replay(name)), name)
    end,
  })
end
H.run(cases)
