--- `:checkhealth sidechat`: the binary, its version, the database, how the daemon is reached
--- and the configured accounts.
local config = require("sidechat.config")
local client_mod = require("sidechat.client")
local protocol = require("sidechat.protocol")

local M = {}

--- The database the daemon uses, as it chooses it: `--db`, $SIDECHAT_DB, then the XDG default.
function M.database()
  local opts = config.options
  if opts.db then
    return vim.fn.expand(opts.db), "the `db` option"
  end
  local env_db = (opts.env or {}).SIDECHAT_DB or vim.env.SIDECHAT_DB
  if env_db and env_db ~= "" then
    return env_db, "$SIDECHAT_DB"
  end
  local data = vim.env.XDG_DATA_HOME
  if not data or data == "" then
    data = (vim.env.HOME or "~") .. "/.local/share"
  end
  return data .. "/sidechat/sidechat.db", "the default"
end

--- Asks a short-lived daemon for its `initialize` answer (the accounts it would use).
local function initialize(cmd)
  local frames = table.concat({
    vim.json.encode({ jsonrpc = "2.0", id = 1, method = protocol.method.initialize, params = { clientInfo = { name = "checkhealth" } } }),
    vim.json.encode({ jsonrpc = "2.0", id = 2, method = protocol.method.shutdown }),
    vim.json.encode({ jsonrpc = "2.0", method = protocol.method.exit }),
  }, "\n") .. "\n"
  local env = vim.tbl_extend("force", { SIDECHAT_LOG = "error" }, config.options.env or {})
  local ok, result = pcall(function()
    return vim.system(cmd, { stdin = frames, env = env, text = true }):wait(10000)
  end)
  if not ok then
    return nil, tostring(result)
  end
  for line in (result.stdout or ""):gmatch("[^\n]+") do
    local decoded_ok, msg = pcall(vim.json.decode, line, { luanil = { object = true } })
    if decoded_ok and type(msg) == "table" and msg.id == 1 then
      if msg.error then
        return nil, msg.error.message
      end
      return msg.result
    end
  end
  return nil, ("no answer to initialize (exit code %s): %s"):format(tostring(result.code), vim.trim(result.stderr or ""))
end

function M.check()
  local health = vim.health
  health.start("sidechat")
  if vim.fn.has("nvim-0.10") == 0 then
    local v = vim.version()
    health.error(("Neovim 0.10 or newer is needed; this is %d.%d.%d"):format(v.major, v.minor, v.patch))
  else
    local v = vim.version()
    health.ok(("Neovim %d.%d.%d"):format(v.major, v.minor, v.patch))
  end
  local path, why = client_mod.resolve(config.options.cmd)
  if not path then
    health.error("sidechat binary not found: " .. why, { "Install sidechat (cargo install --path .) or set `cmd` in setup{}" })
    return
  end
  health.ok("binary: " .. path)
  local version = vim.system({ path, "--version" }, { text = true }):wait(5000)
  if version.code == 0 then
    health.ok("version: " .. vim.trim(version.stdout or ""))
  else
    health.error(("`%s --version` failed (exit code %d): %s"):format(path, version.code, vim.trim(version.stderr or "")))
  end
  local db, source = M.database()
  if vim.uv.fs_stat(db) then
    health.ok(("database: %s (%s)"):format(db, source))
  else
    health.info(("database: %s (%s; created on first use)"):format(db, source))
  end
  local mode, reason = client_mod.connection()
  if config.options.connection == "attach" then
    local serve, absent = client_mod.listening()
    if not serve then
      health.error("connection: attach, but " .. absent, {
        "Start one with `sidechat serve --listen 127.0.0.1:0 --no-stdio`, or set `connection = \"auto\"`",
      })
      return
    end
    health.ok("connection: attached to the daemon listening at " .. serve.url)
  elseif mode == "attach" then
    health.ok(("connection: auto, attached (%s)"):format(reason))
  else
    health.ok(("connection: %s, a daemon of its own%s"):format(
      config.options.connection or "auto",
      reason and (" (" .. reason .. ")") or ""
    ))
  end
  local client = client_mod.get()
  local init = client.status == "ready" and client.init_result or nil
  local err
  if not init then
    local cmd = client_mod.command()
    init, err = initialize(cmd)
  end
  if not init then
    health.error("the daemon did not answer initialize: " .. tostring(err))
    return
  end
  for _, account in ipairs(init.accounts) do
    local label = ("account %s: %s, model %s"):format(account.name, account.kind, account.defaultModel)
    if account.isDemo then
      label = label .. " (the offline demo model: set ANTHROPIC_API_KEY or OPENAI_API_KEY for a real one)"
    end
    if account.name == init.defaultAccount then
      label = label .. " [default]"
    end
    health.ok(label)
  end
  if client.status == "failed" then
    health.error("the plugin's daemon is not running: " .. tostring(client.last_error))
  elseif client.status == "ready" then
    health.ok(("the plugin's daemon is running (pid %s)"):format(tostring(client:pid())))
  end
end

return M
