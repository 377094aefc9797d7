//! Semantic checks that types cannot express: port 0, the custom bind
//! host, the auth modes pincer lacks and Tailscale requirements, unique agent ids, model
//! references, duration and size text, numeric ranges and tool policy
//! conflicts. Agent rules (models, heartbeat, sandbox, memory) are in
//! `validate_agents.rs`, channel allow-list rules in `validate_channels.rs`.
//!
//! Each failure is a [`ConfigError::Invalid`] naming the JSON path and the
//! rule, with upstream's wording where upstream has one. Checks only read.

use std::collections::HashSet;
use std::net::Ipv4Addr;

use super::duration::{parse_byte_size, parse_duration_ms, DurationUnit};
use super::error::ConfigError;
use super::schema::*;
use super::validate_agents::{check_agents, check_memory_layer};
use super::validate_channels::check_channels;
use super::Config;

pub(crate) type Check = Result<(), ConfigError>;

/// Names the file in every error.
pub(crate) struct Validator<'a> {
    pub origin: &'a str,
}

impl Validator<'_> {
    pub fn fail(&self, path: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError::invalid(self.origin, path, message)
    }

    pub fn ensure(&self, ok: bool, path: impl Into<String>, message: impl Into<String>) -> Check {
        if ok {
            Ok(())
        } else {
            Err(self.fail(path, message))
        }
    }

    pub fn duration(&self, text: Option<&str>, unit: DurationUnit, path: &str) -> Check {
        match text {
            Some(text) => parse_duration_ms(text, unit)
                .map(|_| ())
                .map_err(|e| self.fail(path, e.to_string())),
            None => Ok(()),
        }
    }

    pub fn size(&self, text: Option<&str>, path: &str) -> Check {
        match text {
            Some(text) => parse_byte_size(text)
                .map(|_| ())
                .map_err(|e| self.fail(path, e.to_string())),
            None => Ok(()),
        }
    }

    pub fn range<T: PartialOrd + Copy + std::fmt::Display>(
        &self,
        value: Option<T>,
        min: T,
        max: T,
        path: &str,
    ) -> Check {
        match value {
            Some(v) if v < min || v > max => {
                Err(self.fail(path, format!("must be between {min} and {max}, got {v}")))
            }
            _ => Ok(()),
        }
    }

    pub fn one_of(&self, value: Option<&str>, allowed: &[&str], path: &str) -> Check {
        match value {
            Some(v) if !allowed.contains(&v) => Err(self.fail(
                path,
                format!("must be one of {}, got {v:?}", allowed.join(", ")),
            )),
            _ => Ok(()),
        }
    }
}

/// Runs every semantic check; the first failure is returned.
pub(crate) fn validate(config: &Config, origin: &str) -> Check {
    let v = Validator { origin };
    check_gateway(&v, &config.gateway)?;
    check_agents(&v, config)?;
    check_models(&v, &config.models)?;
    check_session(&v, &config.session)?;
    check_routing(&v, config)?;
    check_cron(&v, &config.cron)?;
    check_tools(&v, &config.tools)?;
    check_memory_layer(&v, config.memory.search.as_ref(), "memory.search")?;
    check_commands(&v, &config.commands)?;
    check_topic_agents(&v, config)?;
    check_tts_layers(&v, config)?;
    check_channels(&v, &config.channels)
}

/// `tts` and each channel's and account's `tts` block.
fn check_tts_layers(v: &Validator, config: &Config) -> Check {
    check_tts(v, &config.tts, "tts")?;
    let channels = &config.channels;
    let mut layers: Vec<(String, Option<&TtsConfig>)> = Vec::new();
    if let Some(c) = &channels.telegram {
        layers.push(("channels.telegram.tts".into(), c.tts.as_ref()));
        for (id, a) in &c.accounts {
            layers.push((
                format!("channels.telegram.accounts.{id}.tts"),
                a.tts.as_ref(),
            ));
        }
    }
    if let Some(c) = &channels.discord {
        layers.push(("channels.discord.tts".into(), c.tts.as_ref()));
        for (id, a) in &c.accounts {
            layers.push((
                format!("channels.discord.accounts.{id}.tts"),
                a.tts.as_ref(),
            ));
        }
    }
    if let Some(c) = &channels.slack {
        layers.push(("channels.slack.tts".into(), c.tts.as_ref()));
        for (id, a) in &c.accounts {
            layers.push((format!("channels.slack.accounts.{id}.tts"), a.tts.as_ref()));
        }
    }
    for (path, layer) in layers {
        if let Some(layer) = layer {
            check_tts(v, layer, &path)?;
        }
    }
    Ok(())
}

/// One `tts` block: what pincer speaks with (`schema/tts.rs`).
fn check_tts(v: &Validator, tts: &TtsConfig, path: &str) -> Check {
    v.one_of(
        tts.auto.as_deref(),
        &["off", "always", "inbound", "tagged"],
        &format!("{path}.auto"),
    )?;
    if tts.mode.as_deref() == Some("all") {
        return Err(v.fail(
            format!("{path}.mode"),
            "\"all\" is not supported by pincer (only the final reply is spoken)",
        ));
    }
    v.one_of(tts.mode.as_deref(), &["final"], &format!("{path}.mode"))?;
    let only_openai = "is not supported by pincer (it speaks through the openai provider: an OpenAI-compatible /audio/speech endpoint)";
    if let Some(provider) = tts.provider.as_deref().filter(|p| *p != "openai") {
        return Err(v.fail(
            format!("{path}.provider"),
            format!("{provider:?} {only_openai}"),
        ));
    }
    for (id, provider) in &tts.providers {
        if id != "openai" {
            return Err(v.fail(format!("{path}.providers.{id}"), only_openai));
        }
        let readable = ["opus", "wav", "pcm"];
        if let Some(format) = provider
            .response_format
            .as_deref()
            .filter(|f| !readable.contains(f))
        {
            return Err(v.fail(
                format!("{path}.providers.openai.responseFormat"),
                format!("{format:?} is not supported by pincer (spoken replies are Ogg/Opus voice notes; pincer takes \"opus\" as it is and encodes \"wav\" or \"pcm\", not compressed formats)"),
            ));
        }
    }
    v.range(
        tts.max_text_length,
        1,
        usize::MAX,
        &format!("{path}.maxTextLength"),
    )?;
    v.range(tts.timeout_ms, 1000, 120_000, &format!("{path}.timeoutMs"))
}

/// A Telegram forum topic's `agentId` names a configured agent (a typo would otherwise route the
/// topic to the default agent without a word).
fn check_topic_agents(v: &Validator, config: &Config) -> Check {
    let Some(telegram) = &config.channels.telegram else {
        return Ok(());
    };
    let known = |id: &str| {
        let id = id.trim();
        config.agents.entry(id).is_some() || id == config.agents.default_agent_id()
    };
    let mut accounts: Vec<(
        String,
        &std::collections::BTreeMap<String, crate::config::TelegramGroupConfig>,
    )> = Vec::new();
    if let Some(groups) = &telegram.groups {
        accounts.push(("channels.telegram".into(), groups));
    }
    for (id, account) in &telegram.accounts {
        if let Some(groups) = &account.groups {
            accounts.push((format!("channels.telegram.accounts.{id}"), groups));
        }
    }
    for (path, groups) in accounts {
        for (group, entry) in groups {
            for (topic, topic_entry) in &entry.topics {
                if let Some(agent) = &topic_entry.agent_id {
                    v.ensure(
                        known(agent),
                        format!("{path}.groups.{group}.topics.{topic}.agentId"),
                        format!("{agent:?} is not an agent of agents.list"),
                    )?;
                }
            }
        }
    }
    Ok(())
}

/// The `commands` settings pincer cannot honour are refused (with the value
/// that would work): it registers no native command menus (so text commands
/// are the only ones and cannot be turned off), has no `!`/`/bash`,
/// `/config` or `/debug` command, and always checks the channel's access
/// rules before a command.
fn check_commands(v: &Validator, commands: &CommandsConfig) -> Check {
    let unsupported = |path: &str, value: &str, why: &str| {
        Err(v.fail(path, format!("{value} is not supported by pincer ({why})")))
    };
    for (path, setting) in [
        ("commands.native", commands.native),
        ("commands.nativeSkills", commands.native_skills),
    ] {
        match setting {
            NativeSetting::Off => {}
            NativeSetting::On => unsupported(
                path,
                "true",
                "it registers no native command menus; use false",
            )?,
            NativeSetting::Auto => unsupported(
                path,
                "\"auto\"",
                "it registers no native command menus; use false",
            )?,
        }
    }
    if !commands.text {
        unsupported(
            "commands.text",
            "false",
            "without native commands, text commands are the only commands, as on OpenClaw's surfaces without native commands",
        )?;
    }
    if commands.bash {
        unsupported(
            "commands.bash",
            "true",
            "there is no `!`/`/bash` chat command",
        )?;
    }
    if commands.bash_foreground_ms != DEFAULT_BASH_FOREGROUND_MS {
        unsupported(
            "commands.bashForegroundMs",
            &commands.bash_foreground_ms.to_string(),
            "there is no `!`/`/bash` chat command",
        )?;
    }
    if commands.config {
        unsupported(
            "commands.config",
            "true",
            "there is no `/config` chat command",
        )?;
    }
    if commands.debug {
        unsupported(
            "commands.debug",
            "true",
            "there is no `/debug` chat command",
        )?;
    }
    if !commands.use_access_groups {
        unsupported(
            "commands.useAccessGroups",
            "false",
            "commands always obey the channel's dmPolicy, groupPolicy and allowlists",
        )?;
    }
    Ok(())
}

fn check_gateway(v: &Validator, gateway: &GatewayConfig) -> Check {
    v.ensure(
        gateway.port != 0,
        "gateway.port",
        "must be between 1 and 65535, got 0",
    )?;
    // pincer is the gateway: upstream's "remote" points a CLI at another machine's gateway.
    if gateway.mode == Some(crate::config::GatewayMode::Remote) {
        return Err(v.fail(
            "gateway.mode",
            "\"remote\" is not supported by pincer (pincer runs the gateway on this machine; use \"local\" or leave it out)",
        ));
    }
    if gateway.bind == BindMode::Custom {
        let host = gateway.custom_bind_host.as_deref().unwrap_or("").trim();
        v.ensure(
            !host.is_empty(),
            "gateway.customBindHost",
            "is required when gateway.bind is \"custom\"",
        )?;
        v.ensure(
            host.parse::<Ipv4Addr>().is_ok(),
            "gateway.customBindHost",
            format!("must be an IPv4 address, got {host:?}"),
        )?;
    }
    check_gateway_auth(v, gateway)?;
    check_control_ui(v, &gateway.control_ui)?;
    v.range(
        gateway.http.endpoints.chat_completions.max_body_bytes,
        1,
        u64::MAX,
        "gateway.http.endpoints.chatCompletions.maxBodyBytes",
    )?;
    v.range(
        gateway.webchat.chat_history_max_chars,
        1,
        500_000,
        "gateway.webchat.chatHistoryMaxChars",
    )
}

/// `gateway.controlUi`: a base path of plain path segments, origins written
/// as `scheme://host[:port]` (what a browser sends in `Origin`) or `*`.
fn check_control_ui(v: &Validator, ui: &ControlUiConfig) -> Check {
    if let Some(base) = ui.base_path.as_deref() {
        let segments_ok = base.trim().trim_matches('/').split('/').all(|segment| {
            segment.is_empty()
                || (segment != "."
                    && segment != ".."
                    && segment
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-._~".contains(c)))
        });
        v.ensure(
            segments_ok && !base.contains("//"),
            "gateway.controlUi.basePath",
            format!("must be a path like \"/pincer\" (letters, digits, - . _ ~ between slashes), got {base:?}"),
        )?;
    }
    for (i, origin) in ui.allowed_origins.iter().enumerate() {
        v.ensure(
            is_origin_pattern(origin.trim()),
            format!("gateway.controlUi.allowedOrigins[{i}]"),
            format!("must be an origin like \"https://host:8443\" (scheme, host, optional port; no path) or \"*\", got {origin:?}"),
        )?;
    }
    Ok(())
}

/// `*`, or `scheme://host[:port]` with nothing after the host but one optional `/`.
fn is_origin_pattern(origin: &str) -> bool {
    if origin == "*" {
        return true;
    }
    let Some((scheme, rest)) = origin.split_once("://") else {
        return false;
    };
    let host = rest.strip_suffix('/').unwrap_or(rest);
    let scheme_ok = scheme
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c));
    scheme_ok && !host.is_empty() && !host.contains(['/', '?', '#', '@', '\\', ' '])
}

/// The auth mode pincer lacks, refused by name, and the Tailscale exposure rules.
///
/// Trusted-proxy auth (a user header from `gateway.trustedProxies`) is not implemented:
/// accepting it would leave a user believing the proxy lets them in. Its keys, and Tailscale
/// identity headers (`allowTailscale`), are in `unsupported.rs`.
fn check_gateway_auth(v: &Validator, gateway: &GatewayConfig) -> Check {
    let auth = &gateway.auth;
    v.ensure(
        auth.mode != Some(AuthMode::TrustedProxy),
        "gateway.auth.mode",
        "`gateway.auth.mode: trusted-proxy` is not supported by pincer (use \"token\" or \"password\")",
    )?;
    if gateway.tailscale.mode != TailscaleMode::Off {
        v.ensure(
            gateway.bind == BindMode::Loopback,
            "gateway.bind",
            "must be \"loopback\" when gateway.tailscale.mode is serve or funnel",
        )?;
    }
    if gateway.tailscale.mode == TailscaleMode::Funnel {
        v.ensure(
            auth.effective_mode() == AuthMode::Password,
            "gateway.auth.mode",
            "must be \"password\" when gateway.tailscale.mode is \"funnel\"",
        )?;
    }
    Ok(())
}

fn check_models(v: &Validator, models: &ModelsConfig) -> Check {
    v.one_of(models.mode.as_deref(), &["merge", "replace"], "models.mode")?;
    for (name, provider) in &models.providers {
        let path = format!("models.providers.{name}");
        v.ensure(
            !provider.base_url.trim().is_empty(),
            format!("{path}.baseUrl"),
            "is required",
        )?;
        for (i, model) in provider.models.iter().enumerate() {
            let model_path = format!("{path}.models[{i}]");
            v.ensure(
                !model.id.trim().is_empty(),
                format!("{model_path}.id"),
                "must not be empty",
            )?;
            for (j, input) in model.input.iter().enumerate() {
                v.one_of(
                    Some(input),
                    &["text", "image"],
                    &format!("{model_path}.input[{j}]"),
                )?;
            }
        }
    }
    Ok(())
}

/// `typingMode` `thinking` and `message` (typing started by the first
/// reasoning or text delta) are not implemented: pincer shows typing from
/// the moment the message is queued (`instant`) or never.
pub(crate) fn check_typing(
    v: &Validator,
    mode: Option<TypingMode>,
    interval_seconds: Option<u32>,
    at: &str,
) -> Check {
    let value = match mode {
        Some(TypingMode::Thinking) => Some("\"thinking\""),
        Some(TypingMode::Message) => Some("\"message\""),
        _ => None,
    };
    if let Some(value) = value {
        return Err(v.fail(
            format!("{at}.typingMode"),
            format!("{value} is not supported by pincer (typing starts when the message is queued; use \"instant\" or \"never\")"),
        ));
    }
    v.range(
        interval_seconds,
        1,
        MAX_TYPING_INTERVAL_SECONDS,
        &format!("{at}.typingIntervalSeconds"),
    )
}

fn check_session(v: &Validator, session: &SessionConfig) -> Check {
    check_typing(
        v,
        session.typing_mode,
        session.typing_interval_seconds,
        "session",
    )?;
    v.one_of(
        session.scope.as_deref(),
        &["per-sender", "global"],
        "session.scope",
    )?;
    v.ensure(
        !session.main_key.trim().is_empty(),
        "session.mainKey",
        "must not be empty",
    )?;
    let resets = session
        .reset
        .iter()
        .map(|r| ("session.reset".to_string(), r))
        .chain(
            session
                .reset_by_channel
                .iter()
                .map(|(k, r)| (format!("session.resetByChannel.{k}"), r)),
        )
        .chain(session.reset_by_type.iter().flat_map(|types| {
            [
                ("direct", &types.direct),
                ("dm", &types.dm),
                ("group", &types.group),
                ("thread", &types.thread),
            ]
            .into_iter()
            .filter_map(|(kind, r)| {
                r.as_ref()
                    .map(|r| (format!("session.resetByType.{kind}"), r))
            })
        }));
    for (path, reset) in resets {
        v.range(reset.at_hour, 0, 23, &format!("{path}.atHour"))?;
    }
    v.range(
        Some(session.agent_to_agent.max_ping_pong_turns),
        0,
        MAX_PING_PONG_TURNS,
        "session.agentToAgent.maxPingPongTurns",
    )?;
    let maintenance = &session.maintenance;
    v.one_of(
        maintenance.mode.as_deref(),
        &["enforce", "warn"],
        "session.maintenance.mode",
    )?;
    v.duration(
        maintenance.prune_after.as_deref(),
        DurationUnit::Days,
        "session.maintenance.pruneAfter",
    )?;
    v.ensure(
        maintenance.max_entries > 0,
        "session.maintenance.maxEntries",
        "must be at least 1",
    )?;
    v.size(
        maintenance.max_disk_bytes.as_deref(),
        "session.maintenance.maxDiskBytes",
    )?;
    v.size(
        maintenance.high_water_bytes.as_deref(),
        "session.maintenance.highWaterBytes",
    )
}

fn check_routing(v: &Validator, config: &Config) -> Check {
    for (i, binding) in config.bindings.iter().enumerate() {
        let path = format!("bindings[{i}]");
        v.ensure(
            !binding.agent_id.trim().is_empty(),
            format!("{path}.agentId"),
            "is required",
        )?;
        v.ensure(
            !binding.r#match.channel.trim().is_empty(),
            format!("{path}.match.channel"),
            "is required",
        )?;
    }
    let known: HashSet<&str> = config.agents.list.iter().map(|a| a.id.as_str()).collect();
    if known.is_empty() {
        return Ok(());
    }
    for (peer, agents) in &config.broadcast.peers {
        for (i, agent) in agents.iter().enumerate() {
            v.ensure(
                known.contains(agent.as_str()),
                format!("broadcast.{peer}[{i}]"),
                format!("Unknown agent id {agent:?} (not in agents.list)."),
            )?;
        }
    }
    Ok(())
}

fn check_cron(v: &Validator, cron: &CronConfig) -> Check {
    v.ensure(
        cron.max_concurrent_runs != Some(0),
        "cron.maxConcurrentRuns",
        "must be at least 1",
    )?;
    Ok(())
}

fn check_tools(v: &Validator, tools: &ToolsConfig) -> Check {
    check_policy(v, &tools.allow, &tools.also_allow, "tools")?;
    for (key, policy) in &tools.by_provider {
        check_policy(
            v,
            &policy.allow,
            &policy.also_allow,
            &format!("tools.byProvider.{key}"),
        )?;
    }
    check_exec(v, &tools.exec, "tools.exec")?;
    check_media(v, &tools.media)?;
    let fetch = &tools.web.fetch;
    v.range(fetch.max_chars, 1, u32::MAX, "tools.web.fetch.maxChars")?;
    v.range(
        Some(fetch.max_chars_cap),
        1,
        u32::MAX,
        "tools.web.fetch.maxCharsCap",
    )?;
    v.range(
        fetch.timeout_seconds,
        1,
        86_400,
        "tools.web.fetch.timeoutSeconds",
    )?;
    v.range(
        fetch.cache_ttl_minutes,
        0.0,
        525_600.0,
        "tools.web.fetch.cacheTtlMinutes",
    )?;
    if let Some(loops) = &tools.loop_detection {
        if let (Some(warn), Some(crit)) = (loops.warning_threshold, loops.critical_threshold) {
            v.ensure(
                warn < crit,
                "tools.loopDetection.criticalThreshold",
                "tools.loopDetection.warningThreshold must be lower than criticalThreshold.",
            )?;
        }
    }
    Ok(())
}

/// `tools.media`: provider entries only, tagged `audio` (images go to the reply model itself),
/// positive limits.
fn check_media(v: &Validator, media: &MediaToolsConfig) -> Check {
    for (i, entry) in media.models.iter().enumerate() {
        let path = format!("tools.media.models[{i}]");
        if entry.kind.as_deref() == Some("cli") {
            return Err(v.fail(
                format!("{path}.type"),
                "\"cli\" is not supported by pincer (it runs no media CLIs; use a provider entry with an OpenAI-compatible /audio/transcriptions endpoint)",
            ));
        }
        v.one_of(
            entry.kind.as_deref(),
            &["provider"],
            &format!("{path}.type"),
        )?;
        v.ensure(
            entry
                .provider
                .as_deref()
                .is_some_and(|p| !p.trim().is_empty()),
            format!("{path}.provider"),
            "a provider entry needs a provider (a models.providers id)",
        )?;
        for (j, capability) in entry.capabilities.iter().enumerate() {
            let at = format!("{path}.capabilities[{j}]");
            match capability.as_str() {
                "audio" => {}
                "image" | "video" => {
                    return Err(v.fail(
                        at,
                        format!("{capability:?} is not supported by pincer (images go to the reply model as image parts when its models.providers entry lists input \"image\"; no description model runs; video is not handled)"),
                    ))
                }
                other => {
                    return Err(v.fail(at, format!("must be audio, image or video, got {other:?}")))
                }
            }
        }
        v.range(entry.max_bytes, 1, u64::MAX, &format!("{path}.maxBytes"))?;
        v.range(entry.max_chars, 1, usize::MAX, &format!("{path}.maxChars"))?;
        v.range(
            entry.timeout_seconds,
            1,
            86_400,
            &format!("{path}.timeoutSeconds"),
        )?;
    }
    let audio = &media.audio;
    v.range(audio.max_bytes, 1, u64::MAX, "tools.media.audio.maxBytes")?;
    v.range(audio.max_chars, 1, usize::MAX, "tools.media.audio.maxChars")?;
    v.range(
        audio.timeout_seconds,
        1,
        86_400,
        "tools.media.audio.timeoutSeconds",
    )?;
    v.range(
        media.image.max_bytes,
        1,
        u64::MAX,
        "tools.media.image.maxBytes",
    )?;
    Ok(())
}

/// `timeoutSec` of at least a second (a day at most), a positive `backgroundMs` (as upstream's
/// schema; the exec tool keeps the window within 10 ms..120 s) and `pathPrepend` directories as
/// `PATH` can hold them.
pub(crate) fn check_exec(v: &Validator, exec: &ExecToolConfig, path: &str) -> Check {
    if exec.host == Some(crate::config::ExecHost::Node) {
        return Err(v.fail(
            format!("{path}.host"),
            "\"node\" is not supported by pincer (no paired node hosts; use \"auto\", \"sandbox\" or \"gateway\")",
        ));
    }
    v.range(exec.timeout_sec, 1, 86_400, &format!("{path}.timeoutSec"))?;
    v.ensure(
        exec.background_ms != Some(0),
        format!("{path}.backgroundMs"),
        "must be a positive number of milliseconds (the exec tool waits 10 ms at least and 120000 ms at most before a command continues in the background)".to_owned(),
    )?;
    v.range(
        exec.cleanup_ms,
        1,
        7 * 86_400_000,
        &format!("{path}.cleanupMs"),
    )?;
    for (i, dir) in exec.path_prepend.iter().flatten().enumerate() {
        v.ensure(
            dir.starts_with('/') && !dir.contains(':'),
            format!("{path}.pathPrepend[{i}]"),
            format!("{dir:?} must be an absolute directory without ':' (as the command sees it; `~` is not expanded)"),
        )?;
    }
    Ok(())
}

pub(crate) fn check_policy(
    v: &Validator,
    allow: &[String],
    also_allow: &[String],
    path: &str,
) -> Check {
    v.ensure(
        allow.is_empty() || also_allow.is_empty(),
        format!("{path}.alsoAllow"),
        "cannot set both allow and alsoAllow in the same scope (merge alsoAllow into allow, or remove allow and use profile + alsoAllow)",
    )
}
