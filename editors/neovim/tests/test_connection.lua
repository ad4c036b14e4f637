-- `connection = "auto" | "attach" | "spawn"`: sharing a daemon that listens (`sidechat serve
-- --listen`) through the `sidechat attach` bridge, and spawning one when none does.
local H = dofile(vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h") .. "/helpers.lua")
local sidechat = require("sidechat")
local client_mod = require("sidechat.client")

local db = H.tmp .. "/sidechat.db"
-- No $XDG_RUNTIME_DIR in the tests' environment: the daemon writes it in the data folder.
local serve_file = H.tmp .. "/xdg/data/sidechat/serve.json"
local socket = H.tmp .. "/sockets/sidechat.sock"

local function errors()
  return vim.tbl_filter(function(n)
    return n.level == vim.log.levels.ERROR
  end, H.notes)
end

--- A daemon with no stdio listening on a unix socket on the test's database, once it has
--- written its serve file.
local function listen()
  local daemon = vim.system({ H.bin, "serve", "--db", db, "--listen", "unix:" .. socket, "--no-stdio" }, {
    env = { SIDECHAT_LOG = "warn" },
    stderr = false,
    stdout = false,
  })
  H.wait("the serve file", function()
    return vim.uv.fs_stat(serve_file) ~= nil
  end)
  return daemon
end

local listening

H.run({
  {
    "attach with no daemon listening says so and spawns nothing",
    function()
      H.setup({ connection = "attach" })
      H.notes = {}
      sidechat.open()
      H.eq({
        {
          msg = ("sidechat: cannot attach: no daemon listens (%s does not exist)"):format(serve_file),
          level = vim.log.levels.ERROR,
        },
      }, errors(), "errors")
      H.eq("failed", sidechat.client().status, "status")
      sidechat.shutdown()
    end,
  },
  {
    "spawn, or a daemon listening on another database: a daemon of its own",
    function()
      listening = listen()
      H.setup({ connection = "spawn" })
      H.eq({ H.bin, "serve", "--db", db }, client_mod.command(), "spawn's command")
      local other = H.tmp .. "/other.db"
      H.setup({ db = other })
      H.eq({ H.bin, "serve", "--db", other }, client_mod.command(), "auto's command on another database")
      local mode, why = client_mod.connection()
      H.eq({ "spawn", ("the listening daemon serves %s, not %s"):format(db, other) }, { mode, why }, "auto")
    end,
  },
  {
    "auto attaches to the daemon listening on the same database, and spawns once it is gone",
    function()
      H.setup()
      H.eq({ H.bin, "attach", "--db", db }, client_mod.command(), "auto's command")
      sidechat.open()
      H.type_prompt("hello")
      sidechat.submit()
      H.idle_with(2)
      local session = sidechat.current().id
      -- The listening daemon holds the plugin's connection: when it ends, so does the bridge.
      local exited
      sidechat.client():on_exit(function(code)
        exited = code
      end)
      listening:kill("sigterm")
      H.eq(0, listening:wait(20000).code, "the listening daemon's exit code")
      H.wait("the bridge to end", function()
        return exited ~= nil
      end)
      H.eq(1, exited, "the bridge's exit code")
      -- Restarted, with no daemon listening any more: a daemon of its own, on the same database.
      H.wait("the restarted daemon", function()
        return sidechat.client().status == "ready"
      end)
      H.eq({ H.bin, "serve", "--db", db }, client_mod.command(), "the command after the restart")
      local err, result = sidechat.client():request_sync("session/list", {})
      H.eq(nil, err, "session/list")
      H.eq({ session }, vim.tbl_map(function(s)
        return s.id
      end, result.sessions), "the session made through the listening daemon")
    end,
  },
})
