//! Agent rules: unique non-empty agent ids, model references
//! (`provider/model` or a catalog alias), thinking levels, heartbeat
//! interval and active hours, sub-agent and compaction ranges, memory
//! search ranges, and the sandbox security refusals (host network,
//! relative bind sources).
//!
//! Checks only read; failures name the JSON path (see `validate.rs`).

use std::collections::HashSet;

use super::duration::DurationUnit;
use super::schema::*;
use super::validate::{check_exec, check_policy, Check, Validator};
use super::Config;

const THINKING_LEVELS: [&str; 7] = [
    "off", "minimal", "low", "medium", "high", "xhigh", "adaptive",
];

pub(crate) fn check_agents(v: &Validator, config: &Config) -> Check {
    let refs = ModelRefs::new(config);
    check_mention_patterns(
        v,
        config.messages.group_chat.mention_patterns.as_deref(),
        "messages.groupChat.mentionPatterns",
    )?;
    check_defaults(v, &refs, &config.agents.defaults)?;
    check_list(v, &refs, &config.agents.list)
}

fn check_defaults(v: &Validator, refs: &ModelRefs, defaults: &AgentDefaults) -> Check {
    let at = |key: &str| format!("agents.defaults.{key}");
    refs.check_model(v, defaults.model.as_ref(), &at("model"))?;
    v.one_of(
        defaults.thinking_default.as_deref(),
        &THINKING_LEVELS,
        &at("thinkingDefault"),
    )?;
    v.one_of(
        defaults.block_streaming_default.as_deref(),
        &["off", "on"],
        &at("blockStreamingDefault"),
    )?;
    super::validate::check_typing(
        v,
        defaults.typing_mode,
        defaults.typing_interval_seconds,
        "agents.defaults",
    )?;
    let breaks = ["text_end", "message_end"];
    v.one_of(
        defaults.block_streaming_break.as_deref(),
        &breaks,
        &at("blockStreamingBreak"),
    )?;
    // Blocks go out as the chunker closes them (upstream's `text_end`);
    // holding them to the end of each model message is not implemented.
    if defaults.block_streaming_break.as_deref() == Some("message_end") {
        return Err(v.fail(
            at("blockStreamingBreak"),
            "\"message_end\" is not supported by pincer (blocks are sent as they are written; use \"text_end\")",
        ));
    }
    v.range(defaults.max_concurrent, 1, u32::MAX, &at("maxConcurrent"))?;
    check_heartbeat(v, refs, defaults.heartbeat.as_ref(), &at("heartbeat"))?;
    check_memory_layer(v, defaults.memory_search.as_ref(), &at("memorySearch"))?;
    check_sandbox(v, defaults.sandbox.as_ref(), &at("sandbox"))?;
    check_default_limits(v, refs, defaults)
}

/// Sub-agent, compaction and context-pruning ranges.
fn check_default_limits(v: &Validator, refs: &ModelRefs, defaults: &AgentDefaults) -> Check {
    let at = |key: &str| format!("agents.defaults.{key}");
    if let Some(sub) = &defaults.subagents {
        v.range(sub.max_spawn_depth, 1, 5, &at("subagents.maxSpawnDepth"))?;
        v.range(
            sub.max_children_per_agent,
            1,
            20,
            &at("subagents.maxChildrenPerAgent"),
        )?;
        v.range(
            sub.max_concurrent,
            1,
            u32::MAX,
            &at("subagents.maxConcurrent"),
        )?;
        refs.check_model(v, sub.model.as_ref(), &at("subagents.model"))?;
        v.one_of(
            sub.thinking.as_deref(),
            &THINKING_LEVELS,
            &at("subagents.thinking"),
        )?;
    }
    if let Some(compaction) = &defaults.compaction {
        refs.check_ref(v, compaction.model.as_deref(), &at("compaction.model"))?;
        // pincer's compaction is the baseline summary of the older turns (upstream's "default"); the
        // safeguard extension (structured summaries, quality audits and retries) is not implemented.
        if compaction.mode == Some(CompactionMode::Safeguard) {
            return Err(v.fail(
                at("compaction.mode"),
                "\"safeguard\" is not supported by pincer (compaction writes one plain summary of the older turns; use \"default\")",
            ));
        }
        v.range(
            compaction.timeout_seconds,
            1,
            u32::MAX,
            &at("compaction.timeoutSeconds"),
        )?;
    }
    if let Some(pruning) = &defaults.context_pruning {
        v.duration(
            pruning.ttl.as_deref(),
            DurationUnit::Minutes,
            &at("contextPruning.ttl"),
        )?;
        v.range(
            pruning.soft_trim_ratio,
            0.0,
            1.0,
            &at("contextPruning.softTrimRatio"),
        )?;
        v.range(
            pruning.hard_clear_ratio,
            0.0,
            1.0,
            &at("contextPruning.hardClearRatio"),
        )?;
    }
    Ok(())
}

fn check_list(v: &Validator, refs: &ModelRefs, list: &[AgentEntry]) -> Check {
    let mut seen = HashSet::new();
    for (i, agent) in list.iter().enumerate() {
        let at = |key: &str| format!("agents.list[{i}].{key}");
        let id = agent.id.trim();
        v.ensure(!id.is_empty(), at("id"), "must not be empty")?;
        v.ensure(
            seen.insert(id),
            at("id"),
            format!("duplicate agent id {id:?}"),
        )?;
        refs.check_model(v, agent.model.as_ref(), &at("model"))?;
        v.one_of(
            agent.thinking_default.as_deref(),
            &THINKING_LEVELS,
            &at("thinkingDefault"),
        )?;
        check_heartbeat(v, refs, agent.heartbeat.as_ref(), &at("heartbeat"))?;
        check_memory_layer(v, agent.memory_search.as_ref(), &at("memorySearch"))?;
        check_sandbox(v, agent.sandbox.as_ref(), &at("sandbox"))?;
        if let Some(sub) = &agent.subagents {
            refs.check_model(v, sub.model.as_ref(), &at("subagents.model"))?;
            v.one_of(
                sub.thinking.as_deref(),
                &THINKING_LEVELS,
                &at("subagents.thinking"),
            )?;
        }
        if let Some(tools) = &agent.tools {
            check_policy(v, &tools.allow, &tools.also_allow, &at("tools"))?;
            if let Some(exec) = &tools.exec {
                check_exec(v, exec, &at("tools.exec"))?;
            }
        }
        if let Some(group_chat) = &agent.group_chat {
            check_mention_patterns(
                v,
                group_chat.mention_patterns.as_deref(),
                &at("groupChat.mentionPatterns"),
            )?;
        }
    }
    Ok(())
}

/// Mention patterns must compile as regular expressions within the size
/// limit (upstream drops a bad pattern with a warning; pincer refuses it, so
/// a gate the user relies on is never silently missing).
fn check_mention_patterns(v: &Validator, patterns: Option<&[String]>, path: &str) -> Check {
    let Some(patterns) = patterns else {
        return Ok(());
    };
    v.ensure(
        patterns.len() <= common::MAX_MENTION_PATTERNS,
        path,
        format!(
            "at most {} patterns, got {}",
            common::MAX_MENTION_PATTERNS,
            patterns.len()
        ),
    )?;
    for (i, pattern) in patterns.iter().enumerate() {
        regex_lite::RegexBuilder::new(pattern)
            .case_insensitive(true)
            .size_limit(common::MAX_MENTION_PATTERN_BYTES)
            .build()
            .map_err(|e| {
                let reason = e.to_string().lines().last().unwrap_or_default().to_string();
                v.fail(
                    format!("{path}[{i}]"),
                    format!("{pattern:?} is not a valid regular expression: {reason}"),
                )
            })?;
    }
    Ok(())
}

/// Model references must be `provider/model` (pincer has no model
/// aliases: upstream's `agents.defaults.models` is not supported).
struct ModelRefs;

impl ModelRefs {
    fn new(_config: &Config) -> Self {
        ModelRefs
    }

    fn check_ref(&self, v: &Validator, model: Option<&str>, path: &str) -> Check {
        let Some(model) = model else { return Ok(()) };
        let well_formed = model
            .split_once('/')
            .is_some_and(|(provider, id)| !provider.trim().is_empty() && !id.trim().is_empty());
        v.ensure(
            well_formed,
            path,
            format!("model reference {model:?} must look like \"provider/model\""),
        )
    }

    fn check_model(&self, v: &Validator, model: Option<&AgentModelConfig>, path: &str) -> Check {
        let Some(model) = model else { return Ok(()) };
        match model {
            AgentModelConfig::Ref(model) => self.check_ref(v, Some(model), path),
            AgentModelConfig::Chain(chain) => {
                self.check_ref(v, chain.primary.as_deref(), &format!("{path}.primary"))?;
                chain.fallbacks.iter().enumerate().try_for_each(|(i, f)| {
                    self.check_ref(v, Some(f), &format!("{path}.fallbacks[{i}]"))
                })
            }
        }
    }
}

fn check_heartbeat(
    v: &Validator,
    refs: &ModelRefs,
    heartbeat: Option<&HeartbeatConfig>,
    path: &str,
) -> Check {
    let Some(heartbeat) = heartbeat else {
        return Ok(());
    };
    v.duration(
        heartbeat.every.as_deref(),
        DurationUnit::Minutes,
        &format!("{path}.every"),
    )?;
    refs.check_ref(v, heartbeat.model.as_deref(), &format!("{path}.model"))?;
    if let Some(hours) = &heartbeat.active_hours {
        check_clock(
            v,
            hours.start.as_deref(),
            false,
            &format!("{path}.activeHours.start"),
        )?;
        check_clock(
            v,
            hours.end.as_deref(),
            true,
            &format!("{path}.activeHours.end"),
        )?;
    }
    Ok(())
}

/// "HH:MM" 24-hour time; "24:00" only where `allow_24` (window end).
fn check_clock(v: &Validator, time: Option<&str>, allow_24: bool, path: &str) -> Check {
    let Some(time) = time else { return Ok(()) };
    let parsed = time
        .split_once(':')
        .filter(|(h, m)| h.len() == 2 && m.len() == 2)
        .and_then(|(h, m)| Some((h.parse::<u32>().ok()?, m.parse::<u32>().ok()?)));
    let valid = match parsed {
        Some((24, 0)) => allow_24,
        Some((h, m)) => h < 24 && m < 60,
        None => false,
    };
    v.ensure(
        valid,
        path,
        format!("invalid time {time:?} (use \"HH:MM\" 24h format)"),
    )
}

pub(crate) fn check_memory_layer(
    v: &Validator,
    layer: Option<&MemorySearchConfig>,
    path: &str,
) -> Check {
    let Some(query) = layer.and_then(|l| l.query.as_ref()) else {
        return Ok(());
    };
    v.range(query.min_score, 0.0, 1.0, &format!("{path}.query.minScore"))?;
    if let Some(hybrid) = &query.hybrid {
        v.range(
            hybrid.vector_weight,
            0.0,
            1.0,
            &format!("{path}.query.hybrid.vectorWeight"),
        )?;
        v.range(
            hybrid.text_weight,
            0.0,
            1.0,
            &format!("{path}.query.hybrid.textWeight"),
        )?;
        let lambda = hybrid.mmr.as_ref().and_then(|m| m.lambda);
        v.range(lambda, 0.0, 1.0, &format!("{path}.query.hybrid.mmr.lambda"))?;
    }
    Ok(())
}

fn check_sandbox(v: &Validator, sandbox: Option<&SandboxConfig>, path: &str) -> Check {
    let Some(limits) = sandbox.and_then(|s| s.docker.as_ref()) else {
        return Ok(());
    };
    let network = limits
        .network
        .as_deref()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    v.ensure(
        network != "host" && !network.starts_with("container:"),
        format!("{path}.docker.network"),
        format!(
            "Sandbox security: network mode {network:?} is blocked (use \"none\" or \"bridge\")"
        ),
    )?;
    // The sandbox's network is its own namespace with only `lo` (upstream's default "none"); there
    // is no bridged network to give it (`sandbox.network: "host"` shares the host's instead).
    if !network.is_empty() && network != "none" {
        return Err(v.fail(
            format!("{path}.docker.network"),
            format!("{network:?} is not supported by pincer (sandboxed commands have no network but loopback: \"none\"; sandbox.network: \"host\" shares the host's)"),
        ));
    }
    if let Some(user) = &limits.user {
        v.ensure(
            parse_sandbox_user(user).is_some(),
            format!("{path}.docker.user"),
            format!("{user:?} must be a numeric \"uid\" or \"uid:gid\" (the sandbox has no user database for names)"),
        )?;
    }
    v.size(limits.memory.as_deref(), &format!("{path}.docker.memory"))?;
    v.range(limits.cpus, 0.01, 1024.0, &format!("{path}.docker.cpus"))?;
    for (name, value) in &limits.ulimits {
        let at = format!("{path}.docker.ulimits.{name}");
        v.ensure(
            SANDBOX_ULIMITS.contains(&name.as_str()),
            at.clone(),
            format!(
                "the ulimit {name:?} is not supported by pincer (its sandbox sets {})",
                SANDBOX_ULIMITS.join(", ")
            ),
        )?;
        let (soft, hard) = match *value {
            Ulimit::Both(n) => (Some(n), Some(n)),
            Ulimit::Pair { soft, hard } => (soft, hard),
        };
        v.ensure(
            soft.is_some() || hard.is_some(),
            at.clone(),
            "needs a value (a number, \"soft:hard\" or {soft, hard})",
        )?;
        v.ensure(
            soft.is_none() || hard.is_none() || soft == hard,
            at.clone(),
            "pincer's sandbox sets one value as both the soft and the hard limit: give a single number",
        )?;
        v.ensure(
            soft.or(hard).is_some_and(|n| n > 0),
            at,
            "must be greater than zero",
        )?;
    }
    Ok(())
}

/// The rlimits pincer's sandbox sets, by their Docker (`ulimit`) names.
const SANDBOX_ULIMITS: [&str; 4] = ["cpu", "fsize", "nofile", "nproc"];
