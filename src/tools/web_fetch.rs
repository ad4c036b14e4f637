//! `web_fetch {url}`: one web page for the model, as Markdown.
//!
//! A GET through the project's HTTP client (`crate::http_client`): http and https only, at
//! most [`MAX_REDIRECTS`] redirects, [`TIMEOUT`] in all, [`MAX_READ`] read. HTML becomes
//! Markdown, other text is returned as it is, anything else is refused; the result is cut at
//! [`MAX_RESULT`] bytes, saying so.
//!
//! The model must not reach this machine or the user's network through it: every address a
//! host resolves to, at every hop, is checked, and one that is loopback, private, link-local,
//! unique-local or unspecified refuses the fetch unless the host is listed in
//! `[tools.web_fetch] allow_hosts`. The connection is then made to the addresses checked
//! (the client's resolver is overridden for the host), so a second DNS answer cannot swap in
//! another address between the check and the connection.
//!
//! HTML is converted with `htmd`: a port of turndown.js on html5ever (the HTML parsing
//! algorithm browsers use, so broken markup reads as a browser reads it), maintained and
//! released regularly, and it can skip whole elements (scripts, styles, the head); `html2md` is older, and
//! its last releases lag its parser's.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};

use super::ToolOutcome;
use crate::provider::ToolSpec;

/// The tool's name.
pub const NAME: &str = "web_fetch";
/// Most redirects one fetch follows.
pub const MAX_REDIRECTS: usize = 5;
/// The whole fetch, redirects included.
pub const TIMEOUT: Duration = Duration::from_secs(20);
/// Most bytes of a response body read.
pub const MAX_READ: usize = 5 * 1024 * 1024;
/// Most bytes of text given to the model.
pub const MAX_RESULT: usize = 100_000;

/// `[tools.web_fetch]` of the config file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings {
    /// Hosts (lower case) that may resolve to local or private addresses.
    pub allow_hosts: Vec<String>,
}

impl Settings {
    fn allows(&self, host: &str) -> bool {
        self.allow_hosts
            .iter()
            .any(|h| h.eq_ignore_ascii_case(host))
    }
}

pub fn spec() -> ToolSpec {
    ToolSpec {
        name: NAME.to_string(),
        description: "Fetch a web page (http or https) and return it as Markdown (other text as it is). Needs the user's approval for each host.".to_string(),
        input_schema: json!({"type": "object", "properties": {
            "url": {"type": "string", "description": "The page's absolute http or https URL"}
        }, "required": ["url"]}),
    }
}

/// The host a call would fetch from, for its approval and its rule (`web_fetch(host)`).
pub fn host_of(input: &Value) -> Option<String> {
    let url = reqwest::Url::parse(input.get("url")?.as_str()?).ok()?;
    url.host_str().map(str::to_ascii_lowercase)
}

/// Whether `ip` is on this machine or a private network: loopback, private, link-local,
/// unique-local (fc00::/7) or unspecified, also as an IPv4-mapped IPv6 address.
pub fn is_local(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_local(IpAddr::V4(v4));
            }
            let first = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
        }
    }
}

/// Runs one `web_fetch` call; its errors are for the model to read.
pub async fn fetch(input: &Value, settings: &Settings) -> Result<ToolOutcome, String> {
    let url = input
        .get("url")
        .and_then(Value::as_str)
        .ok_or("web_fetch needs a \"url\" string.")?;
    let url = reqwest::Url::parse(url).map_err(|e| format!("{url:?} is not a URL: {e}."))?;
    match tokio::time::timeout(TIMEOUT, follow(url, settings)).await {
        Ok(outcome) => outcome,
        Err(_) => Err(format!(
            "The fetch took longer than {} s and was abandoned.",
            TIMEOUT.as_secs()
        )),
    }
}

/// Follows redirects, checking each hop's addresses, and reads the final answer.
async fn follow(mut url: reqwest::Url, settings: &Settings) -> Result<ToolOutcome, String> {
    for _ in 0..=MAX_REDIRECTS {
        let response = get(&url, settings).await?;
        let status = response.status();
        if status.is_redirection() {
            let location = response
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|l| l.to_str().ok())
                .ok_or_else(|| format!("{url} answered {status} without a Location."))?;
            url = url
                .join(location)
                .map_err(|e| format!("{url} redirects to {location:?}, not a URL: {e}."))?;
            continue;
        }
        return read(url, response).await;
    }
    Err(format!(
        "More than {MAX_REDIRECTS} redirects; the last went to {url}."
    ))
}

/// One GET of `url`, without following redirects, connected to the addresses checked.
async fn get(url: &reqwest::Url, settings: &Settings) -> Result<reqwest::Response, String> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "{url}: only http and https URLs can be fetched, not {}.",
            url.scheme()
        ));
    }
    let host = url
        .host_str()
        .ok_or_else(|| format!("{url} names no host."))?
        .to_ascii_lowercase();
    let port = url
        .port_or_known_default()
        .ok_or_else(|| format!("{url} has no port."))?;
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<SocketAddr> = match bare.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => tokio::net::lookup_host((bare, port))
            .await
            .map_err(|e| format!("Cannot resolve {host}: {e}."))?
            .collect(),
    };
    if addrs.is_empty() {
        return Err(format!("{host} resolves to no address."));
    }
    if !settings.allows(bare)
        && let Some(local) = addrs.iter().find(|a| is_local(a.ip()))
    {
        return Err(format!(
            "Refused: {host} resolves to {}, an address on this machine or a private network. The user can allow the host under [tools.web_fetch] allow_hosts in the config file.",
            local.ip()
        ));
    }
    let client = crate::http_client::builder()
        .map_err(|e| format!("Cannot set up TLS: {e}."))?
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .resolve_to_addrs(bare, &addrs)
        .build()
        .map_err(|e| format!("Cannot build the HTTP client: {e}."))?;
    client
        .get(url.clone())
        .send()
        .await
        .map_err(|e| format!("Cannot fetch {url}: {e}."))
}

/// The body as text for the model: at most [`MAX_READ`] read, HTML converted, binary refused.
async fn read(url: reqwest::Url, response: reqwest::Response) -> Result<ToolOutcome, String> {
    let status = response.status();
    let media = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase()
        })
        .unwrap_or_default();
    let mut body = Vec::new();
    let mut cut_read = false;
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| format!("Reading {url} failed: {e}."))?;
        let room = MAX_READ - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            cut_read = true;
            break;
        }
        body.extend_from_slice(&chunk);
    }
    let text = match kind(&media, &body) {
        Kind::Html => htmd::HtmlToMarkdown::builder()
            .skip_tags(vec!["script", "style", "noscript", "template", "head"])
            .build()
            .convert(&String::from_utf8_lossy(&body))
            .map_err(|e| format!("{url} is HTML that could not be converted: {e}."))?,
        Kind::Text => String::from_utf8_lossy(&body).into_owned(),
        Kind::Binary => {
            return Err(format!(
                "{url} is {}, not text; web_fetch returns only web pages and text.",
                if media.is_empty() { "binary" } else { &media }
            ));
        }
    };
    let mut output = format!("{url} ({status})\n\n{}", cap(&text));
    if cut_read {
        output.push_str(&format!(
            "\n[cut: only the first {MAX_READ} bytes of the response were read]"
        ));
    }
    Ok(match status.is_success() {
        true => ToolOutcome::ok(output),
        false => ToolOutcome::error(output),
    })
}

enum Kind {
    Html,
    Text,
    Binary,
}

/// What a body is, by its media type, else by its bytes.
fn kind(media: &str, body: &[u8]) -> Kind {
    match media {
        "text/html" | "application/xhtml+xml" => Kind::Html,
        m if m.starts_with("text/")
            || m.ends_with("+json")
            || m.ends_with("+xml")
            || matches!(
                m,
                "application/json"
                    | "application/xml"
                    | "application/javascript"
                    | "application/x-javascript"
                    | "application/ecmascript"
                    | "application/toml"
                    | "application/yaml"
                    | "application/x-yaml"
            ) =>
        {
            Kind::Text
        }
        "" if !body.contains(&0) && std::str::from_utf8(body).is_ok() => Kind::Text,
        _ => Kind::Binary,
    }
}

/// `text` cut to [`MAX_RESULT`] bytes on a character boundary, saying how much was left out.
fn cap(text: &str) -> String {
    if text.len() <= MAX_RESULT {
        return text.to_string();
    }
    let mut end = MAX_RESULT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}\n[cut: the page is {} bytes of text; the first {end} are shown]",
        &text[..end],
        text.len()
    )
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpListener;

    use pretty_assertions::assert_eq;

    use super::*;

    /// A one-thread HTTP server on 127.0.0.1 answering each request by its path.
    fn serve(answer: fn(&str, u16) -> Vec<u8>) -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut buffer = [0u8; 4096];
                let n = stream.read(&mut buffer).unwrap_or(0);
                let request = String::from_utf8_lossy(&buffer[..n]).to_string();
                let path = request.split_whitespace().nth(1).unwrap_or("/").to_string();
                let _ = stream.write_all(&answer(&path, port));
            }
        });
        port
    }

    fn response(status: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
        let mut out = format!(
            "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n",
            body.len()
        );
        for (name, value) in headers {
            out.push_str(&format!("{name}: {value}\r\n"));
        }
        out.push_str("\r\n");
        let mut bytes = out.into_bytes();
        bytes.extend_from_slice(body);
        bytes
    }

    fn site(path: &str, port: u16) -> Vec<u8> {
        match path {
            "/page" => response(
                "200 OK",
                &[("Content-Type", "text/html; charset=utf-8")],
                b"<html><head><style>p{}</style><script>x()</script></head><body><h1>Title</h1><p>Some <b>bold</b> text and <a href=\"/x\">a link</a>.</p></body></html>",
            ),
            "/plain" => response("200 OK", &[("Content-Type", "text/plain")], b"just text\n"),
            "/image" => response("200 OK", &[("Content-Type", "image/png")], b"\x89PNG\r\n\x1a\n\0\0"),
            "/big" => response("200 OK", &[("Content-Type", "text/plain")], &vec![b'a'; MAX_RESULT + 10]),
            "/hop" => response("302 Found", &[("Location", "/plain")], b""),
            "/away" => {
                let to = format!("http://127.0.0.1:{port}/plain");
                response("302 Found", &[("Location", to.as_str())], b"")
            }
            "/loop" => response("302 Found", &[("Location", "/loop")], b""),
            _ => response("404 Not Found", &[("Content-Type", "text/plain")], b"no"),
        }
    }

    fn allowing(host: &str) -> Settings {
        Settings {
            allow_hosts: vec![host.to_string()],
        }
    }

    async fn fetched(url: String, settings: &Settings) -> Result<ToolOutcome, String> {
        fetch(&json!({ "url": url }), settings).await
    }

    #[tokio::test]
    async fn an_allowed_local_host_is_served_and_html_becomes_markdown() {
        let port = serve(site);
        let outcome = fetched(
            format!("http://localhost:{port}/page"),
            &allowing("localhost"),
        )
        .await
        .unwrap();
        assert_eq!(
            outcome,
            ToolOutcome::ok(format!(
                "http://localhost:{port}/page (200 OK)\n\n# Title\n\nSome **bold** text and [a link](/x)."
            ))
        );
        let plain = fetched(
            format!("http://localhost:{port}/hop"),
            &allowing("localhost"),
        )
        .await
        .unwrap();
        assert_eq!(
            plain,
            ToolOutcome::ok(format!(
                "http://localhost:{port}/plain (200 OK)\n\njust text\n"
            ))
        );
    }

    #[tokio::test]
    async fn a_local_host_is_refused_without_the_listing_and_through_a_redirect() {
        let port = serve(site);
        let refused = fetched(
            format!("http://localhost:{port}/plain"),
            &Settings::default(),
        )
        .await
        .unwrap_err();
        assert!(
            refused.starts_with("Refused: localhost resolves to "),
            "{refused}"
        );
        assert!(refused.contains("allow_hosts"), "{refused}");
        // localhost is listed, 127.0.0.1 (where it redirects) is not.
        let redirected = fetched(
            format!("http://localhost:{port}/away"),
            &allowing("localhost"),
        )
        .await
        .unwrap_err();
        assert_eq!(
            redirected,
            "Refused: 127.0.0.1 resolves to 127.0.0.1, an address on this machine or a private network. The user can allow the host under [tools.web_fetch] allow_hosts in the config file."
        );
    }

    #[tokio::test]
    async fn caps_binary_schemes_and_redirect_loops() {
        let port = serve(site);
        let settings = allowing("localhost");
        let big = fetched(format!("http://localhost:{port}/big"), &settings)
            .await
            .unwrap();
        assert!(
            big.output.ends_with(&format!(
                "\n[cut: the page is {} bytes of text; the first {MAX_RESULT} are shown]",
                MAX_RESULT + 10
            )),
            "{}",
            &big.output[big.output.len() - 120..]
        );
        let binary = fetched(format!("http://localhost:{port}/image"), &settings)
            .await
            .unwrap_err();
        assert!(binary.contains("image/png"), "{binary}");
        let scheme = fetched("file:///etc/passwd".into(), &settings)
            .await
            .unwrap_err();
        assert_eq!(
            scheme,
            "file:///etc/passwd: only http and https URLs can be fetched, not file."
        );
        let looped = fetched(format!("http://localhost:{port}/loop"), &settings)
            .await
            .unwrap_err();
        assert_eq!(
            looped,
            format!("More than 5 redirects; the last went to http://localhost:{port}/loop.")
        );
        let missing = fetched(format!("http://localhost:{port}/nothing"), &settings)
            .await
            .unwrap();
        assert!(missing.is_error);
    }

    #[test]
    fn local_and_private_addresses_are_recognised() {
        let local = [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "::1",
            "::",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
        ];
        for ip in local {
            assert!(is_local(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["93.184.216.34", "2606:4700::1111", "8.8.8.8"] {
            assert!(!is_local(ip.parse().unwrap()), "{ip}");
        }
    }
}
