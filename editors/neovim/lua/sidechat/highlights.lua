--- The plugin's highlight groups, each linked by default to a standard group, so colour schemes
--- apply to them and a user's own `:highlight` of a group wins (`default = true`). Linked again
--- after every `:colorscheme`, which clears them.
local M = {}

---@type table<string, string>
M.LINKS = {
  SidechatTitle = "Title", -- the session's title in the winbar
  SidechatModel = "Type", -- the model
  SidechatIdle = "Comment", -- "idle"
  SidechatWorking = "DiagnosticInfo", -- the spinner and "working"
  SidechatApproval = "DiagnosticWarn", -- "waiting for approval"
  SidechatUnanswered = "DiagnosticWarn", -- a turn without an answer
  SidechatMeter = "Number", -- context use and cost
  SidechatKey = "Special", -- a key that acts now
  SidechatHint = "Comment", -- what the key does
  SidechatRewound = "Comment", -- rewound messages in the transcript (kept to read, not sent)
  SidechatChip = "Directory", -- an attachment: a mention's `@path:lines`, an image's file
  SidechatChipDetail = "Comment", -- its size (and an image's type)
  SidechatImage = "Special", -- an image of a message: `[image: shot.png · PNG 800×600 · 120 KB]`
}

--- Links every group that has no definition of the user's.
function M.apply()
  for group, target in pairs(M.LINKS) do
    vim.api.nvim_set_hl(0, group, { link = target, default = true })
  end
end

--- Links the groups now and after every colour scheme change.
function M.setup()
  M.apply()
  vim.api.nvim_create_autocmd("ColorScheme", {
    group = vim.api.nvim_create_augroup("sidechat_highlights", { clear = true }),
    callback = M.apply,
  })
end

return M
