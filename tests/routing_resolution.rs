//! Routing: every tier of the binding resolution (table-driven), the
//! narrow-over-wide rule, role matching independent of role order,
//! identityLinks, every session-key shape, the bounded cache and reloads.

use pincer::config::schema::bindings::PeerKind;
use pincer::config::Config;
use pincer::routing::session_key::{
    cron_session_key, hook_session_key, telegram_topic_session_key, thread_session_key,
};
use pincer::routing::{MatchedBy, RouteInput, RoutePeer, Router, MAX_ROUTE_CACHE_KEYS};
use serde_json::json;

fn config(value: serde_json::Value) -> Config {
    serde_json::from_value(value).expect("config")
}

fn tiered_config() -> Config {
    config(json!({
        "agents": {"list": [
            {"id": "home", "default": true}, {"id": "peer"}, {"id": "parent"}, {"id": "wild"},
            {"id": "roles"}, {"id": "guild"}, {"id": "team"}, {"id": "account"}, {"id": "channel"}
        ]},
        "bindings": [
            {"agentId": "channel", "match": {"channel": "discord", "accountId": "*"}},
            {"agentId": "account", "match": {"channel": "discord", "accountId": "bot2"}},
            {"agentId": "team", "match": {"channel": "slack", "teamId": "T1"}},
            {"agentId": "guild", "match": {"channel": "discord", "guildId": "G1"}},
            {"agentId": "roles", "match": {"channel": "discord", "guildId": "G1", "roles": ["mod", "admin"]}},
            {"agentId": "wild", "match": {"channel": "discord", "peer": {"kind": "direct", "id": "*"}}},
            {"agentId": "parent", "match": {"channel": "discord", "peer": {"kind": "channel", "id": "C-parent"}}},
            {"agentId": "peer", "match": {"channel": "discord", "peer": {"kind": "channel", "id": "C-exact"}}}
        ]
    }))
}

struct Case {
    name: &'static str,
    input: RouteInput,
    agent: &'static str,
    matched_by: MatchedBy,
}

fn discord(peer: Option<(PeerKind, &str)>) -> RouteInput {
    RouteInput {
        channel: "discord".into(),
        peer: peer.map(|(kind, id)| RoutePeer::new(kind, id)),
        ..RouteInput::default()
    }
}

#[test]
fn each_tier_is_reported_with_the_agent_it_chose() {
    let router = Router::new(&tiered_config());
    let roles = |list: &[&str]| list.iter().map(|r| r.to_string()).collect::<Vec<_>>();
    let cases = vec![
        Case {
            name: "exact peer beats guild",
            input: RouteInput {
                guild_id: Some("G1".into()),
                ..discord(Some((PeerKind::Channel, "C-exact")))
            },
            agent: "peer",
            matched_by: MatchedBy::Peer,
        },
        Case {
            name: "thread inherits parent",
            input: RouteInput {
                parent_peer: Some(RoutePeer::new(PeerKind::Channel, "C-parent")),
                guild_id: Some("G1".into()),
                ..discord(Some((PeerKind::Channel, "thread-9")))
            },
            agent: "parent",
            matched_by: MatchedBy::PeerParent,
        },
        Case {
            name: "wildcard dm",
            input: discord(Some((PeerKind::Direct, "u1"))),
            agent: "wild",
            matched_by: MatchedBy::PeerWildcard,
        },
        Case {
            name: "guild with a held role",
            input: RouteInput {
                guild_id: Some("G1".into()),
                member_roles: roles(&["x", "admin"]),
                ..discord(Some((PeerKind::Channel, "other")))
            },
            agent: "roles",
            matched_by: MatchedBy::GuildRoles,
        },
        Case {
            name: "guild without roles",
            input: RouteInput {
                guild_id: Some("G1".into()),
                member_roles: roles(&["x"]),
                ..discord(Some((PeerKind::Channel, "other")))
            },
            agent: "guild",
            matched_by: MatchedBy::Guild,
        },
        Case {
            name: "team",
            input: RouteInput {
                channel: "slack".into(),
                team_id: Some("T1".into()),
                ..RouteInput::default()
            },
            agent: "team",
            matched_by: MatchedBy::Team,
        },
        Case {
            name: "account",
            input: RouteInput {
                account_id: Some("bot2".into()),
                ..discord(Some((PeerKind::Channel, "other")))
            },
            agent: "account",
            matched_by: MatchedBy::Account,
        },
        Case {
            name: "channel-wide",
            input: discord(Some((PeerKind::Channel, "other"))),
            agent: "channel",
            matched_by: MatchedBy::Channel,
        },
        Case {
            name: "default agent",
            input: RouteInput {
                channel: "telegram".into(),
                ..RouteInput::default()
            },
            agent: "home",
            matched_by: MatchedBy::Default,
        },
    ];
    for case in cases {
        let route = router.resolve(&case.input);
        assert_eq!(
            (route.agent_id.as_str(), route.matched_by),
            (case.agent, case.matched_by),
            "{}",
            case.name
        );
    }
}

#[test]
fn narrow_peer_binding_wins_over_a_wide_one_listed_first() {
    // The seeds' example: a channel-wide binding listed first must not
    // shadow a binding for one specific peer.
    let router = Router::new(&config(json!({
        "agents": {"list": [{"id": "main"}, {"id": "work"}]},
        "bindings": [
            {"agentId": "main", "match": {"channel": "whatsapp"}},
            {"agentId": "work", "match": {"channel": "whatsapp", "peer": {"kind": "group", "id": "120363@g.us"}}}
        ]
    })));
    let group = RouteInput {
        channel: "whatsapp".into(),
        peer: Some(RoutePeer::new(PeerKind::Group, "120363@g.us")),
        ..RouteInput::default()
    };
    let route = router.resolve(&group);
    assert_eq!(
        (route.agent_id.as_str(), route.matched_by),
        ("work", MatchedBy::Peer)
    );
    let other = RouteInput {
        channel: "whatsapp".into(),
        peer: Some(RoutePeer::new(PeerKind::Direct, "+1555")),
        ..RouteInput::default()
    };
    assert_eq!(router.resolve(&other).matched_by, MatchedBy::Account);
    assert_eq!(route.session_key, "agent:work:whatsapp:group:120363@g.us");
}

#[test]
fn within_a_tier_the_first_listed_binding_wins() {
    let router = Router::new(&config(json!({
        "agents": {"list": [{"id": "a"}, {"id": "b"}]},
        "bindings": [
            {"agentId": "a", "match": {"channel": "telegram", "accountId": "*"}},
            {"agentId": "b", "match": {"channel": "telegram", "accountId": "*"}}
        ]
    })));
    assert_eq!(
        router
            .resolve(&RouteInput {
                channel: "telegram".into(),
                ..RouteInput::default()
            })
            .agent_id,
        "a"
    );
}

#[test]
fn member_role_order_does_not_change_the_route_or_its_cache_entry() {
    let router = Router::new(&tiered_config());
    let with_roles = |roles: &[&str]| RouteInput {
        guild_id: Some("G1".into()),
        member_roles: roles.iter().map(|r| r.to_string()).collect(),
        ..discord(Some((PeerKind::Channel, "other")))
    };
    let first = router.resolve(&with_roles(&["mod", "zeta", "alpha"]));
    let cached = router.cached_routes();
    let second = router.resolve(&with_roles(&["alpha", "mod", "zeta"]));
    assert_eq!(first, second);
    assert_eq!(first.matched_by, MatchedBy::GuildRoles);
    assert_eq!(
        router.cached_routes(),
        cached,
        "same role set, same cache key"
    );
    assert_eq!(
        router.resolve(&with_roles(&["zeta"])).matched_by,
        MatchedBy::Guild
    );
}

#[test]
fn unknown_bound_agent_falls_back_to_the_default() {
    let router = Router::new(&config(json!({
        "agents": {"list": [{"id": "first"}, {"id": "chosen", "default": true}]},
        "bindings": [{"agentId": "ghost", "match": {"channel": "telegram"}}]
    })));
    let route = router.resolve(&RouteInput {
        channel: "telegram".into(),
        ..RouteInput::default()
    });
    assert_eq!(
        (route.agent_id.as_str(), route.matched_by),
        ("chosen", MatchedBy::Account)
    );
    let empty = Router::new(&Config::default());
    assert_eq!(
        empty
            .resolve(&RouteInput {
                channel: "x".into(),
                ..RouteInput::default()
            })
            .agent_id,
        "main"
    );
}

fn dm_key(
    scope: &str,
    channel: &str,
    account: Option<&str>,
    peer: &str,
    links: serde_json::Value,
) -> String {
    let router = Router::new(&config(json!({
        "session": {"dmScope": scope, "identityLinks": links, "mainKey": "home"},
        "agents": {"list": [{"id": "main"}]}
    })));
    router
        .resolve(&RouteInput {
            channel: channel.into(),
            account_id: account.map(str::to_string),
            peer: Some(RoutePeer::new(PeerKind::Direct, peer)),
            ..RouteInput::default()
        })
        .session_key
}

#[test]
fn every_dm_scope_builds_upstreams_key() {
    let none = json!({});
    assert_eq!(
        dm_key("main", "telegram", None, "42", none.clone()),
        "agent:main:home"
    );
    assert_eq!(
        dm_key("per-peer", "telegram", None, "42", none.clone()),
        "agent:main:direct:42"
    );
    assert_eq!(
        dm_key("per-channel-peer", "Telegram", None, "42", none.clone()),
        "agent:main:telegram:direct:42"
    );
    assert_eq!(
        dm_key(
            "per-account-channel-peer",
            "telegram",
            Some("Bot2"),
            "42",
            none
        ),
        "agent:main:telegram:bot2:direct:42"
    );
}

#[test]
fn identity_links_merge_one_person_across_channels() {
    let links = json!({"alice": ["telegram:42", "discord:9001"]});
    let from_telegram = dm_key("per-peer", "telegram", None, "42", links.clone());
    let from_discord = dm_key("per-peer", "discord", None, "9001", links.clone());
    assert_eq!(from_telegram, "agent:main:direct:alice");
    assert_eq!(from_telegram, from_discord);
    assert_eq!(
        dm_key("per-peer", "slack", None, "42", links.clone()),
        "agent:main:direct:42",
        "channel-scoped link"
    );
    assert_eq!(
        dm_key("main", "telegram", None, "42", links),
        "agent:main:home",
        "main scope ignores links"
    );
}

#[test]
fn group_channel_thread_and_system_keys_have_upstream_shapes() {
    let router = Router::new(&config(json!({"agents": {"list": [{"id": "ops"}]}})));
    let group = router.resolve(&RouteInput {
        channel: "telegram".into(),
        peer: Some(RoutePeer::new(PeerKind::Group, "-100123")),
        ..RouteInput::default()
    });
    assert_eq!(group.session_key, "agent:ops:telegram:group:-100123");
    assert_eq!(group.main_session_key, "agent:ops:main");
    assert_eq!(
        telegram_topic_session_key(&group.session_key, "77"),
        "agent:ops:telegram:group:-100123:topic:77"
    );
    let channel = router.resolve(&RouteInput {
        channel: "discord".into(),
        peer: Some(RoutePeer::new(PeerKind::Channel, "C9")),
        ..RouteInput::default()
    });
    assert_eq!(channel.session_key, "agent:ops:discord:channel:c9");
    assert_eq!(
        thread_session_key(&channel.session_key, "T55"),
        "agent:ops:discord:channel:c9:thread:t55"
    );
    assert_eq!(cron_session_key("nightly"), "cron:nightly");
    assert_eq!(hook_session_key("3f2a"), "hook:3f2a");
}

#[test]
fn broadcast_group_fans_out_to_each_agent_in_its_own_session() {
    let router = Router::new(&config(json!({
        "agents": {"list": [{"id": "a"}, {"id": "b"}]},
        "broadcast": {"strategy": "parallel", "120363@g.us": ["a", "b"]}
    })));
    let input = RouteInput {
        channel: "whatsapp".into(),
        peer: Some(RoutePeer::new(PeerKind::Group, "120363@g.us")),
        ..RouteInput::default()
    };
    let (routes, _) = router.resolve_all(&input);
    let keys: Vec<&str> = routes.iter().map(|r| r.session_key.as_str()).collect();
    assert_eq!(
        keys,
        [
            "agent:a:whatsapp:group:120363@g.us",
            "agent:b:whatsapp:group:120363@g.us"
        ]
    );
}

#[test]
fn route_cache_is_bounded_and_cleared_whole() {
    let router = Router::new(&Config::default());
    for i in 0..(MAX_ROUTE_CACHE_KEYS + 10) {
        router.resolve(&RouteInput {
            channel: "telegram".into(),
            peer: Some(RoutePeer::new(PeerKind::Direct, i.to_string())),
            ..RouteInput::default()
        });
        assert!(router.cached_routes() <= MAX_ROUTE_CACHE_KEYS);
    }
    assert_eq!(router.cached_routes(), 10);
}

#[test]
fn reload_swaps_index_and_cache_together() {
    let router = Router::new(&Config::default());
    let input = RouteInput {
        channel: "telegram".into(),
        ..RouteInput::default()
    };
    assert_eq!(router.resolve(&input).agent_id, "main");
    router.reload(&config(json!({
        "agents": {"list": [{"id": "main"}, {"id": "tg"}]},
        "bindings": [{"agentId": "tg", "match": {"channel": "telegram"}}]
    })));
    assert_eq!(router.cached_routes(), 0);
    assert_eq!(router.resolve(&input).agent_id, "tg");
    assert_eq!(router.binding_count(), 1);
}
