//! The daemon's own files are private whatever the umask: started with a umask of 000, the
//! database, its `-wal` and `-shm`, the log file and the folders made for them are readable by
//! the user only.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use pretty_assertions::assert_eq;
use sidechat::client::Connection;
use sidechat::protocol::{Initialize, InitializeParams, SessionCreateParams};
use sidechat::rpc::framing::Framing;

use crate::harness::{Daemon, Scratch, home_for};

fn mode(path: &Path) -> String {
    let mode = std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode();
    format!("{:04o}", mode & 0o7777)
}

#[tokio::test]
async fn database_log_and_folders_are_private_under_a_umask_of_000() {
    let scratch = Scratch::new();
    let db = scratch.db();
    let log = scratch.dir.path().join("logs/deep/sidechat.log");
    let home = home_for(&db);
    // The same clean environment as every daemon under test, through a shell that sets the
    // umask first.
    let mut command = tokio::process::Command::new("sh");
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_DATA_HOME", home.join(".local/share"))
        .env("SIDECHAT_DEMO_DELAY_MS", "0")
        .env("SIDECHAT_LOG", "info")
        .arg("-c")
        .arg(r#"umask 000 && exec "$0" "$@""#)
        .arg(env!("CARGO_BIN_EXE_sidechat"))
        .arg("serve")
        .arg("--db")
        .arg(&db)
        .arg("--log-file")
        .arg(&log)
        .stderr(std::process::Stdio::null());
    let (conn, notes) = Connection::spawn(command, Framing::Line).expect("spawn sidechat");
    let mut daemon = Daemon { conn, notes };
    daemon.call::<Initialize>(InitializeParams::default()).await;
    let session = daemon.create_session(SessionCreateParams::default()).await;
    daemon.send(&session, "hello").await;
    daemon.until_finished().await;
    let wal = db.with_file_name("sidechat.db-wal");
    let shm = db.with_file_name("sidechat.db-shm");
    let seen = [
        mode(db.parent().unwrap()),
        mode(&db),
        mode(&wal),
        mode(&shm),
        mode(log.parent().unwrap()),
        mode(log.parent().unwrap().parent().unwrap()),
        mode(&log),
    ];
    assert_eq!(
        seen,
        ["0700", "0600", "0600", "0600", "0700", "0700", "0600"].map(String::from)
    );
    // A file the umask would have left open to all is not what the shell makes by itself:
    // the same shell and umask create a world-writable file.
    let probe = scratch.dir.path().join("probe");
    let made = std::process::Command::new("sh")
        .arg("-c")
        .arg(r#"umask 000 && : > "$0""#)
        .arg(&probe)
        .status()
        .unwrap();
    assert!(made.success());
    assert_eq!(mode(&probe), "0666");
    assert_eq!(daemon.close().await, 0);
}

#[test]
fn chat_makes_its_data_folder_and_logs_private_under_a_umask_of_000() {
    let scratch = Scratch::new();
    let home = scratch.home();
    // `sidechat chat -p` in the test's clean environment, through a shell that sets the umask
    // first; the database lives elsewhere, so the data folder is the client's doing.
    let status = std::process::Command::new("sh")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_DATA_HOME", home.join(".local/share"))
        .env("SIDECHAT_DEMO_DELAY_MS", "0")
        .arg("-c")
        .arg(r#"umask 000 && exec "$0" "$@""#)
        .arg(env!("CARGO_BIN_EXE_sidechat"))
        .args(["chat", "-p", "hello", "--db"])
        .arg(scratch.db())
        .current_dir(scratch.workspace())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let data = home.join(".local/share/sidechat");
    assert_eq!(
        [mode(&data), mode(&data.join("logs"))],
        ["0700", "0700"].map(String::from)
    );
}
