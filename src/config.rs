//! Which model accounts exist, read from the config file and the environment.
//!
//! With nothing configured the built-in offline demo model is the only account, so a new user
//! can try everything before adding a key.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::context::DEFAULT_RESPONSE_RESERVE;
use crate::context::carry_over::parse_rollover;
use crate::cost::PriceOverride;
use crate::protocol::Thresholds;
use crate::protocol::{AccountInfo, ProviderKind, UnavailableAccount};
use crate::provider::HttpSettings;

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
    /// Anthropic's Messages API.
    Anthropic(Remote),
    /// OpenAI's Chat Completions API, or any server that speaks it (Ollama, llama.cpp, vLLM).
    OpenAi { remote: Remote, compat: bool },
}

/// Where a hosted or local model server is and how to authenticate.
///
/// The key itself is not kept here: only the name of the environment variable holding it, read
/// when the driver is built, so configuration can be logged and compared without leaking it.
#[derive(Debug, Clone, PartialEq)]
pub struct Remote {
    pub base_url: String,
    pub key_env: Option<String>,
}

impl Remote {
    /// The API key, read from its environment variable.
    pub fn api_key(&self) -> Option<String> {
        let name = self.key_env.as_deref()?;
        std::env::var(name).ok().filter(|k| !k.is_empty())
    }
}

impl AccountKind {
    pub fn name(&self) -> &'static str {
        self.provider_kind().as_str()
    }

    /// The request field through which this kind's driver sends a reasoning effort.
    pub fn effort_wire(&self) -> crate::provider::effort::Wire {
        use crate::provider::effort::Wire;
        match self {
            AccountKind::Anthropic(_) => Wire::Anthropic,
            AccountKind::OpenAi { .. } => Wire::OpenAi,
            AccountKind::Demo { .. } | AccountKind::Replay { .. } => Wire::None,
        }
    }

    /// The kind as clients see it in `initialize`.
    pub fn provider_kind(&self) -> ProviderKind {
        match self {
            AccountKind::Demo { .. } => ProviderKind::Demo,
            AccountKind::Replay { .. } => ProviderKind::Replay,
            AccountKind::Anthropic(_) => ProviderKind::Anthropic,
            AccountKind::OpenAi { .. } => ProviderKind::OpenAi,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Account {
    pub name: String,
    pub kind: AccountKind,
    pub default_model: String,
    /// The owner's statement of the model's context window; it beats any built-in figure.
    pub context_window: Option<u64>,
    /// The share of the usable window the history may fill; beats `[defaults]`.
    pub history_share: Option<f64>,
    /// The model that summarises older turns, when not the session's own.
    pub summary_model: Option<String>,
    /// The reasoning effort of the account's sessions that set none (`effort = "high"`).
    pub effort: Option<crate::protocol::Effort>,
}

impl Account {
    /// Where the account's key comes from, for an error that says what to fix: the variable,
    /// and for an account of the config file the setting that names it. `None` for the
    /// accounts that need no key (the demo, replay).
    pub fn key_source(&self) -> Option<String> {
        let remote = match &self.kind {
            AccountKind::Anthropic(remote) | AccountKind::OpenAi { remote, .. } => remote,
            _ => return None,
        };
        let from_environment = matches!(
            (self.name.as_str(), remote.key_env.as_deref()),
            ("anthropic", Some("ANTHROPIC_API_KEY")) | ("openai", Some("OPENAI_API_KEY"))
        );
        Some(match &remote.key_env {
            Some(name) if from_environment => format!("the variable {name}"),
            Some(name) => format!(
                "the variable {name} (api_key_env in [accounts.{}] of the config file)",
                self.name
            ),
            None => format!(
                "nowhere: [accounts.{}] of the config file sets no api_key_env",
                self.name
            ),
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub accounts: Vec<Account>,
    pub default_account: String,
    pub http: HttpSettings,
    pub budget: BudgetDefaults,
    /// Prices that beat the built-in table for the same model, USD per million tokens, each
    /// from its `since` date on.
    pub prices: HashMap<String, PriceOverride>,
    /// Accounts the configuration names that cannot be used (left out of `accounts`), and why.
    pub unavailable: Vec<UnavailableAccount>,
    /// MCP servers every session uses (`[mcp_servers.NAME]`), by name.
    pub mcp_servers: Vec<crate::mcp::ServerSpec>,
    /// The user's permission rules (`[permissions]`); a workspace's own are read per call.
    pub permissions: crate::permissions::Rules,
    /// `[sandbox]`: where sandboxed commands may write, and whether they may connect.
    pub sandbox: crate::sandbox::Settings,
    /// Project instructions (`[instructions]`): AGENTS.md files in the system prompt.
    pub instructions: InstructionSettings,
    /// `[tools.web_fetch]`: the hosts `web_fetch` may reach on this machine or a private
    /// network.
    pub web_fetch: crate::tools::web_fetch::Settings,
    /// The user's own folder of sidechat files (`$XDG_CONFIG_HOME/sidechat`): their AGENTS.md
    /// and commands. `None` when neither XDG_CONFIG_HOME nor HOME is set.
    pub user_dir: Option<PathBuf>,
    /// `[mentions]`: how much `@`-mentions may attach to one message.
    pub mentions: MentionSettings,
    /// `[undo]`: how large a git work tree commands are snapshotted in.
    pub undo: UndoSettings,
}

/// `[undo]`: the cap on the work trees whose commands are snapshotted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UndoSettings {
    /// A git work tree with more files than this not yet in the private index is not
    /// snapshotted around commands (adding them all would cost more than the command): its
    /// commands are treated as outside git, their changed files listed but not restorable.
    pub max_snapshot_files: usize,
}

/// The snapshot cap unless configured: a work tree of 50,000 files is added in about the time
/// of a slow command; a larger one is usually a checkout of generated or vendored files.
pub const DEFAULT_MAX_SNAPSHOT_FILES: usize = 50_000;

impl Default for UndoSettings {
    fn default() -> Self {
        Self {
            max_snapshot_files: DEFAULT_MAX_SNAPSHOT_FILES,
        }
    }
}

/// `[mentions]`: the cap on what the `@`-mentions of one message attach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MentionSettings {
    /// The most bytes of file text one message's mentions attach; a mention past it is left
    /// as typed, with a notice.
    pub max_bytes: u64,
}

/// The mentions' cap unless configured: 256 KiB, as much as `read_file` shows at once.
pub const DEFAULT_MENTIONS_MAX_BYTES: u64 = 256 * 1024;

impl Default for MentionSettings {
    fn default() -> Self {
        Self {
            max_bytes: DEFAULT_MENTIONS_MAX_BYTES,
        }
    }
}

/// `[instructions]`: whether AGENTS.md files reach the system prompt, and how much of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InstructionSettings {
    pub enabled: bool,
    /// The most bytes of instruction files sent; beyond it the outermost files are cut.
    pub max_bytes: u64,
}

/// The instruction files' cap unless configured: 32 KiB, a few thousand tokens, so that
/// instructions never crowd out the conversation they guide.
pub const DEFAULT_INSTRUCTIONS_MAX_BYTES: u64 = 32 * 1024;

impl Default for InstructionSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            max_bytes: DEFAULT_INSTRUCTIONS_MAX_BYTES,
        }
    }
}

/// Limits and budget settings for new sessions and every snapshot.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetDefaults {
    pub max_steps: u32,
    pub cap_usd: Option<f64>,
    pub max_seconds: Option<u64>,
    /// Tokens kept free for the model's reply.
    pub response_reserve: u64,
    pub thresholds: Thresholds,
    /// The share of the usable window (window − reserve − system − tools) the history may
    /// fill before older turns are compacted.
    pub history_share: f64,
    /// How long a summary request (or a carry-over note's) may take before the oldest turns
    /// are dropped (or the note is copied) instead.
    pub summary_timeout: Duration,
    /// New sessions start a new context after this many idle seconds; `None`: off. Three
    /// hours unless configured ([`DEFAULT_ROLLOVER_SECS`]).
    pub rollover_secs: Option<u64>,
    /// How long a delegated task's approval waits before it expires (denied as expired);
    /// `None`: never.
    pub delegated_approval_expiry: Option<Duration>,
    /// Whether sessions fold older turns automatically unless a session says otherwise
    /// (`[defaults] auto_compact`, `SIDECHAT_AUTO_COMPACT`; default true).
    pub auto_compact: bool,
    /// Whether the daemon titles an untitled session after its first answer with one short
    /// model request (`[defaults] auto_title`, `SIDECHAT_AUTO_TITLE`; default true).
    pub auto_title: bool,
}

/// How long a conversation may idle before its next turn starts a new context with a
/// carry-over note, unless configured: three hours. A conversation picked up after a break that
/// long is seldom helped by its whole old context, which costs on every request.
pub const DEFAULT_ROLLOVER_SECS: u64 = 3 * 3600;

/// How long a delegated task's approval waits unless configured: an hour.
pub const DEFAULT_DELEGATED_APPROVAL_EXPIRY: Duration = Duration::from_secs(3600);

/// The history's share of the usable window unless configured: half, so the newest turns,
/// the tool results of the current run and the reply keep the other half.
pub const DEFAULT_HISTORY_SHARE: f64 = 0.5;

/// Checks a configured history share: a fraction in (0, 1].
pub fn valid_history_share(share: f64) -> Result<f64, String> {
    match share.is_finite() && share > 0.0 && share <= 1.0 {
        true => Ok(share),
        false => Err(format!(
            "history_share must be a fraction in (0, 1], e.g. 0.5; got {share}"
        )),
    }
}

impl Default for BudgetDefaults {
    fn default() -> Self {
        Self {
            max_steps: DEFAULT_MAX_STEPS,
            cap_usd: None,
            max_seconds: None,
            response_reserve: DEFAULT_RESPONSE_RESERVE,
            thresholds: Thresholds::DEFAULT,
            history_share: DEFAULT_HISTORY_SHARE,
            summary_timeout: Duration::from_secs(20),
            rollover_secs: Some(DEFAULT_ROLLOVER_SECS),
            delegated_approval_expiry: Some(DEFAULT_DELEGATED_APPROVAL_EXPIRY),
            auto_compact: true,
            auto_title: true,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not valid configuration: {message}")]
    Invalid { path: PathBuf, message: String },
    /// `SIDECHAT_CONFIG` names a file that is not there: a typo must not quietly mean "no
    /// configuration" (and the demo model).
    #[error("SIDECHAT_CONFIG names {path}, which does not exist")]
    Missing { path: PathBuf },
    /// `SIDECHAT_ACCOUNT` or `default_account` names an account that does not exist.
    #[error("{setting} names the account {name:?}, which {why}; the accounts are: {known}")]
    UnknownAccount {
        setting: String,
        name: String,
        why: String,
        known: String,
    },
}

/// The config file's shape.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    default_account: Option<String>,
    #[serde(default)]
    accounts: BTreeMap<String, FileAccount>,
    #[serde(default)]
    defaults: FileDefaults,
    /// Price overrides by model name: one price, or a list of prices dated `since`.
    #[serde(default)]
    prices: HashMap<String, PriceOverride>,
    #[serde(default)]
    mcp_servers: BTreeMap<String, FileMcpServer>,
    #[serde(default)]
    permissions: FilePermissions,
    #[serde(default)]
    instructions: FileInstructions,
    #[serde(default)]
    mentions: FileMentions,
    #[serde(default)]
    undo: FileUndo,
    /// `permissions` read as rules, once the file's path is known.
    #[serde(skip)]
    rules: crate::permissions::Rules,
    #[serde(default)]
    sandbox: FileSandbox,
    /// `sandbox` read, once checked.
    #[serde(skip)]
    sandbox_settings: crate::sandbox::Settings,
    #[serde(default)]
    tools: FileTools,
}

/// `[tools]`: settings of the built-in tools.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileTools {
    #[serde(default)]
    web_fetch: FileWebFetch,
}

/// `[tools.web_fetch]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileWebFetch {
    /// Hosts that may resolve to loopback or private addresses (a local docs server, say).
    #[serde(default)]
    allow_hosts: Vec<String>,
}

/// `[sandbox]` (`crate::sandbox`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSandbox {
    enabled: Option<bool>,
    /// Absolute paths, or paths starting with `~/`.
    #[serde(default)]
    writable: Vec<String>,
    #[serde(default)]
    network: bool,
}

impl FileSandbox {
    /// The settings, each writable path absolute (`~/` is the home folder).
    fn settings(&self) -> Result<crate::sandbox::Settings, String> {
        let writable = self
            .writable
            .iter()
            .map(|path| match path.strip_prefix("~/") {
                Some(rest) => var("HOME")
                    .map(|home| PathBuf::from(home).join(rest))
                    .ok_or_else(|| format!("[sandbox] writable names {path:?}, but HOME is not set")),
                None if Path::new(path).is_absolute() => Ok(PathBuf::from(path)),
                None => Err(format!(
                    "[sandbox] writable names {path:?}; write absolute paths or paths starting with ~/"
                )),
            })
            .collect::<Result<_, _>>()?;
        Ok(crate::sandbox::Settings {
            enabled: self.enabled.unwrap_or(true),
            writable,
            network: self.network,
        })
    }
}

/// `[instructions]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileInstructions {
    enabled: Option<bool>,
    max_bytes: Option<u64>,
}

/// `[undo]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileUndo {
    max_snapshot_files: Option<usize>,
}

/// `[mentions]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileMentions {
    max_bytes: Option<u64>,
}

/// `[permissions]`: rules by list (`crate::permissions`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FilePermissions {
    #[serde(default)]
    allow: Vec<String>,
    #[serde(default)]
    ask: Vec<String>,
    #[serde(default)]
    deny: Vec<String>,
}

/// `[mcp_servers.NAME]`: a local server (`command`) or a streamable HTTP one (`url`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileMcpServer {
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    cwd: Option<String>,
    url: Option<String>,
    /// Sent with every request to a `url` server.
    #[serde(default)]
    headers: BTreeMap<String, String>,
    /// The variable holding a token sent as `Authorization: Bearer` to a `url` server.
    bearer_token_env_var: Option<String>,
    enabled: Option<bool>,
    startup_timeout_secs: Option<u64>,
    tool_timeout_secs: Option<u64>,
    enabled_tools: Option<Vec<String>>,
    #[serde(default)]
    disabled_tools: Vec<String>,
    trust: Option<bool>,
}

impl FileMcpServer {
    fn spec(&self, name: &str) -> Result<crate::mcp::ServerSpec, String> {
        let raw = crate::mcp::RawSpec {
            command: self.command.clone(),
            args: self.args.clone(),
            env: self.env.clone(),
            cwd: self.cwd.clone(),
            url: self.url.clone(),
            headers: self.headers.clone(),
            bearer_token_env_var: self.bearer_token_env_var.clone(),
            enabled: self.enabled,
            startup_timeout_secs: self.startup_timeout_secs,
            tool_timeout_secs: self.tool_timeout_secs,
            enabled_tools: self.enabled_tools.clone(),
            disabled_tools: self.disabled_tools.clone(),
            trust: self.trust,
        };
        crate::mcp::ServerSpec::check(name, raw).map_err(|e| format!("[mcp_servers.{name}] {e}"))
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileDefaults {
    max_steps: Option<u32>,
    cap_usd: Option<f64>,
    max_seconds: Option<u64>,
    response_reserve: Option<u64>,
    pressure_high: Option<f64>,
    pressure_critical: Option<f64>,
    history_share: Option<f64>,
    /// `off`, `3h`, `1d`, `7d`…
    rollover: Option<String>,
    /// `off`, `90s`, `30m`, `1h`…
    delegated_approval_expiry: Option<String>,
    auto_compact: Option<bool>,
    auto_title: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileAccount {
    kind: String,
    base_url: Option<String>,
    api_key_env: Option<String>,
    default_model: String,
    context_window: Option<u64>,
    /// Send `max_tokens` instead of `max_completion_tokens` (local OpenAI-compatible servers),
    /// except to OpenAI's reasoning models, which refuse it (`provider::openai::LimitField`).
    compat: Option<bool>,
    /// The share of the usable window the history may fill.
    history_share: Option<f64>,
    /// The model that summarises older turns (default: the session's model).
    summary_model: Option<String>,
    /// The reasoning effort of sessions that set none: `minimal`, `low`, `medium`, `high`.
    effort: Option<String>,
    /// Price overrides for the models this account serves (as the top-level `prices`).
    #[serde(default)]
    prices: HashMap<String, PriceOverride>,
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// A yes/no variable: `1`, `true`, `on` or `yes`; `0`, `false`, `off` or `no`.
fn switch(name: &str) -> Option<bool> {
    let value = var(name)?;
    match value.to_ascii_lowercase().as_str() {
        "1" | "true" | "on" | "yes" => Some(true),
        "0" | "false" | "off" | "no" => Some(false),
        _ => {
            tracing::warn!(name, value, "ignored: not on or off");
            None
        }
    }
}

fn number<T: std::str::FromStr>(name: &str) -> Option<T> {
    let value = var(name)?;
    match value.parse() {
        Ok(n) => Some(n),
        Err(_) => {
            tracing::warn!(name, value, "ignored: not a number");
            None
        }
    }
}

/// `$XDG_DATA_HOME/sidechat` (`~/.local/share/sidechat`): the database and the logs.
pub fn default_data_dir() -> Option<PathBuf> {
    var("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| var("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .map(|dir| dir.join("sidechat"))
}

/// `$XDG_CONFIG_HOME/sidechat/config.toml`, or `~/.config/sidechat/config.toml`.
pub fn default_config_path() -> Option<PathBuf> {
    var("SIDECHAT_CONFIG")
        .map(PathBuf::from)
        .or_else(|| user_dir().map(|dir| dir.join("config.toml")))
}

/// `$XDG_CONFIG_HOME/sidechat`, or `~/.config/sidechat`: the user's own sidechat files.
pub fn user_dir() -> Option<PathBuf> {
    var("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| var("HOME").map(|h| PathBuf::from(h).join(".config")))
        .map(|dir| dir.join("sidechat"))
}

impl Config {
    /// Reads the config file (if any) and the environment; the environment wins.
    ///
    /// An account asked for by `SIDECHAT_ACCOUNT` or `default_account` that does not exist (or
    /// cannot be used) is an error naming the accounts there are, not a quiet fallback.
    pub fn load() -> Result<Self, ConfigError> {
        let path = default_config_path();
        let file = match &path {
            Some(path) if path.exists() => read_file(path)?,
            Some(path) if var("SIDECHAT_CONFIG").is_some() => {
                return Err(ConfigError::Missing { path: path.clone() });
            }
            _ => FileConfig::default(),
        };
        let asked = match (var("SIDECHAT_ACCOUNT"), &file.default_account) {
            (Some(name), _) => Some(("SIDECHAT_ACCOUNT".to_string(), name)),
            (None, Some(name)) => Some((
                format!(
                    "default_account in {}",
                    path.as_deref()
                        .unwrap_or(Path::new("the config file"))
                        .display()
                ),
                name.clone(),
            )),
            (None, None) => None,
        };
        let config = Self::from_parts(file);
        if let Some((setting, name)) = asked
            && config.account(&name).is_none()
        {
            let why = match config.unavailable.iter().find(|u| u.name == name) {
                Some(unavailable) => format!("cannot be used: {}", unavailable.reason),
                None => "does not exist".to_string(),
            };
            let known: Vec<&str> = config.accounts.iter().map(|a| a.name.as_str()).collect();
            return Err(ConfigError::UnknownAccount {
                setting,
                name,
                why,
                known: known.join(", "),
            });
        }
        Ok(config)
    }

    /// The environment alone, ignoring any config file.
    pub fn from_env() -> Self {
        Self::from_parts(FileConfig::default())
    }

    fn from_parts(file: FileConfig) -> Self {
        let word_delay = number("SIDECHAT_DEMO_DELAY_MS")
            .map(Duration::from_millis)
            .unwrap_or(Duration::from_millis(30));
        let mut accounts = vec![Account {
            name: "demo".into(),
            kind: AccountKind::Demo { word_delay },
            default_model: "demo".into(),
            context_window: None,
            history_share: None,
            summary_model: None,
            effort: None,
        }];
        let mut preferred = Vec::new();
        let mut prices = file.prices;
        for account in file.accounts.values() {
            prices.extend(account.prices.clone());
        }
        let budget = budget_defaults(&file.defaults);
        let mut unavailable = Vec::new();
        let mcp_servers = file
            .mcp_servers
            .iter()
            .filter_map(|(name, server)| match server.spec(name) {
                Ok(spec) => Some(spec),
                Err(message) => {
                    tracing::warn!(server = name, message, "ignored MCP server");
                    None
                }
            })
            .collect();
        for (name, account) in file.accounts {
            match file_account(&name, account).and_then(usable) {
                Ok(account) => accounts.push(account),
                Err(reason) => {
                    tracing::warn!(
                        account = name.as_str(),
                        reason = reason.as_str(),
                        "ignored account"
                    );
                    unavailable.push(UnavailableAccount { name, reason });
                }
            }
        }
        for account in env_accounts() {
            unavailable.retain(|u| u.name != account.name);
            preferred.push(account.name.clone());
            accounts.retain(|a| a.name != account.name);
            accounts.push(account);
        }
        if let Some(script) = var("SIDECHAT_REPLAY_SCRIPT") {
            accounts.push(Account {
                name: "replay".into(),
                kind: AccountKind::Replay {
                    script: PathBuf::from(script),
                    request_log: var("SIDECHAT_REPLAY_LOG").map(PathBuf::from),
                },
                default_model: "replay".into(),
                context_window: None,
                history_share: None,
                summary_model: None,
                effort: None,
            });
            preferred.insert(0, "replay".into());
        }
        let exists = |name: &String| accounts.iter().any(|a| &a.name == name);
        let default_account = var("SIDECHAT_ACCOUNT")
            .filter(exists)
            .or(file.default_account.filter(exists))
            .or_else(|| preferred.into_iter().next())
            .or_else(|| {
                accounts
                    .iter()
                    .map(|a| a.name.clone())
                    .find(|n| n != "demo")
            })
            .unwrap_or_else(|| "demo".into());
        if let Some(model) = var("SIDECHAT_MODEL")
            && let Some(account) = accounts.iter_mut().find(|a| a.name == default_account)
        {
            account.default_model = model;
        }
        let mut http = HttpSettings::default();
        if let Some(n) = number("SIDECHAT_MAX_RETRIES") {
            http.retry.max_retries = n;
        }
        if let Some(secs) = number("SIDECHAT_CONNECT_TIMEOUT_SECS") {
            http.connect_timeout = Duration::from_secs(secs);
        }
        if let Some(secs) = number("SIDECHAT_STALL_TIMEOUT_SECS") {
            http.stall_timeout = Duration::from_secs(secs);
        }
        if let Some(ms) = number("SIDECHAT_RETRY_BASE_MS") {
            http.retry.base_delay = Duration::from_millis(ms);
        }
        Self {
            accounts,
            default_account,
            http,
            budget,
            prices,
            unavailable,
            mcp_servers,
            permissions: file.rules,
            sandbox: file.sandbox_settings,
            instructions: InstructionSettings {
                enabled: file.instructions.enabled.unwrap_or(true),
                max_bytes: file
                    .instructions
                    .max_bytes
                    .unwrap_or(DEFAULT_INSTRUCTIONS_MAX_BYTES),
            },
            user_dir: user_dir(),
            mentions: MentionSettings {
                max_bytes: file
                    .mentions
                    .max_bytes
                    .unwrap_or(DEFAULT_MENTIONS_MAX_BYTES),
            },
            undo: UndoSettings {
                max_snapshot_files: file
                    .undo
                    .max_snapshot_files
                    .unwrap_or(DEFAULT_MAX_SNAPSHOT_FILES),
            },
            web_fetch: crate::tools::web_fetch::Settings {
                allow_hosts: file
                    .tools
                    .web_fetch
                    .allow_hosts
                    .iter()
                    .map(|h| h.trim().to_ascii_lowercase())
                    .collect(),
            },
        }
    }

    pub fn account(&self, name: &str) -> Option<&Account> {
        self.accounts.iter().find(|a| a.name == name)
    }

    pub fn account_infos(&self) -> Vec<AccountInfo> {
        self.accounts
            .iter()
            .map(|a| {
                let models = self.known_models(a);
                let effort_levels = models
                    .iter()
                    .filter_map(|model| {
                        let style = crate::context::reasoning_style(model);
                        let levels = crate::provider::effort::levels(style, a.kind.effort_wire());
                        (!levels.is_empty()).then(|| (model.clone(), levels))
                    })
                    .collect();
                AccountInfo {
                    name: a.name.clone(),
                    kind: a.kind.provider_kind(),
                    default_model: a.default_model.clone(),
                    is_demo: matches!(a.kind, AccountKind::Demo { .. }),
                    models,
                    effort: a.effort,
                    effort_levels,
                }
            })
            .collect()
    }

    /// The models an account is known to serve: its default model, the built-in price
    /// table's models of its provider, and the models the configuration prices.
    pub fn known_models(&self, account: &Account) -> Vec<String> {
        let mut models = vec![account.default_model.clone()];
        let provider = account.kind.provider_kind();
        let remote = matches!(provider, ProviderKind::Anthropic | ProviderKind::OpenAi);
        // A local OpenAI-compatible server serves its own models, not OpenAI's.
        let hosted = !matches!(account.kind, AccountKind::OpenAi { compat: true, .. });
        if remote && hosted {
            let table = crate::cost::prices::PriceBook::builtin();
            models.extend(
                table
                    .builtin_entries()
                    .filter(|(_, p, _)| *p == Some(provider.as_str()))
                    .map(|(prefix, _, _)| prefix.to_string()),
            );
        }
        if remote {
            let mut priced: Vec<&String> = self.prices.keys().collect();
            priced.sort();
            models.extend(priced.into_iter().cloned());
        }
        let mut seen = std::collections::HashSet::new();
        models.retain(|m| seen.insert(m.clone()));
        models
    }
}

/// The file's defaults, then the environment's.
fn budget_defaults(file: &FileDefaults) -> BudgetDefaults {
    let mut budget = BudgetDefaults::default();
    budget.max_steps = number("SIDECHAT_MAX_STEPS")
        .or(file.max_steps)
        .unwrap_or(budget.max_steps);
    budget.cap_usd = number("SIDECHAT_CAP_USD").or(file.cap_usd);
    budget.auto_compact = switch("SIDECHAT_AUTO_COMPACT")
        .or(file.auto_compact)
        .unwrap_or(budget.auto_compact);
    budget.auto_title = switch("SIDECHAT_AUTO_TITLE")
        .or(file.auto_title)
        .unwrap_or(budget.auto_title);
    budget.max_seconds = number("SIDECHAT_MAX_SECONDS").or(file.max_seconds);
    budget.response_reserve = number("SIDECHAT_RESPONSE_RESERVE")
        .or(file.response_reserve)
        .unwrap_or(budget.response_reserve);
    if let Some(share) = number("SIDECHAT_HISTORY_SHARE").or(file.history_share) {
        match valid_history_share(share) {
            Ok(share) => budget.history_share = share,
            Err(e) => tracing::warn!(error = %e, "ignored the history share"),
        }
    }
    if let Some(ms) = number("SIDECHAT_SUMMARY_TIMEOUT_MS") {
        budget.summary_timeout = Duration::from_millis(ms);
    }
    if let Some(rollover) = var("SIDECHAT_ROLLOVER").or(file.rollover.clone()) {
        match parse_rollover(&rollover) {
            Ok(secs) => budget.rollover_secs = secs,
            Err(e) => tracing::warn!(error = %e, "ignored the rollover setting"),
        }
    }
    if let Some(expiry) =
        var("SIDECHAT_DELEGATED_APPROVAL_EXPIRY").or(file.delegated_approval_expiry.clone())
    {
        match parse_rollover(&expiry) {
            Ok(secs) => budget.delegated_approval_expiry = secs.map(Duration::from_secs),
            Err(e) => tracing::warn!(error = %e, "ignored the delegated approval expiry"),
        }
    }
    let high = number("SIDECHAT_PRESSURE_HIGH").or(file.pressure_high);
    let critical = number("SIDECHAT_PRESSURE_CRITICAL").or(file.pressure_critical);
    if high.is_some() || critical.is_some() {
        let defaults = Thresholds::DEFAULT;
        match Thresholds::new(
            high.unwrap_or(defaults.high()),
            critical.unwrap_or(defaults.critical()),
        ) {
            Ok(thresholds) => budget.thresholds = thresholds,
            Err(e) => tracing::warn!(error = %e, "ignored pressure thresholds"),
        }
    }
    budget
}

fn read_file(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let mut file: FileConfig = toml::from_str(&text).map_err(|e| ConfigError::Invalid {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    check(&file).map_err(|message| ConfigError::Invalid {
        path: path.to_path_buf(),
        message,
    })?;
    // A rule that cannot be read stops the daemon: a deny rule quietly not in force is unsafe.
    let permissions = &file.permissions;
    file.rules = crate::permissions::Rules::parse(
        &permissions.allow,
        &permissions.ask,
        &permissions.deny,
        &crate::permissions::Origin::User(path.to_path_buf()),
    )
    .map_err(|e| ConfigError::Invalid {
        path: path.to_path_buf(),
        message: format!("[permissions] {e}"),
    })?;
    file.sandbox_settings = file
        .sandbox
        .settings()
        .map_err(|message| ConfigError::Invalid {
            path: path.to_path_buf(),
            message,
        })?;
    Ok(file)
}

/// Values the file's shape lets through but that mean nothing.
fn check(file: &FileConfig) -> Result<(), String> {
    if let Some(share) = file.defaults.history_share {
        valid_history_share(share).map_err(|e| format!("[defaults] {e}"))?;
    }
    if let Some(rollover) = &file.defaults.rollover {
        parse_rollover(rollover).map_err(|e| format!("[defaults] {e}"))?;
    }
    for (name, account) in &file.accounts {
        if let Some(share) = account.history_share {
            valid_history_share(share).map_err(|e| format!("[accounts.{name}] {e}"))?;
        }
    }
    for (name, server) in &file.mcp_servers {
        server.spec(name)?;
    }
    Ok(())
}

fn file_account(name: &str, account: FileAccount) -> Result<Account, String> {
    let remote = |default_url: &str| Remote {
        base_url: account
            .base_url
            .clone()
            .unwrap_or_else(|| default_url.to_string()),
        key_env: account.api_key_env.clone(),
    };
    let kind = match account.kind.as_str() {
        "anthropic" => AccountKind::Anthropic(remote(crate::provider::anthropic::DEFAULT_BASE_URL)),
        "openai" => AccountKind::OpenAi {
            remote: remote(crate::provider::openai::DEFAULT_BASE_URL),
            compat: account.compat.unwrap_or(account.base_url.is_some()),
        },
        other => return Err(format!("unknown kind {other:?}; use anthropic or openai")),
    };
    let effort = match account.effort.as_deref() {
        None => None,
        Some(name) => Some(crate::protocol::Effort::parse(name).ok_or_else(|| {
            format!("effort {name:?} is not a level; use minimal, low, medium or high")
        })?),
    };
    Ok(Account {
        name: name.to_string(),
        kind,
        default_model: account.default_model,
        context_window: account.context_window,
        history_share: account.history_share,
        summary_model: account.summary_model,
        effort,
    })
}

/// An account whose key variable is named but not set cannot be used: say so up front rather
/// than at the first request.
fn usable(account: Account) -> Result<Account, String> {
    let remote = match &account.kind {
        AccountKind::Anthropic(remote) | AccountKind::OpenAi { remote, .. } => remote,
        _ => return Ok(account),
    };
    match (&remote.key_env, remote.api_key()) {
        (Some(name), None) => Err(format!("its key variable {name} is not set")),
        _ => Ok(account),
    }
}

/// Accounts the standard provider variables describe.
fn env_accounts() -> Vec<Account> {
    let mut accounts = Vec::new();
    if var("ANTHROPIC_API_KEY").is_some() || var("ANTHROPIC_BASE_URL").is_some() {
        accounts.push(Account {
            name: "anthropic".into(),
            kind: AccountKind::Anthropic(Remote {
                base_url: var("ANTHROPIC_BASE_URL")
                    .unwrap_or_else(|| crate::provider::anthropic::DEFAULT_BASE_URL.into()),
                key_env: Some("ANTHROPIC_API_KEY".into()),
            }),
            default_model: var("SIDECHAT_ANTHROPIC_MODEL")
                .unwrap_or_else(|| "claude-sonnet-4-5".into()),
            context_window: number("SIDECHAT_CONTEXT_WINDOW"),
            history_share: None,
            summary_model: var("SIDECHAT_SUMMARY_MODEL"),
            effort: None,
        });
    }
    if var("OPENAI_API_KEY").is_some() || var("OPENAI_BASE_URL").is_some() {
        let base_url = var("OPENAI_BASE_URL");
        let compat = base_url
            .as_deref()
            .is_some_and(|u| !u.contains("api.openai.com"));
        accounts.push(Account {
            name: "openai".into(),
            kind: AccountKind::OpenAi {
                remote: Remote {
                    base_url: base_url
                        .unwrap_or_else(|| crate::provider::openai::DEFAULT_BASE_URL.into()),
                    key_env: Some("OPENAI_API_KEY".into()),
                },
                compat,
            },
            default_model: var("SIDECHAT_OPENAI_MODEL").unwrap_or_else(|| "gpt-5-mini".into()),
            context_window: number("SIDECHAT_CONTEXT_WINDOW"),
            history_share: None,
            summary_model: var("SIDECHAT_SUMMARY_MODEL"),
            effort: None,
        });
    }
    accounts
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn file_accounts_are_read_and_the_demo_stays() {
        let file: FileConfig = toml::from_str(
            r#"
            default_account = "local"
            [accounts.local]
            kind = "openai"
            base_url = "http://localhost:8080/v1"
            default_model = "qwen2.5-coder"
            context_window = 32768
            [accounts.work]
            kind = "anthropic"
            api_key_env = "WORK_KEY"
            default_model = "claude-opus-4-1"
            [accounts.broken]
            kind = "gemini"
            default_model = "x"
            "#,
        )
        .unwrap();
        let config = Config::from_parts(file);
        let names: Vec<_> = config.accounts.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["demo", "local"]);
        assert_eq!(config.default_account, "local");
        // Accounts that cannot be used are named with what to fix.
        assert_eq!(
            config.unavailable,
            [
                UnavailableAccount {
                    name: "broken".into(),
                    reason: "unknown kind \"gemini\"; use anthropic or openai".into()
                },
                UnavailableAccount {
                    name: "work".into(),
                    reason: "its key variable WORK_KEY is not set".into()
                },
            ]
        );
        // A local server's models are its own; the demo serves one.
        assert_eq!(config.account_infos()[1].models, ["qwen2.5-coder"]);
        assert_eq!(config.account_infos()[0].models, ["demo"]);
        assert_eq!(
            config.accounts[1].kind,
            AccountKind::OpenAi {
                remote: Remote {
                    base_url: "http://localhost:8080/v1".into(),
                    key_env: None
                },
                compat: true
            }
        );
        assert_eq!(config.accounts[1].context_window, Some(32768));
    }

    #[test]
    fn the_snapshot_cap_is_read_and_defaults_to_fifty_thousand() {
        let set: FileConfig = toml::from_str("[undo]\nmax_snapshot_files = 3\n").unwrap();
        let unset: FileConfig = toml::from_str("").unwrap();
        assert_eq!(
            (Config::from_parts(set).undo, Config::from_parts(unset).undo),
            (
                UndoSettings {
                    max_snapshot_files: 3
                },
                UndoSettings {
                    max_snapshot_files: 50_000
                }
            )
        );
        let typo: Result<FileConfig, _> = toml::from_str("[undo]\nmax_files = 3\n");
        assert!(typo.is_err());
    }

    #[test]
    fn unknown_fields_are_an_error_not_a_silent_default() {
        let parsed: Result<FileConfig, _> = toml::from_str(
            "[accounts.a]\nkind = \"openai\"\ndefault_model = \"m\"\nbase_ulr = \"typo\"\n",
        );
        assert!(parsed.is_err());
    }

    #[test]
    fn mcp_servers_are_read_and_checked() {
        let file: FileConfig = toml::from_str(
            "[mcp_servers.fs]\ncommand = \"npx\"\nargs = [\"-y\", \"server\"]\ntrust = true\n\
             [mcp_servers.docs]\nurl = \"http://127.0.0.1:1/mcp\"\nenabled = false\n",
        )
        .unwrap();
        assert_eq!(check(&file), Ok(()));
        let config = Config::from_parts(file);
        let names: Vec<(&str, bool, bool)> = config
            .mcp_servers
            .iter()
            .map(|s| (s.name.as_str(), s.enabled, s.trust))
            .collect();
        assert_eq!(names, vec![("docs", false, false), ("fs", true, true)]);
        let both: FileConfig =
            toml::from_str("[mcp_servers.x]\ncommand = \"a\"\nurl = \"http://h\"\n").unwrap();
        assert_eq!(
            check(&both),
            Err("[mcp_servers.x] MCP server \"x\" has both `command` and `url`: give one".into())
        );
        let typo: Result<FileConfig, _> =
            toml::from_str("[mcp_servers.x]\ncommand = \"a\"\nstartup_timeout = 5\n");
        assert!(typo.is_err());
    }
}
