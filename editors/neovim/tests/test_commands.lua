-- Against the replay model (scripted turns): thinking folded, a priced session's statusline and
-- :SidechatCost, a denial from the approval window, a waiting message withdrawn with `x`, and
-- :'<,'>SidechatAsk.
local H = dofile(vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h") .. "/helpers.lua")

local script = H.tmp .. "/replay.json"
local slow_text = {}
for i = 1, 60 do
  slow_text[i] = "word" .. i
end
vim.fn.writefile({
  vim.json.encode({
    turns = {
      {
        thinking = "Let me think.\nThe user wants a haiku.",
        text = "Here it is.",
        usage = { input = 2000, output = 1000, cacheRead = 0, cacheWrite = 0, reasoning = 0 },
      },
      { text = "Running it.", toolCalls = { { name = "run_command", input = { command = "echo hi" } } } },
      { text = "Denied, fine." },
      { text = table.concat(slow_text, " "), delayMs = 100 },
    },
    fallback = { text = "Noted." },
  }),
}, script)
vim.fn.mkdir(vim.env.XDG_CONFIG_HOME .. "/sidechat", "p")
vim.fn.writefile({ '[prices."replay"]', "input = 1.0", "output = 5.0" }, vim.env.XDG_CONFIG_HOME .. "/sidechat/config.toml")
H.setup({ env = { SIDECHAT_REPLAY_SCRIPT = script } })

local sidechat = require("sidechat")
local view = require("sidechat.view")
local approval = require("sidechat.approval")

local FIRST = {
  "# think first (replay)",
  "",
  "## You",
  "think first",
  "",
  "## Assistant",
  "▸ thinking",
  "> Let me think.",
  "> The user wants a haiku.",
  "Here it is.",
}
local AFTER_DENIAL = vim.list_extend(vim.deepcopy(FIRST), {
  "",
  "## You",
  "run it",
  "",
  "## Assistant",
  "Running it.",
  "⚙ run `echo hi` · denied",
  "    The user denied this tool call. Do not retry it; ask the user how to proceed if needed.",
  "",
  "## Assistant",
  "Denied, fine.",
})

H.run({
  {
    "thinking streams and folds away",
    function()
      sidechat.open()
      sidechat.send("think first")
      H.idle_with(2)
      H.eq(FIRST, H.lines(), "transcript")
      local win = H.focus(view.state.transcript)
      H.eq(7, vim.fn.foldclosed(8), "the thinking is folded under its header line")
      H.eq("▸ thinking  (2 more lines)", vim.fn.foldtextresult(7), "the folded line")
      H.eq(-1, vim.fn.foldclosed(10), "the answer is not folded")
      vim.api.nvim_win_set_cursor(win, { 7, 0 })
      H.press("<CR>")
      H.eq(-1, vim.fn.foldclosed(8), "<CR> opened the fold")
    end,
  },
  {
    "a priced session: statusline and :SidechatCost",
    function()
      H.wait("the spend", function()
        return sidechat.current().info.costUsd
      end)
      H.eq("ctx 1% normal · $0.0070", sidechat.statusline(), "statusline")
      H.notes = {}
      vim.cmd("SidechatCost")
      H.wait("the cost", function()
        return #H.notes > 0
      end)
      H.eq({
        {
          level = vim.log.levels.INFO,
          msg = "sidechat: Cost: $0.0070\n"
            .. "  replay/replay: $0.0070 (1 requests, 2000 in, 1000 out, 0 cache read, 0 cache write)\n"
            .. "  prices as of 2026-11-29",
        },
      }, H.notes, "what :SidechatCost shows")
    end,
  },
  {
    "denied from the approval window",
    function()
      sidechat.send("run it")
      H.wait("the approval window", function()
        return approval.is_open()
      end)
      H.focus(approval.state.buf)
      H.press("d")
      H.idle_with(6)
      H.wait_lines(AFTER_DENIAL)
    end,
  },
  {
    "a waiting message withdrawn with x",
    function()
      sidechat.send("go slow")
      H.wait("the slow answer", function()
        return #sidechat.current().live > 0
      end)
      sidechat.send("never mind")
      H.wait("the waiting message", function()
        return #sidechat.current().waiting == 1
      end)
      local lines = H.lines()
      H.eq({
        "## You",
        "go slow",
        "",
        "## Assistant",
      }, vim.list_slice(lines, #AFTER_DENIAL + 2, #AFTER_DENIAL + 5), "the run's start")
      H.eq({ "", "## You (waiting)", "never mind", "", "_… working_" }, vim.list_slice(lines, #lines - 4), "the waiting message")
      local win = H.focus(view.state.transcript)
      for i, line in ipairs(lines) do
        if line == "never mind" then
          vim.api.nvim_win_set_cursor(win, { i, 0 })
        end
      end
      H.press("x")
      H.wait("the message withdrawn", function()
        return #sidechat.current().waiting == 0
      end)
      vim.cmd("SidechatStop")
      H.idle_with(8)
      local lines = H.lines()
      H.eq(AFTER_DENIAL, vim.list_slice(lines, 1, #AFTER_DENIAL), "the transcript before the run")
      H.eq(nil, vim.tbl_contains(lines, "never mind") or nil, "the withdrawn message is gone")
      H.eq("_(stopped)_", lines[#lines], "the stopped answer")
    end,
  },
  {
    ":'<,'>SidechatAsk sends the lines with their file and range",
    function()
      vim.cmd("wincmd t")
      vim.cmd("edit " .. H.ws .. "/code.lua")
      vim.api.nvim_buf_set_lines(0, 0, -1, false, { "local a = 1", "local b = 2", "local c = 3", "return a" })
      vim.cmd("2,3SidechatAsk what do these do?")
      H.idle_with(10)
      local lines = H.lines()
      local at = #lines - 4
      H.eq({ "## You", "what do these do?", "📎 code.lua:2-3 (4 lines)", "", "## Assistant" }, vim.list_slice(lines, at - 1, at + 3), "the question")
      H.eq({
        { type = "text", text = "what do these do?" },
        { type = "attachment", name = "code.lua:2-3", text = "```lua\nlocal b = 2\nlocal c = 3\n```" },
      }, sidechat.current().entries[9].blocks, "the message's blocks")
    end,
  },
  {
    ":'<,'>SidechatAsk without a question: the lines go with the next message",
    function()
      vim.cmd("wincmd t")
      H.eq(H.ws .. "/code.lua", vim.api.nvim_buf_get_name(0), "the buffer asked about")
      vim.cmd("1,1SidechatAsk")
      local prompt_win = vim.fn.win_findbuf(view.state.prompt)[1]
      H.eq(prompt_win, vim.api.nvim_get_current_win(), "the prompt is focused")
      H.eq("📎 code.lua:1-1", vim.wo[prompt_win].winbar, "the prompt's bar")
      H.type_prompt("and this?")
      sidechat.submit()
      H.eq("", vim.wo[prompt_win].winbar, "the prompt's bar once sent")
      H.wait("the message", function()
        local last = sidechat.current().entries[11]
        return last and last.role == "user"
      end)
      H.eq({
        { type = "text", text = "and this?" },
        { type = "attachment", name = "code.lua:1-1", text = "```lua\nlocal a = 1\n```" },
      }, sidechat.current().entries[11].blocks, "the message's blocks")
      vim.cmd("SidechatStop")
    end,
  },
})
