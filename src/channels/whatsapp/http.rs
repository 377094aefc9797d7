//! whatsapp-rust's HTTP port over pincer's reqwest client: the crate asks
//! WhatsApp Web for its current client version (once a day) and moves media
//! over HTTPS. Buffered bodies are capped at [`MAX_BODY_BYTES`]; media is
//! streamed both ways, so a file never sits in memory whole: a download is
//! read in the crate's blocking task chunk by chunk ([`BodyReader`]) and
//! decrypted into the caller's file, and an upload is read from the
//! encrypted file and handed to the request through a bounded queue of
//! [`UPLOAD_CHUNK_BYTES`] pieces with an exact `Content-Length` (WhatsApp's
//! CDN refuses chunked uploads).
//!
//! Tests only: [`ReqwestHttp::with_media_base`] sends every `https://<host>/…`
//! request to `<base>/…` instead (the adapter sets it from
//! `PINCER_WHATSAPP_MEDIA_URL` and logs a warning when it does).

use std::io::Read;
use std::time::Duration;

use tokio::runtime::Handle;
use whatsapp_rust::anyhow;
use whatsapp_rust::bytes::Bytes;
use whatsapp_rust::http::{HttpClient, HttpRequest, HttpResponse};
use whatsapp_rust::wacore::net::{StreamingHttpResponse, UploadBody};

/// Largest response body read into memory.
pub const MAX_BODY_BYTES: usize = 32 * 1024 * 1024;
/// Bytes read from an upload's file per piece handed to the request.
pub const UPLOAD_CHUNK_BYTES: usize = 64 * 1024;
/// Pieces of an upload queued for the request at most.
const UPLOAD_QUEUE: usize = 4;
const TIMEOUT: Duration = Duration::from_secs(60);
/// Longest a media download may take, first byte to last (the other
/// channels' limit: a stalled CDN holds the account's received messages
/// back at most this long per host tried).
const DOWNLOAD_TIMEOUT: Duration =
    Duration::from_secs(crate::channels::media::DOWNLOAD_TIMEOUT_SECS);
/// Longest an upload may take (16 MB over a slow uplink).
const UPLOAD_TIMEOUT: Duration = Duration::from_secs(300);

#[derive(Debug, Clone)]
pub struct ReqwestHttp {
    client: reqwest::Client,
    media_base: Option<String>,
}

impl ReqwestHttp {
    pub fn new(client: reqwest::Client) -> ReqwestHttp {
        ReqwestHttp {
            client,
            media_base: None,
        }
    }

    /// Tests only: every `https://<host>/<path>` goes to `<base>/<path>`.
    pub fn with_media_base(mut self, base: Option<String>) -> ReqwestHttp {
        self.media_base = base.filter(|b| !b.trim().is_empty());
        self
    }

    /// The URL a request goes to (the media base in tests).
    fn target(&self, url: &str) -> String {
        match (&self.media_base, url.strip_prefix("https://")) {
            (Some(base), Some(rest)) => {
                let path = rest.find('/').map_or("/", |at| &rest[at..]);
                format!("{}{path}", base.trim_end_matches('/'))
            }
            _ => url.to_string(),
        }
    }

    fn builder(
        &self,
        request: &HttpRequest,
        timeout: Duration,
    ) -> anyhow::Result<reqwest::RequestBuilder> {
        let method = match request.method.as_str() {
            "GET" => reqwest::Method::GET,
            "POST" => reqwest::Method::POST,
            other => anyhow::bail!("HTTP method {other} is not used by WhatsApp"),
        };
        let mut builder = self
            .client
            .request(method, self.target(&request.url))
            .timeout(timeout);
        for (name, value) in &request.headers {
            builder = builder.header(name, value);
        }
        Ok(builder)
    }
}

/// Reads a whole (capped) response body.
async fn read_capped(mut response: reqwest::Response, url: &str) -> anyhow::Result<HttpResponse> {
    let status_code = response.status().as_u16();
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > MAX_BODY_BYTES {
            anyhow::bail!("response from {url} passes {MAX_BODY_BYTES} bytes");
        }
        body.extend_from_slice(&chunk);
    }
    Ok(HttpResponse { status_code, body })
}

/// A response body read chunk by chunk from a blocking task.
struct BodyReader {
    handle: Handle,
    response: reqwest::Response,
    pending: Bytes,
}

impl Read for BodyReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.pending.is_empty() {
            match self.handle.block_on(self.response.chunk()) {
                Ok(Some(chunk)) => self.pending = chunk,
                Ok(None) => return Ok(0),
                Err(error) => return Err(std::io::Error::other(error.without_url())),
            }
        }
        let n = buf.len().min(self.pending.len());
        buf[..n].copy_from_slice(&self.pending.split_to(n));
        Ok(n)
    }
}

/// The runtime to drive a request from the crate's blocking task.
fn blocking_handle() -> anyhow::Result<Handle> {
    Handle::try_current()
        .map_err(|e| anyhow::anyhow!("a media transfer outside the Tokio runtime: {e}"))
}

#[whatsapp_rust::async_trait]
impl HttpClient for ReqwestHttp {
    async fn execute(&self, request: HttpRequest) -> anyhow::Result<HttpResponse> {
        let mut builder = self.builder(&request, TIMEOUT)?;
        if let Some(body) = request.body {
            builder = builder.body(body.to_vec());
        }
        let response = builder.send().await?;
        read_capped(response, &request.url).await
    }

    fn supports_streaming(&self) -> bool {
        true
    }

    /// Called by the crate on a blocking thread: the body is read there,
    /// one network chunk at a time.
    fn execute_streaming(&self, request: HttpRequest) -> anyhow::Result<StreamingHttpResponse> {
        let handle = blocking_handle()?;
        let builder = self.builder(&request, DOWNLOAD_TIMEOUT)?;
        let response = handle.block_on(builder.send())?;
        let status_code = response.status().as_u16();
        Ok(StreamingHttpResponse {
            status_code,
            body: Box::new(BodyReader {
                handle,
                response,
                pending: Bytes::new(),
            }),
        })
    }

    fn supports_upload_streaming(&self) -> bool {
        true
    }

    /// Called by the crate on a blocking thread: `body` is read here and
    /// queued for the request (at most [`UPLOAD_QUEUE`] pieces in flight),
    /// sent with exactly `content_length` bytes.
    fn execute_upload(
        &self,
        request: HttpRequest,
        mut body: UploadBody,
        content_length: u64,
    ) -> anyhow::Result<HttpResponse> {
        let handle = blocking_handle()?;
        let (pieces, queued) =
            tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(UPLOAD_QUEUE);
        let stream = futures_util::stream::unfold(queued, |mut queued| async move {
            queued.recv().await.map(|piece| (piece, queued))
        });
        let builder = self
            .builder(&request, UPLOAD_TIMEOUT)?
            .header(reqwest::header::CONTENT_LENGTH, content_length)
            .body(reqwest::Body::wrap_stream(stream));
        let url = request.url.clone();
        let sending = handle.spawn(async move { read_capped(builder.send().await?, &url).await });
        let mut buffer = vec![0u8; UPLOAD_CHUNK_BYTES];
        let mut sent: u64 = 0;
        while sent < content_length {
            let room = usize::try_from(content_length - sent)
                .unwrap_or(usize::MAX)
                .min(buffer.len());
            let piece = match body.read(&mut buffer[..room]) {
                Ok(0) => Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("the upload ended at {sent} of {content_length} bytes"),
                )),
                Ok(n) => Ok(Bytes::copy_from_slice(&buffer[..n])),
                Err(error) => Err(error),
            };
            let failed = piece.is_err();
            sent += piece.as_ref().map_or(0, |p| p.len() as u64);
            if pieces.blocking_send(piece).is_err() || failed {
                break;
            }
        }
        drop(pieces);
        handle
            .block_on(sending)
            .map_err(|e| anyhow::anyhow!("the upload task failed: {e}"))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_media_base_replaces_the_host_of_https_urls_only() {
        let http = ReqwestHttp::new(reqwest::Client::new())
            .with_media_base(Some("http://127.0.0.1:9/".into()));
        assert_eq!(
            http.target("https://mmg.whatsapp.net/v/t62/abc.enc?token=x"),
            "http://127.0.0.1:9/v/t62/abc.enc?token=x"
        );
        assert_eq!(http.target("http://other/x"), "http://other/x");
        let plain = ReqwestHttp::new(reqwest::Client::new());
        assert_eq!(
            plain.target("https://mmg.whatsapp.net/x"),
            "https://mmg.whatsapp.net/x"
        );
    }
}
