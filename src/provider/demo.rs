//! The built-in offline demo model: what a new user talks to before configuring a provider.
//!
//! Deterministic and local. It streams its reply word by word, says in every reply that it is
//! a demo, and when asked to list, read, search, create or edit a file, to run a command or to
//! plan (`plan a; b; c`) it calls the real tool, so approvals and tool results show exactly as
//! with a real model.

use std::borrow::Cow;
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};

use super::{
    ModelContent, ModelDriver, ModelEvent, ModelRequest, ModelRole, ModelStream, StopReason,
};
use crate::protocol::TokenUsage;

/// Every reply starts with this, so nobody mistakes the demo for a real model.
pub const DEMO_LABEL: &str = "[demo model, offline]";

pub struct DemoDriver {
    word_delay: Duration,
}

impl DemoDriver {
    /// `word_delay` paces the stream so it reads like a model typing.
    pub fn new(word_delay: Duration) -> Self {
        Self { word_delay }
    }
}

/// What the demo decided to do for one request.
#[derive(Debug, Clone, PartialEq)]
struct Plan {
    text: String,
    call: Option<(String, Value)>,
}

fn plan(request: &ModelRequest) -> Plan {
    let Some(last) = request.messages.last() else {
        return say("Hello! Type something.");
    };
    let results: Vec<_> = last
        .content
        .iter()
        .filter_map(|c| match c {
            ModelContent::ToolResult {
                output, is_error, ..
            } => Some((output, *is_error)),
            _ => None,
        })
        .collect();
    let texts: Vec<&str> = last
        .content
        .iter()
        .filter_map(|c| match c {
            ModelContent::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    // Tool results alone (or with words typed while the tool worked) are answered as results.
    // Beside a message of the user's own (the tool was stopped, and the user asked something
    // else), the message is what wants an answer.
    let own_words = texts.iter().any(|t| !is_interjection(t));
    if last.role == ModelRole::User && !results.is_empty() && !own_words {
        return after_tool(&results);
    }
    let texts: Vec<&str> = match results.is_empty() {
        true => texts,
        false => texts.into_iter().filter(|t| !is_interjection(t)).collect(),
    };
    // One text (the usual case, up to the message size limit) is read where it lies.
    let text: Cow<'_, str> = match texts.as_slice() {
        [one] => Cow::Borrowed(one),
        _ => Cow::Owned(texts.join("\n")),
    };
    if let Some(conversation) = summary_source(&text) {
        return say(summary(conversation));
    }
    for line in text.lines().rev() {
        if let Some(plan) = intent(line.trim()) {
            return plan;
        }
    }
    if contains_ignoring_ascii_case(&text, "story") {
        return say(STORY);
    }
    say(format!(
        "You said: \"{}\". I am a scripted stand-in that runs without a network or an API key. \
         Try: \"list files\", \"read README.md\", \"create notes.md with hello\", \
         \"edit notes.md replace hello with goodbye\", \"search TODO\" or \"run ls -la\". \
         To talk to a real model, set ANTHROPIC_API_KEY or OPENAI_API_KEY (see the README).",
        text.trim()
    ))
}

/// Whether a text is an interjection as the projection words it (typed while a run worked).
fn is_interjection(text: &str) -> bool {
    text.starts_with(&crate::context::projection::interjection_text(""))
}

/// The conversation a summariser's (or carry-over note's) request asks to be summarised.
fn summary_source(text: &str) -> Option<&str> {
    let start = text.find("<conversation>\n")? + "<conversation>\n".len();
    let end = text.rfind("\n</conversation>")?;
    text.get(start..end)
}

/// Most words of the user's that a demo summary quotes.
const SUMMARY_WORDS: usize = 40;

/// A short summary, as a real model's would be: what the user asked, in the user's words, cut
/// to [`SUMMARY_WORDS`] words, so the history the model is sent shrinks.
fn summary(conversation: &str) -> String {
    let asked: Vec<&str> = conversation
        .lines()
        .filter_map(|line| line.strip_prefix("User: "))
        .collect();
    // The newest asks first, each cut to eight words, while they fit.
    let mut quotes = Vec::new();
    let mut words = 0;
    for ask in asked.iter().rev() {
        let quoted: Vec<&str> = ask.split_whitespace().take(8).collect();
        if quoted.is_empty() || words + quoted.len() > SUMMARY_WORDS {
            continue;
        }
        words += quoted.len();
        quotes.insert(0, format!("\"{}\"", quoted.join(" ")));
    }
    match quotes.is_empty() {
        true => "Summary: nothing the user asked is left to keep.".into(),
        false => format!("Summary: the user asked {}.", quotes.join(", then ")),
    }
}

/// Most words of the user's first message a demo title takes.
const TITLE_WORDS: usize = 6;

/// A title request's answer: the first words of the user's message it quotes.
fn title(request: &ModelRequest) -> String {
    let prompt = request
        .messages
        .iter()
        .flat_map(|m| &m.content)
        .find_map(|c| match c {
            ModelContent::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .unwrap_or("");
    let asked = crate::context::title::asked_in(prompt).unwrap_or("");
    let words: Vec<&str> = asked.split_whitespace().take(TITLE_WORDS).collect();
    match words.is_empty() {
        true => "Demo chat".into(),
        false => words.join(" "),
    }
}

fn say(text: impl Into<String>) -> Plan {
    Plan {
        text: text.into(),
        call: None,
    }
}

fn call(text: &str, tool: &str, input: Value) -> Option<Plan> {
    Some(Plan {
        text: text.to_string(),
        call: Some((tool.to_string(), input)),
    })
}

/// Recognises a request for a tool in one line of the user's message.
fn intent(line: &str) -> Option<Plan> {
    // Only the first word is lowercased: a line may be a whole message of megabytes.
    let (verb, rest) = match line.split_once(' ') {
        Some((verb, rest)) => (verb.to_lowercase(), rest.trim()),
        None => (line.to_lowercase(), ""),
    };
    let first_word = rest.split_whitespace().next().unwrap_or("");
    match verb.as_str() {
        "list" | "ls" => {
            let path = match first_word {
                "" | "files" | "the" => ".",
                other => other,
            };
            call(
                &format!("Listing {path}."),
                "list_directory",
                json!({"path": path}),
            )
        }
        "read" | "show" | "cat" if !first_word.is_empty() => call(
            &format!("Reading {first_word}."),
            "read_file",
            json!({"path": first_word}),
        ),
        "search" | "grep" | "find" if !rest.is_empty() => call(
            &format!("Searching for {rest}."),
            "search_text",
            json!({"pattern": rest}),
        ),
        "create" | "write" if !first_word.is_empty() => {
            let content = split_keyword(rest, " with ")
                .map(|(_, content)| content.to_string())
                .unwrap_or_else(|| "Written by the sidechat demo model.".to_string());
            call(
                &format!("Creating {first_word}."),
                "write_file",
                json!({"path": first_word, "content": format!("{content}\n")}),
            )
        }
        "edit" if !first_word.is_empty() => {
            let after_path = rest[first_word.len()..].trim();
            let replace = after_path
                .strip_prefix("replace ")
                .or_else(|| after_path.strip_prefix("Replace "))?;
            let (old, new) = split_keyword(replace, " with ")?;
            call(
                &format!("Editing {first_word}."),
                "edit_file",
                json!({"path": first_word, "old_string": old, "new_string": new}),
            )
        }
        // `plan read it; fix it; test it`: a plan of those steps, the first one in progress.
        "plan" if !rest.is_empty() => {
            let steps: Vec<Value> = rest
                .split(';')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .enumerate()
                .map(|(i, step)| {
                    let status = if i == 0 { "in_progress" } else { "pending" };
                    json!({"step": step, "status": status})
                })
                .collect();
            call(
                "Planning.",
                crate::tools::plan::UPDATE_PLAN,
                json!({"steps": steps}),
            )
        }
        "run" if !rest.is_empty() => call(
            &format!("Running `{rest}`."),
            "run_command",
            json!({"command": rest}),
        ),
        _ => None,
    }
}

/// Splits at the first case-insensitive occurrence of `keyword`.
fn split_keyword<'a>(text: &'a str, keyword: &str) -> Option<(&'a str, &'a str)> {
    let at = text.to_lowercase().find(keyword)?;
    Some((&text[..at], &text[at + keyword.len()..]))
}

fn after_tool(results: &[(&String, bool)]) -> Plan {
    let mut text = String::new();
    for (output, is_error) in results {
        let shown: Vec<&str> = output.lines().take(12).collect();
        let more = output.lines().count().saturating_sub(shown.len());
        let lead = if *is_error {
            "The tool reported a problem:"
        } else {
            "Done. The tool answered:"
        };
        text.push_str(&format!("{lead}\n{}", shown.join("\n")));
        if more > 0 {
            text.push_str(&format!("\n… ({more} more lines)"));
        }
        text.push('\n');
    }
    say(text.trim_end())
}

const STORY: &str = "Once upon a time a small daemon lived beside an editor. Every day the editor \
    handed it messages, and every day the daemon wrote them down in a little SQLite book before \
    saying a word, because it had promised never to forget anything it had been told. One evening \
    the power flickered and the daemon was stopped in the middle of a sentence. When it woke up \
    it opened its book, found every message where it had left it, and carried on as if nothing \
    had happened. The editor never knew, and that was the whole point.";

impl ModelDriver for DemoDriver {
    fn stream(&self, request: ModelRequest) -> ModelStream {
        let titling = request.system.as_deref() == Some(crate::context::title::TITLE_SYSTEM);
        let Plan { text: said, call } = match titling {
            true => say(title(&request)),
            false => plan(&request),
        };
        let delay = self.word_delay;
        // A title is the user's own words, not a reply: it needs no label.
        let text = match titling {
            true => said.clone(),
            false => format!("{DEMO_LABEL} {said}"),
        };
        drop(said);
        let input_words: usize = request
            .messages
            .iter()
            .flat_map(|m| &m.content)
            .map(|c| match c {
                ModelContent::Text { text } => text.split_whitespace().count(),
                ModelContent::ToolResult { output, .. } => output.split_whitespace().count(),
                _ => 8,
            })
            .sum();
        let output_words = text.split_whitespace().count();
        let mut events = Vec::new();
        let stop = match call {
            Some((name, input)) => {
                events.push(ModelEvent::ToolCall {
                    id: crate::util::new_id("call"),
                    name,
                    input,
                });
                StopReason::ToolUse
            }
            None => StopReason::EndTurn,
        };
        // The demo has no tokenizer of its own; words stand in for tokens, honestly rough.
        events.push(ModelEvent::Usage(TokenUsage {
            input: input_words as u64,
            output: output_words as u64,
            ..TokenUsage::default()
        }));
        events.push(ModelEvent::Finished(stop));
        futures::stream::iter(Words::new(text).map(ModelEvent::TextDelta).chain(events))
            .then(move |event| async move {
                if matches!(event, ModelEvent::TextDelta(_)) && !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                Ok(event)
            })
            .boxed()
    }
}

/// Splits text into words that keep their following whitespace, so deltas rejoin exactly.
pub fn split_words(text: &str) -> Vec<String> {
    Words::new(text.to_string()).collect()
}

/// The words of a text (each with its following whitespace), one at a time: a reply of
/// megabytes is streamed without a list of all its words held at once.
struct Words {
    text: String,
    at: usize,
}

impl Words {
    fn new(text: String) -> Self {
        Self { text, at: 0 }
    }
}

impl Iterator for Words {
    type Item = String;

    fn next(&mut self) -> Option<String> {
        let rest = self.text.get(self.at..).filter(|r| !r.is_empty())?;
        let mut in_space = false;
        let len = rest
            .char_indices()
            .find_map(|(i, ch)| {
                if ch.is_whitespace() {
                    in_space = true;
                    None
                } else {
                    in_space.then_some(i)
                }
            })
            .unwrap_or(rest.len());
        let word = rest[..len].to_string();
        self.at += len;
        Some(word)
    }
}

/// Whether `text` holds `needle` (lowercase ASCII), ignoring ASCII case, without a lowercased
/// copy of `text`.
fn contains_ignoring_ascii_case(text: &str, needle: &str) -> bool {
    text.as_bytes()
        .windows(needle.len())
        .any(|window| window.eq_ignore_ascii_case(needle.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::ModelMessage;
    use pretty_assertions::assert_eq;

    fn user(text: &str) -> ModelRequest {
        ModelRequest {
            model: "demo".into(),
            system: None,
            messages: vec![ModelMessage {
                role: ModelRole::User,
                content: vec![ModelContent::Text { text: text.into() }],
            }],
            tools: vec![],
            max_output_tokens: 1000,
            delegated: false,
            reasoning: None,
        }
    }

    #[test]
    fn recognises_tool_requests() {
        assert_eq!(
            plan(&user("please\ncreate notes.md with hello world")).call,
            Some((
                "write_file".into(),
                json!({"path": "notes.md", "content": "hello world\n"})
            ))
        );
        assert_eq!(
            plan(&user("edit a.txt replace one with two")).call,
            Some((
                "edit_file".into(),
                json!({"path": "a.txt", "old_string": "one", "new_string": "two"})
            ))
        );
        assert_eq!(
            plan(&user("list files")).call,
            Some(("list_directory".into(), json!({"path": "."})))
        );
        assert_eq!(
            plan(&user("run echo hi")).call,
            Some(("run_command".into(), json!({"command": "echo hi"})))
        );
        assert_eq!(
            plan(&user("plan read it; fix it")).call,
            Some((
                "update_plan".into(),
                json!({"steps": [
                    {"step": "read it", "status": "in_progress"},
                    {"step": "fix it", "status": "pending"}
                ]})
            ))
        );
        assert_eq!(plan(&user("hello there")).call, None);
    }

    #[test]
    fn words_rejoin_exactly() {
        let text = "a  b\nc ";
        assert_eq!(split_words(text).concat(), text);
        assert_eq!(split_words(text), vec!["a  ", "b\n", "c "]);
        assert_eq!(split_words(" \u{a0}é x"), vec![" \u{a0}", "é ", "x"]);
        assert_eq!(split_words(""), Vec::<String>::new());
    }

    fn text(text: &str) -> ModelContent {
        ModelContent::Text { text: text.into() }
    }

    #[test]
    fn after_a_stop_the_newest_message_is_answered() {
        let mut request = user("create a.md with hello");
        request.messages.push(ModelMessage {
            role: ModelRole::Assistant,
            content: vec![ModelContent::ToolCall {
                id: "call_1".into(),
                name: "write_file".into(),
                input: json!({"path": "a.md", "content": "hello\n"}),
            }],
        });
        request.messages.push(ModelMessage {
            role: ModelRole::User,
            content: vec![
                ModelContent::ToolResult {
                    call_id: "call_1".into(),
                    output: "Not run: the run was stopped.".into(),
                    is_error: true,
                },
                text("list files"),
            ],
        });
        assert_eq!(
            plan(&request),
            Plan {
                text: "Listing ..".into(),
                call: Some(("list_directory".into(), json!({"path": "."}))),
            }
        );
        // Words typed while the tool worked go with its result, which is answered.
        let last = request.messages.last_mut().unwrap();
        last.content[1] = text(&crate::context::projection::interjection_text("and more"));
        assert_eq!(
            plan(&request).text,
            "The tool reported a problem:\nNot run: the run was stopped."
        );
    }

    #[test]
    fn a_summary_is_short_and_quotes_the_user() {
        let story = STORY.repeat(3);
        let source = format!(
            "User: tell me a story\nAssistant: {story}\nUser: and now list the files please\n\
             Assistant called list_directory {{\"path\":\".\"}}\nUser: thanks"
        );
        let asked = format!(
            "{}\n\n<conversation>\n{source}\n</conversation>",
            crate::context::compaction::instructions(None, 300)
        );
        let said = plan(&user(&asked));
        assert_eq!(
            said,
            say(
                "Summary: the user asked \"tell me a story\", then \"and now list the files please\", then \"thanks\"."
            )
        );
        assert!(said.text.split_whitespace().count() < source.split_whitespace().count() / 10);
    }

    #[tokio::test]
    async fn every_reply_says_it_is_a_demo() {
        let driver = DemoDriver::new(Duration::ZERO);
        let events: Vec<_> = driver.stream(user("hi")).collect().await;
        let text: String = events
            .iter()
            .filter_map(|e| match e {
                Ok(ModelEvent::TextDelta(t)) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        assert!(text.starts_with(DEMO_LABEL), "{text}");
        assert_eq!(
            events.last(),
            Some(&Ok(ModelEvent::Finished(StopReason::EndTurn)))
        );
    }
}
