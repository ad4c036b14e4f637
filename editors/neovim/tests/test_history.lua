-- A long session opens at its newest page of entries; `[[` in the transcript (or
-- :SidechatOlder) puts the page of older ones above, until the whole transcript is shown.
local H = dofile(vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h") .. "/helpers.lua")
H.setup()
local sidechat = require("sidechat")
local view = require("sidechat.view")
require("sidechat.session").page_size = 4

--- `session/transcript` of `id`, whole, as the daemon answers it.
local function whole_transcript(id)
  local answer
  sidechat.client():request("session/transcript", { sessionId = id }, function(err, result)
    answer = err and { error = err } or result
  end)
  H.wait("the whole transcript", function()
    return answer ~= nil
  end)
  return answer
end

local function seqs(entries)
  return vim.tbl_map(function(e)
    return e.seq
  end, entries)
end

H.run({
  {
    "a session opens at its newest page; [[ loads the older page above it; then all is shown",
    function()
      sidechat.open()
      sidechat.send("one")
      H.idle_with(2)
      sidechat.send("two")
      H.idle_with(4)
      sidechat.send("three")
      H.idle_with(6)
      local id = sidechat.current().id
      H.stop_daemons()

      sidechat.open()
      local loaded = false
      sidechat.attach(id, function(err)
        loaded = not err
      end)
      H.wait("the session's newest page", function()
        return loaded
      end)
      local whole = whole_transcript(id)
      H.eq(6, #whole.entries, "entries stored")
      local s = sidechat.current()
      H.eq(vim.list_slice(whole.entries, 3, 6), s.entries, "the newest page")
      H.eq(whole.entries[3].seq, s.older_before, "where older entries remain")

      local first_shown = #H.lines()
      local win = H.focus(view.state.transcript)
      vim.api.nvim_win_set_cursor(win, { 1, 0 })
      H.press("[[")
      H.wait("the older page", function()
        return #s.entries == 6
      end)
      H.eq(whole.entries, s.entries, "the whole transcript, in order")
      H.eq(seqs(whole.entries), seqs(s.entries), "in seq order")
      H.eq(nil, s.older_before, "nothing older remains")
      H.wait("the older entries drawn", function()
        return #H.lines() > first_shown
      end)

      H.notes = {}
      vim.cmd("SidechatOlder")
      H.eq(6, #s.entries, "nothing more was loaded")
      H.truthy(
        vim.tbl_contains(
          vim.tbl_map(function(n)
            return n.msg
          end, H.notes),
          "sidechat: the whole transcript is shown"
        ),
        vim.inspect(H.notes)
      )
    end,
  },
})
