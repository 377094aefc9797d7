//! Channel and session keys of the message path, through the hub harness
//! (a recording channel as `telegram`, the real pipeline, queue, agent turn
//! against the fake OpenAI server, and reply path):
//! `messages.groupChat.mentionPatterns` (and an agent's own list).

mod support;

use support::hub_harness::{group, queue_idle, reply, sent_count, start, WAIT};
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
