//! A harness for message-path tests: a gateway state (no sockets) whose
//! only channel is the recording channel registered as `telegram`, started
//! with the hub as its sink, the fake OpenAI server as the only provider,
//! and helpers to build inbound events and read what the model received.

use std::sync::Arc;
use std::time::Duration;

use pincer::channels::hub::HubSink;
use pincer::channels::InboundEvent;
use pincer::config::schema::bindings::PeerKind;
use pincer::config::LoadedConfig;
use pincer::gateway::auth::SharedSecret;
use pincer::gateway::state::{GatewayState, StateParts};
use pincer::gateway::webchat::hub_of;
use pincer::pipeline::context::{ChatType, InboundMessage};
use pincer::routing::{RouteInput, RoutePeer};
use pincer::store::{Store, StoreOptions};
use pincer::system::board::BoardLimits;

use super::fake_openai::{FakeOpenAi, FakeReply};
use super::recording_channel::{Abilities, Outbound, RecordingChannel};

pub const WAIT: Duration = Duration::from_secs(20);

pub struct Hub {
    pub state: Arc<GatewayState>,
    pub channel: Arc<RecordingChannel>,
    pub fake: FakeOpenAi,
    _dir: tempfile::TempDir,
}

/// A gateway state with the recording channel as `telegram`; `telegram`
/// holds extra keys of `channels.telegram`, `extra` extra top-level keys.
pub async fn start(telegram: &str, extra: &str, abilities: Abilities) -> Hub {
    start_with_agents(telegram, "", extra, abilities).await
}

/// As [`start`], with `agents` holding keys of the `agents` section after
/// `defaults` (`defaults` itself only names the fake model).
pub async fn start_with_agents(
    telegram: &str,
    agents: &str,
    extra: &str,
    abilities: Abilities,
) -> Hub {
    let fake = FakeOpenAi::start().await;
    let text = format!(
        r#"{{
  models: {{ providers: {{ fake: {{ baseUrl: "{}", apiKey: "sk-test", api: "openai-completions",
                                   models: [{{ id: "gpt-test", contextWindow: 128000 }}] }} }} }},
  agents: {{ defaults: {{ model: {{ primary: "fake/gpt-test" }} }}, {agents} }},
  channels: {{ telegram: {{ botToken: "123:abc", {telegram} }} }},
  {extra}
}}"#,
        fake.base_url()
    );
    let config = pincer::config::parse_str(&text, "test").expect("test config parses");
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&dir.path().join("store"), StoreOptions::default()).expect("store");
    let state = pincer::app::build(StateParts {
        loaded: LoadedConfig {
            config,
            path: None,
            raw: text,
            hash: String::new(),
        },
        store,
        data_dir: dir.path().to_path_buf(),
        secret: SharedSecret::Token("test-token".into()),
        limits: BoardLimits::default(),
        tls_fingerprint: None,
    });
    state.set_ready();
    let channel = RecordingChannel::new("telegram", abilities);
    state.services.channels.register(channel.clone());
    let sink = Arc::new(HubSink(hub_of(&state)));
    state.services.channels.start_all(sink).await;
    Hub {
        state,
        channel,
        fake,
        _dir: dir,
    }
}

pub fn dm(sender: &str, id: &str, text: &str) -> InboundEvent {
    InboundEvent {
        channel: "telegram".into(),
        account_id: "default".into(),
        message: InboundMessage {
            body: text.into(),
            sender_id: sender.into(),
            message_id: Some(id.into()),
            conversation_id: Some(sender.into()),
            ..InboundMessage::default()
        },
        route: RouteInput {
            channel: "telegram".into(),
            account_id: Some("default".into()),
            peer: Some(RoutePeer::new(PeerKind::Direct, sender)),
            ..RouteInput::default()
        },
        bot_mentioned: false,
        bot_username: Some("pincer_bot".into()),
    }
}

pub fn group(sender: &str, id: &str, text: &str, mentioned: bool) -> InboundEvent {
    let mut event = dm(sender, id, text);
    event.message.group_id = Some("-100".into());
    event.message.chat_type = Some(ChatType::Group);
    event.message.conversation_id = Some("-100".into());
    event.route.peer = Some(RoutePeer::new(PeerKind::Group, "-100"));
    event.bot_mentioned = mentioned;
    event
}

pub fn reply(text: &str) -> FakeReply {
    FakeReply::Text {
        chunks: vec![text.to_string()],
        delay_ms: 0,
    }
}

pub fn sent_count(log: &[Outbound]) -> usize {
    log.iter()
        .filter(|o| matches!(o, Outbound::Sent { .. }))
        .count()
}

/// The user text of the model request `index`.
pub fn last_user_text(fake: &FakeOpenAi, index: usize) -> String {
    let request = &fake.requests()[index];
    let messages = request.body["messages"].as_array().expect("messages");
    let user = messages
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .expect("a user message");
    match &user["content"] {
        serde_json::Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// The barrier before asserting that an event caused no (further) run: waits until the hub's
/// queue holds no running or waiting turn. The hub decides an event before `inject` returns
/// and enqueues a run synchronously, so once the queue is idle every run the injected events
/// caused has finished, its model requests with it. Panics if it never goes idle within
/// [`WAIT`].
pub async fn queue_idle(hub: &Hub) {
    let queue = &hub.state.services.hub.queue;
    let deadline = tokio::time::Instant::now() + WAIT;
    while queue.session_count() > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the queue still holds {} sessions after {WAIT:?}",
            queue.session_count()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
