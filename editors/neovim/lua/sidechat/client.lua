--- The connection to `sidechat serve`: spawns it with Neovim's JSON-RPC client
--- (`vim.lsp.rpc.start`, Content-Length framing), initializes it, queues requests until it is
--- ready, and restarts it when it exits, telling listeners so they can refetch what they show.
---
--- With `connection = "attach"` (or "auto" when a daemon listens), what is spawned is
--- `sidechat attach`, a stdio bridge to the listening daemon, rather than a daemon of its own.
--- A bridge and not `vim.lsp.rpc.connect`: that speaks Content-Length frames over a raw
--- socket, while the listening daemon speaks WebSocket (an HTTP upgrade with a token).
local config = require("sidechat.config")
local protocol = require("sidechat.protocol")
local restart = require("sidechat.restart")

local M = {}

--- Error code given to callbacks of requests that the daemon will never answer.
M.EXITED = -32099
--- Error code given when the daemon cannot be started at all.
M.UNAVAILABLE = -32098

---@class sidechat.Client
---@field status "stopped"|"starting"|"ready"|"restarting"|"failed"
---@field init_result table? the `initialize` result (accounts, capabilities…)
---@field clock { now: fun(): integer, defer: fun(fn: fun(), ms: integer) } the time restarts run on
---@field generation integer bumped at each spawn, so callbacks of an old process are ignored
---@field started_at integer? clock time of the last spawn
---@field restart_in_ms integer? the wait before the restart under way
---@field event_listeners fun(params: table)[]
---@field ready_listeners fun(restarted: boolean)[]
---@field exit_listeners fun(code: integer?, signal: integer?)[]
---@field last_error string?
local Client = {}
Client.__index = Client

local function new()
  return setmetatable({
    status = "stopped",
    rpc = nil, -- vim.lsp.rpc.PublicClient
    generation = 0, -- bumped at each spawn, so callbacks of an old process are ignored
    queue = {}, -- requests waiting for the daemon to be ready
    pending = {}, -- requests sent and not answered: id -> callback
    next_id = 0,
    init_result = nil,
    policy = nil, -- the restart policy (sidechat.restart), made from the options at the first crash
    clock = M.clock,
    started_at = nil, -- clock time of the last spawn
    event_listeners = {},
    ready_listeners = {},
    exit_listeners = {},
    last_error = nil,
  }, Client)
end

--- The time and the timer restarts run on; a test sets its own on the client (`client.clock`).
M.clock = {
  now = function()
    return vim.uv.now()
  end,
  defer = function(fn, ms)
    vim.defer_fn(fn, ms)
  end,
}

--- Where the daemon's binary is, or nil and a sentence saying which path was tried.
---@param cmd string[]
---@return string? path
---@return string? why
function M.resolve(cmd)
  local exe = cmd and cmd[1]
  if type(exe) ~= "string" or exe == "" then
    return nil, "the `cmd` option names no program"
  end
  local path = vim.fn.exepath(exe)
  if path ~= "" then
    return path
  end
  if exe:find("/", 1, true) then
    return nil, ("no executable at %s"):format(exe)
  end
  return nil, ("`%s` was not found on $PATH (%s)"):format(exe, vim.env.PATH or "")
end

--- Where a listening daemon (`sidechat serve --listen`) writes its URL, token and pid, as the
--- daemon chooses: $XDG_RUNTIME_DIR/sidechat/serve.json, else the data folder.
---@return string
function M.serve_file()
  local runtime = vim.env.XDG_RUNTIME_DIR
  if runtime and runtime ~= "" then
    return runtime .. "/sidechat/serve.json"
  end
  local data = vim.env.XDG_DATA_HOME
  if not data or data == "" then
    data = (vim.env.HOME or "~") .. "/.local/share"
  end
  return data .. "/sidechat/serve.json"
end

--- The same file, whether or not both paths exist yet.
local function same_file(a, b)
  local real_a, real_b = vim.uv.fs_realpath(a), vim.uv.fs_realpath(b)
  if real_a and real_b then
    return real_a == real_b
  end
  return vim.fs.normalize(a) == vim.fs.normalize(b)
end

--- The listening daemon serve.json names, when it runs and serves this plugin's database; or
--- nil and a sentence saying why not.
---@return table? serve {url: string, pid: integer, db: string?}
---@return string? why
function M.listening()
  local path = M.serve_file()
  local fd = io.open(path, "r")
  if not fd then
    return nil, ("no daemon listens (%s does not exist)"):format(path)
  end
  local text = fd:read("*a")
  fd:close()
  local ok, serve = pcall(vim.json.decode, text, { luanil = { object = true } })
  if not ok or type(serve) ~= "table" or type(serve.url) ~= "string" then
    return nil, ("%s is not a serve file"):format(path)
  end
  if type(serve.pid) ~= "number" or vim.uv.kill(serve.pid, 0) ~= 0 then
    return nil, ("the daemon %s names (pid %s) is not running"):format(path, tostring(serve.pid))
  end
  local db = require("sidechat.health").database()
  if serve.db and not same_file(serve.db, db) then
    return nil, ("the listening daemon serves %s, not %s"):format(serve.db, db)
  end
  return { url = serve.url, pid = serve.pid, db = serve.db }
end

--- How the plugin reaches a daemon now: "spawn" or "attach", and for "auto", why.
---@return "spawn"|"attach" mode
---@return string? why
function M.connection()
  local mode = config.options.connection or "auto"
  if mode == "spawn" or mode == "attach" then
    return mode
  end
  local serve, why = M.listening()
  if serve then
    return "attach", "a daemon listens at " .. serve.url
  end
  return "spawn", why
end

--- The daemon's command line as the plugin runs it: `cmd`, or its program with `attach`.
---@return string[]? cmd
---@return string? why
function M.command()
  local opts = config.options
  local path, why = M.resolve(opts.cmd)
  if not path then
    return nil, why
  end
  local cmd
  if M.connection() == "attach" then
    cmd = { path, "attach" }
  else
    cmd = vim.list_extend({ path }, vim.list_slice(opts.cmd, 2))
  end
  if opts.db then
    vim.list_extend(cmd, { "--db", vim.fn.expand(opts.db) })
  end
  return cmd
end

function Client:on_event(fn)
  table.insert(self.event_listeners, fn)
end

--- `fn(restarted)` runs each time the daemon is initialized.
function Client:on_ready(fn)
  table.insert(self.ready_listeners, fn)
end

--- `fn(code, signal)` runs when the daemon exits unasked.
function Client:on_exit(fn)
  table.insert(self.exit_listeners, fn)
end

local function each(listeners, ...)
  for _, fn in ipairs(listeners) do
    local ok, err = pcall(fn, ...)
    if not ok then
      vim.notify("sidechat: " .. tostring(err), vim.log.levels.ERROR)
    end
  end
end

function Client:fail_queued(err)
  local queue = self.queue
  self.queue = {}
  for _, item in ipairs(queue) do
    item.callback(err, nil)
  end
end

function Client:fail_pending(err)
  local pending = self.pending
  self.pending = {}
  for _, callback in pairs(pending) do
    callback(err, nil)
  end
end

--- Sends one request now; `callback(err, result)` runs once, also when the daemon exits first.
function Client:send_now(method, params, callback)
  self.next_id = self.next_id + 1
  local id = self.next_id
  local generation = self.generation
  self.pending[id] = callback
  local ok = self.rpc.request(method, params or vim.empty_dict(), function(err, result)
    if generation ~= self.generation or not self.pending[id] then
      return
    end
    self.pending[id] = nil
    callback(err, result)
  end)
  if not ok then
    self.pending[id] = nil
    callback({ code = M.EXITED, message = "the sidechat daemon is not running" }, nil)
  end
end

--- Sends a request once the daemon is ready (starting it if needed).
---@param method string
---@param params table?
---@param callback fun(err: sidechat.RpcError?, result: any)?
function Client:request(method, params, callback)
  callback = callback or function(err)
    if err then
      vim.notify(("sidechat: %s failed: %s"):format(method, err.message or vim.inspect(err)), vim.log.levels.ERROR)
    end
  end
  if self.status == "ready" then
    return self:send_now(method, params, callback)
  end
  table.insert(self.queue, { method = method, params = params, callback = callback })
  if self.status == "stopped" or self.status == "failed" then
    self:start()
  end
end

--- Like `request`, but waits for the answer (for health checks and tests).
---@return table? err
---@return any result
function Client:request_sync(method, params, timeout_ms)
  local done, err, result = false, nil, nil
  self:request(method, params, function(e, r)
    done, err, result = true, e, r
  end)
  if not vim.wait(timeout_ms or 10000, function()
    return done
  end, 10) then
    return { code = M.EXITED, message = method .. " timed out" }, nil
  end
  return err, result
end

function Client:start()
  local cmd, why = M.command()
  if not cmd then
    self.status = "failed"
    self.last_error = "sidechat binary not found: " .. why
    vim.notify("sidechat: " .. self.last_error, vim.log.levels.ERROR)
    self:fail_queued({ code = M.UNAVAILABLE, message = self.last_error })
    return false
  end
  if config.options.connection == "attach" then
    local serve, absent = M.listening()
    if not serve then
      self.status = "failed"
      self.last_error = "cannot attach: " .. absent
      vim.notify("sidechat: " .. self.last_error, vim.log.levels.ERROR)
      self:fail_queued({ code = M.UNAVAILABLE, message = self.last_error })
      return false
    end
  end
  local restarted = self.init_result ~= nil
  self.generation = self.generation + 1
  local generation = self.generation
  self.status = "starting"
  self.started_at = self.clock.now()
  local env = vim.tbl_extend("force", { SIDECHAT_LOG = config.options.log_level }, config.options.env or {})
  -- on_error and server_request are left to Neovim's defaults: the daemon sends no requests,
  -- and its errors end in on_exit.
  ---@diagnostic disable-next-line: missing-fields
  local ok, rpc = pcall(vim.lsp.rpc.start, cmd, {
    notification = function(method, params)
      if generation == self.generation and method == protocol.method.sessionEvent then
        each(self.event_listeners, params)
      end
    end,
    on_exit = function(code, signal)
      vim.schedule(function()
        if generation == self.generation then
          self:exited(code, signal)
        end
      end)
    end,
  } --[[@as vim.lsp.rpc.Dispatchers]], { cwd = vim.fn.getcwd(), env = env })
  if not ok then
    self.status = "failed"
    self.last_error = tostring(rpc)
    vim.notify("sidechat: cannot start " .. cmd[1] .. ": " .. self.last_error, vim.log.levels.ERROR)
    self:fail_queued({ code = M.UNAVAILABLE, message = self.last_error })
    return false
  end
  self.rpc = rpc
  self:send_now(protocol.method.initialize, {
    clientInfo = { name = "sidechat.nvim" },
    protocolVersion = 1,
  }, function(err, result)
    if generation ~= self.generation then
      return
    end
    if err then
      self.last_error = err.message
      -- A daemon that exited is told once, with what happens next, by `exited`.
      if err.code ~= M.EXITED then
        vim.notify("sidechat: initialize failed: " .. tostring(err.message), vim.log.levels.ERROR)
      end
      self:fail_queued(err)
      return
    end
    self.init_result = result
    self.rpc.notify(protocol.method.initialized, vim.empty_dict())
    self.status = "ready"
    self.last_error = nil
    local queue = self.queue
    self.queue = {}
    for _, item in ipairs(queue) do
      self:send_now(item.method, item.params, item.callback)
    end
    each(self.ready_listeners, restarted)
  end)
  return true
end

--- The daemon exited without being asked: fail what it will never answer, then restart it.
function Client:exited(code, signal)
  self.rpc = nil
  local err = { code = M.EXITED, message = ("the sidechat daemon exited (code %d, signal %d)"):format(code, signal) }
  self:fail_pending(err)
  if self.status == "stopped" then
    return
  end
  each(self.exit_listeners, code, signal)
  self.policy = self.policy or restart.new(config.options.restart)
  local now = self.clock.now()
  local decision = self.policy:crashed(now, now - (self.started_at or now))
  if not decision.restart then
    self.status = "failed"
    self.last_error = ("%s, %d times within %d s, so it is not restarted"):format(
      err.message,
      decision.crashes,
      math.floor(self.policy.options.window_ms / 1000)
    )
    vim.notify("sidechat: " .. self.last_error .. " (run a sidechat command to try again)", vim.log.levels.ERROR)
    self:fail_queued(err)
    return
  end
  self.status = "restarting"
  self.restart_in_ms = decision.delay_ms
  vim.notify(("sidechat: %s; restarting it in %g s"):format(err.message, decision.delay_ms / 1000), vim.log.levels.WARN)
  local generation = self.generation
  self.clock.defer(function()
    if self.status == "restarting" and generation == self.generation then
      self:start()
    end
  end, decision.delay_ms)
end

--- Stops the daemon (asked, so no restart); queued and pending requests fail.
function Client:stop()
  local rpc = self.rpc
  self.status = "stopped"
  self.generation = self.generation + 1
  self.rpc = nil
  self.init_result = nil
  local err = { code = M.EXITED, message = "the sidechat daemon was stopped" }
  self:fail_pending(err)
  self:fail_queued(err)
  if rpc and not rpc.is_closing() then
    rpc.request(protocol.method.shutdown, nil, function()
      rpc.notify(protocol.method.exit, nil)
    end)
    vim.defer_fn(function()
      if not rpc.is_closing() then
        rpc.terminate()
      end
    end, 1000)
  end
end

--- The daemon's process id while it runs (it is a child of this Neovim).
---@return integer?
function Client:pid()
  if not self.rpc or self.rpc.is_closing() then
    return nil
  end
  local cmd = M.command()
  local name = cmd and vim.fs.basename(cmd[1])
  for _, pid in ipairs(vim.api.nvim_get_proc_children(vim.fn.getpid())) do
    local proc = vim.api.nvim_get_proc(pid)
    if proc and proc.name == name then
      return pid
    end
  end
end

---@type sidechat.Client?
local instance
--- The one connection of this Neovim.
---@return sidechat.Client
function M.get()
  if not instance then
    instance = new()
  end
  return instance
end

--- Stops the daemon and forgets the connection and its listeners.
function M.reset()
  if instance then
    instance:stop()
  end
  instance = nil
end

return M
