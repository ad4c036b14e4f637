//! Telling that the sandbox refused part of a command, from its exit and its error output.
//!
//! Landlock answers a refused write or connection with `EACCES` (or `EPERM`) and tells the
//! process nothing else, so a refusal can only be inferred: a command that failed and whose
//! error output carries the words the C library and common tools print for those errors is
//! taken as refused by the sandbox. A command that fails for an ordinary permission problem
//! looks the same; the model is then offered a rerun outside the sandbox, which the user
//! decides on, so a false guess costs a prompt, never a silent escalation.

/// Phrases printed for `EACCES`/`EPERM` by libc's `strerror`, Python, Node and curl.
const MARKERS: &[&str] = &[
    "permission denied",
    "operation not permitted",
    "eacces",
    "eperm",
    "permissionerror",
    "couldn't connect to server",
];

/// What the model is told after the output of a command the sandbox seems to have refused.
pub const TOLD: &str = "Refused by the sandbox: this command ran sandboxed, where it may write only in the workspace, the temp folder and the configured folders, and may not open network connections. If it needs more, call run_command again with \"sandbox\": false to run it outside the sandbox; the user will be asked first.";

/// Whether a command that exited with `success` and wrote `stderr` was refused by the sandbox.
pub fn refused(success: bool, stderr: &str) -> bool {
    if success {
        return false;
    }
    let lower = stderr.to_lowercase();
    MARKERS.iter().any(|m| lower.contains(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_command_with_a_permission_error_was_refused() {
        let cases = [
            (
                false,
                "sh: 1: cannot create /root/x: Permission denied",
                true,
            ),
            (
                false,
                "touch: cannot touch '/home/a/x': Permission denied",
                true,
            ),
            (
                false,
                "curl: (7) Failed to connect to 127.0.0.1 port 80 after 0 ms: Couldn't connect to server",
                true,
            ),
            (false, "PermissionError: [Errno 13] Permission denied", true),
            (
                false,
                "mkdir: cannot create directory: Operation not permitted",
                true,
            ),
            (true, "warning: Permission denied reading a cache", false),
            (false, "error[E0308]: mismatched types", false),
            (false, "", false),
        ];
        for (success, stderr, expected) in cases {
            assert_eq!(refused(success, stderr), expected, "{stderr}");
        }
    }
}
