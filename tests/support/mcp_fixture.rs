//! The MCP server the tests and the start-up benchmark spawn (`examples/mcp_fixture.rs`),
//! built beside the `sidechat` binary under test.
//!
//! `cargo test` builds examples but a filtered run and `cargo bench` do not, and a binary left
//! from an older checkout would silently measure or test old code: so a missing binary, or one
//! older than its source, is built here, in the same profile as `sidechat`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The fixture's path beside `sidechat` (`CARGO_BIN_EXE_sidechat`), built first if needed.
pub fn mcp_fixture(sidechat: &Path) -> PathBuf {
    let target = sidechat.parent().expect("the target folder");
    let path = target.join("examples/mcp_fixture");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/mcp_fixture.rs");
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    if modified(&path) < modified(&source) {
        let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cargo.args(["build", "--example", "mcp_fixture"]);
        if target.ends_with("release") {
            cargo.arg("--release");
        }
        let status = cargo
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("run cargo");
        assert!(status.success(), "building the MCP fixture failed");
    }
    path
}
