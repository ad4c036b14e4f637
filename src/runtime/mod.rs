//! The only stateful orchestrator: sessions, runs, approvals.
//!
//! Every state change is committed to the store before a client hears of it. One run per
//! session at a time; runs of different sessions proceed concurrently.

mod accounting;
mod carry_over;
mod chat;
mod command_claim;
mod command_scan;
mod command_snapshots;
mod commands;
mod compaction;
mod custom_commands;
mod delegation;
mod effort;
mod error;
mod events;
mod images;
mod instructions;
mod lease;
mod locked;
mod mcp_tools;
mod periodic;
mod permission_rules;
mod projection;
mod promotion;
mod recovery;
mod registry;
mod reply;
mod rewind;
mod run;
mod run_end;
mod sessions;
mod titles;
mod tool_phase;
mod workspace_files;
mod workspace_state;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub use crate::protocol::MAX_MESSAGE_BYTES;
pub use accounting::count_blocks;
pub use commands::{CommandStamp, is_command};
pub use error::{RuntimeError, RuntimeResult};
pub use events::{EventSink, NoClient, RoomFuture};

use crate::config::{AccountKind, Config};
use crate::protocol::*;
use crate::provider::ModelDriver;
use crate::provider::anthropic::AnthropicDriver;
use crate::provider::demo::DemoDriver;
use crate::provider::openai::OpenAiDriver;
use crate::provider::replay::ReplayDriver;
use crate::store::Store;
use events::Events;
use registry::Registry;

/// A cheap handle to the shared runtime.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    config: Config,
    events: Events,
    accounting: accounting::Accounting,
    runs: Registry,
    drivers: Mutex<HashMap<String, Arc<dyn ModelDriver>>>,
    /// The sessions' MCP servers.
    mcp: Arc<crate::mcp::Manager>,
    /// Input queued for this daemon's runs that its clients were told of.
    announced: lease::Announced,
    /// Ends of runs the database could not take yet, recorded by the heartbeat.
    deferred_ends: Mutex<Vec<run_end::DeferredEnd>>,
    /// Notices that the database is locked, published but not stored yet, stored by the
    /// heartbeat once the database takes them.
    deferred_notices: Mutex<Vec<crate::store::NewMessage>>,
    /// Sessions told that the database is locked whose notice is not stored yet: told once.
    locked_notices: Mutex<std::collections::HashSet<String>>,
    /// Usage lines the database refused, by session, stored by the heartbeat once it takes
    /// them (before the ends it records, so a run's cost is whole when its end is read).
    deferred_usage: Mutex<Vec<(String, crate::store::UsageRow)>>,
    /// Notices about a workspace's permission rules each session was given, by session: each
    /// is given once per daemon, not at every tool call.
    permission_notices: Mutex<std::collections::HashSet<(String, String)>>,
    /// Held while an approval's answer is stored and announced (`approval/respond`), and while
    /// a run reads its answer: a run never sees an answer its clients have not been told of,
    /// so `approvalResolved` always comes before the call it allowed starts.
    answering: Mutex<()>,
    /// The instruction files (AGENTS.md) as last read.
    instruction_files: instructions::InstructionFiles,
    /// Snapshots of workspaces around commands, so a rewind puts back (or names) what they
    /// changed.
    command_snapshots: command_snapshots::CommandSnapshots,
    /// The workspaces' files as last listed, for `workspace/files`.
    workspace_files: Arc<crate::mentions::FileIndex>,
    /// Sessions told that their model takes no reasoning effort, with the model: told once.
    effort_notices: Mutex<std::collections::HashSet<(String, String)>>,
}

impl Runtime {
    /// Opens the runtime over `store`, first repairing what a crashed daemon left behind.
    pub fn new(store: Store, config: Config, sink: Arc<dyn EventSink>) -> RuntimeResult<Self> {
        let prices = crate::cost::PriceBook::with_overrides(&config.prices).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "ignored the configured price overrides");
            crate::cost::PriceBook::builtin()
        });
        let configured_mcp = config.mcp_servers.clone();
        let snapshots = command_snapshots::CommandSnapshots::new(
            store.command_snapshot_dir(),
            config.undo.max_snapshot_files,
        );
        let inner = Arc::new_cyclic(|weak| Inner {
            mcp: Arc::new(crate::mcp::Manager::new(
                store.clone(),
                configured_mcp,
                Arc::new(mcp_tools::Notices(weak.clone())),
            )),
            store,
            config,
            events: Events::new(Arc::new(delegation::Forward::new(sink, weak.clone()))),
            accounting: accounting::Accounting::new(prices),
            runs: Registry::default(),
            drivers: Mutex::default(),
            announced: Mutex::default(),
            deferred_ends: Mutex::default(),
            deferred_notices: Mutex::default(),
            locked_notices: Mutex::default(),
            deferred_usage: Mutex::default(),
            permission_notices: Mutex::default(),
            answering: Mutex::default(),
            instruction_files: instructions::InstructionFiles::default(),
            command_snapshots: snapshots,
            workspace_files: Arc::default(),
            effort_notices: Mutex::default(),
        });
        recovery::recover(&inner)?;
        lease::start_heartbeat(&inner);
        delegation::start_sweep(&inner);
        Ok(Self { inner })
    }

    /// Stops every live run and waits until each has recorded how it ended. A run waiting for
    /// an approval stays suspended, so the next daemon can still ask.
    pub async fn shutdown(&self) {
        for mut done in self.inner.runs.suspend_all() {
            let _ = done.wait_for(|d| *d).await;
        }
        self.inner.mcp.shutdown();
        // The spend totals are a cache; keeping them spares the next daemon re-pricing.
        self.inner.keep_spends();
    }
}

/// What `initialize` answers: it needs only the configuration, so the handshake never waits
/// for the database.
pub fn describe(config: &Config) -> InitializeResult {
    let mut methods: Vec<String> = METHODS
        .iter()
        .filter(|m| m.direction == Direction::ClientToServer && m.kind != MethodKind::Notification)
        .map(|m| m.name.to_string())
        .collect();
    methods.sort();
    InitializeResult {
        server_info: ServerInfo {
            name: "sidechat".into(),
            version: env!("CARGO_PKG_VERSION").into(),
        },
        protocol_version: PROTOCOL_VERSION,
        capabilities: ServerCapabilities {
            methods,
            events: Event::KINDS.iter().map(|kind| kind.to_string()).collect(),
        },
        accounts: config.account_infos(),
        default_account: config.default_account.clone(),
        unavailable_accounts: config.unavailable.clone(),
        sandbox: {
            let status = crate::sandbox::status(&config.sandbox, crate::sandbox::support());
            SandboxInfo {
                active: status.active,
                detail: status.detail,
            }
        },
    }
}

impl Inner {
    /// Whether `run_command` runs sandboxed by default (`crate::sandbox`).
    pub(super) fn sandbox_active(&self) -> bool {
        crate::sandbox::status(&self.config.sandbox, crate::sandbox::support()).active
    }

    /// Whether this `run_command` call runs in the sandbox: the sandbox is active and the
    /// model did not ask to run it outside.
    pub(super) fn runs_sandboxed(&self, tool: &str, input: &serde_json::Value) -> bool {
        tool == crate::tools::RUN_COMMAND
            && self.sandbox_active()
            && !crate::tools::wants_outside_sandbox(input)
    }

    /// A pending approval saying whether its command will run sandboxed.
    pub(super) fn with_sandbox(&self, approval: PendingApproval) -> PendingApproval {
        let sandboxed = (approval.tool == crate::tools::RUN_COMMAND)
            .then(|| self.runs_sandboxed(&approval.tool, &approval.input));
        PendingApproval {
            sandboxed,
            ..approval
        }
    }

    /// Whether `notice` about the workspace's permission rules is new to the session (and
    /// marks it given).
    fn first_permission_notice(&self, session_id: &str, notice: &str) -> bool {
        crate::util::lock(&self.permission_notices)
            .insert((session_id.to_string(), notice.to_string()))
    }

    /// The driver for an account, built on first use.
    fn driver(&self, account: &str) -> RuntimeResult<Arc<dyn ModelDriver>> {
        let mut drivers = crate::util::lock(&self.drivers);
        if let Some(driver) = drivers.get(account) {
            return Ok(driver.clone());
        }
        let configured = self.config.account(account).ok_or_else(|| {
            RuntimeError::Provider(format!(
                "the session uses account {account:?}, which is not configured; configure it or switch the session to one of: {}",
                self.config.accounts.iter().map(|a| a.name.as_str()).collect::<Vec<_>>().join(", ")
            ))
        })?;
        let driver: Arc<dyn ModelDriver> = match &configured.kind {
            AccountKind::Demo { word_delay } => Arc::new(DemoDriver::new(*word_delay)),
            AccountKind::Replay {
                script,
                request_log,
            } => Arc::new(
                ReplayDriver::from_file(script, request_log.clone())
                    .map_err(|e| RuntimeError::Provider(e.to_string()))?,
            ),
            AccountKind::Anthropic(remote) => Arc::new(
                AnthropicDriver::new(&remote.base_url, remote.api_key(), self.config.http.clone())
                    .map_err(|e| RuntimeError::Provider(e.to_string()))?,
            ),
            AccountKind::OpenAi { remote, compat } => Arc::new(
                OpenAiDriver::new(&remote.base_url, remote.api_key(), self.config.http.clone())
                    .map_err(|e| RuntimeError::Provider(e.to_string()))?
                    .with_compat(*compat),
            ),
        };
        drivers.insert(account.to_string(), driver.clone());
        Ok(driver)
    }
}
