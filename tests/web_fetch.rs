//! `tools.web.fetch` as the `web_fetch` tool applies it, against a page served on loopback (which
//! the SSRF guard refuses unless `ssrfPolicy.allowedHostnames` names it): `userAgent` is the header
//! sent (upstream's browser-like one by default), `maxChars` the default length of the answer,
//! `cacheTtlMinutes` how long an answer is reused (0: never), and `enabled: false` neither offers
//! nor runs the tool.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use pincer::store::{Store, StoreOptions};
use pincer::tools::web_fetch::{WebFetchTool, DEFAULT_USER_AGENT};
use pincer::tools::{Tool, ToolContext};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// A page server: every request gets the same HTML page; it counts requests and keeps the
/// User-Agent of each.
struct Page {
    port: u16,
    hits: Arc<AtomicUsize>,
    agents: Arc<Mutex<Vec<String>>>,
}

async fn serve_page(body: &'static str) -> Page {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let hits = Arc::new(AtomicUsize::new(0));
    let agents = Arc::new(Mutex::new(Vec::new()));
    let (h, a) = (hits.clone(), agents.clone());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && head.len() < 16 * 1024 {
                if socket.read(&mut byte).await.unwrap_or(0) == 0 {
                    break;
                }
                head.push(byte[0]);
            }
            let head = String::from_utf8_lossy(&head).to_string();
            let agent = head
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("user-agent")
                        .then(|| value.trim().to_string())
                })
                .unwrap_or_default();
            a.lock().expect("agents").push(agent);
            h.fetch_add(1, Ordering::SeqCst);
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = socket.write_all(answer.as_bytes()).await;
            let _ = socket.shutdown().await;
        }
    });
    Page { port, hits, agents }
}

fn context(config: &str) -> (tempfile::TempDir, ToolContext) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&dir.path().join("store"), StoreOptions::default()).expect("store");
    let config = pincer::config::parse_str(config, "test").expect("config");
    let ctx = ToolContext {
        agent_id: "main".into(),
        session_key: "agent:main:main".into(),
        workspace: dir.path().to_path_buf(),
        store,
        http: reqwest::Client::new(),
        cancel: CancellationToken::new(),
        config: Arc::new(config),
        services: Default::default(),
    };
    (dir, ctx)
}

const PAGE: &str = "<html><body><p>0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz</p></body></html>";

#[tokio::test]
async fn loopback_needs_allowed_hostnames_and_the_default_user_agent_is_upstreams() {
    let page = serve_page(PAGE).await;
    let url = format!("http://127.0.0.1:{}/page", page.port);
    let (_dir, ctx) = context("{}");
    let refused = WebFetchTool::default()
        .execute(json!({"url": url}), &ctx)
        .await
        .expect_err("loopback is private");
    assert!(refused.to_string().contains("private"), "{refused}");
    assert_eq!(page.hits.load(Ordering::SeqCst), 0);

    let (_dir, ctx) = context(
        r#"{ tools: { web: { fetch: { ssrfPolicy: { allowedHostnames: ["127.0.0.1"] } } } } }"#,
    );
    let out = WebFetchTool::default()
        .execute(json!({"url": url}), &ctx)
        .await
        .expect("an allowed host");
    assert!(out.text.contains("0123456789abcdef"), "{}", out.text);
    assert_eq!(page.agents.lock().expect("agents")[0], DEFAULT_USER_AGENT);
}

#[tokio::test]
async fn user_agent_max_chars_and_the_cache_follow_the_config() {
    let page = serve_page(PAGE).await;
    let url = format!("http://127.0.0.1:{}/page", page.port);
    let (_dir, ctx) = context(
        r#"{ tools: { web: { fetch: { userAgent: "pincer-test/1", maxChars: 100,
             ssrfPolicy: { allowedHostnames: ["127.0.0.1"] } } } } }"#,
    );
    let tool = WebFetchTool::default();
    let first = tool
        .execute(json!({"url": url}), &ctx)
        .await
        .expect("fetch");
    assert_eq!(page.agents.lock().expect("agents")[0], "pincer-test/1");
    let body = first.text.split("\n\n").nth(1).expect("body");
    assert!(
        body.starts_with(&"0123456789abcdefghijklmnopqrstuvwxyz"[..10]),
        "{body}"
    );
    assert!(body.contains("[truncated]"), "cut at maxChars: {body}");
    assert_eq!(
        body.chars().filter(char::is_ascii_alphanumeric).count(),
        100 + "truncated".len()
    );
    // The same URL again within the TTL (15 minutes by default): the kept answer, no request.
    let again = tool
        .execute(json!({"url": url}), &ctx)
        .await
        .expect("cached");
    assert_eq!(page.hits.load(Ordering::SeqCst), 1);
    assert_eq!(again.details.as_ref().expect("details")["cached"], true);
    assert_eq!(again.text, first.text);
    // Another limit is another answer.
    tool.execute(json!({"url": url, "maxChars": 120}), &ctx)
        .await
        .expect("fetch");
    assert_eq!(page.hits.load(Ordering::SeqCst), 2);

    let (_dir, ctx) = context(
        r#"{ tools: { web: { fetch: { cacheTtlMinutes: 0, ssrfPolicy: { allowedHostnames: ["127.0.0.1"] } } } } }"#,
    );
    let tool = WebFetchTool::default();
    tool.execute(json!({"url": url}), &ctx)
        .await
        .expect("fetch");
    tool.execute(json!({"url": url}), &ctx)
        .await
        .expect("fetch");
    assert_eq!(
        page.hits.load(Ordering::SeqCst),
        4,
        "no cache with a zero TTL"
    );
    assert_eq!(tool.cached_entries(), 0);
}

#[tokio::test]
async fn a_disabled_web_fetch_is_neither_offered_nor_run() {
    let (_dir, ctx) = context(r#"{ tools: { web: { fetch: { enabled: false } } } }"#);
    let offered =
        pincer::tools::policy::allowed_tools(&ctx.config, "main", None, &["read", "web_fetch"]);
    assert_eq!(offered, vec!["read".to_string()]);
    let refused = WebFetchTool::default()
        .execute(json!({"url": "https://example.com/"}), &ctx)
        .await
        .expect_err("disabled");
    assert!(
        refused.to_string().contains("tools.web.fetch.enabled"),
        "{refused}"
    );
    let (_dir, on) = context("{}");
    assert_eq!(
        pincer::tools::policy::allowed_tools(&on.config, "main", None, &["read", "web_fetch"])
            .len(),
        2
    );
}
