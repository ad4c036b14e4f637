--- A session's reasoning effort as `:SidechatEffort` offers it: the levels the session's model
--- takes, found the way the daemon finds them (its model table, generated into
--- `sidechat.reasoning`, by the longest prefix of the model's name, and only through a provider
--- that sends it: thinking budgets through Anthropic, `reasoning_effort` through OpenAI), since
--- the wire does not say which levels a model takes. Pure: no requests, no buffers.
local M = {}

---@alias sidechat.Effort "minimal"|"low"|"medium"|"high"

--- Every level, lowest first.
---@type sidechat.Effort[]
M.ALL = { "minimal", "low", "medium", "high" }

--- The levels a model that takes none is offered: the daemon keeps the setting (for a later
--- model that takes one) and tells the session once that it is not sent.
---@type sidechat.Effort[]
M.UNUSED = { "low", "medium", "high" }

--- The spellings of a model's name a family prefix is matched against, as the daemon tries
--- them: the whole name, after its last `/`, from `claude-` on, and without a fine-tune's `ft:`.
---@param model string
---@return string[]
function M.candidates(model)
  local full = vim.trim(model):lower()
  local out = { full }
  local function add(name)
    if name ~= "" and not vim.tbl_contains(out, name) then
      table.insert(out, name)
    end
  end
  local last = full:match(".*/(.*)$")
  if last then
    add(last)
  end
  local at = full:find("claude-", 1, true)
  if at and at > 1 then
    add(full:sub(at))
  end
  for _, name in ipairs(vim.list_slice(out)) do
    if vim.startswith(name, "ft:") then
      add(name:sub(4))
    end
  end
  return out
end

--- How `model` takes an effort, by the longest family prefix any spelling starts with; nil
--- for a family that takes none and for a model the table does not know.
---@param model string
---@param table_ table<string, sidechat.ReasoningStyle|false>? the model table (default: the daemon's)
---@return sidechat.ReasoningStyle?
function M.style(model, table_)
  local families = table_ or require("sidechat.reasoning")
  local best, style = "", nil
  for _, name in ipairs(M.candidates(model)) do
    for prefix, s in pairs(families) do
      if #prefix > #best and vim.startswith(name, prefix) then
        best, style = prefix, s
      end
    end
  end
  return style or nil
end

--- Whether a model of `style` served by an account of `kind` is sent an effort at all.
---@param style sidechat.ReasoningStyle?
---@param kind string? the account's `kind` from `initialize` ("anthropic", "openai", "demo"…)
---@return boolean
function M.sent(style, kind)
  return (style == "thinking" and kind == "anthropic")
    or ((style == "effort" or style == "effortMinimal") and kind == "openai")
end

--- The levels `model` takes through an account of `kind`, lowest first; nil when it takes
--- none there.
---@param model string
---@param kind string?
---@return sidechat.Effort[]?
function M.levels(model, kind)
  local style = M.style(model)
  if not M.sent(style, kind) then
    return nil
  end
  if style == "effort" then
    return { "low", "medium", "high" }
  end
  return vim.list_slice(M.ALL)
end

return M
