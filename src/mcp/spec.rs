//! One MCP server's configuration, as read from the config file (`[mcp_servers.NAME]`) or a
//! session's `mcpServers`, checked once so the rest of `mcp` can trust it.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How long a server may take to start and list its tools unless configured.
pub const DEFAULT_STARTUP_TIMEOUT_SECS: u64 = 10;
/// How long one tool call may take unless configured.
pub const DEFAULT_TOOL_TIMEOUT_SECS: u64 = 60;

/// How sidechat reaches a server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum Transport {
    /// A child process speaking MCP over its stdin and stdout.
    Stdio {
        command: String,
        args: Vec<String>,
        /// Variables set for the child on top of the daemon's environment.
        env: BTreeMap<String, String>,
        cwd: Option<String>,
    },
    /// A server speaking MCP's streamable HTTP transport.
    Http {
        url: String,
        /// Sent with every request (an API key, say). Values may be secrets, like `env`'s.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        headers: BTreeMap<String, String>,
        /// A variable of the daemon's environment whose value is sent with every request as
        /// `Authorization: Bearer …`, so the token itself is in no configuration.
        #[serde(
            default,
            rename = "bearerTokenEnvVar",
            skip_serializing_if = "Option::is_none"
        )]
        bearer_token_env_var: Option<String>,
    },
}

/// Headers the streamable HTTP transport sets itself; a configured one would break it.
const TRANSPORT_HEADERS: [&str; 5] = [
    "accept",
    "content-type",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
];

/// A checked server configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerSpec {
    /// The name tools are prefixed with (`mcp__NAME__tool`).
    pub name: String,
    pub transport: Transport,
    pub enabled: bool,
    pub startup_timeout_secs: u64,
    pub tool_timeout_secs: u64,
    /// When set, only these tools are offered.
    pub enabled_tools: Option<Vec<String>>,
    /// Tools never offered.
    pub disabled_tools: Vec<String>,
    /// Tools the server marks `readOnlyHint` run without asking.
    pub trust: bool,
    /// A one-way digest of the environment and header values (empty when there are none).
    /// It stays when the values are not stored, so the tool-list cache key is the same after
    /// a restart.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub secrets_digest: String,
    /// Set on a configuration read back from the store: its secret values were not kept, so
    /// the server gets the daemon's own variables and no configured header values.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub values_withheld: bool,
}

/// The fields a configuration may give, before checking; the config file and the wire both
/// fill one of these.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RawSpec {
    pub command: Option<String>,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: Option<String>,
    pub url: Option<String>,
    pub headers: BTreeMap<String, String>,
    pub bearer_token_env_var: Option<String>,
    pub enabled: Option<bool>,
    pub startup_timeout_secs: Option<u64>,
    pub tool_timeout_secs: Option<u64>,
    pub enabled_tools: Option<Vec<String>>,
    pub disabled_tools: Vec<String>,
    pub trust: Option<bool>,
}

impl ServerSpec {
    /// Checks a configuration; the error says which field is wrong and how to fix it.
    pub fn check(name: &str, raw: RawSpec) -> Result<Self, String> {
        check_name(name)?;
        let transport = match (raw.command, raw.url) {
            (Some(_), Some(_)) => {
                return Err(format!(
                    "MCP server {name:?} has both `command` and `url`: give one"
                ));
            }
            (None, None) => {
                return Err(format!(
                    "MCP server {name:?} needs `command` (a local server) or `url` (streamable HTTP)"
                ));
            }
            (Some(command), None) => {
                if command.trim().is_empty() {
                    return Err(format!("MCP server {name:?} has an empty `command`"));
                }
                if !raw.headers.is_empty() || raw.bearer_token_env_var.is_some() {
                    return Err(format!(
                        "MCP server {name:?}: `headers` and `bearer_token_env_var` apply only to a `url`"
                    ));
                }
                if let Some(cwd) = &raw.cwd
                    && !std::path::Path::new(cwd).is_absolute()
                {
                    return Err(format!(
                        "MCP server {name:?}: `cwd` must be an absolute path, got {cwd:?}"
                    ));
                }
                Transport::Stdio {
                    command,
                    args: raw.args,
                    env: raw.env,
                    cwd: raw.cwd,
                }
            }
            (None, Some(url)) => {
                let parsed = reqwest::Url::parse(url.trim())
                    .map_err(|e| format!("MCP server {name:?}: `url` is not a valid URL ({e})"))?;
                if !matches!(parsed.scheme(), "http" | "https") {
                    return Err(format!(
                        "MCP server {name:?}: `url` must start with http:// or https://"
                    ));
                }
                if !raw.args.is_empty() || !raw.env.is_empty() || raw.cwd.is_some() {
                    return Err(format!(
                        "MCP server {name:?}: `args`, `env` and `cwd` apply only to a `command`"
                    ));
                }
                check_headers(name, &raw.headers, raw.bearer_token_env_var.as_deref())?;
                Transport::Http {
                    url: url.trim().to_string(),
                    headers: raw.headers,
                    bearer_token_env_var: raw.bearer_token_env_var,
                }
            }
        };
        let timeout = |value: Option<u64>, default: u64, field: &str| match value {
            Some(0) => Err(format!(
                "MCP server {name:?}: `{field}` must be at least 1 second"
            )),
            Some(secs) => Ok(secs),
            None => Ok(default),
        };
        Ok(Self {
            name: name.to_string(),
            secrets_digest: secrets_digest(&transport),
            values_withheld: false,
            transport,
            enabled: raw.enabled.unwrap_or(true),
            startup_timeout_secs: timeout(
                raw.startup_timeout_secs,
                DEFAULT_STARTUP_TIMEOUT_SECS,
                "startup_timeout_secs",
            )?,
            tool_timeout_secs: timeout(
                raw.tool_timeout_secs,
                DEFAULT_TOOL_TIMEOUT_SECS,
                "tool_timeout_secs",
            )?,
            enabled_tools: raw.enabled_tools,
            disabled_tools: raw.disabled_tools,
            trust: raw.trust.unwrap_or(false),
        })
    }

    pub fn startup_timeout(&self) -> Duration {
        Duration::from_secs(self.startup_timeout_secs)
    }

    pub fn tool_timeout(&self) -> Duration {
        Duration::from_secs(self.tool_timeout_secs)
    }

    /// Whether the configuration lets the model see a tool of this (original) name.
    pub fn offers(&self, tool: &str) -> bool {
        let listed = self
            .enabled_tools
            .as_ref()
            .is_none_or(|enabled| enabled.iter().any(|t| t == tool));
        listed && !self.disabled_tools.iter().any(|t| t == tool)
    }

    /// Identifies the running server this configuration starts, for sharing it between
    /// sessions: the [cache key](ServerSpec::cache_key), told apart when the secret values
    /// were withheld, since such a server runs with other values than one given them.
    pub fn key(&self) -> String {
        match self.values_withheld {
            true => format!("{}-withheld", self.cache_key()),
            false => self.cache_key(),
        }
    }

    /// Identifies the server for the tool-list cache: everything that can change what the
    /// server is. Secret values count (a different token can mean different tools) only
    /// through their digest, which is kept when they are not, so the key survives a restart.
    pub fn cache_key(&self) -> String {
        let mut hash = Fnv::default();
        hash.write(self.name.as_bytes());
        match &self.transport {
            Transport::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                hash.write(b"stdio");
                hash.write(command.as_bytes());
                for arg in args {
                    hash.write(arg.as_bytes());
                }
                for key in env.keys() {
                    hash.write(key.as_bytes());
                }
                hash.write(cwd.as_deref().unwrap_or("").as_bytes());
            }
            Transport::Http {
                url,
                headers,
                bearer_token_env_var,
            } => {
                hash.write(b"http");
                hash.write(url.as_bytes());
                for key in headers.keys() {
                    hash.write(key.as_bytes());
                }
                hash.write(bearer_token_env_var.as_deref().unwrap_or("").as_bytes());
            }
        }
        hash.write(self.secrets_digest.as_bytes());
        format!("{}-{:016x}", self.name, hash.finish())
    }

    /// The configuration as it may be stored: environment and header values can be secrets,
    /// so only their names and [digest](ServerSpec::secrets_digest) are kept. A server started
    /// from it gets the daemon's own variable of each name instead, and no configured header
    /// values (see [`connect`](super::connection::connect)).
    pub fn without_secret_values(&self) -> Self {
        let mut stored = self.clone();
        let values = match &mut stored.transport {
            Transport::Stdio { env, .. } => env,
            Transport::Http { headers, .. } => headers,
        };
        values.values_mut().for_each(String::clear);
        stored.values_withheld = !stored.secrets_digest.is_empty();
        stored
    }
}

/// A session's own servers as the store keeps them: JSON of each server
/// [without its secret values](ServerSpec::without_secret_values).
pub fn encode_stored(servers: &[ServerSpec]) -> Result<String, serde_json::Error> {
    let stored: Vec<ServerSpec> = servers
        .iter()
        .map(ServerSpec::without_secret_values)
        .collect();
    serde_json::to_string(&stored)
}

/// The servers [`encode_stored`] wrote.
pub fn decode_stored(json: &str) -> Result<Vec<ServerSpec>, serde_json::Error> {
    serde_json::from_str(json)
}

/// SHA-256 over the environment and header values with their names, in hex; empty when there
/// are none. A cryptographic hash, as it is stored: it must not give the values away.
fn secrets_digest(transport: &Transport) -> String {
    let values = match transport {
        Transport::Stdio { env, .. } => env,
        Transport::Http { headers, .. } => headers,
    };
    if values.is_empty() {
        return String::new();
    }
    let mut digest = ring::digest::Context::new(&ring::digest::SHA256);
    digest.update(b"sidechat MCP secret values v1");
    for (name, value) in values {
        for part in [name, value] {
            digest.update(&(part.len() as u64).to_le_bytes());
            digest.update(part.as_bytes());
        }
    }
    digest
        .finish()
        .as_ref()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// Header names and values must be valid HTTP, must not be ones the transport sets itself, and
/// a bearer token comes from one place only.
fn check_headers(
    name: &str,
    headers: &BTreeMap<String, String>,
    bearer_token_env_var: Option<&str>,
) -> Result<(), String> {
    for (header, value) in headers {
        if reqwest::header::HeaderName::from_bytes(header.as_bytes()).is_err() {
            return Err(format!(
                "MCP server {name:?}: {header:?} in `headers` is not a valid HTTP header name"
            ));
        }
        if reqwest::header::HeaderValue::from_str(value).is_err() {
            return Err(format!(
                "MCP server {name:?}: the value of header {header:?} is not a valid HTTP header value (no line breaks or control characters)"
            ));
        }
        let lower = header.to_ascii_lowercase();
        if TRANSPORT_HEADERS.contains(&lower.as_str()) {
            return Err(format!(
                "MCP server {name:?}: header {header:?} is set by the MCP transport itself; leave it out of `headers`"
            ));
        }
        if lower == "authorization" && bearer_token_env_var.is_some() {
            return Err(format!(
                "MCP server {name:?} has both an Authorization header and `bearer_token_env_var`: give one"
            ));
        }
    }
    if let Some(var) = bearer_token_env_var
        && (var.is_empty() || var.contains(['=', '\0']))
    {
        return Err(format!(
            "MCP server {name:?}: `bearer_token_env_var` must name an environment variable, got {var:?}"
        ));
    }
    Ok(())
}

/// Server names become part of tool names, so they keep to the characters providers accept.
fn check_name(name: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && name.len() <= 32
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    match valid {
        true if !name.contains("__") => Ok(()),
        _ => Err(format!(
            "MCP server name {name:?} must be 1 to 32 letters, digits, '_' or '-' (no \"__\")"
        )),
    }
}

/// FNV-1a, 64 bits: stable across builds and platforms, unlike the standard hasher, so a cache
/// key and a shortened tool name stay the same from one release to the next.
#[derive(Debug, Clone, Copy)]
pub struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    /// Adds `bytes` and a separator, so `["ab", "c"]` and `["a", "bc"]` differ.
    pub fn write(&mut self, bytes: &[u8]) {
        for byte in bytes.iter().chain(&[0xff]) {
            self.0 ^= u64::from(*byte);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    pub fn finish(self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn stdio(command: &str) -> RawSpec {
        RawSpec {
            command: Some(command.into()),
            ..RawSpec::default()
        }
    }

    fn header(name: &str, value: &str) -> BTreeMap<String, String> {
        BTreeMap::from([(name.to_string(), value.to_string())])
    }

    fn http(headers: BTreeMap<String, String>, bearer: Option<&str>) -> RawSpec {
        RawSpec {
            url: Some("https://mcp.example.com/mcp".into()),
            headers,
            bearer_token_env_var: bearer.map(String::from),
            ..RawSpec::default()
        }
    }

    #[test]
    fn headers_count_in_the_key() {
        let plain = ServerSpec::check("web", http(BTreeMap::new(), None)).unwrap();
        let keyed = ServerSpec::check("web", http(header("X-Key", "k"), None)).unwrap();
        let bearer = ServerSpec::check("web", http(BTreeMap::new(), Some("TOKEN"))).unwrap();
        assert_ne!(plain.key(), keyed.key());
        assert_ne!(plain.key(), bearer.key());
        assert_eq!(
            keyed.transport,
            Transport::Http {
                url: "https://mcp.example.com/mcp".into(),
                headers: header("X-Key", "k"),
                bearer_token_env_var: None,
            }
        );
    }

    #[test]
    fn defaults_fill_what_is_not_given() {
        let spec = ServerSpec::check("fs", stdio("npx")).unwrap();
        assert_eq!(
            spec,
            ServerSpec {
                name: "fs".into(),
                transport: Transport::Stdio {
                    command: "npx".into(),
                    args: vec![],
                    env: BTreeMap::new(),
                    cwd: None
                },
                enabled: true,
                startup_timeout_secs: 10,
                tool_timeout_secs: 60,
                enabled_tools: None,
                disabled_tools: vec![],
                trust: false,
                secrets_digest: String::new(),
                values_withheld: false,
            }
        );
    }

    #[test]
    fn bad_configurations_say_what_to_fix() {
        let both = RawSpec {
            url: Some("http://x".into()),
            ..stdio("a")
        };
        let errors = [
            ServerSpec::check("fs", RawSpec::default()),
            ServerSpec::check("fs", both),
            ServerSpec::check("a b", stdio("a")),
            ServerSpec::check("a__b", stdio("a")),
            ServerSpec::check(
                "web",
                RawSpec {
                    url: Some("ftp://x".into()),
                    ..RawSpec::default()
                },
            ),
            ServerSpec::check(
                "fs",
                RawSpec {
                    startup_timeout_secs: Some(0),
                    ..stdio("a")
                },
            ),
            ServerSpec::check(
                "fs",
                RawSpec {
                    cwd: Some("rel".into()),
                    ..stdio("a")
                },
            ),
            ServerSpec::check(
                "fs",
                RawSpec {
                    headers: header("X-Key", "k"),
                    ..stdio("a")
                },
            ),
            ServerSpec::check("web", http(header("Accept", "text/html"), None)),
            ServerSpec::check("web", http(header("X Key", "k"), None)),
            ServerSpec::check("web", http(header("X-Key", "a\nb"), None)),
            ServerSpec::check(
                "web",
                http(header("authorization", "Bearer x"), Some("TOKEN")),
            ),
            ServerSpec::check("web", http(BTreeMap::new(), Some("A=B"))),
        ]
        .map(|r| r.unwrap_err());
        assert_eq!(
            errors,
            [
                "MCP server \"fs\" needs `command` (a local server) or `url` (streamable HTTP)",
                "MCP server \"fs\" has both `command` and `url`: give one",
                "MCP server name \"a b\" must be 1 to 32 letters, digits, '_' or '-' (no \"__\")",
                "MCP server name \"a__b\" must be 1 to 32 letters, digits, '_' or '-' (no \"__\")",
                "MCP server \"web\": `url` must start with http:// or https://",
                "MCP server \"fs\": `startup_timeout_secs` must be at least 1 second",
                "MCP server \"fs\": `cwd` must be an absolute path, got \"rel\"",
                "MCP server \"fs\": `headers` and `bearer_token_env_var` apply only to a `url`",
                "MCP server \"web\": header \"Accept\" is set by the MCP transport itself; leave it out of `headers`",
                "MCP server \"web\": \"X Key\" in `headers` is not a valid HTTP header name",
                "MCP server \"web\": the value of header \"X-Key\" is not a valid HTTP header value (no line breaks or control characters)",
                "MCP server \"web\" has both an Authorization header and `bearer_token_env_var`: give one",
                "MCP server \"web\": `bearer_token_env_var` must name an environment variable, got \"A=B\"",
            ]
            .map(String::from)
        );
    }

    #[test]
    fn enabled_and_disabled_tools_filter() {
        let mut spec = ServerSpec::check("fs", stdio("npx")).unwrap();
        spec.enabled_tools = Some(vec!["read".into(), "write".into()]);
        spec.disabled_tools = vec!["write".into()];
        let offered: Vec<bool> = ["read", "write", "other"]
            .iter()
            .map(|t| spec.offers(t))
            .collect();
        assert_eq!(offered, vec![true, false, false]);
    }

    fn with_env(value: &str) -> ServerSpec {
        let raw = RawSpec {
            env: BTreeMap::from([("TOKEN".to_string(), value.to_string())]),
            ..stdio("npx")
        };
        ServerSpec::check("fs", raw).unwrap()
    }

    #[test]
    fn the_key_follows_what_starts_the_process() {
        let a = ServerSpec::check("fs", stdio("npx")).unwrap();
        let mut b = a.clone();
        b.tool_timeout_secs = 5;
        let (c, d) = (with_env("x"), with_env("y"));
        assert_eq!(a.key(), b.key());
        assert_ne!(a.key(), c.key());
        assert_ne!(c.key(), d.key());
        assert_eq!(c.secrets_digest.len(), 64);
        assert_eq!(c.secrets_digest, with_env("x").secrets_digest);
    }

    #[test]
    fn the_stored_form_keeps_names_and_the_cache_key_but_no_value() {
        let given = with_env("s3cret");
        let stored = given.without_secret_values();
        assert_eq!(
            stored.transport,
            Transport::Stdio {
                command: "npx".into(),
                args: vec![],
                env: BTreeMap::from([("TOKEN".to_string(), String::new())]),
                cwd: None
            }
        );
        assert!(stored.values_withheld);
        assert_eq!(stored.cache_key(), given.cache_key());
        // A server started without the values is not the one given them.
        assert_ne!(stored.key(), given.key());
        let json = encode_stored(std::slice::from_ref(&given)).unwrap();
        assert!(!json.contains("s3cret"), "{json}");
        assert_eq!(decode_stored(&json).unwrap(), vec![stored]);
        // Nothing secret: the stored form is the given one.
        let plain = ServerSpec::check("fs", stdio("npx")).unwrap();
        assert_eq!(plain.without_secret_values(), plain);
    }
}
