-- The session model read the events of a `delegate` call in whichever order they come: a
-- sub-agent's events before its call is announced running are kept, and a `running` that comes
-- after the sub-agent asked for an approval does not hide it.
local H = dofile(vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h") .. "/helpers.lua")
local session_mod = require("sidechat.session")

local INPUT = { task = "Write hello.txt", tools = "all" }
local APPROVAL = {
  approvalId = "apr_c",
  runId = "run_c",
  callId = "call_w",
  tool = "write_file",
  input = { path = "hello.txt", content = "hi\n" },
  summary = "write hello.txt (1 line)",
  createdAt = "t",
}

local function entry(id, seq, role, blocks)
  return { id = id, seq = seq, role = role, blocks = blocks, status = "complete", createdAt = "t" }
end

--- Applies `events` to `s`, numbered on from its last.
local function feed(s, events)
  for _, event in ipairs(events) do
    s.event_seq = s.event_seq + 1
    s:apply({ sessionId = "ses_1", seq = s.event_seq, runId = "run_1", event = event })
  end
end

local function delegated(child_seq, event)
  return { kind = "delegation", callId = "call_d", childSessionId = "ses_c", childSeq = child_seq, event = event }
end

H.run({
  {
    "a sub-agent's events before its call runs are kept, and a late running keeps its approval",
    function()
      local s = session_mod.new({}, "ses_1")
      feed(s, {
        { kind = "runStarted", model = "replay" },
        {
          kind = "messageCompleted",
          entry = entry("m1", 2, "assistant", { { type = "toolCall", id = "call_d", name = "delegate", input = INPUT } }),
        },
        { kind = "toolCallStarted", callId = "call_d", tool = "delegate", input = INPUT, summary = 'delegate "Write hello.txt"' },
        delegated(1, { kind = "messageCompleted", entry = entry("c0", 1, "user", { { type = "text", text = "Write hello.txt" } }) }),
        delegated(2, { kind = "runStarted", model = "replay" }),
        delegated(3, { kind = "messageStarted", messageId = "c1", role = "assistant" }),
        delegated(4, { kind = "textDelta", messageId = "c1", text = "Writing it." }),
        delegated(5, { kind = "toolCallStarted", callId = "call_w", tool = "write_file", input = APPROVAL.input, summary = APPROVAL.summary }),
        { kind = "toolCallUpdated", callId = "call_d", status = "awaitingApproval" },
        delegated(6, { kind = "approvalRequested", approval = APPROVAL }),
        { kind = "toolCallUpdated", callId = "call_d", status = "running" },
      })
      H.eq("awaitingApproval", s:tool_status("call_d"), "the call")
      H.eq("awaitingApproval", s.state, "the session")
      H.eq({
        childSessionId = "ses_c",
        childSeq = 6,
        state = "awaitingApproval",
        step = { callId = "call_w", summary = APPROVAL.summary, status = "awaitingApproval" },
        text = "Writing it.",
      }, s.delegations.call_d, "the sub-agent")
      feed(s, {
        delegated(7, { kind = "approvalResolved", approvalId = "apr_c", decision = "allow" }),
        { kind = "toolCallUpdated", callId = "call_d", status = "running" },
      })
      H.eq("running", s:tool_status("call_d"), "the call once answered")
      H.eq("running", s.delegations.call_d.state, "the sub-agent once answered")
    end,
  },
})
