-- A message the provider refused before any answer (a replayed HTTP 529): the session shows it
-- unanswered, with the error, and `R` asks again and is answered.
local H = dofile(vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h") .. "/helpers.lua")

local script = H.tmp .. "/replay.json"
vim.fn.writefile({ vim.json.encode({ turns = { { text = "Answered at last.", failures = 1 } } }) }, script)
H.setup({ env = { SIDECHAT_REPLAY_SCRIPT = script, SIDECHAT_ACCOUNT = "replay" } })
local sidechat = require("sidechat")
local view = require("sidechat.view")

H.run({
  {
    "a refused request leaves the turn unanswered, and R answers it",
    function()
      vim.cmd("SidechatNew")
      H.wait("the new session", function()
        local s = sidechat.current()
        return s and s.loaded
      end)
      sidechat.send("go")
      local s = sidechat.current()
      H.wait("the turn left unanswered", function()
        return s.state == "unanswered"
      end)
      H.truthy(vim.tbl_contains(H.lines(), "_this turn has no answer yet: `R` or :SidechatResume answers it_"), table.concat(H.lines(), "\n"))
      local errors = vim.tbl_filter(function(line)
        return line:find("HTTP 529", 1, true) ~= nil
      end, H.lines())
      H.eq(1, #errors, "lines telling the provider's refusal")
      vim.cmd("stopinsert")
      H.focus(view.state.transcript)
      H.press("R")
      H.wait("the answer", function()
        local last = s.entries[#s.entries]
        return s.state == "idle" and last.role == "assistant" and last.blocks[1] and last.blocks[1].text == "Answered at last."
      end)
      H.truthy(not vim.tbl_contains(H.lines(), "_this turn has no answer yet: `R` or :SidechatResume answers it_"), "the hint is gone")
    end,
  },
})
