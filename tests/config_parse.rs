//! Parsing a config file end to end: JSON5 text in, typed config or a
//! precise error out. Every error shape a user can meet is exercised here
//! with the exact message they would read.

use pincer::config::{
    parse_str, parse_str_with_env, BindMode, ConfigError, DmScope, ReloadMode, DEFAULT_GATEWAY_PORT,
};

const ORIGIN: &str = "pincer.json5";

fn no_env(_: &str) -> Option<String> {
    None
}

fn parse(text: &str) -> Result<pincer::config::Config, ConfigError> {
    parse_str_with_env(text, ORIGIN, &no_env)
}

fn error(text: &str) -> String {
    parse(text)
        .expect_err("config should be refused")
        .to_string()
}

#[test]
fn empty_object_gives_openclaw_defaults() {
    let config = parse("{}").expect("empty config");
    assert_eq!(config.gateway.port, DEFAULT_GATEWAY_PORT);
    assert_eq!(config.gateway.port, 18789);
    assert_eq!(config.gateway.bind, BindMode::Loopback);
    assert_eq!(config.gateway.reload.mode, ReloadMode::Hybrid);
    assert_eq!(config.session.dm_scope, DmScope::Main);
    assert_eq!(
        config.session.maintenance.prune_after.as_deref(),
        Some("30d")
    );
    assert_eq!(config.session.maintenance.max_entries, 500);
    assert_eq!(config.agents.default_agent_id(), "main");
}

#[test]
fn json5_comments_trailing_commas_and_bare_keys_are_accepted() {
    let config = parse(
        "// pincer\n{\n  gateway: { port: 19001, bind: 'lan', }, /* block */\n  session: { dmScope: \"per-peer\" },\n}\n",
    )
    .expect("json5 config");
    assert_eq!(config.gateway.port, 19001);
    assert_eq!(config.gateway.bind, BindMode::Lan);
    assert_eq!(config.session.dm_scope, DmScope::PerPeer);
}

#[test]
fn schema_key_is_ignored_and_meta_is_kept() {
    let config = parse(
        r#"{ "$schema": "https://example.com/s.json", meta: { lastTouchedVersion: "2026.4.12" } }"#,
    )
    .expect("schema and meta");
    let meta = config.meta.expect("meta kept");
    assert_eq!(meta["lastTouchedVersion"], "2026.4.12");
}

#[test]
fn meta_must_be_an_object() {
    assert_eq!(
        error("{ meta: 3 }"),
        "pincer.json5: meta: expected an object, got integer 3"
    );
}

#[test]
fn unknown_key_suggests_the_nearest_sibling() {
    assert_eq!(
        error("{ gateway: { prot: 1 } }"),
        "pincer.json5: unknown key gateway.prot (did you mean gateway.port?)"
    );
    assert_eq!(
        error("{ agents: { defaults: { workspce: '/srv' } } }"),
        "pincer.json5: unknown key agents.defaults.workspce (did you mean agents.defaults.workspace?)"
    );
}

#[test]
fn unknown_key_far_from_any_sibling_has_no_suggestion() {
    assert_eq!(
        error("{ gateway: { zebra: 1 } }"),
        "pincer.json5: unknown key gateway.zebra"
    );
}

#[test]
fn unknown_top_level_section_is_refused() {
    assert_eq!(error("{ zebras: {} }"), "pincer.json5: unknown key zebras");
    assert_eq!(
        error("{ gatway: {} }"),
        "pincer.json5: unknown key gatway (did you mean gateway?)"
    );
}

#[test]
fn known_openclaw_sections_pincer_lacks_are_unsupported_not_unknown() {
    for (config, path) in [
        ("{ hooks: {} }", "hooks"),
        ("{ logging: { file: '/tmp/p.log' } }", "logging.file"),
        (
            "{ discovery: { wideArea: { enabled: true } } }",
            "discovery.wideArea",
        ),
        (
            "{ agents: { list: [ { id: 'a', identity: { name: 'A' } } ] } }",
            "agents.list[0].identity",
        ),
        (
            "{ channels: { telegram: { accounts: { work: { responsePrefix: '>' } } } } }",
            "channels.telegram.accounts.work.responsePrefix",
        ),
        ("{ cron: { retry: { maxAttempts: 3 } } }", "cron.retry"),
        (
            "{ gateway: { controlUi: { root: '/srv/control-ui' } } }",
            "gateway.controlUi.root",
        ),
        (
            "{ messages: { removeAckAfterReply: true } }",
            "messages.removeAckAfterReply",
        ),
        (
            "{ messages: { suppressToolErrors: true } }",
            "messages.suppressToolErrors",
        ),
        (
            "{ tools: { loopDetection: { detectors: { pingPong: false } } } }",
            "tools.loopDetection.detectors",
        ),
        ("{ memory: { citations: 'on' } }", "memory.citations"),
        (
            "{ cron: { runLog: { maxBytes: '1mb' } } }",
            "cron.runLog.maxBytes",
        ),
        (
            "{ gateway: { tls: { caPath: '/etc/ca.pem' } } }",
            "gateway.tls.caPath",
        ),
        (
            "{ agents: { defaults: { llm: { idleTimeoutSeconds: 30 } } } }",
            "agents.defaults.llm",
        ),
    ] {
        let message = error(config);
        assert!(
            message.starts_with(&format!("pincer.json5: {path} is not supported by pincer")),
            "{config}: {message}"
        );
    }
}

#[test]
fn unknown_key_inside_list_entry_names_the_index() {
    assert_eq!(
        error("{ agents: { list: [ { id: 'a' }, { id: 'b', modle: 'x/y' } ] } }"),
        "pincer.json5: unknown key agents.list[1].modle (did you mean agents.list[1].model?)"
    );
}

#[test]
fn wrong_type_names_path_expectation_and_value() {
    assert_eq!(
        error(r#"{ gateway: { port: "abc" } }"#),
        "pincer.json5: gateway.port: expected a 16-bit port number, got string \"abc\""
    );
    assert_eq!(
        error("{ gateway: { port: 70000 } }"),
        "pincer.json5: gateway.port: expected a 16-bit port number, got integer 70000"
    );
    assert_eq!(
        error("{ session: { maintenance: { maxEntries: 'many' } } }"),
        "pincer.json5: session.maintenance.maxEntries: expected a non-negative integer, got string \"many\""
    );
    assert_eq!(
        error("{ gateway: { tls: { enabled: 'yes' } } }"),
        "pincer.json5: gateway.tls.enabled: expected a boolean, got string \"yes\""
    );
    assert_eq!(
        error("{ tools: { deny: 'exec' } }"),
        "pincer.json5: tools.deny: expected an array, got string \"exec\""
    );
}

#[test]
fn unknown_enum_value_lists_the_allowed_ones() {
    assert_eq!(
        error("{ gateway: { bind: 'everywhere' } }"),
        "pincer.json5: gateway.bind: expected one of \"loopback\", \"lan\", \"tailnet\", \"auto\", \"custom\", got \"everywhere\""
    );
}

#[test]
fn root_that_is_not_an_object_is_refused() {
    assert_eq!(
        error("[1, 2]"),
        "pincer.json5: (root): expected an object, got an array"
    );
}

#[test]
fn array_or_null_in_place_of_a_section_is_refused() {
    assert_eq!(
        error("{ gateway: [18789] }"),
        "pincer.json5: gateway: expected an object, got an array"
    );
    assert_eq!(
        error("{ gateway: { tls: null } }"),
        "pincer.json5: gateway.tls: expected an object, got null"
    );
}

#[test]
fn syntax_error_reports_line_and_column() {
    let err = parse("{\n  gateway: {\n    port: 18789,,\n  }\n}").expect_err("syntax error");
    match &err {
        ConfigError::Syntax { line, column, .. } => assert_eq!((*line, *column), (3, 17), "{err}"),
        other => panic!("expected a syntax error, got {other}"),
    }
    assert!(
        err.to_string()
            .starts_with("pincer.json5: syntax error at line 3, column 17: "),
        "{err}"
    );
}

#[test]
fn env_references_are_substituted_and_missing_ones_name_the_path() {
    let env = |name: &str| (name == "OPENAI_API_KEY").then(|| "sk-test".to_string());
    let config = parse_str_with_env(
        "{ models: { providers: { openai: { baseUrl: 'https://api.openai.com/v1', apiKey: '${OPENAI_API_KEY}', models: [] } } } }",
        ORIGIN,
        &env,
    )
    .expect("substituted");
    assert_eq!(
        config.models.providers["openai"].api_key.as_deref(),
        Some("sk-test")
    );
    assert_eq!(
        error("{ gateway: { auth: { token: '${PINCER_TEST_UNSET_TOKEN}' } } }"),
        "pincer.json5: gateway.auth.token: environment variable PINCER_TEST_UNSET_TOKEN is not set"
    );
}

#[test]
fn parse_str_reads_the_process_environment() {
    // PATH is set in every test environment; a lower-case reference is literal.
    let config = parse_str(
        "{ cron: { store: '${PATH}' }, gateway: { customBindHost: '${path}' } }",
        ORIGIN,
    )
    .expect("process env");
    assert_eq!(config.cron.store, std::env::var("PATH").ok());
    assert_eq!(config.gateway.custom_bind_host.as_deref(), Some("${path}"));
}

#[test]
fn port_zero_is_refused() {
    assert_eq!(
        error("{ gateway: { port: 0 } }"),
        "pincer.json5: gateway.port: must be between 1 and 65535, got 0"
    );
}

#[test]
fn custom_bind_needs_an_ipv4_host() {
    assert_eq!(
        error("{ gateway: { bind: 'custom' } }"),
        "pincer.json5: gateway.customBindHost: is required when gateway.bind is \"custom\""
    );
    assert_eq!(
        error("{ gateway: { bind: 'custom', customBindHost: '::1' } }"),
        "pincer.json5: gateway.customBindHost: must be an IPv4 address, got \"::1\""
    );
    let config = parse("{ gateway: { bind: 'custom', customBindHost: '192.168.1.20' } }")
        .expect("custom bind");
    assert_eq!(
        config.gateway.custom_bind_host.as_deref(),
        Some("192.168.1.20")
    );
}

#[test]
fn trusted_proxy_and_tailscale_identity_auth_are_refused_as_unsupported() {
    assert_eq!(
        error("{ gateway: { auth: { mode: 'trusted-proxy' } } }"),
        "pincer.json5: gateway.auth.mode: `gateway.auth.mode: trusted-proxy` is not supported by pincer (use \"token\" or \"password\")"
    );
    for (config, path) in [
        (
            "{ gateway: { auth: { trustedProxy: { userHeader: 'x-user' } } } }",
            "gateway.auth.trustedProxy",
        ),
        (
            "{ gateway: { trustedProxies: ['10.0.0.1'] } }",
            "gateway.trustedProxies",
        ),
        (
            "{ gateway: { allowRealIpFallback: true } }",
            "gateway.allowRealIpFallback",
        ),
        // Identity headers are never trusted, whichever value is written.
        (
            "{ gateway: { auth: { allowTailscale: true } } }",
            "gateway.auth.allowTailscale",
        ),
        (
            "{ gateway: { auth: { allowTailscale: false } } }",
            "gateway.auth.allowTailscale",
        ),
    ] {
        let message = error(config);
        assert!(
            message.starts_with(&format!("pincer.json5: {path} is not supported by pincer")),
            "{config}: {message}"
        );
    }
}

#[test]
fn exec_and_sandbox_keys_pincer_lacks_are_refused_by_name() {
    for (config, path) in [
        ("{ tools: { elevated: { enabled: true } } }", "tools.elevated"),
        (
            "{ agents: { list: [ { id: 'a', tools: { elevated: { enabled: false } } } ] } }",
            "agents.list[0].tools.elevated",
        ),
        ("{ tools: { exec: { node: 'mac' } } }", "tools.exec.node"),
        ("{ tools: { exec: { safeBins: ['jq'] } } }", "tools.exec.safeBins"),
        (
            "{ tools: { exec: { safeBinTrustedDirs: ['/usr/bin'] } } }",
            "tools.exec.safeBinTrustedDirs",
        ),
        (
            "{ tools: { exec: { strictInlineEval: true } } }",
            "tools.exec.strictInlineEval",
        ),
        (
            "{ tools: { exec: { approvalRunningNoticeMs: 0 } } }",
            "tools.exec.approvalRunningNoticeMs",
        ),
        (
            "{ agents: { list: [ { id: 'a', tools: { exec: { safeBins: ['jq'] } } } ] } }",
            "agents.list[0].tools.exec.safeBins",
        ),
        (
            "{ agents: { defaults: { sandbox: { backend: 'docker' } } } }",
            "agents.defaults.sandbox.backend",
        ),
        (
            "{ agents: { defaults: { sandbox: { sessionToolsVisibility: 'all' } } } }",
            "agents.defaults.sandbox.sessionToolsVisibility",
        ),
        (
            "{ agents: { defaults: { sandbox: { prune: { idleHours: 24 } } } } }",
            "agents.defaults.sandbox.prune",
        ),
        (
            "{ agents: { list: [ { id: 'a', sandbox: { docker: { binds: ['/data:/data'] } } } ] } }",
            "agents.list[0].sandbox.docker.binds",
        ),
        (
            "{ agents: { defaults: { sandbox: { docker: { capDrop: ['ALL'] } } } } }",
            "agents.defaults.sandbox.docker.capDrop",
        ),
        (
            "{ agents: { defaults: { sandbox: { docker: { readOnlyRoot: true } } } } }",
            "agents.defaults.sandbox.docker.readOnlyRoot",
        ),
        (
            "{ agents: { defaults: { sandbox: { docker: { tmpfs: ['/run'] } } } } }",
            "agents.defaults.sandbox.docker.tmpfs",
        ),
    ] {
        let message = error(config);
        assert!(
            message.starts_with(&format!("pincer.json5: {path} is not supported by pincer")),
            "{config}: {message}"
        );
    }
}

#[test]
fn tailscale_needs_loopback_and_funnel_needs_password() {
    assert_eq!(
        error("{ gateway: { bind: 'lan', tailscale: { mode: 'serve' } } }"),
        "pincer.json5: gateway.bind: must be \"loopback\" when gateway.tailscale.mode is serve or funnel"
    );
    assert_eq!(
        error("{ gateway: { tailscale: { mode: 'funnel' } } }"),
        "pincer.json5: gateway.auth.mode: must be \"password\" when gateway.tailscale.mode is \"funnel\""
    );
    parse("{ gateway: { tailscale: { mode: 'funnel' }, auth: { password: 'pw' } } }")
        .expect("funnel with password");
}

#[test]
fn agent_ids_must_be_unique_and_non_empty() {
    assert_eq!(
        error("{ agents: { list: [ { id: 'main' }, { id: 'main' } ] } }"),
        "pincer.json5: agents.list[1].id: duplicate agent id \"main\""
    );
    assert_eq!(
        error("{ agents: { list: [ { name: 'x' } ] } }"),
        "pincer.json5: agents.list[0].id: must not be empty"
    );
}

#[test]
fn model_references_must_name_a_provider() {
    assert_eq!(
        error("{ agents: { defaults: { model: 'gpt-5' } } }"),
        "pincer.json5: agents.defaults.model: model reference \"gpt-5\" must look like \"provider/model\""
    );
    assert_eq!(
        error("{ agents: { defaults: { model: { primary: 'a/b', fallbacks: ['c/d', 'e'] } } } }"),
        "pincer.json5: agents.defaults.model.fallbacks[1]: model reference \"e\" must look like \"provider/model\""
    );
    // Model aliases (`agents.defaults.models`) are an upstream feature
    // pincer lacks: the key is refused by name rather than half-honoured.
    assert!(
        error("{ agents: { defaults: { model: 'Sonnet', models: { 'anthropic/claude-sonnet-4-6': { alias: 'Sonnet' } } } } }")
            .contains("agents.defaults.models is not supported by pincer")
    );
}

#[test]
fn bad_duration_and_size_text_names_the_path() {
    assert_eq!(
        error("{ session: { maintenance: { pruneAfter: 'a month' } } }"),
        "pincer.json5: session.maintenance.pruneAfter: invalid duration \"a month\" (use a number with ms, s, m, h or d, e.g. \"30d\" or \"1h30m\")"
    );
    assert_eq!(
        error("{ session: { maintenance: { maxDiskBytes: 'lots' } } }"),
        "pincer.json5: session.maintenance.maxDiskBytes: invalid size \"lots\" (use a number with b, kb, mb, gb or tb, e.g. \"500mb\")"
    );
    assert_eq!(
        error("{ agents: { defaults: { heartbeat: { every: '1 hour' } } } }"),
        "pincer.json5: agents.defaults.heartbeat.every: invalid duration \"1 hour\" (use a number with ms, s, m, h or d, e.g. \"30d\" or \"1h30m\")"
    );
    let config = parse("{ session: { maintenance: { pruneAfter: '12h', maxDiskBytes: '1gb' } } }")
        .expect("valid text");
    assert_eq!(config.session.maintenance.prune_after_ms(), 12 * 3_600_000);
    assert_eq!(config.session.maintenance.max_disk_bytes(), Some(1 << 30));
}

#[test]
fn ranges_and_value_sets_are_checked() {
    assert_eq!(
        error("{ agents: { defaults: { subagents: { maxSpawnDepth: 9 } } } }"),
        "pincer.json5: agents.defaults.subagents.maxSpawnDepth: must be between 1 and 5, got 9"
    );
    assert_eq!(
        error("{ agents: { defaults: { thinkingDefault: 'extreme' } } }"),
        "pincer.json5: agents.defaults.thinkingDefault: must be one of off, minimal, low, medium, high, xhigh, adaptive, got \"extreme\""
    );
    assert_eq!(
        error("{ agents: { defaults: { heartbeat: { activeHours: { start: '24:00' } } } } }"),
        "pincer.json5: agents.defaults.heartbeat.activeHours.start: invalid time \"24:00\" (use \"HH:MM\" 24h format)"
    );
}

#[test]
fn channel_dm_policies_need_matching_allow_lists() {
    assert_eq!(
        error("{ channels: { telegram: { dmPolicy: 'open' } } }"),
        "pincer.json5: channels.telegram.allowFrom: channels.telegram.dmPolicy=\"open\" requires allowFrom to include \"*\""
    );
    assert_eq!(
        error("{ channels: { telegram: { accounts: { work: { dmPolicy: 'allowlist' } } } } }"),
        "pincer.json5: channels.telegram.accounts.work.allowFrom: channels.telegram.dmPolicy=\"allowlist\" requires allowFrom to contain at least one sender ID"
    );
    assert_eq!(
        error("{ channels: { slack: { mode: 'http', botToken: 'xoxb' } } }"),
        "pincer.json5: channels.slack.signingSecret: channels.slack.mode=\"http\" requires channels.slack.signingSecret"
    );
    assert_eq!(
        error("{ channels: { telegram: { webhookUrl: 'https://bot.example.com/tg' } } }"),
        "pincer.json5: channels.telegram.webhookSecret: channels.telegram.webhookUrl requires channels.telegram.webhookSecret"
    );
    parse("{ channels: { telegram: { dmPolicy: 'open', allowFrom: ['*'] }, discord: { dm: { policy: 'allowlist', allowFrom: [1] } } } }")
        .expect("valid channel policies");
}

#[test]
#[cfg(feature = "signal")]
fn signal_transport_and_dm_rules_name_the_path() {
    assert_eq!(
        error("{ channels: { signal: { account: '+1555', dmPolicy: 'open' } } }"),
        "pincer.json5: channels.signal.allowFrom: channels.signal.dmPolicy=\"open\" requires allowFrom to include \"*\""
    );
    assert_eq!(
        error("{ channels: { signal: { accounts: { box: { account: '+1555', transport: { kind: 'container', url: 'http://c:8080' } } } } } }"),
        "pincer.json5: channels.signal.accounts.box.transport.kind: \"container\" (bbernhard's signal-cli-rest-api) is not supported by pincer; run signal-cli's own daemon (\"managed-native\" or \"external-native\")"
    );
    assert_eq!(
        error("{ channels: { signal: { transport: { kind: 'external-native' } } } }"),
        "pincer.json5: channels.signal.transport.url: transport.kind \"external-native\" requires transport.url (the daemon's http:// address)"
    );
    assert_eq!(
        error("{ channels: { signal: { transport: { kind: 'external-native', url: 'http://u:p@h:1' } } } }"),
        "pincer.json5: channels.signal.transport.url: \"http://u:p@h:1\" is not an http:// or https:// URL without credentials"
    );
    assert_eq!(
        error("{ channels: { signal: { transport: { kind: 'external-native', url: 'http://h:1', cliPath: 'x' } } } }"),
        "pincer.json5: channels.signal.transport.cliPath: only a managed-native transport takes this key"
    );
    assert_eq!(
        error("{ channels: { signal: { transport: { startupTimeoutMs: 10 } } } }"),
        "pincer.json5: channels.signal.transport.startupTimeoutMs: must be between 1000 and 120000"
    );
    assert_eq!(
        error("{ channels: { signal: { httpUrl: 'ftp://h' } } }"),
        "pincer.json5: channels.signal.httpUrl: \"ftp://h\" is not an http:// or https:// URL without credentials"
    );
    let refused = error("{ channels: { signal: { replyToMode: 'all' } } }");
    assert!(
        refused.contains("channels.signal.replyToMode")
            && refused.contains("not supported by pincer"),
        "{refused}"
    );
    parse("{ channels: { signal: { account: '+1555', dmPolicy: 'allowlist', allowFrom: ['+1666'], transport: { kind: 'external-native', url: 'http://127.0.0.1:8080' } } } }")
        .expect("a valid Signal section");
}

#[test]
#[cfg(feature = "whatsapp")]
fn whatsapp_keys_pincer_honours_parse_and_the_rest_are_refused_by_name() {
    parse("{ channels: { whatsapp: { enabled: true, name: 'Phone', dmPolicy: 'allowlist', allowFrom: ['+1666'], textChunkLimit: 1000, streaming: { chunkMode: 'newline', block: { enabled: true } }, defaultAccount: 'work', accounts: { work: { dmPolicy: 'pairing' } } } } }")
        .expect("a valid WhatsApp section");
    parse("{ channels: { whatsapp: { groupPolicy: 'open', groupAllowFrom: ['+1', '*'], historyLimit: 20, groups: { '*': { requireMention: true }, '120363@g.us': { requireMention: false, systemPrompt: 'Be brief.' } }, selfChatMode: true, sendReadReceipts: false, accounts: { work: { groupPolicy: 'disabled', selfChatMode: false, sendReadReceipts: true, groups: {} } } } } }")
        .expect("WhatsApp's group, self-chat and read-receipt keys");
    assert_eq!(
        error("{ channels: { whatsapp: { dmPolicy: 'open' } } }"),
        "pincer.json5: channels.whatsapp.allowFrom: channels.whatsapp.dmPolicy=\"open\" requires allowFrom to include \"*\""
    );
    assert_eq!(
        error("{ channels: { whatsapp: { accounts: { work: { dmPolicy: 'allowlist' } } } } }"),
        "pincer.json5: channels.whatsapp.accounts.work.allowFrom: channels.whatsapp.dmPolicy=\"allowlist\" requires allowFrom to contain at least one sender ID"
    );
    assert!(
        error("{ channels: { whatsapp: { groupPolicy: 'sometimes' } } }")
            .contains("channels.whatsapp.groupPolicy"),
        "a bad groupPolicy names its key"
    );
    for (config, path) in [
        (
            "{ groups: { '*': { tools: { allow: ['exec'] } } } }",
            "channels.whatsapp.groups.*.tools",
        ),
        ("{ mediaMaxMb: 5 }", "channels.whatsapp.mediaMaxMb"),
        ("{ authDir: '/tmp/wa' }", "channels.whatsapp.authDir"),
        (
            "{ accounts: { work: { debounceMs: 10 } } }",
            "channels.whatsapp.accounts.work.debounceMs",
        ),
        (
            "{ ackReaction: { emoji: 'x' } }",
            "channels.whatsapp.ackReaction",
        ),
    ] {
        let refused = error(&format!("{{ channels: {{ whatsapp: {config} }} }}"));
        assert!(
            refused.contains(path) && refused.contains("not supported by pincer"),
            "{config}: {refused}"
        );
    }
}

#[test]
fn sandbox_security_refusals_name_the_path() {
    assert_eq!(
        error("{ agents: { defaults: { sandbox: { docker: { network: 'host' } } } } }"),
        "pincer.json5: agents.defaults.sandbox.docker.network: Sandbox security: network mode \"host\" is blocked (use \"none\" or \"bridge\")"
    );
}

#[test]
fn exec_and_sandbox_limits_outside_what_pincer_sets_are_refused() {
    assert_eq!(
        error("{ agents: { defaults: { sandbox: { docker: { ulimits: { memlock: 1 } } } } } }"),
        "pincer.json5: agents.defaults.sandbox.docker.ulimits.memlock: the ulimit \"memlock\" is not supported by pincer (its sandbox sets cpu, fsize, nofile, nproc)"
    );
    assert_eq!(
        error("{ agents: { defaults: { sandbox: { docker: { ulimits: { nofile: '64:128' } } } } } }"),
        "pincer.json5: agents.defaults.sandbox.docker.ulimits.nofile: pincer's sandbox sets one value as both the soft and the hard limit: give a single number"
    );
    assert_eq!(
        error("{ agents: { defaults: { sandbox: { docker: { cpus: 0 } } } } }"),
        "pincer.json5: agents.defaults.sandbox.docker.cpus: must be between 0.01 and 1024, got 0"
    );
    assert_eq!(
        error("{ tools: { exec: { timeoutSec: 0 } } }"),
        "pincer.json5: tools.exec.timeoutSec: must be between 1 and 86400, got 0"
    );
    assert!(
        error("{ tools: { exec: { backgroundMs: 0 } } }").starts_with(
            "pincer.json5: tools.exec.backgroundMs: must be a positive number of milliseconds"
        )
    );
    assert!(error("{ agents: { list: [ { id: 'a', tools: { exec: { pathPrepend: ['~/bin'] } } } ] } }")
        .starts_with("pincer.json5: agents.list[0].tools.exec.pathPrepend[0]: \"~/bin\" must be an absolute directory"));
    parse("{ tools: { exec: { timeoutSec: 60, backgroundMs: 500000, pathPrepend: ['/opt/x/bin'] } }, \
             agents: { defaults: { sandbox: { docker: { cpus: 1.5, ulimits: { nofile: 1024, nproc: { soft: 32, hard: 32 } } } } } } }")
        .expect("limits pincer sets");
}

#[test]
fn tool_policy_cannot_mix_allow_and_also_allow() {
    assert_eq!(
        error("{ tools: { allow: ['read'], alsoAllow: ['exec'] } }"),
        "pincer.json5: tools.alsoAllow: cannot set both allow and alsoAllow in the same scope (merge alsoAllow into allow, or remove allow and use profile + alsoAllow)"
    );
}

#[test]
fn broadcast_agents_must_exist_when_agents_are_listed() {
    assert_eq!(
        error("{ agents: { list: [ { id: 'a' } ] }, broadcast: { 'peer1': ['a', 'ghost'] } }"),
        "pincer.json5: broadcast.peer1[1]: Unknown agent id \"ghost\" (not in agents.list)."
    );
}

#[test]
fn memory_search_layers_resolve_per_agent() {
    let config = parse(
        "{ memory: { search: { chunking: { tokens: 256 } } },
           agents: { defaults: { memorySearch: { query: { maxResults: 10 } } },
                     list: [ { id: 'a', memorySearch: { chunking: { overlap: 16 } } }, { id: 'b' } ] } }",
    )
    .expect("memory layers");
    let a = config.memory_search_for("a");
    assert_eq!(
        (a.chunk_tokens, a.chunk_overlap_tokens, a.max_results),
        (256, 16, 10)
    );
    let b = config.memory_search_for("b");
    assert_eq!(
        (b.chunk_tokens, b.chunk_overlap_tokens, b.max_results),
        (256, 80, 10)
    );
}

/// `commands` settings pincer cannot honour are refused by path, as not
/// supported; the values it honours (its defaults) parse.
#[test]
fn unsupported_commands_settings_are_refused_by_path() {
    for (setting, path) in [
        ("native: \"auto\"", "commands.native"),
        ("native: true", "commands.native"),
        ("nativeSkills: \"auto\"", "commands.nativeSkills"),
        ("text: false", "commands.text"),
        ("bash: true", "commands.bash"),
        ("bashForegroundMs: 5000", "commands.bashForegroundMs"),
        ("config: true", "commands.config"),
        ("debug: true", "commands.debug"),
        ("useAccessGroups: false", "commands.useAccessGroups"),
    ] {
        let error = parse(&format!("{{ commands: {{ {setting} }} }}"))
            .expect_err(setting)
            .to_string();
        assert!(
            error.contains(path) && error.contains("is not supported by pincer"),
            "{setting}: {error}"
        );
    }
    let honoured = "{ commands: { native: false, nativeSkills: false, text: true, bash: false, \
                    config: false, debug: false, useAccessGroups: true, allowFrom: { telegram: [8] } } }";
    let config = parse(honoured).expect("supported commands settings");
    assert_eq!(
        config.commands.allow_from["telegram"],
        vec!["8".to_string()]
    );
}

#[test]
fn chat_completions_body_cap_must_be_positive() {
    let message =
        error("{ gateway: { http: { endpoints: { chatCompletions: { maxBodyBytes: 0 } } } } }");
    assert!(
        message.starts_with("pincer.json5: gateway.http.endpoints.chatCompletions.maxBodyBytes:"),
        "{message}"
    );
    assert!(
        error("{ gateway: { http: { endpoints: { responses: { enabled: true } } } } }")
            .contains("gateway.http.endpoints.responses is not supported by pincer")
    );
}

#[test]
fn channel_and_commands_keys_pincer_lacks_are_unsupported_not_unknown() {
    for (config, path) in [
        (
            "{ channels: { discord: { token: 'd', guilds: { '1': { slug: 'home' } } } } }",
            "channels.discord.guilds.1.slug",
        ),
        (
            "{ channels: { discord: { token: 'd', guilds: { '1': { ignoreOtherMentions: true } } } } }",
            "channels.discord.guilds.1.ignoreOtherMentions",
        ),
        (
            "{ channels: { discord: { token: 'd', guilds: { '1': { channels: { '2': { ignoreOtherMentions: true } } } } } } }",
            "channels.discord.guilds.1.channels.2.ignoreOtherMentions",
        ),
        (
            "{ channels: { slack: { botToken: 'x', appToken: 'y', thread: { historyScope: 'thread' } } } }",
            "channels.slack.thread",
        ),
        (
            "{ channels: { slack: { botToken: 'x', appToken: 'y', typingReaction: 'eyes' } } }",
            "channels.slack.typingReaction",
        ),
        (
            "{ channels: { slack: { botToken: 'x', appToken: 'y', accounts: { w: { userToken: 'xoxp-1' } } } } }",
            "channels.slack.accounts.w.userToken",
        ),
        (
            "{ channels: { slack: { botToken: 'x', appToken: 'y', streaming: { mode: 'partial', nativeTransport: true } } } }",
            "channels.slack.streaming.nativeTransport",
        ),
        (
            "{ channels: { telegram: { botToken: 't', streaming: { mode: 'partial', preview: { toolProgress: false } } } } }",
            "channels.telegram.streaming.preview.toolProgress",
        ),
        ("{ commands: { ownerDisplay: 'hash' } }", "commands.ownerDisplay"),
        (
            "{ commands: { ownerDisplaySecret: 's' } }",
            "commands.ownerDisplaySecret",
        ),
    ] {
        let message = error(config);
        assert!(
            message.starts_with(&format!("pincer.json5: {path} is not supported by pincer")),
            "{config}: {message}"
        );
    }
    let message = error("{ agents: { defaults: { blockStreamingBreak: 'message_end' } } }");
    assert!(
        message.contains("agents.defaults.blockStreamingBreak")
            && message.contains("is not supported by pincer"),
        "{message}"
    );
    parse("{ agents: { defaults: { blockStreamingBreak: 'text_end' } } }").expect("text_end");
}

#[test]
fn a_mention_pattern_that_is_no_regex_is_refused_with_its_index() {
    let message = error("{ messages: { groupChat: { mentionPatterns: ['ok', '(unclosed'] } } }");
    assert!(
        message.contains("messages.groupChat.mentionPatterns[1]")
            && message.contains("not a valid regular expression"),
        "{message}"
    );
    let message =
        error("{ agents: { list: [ { id: 'a', groupChat: { mentionPatterns: ['a{99999}{99999}'] } } ] } }");
    assert!(
        message.contains("agents.list[0].groupChat.mentionPatterns[0]"),
        "{message}"
    );
    parse("{ messages: { groupChat: { mentionPatterns: ['\\\\bclawd?\\\\b'] } } }").expect("valid");
}

#[test]
fn typing_modes_started_by_deltas_are_refused_and_the_interval_is_checked() {
    for (config, path) in [
        (
            "{ session: { typingMode: 'message' } }",
            "session.typingMode",
        ),
        (
            "{ agents: { defaults: { typingMode: 'thinking' } } }",
            "agents.defaults.typingMode",
        ),
    ] {
        let message = error(config);
        assert!(
            message.contains(path) && message.contains("is not supported by pincer"),
            "{config}: {message}"
        );
    }
    assert!(error("{ session: { typingIntervalSeconds: 0 } }")
        .contains("session.typingIntervalSeconds"));
    parse("{ session: { typingMode: 'never', typingIntervalSeconds: 3 }, agents: { defaults: { typingMode: 'instant' } } }")
        .expect("never and instant");
}

#[test]
fn send_policy_rules_in_the_config_are_unsupported_not_unknown() {
    let message = error(
        "{ session: { sendPolicy: { rules: [ { action: 'deny', match: { channel: 'discord', chatType: 'group' } } ], default: 'allow' } } }",
    );
    assert!(
        message.starts_with("pincer.json5: session.sendPolicy is not supported by pincer"),
        "{message}"
    );
}

#[test]
fn control_ui_keys_parse_and_bad_paths_and_origins_name_their_key() {
    let config = parse(
        "{ gateway: { controlUi: { enabled: false, basePath: 'pincer', allowedOrigins: ['https://ops.example.com', '*'], allowInsecureAuth: true } } }",
    )
    .expect("honoured keys");
    let ui = &config.gateway.control_ui;
    assert!(!ui.enabled && ui.allow_insecure_auth);
    assert_eq!(ui.normalized_base_path(), "/pincer");
    assert_eq!(ui.allowed_origins.len(), 2);
    for (text, path) in [
        (
            "{ gateway: { controlUi: { basePath: '/a/../b' } } }",
            "gateway.controlUi.basePath",
        ),
        (
            "{ gateway: { controlUi: { basePath: '/a?x' } } }",
            "gateway.controlUi.basePath",
        ),
        (
            "{ gateway: { controlUi: { allowedOrigins: ['https://x', 'https://y/path'] } } }",
            "gateway.controlUi.allowedOrigins[1]",
        ),
        (
            "{ gateway: { controlUi: { allowedOrigins: ['localhost:18789'] } } }",
            "gateway.controlUi.allowedOrigins[0]",
        ),
    ] {
        let message = error(text);
        assert!(
            message.starts_with(&format!("pincer.json5: {path}: must be")),
            "{text}: {message}"
        );
    }
}

/// Keys of the settings review: upstream keys pincer does not honour are refused by name (the retired
/// global `cron.webhook`; an agent's `groupChat.historyLimit`, which upstream never reads either), a
/// compaction style pincer lacks is refused by value, and sub-agent thinking levels are checked.
#[test]
fn settings_review_keys_are_refused_or_checked() {
    for (config, path) in [
        (
            "{ cron: { webhook: 'https://example.com/hook' } }",
            "cron.webhook",
        ),
        (
            "{ agents: { list: [ { id: 'a', groupChat: { historyLimit: 5 } } ] } }",
            "agents.list[0].groupChat.historyLimit",
        ),
    ] {
        let message = error(config);
        assert!(
            message.starts_with(&format!("pincer.json5: {path} is not supported by pincer")),
            "{config}: {message}"
        );
    }
    assert!(
        error("{ agents: { defaults: { compaction: { mode: 'safeguard' } } } }")
            .contains("agents.defaults.compaction.mode: \"safeguard\" is not supported by pincer")
    );
    parse("{ agents: { defaults: { compaction: { mode: 'default', timeoutSeconds: 30 } } } }")
        .expect("the mode pincer has");
    assert!(
        error("{ agents: { defaults: { compaction: { timeoutSeconds: 0 } } } }")
            .contains("agents.defaults.compaction.timeoutSeconds")
    );
    assert!(
        error("{ agents: { list: [ { id: 'a', subagents: { thinking: 'loud' } } ] } }")
            .contains("agents.list[0].subagents.thinking")
    );
    parse("{ agents: { defaults: { subagents: { thinking: 'low' } } } }").expect("a known level");
    assert!(error("{ tools: { exec: { host: 'node' } } }")
        .contains("tools.exec.host: \"node\" is not supported by pincer"));
    parse("{ tools: { exec: { host: 'gateway' } } }").expect("a host pincer has");
    assert!(
        error("{ agents: { defaults: { sandbox: { docker: { network: 'bridge' } } } } }").contains(
            "agents.defaults.sandbox.docker.network: \"bridge\" is not supported by pincer"
        )
    );
    assert!(
        error("{ agents: { defaults: { sandbox: { docker: { user: 'node' } } } } }")
            .contains("agents.defaults.sandbox.docker.user")
    );
    parse(
        "{ agents: { defaults: { sandbox: { docker: { user: '1000:1000', network: 'none' } } } } }",
    )
    .expect("numeric ids, no network");
    for (config, path) in [
        ("{ tools: { web: { fetch: { headers: { 'x-a': 'b' } } } } }", "tools.web.fetch.headers"),
        ("{ tools: { web: { fetch: { provider: 'firecrawl' } } } }", "tools.web.fetch.provider"),
        (
            "{ tools: { web: { fetch: { ssrfPolicy: { dangerouslyAllowPrivateNetwork: true } } } } }",
            "tools.web.fetch.ssrfPolicy.dangerouslyAllowPrivateNetwork",
        ),
    ] {
        let message = error(config);
        assert!(
            message.starts_with(&format!("pincer.json5: {path} is not supported by pincer")),
            "{config}: {message}"
        );
    }
    assert!(
        error("{ tools: { web: { fetch: { cacheTtlMinutes: -1 } } } }")
            .contains("tools.web.fetch.cacheTtlMinutes")
    );
    parse("{ tools: { web: { fetch: { cacheTtlMinutes: 0.5, ssrfPolicy: { allowedHostnames: ['intranet'] } } } } }")
        .expect("web_fetch keys pincer has");
    let message = error(
        "{ agents: { list: [ { id: 'main' } ] }, channels: { telegram: { botToken: 't',
           groups: { '-100': { topics: { '7': { agentId: 'opps' } } } } } } }",
    );
    assert!(
        message.contains("channels.telegram.groups.-100.topics.7.agentId")
            && message.contains("opps"),
        "{message}"
    );
    parse(
        "{ agents: { list: [ { id: 'main' }, { id: 'ops' } ] }, channels: { telegram: { botToken: 't',
           groups: { '-100': { topics: { '7': { agentId: 'ops' } } } } } } }",
    )
    .expect("a listed agent");
    assert!(error("{ gateway: { mode: 'remote' } }")
        .contains("gateway.mode: \"remote\" is not supported by pincer"));
    parse("{ gateway: { mode: 'local' } }").expect("pincer is the local gateway");
}

#[test]
fn tools_media_takes_audio_models_and_refuses_what_pincer_does_not_run() {
    let config = parse(
        "{ tools: { media: { models: [{ provider: 'groq', model: 'whisper-large-v3-turbo', capabilities: ['audio'] }], \
           audio: { language: 'de', maxChars: 500 }, image: { maxBytes: 2000000 } } } }",
    )
    .expect("audio and image keys pincer honours");
    assert_eq!(config.tools.media.audio.language.as_deref(), Some("de"));
    assert_eq!(config.tools.media.image.max_bytes, Some(2_000_000));
    let command = error(
        "{ tools: { media: { models: [{ type: 'cli', command: 'whisper', provider: 'x' }] } } }",
    );
    assert!(
        command
            .starts_with("pincer.json5: tools.media.models[0].command is not supported by pincer"),
        "{command}"
    );
    assert_eq!(
        error("{ tools: { media: { models: [{ type: 'cli', provider: 'x' }] } } }"),
        "pincer.json5: tools.media.models[0].type: \"cli\" is not supported by pincer (it runs no media CLIs; use a provider entry with an OpenAI-compatible /audio/transcriptions endpoint)"
    );
    let image = error(
        "{ tools: { media: { models: [{ provider: 'openai', capabilities: ['image'] }] } } }",
    );
    assert!(
        image.starts_with("pincer.json5: tools.media.models[0].capabilities[0]: \"image\" is not supported by pincer"),
        "{image}"
    );
    for (config, path) in [
        (
            "{ tools: { media: { video: { enabled: true } } } }",
            "tools.media.video",
        ),
        (
            "{ tools: { media: { concurrency: 2 } } }",
            "tools.media.concurrency",
        ),
        (
            "{ tools: { media: { audio: { echoTranscript: true } } } }",
            "tools.media.audio.echoTranscript",
        ),
        (
            "{ tools: { media: { image: { prompt: 'Describe.' } } } }",
            "tools.media.image.prompt",
        ),
    ] {
        let message = error(config);
        assert!(
            message.starts_with(&format!("pincer.json5: {path} is not supported by pincer")),
            "{message}"
        );
    }
}

/// A build without a channel's cargo feature refuses that channel enabled,
/// naming the feature, and takes it disabled (so one config serves both builds).
/// Runs in `scripts/test`'s `--no-default-features` step.
#[test]
#[cfg(not(all(feature = "matrix", feature = "signal", feature = "whatsapp")))]
fn a_build_without_a_channel_feature_refuses_that_channel_enabled() {
    let mut missing = Vec::new();
    if cfg!(not(feature = "matrix")) {
        missing.push(("matrix", "Matrix"));
    }
    if cfg!(not(feature = "signal")) {
        missing.push(("signal", "Signal"));
    }
    if cfg!(not(feature = "whatsapp")) {
        missing.push(("whatsapp", "WhatsApp"));
    }
    for (id, name) in missing {
        assert_eq!(
            error(&format!("{{ channels: {{ {id}: {{ enabled: true }} }} }}")),
            format!(
                "pincer.json5: channels.{id}: this pincer was built without the {name} channel (cargo feature `{id}`); build it with the feature or set enabled: false"
            )
        );
        parse(&format!("{{ channels: {{ {id}: {{ enabled: false }} }} }}"))
            .unwrap_or_else(|e| panic!("{id} disabled: {e}"));
    }
}
