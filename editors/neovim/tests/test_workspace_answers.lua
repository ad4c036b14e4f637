-- The approval window's answers that take text: `w` saves an "always in this workspace" rule
-- (the proposed one, edited in vim.ui.input), after which a matching call runs unasked; `D`
-- denies with a reason the model is told.
local H = dofile(vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h") .. "/helpers.lua")
H.setup()
local sidechat = require("sidechat")
local approval = require("sidechat.approval")

--- Replaces vim.ui.input for one call: records what it was asked and answers `text`.
local function answer_input(text)
  local asked = {}
  vim.ui.input = function(opts, on_confirm)
    table.insert(asked, opts)
    on_confirm(text)
  end
  return asked
end

local function press_in_window(keys)
  H.wait("the approval window", function()
    return approval.is_open()
  end)
  vim.api.nvim_set_current_win(approval.state.win)
  H.press(keys)
end

local function idle()
  H.wait("the run to finish", function()
    local s = sidechat.current()
    return s.state == "idle" and not approval.is_open()
  end)
end

H.run({
  {
    "w saves the edited rule for the workspace; a matching write then runs unasked",
    function()
      vim.cmd("Sidechat")
      local asked = answer_input("write_file(*.md)")
      sidechat.send("create notes.md with hello")
      press_in_window("w")
      idle()
      H.eq({ { prompt = "Always allow in this workspace: ", default = "write_file(notes.md)" } }, asked, "the input asked")
      local err, listed = sidechat.client():request_sync("permissions/list", {})
      H.eq(nil, err, "permissions/list")
      H.eq(1, #listed.stored, "one saved rule")
      H.eq("write_file(*.md)", listed.stored[1].rule, "the rule saved")
      H.eq(vim.uv.fs_realpath(H.ws), listed.stored[1].workspaceRoot, "its workspace")

      local before = #H.notes
      sidechat.send("create other.md with more")
      H.wait("other.md written", function()
        return vim.uv.fs_stat(H.ws .. "/other.md") ~= nil and sidechat.current().state == "idle"
      end)
      H.truthy(not approval.is_open(), "not asked")
      H.eq(before, #H.notes, "nothing to tell")
    end,
  },
  {
    "D denies with a reason the model is told",
    function()
      local asked = answer_input("name it notes.txt")
      sidechat.send("create draft.txt with x")
      press_in_window("D")
      idle()
      H.eq({ { prompt = "Deny, telling the model why: " } }, asked, "the input asked")
      H.truthy(vim.uv.fs_stat(H.ws .. "/draft.txt") == nil, "draft.txt not written")
      local s = sidechat.current()
      local err, transcript = sidechat.client():request_sync("session/transcript", { sessionId = s.id })
      H.eq(nil, err, "session/transcript")
      local outputs = {}
      for _, entry in ipairs(transcript.entries) do
        for _, block in ipairs(entry.blocks) do
          if block.type == "toolResult" and block.status == "denied" then
            table.insert(outputs, block.output)
          end
        end
      end
      H.eq({
        "The user denied this tool call and said why: name it notes.txt\nDo not retry it as it was; take what the user said into account, and ask the user how to proceed if needed.",
      }, outputs, "what the model is told")
    end,
  },
})
