if vim.g.loaded_sidechat then
  return
end
vim.g.loaded_sidechat = true

local function sc()
  return require("sidechat")
end

require("sidechat.highlights").setup()

local command = vim.api.nvim_create_user_command
command("Sidechat", function()
  sc().toggle()
end, { desc = "Open or close the sidechat column" })
command("SidechatNew", function()
  sc().new_session()
  sc().open()
end, { desc = "Start a new sidechat session in the working directory" })
command("SidechatSessions", function()
  sc().sessions()
end, { desc = "Resume a sidechat session of the working directory" })
command("SidechatStop", function()
  sc().stop()
end, { desc = "Stop the run of the shown session" })
command("SidechatResume", function()
  sc().resume_turn()
end, { desc = "Answer the turn left unanswered" })
command("SidechatDeleteNote", function()
  local view = require("sidechat.view")
  local span = vim.api.nvim_get_current_buf() == view.state.transcript and view.span(vim.fn.line(".")) or nil
  sc().delete_note(span and span.kind == "note" and span.messageId or nil)
end, { desc = "Delete the carry-over note under the cursor (else the newest)" })
command("SidechatRollover", function(a)
  sc().rollover(a.args)
end, {
  nargs = "?",
  complete = function()
    return { "off", "1h", "3h", "1d", "7d" }
  end,
  desc = "Set the idle time after which the shown session starts a new context (off, 3h, 1d…)",
})
command("SidechatOlder", function()
  sc().older()
end, { desc = "Load the page of older entries of the shown session (a long one opens at its newest)" })
command("SidechatCost", function()
  sc().cost()
end, { desc = "What the shown session cost" })
command("SidechatAsk", function(a)
  sc().ask(a.line1, a.line2, a.args)
end, { range = true, nargs = "*", desc = "Send the selected lines with their file and range" })
command("SidechatAttach", function(a)
  require("sidechat.attach").command(a.args, a.bang)
end, {
  nargs = "?",
  bang = true,
  complete = "file",
  desc = "Attach an image file (PNG, JPEG, GIF, WebP) to the next message; ! removes attached images",
})
command("SidechatModel", function()
  sc().pick_model()
end, { desc = "Pick the shown session's model (from the daemon's accounts)" })
command("SidechatEffort", function(a)
  sc().pick_effort(a.args)
end, {
  nargs = "?",
  complete = function()
    return { "default", "minimal", "low", "medium", "high" }
  end,
  desc = "Set the shown session's reasoning effort (picked from the levels its model takes)",
})
command("SidechatUndo", function()
  sc().undo()
end, { desc = "Take back the last turn: its file changes and its messages (asks first)" })
command("SidechatRewind", function()
  sc().rewind_pick()
end, { desc = "Pick a turn to take the shown session back to before (files and conversation)" })
command("SidechatFork", function()
  sc().fork()
end, { desc = "Fork the shown session: a new session with its conversation so far" })
