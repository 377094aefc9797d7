//! The message path end to end, in process: a recording chat channel
//! (tests/support/recording_channel.rs) registered in a gateway state,
//! events injected through the hub it was started with, the real pipeline,
//! queue, agent turn (against the fake OpenAI server) and reply path, and
//! what the channel was finally asked to send.

mod support;

use std::time::Duration;

use pincer::channels::{ChunkMode, SendError, TextLimits};
use pincer::gateway::webchat::hub_of;
use support::fake_openai::FakeReply;
use support::hub_harness::{dm, group, last_user_text, queue_idle, reply, sent_count, start, WAIT};
use support::recording_channel::{Abilities, Outbound};

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
    queue_idle(&hub).await;
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
        .services
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
    queue_idle(&hub).await;
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
            chunk_mode: ChunkMode::Length,
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
    queue_idle(&hub).await;
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
    hub.channel.inject(dm("42", "5", "/subagents")).await;
    let log = hub.channel.wait_for(WAIT, |l| sent_count(l) == 5).await;
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
    assert!(has("No sub-agents in this session."), "{texts:?}");
    let entry = hub
        .state
        .services
        .store
        .session("agent:main:main")
        .expect("read")
        .expect("the session exists");
    assert_eq!(entry.thinking_level.as_deref(), Some("high"));
    queue_idle(&hub).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_method_delivers_through_the_adapter_once_per_key() {
    use pincer::gateway::methods::send::send;
    let hub = start(r#"allowFrom: ["42"]"#, "", Abilities::default()).await;
    let params = serde_json::json!({"to": "42", "message": "Reminder: water the plants.",
                                    "channel": "telegram", "idempotencyKey": "s-1"});
    let first = send(&hub.state, &params).await.expect("delivered");
    assert_eq!(first["channel"], "telegram");
    assert_eq!(first["runId"], "s-1");
    let again = send(&hub.state, &params).await.expect("cached");
    assert_eq!(again, first, "the cached answer");
    assert_eq!(
        hub.channel.sent_texts(),
        vec!["Reminder: water the plants.".to_string()],
        "delivered once"
    );

    let webchat = serde_json::json!({"to": "me", "message": "hi", "channel": "webchat", "idempotencyKey": "s-2"});
    let refused = send(&hub.state, &webchat)
        .await
        .expect_err("webchat is internal");
    assert!(refused.message.contains("internal-only"), "{refused:?}");

    hub.channel
        .fail_next_sends(vec![SendError::Permanent("chat not found".into())]);
    let failing = serde_json::json!({"to": "nobody", "message": "hi", "idempotencyKey": "s-3"});
    let failed = send(&hub.state, &failing)
        .await
        .expect_err("delivery fails");
    assert_eq!(failed.to_json()["code"], "UNAVAILABLE");
    assert!(failed.message.contains("chat not found"), "{failed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channels_status_reports_each_running_account() {
    let hub = start("", "", Abilities::default()).await;
    let status =
        pincer::gateway::methods::send::channels_status(&hub.state).expect("channels.status");
    assert_eq!(status["channelOrder"], serde_json::json!(["telegram"]));
    let account = &status["channelAccounts"]["telegram"][0];
    assert_eq!(account["accountId"], "default");
    assert_eq!(account["configured"], true);
    assert_eq!(account["running"], true);
    assert_eq!(status["channels"]["telegram"]["running"], true);
    hub.state.services.channels.stop_all().await;
    let stopped = pincer::gateway::methods::send::channels_status(&hub.state).expect("status");
    assert_eq!(stopped["channelAccounts"]["telegram"][0]["running"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_tool_delivers_to_another_conversation() {
    let hub = start(
        r#"allowFrom: ["42"], streaming: "off""#,
        "",
        Abilities::default(),
    )
    .await;
    hub.fake.push_reply(FakeReply::ToolCalls {
        calls: vec![(
            "call-1".into(),
            "message".into(),
            r#"{"action":"send","channel":"telegram","target":"99","message":"Dinner at eight."}"#
                .into(),
        )],
    });
    hub.fake.push_reply(reply("Told them."));
    hub.channel
        .inject(dm("42", "1", "tell 99 about dinner"))
        .await;
    let log = hub
        .channel
        .wait_for(WAIT, |l| {
            l.iter()
                .any(|o| matches!(o, Outbound::Sent { text, .. } if text == "Told them."))
        })
        .await;
    assert!(
        log.iter().any(|o| matches!(o, Outbound::Sent { to, text, .. } if to == "99" && text == "Dinner at eight.")),
        "{log:#?}"
    );
    let tool_result = hub.fake.requests()[1].body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .find(|m| m["role"] == "tool")
        .expect("tool result")["content"]
        .as_str()
        .expect("text")
        .to_string();
    assert!(tool_result.contains("\"ok\":true"), "{tool_result}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broadcast_group_message_is_answered_by_each_agent_in_its_own_session() {
    let hub = start(
        r#"groupPolicy: "open", streaming: "off""#,
        r#"agents: { defaults: { model: { primary: "fake/gpt-test" } },
                     list: [{ id: "main", default: true }, { id: "critic" }] },
           broadcast: { "-100": ["main", "critic"] },"#,
        Abilities::default(),
    )
    .await;
    hub.fake.push_reply(reply("First view."));
    hub.fake.push_reply(reply("Second view."));
    hub.channel
        .inject(group("7", "1", "@pincer_bot what do you both think?", true))
        .await;
    let log = hub.channel.wait_for(WAIT, |l| sent_count(l) == 2).await;
    let mut texts: Vec<String> = log
        .iter()
        .filter_map(|o| match o {
            Outbound::Sent { text, .. } => Some(text.clone()),
            _ => None,
        })
        .collect();
    texts.sort();
    assert_eq!(texts, vec!["First view.", "Second view."]);
    assert_eq!(hub.fake.requests().len(), 2);
    let sessions = hub.state.services.store.sessions().expect("sessions");
    let keys: Vec<&str> = sessions.iter().map(|(k, _)| k.as_str()).collect();
    assert!(
        keys.contains(&"agent:main:telegram:group:-100")
            && keys.contains(&"agent:critic:telegram:group:-100"),
        "{keys:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unanswered_group_messages_come_as_context_with_the_next_mention() {
    let hub = start(
        r#"groupPolicy: "open", streaming: "off", historyLimit: 2"#,
        "",
        Abilities::default(),
    )
    .await;
    for (id, text) in [
        ("1", "the boiler broke"),
        ("2", "again?"),
        ("3", "since Monday"),
    ] {
        hub.channel.inject(group("7", id, text, false)).await;
    }
    queue_idle(&hub).await;
    assert!(hub.fake.requests().is_empty(), "no mention, no run");
    hub.fake.push_reply(reply("Call the plumber."));
    hub.channel
        .inject(group("7", "4", "@pincer_bot what now?", true))
        .await;
    hub.channel.wait_for(WAIT, |l| sent_count(l) == 1).await;
    let asked = last_user_text(&hub.fake, 0);
    assert!(
        asked.contains("[Chat messages since your last reply - for context]")
            && asked.contains("[Current message - respond to this]"),
        "{asked}"
    );
    assert!(
        asked.contains("again?") && asked.contains("since Monday"),
        "{asked}"
    );
    assert!(
        !asked.contains("the boiler broke"),
        "historyLimit 2 keeps the last two: {asked}"
    );
    hub.fake.push_reply(reply("Anything else?"));
    hub.channel
        .inject(group("7", "5", "@pincer_bot thanks", true))
        .await;
    hub.channel.wait_for(WAIT, |l| sent_count(l) == 2).await;
    let asked = last_user_text(&hub.fake, 1);
    assert!(
        !asked.contains("[Chat messages since your last reply"),
        "the history was used up: {asked}"
    );
    assert_eq!(hub.state.services.channels.ids().len(), 1);
}
