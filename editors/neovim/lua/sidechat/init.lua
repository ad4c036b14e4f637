--- sidechat for Neovim: a chat column backed by `sidechat serve`.
---
--- `require("sidechat").setup{}` once; then `:Sidechat` and friends (see the README), or the
--- functions below from mappings of your own.
local config = require("sidechat.config")
local protocol = require("sidechat.protocol")
local client_mod = require("sidechat.client")
local session_mod = require("sidechat.session")
local view = require("sidechat.view")
local approval = require("sidechat.approval")
local render = require("sidechat.render")

local M = {}

--- What the plugin holds between commands.
---@class sidechat.State
---@field sessions table<string, sidechat.Session?> the sessions seen, by id
---@field current sidechat.Session? the session shown in the chat column
---@field client sidechat.Client? the connection, with the plugin's listeners
---@field attachments sidechat.Attachment[] attached to the next message sent from the prompt
---@field retry { text: string, id: string }? a message given back to the prompt, resent under the same id

---@type sidechat.State
local st = {
  sessions = {}, -- id -> sidechat.Session
  current = nil, -- sidechat.Session shown in the chat column
  client = nil, -- sidechat.Client with our listeners
  attachments = {}, -- attached to the next message sent from the prompt
  retry = nil, -- { text, id }: a message given back to the prompt, resent under the same id
}

local function notify(msg, level)
  vim.notify("sidechat: " .. msg, level or vim.log.levels.INFO)
end

local function err_text(err)
  if type(err) == "table" then
    return err.message or vim.inspect(err)
  end
  return tostring(err)
end

--- Sends `method` and tells the user how it went: an error as "`failed`: <message>", an answer
--- as what `told(result)` says (nothing when it returns nil); then `done(err, result)`.
---@param told fun(result: table): string?
---@param done fun(err: sidechat.RpcError?, result: table?)?
local function request_told(method, params, failed, told, done)
  M.client():request(method, params, function(err, result)
    if err then
      notify(failed .. ": " .. err_text(err), vim.log.levels.ERROR)
    else
      local words = told(result)
      if words then
        notify(words)
      end
    end
    if done then
      done(err, result)
    end
  end)
end

--- A mapping that calls `fn(span)` when the transcript line under the cursor is a `kind`.
local function under_cursor(kind, fn)
  return function()
    local span = view.span(vim.api.nvim_win_get_cursor(0)[1])
    if span and span.kind == kind then
      fn(span)
    end
  end
end

--- The shown session; when none is shown, says so (with `why`, what needs one) and gives nil.
---@param why string?
---@return sidechat.Session?
local function shown(why)
  if not st.current then
    notify("no session is shown" .. (why and (": " .. why) or ""))
  end
  return st.current
end

--- Redraws and syncs the approval window when the shown session changes.
---@param session sidechat.Session
---@param what string the event kind or reason that changed it
local function on_session_change(session, what)
  if session ~= st.current then
    return
  end
  view.schedule()
  approval.sync(session)
  local last = session.entries[#session.entries]
  if what == protocol.event.runFinished or (what == protocol.event.messageCompleted and last and last.role == "tool") then
    -- Spend and changed files, once a run or a step's tools are done.
    session:refresh_info()
  end
  if what == protocol.event.compaction then
    -- The history shrank; a /compact outside a run sends no budget of its own.
    session.client:request(protocol.method.sessionBudget, { sessionId = session.id }, function(err, result)
      if not err and result then
        session.budget = result.snapshot
        view.schedule()
      end
    end)
  end
end

--- The connection, with the plugin's listeners on it.
---@return sidechat.Client
function M.client()
  if st.client then
    return st.client
  end
  local c = client_mod.get()
  c:on_event(function(params)
    local s = st.sessions[params.sessionId]
    if s then
      s:event(params)
    end
    local ev = params.event
    if ev.kind == protocol.event.notice and (s == nil or s == st.current) then
      notify(ev.message, ev.level == "error" and vim.log.levels.ERROR or vim.log.levels.WARN)
    end
  end)
  c:on_ready(function(restarted)
    if not restarted then
      return
    end
    approval.state.dismissed = {}
    for _, s in pairs(st.sessions) do
      s:refetch(true)
    end
  end)
  st.client = c
  return c
end

---@param opts sidechat.Config|table?
function M.setup(opts)
  config.set(opts)
  require("sidechat.highlights").setup()
  vim.api.nvim_create_autocmd("VimLeavePre", {
    group = vim.api.nvim_create_augroup("sidechat", { clear = true }),
    callback = function()
      if st.client then
        st.client:stop()
      end
    end,
  })
end

--- The session shown in the chat column, if any.
---@return sidechat.Session?
function M.current()
  return st.current
end

--- Shows session `id` in the chat column: redrawn from `session/transcript`, then live.
---@param id string
---@param done fun(err: sidechat.RpcError?, session: sidechat.Session?)?
function M.attach(id, done)
  local c = M.client()
  local s = st.sessions[id]
  if not s then
    s = session_mod.new(c, id)
    s:on_change(on_session_change)
    st.sessions[id] = s
  end
  st.current = s
  view.show(s)
  approval.close()
  s:refetch(s.loaded == false, function(err)
    if err then
      notify("cannot load the session: " .. err_text(err), vim.log.levels.ERROR)
    else
      approval.sync(s)
      c:request(protocol.method.sessionBudget, { sessionId = id }, function(e, result)
        if not e and result and not s.budget then
          s.budget = result.snapshot
          view.schedule()
        end
      end)
    end
    if done then
      done(err, not err and s or nil)
    end
  end)
  return s
end

--- Loads the page of older entries of the shown session above what is shown, keeping the
--- cursor on the entry it was on; says so when the whole transcript is shown already.
---@param done fun(err: sidechat.RpcError?, loaded: boolean)?
function M.older(done)
  local s = st.current
  if not s then
    if done then
      done(nil, false)
    end
    return
  end
  if not s.older_before then
    notify("the whole transcript is shown")
    if done then
      done(nil, false)
    end
    return
  end
  s:load_older(function(err, loaded)
    if err then
      notify("cannot load older entries: " .. err_text(err), vim.log.levels.ERROR)
    end
    if done then
      done(err, loaded)
    end
  end)
end

--- A session's title from its first message: the first line that has text, shortened.
local function title_of(text)
  local line = vim.trim((text or ""):match("[^\n]*%S[^\n]*") or "")
  if vim.fn.strchars(line) > 60 then
    line = vim.fn.strcharpart(line, 0, 59) .. "…"
  end
  return line ~= "" and line or nil
end

--- Creates a session for the working directory and shows it.
---@param done fun(err: sidechat.RpcError?, session: sidechat.Session?)?
---@param title string? the daemon's default ("New chat") when nil
function M.new_session(done, title)
  M.client():request(protocol.method.sessionCreate, { workspaceRoot = vim.fn.getcwd(), title = title }, function(err, info)
    if err then
      notify("cannot create a session: " .. err_text(err), vim.log.levels.ERROR)
      if done then
        done(err)
      end
      return
    end
    M.attach(info.id, done)
  end)
end

--- Runs `fn(session)` with the shown session, creating one first if none is shown;
--- `on_fail(err)` when it cannot be created.
local function with_session(fn, on_fail, first_text)
  if st.current then
    return fn(st.current)
  end
  M.new_session(function(err, s)
    if err then
      if on_fail then
        on_fail(err)
      end
    else
      fn(s)
    end
  end, title_of(first_text))
end

--- Lists the working directory's sessions and resumes the one picked (`vim.ui.select`).
function M.sessions()
  M.client():request(protocol.method.sessionList, { workspaceRoot = vim.fn.getcwd(), limit = 200 }, function(err, result)
    if err then
      return notify("cannot list sessions: " .. err_text(err), vim.log.levels.ERROR)
    end
    if #result.sessions == 0 then
      return notify("no sessions in " .. vim.fn.getcwd())
    end
    vim.ui.select(result.sessions, {
      prompt = "sidechat sessions",
      format_item = function(s)
        local when = (s.updatedAt or ""):gsub("T", " "):sub(1, 16)
        return ("%s · %s · %s · %s"):format(s.title, s.model, when, s.state)
      end,
    }, function(choice)
      if choice then
        M.attach(choice.id)
        view.open()
      end
    end)
  end)
end

local function new_id()
  return ("nvim-%x-%x"):format(vim.uv.hrtime(), math.random(0, 0x7fffffff))
end

--- Sends `text` to the shown session (a new session if none): a new turn, or while a run works
--- an interjection shown "waiting" until delivered.
---@param text string
---@param opts { attachments: sidechat.Attachment[]?, images: { mediaType: string, data: string }[]?, client_message_id: string?, on_fail: fun(err: sidechat.RpcError?, params: table?)?, on_sent: fun(result: table)? }?
function M.send(text, opts)
  opts = opts or {}
  with_session(function(s)
    local params = {
      sessionId = s.id,
      text = text,
      clientMessageId = opts.client_message_id or new_id(),
    }
    if opts.attachments and #opts.attachments > 0 then
      params.attachments = opts.attachments
    end
    if opts.images and #opts.images > 0 then
      params.images = opts.images
    end
    M.client():request(protocol.method.chatSend, params, function(err, result)
      if err then
        notify("not sent: " .. err_text(err), vim.log.levels.ERROR)
        if opts.on_fail then
          opts.on_fail(err, params)
        end
      elseif opts.on_sent then
        opts.on_sent(result)
      end
    end)
  end, function(err)
    if opts.on_fail then
      opts.on_fail(err, nil)
    end
  end, text)
end

--- Sends the prompt's text. It leaves the prompt at once and comes back to it if the daemon
--- does not acknowledge it (resent under the same id, so it is never stored twice).
function M.submit()
  local text = view.take_prompt()
  local attachments = st.attachments
  local attach = require("sidechat.attach")
  if vim.trim(text) == "" and #attachments == 0 and #attach.pending == 0 then
    return
  end
  local images = attach.take()
  st.attachments = {}
  view.show_attachments({})
  local id = (st.retry and st.retry.text == text) and st.retry.id or new_id()
  st.retry = nil
  M.send(text, {
    attachments = attachments,
    images = attach.wire(images),
    client_message_id = id,
    on_fail = function()
      st.retry = { text = text, id = id }
      st.attachments = attachments
      view.show_attachments(attachments)
      view.restore_prompt(text)
      attach.restore(images)
    end,
  })
end

--- Stops the shown session's run.
function M.stop()
  local s = st.current
  if not s then
    return
  end
  M.client():request(protocol.method.chatStop, { sessionId = s.id })
end

--- Answers the turn left unanswered (e.g. by a daemon that exited mid-run).
function M.resume_turn()
  local s = st.current
  if not s then
    return
  end
  M.client():request(protocol.method.chatResume, { sessionId = s.id })
end

--- Withdraws a waiting message (the newest when `pending_id` is nil).
---@param pending_id string?
---@param done fun(err: sidechat.RpcError?, result: table?)?
function M.withdraw(pending_id, done)
  local s = st.current
  if not s then
    return
  end
  if not pending_id then
    local last = s.waiting[#s.waiting]
    pending_id = last and last.pendingId
  end
  if not pending_id then
    return notify("no message is waiting")
  end
  request_told(protocol.method.interjectionCancel, { pendingId = pending_id }, "cannot withdraw", function(result)
    return not result.cancelled and ("too late to withdraw: the message is " .. result.status) or nil
  end, done)
end

--- The waiting message under the cursor; elsewhere in the transcript, nothing.
M.withdraw_under_cursor = under_cursor("waiting", function(span)
  M.withdraw(span.pendingId)
end)

--- Deletes a carry-over note (`note/delete`), so that the model is no longer sent it; the
--- transcript drops it when the daemon's `noteDeleted` event arrives. Without `message_id`,
--- the shown session's newest note.
---@param message_id string?
---@param done fun(err: sidechat.RpcError?, result: table?)?
function M.delete_note(message_id, done)
  local s = st.current
  if not s then
    return
  end
  if not message_id then
    for i = #s.entries, 1, -1 do
      local block = s.entries[i].blocks[1]
      if s.entries[i].role == "summary" and block and block.type == "summary" then
        if block.method == "carryOver" and not render.deleted_note(block) then
          message_id = s.entries[i].id
          break
        end
      end
    end
  end
  if not message_id then
    return notify("no carry-over note to delete")
  end
  request_told(protocol.method.noteDelete, { messageId = message_id }, "cannot delete the note", function(result)
    return not result.deleted and "the note was deleted already" or nil
  end, done)
end

--- The idle times `:SidechatRollover` offers without an argument; "custom…" asks for another.
M.ROLLOVER_CHOICES = { "off", "1h", "3h", "1d", "custom…" }

--- Sets the shown session's idle rollover (`session/update`): after that long without a turn,
--- the next one starts a new context with a carry-over note. `value` is `off` or a whole number
--- of `s`, `m`, `h` or `d` (`3h`, `1d`…); without one, picked with `vim.ui.select` (and
--- `vim.ui.input` for another time). `done(err, session)` gets the session as `session/get`
--- reads it back.
---@param value string?
---@param done fun(err: sidechat.RpcError?, session: sidechat.SessionInfo?)?
function M.rollover(value, done)
  local s = shown("the idle rollover is set per session")
  if not s then
    return
  end
  local c = M.client()
  local function set(v)
    c:request(protocol.method.sessionUpdate, { sessionId = s.id, rollover = v }, function(err)
      if err then
        notify("cannot set the idle rollover: " .. err_text(err), vim.log.levels.ERROR)
        return done and done(err)
      end
      c:request(protocol.method.sessionGet, { sessionId = s.id }, function(e, info)
        if e then
          notify("cannot read the session back: " .. err_text(e), vim.log.levels.ERROR)
        else
          s.info = info
          local now = info.rollover
          notify(now and ("a new context after " .. now .. " without a turn") or "idle rollover off")
        end
        if done then
          done(e, info)
        end
      end)
    end)
  end
  if value and vim.trim(value) ~= "" then
    return set(vim.trim(value))
  end
  c:request(protocol.method.sessionGet, { sessionId = s.id }, function(err, info)
    local current = (not err and info and info.rollover) or "off"
    vim.ui.select(M.ROLLOVER_CHOICES, {
      prompt = ("Idle rollover (now %s)"):format(current),
      format_item = function(item)
        return item == current and (item .. " (current)") or item
      end,
    }, function(choice)
      if choice == nil then
        return
      elseif choice == "custom…" then
        vim.ui.input({ prompt = "Idle rollover (off, or e.g. 90m, 7d): ", default = current }, function(text)
          if text and vim.trim(text) ~= "" then
            set(vim.trim(text))
          end
        end)
      else
        set(choice)
      end
    end)
  end)
end

--- The note under the cursor; elsewhere in the transcript, nothing.
M.delete_note_under_cursor = under_cursor("note", function(span)
  M.delete_note(span.messageId)
end)

--- Answers a pending approval: "allow", "allowAlways" (this session), "allowWorkspace" (saves
--- `extra.rule`, else the proposed rule, for the workspace) or "deny" (with `extra.reason`, told
--- to the model). Without `approval_id`, the one in the approval window (else the shown
--- session's oldest).
---@param decision "allow"|"allowAlways"|"allowWorkspace"|"deny"
---@param approval_id string?
---@param done fun(err: sidechat.RpcError?, result: table?)?
---@param extra { rule: string?, reason: string? }?
function M.approve(decision, approval_id, done, extra)
  local s = st.current
  if not approval_id then
    local in_window = approval.state.approval
    local first = s and s:pending_approvals()[1]
    approval_id = in_window and in_window.approvalId or (first and first.approvalId)
  end
  if not approval_id then
    notify("no approval is pending")
    return
  end
  local params = vim.tbl_extend("force", { approvalId = approval_id, decision = decision }, extra or {})
  request_told(protocol.method.approvalRespond, params, "approval not answered", function(result)
    return not result.applied and (result.message or ("already answered: " .. result.decision)) or nil
  end, done)
end

function M.show_approval()
  approval.reshow(st.current)
end

--- `<CR>` in the transcript: a changed file opens (in the window before the chat); elsewhere a
--- fold opens or closes.
function M.open_under_cursor()
  local span = view.span(vim.api.nvim_win_get_cursor(0)[1])
  local s = st.current
  if span and span.kind == "file" and s then
    local root = (s.info and s.info.workspaceRoot) or vim.fn.getcwd()
    local path = root .. "/" .. span.path
    vim.cmd("wincmd p")
    vim.cmd("edit " .. vim.fn.fnameescape(path))
    return
  end
  if vim.fn.foldlevel(".") > 0 then
    vim.cmd("normal! za")
  end
end

--- Whether the daemon answers `method` (from its `initialize` capabilities).
---@param method string
---@return boolean
function M.supports(method)
  local init = M.client().init_result
  return init ~= nil and vim.tbl_contains(init.capabilities.methods, method)
end

--- Shows what the session did to a changed file: its text before the session's first change
--- beside the file as it is now, in diff mode, in a new tab (needs `session/fileDiff`).
---@param path string relative to the session's workspace root
---@param done fun(err: sidechat.RpcError?)?
---@param child_session_id string? the sub-agent whose change it is (its `changedFiles` entry's)
function M.diff(path, done, child_session_id)
  local s = st.current
  if not s then
    return
  end
  local function finish(err)
    if done then
      done(err)
    end
  end
  if not M.supports(protocol.method.sessionFileDiff) then
    notify("this sidechat keeps no before/after of changed files (no session/fileDiff); <CR> opens the file")
    return finish({ code = -32601, message = "session/fileDiff unsupported" })
  end
  local params = { sessionId = s.id, path = path, childSessionId = child_session_id }
  M.client():request(protocol.method.sessionFileDiff, params, function(err, result)
    if err then
      notify("no diff of " .. path .. ": " .. err_text(err), vim.log.levels.ERROR)
      return finish(err)
    end
    if result.omitted then
      notify(path .. " is too large for a kept diff; opening it")
    end
    local root = (s.info and s.info.workspaceRoot) or vim.fn.getcwd()
    vim.cmd("tabnew " .. vim.fn.fnameescape(root .. "/" .. path))
    local ft = vim.bo.filetype
    if not result.omitted then
      vim.cmd("diffthis")
      vim.cmd("leftabove vnew")
      local buf = vim.api.nvim_get_current_buf()
      vim.bo[buf].buftype = "nofile"
      vim.bo[buf].bufhidden = "wipe"
      vim.bo[buf].swapfile = false
      pcall(vim.api.nvim_buf_set_name, buf, "sidechat://before/" .. path)
      local before = result.before and vim.split(result.before:gsub("\n$", ""), "\n", { plain = true }) or {}
      vim.api.nvim_buf_set_lines(buf, 0, -1, false, before)
      vim.bo[buf].modifiable = false
      vim.bo[buf].filetype = ft
      vim.cmd("diffthis")
      vim.cmd("wincmd l")
    end
    finish(nil)
  end)
end

--- The changed file under the cursor's diff; elsewhere in the transcript, nothing.
M.diff_under_cursor = under_cursor("file", function(span)
  M.diff(span.path, nil, span.childSessionId)
end)

--- A user message's text, shortened to one line.
local function turn_text(entry)
  for _, block in ipairs(entry.blocks) do
    if (block.type == "text" or block.type == "interjection") and block.text ~= "" then
      return title_of(block.text) or ""
    end
  end
  return ""
end

--- A turn a rewind can take the session back to before.
---@class sidechat.Turn
---@field entry sidechat.Entry its user message
---@field text string the message's first line, shortened

--- The shown session's turns that a rewind can take back: its user messages not rewound,
--- oldest first.
---@param s sidechat.Session
---@return sidechat.Turn[]
function M.turns(s)
  local turns = {}
  for _, entry in ipairs(s.entries) do
    if entry.role == "user" and not entry.rewound then
      table.insert(turns, { entry = entry, text = turn_text(entry) })
    end
  end
  return turns
end

--- What a rewind of `s` to before `message_id` (files and conversation) would do, as the
--- daemon's dry run answers it (`session/rewind` with `dryRun`): the daemon alone knows every
--- file, those a command or a sub-agent changed too, and which changed since.
---@param s sidechat.Session
---@param message_id string
---@param done fun(err: sidechat.RpcError?, planned: sidechat.RewindResult?)
local function dry_run(s, message_id, done)
  local params = { sessionId = s.id, messageId = message_id, restore = "both", dryRun = true }
  M.client():request(protocol.method.sessionRewind, params, done)
end

--- The files a planned rewind puts back, with those it will ask to overwrite (changed since
--- the session wrote them).
---@param planned sidechat.RewindResult a `session/rewind` dry run's result
---@return string[]
local function files_put_back(planned)
  local files = vim.tbl_map(function(f)
    return f.path
  end, planned.restored)
  for _, f in ipairs(planned.skipped) do
    if vim.startswith(f.reason, "changed since") then
      table.insert(files, f.path)
    end
  end
  return files
end

--- "notes.md, a.md" or "no files".
local function file_list(files)
  return #files == 0 and "no files" or table.concat(files, ", ")
end

--- What a planned rewind does to files, in the dry run's terms: "restores a.md; removes b.md;
--- leaves c.md (already as it was)", or "no files to restore".
---@param planned sidechat.RewindResult a `session/rewind` dry run's result
---@return string
function M.rewind_words(planned)
  local restores, removes, parts = {}, {}, {}
  for _, f in ipairs(planned.restored) do
    table.insert(f.removed and removes or restores, f.path)
  end
  if #restores > 0 then
    table.insert(parts, "restores " .. table.concat(restores, ", "))
  end
  if #removes > 0 then
    table.insert(parts, "removes " .. table.concat(removes, ", "))
  end
  for _, f in ipairs(planned.skipped) do
    table.insert(parts, ("leaves %s (%s)"):format(f.path, f.reason))
  end
  return #parts == 0 and "no files to restore" or table.concat(parts, "; ")
end

--- Takes the shown session back to just before the user message `message_id`: its files and
--- its conversation (`session/rewind`, restore `both`). When files changed since the session
--- wrote them, asks whether to overwrite them and sends it again with `force`.
---@param message_id string
---@param done fun(err: sidechat.RpcError?, result: sidechat.RewindResult?)?
---@param force boolean?
function M.rewind(message_id, done, force)
  local s = shown()
  if not s then
    return
  end
  local params = { sessionId = s.id, messageId = message_id, restore = "both", force = force or nil }
  M.client():request(protocol.method.sessionRewind, params, function(err, result)
    if err and not force and err.code == -32602 and tostring(err.message):find("changed since", 1, true) then
      return vim.ui.select({ "Overwrite them", "Cancel" }, {
        prompt = err.message .. ". Overwrite them?",
      }, function(choice)
        if choice == "Overwrite them" then
          M.rewind(message_id, done, true)
        elseif done then
          done(err)
        end
      end)
    end
    if err then
      notify("cannot rewind: " .. err_text(err), vim.log.levels.ERROR)
    else
      local restored = vim.tbl_map(function(f)
        return f.path .. (f.removed and " (removed)" or "")
      end, result.restored)
      local words = ("rewound %d %s; restored %s"):format(
        result.rewoundMessages,
        result.rewoundMessages == 1 and "message" or "messages",
        file_list(restored)
      )
      for _, f in ipairs(result.skipped) do
        words = words .. ("; left %s: %s"):format(f.path, f.reason)
      end
      notify(words)
      s:refresh_info()
    end
    if done then
      done(err, result)
    end
  end)
end

--- Asks (`vim.ui.select`, naming the files the daemon's dry run says it puts back) and then
--- takes the shown session back to before the user message `message_id` (without one, the last
--- turn's).
---@param message_id string?
---@param done fun(err: sidechat.RpcError?, result: sidechat.RewindResult?)?
function M.undo(message_id, done)
  local s = shown()
  if not s then
    return
  end
  local turn
  for _, t in ipairs(M.turns(s)) do
    if message_id == nil or t.entry.id == message_id then
      turn = t
    end
  end
  if not turn then
    return notify("there is no turn to take back")
  end
  dry_run(s, turn.entry.id, function(err, planned)
    if err or not planned then
      notify("cannot rewind: " .. err_text(err), vim.log.levels.ERROR)
      return done and done(err)
    end
    local left = {}
    for _, f in ipairs(planned.skipped) do
      if vim.startswith(f.reason, "changed by a command outside git") then
        table.insert(left, f.path)
      end
    end
    local not_restorable = #left == 0 and ""
      or ("; not restorable (changed by a command outside git): %s"):format(table.concat(left, ", "))
    vim.ui.select({ "Undo", "Cancel" }, {
      prompt = ('Undo to before "%s"? Restores %s%s; the messages from there on are folded away'):format(
        turn.text, file_list(files_put_back(planned)), not_restorable),
    }, function(choice)
      if choice == "Undo" then
        M.rewind(turn.entry.id, done)
      elseif done then
        done(nil, nil)
      end
    end)
  end)
end

--- Picks a turn of the shown session with `vim.ui.select`, newest first, each with what a
--- rewind to before it would do to files as the daemon's dry run answers for it, and takes the
--- session back to before the one picked.
---@param done fun(err: sidechat.RpcError?, result: sidechat.RewindResult?)?
function M.rewind_pick(done)
  local s = shown()
  if not s then
    return
  end
  local turns = M.turns(s)
  if #turns == 0 then
    return notify("there is no turn to take back")
  end
  ---@type { turn: sidechat.Turn, words: string? }[]
  local items = {}
  for i = #turns, 1, -1 do
    table.insert(items, { turn = turns[i] })
  end
  local function pick()
    vim.ui.select(items, {
      prompt = "Rewind to before (files and conversation)",
      format_item = function(item)
        return ("%s — %s"):format(item.turn.text, item.words)
      end,
    }, function(choice)
      if choice then
        M.rewind(choice.turn.entry.id, done)
      elseif done then
        done(nil, nil)
      end
    end)
  end
  local left = #items
  for _, item in ipairs(items) do
    dry_run(s, item.turn.entry.id, function(err, planned)
      if err or not planned then
        item.words = "files unknown: " .. err_text(err)
      else
        item.words = M.rewind_words(planned)
      end
      left = left - 1
      if left == 0 then
        pick()
      end
    end)
  end
end

--- Forks the shown session (`session/fork`): a new session holding its conversation up to and
--- including `message_id` (all of it without one), then shows it.
---@param message_id string?
---@param done fun(err: sidechat.RpcError?, session: sidechat.Session?)?
function M.fork(message_id, done)
  local s = shown()
  if not s then
    return
  end
  M.client():request(protocol.method.sessionFork, { sessionId = s.id, messageId = message_id }, function(err, info)
    if err then
      notify("cannot fork: " .. err_text(err), vim.log.levels.ERROR)
      return done and done(err)
    end
    notify(("forked into a new session: %s"):format(info.title))
    M.attach(info.id, done)
    view.open()
  end)
end

--- The user message under the cursor: undo to before it (asks first).
M.undo_under_cursor = under_cursor("user", function(span)
  M.undo(span.messageId)
end)

--- The user message under the cursor: fork a new session at it.
M.fork_under_cursor = under_cursor("user", function(span)
  M.fork(span.messageId)
end)

local usd = require("sidechat.winbar").usd

--- A statusline item: the shown session's context use and pressure, and its cost (or
--- "unpriced"). Empty when no session is shown.
---@return string
function M.statusline()
  local s = st.current
  if not s then
    return ""
  end
  local winbar = require("sidechat.winbar")
  local parts = {}
  local ctx = winbar.context(s)
  if ctx then
    table.insert(parts, ctx)
  end
  table.insert(parts, winbar.cost(s))
  return table.concat(parts, " · ")
end

--- The models `:SidechatModel` offers: each available account's known models (its default
--- first), from `initialize`.
---@return { account: string, model: string }[]
function M.models()
  local init = M.client().init_result
  local out = {}
  for _, account in ipairs(init and init.accounts or {}) do
    local seen = {}
    local models = { account.defaultModel }
    vim.list_extend(models, account.models or {})
    for _, model in ipairs(models) do
      if not seen[model] then
        seen[model] = true
        table.insert(out, { account = account.name, model = model })
      end
    end
  end
  return out
end

--- Switches the shown session's model (`session/update`, from the next request on): `choice`
--- as { account, model }, or picked with `vim.ui.select` from [`M.models`]. `done(err, session)`
--- gets the session as the daemon answered.
---@param choice { account: string, model: string }?
---@param done fun(err: sidechat.RpcError?, session: sidechat.SessionInfo?)?
function M.pick_model(choice, done)
  local s = shown("the model is set per session")
  if not s then
    return
  end
  local function set(c)
    local params = { sessionId = s.id, account = c.account, model = c.model }
    request_told(protocol.method.sessionUpdate, params, "cannot switch the model", function(info)
      -- The whole session: fields the new model leaves unset (its effort) are absent.
      s.info = info
      view.schedule()
      return ("model: %s (%s)"):format(info.model, info.account)
    end, done)
  end
  if choice then
    return set(choice)
  end
  local info = s.info or {}
  vim.ui.select(M.models(), {
    prompt = "sidechat model",
    format_item = function(c)
      local current = c.account == info.account and c.model == info.model
      return ("%s (%s)%s"):format(c.model, c.account, current and " · current" or "")
    end,
  }, function(picked)
    if picked then
      set(picked)
    end
  end)
end

--- Every effort level, lowest first.
---@type sidechat.Effort[]
local EFFORTS = { "minimal", "low", "medium", "high" }

--- The levels `:SidechatEffort` offers for the shown session: those the daemon says its model
--- takes (`effortLevels`), else, for a model that takes none, low to high (kept for a later
--- model; the daemon says once that it is not sent). `takes` is false then.
---@param s sidechat.Session
---@return sidechat.Effort[] levels, boolean takes
function M.effort_levels(s)
  local levels = (s.info or {}).effortLevels
  if levels and #levels > 0 then
    return vim.list_slice(levels), true
  end
  return { "low", "medium", "high" }, false
end

--- Sets the shown session's reasoning effort (`session/update {effort}`, from the next
--- request on): `level` one of `minimal`, `low`, `medium`, `high`, or `default` (the account's
--- default, `null` on the wire); without one, picked with `vim.ui.select` from the levels the
--- session's model takes ([`M.effort_levels`]). `done(err, session)` gets the session as the
--- daemon answered.
---@param level string? a `sidechat.Effort` or "default"
---@param done fun(err: sidechat.RpcError?, session: sidechat.SessionInfo?)?
function M.pick_effort(level, done)
  local s = shown("the effort is set per session")
  if not s then
    return
  end
  local function set(l)
    if l ~= "default" and not vim.tbl_contains(EFFORTS, l) then
      notify(("no effort %q: minimal, low, medium, high or default"):format(l), vim.log.levels.ERROR)
      return done and done({ code = -32602, message = "no effort " .. l })
    end
    local params = { sessionId = s.id, effort = l == "default" and vim.NIL or l }
    request_told(protocol.method.sessionUpdate, params, "cannot set the effort", function(info)
      -- The whole session: an effort back to no default is an absent field.
      s.info = info
      view.schedule()
      return ("effort: %s"):format(l == "default" and ("default, " .. (info.effort or "the provider's")) or info.effort)
    end, done)
  end
  if level and vim.trim(level) ~= "" then
    return set(vim.trim(level):lower())
  end
  local info = s.info or {}
  local levels, takes = M.effort_levels(s)
  local items = vim.list_extend({ "default" }, levels)
  local prompt = ("Reasoning effort for %s (now %s)"):format(info.model or "the model", info.effort or "the provider's default")
  if not takes then
    prompt = prompt .. ("; %s takes none here, so it is kept for a model that does"):format(info.model or "the model")
  end
  vim.ui.select(items, {
    prompt = prompt,
    format_item = function(item)
      if item == "default" then
        return "default (the account's)"
      end
      return item == info.effort and (item .. " · current") or item
    end,
  }, function(picked)
    if picked then
      set(picked)
    end
  end)
end

--- The lines `:SidechatCost` shows for a `session/cost` result.
---@param result table a `session/cost` result
---@return string[]
function M.cost_lines(result)
  local cost = result.cost
  local lines = {}
  -- Absent when no usage has a price.
  local total = cost.totalUsd and usd(cost.totalUsd) or "unpriced"
  if cost.partial then
    total = total .. " (partial: some usage has no price)"
  end
  table.insert(lines, "Cost: " .. total)
  for _, m in ipairs(cost.byModel) do
    local t = m.tokens
    table.insert(
      lines,
      ("  %s/%s: %s (%d requests, %d in, %d out, %d cache read, %d cache write)"):format(
        m.provider, m.model, usd(m.totalUsd), m.lines, t.input, t.output, t.cacheRead, t.cacheWrite)
    )
  end
  if cost.unpriced.lines > 0 then
    local t = cost.unpriced.tokens
    table.insert(
      lines,
      ("  unpriced: %s (%d requests, %d in, %d out)"):format(
        table.concat(cost.unpriced.models, ", "), cost.unpriced.lines, t.input, t.output)
    )
  end
  if result.capUsd then
    table.insert(lines, "  cap: " .. usd(result.capUsd))
  end
  table.insert(lines, "  prices as of " .. cost.pricesAsOf)
  return lines
end

--- Shows what the shown session cost.
---@param done fun(err: sidechat.RpcError?, result: table?)?
function M.cost(done)
  local s = shown()
  if not s then
    return
  end
  request_told(protocol.method.sessionCost, { sessionId = s.id }, "cannot read the cost", function(result)
    return table.concat(M.cost_lines(result), "\n")
  end, done)
end

--- Sends lines `line1`..`line2` of the current buffer with their file and range; without a
--- question they are attached to the next message typed in the prompt.
---@param line1 integer
---@param line2 integer
---@param question string?
function M.ask(line1, line2, question)
  local buf = vim.api.nvim_get_current_buf()
  local name = vim.api.nvim_buf_get_name(buf)
  name = name ~= "" and vim.fn.fnamemodify(name, ":.") or "[No Name]"
  local text = table.concat(vim.api.nvim_buf_get_lines(buf, line1 - 1, line2, false), "\n")
  local ft = vim.bo[buf].filetype
  local attachment = {
    name = ("%s:%d-%d"):format(name, line1, line2),
    text = ("```%s\n%s\n```"):format(ft, text),
  }
  view.open()
  if question and vim.trim(question) ~= "" then
    M.send(question, { attachments = { attachment } })
  else
    table.insert(st.attachments, attachment)
    view.show_attachments(st.attachments)
    local _, prompt = view.buffers()
    local win = prompt and vim.fn.win_findbuf(prompt)[1]
    if win then
      vim.api.nvim_set_current_win(win)
    end
  end
end

function M.open()
  local c = M.client()
  if c.status == "stopped" or c.status == "failed" then
    c:start()
  end
  view.open()
  if st.current then
    view.show(st.current)
  end
end

function M.close()
  view.close()
end

function M.toggle()
  if view.is_open() then
    view.close()
  else
    M.open()
  end
end

--- Stops the daemon and forgets every session (a later command starts afresh).
function M.shutdown()
  approval.close()
  client_mod.reset()
  st.client = nil
  st.sessions = {}
  st.current = nil
  view.show(nil)
end

--- The attachments waiting for the next message.
---@return { name: string, text: string }[]
function M.pending_attachments()
  return st.attachments
end

return M
