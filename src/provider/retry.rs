//! When a streamed model request is tried again, and after how long.
//!
//! A request may be retried only until the first piece of the answer reached the caller: after
//! that, a retry would repeat text the user already saw, so a failure ends the stream and the
//! caller keeps the partial answer. Before that point, rate limits, overload, server errors and
//! lost connections are retried with the delay the provider asked for, or with an exponential
//! backoff.
//!
//! The request loop that follows this policy is [`super::upstream::Upstream`]'s.

use std::time::{Duration, SystemTime};

use reqwest::header::HeaderMap;
use serde_json::Value;

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
/// `retry-after` as seconds or as an HTTP date (any of the three forms HTTP allows); a date
/// already past asks for no wait.
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
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

fn seconds_to_duration(seconds: f64) -> Option<Duration> {
    Duration::try_from_secs_f64(seconds).ok()
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

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use std::time::UNIX_EPOCH;

    use reqwest::header::{HeaderName, HeaderValue};

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
    fn retry_after_as_an_http_date_waits_until_then() {
        let now = UNIX_EPOCH + NOW;
        let delay = |value: &'static str| server_delay(&headers(&[("retry-after", value)]), now);
        // IMF-fixdate, and the two obsolete forms HTTP recipients must still read.
        assert_eq!(
            delay("Sun, 06 Nov 1994 08:49:49 GMT"),
            Some(Duration::from_secs(12))
        );
        assert_eq!(
            delay("Sunday, 06-Nov-94 08:50:37 GMT"),
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            delay("Sun Nov  6 08:49:38 1994"),
            Some(Duration::from_secs(1))
        );
        assert_eq!(
            delay("Tue, 29 Feb 2028 23:59:59 GMT"),
            Some(Duration::from_secs(1_835_481_599) - NOW)
        );
    }

    #[test]
    fn retry_after_a_date_already_past_waits_for_nothing() {
        let now = UNIX_EPOCH + NOW;
        let past = headers(&[("retry-after", "Sun, 06 Nov 1994 08:00:00 GMT")]);
        assert_eq!(server_delay(&past, now), Some(Duration::ZERO));
        let epoch = headers(&[("retry-after", "Thu, 01 Jan 1970 00:00:00 GMT")]);
        assert_eq!(server_delay(&epoch, now), Some(Duration::ZERO));
    }

    #[test]
    fn retry_after_that_is_no_date_asks_for_no_wait() {
        let now = UNIX_EPOCH + NOW;
        for value in [
            "Sun, 06 Nov 1994 08:49:37 UTC",
            "Sun, 06 Foo 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 25:49:37 GMT",
            "yesterday",
        ] {
            let h = headers(&[("retry-after", value)]);
            assert_eq!(server_delay(&h, now), None, "{value}");
        }
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
}
