-- /compact against the demo model: the summary entry under its own heading with the
-- compaction's range, reason and tokens, its text folded away; the same after a redraw from
-- the transcript (without what only the live event told); the statusline's pressure levels.
local H = dofile(vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h") .. "/helpers.lua")
H.setup()
local sidechat = require("sidechat")
local view = require("sidechat.view")
local render = require("sidechat.render")

H.run({
  {
    "/compact: a summary entry with the compaction's details, its text folded",
    function()
      sidechat.open()
      sidechat.send("hello there")
      H.idle_with(2)
      sidechat.send("tell me a story")
      H.idle_with(4)
      sidechat.send("/compact")
      H.idle_with(6)
      H.wait("the compaction's details", function()
        return vim.tbl_contains(H.lines(), "▸ summary") and H.lines()[#H.lines()]:match("^Compacted 4 messages") ~= nil
      end)
      local lines = H.lines()
      local at = assert(vim.fn.index(lines, "## Summary of 4 earlier messages") + 1, "the summary heading")
      H.truthy(at > 0, "the summary heading is shown")
      local detail = lines[at + 1]
      local to, before, after = detail:match("^_seq 1–(%d+) · /compact · history ([%d,]+) → ([%d,]+) tokens_$")
      H.truthy(to, "the detail line names the range, the reason and the tokens: " .. detail)
      H.truthy(tonumber((after:gsub(",", ""))) < tonumber((before:gsub(",", ""))), "the history shrank")
      H.eq("▸ summary", lines[at + 2], "the summary's fold line")
      H.truthy(lines[at + 3]:match("^> %[demo model, offline%] Summary: the user asked"), "the summary's text: " .. lines[at + 3])
      H.eq({ "", "## Note" }, { lines[at + 4], lines[at + 5] }, "the /compact note follows")

      local win = H.focus(view.state.transcript)
      H.eq(at + 2, vim.fn.foldclosed(at + 3), "the summary's text is folded under its line")
      H.eq(-1, vim.fn.foldclosed(at + 1), "the detail line is not folded")
      vim.api.nvim_win_set_cursor(win, { at + 2, 0 })

      -- The budget is asked again: the summary is now part of the history.
      H.wait("the budget after the compaction", function()
        local b = sidechat.current().budget
        return b and b.summaryTokens > 0
      end)
    end,
  },
  {
    "redrawn from the transcript: the same entry, its range without the live details",
    function()
      local s = sidechat.current()
      local id = s.id
      local live = H.lines()
      -- The daemon is gone before the next one starts on the database.
      H.stop_daemons()
      local done = false
      sidechat.attach(id, function()
        done = true
      end)
      H.wait("the session to load again", function()
        return done and #sidechat.current().entries == 6
      end)
      local lines = H.lines()
      local at = vim.fn.index(lines, "## Summary of 4 earlier messages") + 1
      H.truthy(at > 0, "the summary heading is shown")
      H.truthy(lines[at + 1]:match("^_seq 1–%d+_$"), "the range alone: " .. lines[at + 1])
      H.eq(#live, #lines, "as many lines as live")
    end,
  },
  {
    "headings and details of each kind of summary",
    function()
      H.eq("Summary of 1 earlier message", render.summary_heading({ method = "summary", messages = 1 }))
      H.eq("12 earlier messages left out of what the model is sent", render.summary_heading({ method = "drop", messages = 12 }))
      H.eq("New context — carried over", render.summary_heading({ method = "carryOver", messages = 30 }))
      H.eq(
        "seq 3–4096 · the history passed its share of the window · history 61,900 → 12,034 tokens",
        render.summary_detail({ fromSeq = 3, toSeq = 4096 }, { reason = "share", tokensBefore = 61900, tokensAfter = 12034 })
      )
      H.eq(
        "the request would not have fit the window · history 900 → 400 tokens",
        render.summary_detail({ method = "drop" }, { reason = "window", tokensBefore = 900, tokensAfter = 400 })
      )
      H.eq("", render.summary_detail({ method = "carryOver", fromSeq = vim.NIL, toSeq = vim.NIL }, nil))
      H.eq(
        "/new-context · history 101 → 265 tokens",
        render.summary_detail({ method = "carryOver" }, { reason = "command", tokensBefore = 101, tokensAfter = 265 })
      )
      H.eq(
        "idle longer than the idle rollover · history 2 → 1 tokens",
        render.summary_detail({ method = "carryOver" }, { reason = "idle", tokensBefore = 2, tokensAfter = 1 })
      )
    end,
  },
  {
    "the statusline at each pressure level",
    function()
      local s = sidechat.current()
      H.wait("the budget and the session's spend", function()
        return s.budget ~= nil and s.info ~= nil
      end)
      local base = vim.deepcopy(s.budget)
      H.eq(("ctx %d%% normal · unpriced"):format(math.floor(base.utilisation * 100 + 0.5)), sidechat.statusline())
      s.budget = vim.tbl_extend("force", base, { utilisation = 0.004, pressure = "normal" })
      H.eq("ctx 0% normal · unpriced", sidechat.statusline())
      s.budget = vim.tbl_extend("force", base, { utilisation = 0.746, pressure = "high" })
      H.eq("ctx 75% high · unpriced", sidechat.statusline())
      s.budget = vim.tbl_extend("force", base, { utilisation = 0.951, pressure = "critical" })
      H.eq("ctx 95% critical · unpriced", sidechat.statusline())
      s.budget = vim.tbl_extend("force", base, { utilisation = 1.2, pressure = "critical" })
      H.eq("ctx 120% critical · unpriced", sidechat.statusline())
    end,
  },
})
