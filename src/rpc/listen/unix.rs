//! `--listen unix:PATH`: the same WebSocket protocol on a unix socket, for a daemon only its
//! owner can reach at all, whatever else runs on the machine.
//!
//! jsonrpsee's server accepts TCP listeners only, but its service is a tower service over
//! HTTP: the documented way to serve another stream (`Builder::to_service_builder`) is to
//! accept connections ourselves and hand each to `serve_with_graceful_shutdown` (hyper, with
//! upgrades) with a service built for it. Every connection goes through the same access layer
//! (the token is still required) and the same method table as on TCP.
//!
//! The socket is made `0600` in a folder made `0700`. A socket left by a daemon that died is
//! replaced; one a live daemon answers on is refused, as is a path that is not a socket.

use std::future::Future;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};

use jsonrpsee::server::{
    HttpBody, HttpRequest, HttpResponse, ServerHandle, StopHandle, serve_with_graceful_shutdown,
    stop_channel,
};

use super::ListenError;

/// The scheme of a unix socket's URL in `serve.json`: `ws+unix:///run/user/1000/s.sock`.
pub const URL_SCHEME: &str = "ws+unix://";

/// A bound unix socket, before it serves.
#[derive(Debug)]
pub struct UnixBound {
    listener: std::os::unix::net::UnixListener,
    file: SocketFile,
}

impl UnixBound {
    /// The socket's absolute path.
    pub fn path(&self) -> &Path {
        &self.file.path
    }

    /// `ws+unix://PATH`, as clients find it in `serve.json`.
    pub fn url(&self) -> String {
        url_of(self.path())
    }
}

/// The URL of the socket at `path`.
pub fn url_of(path: &Path) -> String {
    format!("{URL_SCHEME}{}", path.display())
}

/// The socket path a `ws+unix://` URL names; `None` for another URL.
pub fn path_of(url: &str) -> Option<&Path> {
    url.strip_prefix(URL_SCHEME).map(Path::new)
}

/// The socket file this daemon made; removed when dropped, if it is still the same file.
#[derive(Debug)]
pub struct SocketFile {
    path: PathBuf,
    /// Device and inode: another daemon's socket at the same path later is not ours to remove.
    identity: (u64, u64),
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        let ours = std::fs::symlink_metadata(&self.path)
            .is_ok_and(|meta| (meta.dev(), meta.ino()) == self.identity);
        if ours && let Err(e) = std::fs::remove_file(&self.path) {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot remove the socket");
        }
    }
}

/// Binds the socket at `path` (relative to the current folder if not absolute), creating its
/// folder `0700` when missing.
///
/// The socket is created with the process's umask set to `0177` for the one `bind` call, so
/// it is `0600` from its first instant; call this before other threads create files (the
/// daemon binds before its runtime starts).
pub fn bind(path: &str) -> Result<UnixBound, ListenError> {
    let failed = |reason: String| ListenError::Address {
        addr: format!("unix:{path}"),
        reason,
    };
    if path.is_empty() {
        return Err(failed("expected unix:PATH".into()));
    }
    let path = std::path::absolute(path).map_err(|e| failed(e.to_string()))?;
    if let Some(dir) = path.parent() {
        crate::private_files::create_dir_all(dir).map_err(|e| failed(e.to_string()))?;
    }
    clear_stale(&path)?;
    let before = rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o177));
    let bound = std::os::unix::net::UnixListener::bind(&path);
    rustix::process::umask(before);
    let listener = bound.map_err(|e| failed(e.to_string()))?;
    let meta = std::fs::symlink_metadata(&path).map_err(|e| failed(e.to_string()))?;
    let file = SocketFile {
        path,
        identity: (meta.dev(), meta.ino()),
    };
    // The umask made it 0600 already; this says so whatever the file system did.
    std::fs::set_permissions(&file.path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| failed(e.to_string()))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| failed(e.to_string()))?;
    Ok(UnixBound { listener, file })
}

/// Makes way for the socket at `path`: nothing there, or a socket nobody answers on (its
/// daemon died without removing it), which is removed. A live daemon's socket, or anything
/// that is not a socket, is refused.
fn clear_stale(path: &Path) -> Result<(), ListenError> {
    use std::os::unix::fs::FileTypeExt;
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(ListenError::Address {
                addr: format!("unix:{}", path.display()),
                reason: e.to_string(),
            });
        }
    };
    if !meta.file_type().is_socket() {
        return Err(ListenError::NotASocket(path.to_path_buf()));
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => Err(ListenError::SocketInUse(path.to_path_buf())),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            tracing::info!(path = %path.display(), "replacing a socket left by a daemon that ended");
            std::fs::remove_file(path).map_err(|e| ListenError::Address {
                addr: format!("unix:{}", path.display()),
                reason: format!("cannot remove the stale socket: {e}"),
            })
        }
        Err(e) => Err(ListenError::Address {
            addr: format!("unix:{}", path.display()),
            reason: e.to_string(),
        }),
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Accepts connections on `bound` until the returned handle is stopped, serving each with a
/// service `make` builds for it (given the stop handle its connection ends with). The socket
/// file goes when the returned [`SocketFile`] is dropped.
pub fn serve<S>(
    bound: UnixBound,
    make: impl Fn(StopHandle) -> S + Send + 'static,
) -> Result<(ServerHandle, SocketFile), ListenError>
where
    S: tower::Service<HttpRequest, Response = HttpResponse, Error = BoxError>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let UnixBound { listener, file } = bound;
    let listener = tokio::net::UnixListener::from_std(listener).map_err(ListenError::Server)?;
    let (stop, handle) = stop_channel();
    tokio::spawn(async move {
        let stopped = stop.clone().shutdown();
        tokio::pin!(stopped);
        loop {
            let stream = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        tracing::debug!(error = %e, "cannot accept a connection");
                        continue;
                    }
                },
                () = &mut stopped => break,
            };
            let service = HyperBody(make(stop.clone()));
            let stopping = stop.clone().shutdown();
            tokio::spawn(async move {
                if let Err(e) = serve_with_graceful_shutdown(stream, service, stopping).await {
                    tracing::debug!(error = %e, "a connection on the unix socket failed");
                }
            });
        }
    });
    Ok((handle, file))
}

/// jsonrpsee's service, taking hyper's request body: the body is boxed into jsonrpsee's own,
/// as its TCP server does before the HTTP middleware sees the request.
#[derive(Clone)]
struct HyperBody<S>(S);

impl<S> tower::Service<http::Request<hyper::body::Incoming>> for HyperBody<S>
where
    S: tower::Service<HttpRequest, Response = HttpResponse, Error = BoxError>,
    S::Future: Send + 'static,
{
    type Response = HttpResponse;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<HttpResponse, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<hyper::body::Incoming>) -> Self::Future {
        Box::pin(self.0.call(request.map(HttpBody::new)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn urls_name_the_socket_path() {
        let url = url_of(Path::new("/run/user/1/sidechat/s.sock"));
        assert_eq!(url, "ws+unix:///run/user/1/sidechat/s.sock");
        assert_eq!(
            path_of(&url),
            Some(Path::new("/run/user/1/sidechat/s.sock"))
        );
        assert_eq!(path_of("ws://127.0.0.1:1/"), None);
    }

    #[test]
    fn a_stale_socket_is_replaced_and_anything_else_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("private/s.sock");
        let text = path.to_str().unwrap();
        let first = bind(text).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!((mode(&path), mode(path.parent().unwrap())), (0o600, 0o700));
        // Bound and listening: a second daemon is refused, and the socket stays.
        let refused = bind(text).unwrap_err();
        assert!(matches!(refused, ListenError::SocketInUse(_)), "{refused}");
        assert!(path.exists());
        // Its daemon died without removing it (the listener closed, the file left behind).
        let UnixBound { listener, file } = first;
        drop(listener);
        std::mem::forget(file);
        let second = bind(text).unwrap();
        drop(second);
        assert!(!path.exists(), "a dropped socket file is removed");
        // A file that is not a socket is left alone.
        std::fs::write(&path, "mine").unwrap();
        let refused = bind(text).unwrap_err();
        assert!(matches!(refused, ListenError::NotASocket(_)), "{refused}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "mine");
    }
}
