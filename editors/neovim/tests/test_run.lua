-- A run that needs an approval, with a message sent while it waits: what the transcript shows
-- before and after, the approval answered through the plugin, the changed file, the statusline.
local H = dofile(vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h") .. "/helpers.lua")
H.setup()
local sidechat = require("sidechat")
local view = require("sidechat.view")
local approval = require("sidechat.approval")

H.run({
  {
    "an approval, a message sent mid-run and delivered, the transcript after",
    function()
      vim.cmd("Sidechat")
      local transcript, prompt = view.buffers()
      H.eq("markdown", vim.bo[transcript].filetype, "transcript filetype")
      H.focus(prompt)
      H.type_prompt("create notes.md with hello")
      H.press("<CR>") -- the prompt's send key, in normal mode
      H.wait("the approval window", function()
        return approval.is_open()
      end)
      H.eq("", H.prompt_text(), "prompt after sending")
      H.eq({
        "write notes.md (1 line)",
        "",
        "+++ notes.md",
        "+hello",
        "",
        "w saves: write_file(notes.md)",
        "a allow once · A allow always · w always in this workspace · d deny · D deny, saying why · q hide",
      }, vim.api.nvim_buf_get_lines(approval.state.buf, 0, -1, false), "approval window")

      -- Typed while the run waits: queued, shown waiting.
      H.type_prompt("also check the spelling")
      sidechat.submit()
      H.wait_lines({
        "# create notes.md with hello (demo)",
        "",
        "## You",
        "create notes.md with hello",
        "",
        "## Assistant",
        "[demo model, offline] Creating notes.md.",
        "⚙ write notes.md (1 line) · awaiting approval",
        "",
        "## You (waiting)",
        "also check the spelling",
        "",
        "_waiting for approval (`ga` shows it)_",
      }, "transcript while the approval waits")

      sidechat.approve("allow")
      H.wait("the run to finish", function()
        local s = sidechat.current()
        return s.state == "idle" and s.info and #s.info.changedFiles == 1
      end)
      H.wait_lines({
        "# create notes.md with hello (demo)",
        "",
        "## You",
        "create notes.md with hello",
        "",
        "## Assistant",
        "[demo model, offline] Creating notes.md.",
        "⚙ write notes.md (1 line) · done",
        "    Created notes.md (+1 -0 lines).",
        "",
        "## You (during the run)",
        "also check the spelling",
        "",
        "## Assistant",
        "[demo model, offline] Done. The tool answered:",
        "Created notes.md (+1 -0 lines).",
        "",
        "## Changed files",
        "notes.md  +1 −0",
      }, "transcript after the run")
      H.truthy(not approval.is_open(), "approval window closed")
      H.eq({ "hello" }, vim.fn.readfile(H.ws .. "/notes.md"), "notes.md")
    end,
  },
  {
    "tool output folds away",
    function()
      local win = H.focus(view.state.transcript)
      H.eq(8, vim.fn.foldclosed(9), "fold of the tool call's output starts at its line")
      H.eq(-1, vim.fn.foldclosed(7), "text outside folds")
      vim.api.nvim_win_set_cursor(win, { 8, 0 })
      H.press("<CR>")
      H.eq(-1, vim.fn.foldclosed(9), "<CR> opened the fold")
    end,
  },
  {
    "<CR> on a changed file opens it",
    function()
      local win = H.focus(view.state.transcript)
      vim.api.nvim_win_set_cursor(win, { #H.lines(), 0 })
      H.press("<CR>")
      H.eq(H.ws .. "/notes.md", vim.api.nvim_buf_get_name(0), "buffer opened")
      H.truthy(vim.api.nvim_get_current_win() ~= win, "opened outside the transcript window")
    end,
  },
  {
    "D on a changed file: what it was before the session beside it now, in diff mode",
    function()
      local win = H.focus(view.state.transcript)
      vim.api.nvim_win_set_cursor(win, { #H.lines(), 0 })
      H.truthy(sidechat.supports("session/fileDiff"), "the daemon keeps before/after of changed files")
      local tab = vim.api.nvim_get_current_tabpage()
      H.press("D")
      H.wait("the diff tab", function()
        return vim.api.nvim_get_current_tabpage() ~= tab and #vim.api.nvim_tabpage_list_wins(0) == 2
      end)
      local wins = vim.api.nvim_tabpage_list_wins(0)
      local function shown(w)
        local buf = vim.api.nvim_win_get_buf(w)
        return {
          name = vim.api.nvim_buf_get_name(buf),
          lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false),
          diff = vim.wo[w].diff,
        }
      end
      H.eq({
        { name = "sidechat://before/notes.md", lines = { "" }, diff = true },
        { name = H.ws .. "/notes.md", lines = { "hello" }, diff = true },
      }, { shown(wins[1]), shown(wins[2]) }, "the diff's two sides")
      vim.cmd("tabclose")
    end,
  },
  {
    "statusline: context use and pressure, unpriced demo usage",
    function()
      H.eq("ctx 0% normal · unpriced", sidechat.statusline(), "statusline")
    end,
  },
  {
    "an approval resolved elsewhere: the window closes by itself",
    function()
      sidechat.send("create b.md with bye")
      H.wait("the approval window", function()
        return approval.is_open()
      end)
      local id = approval.state.approval.approvalId
      local err, result = sidechat.client():request_sync("approval/respond", { approvalId = id, decision = "deny" })
      H.eq(nil, err, "approval/respond")
      H.eq({ applied = true, decision = "deny" }, result, "the answer")
      H.wait("the approval window to close", function()
        return not approval.is_open()
      end)
      H.wait("the run to finish", function()
        local s = sidechat.current()
        return s.state == "idle" and #s.entries == 9
      end)
      local lines = H.lines()
      H.eq({
        "## You",
        "create b.md with bye",
        "",
        "## Assistant",
        "[demo model, offline] Creating b.md.",
        "⚙ write b.md (1 line) · denied",
        "    The user denied this tool call. Do not retry it; ask the user how to proceed if needed.",
        "",
        "## Assistant",
        "[demo model, offline] The tool reported a problem:",
        "The user denied this tool call. Do not retry it; ask the user how to proceed if needed.",
        "",
        "## Changed files",
        "notes.md  +1 −0",
      }, vim.list_slice(lines, 18), "the end of the transcript")
    end,
  },
  {
    "missed events (a seq gap) are filled from session/transcript",
    function()
      local before = H.lines()
      local client = sidechat.client()
      local deliver = client.event_listeners[1]
      local dropped = {}
      -- Lose every notification about the answer's committed text, as a dropped frame would.
      client.event_listeners[1] = function(params)
        if params.event.kind == "messageCompleted" and params.event.entry.role == "assistant" then
          table.insert(dropped, params.seq)
          return
        end
        deliver(params)
      end
      sidechat.send("hello there")
      H.wait("the run to finish", function()
        local s = sidechat.current()
        return s.state == "idle" and #s.entries == 11
      end)
      client.event_listeners[1] = deliver
      H.eq(1, #dropped, "notifications dropped")
      local expected = vim.list_slice(before, 1, #before - 3)
      vim.list_extend(expected, {
        "",
        "## You",
        "hello there",
        "",
        "## Assistant",
        sidechat.current().entries[11].blocks[1].text,
        "",
        "## Changed files",
        "notes.md  +1 −0",
      })
      H.wait_lines(expected, "the transcript after the gap")
      H.truthy(expected[#expected - 3]:match('^%[demo model, offline%] You said: "hello there"%.'), "the answer")
    end,
  },
})
