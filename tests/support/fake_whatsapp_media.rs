//! WhatsApp's media CDN as the fake server hands it out (`fake_whatsapp.rs` answers the `media_conn` IQ
//! with [`MEDIA_HOST`] and [`MEDIA_AUTH`]): an HTTP/1 listener on loopback that the device reaches
//! through `PINCER_WHATSAPP_MEDIA_URL` / `SessionOptions::media_base` (the crate builds
//! `https://<host>/…`). It speaks what the CDN speaks:
//! - upload: `POST /mms/<type>/<token>?auth=<auth>&token=<token>` with the encrypted blob as the body,
//!   `Origin: https://web.whatsapp.com`, an exact `Content-Length` (chunked bodies are refused, as the
//!   CDN refuses them) and `token` = base64url(SHA-256 of the blob); answered with
//!   `{"url": "https://<host><direct_path>", "direct_path": "<direct_path>"}`;
//! - download: `GET <direct_path>?token=…` answers the stored blob, 404 for an unknown path.
//!
//! And WhatsApp's media encryption, written here from its description rather than taken from the crate
//! under test: the 32-byte media key HKDF-SHA256-expanded (no salt, the type's info string such as
//! `WhatsApp Image Keys`) to 112 bytes (IV 16, cipher key 32, MAC key 32, rest unused), AES-256-CBC with
//! PKCS#7, then the first 10 bytes of HMAC-SHA256(MAC key, IV ‖ ciphertext) appended; `fileSha256` is
//! the plaintext's hash and `fileEncSha256` the blob's.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use whatsapp_rust::anyhow;
use whatsapp_rust::wacore::libsignal::crypto::{
    aes_256_cbc_decrypt_into, aes_256_cbc_encrypt_into,
};

/// The media host the fake's `media_conn` answer names.
pub const MEDIA_HOST: &str = "mmg.whatsapp.net";
/// The media auth token the fake's `media_conn` answer hands out; uploads must carry it.
pub const MEDIA_AUTH: &str = "fake-media-auth-token";
pub const IMAGE_KEYS: &str = "WhatsApp Image Keys";
pub const VIDEO_KEYS: &str = "WhatsApp Video Keys";
pub const AUDIO_KEYS: &str = "WhatsApp Audio Keys";
pub const DOCUMENT_KEYS: &str = "WhatsApp Document Keys";
const MAC_BYTES: usize = 10;

/// A file encrypted as WhatsApp encrypts media.
#[derive(Debug, Clone)]
pub struct EncryptedMedia {
    pub media_key: [u8; 32],
    pub blob: Vec<u8>,
    pub file_sha256: [u8; 32],
    pub file_enc_sha256: [u8; 32],
    pub file_length: u64,
}

struct Expanded(usize);

impl ring::hkdf::KeyType for Expanded {
    fn len(&self) -> usize {
        self.0
    }
}

/// (IV, cipher key, MAC key) of a media key for a type's info string.
fn media_keys(media_key: &[u8], info: &str) -> ([u8; 16], [u8; 32], [u8; 32]) {
    let prk = ring::hkdf::Salt::new(ring::hkdf::HKDF_SHA256, &[]).extract(media_key);
    let info = [info.as_bytes()];
    let okm = prk.expand(&info, Expanded(112)).expect("112 bytes of HKDF");
    let mut out = [0u8; 112];
    okm.fill(&mut out).expect("fill");
    let mut iv = [0u8; 16];
    let mut cipher = [0u8; 32];
    let mut mac = [0u8; 32];
    iv.copy_from_slice(&out[..16]);
    cipher.copy_from_slice(&out[16..48]);
    mac.copy_from_slice(&out[48..80]);
    (iv, cipher, mac)
}

fn sha256(data: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, data).as_ref());
    out
}

fn mac(mac_key: &[u8], iv: &[u8], ciphertext: &[u8]) -> [u8; MAC_BYTES] {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, mac_key);
    let mut context = ring::hmac::Context::with_key(&key);
    context.update(iv);
    context.update(ciphertext);
    let mut out = [0u8; MAC_BYTES];
    out.copy_from_slice(&context.sign().as_ref()[..MAC_BYTES]);
    out
}

/// Encrypts `plain` under a fresh media key for `info` (e.g. [`IMAGE_KEYS`]).
pub fn encrypt(plain: &[u8], info: &str) -> EncryptedMedia {
    let media_key: [u8; 32] = rand_010::random();
    let (iv, cipher_key, mac_key) = media_keys(&media_key, info);
    let mut blob = Vec::new();
    aes_256_cbc_encrypt_into(plain, &cipher_key, &iv, &mut blob).expect("AES-CBC");
    let tag = mac(&mac_key, &iv, &blob);
    blob.extend_from_slice(&tag);
    EncryptedMedia {
        media_key,
        file_sha256: sha256(plain),
        file_enc_sha256: sha256(&blob),
        file_length: plain.len() as u64,
        blob,
    }
}

/// Checks a blob's MAC and decrypts it.
pub fn decrypt(blob: &[u8], media_key: &[u8], info: &str) -> anyhow::Result<Vec<u8>> {
    anyhow::ensure!(blob.len() > MAC_BYTES, "blob too short");
    let (iv, cipher_key, mac_key) = media_keys(media_key, info);
    let (ciphertext, tag) = blob.split_at(blob.len() - MAC_BYTES);
    anyhow::ensure!(mac(&mac_key, &iv, ciphertext) == tag, "MAC mismatch");
    let mut plain = Vec::new();
    aes_256_cbc_decrypt_into(ciphertext, &cipher_key, &iv, &mut plain)
        .map_err(|e| anyhow::anyhow!("AES-CBC: {e}"))?;
    Ok(plain)
}

fn b64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// One upload the CDN took.
#[derive(Debug, Clone)]
pub struct Upload {
    /// `image`, `video`, `audio`, `document` (from `/mms/<type>/…`).
    pub kind: String,
    pub direct_path: String,
    pub blob: Vec<u8>,
}

#[derive(Default)]
struct State {
    blobs: HashMap<String, Vec<u8>>,
    uploads: Vec<Upload>,
    downloads: Vec<String>,
    refused: Vec<String>,
}

pub struct FakeMediaCdn {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
}

impl FakeMediaCdn {
    pub async fn start() -> FakeMediaCdn {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let state = Arc::new(Mutex::new(State::default()));
        let shared = state.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let state = shared.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request| {
                        let state = state.clone();
                        async move { Ok::<_, hyper::Error>(handle(request, &state).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), service)
                        .await;
                });
            }
        });
        FakeMediaCdn { addr, state }
    }

    /// The base URL that stands in for `https://<media host>`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stores `blob` for downloads of `direct_path`.
    pub fn put(&self, direct_path: &str, blob: Vec<u8>) {
        self.state
            .lock()
            .expect("lock")
            .blobs
            .insert(direct_path.to_string(), blob);
    }

    pub fn uploads(&self) -> Vec<Upload> {
        self.state.lock().expect("lock").uploads.clone()
    }

    /// Paths of the downloads asked for.
    pub fn downloads(&self) -> Vec<String> {
        self.state.lock().expect("lock").downloads.clone()
    }

    /// Requests the CDN refused, with why.
    pub fn refused(&self) -> Vec<String> {
        self.state.lock().expect("lock").refused.clone()
    }

    /// A contact opening a media message it received: the blob at `direct_path`, checked against
    /// `file_enc_sha256`, its MAC and `file_sha256`, decrypted.
    pub fn open(
        &self,
        direct_path: &str,
        media_key: &[u8],
        file_enc_sha256: &[u8],
        file_sha256: &[u8],
        info: &str,
    ) -> anyhow::Result<Vec<u8>> {
        let blob = self
            .state
            .lock()
            .expect("lock")
            .blobs
            .get(direct_path)
            .cloned()
            .ok_or_else(|| anyhow::anyhow!("nothing uploaded at {direct_path}"))?;
        anyhow::ensure!(sha256(&blob) == file_enc_sha256, "fileEncSha256 differs");
        let plain = decrypt(&blob, media_key, info)?;
        anyhow::ensure!(sha256(&plain) == file_sha256, "fileSha256 differs");
        Ok(plain)
    }
}

fn answer(status: u16, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(body.into()))
        .expect("response")
}

fn query(request: &Request<Incoming>, key: &str) -> Option<String> {
    request.uri().query()?.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == key).then(|| v.to_string())
    })
}

async fn handle(request: Request<Incoming>, state: &Arc<Mutex<State>>) -> Response<Full<Bytes>> {
    let path = request.uri().path().to_string();
    let refuse = |status: u16, why: String| {
        state
            .lock()
            .expect("lock")
            .refused
            .push(format!("{path}: {why}"));
        answer(status, format!("{{\"error\":\"{why}\"}}"))
    };
    if request.method() == hyper::Method::GET {
        state.lock().expect("lock").downloads.push(path.clone());
        if query(&request, "token").is_none() {
            return refuse(400, "no token".into());
        }
        let blob = state.lock().expect("lock").blobs.get(&path).cloned();
        return match blob {
            Some(blob) => answer(200, blob),
            None => refuse(404, "no such media".into()),
        };
    }
    if request.method() != hyper::Method::POST {
        return refuse(405, "method".into());
    }
    let Some(rest) = path.strip_prefix("/mms/") else {
        return refuse(404, "not an upload path".into());
    };
    let Some((kind, token)) = rest.split_once('/') else {
        return refuse(404, "no token in the path".into());
    };
    let (kind, token) = (kind.to_string(), token.to_string());
    if query(&request, "auth").as_deref() != Some(MEDIA_AUTH) {
        return refuse(401, "bad media auth".into());
    }
    if query(&request, "token").as_deref() != Some(token.as_str()) {
        return refuse(400, "token differs from the path's".into());
    }
    let headers = request.headers();
    if headers.get("origin").and_then(|v| v.to_str().ok()) != Some("https://web.whatsapp.com") {
        return refuse(403, "no WhatsApp Web origin".into());
    }
    if headers
        .get("transfer-encoding")
        .is_some_and(|v| v.to_str().unwrap_or("").contains("chunked"))
    {
        return refuse(400, "chunked upload".into());
    }
    let Some(length) = headers
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
    else {
        return refuse(411, "no content-length".into());
    };
    let body = match request.into_body().collect().await {
        Ok(body) => body.to_bytes().to_vec(),
        Err(e) => return refuse(400, format!("body: {e}")),
    };
    if body.len() != length {
        return refuse(400, "content-length differs from the body".into());
    }
    if b64url(&sha256(&body)) != token {
        return refuse(400, "the token is not the blob's SHA-256".into());
    }
    let direct_path = format!("/v/t62.7118-24/{}_{}.enc", body.len(), &token[..12]);
    let mut s = state.lock().expect("lock");
    s.blobs.insert(direct_path.clone(), body.clone());
    s.uploads.push(Upload {
        kind,
        direct_path: direct_path.clone(),
        blob: body,
    });
    answer(
        200,
        serde_json::json!({
            "url": format!("https://{MEDIA_HOST}{direct_path}"),
            "direct_path": direct_path,
        })
        .to_string(),
    )
}
