//! The Signal channel (cargo feature `signal`) through signal-cli's HTTP
//! daemon, as upstream runs it: JSON-RPC 2.0 at `/api/v1/rpc` (`send`,
//! `sendTyping`, `sendReceipt`; `rpc.rs`), events over SSE at
//! `/api/v1/events` (`sse.rs`, read by `receive.rs`), payloads translated
//! in `translate.rs`. With a managed transport pincer starts and
//! supervises the daemon itself (`daemon.rs`); with an external one it
//! connects to the daemon's URL.
//!
//! Files go out as `send` with `attachments`: the file's absolute path,
//! which the daemon reads at send time (upstream sends paths too, so the
//! daemon must see pincer's media area: a managed daemon or one on the same
//! machine), the reply's text as the message. Inbound attachments are
//! fetched with `getAttachment` (`receive.rs`).
//!
//! This file owns configuration, lifecycle, status and sending; retries,
//! chunking, access policy and routing are not this adapter's job. Signal
//! shows plain text: Markdown from the model goes out as written.

mod attachments;
mod daemon;
mod receive;
pub mod rpc;
pub mod sse;
pub mod translate;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{json, Value};

use crate::channels::account::{AccountState, AccountTasks};
use crate::channels::media::{MediaDefaults, MediaLimits};
use crate::channels::{
    AccountStatus, BoxFuture, Channel, ChunkMode, InboundSink, MarkRead, OutboundTarget, SendError,
    SendMedia, SentMessage, StartError, TextFormat, TextLimits, Typing, Upload, UploadKind,
};
use crate::config::schema::signal::{SignalAccountConfig, SignalConfig, SignalEndpoint};

use receive::ReceiveLoop;
use rpc::SignalRpc;
pub use translate::{BotIdentity, CHANNEL_ID};

/// pincer's cap per outbound message (an account's `textChunkLimit` is
/// clamped to it); Signal sends longer texts as an attachment, which
/// pincer does not.
pub const SIGNAL_MAX_CHARS: usize = 4_000;
/// Signal's cap on one attachment (its servers refuse larger ones).
pub const SIGNAL_MAX_ATTACHMENT_BYTES: u64 = 100 * 1024 * 1024;

/// What an account is configured to do (read once from the config).
#[derive(Debug, Clone)]
pub struct AccountSettings {
    /// The bot's number (E.164).
    pub number: String,
    pub uuid: Option<String>,
    pub endpoint: SignalEndpoint,
    pub send_read_receipts: bool,
    pub ignore_attachments: bool,
}

/// One configured account.
pub struct Account {
    pub id: String,
    settings: AccountSettings,
    rpc: SignalRpc,
    /// Where inbound attachments go and their cap (`agents.defaults.mediaMaxMb`, else 5 MB).
    media: MediaLimits,
    state: AccountState<BotIdentity>,
}

impl Account {
    fn identity(&self) -> BotIdentity {
        BotIdentity {
            number: self.settings.number.clone(),
            uuid: self.settings.uuid.clone(),
        }
    }

    fn record_error(&self, error: String) {
        log::warn!("signal account {}: {error}", self.id);
        self.state.update(|s| s.last_error = Some(error));
    }

    /// What the managed daemon is doing, for the status.
    fn daemon_state(&self, reason: String) {
        self.state.update(|s| s.state_reason = Some(reason));
    }

    fn count_reconnect(&self) {
        self.state
            .update(|s| s.reconnect_attempts = Some(s.reconnect_attempts.unwrap_or(0) + 1));
    }
}

/// Why an account cannot run, or its settings.
fn account_settings(config: &SignalAccountConfig) -> Result<AccountSettings, String> {
    let number = config
        .effective_account()
        .ok_or("no account (the bot's Signal number)")?;
    let endpoint = config.endpoint();
    match &endpoint {
        SignalEndpoint::Container { .. } => {
            return Err("transport.kind \"container\" is not supported by pincer".into())
        }
        SignalEndpoint::External { url } if url.is_empty() => {
            return Err("an external-native transport needs transport.url".into())
        }
        _ => {}
    }
    Ok(AccountSettings {
        number,
        uuid: config.effective_account_uuid(),
        endpoint,
        send_read_receipts: config.send_read_receipts.unwrap_or(false),
        ignore_attachments: config.ignore_attachments.unwrap_or(false),
    })
}

fn endpoint_url(endpoint: &SignalEndpoint) -> &str {
    match endpoint {
        SignalEndpoint::External { url } | SignalEndpoint::Container { url } => url,
        SignalEndpoint::Managed(daemon) => &daemon.url,
    }
}

/// The Signal adapter for all accounts of `channels.signal`.
pub struct SignalChannel {
    accounts: BTreeMap<String, Arc<Account>>,
    unconfigured: Vec<AccountStatus>,
    default_account: String,
    tasks: AccountTasks,
}

impl std::fmt::Debug for SignalChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignalChannel")
            .field("accounts", &self.accounts.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Where a target sends: a group (`group:<id>`) or a recipient (`+number`,
/// `uuid:<id>` or a bare UUID); `signal:` in front is dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Destination {
    Group(String),
    Recipient(String),
}

fn destination(to: &str) -> Result<Destination, SendError> {
    let to = to.trim();
    let to = to.strip_prefix("signal:").unwrap_or(to);
    if let Some(group) = to.strip_prefix("group:").filter(|g| !g.is_empty()) {
        return Ok(Destination::Group(group.to_string()));
    }
    let recipient = to.strip_prefix("uuid:").unwrap_or(to);
    let number = recipient.starts_with('+')
        && recipient.len() > 1
        && recipient[1..].bytes().all(|b| b.is_ascii_digit());
    let uuid = recipient.len() == 36 && recipient.bytes().filter(|b| *b == b'-').count() == 4;
    if number || uuid {
        Ok(Destination::Recipient(recipient.to_string()))
    } else {
        Err(SendError::Permanent(format!(
            "{to:?} is not a Signal number (+…), uuid:<id> or group:<id>"
        )))
    }
}

impl Destination {
    /// The `recipient` / `groupId` params of `send` and `sendTyping`.
    fn params(&self) -> Value {
        match self {
            Destination::Group(group) => json!({ "groupId": group }),
            Destination::Recipient(recipient) => json!({ "recipient": [recipient] }),
        }
    }
}

impl SignalChannel {
    /// Every account of `channels.signal`; accounts without a number (or
    /// with a transport pincer does not run) are listed as not configured.
    pub fn new(config: &SignalConfig, http: &reqwest::Client) -> SignalChannel {
        SignalChannel::with_media(config, http, &MediaDefaults::default())
    }

    /// [`new`](Self::new) with inbound attachments under `media`'s root and cap.
    pub fn with_media(
        config: &SignalConfig,
        http: &reqwest::Client,
        media: &MediaDefaults,
    ) -> SignalChannel {
        let mut accounts = BTreeMap::new();
        let mut unconfigured = Vec::new();
        for id in config.account_ids() {
            let Some(account) = config.account(&id) else {
                continue;
            };
            let enabled = account.effective_enabled();
            let endpoint = account.endpoint();
            let status_base = AccountStatus {
                account_id: id.clone(),
                enabled,
                name: account.name.clone(),
                identity: account.effective_account(),
                base_url: Some(endpoint_url(&endpoint).to_string()).filter(|u| !u.is_empty()),
                ..AccountStatus::default()
            };
            match account_settings(&account) {
                Ok(settings) => {
                    let state = AccountState::new(&id, enabled, true);
                    let base = status_base.clone();
                    state.update(|s| {
                        s.name = base.name;
                        s.identity = base.identity;
                        s.base_url = base.base_url;
                    });
                    let rpc = SignalRpc::new(
                        http.clone(),
                        endpoint_url(&settings.endpoint),
                        &settings.number,
                    );
                    accounts.insert(
                        id.clone(),
                        Arc::new(Account {
                            id,
                            settings,
                            rpc,
                            media: media.limits(CHANNEL_ID, None),
                            state,
                        }),
                    );
                }
                Err(error) => unconfigured.push(AccountStatus {
                    last_error: Some(error),
                    ..status_base
                }),
            }
        }
        let default_account = crate::channels::account::default_account_id(
            config.default_account.as_deref(),
            &accounts,
        );
        SignalChannel {
            accounts,
            unconfigured,
            default_account,
            tasks: AccountTasks::default(),
        }
    }

    fn account_for(&self, target: &OutboundTarget) -> Result<Arc<Account>, SendError> {
        let id = if target.account_id.trim().is_empty() {
            self.default_account.as_str()
        } else {
            target.account_id.trim()
        };
        self.accounts
            .get(id)
            .filter(|a| a.state.status().enabled)
            .cloned()
            .ok_or_else(|| SendError::NoAccount(id.to_string()))
    }
}

/// The message id of a `send` result (its timestamp), or why no recipient
/// got it.
fn sent_timestamp(result: &Value) -> Result<String, SendError> {
    let results = result["results"].as_array();
    if let Some(results) = results.filter(|r| !r.is_empty()) {
        let delivered = results.iter().any(|r| r["type"] == "SUCCESS");
        if !delivered {
            let kinds: Vec<&str> = results.iter().filter_map(|r| r["type"].as_str()).collect();
            return Err(SendError::Permanent(format!(
                "signal-cli send reached no recipient: {}",
                kinds.join(", ")
            )));
        }
    }
    result["timestamp"]
        .as_u64()
        .map(|t| t.to_string())
        .ok_or_else(|| SendError::Transient("signal-cli send answered without a timestamp".into()))
}

impl Channel for SignalChannel {
    fn id(&self) -> &'static str {
        CHANNEL_ID
    }

    fn text_limits(&self) -> TextLimits {
        TextLimits {
            max_chars: SIGNAL_MAX_CHARS,
            max_lines: None,
            chunk_mode: ChunkMode::Length,
        }
    }

    fn start(&self, sink: Arc<dyn InboundSink>) -> BoxFuture<'_, Result<(), StartError>> {
        Box::pin(async move {
            let cancel = self.tasks.token();
            for account in self.accounts.values() {
                if !account.state.status().enabled || account.state.is_running() {
                    continue;
                }
                account.state.set_running(true);
                if let SignalEndpoint::Managed(daemon) = &account.settings.endpoint {
                    self.tasks.spawn(daemon::supervise(
                        Arc::clone(account),
                        daemon.clone(),
                        cancel.child_token(),
                    ));
                }
                self.tasks.spawn(
                    ReceiveLoop {
                        account: Arc::clone(account),
                        sink: Arc::clone(&sink),
                        stop: cancel.child_token(),
                        idle_timeout_ms: receive::EVENT_IDLE_TIMEOUT_MS,
                    }
                    .run(),
                );
            }
            Ok(())
        })
    }

    fn stop(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.tasks.stop())
    }

    fn status(&self) -> Vec<AccountStatus> {
        let mut all: Vec<AccountStatus> = self
            .accounts
            .values()
            .map(|a| a.state.status())
            .chain(self.unconfigured.iter().cloned())
            .collect();
        all.sort_by(|a, b| a.account_id.cmp(&b.account_id));
        all
    }

    fn send_text<'a>(
        &'a self,
        target: &'a OutboundTarget,
        text: &'a str,
        _format: TextFormat,
    ) -> BoxFuture<'a, Result<SentMessage, SendError>> {
        Box::pin(async move {
            let account = self.account_for(target)?;
            let mut params = destination(&target.to)?.params();
            params["message"] = json!(text);
            let result = account
                .rpc
                .call("send", params)
                .await
                .map_err(rpc::RpcError::into_send_error)?;
            let message_id = sent_timestamp(&result)?;
            account.state.outbound_now();
            Ok(SentMessage { message_id })
        })
    }

    fn typing(&self) -> Option<&dyn Typing> {
        Some(self)
    }

    fn media(&self) -> Option<&dyn SendMedia> {
        Some(self)
    }

    /// `sendReadReceipts` on an external daemon (a managed one was started
    /// with `--send-read-receipts` and sends them itself, as upstream's).
    fn read_receipts(&self, account_id: &str) -> Option<&dyn MarkRead> {
        let id = if account_id.trim().is_empty() {
            self.default_account.as_str()
        } else {
            account_id.trim()
        };
        let settings = &self.accounts.get(id)?.settings;
        let managed = matches!(settings.endpoint, SignalEndpoint::Managed(_));
        (settings.send_read_receipts && !managed).then_some(self as &dyn MarkRead)
    }
}

impl MarkRead for SignalChannel {
    fn mark_read<'a>(
        &'a self,
        target: &'a OutboundTarget,
        message_id: &'a str,
        _sender_id: &'a str,
    ) -> BoxFuture<'a, Result<(), SendError>> {
        Box::pin(async move {
            let account = self.account_for(target)?;
            let Destination::Recipient(recipient) = destination(&target.to)? else {
                return Err(SendError::Permanent(
                    "signal-cli has no read receipts for groups".into(),
                ));
            };
            let timestamp: u64 = message_id.parse().map_err(|_| {
                SendError::Permanent(format!("{message_id:?} is not a Signal message timestamp"))
            })?;
            let params =
                json!({"recipient": recipient, "targetTimestamp": [timestamp], "type": "read"});
            account
                .rpc
                .call("sendReceipt", params)
                .await
                .map(drop)
                .map_err(rpc::RpcError::into_send_error)
        })
    }
}

impl SendMedia for SignalChannel {
    fn max_upload_bytes(&self, _kind: UploadKind) -> u64 {
        SIGNAL_MAX_ATTACHMENT_BYTES
    }

    fn max_caption_chars(&self) -> usize {
        SIGNAL_MAX_CHARS
    }

    /// `send` with the file's absolute path in `attachments` and the
    /// caption (if any) as the message; Signal has no voice-note flag in
    /// signal-cli's `send`, so a voice note goes as an audio attachment.
    fn send_media<'a>(
        &'a self,
        target: &'a OutboundTarget,
        upload: Upload<'a>,
    ) -> BoxFuture<'a, Result<SentMessage, SendError>> {
        Box::pin(async move {
            let account = self.account_for(target)?;
            let path = std::path::absolute(upload.path).map_err(|e| {
                SendError::Permanent(format!("{}: no absolute path: {e}", upload.file_name))
            })?;
            let mut params = destination(&target.to)?.params();
            params["attachments"] = json!([path.display().to_string()]);
            if let Some(caption) = upload.caption.filter(|c| !c.trim().is_empty()) {
                params["message"] = json!(caption);
            }
            let result = account
                .rpc
                .call("send", params)
                .await
                .map_err(rpc::RpcError::into_send_error)?;
            let message_id = sent_timestamp(&result)?;
            account.state.outbound_now();
            Ok(SentMessage { message_id })
        })
    }
}

impl Typing for SignalChannel {
    fn send_typing<'a>(
        &'a self,
        target: &'a OutboundTarget,
    ) -> BoxFuture<'a, Result<(), SendError>> {
        Box::pin(async move {
            let account = self.account_for(target)?;
            let params = destination(&target.to)?.params();
            account
                .rpc
                .call("sendTyping", params)
                .await
                .map(drop)
                .map_err(rpc::RpcError::into_send_error)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accounts_without_a_number_or_with_a_container_are_not_configured() {
        let config: SignalConfig = serde_json::from_str(
            r#"{"accounts":{
                "main":{"account":"+1555","name":"Bot","transport":{"kind":"external-native","url":"http://127.0.0.1:8080"}},
                "nonumber":{},
                "box":{"account":"+1666","transport":{"kind":"container","url":"http://c:8080"}}}}"#,
        )
        .expect("config");
        let channel = SignalChannel::new(&config, &reqwest::Client::new());
        let status: Vec<(String, bool, Option<String>)> = channel
            .status()
            .into_iter()
            .map(|s| (s.account_id, s.configured, s.last_error))
            .collect();
        assert_eq!(
            status,
            vec![
                (
                    "box".into(),
                    false,
                    Some("transport.kind \"container\" is not supported by pincer".into())
                ),
                ("main".into(), true, None),
                (
                    "nonumber".into(),
                    false,
                    Some("no account (the bot's Signal number)".into())
                ),
            ]
        );
        let main = &channel.accounts["main"].state.status();
        assert_eq!(main.identity.as_deref(), Some("+1555"));
        assert_eq!(main.base_url.as_deref(), Some("http://127.0.0.1:8080"));
        assert_eq!(main.name.as_deref(), Some("Bot"));
        assert!(!main.connected && !main.running);
    }

    #[test]
    fn targets_name_groups_numbers_and_uuids() {
        assert_eq!(
            destination("signal:group:R3JvdXA=").expect("group"),
            Destination::Group("R3JvdXA=".into())
        );
        assert_eq!(
            destination("+15551234").expect("number"),
            Destination::Recipient("+15551234".into())
        );
        assert_eq!(
            destination("uuid:123e4567-e89b-12d3-a456-426614174000").expect("uuid"),
            Destination::Recipient("123e4567-e89b-12d3-a456-426614174000".into())
        );
        assert!(matches!(destination("bob"), Err(SendError::Permanent(_))));
        assert_eq!(
            Destination::Recipient("+1".into()).params(),
            json!({"recipient": ["+1"]})
        );
    }

    #[test]
    fn a_send_that_reached_nobody_is_refused() {
        assert_eq!(
            sent_timestamp(&json!({"timestamp": 77, "results": [{"type": "SUCCESS"}]})),
            Ok("77".into())
        );
        assert!(matches!(
            sent_timestamp(&json!({"timestamp": 77, "results": [{"type": "UNREGISTERED_FAILURE"}]})),
            Err(SendError::Permanent(text)) if text.contains("UNREGISTERED_FAILURE")
        ));
    }

    #[tokio::test]
    async fn sending_through_an_unknown_account_fails_clearly() {
        let config: SignalConfig = serde_json::from_str(r#"{"account":"+1555"}"#).expect("config");
        let channel = SignalChannel::new(&config, &reqwest::Client::new());
        let target = OutboundTarget {
            account_id: "nobody".into(),
            to: "+1666".into(),
            ..OutboundTarget::default()
        };
        assert_eq!(
            channel.send_text(&target, "hi", TextFormat::Plain).await,
            Err(SendError::NoAccount("nobody".into()))
        );
    }
}
