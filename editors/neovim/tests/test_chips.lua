-- A user message's @-mentions are drawn as chips under its text (`@src/lib.rs:2-3 · 48 B`: the
-- mention as typed back, the size of the file as read), highlighted with groups linked to
-- standard ones; lines sent with :SidechatAsk keep their "📎 name (N lines)" line.
local H = dofile(vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h") .. "/helpers.lua")
H.setup()
local sidechat = require("sidechat")
local view = require("sidechat.view")

vim.fn.mkdir(H.ws .. "/src", "p")
vim.fn.mkdir(H.ws .. "/notes", "p")
vim.fn.writefile({ "one", "two", "three", "four" }, H.ws .. "/src/lib.rs")
vim.fn.writefile({ string.rep("x", 3000) }, H.ws .. "/notes/a b.md")

--- The lines of the last user message's section, and the highlighted parts of them as
--- `{line within the section, first byte, end byte, group}`.
local function last_user_section()
  local lines = H.lines()
  local from
  for i = #lines, 1, -1 do
    if lines[i]:match("^## You") then
      from = i
      break
    end
  end
  local out = {}
  for i = from, #lines do
    if i > from and lines[i]:match("^## ") then
      break
    end
    table.insert(out, lines[i])
  end
  local marks = vim.api.nvim_buf_get_extmarks(view.state.transcript, view.marks_ns, { from - 1, 0 },
    { from - 1 + #out, 0 }, { details = true })
  local hl = vim.tbl_map(function(m)
    return { m[2] - from + 2, m[3], m[4].end_col, m[4].hl_group }
  end, marks)
  return out, hl
end

H.run({
  {
    "mentions as chips under the message",
    function()
      vim.cmd("Sidechat")
      sidechat.send('compare @src/lib.rs:2-3 with @"notes/a b.md" and @src/')
      H.idle_with(2)
      local lines, hl = last_user_section()
      H.eq({
        "## You",
        'compare @src/lib.rs:2-3 with @"notes/a b.md" and @src/',
        "@src/lib.rs:2-3 · 19 B",
        '@"notes/a b.md" · 2.9 KB',
        "@src/ · 6 B",
        "",
      }, lines, "the message")
      local function chip(line, mention, detail)
        return { { line, 0, #mention, "SidechatChip" }, { line, #mention, #mention + #detail, "SidechatChipDetail" } }
      end
      H.eq(vim.list_extend(vim.list_extend(chip(3, "@src/lib.rs:2-3", " · 19 B"), chip(4, '@"notes/a b.md"', " · 2.9 KB")),
        chip(5, "@src/", " · 6 B")), hl, "the chips' highlights")
    end,
  },
  {
    "lines sent with :SidechatAsk keep their line count",
    function()
      local buf = vim.api.nvim_create_buf(true, false)
      vim.api.nvim_buf_set_lines(buf, 0, -1, false, { "a", "b" })
      vim.api.nvim_set_current_buf(buf)
      vim.cmd("1,2SidechatAsk what is this?")
      H.idle_with(4)
      local lines, hl = last_user_section()
      H.eq({ "## You", "what is this?", "📎 [No Name]:1-2 (2 lines)", "" }, lines, "the message")
      local name = #"📎 [No Name]:1-2"
      H.eq({ { 3, 0, name, "SidechatChip" }, { 3, name, name + #" (2 lines)", "SidechatChipDetail" } }, hl, "highlights")
    end,
  },
  {
    "the groups link to standard ones, and a colour scheme keeps them",
    function()
      local function links()
        local out = {}
        for _, group in ipairs({ "SidechatChip", "SidechatChipDetail", "SidechatImage" }) do
          out[group] = vim.api.nvim_get_hl(0, { name = group }).link
        end
        return out
      end
      local expected = { SidechatChip = "Directory", SidechatChipDetail = "Comment", SidechatImage = "Special" }
      H.eq(expected, links(), "links")
      vim.cmd("colorscheme default")
      H.eq(expected, links(), "links after :colorscheme")
    end,
  },
})
