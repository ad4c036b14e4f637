//! The sandbox `run_command` runs in: Landlock on Linux.
//!
//! Inside it a command reads anywhere, writes only in the workspace, the system's temp folder
//! and the folders `[sandbox] writable` adds, and opens no TCP connection (nor listens) unless
//! `[sandbox] network = true`; `no_new_privs` is set, so nothing it runs gains privileges.
//!
//! The policy applies to the command only, never to the daemon. It cannot be applied between
//! `fork` and `exec` of the daemon's own process (a forked child of a multi-threaded process
//! may not allocate, and the project denies unsafe code), so the daemon spawns its own binary
//! in a hidden mode, [`EXEC_MODE`], which restricts itself and then execs the shell: one extra
//! exec per command ([`exec`]).
//!
//! Nothing is best effort: when the kernel lacks a restriction the settings ask for, the
//! hidden mode fails and the command does not run ([`Support`] tells the daemon beforehand, so
//! it asks instead).

pub mod exec;
pub mod refusal;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The hidden subcommand that restricts itself and execs the command.
pub const EXEC_MODE: &str = "__sandbox-exec";

/// `[sandbox]` in the config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `false` turns the sandbox off: commands ask as they did without one.
    pub enabled: bool,
    /// Folders (or files) writable besides the workspace and the temp folder.
    pub writable: Vec<PathBuf>,
    /// Whether TCP connections and listening are allowed.
    pub network: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            enabled: true,
            writable: Vec::new(),
            network: false,
        }
    }
}

/// What this machine offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Support {
    /// Landlock works; `network` says whether it can also refuse TCP (ABI 4 and later).
    Available { abi: u8, network: bool },
    /// No sandbox here, and why.
    Missing(String),
}

/// What this machine offers, probed once per process.
pub fn support() -> &'static Support {
    static SUPPORT: OnceLock<Support> = OnceLock::new();
    SUPPORT.get_or_init(exec::probe)
}

/// Whether commands run sandboxed with `settings` on a machine offering `support`, and a line
/// saying why (for `doctor`, `initialize` and the docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub active: bool,
    pub detail: String,
}

pub fn status(settings: &Settings, support: &Support) -> Status {
    match support {
        _ if !settings.enabled => Status {
            active: false,
            detail: "off ([sandbox] enabled = false): commands ask before they run".into(),
        },
        Support::Missing(why) => Status {
            active: false,
            detail: format!("unavailable ({why}): commands ask before they run"),
        },
        Support::Available { abi, network } if !settings.network && !network => Status {
            active: false,
            detail: format!(
                "unavailable (Landlock ABI {abi} cannot refuse network access; it needs ABI 4, or [sandbox] network = true): commands ask before they run"
            ),
        },
        Support::Available { abi, .. } => Status {
            active: true,
            detail: format!(
                "Landlock ABI {abi}: commands run sandboxed (writes in the workspace, the temp folder{}; network {})",
                match settings.writable.is_empty() {
                    true => String::new(),
                    false => format!(
                        " and {}",
                        settings
                            .writable
                            .iter()
                            .map(|p| p.display().to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                },
                if settings.network {
                    "allowed"
                } else {
                    "refused"
                }
            ),
        },
    }
}

/// The arguments of the hidden mode, after the binary: it restricts itself to writing in
/// `workspace`, the temp folder and `settings.writable`, then runs `sh -c command`.
pub fn exec_args(workspace: &Path, settings: &Settings, command: &str) -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = vec![EXEC_MODE.into(), "--workspace".into()];
    args.push(workspace.into());
    for path in &settings.writable {
        args.push("--writable".into());
        args.push(path.into());
    }
    if settings.network {
        args.push("--network".into());
    }
    args.extend(["--".into(), "sh".into(), "-c".into(), command.into()]);
    args
}

/// The binary to spawn in [`EXEC_MODE`]: this one.
pub fn exec_binary() -> std::io::Result<PathBuf> {
    std::env::current_exe()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn the_status_says_why_commands_ask() {
        let on = Settings::default();
        let seven = Support::Available {
            abi: 7,
            network: true,
        };
        assert_eq!(
            status(&on, &seven),
            Status {
                active: true,
                detail: "Landlock ABI 7: commands run sandboxed (writes in the workspace, the temp folder; network refused)".into()
            }
        );
        let off = Settings {
            enabled: false,
            ..Settings::default()
        };
        assert!(!status(&off, &seven).active);
        let missing = Support::Missing("Landlock is not enabled in this kernel".into());
        assert_eq!(
            status(&on, &missing),
            Status {
                active: false,
                detail: "unavailable (Landlock is not enabled in this kernel): commands ask before they run".into()
            }
        );
        let three = Support::Available {
            abi: 3,
            network: false,
        };
        assert!(!status(&on, &three).active);
        let open = Settings {
            network: true,
            writable: vec![PathBuf::from("/data")],
            ..Settings::default()
        };
        assert_eq!(
            status(&open, &three),
            Status {
                active: true,
                detail: "Landlock ABI 3: commands run sandboxed (writes in the workspace, the temp folder and /data; network allowed)".into()
            }
        );
    }

    #[test]
    fn the_hidden_mode_gets_every_setting() {
        let settings = Settings {
            enabled: true,
            writable: vec![PathBuf::from("/a"), PathBuf::from("/b c")],
            network: true,
        };
        let args = exec_args(Path::new("/ws"), &settings, "echo hi; ls");
        let expected: Vec<std::ffi::OsString> = [
            EXEC_MODE,
            "--workspace",
            "/ws",
            "--writable",
            "/a",
            "--writable",
            "/b c",
            "--network",
            "--",
            "sh",
            "-c",
            "echo hi; ls",
        ]
        .iter()
        .map(|s| s.into())
        .collect();
        assert_eq!(args, expected);
    }
}
