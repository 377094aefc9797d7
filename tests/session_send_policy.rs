//! A session's `sendPolicy: "deny"` (set with `sessions.patch`, as upstream's per-session override): its
//! turns still run and are recorded, but nothing is delivered to the chat; allowing it again restores
//! delivery. The web chat's `chat.send` into such a session is refused ("send blocked by session policy").

mod support;

use pincer::agent::{FieldPatch, SessionPatch};
use support::hub_harness::{dm, reply, start, WAIT};
use support::recording_channel::Abilities;

const MAIN: &str = "agent:main:main";

fn set_send_policy(hub: &support::hub_harness::Hub, policy: &str) {
    let patch = SessionPatch {
        send_policy: FieldPatch::Set(policy.into()),
        ..SessionPatch::default()
    };
    hub.state
        .services
        .sessions
        .patch(MAIN, &patch)
        .expect("patch");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_session_runs_its_turn_but_delivers_nothing() {
    let hub = start(
        r#"allowFrom: ["42"], streaming: "off""#,
        "",
        Abilities::default(),
    )
    .await;
    set_send_policy(&hub, "deny");
    hub.fake.push_reply(reply("The secret answer."));
    hub.channel.inject(dm("42", "1", "tell me")).await;

    // The turn runs and its answer is recorded.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let store = &hub.state.services.store;
        let entry = store.session(MAIN).expect("read").expect("exists");
        let tail = store.transcript_tail(&entry.session_id, 10).expect("tail");
        if tail
            .iter()
            .any(|(_, e)| e.text.contains("The secret answer."))
        {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the turn never ran");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    set_send_policy(&hub, "allow");
    hub.fake.push_reply(reply("Delivered."));
    hub.channel.inject(dm("42", "2", "and now?")).await;
    let log = hub
        .channel
        .wait_for(WAIT, |l| format!("{l:?}").contains("Delivered."))
        .await;
    assert_eq!(hub.fake.requests().len(), 2, "both turns ran");
    let texts = hub.channel.sent_texts();
    assert_eq!(texts, ["Delivered."], "{log:?}");
}
