//! Per-account outbound limits as the message path applies them
//! (`ChannelSettings::text_limits` over each real adapter's hard cap): a
//! smaller `textChunkLimit` splits answers smaller, a larger one is clamped
//! to the platform's cap (Telegram 4,096, Discord 2,000, Slack 40,000), an
//! unset one gives upstream's defaults (4,000 / 2,000 / 8,000), and
//! Discord's `maxLinesPerMessage` replaces its 17-line default.

use pincer::channels::discord::DiscordChannel;
use pincer::channels::outbound::split_for_limits;
use pincer::channels::settings::ChannelSettings;
use pincer::channels::slack::SlackChannel;
use pincer::channels::telegram::{TelegramChannel, TelegramOptions};
use pincer::channels::{Channel, TextLimits};
use pincer::config::Config;
use pincer::store::{Store, StoreOptions};
use serde_json::{json, Value};

/// Every adapter built for `account` keys (same keys on each platform).
fn adapters(account: Value) -> (Config, Vec<Box<dyn Channel>>, tempfile::TempDir) {
    let with = |base: Value| {
        let mut base = base;
        if let (Some(base), Some(extra)) = (base.as_object_mut(), account.as_object()) {
            base.extend(extra.clone());
        }
        base
    };
    let config: Config = serde_json::from_value(json!({ "channels": {
        "telegram": with(json!({"botToken": "1:a"})),
        "discord": with(json!({"token": "t"})),
        "slack": with(json!({"botToken": "xoxb-1", "appToken": "xapp-1"})),
    }}))
    .expect("config");
    let dir = tempfile::tempdir().expect("store dir");
    let store = Store::open(&dir.path().join("store"), StoreOptions::default()).expect("store");
    let channels = &config.channels;
    let http = reqwest::Client::new();
    let telegram = TelegramChannel::new(
        channels.telegram.as_ref().expect("telegram"),
        store,
        TelegramOptions::for_config(&config),
    );
    let discord = DiscordChannel::from_config(channels.discord.as_ref().expect("discord"), &http)
        .expect("discord");
    let slack =
        SlackChannel::from_config(channels.slack.as_ref().expect("slack"), &http).expect("slack");
    (
        config,
        vec![Box::new(telegram), Box::new(discord), Box::new(slack)],
        dir,
    )
}

fn limits_of(config: &Config, adapter: &dyn Channel) -> TextLimits {
    ChannelSettings::resolve(config, adapter.id(), "default").text_limits(adapter.text_limits())
}

fn max_chars(account: Value) -> Vec<(&'static str, usize)> {
    let (config, adapters, _dir) = adapters(account);
    adapters
        .iter()
        .map(|a| (a.id(), limits_of(&config, a.as_ref()).max_chars))
        .collect()
}

#[test]
fn a_smaller_text_chunk_limit_splits_answers_smaller_on_every_platform() {
    let (config, adapters, _dir) = adapters(json!({"textChunkLimit": 500}));
    let answer = "word ".repeat(400);
    for adapter in &adapters {
        let limits = limits_of(&config, adapter.as_ref());
        assert_eq!(limits.max_chars, 500, "{}", adapter.id());
        let pieces = split_for_limits(&answer, limits);
        assert!(
            pieces.len() >= 4,
            "{}: {} pieces",
            adapter.id(),
            pieces.len()
        );
        assert!(
            pieces.iter().all(|p| p.chars().count() <= 500),
            "{}",
            adapter.id()
        );
    }
}

#[test]
fn a_text_chunk_limit_above_the_platform_cap_is_clamped() {
    assert_eq!(
        max_chars(json!({"textChunkLimit": 100_000})),
        vec![("telegram", 4_096), ("discord", 2_000), ("slack", 40_000)]
    );
}

#[test]
fn without_a_text_chunk_limit_upstream_defaults_apply() {
    assert_eq!(
        max_chars(json!({})),
        vec![("telegram", 4_000), ("discord", 2_000), ("slack", 8_000)]
    );
}

/// Discord's limits for a `channels.discord` section.
fn discord_limits(section: Value) -> TextLimits {
    let config: Config =
        serde_json::from_value(json!({ "channels": { "discord": section } })).expect("config");
    let discord = DiscordChannel::from_config(
        config.channels.discord.as_ref().expect("discord"),
        &reqwest::Client::new(),
    )
    .expect("discord");
    limits_of(&config, &discord)
}

#[test]
fn discord_max_lines_per_message_replaces_the_default_seventeen() {
    let limits = discord_limits(json!({"token": "t", "maxLinesPerMessage": 5}));
    assert_eq!(limits.max_lines, Some(5));
    let answer: String = (0..12).map(|i| format!("line {i}\n")).collect();
    assert_eq!(split_for_limits(&answer, limits).len(), 3);
    assert_eq!(discord_limits(json!({"token": "t"})).max_lines, Some(17));
}
