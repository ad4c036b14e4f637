//! Which session a chat works in: the one named, this folder's newest, or a new one.

use super::daemon::{Daemon, check_account, check_model};
use super::{ChatArgs, workspace_root};
use crate::protocol::{Session, SessionCreate, SessionCreateParams, SessionOrigin, SessionSummary};

/// How a chat chooses when no flag says.
#[derive(Debug, Clone, Copy)]
pub enum Ask {
    /// Ask on the terminal whether to continue the folder's newest session.
    User,
    /// Start a new session (one-shot mode).
    New,
}

/// The session to chat in, and whether it existed before. A new session is named `title`, or
/// left for the daemon to title after its first answer.
pub async fn choose(
    daemon: &Daemon,
    args: &ChatArgs,
    ask: Ask,
    title: Option<String>,
) -> anyhow::Result<(Session, bool)> {
    if let Some(account) = &args.account {
        check_account(&daemon.init, account)?;
    }
    if let Some(model) = &args.model {
        let account = args
            .account
            .as_deref()
            .unwrap_or(&daemon.init.default_account);
        check_model(&daemon.init, account, model, args.force)?;
    }
    if let Some(id) = &args.session {
        return Ok((daemon.session(id).await?, true));
    }
    let folder = workspace_root(args.workspace.as_ref())?;
    if !args.new {
        // The interactive chat goes on with a conversation someone typed, never with the
        // one-shot runs of a script; a one-shot run may go on with anything.
        let offered = |s: &SessionSummary| {
            matches!(ask, Ask::New) || s.origin != Some(SessionOrigin::Oneshot)
        };
        let newest = daemon
            .sessions_until(Some(&folder), |read| read.iter().any(offered))
            .await?
            .0
            .into_iter()
            .find(offered);
        if let Some(newest) = newest {
            let resume = match (args.continue_newest, ask) {
                (true, _) => true,
                (false, Ask::New) => false,
                (false, Ask::User) => ask_to_continue(&newest).await?,
            };
            if resume {
                return Ok((daemon.session(&newest.id).await?, true));
            }
        }
    }
    let session = daemon
        .call::<SessionCreate>(SessionCreateParams {
            title,
            workspace_root: Some(folder),
            account: args.account.clone(),
            model: args.model.clone(),
            origin: Some(match ask {
                Ask::User => SessionOrigin::Interactive,
                Ask::New => SessionOrigin::Oneshot,
            }),
            ..SessionCreateParams::default()
        })
        .await
        .map_err(|e| e.context("cannot create a session"))?;
    Ok((session, false))
}

/// `Continue "title" (…)? [Y/n]` on the terminal, before the line editor starts.
async fn ask_to_continue(newest: &SessionSummary) -> anyhow::Result<bool> {
    let when = newest
        .updated_at
        .get(..16)
        .unwrap_or(&newest.updated_at)
        .replace('T', " ");
    print!(
        "Continue this folder's last chat, “{}” ({when} UTC)? [Y/n] ",
        newest.title
    );
    use std::io::Write;
    std::io::stdout().flush()?;
    let answer = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    })
    .await??;
    let answer = answer.trim().to_lowercase();
    Ok(!(answer == "n" || answer == "no"))
}
