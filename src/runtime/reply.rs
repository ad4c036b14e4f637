//! The assistant message being streamed, and the request's last user turn with the
//! interjections it carries.

use super::accounting::Precounted;
use super::events::SeqCounter;
use crate::context::{StreamingCount, TokenCounter};
use crate::protocol::{Block, TokenUsage};

/// The assistant message being streamed.
pub struct Reply {
    pub thinking: String,
    pub signature: Option<String>,
    pub text: String,
    pub calls: Vec<(String, String, serde_json::Value)>,
    /// Calls the output limit cut before their arguments were complete: `(id, name)`.
    pub cut_calls: Vec<(String, String)>,
    pub usage: Option<TokenUsage>,
    /// The text and the thinking, counted as they arrive so a long answer is not counted at
    /// the end; taken by [`Reply::precounted`].
    pub text_count: Option<StreamingCount>,
    pub thinking_count: Option<StreamingCount>,
    /// The session's event counter, looked up once rather than per delta.
    pub seq: SeqCounter,
}

impl Reply {
    pub fn new(counter: TokenCounter, seq: SeqCounter) -> Self {
        Self {
            seq,
            thinking: String::new(),
            signature: None,
            text: String::new(),
            calls: Vec::new(),
            cut_calls: Vec::new(),
            usage: None,
            text_count: Some(StreamingCount::new(counter)),
            thinking_count: Some(StreamingCount::new(counter)),
        }
    }

    /// Whether the answer asks for tool calls (whole or cut off).
    pub fn has_calls(&self) -> bool {
        !(self.calls.is_empty() && self.cut_calls.is_empty())
    }

    /// The counts of the streamed text and thinking.
    pub async fn precounted(&mut self) -> Precounted {
        let mut precounted = Precounted::default();
        if let Some(count) = self.text_count.take() {
            precounted.text = Some(count.finish().await);
        }
        if let Some(count) = self.thinking_count.take() {
            precounted.thinking = Some(count.finish().await);
        }
        precounted
    }

    /// The message's blocks; tool calls only `with_calls` (from a whole response), since a
    /// call that never completed must not run.
    pub fn into_blocks(self, with_calls: bool) -> Vec<Block> {
        let mut blocks = Vec::new();
        if !self.thinking.is_empty() || self.signature.is_some() {
            blocks.push(Block::Thinking {
                text: self.thinking,
                signature: self.signature,
            });
        }
        if !self.text.is_empty() {
            blocks.push(Block::Text { text: self.text });
        }
        if with_calls {
            blocks.extend(
                self.calls
                    .into_iter()
                    .map(|(id, name, input)| Block::ToolCall { id, name, input }),
            );
            blocks.extend(
                self.cut_calls
                    .into_iter()
                    .map(|(id, name)| Block::ToolCall {
                        id,
                        name,
                        input: serde_json::json!({}),
                    }),
            );
        }
        blocks
    }
}
