-- :SidechatAttach against the real daemon: an image file checked by its first bytes and size,
-- shown as a chip under the prompt's text, removable (`<M-x>`, :SidechatAttach!), sent as
-- `chat/send`'s `images` with the next message, and drawn in the transcript as
-- `[image: shot.png · PNG 800×600 · 37 B]`; a message the daemon refuses gives its images back.
local H = dofile(vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h") .. "/helpers.lua")
H.setup()
local sidechat = require("sidechat")
local view = require("sidechat.view")
local attach = require("sidechat.attach")

local function be32(n)
  return string.char(bit.band(bit.rshift(n, 24), 255), bit.band(bit.rshift(n, 16), 255), bit.band(bit.rshift(n, 8), 255), bit.band(n, 255))
end

--- A PNG's signature and IHDR chunk (the daemon reads the size from it; no pixel is decoded),
--- then `extra`.
local function png(width, height, extra)
  return "\137PNG\r\n\26\n" .. be32(13) .. "IHDR" .. be32(width) .. be32(height) .. "\8\2\0\0\0" .. be32(0) .. (extra or "")
end

local function write(name, bytes)
  local path = H.ws .. "/" .. name
  local f = assert(io.open(path, "wb"))
  f:write(bytes)
  f:close()
  return path
end

local SHOT = png(800, 600, "IEND")
write("shot.png", SHOT)
write("small.gif", "GIF89a\2\0\3\0\0\0\0;")
write("notes.txt", "just text\n")
write("big.png", "\137PNG\r\n\26\n" .. string.rep("\0", 5 * 1024 * 1024 - 7))
-- Right by its first bytes, refused by the daemon: no IHDR, so no dimensions.
write("broken.png", "\137PNG\r\n\26\n" .. "garbage")

--- The chips under the prompt: each virtual line's text, and the groups used.
local function chips()
  local marks = vim.api.nvim_buf_get_extmarks(view.state.prompt, attach.ns, 0, -1, { details = true })
  local out = {}
  for _, m in ipairs(marks) do
    for _, line in ipairs(m[4].virt_lines) do
      table.insert(out, line)
    end
  end
  return out
end

local function errors()
  local out = {}
  for _, n in ipairs(H.notes) do
    if n.level == vim.log.levels.ERROR then
      table.insert(out, n.msg)
    end
  end
  return out
end

local function hex_sha256(path)
  return vim.split(vim.fn.system({ "sha256sum", path }), " ")[1]
end

--- The lines of the last user message's section.
local function last_user_section()
  local lines = H.lines()
  local from
  for i = #lines, 1, -1 do
    if lines[i] == "## You" then
      from = i
      break
    end
  end
  local out = {}
  for i = from, #lines do
    if i > from and lines[i]:match("^## ") then
      break
    end
    table.insert(out, lines[i])
  end
  return out
end

H.run({
  {
    "an image file is attached and shown as a chip under the prompt",
    function()
      vim.cmd("SidechatAttach shot.png")
      H.eq(true, view.is_open(), "the chat column opened")
      H.eq({ "shot.png" }, vim.tbl_map(function(p)
        return p.name
      end, attach.pending), "pending")
      vim.cmd("SidechatAttach small.gif")
      -- The prompt window is 32 columns wide (0.4 of 80): one chip a line.
      H.eq(32, vim.api.nvim_win_get_width(vim.fn.win_findbuf(view.state.prompt)[1]), "the prompt's width")
      H.eq({
        { { "📎 shot.png", "SidechatChip" }, { " · PNG · 37 B", "SidechatChipDetail" } },
        {
          { "📎 small.gif", "SidechatChip" },
          { " · GIF · 14 B", "SidechatChipDetail" },
          { "  (<M-x> removes the last)", "SidechatHint" },
        },
      }, chips(), "the chips")
      H.eq({}, errors(), "errors")
    end,
  },
  {
    "the SHA-256 the names are kept under is the daemon's (sha256sum's)",
    function()
      local sha256 = require("sidechat.sha256")
      local random = write("random.bin", vim.uv.random(1024 * 1024 + 7))
      for _, path in ipairs({ write("empty.bin", ""), write("abc.bin", "abc"), write("block.bin", ("x"):rep(55)),
        write("block2.bin", ("x"):rep(64)), random, H.ws .. "/shot.png" }) do
        local f = assert(io.open(path, "rb"))
        local bytes = f:read("*a")
        f:close()
        H.eq(hex_sha256(path), sha256.hex(bytes), path)
      end
    end,
  },
  {
    "the key removes the last image, :SidechatAttach! the others",
    function()
      H.focus(view.state.prompt)
      H.press("<M-x>")
      H.eq({ "shot.png" }, vim.tbl_map(function(p)
        return p.name
      end, attach.pending), "after <M-x>")
      vim.cmd("SidechatAttach!")
      H.eq({}, attach.pending, "after :SidechatAttach!")
      H.eq({}, chips(), "no chip left")
    end,
  },
  {
    "a file that is not an image, or too large, is refused with its reason",
    function()
      H.notes = {}
      vim.cmd("SidechatAttach notes.txt")
      vim.cmd("SidechatAttach big.png")
      vim.cmd("SidechatAttach missing.png")
      vim.cmd("SidechatAttach")
      H.eq({
        "sidechat: cannot attach notes.txt: not a PNG, JPEG, GIF or WebP image (by its first bytes)",
        "sidechat: cannot attach big.png: 5242881 bytes, over the limit of 5242880 bytes (5 MiB) per image",
        "sidechat: cannot attach missing.png: no such file",
        "sidechat: :SidechatAttach needs an image file (PNG, JPEG, GIF or WebP)",
      }, errors(), "errors")
      H.eq({}, attach.pending, "nothing attached")
    end,
  },
  {
    "at most 20 images a message",
    function()
      H.notes = {}
      for i = 1, 21 do
        write(("n%02d.png"):format(i), png(i, i))
        vim.cmd(("SidechatAttach n%02d.png"):format(i))
      end
      H.eq(20, #attach.pending, "attached")
      H.eq({ "sidechat: cannot attach n21.png: 20 images are attached already, the most one message takes" }, errors(),
        "errors")
      vim.cmd("SidechatAttach!")
    end,
  },
  {
    "sent with the message: stored, drawn with its name, readable with session/image",
    function()
      vim.cmd("SidechatAttach shot.png")
      H.type_prompt("what is this?")
      sidechat.submit()
      H.idle_with(2)
      H.eq({}, attach.pending, "nothing left pending")
      H.eq({}, chips(), "no chip left")
      local id = hex_sha256(H.ws .. "/shot.png")
      local s = sidechat.current()
      H.eq({
        { type = "text", text = "what is this?" },
        { type = "image", imageId = id, mediaType = "image/png", width = 800, height = 600, bytes = #SHOT },
      }, s.entries[1].blocks, "the stored message")
      H.eq({ "## You", "what is this?", "[image: shot.png · PNG 800×600 · 37 B]", "" }, last_user_section(),
        "the transcript")
      local lnum = vim.fn.index(H.lines(), "[image: shot.png · PNG 800×600 · 37 B]")
      local marks = vim.api.nvim_buf_get_extmarks(view.state.transcript, view.marks_ns, { lnum, 0 }, { lnum, -1 },
        { details = true })
      H.eq({ { lnum, 0, #"[image: shot.png · PNG 800×600 · 37 B]", "SidechatImage" } }, vim.tbl_map(function(m)
        return { m[2], m[3], m[4].end_col, m[4].hl_group }
      end, marks), "its highlight")
      local err, image = s.client:request_sync(require("sidechat.protocol").method.sessionImage,
        { sessionId = s.id, imageId = id })
      H.eq({ nil, { mediaType = "image/png", data = vim.base64.encode(SHOT) } }, { err, image }, "session/image")
    end,
  },
  {
    "redrawn from session/transcript, an image attached elsewhere has no name",
    function()
      local id = sidechat.current().id
      attach.names = {}
      sidechat.shutdown()
      sidechat.attach(id)
      H.wait("the transcript redrawn", function()
        return #sidechat.current().entries == 2 and vim.tbl_contains(H.lines(), "what is this?")
      end)
      H.eq({ "## You", "what is this?", "[image: PNG 800×600 · 37 B]", "" }, last_user_section(), "the transcript")
    end,
  },
  {
    "an image the daemon refuses comes back to the prompt with the text",
    function()
      H.notes = {}
      vim.cmd("SidechatAttach broken.png")
      H.type_prompt("and this?")
      sidechat.submit()
      H.wait("the refusal", function()
        return #errors() > 0
      end)
      H.eq({ "sidechat: not sent: invalid params: image 0: its header gives no dimensions (failed to fill whole buffer)" },
        errors(), "the daemon's reason")
      H.eq("and this?", H.prompt_text(), "the prompt's text")
      H.eq({ "broken.png" }, vim.tbl_map(function(p)
        return p.name
      end, attach.pending), "pending again")
      H.eq(2, #sidechat.current().entries, "nothing stored")
    end,
  },
})
