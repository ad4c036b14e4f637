//! The permission rules in force in a workspace, from all three places (the user's config
//! file, the project file, the answers saved for the workspace), and their management:
//! `permissions/list`, `permissions/remove` and `/permissions`.

use std::path::Path;

use super::{Inner, Runtime, RuntimeError, RuntimeResult};
use crate::permissions::{self, List, Origin, Rule, Rules, answers};
use crate::protocol::*;
use crate::store::{SessionRow, WorkspaceRuleRow};

/// Rules in force, with the notices the project file's reading gave.
pub(super) struct InForce {
    pub rules: Rules,
    pub notices: Vec<String>,
}

impl Inner {
    /// The rules in force for calls in the workspace `root` (`None`: the user's only).
    pub(super) fn rules_in_force(&self, root: Option<&Path>) -> RuntimeResult<InForce> {
        let mut rules = self.config.permissions.clone();
        let Some(root) = root else {
            return Ok(InForce {
                rules,
                notices: Vec::new(),
            });
        };
        let project = permissions::project::load(root);
        rules.extend(project.rules);
        for row in self
            .store
            .workspace_rules(Some(&answers::workspace_key(root)))?
        {
            // Saved rules were checked when saved; one a later build reads differently is
            // skipped rather than stopping every call of the workspace.
            match Rule::parse(&row.rule, List::Allow, Origin::Workspace(row.id.clone())) {
                Ok(rule) => rules.push(rule),
                Err(e) => {
                    tracing::warn!(id = %row.id, error = %e, "a saved workspace rule cannot be read")
                }
            }
        }
        Ok(InForce {
            rules,
            notices: project.notices,
        })
    }
}

fn wire(row: WorkspaceRuleRow) -> WorkspaceRule {
    WorkspaceRule {
        id: row.id,
        workspace_root: row.workspace_root,
        rule: row.rule,
        created_at: crate::util::rfc3339(row.created_at),
    }
}

/// The order rules are weighed in: deny, then ask, then allow.
fn weight(list: List) -> u8 {
    match list {
        List::Deny => 0,
        List::Ask => 1,
        List::Allow => 2,
    }
}

fn in_force(rules: &Rules) -> Vec<RuleInForce> {
    let mut listed: Vec<&Rule> = rules.rules().iter().collect();
    listed.sort_by_key(|r| weight(r.list()));
    listed
        .into_iter()
        .map(|rule| {
            let (source, file, id) = match rule.origin() {
                Origin::User(path) => (RuleSource::User, Some(path.display().to_string()), None),
                Origin::Project(path) => {
                    (RuleSource::Project, Some(path.display().to_string()), None)
                }
                Origin::Workspace(id) => (RuleSource::Workspace, None, Some(id.clone())),
            };
            RuleInForce {
                rule: rule.text().to_string(),
                list: match rule.list() {
                    List::Allow => RuleList::Allow,
                    List::Ask => RuleList::Ask,
                    List::Deny => RuleList::Deny,
                },
                source,
                file,
                id,
            }
        })
        .collect()
}

impl Runtime {
    pub fn list_permissions(
        &self,
        params: PermissionsListParams,
    ) -> RuntimeResult<PermissionsListResult> {
        let Some(root) = params.workspace_root.as_deref() else {
            let stored = self.inner.store.workspace_rules(None)?;
            return Ok(PermissionsListResult {
                stored: stored.into_iter().map(wire).collect(),
                in_force: None,
                notices: Vec::new(),
            });
        };
        if root.trim().is_empty() {
            return Err(RuntimeError::InvalidParams(
                "workspaceRoot is empty; give a folder, or leave it out to list every workspace's answers".into(),
            ));
        }
        let root = Path::new(root);
        let stored = self
            .inner
            .store
            .workspace_rules(Some(&answers::workspace_key(root)))?;
        let force = self.inner.rules_in_force(Some(root))?;
        Ok(PermissionsListResult {
            stored: stored.into_iter().map(wire).collect(),
            in_force: Some(in_force(&force.rules)),
            notices: force.notices,
        })
    }

    pub fn remove_permission(
        &self,
        params: PermissionsRemoveParams,
    ) -> RuntimeResult<PermissionsRemoveResult> {
        match self.inner.store.remove_workspace_rule(&params.id)? {
            Some(row) => Ok(PermissionsRemoveResult { removed: wire(row) }),
            None => Err(RuntimeError::InvalidParams(format!(
                "id: no saved workspace answer has the id {:?}; permissions/list shows them",
                params.id
            ))),
        }
    }

    /// The `/permissions` note: every rule in force for the session's workspace, weighed in
    /// order, and where each is written.
    pub(super) fn describe_permissions(&self, session: &SessionRow) -> RuntimeResult<String> {
        let root = session.workspace_root.as_deref().map(Path::new);
        let force = self.inner.rules_in_force(root)?;
        let mut lines = vec![match root {
            Some(root) => format!(
                "Permission rules in force in {} (deny wins, then ask, then allow, then the tool's default):",
                root.display()
            ),
            None => "Permission rules in force (this session has no workspace, so only your config file's apply; deny wins, then ask, then allow, then the tool's default):".to_string(),
        }];
        let mut rules: Vec<&Rule> = force.rules.rules().iter().collect();
        rules.sort_by_key(|r| weight(r.list()));
        if rules.is_empty() {
            lines.push("  none: each tool asks or runs unasked by its default.".into());
        }
        for rule in rules {
            lines.push(format!(
                "  {:<5} {}  from {}",
                rule.list().as_str(),
                rule.text(),
                rule.origin()
            ));
        }
        for notice in force.notices {
            lines.push(format!("  {notice}"));
        }
        lines.push(
            "Answer a prompt \"always in this workspace\" to save an allow rule here; permissions/remove deletes a saved one.".into(),
        );
        Ok(lines.join("\n"))
    }
}
