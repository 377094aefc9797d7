//! whatsapp-rust's HTTP port over pincer's reqwest client: the crate asks
//! WhatsApp Web for its current client version (once a day) and moves media
//! over HTTPS. Bodies are capped at [`MAX_BODY_BYTES`].

use std::time::Duration;

use whatsapp_rust::anyhow;
use whatsapp_rust::http::{HttpClient, HttpRequest, HttpResponse};

/// Largest response body read into memory.
pub const MAX_BODY_BYTES: usize = 32 * 1024 * 1024;
const TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone)]
pub struct ReqwestHttp {
    client: reqwest::Client,
}

impl ReqwestHttp {
    pub fn new(client: reqwest::Client) -> ReqwestHttp {
        ReqwestHttp { client }
    }
}

#[whatsapp_rust::async_trait]
impl HttpClient for ReqwestHttp {
    async fn execute(&self, request: HttpRequest) -> anyhow::Result<HttpResponse> {
        let method = match request.method.as_str() {
            "GET" => reqwest::Method::GET,
            "POST" => reqwest::Method::POST,
            other => anyhow::bail!("HTTP method {other} is not used by WhatsApp"),
        };
        let mut builder = self.client.request(method, &request.url).timeout(TIMEOUT);
        for (name, value) in &request.headers {
            builder = builder.header(name, value);
        }
        if let Some(body) = request.body {
            builder = builder.body(body.to_vec());
        }
        let mut response = builder.send().await?;
        let status_code = response.status().as_u16();
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await? {
            if body.len() + chunk.len() > MAX_BODY_BYTES {
                anyhow::bail!(
                    "response from {} passes {MAX_BODY_BYTES} bytes",
                    request.url
                );
            }
            body.extend_from_slice(&chunk);
        }
        Ok(HttpResponse { status_code, body })
    }
}
