//! The one way sidechat builds HTTP clients (providers and MCP servers over streamable HTTP),
//! so every client verifies certificates the same way: rustls with the `ring` provider and the
//! bundled Mozilla root certificates, independent of the machine's certificate store.

use std::sync::Arc;

/// A client builder with sidechat's TLS configuration and user agent already set.
pub fn builder() -> Result<reqwest::ClientBuilder, rustls::Error> {
    Ok(reqwest::Client::builder()
        .tls_backend_preconfigured(tls_config()?)
        .user_agent(concat!("sidechat/", env!("CARGO_PKG_VERSION"))))
}

/// TLS 1.2 and 1.3 against the bundled roots. Built per client: it is cheap next to a
/// connection, and it keeps rustls' process-wide default provider untouched.
fn tls_config() -> Result<rustls::ClientConfig, rustls::Error> {
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(config)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_client_builds_without_a_process_wide_crypto_provider() {
        let client = super::builder().map(|builder| builder.build());
        assert!(matches!(client, Ok(Ok(_))), "{client:?}");
    }
}
