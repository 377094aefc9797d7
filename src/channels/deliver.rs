//! Messages that enter a conversation from inside the gateway rather than as
//! a reply to the user's last message: heartbeat alerts, cron results and
//! sub-agent announcements. Two ways in:
//!
//! - [`send_to_channel`]: plain delivery of a finished text to a chat
//!   target through its adapter (retries, limits, echo and failure records
//!   as every reply);
//! - [`enqueue_announcement`]: a new turn in a session through the command
//!   queue, so the session's queue mode applies when it is busy, with the
//!   answer going to the session's last chat target.
//!
//! The session's "last route" (channel, recipient, account, thread) is
//! recorded by [`record_last_route`] when a channel message is admitted.
//! This file must not decide *whether* something is delivered (the
//! heartbeat, cron and sub-agent code do).

use std::sync::Arc;

use super::hub::{run_timeout_ms, ChannelHub};
use super::outbound::DeliveryError;
use super::settings::ChannelSettings;
use super::stream::ReplyRoute;
use super::turns::TurnOrigin;
use super::{OutboundTarget, TextFormat};
use crate::agent::{AnnounceError, LastRoute, SessionIndex};
use crate::config::Config;
use crate::queue::{EnqueueOutcome, LaneKind, QueueSettings, QueuedMessage};
use crate::store::{Store, StoreError};

/// The web chat: its "delivery" is the `chat` events readers already get.
pub const WEBCHAT: &str = "webchat";

/// A chat destination outside a reply path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelDestination {
    pub channel: String,
    pub to: String,
    pub account_id: Option<String>,
    pub thread_id: Option<String>,
}

impl ChannelDestination {
    /// `channel` + `to` when both name a chat target (the web chat is none).
    pub fn new(
        channel: Option<&str>,
        to: Option<&str>,
        account_id: Option<&str>,
    ) -> Option<ChannelDestination> {
        let channel = channel
            .map(str::trim)
            .filter(|c| !c.is_empty() && *c != WEBCHAT)?;
        let to = to.map(str::trim).filter(|t| !t.is_empty())?;
        Some(ChannelDestination {
            channel: channel.to_string(),
            to: to.to_string(),
            account_id: account_id.map(str::to_string),
            thread_id: None,
        })
    }

    /// `channel` + `to`; with no `to`, the channel account's `defaultTo`
    /// (upstream's fallback when a delivery names a channel and no
    /// recipient).
    pub fn with_default_to(
        config: &Config,
        channel: Option<&str>,
        to: Option<&str>,
        account_id: Option<&str>,
    ) -> Option<ChannelDestination> {
        ChannelDestination::new(channel, to, account_id).or_else(|| {
            let to = default_to(config, channel?.trim(), account_id)?;
            ChannelDestination::new(channel, Some(&to), account_id)
        })
    }

    /// The session's last chat route, when it has one.
    pub fn last_route_of(store: &Store, session_key: &str) -> Option<ChannelDestination> {
        let entry = store.session(session_key).ok().flatten()?;
        let mut destination = ChannelDestination::new(
            entry.last_channel.as_deref(),
            entry.last_to.as_deref(),
            entry.last_account_id.as_deref(),
        )?;
        destination.thread_id = entry.last_thread_id;
        Some(destination)
    }

    fn target(&self) -> OutboundTarget {
        OutboundTarget {
            account_id: self.account_id.clone().unwrap_or_default(),
            to: self.to.clone(),
            thread_id: self.thread_id.clone(),
            reply_to_message_id: None,
        }
    }
}

/// `channels.<channel>.defaultTo` of the account (the default account when
/// none is named), when set.
pub fn default_to(config: &Config, channel: &str, account_id: Option<&str>) -> Option<String> {
    let account = account_id.filter(|a| !a.is_empty()).unwrap_or("default");
    let channels = &config.channels;
    let to = match channel {
        "telegram" => {
            channels
                .telegram
                .as_ref()
                .and_then(|c| c.account(account))?
                .default_to
        }
        "discord" => {
            channels
                .discord
                .as_ref()
                .and_then(|c| c.account(account))?
                .default_to
        }
        "slack" => {
            channels
                .slack
                .as_ref()
                .and_then(|c| c.account(account))?
                .default_to
        }
        _ => None,
    };
    to.filter(|to| !to.trim().is_empty())
}

/// Remembers where a session's conversation lives, for later deliveries
/// (heartbeat `target: "last"`, cron announce, sub-agent results). Called
/// after a channel turn (which created the entry). Blocks on the store.
pub fn record_last_route(
    store: &Store,
    session_key: &str,
    channel: &str,
    target: &OutboundTarget,
) -> Result<(), StoreError> {
    let route = LastRoute {
        channel: channel.to_string(),
        to: target.to.clone(),
        account_id: target.account_id.clone(),
        thread_id: target.thread_id.clone(),
    };
    SessionIndex::new(store.clone()).record_route(session_key, &route)?;
    Ok(())
}

/// Why a delivery to a chat did not happen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    #[error("no {channel} channel is running to deliver to {to}")]
    NoChannel { channel: String, to: String },
    #[error(transparent)]
    Delivery(#[from] DeliveryError),
}

/// Sends `text` (markdown from the model) to `destination` through its
/// adapter with the channel's retry policy and limits. A failure is logged
/// and kept in the hub's failure log, and returned.
pub async fn send_to_channel(
    hub: Arc<ChannelHub>,
    session_key: String,
    destination: ChannelDestination,
    text: String,
) -> Result<(), SendError> {
    let Some(adapter) = hub.deps.channels.get(&destination.channel) else {
        let error = SendError::NoChannel {
            channel: destination.channel.clone(),
            to: destination.to.clone(),
        };
        log::warn!("{session_key}: {error}");
        return Err(error);
    };
    let config = hub.config();
    let target = destination.target();
    let settings = ChannelSettings::resolve(&config, &destination.channel, &target.account_id);
    hub.send_whole_text(
        adapter.as_ref(),
        &target,
        &settings,
        &session_key,
        &text,
        TextFormat::Markdown,
    )
    .await?;
    Ok(())
}

/// Starts [`send_to_channel`] on the gateway's task tracker (callers are
/// often on a blocking thread).
pub fn spawn_send_to_channel(
    hub: &Arc<ChannelHub>,
    session_key: &str,
    destination: ChannelDestination,
    text: String,
) {
    let task = send_to_channel(hub.clone(), session_key.to_string(), destination, text);
    hub.deps.runtime.lifecycle.tasks.spawn(async move {
        let _ = task.await;
    });
}

/// Queues `message` as a turn of `agent_id` in `session_key` (the session's
/// queue mode applies when a turn is running), answering to the session's
/// last chat route or, without one, to its web chat readers. Blocks on the
/// store briefly.
pub fn enqueue_announcement(
    hub: &Arc<ChannelHub>,
    agent_id: &str,
    session_key: &str,
    message: String,
) -> Result<(), AnnounceError> {
    let config = hub.config();
    let destination = ChannelDestination::last_route_of(&hub.deps.runtime.store, session_key);
    let reply = destination.as_ref().and_then(|d| {
        let adapter = hub.deps.channels.get(&d.channel)?;
        let target = d.target();
        let target_account = target.account_id.clone();
        Some(ReplyRoute {
            channel: adapter,
            settings: ChannelSettings::resolve(&config, &d.channel, &target.account_id),
            target,
            session_key: session_key.to_string(),
            verbose: super::stream::ToolVerbosity::Off,
            quote: Arc::new(super::outbound::ReplyQuote::none()),
            media: hub.media_sources(&config, agent_id),
            // Announcements are not answers to a message: spoken only under `always`.
            speech: super::speech::plan(&config, &d.channel, &target_account, false),
        })
    });
    let channel = match &reply {
        Some(_) => destination.map_or_else(|| WEBCHAT.to_string(), |d| d.channel),
        None => WEBCHAT.to_string(),
    };
    let run_id = format!("announce-{}", uuid::Uuid::new_v4());
    let origin = TurnOrigin {
        agent_id: agent_id.to_string(),
        channel: channel.clone(),
        run_id: run_id.clone(),
        timeout_ms: run_timeout_ms(&config),
        reply,
        requester: None,
        idempotency_key: None,
        typing: None,
        hub: hub.weak(),
        system_event: true,
        inbox: Vec::new(),
        images: Vec::new(),
    };
    let queued = QueuedMessage {
        id: run_id,
        text: message,
        attachment: Some(Box::new(origin)),
    };
    let settings = QueueSettings::for_channel(&config.messages.queue, &channel);
    match hub
        .queue
        .enqueue(session_key, LaneKind::Main, settings, queued)
    {
        EnqueueOutcome::Dropped => Err(AnnounceError::QueueFull {
            session_key: session_key.to_string(),
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delivery_without_recipient_goes_to_the_accounts_default_to() {
        let config = crate::config::parse_str(
            r#"{ channels: { telegram: { botToken: "t", defaultTo: "42",
                   accounts: { work: { botToken: "w", defaultTo: "-100" }, bare: { botToken: "b", defaultTo: "" } } },
                 discord: { token: "d" } } }"#,
            "test",
        )
        .expect("config");
        let to = |channel: &str, to: Option<&str>, account: Option<&str>| {
            ChannelDestination::with_default_to(&config, Some(channel), to, account).map(|d| d.to)
        };
        assert_eq!(to("telegram", None, None).as_deref(), Some("42"));
        assert_eq!(to("telegram", None, Some("work")).as_deref(), Some("-100"));
        // An account inherits the channel's defaultTo unless it sets its own.
        assert_eq!(to("telegram", Some("7"), None).as_deref(), Some("7"));
        assert_eq!(to("discord", None, None), None);
        assert_eq!(to("webchat", None, None), None);
        assert_eq!(default_to(&config, "telegram", Some("bare")), None);
    }

    #[test]
    fn a_destination_needs_a_chat_channel_and_a_recipient() {
        assert_eq!(
            ChannelDestination::new(Some("webchat"), Some("x"), None),
            None
        );
        assert_eq!(ChannelDestination::new(Some("telegram"), None, None), None);
        assert_eq!(ChannelDestination::new(None, Some("42"), None), None);
        assert_eq!(
            ChannelDestination::new(Some(" telegram "), Some("42"), Some("bot2")),
            Some(ChannelDestination {
                channel: "telegram".into(),
                to: "42".into(),
                account_id: Some("bot2".into()),
                thread_id: None,
            })
        );
    }
}
