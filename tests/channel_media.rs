//! Discord and Slack attachments against their fakes: a file under the cap
//! is downloaded (streamed) into the channel's media directory with its
//! bytes and MIME type, Slack's with the bot token; a file over the cap
//! (by its announced size) is never fetched and the message body carries a
//! `<media:…>` note instead.

#[path = "support/fake_discord.rs"]
mod fake_discord;
#[path = "support/fake_slack.rs"]
mod fake_slack;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use pincer::channels::discord::DiscordChannel;
use pincer::channels::media::MediaDefaults;
use pincer::channels::slack::SlackChannel;
use pincer::channels::{BoxFuture, Channel, InboundError, InboundEvent, InboundSink};
use serde_json::{json, Value};
use tokio::sync::mpsc;

/// Upper bound for waiting on an outcome; never a timing claim.
const WAIT_LIMIT: Duration = Duration::from_secs(15);
/// A PNG's first bytes (the fakes announce the type too).
const PNG_HEAD: &[u8] = b"\x89PNG\r\n\x1a\n";

struct ChannelSink(mpsc::UnboundedSender<InboundEvent>);

impl InboundSink for ChannelSink {
    fn deliver(&self, event: InboundEvent) -> BoxFuture<'_, Result<(), InboundError>> {
        let _ = self.0.send(event);
        Box::pin(async { Ok(()) })
    }
}

fn media_under(root: &Path) -> MediaDefaults {
    MediaDefaults {
        root: root.to_path_buf(),
        ..MediaDefaults::default()
    }
}

fn png(len: usize) -> Vec<u8> {
    let mut bytes = PNG_HEAD.to_vec();
    bytes.resize(len, 7);
    bytes
}

async fn eventually(what: &str, condition: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT_LIMIT;
    while !condition() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never happened: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn next_event(events: &mut mpsc::UnboundedReceiver<InboundEvent>) -> InboundEvent {
    tokio::time::timeout(WAIT_LIMIT, events.recv())
        .await
        .expect("an inbound event in time")
        .expect("sink open")
}

async fn start(channel: &dyn Channel) -> mpsc::UnboundedReceiver<InboundEvent> {
    let (sender, receiver) = mpsc::unbounded_channel();
    channel
        .start(Arc::new(ChannelSink(sender)))
        .await
        .expect("start");
    eventually("connected", || channel.status()[0].connected).await;
    receiver
}

fn discord_dm(id: &str, attachments: Value) -> Value {
    json!({
        "id": id, "channel_id": "dm-chan", "type": 0, "content": "",
        "timestamp": "2026-11-22T08:00:00.000000+00:00", "tts": false,
        "author": {"id": "42", "username": "ann"},
        "mentions": [], "mention_roles": [], "attachments": attachments, "embeds": [], "pinned": false
    })
}

fn discord_channel(fake: &fake_discord::FakeDiscord, root: &Path, max_mb: f64) -> DiscordChannel {
    let config = serde_json::from_value(json!({"token": fake_discord::TOKEN,
        "apiBaseUrl": fake.api_base_url(), "mediaMaxMb": max_mb}))
    .expect("discord config");
    DiscordChannel::with_media(&config, &reqwest::Client::new(), &media_under(root))
        .expect("discord channel")
}

#[tokio::test]
async fn discord_attachment_under_the_cap_is_downloaded_into_the_media_dir() {
    let fake = fake_discord::FakeDiscord::start(45_000).await;
    let root = tempfile::tempdir().expect("media root");
    let channel = discord_channel(&fake, root.path(), 1.0);
    let mut events = start(&channel).await;
    let bytes = png(20_000);
    let attachment = fake.add_attachment("cat.png", bytes.clone(), "image/png");
    fake.dispatch("MESSAGE_CREATE", discord_dm("1", json!([attachment])));
    let event = next_event(&mut events).await;
    assert_eq!(event.message.media.len(), 1, "{:?}", event.message);
    let item = &event.message.media[0];
    let path = Path::new(&item.path);
    assert!(path.starts_with(root.path().join("discord")), "{path:?}");
    assert_eq!(std::fs::read(path).expect("downloaded file"), bytes);
    assert_eq!(item.mime_type.as_deref(), Some("image/png"));
    assert_eq!(fake.file_fetches("cat.png"), 1);
    channel.stop().await;
}

#[tokio::test]
async fn discord_attachment_over_the_cap_is_never_fetched_and_noted() {
    let fake = fake_discord::FakeDiscord::start(45_000).await;
    let root = tempfile::tempdir().expect("media root");
    let channel = discord_channel(&fake, root.path(), 0.01);
    let mut events = start(&channel).await;
    let attachment = fake.add_attachment("big.pdf", vec![b'%'; 50_000], "application/pdf");
    fake.dispatch("MESSAGE_CREATE", discord_dm("1", json!([attachment])));
    let event = next_event(&mut events).await;
    assert!(event.message.media.is_empty());
    assert_eq!(
        event.message.body,
        "<media:document> (big.pdf, 48.8 KB: over the 10.2 KB limit, not downloaded)"
    );
    assert_eq!(fake.file_fetches("big.pdf"), 0);
    channel.stop().await;
}

fn slack_channel(fake: &fake_slack::FakeSlack, root: &Path, max_mb: f64) -> SlackChannel {
    let config = serde_json::from_value(json!({"botToken": fake_slack::BOT_TOKEN,
        "appToken": fake_slack::APP_TOKEN, "apiUrl": fake.api_url(), "mediaMaxMb": max_mb}))
    .expect("slack config");
    SlackChannel::with_media(&config, &reqwest::Client::new(), &media_under(root))
        .expect("slack channel")
}

fn slack_file_share(files: Value) -> Value {
    json!({"type": "message", "subtype": "file_share", "channel": "D42", "channel_type": "im",
        "user": "U42", "text": "look", "ts": "1700000000.000100", "files": files})
}

#[tokio::test]
async fn slack_file_under_the_cap_is_downloaded_with_the_bot_token() {
    let fake = fake_slack::FakeSlack::start().await;
    let root = tempfile::tempdir().expect("media root");
    let channel = slack_channel(&fake, root.path(), 1.0);
    let mut events = start(&channel).await;
    // No type announced: the first bytes tell.
    let bytes = png(3_000);
    let mut file = fake.add_file("shot.bin", bytes.clone(), "");
    file.as_object_mut().expect("file").remove("mimetype");
    fake.send_event(slack_file_share(json!([file])));
    let event = next_event(&mut events).await;
    assert_eq!(event.message.body, "look");
    assert_eq!(event.message.media.len(), 1, "{:?}", event.message);
    let item = &event.message.media[0];
    assert!(Path::new(&item.path).starts_with(root.path().join("slack")));
    assert_eq!(std::fs::read(&item.path).expect("downloaded file"), bytes);
    assert_eq!(item.mime_type.as_deref(), Some("image/png"));
    assert_eq!(fake.file_fetches("shot.bin"), 1);
    channel.stop().await;
}

#[tokio::test]
async fn slack_file_over_the_cap_is_never_fetched_and_noted() {
    let fake = fake_slack::FakeSlack::start().await;
    let root = tempfile::tempdir().expect("media root");
    let channel = slack_channel(&fake, root.path(), 0.001);
    let mut events = start(&channel).await;
    let file = fake.add_file("voice.ogg", vec![0; 5_000], "audio/ogg");
    fake.send_event(slack_file_share(json!([file])));
    let event = next_event(&mut events).await;
    assert!(event.message.media.is_empty());
    assert_eq!(
        event.message.body,
        "look\n<media:audio> (voice.ogg, 4.9 KB: over the 1.0 KB limit, not downloaded)"
    );
    assert_eq!(fake.file_fetches("voice.ogg"), 0);
    channel.stop().await;
}
