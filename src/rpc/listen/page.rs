//! `serve --listen ADDR --web`: the chat page, served from the daemon's own address so that the
//! page reaches the daemon at its own origin (the one `Origin` the access checks admit).
//!
//! The page is the VS Code extension's chat page with a small adapter that plays the host's
//! part over the WebSocket (`editors/web`). Its built files are committed and compiled into the
//! binary, so `cargo install` needs no Node.
//!
//! - `GET /` (the page) needs the token in its query, as the WebSocket does: the page takes it
//!   from its own address. A page opened without it gets 401 and a line saying why.
//! - `GET /app.js` and `/app.css` hold nothing secret and are fetched by the browser without
//!   the token; they are still served only through the daemon's own `Host` and `Origin`.
//! - Any other `GET` is 404; WebSocket upgrades and everything else go on to the server.
//!
//! Without `--web` this layer passes every request on, so nothing is served over plain HTTP.
//! Nothing here logs a request's query, which holds the token.

use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use http::{HeaderValue, Method, StatusCode, header};
use jsonrpsee::server::{HttpBody, HttpRequest, HttpResponse};

use super::access::{self, Access};

/// One file of the page.
struct Asset {
    path: &'static str,
    content_type: &'static str,
    body: &'static [u8],
    /// Whether fetching it needs the token (the page itself), or only the daemon's own address.
    needs_token: bool,
}

/// What the page's own address may load: its script, its stylesheet, images inlined as `data:`
/// (pasted screenshots), and the daemon's WebSocket. Nothing inline, nothing from elsewhere, and
/// no other site may frame it.
const PAGE_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; font-src 'self'; connect-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

const ASSETS: [Asset; 3] = [
    Asset {
        path: "/",
        content_type: "text/html; charset=utf-8",
        body: include_bytes!("../../../editors/web/dist/index.html"),
        needs_token: true,
    },
    Asset {
        path: "/app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../../../editors/web/dist/app.js"),
        needs_token: false,
    },
    Asset {
        path: "/app.css",
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("../../../editors/web/dist/app.css"),
        needs_token: false,
    },
];

/// The layer for `jsonrpsee::server::Builder::set_http_middleware`, in front of the access
/// checks; `serving` is false without `--web`.
#[derive(Clone)]
pub struct PageLayer {
    pub access: Arc<Access>,
    pub serving: bool,
}

impl<S> tower::Layer<S> for PageLayer {
    type Service = Page<S>;

    fn layer(&self, inner: S) -> Page<S> {
        Page {
            layer: self.clone(),
            inner,
        }
    }
}

/// The server behind the page.
#[derive(Clone)]
pub struct Page<S> {
    layer: PageLayer,
    inner: S,
}

type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

impl<S> tower::Service<HttpRequest> for Page<S>
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
        let fetch = self.layer.serving
            && request.method() == Method::GET
            && !jsonrpsee::server::ws::is_upgrade_request(&request);
        if !fetch {
            return Box::pin(self.inner.call(request));
        }
        let response = serve(&self.layer.access, &request);
        Box::pin(std::future::ready(Ok(response)))
    }
}

/// The answer to a `GET` of the page or one of its files.
fn serve(access: &Access, request: &HttpRequest) -> HttpResponse {
    let path = request.uri().path();
    let Some(asset) = ASSETS.iter().find(|a| a.path == path) else {
        return plain(StatusCode::NOT_FOUND, "not found\n");
    };
    let allowed = match asset.needs_token {
        true => access.check(request.headers(), request.uri().query()),
        false => access.check_place(request.headers()),
    };
    if let Err(refusal) = allowed {
        return access::refused(refusal, path);
    }
    let mut response = HttpResponse::new(HttpBody::from(asset.body.to_vec()));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(asset.content_type),
    );
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(asset.body.len()));
    // The page's address holds the token: never kept in a cache, never sent on as a referrer.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(PAGE_POLICY),
    );
    response
}

fn plain(status: StatusCode, text: &'static str) -> HttpResponse {
    let mut response = HttpResponse::new(HttpBody::from(text));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn the_page_names_exactly_the_files_that_are_served() {
        let html = std::str::from_utf8(ASSETS[0].body).unwrap();
        let referenced: Vec<&str> = ASSETS[1..]
            .iter()
            .filter(|a| html.contains(&format!("\"{}\"", a.path)))
            .map(|a| a.path)
            .collect();
        assert_eq!(referenced, vec!["/app.js", "/app.css"]);
    }
}
