-- Stop during a streamed answer; then a session resumed from the list, by a fresh daemon,
-- redrawn line for line from `session/transcript`.
local H = dofile(vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h") .. "/helpers.lua")
-- Slow enough that the story is still streaming when the test stops it.
H.setup({ env = { SIDECHAT_DEMO_DELAY_MS = "40" } })
local sidechat = require("sidechat")
local view = require("sidechat.view")

local STORY_START = "[demo model, offline] Once upon a time a small daemon lived beside an editor."

local stopped_text

local function last_entry()
  local entries = sidechat.current().entries
  return entries[#entries]
end

H.run({
  {
    ":SidechatStop ends a streaming answer; what streamed stays, marked stopped",
    function()
      vim.cmd("Sidechat")
      sidechat.send("tell me a story")
      H.wait("the story to stream", function()
        local live = sidechat.current().live[1]
        return live and #live.text > #STORY_START
      end)
      H.eq("_… working_", H.lines()[#H.lines()], "last line while streaming")
      vim.cmd("SidechatStop")
      H.wait("the run to stop", function()
        local s = sidechat.current()
        return s.state == "idle" and last_entry().role == "assistant"
      end)
      local entry = last_entry()
      H.eq("stopped", entry.status, "status of the answer")
      local text = entry.blocks[1].text
      stopped_text = text
      H.eq(STORY_START, text:sub(1, #STORY_START), "the answer's start")
      H.truthy(#text < 500, "the answer was cut short")
      H.wait_lines({
        "# tell me a story (demo)",
        "",
        "## You",
        "tell me a story",
        "",
        "## Assistant",
        text,
        "_(stopped)_",
      })
    end,
  },
  {
    ":SidechatSessions lists this directory's sessions; the one picked is redrawn by a new daemon",
    function()
      sidechat.send("list files")
      H.wait("the second run", function()
        local s = sidechat.current()
        return s.state == "idle" and #s.entries == 6
      end)
      H.wait("the changed files and spend", function()
        return sidechat.current().info.tokens > 0
      end)
      -- A slash command the daemon does not know: a notice, stored and shown.
      sidechat.send("/bogus")
      H.wait("the notice", function()
        local s = sidechat.current()
        return #s.entries == 7
      end)
      local before = H.lines()
      local id = sidechat.current().id
      H.eq({
        "# tell me a story (demo)",
        "",
        "## You",
        "tell me a story",
        "",
        "## Assistant",
        stopped_text,
        "_(stopped)_",
        "",
        "## You",
        "list files",
        "",
        "## Assistant",
        "[demo model, offline] Listing ..",
        "⚙ list . · done",
        "    . is empty.",
        "",
        "## Assistant",
        "[demo model, offline] Done. The tool answered:",
        ". is empty.",
        "",
        "_warning: Unknown command /bogus; nothing was sent to the model. Type /help for the list, or start with // to send a slash. You typed: /bogus_",
      }, before, "transcript before")
      -- A session of another directory, which the list leaves out.
      local err = sidechat.client():request_sync("session/create", { workspaceRoot = H.tmp })
      H.eq(nil, err, "creating a session elsewhere")

      sidechat.shutdown()
      H.eq({ "# New chat", "", "_Type below and press <CR> (normal mode) or <C-s> (insert mode) to send._" }, (function()
        view.redraw()
        return H.lines()
      end)(), "the transcript with no session")

      local offered
      vim.ui.select = function(items, opts, on_choice)
        offered = {}
        for _, item in ipairs(items) do
          table.insert(offered, { id = item.id, label = opts.format_item(item) })
        end
        on_choice(items[1])
      end
      vim.cmd("SidechatSessions")
      H.wait("the session to load", function()
        local s = sidechat.current()
        return s and s.id == id and s.loaded
      end)
      H.eq(1, #offered, "sessions offered")
      H.eq(id, offered[1].id, "the session offered")
      H.truthy(offered[1].label:match("^tell me a story · demo · %d%d%d%d%-%d%d%-%d%d %d%d:%d%d · idle$"), "label " .. offered[1].label)
      H.wait_lines(before, "transcript redrawn from the daemon")
    end,
  },
  {
    ":SidechatNew shows a new, empty session of this directory",
    function()
      local old = sidechat.current().id
      vim.cmd("SidechatNew")
      H.wait("the new session", function()
        local s = sidechat.current()
        return s.id ~= old and s.loaded
      end)
      H.wait_lines({ "# New chat (demo)" })
      local err, list = sidechat.client():request_sync("session/list", { workspaceRoot = H.ws })
      H.eq(nil, err, "session/list")
      H.eq({ sidechat.current().id, old }, vim.tbl_map(function(s)
        return s.id
      end, list.sessions), "this directory's sessions, newest first")
    end,
  },
})
