//! `session/request_permission` ↔ the durable approval rows: one request per waiting approval,
//! its options mapped to the native decisions, the client's answer applied as a native
//! client's approval answer is, and a request withdrawn with `$/cancel_request` when its
//! approval is resolved otherwise.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agent_client_protocol_schema::v1 as acp;
use serde_json::Value;

use super::agent::Agent;
use super::error::{AcpError, runtime_error};
use super::translate;
use crate::protocol::{
    ApprovalDecision, ApprovalRespondParams, PendingApproval, SessionTranscriptParams,
};

/// How long a permission request may wait for the person: a prompt left open over a weekend
/// is still answered. A restart asks again anyway.
const PERMISSION_WAIT: Duration = Duration::from_secs(7 * 24 * 3600);

/// The options a permission request may offer, and the decision each one stands for.
/// `allowWorkspace` is offered only when the approval proposes a rule to save; it comes first
/// of the `allow_always` kind, so a client choosing by kind saves the workspace rule.
const OPTIONS: [(&str, &str, acp::PermissionOptionKind, ApprovalDecision); 4] = [
    (
        "allow",
        "Allow",
        acp::PermissionOptionKind::AllowOnce,
        ApprovalDecision::Allow,
    ),
    (
        "allowWorkspace",
        "Always allow in this workspace",
        acp::PermissionOptionKind::AllowAlways,
        ApprovalDecision::AllowWorkspace,
    ),
    (
        "allowAlways",
        "Allow always (this session)",
        acp::PermissionOptionKind::AllowAlways,
        ApprovalDecision::AllowAlways,
    ),
    (
        "deny",
        "Deny",
        acp::PermissionOptionKind::RejectOnce,
        ApprovalDecision::Deny,
    ),
];

/// The choices of a permission request; the option ids are the native decisions' names. The
/// workspace answer names the rule it saves (the proposed one: ACP has no way to edit it).
pub fn options(approval: &PendingApproval) -> Vec<acp::PermissionOption> {
    OPTIONS
        .iter()
        .filter_map(|(id, name, kind, decision)| {
            let name = match decision {
                ApprovalDecision::AllowWorkspace => {
                    format!("{name}: {}", approval.proposed_rule.as_deref()?)
                }
                _ => name.to_string(),
            };
            Some(acp::PermissionOption::new(*id, name, *kind))
        })
        .collect()
}

/// The permission requests in flight: the id of the request asking for each approval, by
/// approval id. An approval resolved while its request is still here was withdrawn.
pub type Asking = HashMap<String, String>;

/// What the client's answer to a permission request does to its approval.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// The approval is decided.
    Decide(ApprovalDecision),
    /// The client cancelled the prompt turn.
    CancelTurn,
    /// The client chose an option that was not offered; the approval stays open.
    NotOffered(String),
    /// No usable answer (an error, a timeout, a malformed result); the approval stays open.
    Unusable(String),
}

/// The outcome the client chose, from its answer to `session/request_permission`.
fn outcome(answer: Result<Value, String>) -> Result<acp::RequestPermissionOutcome, String> {
    answer
        .and_then(|v| {
            serde_json::from_value::<acp::RequestPermissionResponse>(v)
                .map_err(|e| format!("the client's permission answer is malformed: {e}"))
        })
        .map(|response| response.outcome)
}

/// What an outcome does to the approval.
fn verdict(outcome: Result<acp::RequestPermissionOutcome, String>) -> Verdict {
    match outcome {
        Ok(acp::RequestPermissionOutcome::Selected(selected)) => {
            let chosen = &*selected.option_id.0;
            match OPTIONS.iter().find(|(id, ..)| *id == chosen) {
                Some((.., decision)) => Verdict::Decide(*decision),
                None => Verdict::NotOffered(chosen.to_string()),
            }
        }
        // `cancelled`, the only other outcome.
        Ok(_) => Verdict::CancelTurn,
        Err(e) => Verdict::Unusable(e),
    }
}

impl Agent {
    /// Asks the client again for every approval of the session still waiting (after a load,
    /// a resume, or a restart of the agent).
    pub(super) async fn ask_pending(self: &Arc<Self>, session_id: &str) -> Result<(), AcpError> {
        let runtime = self.runtime().await?;
        let transcript = runtime
            .transcript(SessionTranscriptParams {
                session_id: session_id.to_string(),
                after_seq: None,
                before_seq: None,
                limit: Some(1),
            })
            .map_err(runtime_error)?;
        let session = runtime.get_session(session_id).map_err(runtime_error)?;
        for approval in transcript.pending_approvals {
            self.ask(session_id, session.workspace_root.as_deref(), approval)
                .await;
        }
        for delegated in transcript.delegated_approvals {
            let asked =
                super::delegation::approval_in_parent(&delegated.approval, &delegated.call_id);
            self.ask(session_id, session.workspace_root.as_deref(), asked)
                .await;
        }
        Ok(())
    }

    /// Sends `session/request_permission` for one approval, unless one is already out, and
    /// applies the answer through the same durable approval rows as the native protocol.
    ///
    /// An approval resolved otherwise (the turn cancelled, stopped or ended, the session
    /// closed) withdraws its request with `$/cancel_request` (see [`Agent::withdraw`]); the
    /// client's answer to a withdrawn request, `cancelled` or a choice that came too late,
    /// changes nothing.
    pub(super) async fn ask(
        self: &Arc<Self>,
        session_id: &str,
        root: Option<&str>,
        approval: PendingApproval,
    ) {
        let mut state = self.state.lock().await;
        if state.asking.contains_key(&approval.approval_id) {
            return;
        }
        let request = acp::RequestPermissionRequest::new(
            session_id.to_string(),
            translate::permission_subject(&approval, root.map(Path::new)),
            options(&approval),
        );
        let request_id = self.peer.new_request_id();
        state
            .asking
            .insert(approval.approval_id.clone(), request_id.clone());
        let this = self.clone();
        let session_id = session_id.to_string();
        tokio::spawn(async move {
            let answer = this
                .peer
                .request_as(
                    request_id,
                    acp::CLIENT_METHOD_NAMES.session_request_permission,
                    &request,
                    PERMISSION_WAIT,
                )
                .await;
            let approval_id = approval.approval_id;
            let open = this
                .state
                .lock()
                .await
                .asking
                .remove(&approval_id)
                .is_some();
            let outcome = outcome(answer.map_err(|e| e.to_string()));
            if !open {
                // Withdrawn before the client answered: `cancelled`, as ACP asks of a client,
                // or a choice made too late; either way the approval is already resolved.
                tracing::debug!(approval_id, outcome = ?outcome, "answer to a withdrawn permission request");
                return;
            }
            let decision = match verdict(outcome) {
                Verdict::Decide(decision) => decision,
                Verdict::CancelTurn => {
                    // `cancelled` means the client cancelled the prompt turn; its
                    // `session/cancel` may still be on its way, and stopping twice is harmless.
                    this.cancel(&session_id).await;
                    return;
                }
                Verdict::NotOffered(option) => {
                    tracing::warn!(
                        option,
                        "the client chose an option that was not offered; the approval stays open"
                    );
                    return;
                }
                Verdict::Unusable(e) => {
                    tracing::warn!(error = %e, "no usable permission answer; the approval stays open");
                    return;
                }
            };
            let Ok(runtime) = this.runtime().await else {
                return;
            };
            let respond = ApprovalRespondParams {
                approval_id: approval_id.clone(),
                decision,
                rule: None,
                reason: None,
            };
            if let Err(e) = runtime.respond_approval(respond).await {
                tracing::info!(approval_id, error = %e, "the permission answer came too late to apply");
            }
        });
    }

    /// Withdraws the permission request still open for an approval resolved otherwise than by
    /// its answer: the client closes its prompt and answers `cancelled`.
    pub(super) async fn withdraw(&self, approval_id: &str) {
        let Some(request_id) = self.state.lock().await.asking.remove(approval_id) else {
            return;
        };
        self.peer.notify(
            acp::PROTOCOL_LEVEL_METHOD_NAMES.cancel_request,
            &acp::CancelRequestNotification::new(acp::RequestId::Str(request_id)),
        );
    }
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;
    use serde_json::json;

    use super::*;

    fn approval(proposed_rule: Option<&str>) -> PendingApproval {
        PendingApproval {
            approval_id: "apr_1".into(),
            run_id: "run_1".into(),
            call_id: "call_1".into(),
            tool: "run_command".into(),
            input: json!({"command": "cargo test --lib"}),
            summary: "run cargo test --lib".into(),
            created_at: "2026-01-01T00:00:00Z".into(),
            proposed_rule: proposed_rule.map(String::from),
            why_asked: None,
            sandboxed: None,
        }
    }

    /// The options as the client sees them: ids, names and kinds of ACP's schema. The
    /// workspace answer (naming its rule) only when a rule is proposed.
    #[test]
    fn the_options_offer_allow_the_workspace_rule_allow_always_and_deny() {
        assert_eq!(
            serde_json::to_value(options(&approval(Some("run_command(cargo test *)")))).unwrap(),
            json!([
                {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
                {"optionId": "allowWorkspace", "name": "Always allow in this workspace: run_command(cargo test *)", "kind": "allow_always"},
                {"optionId": "allowAlways", "name": "Allow always (this session)", "kind": "allow_always"},
                {"optionId": "deny", "name": "Deny", "kind": "reject_once"},
            ])
        );
        assert_eq!(
            serde_json::to_value(options(&approval(None))).unwrap(),
            json!([
                {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
                {"optionId": "allowAlways", "name": "Allow always (this session)", "kind": "allow_always"},
                {"optionId": "deny", "name": "Deny", "kind": "reject_once"},
            ])
        );
    }

    /// Each option offered, chosen, is the decision it stands for.
    #[test]
    fn each_option_chosen_is_its_decision() {
        let decided: Vec<Verdict> = options(&approval(Some("run_command(cargo test *)")))
            .into_iter()
            .map(|option| {
                let answer =
                    json!({"outcome": {"outcome": "selected", "optionId": option.option_id}});
                verdict(outcome(Ok(answer)))
            })
            .collect();
        assert_eq!(
            decided,
            vec![
                Verdict::Decide(ApprovalDecision::Allow),
                Verdict::Decide(ApprovalDecision::AllowWorkspace),
                Verdict::Decide(ApprovalDecision::AllowAlways),
                Verdict::Decide(ApprovalDecision::Deny),
            ]
        );
    }

    /// `cancelled` cancels the turn; an option never offered, a malformed answer or a failed
    /// request leave the approval open.
    #[test]
    fn other_answers_cancel_the_turn_or_leave_the_approval_open() {
        let verdicts: Vec<Verdict> = [
            Ok(json!({"outcome": {"outcome": "cancelled"}})),
            Ok(json!({"outcome": {"outcome": "selected", "optionId": "allowForever"}})),
            Ok(json!({"outcome": "yes"})),
            Err("the connection closed".to_string()),
        ]
        .into_iter()
        .map(|answer| verdict(outcome(answer)))
        .collect();
        assert_eq!(
            verdicts[..2],
            [
                Verdict::CancelTurn,
                Verdict::NotOffered("allowForever".into()),
            ]
        );
        assert!(
            matches!(&verdicts[2], Verdict::Unusable(e) if e.starts_with("the client's permission answer is malformed: ")),
            "{:?}",
            verdicts[2]
        );
        assert_eq!(
            verdicts[3],
            Verdict::Unusable("the connection closed".into())
        );
    }
}
