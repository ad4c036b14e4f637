//! Permission rules on the wire: the "always in this workspace" answers a user saved, and every
//! rule in force in a workspace with where it comes from.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PermissionsListParams {
    /// A workspace root: only its saved answers are listed, and `inForce` says every rule in
    /// force there. Without it, every saved answer of every workspace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_root: Option<String>,
}

/// An allow rule saved by answering "always in this workspace".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceRule {
    /// `wr_…`; `permissions/remove` takes it.
    pub id: String,
    /// The workspace root it applies in (resolved: symbolic links followed).
    pub workspace_root: String,
    pub rule: String,
    pub created_at: String,
}

/// The list a rule is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum RuleList {
    Allow,
    Ask,
    Deny,
}

/// Where a rule in force was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum RuleSource {
    /// The user's config file, `[permissions]`.
    User,
    /// The workspace's `.sidechat/config.toml` (ask and deny only).
    Project,
    /// An "always in this workspace" answer, saved in the database.
    Workspace,
}

/// One rule in force in a workspace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuleInForce {
    pub rule: String,
    pub list: RuleList,
    pub source: RuleSource,
    /// The file it is written in (`user` and `project` rules).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// The saved answer's id (`workspace` rules).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PermissionsListResult {
    /// Saved workspace answers, oldest first.
    pub stored: Vec<WorkspaceRule>,
    /// With `workspaceRoot`: every rule in force there, deny and ask before allow as they are
    /// weighed (deny, then ask, then allow, then the tool's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_force: Option<Vec<RuleInForce>>,
    /// With `workspaceRoot`: what the project file's reading skipped (an allow rule, a rule
    /// that cannot be read).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notices: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PermissionsRemoveParams {
    pub id: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PermissionsRemoveResult {
    /// The answer removed; later calls in its workspace are asked again.
    pub removed: WorkspaceRule,
}
