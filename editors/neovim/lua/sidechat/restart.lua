--- When to restart a daemon that exited unasked, the same policy as the VS Code extension's
--- (`src/host/restart.ts`; see docs/editors.md): wait 0.5 s, doubling per crash up to 8 s; at
--- most five restarts within a minute (the sixth crash in it is left stopped); a run that lasted
--- a minute was healthy and starts the count afresh. Pure: the caller says when the crash happened and how long the daemon ran, so
--- tests drive it with their own clock.
local M = {}

---@class sidechat.RestartOptions
M.defaults = {
  --- The wait before the first restart; it doubles with each crash after it.
  first_delay_ms = 500,
  --- The longest wait.
  max_delay_ms = 8000,
  --- Restarts allowed within `window_ms`: the crash after them is left stopped.
  max_restarts = 5,
  window_ms = 60000,
  --- A daemon that ran this long before it exited was healthy: the crash count starts again.
  healthy_ms = 60000,
}

---@class sidechat.RestartPolicy
---@field options sidechat.RestartOptions
local Policy = {}
Policy.__index = Policy

---@param opts table? overrides of `M.defaults`
---@return sidechat.RestartPolicy
function M.new(opts)
  return setmetatable({
    options = vim.tbl_extend("force", M.defaults, opts or {}),
    streak = 0, -- crashes since the last healthy run: the exponent of the wait
    recent = {}, -- when the crashes of the last `window_ms` happened
  }, Policy)
end

--- A crash at `now_ms` of a daemon that had run for `ran_ms`: `{ restart = true, delay_ms = n }`,
--- or `{ restart = false, crashes = n }` to give up.
function Policy:crashed(now_ms, ran_ms)
  local o = self.options
  if ran_ms >= o.healthy_ms then
    self:reset()
  end
  local recent = {}
  for _, at in ipairs(self.recent) do
    if now_ms - at < o.window_ms then
      table.insert(recent, at)
    end
  end
  table.insert(recent, now_ms)
  self.recent = recent
  if #recent > o.max_restarts then
    -- The next start is the user's: it gets the whole allowance again.
    self:reset()
    return { restart = false, crashes = #recent }
  end
  local delay_ms = math.min(math.floor(o.first_delay_ms * 2 ^ self.streak), o.max_delay_ms)
  self.streak = self.streak + 1
  return { restart = true, delay_ms = delay_ms }
end

--- Forgets the crashes (a start the user asked for).
function Policy:reset()
  self.streak = 0
  self.recent = {}
end

return M
