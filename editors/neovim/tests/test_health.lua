-- :checkhealth sidechat with the daemon found, and what the user is told when it is not.
local H = dofile(vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h") .. "/helpers.lua")
local sidechat = require("sidechat")

local function checkhealth()
  vim.cmd("silent checkhealth sidechat")
  local lines = vim.api.nvim_buf_get_lines(0, 0, -1, false)
  vim.cmd("bwipeout!")
  return lines
end

local v = vim.version()
local NVIM = ("- ✅ OK Neovim %d.%d.%d"):format(v.major, v.minor, v.patch)

local function report(status, items)
  local lines = {
    "",
    "==============================================================================",
    "sidechat:" .. string.rep(" ", 78 - 9 - vim.fn.strdisplaywidth(status)) .. status,
    "",
    "sidechat ~",
    NVIM,
  }
  vim.list_extend(lines, items)
  table.insert(lines, "")
  return lines
end

local function errors()
  return vim.tbl_filter(function(n)
    return n.level == vim.log.levels.ERROR
  end, H.notes)
end

H.run({
  {
    "no binary at the configured path: checkhealth and the first command name it",
    function()
      local missing = H.tmp .. "/missing/sidechat"
      H.setup({ cmd = { missing, "serve" } })
      H.eq(report("1 ❌", {
        "- ❌ ERROR sidechat binary not found: no executable at " .. missing,
        "  - ADVICE:",
        "    - Install sidechat (cargo install --path .) or set `cmd` in setup{}",
      }), checkhealth(), "checkhealth")
      H.notes = {}
      vim.cmd("Sidechat")
      H.eq({ { msg = "sidechat: sidechat binary not found: no executable at " .. missing, level = vim.log.levels.ERROR } }, errors(), "errors")
      H.type_prompt("hello")
      sidechat.submit()
      H.eq("hello", H.prompt_text(), "the prompt keeps what was not sent")
      sidechat.shutdown()
    end,
  },
  {
    "no binary on $PATH: the message names the search",
    function()
      H.setup({ cmd = { "sidechat-not-installed", "serve" } })
      H.notes = {}
      vim.cmd("SidechatSessions")
      H.eq({
        {
          msg = "sidechat: sidechat binary not found: `sidechat-not-installed` was not found on $PATH (" .. vim.env.PATH .. ")",
          level = vim.log.levels.ERROR,
        },
        {
          msg = "sidechat: cannot list sessions: sidechat binary not found: `sidechat-not-installed` was not found on $PATH ("
            .. vim.env.PATH
            .. ")",
          level = vim.log.levels.ERROR,
        },
      }, errors(), "errors")
      sidechat.shutdown()
    end,
  },
  {
    "checkhealth: binary, version, database, accounts, the running daemon",
    function()
      H.setup()
      local version = vim.trim(vim.system({ H.bin, "--version" }, { text = true }):wait().stdout)
      local db = H.tmp .. "/sidechat.db"
      local spawn = "- ✅ OK connection: auto, a daemon of its own (no daemon listens ("
        .. H.tmp
        .. "/xdg/data/sidechat/serve.json does not exist))"
      local demo = "- ✅ OK account demo: demo, model demo (the offline demo model: set ANTHROPIC_API_KEY or OPENAI_API_KEY for a real one) [default]"
      H.eq(report("✅", {
        "- ✅ OK binary: " .. H.bin,
        "- ✅ OK version: " .. version,
        "- database: " .. db .. " (the `db` option; created on first use)",
        spawn,
        demo,
      }), checkhealth(), "checkhealth before a start")
      sidechat.open()
      H.wait("the daemon", function()
        return sidechat.client().status == "ready"
      end)
      local err = sidechat.client():request_sync("session/list", {})
      H.eq(nil, err, "session/list")
      H.eq(report("✅", {
        "- ✅ OK binary: " .. H.bin,
        "- ✅ OK version: " .. version,
        "- ✅ OK database: " .. db .. " (the `db` option)",
        spawn,
        demo,
        ("- ✅ OK the plugin's daemon is running (pid %d)"):format(sidechat.client():pid()),
      }), checkhealth(), "checkhealth with the daemon running")
    end,
  },
})
