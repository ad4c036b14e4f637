-- Undo, rewind and fork (docs/undo.md): `:SidechatUndo` asks, naming the files it puts back,
-- then takes back the last turn; `:SidechatRewind` picks a turn from the list of user messages,
-- each with what the daemon's dry run says a rewind to it does to files; a file changed since
-- asks whether to overwrite it; rewound messages fold away, dimmed; `u` and `F` on a user
-- message undo to it and fork at it.
local H = dofile(vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h") .. "/helpers.lua")
H.setup()
local sidechat = require("sidechat")
local view = require("sidechat.view")

--- Replaces vim.ui.select: records each call (its prompt and items as shown) and answers with
--- the next of `answers` (an item's text as shown; nil cancels).
local function answer_selects(answers)
  local asked = {}
  vim.ui.select = function(items, opts, on_choice)
    local shown = vim.tbl_map(opts.format_item or tostring, items)
    table.insert(asked, { prompt = opts.prompt, items = shown })
    local want = table.remove(answers, 1)
    for i, text in ipairs(shown) do
      if text == want then
        return on_choice(items[i], i)
      end
    end
    on_choice(nil, nil)
  end
  return asked
end

--- Sends `text`, allows the approval it asks for (if any) and waits until the run is over.
local function turn(text, approvals)
  local before = #sidechat.current().entries
  sidechat.send(text)
  for _ = 1, approvals or 0 do
    H.wait("an approval", function()
      return #sidechat.current():pending_approvals() > 0
    end)
    local done = false
    sidechat.approve("allow", nil, function()
      done = true
    end)
    H.wait("the answer", function()
      return done
    end)
  end
  H.wait("the turn's end", function()
    local s = sidechat.current()
    return s.state == "idle" and #s.entries > before + 1
  end)
end

local function read(path)
  local f = io.open(H.ws .. "/" .. path)
  if not f then
    return nil
  end
  local text = f:read("*a")
  f:close()
  return text
end

local function write(path, text)
  local f = assert(io.open(H.ws .. "/" .. path, "w"))
  f:write(text)
  f:close()
end

--- The transcript line numbers whose span is `kind`.
local function lines_of(kind)
  local out = {}
  for lnum = 1, #H.lines() do
    local span = view.span(lnum)
    if span and span.kind == kind then
      table.insert(out, lnum)
    end
  end
  return out
end

local function rewound_heading_line()
  for lnum, line in ipairs(H.lines()) do
    if line:match("^▸ %d+ rewound message") then
      return lnum, line
    end
  end
end

H.run({
  {
    ":SidechatUndo names the files it restores, then takes back the last turn, folded and dimmed",
    function()
      vim.cmd("Sidechat")
      sidechat.new_session()
      H.wait("a session", function()
        return sidechat.current() ~= nil and sidechat.current().loaded
      end)
      turn("hello there")
      turn("create notes.md with hello", 1)
      H.eq("hello\n", read("notes.md"), "written")
      local s = sidechat.current()
      local kept = #s.entries
      local asked = answer_selects({ "Undo" })
      vim.cmd("SidechatUndo")
      H.wait("notes.md removed", function()
        return read("notes.md") == nil
      end)
      H.eq({
        {
          prompt = 'Undo to before "create notes.md with hello"? Restores notes.md; the messages from there on are folded away',
          items = { "Undo", "Cancel" },
        },
      }, asked, "the question")
      H.wait("the rewound fold", function()
        return rewound_heading_line() ~= nil
      end)
      local rewound = vim.tbl_filter(function(e)
        return e.rewound
      end, s.entries)
      H.eq(kept - 2, #rewound, "entries from the message on are rewound")
      local lnum, heading = rewound_heading_line()
      H.eq(("▸ %d rewound messages"):format(#rewound), heading, "the fold's line")
      -- The whole run of rewound messages, and nothing else, is dimmed and folded.
      local dimmed = lines_of("rewound")
      H.eq(lnum, dimmed[1], "dimmed from the fold's line")
      H.eq(vim.fn.range(lnum, lnum + #dimmed - 1), dimmed, "one run of lines")
      H.eq("Created notes.md (+1 -0 lines).", H.lines()[dimmed[#dimmed]], "to the last rewound message's end")
      local marks = vim.api.nvim_buf_get_extmarks(view.state.transcript, view.ns, 0, -1, { details = true })
      H.eq(#dimmed, #marks, "one highlight a rewound line")
      H.eq("SidechatRewound", marks[1][4].hl_group, "their group")
      local win = H.focus(view.state.transcript)
      H.eq(lnum, vim.api.nvim_win_call(win, function()
        return vim.fn.foldclosed(lnum)
      end), "folded")
      H.wait("told what was restored", function()
        return H.notes[#H.notes].msg == "sidechat: rewound 4 messages; restored notes.md (removed)"
      end)
      -- Still the earlier turn: the message is not a turn to take back any more.
      H.eq({ "hello there" }, vim.tbl_map(function(t)
        return t.text
      end, sidechat.turns(s)), "the turns left")
    end,
  },
  {
    ":SidechatRewind lists the turns with the dry run's files; a file changed since asks, then is overwritten",
    function()
      turn("create a.md with one", 1)
      turn("create b.md with two", 1)
      write("a.md", "changed by hand")
      local changed = "leaves a.md (changed since the session last wrote it; a forced rewind overwrites it)"
      local asked = answer_selects({ "create a.md with one — removes b.md; " .. changed, "Overwrite them" })
      local result
      sidechat.rewind_pick(function(err, r)
        result = { err = err, r = r }
      end)
      H.wait("the rewind", function()
        return result ~= nil
      end)
      H.eq(nil, result.err, "no error in the end")
      H.eq(2, #asked, "two questions")
      -- A rewind to before a turn restores what every turn from it on changed.
      H.eq({
        "create b.md with two — removes b.md",
        "create a.md with one — removes b.md; " .. changed,
        "hello there — removes b.md; " .. changed,
      }, asked[1].items, "the turns, newest first")
      H.eq("Rewind to before (files and conversation)", asked[1].prompt, "the list's prompt")
      H.eq({ "Overwrite them", "Cancel" }, asked[2].items, "the conflict's choices")
      H.truthy(asked[2].prompt:find("a.md", 1, true), "the conflict names the file: " .. asked[2].prompt)
      H.eq(nil, read("a.md"), "a.md removed though changed")
      H.eq(nil, read("b.md"), "b.md removed")
      H.eq({ { path = "a.md", removed = true }, { path = "b.md", removed = true } }, vim.fn.sort(result.r.restored, function(x, y)
        return x.path < y.path and -1 or 1
      end), "restored")
    end,
  },
  {
    "a conflict answered with Cancel changes nothing",
    function()
      turn("create c.md with three", 1)
      write("c.md", "mine")
      local asked = answer_selects({ "Undo", "Cancel" })
      local result
      sidechat.undo(nil, function(err)
        result = { err = err }
      end)
      H.wait("the answer", function()
        return result ~= nil
      end)
      H.eq(2, #asked, "asked twice")
      H.eq(-32602, result.err.code, "refused")
      H.eq("mine", read("c.md"), "c.md kept")
      H.eq({ "hello there", "create c.md with three" }, vim.tbl_map(function(t)
        return t.text
      end, sidechat.turns(sidechat.current())), "no turn taken back")
    end,
  },
  {
    "u on a user message in the transcript undoes to before it",
    function()
      local s = sidechat.current()
      H.wait("the transcript drawn", function()
        return #lines_of("user") > 0
      end)
      local user_lines = lines_of("user")
      local lnum = user_lines[#user_lines]
      H.eq("create c.md with three", H.lines()[lnum], "the last user message's line")
      local asked = answer_selects({ "Undo", "Overwrite them" })
      local win = H.focus(view.state.transcript)
      vim.api.nvim_win_set_cursor(win, { lnum, 0 })
      H.press("u")
      H.wait("c.md removed", function()
        return read("c.md") == nil
      end)
      H.eq(2, #asked, "asked, then asked to overwrite")
      H.wait("the turn rewound", function()
        return #sidechat.turns(s) == 1
      end)
    end,
  },
  {
    "F on a user message forks a new session at it and shows it; :SidechatFork forks it all",
    function()
      local s = sidechat.current()
      local lnum = lines_of("user")[2]
      H.eq("hello there", H.lines()[lnum], "the first user message's line")
      local win = H.focus(view.state.transcript)
      vim.api.nvim_win_set_cursor(win, { lnum, 0 })
      H.press("F")
      H.wait("the fork shown", function()
        local c = sidechat.current()
        return c ~= s and c.loaded and #c.entries > 0
      end)
      local fork = sidechat.current()
      H.eq({ { role = "user", text = "hello there" } }, vim.tbl_map(function(e)
        return { role = e.role, text = e.blocks[1].text }
      end, fork.entries), "the fork holds the message, nothing after it")
      H.eq(s.id, fork.info.forkedFrom, "forked from")
      -- The whole conversation of the fork (with its answer, once given).
      turn("more")
      local n = #vim.tbl_filter(function(e)
        return not e.rewound
      end, fork.entries)
      vim.cmd("SidechatFork")
      H.wait("the second fork shown", function()
        local c = sidechat.current()
        return c ~= fork and c.loaded and #c.entries > 0
      end)
      H.eq(n, #sidechat.current().entries, "all of it")
    end,
  },
  {
    ":SidechatUndo names a file a command changed outside git as not restorable, and the undo leaves it",
    function()
      local shown = sidechat.current()
      sidechat.new_session()
      H.wait("a new session", function()
        return sidechat.current() ~= shown and sidechat.current().loaded
      end)
      local s = sidechat.current()
      sidechat.send("run echo left > left.txt")
      -- Sandboxed, the command runs without asking; without a sandbox it asks.
      H.wait("the turn's end", function()
        if #s:pending_approvals() > 0 then
          sidechat.approve("allow")
        end
        return s.state == "idle" and #s.entries > 2
      end)
      H.eq("left\n", read("left.txt"), "the command wrote it")
      local asked = answer_selects({ "Undo" })
      local result
      sidechat.undo(nil, function(_, r)
        result = r
      end)
      H.wait("the undo's answer", function()
        return result ~= nil
      end)
      H.eq(
        'Undo to before "run echo left > left.txt"? Restores no files; not restorable (changed by a command outside git): left.txt; the messages from there on are folded away',
        asked[1].prompt,
        "the question names the file as not restorable"
      )
      H.eq({ { path = "left.txt", reason = "changed by a command outside git: cannot be restored" } }, result.skipped,
        "the undo says it left it")
      H.eq("left\n", read("left.txt"), "left as it was")
      os.remove(H.ws .. "/left.txt")
    end,
  },
  {
    ":SidechatUndo names the files a command changed in a git work tree, as the daemon's dry run lists them",
    function()
      vim.fn.system({ "git", "init", "-q", H.ws })
      H.eq(0, vim.v.shell_error, "git init")
      local shown = sidechat.current()
      sidechat.new_session()
      H.wait("a new session", function()
        return sidechat.current() ~= shown and sidechat.current().loaded
      end)
      local s = sidechat.current()
      sidechat.send("run echo made > made.txt")
      -- Sandboxed, the command runs without asking; without a sandbox it asks.
      H.wait("the turn's end", function()
        if #s:pending_approvals() > 0 then
          sidechat.approve("allow")
        end
        return s.state == "idle" and #s.entries > 2
      end)
      H.eq("made\n", read("made.txt"), "the command wrote it")
      local asked = answer_selects({ "Undo" })
      vim.cmd("SidechatUndo")
      H.wait("made.txt removed", function()
        return read("made.txt") == nil
      end)
      -- The file goes before the rewind ends; the next test sends on this session once it has.
      H.wait("the turn folded away", function()
        for _, entry in ipairs(s.entries) do
          if entry.rewound then
            return true
          end
        end
        return false
      end)
      H.eq('Undo to before "run echo made > made.txt"? Restores made.txt; the messages from there on are folded away',
        asked[1].prompt, "the question names the command's file")
    end,
  },
  {
    ":SidechatRewind lists a file a command changed, which only the daemon's dry run knows; Cancel keeps it",
    function()
      local s = sidechat.current()
      local before = #s.entries
      sidechat.send("run echo again > again.txt")
      H.wait("the turn's end", function()
        if #s:pending_approvals() > 0 then
          sidechat.approve("allow")
        end
        return s.state == "idle" and #s.entries > before + 1
      end)
      H.eq("again\n", read("again.txt"), "the command wrote it")
      local asked = answer_selects({})
      local result
      vim.cmd("SidechatRewind")
      H.wait("the picker answered", function()
        return #asked == 1
      end)
      H.eq({
        { prompt = "Rewind to before (files and conversation)", items = { "run echo again > again.txt — removes again.txt" } },
      }, asked, "the picker")
      sidechat.rewind_pick(function(err, r)
        result = { err = err, r = r }
      end)
      H.wait("cancelled", function()
        return result ~= nil
      end)
      H.eq({}, result, "nothing done")
      H.eq("again\n", read("again.txt"), "again.txt kept")
    end,
  },
})
