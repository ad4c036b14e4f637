--- The approval window: a small float showing what a tool call would do (the command, or the
--- change as a diff), answered with keys. It follows the session's pending approvals, so it
--- closes when one is resolved elsewhere and comes back after a daemon restart.
local config = require("sidechat.config")
local render = require("sidechat.render")

local M = {}

--- The window and what it shows.
---@class sidechat.ApprovalState
---@field win integer? the float, while open
---@field buf integer? its buffer
---@field approval table? the approval shown
---@field return_win integer? the window the cursor goes back to when it closes
---@field dismissed table<string, boolean?> approvals hidden with `q`, by id
M.state = { win = nil, buf = nil, approval = nil, return_win = nil, dismissed = {} }

local function split(text)
  return vim.split((text or ""):gsub("\n$", ""), "\n", { plain = true })
end

local function prefixed(text, prefix)
  local out = {}
  for _, line in ipairs(split(text)) do
    table.insert(out, prefix .. line)
  end
  return out
end

--- What the window says of a `run_command` approval's `sandboxed` (absent from daemons that do
--- not say, and for other tools: nothing then).
---@type table<boolean, string?>
M.SANDBOXED = {
  [true] = "# runs sandboxed: it may write only in the workspace and the temp folder, no network",
  [false] = "# runs outside the sandbox, with your permissions",
}

--- The lines of the window for one approval, and the filetype they read best in.
---@return string[] lines
---@return string filetype
function M.body(approval)
  local input = approval.input or {}
  local tool = approval.tool
  local lines = { render.summary(tool, input), "" }
  if approval.asked_by then
    -- A sub-agent's: who asks comes first.
    table.insert(lines, 1, "asked by the sub-agent working on: " .. approval.asked_by)
  end
  local filetype = "markdown"
  if tool == "run_command" then
    vim.list_extend(lines, prefixed(input.command, "$ "))
    local where = M.SANDBOXED[approval.sandboxed]
    if where then
      table.insert(lines, "")
      table.insert(lines, where)
    end
    filetype = "sh"
  elseif tool == "write_file" then
    table.insert(lines, "+++ " .. (input.path or "?"))
    vim.list_extend(lines, prefixed(input.content, "+"))
    filetype = "diff"
  elseif tool == "edit_file" then
    table.insert(lines, "--- " .. (input.path or "?"))
    table.insert(lines, "+++ " .. (input.path or "?"))
    vim.list_extend(lines, prefixed(input.old_string, "-"))
    vim.list_extend(lines, prefixed(input.new_string, "+"))
    filetype = "diff"
  else
    vim.list_extend(lines, split(vim.inspect(input)))
  end
  local keys = config.options.keys
  table.insert(lines, "")
  if approval.whyAsked then
    table.insert(lines, approval.whyAsked)
  end
  if approval.proposedRule then
    table.insert(lines, ("%s saves: %s"):format(keys.allow_workspace, approval.proposedRule))
  end
  table.insert(
    lines,
    ("%s allow once · %s allow always · %s always in this workspace · %s deny · %s deny, saying why · %s hide"):format(
      keys.allow,
      keys.allow_always,
      keys.allow_workspace,
      keys.deny,
      keys.deny_reason,
      keys.dismiss
    )
  )
  return lines, filetype
end

function M.is_open()
  return M.state.win ~= nil and vim.api.nvim_win_is_valid(M.state.win)
end

function M.close()
  local st = M.state
  local win = st.win
  if win and vim.api.nvim_win_is_valid(win) then
    local was_current = vim.api.nvim_get_current_win() == win
    vim.api.nvim_win_close(win, true)
    if was_current and st.return_win and vim.api.nvim_win_is_valid(st.return_win) then
      vim.api.nvim_set_current_win(st.return_win)
    end
  end
  st.win, st.approval = nil, nil
end

local function open(approval)
  local st = M.state
  local lines, filetype = M.body(approval)
  if not (st.buf and vim.api.nvim_buf_is_valid(st.buf)) then
    st.buf = vim.api.nvim_create_buf(false, true)
    vim.bo[st.buf].bufhidden = "hide"
    local keys = config.options.keys
    local api = require("sidechat")
    local function key(lhs, decision)
      if lhs then
        vim.keymap.set("n", lhs, function()
          api.approve(decision)
        end, { buffer = st.buf, nowait = true, silent = true, desc = "sidechat: " .. decision })
      end
    end
    key(keys.allow, "allow")
    key(keys.allow_always, "allowAlways")
    key(keys.deny, "deny")
    -- The two answers that take text ask for it first; the approval is the one shown when the
    -- key was pressed, whatever happens to the window meanwhile.
    local function ask(lhs, input, decision, field)
      if lhs then
        vim.keymap.set("n", lhs, function()
          local shown = st.approval
          if not shown then
            return
          end
          vim.ui.input(input(shown), function(text)
            if text == nil then
              return
            end
            api.approve(decision, shown.approvalId, nil, { [field] = text })
          end)
        end, { buffer = st.buf, nowait = true, silent = true, desc = "sidechat: " .. decision })
      end
    end
    ask(keys.allow_workspace, function(shown)
      return { prompt = "Always allow in this workspace: ", default = shown.proposedRule or "" }
    end, "allowWorkspace", "rule")
    ask(keys.deny_reason, function()
      return { prompt = "Deny, telling the model why: " }
    end, "deny", "reason")
    for _, lhs in ipairs({ keys.dismiss, "<Esc>" }) do
      vim.keymap.set("n", lhs, M.dismiss, { buffer = st.buf, nowait = true, silent = true })
    end
  end
  vim.bo[st.buf].modifiable = true
  vim.api.nvim_buf_set_lines(st.buf, 0, -1, false, lines)
  vim.bo[st.buf].modifiable = false
  vim.bo[st.buf].filetype = filetype
  local width = 20
  for _, line in ipairs(lines) do
    width = math.max(width, vim.fn.strdisplaywidth(line))
  end
  width = math.min(width + 1, math.max(20, vim.o.columns - 4))
  local height = math.min(#lines, math.max(3, vim.o.lines - 6))
  local enter = config.options.focus_approvals
  if enter then
    st.return_win = vim.api.nvim_get_current_win()
    if vim.fn.mode() ~= "n" then
      vim.cmd("stopinsert")
    end
  end
  local win = M.is_open() and st.win or nil
  if win then
    vim.api.nvim_win_set_config(win, { relative = "editor", row = 1, col = vim.o.columns - width - 2, width = width, height = height })
    if enter then
      vim.api.nvim_set_current_win(win)
    end
  else
    st.win = vim.api.nvim_open_win(st.buf, enter, {
      relative = "editor",
      row = 1,
      col = math.max(0, vim.o.columns - width - 2),
      width = width,
      height = height,
      style = "minimal",
      border = "rounded",
      title = " sidechat: approve? ",
      title_pos = "center",
    })
  end
  vim.wo[st.win].wrap = true
  st.approval = approval
end

--- Shows the session's oldest pending approval, or closes the window when none is left.
---@param session sidechat.Session?
function M.sync(session)
  local pending = session and session:pending_approvals() or {}
  local first
  for _, a in ipairs(pending) do
    if not M.state.dismissed[a.approvalId] then
      first = a
      break
    end
  end
  if not first then
    M.close()
    return
  end
  if M.state.approval and M.state.approval.approvalId == first.approvalId and M.is_open() then
    return
  end
  open(first)
end

--- Hides the window; the approval stays pending (`ga` in the transcript shows it again).
function M.dismiss()
  if M.state.approval then
    M.state.dismissed[M.state.approval.approvalId] = true
  end
  M.close()
end

--- Shows a hidden approval again.
function M.reshow(session)
  M.state.dismissed = {}
  M.sync(session)
end

return M
