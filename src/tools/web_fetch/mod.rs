//! `web_fetch`: an HTTP(S) GET with a size cap, a timeout, bounded redirects
//! and text extraction — and an SSRF guard: loopback, private, link-local,
//! CGNAT and cloud-metadata addresses are refused, for the first request and
//! for every redirect, after DNS resolution, unless the host is one of
//! `tools.web.fetch.ssrfPolicy.allowedHostnames`.
//!
//! `tools.web.fetch` as upstream reads it: `enabled` (false: the tool is not
//! offered), `maxChars` (the default when a call names none, within
//! `maxCharsCap`), `maxResponseBytes`, `timeoutSeconds`, `maxRedirects`,
//! `userAgent` (else upstream's browser-like default) and `cacheTtlMinutes`
//! (answers kept that long, 15 minutes by default, 0 for none; see `cache`).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{json, Value};

use super::{arg_str, arg_u64, Tool, ToolContext, ToolError, ToolFuture, ToolOutput};
use crate::config::WebFetchConfig;

mod cache;

pub use cache::{FetchCache, MAX_CACHED_BYTES, MAX_CACHED_ENTRIES};

/// Bytes of a response read at most unless `maxResponseBytes` says otherwise (upstream's).
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 750_000;
/// `maxResponseBytes` is kept within these bounds (upstream's).
pub const MIN_MAX_RESPONSE_BYTES: u64 = 32_000;
pub const MAX_MAX_RESPONSE_BYTES: u64 = 10_000_000;
/// Characters returned to the model unless the call or `maxChars` says otherwise.
pub const DEFAULT_MAX_CHARS: u64 = 20_000;
/// Fewest characters a fetch returns.
pub const MIN_MAX_CHARS: u64 = 100;
/// Whole-request timeout unless `timeoutSeconds` says otherwise (upstream's).
pub const DEFAULT_TIMEOUT_SECS: u64 = 30;
/// How long an answer is reused unless `cacheTtlMinutes` says otherwise (upstream's).
pub const DEFAULT_CACHE_TTL_MINUTES: f64 = 15.0;
/// The User-Agent sent unless `userAgent` says otherwise: upstream's browser-like default (some
/// sites refuse clients that do not look like a browser).
pub const DEFAULT_USER_AGENT: &str = "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_7_2) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/122.0.0.0 Safari/537.36";

/// Whether an address may be fetched (public unicast only).
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                || o[0] == 0
                || (o[0] == 100 && (o[1] & 0xC0) == 64)
                || (o[0] == 198 && (o[1] & 0xFE) == 18)
                || o[0] >= 240)
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public(IpAddr::V4(v4));
            }
            let s = v6.segments();
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00
                || (s[0] & 0xffc0) == 0xfe80)
        }
    }
}

/// Whether `host` is one of `allowed` (exact hostnames or IP literals, case-insensitive; IPv6 with
/// or without brackets).
fn is_allowed_host(host: &str, allowed: &[String]) -> bool {
    let bare = |h: &str| {
        h.trim()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase()
    };
    let host = bare(host);
    allowed.iter().any(|a| bare(a) == host)
}

async fn check_host(url: &reqwest::Url, allowed: &[String]) -> Result<(), ToolError> {
    match url.scheme() {
        "http" | "https" => {}
        other => {
            return Err(ToolError::Denied(format!(
                "only http and https URLs can be fetched, not {other}:"
            )))
        }
    }
    let host = url
        .host_str()
        .ok_or_else(|| ToolError::InvalidArguments("URL has no host".into()))?;
    let port = url.port_or_known_default().unwrap_or(80);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if is_allowed_host(host, allowed) {
        return Ok(());
    }
    let addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => tokio::net::lookup_host((host, port))
            .await
            .map_err(|e| ToolError::Failed(format!("cannot resolve {host}: {e}")))?
            .collect(),
    };
    if addrs.is_empty() || addrs.iter().any(|a| !is_public(a.ip())) {
        return Err(ToolError::Denied(format!(
            "{host} resolves to a private, loopback or link-local address; web_fetch only reaches public hosts"
        )));
    }
    Ok(())
}

/// Crude but bounded HTML → text: drops scripts, styles and tags, folds space.
pub fn html_to_text(html: &str) -> String {
    let mut out = String::with_capacity(html.len() / 2);
    let lower = html.to_ascii_lowercase();
    let mut i = 0;
    while i < html.len() {
        if lower[i..].starts_with("<script") || lower[i..].starts_with("<style") {
            let close = if lower[i..].starts_with("<script") {
                "</script>"
            } else {
                "</style>"
            };
            i = lower[i..]
                .find(close)
                .map(|p| i + p + close.len())
                .unwrap_or(html.len());
            continue;
        }
        let c = html[i..].chars().next().unwrap_or(' ');
        if c == '<' {
            let end = html[i..].find('>').map(|p| i + p + 1).unwrap_or(html.len());
            let tag = &lower[i..end];
            if ["<p", "<br", "<div", "<li", "<h1", "<h2", "<h3", "<tr"]
                .iter()
                .any(|t| tag.starts_with(t))
            {
                out.push('\n');
            }
            i = end;
            continue;
        }
        out.push(c);
        i += c.len_utf8();
    }
    let decoded = out
        .replace("&amp;", "&")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&nbsp;", " ");
    decoded
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The fetch limits of one call: the call's own, else `tools.web.fetch`'s, else upstream's.
struct FetchLimits {
    max_chars: usize,
    max_bytes: u64,
    timeout: Duration,
    max_redirects: u32,
    user_agent: String,
    cache_ttl: Duration,
}

impl FetchLimits {
    fn resolve(fetch: &WebFetchConfig, requested_chars: Option<u64>) -> FetchLimits {
        let cap = u64::from(fetch.max_chars_cap).max(MIN_MAX_CHARS);
        let max_chars = requested_chars
            .or(fetch.max_chars.map(u64::from))
            .unwrap_or(DEFAULT_MAX_CHARS)
            .clamp(MIN_MAX_CHARS, cap);
        let ttl_minutes = fetch
            .cache_ttl_minutes
            .filter(|m| m.is_finite())
            .unwrap_or(DEFAULT_CACHE_TTL_MINUTES)
            .max(0.0);
        FetchLimits {
            max_chars: usize::try_from(max_chars).unwrap_or(usize::MAX),
            max_bytes: fetch
                .max_response_bytes
                .unwrap_or(DEFAULT_MAX_RESPONSE_BYTES)
                .clamp(MIN_MAX_RESPONSE_BYTES, MAX_MAX_RESPONSE_BYTES),
            timeout: Duration::from_secs(
                fetch
                    .timeout_seconds
                    .map_or(DEFAULT_TIMEOUT_SECS, u64::from)
                    .max(1),
            ),
            max_redirects: fetch.max_redirects,
            user_agent: fetch
                .user_agent
                .clone()
                .filter(|ua| !ua.trim().is_empty())
                .unwrap_or_else(|| DEFAULT_USER_AGENT.to_owned()),
            cache_ttl: Duration::from_secs_f64(ttl_minutes * 60.0),
        }
    }
}

/// The `web_fetch` tool; it keeps the answers cache of the gateway.
#[derive(Default)]
pub struct WebFetchTool {
    cache: FetchCache,
}

impl WebFetchTool {
    /// Answers kept now (tests and status).
    pub fn cached_entries(&self) -> usize {
        self.cache.len()
    }
}

impl Tool for WebFetchTool {
    fn name(&self) -> &'static str {
        "web_fetch"
    }
    fn description(&self) -> &'static str {
        "Fetch a public web page (http/https) and return its text."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"url": {"type": "string"},
               "maxChars": {"type": "integer", "minimum": 100}}, "required": ["url"]})
    }
    fn execute<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            let fetch = &ctx.config.tools.web.fetch;
            if !fetch.enabled {
                return Err(ToolError::Denied(
                    "web_fetch is disabled (tools.web.fetch.enabled: false)".into(),
                ));
            }
            let limits = FetchLimits::resolve(fetch, arg_u64(&args, "maxChars")?);
            let url = reqwest::Url::parse(arg_str(&args, "url")?)
                .map_err(|e| ToolError::InvalidArguments(format!("url: {e}")))?;
            let key = cache::key(url.as_str(), limits.max_chars, &limits.user_agent);
            if let Some(mut hit) = self.cache.get(&key, limits.cache_ttl) {
                if let Some(details) = hit.details.as_mut() {
                    details["cached"] = json!(true);
                }
                return Ok(hit);
            }
            let output = fetch_page(ctx, url, &limits).await?;
            self.cache.put(key, limits.cache_ttl, &output);
            Ok(output)
        })
    }
}

/// One fetch, following redirects itself (each hop passes the SSRF guard).
async fn fetch_page(
    ctx: &ToolContext,
    mut url: reqwest::Url,
    limits: &FetchLimits,
) -> Result<ToolOutput, ToolError> {
    let allowed = &ctx.config.tools.web.fetch.ssrf_policy.allowed_hostnames;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(limits.timeout)
        .user_agent(limits.user_agent.as_str())
        .build()
        .map_err(|e| ToolError::Failed(e.to_string()))?;
    let mut redirects = 0;
    let response = loop {
        check_host(&url, allowed).await?;
        let response = tokio::select! {
            r = client.get(url.clone()).send() => r.map_err(|e| ToolError::Failed(format!("fetch failed: {e}")))?,
            _ = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
        };
        if response.status().is_redirection() {
            redirects += 1;
            if redirects > limits.max_redirects {
                return Err(ToolError::Failed(format!(
                    "more than {} redirects",
                    limits.max_redirects
                )));
            }
            let location = response
                .headers()
                .get("location")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            url = url
                .join(location)
                .map_err(|e| ToolError::Failed(format!("bad redirect: {e}")))?;
            continue;
        }
        break response;
    };
    let status = response.status().as_u16();
    let html = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.contains("html"));
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    let mut truncated = false;
    let max_bytes = usize::try_from(limits.max_bytes).unwrap_or(usize::MAX);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| ToolError::Failed(format!("reading the body: {e}")))?;
        let room = max_bytes.saturating_sub(body.len());
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if chunk.len() > room {
            truncated = true;
            break;
        }
    }
    let raw = String::from_utf8_lossy(&body);
    let mut text = if html {
        html_to_text(&raw)
    } else {
        raw.into_owned()
    };
    if text.chars().count() > limits.max_chars {
        text = text.chars().take(limits.max_chars).collect::<String>() + "\n…[truncated]";
        truncated = true;
    }
    Ok(ToolOutput {
        text: format!("HTTP {status} {url}\n\n{text}"),
        details: Some(json!({"status": status, "url": url.as_str(), "truncated": truncated})),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_and_metadata_addresses_are_not_public() {
        for blocked in [
            "127.0.0.1",
            "10.1.2.3",
            "192.168.0.1",
            "172.16.5.4",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
        ] {
            assert!(!is_public(blocked.parse().expect("ip")), "{blocked}");
        }
        for allowed in ["93.184.216.34", "1.1.1.1", "2606:4700:4700::1111"] {
            assert!(is_public(allowed.parse().expect("ip")), "{allowed}");
        }
    }

    #[tokio::test]
    async fn loopback_urls_are_refused_before_any_request() {
        for url in [
            "http://127.0.0.1:9/x",
            "http://localhost/",
            "http://[::1]/",
            "file:///etc/passwd",
        ] {
            let url = reqwest::Url::parse(url).expect("url");
            assert!(
                matches!(check_host(&url, &[]).await, Err(ToolError::Denied(_))),
                "{url}"
            );
        }
    }

    #[test]
    fn html_becomes_text_without_scripts() {
        let text = html_to_text(
            "<html><script>evil()</script><h1>Title</h1><p>Hello &amp; <b>bye</b></p></html>",
        );
        assert_eq!(text, "Title\nHello & bye");
    }
}
