-- The approval window of a `run_command` call says whether the command will run sandboxed
-- (`sandboxed` on the pending approval): asked by an ask rule with the sandbox on, it runs
-- sandboxed; with the sandbox off, outside it.
local H = dofile(vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h") .. "/helpers.lua")
local sidechat = require("sidechat")
local approval = require("sidechat.approval")

local config = vim.env.XDG_CONFIG_HOME .. "/sidechat/config.toml"
vim.fn.mkdir(vim.fn.fnamemodify(config, ":h"), "p")

--- Starts a daemon reading `lines` as its configuration, asks the demo model to run `command`
--- and returns the approval window's lines once it opens (the call is then denied).
local function window_for(lines, command)
  H.stop_daemons()
  vim.fn.writefile(lines, config)
  H.setup()
  vim.cmd("Sidechat")
  sidechat.send("run " .. command)
  H.wait("the approval window", function()
    return approval.is_open()
  end)
  local shown = vim.api.nvim_buf_get_lines(approval.state.buf, 0, -1, false)
  local done = false
  sidechat.approve("deny", nil, function()
    done = true
  end)
  H.wait("the denial", function()
    return done and sidechat.current().state == "idle"
  end)
  return shown
end

H.run({
  {
    "asked by an ask rule with the sandbox on: the window says it runs sandboxed",
    function()
      local shown = window_for({ "[permissions]", 'ask = ["run_command(touch *)"]' }, "touch made.txt")
      local init = sidechat.client().init_result
      H.truthy(init.sandbox.active, "the sandbox works on this machine: " .. init.sandbox.detail)
      H.eq({ "run `touch made.txt`", "", "$ touch made.txt", "", approval.SANDBOXED[true] }, vim.list_slice(shown, 1, 5),
        "the window's top")
    end,
  },
  {
    "with the sandbox off: the window says it runs outside it",
    function()
      local shown = window_for({ "[sandbox]", "enabled = false" }, "touch made.txt")
      H.eq({ "run `touch made.txt`", "", "$ touch made.txt", "", approval.SANDBOXED[false] }, vim.list_slice(shown, 1, 5),
        "the window's top")
    end,
  },
  {
    "other tools say nothing of a sandbox",
    function()
      sidechat.send("create notes.md with hello")
      H.wait("the approval window", function()
        return approval.is_open()
      end)
      local shown = vim.api.nvim_buf_get_lines(approval.state.buf, 0, -1, false)
      H.eq({ "write notes.md (1 line)", "", "+++ notes.md", "+hello", "" }, vim.list_slice(shown, 1, 5), "the window's top")
      H.truthy(not vim.tbl_contains(shown, approval.SANDBOXED[true]) and not vim.tbl_contains(shown, approval.SANDBOXED[false]),
        "no sandbox line: " .. vim.inspect(shown))
      sidechat.approve("deny")
    end,
  },
})
