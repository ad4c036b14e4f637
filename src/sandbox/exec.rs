//! The hidden mode's work: restrict this process with Landlock, then exec the command.
//!
//! Every restriction is a hard requirement: a kernel without Landlock, or without the network
//! rules when the network is refused, makes [`restrict`] fail rather than run the command with
//! less confinement than the settings promise.

use std::ffi::OsString;
use std::path::PathBuf;

/// What the hidden mode was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub workspace: PathBuf,
    pub writable: Vec<PathBuf>,
    pub network: bool,
    /// The program and its arguments.
    pub command: Vec<OsString>,
}

/// Why the command was not run.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("the sandbox cannot be set up: {0}")]
    Restrict(String),
    #[error("no command to run")]
    NoCommand,
    #[error("cannot run {program}: {source}")]
    Exec {
        program: String,
        source: std::io::Error,
    },
}

/// Device files commands write to as a matter of course.
#[cfg(target_os = "linux")]
const WRITABLE_DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/full", "/dev/tty"];

/// The folders a sandboxed command may write in: the workspace, the system's temp folder and
/// the configured ones.
pub fn writable_paths(request: &Request) -> Vec<PathBuf> {
    let mut paths = vec![request.workspace.clone(), std::env::temp_dir()];
    paths.extend(request.writable.iter().cloned());
    paths
}

/// Restricts this process, then replaces it with the command; returns only on failure.
pub fn run(request: Request) -> ExecError {
    if let Err(e) = restrict(&request) {
        return e;
    }
    let Some((program, args)) = request.command.split_first() else {
        return ExecError::NoCommand;
    };
    use std::os::unix::process::CommandExt;
    let source = std::process::Command::new(program).args(args).exec();
    ExecError::Exec {
        program: program.to_string_lossy().into_owned(),
        source,
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use landlock::{
        ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, Ruleset, RulesetAttr,
        RulesetCreatedAttr, RulesetStatus, path_beneath_rules,
    };

    use super::{ExecError, Request, WRITABLE_DEVICES, writable_paths};
    use crate::sandbox::Support;

    /// The file-system ABIs tried, newest first: the newest the kernel has decides which
    /// rights are handled (the later ones add renaming across folders, truncation and device
    /// ioctls to what can be refused).
    const FS_ABIS: [(ABI, u8); 5] = [
        (ABI::V5, 5),
        (ABI::V4, 4),
        (ABI::V3, 3),
        (ABI::V2, 2),
        (ABI::V1, 1),
    ];

    /// Whether a ruleset handling `access` can be made on this kernel, every right required.
    fn handles(access: impl FnOnce(Ruleset) -> Result<Ruleset, landlock::RulesetError>) -> bool {
        access(Ruleset::default().set_compatibility(CompatLevel::HardRequirement))
            .and_then(|ruleset| ruleset.create())
            .is_ok()
    }

    /// The newest file-system ABI this kernel has, if any.
    fn fs_abi() -> Option<(ABI, u8)> {
        FS_ABIS
            .into_iter()
            .find(|(abi, _)| handles(|r| r.handle_access(AccessFs::from_all(*abi))))
    }

    pub fn probe() -> Support {
        let Some((_, fs)) = fs_abi() else {
            return Support::Missing(
                "this kernel has no Landlock, or it is not enabled at boot".into(),
            );
        };
        let network = handles(|r| r.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp));
        Support::Available {
            abi: if network { fs.max(4) } else { fs },
            network,
        }
    }

    pub fn restrict(request: &Request) -> Result<(), ExecError> {
        let fail = |e: landlock::RulesetError| ExecError::Restrict(e.to_string());
        let (abi, _) = fs_abi().ok_or_else(|| {
            ExecError::Restrict("this kernel has no Landlock, or it is not enabled at boot".into())
        })?;
        let mut ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(AccessFs::from_all(abi))
            .map_err(fail)?;
        if !request.network {
            ruleset = ruleset
                .handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)
                .map_err(fail)?;
        }
        let mut writable = writable_paths(request);
        writable.extend(WRITABLE_DEVICES.iter().map(std::path::PathBuf::from));
        let status = ruleset
            .create()
            .map_err(fail)?
            .add_rules(path_beneath_rules(["/"], AccessFs::from_read(abi)))
            .map_err(fail)?
            .add_rules(path_beneath_rules(&writable, AccessFs::from_all(abi)))
            .map_err(fail)?
            .no_new_privs(true)
            .restrict_self()
            .map_err(fail)?;
        // The hard requirement already refuses less; checked again, as the promise rests on it.
        if status.ruleset != RulesetStatus::FullyEnforced || !status.no_new_privs {
            return Err(ExecError::Restrict(format!(
                "the kernel enforced only part of it ({status:?})"
            )));
        }
        Ok(())
    }
}

/// Probes what this machine offers.
pub fn probe() -> crate::sandbox::Support {
    #[cfg(target_os = "linux")]
    return linux::probe();
    #[cfg(not(target_os = "linux"))]
    crate::sandbox::Support::Missing("Landlock is Linux's; this system has no sandbox".into())
}

fn restrict(request: &Request) -> Result<(), ExecError> {
    #[cfg(target_os = "linux")]
    return linux::restrict(request);
    #[cfg(not(target_os = "linux"))]
    Err(ExecError::Restrict(
        "Landlock is Linux's; this system has no sandbox".into(),
    ))
}
