//! Who may connect: a tower layer in front of jsonrpsee's server that refuses, before any
//! WebSocket is opened, a request
//!
//! - without the daemon's token (`Authorization: Bearer TOKEN`, or `?token=TOKEN` for a
//!   browser, which cannot set headers on a WebSocket): 401;
//! - whose `Host` is not the address the daemon listens on: 403. A web page's script can reach
//!   a loopback port through a name of its own that it points at 127.0.0.1 (DNS rebinding); its
//!   requests then carry that name as `Host`;
//! - from a browser page (`Origin`) other than the daemon's own origin: 403.
//!
//! The chat page's script and stylesheet (`--web`, [`super::page`]) pass the `Host` and
//! `Origin` checks alone ([`Access::check_place`]): the browser fetches them without the token.
//!
//! A refusal is logged with its reason and path, never the token or the query that may hold
//! it; it costs one comparison, so failed attempts never slow other clients.

use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use http::{HeaderMap, StatusCode, header};
use jsonrpsee::server::{HttpBody, HttpRequest, HttpResponse};

/// The checks, shared by every connection.
#[derive(Debug, Clone)]
pub struct Access {
    token: String,
    /// The `Host` values that name the listening address; `None` accepts any (a daemon
    /// listening on every interface, with `--allow-remote`, has no one name).
    hosts: Option<Vec<String>>,
}

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("no token")]
    NoToken,
    #[error("wrong token")]
    WrongToken,
    #[error("Host is not the listening address")]
    Host,
    #[error("Origin is not the daemon's own")]
    Origin,
}

impl Refusal {
    fn status(self) -> StatusCode {
        match self {
            Refusal::NoToken | Refusal::WrongToken => StatusCode::UNAUTHORIZED,
            Refusal::Host | Refusal::Origin => StatusCode::FORBIDDEN,
        }
    }
}

impl Access {
    pub fn new(token: String, hosts: Option<Vec<String>>) -> Self {
        let hosts = hosts.map(|hosts| hosts.iter().map(|h| h.to_ascii_lowercase()).collect());
        Self { token, hosts }
    }

    /// Whether a request with these headers and query may connect.
    pub fn check(&self, headers: &HeaderMap, query: Option<&str>) -> Result<(), Refusal> {
        self.check_place(headers)?;
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|h| h.to_str().ok())
            .and_then(|h| h.strip_prefix("Bearer "));
        let queried = query
            .into_iter()
            .flat_map(|q| q.split('&'))
            .find_map(|pair| pair.strip_prefix("token="));
        match bearer.or(queried) {
            None => Err(Refusal::NoToken),
            Some(given) if same(given.trim().as_bytes(), self.token.as_bytes()) => Ok(()),
            Some(_) => Err(Refusal::WrongToken),
        }
    }

    /// The `Host` and `Origin` checks alone: for the chat page's script and stylesheet, which
    /// the browser fetches without the token (they hold nothing secret), but only through the
    /// daemon's own address.
    pub fn check_place(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .map(str::to_ascii_lowercase)
            .ok_or(Refusal::Host)?;
        if let Some(hosts) = &self.hosts
            && !hosts.contains(&host)
        {
            return Err(Refusal::Host);
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let own = [format!("http://{host}"), format!("https://{host}")];
            let origin = origin.to_str().map(str::to_ascii_lowercase);
            if !origin.is_ok_and(|origin| own.contains(&origin)) {
                return Err(Refusal::Origin);
            }
        }
        Ok(())
    }
}

/// Compares in time that depends only on the lengths, so a wrong token's answer says nothing
/// about how much of it was right.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

/// The layer for `jsonrpsee::server::Builder::set_http_middleware`.
#[derive(Clone)]
pub struct AccessLayer(pub Arc<Access>);

impl<S> tower::Layer<S> for AccessLayer {
    type Service = Guarded<S>;

    fn layer(&self, inner: S) -> Guarded<S> {
        Guarded {
            access: self.0.clone(),
            inner,
        }
    }
}

/// jsonrpsee's service behind the checks.
#[derive(Clone)]
pub struct Guarded<S> {
    access: Arc<Access>,
    inner: S,
}

type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

impl<S> tower::Service<HttpRequest> for Guarded<S>
where
    S: tower::Service<HttpRequest, Response = HttpResponse, Error = BoxError>,
    S::Future: Send + 'static,
{
    type Response = HttpResponse;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<HttpResponse, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: HttpRequest) -> Self::Future {
        match self.access.check(request.headers(), request.uri().query()) {
            Ok(()) => Box::pin(self.inner.call(request)),
            Err(refusal) => Box::pin(std::future::ready(Ok(refused(
                refusal,
                request.uri().path(),
            )))),
        }
    }
}

/// The answer to a refused request, logged with its reason and path (never the query, which
/// may hold the token).
pub fn refused(refusal: Refusal, path: &str) -> HttpResponse {
    tracing::warn!(reason = %refusal, path, "refused a connection");
    let mut response = HttpResponse::new(HttpBody::from(format!("{refusal}\n")));
    *response.status_mut() = refusal.status();
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(name.clone(), value.parse().unwrap());
        }
        map
    }

    #[test]
    fn token_host_and_origin_are_checked_in_that_order_of_importance() {
        let access = Access::new("t0k".into(), Some(vec!["127.0.0.1:9".into()]));
        let host = (header::HOST, "127.0.0.1:9");
        let bearer = (header::AUTHORIZATION, "Bearer t0k");
        let cases = [
            (
                headers(std::slice::from_ref(&host)),
                None,
                Err(Refusal::NoToken),
            ),
            (
                headers(&[host.clone(), (header::AUTHORIZATION, "Bearer t0x")]),
                None,
                Err(Refusal::WrongToken),
            ),
            (headers(&[host.clone(), bearer.clone()]), None, Ok(())),
            (
                headers(std::slice::from_ref(&host)),
                Some("a=1&token=t0k"),
                Ok(()),
            ),
            (
                headers(std::slice::from_ref(&host)),
                Some("token=t0"),
                Err(Refusal::WrongToken),
            ),
            (
                headers(&[(header::HOST, "evil.example:9"), bearer.clone()]),
                None,
                Err(Refusal::Host),
            ),
            (
                headers(std::slice::from_ref(&bearer)),
                None,
                Err(Refusal::Host),
            ),
            (
                headers(&[
                    host.clone(),
                    bearer.clone(),
                    (header::ORIGIN, "http://127.0.0.1:9"),
                ]),
                None,
                Ok(()),
            ),
            (
                headers(&[
                    host.clone(),
                    bearer,
                    (header::ORIGIN, "http://evil.example"),
                ]),
                None,
                Err(Refusal::Origin),
            ),
        ];
        let got: Vec<_> = cases
            .iter()
            .map(|(headers, query, _)| access.check(headers, *query))
            .collect();
        let expected: Vec<_> = cases.iter().map(|(_, _, want)| *want).collect();
        assert_eq!(got, expected);
    }
}
