-- :SidechatRollover against the real daemon: with an argument, with vim.ui.select (and
-- vim.ui.input for another time), and a value the daemon refuses; each read back with
-- session/get.
local H = dofile(vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h") .. "/helpers.lua")
H.setup()
local sidechat = require("sidechat")

--- The shown session's rollover as the daemon has it (`session/get`), "off" when absent.
local function stored()
  local result
  sidechat.client():request("session/get", { sessionId = sidechat.current().id }, function(err, info)
    result = err and ("error: " .. vim.inspect(err)) or (info.rollover or "off")
  end)
  H.wait("session/get", function()
    return result ~= nil
  end)
  return result
end

--- Runs `cmd`, then waits for the plugin to tell what it set (or why not).
local function run(cmd)
  local before = #H.notes
  vim.cmd(cmd)
  H.wait("the plugin's message", function()
    return #H.notes > before
  end)
  return H.notes[#H.notes]
end

--- What vim.ui.select and vim.ui.input were asked, and their scripted answers.
local asked = {}
local function answer(select_choice, input_text)
  vim.ui.select = function(items, opts, on_choice)
    local shown = vim.tbl_map(opts.format_item, items)
    table.insert(asked, { prompt = opts.prompt, items = shown })
    on_choice(select_choice)
  end
  vim.ui.input = function(opts, on_confirm)
    table.insert(asked, { prompt = opts.prompt, default = opts.default })
    on_confirm(input_text)
  end
end

H.run({
  {
    "without a session, it says there is none",
    function()
      H.eq({ msg = "sidechat: no session is shown: the idle rollover is set per session", level = vim.log.levels.INFO }, run("SidechatRollover 1d"))
    end,
  },
  {
    ":SidechatRollover 1d sets it; session/get reads it back",
    function()
      local done = false
      sidechat.new_session(function()
        done = true
      end)
      H.wait("a session", function()
        return done
      end)
      H.eq({ msg = "sidechat: a new context after 1d without a turn", level = vim.log.levels.INFO }, run("SidechatRollover 1d"))
      H.eq("1d", stored())
      H.eq("1d", sidechat.current().info.rollover, "the session's info follows")
    end,
  },
  {
    "without an argument: picked with vim.ui.select, the current one marked; custom asks for a time",
    function()
      answer("off")
      H.eq({ msg = "sidechat: idle rollover off", level = vim.log.levels.INFO }, run("SidechatRollover"))
      H.eq("off", stored())
      answer("custom…", "90m")
      H.eq({ msg = "sidechat: a new context after 90m without a turn", level = vim.log.levels.INFO }, run("SidechatRollover"))
      H.eq("90m", stored())
      H.eq({
        { prompt = "Idle rollover (now 1d)", items = { "off", "1h", "3h", "1d (current)", "custom…" } },
        { prompt = "Idle rollover (now off)", items = { "off (current)", "1h", "3h", "1d", "custom…" } },
        { prompt = "Idle rollover (off, or e.g. 90m, 7d): ", default = "off" },
      }, asked)
    end,
  },
  {
    "a value the daemon refuses is told as an error and changes nothing",
    function()
      local note = run("SidechatRollover soon")
      H.eq(vim.log.levels.ERROR, note.level, "an error")
      H.truthy(vim.startswith(note.msg, "sidechat: cannot set the idle rollover: "), note.msg)
      H.eq("90m", stored())
    end,
  },
})
