//! `session.reset` and `session.resetTriggers` on the message path: a chat message for a session that
//! went stale (idle past `idleMinutes` since the user's last message, or started before the daily
//! boundary) runs in a new session (new id, fresh transcript); writes that are no user's message (a
//! heartbeat run, an announcement) keep no session fresh; a configured reset trigger starts a new session
//! like `/new`, and the text after it becomes the new session's first message. The session's age is set
//! through the store.

mod support;

use pincer::system::clock::now_ms;
use serde_json::Value;
use support::hub_harness::{dm, queue_idle, reply, sent_count, start, Hub, WAIT};
use support::recording_channel::Abilities;

const MAIN: &str = "agent:main:main";
const MINUTE_MS: u64 = 60_000;

async fn hub_with_session(session: &str) -> Hub {
    start(
        r#"allowFrom: ["42"], streaming: "off""#,
        &format!("session: {{ {session} }},"),
        Abilities::default(),
    )
    .await
}

/// Sends `text` from the paired sender and waits for the `answers`-th reply. A reset saves the closing
/// session's note with a slug the model names: a second reply is queued for it (either request may take
/// either reply; only the turn's answer is sent to the chat).
async fn exchange(hub: &Hub, id: &str, text: &str, answer: &str, answers: usize) {
    hub.fake.push_reply(reply(answer));
    hub.fake.push_reply(reply(answer));
    hub.channel.inject(dm("42", id, text)).await;
    hub.channel
        .wait_for(WAIT, |log| sent_count(log) == answers)
        .await;
}

fn session_id(hub: &Hub) -> String {
    hub.state
        .services
        .store
        .session(MAIN)
        .expect("read")
        .expect("the session exists")
        .session_id
}

/// Makes the main session look started, last written to by its user and last updated `age_ms` ago.
fn age_session(hub: &Hub, age_ms: u64) {
    let store = &hub.state.services.store;
    let mut entry = store.session(MAIN).expect("read").expect("exists");
    let then = now_ms() - age_ms;
    entry.created_at_ms = then;
    entry.updated_at_ms = then;
    entry.last_interaction_at_ms = Some(then);
    store.put_session(MAIN, &entry).expect("write");
}

/// Makes the main session look as a heartbeat run leaves it: started and last written to by its
/// user `age_ms` ago, updated just now.
fn age_session_but_touch_it(hub: &Hub, age_ms: u64) {
    age_session(hub, age_ms);
    let store = &hub.state.services.store;
    let mut entry = store.session(MAIN).expect("read").expect("exists");
    entry.updated_at_ms = now_ms();
    store.put_session(MAIN, &entry).expect("write");
}

/// The messages of every turn's model request (those with a system prompt: the slug request of a
/// closing note has none), in order.
fn turns(hub: &Hub) -> Vec<Value> {
    hub.fake
        .requests()
        .into_iter()
        .map(|r| r.body["messages"].clone())
        .filter(|m| {
            m.as_array()
                .is_some_and(|m| m.iter().any(|m| m["role"] == "system"))
        })
        .collect()
}

/// Whether any message of turn `index` mentions `needle`.
fn request_mentions(hub: &Hub, index: usize, needle: &str) -> bool {
    turns(hub)[index].to_string().contains(needle)
}

/// The text of the last user message of turn `index`.
fn last_user_text(hub: &Hub, index: usize) -> String {
    let messages = turns(hub)[index].clone();
    let user = messages
        .as_array()
        .expect("messages")
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .cloned()
        .expect("a user message");
    user["content"].to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_idle_past_idle_minutes_gets_a_new_id_and_a_fresh_transcript() {
    let hub = hub_with_session(r#"reset: { mode: "idle", idleMinutes: 30 }"#).await;
    exchange(&hub, "1", "remember the word pelican", "Noted.", 1).await;
    let first = session_id(&hub);

    age_session(&hub, 10 * MINUTE_MS);
    exchange(&hub, "2", "still there?", "Yes.", 2).await;
    assert_eq!(
        session_id(&hub),
        first,
        "10 idle minutes of 30: same session"
    );
    assert!(request_mentions(&hub, 1, "pelican"), "history kept");

    age_session(&hub, 31 * MINUTE_MS);
    exchange(&hub, "3", "what was the word?", "No idea.", 3).await;
    let second = session_id(&hub);
    assert_ne!(second, first, "31 idle minutes of 30: a new session");
    assert!(last_user_text(&hub, 2).contains("what was the word?"));
    assert!(
        !request_mentions(&hub, 2, "pelican"),
        "the new session starts with an empty transcript"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_from_before_the_daily_boundary_gets_a_new_id() {
    let hub = hub_with_session(r#"reset: { mode: "daily", atHour: 4 }"#).await;
    exchange(&hub, "1", "hello", "Hi.", 1).await;
    let first = session_id(&hub);
    // A day and an hour ago is before the most recent 04:00, whatever the time now.
    age_session(&hub, 25 * 60 * MINUTE_MS);
    exchange(&hub, "2", "good morning", "Morning.", 2).await;
    assert_ne!(session_id(&hub), first);
}

/// A heartbeat (or any write that is no user's message) updates the session but is no interaction: it
/// keeps the session fresh neither for the idle window nor past the daily boundary, as upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_that_are_no_users_message_keep_no_session_fresh() {
    let hub = hub_with_session(r#"reset: { mode: "idle", idleMinutes: 30 }"#).await;
    exchange(&hub, "1", "hello", "Hi.", 1).await;
    let entry = hub
        .state
        .services
        .store
        .session(MAIN)
        .expect("read")
        .expect("exists");
    assert!(
        entry
            .last_interaction_at_ms
            .is_some_and(|at| at >= entry.created_at_ms),
        "a chat message is an interaction: {entry:?}"
    );
    let first = session_id(&hub);
    age_session_but_touch_it(&hub, 31 * MINUTE_MS);
    exchange(&hub, "2", "anyone?", "Yes.", 2).await;
    assert_ne!(
        session_id(&hub),
        first,
        "idle since the user's last message"
    );

    let hub = hub_with_session(r#"reset: { mode: "daily", atHour: 4 }"#).await;
    exchange(&hub, "1", "hello", "Hi.", 1).await;
    let first = session_id(&hub);
    age_session_but_touch_it(&hub, 25 * 60 * MINUTE_MS);
    exchange(&hub, "2", "good morning", "Morning.", 2).await;
    assert_ne!(session_id(&hub), first, "started before the boundary");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_reset_policy_an_old_session_continues() {
    let hub = hub_with_session("").await;
    exchange(&hub, "1", "remember the word pelican", "Noted.", 1).await;
    let first = session_id(&hub);
    age_session(&hub, 40 * 24 * 60 * MINUTE_MS);
    exchange(&hub, "2", "what was the word?", "Pelican.", 2).await;
    assert_eq!(session_id(&hub), first);
    assert!(request_mentions(&hub, 1, "pelican"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_trigger_starts_a_new_session_and_runs_the_rest_of_the_message() {
    let hub = hub_with_session(r#"resetTriggers: ["start over"]"#).await;
    exchange(&hub, "1", "remember the word pelican", "Noted.", 1).await;
    let first = session_id(&hub);

    exchange(&hub, "2", "Start Over what was the word?", "No idea.", 2).await;
    let second = session_id(&hub);
    assert_ne!(second, first, "the trigger started a new session");
    assert_eq!(turns(&hub).len(), 2);
    assert!(last_user_text(&hub, 1).contains("what was the word?"));
    assert!(!last_user_text(&hub, 1)
        .to_lowercase()
        .contains("start over"));
    assert!(!request_mentions(&hub, 1, "pelican"));

    // The trigger alone is answered like `/new`, without a run.
    hub.channel.inject(dm("42", "3", "start over")).await;
    let log = hub.channel.wait_for(WAIT, |l| sent_count(l) == 3).await;
    assert!(
        format!("{log:?}").contains("New session started."),
        "{log:?}"
    );
    queue_idle(&hub).await;
    assert_eq!(turns(&hub).len(), 2, "no run for the bare trigger");
    assert_ne!(session_id(&hub), second);

    // A word that merely begins with the trigger is an ordinary message.
    exchange(&hub, "4", "start overture please", "Sure.", 4).await;
    assert_eq!(turns(&hub).len(), 3);
    assert!(last_user_text(&hub, 2).contains("start overture please"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_announcement_into_a_stale_session_does_not_start_a_new_one() {
    let hub = hub_with_session(r#"reset: { mode: "idle", idleMinutes: 30 }"#).await;
    exchange(&hub, "1", "remember the word pelican", "Noted.", 1).await;
    let first = session_id(&hub);
    // The turn records its chat route (where the announcement's answer goes) after its reply.
    let deadline = tokio::time::Instant::now() + WAIT;
    while hub
        .state
        .services
        .store
        .session(MAIN)
        .expect("read")
        .expect("exists")
        .last_to
        .is_none()
    {
        assert!(tokio::time::Instant::now() < deadline, "no route recorded");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    age_session(&hub, 31 * MINUTE_MS);
    hub.fake.push_reply(reply("Your sub-agent finished."));
    let hub_ref = pincer::gateway::webchat::hub_of(&hub.state);
    pincer::channels::deliver::enqueue_announcement(
        &hub_ref,
        "main",
        MAIN,
        "[sub-agent result] done".into(),
    )
    .expect("queued");
    hub.channel.wait_for(WAIT, |log| sent_count(log) == 2).await;
    assert_eq!(
        session_id(&hub),
        first,
        "an internal event is not a user's message: the session stays"
    );
    // Nor does the announcement's turn count as the user's interaction: still idle.
    exchange(&hub, "2", "hello again", "Hi.", 3).await;
    assert_ne!(
        session_id(&hub),
        first,
        "idle since the user's last message"
    );
}
