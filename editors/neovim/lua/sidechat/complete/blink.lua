--- The blink.cmp source of the prompt (the provider `sidechat`, module `sidechat.complete.blink`,
--- added by `sidechat.complete` when blink.cmp is installed): `@` workspace paths and `/`
--- commands. blink.cmp's own keyword stops at `@`, `/` and `.`, so each item carries the text
--- edit that replaces the whole `@src/li` or `/rev`, in byte columns (blink.cmp reads the
--- positions of its sources' items as UTF-8).
local complete = require("sidechat.complete")

---@class sidechat.BlinkSource
local Source = {}
Source.__index = Source

---@return sidechat.BlinkSource
function Source.new()
  return setmetatable({}, Source)
end

--- Only in the chat's prompt.
---@return boolean
function Source:enabled()
  return complete.is_prompt(vim.api.nvim_get_current_buf())
end

---@return string[]
function Source:get_trigger_characters()
  return { "@", "/" }
end

--- `ctx` is blink.cmp's: the current line and the cursor as `{row (1-based), byte column
--- (0-based)}`. File lists are incomplete both ways: each character typed or erased asks the
--- daemon's fuzzy match again. Returns the function that cancels the request's answer.
---@param ctx { line: string, cursor: integer[]? }
---@param callback fun(response: { items: lsp.CompletionItem[], is_incomplete_forward: boolean, is_incomplete_backward: boolean })
---@return fun()
function Source:get_completions(ctx, callback)
  local cursor = ctx.cursor or vim.api.nvim_win_get_cursor(0)
  local row, col = cursor[1], cursor[2]
  local c = complete.context(ctx.line:sub(1, col), row == 1)
  local cancelled = false
  if not c then
    callback({ items = {}, is_incomplete_forward = false, is_incomplete_backward = false })
    return function() end
  end
  complete.fetch(c, function(candidates)
    if cancelled then
      return
    end
    local range = { line = row - 1, start = c.start, finish = col }
    callback({
      items = complete.lsp_items(candidates, { filter_with_prefix = false, range = range }),
      is_incomplete_forward = c.kind == "file",
      is_incomplete_backward = c.kind == "file",
    })
  end)
  return function()
    cancelled = true
  end
end

return Source
