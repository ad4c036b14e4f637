//! The method table: each native method parses its params and calls the runtime.

use jsonrpsee::RpcModule;
use jsonrpsee::types::{ErrorObjectOwned, Params};
use serde::de::DeserializeOwned;

use crate::protocol::*;
use crate::runtime::Runtime;

/// Every method `initialize` advertises besides the lifecycle ones.
pub const METHODS: &[&str] = &[
    "session/create",
    "session/list",
    "session/get",
    "session/update",
    "session/delete",
    "session/transcript",
    "session/budget",
    "session/cost",
    "session/fileDiff",
    "chat/send",
    "chat/stop",
    "chat/resume",
    "approval/respond",
    "interjection/cancel",
];

/// Params that must be present and well-formed.
fn required<T: DeserializeOwned>(params: &Params<'_>) -> Result<T, ErrorObjectOwned> {
    params.parse()
}

/// Params that may be absent entirely.
fn optional<T: DeserializeOwned + Default>(params: &Params<'_>) -> Result<T, ErrorObjectOwned> {
    Ok(params.parse::<Option<T>>()?.unwrap_or_default())
}

macro_rules! method {
    ($module:expr, $name:literal, |$rt:ident, $params:ident| $body:expr) => {
        $module
            .register_async_method($name, |raw, ctx, _| async move {
                let $rt: &Runtime = &ctx;
                let $params = raw;
                let outcome: Result<_, ErrorObjectOwned> = $body;
                outcome
            })
            .map(|_| ())
    };
}

pub fn method_table(runtime: Runtime) -> RpcModule<Runtime> {
    let mut module = RpcModule::new(runtime);
    let registered = [
        method!(module, "session/create", |rt, p| Ok(
            rt.create_session(optional::<SessionCreateParams>(&p)?)?
        )),
        method!(module, "session/list", |rt, p| Ok(
            rt.list_sessions(optional::<SessionListParams>(&p)?)?
        )),
        method!(module, "session/get", |rt, p| Ok(
            rt.get_session(&required::<SessionIdParams>(&p)?.session_id)?
        )),
        method!(module, "session/update", |rt, p| Ok(
            rt.update_session(required::<SessionUpdateParams>(&p)?)?
        )),
        method!(module, "session/delete", |rt, p| Ok(rt
            .delete_session(&required::<SessionIdParams>(&p)?.session_id)
            .await?)),
        method!(module, "session/transcript", |rt, p| Ok(
            rt.transcript(required::<SessionTranscriptParams>(&p)?)?
        )),
        method!(module, "session/budget", |rt, p| Ok(
            rt.budget(&required::<SessionIdParams>(&p)?.session_id)?
        )),
        method!(module, "session/cost", |rt, p| Ok(
            rt.cost(&required::<SessionIdParams>(&p)?.session_id)?
        )),
        method!(module, "session/fileDiff", |rt, p| Ok(
            rt.file_diff(required::<SessionFileDiffParams>(&p)?)?
        )),
        method!(module, "chat/send", |rt, p| Ok(rt
            .send(required::<ChatSendParams>(&p)?)
            .await?)),
        method!(module, "chat/stop", |rt, p| Ok(rt
            .stop(&required::<SessionIdParams>(&p)?.session_id)
            .await?)),
        method!(module, "chat/resume", |rt, p| Ok(rt
            .resume(&required::<SessionIdParams>(&p)?.session_id)
            .await?)),
        method!(module, "interjection/cancel", |rt, p| Ok(rt
            .cancel_interjection(
                &required::<InterjectionCancelParams>(&p)?.pending_id
            )?)),
        method!(module, "approval/respond", |rt, p| Ok(rt
            .respond_approval(required::<ApprovalRespondParams>(&p)?)
            .await?)),
    ];
    for outcome in registered {
        if let Err(e) = outcome {
            // Names are literals checked by the tests; a clash is a programming error.
            tracing::error!(error = %e, "method registered twice");
        }
    }
    module
}
