--- The transcript window's winbar: the shown session's title, model, effort and state (idle,
--- working with a spinner, waiting for approval), its context use and cost, and the keys that
--- act now.
--- `M.text` is pure (the same session and frame give the same bar); a timer turns the spinner
--- while the shown session works.
local config = require("sidechat.config")

local M = {}

--- The spinner's frames, one per tick while a run works.
M.SPINNER = { "⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏" }
--- Milliseconds between spinner frames.
M.TICK_MS = 120

---@type integer the spinner frame shown
M.frame = 1

--- Whole-dollar amounts with cents, smaller ones with four decimals.
---@param amount number
---@return string
function M.usd(amount)
  if amount >= 1 then
    return ("$%.2f"):format(amount)
  end
  return ("$%.4f"):format(amount)
end

--- The session's context use, e.g. "ctx 42% low" (≤ when counted by bytes); nil before any
--- budget is known.
---@param session sidechat.Session
---@return string?
function M.context(session)
  local b = session.budget
  if not b then
    return nil
  end
  -- Upper bounds (counted by bytes before the tokenizer was ready) say "at most".
  local at_most = b.estimate == "upperBound" and "≤" or ""
  return ("ctx %s%d%% %s"):format(at_most, math.floor(b.utilisation * 100 + 0.5), b.pressure)
end

--- The session's cost: an amount for priced usage only (unpriced usage is never $0).
---@param session sidechat.Session
---@return string
function M.cost(session)
  local info = session.info or {}
  local unpriced = (info.unpricedRequests or 0) > 0
  if info.costUsd then
    return M.usd(info.costUsd) .. (unpriced and " + unpriced" or "")
  elseif unpriced then
    return "unpriced"
  end
  return "no cost yet"
end

--- A winbar item: `text` in highlight group `group`, with `%` escaped.
local function item(group, text)
  return ("%%#%s#%s%%*"):format(group, (text:gsub("%%", "%%%%")))
end

--- Key hints: "<CR> send", each key in SidechatKey; keys set to false are left out.
local function keys(pairs_)
  local out = {}
  for _, kv in ipairs(pairs_) do
    if kv[1] then
      table.insert(out, item("SidechatKey", kv[1]) .. " " .. item("SidechatHint", kv[2]))
    end
  end
  return table.concat(out, "  ")
end

--- The session's state as the bar says it, with its group.
---@param session sidechat.Session
---@return string text, string group
function M.state_words(session)
  local state = session.state
  if state == "running" then
    return M.SPINNER[M.frame] .. " working", "SidechatWorking"
  elseif state == "awaitingApproval" then
    return "waiting for approval", "SidechatApproval"
  elseif state == "unanswered" then
    return "unanswered", "SidechatUnanswered"
  end
  return "idle", "SidechatIdle"
end

--- The keys that act now, by state.
---@param session sidechat.Session
---@return string
function M.key_hints(session)
  local k = config.options.keys
  local state = session.state
  if state == "awaitingApproval" then
    return keys({ { k.allow, "allow" }, { k.allow_always, "always" }, { k.deny, "deny" }, { k.stop, "stop" } })
  elseif state == "running" then
    return keys({ { k.send, "send" }, { k.stop, "stop" } })
  elseif state == "unanswered" then
    return keys({ { k.resume, "answer" }, { k.send, "send" } })
  end
  return keys({ { k.send, "send" } })
end

--- The winbar of the transcript window for `session` (nil: no session yet).
---@param session sidechat.Session?
---@return string
function M.text(session)
  if not session then
    return item("SidechatTitle", "New chat") .. "  " .. keys({ { config.options.keys.send, "send" } })
  end
  local info = session.info or {}
  local words, group = M.state_words(session)
  local parts = { item("SidechatTitle", info.title or "New chat") }
  if info.model then
    table.insert(parts, item("SidechatModel", info.model))
  end
  if info.effort then
    table.insert(parts, item("SidechatModel", info.effort .. " effort"))
  end
  table.insert(parts, item(group, words))
  local ctx = M.context(session)
  if ctx then
    table.insert(parts, item("SidechatMeter", ctx))
  end
  table.insert(parts, item("SidechatMeter", M.cost(session)))
  return table.concat(parts, " · ") .. "%=" .. M.key_hints(session)
end

local timer = nil

--- Turns the spinner while `working`, calling `redraw` each frame; stops it otherwise.
---@param working boolean
---@param redraw fun()
function M.spin(working, redraw)
  if working and not timer then
    timer = vim.uv.new_timer()
    timer:start(M.TICK_MS, M.TICK_MS, vim.schedule_wrap(function()
      M.frame = M.frame % #M.SPINNER + 1
      redraw()
    end))
  elseif not working and timer then
    timer:stop()
    timer:close()
    timer = nil
  end
end

return M
