--- Images attached to the next message (`:SidechatAttach {path}`): checked here as the daemon
--- checks them (the type from the file's first bytes, at most 5 MiB each and 20 a message), so
--- a wrong file is refused at once with its reason; shown as chips under the prompt's text;
--- sent as `chat/send`'s `images` (base64) with the message, and given back to the prompt when
--- the message is not sent. The transcript names a sent image by its file, through the
--- SHA-256 the daemon stores it under.
local config = require("sidechat.config")
local render = require("sidechat.render")
local sha256 = require("sidechat.sha256")

local M = {}

--- The daemon's limits (docs/images.md).
M.MAX_BYTES = 5 * 1024 * 1024
M.MAX_IMAGES = 20

--- The namespace of the chips under the prompt's text.
M.ns = vim.api.nvim_create_namespace("sidechat_attachments")

--- One image waiting for the next message.
---@class sidechat.PendingImage
---@field name string the file's name, as the chip and the transcript show it
---@field path string the file as attached
---@field mediaType string
---@field bytes integer
---@field data string the bytes in base64
---@field id string the SHA-256 of the bytes (the daemon's `imageId`)

---@type sidechat.PendingImage[]
M.pending = {}

--- imageId -> the file name it was attached from, for every image attached in this Neovim.
---@type table<string, string>
M.names = {}

--- The media type of an image by its first bytes (PNG, JPEG, GIF, WebP), or nil.
---@param bytes string
---@return string?
function M.media_type(bytes)
  if bytes:sub(1, 8) == "\137PNG\r\n\26\n" then
    return "image/png"
  elseif bytes:sub(1, 3) == "\255\216\255" then
    return "image/jpeg"
  elseif bytes:sub(1, 6) == "GIF87a" or bytes:sub(1, 6) == "GIF89a" then
    return "image/gif"
  elseif bytes:sub(1, 4) == "RIFF" and bytes:sub(9, 12) == "WEBP" then
    return "image/webp"
  end
  return nil
end

--- The file name an image was attached from in this Neovim, if it was.
---@param image_id string
---@return string?
function M.name_of(image_id)
  return M.names[image_id]
end

--- Reads and checks the image file `path`.
---@param path string
---@return sidechat.PendingImage? image
---@return string? why it cannot be attached
function M.read(path)
  local name = vim.fn.fnamemodify(path, ":t")
  local stat = vim.uv.fs_stat(path)
  if not stat then
    return nil, ("cannot attach %s: no such file"):format(path)
  elseif stat.type ~= "file" then
    return nil, ("cannot attach %s: a %s, not an image file"):format(path, stat.type)
  elseif stat.size > M.MAX_BYTES then
    return nil, ("cannot attach %s: %d bytes, over the limit of %d bytes (5 MiB) per image"):format(
      name, stat.size, M.MAX_BYTES)
  end
  local file, err = io.open(path, "rb")
  if not file then
    return nil, ("cannot attach %s: %s"):format(path, err)
  end
  local bytes = file:read("*a") or ""
  file:close()
  local media_type = M.media_type(bytes)
  if not media_type then
    return nil, ("cannot attach %s: not a PNG, JPEG, GIF or WebP image (by its first bytes)"):format(name)
  end
  return {
    name = name,
    path = path,
    mediaType = media_type,
    bytes = #bytes,
    data = vim.base64.encode(bytes),
    id = sha256.hex(bytes),
  }
end

local function notify(msg, level)
  vim.notify("sidechat: " .. msg, level or vim.log.levels.INFO)
end

--- Attaches the image file `path` to the next message, or says why it cannot.
---@param path string
---@return sidechat.PendingImage? image
---@return string? why it was refused
function M.add(path)
  path = vim.trim(path or "")
  path = path ~= "" and vim.fs.normalize(path) or path
  if path == "" then
    local why = ":SidechatAttach needs an image file (PNG, JPEG, GIF or WebP)"
    notify(why, vim.log.levels.ERROR)
    return nil, why
  end
  local image, why = M.read(path)
  if image then
    for _, p in ipairs(M.pending) do
      if p.id == image.id then
        image, why = nil, ("%s is attached already (as %s)"):format(path, p.name)
        break
      end
    end
  end
  if image and #M.pending >= M.MAX_IMAGES then
    image, why = nil, ("cannot attach %s: %d images are attached already, the most one message takes"):format(
      path, M.MAX_IMAGES)
  end
  if not image then
    notify(why, vim.log.levels.ERROR)
    return nil, why
  end
  table.insert(M.pending, image)
  M.names[image.id] = image.name
  M.draw()
  return image
end

--- Removes the pending image named `name` (its file name or path), or the last one attached
--- when `name` is nil, or all of them when `name` is "*". Returns the names removed.
---@param name string?
---@return string[]
function M.remove(name)
  local removed = {}
  for i = #M.pending, 1, -1 do
    local p = M.pending[i]
    if name == "*" or (name == nil and i == #M.pending) or p.name == name or p.path == name then
      table.insert(removed, 1, p.name)
      table.remove(M.pending, i)
      if name ~= "*" then
        break
      end
    end
  end
  M.draw()
  return removed
end

--- `:SidechatAttach {path}` attaches (and opens the chat column, where the chip shows);
--- `:SidechatAttach!` removes every pending image, and `:SidechatAttach! {name}` the one named.
---@param args string
---@param bang boolean
function M.command(args, bang)
  args = vim.trim(args or "")
  if bang then
    local removed = M.remove(args == "" and "*" or args)
    if #removed == 0 then
      notify(args == "" and "no image is attached" or ("no attached image is named " .. args))
    end
    return
  end
  if M.add(args) then
    require("sidechat").open()
  end
end

--- Takes the pending images for a message being sent, leaving none.
---@return sidechat.PendingImage[]
function M.take()
  local taken = M.pending
  M.pending = {}
  M.draw()
  return taken
end

--- Puts images of a message that was not sent back, before any attached since.
---@param images sidechat.PendingImage[]
function M.restore(images)
  M.pending = vim.list_extend(vim.list_slice(images), M.pending)
  M.draw()
end

--- Images as `chat/send` takes them.
---@param images sidechat.PendingImage[]
---@return { mediaType: string, data: string }[]
function M.wire(images)
  return vim.tbl_map(function(p)
    return { mediaType = p.mediaType, data = p.data }
  end, images)
end

--- The chip of one pending image: `📎 shot.png` and ` · PNG · 120 KB`.
---@param p sidechat.PendingImage
---@return string[][] chunks of virtual text
function M.chip(p)
  return {
    { "📎 " .. p.name, "SidechatChip" },
    { (" · %s · %s"):format(render.image_kind(p.mediaType), render.size(p.bytes)), "SidechatChipDetail" },
  }
end

--- The prompt buffer, when it exists.
local function prompt()
  local buf = require("sidechat.view").state.prompt
  return (buf and vim.api.nvim_buf_is_valid(buf)) and buf or nil
end

--- Lines of chips under the prompt's text, each line as wide as the prompt window allows, the
--- last ending with the key that removes the last image.
---@param width integer
---@return string[][][]
function M.chip_lines(width)
  local lines, line, used = {}, {}, 0
  for _, p in ipairs(M.pending) do
    local chunks = M.chip(p)
    local w = vim.fn.strdisplaywidth(chunks[1][1] .. chunks[2][1])
    if used > 0 and used + 2 + w > width then
      table.insert(lines, line)
      line, used = {}, 0
    end
    if used > 0 then
      table.insert(line, { "  " })
      used = used + 2
    end
    vim.list_extend(line, chunks)
    used = used + w
  end
  local key = config.options.keys.detach
  if key then
    table.insert(line, { ("  (%s removes the last)"):format(key), "SidechatHint" })
  end
  table.insert(lines, line)
  return lines
end

--- Draws the pending images as chips in virtual lines under the prompt's last line.
function M.draw()
  local buf = prompt()
  if not buf then
    return
  end
  vim.api.nvim_buf_clear_namespace(buf, M.ns, 0, -1)
  if #M.pending == 0 then
    return
  end
  local win = vim.fn.win_findbuf(buf)[1]
  local width = win and vim.api.nvim_win_get_width(win) or 80
  local last = vim.api.nvim_buf_line_count(buf) - 1
  vim.api.nvim_buf_set_extmark(buf, M.ns, last, 0, { virt_lines = M.chip_lines(width) })
end

--- Sets up the prompt buffer `buf`: the key that removes the last image, and the chips kept
--- under its last line as it is edited.
---@param buf integer
function M.attach_buffer(buf)
  local key = config.options.keys.detach
  if key then
    vim.keymap.set("n", key, function()
      if #M.remove() == 0 then
        notify("no image is attached")
      end
    end, { buffer = buf, nowait = true, silent = true, desc = "sidechat: remove the last attached image" })
  end
  vim.api.nvim_create_autocmd({ "TextChanged", "TextChangedI", "BufWinEnter" }, {
    buffer = buf,
    group = vim.api.nvim_create_augroup("sidechat_attachments", { clear = true }),
    callback = function()
      if #M.pending > 0 then
        M.draw()
      end
    end,
  })
  M.draw()
end

return M
