//! Slack's Events API over HTTP (`mode: "http"`): one account's request
//! URL (`webhookPath`, `/slack/events` by default) served on the gateway's
//! port through `channels::http_routes`. Every request must be a `POST`
//! of at most 1 MiB whose `X-Slack-Signature` is `v0=` + the hex
//! HMAC-SHA256 of `v0:<X-Slack-Request-Timestamp>:<raw body>` under the
//! app's signing secret (compared in constant time), with a timestamp at
//! most five minutes off the clock; anything else is refused with 401
//! before its body is parsed. `url_verification` is answered with its
//! `challenge`; an `event_callback` goes the way Socket Mode envelopes go
//! (`socket::hand_over`) and is answered 200 only once the inbound sink
//! accepted it, 503 otherwise, so Slack delivers it again. Slack's retries
//! (`X-Slack-Retry-Num`) carry the same event: the pipeline's dedupe (the
//! message's `ts` is its id) answers them once.
//!
//! This file must not send chat messages (the channel does, via `web.rs`)
//! nor shape inbound messages (`translate.rs` does).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hmac::{Hmac, Mac};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};
use sha2::Sha256;
use subtle::ConstantTimeEq;
use tokio_util::sync::CancellationToken;

use super::socket::{hand_over, SocketAccount};
use super::translate::TranslateContext;
use super::web::{SlackIdentity, SlackWeb, AUTH_ERRORS};
use crate::channels::account::{pause, AccountState, Backoff};
use crate::channels::http_routes::{HttpInbound, RouteResponse};
use crate::channels::{BoxFuture, InboundSink, SendError};

/// Largest request body accepted.
pub const MAX_EVENT_BODY_BYTES: usize = 1024 * 1024;
/// Largest distance between a request's timestamp and the clock.
pub const MAX_REQUEST_SKEW_SECS: u64 = 300;
/// Time a client has to send a request's body.
const BODY_READ_TIMEOUT_SECS: u64 = 10;
pub const SIGNATURE_HEADER: &str = "x-slack-signature";
pub const TIMESTAMP_HEADER: &str = "x-slack-request-timestamp";
pub const RETRY_NUM_HEADER: &str = "x-slack-retry-num";
/// The version prefix of the signed base string and the signature.
const SIGNATURE_VERSION: &str = "v0";

/// Why a request was not taken as Slack's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestRefusal {
    #[error("X-Slack-Signature or X-Slack-Request-Timestamp is missing")]
    Unsigned,
    #[error("X-Slack-Request-Timestamp {0:?} is not a Unix time in seconds")]
    BadTimestamp(String),
    #[error(
        "request timestamp is {skew_secs} s off the clock (at most {MAX_REQUEST_SKEW_SECS} s)"
    )]
    Stale { skew_secs: u64 },
    #[error("X-Slack-Signature does not match the signing secret")]
    BadSignature,
}

/// `v0=` + the hex HMAC-SHA256 of `v0:<timestamp>:<body>` under `secret`.
pub fn signature(secret: &str, timestamp: &str, body: &[u8]) -> String {
    // HMAC takes keys of any length.
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes())
        .expect("HMAC accepts keys of every length");
    mac.update(format!("{SIGNATURE_VERSION}:{timestamp}:").as_bytes());
    mac.update(body);
    format!(
        "{SIGNATURE_VERSION}={}",
        hex::encode(mac.finalize().into_bytes())
    )
}

/// Checks a request's timestamp (against `now_secs`) and signature.
pub fn verify(
    secret: &str,
    timestamp: Option<&str>,
    signed: Option<&str>,
    body: &[u8],
    now_secs: u64,
) -> Result<(), RequestRefusal> {
    let (Some(timestamp), Some(signed)) = (timestamp, signed) else {
        return Err(RequestRefusal::Unsigned);
    };
    let at: u64 = timestamp
        .trim()
        .parse()
        .map_err(|_| RequestRefusal::BadTimestamp(timestamp.to_string()))?;
    let skew_secs = at.abs_diff(now_secs);
    if skew_secs > MAX_REQUEST_SKEW_SECS {
        return Err(RequestRefusal::Stale { skew_secs });
    }
    let expected = signature(secret, timestamp, body);
    if bool::from(expected.as_bytes().ct_eq(signed.trim().as_bytes())) {
        Ok(())
    } else {
        Err(RequestRefusal::BadSignature)
    }
}

/// One HTTP-mode account: what its route needs to take events in.
pub struct EventsAccount {
    pub socket: SocketAccount,
    pub signing_secret: String,
    pub web: SlackWeb,
    pub shared: Arc<AccountState<SlackIdentity>>,
}

/// The gateway-port route of one account.
pub struct EventsRoute {
    pub account: Arc<EventsAccount>,
    pub sink: Arc<dyn InboundSink>,
}

/// The owner name of an account's route in `HttpRoutes`.
pub fn route_owner(account_id: &str) -> String {
    format!("slack account {account_id}")
}

impl HttpInbound for EventsRoute {
    fn handle(&self, request: Request<Incoming>) -> BoxFuture<'static, RouteResponse> {
        let (account, sink) = (self.account.clone(), self.sink.clone());
        Box::pin(async move { answer(&account, sink.as_ref(), request).await })
    }
}

fn reply(status: StatusCode, text: &'static str) -> RouteResponse {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *response.status_mut() = status;
    response
}

fn header<'a>(request: &'a Request<Incoming>, name: &str) -> Option<&'a str> {
    request.headers().get(name).and_then(|v| v.to_str().ok())
}

fn now_secs() -> u64 {
    crate::system::clock::now_ms() / 1000
}

async fn answer(
    account: &EventsAccount,
    sink: &dyn InboundSink,
    request: Request<Incoming>,
) -> RouteResponse {
    let id = &account.socket.account_id;
    if request.method() != Method::POST {
        return reply(StatusCode::METHOD_NOT_ALLOWED, "POST only");
    }
    let timestamp = header(&request, TIMESTAMP_HEADER).map(str::to_string);
    let signed = header(&request, SIGNATURE_HEADER).map(str::to_string);
    let retry = header(&request, RETRY_NUM_HEADER).map(str::to_string);
    let read = Limited::new(request.into_body(), MAX_EVENT_BODY_BYTES).collect();
    let body = match tokio::time::timeout(Duration::from_secs(BODY_READ_TIMEOUT_SECS), read).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(_)) => return reply(StatusCode::PAYLOAD_TOO_LARGE, "too large"),
        Err(_) => return reply(StatusCode::REQUEST_TIMEOUT, "too slow"),
    };
    let secret = &account.signing_secret;
    let checked = verify(
        secret,
        timestamp.as_deref(),
        signed.as_deref(),
        &body,
        now_secs(),
    );
    if let Err(refusal) = checked {
        log::warn!("slack[{id}]: events request refused: {refusal}");
        return reply(StatusCode::UNAUTHORIZED, "unauthorized");
    }
    if is_ssl_check(&body) {
        // Slack checking the certificate (form-encoded, not an event).
        return reply(StatusCode::OK, "");
    }
    let Ok(payload) = serde_json::from_slice::<Value>(&body) else {
        return reply(StatusCode::BAD_REQUEST, "not json");
    };
    match payload.get("type").and_then(Value::as_str) {
        Some("url_verification") => challenge(&payload),
        Some("event_callback") => {
            if let Some(retry) = retry {
                log::debug!("slack[{id}]: Slack retry {retry} of an event");
            }
            take_event(account, sink, &payload).await
        }
        _ => reply(StatusCode::OK, ""),
    }
}

/// Slack's form-encoded certificate check (`ssl_check=1&token=…`).
fn is_ssl_check(body: &[u8]) -> bool {
    body.split(|&b| b == b'&')
        .any(|pair| pair == b"ssl_check=1")
}

/// `url_verification`: the `challenge` back, as JSON.
fn challenge(payload: &Value) -> RouteResponse {
    let Some(challenge) = payload.get("challenge").and_then(Value::as_str) else {
        return reply(StatusCode::BAD_REQUEST, "no challenge");
    };
    let body = json!({ "challenge": challenge }).to_string();
    let mut response = Response::new(Full::new(Bytes::from(body)));
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

/// Hands an `event_callback` to the sink: 200 once accepted, else 503.
async fn take_event(
    account: &EventsAccount,
    sink: &dyn InboundSink,
    payload: &Value,
) -> RouteResponse {
    let id = &account.socket.account_id;
    // The bot's identity tells its own messages and mentions apart.
    let Some(bot) = account.shared.identity() else {
        return reply(StatusCode::SERVICE_UNAVAILABLE, "starting");
    };
    account.shared.inbound_now();
    let ctx = TranslateContext {
        account_id: id.clone(),
        bot,
        allow_bots: account.socket.allow_bots,
    };
    let media = &account.socket.media;
    match hand_over(&account.web, media, &ctx, payload, sink).await {
        Ok(()) => reply(StatusCode::OK, ""),
        Err(error) => {
            log::warn!("slack[{id}]: inbound event not accepted: {error}");
            account
                .shared
                .update(|s| s.last_error = Some(format!("inbound event not accepted: {error}")));
            reply(StatusCode::SERVICE_UNAVAILABLE, "try again")
        }
    }
}

/// Learns who the bot is (`auth.test`, retried with backoff) so events
/// can be taken, then stays until `cancel`; token errors end it.
pub async fn run_account(account: Arc<EventsAccount>, cancel: CancellationToken) {
    let shared = &account.shared;
    shared.set_running(true);
    let mut backoff = Backoff::default();
    while shared.identity().is_none() {
        backoff.attempt();
        let tested = tokio::select! {
            _ = cancel.cancelled() => break,
            tested = account.web.auth_test() => tested,
        };
        match tested {
            Ok(bot) => {
                shared.set_identity(bot);
                shared.connected();
            }
            Err(SendError::Permanent(code)) if AUTH_ERRORS.contains(&code.as_str()) => {
                shared.disconnected(format!("auth.test: {code} (check the token)"));
                shared.set_running(false);
                return;
            }
            Err(error) => {
                shared.disconnected(format!("auth.test: {error}"));
                if !pause(&cancel, backoff.next_delay_ms(false)).await {
                    break;
                }
            }
        }
    }
    if shared.identity().is_some() {
        // Known from an earlier start: serving again.
        shared.connected();
    }
    cancel.cancelled().await;
    shared.set_running(false);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Slack's published example of a signed request.
    const DOC_SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
    const DOC_TIMESTAMP: &str = "1531420618";
    const DOC_BODY: &str = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
    const DOC_SIGNATURE: &str =
        "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";

    #[test]
    fn the_form_encoded_certificate_check_is_recognised() {
        assert!(is_ssl_check(b"ssl_check=1&token=abc"));
        assert!(is_ssl_check(b"token=abc&ssl_check=1"));
        assert!(!is_ssl_check(b"ssl_check=0"));
        assert!(!is_ssl_check(
            br#"{"type":"event_callback","ssl_check=1":1}"#
        ));
    }

    #[test]
    fn signature_matches_slacks_documented_example() {
        assert_eq!(
            signature(DOC_SECRET, DOC_TIMESTAMP, DOC_BODY.as_bytes()),
            DOC_SIGNATURE
        );
        let now = 1_531_420_618 + 60;
        let body = DOC_BODY.as_bytes();
        let checked = verify(
            DOC_SECRET,
            Some(DOC_TIMESTAMP),
            Some(DOC_SIGNATURE),
            body,
            now,
        );
        assert_eq!(checked, Ok(()));
    }

    #[test]
    fn a_changed_body_secret_or_signature_is_refused() {
        let now = 1_531_420_618;
        let (ts, sig) = (Some(DOC_TIMESTAMP), Some(DOC_SIGNATURE));
        let tampered = format!("{DOC_BODY}&x=1");
        assert_eq!(
            verify(DOC_SECRET, ts, sig, tampered.as_bytes(), now),
            Err(RequestRefusal::BadSignature)
        );
        assert_eq!(
            verify("another-secret", ts, sig, DOC_BODY.as_bytes(), now),
            Err(RequestRefusal::BadSignature)
        );
        assert_eq!(
            verify(DOC_SECRET, ts, Some("v0=00"), DOC_BODY.as_bytes(), now),
            Err(RequestRefusal::BadSignature)
        );
        assert_eq!(
            verify(DOC_SECRET, None, sig, DOC_BODY.as_bytes(), now),
            Err(RequestRefusal::Unsigned)
        );
        assert_eq!(
            verify(DOC_SECRET, Some("soon"), sig, DOC_BODY.as_bytes(), now),
            Err(RequestRefusal::BadTimestamp("soon".into()))
        );
    }

    #[test]
    fn timestamps_more_than_five_minutes_off_are_refused_either_way() {
        let at: u64 = 1_700_000_000;
        let ts = at.to_string();
        let body = br#"{"type":"event_callback"}"#;
        let signed = signature("s", &ts, body);
        let check = |now| verify("s", Some(&ts), Some(&signed), body, now);
        assert_eq!(check(at + MAX_REQUEST_SKEW_SECS), Ok(()));
        assert_eq!(check(at - MAX_REQUEST_SKEW_SECS), Ok(()));
        assert_eq!(
            check(at + MAX_REQUEST_SKEW_SECS + 1),
            Err(RequestRefusal::Stale { skew_secs: 301 })
        );
        assert_eq!(
            check(at - MAX_REQUEST_SKEW_SECS - 1),
            Err(RequestRefusal::Stale { skew_secs: 301 })
        );
    }
}
