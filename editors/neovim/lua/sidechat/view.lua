--- The chat column: a transcript buffer (markdown, read-only, redrawn from the session) above a
--- prompt buffer that always sends. Redraws are coalesced to one per event-loop turn and
--- rewrite only the lines from the first one that changed.
local config = require("sidechat.config")
local render = require("sidechat.render")
local winbar = require("sidechat.winbar")

local M = {}

M.state = {
  transcript = nil, -- buffer
  prompt = nil, -- buffer
  session = nil, -- sidechat.Session shown
  rendered = nil, -- the last render result
  scheduled = false,
}

local folds = {}
local spans = {}

--- The namespace of the transcript's dimmed lines (rewound messages).
M.ns = vim.api.nvim_create_namespace("sidechat_transcript")

--- 'foldexpr' of the transcript: thinking and tool output fold away.
function M.foldexpr()
  local level = folds[vim.v.lnum]
  return level == nil and 0 or level
end

--- 'foldtext': the fold's first line and how many lines it hides.
function M.foldtext()
  local first = vim.fn.getline(vim.v.foldstart)
  return ("%s  (%s)"):format(first, render.more_lines(vim.v.foldend - vim.v.foldstart))
end

--- What the transcript line `lnum` stands for ({kind = "file" | "waiting", ...}), if anything.
function M.span(lnum)
  return spans[lnum]
end

local function valid(buf)
  return buf and vim.api.nvim_buf_is_valid(buf)
end

local function map(buf, mode, lhs, fn, desc)
  if lhs then
    vim.keymap.set(mode, lhs, fn, { buffer = buf, nowait = true, silent = true, desc = desc })
  end
end

local function scratch(name, filetype)
  local buf = vim.api.nvim_create_buf(false, true)
  vim.api.nvim_buf_set_name(buf, name)
  vim.bo[buf].buftype = "nofile"
  vim.bo[buf].bufhidden = "hide"
  vim.bo[buf].swapfile = false
  vim.bo[buf].filetype = filetype
  return buf
end

--- The transcript and prompt buffers, created once, with their keys.
function M.buffers()
  local st = M.state
  local keys = config.options.keys
  local api = require("sidechat")
  if not valid(st.transcript) then
    st.transcript = scratch("sidechat://transcript", "markdown")
    st.rendered = nil
    vim.bo[st.transcript].formatlistpat = M.LIST_PATTERN
    vim.bo[st.transcript].modifiable = false
    local b = st.transcript
    map(b, "n", keys.open, api.open_under_cursor, "sidechat: open the changed file, or toggle a fold")
    map(b, "n", keys.diff, api.diff_under_cursor, "sidechat: the changed file's diff")
    map(b, "n", keys.withdraw, api.withdraw_under_cursor, "sidechat: withdraw the waiting message")
    map(b, "n", keys.delete_note, api.delete_note_under_cursor, "sidechat: delete the carry-over note")
    map(b, "n", keys.older, api.older, "sidechat: load older entries")
    map(b, "n", keys.undo, api.undo_under_cursor, "sidechat: undo to before this message (files and conversation)")
    map(b, "n", keys.fork, api.fork_under_cursor, "sidechat: fork a new session at this message")
    map(b, "n", keys.resume, api.resume_turn, "sidechat: answer the unanswered turn")
    map(b, "n", keys.approvals, api.show_approval, "sidechat: show the pending approval")
    map(b, "n", keys.stop, api.stop, "sidechat: stop the run")
    map(b, "n", keys.close, M.close, "sidechat: close the chat")
    M.redraw()
  end
  if not valid(st.prompt) then
    st.prompt = scratch("sidechat://prompt", "markdown")
    local b = st.prompt
    map(b, "n", keys.send, api.submit, "sidechat: send")
    map(b, "i", keys.send_insert, api.submit, "sidechat: send")
    map(b, "n", keys.stop, api.stop, "sidechat: stop the run")
    require("sidechat.complete").attach(b)
    require("sidechat.attach").attach_buffer(b)
  end
  return st.transcript, st.prompt
end

local function windows_of(buf)
  if not valid(buf) then
    return {}
  end
  return vim.fn.win_findbuf(buf)
end

function M.is_open()
  return #windows_of(M.state.transcript) > 0
end

--- Where a wrapped line of the transcript continues: under the text of a list item, or of a
--- table row such as `/help`'s ("  /model <id>      switch…": under "switch"), so that text
--- the daemon sends unwrapped reads well at any width.
M.LIST_PATTERN = [[^\s*\(/\S\+\(\s[^ ]\+\)\?\s\{2,}\|[-*+]\s\+\|\d\+[.)]\s\+\|>\s*\)]]

local function set_window_options(win, transcript)
  local wo = vim.wo[win]
  -- Clients wrap: the daemon never breaks lines to a width, so long lines wrap at words,
  -- their continuations indented like their first line.
  wo.wrap = true
  wo.linebreak = true
  wo.breakindent = true
  wo.breakindentopt = "list:-1"
  wo.number = false
  wo.relativenumber = false
  wo.signcolumn = "no"
  wo.winfixwidth = true
  if transcript then
    wo.foldmethod = "expr"
    wo.foldexpr = "v:lua.require'sidechat.view'.foldexpr()"
    wo.foldtext = "v:lua.require'sidechat.view'.foldtext()"
    wo.foldlevel = 0
    wo.foldenable = true
    wo.conceallevel = 2
    wo.winbar = winbar.text(M.state.session)
  else
    wo.winfixheight = true
  end
end

--- Opens the chat column on the right, the prompt focused.
function M.open()
  local transcript, prompt = M.buffers()
  if M.is_open() then
    local win = windows_of(prompt)[1]
    if win then
      vim.api.nvim_set_current_win(win)
    end
    return
  end
  local width = config.options.width
  if width < 1 then
    width = math.floor(vim.o.columns * width)
  end
  vim.cmd("botright vsplit")
  local twin = vim.api.nvim_get_current_win()
  vim.api.nvim_win_set_buf(twin, transcript)
  vim.api.nvim_win_set_width(twin, math.max(width, 20))
  set_window_options(twin, true)
  vim.cmd("belowright split")
  local pwin = vim.api.nvim_get_current_win()
  vim.api.nvim_win_set_buf(pwin, prompt)
  vim.api.nvim_win_set_height(pwin, config.options.prompt_height)
  set_window_options(pwin, false)
  M.show_attachments(M.state.attachments or {})
  M.follow(true)
end

function M.close()
  local st = M.state
  for _, buf in ipairs({ st.prompt, st.transcript }) do
    for _, win in ipairs(windows_of(buf)) do
      if #vim.api.nvim_list_wins() > 1 then
        vim.api.nvim_win_close(win, false)
      end
    end
  end
end

function M.toggle()
  if M.is_open() then
    M.close()
  else
    M.open()
  end
end

--- Shows `session` in the transcript (nil: a chat not created yet).
---@param session sidechat.Session?
function M.show(session)
  M.state.session = session
  M.schedule()
end

--- Redraws once the current event-loop turn is done, however many changes it brought.
function M.schedule()
  if M.state.scheduled then
    return
  end
  M.state.scheduled = true
  vim.schedule(function()
    M.state.scheduled = false
    M.redraw()
  end)
end

--- Keeps windows that showed the end of the transcript at its end.
function M.follow(force, old_count)
  local buf = M.state.transcript
  local count = vim.api.nvim_buf_line_count(buf)
  for _, win in ipairs(windows_of(buf)) do
    local line = vim.api.nvim_win_get_cursor(win)[1]
    if force or win ~= vim.api.nvim_get_current_win() or (old_count and line >= old_count) then
      vim.api.nvim_win_set_cursor(win, { count, 0 })
    end
  end
end

--- Writes the session's lines into the transcript buffer, from the first line that differs.
function M.redraw()
  local st = M.state
  if not valid(st.transcript) then
    return
  end
  local r = st.session and render.session(st.session) or render.empty()
  local old = st.rendered and st.rendered.lines or vim.api.nvim_buf_get_lines(st.transcript, 0, -1, false)
  local new = r.lines
  local first = 1
  local n = math.min(#old, #new)
  while first <= n and old[first] == new[first] do
    first = first + 1
  end
  folds = r.folds
  spans = r.spans
  st.rendered = r
  M.update_winbar()
  -- Statusline items (require("sidechat").statusline()) follow the session too.
  vim.cmd("redrawstatus")
  if first > #old and first > #new then
    return
  end
  local old_count = vim.api.nvim_buf_line_count(st.transcript)
  vim.bo[st.transcript].modifiable = true
  vim.api.nvim_buf_set_lines(st.transcript, first - 1, -1, false, vim.list_slice(new, first))
  vim.bo[st.transcript].modifiable = false
  M.dim(st.transcript, r)
  M.highlight(st.transcript, r)
  M.follow(false, old_count)
end

--- Dims the lines of rewound messages (`session/rewind`): kept to read, no longer sent.
function M.dim(buf, r)
  vim.api.nvim_buf_clear_namespace(buf, M.ns, 0, -1)
  for lnum, span in pairs(r.spans) do
    if span.kind == "rewound" then
      vim.api.nvim_buf_set_extmark(buf, M.ns, lnum - 1, 0, {
        end_row = lnum,
        end_col = 0,
        hl_group = "SidechatRewound",
        hl_eol = true,
        priority = 200,
      })
    end
  end
end

--- The namespace of highlighted parts of transcript lines (attachment chips, images).
M.marks_ns = vim.api.nvim_create_namespace("sidechat_marks")

--- Highlights the parts of lines the render marked (`r.marks`).
function M.highlight(buf, r)
  vim.api.nvim_buf_clear_namespace(buf, M.marks_ns, 0, -1)
  for lnum, marks in pairs(r.marks) do
    for _, m in ipairs(marks) do
      vim.api.nvim_buf_set_extmark(buf, M.marks_ns, lnum - 1, m[1], { end_col = m[2], hl_group = m[3] })
    end
  end
end

--- Redraws the transcript window's winbar, and turns its spinner while the session works.
function M.update_winbar()
  local session = M.state.session
  local bar = winbar.text(session)
  for _, win in ipairs(windows_of(M.state.transcript)) do
    vim.wo[win].winbar = bar
  end
  winbar.spin(session ~= nil and session.state == "running" and M.is_open(), M.update_winbar)
end

--- The transcript buffer's lines, as shown.
function M.lines()
  return vim.api.nvim_buf_get_lines(M.state.transcript, 0, -1, false)
end

--- Names what goes with the next message in the prompt window's bar (empty: nothing).
---@param attachments { name: string }[]
function M.show_attachments(attachments)
  M.state.attachments = attachments
  local names = {}
  for _, a in ipairs(attachments) do
    table.insert(names, "📎 " .. a.name)
  end
  local bar = table.concat(names, "  ")
  for _, win in ipairs(windows_of(M.state.prompt)) do
    vim.wo[win].winbar = bar
  end
end

--- Takes the prompt's text, leaving it empty.
function M.take_prompt()
  local buf = select(2, M.buffers())
  local text = table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), "\n")
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, {})
  return text
end

--- Puts text that was not acknowledged back at the top of the prompt, above what is there.
function M.restore_prompt(text)
  local buf = select(2, M.buffers())
  local current = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
  local lines = vim.split(text, "\n", { plain = true })
  if not (#current == 1 and current[1] == "") then
    vim.list_extend(lines, current)
  end
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
end

return M
