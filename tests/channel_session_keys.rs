//! Channel and session keys of the message path, through the hub harness
//! (a recording channel as `telegram`, the real pipeline, queue, agent turn
//! against the fake OpenAI server, and reply path):
//! `messages.groupChat.mentionPatterns` (and an agent's own list),
//! `dmHistoryLimit` and `dms.<peer>.historyLimit`, `typingMode` and
//! `typingIntervalSeconds`.

mod support;

use support::fake_openai::FakeReply;
use support::hub_harness::{dm, group, queue_idle, reply, sent_count, start, Hub, WAIT};
use support::recording_channel::{Abilities, Outbound};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_message_matching_a_mention_pattern_is_answered() {
    let hub = start(
        r#"groupPolicy: "open", streaming: "off""#,
        r#"messages: { groupChat: { mentionPatterns: ["\\bpincy\\b", "^hey bot"] } }"#,
        Abilities::default(),
    )
    .await;
    // Neither an @mention nor a pattern: kept as context, no run.
    hub.channel
        .inject(group("7", "1", "pincers are for crabs", false))
        .await;
    queue_idle(&hub).await;
    assert!(hub.fake.requests().is_empty());

    // The pattern names the bot (case-insensitive): answered without an @mention.
    hub.fake.push_reply(reply("Here."));
    hub.channel
        .inject(group("7", "2", "PINCY, are you there?", false))
        .await;
    let log = hub.channel.wait_for(WAIT, |l| sent_count(l) == 1).await;
    assert!(log
        .iter()
        .any(|o| matches!(o, Outbound::Sent { to, text, .. } if to == "-100" && text == "Here.")));
    assert_eq!(hub.fake.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_own_mention_patterns_replace_the_global_ones() {
    let hub = start(
        r#"groupPolicy: "open", streaming: "off""#,
        r#"messages: { groupChat: { mentionPatterns: ["global-name"] } },
           agents: { defaults: { model: { primary: "fake/gpt-test" } },
                     list: [ { id: "main", groupChat: { mentionPatterns: ["own-name"] } } ] }"#,
        Abilities::default(),
    )
    .await;
    hub.channel
        .inject(group("7", "1", "global-name, hello", false))
        .await;
    queue_idle(&hub).await;
    assert!(
        hub.fake.requests().is_empty(),
        "the global list is replaced"
    );

    hub.fake.push_reply(reply("Mine."));
    hub.channel
        .inject(group("7", "2", "own-name, hello", false))
        .await;
    let log = hub.channel.wait_for(WAIT, |l| sent_count(l) == 1).await;
    assert_eq!(hub.fake.requests().len(), 1, "{log:?}");
}

/// The user messages of model request `index`.
fn user_messages(hub: &Hub, index: usize) -> Vec<String> {
    let request = &hub.fake.requests()[index];
    request.body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].to_string())
        .collect()
}

/// Sends three DMs from `sender`, each answered before the next.
async fn three_turns(hub: &Hub, sender: &str, already_sent: usize) {
    for turn in 1..=3 {
        hub.fake.push_reply(reply(&format!("answer {turn}")));
        hub.channel
            .inject(dm(
                sender,
                &format!("{sender}-{turn}"),
                &format!("question {turn}"),
            ))
            .await;
        hub.channel
            .wait_for(WAIT, |l| sent_count(l) == already_sent + turn)
            .await;
        queue_idle(hub).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dm_history_keeps_the_last_user_turns_the_channel_or_the_peer_allows() {
    let hub = start(
        r#"allowFrom: ["42", "43", "44"], streaming: "off", dmHistoryLimit: 2,
           dms: { "43": { historyLimit: 1 } }"#,
        r#"session: { dmScope: "per-channel-peer" }"#,
        Abilities::default(),
    )
    .await;
    three_turns(&hub, "42", 0).await;
    let third = user_messages(&hub, 2);
    assert_eq!(third.len(), 2, "{third:?}");
    assert!(third[0].contains("question 2") && third[1].contains("question 3"));

    three_turns(&hub, "43", 3).await;
    let third = user_messages(&hub, 5);
    assert_eq!(third.len(), 1, "{third:?}");
    assert!(third[0].contains("question 3"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_dm_history_limit_the_whole_dm_history_is_sent() {
    let hub = start(
        r#"allowFrom: ["42"], streaming: "off""#,
        r#"session: { dmScope: "per-channel-peer" }"#,
        Abilities::default(),
    )
    .await;
    three_turns(&hub, "42", 0).await;
    assert_eq!(user_messages(&hub, 2).len(), 3);
}

fn typing_count(log: &[Outbound]) -> usize {
    log.iter()
        .filter(|o| matches!(o, Outbound::Typing { .. }))
        .count()
}

/// An answer that takes about three seconds to stream.
fn slow_reply() -> FakeReply {
    FakeReply::Text {
        chunks: vec!["slow ".into(), "but ".into(), "sure".into()],
        delay_ms: 1_000,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typing_mode_never_shows_no_typing_indicator() {
    let hub = start(
        r#"allowFrom: ["42"], streaming: "off""#,
        r#"session: { typingMode: "never" }"#,
        Abilities::default(),
    )
    .await;
    hub.fake.push_reply(reply("Quietly."));
    hub.channel.inject(dm("42", "1", "hi")).await;
    let log = hub.channel.wait_for(WAIT, |l| sent_count(l) == 1).await;
    queue_idle(&hub).await;
    assert_eq!(typing_count(&log), 0, "{log:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typing_is_refreshed_every_typing_interval() {
    // agents.defaults' interval, the session's mode (instant).
    let hub = start(
        r#"allowFrom: ["42"], streaming: "off""#,
        r#"agents: { defaults: { model: { primary: "fake/gpt-test" }, typingIntervalSeconds: 1 } },
           session: { typingMode: "instant" }"#,
        Abilities::default(),
    )
    .await;
    hub.fake.push_reply(slow_reply());
    hub.channel.inject(dm("42", "1", "take your time")).await;
    let log = hub.channel.wait_for(WAIT, |l| sent_count(l) == 1).await;
    // Three seconds of streaming at one refresh a second; the default 6 s gives one.
    assert!(typing_count(&log) >= 2, "{log:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_typing_interval_is_six_seconds() {
    let hub = start(
        r#"allowFrom: ["42"], streaming: "off""#,
        "",
        Abilities::default(),
    )
    .await;
    hub.fake.push_reply(slow_reply());
    hub.channel.inject(dm("42", "1", "take your time")).await;
    let log = hub.channel.wait_for(WAIT, |l| sent_count(l) == 1).await;
    assert_eq!(typing_count(&log), 1, "{log:?}");
}
