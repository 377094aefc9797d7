//! Webhook mode for one account (`webhookUrl` set). Served on the
//! gateway's own port (`POST <webhookPath>` through `channels::http_routes`)
//! unless `webhookHost` or `webhookPort` is set: then, as upstream, a small
//! HTTP server of its own on `webhookHost:webhookPort` (127.0.0.1:8787 by
//! default). Either way it accepts `POST <webhookPath>` only with the
//! `X-Telegram-Bot-Api-Secret-Token` header equal to `webhookSecret`
//! (required), bodies up to 1 MiB within 30 s, and at most
//! `MAX_WEBHOOK_CONNECTIONS` connections, each closed after a while; `setWebhook` registers the public URL (retried with
//! backoff). An update is answered 200 only after the inbound sink accepted
//! it; otherwise 503, so Telegram delivers it again and nothing is lost.
//!
//! This file must not shape messages or keep an offset (Telegram tracks
//! webhook delivery itself).

use std::convert::Infallible;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::Value;
use subtle::ConstantTimeEq;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::inbound::BotIdentity;
use super::poll::HandleError;
use super::poll::{identify, pause, process_update, record_api_error, unless_stopped, BACKOFF};
use super::Account;
use crate::channels::http_routes::{HttpInbound, RouteResponse};
use crate::channels::{BoxFuture, InboundSink};

/// Largest update body accepted (upstream's `TELEGRAM_WEBHOOK_MAX_BODY_BYTES`).
pub const MAX_WEBHOOK_BODY_BYTES: usize = 1024 * 1024;
/// Connections served at once; also the `max_connections` asked of Telegram.
pub const MAX_WEBHOOK_CONNECTIONS: usize = 4;
/// Time to send a request's headers (upstream's body timeout is 30 s too).
const HEADER_READ_TIMEOUT_SECS: u64 = 30;
/// Time to send a request's body.
const BODY_READ_TIMEOUT_SECS: u64 = 30;
/// After this long a connection is closed once its request is answered, so
/// idle connections cannot hold the connection slots forever.
const MAX_CONNECTION_SECS: u64 = 120;
/// The header Telegram puts the secret token in.
pub const SECRET_HEADER: &str = "x-telegram-bot-api-secret-token";

/// Where and how an account receives its webhook calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookSettings {
    /// The public URL registered with Telegram.
    pub url: String,
    pub secret: String,
    pub host: String,
    pub port: u16,
    pub path: String,
    /// `webhookHost`/`webhookPort` were configured: a listener of its own
    /// (else the gateway's port, when the gateway offers its routes).
    pub own_listener: bool,
}

/// One account's webhook receiver.
pub struct WebhookReceiver {
    pub account: Arc<Account>,
    pub settings: WebhookSettings,
    pub sink: Arc<dyn InboundSink>,
    pub stop: CancellationToken,
    /// Set once the bot is identified: the gateway-port route answers 503
    /// until then (Telegram delivers again).
    pub ready: Arc<OnceLock<Arc<Shared>>>,
}

/// The gateway-port route of one account's webhook.
pub struct WebhookRoute {
    pub ready: Arc<OnceLock<Arc<Shared>>>,
}

impl HttpInbound for WebhookRoute {
    fn handle(&self, request: Request<Incoming>) -> BoxFuture<'static, RouteResponse> {
        let shared = self.ready.get().cloned();
        Box::pin(async move {
            match shared {
                Some(shared) => answer(shared, request).await.unwrap_or_else(|e| match e {}),
                None => reply(StatusCode::SERVICE_UNAVAILABLE, "starting"),
            }
        })
    }
}

/// The owner name of an account's route in `HttpRoutes`.
pub fn route_owner(account_id: &str) -> String {
    format!("telegram account {account_id}")
}

/// What one request handler needs.
pub struct Shared {
    account: Arc<Account>,
    settings: WebhookSettings,
    sink: Arc<dyn InboundSink>,
    stop: CancellationToken,
    bot: BotIdentity,
}

impl WebhookReceiver {
    /// Serves until stopped; setup failures end up in the account's status.
    pub async fn run(self) {
        if self.settings.secret.trim().is_empty() {
            self.account.mark_disconnected(
                "webhook mode needs a non-empty channels.telegram.webhookSecret".to_string(),
            );
            return;
        }
        let Some(bot) = identify(&self.account, &self.stop).await else {
            return;
        };
        if !self.settings.own_listener {
            let shared = Arc::new(Shared {
                account: Arc::clone(&self.account),
                settings: self.settings.clone(),
                sink: Arc::clone(&self.sink),
                stop: self.stop.clone(),
                bot,
            });
            // The route is in place since start; from now on it answers.
            let _ = self.ready.set(shared);
            self.register().await;
            self.stop.cancelled().await;
            return;
        }
        let address = format!("{}:{}", self.settings.host, self.settings.port);
        let listener = match TcpListener::bind(&address).await {
            Ok(listener) => listener,
            Err(error) => {
                self.account
                    .mark_disconnected(format!("cannot listen for webhooks on {address}: {error}"));
                return;
            }
        };
        let shared = Arc::new(Shared {
            account: Arc::clone(&self.account),
            settings: self.settings.clone(),
            sink: Arc::clone(&self.sink),
            stop: self.stop.clone(),
            bot,
        });
        tokio::join!(self.register(), serve(listener, shared));
    }

    /// `setWebhook` until Telegram accepts it (or the account stops).
    async fn register(&self) {
        let mut backoff = BACKOFF;
        loop {
            let call = self.account.api.set_webhook(
                &self.settings.url,
                &self.settings.secret,
                MAX_WEBHOOK_CONNECTIONS,
            );
            match unless_stopped(&self.stop, call).await {
                None => return,
                Some(Ok(_)) => {
                    self.account.mark_connected();
                    return;
                }
                Some(Err(error)) => {
                    record_api_error(&self.account, &error);
                    if error.is_unauthorized() {
                        return;
                    }
                }
            }
            if !pause(&self.stop, backoff.next_delay()).await {
                return;
            }
        }
    }
}

async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    let connections = Arc::new(Semaphore::new(MAX_WEBHOOK_CONNECTIONS));
    loop {
        let permit = tokio::select! {
            _ = shared.stop.cancelled() => return,
            permit = Arc::clone(&connections).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return,
            },
        };
        let stream = tokio::select! {
            _ = shared.stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    log::warn!("telegram webhook: accept failed: {error}");
                    continue;
                }
            },
        };
        let shared = Arc::clone(&shared);
        tokio::spawn(serve_connection(stream, permit, shared));
    }
}

async fn serve_connection(
    stream: tokio::net::TcpStream,
    _permit: tokio::sync::OwnedSemaphorePermit,
    shared: Arc<Shared>,
) {
    let service = service_fn(|request| answer(Arc::clone(&shared), request));
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(HEADER_READ_TIMEOUT_SECS))
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    let lifetime = tokio::time::sleep(Duration::from_secs(MAX_CONNECTION_SECS));
    tokio::pin!(lifetime);
    loop {
        tokio::select! {
            _ = shared.stop.cancelled() => return,
            _ = &mut connection => return,
            _ = &mut lifetime => {
                connection.as_mut().graceful_shutdown();
                lifetime.as_mut().reset(tokio::time::Instant::now() + Duration::from_secs(BODY_READ_TIMEOUT_SECS));
            }
        }
    }
}

fn reply(status: StatusCode, text: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *response.status_mut() = status;
    response
}

fn secret_matches(request: &Request<Incoming>, secret: &str) -> bool {
    let mut values = request.headers().get_all(SECRET_HEADER).iter();
    match (values.next(), values.next()) {
        (Some(value), None) => bool::from(value.as_bytes().ct_eq(secret.as_bytes())),
        _ => false,
    }
}

async fn answer(
    shared: Arc<Shared>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if request.method() != Method::POST || request.uri().path() != shared.settings.path {
        return Ok(reply(StatusCode::NOT_FOUND, "not found"));
    }
    if !secret_matches(&request, &shared.settings.secret) {
        return Ok(reply(StatusCode::UNAUTHORIZED, "unauthorized"));
    }
    let read = Limited::new(request.into_body(), MAX_WEBHOOK_BODY_BYTES).collect();
    let body = match tokio::time::timeout(Duration::from_secs(BODY_READ_TIMEOUT_SECS), read).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(_)) => return Ok(reply(StatusCode::PAYLOAD_TOO_LARGE, "too large")),
        Err(_) => return Ok(reply(StatusCode::REQUEST_TIMEOUT, "too slow")),
    };
    let update: Value = match serde_json::from_slice(&body) {
        Ok(update) => update,
        Err(_) => return Ok(reply(StatusCode::BAD_REQUEST, "not json")),
    };
    let Some(update_id) = update.get("update_id").and_then(Value::as_i64) else {
        return Ok(reply(StatusCode::BAD_REQUEST, "no update_id"));
    };
    let outcome = process_update(
        &shared.account,
        shared.sink.as_ref(),
        &shared.stop,
        &shared.bot,
        update_id,
        update,
    )
    .await;
    Ok(match outcome {
        Ok(()) => reply(StatusCode::OK, "ok"),
        Err(HandleError::Stopped) => reply(StatusCode::SERVICE_UNAVAILABLE, "stopping"),
        Err(HandleError::Refused(reason)) => {
            shared
                .account
                .record_error(format!("inbound sink refused update {update_id}: {reason}"));
            reply(StatusCode::SERVICE_UNAVAILABLE, "try again")
        }
    })
}
