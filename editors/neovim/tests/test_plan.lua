-- The model's plan (`update_plan`, asked of the demo model with `plan a; b; c`) is a section at
-- the top of the transcript, under the title, drawn from the `plan` event and, for a session
-- read afresh, from `session/get`.
local H = dofile(vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h") .. "/helpers.lua")
H.setup()
local sidechat = require("sidechat")
local view = require("sidechat.view")

local PLAN = {
  "",
  "## Plan",
  "- [~] **read the code**",
  "- [ ] fix the bug",
  "- [ ] run the tests",
}

local function top()
  return vim.list_slice(H.lines(), 2, 1 + #PLAN)
end

H.run({
  {
    "a plan event draws a checklist under the title, the step in progress in bold",
    function()
      sidechat.open()
      H.truthy(not vim.tbl_contains(H.lines(), "## Plan"), "no plan before one is given")
      sidechat.send("plan read the code; fix the bug; run the tests")
      H.idle_with(4)
      H.wait("the plan section", function()
        return vim.deep_equal(PLAN, top())
      end)
      H.eq(PLAN, top(), "the plan under the title")
      H.truthy(vim.startswith(H.lines()[1], "# "), "the title stays first: " .. H.lines()[1])
    end,
  },
  {
    "a session read afresh shows its plan from session/get",
    function()
      local s = sidechat.current()
      s.plan = nil
      s.info = nil
      view.redraw()
      H.wait("the plan to leave with the session's state", function()
        return not vim.deep_equal(PLAN, top())
      end)
      local done = false
      s:refresh_info(function()
        done = true
      end)
      H.wait("session/get", function()
        return done
      end)
      H.eq({ "read the code", "fix the bug", "run the tests" }, vim.tbl_map(function(step)
        return step.step
      end, s.info.plan.steps), "session/get holds the plan")
      view.redraw()
      H.wait("the plan section again", function()
        return vim.deep_equal(PLAN, top())
      end)
    end,
  },
})
