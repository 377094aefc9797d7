//! `session.scope: "global"`: the main session of every agent is the one session `global` (upstream's
//! canonical main-session alias), so direct messages that go to the main session (`dmScope: "main"`) and
//! `chat.send`/`agent` calls naming `main` share it; groups and channels keep their own sessions. The
//! default, `per-sender`, keeps `agent:<id>:<mainKey>`.

mod support;

use pincer::config::schema::bindings::PeerKind;
use pincer::config::Config;
use pincer::routing::{RouteInput, RoutePeer, Router};
use serde_json::json;
use support::hub_harness::{dm, group, reply, sent_count, start, WAIT};
use support::recording_channel::Abilities;

fn router(session: serde_json::Value) -> Router {
    let config: Config = serde_json::from_value(json!({
        "agents": {"list": [{"id": "home", "default": true}, {"id": "work"}]},
        "bindings": [{"agentId": "work", "match": {"channel": "slack"}}],
        "session": session,
    }))
    .expect("config");
    Router::new(&config)
}

fn input(channel: &str, kind: PeerKind, peer: &str) -> RouteInput {
    RouteInput {
        channel: channel.into(),
        peer: Some(RoutePeer::new(kind, peer)),
        ..RouteInput::default()
    }
}

#[test]
fn global_scope_puts_every_agents_main_session_under_the_key_global() {
    let global = router(json!({"scope": "global"}));
    for (channel, agent) in [("telegram", "home"), ("slack", "work")] {
        let route = global.resolve(&input(channel, PeerKind::Direct, "u1"));
        assert_eq!(route.agent_id, agent);
        assert_eq!(
            (route.session_key.as_str(), route.main_session_key.as_str()),
            ("global", "global")
        );
    }
    let group = global.resolve(&input("telegram", PeerKind::Group, "-100"));
    assert_eq!(group.session_key, "agent:home:telegram:group:-100");
    assert_eq!(group.main_session_key, "global");
    let per_peer = router(json!({"scope": "global", "dmScope": "per-peer"}));
    assert_eq!(
        per_peer
            .resolve(&input("telegram", PeerKind::Direct, "u1"))
            .session_key,
        "agent:home:direct:u1",
        "a per-peer DM session is not the main session"
    );
}

#[test]
fn per_sender_scope_keeps_the_agents_main_key() {
    for session in [json!({}), json!({"scope": "per-sender"})] {
        let route = router(session).resolve(&input("telegram", PeerKind::Direct, "u1"));
        assert_eq!(route.session_key, "agent:home:main");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_global_scope_a_dm_is_answered_in_the_global_session() {
    let hub = start(
        r#"allowFrom: ["42"], groupPolicy: "open", streaming: "off""#,
        r#"session: { scope: "global" },"#,
        Abilities::default(),
    )
    .await;
    hub.fake.push_reply(reply("Hello."));
    hub.channel.inject(dm("42", "1", "hi")).await;
    hub.channel.wait_for(WAIT, |l| sent_count(l) == 1).await;
    hub.fake.push_reply(reply("Hello, group."));
    hub.channel
        .inject(group("42", "2", "@pincer_bot hi all", true))
        .await;
    hub.channel.wait_for(WAIT, |l| sent_count(l) == 2).await;
    let store = &hub.state.services.store;
    let keys: Vec<String> = store
        .sessions()
        .expect("list")
        .into_iter()
        .map(|(key, _)| key)
        .collect();
    assert!(keys.contains(&"global".to_string()), "{keys:?}");
    assert!(
        keys.contains(&"agent:main:telegram:group:-100".to_string()),
        "{keys:?}"
    );
    assert!(!keys.contains(&"agent:main:main".to_string()), "{keys:?}");
}
