//! The message path end to end, in process: a recording chat channel
//! (tests/support/recording_channel.rs) registered in a gateway state,
//! events injected through the hub it was started with, the real pipeline,
//! queue, agent turn (against the fake OpenAI server) and reply path, and
//! what the channel was finally asked to send.

mod support;

use std::sync::Arc;
use std::time::Duration;

use pincer::channels::hub::{hub_of, HubSink};
use pincer::channels::{InboundEvent, SendError, TextLimits};
use pincer::config::schema::bindings::PeerKind;
use pincer::config::LoadedConfig;
use pincer::gateway::auth::SharedSecret;
use pincer::gateway::state::{GatewayLimits, GatewayState, StateParts};
use pincer::pipeline::context::{ChatType, InboundMessage};
use pincer::routing::{RouteInput, RoutePeer};
use pincer::store::{Store, StoreOptions};
use support::fake_openai::{FakeOpenAi, FakeReply};
use support::recording_channel::{Abilities, Outbound, RecordingChannel};

const WAIT: Duration = Duration::from_secs(20);

struct Hub {
    state: Arc<GatewayState>,
    channel: Arc<RecordingChannel>,
    fake: FakeOpenAi,
    _dir: tempfile::TempDir,
}

/// A gateway state with the recording channel as `telegram`; `telegram`
/// holds extra keys of `channels.telegram`, `extra` extra top-level keys.
async fn start(telegram: &str, extra: &str, abilities: Abilities) -> Hub {
    let fake = FakeOpenAi::start().await;
    let text = format!(
        r#"{{
  models: {{ providers: {{ fake: {{ baseUrl: "{}", apiKey: "sk-test", api: "openai-completions",
                                   models: [{{ id: "gpt-test", contextWindow: 128000 }}] }} }} }},
  agents: {{ defaults: {{ model: {{ primary: "fake/gpt-test" }} }} }},
  channels: {{ telegram: {{ botToken: "123:abc", {telegram} }} }},
  {extra}
}}"#,
        fake.base_url()
    );
    let config = pincer::config::parse_str(&text, "test").expect("test config parses");
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&dir.path().join("store"), StoreOptions::default()).expect("store");
    let state = GatewayState::new(StateParts {
        loaded: LoadedConfig {
            config,
            path: None,
            raw: text,
            hash: String::new(),
        },
        store,
        data_dir: dir.path().to_path_buf(),
        secret: SharedSecret::Token("test-token".into()),
        limits: GatewayLimits::default(),
        tls_fingerprint: None,
    });
    state.set_ready();
    let channel = RecordingChannel::new("telegram", abilities);
    state.channels.register(channel.clone());
    let sink = Arc::new(HubSink(hub_of(&state)));
    state.channels.start_all(sink).await;
    Hub {
        state,
        channel,
        fake,
        _dir: dir,
    }
}

fn dm(sender: &str, id: &str, text: &str) -> InboundEvent {
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

fn group(sender: &str, id: &str, text: &str, mentioned: bool) -> InboundEvent {
    let mut event = dm(sender, id, text);
    event.message.group_id = Some("-100".into());
    event.message.chat_type = Some(ChatType::Group);
    event.message.conversation_id = Some("-100".into());
    event.route.peer = Some(RoutePeer::new(PeerKind::Group, "-100"));
    event.bot_mentioned = mentioned;
    event
}

fn reply(text: &str) -> FakeReply {
    FakeReply::Text {
        chunks: vec![text.to_string()],
        delay_ms: 0,
    }
}

fn sent_count(log: &[Outbound]) -> usize {
    log.iter()
        .filter(|o| matches!(o, Outbound::Sent { .. }))
        .count()
}

/// The user text of the model request `index`.
fn last_user_text(fake: &FakeOpenAi, index: usize) -> String {
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

/// Lets in-flight work settle before asserting that nothing else happened.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(400)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unpaired_dm_gets_a_code_and_no_run_until_approved() {
    let hub = start("", "", Abilities::default()).await;
    hub.channel.inject(dm("42", "1", "hello?")).await;
    let log = hub.channel.wait_for(WAIT, |l| sent_count(l) == 1).await;
    let Some(Outbound::Sent { to, text, .. }) = log.last().cloned() else {
        panic!("a send");
    };
    assert_eq!(to, "42");
    assert!(text.contains("Pairing code:"), "{text}");
    settle().await;
    assert!(
        hub.fake.requests().is_empty(),
        "no run for an unpaired sender"
    );

    let code = text
        .lines()
        .find_map(|l| l.strip_prefix("Pairing code: "))
        .expect("code line")
        .trim()
        .to_string();
    let approved = hub
        .state
        .store
        .dm_pairing_approve(
            "telegram",
            &code,
            pincer::system::clock::now_ms(),
            3_600_000,
        )
        .expect("approve");
    assert!(approved.is_some(), "the code is live");
    hub.fake.push_reply(reply("Welcome aboard."));
    hub.channel.inject(dm("42", "2", "now?")).await;
    let log = hub
        .channel
        .wait_for(WAIT, |l| {
            l.iter()
                .any(|o| matches!(o, Outbound::Sent { text, .. } if text == "Welcome aboard."))
        })
        .await;
    assert_eq!(hub.fake.requests().len(), 1);
    assert!(last_user_text(&hub.fake, 0).contains("now?"));
    let typing_before_answer = log
        .iter()
        .position(|o| matches!(o, Outbound::Typing { .. }))
        .expect("typing was shown");
    assert!(typing_before_answer < log.len() - 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_message_without_mention_is_ignored_and_mention_is_answered() {
    let hub = start(
        r#"groupPolicy: "open", streaming: "off""#,
        "",
        Abilities::default(),
    )
    .await;
    hub.channel
        .inject(group("7", "1", "chatting among us", false))
        .await;
    settle().await;
    assert!(hub.fake.requests().is_empty());
    assert_eq!(sent_count(&hub.channel.outbound()), 0);

    hub.fake.push_reply(reply("At your service."));
    hub.channel
        .inject(group("7", "2", "@pincer_bot what time is it", true))
        .await;
    let log = hub.channel.wait_for(WAIT, |l| sent_count(l) == 1).await;
    assert!(log.iter().any(
        |o| matches!(o, Outbound::Sent { to, text, .. } if to == "-100" && text == "At your service.")
    ));
    assert_eq!(hub.fake.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_answer_is_chunked_within_the_limit() {
    let abilities = Abilities {
        limits: TextLimits {
            max_chars: 120,
            max_lines: None,
        },
        ..Abilities::default()
    };
    let hub = start(r#"allowFrom: ["42"], streaming: "off""#, "", abilities).await;
    let paragraphs: Vec<String> = (1..=6)
        .map(|i| format!("Paragraph {i} says something worth reading about the weather."))
        .collect();
    let answer = paragraphs.join("\n\n");
    hub.fake.push_reply(FakeReply::Text {
        chunks: answer
            .as_bytes()
            .chunks(25)
            .map(|c| String::from_utf8_lossy(c).into_owned())
            .collect(),
        delay_ms: 1,
    });
    hub.channel
        .inject(dm("42", "1", "weather report please"))
        .await;
    let log = hub
        .channel
        .wait_for(WAIT, |l| {
            let joined: String = l
                .iter()
                .filter_map(|o| match o {
                    Outbound::Sent { text, .. } => Some(text.as_str()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join(" ");
            paragraphs.iter().all(|p| joined.contains(p.as_str()))
        })
        .await;
    let texts: Vec<&String> = log
        .iter()
        .filter_map(|o| match o {
            Outbound::Sent { text, .. } => Some(text),
            _ => None,
        })
        .collect();
    assert!(texts.len() >= 3, "split into several messages: {texts:?}");
    assert!(texts.iter().all(|t| t.chars().count() <= 120), "{texts:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_preview_sends_then_edits_and_ends_with_the_full_text() {
    let abilities = Abilities {
        edit: true,
        ..Abilities::default()
    };
    let hub = start(r#"allowFrom: ["42"], streaming: "partial""#, "", abilities).await;
    let pieces: Vec<String> = (1..=8)
        .map(|i| format!("Sentence number {i} of a streamed answer. "))
        .collect();
    let full = pieces.concat();
    hub.fake.push_reply(FakeReply::Text {
        chunks: pieces.clone(),
        delay_ms: 400,
    });
    hub.channel.inject(dm("42", "1", "stream please")).await;
    let log = hub
        .channel
        .wait_for(WAIT, |l| {
            l.iter()
                .any(|o| matches!(o, Outbound::Edited { text, .. } if *text == full.trim_end()))
        })
        .await;
    let sends: Vec<&Outbound> = log
        .iter()
        .filter(|o| matches!(o, Outbound::Sent { .. }))
        .collect();
    assert_eq!(sends.len(), 1, "one preview message: {log:#?}");
    let Outbound::Sent {
        message_id, text, ..
    } = sends[0]
    else {
        unreachable!()
    };
    assert!(text.len() < full.len(), "the preview started early: {text}");
    let edits: Vec<&String> = log
        .iter()
        .filter_map(|o| match o {
            Outbound::Edited {
                message_id: id,
                text,
            } if id == message_id => Some(text),
            _ => None,
        })
        .collect();
    assert!(
        edits.len() >= 2,
        "intermediate edits then the final: {edits:?}"
    );
    assert_eq!(edits.last().map(|t| t.as_str()), Some(full.trim_end()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limited_send_is_retried_after_the_requested_delay() {
    let hub = start(
        r#"allowFrom: ["42"], streaming: "off""#,
        "",
        Abilities::default(),
    )
    .await;
    hub.channel.fail_next_sends(vec![SendError::RateLimited {
        retry_after_ms: 1_200,
    }]);
    hub.fake.push_reply(reply("Patience pays."));
    hub.channel.inject(dm("42", "1", "hi")).await;
    hub.channel.wait_for(WAIT, |l| sent_count(l) == 1).await;
    let attempts = hub.channel.send_attempts();
    assert_eq!(attempts.len(), 2, "one refused, one accepted");
    assert!(
        attempts[1] - attempts[0] >= Duration::from_millis(1_200),
        "waited {:?}",
        attempts[1] - attempts[0]
    );
    assert!(hub_of(&hub.state).delivery_failures().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permanent_failure_is_reported_and_the_session_keeps_working() {
    let hub = start(
        r#"allowFrom: ["42"], streaming: "off""#,
        "",
        Abilities::default(),
    )
    .await;
    hub.channel
        .fail_next_sends(vec![SendError::Permanent("bot was blocked".into())]);
    hub.fake.push_reply(reply("You will not see this."));
    hub.channel.inject(dm("42", "1", "first")).await;
    let hub_handle = hub_of(&hub.state);
    let deadline = tokio::time::Instant::now() + WAIT;
    while hub_handle.delivery_failures().is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "failure reported");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let failure = &hub_handle.delivery_failures()[0];
    assert!(
        failure.error.to_string().contains("bot was blocked"),
        "{failure:?}"
    );
    assert_eq!(
        hub.channel.send_attempts().len(),
        1,
        "permanent is not retried"
    );

    hub.fake.push_reply(reply("Second answer."));
    hub.channel.inject(dm("42", "2", "second")).await;
    hub.channel
        .wait_for(WAIT, |l| {
            l.iter()
                .any(|o| matches!(o, Outbound::Sent { text, .. } if text == "Second answer."))
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_delivery_is_answered_once() {
    let hub = start(
        r#"allowFrom: ["42"], streaming: "off""#,
        "",
        Abilities::default(),
    )
    .await;
    hub.fake.push_reply(reply("Only once."));
    hub.channel.inject(dm("42", "77", "hello")).await;
    hub.channel.inject(dm("42", "77", "hello")).await;
    hub.channel.wait_for(WAIT, |l| sent_count(l) == 1).await;
    settle().await;
    assert_eq!(hub.fake.requests().len(), 1);
    assert_eq!(sent_count(&hub.channel.outbound()), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collect_mode_merges_messages_sent_while_busy() {
    let hub = start(
        r#"allowFrom: ["42"], streaming: "off""#,
        r#"messages: { queue: { mode: "collect", debounceMs: 100 } },"#,
        Abilities::default(),
    )
    .await;
    hub.fake.push_reply(FakeReply::Text {
        chunks: vec!["Working ".into(), "on ".into(), "it.".into()],
        delay_ms: 300,
    });
    hub.fake.push_reply(reply("Both noted."));
    hub.channel.inject(dm("42", "1", "first task")).await;
    while hub.fake.requests().is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    hub.channel.inject(dm("42", "2", "second task")).await;
    hub.channel.inject(dm("42", "3", "third task")).await;
    hub.channel
        .wait_for(WAIT, |l| {
            l.iter()
                .any(|o| matches!(o, Outbound::Sent { text, .. } if text == "Both noted."))
        })
        .await;
    assert_eq!(
        hub.fake.requests().len(),
        2,
        "the two waiting messages made one turn"
    );
    let merged = last_user_text(&hub.fake, 1);
    assert!(
        merged.contains("[Queued messages while agent was busy]")
            && merged.contains("second task")
            && merged.contains("third task"),
        "{merged}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupt_mode_aborts_the_running_turn() {
    let hub = start(
        r#"allowFrom: ["42"], streaming: "off""#,
        r#"messages: { queue: { mode: "interrupt" } },"#,
        Abilities::default(),
    )
    .await;
    hub.fake.push_reply(FakeReply::Hang {
        first_chunk: "Let me think".into(),
    });
    hub.fake.push_reply(reply("Changed course."));
    hub.channel.inject(dm("42", "1", "slow question")).await;
    while hub.fake.requests().is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    hub.channel
        .inject(dm("42", "2", "never mind, quick one"))
        .await;
    hub.fake.wait_for_disconnects(1).await;
    let log = hub
        .channel
        .wait_for(WAIT, |l| {
            l.iter()
                .any(|o| matches!(o, Outbound::Sent { text, .. } if text == "Changed course."))
        })
        .await;
    assert!(
        !log.iter()
            .any(|o| matches!(o, Outbound::Sent { text, .. } if text.contains("Let me think"))),
        "the aborted turn's partial text is not sent: {log:#?}"
    );
    assert!(last_user_text(&hub.fake, 1).contains("quick one"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_are_answered_and_never_reach_the_agent() {
    let hub = start(
        r#"allowFrom: ["42"], streaming: "off""#,
        "",
        Abilities::default(),
    )
    .await;
    hub.channel.inject(dm("42", "1", "/status")).await;
    hub.channel.inject(dm("42", "2", "/help@pincer_bot")).await;
    hub.channel.inject(dm("42", "3", "/think high")).await;
    hub.channel.inject(dm("42", "4", "/new")).await;
    let log = hub.channel.wait_for(WAIT, |l| sent_count(l) == 4).await;
    let texts: Vec<String> = log
        .into_iter()
        .filter_map(|o| match o {
            Outbound::Sent { text, .. } => Some(text),
            _ => None,
        })
        .collect();
    let has = |needle: &str| texts.iter().any(|t| t.contains(needle));
    assert!(has("Session: agent:main:main"), "{texts:?}");
    assert!(has("/compact") && has("/restart"), "{texts:?}");
    assert!(has("Thinking level set to high."), "{texts:?}");
    assert!(has("New session started."), "{texts:?}");
    let entry = hub
        .state
        .store
        .session("agent:main:main")
        .expect("read")
        .expect("the session exists");
    assert_eq!(entry.thinking_level.as_deref(), Some("high"));
    settle().await;
    assert!(
        hub.fake.requests().is_empty(),
        "no command reached the model"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_is_refused_to_anyone_but_the_owner() {
    let hub = start(
        r#"allowFrom: ["42"], streaming: "off""#,
        "",
        Abilities::default(),
    )
    .await;
    hub.channel.inject(dm("42", "1", "/restart")).await;
    let log = hub.channel.wait_for(WAIT, |l| sent_count(l) == 1).await;
    assert!(log
        .iter()
        .any(|o| matches!(o, Outbound::Sent { text, .. } if text.contains("for the owner only"))));
    assert!(hub.state.is_ready(), "the gateway keeps running");
}
