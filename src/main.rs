//! The `sidechat` command line: `serve`, `acp`, `chat`, `attach`, `doctor`, `schema`.

#![deny(unsafe_code)]

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};

use futures::FutureExt;
use sidechat::config::Config;
use sidechat::protocol::generate_schema_files;
use sidechat::rpc::ClientSink;
use sidechat::rpc::listen::fanout::{Fanout, Listeners};
use sidechat::rpc::listen::{self, Bound, ListenOptions};
use sidechat::runtime::{EventSink, Runtime};
use sidechat::store::Store;

#[derive(Parser)]
#[command(name = "sidechat", version, about = "A chat-agent sidecar for editors")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Speak JSON-RPC 2.0 on stdin/stdout, as an editor extension spawns it; with `--listen`,
    /// also over WebSocket to any number of clients.
    Serve {
        /// The SQLite database (default: $XDG_DATA_HOME/sidechat/sidechat.db).
        #[arg(long, env = "SIDECHAT_DB")]
        db: Option<PathBuf>,
        /// Also write logs to this file.
        #[arg(long)]
        log_file: Option<PathBuf>,
        /// Also serve the protocol over WebSocket on this loopback `host:port` (port 0: any
        /// free one) or unix socket (`unix:PATH`). The URL and a token go to
        /// `$XDG_RUNTIME_DIR/sidechat/serve.json`.
        #[arg(long, value_name = "ADDR")]
        listen: Option<String>,
        /// Allow `--listen` on an address other than a loopback one.
        #[arg(long, requires = "listen")]
        allow_remote: bool,
        /// With `--listen`: no client on stdin/stdout; the daemon runs until SIGTERM, SIGHUP
        /// or Ctrl-C.
        #[arg(long, requires = "listen")]
        no_stdio: bool,
        /// With `--listen`: also serve the chat page for a browser at the same address
        /// (`sidechat web` prints its address with the token).
        #[arg(long, requires = "listen")]
        web: bool,
    },
    /// Speak the Agent Client Protocol (v1) on stdin/stdout, as Zed, JetBrains IDEs and other
    /// ACP hosts spawn an agent. Same database and configuration as `serve`.
    Acp {
        /// The SQLite database (default: $XDG_DATA_HOME/sidechat/sidechat.db).
        #[arg(long, env = "SIDECHAT_DB")]
        db: Option<PathBuf>,
        /// Also write logs to this file.
        #[arg(long)]
        log_file: Option<PathBuf>,
    },
    /// Chat in the terminal; spawns `sidechat serve` the way an editor does. With `-p TEXT`
    /// or text piped on stdin, runs one turn and exits.
    Chat(sidechat::client::ChatArgs),
    /// Bridge stdin/stdout to the listening daemon `serve.json` names (`serve --listen`), so
    /// an editor that spawns a stdio server shares that daemon instead of starting its own.
    Attach(sidechat::client::AttachArgs),
    /// Chat in a browser: prints the address of the chat page of the listening daemon, starting
    /// one (`serve --listen 127.0.0.1:0 --no-stdio --web`, detached) when none serves it.
    Web(sidechat::client::WebArgs),
    /// List, show, export or delete stored sessions.
    Sessions(sidechat::client::SessionsArgs),
    /// Check the database (size, schema, integrity, leases) and the configured accounts
    /// (never their keys) and whether their servers answer; exits 1 when something is wrong.
    Doctor {
        /// The SQLite database (default: $XDG_DATA_HOME/sidechat/sidechat.db).
        #[arg(long, env = "SIDECHAT_DB")]
        db: Option<PathBuf>,
        /// Check the integrity of a database of any size (it reads every page); by default
        /// only one of up to 256 MiB is checked.
        #[arg(long)]
        integrity: bool,
    },
    /// Write the protocol's JSON Schema files.
    Schema {
        /// Folder to write into.
        #[arg(long, default_value = "schema")]
        out: PathBuf,
    },
    /// How `run_command` starts a sandboxed command (`sidechat::sandbox`): restricts itself
    /// with Landlock, then execs the command. Not for people, so hidden from `--help`.
    #[command(name = "__sandbox-exec", hide = true)]
    SandboxExec {
        #[arg(long)]
        workspace: PathBuf,
        #[arg(long)]
        writable: Vec<PathBuf>,
        #[arg(long)]
        network: bool,
        #[arg(last = true, required = true)]
        command: Vec<std::ffi::OsString>,
    },
}

/// Where the database lives when `--db` and `SIDECHAT_DB` are absent.
fn default_db() -> anyhow::Result<PathBuf> {
    let data = sidechat::config::default_data_dir()
        .context("neither XDG_DATA_HOME nor HOME is set; pass --db")?;
    Ok(data.join("sidechat.db"))
}

/// Two workers are plenty for one editor connection, and a fixed count skips sizing the pool
/// from the machine's cgroup at start-up.
fn async_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// Logging, the database path and the configuration, as both protocols start.
fn start(db: Option<PathBuf>, log_file: Option<PathBuf>) -> anyhow::Result<(PathBuf, Config)> {
    sidechat::logging::init(log_file.as_deref())?;
    let db = match db {
        Some(db) => db,
        None => default_db()?,
    };
    Ok((db, Config::load()?))
}

/// What `serve` was asked for besides the database and log file.
struct ServeOptions {
    listen: Option<ListenOptions>,
    no_stdio: bool,
}

fn serve(
    db: Option<PathBuf>,
    log_file: Option<PathBuf>,
    options: ServeOptions,
) -> anyhow::Result<i32> {
    let (db, config) = start(db, log_file)?;
    let init = sidechat::runtime::describe(&config);
    // A wrong address fails before anything starts.
    let bound = options.listen.as_ref().map(Bound::bind).transpose()?;
    match options.no_stdio {
        false => tracing::info!(db = %db.display(), "serving on stdio"),
        true => tracing::info!(db = %db.display(), "serving without stdio"),
    }
    sidechat::lifetime::begin();
    let tokio = async_runtime()?;
    let code = tokio.block_on(async move {
        sidechat::lifetime::watch();
        let stdio = Arc::new(ClientSink::default());
        let listeners = Arc::new(Listeners::default());
        let sink = Arc::new(Fanout::new(stdio.clone(), listeners.clone()));
        // The store opens (and repairs what a crash left) while the handshake goes on.
        let db_path = db.clone();
        let opening = tokio::task::spawn_blocking(move || open_runtime(&db, config, sink))
            .map(|opened| opened.unwrap_or_else(|e| Err(format!("opening the store failed: {e}"))))
            .boxed()
            .shared();
        let listening = bound.map(|bound| {
            let (opening, init) = (opening.clone(), init.clone());
            tokio::spawn(async move {
                let runtime = opening.await.map_err(anyhow::Error::msg)?;
                let listening = listen::start(bound, runtime, init, listeners, db_path).await?;
                eprintln!("sidechat: listening on {}", listening.url);
                if let Some(page) = &listening.page {
                    eprintln!(
                        "sidechat: serving the chat page at {page} (`sidechat web` prints it with its token)"
                    );
                }
                anyhow::Ok(listening)
            })
        });
        if options.no_stdio {
            serve_without_stdio(opening, listening).await
        } else {
            let opened = opening.clone();
            let code =
                sidechat::rpc::serve(std::io::stdin(), std::io::stdout(), init, move |peer| {
                    stdio.connect(peer);
                    tokio::spawn(opened)
                })
                .await;
            if let Some(listening) = listening {
                stop_listening(listening.await).await;
            }
            code
        }
    });
    // The stdin thread may still be blocked in read; exiting the process ends it.
    tokio.shutdown_background();
    sidechat::lifetime::end_descendants();
    Ok(code)
}

type Opening =
    futures::future::Shared<futures::future::BoxFuture<'static, Result<Runtime, String>>>;
type Listening = tokio::task::JoinHandle<anyhow::Result<listen::Listening>>;

/// A daemon with WebSocket clients only: runs until a terminating signal, then shuts the
/// runtime down as the end of stdio would. Exits 1 when it cannot listen.
async fn serve_without_stdio(opening: Opening, listening: Option<Listening>) -> i32 {
    let Some(mut listening) = listening else {
        return 1;
    };
    let started = tokio::select! {
        () = sidechat::lifetime::signals::ended() => None,
        _ = tokio::signal::ctrl_c() => None,
        started = &mut listening => Some(started),
    };
    let started = match started {
        Some(Ok(Ok(listening))) => {
            tokio::select! {
                () = sidechat::lifetime::signals::ended() => {}
                _ = tokio::signal::ctrl_c() => tracing::info!("ending on Ctrl-C"),
            }
            Ok(Ok(listening))
        }
        Some(failed) => failed,
        None => listening.await,
    };
    let failed = !matches!(started, Ok(Ok(_)));
    stop_listening(started).await;
    match opening.await {
        Ok(runtime) if !failed => {
            runtime.shutdown().await;
            0
        }
        Ok(runtime) => {
            runtime.shutdown().await;
            1
        }
        Err(_) => 1,
    }
}

/// Stops the WebSocket server, or says why it never started.
async fn stop_listening(
    started: Result<anyhow::Result<listen::Listening>, tokio::task::JoinError>,
) {
    match started {
        Ok(Ok(listening)) => listening.stop().await,
        Ok(Err(e)) => {
            tracing::error!(error = %e, "cannot listen");
            eprintln!("sidechat: {e:#}");
        }
        Err(e) => tracing::error!(error = %e, "the listener failed"),
    }
}

fn acp(db: Option<PathBuf>, log_file: Option<PathBuf>) -> anyhow::Result<i32> {
    let (db, config) = start(db, log_file)?;
    tracing::info!(db = %db.display(), "serving ACP on stdio");
    sidechat::lifetime::begin();
    let tokio = async_runtime()?;
    let code = tokio.block_on(async move {
        sidechat::lifetime::watch();
        let (sink, items) = sidechat::acp::AcpSink::new();
        let sink = Arc::new(sink);
        let events = sink.clone();
        let runtime_config = config.clone();
        // The store opens (and repairs what a crash left) while `initialize` is answered.
        let opening =
            tokio::task::spawn_blocking(move || open_runtime(&db, runtime_config, events));
        sidechat::acp::serve(
            std::io::stdin(),
            std::io::stdout(),
            config,
            sink,
            items,
            opening,
        )
        .await
    });
    tokio.shutdown_background();
    sidechat::lifetime::end_descendants();
    Ok(code)
}

/// Opens the store and the runtime over it; the error is what every request is answered with.
fn open_runtime(
    db: &std::path::Path,
    config: Config,
    sink: Arc<dyn EventSink>,
) -> Result<Runtime, String> {
    let failed = |e: String| {
        tracing::error!(error = %e, "cannot start");
        e
    };
    let store = Store::open(db).map_err(|e| {
        failed(format!(
            "sidechat cannot open its database {}: {e}",
            db.display()
        ))
    })?;
    let runtime = Runtime::new(store, config, sink)
        .map_err(|e| failed(format!("sidechat cannot start: {e}")))?;
    // Loading the tokenizer takes longer than answering initialize: do it off the path.
    if let Err(e) = sidechat::context::Tokenizers::warm_in_background() {
        tracing::warn!(error = %e, "cannot warm the tokenizer; counts will load it on first use");
    }
    if let Err(e) = sidechat::context::redact::warm_in_background() {
        tracing::warn!(error = %e, "cannot compile the redaction patterns ahead; the first redaction will");
    }
    Ok(runtime)
}

fn doctor(db: Option<PathBuf>, integrity: bool) -> anyhow::Result<i32> {
    let checkup = sidechat::doctor::Checkup {
        db: match db {
            Some(db) => db,
            None => default_db()?,
        },
        config_path: sidechat::config::default_config_path(),
        config: Config::load(),
        integrity_limit: (!integrity).then_some(sidechat::doctor::INTEGRITY_LIMIT),
    };
    let report = async_runtime()?.block_on(checkup.run());
    print!("{}", report.text);
    Ok(if report.problems.is_empty() { 0 } else { 1 })
}

fn write_schema(out: PathBuf) -> anyhow::Result<i32> {
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    for file in generate_schema_files() {
        let path = out.join(&file.name);
        std::fs::write(&path, &file.contents)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    eprintln!("wrote the protocol schema to {}", out.display());
    Ok(0)
}

/// Returns only when the command could not be run: the sandbox could not be set up (never run
/// unconfined) or the program could not be started. 126 is the shell's "cannot execute".
fn sandbox_exec(request: sidechat::sandbox::exec::Request) -> anyhow::Result<i32> {
    let error = sidechat::sandbox::exec::run(request);
    eprintln!("sidechat: {error}");
    Ok(126)
}

fn main() {
    map_large_allocations();
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Serve {
            db,
            log_file,
            listen,
            allow_remote,
            no_stdio,
            web,
        } => serve(
            db,
            log_file,
            ServeOptions {
                listen: listen.map(|addr| ListenOptions {
                    addr,
                    allow_remote,
                    web,
                }),
                no_stdio,
            },
        ),
        Command::Acp { db, log_file } => acp(db, log_file),
        Command::Chat(args) => sidechat::client::run(args),
        Command::Attach(args) => sidechat::client::run_attach(args),
        Command::Web(args) => sidechat::client::run_web(args),
        Command::Sessions(args) => sidechat::client::run_sessions(args),
        Command::Doctor { db, integrity } => doctor(db, integrity),
        Command::Schema { out } => write_schema(out),
        Command::SandboxExec {
            workspace,
            writable,
            network,
            command,
        } => sandbox_exec(sidechat::sandbox::exec::Request {
            workspace,
            writable,
            network,
            command,
        }),
    };
    match outcome {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("sidechat: {e:#}");
            std::process::exit(2);
        }
    }
}

/// Gives every allocation of 1 MiB or more a mapping of its own, returned to the system when it
/// is freed.
///
/// glibc starts with that policy at 128 KiB, but raises the threshold to the size of each large
/// block freed, up to 32 MiB. After one large message, the buffers of the next (its frame, its
/// text, their JSON) came from the heap arenas of whichever threads made them and stayed
/// resident once freed, while buffers over 32 MiB were mapped afresh every time: a message's
/// memory outlived it, and a 40 MiB line cost far more than four 10 MiB ones. With a fixed
/// threshold a large message's buffers are given back once it has been handled, and reading one
/// costs in proportion to its size.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn map_large_allocations() {
    const THRESHOLD: libc::c_int = 1024 * 1024;
    // SAFETY: `mallopt` takes two integers and changes only the allocator's policy. It runs
    // first thing in `main`, before any other thread exists. It fails only for a value it does
    // not know, and then the default policy stays, which is harmless.
    unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, THRESHOLD) };
}

/// Other allocators keep their own policy.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn map_large_allocations() {}
