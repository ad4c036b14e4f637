//! The HTTP side both drivers share: one client per driver, the endpoint, the headers, the
//! request loop, and the redaction of keys from everything the user or the logs will see.
//!
//! A request is sent again only while that is safe, by the policy in [`super::retry`]: until
//! the first piece of the answer reached the caller.

use std::fmt;
use std::pin::pin;
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use reqwest::{Client, Response, Url};
use serde_json::Value;

use super::generator::{Emitter, generate};
use super::retry::{
    backoff, error_message, format_delay, is_retryable_status, redact, server_delay, status_reason,
};
use super::sse::{self, SseError, SseEvent};
use super::{HttpSettings, ModelEvent, ModelStream, ProviderError};

/// `base_url` with `path` appended to its path; a query string in the base URL is kept.
fn endpoint(base_url: &str, path: &str) -> Result<Url, ProviderError> {
    // The parse error never quotes its input, so a key in the URL cannot leak from here.
    let mut url = Url::parse(base_url.trim())
        .map_err(|e| ProviderError::Config(format!("invalid provider base URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(ProviderError::Config(
            "the provider base URL must start with http:// or https://".to_owned(),
        ));
    }
    let joined = format!("{}{path}", url.path().trim_end_matches('/'));
    url.set_path(&joined);
    Ok(url)
}

/// One HTTP client per driver, so connections are pooled across requests. No overall timeout:
/// a long answer must not be cut; stalls are caught by [`HttpSettings::stall_timeout`].
fn build_client(settings: &HttpSettings) -> Result<Client, ProviderError> {
    let builder = crate::http_client::builder().map_err(|e| {
        ProviderError::Config(format!("cannot set up TLS for the HTTP client: {e}"))
    })?;
    builder
        .connect_timeout(settings.connect_timeout)
        .build()
        .map_err(|e| {
            let detail = sse::error_chain(&e);
            ProviderError::Config(format!("cannot set up the HTTP client: {detail}"))
        })
}

/// A header value that carries a secret; marked sensitive so HTTP internals never print it.
fn secret_header(value: &str) -> Result<HeaderValue, ProviderError> {
    let mut header = HeaderValue::from_str(value).map_err(|_| {
        ProviderError::Config(
            "the API key contains characters that cannot be sent in an HTTP header".to_owned(),
        )
    })?;
    header.set_sensitive(true);
    Ok(header)
}

/// Turns one provider's server-sent events into [`ModelEvent`]s. A fresh decoder is used for
/// every attempt.
pub trait Decoder: Default + Send + 'static {
    /// Handles one event, appending what it produced to `out`. Returns true once the answer is
    /// complete.
    fn event(&mut self, event: &SseEvent, out: &mut Vec<ModelEvent>)
    -> Result<bool, ProviderError>;

    /// The stream ended without the provider's final event. Returns true (after appending the
    /// final events) when what arrived is nonetheless a complete answer.
    fn end(&mut self, out: &mut Vec<ModelEvent>) -> Result<bool, ProviderError>;
}

/// Feeds SSE `data` payloads to a decoder as a stream would, then ends it: what it produced,
/// and whether it finished (an error stops at the event that caused it).
#[cfg(test)]
pub(crate) fn decode_all<D: Decoder>(
    event_name: &str,
    payloads: &[&str],
) -> (Vec<ModelEvent>, Result<bool, ProviderError>) {
    let mut decoder = D::default();
    let mut out = Vec::new();
    for data in payloads {
        let event = SseEvent {
            event: event_name.to_owned().into(),
            data: (*data).into(),
        };
        match decoder.event(&event, &mut out) {
            Ok(false) => {}
            done => return (out, done),
        }
    }
    let end = decoder.end(&mut out);
    (out, end)
}

/// Where and how a driver sends its requests: one HTTP client, the endpoint and the fixed
/// headers (including the key). `Debug` shows neither the key nor the URL's query string.
pub struct Upstream {
    label: &'static str,
    client: Client,
    url: Url,
    headers: HeaderMap,
    settings: HttpSettings,
    /// Strings that must never appear in an error or notice (the API key, the URL's query).
    secrets: Vec<String>,
}

impl Upstream {
    /// `label` names the provider in notices, e.g. "Anthropic"; `path` is appended to the path
    /// of `base_url`.
    pub fn new(
        label: &'static str,
        base_url: &str,
        path: &str,
        settings: HttpSettings,
    ) -> Result<Self, ProviderError> {
        let url = endpoint(base_url, path)?;
        let secrets = url.query().map(str::to_owned).into_iter().collect();
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        Ok(Self {
            label,
            client: build_client(&settings)?,
            url,
            headers,
            settings,
            secrets,
        })
    }

    pub fn header(&mut self, name: HeaderName, value: HeaderValue) {
        self.headers.insert(name, value);
    }

    /// Adds a header carrying `secret` (formatted into `value`), which is then redacted from
    /// every error and notice.
    pub fn secret_header(
        &mut self,
        name: HeaderName,
        value: &str,
        secret: String,
    ) -> Result<(), ProviderError> {
        self.headers.insert(name, secret_header(value)?);
        self.secrets.push(secret);
        Ok(())
    }

    /// Sends `body` and streams the answer, decoded with `D`, retrying while that is safe.
    pub fn stream<D: Decoder>(&self, body: &Value) -> ModelStream {
        let exchange = Exchange {
            label: self.label,
            client: self.client.clone(),
            url: self.url.clone(),
            headers: self.headers.clone(),
            body: body.to_string().into_bytes(),
            settings: self.settings.clone(),
            secrets: self.secrets.clone(),
        };
        generate(move |mut out| async move { exchange.drive::<D>(&mut out).await })
    }
}

impl fmt::Debug for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Upstream")
            .field("label", &self.label)
            .field("url", &redact(self.url.as_str(), &self.secrets))
            .field(
                "has_api_key",
                &self.headers.values().any(HeaderValue::is_sensitive),
            )
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// One model request, possibly sent several times.
struct Exchange {
    label: &'static str,
    client: Client,
    url: Url,
    headers: HeaderMap,
    body: Vec<u8>,
    settings: HttpSettings,
    secrets: Vec<String>,
}

impl Exchange {
    async fn drive<D: Decoder>(&self, out: &mut Emitter) {
        let mut retry = 0;
        loop {
            let failure = match self.attempt(D::default(), out).await {
                Ok(()) => return,
                Err(failure) => failure,
            };
            match self.plan(&failure, retry) {
                Plan::Retry(delay, reason) => {
                    let notice = self.retry_notice(delay, &reason, retry);
                    tracing::warn!(provider = self.label, "{notice}");
                    out.emit(Ok(ModelEvent::Notice(notice))).await;
                    tokio::time::sleep(delay).await;
                    retry += 1;
                }
                Plan::GiveUp(note) => {
                    let error = self.give_up(failure.error, retry, note);
                    tracing::warn!(provider = self.label, "{error}");
                    out.emit(Err(error)).await;
                    return;
                }
            }
        }
    }

    fn plan(&self, failure: &Failure, retry: u32) -> Plan {
        let settings = &self.settings.retry;
        let Some(reason) = failure.reason.clone() else {
            return Plan::GiveUp(None);
        };
        if failure.output_sent || retry >= settings.max_retries {
            return Plan::GiveUp(None);
        }
        match failure.server_delay {
            Some(delay) if delay <= settings.max_retry_after => Plan::Retry(delay, reason),
            Some(delay) => Plan::GiveUp(Some(format!(
                "the provider asked to retry in {}",
                format_delay(delay)
            ))),
            None => Plan::Retry(backoff(settings, retry, rand::random::<f64>()), reason),
        }
    }

    fn retry_notice(&self, delay: Duration, reason: &str, retry: u32) -> String {
        let text = format!(
            "{}: retrying in {} ({reason}), retry {} of {}",
            self.label,
            format_delay(delay),
            retry + 1,
            self.settings.retry.max_retries
        );
        redact(&text, &self.secrets)
    }

    /// The error the caller sees: the last failure, saying how many attempts were made.
    fn give_up(&self, error: ProviderError, retries: u32, note: Option<String>) -> ProviderError {
        let mut notes: Vec<String> = note.into_iter().collect();
        if retries > 0 {
            notes.push(format!("gave up after {} attempts", retries + 1));
        }
        let annotate = |message: String| {
            let message = redact(&message, &self.secrets);
            if notes.is_empty() {
                message
            } else {
                format!("{message} ({})", notes.join("; "))
            }
        };
        match error {
            ProviderError::Http { status, message } => ProviderError::Http {
                status,
                message: annotate(message),
            },
            ProviderError::Connection(message) => ProviderError::Connection(annotate(message)),
            ProviderError::Stream(message) => ProviderError::Stream(annotate(message)),
            ProviderError::Config(message) => ProviderError::Config(annotate(message)),
            stalled @ ProviderError::Stalled(_) => stalled,
        }
    }

    /// One attempt: send, then forward decoded events until the answer is complete.
    async fn attempt<D: Decoder>(&self, mut decoder: D, out: &mut Emitter) -> Result<(), Failure> {
        let response = self.send().await?;
        let mut events = pin!(sse::response_events(response, self.settings.stall_timeout));
        let mut batch = Vec::new();
        let mut output_sent = false;
        loop {
            let step = match events.next().await {
                Some(Ok(event)) => decoder.event(&event, &mut batch).map_err(Failure::decoded),
                Some(Err(error)) => Err(Failure::lost(error)),
                None => match decoder.end(&mut batch) {
                    Ok(true) => Ok(true),
                    Ok(false) => Err(Failure::ended_early()),
                    Err(error) => Err(Failure::decoded(error)),
                },
            };
            output_sent |= !batch.is_empty();
            for event in batch.drain(..) {
                out.emit(Ok(event)).await;
            }
            match step {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(failure) => {
                    return Err(Failure {
                        output_sent,
                        ..failure
                    });
                }
            }
        }
    }

    /// Sends the request and checks that an event stream came back.
    async fn send(&self) -> Result<Response, Failure> {
        let request = self
            .client
            .post(self.url.clone())
            .headers(self.headers.clone())
            .body(self.body.clone());
        let stall = self.settings.stall_timeout;
        tracing::debug!("sending the request to the provider");
        let response = match tokio::time::timeout(stall, request.send()).await {
            Err(_) => return Err(Failure::lost(SseError::Stalled(sse::whole_seconds(stall)))),
            Ok(Err(error)) => return Err(Failure::connection(error)),
            Ok(Ok(response)) => response,
        };
        if !response.status().is_success() {
            return Err(self.rejected(response).await);
        }
        if is_json(&response) {
            let body = self.read_body(response).await;
            return Err(Failure::fatal(ProviderError::Stream(format!(
                "expected an event stream, the provider answered with JSON: {}",
                error_message(&body)
            ))));
        }
        Ok(response)
    }

    /// A non-success status: the provider's message, and whether and when to retry.
    async fn rejected(&self, response: Response) -> Failure {
        let status = response.status().as_u16();
        let headers = response.headers();
        let server_delay = server_delay(headers, SystemTime::now());
        // Anthropic's servers may override the usual rule either way.
        let should_retry = match headers.get("x-should-retry").map(HeaderValue::as_bytes) {
            Some(b"true") => true,
            Some(b"false") => false,
            _ => is_retryable_status(status),
        };
        let body = self.read_body(response).await;
        Failure {
            error: ProviderError::Http {
                status,
                message: error_message(&body),
            },
            reason: should_retry.then(|| format!("HTTP {status}: {}", status_reason(status))),
            server_delay,
            output_sent: false,
        }
    }

    /// The body of an error response; empty when it cannot be read in time.
    async fn read_body(&self, response: Response) -> String {
        match tokio::time::timeout(self.settings.stall_timeout, response.text()).await {
            Ok(Ok(body)) => body,
            _ => String::new(),
        }
    }
}

fn is_json(response: &Response) -> bool {
    response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("application/json"))
}

/// What went wrong in one attempt.
#[derive(Debug)]
struct Failure {
    error: ProviderError,
    /// Why a retry could help, for the notice; `None` when it could not.
    reason: Option<String>,
    /// The wait the provider asked for.
    server_delay: Option<Duration>,
    /// Part of the answer already reached the caller, so a retry would repeat it.
    output_sent: bool,
}

impl Failure {
    fn fatal(error: ProviderError) -> Self {
        Self {
            error,
            reason: None,
            server_delay: None,
            output_sent: false,
        }
    }

    fn retryable(error: ProviderError, reason: String) -> Self {
        Self {
            reason: Some(reason),
            ..Self::fatal(error)
        }
    }

    /// An error the decoder found in the stream: retried only when it is the provider saying it
    /// is busy or failing (Anthropic's `error` event).
    fn decoded(error: ProviderError) -> Self {
        match &error {
            ProviderError::Http { status, .. } if is_retryable_status(*status) => {
                let reason = format!("HTTP {status}: {}", status_reason(*status));
                Self::retryable(error, reason)
            }
            _ => Self::fatal(error),
        }
    }

    fn lost(error: SseError) -> Self {
        let reason = match &error {
            SseError::Stalled(seconds) => format!("no response for {seconds}s"),
            SseError::Transport(_) => "connection lost".to_owned(),
            SseError::Malformed(_) => return Self::fatal(error.into()),
        };
        Self::retryable(error.into(), reason)
    }

    fn ended_early() -> Self {
        Self::retryable(
            ProviderError::Stream("the stream ended before the answer was complete".to_owned()),
            "stream ended early".to_owned(),
        )
    }

    fn connection(error: reqwest::Error) -> Self {
        let builder = error.is_builder();
        // `without_url` keeps the endpoint (and any query string) out of the message.
        let detail = sse::error_chain(&error.without_url());
        if builder {
            Self::fatal(ProviderError::Config(format!(
                "cannot build the request: {detail}"
            )))
        } else {
            Self::retryable(
                ProviderError::Connection(detail),
                "connection failed".to_owned(),
            )
        }
    }
}

enum Plan {
    Retry(Duration, String),
    /// With a note on why, when it is not obvious from the error.
    GiveUp(Option<String>),
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    #[test]
    fn endpoints_append_to_the_base_path() {
        let url = |base| endpoint(base, "/chat/completions").map(|u| u.to_string());
        assert_eq!(
            url("https://api.openai.com/v1/"),
            Ok("https://api.openai.com/v1/chat/completions".to_owned())
        );
        assert_eq!(
            url("http://localhost:11434/v1?api-version=2"),
            Ok("http://localhost:11434/v1/chat/completions?api-version=2".to_owned())
        );
        assert!(matches!(
            url("ftp://example.com"),
            Err(ProviderError::Config(_))
        ));
        assert!(matches!(url("not a url"), Err(ProviderError::Config(_))));
    }

    #[test]
    fn secret_headers_are_sensitive() {
        let header = secret_header("sk-1");
        assert!(header.as_ref().is_ok_and(HeaderValue::is_sensitive));
        assert!(matches!(
            secret_header("bad\nkey"),
            Err(ProviderError::Config(_))
        ));
    }
}
