//! Reply shaping and timing on the channel path: a silent `NO_REPLY` sends
//! nothing (not even a preview), a run whose only output is a failed tool
//! gets the fallback notice, a debounced burst becomes one turn, and the
//! progress preview shows work before the answer replaces it, and the ack
//! reaction follows `messages.ackReactionScope`.

mod support;

use std::time::Duration;

use pincer::gateway::webchat::hub_of;
use support::fake_openai::FakeReply;
use support::hub_harness::{dm, group, last_user_text, reply, sent_count, start, Hub, WAIT};
use support::recording_channel::{Abilities, Outbound};

/// Waits until the hub's queue has forgotten every session (all turns and
/// their deliveries are done).
async fn wait_idle(hub: &Hub) {
    let hub_handle = hub_of(&hub.state);
    let deadline = tokio::time::Instant::now() + WAIT;
    tokio::time::sleep(Duration::from_millis(50)).await;
    while hub_handle.queue.session_count() > 0 {
        assert!(tokio::time::Instant::now() < deadline, "queue never idled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn with_edit() -> Abilities {
    Abilities {
        edit: true,
        delete: true,
        ..Abilities::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_reply_sends_nothing_not_even_a_preview() {
    let hub = start(
        r#"allowFrom: ["42"], streaming: "partial""#,
        "",
        with_edit(),
    )
    .await;
    hub.fake.push_reply(FakeReply::Text {
        chunks: vec!["NO_".into(), "REPLY".into()],
        delay_ms: 50,
    });
    hub.channel.inject(dm("42", "1", "just listen")).await;
    while hub.fake.requests().is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    wait_idle(&hub).await;
    let log = hub.channel.outbound();
    assert!(
        !log.iter()
            .any(|o| matches!(o, Outbound::Sent { .. } | Outbound::Edited { .. })),
        "{log:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_tool_with_no_answer_gets_the_fallback_notice() {
    let hub = start(
        r#"allowFrom: ["42"], streaming: "off""#,
        "",
        Abilities::default(),
    )
    .await;
    hub.fake.push_reply(FakeReply::ToolCalls {
        calls: vec![(
            "call-1".into(),
            "web_fetch".into(),
            r#"{"url":"http://127.0.0.1:9/nothing-listens-here"}"#.into(),
        )],
    });
    hub.fake.push_reply(FakeReply::Text {
        chunks: vec![],
        delay_ms: 0,
    });
    hub.channel.inject(dm("42", "1", "fetch it")).await;
    let log = hub.channel.wait_for(WAIT, |l| sent_count(l) == 1).await;
    let notice = log
        .iter()
        .find_map(|o| match o {
            Outbound::Sent { text, .. } => Some(text.clone()),
            _ => None,
        })
        .expect("a notice");
    assert!(
        notice.starts_with("⚠️") && notice.contains("web_fetch"),
        "{notice}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debounced_burst_becomes_one_turn() {
    let hub = start(
        r#"allowFrom: ["42"], streaming: "off""#,
        r#"messages: { inbound: { debounceMs: 300 } },"#,
        Abilities::default(),
    )
    .await;
    hub.fake.push_reply(reply("Got all three."));
    for (id, text) in [("1", "one"), ("2", "two"), ("3", "three")] {
        hub.channel.inject(dm("42", id, text)).await;
    }
    hub.channel.wait_for(WAIT, |l| sent_count(l) == 1).await;
    wait_idle(&hub).await;
    assert_eq!(hub.fake.requests().len(), 1, "one turn for the burst");
    let prompt = last_user_text(&hub.fake, 0);
    assert!(
        prompt.contains("one") && prompt.contains("two") && prompt.contains("three"),
        "{prompt}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_preview_shows_work_then_the_answer() {
    let hub = start(
        r#"allowFrom: ["42"], streaming: "progress""#,
        "",
        with_edit(),
    )
    .await;
    hub.fake.push_reply(FakeReply::Text {
        chunks: vec!["The answer ".into(), "is 42.".into()],
        delay_ms: 200,
    });
    hub.channel.inject(dm("42", "1", "what is it")).await;
    let log = hub
        .channel
        .wait_for(WAIT, |l| {
            l.iter()
                .any(|o| matches!(o, Outbound::Edited { text, .. } if text == "The answer is 42."))
        })
        .await;
    let first = log
        .iter()
        .find_map(|o| match o {
            Outbound::Sent { text, .. } => Some(text.clone()),
            _ => None,
        })
        .expect("a preview message");
    assert!(first.starts_with("⏳"), "{first}");
    assert_eq!(sent_count(&log), 1, "the answer replaced the preview");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_reaction_marks_group_mentions_only_by_default() {
    let abilities = Abilities {
        react: true,
        ..Abilities::default()
    };
    let hub = start(
        r#"allowFrom: ["42"], groupPolicy: "open", streaming: "off""#,
        r#"messages: { ackReaction: "👀" },"#,
        abilities,
    )
    .await;
    hub.fake.push_reply(reply("Direct answer."));
    hub.channel.inject(dm("42", "10", "hi")).await;
    hub.channel.wait_for(WAIT, |l| sent_count(l) == 1).await;
    hub.fake.push_reply(reply("Group answer."));
    hub.channel
        .inject(group("42", "11", "@pincer_bot hi all", true))
        .await;
    let log = hub.channel.wait_for(WAIT, |l| sent_count(l) == 2).await;
    let reactions: Vec<(String, String)> = log
        .iter()
        .filter_map(|o| match o {
            Outbound::Reacted { message_id, emoji } => Some((message_id.clone(), emoji.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(reactions, vec![("11".to_string(), "👀".to_string())]);
}
