//! The WhatsApp adapter: one linked device ([`WhatsAppSession`]) per
//! account of `channels.whatsapp`, its received messages turned into
//! `InboundEvent`s for the one message path (inbox, dedupe, pairing, group
//! gating, routing, queue, reply chunking are not this file's job), its link
//! status mirrored into the account status that `channels.status` and
//! `health` report, replies sent through the device, and read receipts.
//!
//! Direct messages are peers by number (`+1555…`); a group message has the
//! group's JID as its peer and reply target and the member as its sender,
//! and counts as mentioning the bot when `mentionedJid` names the linked
//! account (number or LID), when it quotes one of the account's messages,
//! or (no one else mentioned) when its text carries the account's number —
//! upstream's rules; `mentionPatterns` are matched by the message path.
//! Self chat ("message yourself" on the linked number) is inbound unless
//! `selfChatMode: false`; the session never hands on what this device sent.
//! Each account's device lives in the sealed records `whatsapp/<account>`.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, RwLock};
use tokio_util::sync::CancellationToken;

use crate::channels::account::{AccountState, AccountTasks};
use crate::channels::media::{MediaDefaults, MediaLimits, MediaOutcome};
use crate::channels::{
    AccountStatus, BoxFuture, Channel, ChunkMode, InboundEvent, InboundSink, MarkRead,
    OutboundTarget, QrLogin, SendError, SendMedia, SentMessage, StartError, TextFormat, TextLimits,
    Upload, UploadKind,
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
/// Longest text taken from WhatsApp (its clients cap a message at 65,536
/// characters); a longer one is skipped, logged and reported.
pub const MAX_INBOUND_TEXT_CHARS: usize = 65_536;
/// Tries at handing one message to the message path.
const DELIVERY_ATTEMPTS: u32 = 3;

/// One configured account.
pub(super) struct Account {
    pub(super) id: String,
    pub(super) state: AccountState<()>,
    pub(super) session: RwLock<Option<WhatsAppSession>>,
    /// Stops this account's tasks alone (a child of the channel's token), for a relink.
    pub(super) stop: parking_lot::Mutex<CancellationToken>,
    /// One QR login (`login.rs`) at a time.
    pub(super) login: tokio::sync::Mutex<()>,
    /// A QR code was handed out by `web.login.start` and its outcome not yet reported.
    pub(super) login_pending: AtomicBool,
    pub(super) chat: ChatOptions,
}

/// What an account's config says about self chat and read receipts.
#[derive(Debug, Clone, Default)]
pub struct ChatOptions {
    /// `sendReadReceipts` (default true).
    pub send_read_receipts: bool,
    /// `selfChatMode`: `Some(false)` ignores self chat; unset infers the
    /// safeguards from the linked number being in `allowFrom`.
    pub self_chat_mode: Option<bool>,
    /// `allowFrom`, as senders are spelled (`+1555…`).
    pub allow_from: Vec<String>,
}

impl ChatOptions {
    fn of(account: &crate::config::schema::whatsapp::WhatsAppAccountConfig) -> ChatOptions {
        ChatOptions {
            send_read_receipts: account.effective_send_read_receipts(),
            self_chat_mode: account.self_chat_mode,
            allow_from: account
                .effective_allow_from()
                .iter()
                .filter_map(|e| crate::channels::settings::whatsapp::whatsapp_sender(e))
                .collect(),
        }
    }

    /// Upstream's self-chat safeguards (no read receipts): `selfChatMode`,
    /// else whether the linked number (`+digits`) is in `allowFrom`.
    pub fn self_chat_safeguards(&self, own: Option<&str>) -> bool {
        self.self_chat_mode
            .unwrap_or_else(|| own.is_some_and(|own| self.allow_from.iter().any(|a| a == own)))
    }
}

/// The WhatsApp adapter for all accounts of `channels.whatsapp`.
pub struct WhatsAppChannel {
    pub(super) accounts: BTreeMap<String, Arc<Account>>,
    pub(super) default_account: String,
    pub(super) store: Store,
    http: reqwest::Client,
    url: String,
    pub(super) tasks: AccountTasks,
    /// Where the accounts' messages go, kept from `start` for a relink.
    pub(super) sink: parking_lot::Mutex<Option<Arc<dyn InboundSink>>>,
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

/// Whether `text` names the linked account's number (digits, any spacing
/// or `+`): upstream's fallback mention when no one else is mentioned.
fn names_own_number(text: &InboundText) -> bool {
    let Some(own) = text.own_number.as_deref().filter(|n| !n.is_empty()) else {
        return false;
    };
    let digits: String = text.text.chars().filter(char::is_ascii_digit).collect();
    !text.mentions_others && digits.contains(own)
}

/// One received message as an event; `None` for a self-chat message when
/// `selfChatMode` is false.
pub fn inbound_event(
    account_id: &str,
    text: &InboundText,
    chat: &ChatOptions,
    now_ms: u64,
) -> Option<InboundEvent> {
    if text.from_me && chat.self_chat_mode == Some(false) {
        return None;
    }
    let sender = sender_id(&text.sender);
    let mut message = InboundMessage {
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
    let mut mentioned = false;
    let peer = if text.is_group {
        mentioned = text.mentions_me || names_own_number(text);
        message.from = format!("{CHANNEL_ID}:group:{}", text.chat);
        message.to = message.from.clone();
        message.chat_type = Some(ChatType::Group);
        message.conversation_id = Some(text.chat.clone());
        message.conversation_label = Some(format!("group:{}", text.chat));
        message.group_id = Some(text.chat.clone());
        message.is_reply_to_bot = text.replies_to_me;
        message.mentioned = mentioned || text.replies_to_me;
        RoutePeer::new(PeerKind::Group, &text.chat)
    } else {
        if text.from_me {
            // "Message yourself": sent by the account to itself.
            message.to = message.from.clone();
        }
        RoutePeer::new(PeerKind::Direct, &sender)
    };
    Some(InboundEvent {
        channel: CHANNEL_ID.to_string(),
        account_id: account_id.to_string(),
        message,
        route: RouteInput {
            channel: CHANNEL_ID.to_string(),
            account_id: Some(account_id.to_string()),
            peer: Some(peer),
            ..RouteInput::default()
        },
        bot_mentioned: mentioned,
        bot_username: None,
    })
}

/// The account status a link status reads as.
fn mirror(status: &mut AccountStatus, link: &LinkStatus, now_ms: u64) {
    let connected = link.state == LinkState::Connected;
    if connected && !status.connected {
        status.last_connected_at_ms = Some(now_ms);
    }
    status.connected = connected;
    status.linked = Some(link.linked_jid.is_some() && link.state != LinkState::LoggedOut);
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

/// The account's device, when it runs and is connected (a send needs both).
fn connected(session: Option<&WhatsAppSession>) -> Result<&WhatsAppSession, SendError> {
    let session =
        session.ok_or_else(|| SendError::Transient("the WhatsApp device is not running".into()))?;
    let state = session.status().state;
    if state != LinkState::Connected {
        return Err(SendError::Transient(format!(
            "the WhatsApp device is not connected ({state:?})"
        )));
    }
    Ok(session)
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
            let chat = ChatOptions::of(&account);
            let name = account.name.clone();
            state.update(|s| s.name = name);
            accounts.insert(
                id.clone(),
                Arc::new(Account {
                    id,
                    state,
                    session: RwLock::new(None),
                    stop: parking_lot::Mutex::new(CancellationToken::new()),
                    login: tokio::sync::Mutex::new(()),
                    login_pending: AtomicBool::new(false),
                    chat,
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
            sink: parking_lot::Mutex::new(None),
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

    pub(super) async fn start_account(
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
        let account_stop = cancel.child_token();
        *account.stop.lock() = account_stop.clone();
        let stop = account_stop.clone();
        self.tasks.spawn(async move {
            loop {
                let link = watch.borrow_and_update().clone();
                watched.state.update(|s| mirror(s, &link, now_ms()));
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
            account_stop,
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
        let chars = text.text.chars().count();
        if chars > MAX_INBOUND_TEXT_CHARS {
            let skipped = format!(
                "a message of {chars} characters from {} in {} was skipped (over {MAX_INBOUND_TEXT_CHARS})",
                sender_id(&text.sender),
                text.chat
            );
            log::warn!("whatsapp account {}: {skipped}", account.id);
            account.state.update(|s| s.last_error = Some(skipped));
            continue;
        }
        let Some(mut event) = inbound_event(&account.id, &text, &account.chat, now_ms()) else {
            log::info!(
                "whatsapp account {}: a self-chat message was ignored (selfChatMode: false)",
                account.id
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
            let session = connected(session.as_ref())?;
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
            *self.sink.lock() = Some(Arc::clone(&sink));
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
            *self.sink.lock() = None;
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

    fn qr_login(&self) -> Option<&dyn QrLogin> {
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
            let session = connected(session.as_ref())?;
            let message_id = session
                .send_text(&jid, text)
                .await
                .map_err(|e| SendError::Transient(e.to_string()))?;
            account.state.outbound_now();
            Ok(SentMessage { message_id })
        })
    }

    /// `sendReadReceipts` (default true), except under the self-chat
    /// safeguards (`selfChatMode`, or the linked number in `allowFrom`).
    fn read_receipts(&self, account_id: &str) -> Option<&dyn MarkRead> {
        let id = if account_id.trim().is_empty() {
            self.default_account.as_str()
        } else {
            account_id.trim()
        };
        let account = self.accounts.get(id)?;
        let own = account.state.status().identity;
        (account.chat.send_read_receipts && !account.chat.self_chat_safeguards(own.as_deref()))
            .then_some(self as &dyn MarkRead)
    }
}

impl MarkRead for WhatsAppChannel {
    /// A `<receipt type="read">` for the message: to the chat, naming the
    /// member who wrote it in a group.
    fn mark_read<'a>(
        &'a self,
        target: &'a OutboundTarget,
        message_id: &'a str,
        sender_id: &'a str,
    ) -> BoxFuture<'a, Result<(), SendError>> {
        Box::pin(async move {
            let account = self.account_for(target)?;
            let chat = target_jid(&target.to)?;
            let sender = if chat.ends_with("@g.us") {
                Some(target_jid(sender_id)?)
            } else {
                None
            };
            let session = account.session.read().await;
            let session = session
                .as_ref()
                .ok_or_else(|| SendError::Transient("the WhatsApp device is not running".into()))?;
            session
                .mark_read(&chat, sender.as_deref(), message_id)
                .await
                .map_err(|e| SendError::Transient(e.to_string()))
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
            own_number: Some("15550001111".into()),
            ..InboundText::default()
        }
    }

    fn options() -> ChatOptions {
        ChatOptions {
            send_read_receipts: true,
            ..ChatOptions::default()
        }
    }

    #[test]
    fn a_direct_message_becomes_an_event_answered_in_its_chat() {
        let event = inbound_event(
            "default",
            &text("15557654321:3@s.whatsapp.net", false),
            &options(),
            5,
        )
        .expect("event");
        assert_eq!(event.message.sender_id, "+15557654321");
        assert_eq!(
            event.message.originating_to.as_deref(),
            Some("15557654321:3@s.whatsapp.net")
        );
        assert_eq!(event.message.chat_type, Some(ChatType::Direct));
        assert_eq!(event.message.sender_name.as_deref(), Some("Alice"));
        assert_eq!(event.message.message_id.as_deref(), Some("3EB0"));
        assert_eq!(
            event.route.peer,
            Some(RoutePeer::new(PeerKind::Direct, "+15557654321"))
        );
        assert_eq!(event.reply_target().to, "+15557654321");
        assert!(!event.bot_mentioned);
        assert_eq!(sender_id("abc@lid"), "abc@lid");
    }

    #[test]
    fn a_group_message_has_the_group_as_peer_and_target_and_the_member_as_sender() {
        let plain = text("15557654321:2@s.whatsapp.net", true);
        let event = inbound_event("default", &plain, &options(), 5).expect("event");
        assert_eq!(event.message.sender_id, "+15557654321");
        assert_eq!(event.message.group_id.as_deref(), Some("120363@g.us"));
        assert_eq!(event.message.chat_type, Some(ChatType::Group));
        assert_eq!(
            event.route.peer,
            Some(RoutePeer::new(PeerKind::Group, "120363@g.us"))
        );
        assert_eq!(event.reply_target().to, "120363@g.us");
        assert!(!event.bot_mentioned && !event.message.mentioned);
        // mentionedJid naming the linked account.
        let mentioned = InboundText {
            mentions_me: true,
            ..plain.clone()
        };
        let event = inbound_event("default", &mentioned, &options(), 5).expect("event");
        assert!(event.bot_mentioned && event.message.mentioned);
        // A reply quoting the bot.
        let reply = InboundText {
            replies_to_me: true,
            ..plain.clone()
        };
        let event = inbound_event("default", &reply, &options(), 5).expect("event");
        assert!(event.message.is_reply_to_bot && !event.bot_mentioned);
        // The linked number in the text, unless someone else is mentioned.
        let number = InboundText {
            text: "hey +1 555 000 1111, what's up?".into(),
            ..plain.clone()
        };
        assert!(
            inbound_event("default", &number, &options(), 5)
                .expect("event")
                .bot_mentioned
        );
        let other = InboundText {
            mentions_others: true,
            ..number
        };
        assert!(
            !inbound_event("default", &other, &options(), 5)
                .expect("event")
                .bot_mentioned
        );
    }

    #[test]
    fn self_chat_is_inbound_unless_self_chat_mode_is_false() {
        let own = InboundText {
            from_me: true,
            ..text("15550001111@s.whatsapp.net", false)
        };
        let event = inbound_event("default", &own, &options(), 5).expect("event");
        assert_eq!(event.message.from, event.message.to, "marked as self chat");
        assert_eq!(event.reply_target().to, "+15550001111");
        let off = ChatOptions {
            self_chat_mode: Some(false),
            ..options()
        };
        assert!(inbound_event("default", &own, &off, 5).is_none());
        // Safeguards: explicit, else inferred from allowFrom holding the linked number.
        let listed = ChatOptions {
            allow_from: vec!["+15550001111".into()],
            ..options()
        };
        assert!(listed.self_chat_safeguards(Some("+15550001111")));
        assert!(!options().self_chat_safeguards(Some("+15550001111")));
        assert!(!ChatOptions {
            self_chat_mode: Some(false),
            ..listed
        }
        .self_chat_safeguards(Some("+15550001111")));
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
        mirror(&mut status, &link, 7);
        assert!(status.connected);
        assert_eq!(status.linked, Some(true));
        assert_eq!(status.last_connected_at_ms, Some(7));
        assert_eq!(status.state_reason.as_deref(), Some("connected"));
        assert_eq!(status.identity.as_deref(), Some("+1555"));
        mirror(&mut status, &link, 9);
        assert_eq!(
            status.last_connected_at_ms,
            Some(7),
            "still the same connection"
        );
        link.state = LinkState::LoggedOut;
        link.last_error = Some("logged out".into());
        mirror(&mut status, &link, 11);
        assert!(!status.connected);
        assert_eq!(status.linked, Some(false));
        assert_eq!(status.state_reason.as_deref(), Some("loggedOut"));
        assert_eq!(status.last_error.as_deref(), Some("logged out"));
    }
}
