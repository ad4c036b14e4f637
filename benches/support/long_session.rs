//! A long stored session for benchmarks: messages written through the library's store, each
//! with its token count, as the daemon stores them, so the daemon reads them as its own. Shared
//! by `benches/long_session.rs` and `examples/long_session_db.rs` (which the VS Code page's
//! benchmark runs), so both measure the same kind of session.

use sidechat::protocol::{Block, Role};
use sidechat::runtime::count_blocks;
use sidechat::store::{NewMessage, NewSession, SessionRow, Store, StoreResult};

use super::words::WORDS;

/// A sentence of about 40 words that differs from message to message.
pub fn sentence(seed: u64) -> String {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..40)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            WORDS[(state >> 33) as usize % WORDS.len()]
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Where the long session lives and what it is stored as.
pub struct LongSession<'a> {
    pub store: &'a Store,
    pub session: SessionRow,
}

impl<'a> LongSession<'a> {
    /// A new, empty session on `account` and `model`, rooted in `workspace_root` if given.
    pub fn create(
        store: &'a Store,
        account: &str,
        model: &str,
        workspace_root: Option<&str>,
    ) -> StoreResult<Self> {
        let session = store.insert_session(&NewSession {
            title: "long".into(),
            account: account.into(),
            model: model.into(),
            system_prompt: None,
            workspace_root: workspace_root.map(str::to_string),
            max_steps: 25,
            cap_usd: None,
            max_seconds: None,
            rollover_secs: None,
        })?;
        Ok(Self { store, session })
    }

    /// Appends message `seq` with its token count for the session's model.
    pub fn append(&self, seq: u64, role: Role, blocks: Vec<Block>) -> StoreResult<()> {
        let mut message = NewMessage::new(&self.session.id, None, role, blocks);
        message.seq = seq;
        message.tokens = Some(count_blocks(&self.session.model, role, &message.blocks));
        self.store.append_message(&message)?;
        Ok(())
    }

    /// Appends messages 1 to `count`, a user's and an assistant's in turns, each one text
    /// block that `text(seq, role)` writes.
    pub fn append_turns(&self, count: u64, text: impl Fn(u64, Role) -> String) -> StoreResult<()> {
        for seq in 1..=count {
            let role = if seq % 2 == 1 {
                Role::User
            } else {
                Role::Assistant
            };
            self.append(
                seq,
                role,
                vec![Block::Text {
                    text: text(seq, role),
                }],
            )?;
        }
        Ok(())
    }
}
