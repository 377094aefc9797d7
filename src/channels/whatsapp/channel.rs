//! The WhatsApp adapter: one linked device ([`WhatsAppSession`]) per
//! account of `channels.whatsapp`, its received direct messages turned into
//! `InboundEvent`s for the one message path (inbox, dedupe, pairing,
//! routing, queue, reply chunking are not this file's job), its link status
//! mirrored into the account status that `channels.status` and `health`
//! report, and replies sent through the device.
//!
//! Direct messages only: group messages are skipped (counted in the log).
//! Each account's device lives in the sealed records `whatsapp/<account>`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, RwLock};
use tokio_util::sync::CancellationToken;

use crate::channels::account::{AccountState, AccountTasks};
use crate::channels::media::{MediaDefaults, MediaLimits, MediaOutcome};
use crate::channels::{
    AccountStatus, BoxFuture, Channel, ChunkMode, InboundEvent, InboundSink, OutboundTarget,
    SendError, SendMedia, SentMessage, StartError, TextFormat, TextLimits, Upload, UploadKind,
};
use crate::config::schema::bindings::PeerKind;
use crate::config::schema::whatsapp::WhatsAppConfig;
use crate::pipeline::context::{ChatType, InboundMessage};
use crate::routing::{RouteInput, RoutePeer};
use crate::store::Store;

use super::media::OutboundMedia;
use super::session::{InboundText, LinkState, LinkStatus, SessionOptions, WhatsAppSession};
use super::SealedBackend;

/// The channel id in config, session keys and events.
pub const CHANNEL_ID: &str = "whatsapp";
/// pincer's cap per outbound message (an account's `textChunkLimit` is
/// clamped to it).
pub const WHATSAPP_MAX_CHARS: usize = 4_000;
/// Received messages waiting for the message path, per account. When full
/// the device stops reading its socket until there is room (nothing dropped).
pub const INBOUND_QUEUE: usize = 64;
/// Tries at handing one message to the message path.
const DELIVERY_ATTEMPTS: u32 = 3;

/// One configured account.
struct Account {
    id: String,
    state: AccountState<()>,
    session: RwLock<Option<WhatsAppSession>>,
}

/// The WhatsApp adapter for all accounts of `channels.whatsapp`.
pub struct WhatsAppChannel {
    accounts: BTreeMap<String, Arc<Account>>,
    default_account: String,
    store: Store,
    http: reqwest::Client,
    url: String,
    tasks: AccountTasks,
    /// Where received attachments go and their cap (`agents.defaults.mediaMaxMb`, else 5 MB).
    media: MediaDefaults,
}

impl std::fmt::Debug for WhatsAppChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WhatsAppChannel")
            .field("accounts", &self.accounts.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Replaces WhatsApp's chat socket URL (tests point the gateway at a fake
/// server with it; upstream has no config key for this).
pub const WS_URL_ENV: &str = "PINCER_WHATSAPP_WS_URL";

/// The chat socket: [`WS_URL_ENV`] when set, else WhatsApp's.
pub fn socket_url() -> String {
    match std::env::var(WS_URL_ENV)
        .ok()
        .filter(|u| !u.trim().is_empty())
    {
        Some(url) => {
            log::warn!("whatsapp: connecting to {url} ({WS_URL_ENV}), not WhatsApp's server");
            url
        }
        None => super::WHATSAPP_WS_URL.to_string(),
    }
}

/// Tests only: sends WhatsApp's media traffic (uploads and downloads that
/// go to `https://<media host>/…`) to this base URL (`http://127.0.0.1:<port>`,
/// the fake media server) instead; upstream has no config key for this.
pub const MEDIA_URL_ENV: &str = "PINCER_WHATSAPP_MEDIA_URL";

/// [`MEDIA_URL_ENV`] when set, with a warning: never silent in production.
pub fn media_url_override() -> Option<String> {
    let url = std::env::var(MEDIA_URL_ENV)
        .ok()
        .filter(|u| !u.trim().is_empty())?;
    log::warn!("whatsapp: media goes to {url} ({MEDIA_URL_ENV}), not WhatsApp's media servers");
    Some(url)
}

/// Pins the WhatsApp Web version announced (`2.3000.1023456789`) instead of
/// asking WhatsApp Web for the current one (tests run offline).
pub const VERSION_ENV: &str = "PINCER_WHATSAPP_VERSION";

/// [`VERSION_ENV`] when set and well formed.
fn pinned_version() -> Option<(u32, u32, u32)> {
    let text = std::env::var(VERSION_ENV).ok()?;
    let mut parts = text.trim().split('.').map(str::parse::<u32>);
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(Ok(a)), Some(Ok(b)), Some(Ok(c)), None) => Some((a, b, c)),
        _ => {
            log::warn!("whatsapp: {VERSION_ENV}={text:?} is not <major>.<minor>.<patch>; ignored");
            None
        }
    }
}

/// The sender as the message path spells it: `+<number>` for a phone-number
/// JID (`<number>[:device]@s.whatsapp.net`), else the JID as written.
pub fn sender_id(jid: &str) -> String {
    if let Some((user, server)) = jid.split_once('@') {
        let user = user.split(':').next().unwrap_or(user);
        if server == "s.whatsapp.net"
            && !user.is_empty()
            && user.bytes().all(|b| b.is_ascii_digit())
        {
            return format!("+{user}");
        }
    }
    jid.to_string()
}

/// The JID a target names: `+number` / a bare number → `<number>@s.whatsapp.net`,
/// a JID as is; `whatsapp:` in front dropped.
pub fn target_jid(to: &str) -> Result<String, SendError> {
    let to = to.trim();
    let to = to.strip_prefix("whatsapp:").unwrap_or(to).trim();
    if to.contains('@') {
        return Ok(to.to_string());
    }
    let digits = to.strip_prefix('+').unwrap_or(to);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        return Ok(format!("{digits}@s.whatsapp.net"));
    }
    Err(SendError::Permanent(format!(
        "{to:?} is not a WhatsApp number (+…) or JID"
    )))
}

/// One received direct message as an event; `None` for a group message.
pub fn inbound_event(account_id: &str, text: &InboundText, now_ms: u64) -> Option<InboundEvent> {
    if text.is_group {
        return None;
    }
    let sender = sender_id(&text.sender);
    let message = InboundMessage {
        body: text.text.clone(),
        raw_body: text.text.clone(),
        account_id: Some(account_id.to_string()),
        surface: CHANNEL_ID.to_string(),
        provider: CHANNEL_ID.to_string(),
        originating_channel: Some(CHANNEL_ID.to_string()),
        sender_id: sender.clone(),
        sender_name: Some(text.push_name.clone()).filter(|n| !n.trim().is_empty()),
        message_id: Some(text.id.clone()),
        timestamp_ms: now_ms,
        from: format!("{CHANNEL_ID}:{sender}"),
        to: format!("{CHANNEL_ID}:{account_id}"),
        chat_type: Some(ChatType::Direct),
        originating_to: Some(text.chat.clone()),
        conversation_id: Some(sender.clone()),
        ..InboundMessage::default()
    };
    Some(InboundEvent {
        channel: CHANNEL_ID.to_string(),
        account_id: account_id.to_string(),
        message,
        route: RouteInput {
            channel: CHANNEL_ID.to_string(),
            account_id: Some(account_id.to_string()),
            peer: Some(RoutePeer::new(PeerKind::Direct, &sender)),
            ..RouteInput::default()
        },
        bot_mentioned: false,
        bot_username: None,
    })
}

/// The account status a link status reads as.
fn mirror(status: &mut AccountStatus, link: &LinkStatus) {
    status.connected = link.state == LinkState::Connected;
    status.state_reason = Some(
        serde_json::to_value(link.state)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
    );
    status.identity = link.linked_jid.as_deref().map(sender_id);
    status.reconnect_attempts = Some(link.disconnects);
    if let Some(error) = &link.last_error {
        status.last_error = Some(error.clone());
    } else if link.state == LinkState::Reconnecting {
        status.last_error = link.last_disconnect.clone();
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl WhatsAppChannel {
    /// Every account of `channels.whatsapp`; `url` is the chat socket
    /// ([`super::WHATSAPP_WS_URL`] outside tests).
    pub fn new(
        config: &WhatsAppConfig,
        store: Store,
        http: &reqwest::Client,
        url: String,
    ) -> WhatsAppChannel {
        let mut accounts = BTreeMap::new();
        for id in config.account_ids() {
            let Some(account) = config.account(&id) else {
                continue;
            };
            let state = AccountState::new(&id, account.effective_enabled(), true);
            let name = account.name.clone();
            state.update(|s| s.name = name);
            accounts.insert(
                id.clone(),
                Arc::new(Account {
                    id,
                    state,
                    session: RwLock::new(None),
                }),
            );
        }
        let default_account = crate::channels::account::default_account_id(
            config.default_account.as_deref(),
            &accounts,
        );
        WhatsAppChannel {
            accounts,
            default_account,
            store,
            http: http.clone(),
            url,
            tasks: AccountTasks::default(),
            media: MediaDefaults::default(),
        }
    }

    /// Received attachments under `media`'s root, within its cap.
    pub fn with_media(mut self, media: &MediaDefaults) -> WhatsAppChannel {
        self.media = media.clone();
        self
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

    async fn start_account(
        &self,
        account: &Arc<Account>,
        sink: &Arc<dyn InboundSink>,
        cancel: &CancellationToken,
    ) -> Result<(), String> {
        let records = self
            .store
            .sealed(&format!("whatsapp/{}", account.id))
            .map_err(|e| format!("cannot open the device's sealed records: {e}"))?;
        let (inbound, received) = mpsc::channel(INBOUND_QUEUE);
        let session = WhatsAppSession::start(SessionOptions {
            url: self.url.clone(),
            version: pinned_version(),
            http: self.http.clone(),
            backend: SealedBackend::new(records),
            inbound: Some(inbound),
            media_base: media_url_override(),
        })
        .await
        .map_err(|e| e.to_string())?;
        let mut watch = session.watch();
        *account.session.write().await = Some(session);
        let watched = Arc::clone(account);
        let stop = cancel.child_token();
        self.tasks.spawn(async move {
            loop {
                let link = watch.borrow_and_update().clone();
                watched.state.update(|s| mirror(s, &link));
                tokio::select! {
                    _ = stop.cancelled() => break,
                    changed = watch.changed() => if changed.is_err() { break },
                }
            }
        });
        self.tasks.spawn(receive(
            Arc::clone(account),
            Arc::clone(sink),
            received,
            cancel.child_token(),
            self.media.limits(CHANNEL_ID, None),
        ));
        Ok(())
    }
}

/// Hands each received message to the message path.
async fn receive(
    account: Arc<Account>,
    sink: Arc<dyn InboundSink>,
    mut received: mpsc::Receiver<InboundText>,
    stop: CancellationToken,
    media: MediaLimits,
) {
    loop {
        let text = tokio::select! {
            _ = stop.cancelled() => break,
            text = received.recv() => match text { Some(text) => text, None => break },
        };
        let Some(mut event) = inbound_event(&account.id, &text, now_ms()) else {
            log::info!(
                "whatsapp account {}: a group message in {} was skipped (pincer answers direct messages only)",
                account.id,
                text.chat
            );
            continue;
        };
        if let Some(attachment) = &text.media {
            attach(&account, attachment, &media, &mut event).await;
        }
        let mut attempt = 0;
        loop {
            attempt += 1;
            match sink.deliver(event.clone()).await {
                Ok(()) => {
                    account.state.inbound_now();
                    break;
                }
                Err(error) if attempt >= DELIVERY_ATTEMPTS => {
                    let lost = format!(
                        "the message {} from {} was lost: {error}",
                        text.id, event.message.sender_id
                    );
                    log::warn!("whatsapp account {}: {lost}", account.id);
                    account.state.update(|s| s.last_error = Some(lost));
                    break;
                }
                Err(error) => {
                    log::warn!(
                        "whatsapp account {}: message {} not taken ({error}); retrying",
                        account.id,
                        text.id
                    );
                    tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt))).await;
                }
            }
        }
    }
}

/// Downloads a received attachment into the event, or notes why it was not.
async fn attach(
    account: &Account,
    attachment: &super::InboundMedia,
    limits: &MediaLimits,
    event: &mut InboundEvent,
) {
    let outcome = match account.session.read().await.as_ref() {
        Some(session) => session.download_media(attachment, limits).await,
        None => MediaOutcome::Skipped(crate::channels::media::failed_note(
            attachment.kind,
            "the WhatsApp device is stopped",
        )),
    };
    crate::channels::media::add_to_event(event, outcome);
}

impl SendMedia for WhatsAppChannel {
    fn max_upload_bytes(&self, kind: UploadKind) -> u64 {
        super::media::max_upload_bytes(kind)
    }

    fn max_caption_chars(&self) -> usize {
        super::media::MAX_CAPTION_CHARS
    }

    /// Uploads the file (encrypted) and sends it as a photo, video, audio
    /// file, voice note (`ptt`) or document, with the caption.
    fn send_media<'a>(
        &'a self,
        target: &'a OutboundTarget,
        upload: Upload<'a>,
    ) -> BoxFuture<'a, Result<SentMessage, SendError>> {
        Box::pin(async move {
            let account = self.account_for(target)?;
            let jid = target_jid(&target.to)?;
            let session = account.session.read().await;
            let session = session
                .as_ref()
                .ok_or_else(|| SendError::Transient("the WhatsApp device is not running".into()))?;
            if session.status().state != LinkState::Connected {
                return Err(SendError::Transient(format!(
                    "the WhatsApp device is not connected ({:?})",
                    session.status().state
                )));
            }
            let media = OutboundMedia {
                path: upload.path,
                file_name: upload.file_name,
                mime: upload.mime,
                kind: upload.kind,
                caption: upload.caption,
            };
            let message_id = session
                .send_media(&jid, &media)
                .await
                .map_err(|e| SendError::Transient(e.to_string()))?;
            account.state.outbound_now();
            Ok(SentMessage { message_id })
        })
    }
}

impl Channel for WhatsAppChannel {
    fn id(&self) -> &'static str {
        CHANNEL_ID
    }

    fn text_limits(&self) -> TextLimits {
        TextLimits {
            max_chars: WHATSAPP_MAX_CHARS,
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
                match self.start_account(account, &sink, &cancel).await {
                    Ok(()) => account.state.set_running(true),
                    Err(error) => {
                        log::error!("whatsapp account {}: {error}", account.id);
                        account.state.update(|s| s.last_error = Some(error));
                    }
                }
            }
            Ok(())
        })
    }

    fn stop(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.tasks.stop().await;
            for account in self.accounts.values() {
                if let Some(session) = account.session.write().await.take() {
                    session.stop().await;
                }
                account.state.update(|s| {
                    s.connected = false;
                    s.state_reason = Some("stopped".into());
                });
                account.state.set_running(false);
            }
        })
    }

    fn status(&self) -> Vec<AccountStatus> {
        self.accounts.values().map(|a| a.state.status()).collect()
    }

    fn media(&self) -> Option<&dyn SendMedia> {
        Some(self)
    }

    fn send_text<'a>(
        &'a self,
        target: &'a OutboundTarget,
        text: &'a str,
        _format: TextFormat,
    ) -> BoxFuture<'a, Result<SentMessage, SendError>> {
        Box::pin(async move {
            let account = self.account_for(target)?;
            let jid = target_jid(&target.to)?;
            let session = account.session.read().await;
            let session = session
                .as_ref()
                .ok_or_else(|| SendError::Transient("the WhatsApp device is not running".into()))?;
            if session.status().state != LinkState::Connected {
                return Err(SendError::Transient(format!(
                    "the WhatsApp device is not connected ({:?})",
                    session.status().state
                )));
            }
            let message_id = session
                .send_text(&jid, text)
                .await
                .map_err(|e| SendError::Transient(e.to_string()))?;
            account.state.outbound_now();
            Ok(SentMessage { message_id })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(sender: &str, is_group: bool) -> InboundText {
        InboundText {
            chat: if is_group {
                "120363@g.us".into()
            } else {
                sender.into()
            },
            sender: sender.into(),
            id: "3EB0".into(),
            push_name: "Alice".into(),
            is_group,
            text: "hi".into(),
            media: None,
        }
    }

    #[test]
    fn a_direct_message_becomes_an_event_answered_in_its_chat() {
        let event = inbound_event("default", &text("15557654321:3@s.whatsapp.net", false), 5)
            .expect("event");
        assert_eq!(event.message.sender_id, "+15557654321");
        assert_eq!(
            event.message.originating_to.as_deref(),
            Some("15557654321:3@s.whatsapp.net")
        );
        assert_eq!(event.message.chat_type, Some(ChatType::Direct));
        assert_eq!(event.message.sender_name.as_deref(), Some("Alice"));
        assert_eq!(event.message.message_id.as_deref(), Some("3EB0"));
        assert!(inbound_event("default", &text("1@s.whatsapp.net", true), 5).is_none());
        assert_eq!(sender_id("abc@lid"), "abc@lid");
    }

    #[test]
    fn targets_name_numbers_and_jids() {
        assert_eq!(target_jid("+1555").expect("n"), "1555@s.whatsapp.net");
        assert_eq!(
            target_jid("whatsapp:1555@s.whatsapp.net").expect("jid"),
            "1555@s.whatsapp.net"
        );
        assert!(matches!(target_jid("bob"), Err(SendError::Permanent(_))));
    }

    #[test]
    fn the_status_follows_the_link() {
        let mut status = AccountStatus::default();
        let mut link = LinkStatus {
            state: LinkState::Connected,
            linked: true,
            linked_jid: Some("1555:2@s.whatsapp.net".into()),
            qr: None,
            qr_ttl_secs: None,
            disconnects: 0,
            last_disconnect: None,
            last_error: None,
        };
        mirror(&mut status, &link);
        assert!(status.connected);
        assert_eq!(status.state_reason.as_deref(), Some("connected"));
        assert_eq!(status.identity.as_deref(), Some("+1555"));
        link.state = LinkState::LoggedOut;
        link.last_error = Some("logged out".into());
        mirror(&mut status, &link);
        assert!(!status.connected);
        assert_eq!(status.state_reason.as_deref(), Some("loggedOut"));
        assert_eq!(status.last_error.as_deref(), Some("logged out"));
    }
}
