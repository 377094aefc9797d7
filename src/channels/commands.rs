//! Chat commands from channels, carried out: `/new` `/reset` `/clear`,
//! `/status`, `/compact`, `/model`, `/think`, `/verbose`, `/reasoning`,
//! `/stop`, `/help`, `/restart` (owner only) and `/subagents` (list, kill,
//! steer, info, log). Each uses the session operations the gateway's methods
//! use too (`SessionOps`: reset, compact, patch; the run registry's abort)
//! and answers in the conversation (the web chat gets the answer as a `chat`
//! event). A command never reaches the agent.
//!
//! This file must not recognise commands (the pipeline does) nor change a
//! session other than through `SessionOps`.

use std::sync::Arc;
use std::time::Duration;

use crate::agent::{Compacted, FieldPatch, SessionError, SessionPatch};
use crate::pipeline::commands::{CommandInvocation, COMMANDS};
use crate::routing::Route;

use super::hub::{ChannelHub, Destination, HubDeps};

/// Characters of a sub-agent's task shown when it has no label.
const SUBAGENT_TASK_PREVIEW_CHARS: usize = 60;
/// How long `/restart` waits so its answer can leave before the drain starts.
const RESTART_DELAY_MS: u64 = 500;

/// Runs `command` for `route` and answers through the destination. `/new <text>` (or a reset trigger
/// followed by text) starts the new session with `<text>` as its first message instead of a notice.
pub(super) async fn execute(
    hub: &Arc<ChannelHub>,
    command: CommandInvocation,
    route: &Route,
    dest: Destination,
    sender_id: &str,
) {
    if !may_run_commands(&hub.deps, &route.channel, sender_id) {
        log::info!(
            "/{} from {}:{sender_id} dropped: not in commands.allowFrom",
            command.spec.name,
            route.channel
        );
        return;
    }
    let caller = CommandCaller {
        session_key: &route.session_key,
        agent_id: &route.agent_id,
        is_group: dest.is_group,
        is_owner: command.spec.owner_only && is_owner(&hub.deps, &route.channel, sender_id),
    };
    let first_message = command.args.trim();
    if command.spec.name == "new" && !first_message.is_empty() {
        hub.queue.abort(&route.session_key);
        match sync(|| hub.deps.sessions.reset(&route.session_key)) {
            Ok(_) => {
                let config = hub.config();
                hub.enqueue_channel_run(&config, route, first_message.to_string(), dest);
                return;
            }
            Err(error) => log::warn!("cannot reset {}: {error}", route.session_key),
        }
    }
    let answer = answer(hub, &command, &caller).await;
    hub.send_notice(
        &*dest.adapter,
        &dest.target,
        &dest.settings,
        &route.session_key,
        &answer,
    )
    .await;
}

/// `commands.allowFrom`: when it lists anyone, only the senders it lists for
/// `channel` (or under `"*"`) may run commands; a command from anyone else is
/// dropped, as upstream does. Web chat senders are authenticated gateway
/// operators and always may.
pub fn may_run_commands(state: &HubDeps, channel: &str, sender_id: &str) -> bool {
    let config = state.runtime.config();
    let allow = &config.commands.allow_from;
    if allow.is_empty() || channel == super::deliver::WEBCHAT {
        return true;
    }
    let qualified = format!("{channel}:{sender_id}");
    [channel, "*"]
        .iter()
        .filter_map(|key| allow.get(*key))
        .flatten()
        .any(|id| id == "*" || *id == sender_id || *id == qualified)
}

/// Whether `sender_id` on `channel` is the owner: `commands.ownerAllowFrom`
/// or the sender whose pairing approval seeded the owner.
pub fn is_owner(state: &HubDeps, channel: &str, sender_id: &str) -> bool {
    let qualified = format!("{channel}:{sender_id}");
    let config = state.runtime.config();
    if config
        .commands
        .owner_allow_from
        .iter()
        .any(|o| o == sender_id || *o == qualified)
    {
        return true;
    }
    state
        .runtime
        .store
        .run_blocking(|| state.runtime.store.dm_pairing_owner())
        .ok()
        .flatten()
        .is_some_and(|owner| owner == qualified)
}

/// Who runs a command, and in which session.
#[derive(Debug, Clone, Copy)]
pub struct CommandCaller<'a> {
    pub session_key: &'a str,
    pub agent_id: &'a str,
    /// A group conversation (commands not allowed in groups are refused).
    pub is_group: bool,
    /// May run owner-only commands (`/restart`).
    pub is_owner: bool,
}

/// Carries out `command` for `caller` and returns the answer text.
pub async fn answer(
    hub: &Arc<ChannelHub>,
    command: &CommandInvocation,
    caller: &CommandCaller<'_>,
) -> String {
    let state = &hub.deps;
    let spec = command.spec;
    let key = caller.session_key;
    if caller.is_group && !spec.group_allowed {
        return format!("/{} only works in a direct chat.", spec.name);
    }
    if spec.owner_only && !caller.is_owner {
        return format!("/{} is for the owner only.", spec.name);
    }
    let args = command.args.trim();
    match spec.name {
        "new" => {
            hub.queue.abort(key);
            outcome(sync(|| state.sessions.reset(key)), |_| {
                "✅ New session started.".into()
            })
        }
        "status" => status(hub, state, caller),
        "compact" => {
            let instructions = (!args.is_empty()).then_some(args);
            outcome(
                state.sessions.compact(key, instructions).await,
                |done| match done {
                    Compacted::Done {
                        summarized_entries, ..
                    } => format!("🧹 Compacted: {summarized_entries} earlier messages summarised."),
                    Compacted::Skipped(reason) => format!("Nothing to compact ({reason})."),
                },
            )
        }
        "model" if args.is_empty() => format!("Model: {}", current_model(state, caller)),
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
            let runs = state.runtime.runs.abort_session(key);
            if queued || !runs.is_empty() {
                "⏹️ Stopped.".into()
            } else {
                "Nothing is running.".into()
            }
        }
        "help" => help(),
        "restart" => restart(state),
        "subagents" => subagents(state, key, args),
        other => format!("/{other} is not available here."),
    }
}

fn sync<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

fn outcome<T>(result: Result<T, SessionError>, ok: impl FnOnce(&T) -> String) -> String {
    match result {
        Ok(value) => ok(&value),
        Err(error) => format!("⚠️ {error}"),
    }
}

fn patch(state: &HubDeps, key: &str, field: &str, value: &str, label: &str) -> String {
    let set = FieldPatch::Set(value.to_string());
    let mut patch = SessionPatch::default();
    match field {
        "model" => patch.model = set,
        "thinkingLevel" => patch.thinking_level = set,
        "verboseLevel" => patch.verbose_level = set,
        _ => patch.reasoning_level = set,
    }
    outcome(sync(|| state.sessions.patch(key, &patch)), |_| {
        format!("{label} set to {value}.")
    })
}

fn entry(state: &HubDeps, key: &str) -> Option<crate::store::SessionEntry> {
    sync(|| state.runtime.store.session(key)).ok().flatten()
}

fn level(
    state: &HubDeps,
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
    state: &HubDeps,
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

fn current_model(state: &HubDeps, caller: &CommandCaller<'_>) -> String {
    let config = state.runtime.config();
    let entry = entry(state, caller.session_key);
    let override_ref = entry.as_ref().and_then(|e| {
        Some(format!(
            "{}/{}",
            e.provider_override.as_ref()?,
            e.model_override.as_ref()?
        ))
    });
    match crate::agent::resolve_chain(
        &config,
        caller.agent_id,
        override_ref.as_deref(),
        &state.runtime.http(),
    ) {
        Ok(chain) => format!("{}/{}", chain[0].provider_id, chain[0].model_id),
        Err(error) => format!("none ({error})"),
    }
}

fn status(hub: &ChannelHub, state: &HubDeps, caller: &CommandCaller<'_>) -> String {
    let key = caller.session_key;
    let entry = entry(state, key);
    let mut lines = vec![
        format!("Session: {key}"),
        format!("Agent: {}", caller.agent_id),
        format!("Model: {}", current_model(state, caller)),
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
    let running =
        if hub.queue.is_running(key) || !state.runtime.runs.active_in_session(key).is_empty() {
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

/// `/subagents [list]`, `kill <id|label|#n|all>`, `steer <id|label|#n> <message>`, `info <target>` and
/// `log <target> [count]` for this session's children.
fn subagents(state: &HubDeps, key: &str, args: &str) -> String {
    let registry = &state.subagents;
    let (action, rest) = split_word(args);
    match action {
        "" | "list" => subagents_list(registry, key),
        "kill" => {
            let target = if rest.is_empty() { "all" } else { rest };
            match sync(|| registry.kill(key, target)) {
                Ok(killed) => format!("Stopped {} sub-agent(s).", killed.len()),
                Err(error) => format!("⚠️ {error}"),
            }
        }
        "steer" => subagents_steer(state, registry, key, rest),
        "info" if !rest.is_empty() => subagents_info(registry, key, rest),
        "log" if !rest.is_empty() => subagents_log(state, registry, key, rest),
        _ => SUBAGENTS_USAGE.into(),
    }
}

const SUBAGENTS_USAGE: &str = "Usage: /subagents [list | kill <id|label|#n|all> | steer <id|label|#n> <message> | info <id|label|#n> | log <id|label|#n> [count]]";
/// Transcript messages `/subagents log` shows when no count is given, and at most.
const SUBAGENT_LOG_DEFAULT_ENTRIES: usize = 10;
const SUBAGENT_LOG_MAX_ENTRIES: usize = 50;
/// Characters of one message (or result) shown by `/subagents log` and `info`.
const SUBAGENT_TEXT_PREVIEW_CHARS: usize = 400;

/// The first word of `text` and the trimmed rest.
fn split_word(text: &str) -> (&str, &str) {
    let text = text.trim();
    text.split_once(char::is_whitespace)
        .map_or((text, ""), |(word, rest)| (word, rest.trim()))
}

fn preview(text: &str, chars: usize) -> String {
    let mut shown: String = text.chars().take(chars).collect();
    if text.chars().count() > chars {
        shown.push('…');
    }
    shown
}

fn subagent_name(run: &crate::agent::SubagentRun) -> String {
    run.label
        .clone()
        .unwrap_or_else(|| preview(&run.task, SUBAGENT_TASK_PREVIEW_CHARS))
}

fn subagents_list(registry: &crate::agent::SubagentRegistry, key: &str) -> String {
    match sync(|| registry.children_of(key)) {
        Ok(runs) if runs.is_empty() => "No sub-agents in this session.".into(),
        Ok(runs) => {
            let mut lines = vec!["Sub-agents:".to_string()];
            for (i, run) in runs.iter().enumerate() {
                lines.push(format!(
                    "#{} {} — {}",
                    i + 1,
                    subagent_name(run),
                    run.status.as_str()
                ));
            }
            lines.join("\n")
        }
        Err(error) => format!("⚠️ {error}"),
    }
}

fn subagents_steer(
    state: &HubDeps,
    registry: &Arc<crate::agent::SubagentRegistry>,
    key: &str,
    args: &str,
) -> String {
    let (target, message) = split_word(args);
    if target.is_empty() || message.is_empty() {
        return "Usage: /subagents steer <id|label|#n> <message>".into();
    }
    let config = state.runtime.config();
    match sync(|| registry.steer(&config, key, target, message)) {
        Ok(steered) => match steered.mode {
            crate::agent::SteerMode::Injected => format!(
                "🧭 Steered {}: it reads your message before its next step.",
                subagent_name(&steered.run)
            ),
            crate::agent::SteerMode::Restarted => format!(
                "🧭 Steered {}: it continues with your message.",
                subagent_name(&steered.run)
            ),
        },
        Err(error) => format!("⚠️ {error}"),
    }
}

fn subagents_info(registry: &crate::agent::SubagentRegistry, key: &str, target: &str) -> String {
    let run = match sync(|| registry.resolve_child(key, target)) {
        Ok(run) => run,
        Err(error) => return format!("⚠️ {error}"),
    };
    let mut lines = vec![
        format!(
            "Sub-agent {} — {}",
            subagent_name(&run),
            run.status.as_str()
        ),
        format!("Session: {}", run.child_session_key),
        format!("Run: {} (id {})", run.run_id, run.id),
        format!("Depth: {}", run.depth),
        format!(
            "Tokens: {} in / {} out",
            run.input_tokens, run.output_tokens
        ),
        format!("Task: {}", preview(&run.task, SUBAGENT_TEXT_PREVIEW_CHARS)),
    ];
    if let Some(model) = &run.model {
        lines.push(format!("Model: {model}"));
    }
    if let Some(error) = &run.error {
        lines.push(format!("Error: {error}"));
    }
    if let Some(result) = &run.result {
        lines.push(format!(
            "Result: {}",
            preview(result, SUBAGENT_TEXT_PREVIEW_CHARS)
        ));
    }
    lines.join("\n")
}

fn subagents_log(
    state: &HubDeps,
    registry: &crate::agent::SubagentRegistry,
    key: &str,
    args: &str,
) -> String {
    let (target, count) = split_word(args);
    let count = count
        .parse::<usize>()
        .unwrap_or(SUBAGENT_LOG_DEFAULT_ENTRIES)
        .clamp(1, SUBAGENT_LOG_MAX_ENTRIES);
    let run = match sync(|| registry.resolve_child(key, target)) {
        Ok(run) => run,
        Err(error) => return format!("⚠️ {error}"),
    };
    let Some(entry) = entry(state, &run.child_session_key) else {
        return format!(
            "{} has no transcript (it was cleaned up).",
            subagent_name(&run)
        );
    };
    let tail = match sync(|| {
        state
            .runtime
            .store
            .transcript_tail(&entry.session_id, count)
    }) {
        Ok(tail) => tail,
        Err(error) => return format!("⚠️ {error}"),
    };
    let mut lines = vec![format!("Log of {}:", subagent_name(&run))];
    for (_, message) in tail {
        if message.text.trim().is_empty() {
            continue;
        }
        let text = preview(message.text.trim(), SUBAGENT_TEXT_PREVIEW_CHARS);
        lines.push(format!("{}: {text}", message.role));
    }
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

/// `/restart`: the gateway drains and restarts in place (same process, same
/// PID); messages already acknowledged are answered after it.
fn restart(state: &HubDeps) -> String {
    if !state.runtime.config().commands.restart {
        return "Restarting from chat is disabled (commands.restart).".into();
    }
    let lifecycle = state.runtime.lifecycle.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(RESTART_DELAY_MS)).await;
        lifecycle.request_restart("/restart from a chat");
    });
    "♻️ Restarting the gateway…".into()
}
