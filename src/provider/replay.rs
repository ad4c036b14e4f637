//! A scripted model that replays turns from a JSON file.
//!
//! It lets editor integrations and end-to-end tests drive real runs (tool calls, approvals,
//! long streams, failures) without a network. The turn answered is chosen by how many assistant
//! messages the request already holds, so a restarted daemon continues the script where the
//! transcript stands.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use futures::StreamExt;
use serde::Deserialize;
use serde_json::Value;

use super::{
    ModelDriver, ModelEvent, ModelRequest, ModelRole, ModelStream, ProviderError, StopReason,
};
use crate::protocol::TokenUsage;

/// One scripted model turn.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ReplayTurn {
    pub thinking: Option<String>,
    pub text: Option<String>,
    pub tool_calls: Vec<ReplayToolCall>,
    /// Pause before each streamed delta.
    pub delay_ms: u64,
    /// Fail after streaming the text, as a dropped connection would.
    pub error: Option<String>,
    /// End the turn as the model declining to answer (a refusal), after the text.
    pub refusal: bool,
    /// Refuse the turn's first requests, this many, before anything is answered, as an
    /// overloaded provider does (HTTP 529): the turn is left unanswered until asked again.
    pub failures: u32,
    pub usage: Option<TokenUsage>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ReplayToolCall {
    pub name: String,
    pub input: Value,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplayScript {
    pub turns: Vec<ReplayTurn>,
    /// Answer used once the turns run out (default: a short closing text).
    #[serde(default)]
    pub fallback: Option<ReplayTurn>,
    /// The script a delegated task (a child session, told so by its system prompt) follows,
    /// counted in its own context. Without it, a child's requests follow `turns` as well.
    #[serde(default)]
    pub delegated: Option<Box<ReplayScript>>,
    /// The answer to the daemon's title request after a session's first answer. Without it,
    /// a title request fails (and the session keeps its title), so scripts written for turns
    /// alone answer exactly their turns.
    #[serde(default)]
    pub title: Option<ReplayTurn>,
}

impl ReplayScript {
    /// The script that answers `request`: the delegated one for a child session's.
    fn for_request(&self, request: &ModelRequest) -> &ReplayScript {
        match &self.delegated {
            Some(delegated) if request.delegated => delegated,
            _ => self,
        }
    }
}

pub struct ReplayDriver {
    script: ReplayScript,
    /// Every request received is appended here as one JSON line, when set.
    request_log: Option<PathBuf>,
    /// How many requests each turn (by index) has refused of its `failures`.
    refused: std::sync::Mutex<std::collections::HashMap<usize, u32>>,
}

impl ReplayDriver {
    pub fn from_file(
        path: &std::path::Path,
        request_log: Option<PathBuf>,
    ) -> Result<Self, ProviderError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ProviderError::Config(format!(
                "cannot read the replay script {}: {e}",
                path.display()
            ))
        })?;
        let script = serde_json::from_str(&text).map_err(|e| {
            ProviderError::Config(format!(
                "the replay script {} is invalid: {e}",
                path.display()
            ))
        })?;
        Ok(Self {
            script,
            request_log,
            refused: Default::default(),
        })
    }

    fn log(&self, request: &ModelRequest) {
        let Some(path) = &self.request_log else {
            return;
        };
        let line = serde_json::to_string(request).unwrap_or_default();
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| writeln!(f, "{line}"));
        if let Err(e) = written {
            tracing::warn!(error = %e, "cannot append to the replay request log");
        }
    }
}

impl ModelDriver for ReplayDriver {
    fn stream(&self, request: ModelRequest) -> ModelStream {
        self.log(&request);
        let index = request
            .messages
            .iter()
            .filter(|m| m.role == ModelRole::Assistant)
            .count();
        let script = self.script.for_request(&request);
        let titling = request.system.as_deref() == Some(crate::context::title::TITLE_SYSTEM);
        let turn = match titling {
            true => self.script.title.clone().unwrap_or_else(|| ReplayTurn {
                error: Some("the replay script has no title".into()),
                ..ReplayTurn::default()
            }),
            false => script
                .turns
                .get(index)
                .or(script.fallback.as_ref())
                .cloned()
                .unwrap_or_else(|| ReplayTurn {
                    text: Some("(the replay script has no more turns)".into()),
                    ..ReplayTurn::default()
                }),
        };
        if turn.failures > 0 && !titling {
            let mut refused = crate::util::lock(&self.refused);
            let count = refused.entry(index).or_insert(0);
            if *count < turn.failures {
                *count += 1;
                let overloaded = ProviderError::Http {
                    status: 529,
                    message: "overloaded (replayed)".into(),
                };
                return futures::stream::iter([Err(overloaded)]).boxed();
            }
        }
        let delay = Duration::from_millis(turn.delay_ms);
        let mut events: Vec<Result<ModelEvent, ProviderError>> = Vec::new();
        if let Some(thinking) = &turn.thinking {
            events.extend(
                super::demo::split_words(thinking)
                    .into_iter()
                    .map(|w| Ok(ModelEvent::ThinkingDelta(w))),
            );
            events.push(Ok(ModelEvent::ThinkingSignature(format!(
                "replay-signature-{index}"
            ))));
        }
        if let Some(text) = &turn.text {
            events.extend(
                super::demo::split_words(text)
                    .into_iter()
                    .map(|w| Ok(ModelEvent::TextDelta(w))),
            );
        }
        if let Some(error) = &turn.error {
            events.push(Err(ProviderError::Stream(error.clone())));
        } else {
            for (position, call) in turn.tool_calls.iter().enumerate() {
                events.push(Ok(ModelEvent::ToolCall {
                    id: format!("call_{index}_{position}_{}", uuid::Uuid::now_v7().simple()),
                    name: call.name.clone(),
                    input: call.input.clone(),
                }));
            }
            if let Some(usage) = turn.usage {
                events.push(Ok(ModelEvent::Usage(usage)));
            }
            let stop = if turn.refusal {
                StopReason::Refusal
            } else if turn.tool_calls.is_empty() {
                StopReason::EndTurn
            } else {
                StopReason::ToolUse
            };
            events.push(Ok(ModelEvent::Finished(stop)));
        }
        futures::stream::iter(events)
            .then(move |event| async move {
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                event
            })
            .boxed()
    }
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;
    use crate::provider::{ModelContent, ModelMessage};

    fn driver(script: serde_json::Value) -> ReplayDriver {
        ReplayDriver {
            script: serde_json::from_value(script).unwrap(),
            request_log: None,
            refused: Default::default(),
        }
    }

    fn script() -> ReplayDriver {
        driver(serde_json::json!({
            "turns": [{"text": "parent first"}, {"text": "parent second"}],
            "delegated": {"turns": [{"text": "child first"}, {"text": "child second"}]},
        }))
    }

    fn request(delegated: bool, assistant_messages: usize) -> ModelRequest {
        let messages = (0..assistant_messages)
            .map(|_| ModelMessage {
                role: ModelRole::Assistant,
                content: vec![ModelContent::Text {
                    text: "earlier".into(),
                }],
            })
            .collect();
        ModelRequest {
            model: "replay".into(),
            system: Some("You are helpful.".into()),
            messages,
            tools: Vec::new(),
            max_output_tokens: 100,
            delegated,
            reasoning: None,
        }
    }

    async fn text_of(driver: &ReplayDriver, request: ModelRequest) -> String {
        answer_of(driver, request).await.unwrap()
    }

    /// The answer's text, or the error that ended it.
    async fn answer_of(driver: &ReplayDriver, request: ModelRequest) -> Result<String, String> {
        let mut text = String::new();
        let mut stream = driver.stream(request);
        while let Some(event) = stream.next().await {
            if let ModelEvent::TextDelta(delta) = event.map_err(|e| e.to_string())? {
                text.push_str(&delta);
            }
        }
        Ok(text)
    }

    #[tokio::test]
    async fn a_turn_with_failures_refuses_that_many_requests_before_it_answers() {
        let driver = driver(serde_json::json!({"turns": [{"text": "at last", "failures": 2}]}));
        let mut answers = Vec::new();
        for _ in 0..3 {
            answers.push(answer_of(&driver, request(false, 0)).await);
        }
        let overloaded = "the provider answered HTTP 529: overloaded (replayed)".to_string();
        assert_eq!(
            answers,
            [
                Err(overloaded.clone()),
                Err(overloaded),
                Ok("at last".into())
            ]
        );
    }

    #[tokio::test]
    async fn a_child_session_follows_the_delegated_script_counted_in_its_own_context() {
        let driver = script();
        let answers = vec![
            text_of(&driver, request(false, 0)).await,
            text_of(&driver, request(true, 0)).await,
            text_of(&driver, request(true, 1)).await,
            text_of(&driver, request(false, 1)).await,
        ];
        assert_eq!(
            answers,
            [
                "parent first",
                "child first",
                "child second",
                "parent second"
            ]
        );
    }
}
