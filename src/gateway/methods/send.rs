//! `send` and `channels.status`: outbound delivery to a chat channel through
//! the registry's adapters (with the channel's limits and retry policy), and
//! each adapter account's state, in upstream's shapes. `send` is cached
//! under `send:<idempotencyKey>` like upstream; the web chat is internal and
//! refused (its messages go through `chat.send`). Attachments (`mediaUrl`,
//! `mediaUrls`, `asVoice`, as upstream) go through `channels::media_out`:
//! local paths from the agent's workspace or the media area only.
//!
//! This file must not talk to a platform API itself: adapters do.

use std::sync::{Arc, Weak};

use serde_json::{json, Value};

use crate::channels::media_out::{send_media_reply, MediaReply, MediaSources};
use crate::channels::outbound::{self, DeliveryError, ReplyQuote};
use crate::channels::settings::ChannelSettings;
use crate::channels::{Channel, OutboundTarget, TextFormat};
use crate::config::schema::channels::DEFAULT_ACCOUNT_ID;
use crate::gateway::frames::ErrorShape;
use crate::gateway::idempotency::Seen;
use crate::gateway::state::GatewayState;
use crate::routing::session_key::agent_of_key;
use crate::system::clock::now_ms;
use crate::tools::message::{
    MessageError, MessageReceipt, MessageRequest, Messenger, MessengerFuture,
};

use super::chat::WEBCHAT_CHANNEL;
use super::figures;
use super::params::Params;

/// One outbound message, as `send` and the `message` tool ask for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboundRequest {
    pub channel: Option<String>,
    pub account_id: Option<String>,
    pub to: String,
    pub thread_id: Option<String>,
    pub text: String,
    /// Files to send (paths or `https` URLs).
    pub media_urls: Vec<String>,
    /// Audio goes as a voice note.
    pub as_voice: bool,
    /// Whose workspace local paths come from (default: the default agent).
    pub agent_id: Option<String>,
}

/// What a delivered message became.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    pub channel: String,
    pub message_id: String,
    pub to: String,
}

/// Why an outbound request was not delivered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendFailure {
    /// Bad request (unknown or internal channel, nothing to send).
    #[error("{0}")]
    Invalid(String),
    /// The channel is not running in this gateway.
    #[error("{0}")]
    Unavailable(String),
    #[error(transparent)]
    Delivery(#[from] DeliveryError),
}

impl SendFailure {
    fn to_error(&self) -> ErrorShape {
        match self {
            SendFailure::Invalid(message) => ErrorShape::invalid(message.clone()),
            SendFailure::Unavailable(message) => ErrorShape::unavailable(message.clone()),
            SendFailure::Delivery(error) => ErrorShape::unavailable(error.to_string()),
        }
    }
}

/// The adapter a request names, or the only one running.
fn select_channel(
    state: &GatewayState,
    requested: Option<&str>,
) -> Result<Arc<dyn Channel>, SendFailure> {
    let requested = requested.map(|c| c.trim().to_lowercase());
    match requested.as_deref() {
        Some(WEBCHAT_CHANNEL) => Err(SendFailure::Invalid(
            "unsupported channel: webchat is internal-only (web chat messages go through chat.send)"
                .into(),
        )),
        Some(channel) => state.services.channels.get(channel).ok_or_else(|| {
            SendFailure::Unavailable(format!(
                "channel {channel:?} is not running in this gateway (configure channels.{channel})"
            ))
        }),
        None => {
            let ids = state.services.channels.ids();
            match ids.as_slice() {
                [only] => state
                    .services.channels
                    .get(only)
                    .ok_or_else(|| SendFailure::Invalid(format!("unsupported channel: {only}"))),
                [] => Err(SendFailure::Invalid(
                    "no chat channel is running in this gateway (configure channels.*)".into(),
                )),
                _ => Err(SendFailure::Invalid(format!(
                    "channel is required: several channels are running ({})",
                    ids.join(", ")
                ))),
            }
        }
    }
}

/// Delivers one text through the registry (limits, retries, echo record).
pub async fn deliver(
    state: &Arc<GatewayState>,
    request: &OutboundRequest,
    session_key: Option<&str>,
) -> Result<Delivered, SendFailure> {
    let text = request.text.trim();
    if text.is_empty() && request.media_urls.is_empty() {
        return Err(SendFailure::Invalid("text or media is required".into()));
    }
    let to = request.to.trim();
    if to.is_empty() {
        return Err(SendFailure::Invalid("to is required".into()));
    }
    let adapter = select_channel(state, request.channel.as_deref())?;
    let account_id = request
        .account_id
        .clone()
        .unwrap_or_else(|| DEFAULT_ACCOUNT_ID.to_string());
    let settings = ChannelSettings::resolve(&state.config(), adapter.id(), &account_id);
    let limits = settings.text_limits(adapter.text_limits());
    let target = OutboundTarget {
        account_id,
        to: to.to_string(),
        thread_id: request.thread_id.clone(),
        reply_to_message_id: None,
    };
    if !request.media_urls.is_empty() {
        return deliver_media(state, request, &*adapter, &target, &settings, session_key).await;
    }
    let sent = outbound::send_text(
        &*adapter,
        &target,
        text,
        TextFormat::Markdown,
        settings.retry,
        limits,
    )
    .await?;
    if let Some(key) = session_key {
        let pipeline = crate::gateway::webchat::pipeline_of(state);
        for piece in outbound::split_for_limits(text, limits) {
            pipeline.record_outbound(key, &piece);
        }
    }
    Ok(Delivered {
        channel: adapter.id().to_string(),
        message_id: sent
            .last()
            .map(|m| m.message_id.clone())
            .unwrap_or_default(),
        to: to.to_string(),
    })
}

/// A request with attachments: text and files through `media_out`; what
/// could not be sent is said in the chat and makes the request fail when
/// nothing went out.
async fn deliver_media(
    state: &Arc<GatewayState>,
    request: &OutboundRequest,
    adapter: &dyn Channel,
    target: &OutboundTarget,
    settings: &ChannelSettings,
    session_key: Option<&str>,
) -> Result<Delivered, SendFailure> {
    let config = state.config();
    let agent_id = request
        .agent_id
        .clone()
        .or_else(|| session_key.and_then(agent_of_key).map(str::to_string))
        .unwrap_or_else(|| config.agents.default_agent_id().to_string());
    let sources = MediaSources {
        workspace: state.workspace_for(&config, &agent_id),
        media_root: crate::channels::media::media_root(),
        http: state.services.runtime.http(),
    };
    let quote = ReplyQuote::none();
    let reply = MediaReply {
        text: request.text.trim(),
        media: &request.media_urls,
        refused: &[],
        audio_as_voice: request.as_voice,
    };
    let limits = settings.text_limits(adapter.text_limits());
    let delivery = send_media_reply(
        adapter,
        target,
        &quote,
        settings.retry,
        limits,
        &sources,
        reply,
    )
    .await;
    if let Some(key) = session_key {
        let pipeline = crate::gateway::webchat::pipeline_of(state);
        for text in &delivery.texts {
            pipeline.record_outbound(key, text);
        }
    }
    if delivery.media_sent == 0 {
        let reason = delivery.notices.join("; ");
        return Err(match delivery.failures.into_iter().next() {
            Some(error) if reason.is_empty() => SendFailure::Delivery(error),
            _ => SendFailure::Invalid(format!("media not sent: {reason}")),
        });
    }
    Ok(Delivered {
        channel: adapter.id().to_string(),
        message_id: delivery.last_message_id.unwrap_or_default(),
        to: target.to.clone(),
    })
}

/// The `mediaUrl` and `mediaUrls` of a request, in order, blanks dropped.
fn media_params(params: &Value) -> Result<Vec<String>, ErrorShape> {
    let mut media = Vec::new();
    match params.get("mediaUrl") {
        None | Some(Value::Null) => {}
        Some(Value::String(url)) => media.push(url.trim().to_string()),
        Some(_) => {
            return Err(ErrorShape::invalid(
                "invalid send params: mediaUrl must be a string",
            ))
        }
    }
    match params.get("mediaUrls") {
        None | Some(Value::Null) => {}
        Some(Value::Array(urls)) => {
            for url in urls {
                let url = url.as_str().ok_or_else(|| {
                    ErrorShape::invalid("invalid send params: mediaUrls must be strings")
                })?;
                media.push(url.trim().to_string());
            }
        }
        Some(_) => {
            return Err(ErrorShape::invalid(
                "invalid send params: mediaUrls must be an array of strings",
            ))
        }
    }
    media.retain(|m| !m.is_empty());
    media.dedup();
    Ok(media)
}

/// `send`: `{to, message?, mediaUrl?, mediaUrls?, asVoice?, agentId?,
/// channel?, accountId?, threadId?, sessionKey?, idempotencyKey}` →
/// `{runId, messageId, channel, chatId}`.
pub async fn send(state: &Arc<GatewayState>, params: &Value) -> Result<Value, ErrorShape> {
    let p = Params::new("send", params)?;
    let key = p.str("idempotencyKey", false)?;
    let cache_key = format!("send:{key}");
    let now = now_ms();
    match state.idempotency.get(&cache_key, now) {
        Some(Seen::Done {
            ok: true, payload, ..
        }) => return Ok(payload),
        Some(Seen::Done { error, .. }) => {
            let message = error
                .as_ref()
                .and_then(|e| e["message"].as_str())
                .unwrap_or("send failed")
                .to_string();
            return Err(ErrorShape::unavailable(message));
        }
        Some(Seen::InFlight { .. }) => {
            return Err(
                ErrorShape::unavailable(format!("send {key} is still in flight")).retry_after(500),
            )
        }
        None => {}
    }
    let request = OutboundRequest {
        channel: p.opt_str("channel")?.map(str::to_string),
        account_id: p.opt_str("accountId")?.map(str::to_string),
        to: p.str("to", false)?.to_string(),
        thread_id: p.opt_str("threadId")?.map(str::to_string),
        text: p.opt_str("message")?.unwrap_or_default().to_string(),
        media_urls: media_params(params)?,
        as_voice: p.opt_bool("asVoice")?.unwrap_or(false),
        agent_id: p.opt_str("agentId")?.map(str::to_string),
    };
    if request.text.trim().is_empty() && request.media_urls.is_empty() {
        return Err(ErrorShape::invalid(
            "invalid send params: text or media is required",
        ));
    }
    let session_key = p.opt_str("sessionKey")?.map(str::to_string);
    state
        .idempotency
        .begin(&cache_key, json!({"runId": key}), now);
    match deliver(state, &request, session_key.as_deref()).await {
        Ok(done) => {
            let payload = json!({
                "runId": key, "messageId": done.message_id, "channel": done.channel, "chatId": done.to,
            });
            state
                .idempotency
                .finish(&cache_key, true, payload.clone(), None, now_ms());
            Ok(payload)
        }
        Err(failure @ (SendFailure::Invalid(_) | SendFailure::Unavailable(_))) => {
            state.idempotency.forget(&cache_key);
            Err(failure.to_error())
        }
        Err(failure) => {
            let error = failure.to_error();
            state.idempotency.finish(
                &cache_key,
                false,
                json!({"runId": key}),
                Some(error.to_json()),
                now_ms(),
            );
            Err(error)
        }
    }
}

/// `channels.status`: every configured or running channel and its accounts.
pub fn channels_status(state: &GatewayState) -> Result<Value, ErrorShape> {
    let mut summaries = serde_json::Map::new();
    let mut accounts = serde_json::Map::new();
    let mut labels = serde_json::Map::new();
    let mut defaults = serde_json::Map::new();
    let mut order = Vec::new();
    for channel in figures::channels(state) {
        let mut summary = json!({
            "configured": channel.configured(),
            "running": channel.running(),
            "connected": channel.connected(),
            "lastError": channel.last_error(),
        });
        // A channel that links a device (WhatsApp): upstream's `linked`, `self` and
        // `lastConnectedAt`, from its default (first) account, which the Control UI's card shows.
        if let Some(first) = channel.accounts.first() {
            for key in ["linked", "self", "lastConnectedAt"] {
                if let Some(value) = first.get(key) {
                    summary[key] = value.clone();
                }
            }
        }
        summaries.insert(channel.channel.clone(), summary);
        labels.insert(
            channel.channel.clone(),
            json!(figures::label(&channel.channel)),
        );
        defaults.insert(channel.channel.clone(), json!(DEFAULT_ACCOUNT_ID));
        order.push(channel.channel.clone());
        accounts.insert(channel.channel, Value::Array(channel.accounts));
    }
    Ok(json!({
        "ts": now_ms(), "channelOrder": order, "channelLabels": labels,
        "channels": summaries, "channelAccounts": accounts, "channelDefaultAccountId": defaults,
    }))
}

/// The `message` tool's delivery: the same path as `send`.
pub struct GatewayMessenger {
    state: Weak<GatewayState>,
}

impl GatewayMessenger {
    pub fn new(state: Weak<GatewayState>) -> GatewayMessenger {
        GatewayMessenger { state }
    }
}

impl Messenger for GatewayMessenger {
    fn send<'a>(&'a self, request: MessageRequest, session_key: &'a str) -> MessengerFuture<'a> {
        Box::pin(async move {
            let state = self.state.upgrade().ok_or(MessageError::ShuttingDown)?;
            let outbound = OutboundRequest {
                channel: request.channel,
                account_id: request.account_id,
                to: request.target,
                thread_id: request.thread_id,
                text: request.text,
                media_urls: request.media_urls,
                as_voice: request.as_voice,
                agent_id: None,
            };
            let done = deliver(&state, &outbound, Some(session_key))
                .await
                .map_err(|failure| match failure {
                    SendFailure::Invalid(message) => MessageError::Invalid(message),
                    SendFailure::Unavailable(message) => MessageError::ChannelUnavailable(message),
                    SendFailure::Delivery(error) => MessageError::NotDelivered(error.to_string()),
                })?;
            Ok(MessageReceipt {
                channel: done.channel,
                message_id: done.message_id,
                to: done.to,
            })
        })
    }
}
