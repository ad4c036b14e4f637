-- The transcript's winbar (title, model, state, context, cost, the keys that act now) through a
-- run's states, the daemon's title arriving in it, /help re-wrapped to a 72-column window, the
-- highlight groups and :SidechatModel. Against the demo model, and a replay account beside it.
local H = dofile(vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h") .. "/helpers.lua")

local script = H.tmp .. "/replay.json"
vim.fn.writefile({ vim.json.encode({ turns = { { text = "Replayed." } } }) }, script)
H.setup({ env = { SIDECHAT_REPLAY_SCRIPT = script, SIDECHAT_ACCOUNT = "demo" } })
local sidechat = require("sidechat")
local view = require("sidechat.view")
local approval = require("sidechat.approval")
local highlights = require("sidechat.highlights")



--- The transcript window's winbar without its highlight items: what it reads as.
local function bar()
  local win = vim.fn.win_findbuf(view.state.transcript)[1]
  return (vim.wo[win].winbar:gsub("%%#[%w_]+#", ""):gsub("%%%*", ""):gsub("%%=", " | "):gsub("%%%%", "%%"))
end

local SPINNER = require("sidechat.winbar").SPINNER

H.run({
  {
    "the winbar says idle, working with a spinner, waiting for approval, and the daemon's title",
    function()
      vim.cmd("SidechatNew")
      H.wait("the new session", function()
        local s = sidechat.current()
        return s and s.loaded and s.info
      end)
      local ok = vim.wait(20000, function()
        return bar() == "New chat · demo · idle · no cost yet | <CR> send"
      end, 10)
      H.eq("New chat · demo · idle · no cost yet | <CR> send", bar(), "the idle bar")

      sidechat.send("tell me a story about a small editor please")
      local working
      H.wait("a working bar", function()
        working = bar()
        return working:find("working", 1, true) ~= nil
      end)
      local head = "New chat · demo · "
      H.truthy(vim.startswith(working, head), working)
      local frames = vim.tbl_filter(function(frame)
        return vim.startswith(working:sub(#head + 1), frame .. " working · ")
      end, SPINNER)
      H.eq(1, #frames, "a spinner frame before \"working\" in " .. working)
      H.truthy(vim.endswith(working, "| <CR> send  <C-c> stop"), working)

      -- After the first answer the daemon titles the session (the demo model: its first words).
      H.wait("the daemon's title", function()
        return vim.startswith(bar(), "tell me a story about a · demo · idle · ctx ")
      end)
      H.truthy(bar():match(" · ctx %d+%% %a+ · unpriced | <CR> send$"), bar())
      H.eq("# tell me a story about a (demo)", H.lines()[1], "the transcript's header")

      sidechat.send("create notes.md with hello")
      H.wait("the approval", function()
        return approval.is_open()
      end)
      H.wait("the approval bar", function()
        return bar():find("waiting for approval", 1, true) ~= nil
      end)
      H.truthy(vim.endswith(bar(), "| a allow  A always  d deny  <C-c> stop"), bar())
      sidechat.approve("deny")
      H.wait("idle again", function()
        return sidechat.current().state == "idle" and vim.endswith(bar(), "| <CR> send")
      end)
    end,
  },
  {
    "/help is one line per command, wrapped to a 72-column window under its description",
    function()
      local win = vim.fn.win_findbuf(view.state.transcript)[1]
      vim.api.nvim_win_set_width(win, 72)
      sidechat.send("/help")
      local lnum
      H.wait("the help note", function()
        for i, line in ipairs(H.lines()) do
          if line:find("^  /model <id>") then
            lnum = i
            return true
          end
        end
      end)
      local line = H.lines()[lnum]
      H.truthy(vim.endswith(line, "a name sidechat does not know needs /model --force <id>"), line)
      H.eq(72, vim.api.nvim_win_get_width(win), "the window's width")
      -- Where each character is drawn: the line takes two screen rows, and the second starts
      -- under the description ("switch"), not at the window's edge.
      vim.api.nvim_set_current_win(win)
      vim.api.nvim_win_set_cursor(win, { lnum, 0 })
      vim.cmd("normal! zt")
      vim.cmd("redraw")
      local first = vim.fn.screenpos(win, lnum, 1)
      local described = vim.fn.screenpos(win, lnum, (line:find("switch", 1, true)))
      local last = vim.fn.screenpos(win, lnum, #line)
      H.truthy(last.row > first.row, "the line wraps: " .. vim.inspect({ first, last }))
      local starts = {}
      for col = 1, #line do
        local pos = vim.fn.screenpos(win, lnum, col)
        if pos.row > first.row and starts[pos.row] == nil then
          starts[pos.row] = pos.col
        end
      end
      for row, col in pairs(starts) do
        H.eq(described.col, col, "where screen row " .. row .. " of the line starts")
      end
    end,
  },
  {
    "highlight groups link to standard ones by default, again after a colour scheme, and yield to the user's",
    function()
      for group, target in pairs(highlights.LINKS) do
        H.eq(target, vim.api.nvim_get_hl(0, { name = group }).link, group)
      end
      vim.api.nvim_set_hl(0, "SidechatTitle", { bold = true })
      vim.cmd("colorscheme default")
      H.eq("Title", vim.api.nvim_get_hl(0, { name = "SidechatTitle" }).link, "SidechatTitle after :colorscheme")
      vim.api.nvim_set_hl(0, "SidechatModel", { italic = true })
      highlights.apply()
      local own = vim.api.nvim_get_hl(0, { name = "SidechatModel" })
      H.eq({ true, nil }, { own.italic, own.link }, "the user's SidechatModel")
    end,
  },
  {
    ":SidechatModel offers the accounts' models and switches the session to the one picked",
    function()
      local offered
      vim.ui.select = function(items, opts, on_choice)
        offered = vim.tbl_map(opts.format_item, items)
        for _, item in ipairs(items) do
          if item.account == "replay" then
            return on_choice(item)
          end
        end
        on_choice(nil)
      end
      vim.cmd("SidechatModel")
      H.wait("the switch", function()
        local info = sidechat.current().info
        return info.account == "replay" and info.model == "replay"
      end)
      H.truthy(vim.tbl_contains(offered, "demo (demo) · current"), vim.inspect(offered))
      H.truthy(vim.tbl_contains(offered, "replay (replay)"), vim.inspect(offered))
      local err, got = sidechat.client():request_sync("session/get", { sessionId = sidechat.current().id })
      H.eq(nil, err, "session/get")
      H.eq({ "replay", "replay" }, { got.account, got.model }, "the session's account and model")
      H.wait("the bar's model", function()
        return bar():find(" · replay · ", 1, true) ~= nil
      end)
    end,
  },
})
