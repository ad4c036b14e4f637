-- Completion in the prompt against the real daemon: `@` with workspace paths
-- (`workspace/files`), `/` at the start of the message with built-in and custom commands
-- (`session/commands`), through the 'omnifunc' (called, and through <C-x><C-o>) and through the
-- nvim-cmp and blink.cmp sources. Neither plugin can be installed here: stand-ins record how
-- the plugin registers its sources, and each source's complete function is called as the
-- plugin would call it.
local H = dofile(vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h") .. "/helpers.lua")

-- Stand-ins for nvim-cmp and blink.cmp, in place before the prompt buffer exists.
local cmp_calls, blink_calls = {}, {}
package.preload["cmp"] = function()
  local cmp = { setup = {} }
  function cmp.register_source(name, source)
    table.insert(cmp_calls, { "register_source", name })
    cmp.source = source
  end
  function cmp.get_config()
    return { sources = { { name = "nvim_lsp" }, { name = "buffer" } } }
  end
  function cmp.setup.buffer(opts)
    table.insert(cmp_calls, { "setup.buffer", vim.api.nvim_get_current_buf(), opts })
  end
  return cmp
end
package.preload["blink.cmp"] = function()
  return {
    add_source_provider = function(id, opts)
      table.insert(blink_calls, { "add_source_provider", id, opts })
    end,
    add_filetype_source = function(ft, id)
      table.insert(blink_calls, { "add_filetype_source", ft, id })
    end,
  }
end

for _, dir in ipairs({ "src", "notes", ".sidechat/commands" }) do
  vim.fn.mkdir(H.ws .. "/" .. dir, "p")
end
vim.fn.writefile({ "pub fn lib() {}" }, H.ws .. "/src/lib.rs")
vim.fn.writefile({ "fn main() {}" }, H.ws .. "/src/main.rs")
vim.fn.writefile({ "notes" }, H.ws .. "/notes/a b.md")
vim.fn.writefile({ "# readme" }, H.ws .. "/README.md")
vim.fn.writefile({ "---", "description: Hand the work over", "argument-hint: <who>", "---", "Hand over to $1." },
  H.ws .. "/.sidechat/commands/handoff.md")

H.setup()
-- The mode and completion messages would go to the output.
vim.o.showmode = false
vim.opt.shortmess:append("c")
local sidechat = require("sidechat")
local view = require("sidechat.view")
local complete = require("sidechat.complete")

local HANDOFF = H.ws .. "/.sidechat/commands/handoff.md"

--- Puts `line` as the prompt's line `lnum` (1 unless given), the cursor at its end.
local function at_end_of(line, lnum)
  lnum = lnum or 1
  local win = H.focus(view.state.prompt)
  local lines = lnum == 1 and { line } or { "first line", line }
  vim.api.nvim_buf_set_lines(view.state.prompt, 0, -1, false, lines)
  vim.api.nvim_win_set_cursor(win, { lnum, #line })
end

--- The omnifunc's two calls as Vim makes them: where the word starts, then the items for it.
local function omni(line, lnum)
  at_end_of(line, lnum)
  local start = complete.omnifunc(1, "")
  if start < 0 then
    return start
  end
  return { start = start, result = complete.omnifunc(0, line:sub(start + 1)) }
end

H.run({
  {
    "the prompt's omnifunc and completefunc are set, and the sources registered",
    function()
      vim.cmd("Sidechat")
      local created = false
      sidechat.new_session(function()
        created = true
      end)
      H.wait("the session", function()
        return created
      end)
      local prompt = view.state.prompt
      H.eq("v:lua.require'sidechat.complete'.omnifunc", vim.bo[prompt].omnifunc, "omnifunc")
      H.eq("v:lua.require'sidechat.complete'.omnifunc", vim.bo[prompt].completefunc, "completefunc")
      H.eq({
        { "register_source", "sidechat" },
        { "setup.buffer", prompt, { sources = { { name = "sidechat" }, { name = "nvim_lsp" }, { name = "buffer" } } } },
      }, cmp_calls, "nvim-cmp calls")
      H.eq({
        { "add_source_provider", "sidechat", { name = "sidechat", module = "sidechat.complete.blink" } },
        { "add_filetype_source", "markdown", "sidechat" },
      }, blink_calls, "blink.cmp calls")
    end,
  },
  {
    "@ completes workspace paths, a path with spaces quoted",
    function()
      H.eq({
        start = 8,
        result = {
          words = { { word = "@src/lib.rs", abbr = "src/lib.rs", kind = "file", menu = "", info = "" } },
          refresh = "always",
        },
      }, omni("look at @lib"), "@lib")
      H.eq({
        start = 4,
        result = {
          words = { { word = '@"notes/a b.md"', abbr = "notes/a b.md", kind = "file", menu = "", info = "" } },
          refresh = "always",
        },
      }, omni('see @"a b'), '@"a b')
    end,
  },
  {
    "/ at the start of the message completes built-in and custom commands",
    function()
      H.eq({
        start = 0,
        result = {
          words = {
            { word = "/help", abbr = "/help", kind = "builtin", menu = "the commands", info = "/help\n\nthe commands" },
            {
              word = "/handoff",
              abbr = "/handoff <who>",
              kind = "project",
              menu = "Hand the work over",
              info = "/handoff <who>\n\nHand the work over\n\nproject command: " .. HANDOFF,
            },
          },
        },
      }, omni("/h"), "/h")
    end,
  },
  {
    "nothing to complete: -3 leaves completion quietly",
    function()
      H.eq(-3, omni("/h", 2), "/ on the second line")
      H.eq(-3, omni("mail bob@ex"), "the @ of an email address")
      H.eq(-3, omni("plain words"), "no @ or /")
    end,
  },
  {
    "<C-x><C-o> in insert mode inserts the match",
    function()
      at_end_of("see @ab")
      H.press("a<C-x><C-o><Esc>")
      H.eq({ 'see @"notes/a b.md"' }, vim.api.nvim_buf_get_lines(view.state.prompt, 0, -1, false), "the prompt")
      at_end_of("/hando")
      H.press("a<C-x><C-u><Esc>")
      H.eq({ "/handoff" }, vim.api.nvim_buf_get_lines(view.state.prompt, 0, -1, false), "the prompt (completefunc)")
    end,
  },
  {
    "the nvim-cmp source completes the word its keyword pattern takes",
    function()
      local source = require("cmp").source
      at_end_of("look at @lib")
      H.eq(true, source:is_available(), "available in the prompt")
      H.eq({ "@", "/" }, source:get_trigger_characters(), "trigger characters")
      H.eq("@lib", vim.fn.matchstr("look at @lib", source:get_keyword_pattern() .. [[\m$]]), "the keyword")
      local got
      source:complete({ context = { cursor_before_line = "look at @lib", cursor = { row = 1 } } }, function(r)
        got = r
      end)
      H.wait("the files", function()
        return got
      end)
      H.eq({
        items = { { label = "src/lib.rs", insertText = "@src/lib.rs", filterText = "@src/lib.rs", kind = 17 } },
        isIncomplete = true,
      }, got, "files")
      got = nil
      source:complete({ context = { cursor_before_line = "/hel", cursor = { row = 1 } } }, function(r)
        got = r
      end)
      H.wait("the commands", function()
        return got
      end)
      H.eq({
        items = {
          {
            label = "/help",
            insertText = "/help",
            filterText = "/help",
            kind = 3,
            detail = "the commands",
            documentation = { kind = "plaintext", value = "/help\n\nthe commands" },
            labelDetails = { description = "builtin" },
          },
        },
        isIncomplete = false,
      }, got, "commands")
      H.focus(view.state.transcript)
      H.eq(false, source:is_available(), "not in the transcript")
    end,
  },
  {
    "the blink.cmp source replaces the whole @word with a text edit",
    function()
      local source = require("sidechat.complete.blink").new()
      at_end_of('see @"a b')
      H.eq(true, source:enabled(), "enabled in the prompt")
      local got
      source:get_completions({ line = 'see @"a b', cursor = { 1, 9 } }, function(r)
        got = r
      end)
      H.wait("the files", function()
        return got
      end)
      H.eq({
        items = {
          {
            label = "notes/a b.md",
            insertText = '@"notes/a b.md"',
            filterText = "notes/a b.md",
            kind = 17,
            textEdit = {
              newText = '@"notes/a b.md"',
              range = { start = { line = 0, character = 4 }, ["end"] = { line = 0, character = 9 } },
            },
          },
        },
        is_incomplete_forward = true,
        is_incomplete_backward = true,
      }, got, "files")
      got = nil
      source:get_completions({ line = "x /help", cursor = { 1, 7 } }, function(r)
        got = r
      end)
      H.eq({ items = {}, is_incomplete_forward = false, is_incomplete_backward = false }, got, "/ not at the start")
      H.focus(view.state.transcript)
      H.eq(false, source:enabled(), "not in the transcript")
    end,
  },
})
