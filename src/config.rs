//! Which model accounts exist, read from the environment.
//!
//! With nothing configured the built-in offline demo model is the only account, so a new user
//! can try everything before adding a key.

use std::path::PathBuf;
use std::time::Duration;

use crate::protocol::AccountInfo;

/// Default most model steps in one run.
pub const DEFAULT_MAX_STEPS: u32 = 25;

#[derive(Debug, Clone, PartialEq)]
pub enum AccountKind {
    /// The offline demo model.
    Demo { word_delay: Duration },
    /// A scripted model replaying turns from a file (integrations and tests).
    Replay {
        script: PathBuf,
        request_log: Option<PathBuf>,
    },
}

impl AccountKind {
    pub fn name(&self) -> &'static str {
        match self {
            AccountKind::Demo { .. } => "demo",
            AccountKind::Replay { .. } => "replay",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Account {
    pub name: String,
    pub kind: AccountKind,
    pub default_model: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub accounts: Vec<Account>,
    pub default_account: String,
}

impl Config {
    /// Reads accounts from `SIDECHAT_*` variables; the demo account is always present.
    pub fn from_env() -> Self {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let word_delay = var("SIDECHAT_DEMO_DELAY_MS")
            .and_then(|v| v.parse().ok())
            .map(Duration::from_millis)
            .unwrap_or(Duration::from_millis(30));
        let mut accounts = vec![Account {
            name: "demo".into(),
            kind: AccountKind::Demo { word_delay },
            default_model: "demo".into(),
        }];
        if let Some(script) = var("SIDECHAT_REPLAY_SCRIPT") {
            accounts.push(Account {
                name: "replay".into(),
                kind: AccountKind::Replay {
                    script: PathBuf::from(script),
                    request_log: var("SIDECHAT_REPLAY_LOG").map(PathBuf::from),
                },
                default_model: "replay".into(),
            });
        }
        let default_account = var("SIDECHAT_ACCOUNT")
            .filter(|name| accounts.iter().any(|a| &a.name == name))
            .or_else(|| accounts.iter().rev().map(|a| a.name.clone()).next())
            .unwrap_or_else(|| "demo".into());
        Self {
            accounts,
            default_account,
        }
    }

    pub fn account(&self, name: &str) -> Option<&Account> {
        self.accounts.iter().find(|a| a.name == name)
    }

    pub fn account_infos(&self) -> Vec<AccountInfo> {
        self.accounts
            .iter()
            .map(|a| AccountInfo {
                name: a.name.clone(),
                kind: a.kind.name().to_string(),
                default_model: a.default_model.clone(),
                is_demo: matches!(a.kind, AccountKind::Demo { .. }),
            })
            .collect()
    }
}
