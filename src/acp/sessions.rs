//! The session methods: `session/new` ↔ `session/create` with `cwd` as the workspace root,
//! `session/load` (the stored transcript replayed as updates before the answer),
//! `session/resume`, `session/list`, `session/close` and the model and effort selectors of
//! `session/set_config_option`.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use agent_client_protocol_schema::v1 as acp;
use serde_json::json;

use super::agent::{Agent, Then};
use super::error::{AcpError, Answer, error_message, runtime_error, session_not_found, to_value};
use super::translate;
use crate::protocol::{
    Effort, Session, SessionCreateParams, SessionListParams, SessionTranscriptParams,
    SessionUpdateParams,
};
use crate::rpc::error::INVALID_PARAMS;

/// The sessions this connection has opened or closed.
#[derive(Default)]
pub struct Opened {
    /// Sessions closed on this connection; loading or resuming opens them again.
    pub(super) closed: HashSet<String>,
    /// Sessions whose command files are watched for changes (`Agent::watch_commands`).
    pub(super) watched: HashSet<String>,
    /// The MCP servers each session was given, kept for when MCP tools exist.
    mcp_servers: HashMap<String, Vec<acp::McpServer>>,
}

/// The workspace root an ACP `cwd` names; it must be absolute.
fn workspace_root(cwd: &Path) -> Result<String, AcpError> {
    if !cwd.is_absolute() {
        return Err(error_message(
            INVALID_PARAMS,
            format!("cwd must be an absolute path, got {:?}", cwd.display()),
        ));
    }
    Ok(cwd.display().to_string())
}

/// What `session/set_config_option` changes.
#[derive(Debug, PartialEq)]
enum Choice {
    Model(String),
    /// `None`: back to the account's default.
    Effort(Option<Effort>),
}

/// The option `session/set_config_option` sets, and to what: "model" takes a model id,
/// "effort" a level or "default".
fn choice(params: &acp::SetSessionConfigOptionRequest) -> Result<Choice, AcpError> {
    let id = &*params.config_id.0;
    let value = match &params.value {
        acp::SessionConfigOptionValue::ValueId { value } => value.0.to_string(),
        _ => {
            return Err(error_message(
                INVALID_PARAMS,
                format!("the {id} option takes a value id, not a boolean"),
            ));
        }
    };
    match id {
        "model" => Ok(Choice::Model(value)),
        "effort" if value == translate::DEFAULT_EFFORT => Ok(Choice::Effort(None)),
        "effort" => match Effort::parse(&value) {
            Some(effort) => Ok(Choice::Effort(Some(effort))),
            None => Err(error_message(
                INVALID_PARAMS,
                format!("unknown effort {value:?}; use default, minimal, low, medium or high"),
            )),
        },
        other => Err(error_message(
            INVALID_PARAMS,
            format!("unknown config option {other:?}; sidechat offers \"model\" and \"effort\""),
        )),
    }
}

impl Agent {
    /// The model selector of a session, and its effort selector when its model takes one.
    fn config_options(&self, session: &Session) -> Vec<acp::SessionConfigOption> {
        let account = self.config.account(&session.account);
        let default = account.map_or(session.model.as_str(), |a| a.default_model.as_str());
        let mut options = vec![translate::model_option(&session.model, default)];
        options.extend(translate::thought_level_option(
            session.effort,
            !session.effort_inherited,
            account.and_then(|a| a.effort),
            &session.effort_levels,
        ));
        options
    }

    pub(super) async fn new_session(
        &self,
        params: acp::NewSessionRequest,
        then: &mut Then,
    ) -> Answer {
        let runtime = self.runtime().await?;
        let (mcp_servers, skipped) = super::mcp::servers(params.mcp_servers.clone());
        let session = runtime
            .create_session(SessionCreateParams {
                workspace_root: Some(workspace_root(&params.cwd)?),
                mcp_servers: Some(mcp_servers),
                ..SessionCreateParams::default()
            })
            .map_err(runtime_error)?;
        for server in skipped {
            tracing::warn!(session_id = %session.id, server, "MCP server left out");
        }
        self.state
            .lock()
            .await
            .opened
            .mcp_servers
            .insert(session.id.clone(), params.mcp_servers);
        let response = acp::NewSessionResponse::new(session.id.clone())
            .config_options(self.config_options(&session));
        *then = Then::Opened(session.id.clone());
        to_value(&response)
    }

    /// Opens a stored session on this connection: checks it exists and forgets a close. A
    /// session without a workspace (created by another client) takes `cwd` as its own, as ACP
    /// says a session works in its `cwd`.
    async fn open(
        &self,
        session_id: &str,
        cwd: &Path,
        mcp: Vec<acp::McpServer>,
    ) -> Result<Session, AcpError> {
        let root = workspace_root(cwd)?;
        let runtime = self.runtime().await?;
        let mut session = runtime.get_session(session_id).map_err(runtime_error)?;
        let (servers, skipped) = super::mcp::servers(mcp.clone());
        runtime
            .set_mcp_servers(session_id, servers)
            .map_err(runtime_error)?;
        for server in skipped {
            tracing::warn!(session_id, server, "MCP server left out");
        }
        if session.workspace_root.is_none() {
            session = runtime
                .update_session(SessionUpdateParams {
                    session_id: session_id.to_string(),
                    workspace_root: Some(root),
                    ..SessionUpdateParams::default()
                })
                .map_err(runtime_error)?;
        }
        let mut state = self.state.lock().await;
        state.opened.closed.remove(session_id);
        state.opened.mcp_servers.insert(session_id.to_string(), mcp);
        Ok(session)
    }

    pub(super) async fn load_session(
        &self,
        params: acp::LoadSessionRequest,
        then: &mut Then,
    ) -> Answer {
        let session = self
            .open(&params.session_id.0, &params.cwd, params.mcp_servers)
            .await?;
        self.replay(&session).await?;
        let response =
            acp::LoadSessionResponse::new().config_options(self.config_options(&session));
        *then = Then::Reopened(session.id.clone());
        to_value(&response)
    }

    pub(super) async fn resume_session(
        &self,
        params: acp::ResumeSessionRequest,
        then: &mut Then,
    ) -> Answer {
        let session = self
            .open(&params.session_id.0, &params.cwd, params.mcp_servers)
            .await?;
        let response =
            acp::ResumeSessionResponse::new().config_options(self.config_options(&session));
        *then = Then::Reopened(session.id.clone());
        to_value(&response)
    }

    /// Sends the stored history as the updates that showed it live, oldest first.
    async fn replay(&self, session: &Session) -> Result<(), AcpError> {
        let runtime = self.runtime().await?;
        let root = session.workspace_root.as_deref().map(Path::new);
        let mut tools = HashMap::new();
        let mut after = 0;
        loop {
            let page = runtime
                .transcript(SessionTranscriptParams {
                    session_id: session.id.clone(),
                    after_seq: Some(after),
                    before_seq: None,
                    limit: Some(5000),
                })
                .map_err(runtime_error)?;
            for entry in &page.entries {
                for update in translate::replay(entry, root, &mut tools) {
                    self.update(&session.id, update);
                }
            }
            match page.entries.last() {
                Some(last) if page.has_more => after = last.seq,
                _ => break,
            }
        }
        // The latest plan, as the client last saw it live: a checklist survives a reload.
        if let Some(plan) = &session.plan {
            self.update(
                &session.id,
                acp::SessionUpdate::Plan(translate::plan_update(plan)),
            );
        }
        if !session.title.is_empty() {
            self.update(
                &session.id,
                acp::SessionUpdate::SessionInfoUpdate(
                    acp::SessionInfoUpdate::new()
                        .title(session.title.clone())
                        .updated_at(session.updated_at.clone()),
                ),
            );
        }
        self.send_usage_when_counted(session).await;
        Ok(())
    }

    pub(super) async fn list_sessions(&self, params: acp::ListSessionsRequest) -> Answer {
        let runtime = self.runtime().await?;
        let workspace_root = params.cwd.as_deref().map(workspace_root).transpose()?;
        let page = runtime
            .list_sessions(SessionListParams {
                cursor: params.cursor,
                limit: None,
                workspace_root,
                ..SessionListParams::default()
            })
            .map_err(runtime_error)?;
        // ACP needs a folder for every session. One created without a workspace (by another
        // client) is listed in the folder this agent runs in, where loading it would put it;
        // `_meta` says it has none yet.
        let here = std::env::current_dir().ok().filter(|d| d.is_absolute());
        let sessions = page
            .sessions
            .into_iter()
            .filter_map(|s| {
                let info = match s.workspace_root {
                    Some(root) => acp::SessionInfo::new(s.id, root),
                    None => acp::SessionInfo::new(s.id, here.clone()?).meta(
                        json!({"sidechat": {"workspaceRoot": null}})
                            .as_object()
                            .cloned(),
                    ),
                };
                Some(info.title(s.title).updated_at(s.updated_at))
            })
            .collect();
        to_value(&acp::ListSessionsResponse::new(sessions).next_cursor(page.next_cursor))
    }

    /// Closes a session on this connection: its turn is cancelled, its open permission
    /// requests withdrawn, and prompts for it refused until it is loaded again.
    pub(super) async fn close_session(&self, params: acp::CloseSessionRequest) -> Answer {
        let session_id = params.session_id.0.to_string();
        self.runtime()
            .await?
            .get_session(&session_id)
            .map_err(runtime_error)?;
        self.state
            .lock()
            .await
            .opened
            .closed
            .insert(session_id.clone());
        self.cancel(&session_id).await;
        to_value(&acp::CloseSessionResponse::new())
    }

    /// A session that may take prompts and options: stored, and not closed on this
    /// connection.
    pub(super) async fn usable_session(&self, session_id: &str) -> Result<Session, AcpError> {
        if self.state.lock().await.opened.closed.contains(session_id) {
            return Err(session_not_found(
                session_id,
                format!(
                    "session {session_id} was closed on this connection; load or resume it to use it again"
                ),
            ));
        }
        self.runtime()
            .await?
            .get_session(session_id)
            .map_err(runtime_error)
    }

    pub(super) async fn set_config_option(
        &self,
        params: acp::SetSessionConfigOptionRequest,
    ) -> Answer {
        let session_id = params.session_id.0.to_string();
        self.usable_session(&session_id).await?;
        let update = match choice(&params)? {
            Choice::Model(model) => SessionUpdateParams {
                session_id,
                model: Some(model),
                ..SessionUpdateParams::default()
            },
            Choice::Effort(effort) => SessionUpdateParams {
                session_id,
                effort: Some(effort),
                ..SessionUpdateParams::default()
            },
        };
        let session = self
            .runtime()
            .await?
            .update_session(update)
            .map_err(runtime_error)?;
        to_value(&acp::SetSessionConfigOptionResponse::new(
            self.config_options(&session),
        ))
    }
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    #[test]
    fn a_cwd_must_be_absolute() {
        assert_eq!(
            (
                workspace_root(Path::new("/w/project")),
                workspace_root(Path::new("relative/path")),
            ),
            (
                Ok("/w/project".to_string()),
                Err(error_message(
                    INVALID_PARAMS,
                    "cwd must be an absolute path, got \"relative/path\""
                )),
            )
        );
    }

    /// "model" takes a model id, "effort" a level or "default"; other options, unknown levels
    /// and a boolean value are refused.
    #[test]
    fn the_options_take_a_model_id_or_an_effort() {
        let chosen: Vec<Result<Choice, AcpError>> = [
            json!({"sessionId": "s", "configId": "model", "value": "m1"}),
            json!({"sessionId": "s", "configId": "effort", "value": "high"}),
            json!({"sessionId": "s", "configId": "effort", "value": "default"}),
            json!({"sessionId": "s", "configId": "effort", "value": "extreme"}),
            json!({"sessionId": "s", "configId": "mode", "value": "x"}),
            json!({"sessionId": "s", "configId": "model", "type": "boolean", "value": true}),
        ]
        .into_iter()
        .map(|params| choice(&serde_json::from_value(params).unwrap()))
        .collect();
        assert_eq!(
            chosen,
            vec![
                Ok(Choice::Model("m1".to_string())),
                Ok(Choice::Effort(Some(Effort::High))),
                Ok(Choice::Effort(None)),
                Err(error_message(
                    INVALID_PARAMS,
                    "unknown effort \"extreme\"; use default, minimal, low, medium or high"
                )),
                Err(error_message(
                    INVALID_PARAMS,
                    "unknown config option \"mode\"; sidechat offers \"model\" and \"effort\""
                )),
                Err(error_message(
                    INVALID_PARAMS,
                    "the model option takes a value id, not a boolean"
                )),
            ]
        );
    }
}
