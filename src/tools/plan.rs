//! `update_plan`: the model's checklist for a multi-step task. The tool only reads and checks
//! the plan; the runtime stores it and publishes it, since that needs the session.

use serde_json::{Value, json};

use crate::protocol::{Plan, PlanStep, PlanStepStatus};
use crate::provider::ToolSpec;

/// The tool's name.
pub const UPDATE_PLAN: &str = "update_plan";

/// What the model reads about the tool: when to keep a plan is said here, since this is the
/// part of the prompt every session's model gets.
pub fn spec() -> ToolSpec {
    ToolSpec {
        name: UPDATE_PLAN.to_string(),
        description: "Keep a short plan the user sees while you work. Use it for tasks of \
            several steps (not for a single quick answer): give the plan before starting, then \
            call again with the whole list whenever a step starts or is done. At most one step \
            is in_progress at a time. Each call replaces the plan before."
            .to_string(),
        input_schema: json!({"type": "object", "properties": {
            "explanation": {"type": "string", "description": "Why the plan changed, in a sentence"},
            "steps": {"type": "array", "items": {"type": "object", "properties": {
                "step": {"type": "string", "description": "What the step does, in a few words"},
                "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]}
            }, "required": ["step", "status"]}}
        }, "required": ["steps"]}),
    }
}

/// Reads the call's input as a plan; an error the model can read names what is wrong.
pub fn parse(input: &Value) -> Result<Plan, String> {
    let explanation = match input.get("explanation") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(text.clone()).filter(|t| !t.trim().is_empty()),
        Some(_) => return Err("`explanation` must be a string.".into()),
    };
    let Some(items) = input.get("steps").and_then(Value::as_array) else {
        return Err("`steps` must be an array of {step, status}.".into());
    };
    let mut steps = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let n = index + 1;
        let step = match item.get("step").and_then(Value::as_str).map(str::trim) {
            Some(step) if !step.is_empty() => step.to_string(),
            _ => return Err(format!("Step {n} needs a non-empty `step` text.")),
        };
        let status = match item.get("status").and_then(Value::as_str) {
            Some("pending") => PlanStepStatus::Pending,
            Some("in_progress") => PlanStepStatus::InProgress,
            Some("completed") => PlanStepStatus::Completed,
            other => {
                return Err(format!(
                    "Step {n} has status {}; it must be \"pending\", \"in_progress\" or \"completed\".",
                    other.map_or("missing".to_string(), |s| format!("{s:?}"))
                ));
            }
        };
        steps.push(PlanStep { step, status });
    }
    let in_progress = steps
        .iter()
        .filter(|s| s.status == PlanStepStatus::InProgress)
        .count();
    if in_progress > 1 {
        return Err(format!(
            "{in_progress} steps are in_progress; at most one may be. Mark the others pending or completed and call update_plan again."
        ));
    }
    Ok(Plan { explanation, steps })
}

/// What the model reads back after a plan was stored.
pub fn answer(plan: &Plan) -> String {
    let done = plan
        .steps
        .iter()
        .filter(|s| s.status == PlanStepStatus::Completed)
        .count();
    format!(
        "Plan updated: {done} of {} steps completed.",
        plan.steps.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn reads_a_plan() {
        let input = json!({"explanation": "first look", "steps": [
            {"step": "Read the code", "status": "completed"},
            {"step": "Fix it", "status": "in_progress"},
            {"step": "Test", "status": "pending"}
        ]});
        let plan = parse(&input).unwrap();
        assert_eq!(
            plan,
            Plan {
                explanation: Some("first look".into()),
                steps: vec![
                    PlanStep {
                        step: "Read the code".into(),
                        status: PlanStepStatus::Completed
                    },
                    PlanStep {
                        step: "Fix it".into(),
                        status: PlanStepStatus::InProgress
                    },
                    PlanStep {
                        step: "Test".into(),
                        status: PlanStepStatus::Pending
                    },
                ],
            }
        );
        assert_eq!(answer(&plan), "Plan updated: 1 of 3 steps completed.");
    }

    #[test]
    fn refuses_two_steps_in_progress_and_bad_statuses() {
        let two = json!({"steps": [
            {"step": "a", "status": "in_progress"},
            {"step": "b", "status": "in_progress"}
        ]});
        assert_eq!(
            parse(&two),
            Err("2 steps are in_progress; at most one may be. Mark the others pending or completed and call update_plan again.".into())
        );
        let bad = json!({"steps": [{"step": "a", "status": "done"}]});
        assert_eq!(
            parse(&bad),
            Err("Step 1 has status \"done\"; it must be \"pending\", \"in_progress\" or \"completed\".".into())
        );
        assert_eq!(
            parse(&json!({"steps": [{"status": "pending"}]})),
            Err("Step 1 needs a non-empty `step` text.".into())
        );
        assert_eq!(
            parse(&json!({})),
            Err("`steps` must be an array of {step, status}.".into())
        );
    }
}
