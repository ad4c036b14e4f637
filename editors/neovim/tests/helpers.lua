--- A small harness for headless tests against the real daemon: each test file runs in its own
--- `nvim --headless --clean -l`, with a cleared environment and its own HOME, XDG dirs and
--- database (see run.sh). No test framework: named cases, whole-value comparisons, a summary.
local H = {}

H.plugin = vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h:h")
H.bin = assert(vim.env.SIDECHAT_BIN, "SIDECHAT_BIN must name the sidechat binary")
H.tmp = assert(vim.env.SIDECHAT_TEST_TMP, "SIDECHAT_TEST_TMP must name a scratch directory")
H.ws = vim.fn.getcwd()

vim.opt.rtp:prepend(H.plugin)
vim.cmd("runtime plugin/sidechat.lua")

--- Sets the plugin up against the test's own database.
function H.setup(opts)
  require("sidechat").setup(vim.tbl_deep_extend("force", {
    cmd = { H.bin, "serve" },
    db = H.tmp .. "/sidechat.db",
    restart = { first_delay_ms = 50 },
  }, opts or {}))
end

--- Waits until `cond()` is true, failing with `what` after `timeout_ms` (default 20 s; the
--- machine may be loaded, and nothing here measures time).
function H.wait(what, cond, timeout_ms)
  local ok = vim.wait(timeout_ms or 20000, function()
    local good, result = pcall(cond)
    return good and result
  end, 10)
  if not ok then
    error("timed out waiting for " .. what, 2)
  end
end

local function show(value)
  if type(value) == "table" and vim.islist(value) then
    local out = {}
    for i, v in ipairs(value) do
      out[i] = ("%3d  %s"):format(i, vim.inspect(v))
    end
    return table.concat(out, "\n")
  end
  return vim.inspect(value)
end

--- Fails unless `actual` equals `expected` as a whole.
function H.eq(expected, actual, what)
  if not vim.deep_equal(expected, actual) then
    error(("%s differs\n--- expected\n%s\n--- actual\n%s"):format(what or "value", show(expected), show(actual)), 2)
  end
end

function H.truthy(value, what)
  if not value then
    error((what or "value") .. " is not true", 2)
  end
end

--- Waits until the shown session is idle and holds `n` committed entries.
function H.idle_with(n)
  H.wait(n .. " entries and an idle session", function()
    local s = require("sidechat").current()
    return s.state == "idle" and #s.entries == n
  end)
end

--- The transcript buffer's lines.
function H.lines()
  return require("sidechat.view").lines()
end

--- Waits for the transcript to show exactly `expected`.
function H.wait_lines(expected, what)
  local ok = vim.wait(20000, function()
    return vim.deep_equal(expected, H.lines())
  end, 10)
  if not ok then
    H.eq(expected, H.lines(), what or "transcript")
  end
end

--- Types `text` into the prompt buffer (as if typed, not sent).
function H.type_prompt(text)
  local view = require("sidechat.view")
  local _, prompt = view.buffers()
  vim.api.nvim_buf_set_lines(prompt, 0, -1, false, vim.split(text, "\n", { plain = true }))
end

function H.prompt_text()
  local _, prompt = require("sidechat.view").buffers()
  return table.concat(vim.api.nvim_buf_get_lines(prompt, 0, -1, false), "\n")
end

--- Focuses the first window showing `buf`.
function H.focus(buf)
  local win = vim.fn.win_findbuf(buf)[1]
  assert(win, "no window shows buffer " .. buf)
  vim.api.nvim_set_current_win(win)
  return win
end

--- Presses keys as a user would, in normal mode.
function H.press(keys)
  vim.api.nvim_feedkeys(vim.keycode(keys), "xt", false)
end

--- Messages given to vim.notify, kept for assertions.
H.notes = {}
local notify = vim.notify
vim.notify = function(msg, level, opts)
  table.insert(H.notes, { msg = msg, level = level })
  if vim.env.SIDECHAT_TEST_VERBOSE then
    notify(msg, level, opts)
  end
end

--- The daemons this Neovim started that are still running.
local function daemons()
  local name = vim.fs.basename(H.bin)
  local pids = {}
  for _, pid in ipairs(vim.api.nvim_get_proc_children(vim.fn.getpid())) do
    local proc = vim.api.nvim_get_proc(pid)
    if proc and proc.name == name then
      table.insert(pids, pid)
    end
  end
  return pids
end

--- Stops the plugin's daemon and waits until no daemon of this test is left, so that none
--- outlives it: a daemon busy when asked to stop (a tokenizer still being built for a request)
--- is ended after a while.
function H.stop_daemons()
  require("sidechat").shutdown()
  if vim.wait(10000, function()
    return #daemons() == 0
  end, 20) then
    return
  end
  for _, pid in ipairs(daemons()) do
    io.stdout:write(("note the daemon %d had not exited 10 s after it was stopped: killed\n"):format(pid))
    vim.uv.kill(pid, "sigkill")
  end
  vim.wait(5000, function()
    return #daemons() == 0
  end, 20)
end

--- Runs the named cases in order; exits non-zero when one fails.
function H.run(cases)
  local failed = 0
  for _, case in ipairs(cases) do
    local ok, err = xpcall(case[2], debug.traceback)
    if ok then
      io.stdout:write(("ok   %s\n"):format(case[1]))
    else
      failed = failed + 1
      io.stdout:write(("FAIL %s\n%s\n"):format(case[1], err))
    end
  end
  H.stop_daemons()
  io.stdout:write(("%d passed, %d failed\n"):format(#cases - failed, failed))
  io.stdout:flush()
  os.exit(failed == 0 and 0 or 1)
end

return H
