//! Logs go to stderr and, optionally, a file; never to stdout, which carries only frames.

use std::path::Path;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::writer::MakeWriterExt;

/// Installs the global subscriber. The level comes from `SIDECHAT_LOG`, then `RUST_LOG`,
/// defaulting to `info`.
pub fn init(log_file: Option<&Path>) -> anyhow::Result<()> {
    let filter = std::env::var("SIDECHAT_LOG")
        .ok()
        .or_else(|| std::env::var("RUST_LOG").ok())
        .unwrap_or_else(|| "info".to_string());
    let filter = EnvFilter::try_new(&filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false);
    match log_file {
        Some(path) => {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                crate::private_files::create_dir_all(dir)?;
            }
            let file = crate::private_files::open_append(path)?;
            builder
                .with_writer(std::io::stderr.and(std::sync::Mutex::new(file)))
                .try_init()
                .map_err(|e| anyhow::anyhow!("cannot install logging: {e}"))
        }
        None => builder
            .with_writer(std::io::stderr)
            .try_init()
            .map_err(|e| anyhow::anyhow!("cannot install logging: {e}")),
    }
}
