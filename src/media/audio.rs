//! The two OpenAI-compatible audio endpoints, as OpenAI, Groq and LAN Whisper
//! servers (faster-whisper-server, whisper.cpp's server, LocalAI) serve them:
//! - `POST {baseUrl}/audio/transcriptions`: a multipart form (`model`, then
//!   `language` and `prompt` when set, then the `file`, streamed from disk),
//!   answered with JSON `{"text": …}`;
//! - `POST {baseUrl}/audio/speech`: JSON `{model, input, voice,
//!   response_format, instructions?}` answered with the audio bytes, streamed
//!   to a file and cut off at a byte cap.
//!
//! Answers are read with caps; an error answer's message is taken from
//! OpenAI's `{"error": {"message": …}}` shape when it has one.

use std::path::Path;
use std::time::Duration;

use tokio::io::AsyncWriteExt;

use super::multipart::Multipart;

/// The most bytes of a transcription answer read.
pub const MAX_TRANSCRIPT_RESPONSE_BYTES: usize = 2 * 1024 * 1024;
/// The most bytes of an error answer read.
const MAX_ERROR_BODY_BYTES: usize = 16 * 1024;
/// Error messages are cut to this many characters.
const MAX_ERROR_CHARS: usize = 300;

/// Why an audio request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AudioError {
    #[error("the endpoint answered HTTP {status}: {message}")]
    Http { status: u16, message: String },
    #[error("the endpoint could not be reached: {0}")]
    Network(String),
    #[error("the request timed out after {0} s")]
    Timeout(u64),
    #[error("the endpoint's answer is malformed: {0}")]
    Malformed(String),
    #[error("the endpoint sent more than {0} bytes of audio")]
    TooLarge(u64),
    #[error("the audio file could not be read or written: {0}")]
    Io(String),
}

/// Where an OpenAI-compatible audio API lives and how to sign in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AudioEndpoint {
    /// The API root (`https://api.openai.com/v1`, `http://whisper.lan:8000/v1`).
    pub base_url: String,
    /// Sent as `Authorization: Bearer …` when present.
    pub api_key: Option<String>,
    /// Extra request headers.
    pub headers: Vec<(String, String)>,
}

impl AudioEndpoint {
    fn url(&self, path: &str) -> String {
        format!("{}/{path}", self.base_url.trim_end_matches('/'))
    }

    fn sign(&self, mut request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        if let Some(key) = self.api_key.as_deref().filter(|k| !k.is_empty()) {
            request = request.bearer_auth(key);
        }
        for (name, value) in &self.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        request
    }
}

/// One transcription.
#[derive(Debug, Clone, Copy)]
pub struct Transcription<'a> {
    pub model: &'a str,
    pub language: Option<&'a str>,
    pub prompt: Option<&'a str>,
    pub file: &'a Path,
    /// The name the file is uploaded as (its extension tells the format).
    pub file_name: &'a str,
    pub mime: &'a str,
    pub timeout: Duration,
}

/// Transcribes `job.file`; returns the text (trimmed).
pub async fn transcribe(
    http: &reqwest::Client,
    endpoint: &AudioEndpoint,
    job: Transcription<'_>,
) -> Result<String, AudioError> {
    let mut form = Multipart::new().text("model", job.model);
    for (name, value) in [("language", job.language), ("prompt", job.prompt)] {
        if let Some(value) = value.map(str::trim).filter(|v| !v.is_empty()) {
            form = form.text(name, value);
        }
    }
    let form = form
        .file("file", job.file_name, job.mime, job.file)
        .map_err(|e| AudioError::Io(e.to_string()))?;
    let request = form.attach(endpoint.sign(http.post(endpoint.url("audio/transcriptions"))));
    let seconds = job.timeout.as_secs();
    let work = async {
        let response = request.send().await.map_err(network)?;
        if !response.status().is_success() {
            return Err(http_error(response).await);
        }
        let body = read_capped(response, MAX_TRANSCRIPT_RESPONSE_BYTES).await?;
        let value: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|e| AudioError::Malformed(format!("not JSON ({e})")))?;
        value["text"]
            .as_str()
            .map(|t| t.trim().to_string())
            .ok_or_else(|| AudioError::Malformed("no \"text\" in the answer".into()))
    };
    tokio::time::timeout(job.timeout, work)
        .await
        .map_err(|_| AudioError::Timeout(seconds))?
}

/// One synthesis.
#[derive(Debug, Clone)]
pub struct Speech<'a> {
    pub model: &'a str,
    pub voice: &'a str,
    pub input: &'a str,
    /// `opus` (Ogg/Opus, for voice notes), `mp3`, `wav`, …
    pub response_format: &'a str,
    pub instructions: Option<&'a str>,
    /// Extra JSON fields merged into the body (after the generated ones).
    pub extra_body: Option<&'a serde_json::Map<String, serde_json::Value>>,
    pub timeout: Duration,
    /// The answer is cut off (and the request failed) past this many bytes.
    pub max_bytes: u64,
}

/// Synthesizes `job.input` into the file `out`; returns its size. A failed
/// request leaves no file behind.
pub async fn synthesize(
    http: &reqwest::Client,
    endpoint: &AudioEndpoint,
    job: Speech<'_>,
    out: &Path,
) -> Result<u64, AudioError> {
    let mut body = serde_json::json!({
        "model": job.model,
        "input": job.input,
        "voice": job.voice,
        "response_format": job.response_format,
    });
    if let Some(instructions) = job.instructions.filter(|i| !i.trim().is_empty()) {
        body["instructions"] = instructions.into();
    }
    if let (Some(extra), Some(fields)) = (job.extra_body, body.as_object_mut()) {
        for (key, value) in extra {
            if !matches!(key.as_str(), "__proto__" | "constructor" | "prototype") {
                fields.insert(key.clone(), value.clone());
            }
        }
    }
    let request = endpoint
        .sign(http.post(endpoint.url("audio/speech")))
        .json(&body);
    let seconds = job.timeout.as_secs();
    let work = async {
        let mut response = request.send().await.map_err(network)?;
        if !response.status().is_success() {
            return Err(http_error(response).await);
        }
        let io = |e: std::io::Error| AudioError::Io(e.to_string());
        let mut file = tokio::fs::File::create(out).await.map_err(io)?;
        let mut written: u64 = 0;
        while let Some(chunk) = response.chunk().await.map_err(network)? {
            written += chunk.len() as u64;
            if written > job.max_bytes {
                return Err(AudioError::TooLarge(job.max_bytes));
            }
            file.write_all(&chunk).await.map_err(io)?;
        }
        file.flush().await.map_err(io)?;
        if written == 0 {
            return Err(AudioError::Malformed("the answer had no audio".into()));
        }
        Ok(written)
    };
    let result = tokio::time::timeout(job.timeout, work)
        .await
        .map_err(|_| AudioError::Timeout(seconds))
        .and_then(|r| r);
    if result.is_err() {
        let _ = tokio::fs::remove_file(out).await;
    }
    result
}

fn network(error: reqwest::Error) -> AudioError {
    let mut causes = String::new();
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        causes.push_str(": ");
        causes.push_str(&cause.to_string());
        source = cause.source();
    }
    AudioError::Network(format!("{}{causes}", error.without_url()))
}

async fn read_capped(mut response: reqwest::Response, cap: usize) -> Result<Vec<u8>, AudioError> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(network)? {
        if body.len() + chunk.len() > cap {
            return Err(AudioError::Malformed(format!(
                "the answer is over {cap} bytes"
            )));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

async fn http_error(mut response: reqwest::Response) -> AudioError {
    let status = response.status().as_u16();
    let mut body = Vec::new();
    while let Ok(Some(chunk)) = response.chunk().await {
        let room = MAX_ERROR_BODY_BYTES.saturating_sub(body.len());
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if room == 0 {
            break;
        }
    }
    let message = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| {
            v["error"]["message"]
                .as_str()
                .or_else(|| v["error"].as_str())
                .or_else(|| v["detail"].as_str())
                .map(str::to_string)
        })
        .unwrap_or_else(|| String::from_utf8_lossy(&body).trim().to_string());
    let message: String = message.chars().take(MAX_ERROR_CHARS).collect();
    AudioError::Http {
        status,
        message: if message.is_empty() {
            "no details".to_string()
        } else {
            message
        },
    }
}
