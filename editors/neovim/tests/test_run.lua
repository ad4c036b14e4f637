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
        "write notes.md (1 lines)",
        "",
        "+++ notes.md",
        "+hello",
        "",
        "a allow once · A allow always · d deny · q hide",
      }, vim.api.nvim_buf_get_lines(approval.state.buf, 0, -1, false), "approval window")

      -- Typed while the run waits: queued, shown waiting.
      H.type_prompt("also check the spelling")
      sidechat.submit()
      H.wait_lines({
        "# New chat (demo)",
        "",
        "## You",
        "create notes.md with hello",
        "",
        "## Assistant",
        "[demo model, offline] Creating notes.md.",
        "⚙ write notes.md (1 lines) · awaiting approval",
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
        "# New chat (demo)",
        "",
        "## You",
        "create notes.md with hello",
        "",
        "## Assistant",
        "[demo model, offline] Creating notes.md.",
        "⚙ write notes.md (1 lines) · done",
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
    "statusline: context use and pressure, unpriced demo usage",
    function()
      H.eq("ctx 0% normal · unpriced", sidechat.statusline(), "statusline")
    end,
  },
})
