--- Options of the sidechat plugin and their defaults.
local M = {}

---@class sidechat.Config
M.defaults = {
  --- The daemon's command. The first element is looked up on $PATH unless it is a path.
  cmd = { "sidechat", "serve" },
  --- How to reach a daemon: "spawn" runs `cmd`; "attach" runs `sidechat attach` (the first
  --- element of `cmd` with `attach`), a bridge to the daemon listening (`sidechat serve
  --- --listen`) on the same database, shared with other editors; "auto" attaches when
  --- serve.json names a live daemon on the same database, and spawns otherwise.
  connection = "auto",
  --- The SQLite database (`--db`); nil lets the daemon choose ($XDG_DATA_HOME/sidechat/sidechat.db).
  ---@type string?
  db = nil,
  --- Extra environment for the daemon (e.g. { SIDECHAT_ACCOUNT = "work" }).
  env = {},
  --- The daemon's log level on stderr, which Neovim writes to its LSP log.
  log_level = "warn",
  --- When a daemon that exits unasked is restarted (see lua/sidechat/restart.lua): after
  --- `first_delay_ms`, doubling per crash up to `max_delay_ms`; at most `max_restarts` times
  --- within `window_ms`; a run of `healthy_ms` starts the count afresh.
  restart = { first_delay_ms = 500, max_delay_ms = 8000, max_restarts = 5, window_ms = 60000, healthy_ms = 60000 },
  --- Width of the chat column: columns, or a fraction of the editor's width.
  width = 0.4,
  --- Height of the prompt window in lines.
  prompt_height = 5,
  --- Move the cursor into an approval window when it opens.
  ---@type boolean
  focus_approvals = true,
  --- Keys; set one to false to leave it unmapped.
  keys = {
    -- prompt buffer
    send = "<CR>", -- normal mode
    send_insert = "<C-s>", -- insert mode
    stop = "<C-c>",
    detach = "<M-x>", -- normal mode: remove the last image attached with :SidechatAttach
    -- transcript buffer
    open = "<CR>", -- a changed file: open it; elsewhere: toggle a fold
    diff = "D", -- a changed file: its diff (before the session's first change / now)
    withdraw = "x", -- a waiting message: withdraw it
    delete_note = "X", -- a carry-over note: delete it (the model is no longer sent it)
    resume = "R", -- answer a turn left unanswered
    approvals = "ga", -- show the pending approval again
    older = "[[", -- load the page of older entries above the first one shown
    undo = "u", -- a user message: files and conversation back to before it (asks first)
    fork = "F", -- a user message: a new session holding the conversation up to it
    close = "q",
    -- approval window
    allow = "a",
    allow_always = "A",
    allow_workspace = "w", -- always in this workspace: edit the proposed rule, then save it
    deny = "d",
    deny_reason = "D", -- deny, telling the model why
    dismiss = "q",
  },
}

---@type sidechat.Config
M.options = vim.deepcopy(M.defaults)

---@param opts table?
function M.set(opts)
  M.options = vim.tbl_deep_extend("force", vim.deepcopy(M.defaults), opts or {})
  return M.options
end

return M
