//! Session methods: create, list, get, update, delete, transcript, and each session's state.

use super::{Runtime, RuntimeError, RuntimeResult};
use crate::context::carry_over::{format_rollover, parse_rollover};
use crate::protocol::*;
use crate::store::{ListedFacts, NewSession, SessionRow, SessionUpdate};
use crate::util::rfc3339;

const DEFAULT_PAGE: u32 = 50;
const MAX_PAGE: u32 = 200;
const DEFAULT_TRANSCRIPT: u32 = 500;
const MAX_TRANSCRIPT: u32 = 5000;

fn check_steps(max_steps: Option<u32>) -> RuntimeResult<()> {
    match max_steps {
        Some(0) => Err(RuntimeError::InvalidParams(
            "maxSteps must be at least 1".into(),
        )),
        Some(n) if n > 1000 => Err(RuntimeError::InvalidParams(
            "maxSteps must be at most 1000".into(),
        )),
        _ => Ok(()),
    }
}

fn check_limits(cap_usd: Option<f64>, max_seconds: Option<u64>) -> RuntimeResult<()> {
    if cap_usd.is_some_and(|c| !c.is_finite() || c < 0.0) {
        return Err(RuntimeError::InvalidParams(
            "capUsd must be a positive number of dollars".into(),
        ));
    }
    if max_seconds == Some(0) {
        return Err(RuntimeError::InvalidParams(
            "maxSeconds must be at least 1".into(),
        ));
    }
    Ok(())
}

/// A rollover period, when one is given: `Some(None)` for `off`.
fn check_rollover(rollover: Option<&str>) -> RuntimeResult<Option<Option<u64>>> {
    rollover
        .map(parse_rollover)
        .transpose()
        .map_err(RuntimeError::InvalidParams)
}

/// A workspace root given to a new or an existing session: tools are confined to it at once, so
/// it must be an absolute path to a directory that exists.
fn check_workspace_root(root: &str) -> RuntimeResult<()> {
    let path = std::path::Path::new(root);
    if !path.is_absolute() {
        return Err(RuntimeError::InvalidParams(format!(
            "workspaceRoot must be an absolute path, got {root:?}"
        )));
    }
    if !path.is_dir() {
        return Err(RuntimeError::InvalidParams(format!(
            "workspaceRoot {root:?} is not an existing directory"
        )));
    }
    Ok(())
}

/// How the store keeps a session's origin.
fn origin_name(origin: SessionOrigin) -> &'static str {
    match origin {
        SessionOrigin::Interactive => "interactive",
        SessionOrigin::Oneshot => "oneshot",
    }
}

/// A stored origin; one this build does not know is left out.
fn parse_origin(stored: Option<&str>) -> Option<SessionOrigin> {
    match stored? {
        "interactive" => Some(SessionOrigin::Interactive),
        "oneshot" => Some(SessionOrigin::Oneshot),
        _ => None,
    }
}

fn encode_cursor(at: i64, id: &str) -> String {
    format!("{at}:{id}")
}

fn decode_cursor(cursor: &str) -> RuntimeResult<(i64, String)> {
    cursor
        .split_once(':')
        .and_then(|(at, id)| Some((at.parse().ok()?, id.to_string())))
        .ok_or_else(|| {
            RuntimeError::InvalidParams(format!(
                "cursor {cursor:?} is not one this server returned"
            ))
        })
}

impl Runtime {
    pub fn create_session(&self, params: SessionCreateParams) -> RuntimeResult<Session> {
        let config = &self.inner.config;
        let account_name = params
            .account
            .unwrap_or_else(|| config.default_account.clone());
        let account = config.account(&account_name).ok_or_else(|| {
            RuntimeError::InvalidParams(format!("no account named {account_name:?} is configured"))
        })?;
        check_steps(params.max_steps)?;
        check_limits(params.cap_usd, params.max_seconds)?;
        let rollover = check_rollover(params.rollover.as_deref())?;
        if let Some(root) = &params.workspace_root {
            check_workspace_root(root)?;
        }
        let mcp_servers = params
            .mcp_servers
            .map(super::mcp_tools::check_servers)
            .transpose()?
            .unwrap_or_default();
        if let Some(effort) = params.effort {
            super::effort::check_effort(
                params.model.as_deref().unwrap_or(&account.default_model),
                effort,
            )?;
        }
        let untitled = params.title.is_none();
        let row = self.inner.store.insert_session(&NewSession {
            title: params
                .title
                .unwrap_or_else(|| super::titles::PLACEHOLDER.into()),
            account: account.name.clone(),
            model: params
                .model
                .unwrap_or_else(|| account.default_model.clone()),
            system_prompt: params.system_prompt.filter(|p| !p.is_empty()),
            workspace_root: params.workspace_root,
            max_steps: params.max_steps.unwrap_or(config.budget.max_steps),
            cap_usd: params.cap_usd.or(config.budget.cap_usd),
            max_seconds: params.max_seconds.or(config.budget.max_seconds),
            rollover_secs: rollover.unwrap_or(config.budget.rollover_secs),
        })?;
        let mut row = row;
        if let Some(origin) = params.origin {
            let origin = origin_name(origin);
            self.inner.store.set_session_origin(&row.id, origin)?;
            row.origin = Some(origin.to_string());
        }
        if !mcp_servers.is_empty() {
            self.store_mcp_servers(&row.id, &mcp_servers)?;
            self.inner.mcp.remember(&row.id, mcp_servers);
        }
        if params.delegation == Some(false) {
            self.inner.store.set_delegation_off(&row.id, true)?;
        }
        if untitled {
            self.inner.store.set_title_placeholder(&row.id)?;
        }
        if let Some(on) = params.auto_compact {
            self.inner.store.set_auto_compact(&row.id, on)?;
        }
        if let Some(effort) = params.effort {
            self.inner
                .store
                .set_session_effort(&row.id, Some(effort.name()))?;
        }
        self.inner.open_mcp(&row.id);
        self.session_view(row)
    }

    pub fn list_sessions(&self, params: SessionListParams) -> RuntimeResult<SessionListResult> {
        let limit = params.limit.unwrap_or(DEFAULT_PAGE).clamp(1, MAX_PAGE) as usize;
        let after = params.cursor.as_deref().map(decode_cursor).transpose()?;
        let lineage = super::delegation::lineage(&params);
        let page = self.inner.store.list_sessions(
            after,
            limit,
            params.workspace_root.as_deref(),
            &lineage,
        )?;
        // The page's facts and spends in a few statements for the whole page, not a dozen
        // per session.
        let ids: Vec<&str> = page.sessions.iter().map(|row| row.id.as_str()).collect();
        let mut facts = self.inner.store.listed_facts(&ids)?;
        let mut owners = ids.clone();
        owners.extend(
            facts
                .values()
                .flat_map(|f| f.children.iter().map(String::as_str)),
        );
        let tallies = self.inner.own_spends(&owners)?;
        let sessions = page
            .sessions
            .into_iter()
            .map(|row| {
                // A session deleted since the page was read has no facts: nothing is owed.
                let facts = facts.remove(&row.id).unwrap_or_default();
                let mut tally = tallies.get(&row.id).copied().unwrap_or_default();
                for child in &facts.children {
                    tally += tallies.get(child).copied().unwrap_or_default();
                }
                SessionSummary {
                    state: self.state_of(&row, &facts),
                    forked_from: facts.forked_from,
                    parent_id: facts.parent_id,
                    origin: parse_origin(row.origin.as_deref()),
                    id: row.id,
                    title: row.title,
                    account: row.account,
                    model: row.model,
                    workspace_root: row.workspace_root,
                    updated_at: rfc3339(row.updated_at),
                    spend: tally.spend(),
                }
            })
            .collect();
        Ok(SessionListResult {
            sessions,
            next_cursor: page.next.map(|(at, id)| encode_cursor(at, &id)),
        })
    }

    pub fn get_session(&self, id: &str) -> RuntimeResult<Session> {
        let row = self.session_row(id)?;
        self.inner.open_mcp(id);
        self.session_view(row)
    }

    /// The session's (or one of its delegated tasks') change to one file, from its first
    /// before to its latest after.
    pub fn file_diff(&self, params: SessionFileDiffParams) -> RuntimeResult<SessionFileDiffResult> {
        self.session_row(&params.session_id)?;
        let (child_session_id, diff) = self.inner.file_diff_with_children(
            &params.session_id,
            &params.path,
            params.child_session_id.as_deref(),
        )?;
        Ok(SessionFileDiffResult {
            session_id: params.session_id,
            path: params.path,
            child_session_id,
            before: diff.before,
            after: diff.after,
            omitted: diff.omitted,
            changes: diff.changes,
        })
    }

    pub fn update_session(&self, params: SessionUpdateParams) -> RuntimeResult<Session> {
        check_steps(params.max_steps)?;
        check_limits(params.cap_usd.flatten(), params.max_seconds.flatten())?;
        let rollover_secs = check_rollover(params.rollover.as_deref())?;
        if params.title.as_deref().is_some_and(|t| t.trim().is_empty()) {
            return Err(RuntimeError::InvalidParams(
                "title must not be empty".into(),
            ));
        }
        let account = match &params.account {
            Some(name) => Some(self.inner.config.account(name).ok_or_else(|| {
                RuntimeError::InvalidParams(format!(
                    "no account named {name:?} is configured; configured: {}",
                    self.account_names()
                ))
            })?),
            None => None,
        };
        if let Some(root) = &params.workspace_root {
            check_workspace_root(root)?;
        }
        let mcp_servers = params
            .mcp_servers
            .map(super::mcp_tools::check_servers)
            .transpose()?;
        if let Some(Some(effort)) = params.effort {
            let model = match params
                .model
                .clone()
                .or_else(|| account.map(|a| a.default_model.clone()))
            {
                Some(model) => model,
                None => self.session_row(&params.session_id)?.model,
            };
            super::effort::check_effort(&model, effort)?;
        }
        let titled = params.title.is_some();
        let update = SessionUpdate {
            title: params.title,
            account: account.map(|a| a.name.clone()),
            // A new account serves its own default model unless one is named.
            model: params
                .model
                .or_else(|| account.map(|a| a.default_model.clone())),
            workspace_root: params.workspace_root,
            system_prompt: params
                .system_prompt
                .map(|p| Some(p).filter(|p| !p.is_empty())),
            max_steps: params.max_steps,
            cap_usd: params.cap_usd,
            max_seconds: params.max_seconds,
            rollover_secs,
        };
        let row = self
            .inner
            .store
            .update_session(&params.session_id, &update)?
            .ok_or_else(|| RuntimeError::SessionNotFound(params.session_id.clone()))?;
        if let Some(on) = params.delegation {
            self.inner.store.set_delegation_off(&row.id, !on)?;
        }
        if titled {
            // The user's title is never replaced by the daemon's.
            self.inner.store.set_title_given(&row.id)?;
        }
        if let Some(on) = params.auto_compact {
            self.inner.store.set_auto_compact(&row.id, on)?;
        }
        if let Some(effort) = params.effort {
            self.inner
                .store
                .set_session_effort(&row.id, effort.map(Effort::name))?;
        }
        if let Some(specs) = mcp_servers {
            self.replace_mcp_servers(&row.id, specs)?;
        }
        let session = self.session_view(row)?;
        self.emit_session_updated(&session);
        Ok(session)
    }

    /// Tells every client of the session what it is now (`sessionUpdated`), after a change
    /// they did not ask for themselves (a title the daemon gave it).
    pub(super) fn announce_session(&self, session_id: &str) -> RuntimeResult<()> {
        let session = self.session_view(self.session_row(session_id)?)?;
        self.emit_session_updated(&session);
        Ok(())
    }

    fn emit_session_updated(&self, session: &Session) {
        self.inner.events.emit(
            &self.inner.store,
            &session.id,
            None,
            Event::SessionUpdated {
                title: session.title.clone(),
                session: Box::new(session.clone()),
            },
        );
    }

    pub async fn delete_session(&self, id: &str) -> RuntimeResult<SessionDeleteResult> {
        self.session_row(id)?;
        // A session's delegated tasks go with it.
        for child in self.inner.store.delegations_of_parent(id)? {
            Box::pin(self.delete_session(&child.child_id)).await?;
        }
        if let Some((_, mut done)) = self.inner.runs.stop(id) {
            let _ = done.wait_for(|d| *d).await;
        }
        let deleted = self.inner.store.delete_session(id)?;
        self.inner.events.forget(id);
        Ok(SessionDeleteResult { deleted })
    }

    pub fn transcript(
        &self,
        params: SessionTranscriptParams,
    ) -> RuntimeResult<SessionTranscriptResult> {
        let row = self.session_row(&params.session_id)?;
        let limit = params
            .limit
            .unwrap_or(DEFAULT_TRANSCRIPT)
            .clamp(1, MAX_TRANSCRIPT) as usize;
        let after_seq = params.after_seq.unwrap_or(0);
        let (entries, has_more) = match params.before_seq {
            Some(before_seq) => {
                let mut entries =
                    self.inner
                        .store
                        .messages_before(&row.id, before_seq, after_seq, limit + 1)?;
                let has_more = entries.len() > limit;
                if has_more {
                    // The one past the page is its oldest: it only said that more remain.
                    entries.remove(0);
                }
                (entries, has_more)
            }
            None => {
                let mut entries = self
                    .inner
                    .store
                    .messages_after(&row.id, after_seq, limit + 1)?;
                let has_more = entries.len() > limit;
                entries.truncate(limit);
                (entries, has_more)
            }
        };
        Ok(SessionTranscriptResult {
            state: self.state(&row)?,
            pending_approvals: self
                .inner
                .store
                .pending_approvals(&row.id)?
                .into_iter()
                .map(|a| self.inner.with_sandbox(a))
                .collect(),
            pending_interjections: self
                .inner
                .store
                .open_pending(&row.id)?
                .into_iter()
                .map(|p| PendingInterjection {
                    pending_id: p.id,
                    text: p.text,
                    status: p.status,
                    created_at: p.created_at,
                })
                .collect(),
            delegated_approvals: self.inner.delegated_approvals(&row.id)?,
            session_id: row.id,
            entries,
            has_more,
            last_seq: row.last_seq,
        })
    }

    pub fn budget(&self, session_id: &str) -> RuntimeResult<SessionBudgetResult> {
        let row = self.session_row(session_id)?;
        Ok(SessionBudgetResult {
            snapshot: self.inner.budget_snapshot(&row)?,
            session_id: row.id,
            model: row.model,
        })
    }

    pub fn cost(&self, session_id: &str) -> RuntimeResult<SessionCostResult> {
        let row = self.session_row(session_id)?;
        Ok(SessionCostResult {
            cost: self.inner.cost_summary(&row.id)?,
            session_id: row.id,
            cap_usd: row.cap_usd,
        })
    }

    /// The configured account names, for error messages.
    pub(super) fn account_names(&self) -> String {
        self.inner
            .config
            .accounts
            .iter()
            .map(|a| a.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    pub(super) fn session_row(&self, id: &str) -> RuntimeResult<SessionRow> {
        self.inner
            .store
            .session(id)?
            .ok_or_else(|| RuntimeError::SessionNotFound(id.to_string()))
    }

    /// What a client should draw for the session now.
    ///
    /// A turn is unanswered when the model's context ends with the user's words or with tool
    /// results and no run will answer them: a crash cut the run off, or the input was promoted
    /// after one; or when the run failed before the model said anything (its answer is empty),
    /// so `chat/resume` asks again. A run the user stopped, that used up its steps, or that the model declined
    /// to answer, ended on purpose: the session is idle and waits for the user's next message.
    pub(super) fn state(&self, session: &SessionRow) -> RuntimeResult<SessionState> {
        let facts = self
            .inner
            .store
            .listed_facts(&[&session.id])?
            .remove(&session.id)
            .unwrap_or_default();
        Ok(self.state_of(session, &facts))
    }

    /// [`Self::state`] from the session's facts as read for a page of sessions.
    fn state_of(&self, session: &SessionRow, facts: &ListedFacts) -> SessionState {
        let store = &self.inner.store;
        let live = self.inner.runs.active_run(&session.id).is_some()
            || facts
                .lease
                .as_ref()
                .is_some_and(|l| l.owner != store.owner() && l.is_live());
        if facts.pending_approval || facts.delegated_approval {
            return SessionState::AwaitingApproval;
        }
        if live {
            return SessionState::Running;
        }
        let Some(last) = facts
            .last_model_message
            .as_ref()
            // Before a `/clear`, nothing is owed an answer.
            .filter(|m| m.seq > session.context_start_seq)
            .filter(|m| matches!(m.role, Role::User | Role::Tool) || m.empty_failure)
        else {
            return SessionState::Idle;
        };
        let ended_on_purpose = last.in_run
            && matches!(
                last.run_reason,
                Some(FinishReason::Stopped | FinishReason::MaxIterations | FinishReason::Refusal)
            );
        match ended_on_purpose {
            true => SessionState::Idle,
            false => SessionState::Unanswered,
        }
    }

    /// The session's latest plan; one that no longer reads (a newer build's) is left out.
    fn plan(&self, session_id: &str) -> RuntimeResult<Option<Plan>> {
        let Some(json) = self.inner.store.session_plan(session_id)? else {
            return Ok(None);
        };
        Ok(serde_json::from_str(&json)
            .inspect_err(|e| tracing::warn!(session_id, error = %e, "a stored plan does not read"))
            .ok())
    }

    fn session_view(&self, row: SessionRow) -> RuntimeResult<Session> {
        let lineage = self.inner.lineage(&row.id)?;
        let (effort, effort_inherited) = self.inner.effort_with_source(&row)?;
        let tally = self.inner.spend_tally(&row.id)?;
        Ok(Session {
            forked_from: self.inner.store.forked_from(&row.id)?,
            origin: parse_origin(row.origin.as_deref()),
            delegation: lineage.offered,
            parent_id: lineage.parent_id,
            parent_call_id: lineage.parent_call_id,
            children: lineage.children,
            state: self.state(&row)?,
            changed_files: self.inner.changed_files_with_children(&row.id)?,
            plan: self.plan(&row.id)?,
            mcp_servers: self.inner.mcp.statuses(&row.id),
            instructions: self.inner.instructions(&row).files,
            spend: tally.spend(),
            tokens_by_kind: tally.tokens,
            auto_compact: self.inner.auto_compact(&row.id)?,
            effort,
            effort_inherited,
            effort_levels: self.inner.effort_levels(&row),
            id: row.id,
            title: row.title,
            account: row.account,
            model: row.model,
            system_prompt: row.system_prompt,
            workspace_root: row.workspace_root,
            max_steps: row.max_steps,
            cap_usd: row.cap_usd,
            max_seconds: row.max_seconds,
            rollover: row.rollover_secs.map(format_rollover),
            created_at: rfc3339(row.created_at),
            updated_at: rfc3339(row.updated_at),
            last_seq: row.last_seq,
            commands_sandboxed: self.inner.sandbox_active(),
        })
    }
}
