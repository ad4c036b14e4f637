//! The daemon under test sees none of the machine's environment: a developer who exported
//! provider keys, `OPENAI_BASE_URL` or `SIDECHAT_*` settings (as the README suggests), or has
//! a config file, gets the same test results, and no test meant for the demo model reaches a
//! server.

use std::process::Command;

use pretty_assertions::assert_eq;
use sidechat::protocol::{
    ClientInfo, Initialize, InitializeParams, InitializeResult, Initialized, InitializedParams,
    Session, SessionCreate, SessionCreateParams,
};

use crate::harness::{Daemon, Options, Scratch};
use crate::upstream::start;

/// The test below, run again by this test binary inside a developer's environment.
const INNER: &str = "environment::a_daemon_in_a_developers_shell_uses_the_demo";

/// Set only in the environment the inner test runs in.
const MARK: &str = "SIDECHAT_TEST_HOSTILE_ENVIRONMENT";

#[test]
fn the_developers_environment_does_not_reach_the_daemon() {
    // Every provider variable points at a fake upstream that records what reaches it.
    let upstream = start(vec![]);
    let scratch = Scratch::new();
    let developer = scratch.dir.path().join("developer");
    let config = developer.join(".config/sidechat/config.toml");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    std::fs::write(
        &config,
        format!(
            "default_account = \"work\"\n[accounts.work]\nkind = \"openai\"\nbase_url = \"{}/v1\"\ndefault_model = \"gpt-5\"\n",
            upstream.url
        ),
    )
    .unwrap();
    let output = Command::new(std::env::current_exe().unwrap())
        .args([INNER, "--exact", "--ignored", "--test-threads=1"])
        .env(MARK, "1")
        .env("OPENAI_API_KEY", "sk-developer")
        .env("OPENAI_BASE_URL", format!("{}/v1", upstream.url))
        .env("ANTHROPIC_API_KEY", "sk-ant-developer")
        .env("ANTHROPIC_BASE_URL", &upstream.url)
        .env("SIDECHAT_ACCOUNT", "openai")
        .env("SIDECHAT_MAX_STEPS", "3")
        .env("SIDECHAT_REPLAY_SCRIPT", developer.join("missing.json"))
        .env("SIDECHAT_CONFIG", &config)
        .env("HOME", &developer)
        .env("XDG_CONFIG_HOME", developer.join(".config"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "the inner test failed or did not run:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(upstream.seen(), vec![], "a request reached the provider");
}

#[tokio::test]
#[ignore = "run by the_developers_environment_does_not_reach_the_daemon, in a prepared environment"]
async fn a_daemon_in_a_developers_shell_uses_the_demo() {
    assert!(
        std::env::var_os(MARK).is_some(),
        "{INNER} only means something inside the environment the_developers_environment_does_not_reach_the_daemon prepares"
    );
    let scratch = Scratch::new();
    let mut daemon = Daemon::spawn(&scratch.db(), Options::default());
    let init: InitializeResult = daemon
        .call::<Initialize>(InitializeParams {
            client_info: Some(ClientInfo {
                name: "tests".into(),
                version: None,
            }),
            ..InitializeParams::default()
        })
        .await;
    let accounts: Vec<_> = init
        .accounts
        .iter()
        .map(|a| (a.name.as_str(), a.is_demo))
        .collect();
    assert_eq!(
        (accounts, init.default_account.as_str()),
        (vec![("demo", true)], "demo")
    );
    daemon.notify::<Initialized>(InitializedParams {}).await;
    let session: Session = daemon
        .call::<SessionCreate>(SessionCreateParams::default())
        .await;
    assert_eq!(
        (session.account.as_str(), session.max_steps),
        ("demo", sidechat::config::DEFAULT_MAX_STEPS)
    );
    daemon.send(&session.id, "hi").await;
    daemon.until_finished().await;
    daemon.close().await;
}

#[tokio::test]
async fn a_tests_own_config_file_is_read() {
    let scratch = Scratch::new();
    scratch.write_config(
        "default_account = \"local\"\n[accounts.local]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\ndefault_model = \"qwen\"\n",
    );
    let daemon = Daemon::spawn(&scratch.db(), Options::default());
    let init: InitializeResult = daemon.call::<Initialize>(InitializeParams::default()).await;
    let accounts: Vec<_> = init.accounts.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(
        (accounts, init.default_account.as_str()),
        (vec!["demo", "local"], "local")
    );
    daemon.close().await;
}
