-- The restart policy (the same as the VS Code extension's): the waits it gives, when it gives
-- up, and a healthy run starting the count afresh; then the client following it, against a
-- daemon that cannot start and against the real daemon, on a clock the test moves.
local H = dofile(vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h") .. "/helpers.lua")
H.setup()
local sidechat = require("sidechat")
local client_mod = require("sidechat.client")
local restart = require("sidechat.restart")
local protocol = require("sidechat.protocol")

--- Time that moves when the test says, and timers that fire when the test says.
local function test_clock()
  local clock = { time = 0, timers = {} }
  function clock.now()
    return clock.time
  end
  function clock.defer(fn, ms)
    table.insert(clock.timers, { fn = fn, ms = ms })
  end
  --- Fires the one waiting timer; its wait.
  function clock.fire()
    H.eq(1, #clock.timers, "restarts waiting")
    local timer = table.remove(clock.timers, 1)
    timer.fn()
    return timer.ms
  end
  return clock
end

local function restarting(ms)
  return { restart = true, delay_ms = ms }
end

--- A client of its own (not the plugin's) on `clock`, with the default policy.
local function client_on(clock, cmd)
  client_mod.reset()
  require("sidechat.config").set({ cmd = cmd, db = H.tmp .. "/sidechat.db" })
  local client = client_mod.get()
  client.clock = clock
  return client
end

H.run({
  {
    "the policy: 0.5 s doubling to 8 s, at most five restarts within a minute, afresh after a healthy minute",
    function()
      local policy = restart.new()
      local function at(seconds, ran_seconds)
        return policy:crashed(seconds * 1000, ran_seconds * 1000)
      end
      -- Crashes 20 s apart: the oldest leave the minute, the wait goes on doubling to its cap.
      H.eq(
        { restarting(500), restarting(1000), restarting(2000), restarting(4000), restarting(8000), restarting(8000) },
        { at(0, 1), at(20, 19), at(40, 19), at(60, 19), at(80, 19), at(100, 19) },
        "crashes 20 s apart"
      )
      -- A healthy minute: the first wait again.
      H.eq(restarting(500), at(200, 60), "after a healthy minute")
      -- Six crashes within a minute (that one the first): given up; the next start has the
      -- whole allowance again.
      H.eq(
        { restarting(1000), restarting(2000), restarting(4000), restarting(8000), { restart = false, crashes = 6 } },
        { at(201, 0), at(202, 0), at(203, 0), at(204, 0), at(205, 0) },
        "crashes a second apart"
      )
      H.eq(restarting(500), at(206, 0), "after giving up")
    end,
  },
  {
    "a daemon that exits at once: restarted after 0.5, 1, 2, 4 and 8 s, then given up at the sixth crash and told; a command starts it again",
    function()
      local script = H.tmp .. "/crashing-sidechat"
      vim.fn.writefile({ "#!/bin/sh", "exit 3" }, script)
      vim.fn.setfperm(script, "rwxr-xr-x")
      local clock = test_clock()
      local client = client_on(clock, { script, "serve" })
      local answered
      client:request(protocol.method.sessionList, {}, function(err)
        answered = err
      end)
      local waits = {}
      for crash = 1, 5 do
        H.wait("the restart after crash " .. crash, function()
          return #clock.timers == 1
        end)
        table.insert(waits, clock.fire())
      end
      H.wait("giving up", function()
        return client.status == "failed"
      end)
      H.eq({ 500, 1000, 2000, 4000, 8000 }, waits, "the waits")
      H.eq({}, clock.timers, "restarts waiting after giving up")
      H.truthy(answered and answered.code == client_mod.EXITED, "the request failed as the daemon exited")
      local told = vim.tbl_map(
        function(n)
          return n.msg
        end,
        vim.tbl_filter(function(n)
          return n.msg:find("exited (code 3", 1, true)
        end, H.notes)
      )
      H.eq({
        "sidechat: the sidechat daemon exited (code 3, signal 0); restarting it in 0.5 s",
        "sidechat: the sidechat daemon exited (code 3, signal 0); restarting it in 1 s",
        "sidechat: the sidechat daemon exited (code 3, signal 0); restarting it in 2 s",
        "sidechat: the sidechat daemon exited (code 3, signal 0); restarting it in 4 s",
        "sidechat: the sidechat daemon exited (code 3, signal 0); restarting it in 8 s",
        "sidechat: the sidechat daemon exited (code 3, signal 0), 6 times within 60 s, so it is not restarted (run a sidechat command to try again)",
      }, told, "what the user is told")

      -- A command after giving up starts it again, with the whole allowance.
      client:request(protocol.method.sessionList, {}, function() end)
      H.wait("the restart after the retry", function()
        return #clock.timers == 1
      end)
      H.eq(500, clock.fire(), "the first wait again")
      client_mod.reset()
    end,
  },
  {
    "the real daemon killed: the wait doubles per crash, and a minute of healthy running brings it back to 0.5 s",
    function()
      local clock = test_clock()
      local client = client_on(clock, { H.bin, "serve" })
      H.eq(nil, (client:request_sync(protocol.method.sessionList, {})), "the first answer's error")
      local function crash_after(ran_ms)
        local pid = client:pid()
        H.truthy(pid, "the daemon's pid")
        clock.time = clock.time + ran_ms
        vim.uv.kill(pid, "sigkill")
        H.wait("the crash", function()
          return #clock.timers == 1
        end)
        local wait = clock.fire()
        H.wait("the restarted daemon", function()
          return client.status == "ready" and client:pid() ~= nil and client:pid() ~= pid
        end)
        return wait
      end
      H.eq({ 500, 1000, 500, 1000 }, { crash_after(1000), crash_after(1000), crash_after(60000), crash_after(59999) }, "the waits")
      local err, result = client:request_sync(protocol.method.sessionList, {})
      H.eq({ nil, {} }, { err, result.sessions }, "sessions after the restarts")
      client_mod.reset()
    end,
  },
})
