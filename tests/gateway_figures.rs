//! Real figures: the real `pincer gateway` process with a fake Telegram Bot
//! API, the fake OpenAI provider and the heartbeat on. `health`, the
//! `hello-ok` snapshot, `status`, `channels.status`, `last-heartbeat` and
//! `pincer status` report what runs, and move with what happens: an inbound
//! message moves `lastInboundAt`, the reply `lastOutboundAt`, a heartbeat
//! its `lastRunAt`; when Telegram goes away the account is disconnected with
//! a `lastError`. Each change reaches clients as a `health` event, at most
//! one per second; cron job changes and runs reach them as `cron` events.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::fake_openai::{FakeOpenAi, FakeReply};
use support::fake_telegram::FakeTelegram;
use support::gateway::{config_with_provider, GatewayProcess};
use support::telegram_harness::{dm, BOT_ID, BOT_USERNAME, TOKEN};
use support::ws_client::{Device, Read, TestClient};

const GATEWAY_TOKEN: &str = "figures-operator-token";
const SCOPES: &[&str] = &["operator.admin", "operator.read", "operator.write"];
/// Hang guard for waits (never a timing claim).
const WAIT_GUARD: Duration = Duration::from_secs(30);
/// The configured heartbeat interval.
const HEARTBEAT_EVERY_MS: u64 = 30 * 60_000;
/// Upstream-like debounce: `health` events at most this often (less a
/// little for the reader's own clock).
const HEALTH_EVENT_MIN_GAP: Duration = Duration::from_millis(900);

fn text(reply: &str) -> FakeReply {
    FakeReply::Text {
        chunks: vec![reply.to_string()],
        delay_ms: 0,
    }
}

fn config(telegram: &FakeTelegram, provider: &FakeOpenAi) -> String {
    json!({
        "models": { "providers": { "fake": {
            "baseUrl": provider.base_url(), "apiKey": "sk-test", "api": "openai-completions",
            "models": [{ "id": "gpt-test", "contextWindow": 128000 }] } } },
        "agents": { "defaults": {
            "model": { "primary": "fake/gpt-test" },
            "heartbeat": { "every": "30m", "target": "none" },
        } },
        "channels": { "telegram": {
            "botToken": TOKEN, "apiRoot": telegram.api_root(),
            "streaming": "off", "dmPolicy": "open", "allowFrom": ["*"],
        } },
    })
    .to_string()
}

/// Health events read so far, with when they arrived.
#[derive(Default)]
struct HealthLog {
    arrivals: Vec<Instant>,
}

impl HealthLog {
    /// Reads until a `health` event whose payload satisfies `matches`.
    async fn until(
        &mut self,
        client: &mut TestClient,
        what: &str,
        matches: impl Fn(&Value) -> bool,
    ) -> Value {
        let read = async {
            loop {
                match client.read().await {
                    Read::Frame(frame) if frame["event"] == "health" => {
                        self.arrivals.push(Instant::now());
                        assert!(
                            frame["stateVersion"]["health"].as_u64().is_some(),
                            "a health event carries stateVersion: {frame}"
                        );
                        if matches(&frame["payload"]) {
                            return frame["payload"].clone();
                        }
                    }
                    Read::Frame(_) => continue,
                    Read::Closed { code, reason } => {
                        panic!("closed ({code} {reason}) before health showed {what}")
                    }
                }
            }
        };
        tokio::time::timeout(WAIT_GUARD, read)
            .await
            .unwrap_or_else(|_| panic!("no health event showed {what}"))
    }

    fn assert_debounced(&self) {
        for pair in self.arrivals.windows(2) {
            let gap = pair[1] - pair[0];
            assert!(
                gap >= HEALTH_EVENT_MIN_GAP,
                "two health events {gap:?} apart (arrivals: {:?})",
                self.arrivals
            );
        }
    }
}

/// Reads until a `cron` event with `action`.
async fn cron_event(client: &mut TestClient, action: &str) -> Value {
    tokio::time::timeout(
        WAIT_GUARD,
        client.event_where("cron", |p| p["action"] == action),
    )
    .await
    .unwrap_or_else(|_| panic!("no cron {action} event"))
}

fn telegram_account(health: &Value) -> Value {
    health["channels"]["telegram"]["accounts"]["default"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn figures_follow_telegram_and_the_heartbeat() {
    let telegram = FakeTelegram::start(TOKEN, BOT_ID, BOT_USERNAME).await;
    let provider = FakeOpenAi::start().await;
    let gateway = tokio::task::block_in_place(|| {
        GatewayProcess::start(
            &config(&telegram, &provider),
            &["--port", "0", "--token", GATEWAY_TOKEN],
        )
    });
    let (mut client, hello) = TestClient::connect(
        &gateway.url(),
        Some(GATEWAY_TOKEN),
        SCOPES,
        Some(&Device::new(3)),
    )
    .await;

    // The snapshot already shows the channel and the heartbeat that run.
    let snapshot = &hello["snapshot"]["health"];
    assert_eq!(snapshot["channelOrder"], json!(["telegram"]), "{snapshot}");
    assert_eq!(snapshot["channelLabels"]["telegram"], "Telegram");
    let account = telegram_account(snapshot);
    assert_eq!(account["configured"], true, "{account}");
    assert_eq!(account["running"], true, "{account}");
    assert_eq!(snapshot["heartbeatSeconds"], HEARTBEAT_EVERY_MS / 1000);
    let heartbeat = &snapshot["agents"][0]["heartbeat"];
    assert_eq!(heartbeat["enabled"], true, "{heartbeat}");
    assert_eq!(heartbeat["every"], "30m", "{heartbeat}");
    assert_eq!(heartbeat["everyMs"], HEARTBEAT_EVERY_MS, "{heartbeat}");
    assert!(heartbeat["nextRunAt"].as_u64().is_some(), "{heartbeat}");
    assert_eq!(heartbeat["lastRunAt"], Value::Null, "{heartbeat}");
    assert_eq!(snapshot["queues"]["lanes"][0]["lane"], "main", "{snapshot}");

    let mut log = HealthLog::default();
    // Connected once the first poll answered (maybe before the snapshot).
    let health = client.call("health", json!({})).await["payload"].clone();
    if telegram_account(&health)["connected"] != true {
        log.until(&mut client, "telegram connected", |h| {
            telegram_account(h)["connected"] == true
        })
        .await;
    }
    let before = client.call("health", json!({})).await["payload"].clone();
    assert_eq!(telegram_account(&before)["lastInboundAt"], Value::Null);

    // A message in, a reply out: both times move, in the events too.
    provider.push_reply(text("Hello Ann."));
    telegram.push_message(dm("hi"));
    let moved = log
        .until(&mut client, "lastInboundAt and lastOutboundAt set", |h| {
            let account = telegram_account(h);
            account["lastInboundAt"].as_u64().is_some()
                && account["lastOutboundAt"].as_u64().is_some()
        })
        .await;
    let account = telegram_account(&moved);
    assert!(
        account["lastOutboundAt"].as_u64() >= account["lastInboundAt"].as_u64(),
        "{account}"
    );
    let listed = client.call("channels.status", json!({})).await["payload"].clone();
    let row = &listed["channelAccounts"]["telegram"][0];
    assert_eq!(row["lastInboundAt"], account["lastInboundAt"], "{listed}");
    assert_eq!(row["connected"], true, "{listed}");
    assert_eq!(listed["channels"]["telegram"]["running"], true, "{listed}");

    let status = client.call("status", json!({})).await["payload"].clone();
    let lines = status["channelSummary"].as_array().expect("channelSummary");
    assert!(
        lines.contains(&json!("Telegram default: connected")),
        "{status}"
    );
    assert_eq!(
        status["heartbeat"]["agents"][0]["enabled"], true,
        "{status}"
    );
    assert_eq!(
        status["heartbeat"]["agents"][0]["everyMs"],
        HEARTBEAT_EVERY_MS
    );

    // A heartbeat run: its lastRunAt and last-heartbeat.
    provider.push_reply(text("HEARTBEAT_OK"));
    client.call("wake", json!({"mode": "now"})).await;
    let beat = log
        .until(&mut client, "the heartbeat's lastRunAt", |h| {
            h["agents"][0]["heartbeat"]["lastRunAt"].as_u64().is_some()
        })
        .await;
    let last_run = beat["agents"][0]["heartbeat"]["lastRunAt"]
        .as_u64()
        .expect("lastRunAt");
    assert_eq!(
        beat["agents"][0]["heartbeat"]["nextRunAt"].as_u64(),
        Some(last_run + HEARTBEAT_EVERY_MS),
        "{beat}"
    );
    let last = client.call("last-heartbeat", json!({})).await["payload"].clone();
    assert_eq!(last["agentId"], "main", "{last}");
    assert!(last["ts"].as_u64() >= Some(last_run), "{last}");

    // `pincer status` prints the same figures.
    let printed = tokio::task::block_in_place(|| {
        Command::new(env!("CARGO_BIN_EXE_pincer"))
            .args(["status", "--url", &gateway.url(), "--token", GATEWAY_TOKEN])
            .env("PINCER_DATA_DIR", gateway.data_dir())
            .output()
            .expect("run pincer status")
    });
    let out = String::from_utf8_lossy(&printed.stdout);
    assert!(
        printed.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&printed.stderr)
    );
    assert!(out.contains("channel Telegram default: connected"), "{out}");
    assert!(out.contains("heartbeat main: every 30m"), "{out}");
    assert!(out.contains("lane main:"), "{out}");

    // Telegram goes away: the account is disconnected, with the reason.
    drop(telegram);
    let gone = log
        .until(&mut client, "telegram disconnected with lastError", |h| {
            let account = telegram_account(h);
            account["connected"] == false && account["lastError"].is_string()
        })
        .await;
    assert_eq!(
        telegram_account(&gone)["running"],
        true,
        "still retrying: {gone}"
    );
    let listed = client.call("channels.status", json!({})).await["payload"].clone();
    assert_eq!(listed["channelAccounts"]["telegram"][0]["connected"], false);
    assert!(
        listed["channels"]["telegram"]["lastError"].is_string(),
        "{listed}"
    );
    log.assert_debounced();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cron_job_changes_and_runs_are_cron_events() {
    let provider = FakeOpenAi::start().await;
    let gateway = tokio::task::block_in_place(|| {
        GatewayProcess::start(
            &config_with_provider(&provider.base_url()),
            &["--port", "0", "--token", GATEWAY_TOKEN],
        )
    });
    let (mut client, _) = TestClient::connect(
        &gateway.url(),
        Some(GATEWAY_TOKEN),
        SCOPES,
        Some(&Device::new(4)),
    )
    .await;
    // The caller's reads skip events while it waits for answers: another client watches.
    let (mut watcher, _) = TestClient::connect(
        &gateway.url(),
        Some(GATEWAY_TOKEN),
        &["operator.read"],
        Some(&Device::new(5)),
    )
    .await;
    let added = client
        .call(
            "cron.add",
            json!({
                "name": "digest",
                "schedule": {"kind": "every", "everyMs": 3_600_000},
                "sessionTarget": "isolated",
                "payload": {"kind": "agentTurn", "message": "summarise the day"},
            }),
        )
        .await;
    assert_eq!(added["ok"], true, "{added}");
    let id = added["payload"]["id"].as_str().expect("id").to_string();
    let event = cron_event(&mut watcher, "added").await;
    assert_eq!(event["jobId"], id.as_str(), "{event}");
    assert_eq!(event["job"]["name"], "digest", "{event}");
    assert!(event["nextRunAtMs"].as_u64().is_some(), "{event}");

    let updated = client
        .call(
            "cron.update",
            json!({"id": id, "patch": {"name": "evening digest"}}),
        )
        .await;
    assert_eq!(updated["ok"], true, "{updated}");
    let event = cron_event(&mut watcher, "updated").await;
    assert_eq!(event["job"]["name"], "evening digest", "{event}");

    provider.push_reply(text("Nothing happened today."));
    let ran = client.call("cron.run", json!({"id": id})).await;
    assert_eq!(ran["ok"], true, "{ran}");
    let started = cron_event(&mut watcher, "started").await;
    assert_eq!(started["jobId"], id.as_str(), "{started}");
    let finished = cron_event(&mut watcher, "finished").await;
    assert_eq!(finished["status"], "ok", "{finished}");
    assert!(finished["durationMs"].as_u64().is_some(), "{finished}");
    assert_eq!(finished["runAtMs"], started["runAtMs"], "{finished}");

    let removed = client.call("cron.remove", json!({"id": id})).await;
    assert_eq!(removed["ok"], true, "{removed}");
    let event = cron_event(&mut watcher, "removed").await;
    assert_eq!(event["jobId"], id.as_str(), "{event}");
}
