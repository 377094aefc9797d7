//! Routing throughput: resolutions per second over 1,000 bindings, with a
//! cold cache (every lookup a new peer, so every one walks the index) and a
//! warm cache (a working set of peers resolved again and again).
//!
//!   cargo run --release --example route_bench -- [--bindings N] [--lookups N]

use std::hint::black_box;
use std::time::Instant;

use pincer::config::schema::bindings::PeerKind;
use pincer::config::Config;
use pincer::routing::{RouteInput, RoutePeer, Router};
use serde_json::json;

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `n` bindings spread over every tier and four channels.
fn config(n: usize) -> Config {
    let channels = ["telegram", "discord", "slack", "whatsapp"];
    let bindings: Vec<_> = (0..n)
        .map(|i| {
            let channel = channels[i % channels.len()];
            let agent = format!("agent{}", i % 16);
            let m = match i % 5 {
                0 => json!({"channel": channel, "peer": {"kind": "direct", "id": format!("user{i}")}}),
                1 => json!({"channel": channel, "peer": {"kind": "group", "id": format!("group{i}")}}),
                2 => json!({"channel": channel, "guildId": format!("guild{}", i % 50), "roles": [format!("role{}", i % 7)]}),
                3 => json!({"channel": channel, "teamId": format!("team{}", i % 40)}),
                _ => json!({"channel": channel, "accountId": format!("acct{}", i % 30)}),
            };
            json!({"agentId": agent, "match": m})
        })
        .collect();
    let agents: Vec<_> = (0..16)
        .map(|i| json!({"id": format!("agent{i}")}))
        .collect();
    serde_json::from_value(json!({"agents": {"list": agents}, "bindings": bindings}))
        .expect("bench config")
}

fn input(i: usize) -> RouteInput {
    let channels = ["telegram", "discord", "slack", "whatsapp"];
    let kind = if i % 2 == 0 {
        PeerKind::Direct
    } else {
        PeerKind::Group
    };
    RouteInput {
        channel: channels[i % 4].to_string(),
        account_id: Some(format!("acct{}", i % 31)),
        peer: Some(RoutePeer::new(kind, format!("peer{i}"))),
        guild_id: (i % 3 == 0).then(|| format!("guild{}", i % 50)),
        team_id: (i % 3 == 1).then(|| format!("team{}", i % 40)),
        member_roles: vec![format!("role{}", i % 7)],
        ..RouteInput::default()
    }
}

fn main() {
    let bindings = arg("--bindings", 1_000);
    let lookups = arg("--lookups", 200_000);
    let router = Router::new(&config(bindings));
    // Cold: every lookup is a new key (the cache keeps clearing at its cap).
    let inputs: Vec<RouteInput> = (0..lookups).map(input).collect();
    let start = Instant::now();
    for item in &inputs {
        black_box(router.resolve(item));
    }
    let cold = lookups as f64 / start.elapsed().as_secs_f64();
    // Warm: a working set of 1,000 keys already cached.
    let working: Vec<RouteInput> = (0..1_000).map(input).collect();
    for item in &working {
        router.resolve(item);
    }
    let start = Instant::now();
    for i in 0..lookups {
        black_box(router.resolve(&working[i % working.len()]));
    }
    let warm = lookups as f64 / start.elapsed().as_secs_f64();
    println!(
        "{:<28} {} bindings, {} lookups each",
        "routing",
        router.binding_count(),
        lookups
    );
    println!("{:<28} {:.0} resolutions/s", "routing cold cache", cold);
    println!("{:<28} {:.0} resolutions/s", "routing warm cache", warm);
}
