-- What one streamed delta costs the editor: applying the event and redrawing the transcript
-- buffer, with a long session above the streaming answer. Run:
--   nvim --headless --clean -l editors/neovim/bench/render.lua [messages] [deltas]
local plugin = vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h:h")
vim.opt.rtp:prepend(plugin)
local session_mod = require("sidechat.session")
local view = require("sidechat.view")

local messages = tonumber(arg[1]) or 1000
local deltas = tonumber(arg[2]) or 2000

local s = session_mod.new(nil, "ses_bench")
s.info = { title = "Bench", model = "demo", changedFiles = {} }
s.loaded = true
local seq = 0
for i = 1, messages do
  seq = seq + 1
  local role = i % 2 == 1 and "user" or "assistant"
  local text = ("Line one of message %d.\nLine two, a little longer than the first one.\nLine three."):format(i)
  s:add_entry({ id = "msg_" .. i, seq = seq, role = role, status = "complete", blocks = { { type = "text", text = text } } })
end
s.event_seq = seq
view.buffers()
view.show(s)
view.redraw()
s:apply({ seq = seq + 1, event = { kind = "messageStarted", messageId = "msg_live", role = "assistant" } })
s.event_seq = seq + 1

local function run(n)
  local start = vim.uv.hrtime()
  for i = 1, n do
    s.event_seq = s.event_seq + 1
    s:apply({ seq = s.event_seq, event = { kind = "textDelta", messageId = "msg_live", text = i % 12 == 0 and "word\n" or "word " } })
    view.redraw()
  end
  return (vim.uv.hrtime() - start) / n / 1000
end

run(math.floor(deltas / 10)) -- warm-up
local per_delta = run(deltas)
print(
  ("%d messages (%d buffer lines): %.1f µs per delta (event applied and transcript redrawn), %d deltas"):format(
    messages,
    vim.api.nvim_buf_line_count(view.state.transcript),
    per_delta,
    deltas
  )
)
