//! The inbound pipeline: duplicates (also across a restart), debounce,
//! echoes, commands, DM pairing (code, approval, expiry, pending limit) and
//! group gating decide whether a message ever reaches the agent.

use std::sync::Arc;

use pincer::config::schema::bindings::PeerKind;
use pincer::config::schema::common::{DmPolicy, GroupPolicy};
use pincer::config::Config;
use pincer::pipeline::access::{AccessPolicy, GroupActivation, Refusal, PAIRING_CODE_TTL_MS};
use pincer::pipeline::context::InboundMessage;
use pincer::pipeline::{
    Decision, IgnoreReason, Inbound, InboundPipeline, TypingGuard, TypingIndicator,
};
use pincer::routing::{RouteInput, RoutePeer, Router};
use pincer::store::{Store, StoreOptions};

const HOUR_MS: u64 = 3_600_000;

fn open(dir: &std::path::Path) -> (Store, InboundPipeline) {
    let store = Store::open(dir, StoreOptions::default()).expect("store");
    let router = Arc::new(Router::new(&Config::default()));
    (store.clone(), InboundPipeline::new(store, router))
}

fn policy(dm: DmPolicy) -> AccessPolicy {
    AccessPolicy {
        channel: "telegram".into(),
        account_id: "default".into(),
        dm_policy: dm,
        group_policy: GroupPolicy::Open,
        ..AccessPolicy::default()
    }
}

fn dm(sender: &str, id: &str, text: &str) -> (InboundMessage, RouteInput) {
    let msg = InboundMessage {
        body: text.into(),
        sender_id: sender.into(),
        message_id: Some(id.into()),
        ..InboundMessage::default()
    };
    let route = RouteInput {
        channel: "telegram".into(),
        peer: Some(RoutePeer::new(PeerKind::Direct, sender)),
        ..RouteInput::default()
    };
    (msg, route)
}

fn run(
    pipeline: &InboundPipeline,
    policy: &AccessPolicy,
    (msg, route_input): (InboundMessage, RouteInput),
    debounce_ms: u64,
    now_ms: u64,
) -> Decision {
    let inbound = Inbound {
        policy,
        route_input,
        bot_username: Some("pincerbot"),
        bot_mentioned: false,
        debounce_ms,
        now_ms,
        replay: false,
        group_history_limit: 50,
        reset_triggers: &[],
    };
    pipeline.process(msg, inbound).expect("process")
}

#[test]
fn duplicate_delivery_is_processed_once_even_across_a_restart() {
    let dir = tempfile::tempdir().expect("dir");
    let open_policy = AccessPolicy {
        allow_from: vec!["*".into()],
        ..policy(DmPolicy::Open)
    };
    {
        let (_store, pipeline) = open(dir.path());
        assert!(matches!(
            run(&pipeline, &open_policy, dm("42", "m1", "hi"), 0, 1_000),
            Decision::Run { .. }
        ));
        assert_eq!(
            run(&pipeline, &open_policy, dm("42", "m1", "hi"), 0, 2_000),
            Decision::Ignored(IgnoreReason::Duplicate)
        );
    }
    let (_store, pipeline) = open(dir.path());
    assert_eq!(
        run(&pipeline, &open_policy, dm("42", "m1", "hi"), 0, 3_000),
        Decision::Ignored(IgnoreReason::Duplicate),
        "the redelivered update is remembered by the store"
    );
    assert!(matches!(
        run(&pipeline, &open_policy, dm("42", "m2", "next"), 0, 3_000),
        Decision::Run { .. }
    ));
}

#[test]
fn debounce_merges_a_burst_into_one_message() {
    let dir = tempfile::tempdir().expect("dir");
    let (_store, pipeline) = open(dir.path());
    let p = AccessPolicy {
        allow_from: vec!["42".into()],
        ..policy(DmPolicy::Allowlist)
    };
    assert_eq!(
        run(&pipeline, &p, dm("42", "a", "first"), 500, 1_000),
        Decision::Held { flush_at_ms: 1_500 }
    );
    assert_eq!(
        run(&pipeline, &p, dm("42", "b", "second"), 500, 1_200),
        Decision::Held { flush_at_ms: 1_700 }
    );
    assert!(
        pipeline.flush_due(1_600).is_empty(),
        "the burst is still going"
    );
    let flushed = pipeline.flush_due(1_700);
    assert_eq!(flushed.len(), 1);
    assert_eq!(flushed[0].1, "first\nsecond");
    // A command bypasses the debounce and never becomes agent text.
    assert!(matches!(
        run(&pipeline, &p, dm("42", "c", "/status"), 500, 1_800),
        Decision::Command { .. }
    ));
}

#[test]
fn the_bots_own_echo_is_ignored() {
    let dir = tempfile::tempdir().expect("dir");
    let (_store, pipeline) = open(dir.path());
    let p = AccessPolicy {
        allow_from: vec!["*".into()],
        ..policy(DmPolicy::Open)
    };
    pipeline.record_outbound("agent:main:main", "Here is your answer");
    assert_eq!(
        run(&pipeline, &p, dm("42", "e1", "Here is your answer"), 0, 1),
        Decision::Ignored(IgnoreReason::Echo)
    );
    assert!(
        matches!(
            run(&pipeline, &p, dm("42", "e2", "Here is your answer"), 0, 2),
            Decision::Run { .. }
        ),
        "an echo is matched once"
    );
}

#[test]
fn commands_never_reach_the_agent() {
    let dir = tempfile::tempdir().expect("dir");
    let (_store, pipeline) = open(dir.path());
    let p = AccessPolicy {
        allow_from: vec!["*".into()],
        ..policy(DmPolicy::Open)
    };
    for (i, text) in [
        "/new",
        "/reset",
        "/stop",
        "/status@pincerbot",
        "/model openai/gpt-4o",
        "/help",
    ]
    .iter()
    .enumerate()
    {
        match run(&pipeline, &p, dm("42", &format!("c{i}"), text), 0, 1) {
            Decision::Command { .. } => {}
            other => panic!("{text} became {other:?}"),
        }
    }
}

#[test]
fn unpaired_dm_gets_a_code_and_no_run_until_approved() {
    let dir = tempfile::tempdir().expect("dir");
    let (store, pipeline) = open(dir.path());
    let p = policy(DmPolicy::Pairing);
    let Decision::Reply(text) = run(&pipeline, &p, dm("42", "p1", "hello"), 0, 1_000) else {
        panic!("expected a pairing reply");
    };
    let listed = store
        .dm_pairing_list(Some("telegram"), 1_000, PAIRING_CODE_TTL_MS)
        .expect("list");
    assert_eq!(listed.len(), 1);
    let code = listed[0].1.code.clone();
    assert!(
        text.contains(&code) && text.contains("pincer pairing approve telegram"),
        "{text}"
    );
    assert!(
        matches!(
            run(&pipeline, &p, dm("42", "p2", "again"), 0, 2_000),
            Decision::Reply(_)
        ),
        "still no run"
    );
    let approval = store
        .dm_pairing_approve("telegram", &code, 3_000, PAIRING_CODE_TTL_MS)
        .expect("approve")
        .expect("live");
    assert!(approval.seeded_owner, "first approval seeds the owner");
    assert!(matches!(
        run(&pipeline, &p, dm("42", "p3", "now?"), 0, 4_000),
        Decision::Run { .. }
    ));
}

#[test]
fn an_expired_code_is_refused() {
    let dir = tempfile::tempdir().expect("dir");
    let (store, pipeline) = open(dir.path());
    let p = policy(DmPolicy::Pairing);
    run(&pipeline, &p, dm("42", "x1", "hello"), 0, 1_000);
    let code = store
        .dm_pairing_list(None, 1_000, PAIRING_CODE_TTL_MS)
        .expect("list")[0]
        .1
        .code
        .clone();
    let late = 1_000 + HOUR_MS;
    assert_eq!(
        store
            .dm_pairing_approve("telegram", &code, late, PAIRING_CODE_TTL_MS)
            .expect("approve"),
        None
    );
    assert!(!store
        .dm_pairing_is_approved("telegram", "default", "42")
        .expect("read"));
}

#[test]
fn a_fourth_pending_code_is_refused() {
    let dir = tempfile::tempdir().expect("dir");
    let (store, pipeline) = open(dir.path());
    let p = policy(DmPolicy::Pairing);
    for sender in ["1", "2", "3"] {
        assert!(matches!(
            run(&pipeline, &p, dm(sender, sender, "hi"), 0, 1_000),
            Decision::Reply(_)
        ));
    }
    assert_eq!(
        run(&pipeline, &p, dm("4", "4", "hi"), 0, 1_000),
        Decision::Ignored(IgnoreReason::Refused(Refusal::PairingBusy))
    );
    assert_eq!(
        store
            .dm_pairing_list(None, 1_000, PAIRING_CODE_TTL_MS)
            .expect("list")
            .len(),
        3
    );
    // Once the others expire there is room again.
    assert!(matches!(
        run(&pipeline, &p, dm("4", "5", "hi"), 0, 1_000 + HOUR_MS),
        Decision::Reply(_)
    ));
}

fn group_msg(id: &str, text: &str, mentioned: bool) -> (InboundMessage, RouteInput) {
    let msg = InboundMessage {
        body: text.into(),
        sender_id: "7".into(),
        sender_name: Some("Ann".into()),
        group_id: Some("-100".into()),
        message_id: Some(id.into()),
        mentioned,
        ..InboundMessage::default()
    };
    (
        msg,
        RouteInput {
            channel: "telegram".into(),
            peer: Some(RoutePeer::new(PeerKind::Group, "-100")),
            ..RouteInput::default()
        },
    )
}

#[test]
fn group_message_without_mention_is_ignored() {
    let dir = tempfile::tempdir().expect("dir");
    let (_store, pipeline) = open(dir.path());
    let p = policy(DmPolicy::Pairing);
    assert_eq!(
        run(&pipeline, &p, group_msg("g1", "chatter", false), 0, 1),
        Decision::Ignored(IgnoreReason::Refused(Refusal::NotActivated))
    );
    let Decision::Run { message, route } = run(
        &pipeline,
        &p,
        group_msg("g2", "@pincerbot help", true),
        0,
        2,
    ) else {
        panic!("a mention activates the bot");
    };
    // The ignored message comes along as group history with the mention.
    assert_eq!(
        message.body_for_agent,
        "[Chat messages since your last reply - for context]\n[from: Ann (7)] chatter\n\n\
         [Current message - respond to this]\n[from: Ann (7)] @pincerbot help"
    );
    assert_eq!(route.session_key, "agent:main:telegram:group:-100");
    let keyword = AccessPolicy {
        activation: GroupActivation::Keyword(vec!["pincer".into()]),
        ..p.clone()
    };
    assert!(matches!(
        run(
            &pipeline,
            &keyword,
            group_msg("g3", "hey Pincer", false),
            0,
            3
        ),
        Decision::Run { .. }
    ));
    let disabled = AccessPolicy {
        group_policy: GroupPolicy::Disabled,
        ..p.clone()
    };
    assert_eq!(
        run(&pipeline, &disabled, group_msg("g4", "x", true), 0, 4),
        Decision::Ignored(IgnoreReason::Refused(Refusal::GroupDisabled))
    );
    let allowlist = AccessPolicy {
        group_policy: GroupPolicy::Allowlist,
        allowed_groups: vec!["-999".into()],
        ..p
    };
    assert_eq!(
        run(&pipeline, &allowlist, group_msg("g5", "x", true), 0, 5),
        Decision::Ignored(IgnoreReason::Refused(Refusal::GroupNotAllowed))
    );
}

#[derive(Default)]
struct CountingTyping(std::sync::atomic::AtomicI32);

impl TypingIndicator for CountingTyping {
    fn start_typing(&self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
    fn stop_typing(&self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[test]
fn typing_stops_at_the_first_block_or_when_the_run_ends() {
    let typing = Arc::new(CountingTyping::default());
    let mut guard = TypingGuard::start(typing.clone());
    assert_eq!(typing.0.load(std::sync::atomic::Ordering::SeqCst), 1);
    guard.first_block_sent();
    assert_eq!(typing.0.load(std::sync::atomic::Ordering::SeqCst), 0);
    drop(guard);
    assert_eq!(
        typing.0.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "stopped once"
    );
    let guard = TypingGuard::start(typing.clone());
    drop(guard);
    assert_eq!(typing.0.load(std::sync::atomic::Ordering::SeqCst), 0);
}
