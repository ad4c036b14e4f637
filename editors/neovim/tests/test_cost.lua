-- Against the demo model, which is never priced: the statusline, :SidechatCost and the daemon's
-- `/cost` note show no amount for usage nothing priced, and none before any request either.
local H = dofile(vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h") .. "/helpers.lua")
H.setup()
local sidechat = require("sidechat")

--- The lines of `text` that hold a dollar amount.
local function amounts(text)
  return vim.tbl_filter(function(line)
    return line:find("%$") ~= nil
  end, vim.split(text, "\n", { plain = true }))
end

H.run({
  {
    "before any request: no cost yet, not $0",
    function()
      sidechat.open()
      sidechat.new_session()
      H.wait("the session's spend", function()
        local s = sidechat.current()
        return s and s.info and s.info.tokens ~= nil
      end)
      local line = sidechat.statusline()
      H.truthy(vim.endswith(line, "no cost yet"), line)
      H.eq({}, amounts(line), "amounts in the statusline")
    end,
  },
  {
    "unpriced usage: the statusline, :SidechatCost and the /cost note say so without an amount",
    function()
      sidechat.send("hello there")
      H.idle_with(2)
      H.wait("the unpriced request", function()
        return (sidechat.current().info.unpricedRequests or 0) > 0
      end)
      H.eq({}, amounts(sidechat.statusline()), "amounts in the statusline")
      H.truthy(vim.endswith(sidechat.statusline(), "unpriced"), sidechat.statusline())

      H.notes = {}
      vim.cmd("SidechatCost")
      H.wait("the cost", function()
        return #H.notes > 0
      end)
      H.eq({}, amounts(H.notes[1].msg), "amounts in :SidechatCost")

      sidechat.send("/cost")
      local note
      H.wait("the /cost note", function()
        local s = sidechat.current()
        local last = s.entries[#s.entries]
        note = last and last.role == "note" and last.blocks[1].text
        return note
      end)
      H.truthy(vim.startswith(note, "Cost of this session: unpriced"), note)
      H.eq({}, amounts(note), "amounts in the /cost note")
    end,
  },
})
