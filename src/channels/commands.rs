//! Chat commands from channels, carried out: `/new` `/reset` `/clear`,
//! `/status`, `/compact`, `/model`, `/think`, `/verbose`, `/reasoning`,
//! `/stop`, `/help`, `/restart` (owner only) and `/subagents`. Each reuses
//! the gateway method that does the same for web clients (`sessions.reset`,
//! `sessions.compact`, `sessions.patch`, the run registry's abort) and
//! answers in the conversation. A command never reaches the agent.
//!
//! This file must not recognise commands (the pipeline does) nor duplicate
//! what a gateway method already implements.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::gateway::frames::ErrorShape;
use crate::gateway::methods::sessions;
use crate::gateway::state::GatewayState;
use crate::pipeline::commands::{CommandInvocation, COMMANDS};
use crate::routing::Route;

use super::hub::{ChannelHub, Destination};

/// How long `/restart` waits so its answer can leave before the drain starts.
const RESTART_DELAY_MS: u64 = 500;

/// Runs `command` for `route` and answers through the destination.
pub(super) async fn execute(
    hub: &Arc<ChannelHub>,
    state: &Arc<GatewayState>,
    command: CommandInvocation,
    route: &Route,
    dest: &Destination,
    sender_id: &str,
) {
    let answer = answer(hub, state, &command, route, dest, sender_id).await;
    hub.send_notice(
        &*dest.adapter,
        &dest.target,
        &dest.settings,
        &route.session_key,
        &answer,
    )
    .await;
}

/// Whether `sender_id` on `channel` is the owner: `commands.ownerAllowFrom`
/// or the sender whose pairing approval seeded the owner.
pub fn is_owner(state: &GatewayState, channel: &str, sender_id: &str) -> bool {
    let qualified = format!("{channel}:{sender_id}");
    let config = state.config();
    if config
        .commands
        .owner_allow_from
        .iter()
        .any(|o| o == sender_id || *o == qualified)
    {
        return true;
    }
    tokio::task::block_in_place(|| state.store.dm_pairing_owner())
        .ok()
        .flatten()
        .is_some_and(|owner| owner == qualified)
}

async fn answer(
    hub: &Arc<ChannelHub>,
    state: &Arc<GatewayState>,
    command: &CommandInvocation,
    route: &Route,
    dest: &Destination,
    sender_id: &str,
) -> String {
    let spec = command.spec;
    let key = route.session_key.as_str();
    if dest.is_group && !spec.group_allowed {
        return format!("/{} only works in a direct chat.", spec.name);
    }
    if spec.owner_only && !is_owner(state, &route.channel, sender_id) {
        return format!("/{} is for the owner only.", spec.name);
    }
    let args = command.args.trim();
    match spec.name {
        "new" => {
            hub.queue.abort(key);
            let reason = if command.invoked_as == "new" {
                "new"
            } else {
                "reset"
            };
            let params = json!({"key": key, "reason": reason});
            outcome(sync(|| sessions::reset(state, &params)), |_| {
                "✅ New session started.".into()
            })
        }
        "status" => status(hub, state, route),
        "compact" => {
            let instructions = (!args.is_empty()).then_some(args);
            outcome(
                sessions::compact_session(state, key, instructions).await,
                |v| match v["compacted"].as_bool() {
                    Some(true) => format!(
                        "🧹 Compacted: {} earlier messages summarised.",
                        v["summarizedEntries"]
                    ),
                    _ => format!(
                        "Nothing to compact ({}).",
                        v["reason"].as_str().unwrap_or("")
                    ),
                },
            )
        }
        "model" if args.is_empty() => format!("Model: {}", current_model(state, route)),
        "model" => patch(state, key, "model", args, "Model"),
        "think" if args.is_empty() => level(state, key, |e| e.thinking_level.clone(), "Thinking"),
        "think" => patch(state, key, "thinkingLevel", args, "Thinking level"),
        "verbose" => toggle(state, key, args, "verboseLevel", |e| {
            e.verbose_level.clone()
        }),
        "reasoning" => toggle(state, key, args, "reasoningLevel", |e| {
            e.reasoning_level.clone()
        }),
        "stop" => {
            let queued = hub.queue.abort(key);
            let runs = state.runs.abort_session(key);
            if queued || !runs.is_empty() {
                "⏹️ Stopped.".into()
            } else {
                "Nothing is running.".into()
            }
        }
        "help" => help(),
        "restart" => restart(state),
        "subagents" => "Sub-agents are not available yet.".into(),
        other => format!("/{other} is not available here."),
    }
}

fn sync<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

fn outcome(result: Result<Value, ErrorShape>, ok: impl FnOnce(&Value) -> String) -> String {
    match result {
        Ok(value) => ok(&value),
        Err(error) => format!("⚠️ {}", error.message),
    }
}

fn patch(state: &GatewayState, key: &str, field: &str, value: &str, label: &str) -> String {
    let params = json!({"key": key, field: value});
    outcome(sync(|| sessions::patch(state, &params)), |_| {
        format!("{label} set to {value}.")
    })
}

fn entry(state: &GatewayState, key: &str) -> Option<crate::store::SessionEntry> {
    sync(|| state.store.session(key)).ok().flatten()
}

fn level(
    state: &GatewayState,
    key: &str,
    read: impl Fn(&crate::store::SessionEntry) -> Option<String>,
    label: &str,
) -> String {
    let current = entry(state, key)
        .and_then(|e| read(&e))
        .unwrap_or_else(|| "default".into());
    format!("{label}: {current}")
}

/// `/verbose` and `/reasoning`: an explicit level, else on ↔ off.
fn toggle(
    state: &GatewayState,
    key: &str,
    args: &str,
    field: &str,
    read: impl Fn(&crate::store::SessionEntry) -> Option<String>,
) -> String {
    let next = if args.is_empty() {
        let on = entry(state, key)
            .and_then(|e| read(&e))
            .is_some_and(|l| l != "off");
        if on {
            "off"
        } else {
            "on"
        }
    } else {
        args
    };
    let label = if field == "verboseLevel" {
        "Verbose"
    } else {
        "Reasoning"
    };
    patch(state, key, field, next, label)
}

fn current_model(state: &Arc<GatewayState>, route: &Route) -> String {
    let config = state.config();
    let entry = entry(state, &route.session_key);
    let override_ref = entry.as_ref().and_then(|e| {
        Some(format!(
            "{}/{}",
            e.provider_override.as_ref()?,
            e.model_override.as_ref()?
        ))
    });
    match crate::agent::models::resolve_chain(
        &config,
        &route.agent_id,
        override_ref.as_deref(),
        &state.http(),
    ) {
        Ok(chain) => format!("{}/{}", chain[0].provider_id, chain[0].model_id),
        Err(error) => format!("none ({error})"),
    }
}

fn status(hub: &ChannelHub, state: &Arc<GatewayState>, route: &Route) -> String {
    let key = &route.session_key;
    let entry = entry(state, key);
    let mut lines = vec![
        format!("Session: {key}"),
        format!("Agent: {}", route.agent_id),
        format!("Model: {}", current_model(state, route)),
    ];
    if let Some(entry) = &entry {
        lines.push(format!(
            "Tokens: {} in / {} out",
            entry.input_tokens, entry.output_tokens
        ));
        if let Some(level) = &entry.thinking_level {
            lines.push(format!("Thinking: {level}"));
        }
    }
    let running = if hub.queue.is_running(key) || !state.runs.active_in_session(key).is_empty() {
        "running"
    } else {
        "idle"
    };
    lines.push(format!(
        "Queue: {running}, {} waiting",
        hub.queue.pending_len(key)
    ));
    lines.join("\n")
}

fn help() -> String {
    let mut lines = vec!["Commands:".to_string()];
    for spec in COMMANDS {
        let aliases: String = spec.aliases.iter().map(|a| format!(" /{a}")).collect();
        let args = if spec.args.is_empty() {
            String::new()
        } else {
            format!(" {}", spec.args)
        };
        lines.push(format!(
            "/{}{args}{aliases} — {}",
            spec.name, spec.description
        ));
    }
    lines.join("\n")
}

/// `/restart`: a graceful stop (SIGTERM to ourselves); the service manager
/// starts the gateway again.
fn restart(state: &GatewayState) -> String {
    if !state.config().commands.restart {
        return "Restarting from chat is disabled (commands.restart).".into();
    }
    tokio::spawn(async {
        tokio::time::sleep(Duration::from_millis(RESTART_DELAY_MS)).await;
        // SAFETY: kill(2) on our own pid with a signal the gateway handles.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGTERM);
        }
    });
    "♻️ Restarting the gateway…".into()
}
