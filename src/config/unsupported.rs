//! OpenClaw keys pincer knows and does not implement.
//!
//! The schema holds only keys pincer honours. A key in this table is one
//! OpenClaw's own schema accepts (its zod `OpenClawSchema`), so a config
//! written for OpenClaw that uses it fails with "`<path>` is not supported
//! by pincer" rather than "unknown key", and `config import-openclaw`
//! drops it with that reason. Patterns use `*` for one map entry (an
//! account, a provider, a model) and `[]` for a list element. Keys under
//! `channels.<platform>.accounts.<id>` are matched as the channel's own.

/// Upstream keys pincer does not implement, by section.
pub const UNSUPPORTED_KEYS: &[&str] = &[
    // Top-level sections pincer has no counterpart for.
    "acp",
    "approvals",
    "audio",
    "auth",
    "browser",
    "canvasHost",
    "cli",
    "crestodian",
    "diagnostics",
    "discovery.wideArea",
    "env",
    "hooks",
    "mcp",
    "media",
    "nodeHost",
    "plugins",
    "proxy",
    "secrets",
    "skills",
    "surfaces",
    "talk",
    "ui",
    "update",
    "web",
    "wizard",
    // logging: only `level` is honoured
    "logging.file",
    "logging.maxFileBytes",
    "logging.consoleLevel",
    "logging.consoleStyle",
    "logging.redactSensitive",
    "logging.redactPatterns",
    // gateway
    // gateway.controlUi: enabled, basePath, allowedOrigins and allowInsecureAuth are honoured
    "gateway.controlUi.dangerouslyDisableDeviceAuth",
    "gateway.controlUi.dangerouslyAllowHostHeaderOriginFallback",
    "gateway.controlUi.root",
    "gateway.controlUi.experimental",
    "gateway.controlUi.environment",
    "gateway.controlUi.communityInvite",
    "gateway.controlUi.github",
    "gateway.controlUi.sessionObserver",
    "gateway.controlUi.embedSandbox",
    "gateway.controlUi.allowExternalEmbedUrls",
    "gateway.controlUi.automaticallyFetchFavicons",
    "gateway.channelHealthCheckMinutes",
    "gateway.tls.caPath",
    "gateway.channelStaleEventThresholdMinutes",
    "gateway.channelMaxRestartsPerHour",
    "gateway.reload.deferralTimeoutMs",
    "gateway.http.endpoints.chatCompletions.maxImageParts",
    "gateway.http.endpoints.chatCompletions.maxTotalImageBytes",
    "gateway.http.endpoints.chatCompletions.images",
    "gateway.http.endpoints.responses",
    "gateway.http.securityHeaders",
    "gateway.push",
    "gateway.nodes",
    // agents.defaults
    "agents.defaults.models",
    "agents.defaults.llm",
    "agents.defaults.compaction.maxHistoryShare",
    "agents.defaults.compaction.recentTurnsPreserve",
    "agents.defaults.subagents.announceTimeoutMs",
    "agents.list[].identity",
    "agents.defaults.imageModel",
    "agents.defaults.imageGenerationModel",
    "agents.defaults.pdfModel",
    "agents.defaults.pdfMaxBytesMb",
    "agents.defaults.pdfMaxPages",
    "agents.defaults.repoRoot",
    "agents.defaults.skipBootstrap",
    "agents.defaults.bootstrapPromptTruncationWarning",
    "agents.defaults.timeFormat",
    "agents.defaults.envelopeTimezone",
    "agents.defaults.envelopeTimestamp",
    "agents.defaults.envelopeElapsed",
    "agents.defaults.cliBackends",
    "agents.defaults.embeddedPi",
    "agents.defaults.verboseDefault",
    "agents.defaults.elevatedDefault",
    "agents.defaults.imageMaxDimensionPx",
    "agents.defaults.additionalSystemPrompt",
    "agents.defaults.compaction.identifierPolicy",
    "agents.defaults.compaction.identifierInstructions",
    "agents.defaults.compaction.qualityGuard",
    "agents.defaults.compaction.postIndexSync",
    "agents.defaults.compaction.postCompactionSections",
    "agents.defaults.compaction.memoryFlush.forceFlushTranscriptBytes",
    "agents.defaults.sandbox.docker.image",
    "agents.defaults.sandbox.browser",
    "agents.list[].runtime",
    // channels pincer has no adapter for, and channel keys it lacks
    "channels.imessage",
    "channels.bluebubbles",
    "channels.msteams",
    "channels.googlechat",
    "channels.mattermost",
    "channels.irc",
    "channels.line",
    "channels.nostr",
    "channels.feishu",
    "channels.zalo",
    "channels.*.responsePrefix",
    "channels.telegram.customCommands",
    "channels.discord.intents",
    // channel keys of issue 14's channel/session/commands pass that pincer lacks
    "channels.discord.guilds.*.slug",
    "channels.discord.guilds.*.ignoreOtherMentions",
    "channels.discord.guilds.*.channels.*.ignoreOtherMentions",
    "channels.slack.thread",
    "channels.slack.typingReaction",
    "channels.slack.userToken",
    "channels.*.streaming.nativeTransport",
    "channels.*.streaming.preview.toolProgress",
    "commands.ownerDisplay",
    "commands.ownerDisplaySecret",
    // models
    "models.providers.*.injectNumCtxForOpenAICompat",
    // session
    "session.store",
    "session.maintenance.rotateBytes",
    // config rules (channel/chatType/keyPrefix, default); the per-session
    // override set by `sessions.patch` is honoured
    "session.sendPolicy",
    // messages and tools; `messages.tts` moved to `tts` upstream (its doctor
    // moves it), which pincer honours in part (`schema/tts.rs`)
    "messages.tts",
    // tools.media: audio transcription and images for vision models are honoured
    // (`schema/media.rs`); video, CLI entries, auth profiles, scopes,
    // attachment policies and the transcript echo are not
    "tools.media.concurrency",
    "tools.media.video",
    "tools.media.models[].command",
    "tools.media.models[].args",
    "tools.media.models[].profile",
    "tools.media.models[].preferredProfile",
    "tools.media.models[].providerOptions",
    "tools.media.models[].request",
    "tools.media.audio.preferredModel",
    "tools.media.audio.scope",
    "tools.media.audio.attachments",
    "tools.media.audio.echoTranscript",
    "tools.media.audio.echoFormat",
    "tools.media.audio.providerOptions",
    "tools.media.audio.request",
    // image: only maxBytes (images reach a vision model as they are; no
    // description model runs)
    "tools.media.image.enabled",
    "tools.media.image.preferredModel",
    "tools.media.image.scope",
    "tools.media.image.maxChars",
    "tools.media.image.prompt",
    "tools.media.image.timeoutSeconds",
    "tools.media.image.language",
    "tools.media.image.providerOptions",
    "tools.media.image.baseUrl",
    "tools.media.image.headers",
    "tools.media.image.request",
    "tools.media.image.attachments",
    "messages.responsePrefix",
    "messages.removeAckAfterReply",
    "messages.suppressToolErrors",
    "tools.loopDetection.detectors",
    "tools.loopDetection.globalCircuitBreakerThreshold",
    // cron
    "cron.retry",
    "cron.sessionRetention",
    "cron.runLog.maxBytes",
    "cron.failureAlert",
    "cron.failureDestination",
    // retired upstream (jobs carry their own `delivery`); no `notify: true` jobs here
    "cron.webhook",
    // accepted upstream and never read there (only messages.groupChat.historyLimit counts)
    "agents.list[].groupChat.historyLimit",
    // memory
    "memory.citations",
    "memory.qmd",
    // exec security (issue 14): elevated host exec, nodes, safe bins, inline-eval
    // refusal and approval notices are not implemented; neither are trusted-proxy
    // auth, Tailscale identity headers, sandbox backends other than pincer's own,
    // sandbox pruning and the Docker keys with no exact counterpart in pincer's
    // sandbox (extra mounts, capability lists, a writable root)
    "tools.elevated",
    "agents.list[].tools.elevated",
    "tools.exec.node",
    "tools.exec.safeBins",
    "tools.exec.safeBinTrustedDirs",
    "tools.exec.strictInlineEval",
    "tools.exec.approvalRunningNoticeMs",
    "agents.list[].tools.exec.node",
    "agents.list[].tools.exec.safeBins",
    "agents.list[].tools.exec.safeBinTrustedDirs",
    "agents.list[].tools.exec.strictInlineEval",
    "agents.list[].tools.exec.approvalRunningNoticeMs",
    "agents.defaults.sandbox.backend",
    "agents.defaults.sandbox.sessionToolsVisibility",
    "agents.defaults.sandbox.prune",
    "agents.defaults.sandbox.docker.binds",
    "agents.defaults.sandbox.docker.capDrop",
    "agents.defaults.sandbox.docker.readOnlyRoot",
    "agents.defaults.sandbox.docker.tmpfs",
    "gateway.auth.allowTailscale",
    "gateway.auth.trustedProxy",
    "gateway.trustedProxies",
    "gateway.allowRealIpFallback",
    // issue 14 settings review (2026-11-25): keys of features pincer lacks
    // per-agent state directories (auth profiles, models.json): pincer keeps
    // credentials in the config and state in its store
    "agents.list[].agentDir",
    // client-side settings of OpenClaw's CLI and apps: pincer runs the gateway
    "gateway.remote",
    // retired upstream; the web chat is part of the gateway
    "channels.webchat",
    // remote embedding providers: pincer embeds locally (ONNX) or by keyword
    "memory.search.remote",
    "agents.defaults.memorySearch.remote",
    // only API keys are sent (x-api-key or Authorization, see authHeader)
    "models.providers.*.auth",
    // no usage cost figures are computed
    "models.providers.*.models[].cost",
    // no web_search tool; web_fetch extracts text without Readability, fetches
    // directly (no fallback provider, no proxy) and sends no extra headers; of
    // the SSRF policy only `allowedHostnames` is honoured
    "tools.web.search",
    "tools.web.fetch.readability",
    "tools.web.fetch.provider",
    "tools.web.fetch.headers",
    "tools.web.fetch.useTrustedEnvProxy",
    "tools.web.fetch.ssrfPolicy.dangerouslyAllowPrivateNetwork",
    "tools.web.fetch.ssrfPolicy.allowRfc2544BenchmarkRange",
    "tools.web.fetch.ssrfPolicy.allowIpv6UniqueLocalRange",
    "tools.web.fetch.ssrfPolicy.blockedHostnames",
    // OpenClaw 2026.9.6's schema (`openclaw config schema`) keys pincer lacks,
    // found and kept complete by tests/config_upstream_keys.rs: newer features
    // (agents.entries, access groups, cloud workers, voice, code mode, …) and
    // the per-platform extras of the adapters pincer has
    // accessGroups
    "accessGroups",
    // agents
    "agents.defaults.authInheritance",
    "agents.defaults.compaction.enabled",
    "agents.defaults.compaction.maxActiveTranscriptBytes",
    "agents.defaults.compaction.memoryFlush.model",
    "agents.defaults.compaction.midTurnPrecheck",
    "agents.defaults.compaction.notifyUser",
    "agents.defaults.compaction.provider",
    "agents.defaults.compaction.thinkingLevel",
    "agents.defaults.contextInjection",
    "agents.defaults.contextLimits",
    "agents.defaults.cwd",
    "agents.defaults.decisionModel",
    "agents.defaults.embeddedAgent",
    "agents.defaults.experimental",
    "agents.defaults.fastModeDefault",
    "agents.defaults.heartbeat.agentId",
    "agents.defaults.imageQuality",
    "agents.defaults.mediaModels",
    "agents.defaults.modelPolicy",
    "agents.defaults.modelSelectionScope",
    "agents.defaults.params",
    "agents.defaults.pdfMaxMb",
    "agents.defaults.reasoningDefault",
    "agents.defaults.sandbox.docker.apparmorProfile",
    "agents.defaults.sandbox.docker.containerPrefix",
    "agents.defaults.sandbox.docker.dangerouslyAllowContainerNamespaceJoin",
    "agents.defaults.sandbox.docker.dangerouslyAllowExternalBindSources",
    "agents.defaults.sandbox.docker.dangerouslyAllowReservedContainerTargets",
    "agents.defaults.sandbox.docker.dns",
    "agents.defaults.sandbox.docker.extraHosts",
    "agents.defaults.sandbox.docker.gpus",
    "agents.defaults.sandbox.docker.memorySwap",
    "agents.defaults.sandbox.docker.seccompProfile",
    "agents.defaults.sandbox.docker.setupCommand",
    "agents.defaults.sandbox.docker.workdir",
    "agents.defaults.sandbox.ssh",
    "agents.defaults.sessionStore",
    "agents.defaults.silentReply",
    "agents.defaults.skipOptionalBootstrapFiles",
    "agents.defaults.startupContext",
    "agents.defaults.subagents.delegationMode",
    "agents.defaults.systemAgent",
    "agents.defaults.toolProgressDetail",
    "agents.defaults.utilityModel",
    "agents.defaults.voiceModel",
    "agents.entries",
    "agents.ownership",
    // attachments
    "attachments",
    // bindings
    "bindings[].acp",
    "bindings[].session",
    // channels (platforms pincer has no adapter for)
    "channels.a2a",
    "channels.buzz",
    "channels.clickclack",
    "channels.modelByChannel",
    "channels.nextcloud-talk",
    "channels.qa-channel",
    "channels.raft",
    "channels.reef",
    "channels.sms",
    "channels.synology-chat",
    "channels.tlon",
    "channels.twitch",
    "channels.zalouser",
    // channels.defaults
    "channels.defaults.botLoopProtection",
    "channels.defaults.contextVisibility",
    "channels.defaults.heartbeatVisibility",
    "channels.defaults.implicitMentions",
    // channels.discord
    "channels.discord.ackReactionScope",
    "channels.discord.actions",
    "channels.discord.activities",
    "channels.discord.activity",
    "channels.discord.activityType",
    "channels.discord.activityUrl",
    "channels.discord.agentComponents",
    "channels.discord.applicationId",
    "channels.discord.autoPresence",
    "channels.discord.botLoopProtection",
    "channels.discord.capabilities",
    "channels.discord.commands",
    "channels.discord.configWrites",
    "channels.discord.contextVisibility",
    "channels.discord.dangerouslyAllowNameMatching",
    "channels.discord.execApprovals",
    "channels.discord.guilds.*.channels.*.autoArchiveDuration",
    "channels.discord.guilds.*.channels.*.autoThread",
    "channels.discord.guilds.*.channels.*.autoThreadName",
    "channels.discord.guilds.*.channels.*.includeThreadStarter",
    "channels.discord.guilds.*.channels.*.tools",
    "channels.discord.guilds.*.channels.*.toolsBySender",
    "channels.discord.guilds.*.presenceEvents",
    "channels.discord.guilds.*.reactionNotifications",
    "channels.discord.guilds.*.tools",
    "channels.discord.guilds.*.toolsBySender",
    "channels.discord.healthMonitor",
    "channels.discord.heartbeatVisibility",
    "channels.discord.inboundWorker",
    "channels.discord.joinIntro",
    "channels.discord.markdown",
    "channels.discord.mentionAliases",
    "channels.discord.mentionPatterns",
    "channels.discord.pluralkit",
    "channels.discord.slashCommand",
    "channels.discord.status",
    "channels.discord.streaming.preview.commandText",
    "channels.discord.streaming.progress",
    "channels.discord.suppressEmbeds",
    "channels.discord.thread",
    "channels.discord.threadBindings",
    "channels.discord.voice",
    // channels.matrix: no E2EE (encryption: true is refused by validation), no
    // profile sync, bot-to-bot traffic, per-room tools or rich approvals
    "channels.matrix.configWrites",
    "channels.matrix.joinIntro",
    "channels.matrix.markdown",
    "channels.matrix.proxy",
    "channels.matrix.avatarUrl",
    "channels.matrix.dangerouslyAllowNameMatching",
    "channels.matrix.allowBots",
    "channels.matrix.botLoopProtection",
    "channels.matrix.mentionPatterns",
    "channels.matrix.contextVisibility",
    "channels.matrix.streaming.progress",
    "channels.matrix.streaming.preview",
    "channels.matrix.reactionNotifications",
    "channels.matrix.threadBindings",
    "channels.matrix.startupVerification",
    "channels.matrix.startupVerificationCooldownHours",
    "channels.matrix.dm.threadReplies",
    "channels.matrix.execApprovals",
    "channels.matrix.groups.*.tools",
    "channels.matrix.groups.*.account",
    "channels.matrix.groups.*.allowBots",
    "channels.matrix.groups.*.botLoopProtection",
    "channels.matrix.rooms.*.tools",
    "channels.matrix.rooms.*.account",
    "channels.matrix.rooms.*.allowBots",
    "channels.matrix.rooms.*.botLoopProtection",
    "channels.matrix.actions",
    // channels.signal: text in and out through signal-cli's own daemon; no
    // attachments fetched or sent, no quotes, reactions, aliases or
    // bbernhard's container (refused by validation), no UNIX socket.
    "channels.signal.actions",
    "channels.signal.aliases",
    "channels.signal.capabilities",
    "channels.signal.configWrites",
    "channels.signal.contextVisibility",
    "channels.signal.defaultTo",
    "channels.signal.dmHistoryLimit",
    "channels.signal.dms",
    "channels.signal.groups.*.ingest",
    "channels.signal.groups.*.tools",
    "channels.signal.groups.*.toolsBySender",
    "channels.signal.healthMonitor",
    "channels.signal.heartbeatVisibility",
    "channels.signal.markdown",
    "channels.signal.mediaMaxMb",
    "channels.signal.reactionAllowlist",
    "channels.signal.reactionLevel",
    "channels.signal.reactionNotifications",
    "channels.signal.replyToMode",
    "channels.signal.replyToModeByChatType",
    "channels.signal.transport.socketPath",
    // channels.whatsapp: text messages in and out through a linked device
    // (DMs, self chat, groups with mention gating, read receipts); no media,
    // reactions or per-group tool policies.
    "channels.whatsapp.ackReaction",
    "channels.whatsapp.actions",
    "channels.whatsapp.authDir",
    "channels.whatsapp.blockStreaming",
    "channels.whatsapp.blockStreamingCoalesce",
    "channels.whatsapp.capabilities",
    "channels.whatsapp.chunkMode",
    "channels.whatsapp.configWrites",
    "channels.whatsapp.contextVisibility",
    "channels.whatsapp.debounceMs",
    "channels.whatsapp.defaultTo",
    "channels.whatsapp.direct",
    "channels.whatsapp.dmHistoryLimit",
    "channels.whatsapp.dms",
    "channels.whatsapp.groups.*.tools",
    "channels.whatsapp.groups.*.toolsBySender",
    "channels.whatsapp.healthMonitor",
    "channels.whatsapp.heartbeat",
    "channels.whatsapp.heartbeatVisibility",
    "channels.whatsapp.markdown",
    "channels.whatsapp.mediaMaxMb",
    "channels.whatsapp.mentionPatterns",
    "channels.whatsapp.messagePrefix",
    "channels.whatsapp.pluginHooks",
    "channels.whatsapp.reactionLevel",
    "channels.whatsapp.replyToMode",
    "channels.whatsapp.responsePrefix",
    "channels.whatsapp.toolsBySender",
    // channels.slack
    "channels.slack.actions",
    "channels.slack.botLoopProtection",
    "channels.slack.capabilities",
    "channels.slack.channels.*.botLoopProtection",
    "channels.slack.channels.*.ignoreOtherMentions",
    "channels.slack.channels.*.presenceEvents",
    "channels.slack.channels.*.replyToMode",
    "channels.slack.channels.*.tools",
    "channels.slack.channels.*.toolsBySender",
    "channels.slack.commands",
    "channels.slack.configWrites",
    "channels.slack.contextVisibility",
    "channels.slack.dangerouslyAllowNameMatching",
    "channels.slack.execApprovals",
    "channels.slack.healthMonitor",
    "channels.slack.heartbeatVisibility",
    "channels.slack.implicitMentions",
    "channels.slack.joinIntro",
    "channels.slack.markdown",
    "channels.slack.mentionPatterns",
    "channels.slack.postAs",
    "channels.slack.presenceEvents",
    "channels.slack.reactionAllowlist",
    "channels.slack.reactionNotifications",
    "channels.slack.relay",
    "channels.slack.replyToModeByChatType",
    "channels.slack.slashCommand",
    "channels.slack.streaming.preview.commandText",
    "channels.slack.streaming.progress",
    "channels.slack.unfurlLinks",
    "channels.slack.unfurlMedia",
    "channels.slack.userTokenReadOnly",
    // channels.telegram
    "channels.telegram.actions",
    "channels.telegram.autoTopicLabel",
    "channels.telegram.capabilities",
    "channels.telegram.commands",
    "channels.telegram.configWrites",
    "channels.telegram.contextVisibility",
    "channels.telegram.direct",
    "channels.telegram.errorPolicy",
    "channels.telegram.execApprovals",
    "channels.telegram.groups.*.disableAudioPreflight",
    "channels.telegram.groups.*.errorPolicy",
    "channels.telegram.groups.*.ingest",
    "channels.telegram.groups.*.tools",
    "channels.telegram.groups.*.toolsBySender",
    "channels.telegram.groups.*.topics.*.disableAudioPreflight",
    "channels.telegram.groups.*.topics.*.errorPolicy",
    "channels.telegram.groups.*.topics.*.ingest",
    "channels.telegram.healthMonitor",
    "channels.telegram.heartbeatVisibility",
    "channels.telegram.joinIntro",
    "channels.telegram.markdown",
    "channels.telegram.mentionPatterns",
    "channels.telegram.network",
    "channels.telegram.reactionLevel",
    "channels.telegram.reactionNotifications",
    "channels.telegram.richMessages",
    "channels.telegram.silentErrorReplies",
    "channels.telegram.streaming.preview.commandText",
    "channels.telegram.streaming.progress",
    "channels.telegram.threadBindings",
    "channels.telegram.trustedLocalFileRoots",
    "channels.telegram.webhookCertPath",
    // cloudWorkers
    "cloudWorkers",
    // commands
    "commands.mcp",
    "commands.plugins",
    // cron
    "cron.skipMissedJobs",
    "cron.triggers",
    "cron.webhookSsrfPolicy",
    // desktop
    "desktop",
    // gateway
    "gateway.auth.identityScopes",
    "gateway.cliAgents",
    "gateway.portals",
    "gateway.publicOrigin",
    "gateway.roles",
    "gateway.tailscale.preserveFunnel",
    "gateway.terminal",
    // logging
    "logging.audit",
    // memory
    "memory.search.documentInputType",
    "memory.search.inputType",
    "memory.search.multimodal",
    "memory.search.outputDimensionality",
    "memory.search.queryInputType",
    "memory.search.rememberAcrossConversations",
    "memory.search.store",
    // messages
    "messages.groupChat.unmentionedInbound",
    "messages.groupChat.visibleReplies",
    "messages.responseUsage",
    "messages.statusReactions",
    "messages.usageTemplate",
    "messages.visibleReplies",
    // models
    "models.catalogRefresh",
    "models.providers.*.agentRuntime",
    "models.providers.*.localService",
    "models.providers.*.maxTokens",
    "models.providers.*.models[].agentRuntime",
    "models.providers.*.models[].baseUrl",
    "models.providers.*.models[].compat",
    "models.providers.*.models[].mediaInput",
    "models.providers.*.models[].metadataSource",
    "models.providers.*.models[].params",
    "models.providers.*.models[].thinkingLevelMap",
    "models.providers.*.params",
    "models.providers.*.region",
    "models.providers.*.request",
    "models.providers.*.timeoutSeconds",
    // security
    "security",
    // session
    "session.groupScope",
    "session.maintenance.archiveDashboardAfter",
    "session.maintenance.coldStorage",
    "session.maintenance.preserveRecent",
    "session.maintenance.resetArchiveRetention",
    "session.notifyOnCreate",
    "session.sharing",
    "session.threadBindings",
    // telemetry
    "telemetry",
    // tools
    "tools.codeMode",
    "tools.exec.applyPatch",
    "tools.exec.commandHighlighting",
    "tools.exec.grantExpiryDays",
    "tools.exec.mode",
    "tools.exec.reviewer",
    "tools.exec.safeBinProfiles",
    "tools.exec.timeoutSeconds",
    "tools.github",
    "tools.links",
    "tools.message",
    "tools.sessions_spawn",
    "tools.swarm",
    "tools.toolSearch",
    "tools.toolsBySender",
    "tools.updatePlan",
    // transcripts
    "transcripts",
    // tts: the openai provider, auto modes, limits and per-channel blocks are
    // honoured (`schema/tts.rs`); personas, the summary model and model-driven
    // directives are not
    "tts.persona",
    "tts.personas",
    "tts.summaryModel",
    "tts.modelOverrides",
    "channels.*.tts.persona",
    "channels.*.tts.personas",
    "channels.*.tts.summaryModel",
    "channels.*.tts.modelOverrides",
    // worktreeAcceleration
    "worktreeAcceleration",
    // worktreeRoot
    "worktreeRoot",
];

/// Whether `path` (as an error prints it: `agents.list[0].identity`,
/// `channels.telegram.accounts.work.proxy`) is a known upstream key pincer
/// does not implement.
pub fn is_unsupported(path: &str) -> bool {
    let path = without_account(path);
    UNSUPPORTED_KEYS
        .iter()
        .any(|pattern| matches(pattern.as_bytes(), path.as_bytes()))
}

/// `channels.<platform>.accounts.<id>.<rest>` → `channels.<platform>.<rest>`
/// (an account accepts the channel's keys) and `agents.list[<n>].<rest>` →
/// `agents.defaults.<rest>` when the agent key is not listed itself (an
/// agent overrides the defaults' keys).
fn without_account(path: &str) -> String {
    if let Some(rest) = path
        .strip_prefix("agents.list[")
        .and_then(|tail| tail.split_once("]."))
        .map(|(_, rest)| rest)
    {
        if !UNSUPPORTED_KEYS
            .iter()
            .any(|pattern| matches(pattern.as_bytes(), path.as_bytes()))
        {
            return format!("agents.defaults.{rest}");
        }
    }
    let mut parts = path.splitn(5, '.');
    match (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) {
        (Some("channels"), Some(platform), Some("accounts"), Some(_id), Some(rest)) => {
            format!("channels.{platform}.{rest}")
        }
        _ => path.to_string(),
    }
}

/// Glob match: `*` is one or more characters of a key (a map key may hold
/// dots, never `[`), `[]` is a list index `[0]`, everything else literal.
fn matches(pattern: &[u8], path: &[u8]) -> bool {
    match pattern {
        [] => path.is_empty(),
        [b'*', rest @ ..] => (1..=path.len())
            .take_while(|&n| path[n - 1] != b'[')
            .any(|n| matches(rest, &path[n..])),
        [b'[', b']', rest @ ..] => {
            let Some(after) = path.strip_prefix(b"[") else {
                return false;
            };
            let digits = after.iter().take_while(|b| b.is_ascii_digit()).count();
            digits > 0 && after.get(digits) == Some(&b']') && matches(rest, &after[digits + 1..])
        }
        [first, rest @ ..] => path.first() == Some(first) && matches(rest, &path[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_map_entries_and_list_indices() {
        assert!(matches(b"a.*.b", b"a.openai/gpt-5.2.b"));
        assert!(!matches(b"a.*.b", b"a..b"));
        assert!(matches(b"agents.list[].x", b"agents.list[12].x"));
        assert!(!matches(b"agents.list[].x", b"agents.list[].x"));
        assert!(!matches(b"agents.list[].x", b"agents.list.x"));
        assert!(!matches(b"gateway.push", b"gateway.pushy"));
    }

    #[test]
    fn top_level_and_nested_upstream_keys_are_unsupported() {
        assert!(is_unsupported("wizard"));
        assert!(is_unsupported("gateway.push"));
        assert!(is_unsupported("agents.defaults.imageModel"));
        assert!(!is_unsupported("gateway.prot"));
        assert!(!is_unsupported("wizardry"));
    }

    #[test]
    fn no_unsupported_pattern_names_an_accepted_key() {
        let accepted = crate::config::accepted_keys().expect("schema traces");
        let clashes: Vec<&String> = accepted
            .iter()
            .filter(|key| is_unsupported(&key.replace("[]", "[0]").replace('*', "x")))
            .collect();
        assert!(
            clashes.is_empty(),
            "keys both accepted and listed as unsupported: {clashes:?}"
        );
    }

    #[test]
    fn account_keys_match_as_the_channel_keys() {
        assert_eq!(
            without_account("channels.telegram.accounts.work.proxy"),
            "channels.telegram.proxy"
        );
        assert_eq!(
            without_account("channels.telegram.proxy"),
            "channels.telegram.proxy"
        );
        assert!(is_unsupported("agents.list[2].imageModel"));
        assert!(is_unsupported("agents.list[2].runtime"));
    }

    #[test]
    fn keys_of_features_pincer_lacks_are_unsupported() {
        for path in [
            "gateway.remote",
            "channels.webchat",
            "agents.list[0].agentDir",
            "agents.list[1].memorySearch.remote",
            "memory.search.remote",
            "models.providers.openrouter.auth",
            "models.providers.openrouter.models[0].cost",
            "tools.web.search",
            "tools.web.fetch.readability",
        ] {
            assert!(is_unsupported(path), "{path}");
        }
    }
}
