--- Completion in the prompt: `@` followed by a workspace path (from `workspace/files`, ranked
--- by the daemon's fuzzy match) and `/` at the start of the message followed by a slash command
--- (from `session/commands`, built-in and custom). One place finds what is being completed and
--- asks the daemon; the prompt's 'omnifunc' and 'completefunc', and the nvim-cmp and blink.cmp
--- sources (`sidechat.complete.cmp`, `sidechat.complete.blink`), only shape the answer.
local protocol = require("sidechat.protocol")

local M = {}

--- How many files one `@` completion asks for.
M.FILE_LIMIT = 50
--- How long the 'omnifunc' waits for the daemon before it offers nothing (it answers a
--- `workspace/files` in milliseconds once the list is cached).
M.WAIT_MS = 3000

--- What the cursor is completing.
---@class sidechat.CompletionContext
---@field kind "file"|"command"
---@field start integer 0-based byte column of the `@` or `/` that begins the completed word
---@field query string what was typed after the `@` (or `@"`) or the `/`

--- One thing to offer: a workspace file, or a slash command as `session/commands` lists it.
---@class sidechat.Candidate
---@field kind "file"|"command"
---@field path string? a file's path relative to the workspace root; a custom command's file
---@field name string? a command's name, without the slash
---@field description string?
---@field argumentHint string?
---@field source "builtin"|"project"|"user"|nil

--- Characters that may stand just before a mention's `@` besides white space (as the daemon
--- reads mentions: the `@` of `bob@example.com` begins none).
local OPENERS = "[%s%(%[{\"'`<]"

--- A vim regex matching the word being completed, up to the cursor (nvim-cmp replaces what it
--- matches): `@"a b`, `@src/li`, or `/rev`.
M.KEYWORD_PATTERN = [=[\%(@"[^"]*\|@[^[:blank:]"]*\|/[^[:blank:]]*\)]=]

--- What `before` (the line up to the cursor) is completing: a mention being typed, or a slash
--- command at the start of the message (`first_line`: the cursor is on the prompt's first
--- line, where the daemon reads commands). Nil when neither.
---@param before string
---@param first_line boolean
---@return sidechat.CompletionContext?
function M.context(before, first_line)
  if first_line then
    local name = before:match("^/([^%s/]*)$")
    if name then
      return { kind = "command", start = 0, query = name }
    end
  end
  for _, pattern in ipairs({ '()@"([^"]*)$', '()@([^%s"]*)$' }) do
    local at, query = before:match(pattern)
    if at and (at == 1 or before:sub(at - 1, at - 1):match(OPENERS)) then
      return { kind = "file", start = at - 1, query = query }
    end
  end
  return nil
end

--- How a path is typed as a mention: `@src/lib.rs`, or quoted when it holds white space,
--- `@"notes/a b.md"`.
---@param path string
---@return string
function M.mention(path)
  if path:find("%s") then
    return '@"' .. path .. '"'
  end
  return "@" .. path
end

--- `/name <argument hint>`.
---@param c sidechat.Candidate
---@return string
local function usage(c)
  return "/" .. c.name .. ((c.argumentHint and c.argumentHint ~= "") and (" " .. c.argumentHint) or "")
end

--- The text a candidate puts in the prompt.
---@param c sidechat.Candidate
---@return string
function M.word(c)
  return c.kind == "file" and M.mention(c.path) or ("/" .. c.name)
end

--- The longer description of a command: its usage, what it does, and where a custom one is
--- defined.
---@param c sidechat.Candidate
---@return string
function M.info(c)
  local lines = { usage(c), "", c.description or "" }
  if c.source ~= "builtin" and c.path then
    vim.list_extend(lines, { "", ("%s command: %s"):format(c.source, c.path) })
  end
  return table.concat(lines, "\n")
end

--- The session completion asks about: the one shown in the chat column.
---@return sidechat.Session?
local function session()
  return require("sidechat").current()
end

--- Asks the daemon what `ctx` can become; `done(candidates)` runs once, with none when there is
--- no session yet (the first message creates it) or the daemon refused.
---@param ctx sidechat.CompletionContext
---@param done fun(candidates: sidechat.Candidate[])
function M.fetch(ctx, done)
  local s = session()
  if not s then
    return done({})
  end
  if ctx.kind == "file" then
    local params = { sessionId = s.id, query = ctx.query, limit = M.FILE_LIMIT }
    return s.client:request(protocol.method.workspaceFiles, params, function(err, result)
      local out = {}
      for _, path in ipairs((not err and result and result.files) or {}) do
        table.insert(out, { kind = "file", path = path })
      end
      done(out)
    end)
  end
  s.client:request(protocol.method.sessionCommands, { sessionId = s.id }, function(err, result)
    local out = {}
    local prefix = ctx.query:lower()
    for _, c in ipairs((not err and result and result.commands) or {}) do
      if c.name:lower():sub(1, #prefix) == prefix then
        table.insert(out, {
          kind = "command",
          name = c.name,
          description = c.description,
          argumentHint = c.argumentHint,
          source = c.source,
          path = c.path,
        })
      end
    end
    done(out)
  end)
end

--- Candidates as Vim's complete-items (`:h complete-items`): the description in `menu` and
--- `info`, the command's source or "file" in `kind`.
---@param candidates sidechat.Candidate[]
---@return table[]
function M.vim_items(candidates)
  local items = {}
  for _, c in ipairs(candidates) do
    if c.kind == "file" then
      table.insert(items, { word = M.word(c), abbr = c.path, kind = "file", menu = "", info = "" })
    else
      table.insert(items, {
        word = M.word(c),
        abbr = usage(c),
        kind = c.source,
        menu = c.description or "",
        info = M.info(c),
      })
    end
  end
  return items
end

--- Candidates as LSP completion items, for nvim-cmp and blink.cmp.
---@param candidates sidechat.Candidate[]
---@param opts { filter_with_prefix: boolean, range: { line: integer, start: integer, finish: integer }? }
---   `filter_with_prefix`: filter on `@path` and `/name` (nvim-cmp matches the whole word its
---   keyword pattern found) rather than the bare path or name (blink.cmp matches its own keyword,
---   which stops at `@`, `/` and `.`); `range`: the 0-based line and byte columns to replace
---   (a `textEdit`, in the UTF-8 columns blink.cmp reads for items of its own sources).
---@return lsp.CompletionItem[]
function M.lsp_items(candidates, opts)
  local Kind = vim.lsp.protocol.CompletionItemKind
  local items = {}
  for _, c in ipairs(candidates) do
    local word = M.word(c)
    local item = {
      label = c.kind == "file" and c.path or ("/" .. c.name),
      insertText = word,
      filterText = opts.filter_with_prefix and word or (c.path or c.name),
    }
    if c.kind == "file" then
      item.kind = Kind.File
    else
      item.kind = Kind.Function
      item.detail = c.description
      item.documentation = { kind = "plaintext", value = M.info(c) }
      item.labelDetails = { detail = c.argumentHint and (" " .. c.argumentHint) or nil, description = c.source }
    end
    if opts.range then
      local r = opts.range
      item.textEdit = {
        newText = word,
        range = { start = { line = r.line, character = r.start }, ["end"] = { line = r.line, character = r.finish } },
      }
    end
    table.insert(items, item)
  end
  return items
end

--- What the last findstart call found, for the call that returns the items.
local pending = { first_line = false }

--- 'omnifunc' and 'completefunc' of the prompt (`:h complete-functions`). The first call finds
--- the `@` or `/` before the cursor (-3, nothing to complete, leaves completion quietly); the
--- second asks the daemon and waits for it (at most `WAIT_MS`). File items come with
--- `refresh = "always"`: each character typed asks again, since the daemon's fuzzy match ranks
--- better than a prefix filter.
---@param findstart integer
---@param base string
---@return integer|table
function M.omnifunc(findstart, base)
  if findstart == 1 then
    local row, col = unpack(vim.api.nvim_win_get_cursor(0))
    local before = vim.api.nvim_get_current_line():sub(1, col)
    local ctx = M.context(before, row == 1)
    if not ctx then
      return -3
    end
    pending.first_line = row == 1
    return ctx.start
  end
  local ctx = M.context(base, pending.first_line)
  if not ctx then
    return {}
  end
  local done, found = false, {}
  M.fetch(ctx, function(candidates)
    done, found = true, candidates
  end)
  vim.wait(M.WAIT_MS, function()
    return done
  end, 5)
  return { words = M.vim_items(found), refresh = ctx.kind == "file" and "always" or nil }
end

--- Whether `buf` is the chat's prompt.
---@param buf integer
---@return boolean
function M.is_prompt(buf)
  return buf == require("sidechat.view").state.prompt
end

local registered = { cmp = false, blink = false }

--- Adds the nvim-cmp source, when nvim-cmp is installed, and puts it first among the prompt
--- buffer's sources (the user's other sources kept after it).
---@param buf integer
local function with_cmp(buf)
  local ok, cmp = pcall(require, "cmp")
  if not ok or type(cmp) ~= "table" or not cmp.register_source then
    return
  end
  if not registered.cmp then
    cmp.register_source("sidechat", require("sidechat.complete.cmp").new())
    registered.cmp = true
  end
  local sources = { { name = "sidechat" } }
  local config = cmp.get_config and cmp.get_config() or {}
  for _, s in ipairs(config.sources or {}) do
    if s.name ~= "sidechat" then
      table.insert(sources, s)
    end
  end
  vim.api.nvim_buf_call(buf, function()
    cmp.setup.buffer({ sources = sources })
  end)
end

--- Adds the blink.cmp provider (`sidechat.complete.blink`), when blink.cmp is installed and
--- can take providers at run time (1.x), for markdown buffers: the prompt's filetype. The
--- provider is enabled in the prompt only. A provider named `sidechat` in the user's own
--- configuration is left as it is.
local function with_blink()
  if registered.blink then
    return
  end
  local ok, blink = pcall(require, "blink.cmp")
  if not ok or type(blink) ~= "table" or not blink.add_source_provider then
    return
  end
  registered.blink = true
  pcall(blink.add_source_provider, "sidechat", { name = "sidechat", module = "sidechat.complete.blink" })
  if blink.add_filetype_source then
    blink.add_filetype_source("markdown", "sidechat")
  end
end

--- Sets up completion in the prompt buffer `buf`: its 'omnifunc' and 'completefunc' (`<C-x><C-o>`,
--- `<C-x><C-u>`), and the nvim-cmp and blink.cmp sources when those are installed.
---@param buf integer
function M.attach(buf)
  vim.bo[buf].omnifunc = "v:lua.require'sidechat.complete'.omnifunc"
  vim.bo[buf].completefunc = "v:lua.require'sidechat.complete'.omnifunc"
  with_cmp(buf)
  with_blink()
end

return M
