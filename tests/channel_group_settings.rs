//! What a conversation's own config entry adds to the turn that answers it, as upstream: a Telegram
//! group's and forum topic's `systemPrompt` (group first, then topic) join the system prompt, their
//! `skills` (the topic's over the group's) narrow the skills offered within the agent's own list, and a
//! topic's `agentId` routes the topic to that agent; `agents.list[].humanDelay` paces that agent's
//! block replies; `streaming.preview.chunk` sizes a block-mode preview. Discord guild channels and Slack
//! channels resolve the same keys (`channels::group_scope`'s unit tests).

mod support;

use std::time::Duration;

use pincer::channels::InboundEvent;
use support::fake_openai::FakeReply;
use support::hub_harness::{dm, group, queue_idle, reply, start_with_agents, Hub, WAIT};
use support::recording_channel::{Abilities, Outbound};

/// The system prompt of model request `index`.
fn system_prompt(hub: &Hub, index: usize) -> String {
    let request = &hub.fake.requests()[index];
    request.body["messages"][0]["content"]
        .as_str()
        .expect("a system prompt")
        .to_string()
}

/// A message in forum topic `topic` of the group.
fn in_topic(topic: &str, id: &str, text: &str) -> InboundEvent {
    let mut event = group("42", id, text, true);
    event.message.thread_id = Some(topic.into());
    event
}

fn write_skill(hub: &Hub, name: &str) {
    let config = hub.state.config();
    let folder = hub
        .state
        .workspace_for(&config, "main")
        .join("skills")
        .join(name);
    std::fs::create_dir_all(&folder).expect("skill folder");
    std::fs::write(
        folder.join("SKILL.md"),
        format!("---\nname: {name}\ndescription: the {name} skill\n---\nbody\n"),
    )
    .expect("skill");
}

async fn answered(hub: &Hub, event: InboundEvent, requests: usize) {
    hub.fake.push_reply(reply("ok"));
    hub.channel.inject(event).await;
    let deadline = tokio::time::Instant::now() + WAIT;
    while hub.fake.requests().len() < requests {
        assert!(tokio::time::Instant::now() < deadline, "no model request");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    queue_idle(hub).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_and_topic_system_prompts_and_skills_reach_the_turn() {
    let hub = start_with_agents(
        r#"allowFrom: ["42"], groupPolicy: "open",
           groups: { "-100": { requireMention: false, systemPrompt: "  GROUP-RULES-1  ", skills: ["weather", "git"],
                               topics: { "7": { systemPrompt: "TOPIC-RULES-2", skills: ["git"] } } } }"#,
        r#"list: [ { id: "main", skills: ["weather", "git", "cooking"] } ]"#,
        "",
        Abilities::default(),
    )
    .await;
    for skill in ["weather", "git", "cooking"] {
        write_skill(&hub, skill);
    }
    answered(&hub, group("42", "1", "hello group", true), 1).await;
    let prompt = system_prompt(&hub, 0);
    assert!(prompt.contains("GROUP-RULES-1"), "{prompt}");
    assert!(!prompt.contains("TOPIC-RULES-2"), "{prompt}");
    assert!(
        prompt.contains("<name>weather</name>") && prompt.contains("<name>git</name>"),
        "{prompt}"
    );
    assert!(
        !prompt.contains("<name>cooking</name>"),
        "the group's skills narrow the agent's: {prompt}"
    );

    answered(&hub, in_topic("7", "2", "hello topic"), 2).await;
    let prompt = system_prompt(&hub, 1);
    let (group_at, topic_at) = (
        prompt.find("GROUP-RULES-1").expect("the group's prompt"),
        prompt.find("TOPIC-RULES-2").expect("the topic's prompt"),
    );
    assert!(group_at < topic_at, "group first, then topic: {prompt}");
    assert!(prompt.contains("<name>git</name>"), "{prompt}");
    assert!(
        !prompt.contains("<name>weather</name>"),
        "the topic's skills win: {prompt}"
    );

    answered(&hub, dm("42", "3", "hello me"), 3).await;
    let prompt = system_prompt(&hub, 2);
    assert!(!prompt.contains("GROUP-RULES-1"), "{prompt}");
    assert!(
        prompt.contains("<name>cooking</name>"),
        "a DM keeps the agent's skills: {prompt}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_that_names_an_agent_is_answered_by_it() {
    let hub = start_with_agents(
        r#"allowFrom: ["42"], groupPolicy: "open",
           groups: { "-100": { requireMention: false, topics: { "9": { agentId: "ops" } } } }"#,
        r#"list: [ { id: "main", default: true }, { id: "ops" } ]"#,
        "",
        Abilities::default(),
    )
    .await;
    answered(&hub, in_topic("9", "1", "deploy status?"), 1).await;
    assert!(
        system_prompt(&hub, 0).contains("Runtime: agent=ops"),
        "{}",
        system_prompt(&hub, 0)
    );
    let sessions: Vec<String> = hub
        .state
        .services
        .store
        .sessions()
        .expect("sessions")
        .into_iter()
        .map(|(key, _)| key)
        .collect();
    assert!(
        sessions.iter().any(|k| k.starts_with("agent:ops:")),
        "{sessions:?}"
    );
    answered(&hub, in_topic("8", "2", "and here?"), 2).await;
    assert!(system_prompt(&hub, 1).contains("Runtime: agent=main"));
}

/// Two paragraphs long enough to be two blocks (the default block chunking closes at 800..1200), the
/// second streamed after the coalescer's idle window (50 ms here), so each goes out on its own.
fn two_blocks() -> FakeReply {
    FakeReply::Text {
        chunks: vec![
            format!("{}\n\n", "first ".repeat(160)),
            "second ".repeat(160),
        ],
        delay_ms: 300,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_human_delay_paces_its_block_replies() {
    let hub = start_with_agents(
        r#"allowFrom: ["42"],
           streaming: { mode: "off", block: { enabled: true, coalesce: { minChars: 1, idleMs: 50 } } }"#,
        r#"list: [ { id: "main", humanDelay: { mode: "custom", minMs: 1500, maxMs: 1500 } } ]"#,
        "",
        Abilities::default(),
    )
    .await;
    hub.fake.push_reply(two_blocks());
    hub.channel.inject(dm("42", "1", "tell me")).await;
    hub.channel
        .wait_for(WAIT, |log| {
            log.iter()
                .filter(|o| matches!(o, Outbound::Sent { .. }))
                .count()
                >= 2
        })
        .await;
    let attempts = hub.channel.send_attempts();
    let gap = attempts[1].duration_since(attempts[0]);
    assert!(
        gap >= Duration::from_millis(1_500),
        "{gap:?} between blocks"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_mode_preview_grows_in_preview_chunk_pieces() {
    let hub = start_with_agents(
        r#"allowFrom: ["42"], streaming: { mode: "block", preview: { chunk: { minChars: 20, maxChars: 40 } } }"#,
        "",
        "",
        Abilities {
            edit: true,
            delete: true,
            ..Abilities::default()
        },
    )
    .await;
    let words: Vec<String> = (0..40).map(|i| format!("word{i:02} ")).collect();
    let full: String = words.concat();
    hub.fake.push_reply(FakeReply::Text {
        chunks: words,
        delay_ms: 40,
    });
    hub.channel.inject(dm("42", "1", "stream it")).await;
    hub.channel
        .wait_for(WAIT, |log| {
            log.iter().any(|o| match o {
                Outbound::Sent { text, .. } | Outbound::Edited { text, .. } => {
                    text.trim_end() == full.trim_end()
                }
                _ => false,
            })
        })
        .await;
    queue_idle(&hub).await;
    let log = hub.channel.outbound();
    let first = log
        .iter()
        .find_map(|o| match o {
            Outbound::Sent { text, .. } => Some(text.clone()),
            _ => None,
        })
        .expect("a preview");
    assert!(
        first.len() < full.trim_end().len() && full.starts_with(first.trim_end()),
        "the preview showed the first pieces before the end: {first:?} of {log:#?}"
    );
}
