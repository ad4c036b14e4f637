//! Sending a streamed model request, and retrying it while that is still safe.
//!
//! A request may be retried only until the first piece of the answer reached the caller: after
//! that, a retry would repeat text the user already saw, so a failure ends the stream and the
//! caller keeps the partial answer. Before that point, rate limits, overload, server errors and
//! lost connections are retried with the delay the provider asked for, or with an exponential
//! backoff.
//!
//! [`Upstream`] is the HTTP side both drivers share: the client, the endpoint, the headers, the
//! request loop, and the redaction of keys from everything the user or the logs will see.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::{Stream, StreamExt};
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use reqwest::{Client, Response, Url};
use serde_json::Value;

use super::sse::{self, SseError, SseEvent};
use super::{HttpSettings, ModelEvent, ModelStream, ProviderError};
use crate::util::lock;

/// When and how often a failed request is tried again.
#[derive(Debug, Clone, PartialEq)]
pub struct RetrySettings {
    /// Retries after the first attempt; 0 disables retrying.
    pub max_retries: u32,
    /// Backoff before the first retry; doubles for each further retry.
    pub base_delay: Duration,
    /// Upper bound of the backoff.
    pub max_delay: Duration,
    /// The longest wait a provider may ask for with `retry-after`; when it asks for more, the
    /// request fails at once rather than holding the run for minutes.
    pub max_retry_after: Duration,
}

impl Default for RetrySettings {
    fn default() -> Self {
        Self {
            max_retries: 2,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(8),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

/// Statuses that say "try again later" rather than "this request is wrong".
pub fn is_retryable_status(status: u16) -> bool {
    matches!(status, 408 | 409 | 429) || (500..=599).contains(&status)
}

/// A few words on what a status means, for notices and errors.
pub fn status_reason(status: u16) -> &'static str {
    match status {
        400 => "bad request",
        401 => "unauthorized, check the API key",
        403 => "forbidden",
        404 => "not found",
        408 => "request timeout",
        409 => "conflict",
        413 => "request too large",
        429 => "rate limited",
        502 => "bad gateway",
        503 => "service unavailable",
        504 => "gateway timeout",
        529 => "overloaded",
        500..=599 => "server error",
        _ => "request failed",
    }
}

/// The wait the provider asked for: `retry-after-ms` (milliseconds, more precise) first, then
/// `retry-after` as seconds or as an HTTP date.
pub fn server_delay(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(millis) = header("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        return seconds_to_duration(millis / 1000.0);
    }
    let value = header("retry-after")?;
    if let Ok(seconds) = value.parse::<f64>() {
        return seconds_to_duration(seconds);
    }
    let at = parse_http_date(value)?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

fn seconds_to_duration(seconds: f64) -> Option<Duration> {
    Duration::try_from_secs_f64(seconds).ok()
}

/// Parses an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), the only date form HTTP servers
/// may send today.
pub fn parse_http_date(text: &str) -> Option<SystemTime> {
    let parts: Vec<&str> = text.split_whitespace().collect();
    let [_weekday, day, month, year, time, "GMT"] = parts.as_slice() else {
        return None;
    };
    let month = match *month {
        "Jan" => 1,
        "Feb" => 2,
        "Mar" => 3,
        "Apr" => 4,
        "May" => 5,
        "Jun" => 6,
        "Jul" => 7,
        "Aug" => 8,
        "Sep" => 9,
        "Oct" => 10,
        "Nov" => 11,
        "Dec" => 12,
        _ => return None,
    };
    let day: i64 = day.parse().ok().filter(|d| (1..=31).contains(d))?;
    let year: i64 = year.parse().ok()?;
    let clock: Vec<i64> = time
        .split(':')
        .map(|part| part.parse().ok())
        .collect::<Option<_>>()?;
    let [hour, minute, second] = clock.as_slice() else {
        return None;
    };
    if *hour > 23 || *minute > 59 || *second > 60 {
        return None;
    }
    let seconds = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second;
    Some(UNIX_EPOCH + Duration::from_secs(u64::try_from(seconds).ok()?))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let day_of_year = (153 * (month + if month > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// Exponential backoff for the retry numbered `retry` (0 for the first). `jitter` in `[0, 1)`
/// shortens the delay by up to a quarter, so clients that failed together do not return
/// together.
pub fn backoff(settings: &RetrySettings, retry: u32, jitter: f64) -> Duration {
    let factor = 2f64.powi(i32::try_from(retry).unwrap_or(i32::MAX));
    let delay = settings
        .base_delay
        .mul_f64(factor.min(1e6))
        .min(settings.max_delay);
    delay.mul_f64(1.0 - 0.25 * jitter.clamp(0.0, 1.0))
}

/// A delay as a person would say it: `1s`, `0.5s`, `12s`.
pub fn format_delay(delay: Duration) -> String {
    let seconds = delay.as_secs_f64();
    let text = if seconds >= 10.0 {
        format!("{seconds:.0}")
    } else if seconds >= 1.0 {
        format!("{seconds:.1}")
    } else {
        format!("{seconds:.2}")
    };
    let text = if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        &text
    };
    format!("{text}s")
}

/// The provider's own words from an error body: `{"error": {"type", "message"}}` for both
/// providers, a bare string for some compatible servers, else the body itself, shortened.
pub fn error_message(body: &str) -> String {
    const LIMIT: usize = 500;
    if let Ok(json) = serde_json::from_str::<Value>(body) {
        let error = json.get("error").unwrap_or(&json);
        if let Some(text) = error.as_str() {
            return text.to_owned();
        }
        let text = |key: &str| error.get(key).and_then(Value::as_str);
        match (text("type"), text("message")) {
            (Some(kind), Some(message)) => return format!("{kind}: {message}"),
            (None, Some(message)) => return message.to_owned(),
            _ => {}
        }
    }
    let body = body.trim();
    if body.is_empty() {
        return "no details given".to_owned();
    }
    match body.char_indices().nth(LIMIT) {
        Some((cut, _)) => format!("{}…", &body[..cut]),
        None => body.to_owned(),
    }
}

/// Removes secrets and URL query strings (which may carry keys) from text bound for the user or
/// the logs.
pub fn redact(text: &str, secrets: &[String]) -> String {
    let mut text = strip_query_strings(text);
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        text = text.replace(secret.as_str(), "[redacted]");
    }
    text
}

fn strip_query_strings(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(scheme) = rest.find("://") {
        let end = rest[scheme..]
            .find(|c: char| c.is_whitespace() || matches!(c, ')' | '"' | '\'' | '>' | ']'))
            .map_or(rest.len(), |offset| scheme + offset);
        let url = &rest[..end];
        match url[scheme..].find('?') {
            Some(query) => out.push_str(&url[..scheme + query]),
            None => out.push_str(url),
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

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

type Item = Result<ModelEvent, ProviderError>;

/// Items a [`generate`]d body may emit before the stream's reader takes them.
const QUEUED: usize = 16;

type Queue = Arc<Mutex<VecDeque<Item>>>;

/// The sending half of a [`generate`]d stream.
struct Emitter {
    queue: Queue,
}

impl Emitter {
    async fn emit(&mut self, item: Item) {
        let full = {
            let mut queue = lock(&self.queue);
            queue.push_back(item);
            queue.len() >= QUEUED
        };
        if full {
            // The stream hands out what is queued before it polls the body again.
            YieldOnce(false).await;
        }
    }
}

/// Pending once, then ready. No waker is needed: the body runs inside the stream's own
/// `poll_next`, which returns a queued item instead of waiting.
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            Poll::Pending
        }
    }
}

/// A stream written as straight-line async code: `body` emits items and the stream ends when it
/// returns. Nothing runs until the stream is polled and dropping the stream cancels `body`
/// (closing the HTTP connection), so no task is spawned and none can leak. The body is polled
/// by the stream itself, so handing an item over is a push onto a queue, with no channel and no
/// wake-up.
fn generate<F, Fut>(body: F) -> ModelStream
where
    F: FnOnce(Emitter) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let queue = Queue::default();
    let producer = body(Emitter {
        queue: queue.clone(),
    });
    Box::pin(Generated {
        body: Some(Box::pin(producer)),
        queue,
    })
}

struct Generated<Fut> {
    /// `None` once the body has returned.
    body: Option<Pin<Box<Fut>>>,
    queue: Queue,
}

impl<Fut: Future<Output = ()>> Stream for Generated<Fut> {
    type Item = Item;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Item>> {
        let this = self.get_mut();
        loop {
            if let Some(item) = lock(&this.queue).pop_front() {
                return Poll::Ready(Some(item));
            }
            let Some(body) = this.body.as_mut() else {
                return Poll::Ready(None);
            };
            match body.as_mut().poll(cx) {
                Poll::Ready(()) => this.body = None,
                Poll::Pending if lock(&this.queue).is_empty() => return Poll::Pending,
                Poll::Pending => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| (HeaderName::from_static(k), HeaderValue::from_static(v)))
            .collect()
    }

    const NOW: Duration = Duration::from_secs(784_111_777); // Sun, 06 Nov 1994 08:49:37 GMT

    #[test]
    fn retryable_statuses() {
        for status in [408, 409, 429, 500, 502, 503, 504, 529] {
            assert!(is_retryable_status(status), "{status}");
        }
        for status in [400, 401, 403, 404, 413, 422] {
            assert!(!is_retryable_status(status), "{status}");
        }
    }

    #[test]
    fn retry_after_ms_wins_over_retry_after() {
        let now = UNIX_EPOCH + NOW;
        let h = headers(&[("retry-after-ms", "1500"), ("retry-after", "7")]);
        assert_eq!(server_delay(&h, now), Some(Duration::from_millis(1500)));
        let h = headers(&[("retry-after", "7")]);
        assert_eq!(server_delay(&h, now), Some(Duration::from_secs(7)));
        let h = headers(&[("retry-after", "0.5")]);
        assert_eq!(server_delay(&h, now), Some(Duration::from_millis(500)));
        assert_eq!(server_delay(&headers(&[]), now), None);
        assert_eq!(
            server_delay(&headers(&[("retry-after", "soon")]), now),
            None
        );
        assert_eq!(server_delay(&headers(&[("retry-after", "-3")]), now), None);
    }

    #[test]
    fn retry_after_as_http_date() {
        let now = UNIX_EPOCH + NOW;
        let h = headers(&[("retry-after", "Sun, 06 Nov 1994 08:49:49 GMT")]);
        assert_eq!(server_delay(&h, now), Some(Duration::from_secs(12)));
        let past = headers(&[("retry-after", "Sun, 06 Nov 1994 08:00:00 GMT")]);
        assert_eq!(server_delay(&past, now), Some(Duration::ZERO));
    }

    #[test]
    fn http_dates() {
        assert_eq!(
            parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(UNIX_EPOCH + NOW)
        );
        assert_eq!(
            parse_http_date("Thu, 01 Jan 1970 00:00:00 GMT"),
            Some(UNIX_EPOCH)
        );
        assert_eq!(
            parse_http_date("Tue, 29 Feb 2028 23:59:59 GMT"),
            Some(UNIX_EPOCH + Duration::from_secs(1_835_481_599))
        );
        assert_eq!(parse_http_date("Sun, 06 Nov 1994 08:49:37 UTC"), None);
        assert_eq!(parse_http_date("Sun, 06 Foo 1994 08:49:37 GMT"), None);
        assert_eq!(parse_http_date("Sun, 06 Nov 1994 25:49:37 GMT"), None);
        assert_eq!(parse_http_date("yesterday"), None);
    }

    #[test]
    fn backoff_doubles_up_to_the_cap_and_jitter_only_shortens() {
        let settings = RetrySettings::default();
        let delays: Vec<_> = (0..6).map(|n| backoff(&settings, n, 0.0)).collect();
        let ms = |ms| Duration::from_millis(ms);
        assert_eq!(
            delays,
            vec![ms(500), ms(1000), ms(2000), ms(4000), ms(8000), ms(8000)]
        );
        assert_eq!(backoff(&settings, 0, 1.0), ms(375));
        assert_eq!(backoff(&settings, 100, 0.0), ms(8000));
    }

    #[test]
    fn delays_read_naturally() {
        assert_eq!(format_delay(Duration::from_secs(1)), "1s");
        assert_eq!(format_delay(Duration::from_millis(500)), "0.5s");
        assert_eq!(format_delay(Duration::from_millis(1500)), "1.5s");
        assert_eq!(format_delay(Duration::from_millis(375)), "0.38s");
        assert_eq!(format_delay(Duration::from_secs(60)), "60s");
    }

    #[test]
    fn provider_error_messages() {
        let anthropic =
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        assert_eq!(error_message(anthropic), "overloaded_error: Overloaded");
        let openai = r#"{"error":{"message":"Rate limit reached","type":"requests","code":null}}"#;
        assert_eq!(error_message(openai), "requests: Rate limit reached");
        assert_eq!(
            error_message(r#"{"error":"model not found"}"#),
            "model not found"
        );
        assert_eq!(error_message("  Bad Gateway\n"), "Bad Gateway");
        assert_eq!(error_message(""), "no details given");
        assert_eq!(error_message(&"x".repeat(600)).chars().count(), 501);
    }

    #[test]
    fn redaction_removes_secrets_and_query_strings() {
        let secrets = vec!["sk-secret".to_owned(), String::new()];
        assert_eq!(
            redact(
                "failed for url (https://h.example/v1?key=abc&x=1): sk-secret rejected",
                &secrets
            ),
            "failed for url (https://h.example/v1): [redacted] rejected"
        );
        assert_eq!(redact("plain text? yes", &secrets), "plain text? yes");
    }

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

    #[tokio::test]
    async fn generated_streams_keep_order_past_the_queue_and_cancel_on_drop() {
        let stream = generate(|mut out| async move {
            for i in 0..100 {
                out.emit(Ok(ModelEvent::TextDelta(i.to_string()))).await;
                if i % 7 == 0 {
                    tokio::task::yield_now().await;
                }
            }
        });
        let items: Vec<_> = stream.collect().await;
        let expected: Vec<_> = (0..100)
            .map(|i| Ok(ModelEvent::TextDelta(i.to_string())))
            .collect();
        assert_eq!(items, expected);

        let started = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = started.clone();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let mut stream = generate(|mut out| async move {
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
            out.emit(Ok(ModelEvent::TextDelta("a".into()))).await;
            let _keep = tx;
            std::future::pending::<()>().await;
        });
        assert!(!started.load(std::sync::atomic::Ordering::SeqCst));
        assert_eq!(
            stream.next().await,
            Some(Ok(ModelEvent::TextDelta("a".into())))
        );
        drop(stream);
        // Dropping the stream dropped the body, and with it the sender.
        assert!(rx.await.is_err());
    }

    #[tokio::test]
    async fn generated_streams_end_when_the_body_returns() {
        let stream = generate(|mut out| async move {
            out.emit(Ok(ModelEvent::TextDelta("a".into()))).await;
            out.emit(Err(ProviderError::Stalled(1))).await;
        });
        let items: Vec<_> = stream.collect().await;
        assert_eq!(
            items,
            vec![
                Ok(ModelEvent::TextDelta("a".into())),
                Err(ProviderError::Stalled(1))
            ]
        );
    }
}
