--- The nvim-cmp source of the prompt (registered as `sidechat` by `sidechat.complete` when
--- nvim-cmp is installed): `@` workspace paths and `/` commands. nvim-cmp replaces what its
--- keyword pattern matched before the cursor, so the pattern takes the whole `@src/li` or
--- `/rev`, and the items need no text edit.
local complete = require("sidechat.complete")

---@class sidechat.CmpSource
local Source = {}
Source.__index = Source

---@return sidechat.CmpSource
function Source.new()
  return setmetatable({}, Source)
end

function Source:get_debug_name()
  return "sidechat"
end

--- Only in the chat's prompt.
---@return boolean
function Source:is_available()
  return complete.is_prompt(vim.api.nvim_get_current_buf())
end

---@return string[]
function Source:get_trigger_characters()
  return { "@", "/" }
end

---@return string
function Source:get_keyword_pattern()
  return complete.KEYWORD_PATTERN
end

--- `params.context` is nvim-cmp's: the line before the cursor and the cursor's 1-based row.
--- File lists are incomplete: each character typed asks the daemon's fuzzy match again.
---@param params { context: { cursor_before_line: string, cursor: { row: integer } } }
---@param callback fun(response: { items: lsp.CompletionItem[], isIncomplete: boolean })
function Source:complete(params, callback)
  local ctx = complete.context(params.context.cursor_before_line, params.context.cursor.row == 1)
  if not ctx then
    return callback({ items = {}, isIncomplete = false })
  end
  complete.fetch(ctx, function(candidates)
    callback({
      items = complete.lsp_items(candidates, { filter_with_prefix = true }),
      isIncomplete = ctx.kind == "file",
    })
  end)
end

return Source
