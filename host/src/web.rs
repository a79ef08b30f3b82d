//! HTTP clients to the outside (model APIs, peer benchmarks' file hosts): TLS with ring,
//! the workspace's provider, and the system's trust store.

use std::sync::Arc;
use std::time::Duration;

/// The TLS configuration every outside client uses.
pub fn tls() -> Result<rustls::ClientConfig, String> {
    use rustls_platform_verifier::BuilderVerifierExt as _;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|b| b.with_platform_verifier())
        .map_err(|e| format!("cannot set up TLS: {e}"))?
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(cfg)
}

/// A client with pincer's user agent, a connect timeout and, if given, a whole-request
/// timeout.
pub fn client(timeout: Option<Duration>, connect: Duration) -> Result<reqwest::Client, String> {
    let mut b = reqwest::Client::builder()
        .tls_backend_preconfigured(tls()?)
        .connect_timeout(connect)
        .user_agent(concat!("pincer/", env!("CARGO_PKG_VERSION")));
    if let Some(t) = timeout {
        b = b.timeout(t);
    }
    b.build()
        .map_err(|e| format!("cannot make the HTTP client: {e}"))
}
