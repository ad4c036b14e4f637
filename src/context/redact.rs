//! Removing anything credential-shaped from text that is kept and sent again (carry-over notes).
//!
//! A note is written by a model from the conversation, or copied from it, and then sent with
//! every later request of the new context; a key pasted once must not live on in it. The
//! patterns are the shapes providers publish for their keys, plus the generic ones (bearer
//! tokens, `password=` values, credentials in URLs, private key blocks); each is anchored on a
//! prefix or a label so that hashes, UUIDs, base64 data and prose stay untouched.

use regex::Regex;

use crate::low_priority::Ahead;

/// What stands where a credential was.
pub const REDACTED: &str = "[redacted]";

/// Patterns whose whole match is a credential.
const WHOLE: &[&str] = &[
    // Private key blocks (PEM), whatever the algorithm.
    r"-----BEGIN[A-Z ]*PRIVATE KEY( BLOCK)?-----[\s\S]*?-----END[A-Z ]*PRIVATE KEY( BLOCK)?-----",
    // OpenAI (sk-, sk-proj-, sk-svcacct-), Anthropic (sk-ant-), OpenRouter (sk-or-v1-),
    // DeepSeek and most OpenAI-compatible hosts.
    r"\bsk-[A-Za-z0-9_\-]{20,}",
    // GitHub tokens and fine-grained personal access tokens.
    r"\bgh[pousr]_[A-Za-z0-9]{30,}",
    r"\bgithub_pat_[A-Za-z0-9_]{30,}",
    // GitLab, npm, PyPI, Hugging Face, Groq, xAI, Replicate, Perplexity, Databricks.
    r"\bglpat-[A-Za-z0-9_\-]{20,}",
    r"\bnpm_[A-Za-z0-9]{30,}",
    r"\bpypi-[A-Za-z0-9_\-]{40,}",
    r"\bhf_[A-Za-z0-9]{30,}",
    r"\bgsk_[A-Za-z0-9]{40,}",
    r"\bxai-[A-Za-z0-9]{40,}",
    r"\br8_[A-Za-z0-9]{30,}",
    r"\bpplx-[A-Za-z0-9]{40,}",
    r"\bdapi[0-9a-f]{32}\b",
    // Slack tokens and webhooks.
    r"\bxox[abposr]-[A-Za-z0-9\-]{10,}",
    r"https://hooks\.slack\.com/services/[A-Za-z0-9/_\-]+",
    // Stripe secret and restricted keys, and webhook secrets.
    r"\b[sr]k_(live|test)_[A-Za-z0-9]{16,}",
    r"\bwhsec_[A-Za-z0-9]{24,}",
    // Google API keys and OAuth access tokens.
    r"\bAIza[0-9A-Za-z_\-]{35}",
    r"\bya29\.[0-9A-Za-z_\-]{20,}",
    // AWS access key ids (long-term and temporary).
    r"\b(AKIA|ASIA|AGPA|AIDA|AROA)[A-Z0-9]{16}\b",
    // SendGrid, Twilio API keys, Mailgun, Shopify, DigitalOcean, Doppler, Linear, Notion.
    r"\bSG\.[A-Za-z0-9_\-]{20,}\.[A-Za-z0-9_\-]{20,}",
    r"\bSK[0-9a-f]{32}\b",
    r"\bkey-[0-9a-f]{32}\b",
    r"\bshp(at|ss|ca|pa)_[0-9a-fA-F]{32}\b",
    r"\bdo[opr]_v1_[0-9a-f]{64}\b",
    r"\bdp\.(st|ct|pt|sa)\.[A-Za-z0-9_\-]{20,}",
    r"\blin_api_[A-Za-z0-9]{40}\b",
    r"\bsecret_[A-Za-z0-9]{43}\b",
    // JSON Web Tokens (three base64url parts, the first an encoded `{"`).
    r"\beyJ[A-Za-z0-9_\-]{10,}\.eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}",
];

/// Patterns whose group `value` is a credential, the rest (a label) kept.
const VALUES: &[&str] = &[
    // Authorization headers.
    r"(?i)\b(bearer|basic|token)\s+(?P<value>[A-Za-z0-9._~+/\-]{16,}=*)",
    // Passwords and secrets in assignments, also as the last part of a longer name
    // (`DB_PASSWORD`, `MYSQL_PASS`): any value.
    r#"(?i)\b(?:[a-z0-9]+_)*(password|passwd|pwd|secret|private_key|secret_access_key)\s*[=:]\s*(?P<value>"[^"\n]*"|'[^'\n]*'|[^\s,;&"']+)"#,
    r#"(?i)\b(?:[a-z0-9]+_)+pass\s*[=:]\s*(?P<value>"[^"\n]*"|'[^'\n]*'|[^\s,;&"']+)"#,
    // Tokens and keys in assignments: values that look generated (8+ characters, no spaces).
    r#"(?i)\b(?:[a-z0-9]+_)*(token|api_key|apikey|api-key|access_token|auth_token|accountkey|x-api-key)\s*[=:]\s*["']?(?P<value>[A-Za-z0-9._~+/\-]{8,}=*)"#,
    // Credentials in URLs: scheme://user:password@host.
    r"(?i)\b[a-z][a-z0-9+.\-]*://(?P<value>[^\s/@:]+:[^\s/@]+)@",
    // Secrets in query strings.
    r"(?i)[?&](access_token|token|api_key|apikey|key|sig|signature|secret|password)=(?P<value>[^&\s#]+)",
];

/// A private key block whose end is missing (cut off, or pasted in part): everything from its
/// header to the next blank line or the end of the text. Applied after [`WHOLE`], which takes
/// the complete blocks.
const UNTERMINATED: &str =
    r"-----BEGIN[A-Z ]*PRIVATE KEY(?: BLOCK)?-----(?:[^\n]|\n[ \t]*[^\n \t])*";

/// What is left of a credential cut off at the end of a text: the start of one of the shapes
/// above, too short to match it, right before an ellipsis or the end. A cut key is still a
/// key (`AKIA…` is the start of an AWS access key id whatever follows), so its prefix goes
/// too. Each has a group `value`, or is one as a whole.
const CUT_OFF: &[&str] = &[
    r"-----BEGIN[A-Z ]*-{0,5}",
    r"\bsk-[A-Za-z0-9_\-]*",
    r"\bgh[pousr]_[A-Za-z0-9]*",
    r"\bgithub_pat_[A-Za-z0-9_]*",
    r"\bglpat-[A-Za-z0-9_\-]*",
    r"\bnpm_[A-Za-z0-9]*",
    r"\bpypi-[A-Za-z0-9_\-]*",
    r"\bhf_[A-Za-z0-9]*",
    r"\bgsk_[A-Za-z0-9]*",
    r"\bxai-[A-Za-z0-9]*",
    r"\br8_[A-Za-z0-9]*",
    r"\bpplx-[A-Za-z0-9]*",
    r"\bdapi[0-9a-f]+",
    r"\bxox[abposr]-[A-Za-z0-9\-]*",
    r"\b[sr]k_(?:live|test)_[A-Za-z0-9]*",
    r"\bwhsec_[A-Za-z0-9]*",
    r"\bAIza[0-9A-Za-z_\-]*",
    r"\bya29\.[0-9A-Za-z_\-]*",
    r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA)[A-Z0-9]*",
    r"\bSG\.[A-Za-z0-9_\-]+[A-Za-z0-9_\-.]*",
    r"\bSK[0-9a-f]{8,}",
    r"\bkey-[0-9a-f]{8,}",
    r"\bshp(?:at|ss|ca|pa)_[0-9a-fA-F]*",
    r"\bdo[opr]_v1_[0-9a-f]*",
    r"\bdp\.(?:st|ct|pt|sa)\.[A-Za-z0-9_\-]*",
    r"\blin_api_[A-Za-z0-9]*",
    r"\bsecret_[A-Za-z0-9]{8,}",
    r"\beyJ[A-Za-z0-9_\-]*(?:\.[A-Za-z0-9_\-]*){0,2}",
    r"(?i)\b(?:bearer|basic)\s+(?P<value>[A-Za-z0-9._~+/\-]+=*)",
    r#"(?i)\b(?:[a-z0-9]+_)*(?:token|api_key|apikey|api-key|access_token|auth_token|accountkey|x-api-key)\s*[=:]\s*["']?(?P<value>[A-Za-z0-9._~+/\-]+=*)"#,
    r"(?i)\b[a-z][a-z0-9+.\-]*://(?P<value>[^\s/@:]+:[^\s/@]*)",
];

/// What follows a cut: the ellipsis that marks it, or the end of the text.
const AT_CUT: &str = r"(?:…|\s*\z)";

struct Patterns {
    whole: Vec<Regex>,
    unterminated: Regex,
    values: Vec<Regex>,
}

/// Starts a lowered thread compiling the patterns now, as the first redaction would (a
/// fraction of a second), so that no first message waits for it (`sidechat acp` titles a
/// session from its first prompt, redacted). A redaction before it is done compiles them
/// itself rather than wait for it (see [`crate::low_priority`]).
pub fn warm_in_background() -> std::io::Result<std::thread::JoinHandle<()>> {
    PATTERNS.spawn_ahead("redaction-warm-up", compile)
}

/// Test-only: `gate:<path>` keeps the patterns uncompiled until the file `path` exists, so a
/// test can see that a first message does not wait for them. Unset in every real use.
pub const REDACTION_VAR: &str = "SIDECHAT_TEST_REDACTION";

/// Waits, under [`REDACTION_VAR`]'s gate, until its file exists.
fn wait_for_gate() {
    let Some(path) = std::env::var(REDACTION_VAR)
        .ok()
        .and_then(|v| v.strip_prefix("gate:").map(std::path::PathBuf::from))
    else {
        return;
    };
    tracing::info!(path = %path.display(), "{REDACTION_VAR} is set (tests only)");
    while !path.exists() {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Blocks while the warm-up thread compiles the patterns: for a redaction that is as good later
/// (it then does not compile them a second time beside that thread).
pub fn wait_for_warm_up() {
    PATTERNS.wait_for_lowered();
}

static PATTERNS: Ahead<Patterns> = Ahead::new("the redaction patterns");

fn patterns() -> &'static Patterns {
    PATTERNS.get_or_build(compile)
}

fn compile() -> Patterns {
    wait_for_gate();
    let compile = |list: &mut dyn Iterator<Item = String>| -> Vec<Regex> {
        list.filter_map(|p| Regex::new(&p).ok()).collect()
    };
    let cut_off = CUT_OFF
        .iter()
        .map(|body| match body.contains("(?P<value>") {
            true => format!("{body}{AT_CUT}"),
            false => format!("(?P<value>{body}){AT_CUT}"),
        });
    Patterns {
        whole: compile(&mut WHOLE.iter().map(|p| p.to_string())),
        unterminated: Regex::new(UNTERMINATED).expect("a valid pattern"),
        values: compile(&mut VALUES.iter().map(|p| p.to_string()).chain(cut_off)),
    }
}

/// `text` with every credential-shaped span replaced by [`REDACTED`].
pub fn redact(text: &str) -> String {
    let Patterns {
        whole,
        unterminated,
        values,
    } = patterns();
    let mut out = text.to_string();
    for pattern in whole.iter().chain([unterminated]) {
        if pattern.is_match(&out) {
            out = pattern.replace_all(&out, REDACTED).into_owned();
        }
    }
    for pattern in values {
        if !pattern.is_match(&out) {
            continue;
        }
        out = pattern
            .replace_all(&out, |caps: &regex::Captures<'_>| {
                let all = caps.get(0).map_or("", |m| m.as_str());
                match caps.name("value") {
                    Some(value) if value.as_str() != REDACTED => {
                        let start = value.start() - caps.get(0).map_or(0, |m| m.start());
                        format!(
                            "{}{REDACTED}{}",
                            &all[..start],
                            &all[start + value.as_str().len()..]
                        )
                    }
                    _ => all.to_string(),
                }
            })
            .into_owned();
    }
    out
}

/// Made-up credentials for tests that check no part of one survives, wherever a text is cut.
#[cfg(test)]
pub(crate) mod fixtures {
    /// A private key block as a user might paste it.
    pub const PEM: &str = "-----BEGIN RSA PRIVATE KEY-----
Rl0MR48pQ8np3bWRgj5NNdXrQ0nmSgmF/krFuA8a4Qrb7KkwvWxtHNTdVLntlpqj
pvPS3/oIUjYMiA4khArd8HbHkYONqJweZVwEd+H2h5Cd8dHF6nPaDgpCdwwPUS9O
HTy/jtOE19eg3o8ju0rkcvDIdQnrr/ewkSRjJg0aFGLcYHQZxJ93kMJw88LZyqee
PPo4ehfXhNOzs1JIuYc2a6DOXMzhabvIt2Pmzo8PBC3qdjNHbHF5jjs+wlyWKrcM
Ex6cRpi0YdtA3ItKKPKriObgfgueK6/Rg8sKQmtrcABspCXxqDNhJvBjtVf1OFcZ
xhqrJOKme4fZTKjOLe56fy9ZZ/yUV11f+nW7VOXUMTSRj0MozYwEBVGlwZ99ERqw
-----END RSA PRIVATE KEY-----";

    /// An AWS access key id.
    pub const AWS: &str = "AKIAIOSFODNN7EXAMPLE";

    /// The parts of [`PEM`] and [`AWS`] found in `text`: the key block's header or footer, any
    /// eight characters of its body, the access key's prefix or any six of its other characters.
    pub fn leaks(text: &str) -> Vec<String> {
        let mut found: Vec<String> = ["BEGIN RSA", "PRIVATE KEY", "AKIA"]
            .iter()
            .filter(|f| text.contains(*f))
            .map(|f| f.to_string())
            .collect();
        let windows = |secret: &str, width: usize| -> Vec<String> {
            let chars: Vec<char> = secret.chars().collect();
            chars.windows(width).map(|w| w.iter().collect()).collect()
        };
        let body: String = PEM.lines().filter(|l| !l.starts_with("-----")).collect();
        for fragment in windows(&body, 8).into_iter().chain(windows(&AWS[4..], 6)) {
            if text.contains(&fragment) {
                found.push(fragment);
                break;
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::{AWS, PEM, leaks};
    use super::*;
    use pretty_assertions::assert_eq;

    /// Credentials as they appear in conversations: each line must lose its secret.
    const CREDENTIALS: &[(&str, &str)] = &[
        (
            "my key is sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb7cDe0f",
            "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb7cDe0f",
        ),
        (
            "OPENAI_API_KEY=sk-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa98765",
            "sk-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa98765",
        ),
        (
            "anthropic: sk-ant-api03-kJ8hG7fD6sA5pO4iU3yT2rE1wQ0_zXcVbNmLkJhGf-AbCdEfGh",
            "sk-ant-api03-kJ8hG7fD6sA5pO4iU3yT2rE1wQ0_zXcVbNmLkJhGf-AbCdEfGh",
        ),
        (
            "router sk-or-v1-0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f6071",
            "sk-or-v1-0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f6071",
        ),
        (
            "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8 is my PAT",
            "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
        ),
        (
            "token github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEF",
            "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEF",
        ),
        (
            "gho_16C7e42F292c6912E7710c838347Ae178B4a",
            "gho_16C7e42F292c6912E7710c838347Ae178B4a",
        ),
        (
            "glpat-xY9zW8vU7tS6rQ5pO4nM in CI",
            "glpat-xY9zW8vU7tS6rQ5pO4nM",
        ),
        (
            "//registry.npmjs.org/:_authToken=npm_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789",
            "npm_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789",
        ),
        (
            "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567",
            "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567",
        ),
        (
            "groq gsk_aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6kM9nP2qR5tU8",
            "gsk_aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6kM9nP2qR5tU8",
        ),
        (
            "xoxb-2048-4096-AbCdEfGhIjKlMnOpQrStUvWx",
            "xoxb-2048-4096-AbCdEfGhIjKlMnOpQrStUvWx",
        ),
        (
            "webhook https://hooks.slack.com/services/T0000/B0000/XXXXXXXXXXXXXXXXXXXXXXXX",
            "hooks.slack.com/services/T0000",
        ),
        (
            "stripe sk_live_51HAbCdEfGhIjKlMnOpQrStUv",
            "sk_live_51HAbCdEfGhIjKlMnOpQrStUv",
        ),
        (
            "rk_test_4eC39HqLyjWDarjtT1zdp7dc",
            "rk_test_4eC39HqLyjWDarjtT1zdp7dc",
        ),
        (
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLSYm",
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLSYm",
        ),
        (
            "maps key AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
            "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
        ),
        (
            "ya29.a0AfH6SMBx7QwErTyUiOpAsDfGhJkLzXcVbNm",
            "ya29.a0AfH6SMBx7QwErTyUiOpAsDfGhJkLzXcVbNm",
        ),
        (
            "aws_access_key_id = AKIAIOSFODNN7EXAMPLE",
            "AKIAIOSFODNN7EXAMPLE",
        ),
        ("temporary ASIAY34FZKBOKMUTVV7A", "ASIAY34FZKBOKMUTVV7A"),
        (
            "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        ),
        (
            "curl -H 'Authorization: Bearer eyJhbGciOiJIUzI1NiJ9xyzAbCdEf123' url",
            "eyJhbGciOiJIUzI1NiJ9xyzAbCdEf123",
        ),
        (
            "jwt eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
            "eyJzdWIiOiIxMjM0NTY3ODkwIn0",
        ),
        (
            "Authorization: Basic dXNlcm5hbWU6cGFzc3dvcmQxMjM=",
            "dXNlcm5hbWU6cGFzc3dvcmQxMjM=",
        ),
        ("db password=hunter2 please", "hunter2"),
        (
            "PASSWORD: \"correct horse battery staple\"",
            "correct horse battery staple",
        ),
        ("export DB_PASS='s3cr3t!'", "s3cr3t!"),
        (
            "api_key: 9f8e7d6c5b4a39281706f5e4d3c2b1a0",
            "9f8e7d6c5b4a39281706f5e4d3c2b1a0",
        ),
        (
            "token=QWxhZGRpbjpvcGVuIHNlc2FtZQ",
            "QWxhZGRpbjpvcGVuIHNlc2FtZQ",
        ),
        (
            "refresh_token: \"1//0gAbCdEfGhIjKlMnOpQrSt\"",
            "1//0gAbCdEfGhIjKlMnOpQrSt",
        ),
        (
            "clone https://alice:p4ssw0rd@github.com/acme/repo.git",
            "p4ssw0rd",
        ),
        (
            "DATABASE_URL=postgres://app:Zq8!xW2v@db.internal:5432/prod",
            "Zq8!xW2v",
        ),
        (
            "GET /v1/data?access_token=abc123def456ghi789&page=2",
            "abc123def456ghi789",
        ),
        (
            "https://storage.example.com/f.zip?sig=Xy7%2Bz9Q%3D&se=2026",
            "Xy7%2Bz9Q%3D",
        ),
        (
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7bq\nabcDEF123\n-----END RSA PRIVATE KEY-----",
            "MIIEowIBAAKCAQEA7bq",
        ),
        (
            "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----",
            "b3BlbnNzaC1rZXktdjEAAAAA",
        ),
        (
            "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",
            "SG.ngeVfQFYQlKU0ufo8x5d1A",
        ),
        (
            "twilio SK2a0747a0b0bc4e3f9f2a6d1c9e8b7a65",
            "SK2a0747a0b0bc4e3f9f2a6d1c9e8b7a65",
        ),
        (
            "AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq==",
            "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq",
        ),
        (
            "shpat_0123456789abcdef0123456789abcdef",
            "shpat_0123456789abcdef0123456789abcdef",
        ),
        (
            "x-api-key: 3f9a1c7e5b2d4086a1c3e5f7091b2d4f",
            "3f9a1c7e5b2d4086a1c3e5f7091b2d4f",
        ),
    ];

    /// Things that look a little like credentials but are not: never touched.
    const LOOK_ALIKES: &[&str] = &[
        "Fixed in commit 3f9a1c7e5b2d4086a1c3e5f7091b2d4f6a8c0e2b (git hash).",
        "Short hash a1b2c3d, tag v1.2.3.",
        "Session 0190a5b2-7c3d-7e4f-8a9b-0c1d2e3f4a5b and request 550e8400-e29b-41d4-a716-446655440000.",
        "![chart](data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==)",
        "The token budget is 128,000 tokens; each token is about four characters.",
        "A token: the smallest unit a model reads.",
        "max_tokens=8192 and tokens_used=4021 in the response.",
        "Call next_token() until the tokenizer returns EOF.",
        "The password field must be at least 12 characters long.",
        "Ask the user for their password before continuing.",
        "sk-learn is spelled scikit-learn; see https://scikit-learn.org/stable/.",
        "Visit https://docs.rs/regex/latest/regex/?search=captures#examples for more.",
        "SHA-256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "The function returns a Bearer of bad news.",
        "ssh git@github.com:acme/repo.git and mailto:someone@example.com",
        "Use `key = config.get(\"name\")` to look it up.",
    ];

    #[test]
    fn every_credential_is_removed() {
        assert!(CREDENTIALS.len() >= 30);
        for (text, secret) in CREDENTIALS {
            let redacted = redact(text);
            assert!(
                !redacted.contains(secret),
                "{text:?} kept {secret:?}: {redacted:?}"
            );
            assert!(redacted.contains(REDACTED), "{redacted:?}");
        }
    }

    #[test]
    fn look_alikes_are_untouched() {
        for text in LOOK_ALIKES {
            assert_eq!(redact(text), *text);
        }
    }

    /// What a cut leaves of a credential, at the end of a text or before the ellipsis marking
    /// the cut: still a credential.
    #[test]
    fn a_credential_cut_off_at_the_end_is_still_one() {
        let pem_cut: String = PEM.chars().take(31 + 330).collect();
        let cases = [
            format!("Task: deploy with {}…", &AWS[..4]),
            format!("the key {}…", &AWS[..11]),
            format!("the key {}", &AWS[..9]),
            format!("the key {}  \n", &AWS[..9]),
            format!("Task: {pem_cut}…"),
            format!("Task: {pem_cut}"),
            "Task: -----BEGIN RSA PRIV…".to_string(),
            "Task: -----BEGIN RSA PRIVATE KEY-…".to_string(),
            "use sk-proj-Ab3dEf6h…".to_string(),
            "Authorization: Bearer eyJhbGciOi…".to_string(),
            "api_key=9f8e7d…".to_string(),
            "clone https://alice:p4ss…".to_string(),
        ];
        for text in &cases {
            let redacted = redact(text);
            assert!(redacted.contains(REDACTED), "{text:?}: {redacted:?}");
            assert_eq!(leaks(&redacted), Vec::<String>::new(), "{text:?}");
        }
        assert!(!redact(&cases[7]).contains("PRIV"));
        assert!(!redact(&cases[8]).contains("sk-"));
        assert!(!redact(&cases[11]).contains("p4ss"));
        // The cut stays marked, and the text before it stays.
        assert_eq!(redact(&cases[0]), "Task: deploy with [redacted]…");
        // A private key without its end: from its header to the next blank line.
        assert_eq!(
            redact(&format!("{pem_cut}\nmore key\n\nThen deploy.")),
            "[redacted]\n\nThen deploy."
        );
        // A complete block is taken whole, the text after it kept.
        assert_eq!(
            redact(&format!("key:\n{PEM}\nThen deploy.")),
            "key:\n[redacted]\nThen deploy."
        );
    }

    #[test]
    fn labels_and_surroundings_stay() {
        assert_eq!(
            redact("db password=hunter2 please; clone https://alice:p4ss@github.com/x"),
            "db password=[redacted] please; clone https://[redacted]@github.com/x"
        );
        assert_eq!(
            redact("Authorization: Bearer abcdefghijklmnop1234"),
            "Authorization: Bearer [redacted]"
        );
    }
}
