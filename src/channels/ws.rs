//! Outbound WebSocket connections for the chat platforms' event streams
//! (Discord's gateway, Slack's Socket Mode): `ws://` over plain TCP,
//! `wss://` over rustls with the webpki root certificates, with a bounded
//! connect time and message size.
//!
//! It knows no platform's frames: Discord and Slack both use it.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::{ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::WebSocketStream;

/// Longest wait for TCP, TLS and the WebSocket handshake together.
pub const WS_CONNECT_TIMEOUT_MS: u64 = 20_000;

/// A byte stream a WebSocket can run over (plain or TLS).
pub trait WsIo: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> WsIo for T {}

/// A connected client WebSocket.
pub type WsStream = WebSocketStream<Box<dyn WsIo>>;

/// Why a WebSocket could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum WsConnectError {
    #[error("bad WebSocket URL: {0}")]
    BadUrl(String),
    #[error("connect timed out after {0} ms")]
    Timeout(u64),
    #[error("TCP connect failed: {0}")]
    Tcp(std::io::Error),
    #[error("TLS handshake failed: {0}")]
    Tls(std::io::Error),
    #[error("WebSocket handshake failed: {0}")]
    Handshake(String),
}

/// Opens `url` (`ws://` or `wss://`) with messages capped at `max_message_bytes`.
pub async fn connect(url: &str, max_message_bytes: usize) -> Result<WsStream, WsConnectError> {
    connect_with_headers(url, max_message_bytes, &[]).await
}

/// [`connect`] with extra request headers (WhatsApp's server wants an `Origin`).
pub async fn connect_with_headers(
    url: &str,
    max_message_bytes: usize,
    headers: &[(&'static str, &str)],
) -> Result<WsStream, WsConnectError> {
    let timeout = Duration::from_millis(WS_CONNECT_TIMEOUT_MS);
    tokio::time::timeout(timeout, connect_inner(url, max_message_bytes, headers))
        .await
        .map_err(|_| WsConnectError::Timeout(WS_CONNECT_TIMEOUT_MS))?
}

async fn connect_inner(
    url: &str,
    max_message_bytes: usize,
    headers: &[(&'static str, &str)],
) -> Result<WsStream, WsConnectError> {
    let mut request = url
        .into_client_request()
        .map_err(|e| WsConnectError::BadUrl(e.to_string()))?;
    for (name, value) in headers {
        let value = value
            .parse()
            .map_err(|_| WsConnectError::BadUrl(format!("header {name} is not a header value")))?;
        request.headers_mut().insert(*name, value);
    }
    let uri = request.uri().clone();
    let tls = match uri.scheme_str() {
        Some("ws") => false,
        Some("wss") => true,
        other => return Err(WsConnectError::BadUrl(format!("scheme {other:?}"))),
    };
    let host = uri
        .host()
        .ok_or_else(|| WsConnectError::BadUrl("no host".into()))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
    let tcp = TcpStream::connect((host.as_str(), port))
        .await
        .map_err(WsConnectError::Tcp)?;
    // Event streams are latency-sensitive and small: no Nagle delay.
    let _ = tcp.set_nodelay(true);
    let io: Box<dyn WsIo> = if tls {
        let name = ServerName::try_from(host.clone())
            .map_err(|e| WsConnectError::BadUrl(e.to_string()))?;
        let stream = TlsConnector::from(tls_config())
            .connect(name, tcp)
            .await
            .map_err(WsConnectError::Tls)?;
        Box::new(stream)
    } else {
        Box::new(tcp)
    };
    let mut config = WebSocketConfig::default();
    config.max_message_size = Some(max_message_bytes);
    config.max_frame_size = Some(max_message_bytes);
    let (ws, _response) = tokio_tungstenite::client_async_with_config(request, io, Some(config))
        .await
        .map_err(|e| WsConnectError::Handshake(e.to_string()))?;
    Ok(ws)
}

/// One client TLS configuration for the process (the root store is large).
fn tls_config() -> Arc<ClientConfig> {
    static CONFIG: OnceLock<Arc<ClientConfig>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let roots = RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            };
            let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
            let config = ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .expect("ring supports the default TLS versions")
                .with_root_certificates(roots)
                .with_no_client_auth();
            Arc::new(config)
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn other_schemes_are_refused_before_connecting() {
        let result = connect("http://127.0.0.1:1/", 1024).await;
        assert!(
            matches!(result, Err(WsConnectError::BadUrl(_))),
            "http is not a WebSocket scheme"
        );
    }
}
