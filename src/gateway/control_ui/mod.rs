//! pincer's own Control UI on the gateway port: the embedded files under
//! `gateway.controlUi.basePath`, each sent gzip-compressed as built (ETag,
//! `Cache-Control: no-cache`, 304 on `If-None-Match`, 406 for a client that
//! refuses gzip, as upstream answers), with upstream's security headers, and
//! a small bootstrap document telling the page whether first-run setup is
//! open to it. The page itself talks to the gateway only over the WebSocket
//! protocol; nothing here changes state.
//!
//! Routing follows upstream's `classifyControlUiRequest` where the UI has
//! files: `<base>` redirects to `<base>/`, `<base>/` and `<base>/index.html`
//! are the entry page, `<base>/assets/<file>` the embedded files, and under a
//! base path everything else is the UI's 404. Pages route by URL hash, so no
//! other path needs the entry page (upstream's UI routes by path and serves
//! it for every unknown GET); without a base path the gateway's own 404
//! answers every other path, as before the UI existed.

pub mod assets;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Response, StatusCode};
use serde_json::{json, Value};

use super::http::Body;

pub use assets::{embedded_bytes, Asset, ASSETS};

/// The bootstrap document's path under the base path.
pub const BOOTSTRAP_PATH: &str = "/__pincer/bootstrap.json";

/// Upstream's Content-Security-Policy, narrowed to what this UI loads: its
/// own files and the gateway's WebSocket, nothing from elsewhere.
pub const CONTENT_SECURITY_POLICY: &str =
    "default-src 'self'; base-uri 'none'; object-src 'none'; \
     frame-ancestors 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
     connect-src 'self' ws: wss:; form-action 'none'";

/// What a request to the UI's part of the port asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Not the UI's: the gateway answers it (or says 404).
    NotUi,
    NotFound,
    /// `<base>` without the slash.
    Redirect(String),
    Asset(&'static str),
    Bootstrap,
}

/// Where a path of the gateway port goes when the UI is enabled at `base`
/// (normalised: empty, or `/prefix`).
pub fn route(base: &str, method: &Method, path: &str, query: Option<&str>) -> Route {
    if method != Method::GET && method != Method::HEAD {
        return Route::NotUi;
    }
    if !base.is_empty() && path == base {
        let query = query.map(|q| format!("?{q}")).unwrap_or_default();
        return Route::Redirect(format!("{base}/{query}"));
    }
    let Some(inner) = path.strip_prefix(base).filter(|rest| rest.starts_with('/')) else {
        return Route::NotUi;
    };
    if inner == BOOTSTRAP_PATH {
        return Route::Bootstrap;
    }
    if inner == "/" || inner == "/index.html" {
        return Route::Asset("index.html");
    }
    if let Some(name) = inner.strip_prefix("/assets/") {
        return match assets::find(&format!("assets/{name}")) {
            Some(asset) => Route::Asset(asset.path),
            None => Route::NotFound,
        };
    }
    if base.is_empty() {
        Route::NotUi
    } else {
        Route::NotFound
    }
}

/// Whether the client takes a gzip body: no `Accept-Encoding` means any
/// coding (RFC 9110 §12.5.3); otherwise `gzip`, `x-gzip` or `*` with a
/// non-zero weight, and no `gzip;q=0`.
pub fn accepts_gzip(headers: &HeaderMap) -> bool {
    let values: Vec<&str> = headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    if values.is_empty() {
        return true;
    }
    let mut gzip = None;
    let mut any = None;
    for item in values.iter().flat_map(|v| v.split(',')) {
        let mut parts = item.split(';');
        let coding = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        // A weight is "q=" and up to three decimals; only its being zero matters.
        let positive = parts
            .filter_map(|p| p.trim().strip_prefix("q="))
            .next()
            .is_none_or(|q| q.trim().chars().any(|c| c.is_ascii_digit() && c != '0'));
        match coding.as_str() {
            "gzip" | "x-gzip" => gzip = Some(positive),
            "*" => any = Some(positive),
            _ => {}
        }
    }
    gzip.or(any).unwrap_or(false)
}

/// Whether `If-None-Match` names `etag` (weak comparison, as for GET).
pub fn not_modified(headers: &HeaderMap, etag: &str) -> bool {
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|tag| tag.trim().trim_start_matches("W/"))
        .any(|tag| tag == "*" || tag == etag)
}

fn security_headers(headers: &mut HeaderMap) {
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
}

fn empty(status: StatusCode) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::new()).boxed());
    *response.status_mut() = status;
    security_headers(response.headers_mut());
    response
}

/// The response for one embedded file.
pub fn serve_asset(asset: &'static Asset, method: &Method, headers: &HeaderMap) -> Response<Body> {
    let etag = HeaderValue::from_static(asset.etag);
    let cache = HeaderValue::from_static("no-cache");
    let vary = HeaderValue::from_static("Accept-Encoding");
    if not_modified(headers, asset.etag) {
        let mut response = empty(StatusCode::NOT_MODIFIED);
        let h = response.headers_mut();
        h.insert(header::ETAG, etag);
        h.insert(header::CACHE_CONTROL, cache);
        h.insert(header::VARY, vary);
        return response;
    }
    if !accepts_gzip(headers) {
        let mut response =
            Response::new(Full::new(Bytes::from_static(b"Not Acceptable\n")).boxed());
        *response.status_mut() = StatusCode::NOT_ACCEPTABLE;
        let h = response.headers_mut();
        security_headers(h);
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        h.insert(header::VARY, vary);
        return response;
    }
    let body = if method == Method::HEAD {
        Bytes::new()
    } else {
        Bytes::from_static(asset.gzip)
    };
    let mut response = Response::new(Full::new(body).boxed());
    let h = response.headers_mut();
    security_headers(h);
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(asset.content_type),
    );
    h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(asset.gzip.len()));
    h.insert(header::ETAG, etag);
    h.insert(header::CACHE_CONTROL, cache);
    h.insert(header::VARY, vary);
    response
}

/// `<base>` → `<base>/`.
pub fn redirect(location: &str) -> Response<Body> {
    let mut response = empty(StatusCode::FOUND);
    if let Ok(value) = HeaderValue::from_str(location) {
        response.headers_mut().insert(header::LOCATION, value);
    }
    response
}

/// A path under the UI that names no file.
pub fn not_found() -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from_static(b"Not Found\n")).boxed());
    *response.status_mut() = StatusCode::NOT_FOUND;
    let h = response.headers_mut();
    security_headers(h);
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// The bootstrap document (never cached: it changes when setup is done).
pub fn bootstrap(document: &Value) -> Response<Body> {
    let mut response = super::http::json_response(StatusCode::OK, document);
    let h = response.headers_mut();
    security_headers(h);
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// The bootstrap document's fields that do not depend on the caller.
pub fn bootstrap_document(base: &str, auth_mode: &str, version: &str, setup: Value) -> Value {
    json!({
        "basePath": base,
        "authMode": auth_mode,
        "version": version,
        "setup": setup,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                header::HeaderName::from_static(name),
                HeaderValue::from_static(value),
            );
        }
        map
    }

    #[test]
    fn routes_follow_the_base_path() {
        let get = Method::GET;
        assert_eq!(route("", &get, "/", None), Route::Asset("index.html"));
        assert_eq!(
            route("", &get, "/index.html", None),
            Route::Asset("index.html")
        );
        assert_eq!(route("", &get, "/chat", None), Route::NotUi);
        assert_eq!(route("", &get, "/v1/models", None), Route::NotUi);
        assert_eq!(route("", &get, "/health", None), Route::NotUi);
        assert_eq!(
            route("", &get, "/assets/app.js", None),
            Route::Asset("assets/app.js")
        );
        assert_eq!(route("", &get, "/assets/nope.js", None), Route::NotFound);
        assert_eq!(route("", &get, "/x/assets/app.js", None), Route::NotUi);
        assert_eq!(route("", &Method::POST, "/", None), Route::NotUi);
        assert_eq!(route("", &get, BOOTSTRAP_PATH, None), Route::Bootstrap);
        assert_eq!(route("/ui", &get, "/", None), Route::NotUi);
        assert_eq!(
            route("/ui", &get, "/ui", Some("a=1")),
            Route::Redirect("/ui/?a=1".into())
        );
        assert_eq!(route("/ui", &get, "/ui/", None), Route::Asset("index.html"));
        assert_eq!(route("/ui", &get, "/ui/chat", None), Route::NotFound);
        assert_eq!(route("/ui", &get, "/uix/", None), Route::NotUi);
        assert_eq!(
            route("/ui", &get, "/ui/__pincer/bootstrap.json", None),
            Route::Bootstrap
        );
    }

    #[test]
    fn gzip_acceptance_follows_rfc_9110() {
        assert!(accepts_gzip(&headers(&[])));
        assert!(accepts_gzip(&headers(&[(
            "accept-encoding",
            "gzip, deflate, br"
        )])));
        assert!(accepts_gzip(&headers(&[("accept-encoding", "*")])));
        assert!(!accepts_gzip(&headers(&[("accept-encoding", "identity")])));
        assert!(!accepts_gzip(&headers(&[("accept-encoding", "")])));
        assert!(!accepts_gzip(&headers(&[(
            "accept-encoding",
            "gzip;q=0, *"
        )])));
        assert!(!accepts_gzip(&headers(&[("accept-encoding", "*;q=0")])));
        assert!(!accepts_gzip(&headers(&[(
            "accept-encoding",
            "gzip;q=0.000"
        )])));
        assert!(accepts_gzip(&headers(&[("accept-encoding", "gzip;q=0.5")])));
    }

    #[test]
    fn if_none_match_finds_the_etag_in_a_list() {
        let etag = "\"abc\"";
        assert!(not_modified(
            &headers(&[("if-none-match", "\"x\", \"abc\"")]),
            etag
        ));
        assert!(not_modified(
            &headers(&[("if-none-match", "W/\"abc\"")]),
            etag
        ));
        assert!(not_modified(&headers(&[("if-none-match", "*")]), etag));
        assert!(!not_modified(
            &headers(&[("if-none-match", "\"abd\"")]),
            etag
        ));
        assert!(!not_modified(&headers(&[]), etag));
    }

    #[test]
    fn a_matching_etag_gets_304_and_a_refused_coding_406() {
        let index = assets::find("index.html").expect("index");
        let fresh = serve_asset(index, &Method::GET, &headers(&[]));
        assert_eq!(fresh.status(), StatusCode::OK);
        assert_eq!(fresh.headers()[header::CONTENT_ENCODING], "gzip");
        assert_eq!(fresh.headers()[header::ETAG], index.etag);
        assert_eq!(fresh.headers()[header::CACHE_CONTROL], "no-cache");
        let mut cached = HeaderMap::new();
        cached.insert(header::IF_NONE_MATCH, HeaderValue::from_static(index.etag));
        assert_eq!(
            serve_asset(index, &Method::GET, &cached).status(),
            StatusCode::NOT_MODIFIED
        );
        let identity = headers(&[("accept-encoding", "identity")]);
        assert_eq!(
            serve_asset(index, &Method::GET, &identity).status(),
            StatusCode::NOT_ACCEPTABLE
        );
    }
}
