//! Session methods on the wire: create, list, get, update, delete, the budget and cost
//! summaries, the changed files and their diffs, and the state a client draws for a session it
//! attaches to.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What a client should draw for a session it attaches to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum SessionState {
    /// Nothing running, nothing waiting; also after a run the user stopped or that used up
    /// its steps.
    Idle,
    /// A run is streaming or executing tools.
    Running,
    /// A run waits for the user to answer an approval prompt.
    AwaitingApproval,
    /// The last turn is the user's (or tool results) and no run answers it, as after a crash;
    /// `chat/resume` does.
    Unanswered,
}

/// Which kind of client started a session, so a client can tell its own conversations from
/// runs a script made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum SessionOrigin {
    /// A conversation someone types in (the terminal chat).
    Interactive,
    /// One turn run from a script or a pipe (`sidechat chat -p`).
    Oneshot,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionCreateParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Account name (see `initialize`); the default account when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// Model id; the account's default model when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// Absolute path of the folder the session's tools may touch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_root: Option<String>,
    /// Most model steps one run may take (default 25).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<u32>,
    /// Spend cap in USD for the session (default from the config: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cap_usd: Option<f64>,
    /// Longest one run may take, in seconds (default from the config: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_seconds: Option<u64>,
    /// Start the model afresh, with a carry-over note, when a new turn comes after this idle
    /// time: `off`, or a whole number of `s`, `m`, `h` or `d` such as `3h`, `1d` or `7d`
    /// (default from the config: off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollover: Option<String>,
    /// MCP servers this session uses beside those of the config file. They start in the
    /// background; the answer never waits for them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_servers: Option<Vec<super::McpServerParams>>,
    /// Whether the model is offered the `delegate` tool, which hands a task to a child
    /// session (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegation: Option<bool>,
    /// Which kind of client starts the session; kept and listed, never changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<SessionOrigin>,
    /// Fold older turns automatically when a request would pass the history's share or the
    /// window (default from the config's `[defaults] auto_compact`: true). Off, a request
    /// that would pass the window is refused with its sizes, and `/compact` folds by hand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_compact: Option<bool>,
    /// How hard the model thinks (default: the account's `effort`, else the provider's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<Effort>,
}

/// Tells "absent" (leave alone) from `null` (remove) in update params.
fn present<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Some(Option::deserialize(deserializer)?))
}

/// A file that a successful write or edit changed in this session, or in one of its delegated
/// tasks: what a sub-agent wrote is the asker's change too.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChangedFile {
    /// Path relative to the workspace root.
    pub path: String,
    pub added: u64,
    pub removed: u64,
    /// The child session (a delegated task) that changed the file; absent for the session's
    /// own changes. A file both changed is listed once for each.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_session_id: Option<String>,
}

/// Params of `session/fileDiff`: one file the session changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionFileDiffParams {
    pub session_id: String,
    /// A `path` of the session's `changedFiles`.
    pub path: String,
    /// The `childSessionId` of that `changedFiles` entry, for a file a delegated task changed.
    /// Without it, the session's own change, else the newest child's change to the path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_session_id: Option<String>,
}

/// What the session did to one file: its text before the session's first change to it and
/// after the latest, for a client to show as a diff.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionFileDiffResult {
    pub session_id: String,
    pub path: String,
    /// The child session whose change this is, for a file a delegated task changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_session_id: Option<String>,
    /// The text before the first change; absent when the file did not exist (or `omitted`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<String>,
    /// The text after the latest change; absent only when `omitted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// True when the file was too large to keep (over 256 KiB); the line counts in
    /// `changedFiles` still hold.
    pub omitted: bool,
    /// How many successful writes and edits of the session changed the file.
    pub changes: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Session {
    pub id: String,
    pub title: String,
    pub account: String,
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_root: Option<String>,
    pub max_steps: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cap_usd: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_seconds: Option<u64>,
    /// The idle time after which a new turn starts a new context (e.g. `3h`); absent when off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollover: Option<String>,
    pub state: SessionState,
    /// RFC 3339 timestamps.
    pub created_at: String,
    pub updated_at: String,
    /// The highest `seq` committed for this session.
    pub last_seq: u64,
    #[serde(flatten)]
    pub spend: SessionSpend,
    pub changed_files: Vec<ChangedFile>,
    /// The session's MCP servers (configured and its own) and where each stands; absent when
    /// it has none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<super::McpServerStatus>,
    /// Whether the model is offered the `delegate` tool (never for a child session).
    pub delegation: bool,
    /// For a child session: the session whose `delegate` call started it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
    /// For a child session: the parent's `delegate` tool call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_call_id: Option<String>,
    /// The child sessions this session's `delegate` calls started, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<String>,
    /// Which kind of client started the session, when it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<SessionOrigin>,
    /// Whether older turns are folded automatically (see `session/update`'s `autoCompact`).
    pub auto_compact: bool,
    /// The tokens of every model request of the session so far (turns, summaries, titles),
    /// by kind: the running totals beside `tokens`.
    pub tokens_by_kind: super::TokenUsage,
    /// Whether the session's commands run in the sandbox (unless the model asks to run one
    /// outside it, which the user approves first).
    #[serde(default)]
    pub commands_sandboxed: bool,
    /// The latest plan the model gave with `update_plan`; absent until it gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<Plan>,
    /// The instruction files (AGENTS.md, CLAUDE.md) its requests carry, outermost first;
    /// absent when there are none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instructions: Vec<InstructionFile>,
    /// For a fork (`session/fork`): the session it was forked from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<String>,
    /// How hard the model thinks: the session's own setting, else the account's default;
    /// absent when neither sets one (the provider's default applies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<Effort>,
    /// True when `effort` is the account's default rather than the session's own setting
    /// (a picker shows "default" then).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub effort_inherited: bool,
    /// The levels the session's model takes through its account, lowest first (what an effort
    /// picker offers); absent when it takes none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub effort_levels: Vec<Effort>,
}

/// One row of `session/list`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionSummary {
    pub id: String,
    pub title: String,
    pub account: String,
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_root: Option<String>,
    pub state: SessionState,
    pub updated_at: String,
    #[serde(flatten)]
    pub spend: SessionSpend,
    /// For a child session: the session whose `delegate` call started it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
    /// Which kind of client started the session, when it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<SessionOrigin>,
    /// For a fork (`session/fork`): the session it was forked from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<String>,
}

/// What a session's model requests used and cost so far.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionSpend {
    /// Prompt and output tokens of every model request.
    pub tokens: u64,
    /// USD of the priced requests; absent when none has a price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Requests whose model has no price (not in `costUsd`).
    pub unpriced_requests: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionListParams {
    /// `nextCursor` of the previous page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// Page size, 1 to 200 (default 50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// Only sessions whose workspace root is exactly this path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_root: Option<String>,
    /// Only the child sessions of this session (its delegations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
    /// List child sessions too (default false: only sessions that are nobody's child).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_children: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionListResult {
    pub sessions: Vec<SessionSummary>,
    /// Present when more sessions follow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// Params of every method that names one session and nothing else.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionIdParams {
    pub session_id: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionUpdateParams {
    pub session_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// A configured account (as listed by `initialize`). Without `model`, the session takes
    /// the account's default model. Applies from the next model request on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// An absolute path to an existing directory; tools work inside it from the next tool
    /// call on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_root: Option<String>,
    /// An empty string removes the system prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<u32>,
    /// A new spend cap in USD; `null` removes it.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub cap_usd: Option<Option<f64>>,
    /// A new run time limit in seconds; `null` removes it.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_seconds: Option<Option<u64>>,
    /// A new rollover idle time (`3h`, `1d`, `7d`…), or `off`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollover: Option<String>,
    /// Offer the model the `delegate` tool (true) or not (false), from the next request on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegation: Option<bool>,
    /// Replaces the session's own MCP servers (`[]` removes them); they start in the
    /// background. Header and environment values are never stored, so after a restart a
    /// client gives its servers again this way (as `session/create` took them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_servers: Option<Vec<super::McpServerParams>>,
    /// Fold older turns automatically (true) or only by `/compact` (false), from the next
    /// request on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_compact: Option<bool>,
    /// A new reasoning effort from the next request on; `null` goes back to the account's
    /// default. `minimal` only for a model that has it.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub effort: Option<Option<Effort>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionDeleteResult {
    pub deleted: bool,
}

/// `session/budget`: how full the model's context is before the next request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionBudgetResult {
    pub session_id: String,
    pub model: String,
    pub snapshot: super::BudgetSnapshot,
}

/// `session/cost`: what the session's model requests cost, priced now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionCostResult {
    pub session_id: String,
    pub cost: super::CostSummary,
    /// The spend cap in force, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cap_usd: Option<f64>,
}

/// Where one step of a [`Plan`] stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PlanStepStatus {
    Pending,
    InProgress,
    Completed,
}

/// One step of a [`Plan`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanStep {
    pub step: String,
    pub status: PlanStepStatus,
}

/// The plan the model keeps for a multi-step task (its `update_plan` tool): the whole list
/// each time, at most one step in progress.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// Why the plan is what it is now, when the model said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explanation: Option<String>,
    pub steps: Vec<PlanStep>,
}

/// One instruction file in force for a session (see `Session::instructions`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstructionFile {
    /// Absolute path of the file.
    pub path: String,
    /// How many of its bytes are sent (fewer than the file's size when the cap cut it).
    pub bytes: u64,
}

/// Where a slash command comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum CommandSource {
    /// sidechat's own.
    Builtin,
    /// `.sidechat/commands/NAME.md` in the workspace.
    Project,
    /// `$XDG_CONFIG_HOME/sidechat/commands/NAME.md`.
    User,
}

/// One slash command, for completion in a composer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CommandInfo {
    /// Without the slash.
    pub name: String,
    pub description: String,
    /// What the command takes, e.g. `<path>`; absent when it takes nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argument_hint: Option<String>,
    pub source: CommandSource,
    /// The command's file, for a custom command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// `session/commands`: the slash commands a session's composer offers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionCommandsResult {
    pub session_id: String,
    /// Built-in commands first, then custom ones, each by name.
    pub commands: Vec<CommandInfo>,
}

/// What `session/rewind` takes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum RewindRestore {
    /// The files the session's tools changed since the message, back to their content then.
    Files,
    /// The conversation, cut just before the message.
    Conversation,
    Both,
}

/// Params of `session/rewind`: take the session back to just before the user message
/// `messageId`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionRewindParams {
    pub session_id: String,
    /// A user message of the session, not already rewound.
    pub message_id: String,
    pub restore: RewindRestore,
    /// Restore files that changed since the session last wrote them (by the user or another
    /// program) instead of refusing.
    #[serde(default)]
    pub force: bool,
    /// Change nothing: answer what the rewind would restore and leave (a file changed since
    /// the session last wrote it is listed among `skipped` unless `force`), for a client's
    /// confirmation.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
}

/// A file a rewind put back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RewoundFile {
    /// Relative to the workspace root.
    pub path: String,
    /// The file did not exist before the message, so it was removed.
    pub removed: bool,
}

/// A file a rewind left as it is, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SkippedFile {
    pub path: String,
    pub reason: String,
}

/// What `session/rewind` did; the `rewound` event says the same to every client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionRewindResult {
    pub restored: Vec<RewoundFile>,
    pub skipped: Vec<SkippedFile>,
    /// Transcript entries marked rewound (0 when only files were restored).
    pub rewound_messages: u64,
}

/// Params of `session/fork`: a new session holding the transcript up to and including
/// `messageId` (the whole transcript without it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionForkParams {
    pub session_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
}

/// Params of `workspace/files`: the session's workspace files that best match `query`, for
/// `@` completion in a composer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceFilesParams {
    pub session_id: String,
    /// What was typed after the `@`; empty for the shortest paths.
    #[serde(default)]
    pub query: String,
    /// How many files to answer: 50 unless given, at most [`MAX_WORKSPACE_FILES_LIMIT`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// The most files one `workspace/files` answer holds.
pub const MAX_WORKSPACE_FILES_LIMIT: u32 = 1000;

/// `workspace/files`: paths relative to the workspace root (with `/`), best match first.
/// Files left out by `.gitignore` or `.ignore`, `.git` and symbolic links are not listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceFilesResult {
    pub session_id: String,
    pub files: Vec<String>,
}

/// What `session/subscribe` answers: the session's events now reach this connection, and
/// `lastSeq` is the seq of its latest event so far (0 for none), from which
/// `session/transcript` fills in what came before.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionSubscribeResult {
    pub last_seq: u64,
}

/// What `session/unsubscribe` answers: whether the connection had been receiving the
/// session's events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionUnsubscribeResult {
    pub subscribed: bool,
}

/// How hard the model thinks before it answers: Anthropic's extended-thinking budget or
/// OpenAI's `reasoning_effort` (see docs/tools.md for the figures). A model that takes neither
/// ignores it, and the session is told once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Effort {
    /// Only for models that have it (OpenAI's `gpt-5` family).
    Minimal,
    Low,
    Medium,
    High,
}

impl Effort {
    /// Every level, lowest first.
    pub const ALL: [Effort; 4] = [Effort::Minimal, Effort::Low, Effort::Medium, Effort::High];

    /// The wire name (`low`, …), as the config file and `/effort` write it too.
    pub fn name(self) -> &'static str {
        match self {
            Effort::Minimal => "minimal",
            Effort::Low => "low",
            Effort::Medium => "medium",
            Effort::High => "high",
        }
    }

    /// The level named `name` (any case).
    pub fn parse(name: &str) -> Option<Effort> {
        Effort::ALL
            .into_iter()
            .find(|e| e.name().eq_ignore_ascii_case(name.trim()))
    }
}
