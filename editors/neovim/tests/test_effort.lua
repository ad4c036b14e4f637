-- :SidechatEffort: a vim.ui.select of "default" and the levels the daemon says the session's
-- model takes through its account (`effortLevels`: gpt-5.1 low to high through OpenAI, a Claude
-- model's thinking budgets through Anthropic; a model that takes none is offered low to high,
-- kept for a later model), set with session/update {effort}, and shown in
-- the winbar beside the model. Accounts of a config file; no request reaches a model.
local H = dofile(vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h") .. "/helpers.lua")

vim.fn.mkdir(vim.env.XDG_CONFIG_HOME .. "/sidechat", "p")
vim.fn.writefile({
  'default_account = "local"',
  "[accounts.local]",
  'kind = "openai"',
  'base_url = "http://127.0.0.1:9/v1"',
  'default_model = "gpt-5.1"',
  'effort = "medium"',
  "[accounts.claude]",
  'kind = "anthropic"',
  'api_key_env = "SIDECHAT_TEST_CLAUDE_KEY"',
  'default_model = "claude-sonnet-4-5"',
}, vim.env.XDG_CONFIG_HOME .. "/sidechat/config.toml")
H.setup({ env = { SIDECHAT_TEST_CLAUDE_KEY = "not-a-key" } })
local sidechat = require("sidechat")
local view = require("sidechat.view")
local method = require("sidechat.protocol").method

--- Replaces vim.ui.select: records each call (its prompt and items as shown) and answers with
--- the item shown as `answer` (nil cancels).
local function answer_select(answer)
  local asked = {}
  vim.ui.select = function(items, opts, on_choice)
    local shown = vim.tbl_map(opts.format_item or tostring, items)
    table.insert(asked, { prompt = opts.prompt, items = shown })
    for i, text in ipairs(shown) do
      if text == answer then
        return on_choice(items[i], i)
      end
    end
    on_choice(nil, nil)
  end
  return asked
end

--- The transcript window's winbar without its highlight items: what it reads as.
local function bar()
  local win = vim.fn.win_findbuf(view.state.transcript)[1]
  return (vim.wo[win].winbar:gsub("%%#[%w_]+#", ""):gsub("%%%*", ""):gsub("%%=", " | "):gsub("%%%%", "%%"))
end

--- Waits until the winbar starts with `head`.
local function wait_bar(head)
  local ok = vim.wait(20000, function()
    return vim.startswith(bar(), head)
  end, 10)
  if not ok then
    H.eq(head, bar():sub(1, #head), "the winbar's start")
  end
end

--- The session's effort as the daemon reads it back (nil: none set, the provider's default).
local function daemon_effort()
  local err, got = sidechat.client():request_sync(method.sessionGet, { sessionId = sidechat.current().id })
  H.eq(nil, err, "session/get")
  return got.effort
end

--- Runs `fn(done)` and waits until it called `done`; gives what `done` got.
local function finished(fn)
  local result
  fn(function(err, value)
    result = { err = err, value = value }
  end)
  H.wait("the answer", function()
    return result ~= nil
  end)
  return result
end

H.run({
  {
    ":SidechatEffort offers default and gpt-5.1's levels, sets the one picked, and the winbar shows it",
    function()
      vim.cmd("SidechatNew")
      H.wait("the new session", function()
        local s = sidechat.current()
        return s and s.loaded and s.info
      end)
      -- The account's default until the session sets its own.
      wait_bar("New chat · gpt-5.1 · medium effort · idle · ")
      local asked = answer_select("high")
      vim.cmd("SidechatEffort")
      -- Told once the daemon answers (a sessionUpdated event may set the effort before).
      H.wait("the effort set and told", function()
        local told = H.notes[#H.notes]
        return (sidechat.current().info or {}).effort == "high" and told and told.msg == "sidechat: effort: high"
      end)
      H.eq({
        {
          prompt = "Reasoning effort for gpt-5.1 (now medium)",
          items = { "default (the account's)", "low", "medium · current", "high" },
        },
      }, asked, "the picker")
      H.eq("high", daemon_effort(), "the daemon's effort")
      wait_bar("New chat · gpt-5.1 · high effort · idle · ")
      H.eq({ msg = "sidechat: effort: high", level = vim.log.levels.INFO }, H.notes[#H.notes], "told")
    end,
  },
  {
    "default goes back to the account's effort",
    function()
      answer_select("default (the account's)")
      local r = finished(function(done)
        sidechat.pick_effort(nil, done)
      end)
      H.eq(nil, r.err, "no error")
      H.eq("medium", daemon_effort(), "the account's effort again")
      wait_bar("New chat · gpt-5.1 · medium effort · idle · ")
      H.eq({ msg = "sidechat: effort: default, medium", level = vim.log.levels.INFO }, H.notes[#H.notes], "told")
    end,
  },
  {
    "a level the model lacks is refused with the daemon's words, and a misspelt one before asking",
    function()
      vim.cmd("SidechatEffort minimal")
      H.wait("the refusal", function()
        return H.notes[#H.notes].level == vim.log.levels.ERROR
      end)
      H.eq({
        msg = 'sidechat: cannot set the effort: invalid params: effort "minimal" is not a level of the model gpt-5.1; use low, medium or high',
        level = vim.log.levels.ERROR,
      }, H.notes[#H.notes], "the daemon's refusal")
      local r = finished(function(done)
        sidechat.pick_effort("extreme", done)
      end)
      H.eq({ code = -32602, message = "no effort extreme" }, r.err, "refused by the plugin")
      H.eq({
        msg = 'sidechat: no effort "extreme": minimal, low, medium, high or default',
        level = vim.log.levels.ERROR,
      }, H.notes[#H.notes], "told")
      H.eq("medium", daemon_effort(), "unchanged")
    end,
  },
  {
    "a Claude model through Anthropic is offered minimal to high; with no default the provider's applies",
    function()
      finished(function(done)
        sidechat.pick_model({ account = "claude", model = "claude-sonnet-4-5" }, done)
      end)
      H.eq(nil, daemon_effort(), "no effort: the claude account sets none")
      wait_bar("New chat · claude-sonnet-4-5 · idle · ")
      local asked = answer_select("minimal")
      local r = finished(function(done)
        sidechat.pick_effort(nil, done)
      end)
      H.eq(nil, r.err, "no error")
      H.eq({
        {
          prompt = "Reasoning effort for claude-sonnet-4-5 (now the provider's default)",
          items = { "default (the account's)", "minimal", "low", "medium", "high" },
        },
      }, asked, "the picker")
      H.eq("minimal", daemon_effort(), "the daemon's effort")
      wait_bar("New chat · claude-sonnet-4-5 · minimal effort · idle · ")
      answer_select("default (the account's)")
      finished(function(done)
        sidechat.pick_effort(nil, done)
      end)
      H.eq(nil, daemon_effort(), "none again")
      H.eq({ msg = "sidechat: effort: default, the provider's", level = vim.log.levels.INFO }, H.notes[#H.notes], "told")
      wait_bar("New chat · claude-sonnet-4-5 · idle · ")
    end,
  },
  {
    "the demo model takes none: low to high are offered, saying it is kept for a model that does",
    function()
      finished(function(done)
        sidechat.pick_model({ account = "demo", model = "demo" }, done)
      end)
      local asked = answer_select("low")
      local r = finished(function(done)
        sidechat.pick_effort(nil, done)
      end)
      H.eq(nil, r.err, "no error")
      H.eq({
        {
          prompt = "Reasoning effort for demo (now the provider's default); demo takes none here, so it is kept for a model that does",
          items = { "default (the account's)", "low", "medium", "high" },
        },
      }, asked, "the picker")
      H.eq("low", daemon_effort(), "kept")
      wait_bar("New chat · demo · low effort · idle · ")
    end,
  },
})
