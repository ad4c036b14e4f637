-- The daemon killed: a message, a restart, the transcript redrawn, the pending approval back,
-- nothing typed lost.
local H = dofile(vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h") .. "/helpers.lua")
H.setup()
local sidechat = require("sidechat")
local view = require("sidechat.view")
local approval = require("sidechat.approval")

local function kill_daemon()
  local client = sidechat.client()
  local pid = client:pid()
  H.truthy(pid, "the daemon's pid")
  vim.uv.kill(pid, "sigkill")
  return pid
end

local function wait_restarted(old_pid)
  H.wait("a restarted daemon", function()
    local client = sidechat.client()
    local pid = client:pid()
    return client.status == "ready" and pid and pid ~= old_pid
  end)
end

H.run({
  {
    "killed while an approval waits: redrawn, the approval back, the prompt kept",
    function()
      vim.cmd("Sidechat")
      H.type_prompt("create a.txt with one")
      sidechat.submit()
      H.wait("the approval window", function()
        return approval.is_open()
      end)
      local approval_id = approval.state.approval.approvalId
      local waiting = {
        "# create a.txt with one (demo)",
        "",
        "## You",
        "create a.txt with one",
        "",
        "## Assistant",
        "[demo model, offline] Creating a.txt.",
        "⚙ write a.txt (1 line) · awaiting approval",
        "",
        "_waiting for approval (`ga` shows it)_",
      }
      H.wait_lines(waiting, "transcript before the kill")
      H.type_prompt("words not sent yet")

      local old = kill_daemon()
      wait_restarted(old)
      H.wait("the approval window back", function()
        return approval.is_open()
      end)
      H.eq(approval_id, approval.state.approval.approvalId, "the approval shown after the restart")
      H.wait_lines(waiting, "transcript after the restart")
      H.eq("words not sent yet", H.prompt_text(), "the prompt")
      local warned = vim.tbl_filter(function(n)
        return n.msg:match("^sidechat: the sidechat daemon exited %(code %d+, signal 9%); restarting it in [%d.]+ s$")
      end, H.notes)
      H.eq(1, #warned, "warnings that the daemon exited")

      -- Answered with the window's own key.
      H.focus(approval.state.buf)
      H.press("a")
      H.wait("the run to finish", function()
        local s = sidechat.current()
        return s.state == "idle" and s.info and #s.info.changedFiles == 1
      end)
      H.wait_lines({
        "# create a.txt with one (demo)",
        "",
        "## You",
        "create a.txt with one",
        "",
        "## Assistant",
        "[demo model, offline] Creating a.txt.",
        "⚙ write a.txt (1 line) · done",
        "    Created a.txt (+1 -0 lines).",
        "",
        "## Assistant",
        "[demo model, offline] Done. The tool answered:",
        "Created a.txt (+1 -0 lines).",
        "",
        "## Changed files",
        "a.txt  +1 −0",
      })
      H.eq({ "one" }, vim.fn.readfile(H.ws .. "/a.txt"), "a.txt")
      H.eq("words not sent yet", H.prompt_text(), "the prompt")
    end,
  },
  {
    "sent while the daemon is down: delivered once it is back",
    function()
      local old = kill_daemon()
      H.wait("the plugin to notice", function()
        return sidechat.client().status ~= "ready"
      end)
      H.type_prompt("list files")
      sidechat.submit()
      wait_restarted(old)
      H.wait("the answer", function()
        local s = sidechat.current()
        return s.state == "idle" and #s.entries == 8
      end)
      local lines = H.lines()
      H.eq({
        "",
        "## You",
        "list files",
        "",
        "## Assistant",
        "[demo model, offline] Listing ..",
        "⚙ list . · done",
        "    a.txt",
        "",
        "## Assistant",
        "[demo model, offline] Done. The tool answered:",
        "a.txt",
        "",
        "## Changed files",
        "a.txt  +1 −0",
      }, vim.list_slice(lines, 14), "the end of the transcript")
      H.eq("", H.prompt_text(), "the prompt")
    end,
  },
  {
    "sent as the daemon dies: back in the prompt or delivered, never twice",
    function()
      H.type_prompt("read a.txt")
      sidechat.submit()
      local old = kill_daemon()
      wait_restarted(old)
      H.wait("the message to be stored or back in the prompt", function()
        local s = sidechat.current()
        return s.loaded and (H.prompt_text() == "read a.txt" or #s.entries > 8)
      end)
      if H.prompt_text() == "read a.txt" then
        H.focus(view.state.prompt)
        H.press("<CR>")
      end
      H.wait("the turn to be answered or left unanswered", function()
        local s = sidechat.current()
        return #s.entries > 8 and (s.state == "idle" or s.state == "unanswered")
      end)
      if sidechat.current().state == "unanswered" then
        H.eq("_this turn has no answer yet: `R` or :SidechatResume answers it_", H.lines()[#H.lines()], "last line")
        H.focus(view.state.transcript)
        H.press("R")
      end
      H.wait("the answer", function()
        local s = sidechat.current()
        local last = s.entries[#s.entries]
        return s.state == "idle" and last.role == "assistant" and last.blocks[1].text:match("Done")
      end)
      local asked = 0
      for _, line in ipairs(H.lines()) do
        if line == "read a.txt" then
          asked = asked + 1
        end
      end
      H.eq(1, asked, "times the message shows")
      H.eq("", H.prompt_text(), "the prompt")
    end,
  },
  {
    "killed mid-answer: the turn shows unanswered and R answers it",
    function()
      -- A slower daemon from the next start, so the answer is still streaming when it is killed.
      require("sidechat.config").options.env.SIDECHAT_DEMO_DELAY_MS = "40"
      wait_restarted(kill_daemon())
      local s = sidechat.current()
      local before = #s.entries
      sidechat.send("tell me a story")
      H.wait("the story to stream", function()
        local live = s.live[1]
        return live and #live.text > 60
      end)
      wait_restarted(kill_daemon())
      H.wait("the turn left unanswered", function()
        return s.state == "unanswered" and #s.live == 0
      end)
      H.eq(before + 2, #s.entries, "entries: the question and what the restarted daemon noted")
      local lines = H.lines()
      H.eq({
        "",
        "## You",
        "tell me a story",
        "",
        "_error: interrupted: sidechat stopped during the run_",
        "",
        "## Changed files",
        "a.txt  +1 −0",
        "",
        "_this turn has no answer yet: `R` or :SidechatResume answers it_",
      }, vim.list_slice(lines, #lines - 9), "the end of the transcript")
      H.focus(view.state.transcript)
      H.press("R")
      H.wait("the answer", function()
        local last = s.entries[#s.entries]
        return s.state == "idle" and last.role == "assistant"
      end)
      local last = s.entries[#s.entries]
      H.eq("complete", last.status, "the answer's status")
      H.truthy(last.blocks[1].text:match("^%[demo model, offline%] Once upon a time.*the whole point%.$"), "the whole story")
      require("sidechat.config").options.env.SIDECHAT_DEMO_DELAY_MS = nil
    end,
  },
})
