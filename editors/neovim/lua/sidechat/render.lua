--- Turns a session into the transcript buffer's lines (markdown), with fold levels (thinking
--- and tool output fold away) and what each line stands for (a changed file, a waiting
--- message). Pure: the same session gives the same lines, streamed live or redrawn from
--- `session/transcript`.
local M = {}

--- How many lines of a tool's output are shown before "… (N more lines)".
M.OUTPUT_LINES = 20

local STATUS = {
  pending = "pending",
  awaitingApproval = "awaiting approval",
  running = "running",
  done = "done",
  error = "error",
  denied = "denied",
  cancelled = "cancelled",
}

--- Lines as Rust's `str::lines` counts them (a trailing newline ends the last line).
local function count_lines(text)
  if type(text) ~= "string" or text == "" then
    return 0
  end
  local n = select(2, text:gsub("\n", ""))
  if text:sub(-1) ~= "\n" then
    n = n + 1
  end
  return n
end

--- The lines an attachment holds: its text's, less the code fence around it when it has one
--- (`:'<,'>SidechatAsk` fences the lines it sends), so that two lines asked about say "2 lines".
---@param text string
---@return integer
local function attachment_lines(text)
  local inner = type(text) == "string" and text:match("^```[^\n]*\n(.-)\n?```\n?$")
  if inner then
    return inner == "" and 0 or count_lines(inner)
  end
  return count_lines(text)
end

--- "1 line", "2 lines".
---@param n integer
local function lines_word(n)
  return ("%d %s"):format(n, n == 1 and "line" or "lines")
end

--- "1 more line", "2 more lines".
---@param n integer
function M.more_lines(n)
  return ("%d more %s"):format(n, n == 1 and "line" or "lines")
end

--- At most `max` bytes (cut at a character), marked as the daemon marks a cut.
local function truncate(text, max)
  if #text <= max then
    return text
  end
  -- Back to the start of the character the cut would split.
  local cut = max + vim.str_utf_start(text, max + 1)
  return ("%s… [cut: %d more bytes]"):format(text:sub(1, cut), #text - cut)
end

--- One line naming a tool call, as the daemon's approval prompts word it.
---@param tool string
---@param input table
function M.summary(tool, input)
  input = input or {}
  local path = input.path or "."
  if tool == "read_file" then
    return "read " .. path
  elseif tool == "list_directory" then
    return "list " .. path
  elseif tool == "search_text" then
    return ('search for "%s"'):format(input.pattern or "")
  elseif tool == "write_file" then
    return ("write %s (%s)"):format(path, lines_word(count_lines(input.content)))
  elseif tool == "edit_file" then
    return ("edit %s (replace %s with %s)"):format(
      path,
      lines_word(count_lines(input.old_string)),
      lines_word(count_lines(input.new_string))
    )
  elseif tool == "run_command" then
    local command = input.command or ""
    local first = command:match("^[^\n]*")
    local more = count_lines(command) > 1 and " …" or ""
    return ("run `%s`%s"):format(first, more)
  elseif tool == "delegate" then
    local task = type(input.task) == "string" and input.task or ""
    return ('delegate "%s"'):format(truncate(task:match("^[^\n]*"), 80))
  end
  local json = vim.json.encode(input)
  if #json > 80 then
    json = json:sub(1, 80) .. "…"
  end
  return tool .. " " .. json
end

---@class sidechat.Builder
local Builder = {}
Builder.__index = Builder

local function builder()
  return setmetatable({ lines = {}, folds = {}, spans = {}, marks = {} }, Builder)
end

function Builder:add(text, fold, span)
  table.insert(self.lines, text)
  local n = #self.lines
  self.folds[n] = fold or 0
  self.spans[n] = span
end

--- Highlights bytes `first` to `last` (0-based, end exclusive) of the last line added.
---@param first integer
---@param last integer
---@param group string
function Builder:mark(first, last, group)
  local n = #self.lines
  self.marks[n] = self.marks[n] or {}
  table.insert(self.marks[n], { first, last, group })
end

--- Adds a line of parts `{text, group?}`, each highlighted with its group.
---@param parts { [1]: string, [2]: string? }[]
function Builder:parts(parts, fold, span)
  local text = table.concat(vim.tbl_map(function(p)
    return p[1]
  end, parts))
  self:add(text, fold, span)
  local at = 0
  for _, p in ipairs(parts) do
    if p[2] then
      self:mark(at, at + #p[1], p[2])
    end
    at = at + #p[1]
  end
end

--- `text` without trailing newlines (a pattern anchored at the end would scan the whole text).
local function chomp(text)
  local last = #text
  while last > 0 and text:byte(last) == 10 do
    last = last - 1
  end
  return last == #text and text or text:sub(1, last)
end

--- Adds text that may hold newlines, one buffer line each.
function Builder:text(text, prefix, fold, span)
  text = chomp(text or "")
  for _, line in ipairs(vim.split(text, "\n", { plain = true })) do
    self:add((prefix or "") .. line, fold, span)
  end
end

--- Appends the lines of another builder (one entry's, kept in a cache); `fold` is the level
--- and `span` the meaning of the blank line before them (inside a fold of rewound messages).
function Builder:append(other, fold, span)
  if #other.lines == 0 then
    return
  end
  self:blank(fold, span)
  for i, line in ipairs(other.lines) do
    self:add(line, other.folds[i], other.spans[i])
    self.marks[#self.lines] = other.marks[i]
  end
end

function Builder:blank(fold, span)
  if #self.lines > 0 and self.lines[#self.lines] ~= "" then
    self:add("", fold, span)
  end
end

function Builder:heading(text, span)
  self:blank()
  self:add("## " .. text, 0, span)
end

function Builder:thinking(text)
  if text == nil or text == "" then
    return
  end
  self:add("▸ thinking", ">1")
  self:text(text, "> ", 1)
end

--- How a sub-agent stands, as its `delegate` call's line says it.
local AGENT_STATE = {
  running = "working",
  awaitingApproval = "waiting for your approval",
  end_turn = "finished",
  stopped = "stopped",
  max_iterations = "used all its steps",
  budget_spent = "reached a budget limit",
  cut_off = "cut off",
  refusal = "refused",
  error = "failed",
}

--- How many of a sub-agent's latest lines of words its call shows while it works.
M.AGENT_LINES = 3

--- A `delegate` call: while its sub-agent works, where it stands, its latest step and the end of
--- its latest words; then its answer (the call's result), shown in full.
function Builder:delegate_call(session, block, status, output)
  self:add(("⚙ %s · %s"):format(M.summary(block.name, block.input), STATUS[status] or status))
  if output then
    self:text(output, "    ")
    return
  end
  local d = session.delegations[block.id]
  if not d then
    return
  end
  local step = d.step and (": %s · %s"):format(d.step.summary, STATUS[d.step.status] or d.step.status) or ""
  self:add(("    ↳ sub-agent %s%s"):format(AGENT_STATE[d.state] or d.state, step))
  if d.text ~= "" then
    local lines = vim.split(chomp(d.text), "\n", { plain = true })
    for i = math.max(1, #lines - M.AGENT_LINES + 1), #lines do
      self:add("    │ " .. lines[i])
    end
  end
end

function Builder:tool_call(session, block)
  local status, output = session:tool_status(block.id)
  if block.name == "delegate" then
    return self:delegate_call(session, block, status, output)
  end
  self:add(("⚙ %s · %s"):format(M.summary(block.name, block.input), STATUS[status] or status), output and ">1" or 0)
  if not output or output == "" then
    return
  end
  local lines = vim.split(chomp(output), "\n", { plain = true })
  for i = 1, math.min(#lines, M.OUTPUT_LINES) do
    self:add("    " .. lines[i], 1)
  end
  if #lines > M.OUTPUT_LINES then
    self:add(("    … (%s)"):format(M.more_lines(#lines - M.OUTPUT_LINES)), 1)
  end
end

local ENDED = { stopped = "_(stopped)_", failed = "_(failed)_" }

local function thousands(n)
  local s = tostring(math.floor(n))
  local out = s:reverse():gsub("(%d%d%d)", "%1,"):reverse()
  return (out:gsub("^,", ""))
end

--- The heading of a `summary` entry: how the older messages were folded.
---@param block table the entry's `summary` block
function M.summary_heading(block)
  local n = block.messages or 0
  local messages = n == 1 and "1 earlier message" or (n .. " earlier messages")
  if block.method == "drop" then
    return messages:sub(1, 1):upper() .. messages:sub(2) .. " left out of what the model is sent"
  elseif block.method == "carryOver" then
    return "New context — carried over"
  end
  return "Summary of " .. messages
end

local REASONS = {
  share = "the history passed its share of the window",
  window = "the request would not have fit the window",
  command = "/compact",
  idle = "idle longer than the idle rollover",
}

--- The line under it: the folded range and, when its `compaction` event was seen, why and the
--- history's tokens before and after. Empty when there is nothing to say.
---@param block table
---@param compaction table? the event's `reason`, `tokensBefore`, `tokensAfter`
function M.summary_detail(block, compaction)
  local parts = {}
  if block.fromSeq and block.toSeq and block.fromSeq ~= vim.NIL and block.toSeq ~= vim.NIL then
    table.insert(parts, ("seq %d–%d"):format(block.fromSeq, block.toSeq))
  end
  if compaction then
    -- The user's command that starts a new context is /new-context, not /compact.
    local new_context = compaction.reason == "command" and block.method == "carryOver"
    table.insert(parts, new_context and "/new-context" or REASONS[compaction.reason] or compaction.reason)
    table.insert(
      parts,
      ("history %s → %s tokens"):format(thousands(compaction.tokensBefore), thousands(compaction.tokensAfter))
    )
  end
  return table.concat(parts, " · ")
end

--- Whether a `summary` block is a carry-over note deleted with `note/delete` (emptied).
function M.deleted_note(block)
  return block.method == "carryOver" and (block.text == nil or block.text == "")
end

--- A summary entry: its heading, the detail line, and the text the model reads, folded. A
--- carry-over note is a boundary (a rule above its heading: the model starts afresh from
--- here), and its lines name it (`X` deletes it); a deleted one shows nothing.
function Builder:summary(session, entry, block)
  if M.deleted_note(block) then
    return
  end
  local note = block.method == "carryOver"
  local span = note and { kind = "note", messageId = entry.id } or nil
  if note then
    self:blank()
    self:add("---", 0, span)
    self:add("## " .. M.summary_heading(block), 0, span)
  else
    self:heading(M.summary_heading(block), span)
  end
  local detail = M.summary_detail(block, session.compactions[entry.id])
  if detail ~= "" then
    self:add("_" .. detail .. "_", 0, span)
  end
  if block.text and block.text ~= "" then
    self:add(note and "▸ note (X deletes it)" or "▸ summary", ">1", span)
    self:text(block.text, "> ", 1, span)
  end
end

--- "512 B", "2.1 KB", "120 KB", "1.5 MB" (multiples of 1024).
---@param bytes integer
---@return string
function M.size(bytes)
  if bytes < 1024 then
    return ("%d B"):format(bytes)
  end
  local n = bytes
  for _, unit in ipairs({ "KB", "MB" }) do
    n = n / 1024
    if n < 9.95 then
      return ("%.1f %s"):format(n, unit)
    end
    local whole = math.floor(n + 0.5)
    if whole < 1024 then
      return ("%d %s"):format(whole, unit)
    end
  end
  return ("%.1f GB"):format(n / 1024)
end

local IMAGE_KINDS = { ["image/png"] = "PNG", ["image/jpeg"] = "JPEG", ["image/gif"] = "GIF", ["image/webp"] = "WebP" }

--- "PNG" for image/png; another media type as it is.
---@param media_type string
---@return string
function M.image_kind(media_type)
  return IMAGE_KINDS[media_type] or media_type
end

--- An `image` block's line: `[image: shot.png · PNG 800×600 · 120 KB]`, the file name only for
--- an image attached in this Neovim (the daemon keeps the bytes, not the file's name).
---@param block { imageId: string, mediaType: string, width: integer, height: integer, bytes: integer }
---@return string
function M.image_text(block)
  local name = require("sidechat.attach").name_of(block.imageId)
  return ("[image: %s%s %d×%d · %s]"):format(
    name and (name .. " · ") or "",
    M.image_kind(block.mediaType),
    block.width,
    block.height,
    M.size(block.bytes)
  )
end

--- How a mention's attachment is written back: `@src/lib.rs:10-20`, `@"a b.md":3`, `@docs/`.
---@param block { name: string, range: { start: integer, ["end"]: integer }? }
---@return string
function M.mention_text(block)
  local path = block.name:find("%s") and ('"' .. block.name .. '"') or block.name
  local range = block.range
  if range and range.start == range["end"] then
    return ("@%s:%d"):format(path, range.start)
  elseif range then
    return ("@%s:%d-%d"):format(path, range.start, range["end"])
  end
  return "@" .. path
end

--- An attachment under its user message: a mention as a chip (`@src/lib.rs:10-20 · 2.1 KB`,
--- the size of the file as read), other attached text (`:SidechatAsk`'s lines) by its name and
--- lines.
function Builder:attachment(block, span)
  if block.size and block.size ~= vim.NIL then
    self:parts({ { M.mention_text(block), "SidechatChip" }, { " · " .. M.size(block.size), "SidechatChipDetail" } }, 0, span)
  else
    self:parts({
      { "📎 " .. block.name, "SidechatChip" },
      { (" (%s)"):format(lines_word(attachment_lines(block.text))), "SidechatChipDetail" },
    }, 0, span)
  end
end

function Builder:entry(session, entry)
  local role = entry.role
  local first = entry.blocks[1]
  if role == "summary" and first and first.type == "summary" then
    return self:summary(session, entry, first)
  end
  -- A user message's lines name it: `u` takes the session back to before it, `F` forks at it.
  local span = role == "user" and { kind = "user", messageId = entry.id } or nil
  if role == "user" and first and first.type == "interjection" and not first.promoted then
    -- Typed during the run and delivered with tool results: its own heading follows.
  elseif role == "user" then
    -- A custom slash command shows what was typed, labelled with the command's name.
    local label = ""
    for _, block in ipairs(entry.blocks) do
      if block.type == "command" then
        label = " · /" .. block.name
      end
    end
    self:heading("You" .. label, span)
  elseif role == "assistant" then
    self:heading("Assistant")
  elseif role == "note" then
    self:heading("Note")
  elseif role ~= "tool" and role ~= "notice" then
    self:heading(role)
  end
  for _, block in ipairs(entry.blocks) do
    local t = block.type
    if t == "text" then
      self:text(block.text, nil, 0, span)
    elseif t == "thinking" then
      self:thinking(block.text)
    elseif t == "toolCall" then
      self:tool_call(session, block)
    elseif t == "interjection" then
      -- Promoted: it became (part of) a user turn of its own, under the "You" heading.
      if not block.promoted then
        self:heading("You (during the run)", span)
      end
      self:text(block.text, nil, 0, span)
    elseif t == "attachment" then
      self:attachment(block, span)
    elseif t == "image" then
      self:parts({ { M.image_text(block), "SidechatImage" } }, 0, span)
    elseif t == "notice" then
      self:add(("_%s: %s_"):format(block.level, block.text))
    end
  end
  if ENDED[entry.status] then
    self:add(ENDED[entry.status])
  end
end

--- Whether an entry's lines can no longer change: every tool call it made has its result.
local function settled(session, entry)
  for _, block in ipairs(entry.blocks) do
    if block.type == "toolCall" and not session.results[block.id] then
      return false
    end
  end
  return true
end

--- The lines of the header and of the longest run of settled entries from the start, kept on
--- the session and extended as entries settle.
function M.prefix(session, header, top)
  top = top or {}
  local key = table.concat(vim.list_extend({ header }, top), "\n")
  local p = session.render_prefix
  local valid = p ~= nil and p.header == key and #p.entries <= #session.entries
  if valid then
    for i, entry in ipairs(p.entries) do
      if session.entries[i] ~= entry then
        valid = false
        break
      end
    end
  end
  if not valid then
    p = { header = key, entries = {}, b = builder() }
    p.b:add(header)
    for _, line in ipairs(top) do
      p.b:add(line)
    end
  end
  local k = #p.entries
  while k < #session.entries and settled(session, session.entries[k + 1]) do
    k = k + 1
    p.entries[k] = session.entries[k]
    M.append_entry(p.b, session, k)
  end
  session.render_prefix = p
  return p
end

--- "1 rewound message", "3 rewound messages".
---@param n integer
function M.rewound_heading(n)
  return ("▸ %d rewound %s"):format(n, n == 1 and "message" or "messages")
end

--- Appends the session's `i`th entry. Rewound entries (`session/rewind`) sit in one fold per
--- run of them, under a line saying how many they are, their lines dimmed.
---@param b sidechat.Builder
---@param session sidechat.Session
---@param i integer
function M.append_entry(b, session, i)
  local entries = session.entries
  local entry = entries[i]
  if not entry.rewound then
    return b:append(M.entry(session, entry))
  end
  if i == 1 or not entries[i - 1].rewound then
    local n = 0
    while entries[i + n] and entries[i + n].rewound do
      n = n + 1
    end
    b:blank()
    b:add(M.rewound_heading(n), ">1", { kind = "rewound" })
  end
  b:append(M.entry(session, entry), 1, { kind = "rewound" })
end

local NESTED = { [0] = 1, ["0"] = 1, [1] = 2, ["1"] = 2, [">1"] = ">2" }

--- A rewound entry's lines one fold level deeper, each standing for the rewound entry (dimmed,
--- and no longer a user message `u` or `F` act on).
local function rewound(b, entry)
  local out = builder()
  local span = { kind = "rewound", messageId = entry.id }
  for i, line in ipairs(b.lines) do
    out:add(line, NESTED[b.folds[i]] or b.folds[i], span)
    out.marks[i] = b.marks[i]
  end
  return out
end

--- One committed entry's lines, cached on the session once they cannot change, so a long
--- transcript costs little to redraw while an answer streams below it.
function M.entry(session, entry)
  local cache = session.render_cache
  local hit = cache[entry.id]
  if hit and hit.entry == entry then
    return hit.lines
  end
  local b = builder()
  b:entry(session, entry)
  if entry.rewound then
    b = rewound(b, entry)
  end
  if settled(session, entry) then
    cache[entry.id] = { entry = entry, lines = b }
  end
  return b
end

function Builder:live(message)
  self:heading(message.role == "user" and "You" or "Assistant")
  self:thinking(message.thinking)
  if message.text ~= "" or message.thinking == "" then
    self:text((message.partial and "… " or "") .. message.text)
  end
end

local STATE_LINE = {
  running = "_… working_",
  awaitingApproval = "_waiting for approval (`ga` shows it)_",
  unanswered = "_this turn has no answer yet: `R` or :SidechatResume answers it_",
}

local PLAN_MARK = { completed = "[x]", in_progress = "[~]", pending = "[ ]" }

--- The model's latest plan (`update_plan`) as a checklist under the title; none without one.
---@return string[]
function M.plan(plan)
  if not plan or #(plan.steps or {}) == 0 then
    return {}
  end
  local lines = { "", "## Plan" }
  if plan.explanation then
    table.insert(lines, "_" .. plan.explanation .. "_")
  end
  for _, s in ipairs(plan.steps) do
    local step = s.status == "in_progress" and ("**" .. s.step .. "**") or s.step
    table.insert(lines, ("- %s %s"):format(PLAN_MARK[s.status] or "[ ]", step))
  end
  return lines
end

--- The transcript of `session`: lines, fold levels ("0", ">1", "1"), line meanings and the
--- highlighted parts of lines (`marks`: line -> `{first byte, end byte, group}` list).
---@param session sidechat.Session
---@return { lines: string[], folds: table<integer, any>, spans: table<integer, table>, marks: table<integer, table[]> }
function M.session(session)
  local info = session.info or {}
  local header = "# " .. (info.title or "New chat") .. (info.model and (" (" .. info.model .. ")") or "")
  local prefix = M.prefix(session, header, M.plan(session.plan or info.plan))
  -- The settled prefix is copied, not rebuilt: what streams below it costs the same however
  -- long the session.
  local b = builder()
  local n = #prefix.b.lines
  table.move(prefix.b.lines, 1, n, 1, b.lines)
  table.move(prefix.b.folds, 1, n, 1, b.folds)
  table.move(prefix.b.spans, 1, n, 1, b.spans)
  table.move(prefix.b.marks, 1, n, 1, b.marks)
  for i = #prefix.entries + 1, #session.entries do
    M.append_entry(b, session, i)
  end
  for _, message in ipairs(session.live) do
    b:live(message)
  end
  for _, notice in ipairs(session.notices) do
    b:blank()
    b:add(("_%s: %s_"):format(notice.level, notice.message))
  end
  for _, w in ipairs(session.waiting) do
    local span = { kind = "waiting", pendingId = w.pendingId }
    b:heading("You (waiting)", span)
    b:text(w.text, nil, 0, span)
  end
  local changed = info.changedFiles or {}
  if #changed > 0 then
    b:heading("Changed files")
    for _, f in ipairs(changed) do
      -- A sub-agent's change is the session's too; it says whose it is.
      local by = f.childSessionId and "  (by sub-agent)" or ""
      local span = { kind = "file", path = f.path, childSessionId = f.childSessionId }
      b:add(("%s  +%d −%d%s"):format(f.path, f.added, f.removed, by), 0, span)
    end
  end
  if STATE_LINE[session.state] then
    b:blank()
    b:add(STATE_LINE[session.state])
  end
  return b
end

--- The lines shown for a session that does not exist yet.
function M.empty()
  local b = builder()
  b:add("# New chat")
  b:add("")
  b:add("_Type below and press <CR> (normal mode) or <C-s> (insert mode) to send._")
  return b
end

return M
