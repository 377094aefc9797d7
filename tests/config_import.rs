//! `pincer config import-openclaw` on a realistic OpenClaw config: what
//! pincer knows is carried over unchanged, the rest is dropped with its
//! path and reason, and the result is a valid pincer config.

use pincer::config::{import_openclaw, parse_str_with_env, parse_value, DmPolicy, ImportReport};
use serde_json::Value;

/// A config as an OpenClaw 2026.4 user would have it after onboarding and a
/// few months of tweaks (fictional secrets).
const OPENCLAW_CONFIG: &str = r##"
// ~/.openclaw/openclaw.json
{
  meta: { lastTouchedVersion: "2026.4.12", lastTouchedAt: "2026-04-13T09:12:00.000Z" },
  wizard: { lastRunAt: "2026-04-01T10:00:00.000Z", lastRunMode: "local" },
  env: { vars: { GROQ_API_KEY: "gsk-demo" } },
  auth: {
    profiles: { "anthropic:default": { provider: "anthropic", mode: "api_key" } },
  },
  models: {
    mode: "merge",
    providers: {
      openrouter: {
        baseUrl: "https://openrouter.ai/api/v1",
        apiKey: { source: "env", provider: "default", id: "OPENROUTER_API_KEY" },
        api: "openai-completions",
        models: [
          { id: "moonshotai/kimi-k2", name: "Kimi K2", reasoning: false, input: ["text"],
            cost: { input: 0.6, output: 2.5, cacheRead: 0, cacheWrite: 0 },
            contextWindow: 131072, maxTokens: 8192 },
        ],
      },
      ollama: {
        baseUrl: "http://127.0.0.1:11434",
        api: "ollama",
        injectNumCtxForOpenAICompat: true,
        models: [ { id: "qwen3:4b", name: "Qwen3 4B", contextWindow: 32768, maxTokens: 4096 } ],
      },
    },
  },
  agents: {
    defaults: {
      model: { primary: "anthropic/claude-sonnet-4-6", fallbacks: ["openrouter/moonshotai/kimi-k2"] },
      imageModel: { primary: "openai/gpt-5.4-mini" },
      models: {
        "anthropic/claude-sonnet-4-6": { alias: "sonnet" },
        "openai/gpt-5.4": { alias: "gpt", params: { temperature: 0.2 } },
      },
      workspace: "~/.openclaw/workspace",
      userTimezone: "Europe/Berlin",
      contextTokens: 200000,
      timeoutSeconds: 600,
      maxConcurrent: 2,
      thinkingDefault: "low",
      heartbeat: { every: "45m", target: "last", activeHours: { start: "08:00", end: "23:00" } },
      sandbox: {
        mode: "non-main",
        scope: "agent",
        workspaceAccess: "ro",
        docker: { image: "openclaw-sandbox:bookworm-slim", network: "none", memory: "1g", pidsLimit: 256 },
      },
      subagents: { maxConcurrent: 2, maxSpawnDepth: 2, archiveAfterMinutes: 30 },
      compaction: { mode: "safeguard", memoryFlush: { enabled: true } },
      cliBackends: { "claude-cli": { command: "claude" } },
      memorySearch: { provider: "local", query: { maxResults: 8 } },
      blockStreamingDefault: "on",
      humanDelay: { mode: "natural" },
    },
    list: [
      { id: "main", default: true, identity: { name: "Clawd", emoji: "🦞" } },
      {
        id: "work",
        name: "Work",
        workspace: "~/.openclaw/workspace-work",
        model: "anthropic/claude-opus-4-6",
        tools: { profile: "coding", deny: ["browser"] },
        runtime: { type: "embedded" },
      },
    ],
  },
  bindings: [
    { agentId: "work", match: { channel: "slack", teamId: "T0123" } },
    { type: "acp", agentId: "work", match: { channel: "discord", peer: { kind: "channel", id: "998877" } } },
    { agentId: "main", match: { channel: "telegram", peer: { kind: "direct", id: "123456789" } } },
  ],
  session: {
    dmScope: "per-channel-peer",
    reset: { mode: "daily", atHour: 4 },
    store: "~/.openclaw/agents/{agentId}/sessions/sessions.json",
    maintenance: { mode: "enforce", pruneAfter: "14d", maxEntries: 300, rotateBytes: "10mb" },
  },
  messages: {
    ackReaction: "👀",
    queue: { mode: "collect", debounceMs: 1500, cap: 10, drop: "summarize" },
    inbound: { debounceMs: 800 },
    tts: { auto: "off" },
  },
  commands: { native: "auto", text: true, restart: true, ownerAllowFrom: [123456789] },
  channels: {
    telegram: {
      enabled: true,
      botToken: { source: "file", provider: "filemain", id: "/telegram/botToken" },
      dmPolicy: "pairing",
      groupPolicy: "allowlist",
      groupAllowFrom: [123456789],
      groups: { "-1001234567890": { requireMention: true } },
      streaming: { mode: "partial" },
      customCommands: [ { command: "backup", description: "Git backup" } ],
      textChunkLimit: 3500,
    },
    whatsapp: { dmPolicy: "allowlist", allowFrom: ["+15555550123"] },
    discord: {
      token: "${DISCORD_BOT_TOKEN}",
      dmPolicy: "allowlist",
      allowFrom: ["123456789012345678"],
      guilds: { "111": { requireMention: true, channels: { "222": { enabled: true } } } },
      intents: { presence: false },
    },
  },
  tools: {
    profile: "full",
    web: { search: { provider: "brave", apiKey: "BSA-demo" }, fetch: { enabled: true } },
    media: { audio: { enabled: true, echoTranscript: true } },
    exec: { security: "allowlist", ask: "on-miss" },
  },
  cron: { enabled: true, maxConcurrentRuns: 2, sessionRetention: "24h" },
  hooks: { enabled: true, token: "hook-secret" },
  skills: { entries: { "nano-banana-pro": { enabled: false } } },
  plugins: { entries: { "memory-core": { enabled: true } } },
  browser: { enabled: false },
  ui: { seamColor: "#ff6600" },
  update: { channel: "stable" },
  memory: { backend: "builtin", citations: "auto" },
  discovery: { mdns: { mode: "minimal" }, wideArea: { enabled: false } },
  logging: { level: "info", consoleStyle: "pretty" },
  gateway: {
    mode: "local",
    port: 18789,
    bind: "loopback",
    auth: { mode: "token", token: { source: "env", provider: "default", id: "OPENCLAW_GATEWAY_TOKEN" } },
    controlUi: { enabled: true, allowedOrigins: ["http://localhost:18789"], root: "/srv/control-ui" },
    tailscale: { mode: "off", resetOnExit: false },
    reload: { mode: "hybrid" },
    push: { apns: { relay: { baseUrl: "https://relay.example.com" } } },
    nodes: { browser: { mode: "auto" } },
    http: { endpoints: { chatCompletions: { enabled: true } }, securityHeaders: { strictTransportSecurity: false } },
  },
}
"##;

fn report() -> ImportReport {
    import_openclaw(OPENCLAW_CONFIG).expect("a realistic OpenClaw config imports")
}

fn skipped_paths(report: &ImportReport) -> Vec<&str> {
    report
        .skipped
        .iter()
        .map(|(path, _)| path.as_str())
        .collect()
}

#[test]
fn result_is_a_valid_pincer_config() {
    let report = report();
    let config = parse_value(report.config_json.clone(), "imported.json5")
        .expect("imported config validates");
    assert_eq!(config.gateway.port, 18789);
    assert!(config.gateway.http.endpoints.chat_completions.enabled);
    assert_eq!(config.agents.default_agent_id(), "main");
    assert_eq!(config.agents.list.len(), 2);
    assert_eq!(
        config.bindings.len(),
        2,
        "the ACP binding is dropped, the route bindings stay"
    );
    assert_eq!(config.session.maintenance.prune_after_ms(), 14 * 86_400_000);
    assert_eq!(config.messages.queue.cap, 10);
    let telegram = config.channels.telegram.as_ref().expect("telegram kept");
    let account = telegram.account("default").expect("default account");
    assert_eq!(account.effective_dm_policy(), DmPolicy::Pairing);
    assert_eq!(account.effective_text_chunk_limit(), 3500);
    assert_eq!(
        account.bot_token, None,
        "a file secret reference cannot be carried over"
    );

    // The written text (what `import-openclaw` saves) parses too, once the
    // referenced variables exist.
    let text = serde_json::to_string_pretty(&report.config_json).expect("serialize");
    let env = |name: &str| Some(format!("value-of-{name}"));
    let reparsed = parse_str_with_env(&text, "pincer.json5", &env).expect("saved text parses");
    assert_eq!(
        reparsed.gateway.auth.token.as_deref(),
        Some("value-of-OPENCLAW_GATEWAY_TOKEN")
    );
}

#[test]
fn env_secret_references_become_variable_placeholders() {
    let json = report().config_json;
    assert_eq!(
        json["models"]["providers"]["openrouter"]["apiKey"],
        "${OPENROUTER_API_KEY}"
    );
    assert_eq!(
        json["gateway"]["auth"]["token"],
        "${OPENCLAW_GATEWAY_TOKEN}"
    );
    assert_eq!(json["channels"]["discord"]["token"], "${DISCORD_BOT_TOKEN}");
}

#[test]
fn unsupported_keys_are_reported_with_path_and_reason() {
    let report = report();
    let paths = skipped_paths(&report);
    for expected in [
        "wizard",
        "env",
        "auth",
        "hooks",
        "skills",
        "plugins",
        "browser",
        "ui",
        "update",
        "gateway.push",
        "gateway.nodes",
        "gateway.http.securityHeaders",
        "channels.telegram.customCommands",
        "channels.discord.intents",
        "agents.defaults.imageModel",
        "agents.defaults.cliBackends",
        "agents.defaults.sandbox.docker.image",
        "agents.list[1].runtime",
        "models.providers.ollama.injectNumCtxForOpenAICompat",
        "session.store",
        "session.maintenance.rotateBytes",
        "messages.tts",
        "tools.media.audio.echoTranscript",
        "commands.native",
        "agents.defaults.models",
        "cron.sessionRetention",
        "memory.citations",
        "discovery.wideArea",
        "logging.consoleStyle",
        "agents.list[0].identity",
        "gateway.controlUi.root",
        "models.providers.openrouter.models[0].cost",
    ] {
        assert!(
            paths.contains(&expected),
            "{expected} not reported; got {paths:?}"
        );
    }
    let reason = |path: &str| {
        report
            .skipped
            .iter()
            .find(|(p, _)| p == path)
            .map(|(_, why)| why.as_str())
            .unwrap_or_default()
    };
    assert_eq!(reason("gateway.push"), "not supported by pincer");
    assert!(
        reason("channels.telegram.botToken").contains("source \"file\""),
        "{}",
        reason("channels.telegram.botToken")
    );
    assert!(
        reason("bindings[1]").starts_with("not supported by pincer: "),
        "{}",
        reason("bindings[1]")
    );
}

#[test]
fn every_dropped_key_of_an_openclaw_config_is_a_known_upstream_key() {
    let report = report();
    let unknown: Vec<&str> = report
        .skipped
        .iter()
        .filter(|(_, why)| !why.starts_with("not supported by pincer") && !why.contains("source"))
        .map(|(path, _)| path.as_str())
        .collect();
    assert!(
        unknown.is_empty(),
        "OpenClaw keys reported as unknown rather than unsupported: {unknown:?}"
    );
}

#[test]
fn a_key_neither_has_is_dropped_as_unknown() {
    let report =
        pincer::config::import_openclaw(r#"{ gateway: { port: 1, zebra: 1 } }"#).expect("imported");
    assert_eq!(report.skipped.len(), 1);
    assert_eq!(report.skipped[0].0, "gateway.zebra");
    assert!(
        report.skipped[0].1.starts_with("unknown key"),
        "{:?}",
        report.skipped
    );
}

#[test]
fn known_keys_are_carried_over_unchanged() {
    let json = report().config_json;
    let source =
        pincer::config::parse_json5(OPENCLAW_CONFIG, "openclaw.json").expect("source parses");
    for pointer in [
        "/meta",
        "/models/providers/openrouter/models/0/id",
        "/models/providers/openrouter/models/0/contextWindow",
        "/agents/defaults/model",
        "/agents/defaults/heartbeat",
        "/agents/defaults/sandbox/docker/network",
        "/agents/list/0/id",
        "/session/dmScope",
        "/messages/queue",
        "/channels/telegram/groups",
        "/channels/discord/guilds",
        "/tools/exec",
        "/cron/enabled",
        "/cron/maxConcurrentRuns",
    ] {
        assert_eq!(
            json.pointer(pointer),
            source.pointer(pointer),
            "{pointer} changed"
        );
        assert!(
            json.pointer(pointer).is_some_and(|v| !v.is_null()),
            "{pointer} missing"
        );
    }
}

#[test]
fn every_skipped_path_is_gone_from_the_result() {
    let report = report();
    for (path, _) in &report.skipped {
        let pointer = format!("/{}", path.replace(['.', '['], "/").replace(']', ""));
        if path.starts_with("bindings[") {
            continue; // later entries shift into the dropped index
        }
        assert_eq!(
            report.config_json.pointer(&pointer),
            None::<&Value>,
            "{path} still present"
        );
    }
}
