//! What a child's run returns to the parent's `delegate` call: always an answer.
//!
//! A child that ended its turn with words returns them, whole, followed by the files it changed
//! (if any). Any other end (stopped, out of
//! steps or budget, cut off, refused, failed, or an end without words) returns a short report
//! the parent's model can act on: a status, a note saying why, the child's last words, the
//! files it changed and the calls that failed.

use crate::protocol::{Block, ChangedFile, FinishReason, Role, ToolCallStatus};
use crate::store::Store;
use crate::tools::{ToolOutcome, truncate};

use crate::runtime::RuntimeResult;

/// Longest failed-call output quoted in a report, in bytes.
const QUOTED_OUTPUT: usize = 300;
/// Longest last message quoted in a report, in bytes.
const QUOTED_MESSAGE: usize = 4000;

/// The status word a report starts with, for each way a run ends.
fn status(reason: FinishReason) -> &'static str {
    match reason {
        FinishReason::EndTurn => "ended without an answer",
        FinishReason::Stopped => "stopped",
        FinishReason::MaxIterations => "out of steps",
        FinishReason::BudgetSpent => "budget spent",
        FinishReason::CutOff => "cut off",
        FinishReason::Refusal => "refused",
        FinishReason::Error => "failed",
    }
}

/// The note that explains an end, when the run stored no error text of its own.
fn default_note(reason: FinishReason) -> &'static str {
    match reason {
        FinishReason::EndTurn => "the sub-agent ended its turn without final words",
        FinishReason::Stopped => "the user stopped the run, and with it the delegated task",
        FinishReason::MaxIterations => "the sub-agent used all the steps it was given",
        FinishReason::BudgetSpent => "the sub-agent reached a budget limit",
        FinishReason::CutOff => "the sub-agent's answer got too long and was cut off",
        FinishReason::Refusal => "the model declined to answer",
        FinishReason::Error => "the sub-agent's run failed",
    }
}

/// The child's last words: the text of its newest assistant message that has any.
fn last_words(store: &Store, child_id: &str) -> RuntimeResult<Option<String>> {
    let entries = store.messages_after(child_id, 0, usize::MAX >> 1)?;
    Ok(entries
        .iter()
        .rev()
        .filter(|e| e.role == Role::Assistant)
        .map(|e| {
            e.blocks
                .iter()
                .filter_map(|b| match b {
                    Block::Text { text } => Some(text.as_str()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join("")
        })
        .find(|text| !text.trim().is_empty()))
}

/// The parent's result for a child run that has ended (`reason`, `error`): the tool call's
/// status and what the model reads.
pub(super) fn answer(
    store: &Store,
    child_id: &str,
    reason: FinishReason,
    error: Option<&str>,
) -> RuntimeResult<(ToolCallStatus, ToolOutcome)> {
    let last = last_words(store, child_id)?;
    // Only the words of the run's final message are its answer; earlier words were on the
    // way to tool calls.
    let final_words = store
        .last_model_message(child_id)?
        .filter(|m| m.role == Role::Assistant)
        .is_some_and(|m| {
            m.blocks
                .iter()
                .any(|b| matches!(b, Block::Text { text } if !text.trim().is_empty()))
        });
    if reason == FinishReason::EndTurn
        && final_words
        && let Some(text) = &last
    {
        // The asker learns what changed under it from the result, not only from the words.
        let files = store.changed_files(child_id)?;
        let text = match files.is_empty() {
            true => text.clone(),
            false => format!("{text}\n\n{}", files_line(&files)),
        };
        return Ok((ToolCallStatus::Done, ToolOutcome::ok(text)));
    }
    Ok((
        match reason {
            FinishReason::Stopped => ToolCallStatus::Cancelled,
            _ => ToolCallStatus::Error,
        },
        ToolOutcome::error(report(store, child_id, reason, error, last.as_deref())?),
    ))
}

/// `files changed: a.md (+1 -0), b.rs (+3 -2)`, or `files changed: none`.
fn files_line(files: &[ChangedFile]) -> String {
    match files.is_empty() {
        true => "files changed: none".into(),
        false => format!(
            "files changed: {}",
            files
                .iter()
                .map(|f| format!("{} (+{} -{})", f.path, f.added, f.removed))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn report(
    store: &Store,
    child_id: &str,
    reason: FinishReason,
    error: Option<&str>,
    last: Option<&str>,
) -> RuntimeResult<String> {
    let mut lines = vec![
        format!("status: {}", status(reason)),
        format!("note: {}", error.unwrap_or(default_note(reason))),
        format!(
            "last message: {}",
            last.map_or("(none)".to_string(), |t| truncate(t.trim(), QUOTED_MESSAGE))
        ),
    ];
    lines.push(files_line(&store.changed_files(child_id)?));
    let failed = store.failed_calls(child_id)?;
    if failed.is_empty() {
        lines.push("failed calls: none".into());
    } else {
        lines.push("failed calls:".into());
        for call in failed {
            let first = call.output.lines().next().unwrap_or_default();
            lines.push(format!(
                "- {}: {}",
                crate::tools::summary(&call.name, &call.input),
                truncate(first, QUOTED_OUTPUT)
            ));
        }
    }
    Ok(lines.join("\n"))
}
