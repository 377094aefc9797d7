//! The running components' figures in upstream's shapes, shared by
//! `health`, `status`, the `hello-ok` snapshot and `channels.status`: each
//! channel account's state, each agent's heartbeat schedule, the lanes and
//! the command queue, the memory index.
//!
//! Every figure is read from the component that owns it (the channel
//! registry, the heartbeat runner, the lane gate, the hub's queue, the
//! memory services) at the moment of the call; nothing here is a constant
//! or a copy.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::channels::AccountStatus;
use crate::config::Config;
use crate::gateway::state::GatewayState;
use crate::heartbeat::runner::HeartbeatSchedule;

/// Why a configured channel has no account figures.
const NO_ADAPTER: &str = "no adapter for this channel in this build";

/// One channel's accounts as the registry (or, without an adapter, the
/// config) reports them.
pub struct ChannelFigures {
    pub channel: String,
    pub accounts: Vec<Value>,
    /// Why the adapter failed to start, when it did.
    pub start_error: Option<String>,
}

impl ChannelFigures {
    pub fn configured(&self) -> bool {
        self.accounts.iter().any(|a| a["configured"] == json!(true))
    }

    pub fn running(&self) -> bool {
        self.accounts.iter().any(|a| a["running"] == json!(true))
    }

    pub fn connected(&self) -> bool {
        self.accounts.iter().any(|a| a["connected"] == json!(true))
    }

    /// The first account's last error, else the start error.
    pub fn last_error(&self) -> Value {
        self.accounts
            .iter()
            .map(|a| &a["lastError"])
            .find(|e| !e.is_null())
            .cloned()
            .or_else(|| self.start_error.clone().map(Value::from))
            .unwrap_or(Value::Null)
    }
}

/// A channel's label ("telegram" → "Telegram", "whatsapp" → "WhatsApp" as upstream spells it).
pub fn label(channel: &str) -> String {
    if channel == "whatsapp" {
        return "WhatsApp".into();
    }
    let mut chars = channel.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

fn account_row(account: &AccountStatus, start_error: Option<&String>) -> Value {
    let mut row = json!({
        "accountId": account.account_id,
        "enabled": account.enabled,
        "configured": account.configured,
        "running": account.running,
        "connected": account.connected,
        "lastError": account.last_error.clone().or_else(|| start_error.cloned()),
        "lastInboundAt": account.last_inbound_at_ms,
        "lastOutboundAt": account.last_outbound_at_ms,
    });
    // Upstream's optional snapshot fields, present when the adapter knows them.
    let optional = [
        ("name", account.name.clone().map(Value::from)),
        ("identity", account.identity.clone().map(Value::from)),
        ("baseUrl", account.base_url.clone().map(Value::from)),
        ("stateReason", account.state_reason.clone().map(Value::from)),
        (
            "reconnectAttempts",
            account.reconnect_attempts.map(Value::from),
        ),
        ("linked", account.linked.map(Value::from)),
        (
            "lastConnectedAt",
            account.last_connected_at_ms.map(Value::from),
        ),
        // The Control UI shows a phone-number identity as `self.e164`.
        (
            "self",
            account
                .identity
                .as_deref()
                .filter(|id| is_e164(id))
                .map(|e164| json!({ "e164": e164 })),
        ),
    ];
    for (key, value) in optional {
        if let Some(value) = value {
            row[key] = value;
        }
    }
    row
}

/// `+` and 1 to 15 digits.
fn is_e164(id: &str) -> bool {
    id.strip_prefix('+')
        .is_some_and(|d| (1..=15).contains(&d.len()) && d.bytes().all(|b| b.is_ascii_digit()))
}

fn configured_accounts(config: &Config) -> BTreeMap<&'static str, Vec<String>> {
    let mut out = BTreeMap::new();
    if let Some(telegram) = &config.channels.telegram {
        out.insert("telegram", telegram.account_ids());
    }
    if let Some(discord) = &config.channels.discord {
        out.insert("discord", discord.account_ids());
    }
    if let Some(slack) = &config.channels.slack {
        out.insert("slack", slack.account_ids());
    }
    if let Some(matrix) = &config.channels.matrix {
        out.insert("matrix", matrix.account_ids());
    }
    if let Some(signal) = &config.channels.signal {
        out.insert("signal", signal.account_ids());
    }
    if let Some(whatsapp) = &config.channels.whatsapp {
        out.insert("whatsapp", whatsapp.account_ids());
    }
    out
}

/// Every running channel's accounts, then the configured channels that have
/// no adapter (never running), sorted by channel id.
pub fn channels(state: &GatewayState) -> Vec<ChannelFigures> {
    let mut out: BTreeMap<String, ChannelFigures> = BTreeMap::new();
    for status in state.services.channels.status() {
        let accounts = status
            .accounts
            .iter()
            .map(|a| account_row(a, status.start_error.as_ref()))
            .collect();
        out.insert(
            status.channel.clone(),
            ChannelFigures {
                channel: status.channel,
                accounts,
                start_error: status.start_error,
            },
        );
    }
    for (channel, ids) in configured_accounts(&state.config()) {
        if out.contains_key(channel) {
            continue;
        }
        let accounts = ids
            .iter()
            .map(|id| {
                json!({"accountId": id, "enabled": true, "configured": true, "running": false,
                       "connected": false, "lastError": NO_ADAPTER,
                       "lastInboundAt": null, "lastOutboundAt": null})
            })
            .collect();
        out.insert(
            channel.to_string(),
            ChannelFigures {
                channel: channel.to_string(),
                accounts,
                start_error: Some(NO_ADAPTER.to_string()),
            },
        );
    }
    out.into_values().collect()
}

/// A duration as upstream writes `every` ("30m", "1h", "45s", "90s").
fn every_text(ms: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(3_600_000, "h"), (60_000, "m"), (1_000, "s")];
    UNITS
        .iter()
        .find(|(size, _)| ms >= *size && ms % size == 0)
        .map_or_else(
            || format!("{ms}ms"),
            |(size, unit)| format!("{}{unit}", ms / size),
        )
}

/// An agent's heartbeat in upstream's `HeartbeatSummary` shape, plus when it
/// runs next and last ran.
pub fn heartbeat(schedule: &HeartbeatSchedule) -> Value {
    json!({
        "enabled": schedule.enabled,
        "every": schedule.every_ms.filter(|_| schedule.enabled).map_or_else(|| "disabled".to_string(), every_text),
        "everyMs": schedule.every_ms.filter(|_| schedule.enabled),
        "prompt": schedule.prompt,
        "target": schedule.target.as_deref().unwrap_or("none"),
        "ackMaxChars": schedule.ack_max_chars,
        "nextRunAt": schedule.next_due_ms,
        "lastRunAt": schedule.last_run_ms,
    })
}

/// The agents in health's order: the configured list, the default agent
/// first when it is not listed. `(id, name)`.
pub fn agents(config: &Config) -> Vec<(String, Option<String>)> {
    let default_agent = config.agents.default_agent_id();
    let mut agents: Vec<(String, Option<String>)> = config
        .agents
        .list
        .iter()
        .map(|a| (a.id.clone(), a.name.clone()))
        .collect();
    if !agents.iter().any(|(id, _)| *id == default_agent) {
        agents.insert(0, (default_agent, None));
    }
    agents
}

/// The lanes and the command queue now.
pub fn queues(state: &GatewayState) -> Value {
    let lanes: Vec<Value> = state
        .services
        .runs
        .gate()
        .usage()
        .iter()
        .map(|u| json!({"lane": u.lane.name(), "limit": u.limit, "busy": u.busy, "waiting": u.waiting}))
        .collect();
    let depths = state.services.hub.queue.depths();
    json!({
        "lanes": lanes,
        "commandQueue": {
            "sessions": depths.sessions,
            "running": depths.running,
            "waiting": depths.waiting,
        },
        "activeRuns": state.services.runs.active_count(),
    })
}

/// The memory index of every agent whose memory service is open.
pub fn memory(state: &GatewayState) -> Value {
    let agents: Vec<Value> = state
        .services
        .memory
        .statuses()
        .into_iter()
        .map(|(status, watching)| {
            json!({
                "agentId": status.agent_id,
                "files": status.files,
                "chunks": status.chunks,
                "vectors": status.vectors,
                "mode": status.mode,
                "modelLoaded": status.model_loaded,
                "keywordOnlyReason": status.keyword_only_reason,
                "lastSyncAt": status.last_sync_ms,
                "watching": watching,
            })
        })
        .collect();
    json!({"agents": agents})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_is_written_in_the_largest_whole_unit() {
        assert_eq!(every_text(30 * 60_000), "30m");
        assert_eq!(every_text(3_600_000), "1h");
        assert_eq!(every_text(90_000), "90s");
        assert_eq!(every_text(1_500), "1500ms");
    }

    #[test]
    fn a_linked_phone_account_reads_as_the_control_ui_expects() {
        let account = AccountStatus {
            account_id: "default".into(),
            identity: Some("+15551234".into()),
            linked: Some(true),
            last_connected_at_ms: Some(42),
            ..AccountStatus::default()
        };
        let row = account_row(&account, None);
        assert_eq!(row["linked"], json!(true));
        assert_eq!(row["lastConnectedAt"], json!(42));
        assert_eq!(row["self"], json!({"e164": "+15551234"}));
        let bot = AccountStatus {
            identity: Some("@pincer_bot".into()),
            ..AccountStatus::default()
        };
        let row = account_row(&bot, None);
        assert!(
            row.get("self").is_none() && row.get("linked").is_none(),
            "{row}"
        );
    }
}
