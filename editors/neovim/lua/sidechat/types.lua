---@meta
--- LuaCATS shapes of the daemon's answers the plugin reads (the wire types are in schema/ and
--- src/protocol; only the fields used here are named). Never required: the checker
--- (`emmylua_check`, see docs/editors.md) reads it for the types.

---@alias sidechat.Effort "minimal"|"low"|"medium"|"high"

--- A JSON-RPC error as a request's callback gets it.
---@class sidechat.RpcError
---@field code integer
---@field message string
---@field data any?

--- A session as `session/get` and `session/update` answer it.
---@class sidechat.SessionInfo
---@field id string
---@field title string
---@field account string
---@field model string
---@field workspaceRoot string?
---@field state "idle"|"running"|"awaitingApproval"|"unanswered"
---@field lastSeq integer
---@field tokens integer
---@field costUsd number? absent when no usage has a price
---@field unpricedRequests integer
---@field changedFiles table[]
---@field children string[] the child sessions of its `delegate` calls, oldest first
---@field parentCallId string|nil|userdata for a child session: the `delegate` call it answers
---@field rollover string? the idle time after which a new context starts; absent when off
---@field forkedFrom string? for a fork: the session it was forked from
---@field effort sidechat.Effort? the session's own, else the account's; absent when neither sets one
---@field effortInherited boolean? true when `effort` is the account's default
---@field effortLevels sidechat.Effort[]? the levels the model takes; absent when it takes none
---@field plan table?

--- An account of `initialize`'s result.
---@class sidechat.AccountInfo
---@field name string
---@field kind "demo"|"replay"|"anthropic"|"openai"
---@field defaultModel string
---@field isDemo boolean
---@field models string[]
---@field effort sidechat.Effort? the account's default effort

--- A model of an account, as `:SidechatModel` offers it.
---@class sidechat.ModelChoice
---@field account string
---@field model string

--- Text sent with a message: a selection with its file and lines.
---@class sidechat.Attachment
---@field name string
---@field text string

--- A file a rewind puts back.
---@class sidechat.RewoundFile
---@field path string
---@field removed boolean the file did not exist before the message, so it goes

--- A file a rewind leaves as it is, and why.
---@class sidechat.SkippedFile
---@field path string
---@field reason string

--- What `session/rewind` did, or with `dryRun` would do.
---@class sidechat.RewindResult
---@field restored sidechat.RewoundFile[]
---@field skipped sidechat.SkippedFile[]
---@field rewoundMessages integer
