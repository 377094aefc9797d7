//! The harness the Telegram adapter tests share: a recording `InboundSink`
//! (that can refuse deliveries), a fake Bot API with a temp data and media
//! directory, adapter construction, and message builders in Telegram's JSON.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pincer::channels::inbox::InboxError;
use pincer::channels::telegram::{TelegramChannel, TelegramOptions};
use pincer::channels::{
    AccountStatus, BoxFuture, Channel, InboundError, InboundEvent, InboundSink, OutboundTarget,
};
use pincer::config::schema::telegram::TelegramConfig;
use pincer::store::{Store, StoreError, StoreOptions};
use serde_json::{json, Value};
use tokio::sync::Notify;

use super::fake_telegram::FakeTelegram;

pub const TOKEN: &str = "123456789:AAE-secret_TOKEN_value";
pub const BOT_ID: i64 = 4242;
pub const BOT_USERNAME: &str = "PincerBot";
/// Hang guard for waits on the sink or status (never a timing claim).
pub const WAIT_GUARD: Duration = Duration::from_secs(30);

/// An inbound sink that records events and can refuse the first N.
#[derive(Default)]
pub struct RecordingSink {
    events: Mutex<Vec<InboundEvent>>,
    refusals_left: AtomicUsize,
    pub refused: AtomicUsize,
    changed: Notify,
}

impl RecordingSink {
    pub fn refusing(count: usize) -> Arc<RecordingSink> {
        let sink = RecordingSink::default();
        sink.refusals_left.store(count, Ordering::SeqCst);
        Arc::new(sink)
    }

    pub fn events(&self) -> Vec<InboundEvent> {
        self.events.lock().expect("sink lock").clone()
    }

    pub fn bodies(&self) -> Vec<String> {
        self.events().into_iter().map(|e| e.message.body).collect()
    }

    pub async fn wait_until(&self, what: &str, check: impl Fn(&RecordingSink) -> bool) {
        let deadline = tokio::time::Instant::now() + WAIT_GUARD;
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if check(self) {
                return;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                panic!("sink: gave up waiting for {what}");
            }
        }
    }

    pub async fn wait_for_events(&self, count: usize) -> Vec<InboundEvent> {
        self.wait_until(&format!("{count} events"), |s| s.events().len() >= count)
            .await;
        self.events()
    }
}

impl InboundSink for RecordingSink {
    fn deliver(&self, event: InboundEvent) -> BoxFuture<'_, Result<(), InboundError>> {
        Box::pin(async move {
            let refuse = self
                .refusals_left
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            if refuse {
                self.refused.fetch_add(1, Ordering::SeqCst);
                self.changed.notify_waiters();
                // What the hub answers when its inbox cannot keep a message.
                return Err(InboundError::Inbox(InboxError::Store(StoreError::Full {
                    limit_bytes: 0,
                })));
            }
            self.events.lock().expect("sink lock").push(event);
            self.changed.notify_waiters();
            Ok(())
        })
    }
}

pub struct Harness {
    pub fake: FakeTelegram,
    _dir: tempfile::TempDir,
    pub data_dir: PathBuf,
    pub media_dir: PathBuf,
}

impl Harness {
    pub async fn new() -> Harness {
        let fake = FakeTelegram::start(TOKEN, BOT_ID, BOT_USERNAME).await;
        let dir = tempfile::tempdir().expect("temp dir");
        Harness {
            fake,
            data_dir: dir.path().join("data"),
            media_dir: dir.path().join("media"),
            _dir: dir,
        }
    }

    pub fn store(&self) -> Store {
        Store::open(&self.data_dir, StoreOptions::default()).expect("open store")
    }

    pub fn config(&self, extra: Value) -> TelegramConfig {
        let mut config = json!({ "botToken": TOKEN, "apiRoot": self.fake.api_root() });
        if let (Some(base), Value::Object(extra)) = (config.as_object_mut(), extra) {
            base.extend(extra);
        }
        serde_json::from_value(config).expect("telegram config")
    }

    pub fn channel(&self, store: &Store, extra: Value) -> TelegramChannel {
        TelegramChannel::new(&self.config(extra), store.clone(), options(&self.media_dir))
    }
}

pub fn options(media_dir: &Path) -> TelegramOptions {
    TelegramOptions {
        media_dir: media_dir.to_path_buf(),
        default_media_max_mb: None,
        media_dir_max_bytes: 64 * 1024 * 1024,
        http: None,
        http_routes: None,
    }
}

pub fn target(to: &str) -> OutboundTarget {
    OutboundTarget {
        account_id: "default".into(),
        to: to.into(),
        ..OutboundTarget::default()
    }
}

pub fn ann() -> Value {
    FakeTelegram::user(7, "Ann", Some("ann"))
}

pub fn dm(text: &str) -> Value {
    json!({
        "chat": { "id": 7, "type": "private", "first_name": "Ann" },
        "from": { "id": 7, "is_bot": false, "first_name": "Ann", "last_name": "Lee", "username": "ann" },
        "text": text,
    })
}

pub fn group_message(text: &str, entities: Value) -> Value {
    json!({
        "chat": { "id": -100500, "type": "supergroup", "title": "Crew" },
        "from": ann(),
        "text": text,
        "entities": entities,
    })
}

pub async fn wait_for_status(
    channel: &TelegramChannel,
    what: &str,
    check: impl Fn(&AccountStatus) -> bool,
) -> AccountStatus {
    let deadline = tokio::time::Instant::now() + WAIT_GUARD;
    loop {
        if let Some(found) = channel.status().into_iter().find(|s| check(s)) {
            return found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "status never showed {what}: {:?}",
            channel.status()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
