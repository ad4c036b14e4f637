-- Against the replay model: a delegate call shows its sub-agent at work, the sub-agent's
-- approval is shown at the root with who asks and answered there (allow, then deny), and a
-- fresh attach (as after reopening Neovim) shows the same from the transcripts.
local H = dofile(vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h") .. "/helpers.lua")

local script = H.tmp .. "/replay.json"
local function delegate(task)
  return { { name = "delegate", input = { task = task, tools = "all" } } }
end
vim.fn.writefile({
  vim.json.encode({
    turns = {
      { text = "Handing it over.", toolCalls = delegate("Write hello.txt saying hi") },
      { text = "The sub-agent wrote hello.txt." },
      { text = "Once more.", toolCalls = delegate("Write hello.txt again") },
      { text = "It was not allowed." },
    },
    delegated = {
      turns = {
        {
          text = "Writing it now.",
          toolCalls = { { name = "write_file", input = { path = "hello.txt", content = "hi\n" } } },
        },
        { text = "Wrote hello.txt." },
      },
    },
  }),
}, script)
H.setup({ env = { SIDECHAT_REPLAY_SCRIPT = script, SIDECHAT_ACCOUNT = "replay" } })

local sidechat = require("sidechat")
local approval = require("sidechat.approval")
local view = require("sidechat.view")

--- The transcript's first lines: the question and the start of the answer.
local ASKED = {
  "# please write hello (replay)",
  "",
  "## You",
  "please write hello",
  "",
  "## Assistant",
  "Handing it over.",
}
local WAITING = vim.list_extend(vim.deepcopy(ASKED), {
  '⚙ delegate "Write hello.txt saying hi" · awaiting approval',
  "    ↳ sub-agent waiting for your approval: write hello.txt (1 line) · awaiting approval",
  "    │ Writing it now.",
  "",
  "_waiting for approval (`ga` shows it)_",
})
local ANSWERED = vim.list_extend(vim.deepcopy(ASKED), {
  '⚙ delegate "Write hello.txt saying hi" · done',
  "    Wrote hello.txt.",
  "    ",
  "    files changed: hello.txt (+1 -0)",
  "",
  "## Assistant",
  "The sub-agent wrote hello.txt.",
})
--- What the sub-agent wrote is the session's change too, marked as the sub-agent's.
local CHANGED = { "", "## Changed files", "hello.txt  +1 −0  (by sub-agent)" }
local WINDOW = {
  "asked by the sub-agent working on: Write hello.txt saying hi",
  "write hello.txt (1 line)",
  "",
  "+++ hello.txt",
  "+hi",
  "",
  "w saves: write_file(hello.txt)",
  "a allow once · A allow always · w always in this workspace · d deny · D deny, saying why · q hide",
}

local function approval_window(task)
  H.wait("the sub-agent's approval in the window", function()
    return approval.is_open() and approval.state.approval.asked_by == task
  end)
  return vim.api.nvim_buf_get_lines(approval.state.buf, 0, -1, false)
end

local session_id

H.run({
  {
    "the sub-agent works inside its call and its approval waits at the root, saying who asks",
    function()
      sidechat.open()
      sidechat.send("please write hello")
      H.eq(WINDOW, approval_window("Write hello.txt saying hi"), "the approval window")
      H.wait_lines(WAITING, "transcript while the sub-agent waits")
      local s = sidechat.current()
      session_id = s.id
      H.eq("awaitingApproval", s.state, "the session's state")
      H.eq({ "Write hello.txt saying hi" }, vim.tbl_map(function(d)
        return d.task
      end, s.delegated), "the delegated approvals' tasks")
    end,
  },
  {
    "a fresh attach shows the same from the transcript and the sub-agent's own",
    function()
      H.stop_daemons()
      sidechat.attach(session_id)
      sidechat.open()
      H.eq(WINDOW, approval_window("Write hello.txt saying hi"), "the approval window after the attach")
      H.wait_lines(WAITING, "transcript after the attach")
    end,
  },
  {
    "allowed from the root: the sub-agent writes, answers, and the parent goes on",
    function()
      H.focus(approval.state.buf)
      H.press("a")
      H.idle_with(4)
      H.wait_lines(vim.list_extend(vim.deepcopy(ANSWERED), CHANGED), "transcript after the answer")
      H.eq(false, approval.is_open(), "the approval window is closed")
      H.eq({ "hi" }, vim.fn.readfile(vim.fn.getcwd() .. "/hello.txt"), "the file the sub-agent wrote")
      -- Its diff comes from the sub-agent's change: nothing before, the file after.
      local child = sidechat.current().info.children[1]
      local at = vim.fn.index(H.lines(), CHANGED[3]) + 1
      H.eq({ kind = "file", path = "hello.txt", childSessionId = child }, view.span(at), "the file's line")
      local diffed
      sidechat.diff("hello.txt", function(err)
        diffed = err or true
      end, child)
      H.wait("the diff", function()
        return diffed
      end)
      H.eq(true, diffed, "the diff opened")
      local before = vim.fn.bufnr("sidechat://before/hello.txt")
      H.eq({ "" }, vim.api.nvim_buf_get_lines(before, 0, -1, false), "the text before the sub-agent wrote it")
      H.eq({ "hi" }, vim.api.nvim_buf_get_lines(0, 0, -1, false), "the file as it is")
      vim.cmd("tabclose")
    end,
  },
  {
    "denied from the root: the call fails with the sub-agent's report, shown after an attach too",
    function()
      sidechat.send("and again")
      approval_window("Write hello.txt again")
      sidechat.approve("deny")
      H.idle_with(8)
      local denied = vim.list_extend(vim.deepcopy(ANSWERED), {
        "",
        "## You",
        "and again",
        "",
        "## Assistant",
        "Once more.",
        '⚙ delegate "Write hello.txt again" · error',
        "    status: failed",
        "    note: the user denied the sub-agent's call: write hello.txt (1 line)",
        "    last message: Writing it now.",
        "    files changed: none",
        "    failed calls:",
        "    - write hello.txt (1 line): The user denied this tool call. Do not retry it; ask the user how to proceed if needed.",
        "",
        "## Assistant",
        "It was not allowed.",
        unpack(CHANGED),
      })
      H.wait_lines(denied, "transcript after the denial")
      H.stop_daemons()
      sidechat.attach(session_id)
      sidechat.open()
      H.wait_lines(denied, "transcript after an attach")
    end,
  },
})
