-- A custom slash command's user message (a `command` block `{name, prompt}` after the typed
-- text) shows what was typed, under a heading labelled with the command's name; the prompt
-- the command file expands to is what the model reads, not what the transcript shows.
local H = dofile(vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h") .. "/helpers.lua")
H.setup()
local sidechat = require("sidechat")

vim.fn.mkdir(H.ws .. "/.sidechat/commands", "p")
vim.fn.writefile({ "---", "description: Greet someone", "---", "Say hello to $1 warmly." }, H.ws .. "/.sidechat/commands/greet.md")

--- The lines from the first "## You" heading to the next heading.
local function user_section()
  local lines = H.lines()
  local out
  for _, line in ipairs(lines) do
    if out and line:match("^## ") then
      break
    end
    if out or line:match("^## You") then
      out = out or {}
      table.insert(out, line)
    end
  end
  return out
end

H.run({
  {
    "the typed text under a /name label",
    function()
      vim.cmd("Sidechat")
      sidechat.send("/greet world")
      H.wait("the answer", function()
        local s = sidechat.current()
        return s and s.state == "idle" and #s.entries >= 2
      end)
      local user = sidechat.current().entries[1]
      H.eq({ { type = "text", text = "/greet world" }, { type = "command", name = "greet", prompt = "Say hello to world warmly.\n" } },
        user.blocks, "the stored message")
      H.wait("the transcript", function()
        return user_section() ~= nil
      end)
      H.eq({ "## You · /greet", "/greet world", "" }, user_section(), "the user message")
    end,
  },
  {
    "a plain message has no label",
    function()
      local before = #sidechat.current().entries
      sidechat.send("hello")
      H.wait("the answer", function()
        local s = sidechat.current()
        return s.state == "idle" and #s.entries >= before + 2
      end)
      H.truthy(vim.tbl_contains(H.lines(), "## You"), "a plain heading: " .. vim.inspect(H.lines()))
    end,
  },
})
