-- A carry-over note (`/new-context`) against the demo model, drawn as the boundary of a new
-- context with the note folded under it: `X` on it calls `note/delete`, and
-- the transcript drops it when the daemon's `noteDeleted` event arrives; a redraw from the
-- transcript leaves it out too; :SidechatDeleteNote takes the newest note.
local H = dofile(vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h") .. "/helpers.lua")
H.setup()
local sidechat = require("sidechat")
local view = require("sidechat.view")

local HEADING = "## New context — carried over"

local function note_line()
  return vim.fn.index(H.lines(), HEADING) + 1
end

--- Deletions the daemon told of, counted as the session applies them.
local deleted = {}

H.run({
  {
    "X on a carry-over note deletes it; the noteDeleted event takes it off the transcript",
    function()
      sidechat.open()
      sidechat.send("hello there")
      H.idle_with(2)
      sidechat.send("/new-context")
      H.wait("the carry-over note", function()
        return note_line() > 0
      end)
      local s = sidechat.current()
      s:on_change(function(_, what)
        if what == "noteDeleted" then
          table.insert(deleted, what)
        end
      end)
      local at = note_line()
      H.eq({ kind = "note", messageId = view.span(at).messageId }, view.span(at), "the heading names the note")
      local id = view.span(at).messageId
      H.truthy(vim.startswith(id, "msg_"), "a message id: " .. id)
      -- A boundary: a rule above the heading, then (under the compaction's details when its
      -- event came while the note was drawn) the note, folded.
      local lines = H.lines()
      H.eq({ "", "---", HEADING }, vim.list_slice(lines, at - 2, at), "the boundary")
      local fold = lines[at + 1]:match("^_.*_$") and at + 2 or at + 1
      H.eq("▸ note (X deletes it)", lines[fold], "the note's fold")
      H.truthy(vim.startswith(lines[fold + 1], "> "), "the note's text under it: " .. lines[fold + 1])
      H.eq(view.span(at), view.span(at - 1), "the rule names the note too")
      H.eq(view.span(at), view.span(fold + 1), "and so does its text")

      local win = H.focus(view.state.transcript)
      H.eq(fold, vim.fn.foldclosed(fold + 1), "the note's text is folded")
      -- Elsewhere, X does nothing.
      vim.api.nvim_win_set_cursor(win, { 1, 0 })
      H.press("X")
      vim.api.nvim_win_set_cursor(win, { at, 0 })
      H.press("X")
      H.wait("the note to leave the transcript", function()
        return note_line() == 0
      end)
      H.eq({ "noteDeleted" }, deleted, "one deletion, told by the daemon")
      local stored = s.entries[s.index[id]]
      H.eq("", stored.blocks[1].text, "the entry kept, emptied, as the transcript now has it")
      H.eq({}, vim.tbl_filter(function(n)
        return n.level == vim.log.levels.ERROR
      end, H.notes), "no error")
    end,
  },
  {
    "redrawn from the transcript: the deleted note stays away",
    function()
      local id = sidechat.current().id
      -- The daemon is gone before the next one starts on the database.
      H.stop_daemons()
      local done = false
      sidechat.attach(id, function()
        done = true
      end)
      H.wait("the session to load again", function()
        return done and sidechat.current().loaded
      end)
      H.eq(0, note_line(), "no carry-over note shown")
      H.truthy(vim.tbl_contains(H.lines(), "hello there"), "the conversation is still there")
    end,
  },
  {
    ":SidechatDeleteNote deletes the newest note; with none left it says so",
    function()
      sidechat.send("and now?")
      H.wait("an answer", function()
        local s = sidechat.current()
        return s.state == "idle" and s.entries[#s.entries].role == "assistant"
      end)
      sidechat.send("/new-context")
      H.wait("a second note", function()
        return note_line() > 0
      end)
      vim.cmd("SidechatDeleteNote")
      H.wait("the note to leave the transcript", function()
        return note_line() == 0
      end)
      vim.cmd("SidechatDeleteNote")
      H.wait("the plugin to say there is none", function()
        return vim.tbl_contains(vim.tbl_map(function(n)
          return n.msg
        end, H.notes), "sidechat: no carry-over note to delete")
      end)
    end,
  },
})
