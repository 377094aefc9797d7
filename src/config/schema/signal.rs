//! `channels.signal`: a Signal account through signal-cli's JSON-RPC
//! daemon (`account`, `accountUuid`, the account-owned `transport`),
//! DM and group gating, chunking (4000 characters), read receipts and
//! per-account overrides.
//!
//! Names and defaults follow OpenClaw's Signal channel: `dmPolicy`
//! pairing, `groupPolicy` allowlist, a managed signal-cli (`signal-cli`
//! on PATH, bound to 127.0.0.1:8080) when no transport is given, and a
//! named account never inheriting the top-level `transport`. The retired
//! top-level transport keys (`httpUrl`, `cliPath`, `httpHost`,
//! `httpPort`, `autoStart`) are read the way upstream's doctor migrates
//! them. Keys pincer does not implement are refused in `unsupported.rs`;
//! the `container` transport (bbernhard's REST API) is refused by
//! validation.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::channels::{channel_accounts, StreamingBlock, StreamingKeys, StreamingMode};
use super::common::{ChunkMode, DmPolicy, GroupPolicy};
use crate::config::de;

/// Outbound text chunk size (upstream's Signal `textChunkLimit` default).
pub const DEFAULT_SIGNAL_TEXT_CHUNK_LIMIT: u32 = 4000;
/// Where a managed daemon listens unless `httpHost`/`httpPort` say otherwise.
pub const DEFAULT_SIGNAL_HTTP_HOST: &str = "127.0.0.1";
pub const DEFAULT_SIGNAL_HTTP_PORT: u16 = 8080;
/// The executable of a managed daemon unless `cliPath` names one.
pub const DEFAULT_SIGNAL_CLI_PATH: &str = "signal-cli";
/// How long a managed daemon may take to answer `/api/v1/check`.
pub const DEFAULT_SIGNAL_STARTUP_TIMEOUT_MS: u64 = 30_000;

channel_accounts! {
    /// One Signal account (every key optional; see `effective_*`).
    account SignalAccountConfig;
    /// `channels.signal`: the default account's keys plus named accounts.
    channel SignalConfig;
    fields {
        /// Label of the account in `channels.status`.
        name: String,
        enabled: bool,
        /// The bot's number in E.164 (`+15551234567`).
        account: String,
        /// The bot's account UUID (mentions by UUID, loop protection).
        account_uuid: String,
        transport: SignalTransportConfig,
        /// Retired transport keys, read as upstream's doctor migrates them.
        http_url: String,
        cli_path: String,
        http_host: String,
        http_port: u16,
        auto_start: bool,
        dm_policy: DmPolicy,
        #[serde(deserialize_with = "de::opt_id_list")]
        allow_from: Vec<String>,
        group_policy: GroupPolicy,
        #[serde(deserialize_with = "de::opt_id_list")]
        group_allow_from: Vec<String>,
        groups: BTreeMap<String, SignalGroupConfig>,
        text_chunk_limit: u32,
        streaming: SignalStreamingConfig,
        history_limit: u32,
        send_read_receipts: bool,
        ignore_attachments: bool,
    }
}

/// `transport.kind`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SignalTransportKind {
    /// pincer starts and supervises signal-cli's daemon.
    #[default]
    ManagedNative,
    /// A signal-cli daemon someone else runs, at `url`.
    ExternalNative,
    /// bbernhard's signal-cli-rest-api (refused by validation).
    Container,
}

/// `transport.receiveMode` of a managed daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SignalReceiveMode {
    OnStart,
    Manual,
}

impl SignalReceiveMode {
    pub fn as_arg(self) -> &'static str {
        match self {
            SignalReceiveMode::OnStart => "on-start",
            SignalReceiveMode::Manual => "manual",
        }
    }
}

/// `transport`: how the account reaches signal-cli.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct SignalTransportConfig {
    pub kind: Option<SignalTransportKind>,
    /// The daemon's base URL (external), or where to reach a managed one
    /// when it differs from its bind address.
    pub url: Option<String>,
    pub cli_path: Option<String>,
    /// signal-cli's `--config` directory.
    pub config_path: Option<String>,
    pub http_host: Option<String>,
    pub http_port: Option<u16>,
    pub startup_timeout_ms: Option<u64>,
    pub receive_mode: Option<SignalReceiveMode>,
    pub ignore_stories: Option<bool>,
}

/// `groups.<group id | "*">`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct SignalGroupConfig {
    pub require_mention: Option<bool>,
}

/// `streaming` of a Signal account: no previews (Signal cannot edit a
/// sent message through signal-cli's daemon here), chunking and blocks.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct SignalStreamingConfig {
    pub chunk_mode: Option<ChunkMode>,
    pub block: Option<StreamingBlock>,
}

impl StreamingKeys for SignalStreamingConfig {
    fn mode(&self) -> Option<StreamingMode> {
        None
    }
    fn chunk_mode(&self) -> Option<ChunkMode> {
        self.chunk_mode
    }
    fn block(&self) -> Option<&StreamingBlock> {
        self.block.as_ref()
    }
}

/// How one account reaches its daemon, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignalEndpoint {
    /// Connect to a daemon at `url`.
    External { url: String },
    /// Start `cli_path … daemon --http host:port` and talk to `url`.
    Managed(ManagedDaemon),
    /// bbernhard's REST API (never run: validation refuses it).
    Container { url: String },
}

/// A daemon pincer starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagedDaemon {
    pub cli_path: String,
    pub config_path: Option<String>,
    pub http_host: String,
    pub http_port: u16,
    /// Where pincer connects (the bind address unless `url` says otherwise).
    pub url: String,
    pub startup_timeout_ms: u64,
    pub receive_mode: Option<SignalReceiveMode>,
    pub ignore_stories: bool,
}

fn trimmed(value: &Option<String>) -> Option<String> {
    value
        .as_deref()
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_string)
}

/// `http://host:port` with IPv6 hosts bracketed.
pub fn http_url_of(host: &str, port: u16) -> String {
    let host = host.trim_matches(['[', ']']);
    if host.contains(':') {
        format!("http://[{host}]:{port}")
    } else {
        format!("http://{host}:{port}")
    }
}

impl SignalAccountConfig {
    /// Signal sends no previews.
    pub const DEFAULT_STREAMING_MODE: StreamingMode = StreamingMode::Off;

    /// `streaming.chunkMode`, else by length.
    pub fn effective_chunk_mode(&self) -> ChunkMode {
        self.streaming_chunk_mode().unwrap_or_default()
    }

    pub fn effective_dm_policy(&self) -> DmPolicy {
        self.dm_policy.unwrap_or(DmPolicy::Pairing)
    }

    pub fn effective_group_policy(&self) -> GroupPolicy {
        self.group_policy.unwrap_or(GroupPolicy::Allowlist)
    }

    pub fn effective_allow_from(&self) -> Vec<String> {
        self.allow_from.clone().unwrap_or_default()
    }

    pub fn effective_text_chunk_limit(&self) -> u32 {
        self.text_chunk_limit
            .unwrap_or(DEFAULT_SIGNAL_TEXT_CHUNK_LIMIT)
    }

    /// The bot's number, trimmed; `None` when unset.
    pub fn effective_account(&self) -> Option<String> {
        trimmed(&self.account)
    }

    pub fn effective_account_uuid(&self) -> Option<String> {
        trimmed(&self.account_uuid)
    }

    /// The endpoint: `transport` when set; else the retired keys as
    /// upstream's migration reads them (`httpUrl` without `autoStart: true`
    /// is an external daemon; otherwise a managed one with `cliPath`,
    /// `httpHost`, `httpPort`); else a managed `signal-cli` on
    /// 127.0.0.1:8080.
    pub fn endpoint(&self) -> SignalEndpoint {
        if let Some(transport) = &self.transport {
            let url = trimmed(&transport.url).map(|u| u.trim_end_matches('/').to_string());
            return match transport.kind.unwrap_or_default() {
                SignalTransportKind::ExternalNative => SignalEndpoint::External {
                    url: url.unwrap_or_default(),
                },
                SignalTransportKind::Container => SignalEndpoint::Container {
                    url: url.unwrap_or_default(),
                },
                SignalTransportKind::ManagedNative => {
                    let host = trimmed(&transport.http_host)
                        .unwrap_or_else(|| DEFAULT_SIGNAL_HTTP_HOST.to_string());
                    let port = transport.http_port.unwrap_or(DEFAULT_SIGNAL_HTTP_PORT);
                    SignalEndpoint::Managed(ManagedDaemon {
                        cli_path: trimmed(&transport.cli_path)
                            .unwrap_or_else(|| DEFAULT_SIGNAL_CLI_PATH.to_string()),
                        config_path: trimmed(&transport.config_path),
                        url: url.unwrap_or_else(|| http_url_of(&host, port)),
                        http_host: host,
                        http_port: port,
                        startup_timeout_ms: transport
                            .startup_timeout_ms
                            .unwrap_or(DEFAULT_SIGNAL_STARTUP_TIMEOUT_MS),
                        receive_mode: transport.receive_mode,
                        ignore_stories: transport.ignore_stories.unwrap_or(false),
                    })
                }
            };
        }
        let http_url = trimmed(&self.http_url).map(|u| u.trim_end_matches('/').to_string());
        let auto_start = self.auto_start.unwrap_or(http_url.is_none());
        if let (Some(url), false) = (&http_url, auto_start) {
            return SignalEndpoint::External { url: url.clone() };
        }
        let host = trimmed(&self.http_host).unwrap_or_else(|| DEFAULT_SIGNAL_HTTP_HOST.to_string());
        let port = self.http_port.unwrap_or(DEFAULT_SIGNAL_HTTP_PORT);
        SignalEndpoint::Managed(ManagedDaemon {
            cli_path: trimmed(&self.cli_path)
                .unwrap_or_else(|| DEFAULT_SIGNAL_CLI_PATH.to_string()),
            config_path: None,
            url: http_url.unwrap_or_else(|| http_url_of(&host, port)),
            http_host: host,
            http_port: port,
            startup_timeout_ms: DEFAULT_SIGNAL_STARTUP_TIMEOUT_MS,
            receive_mode: None,
            ignore_stories: false,
        })
    }
}

impl SignalConfig {
    /// The account's settings over the channel level; a named account
    /// owns its `transport` (the top-level one belongs to `default` only).
    pub fn account(&self, account_id: &str) -> Option<SignalAccountConfig> {
        let mut merged = self.merged_account(account_id)?;
        if account_id != super::channels::DEFAULT_ACCOUNT_ID {
            merged.transport = self
                .accounts
                .get(account_id)
                .and_then(|a| a.transport.clone());
        }
        Some(merged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> SignalConfig {
        serde_json::from_str(json).expect("signal config")
    }

    #[test]
    fn signal_defaults_match_openclaw() {
        let signal = parse(r#"{"account":" +15550001 "}"#);
        let account = signal.account("default").expect("default");
        assert_eq!(account.effective_account().as_deref(), Some("+15550001"));
        assert_eq!(account.effective_dm_policy(), DmPolicy::Pairing);
        assert_eq!(account.effective_group_policy(), GroupPolicy::Allowlist);
        assert_eq!(account.effective_text_chunk_limit(), 4000);
        assert_eq!(account.effective_streaming_mode(), StreamingMode::Off);
        assert_eq!(
            account.endpoint(),
            SignalEndpoint::Managed(ManagedDaemon {
                cli_path: "signal-cli".into(),
                config_path: None,
                http_host: "127.0.0.1".into(),
                http_port: 8080,
                url: "http://127.0.0.1:8080".into(),
                startup_timeout_ms: 30_000,
                receive_mode: None,
                ignore_stories: false,
            })
        );
    }

    #[test]
    fn transport_keys_resolve_and_named_accounts_do_not_inherit_it() {
        let signal = parse(
            r#"{"transport":{"kind":"managed-native","cliPath":"/opt/signal-cli/bin/signal-cli",
                  "configPath":"/var/lib/signal","httpHost":"::1","httpPort":18080,
                  "startupTimeoutMs":5000,"receiveMode":"manual","ignoreStories":true},
                "accounts":{"default":{},"work":{"account":"+1555"},
                  "ext":{"transport":{"kind":"external-native","url":"http://10.0.0.2:8080/"}}}}"#,
        );
        let SignalEndpoint::Managed(daemon) = signal.account("default").expect("d").endpoint()
        else {
            panic!("managed expected")
        };
        assert_eq!(daemon.cli_path, "/opt/signal-cli/bin/signal-cli");
        assert_eq!(daemon.config_path.as_deref(), Some("/var/lib/signal"));
        assert_eq!(daemon.url, "http://[::1]:18080");
        assert_eq!(daemon.startup_timeout_ms, 5000);
        assert_eq!(daemon.receive_mode, Some(SignalReceiveMode::Manual));
        assert!(daemon.ignore_stories);
        // `work` has no transport of its own: managed defaults, not the top-level one.
        let SignalEndpoint::Managed(work) = signal.account("work").expect("w").endpoint() else {
            panic!("managed expected")
        };
        assert_eq!(work.cli_path, "signal-cli");
        assert_eq!(work.http_port, 8080);
        assert_eq!(
            signal.account("ext").expect("e").endpoint(),
            SignalEndpoint::External {
                url: "http://10.0.0.2:8080".into()
            }
        );
    }

    #[test]
    fn retired_transport_keys_read_as_upstream_migrates_them() {
        let external = parse(r#"{"httpUrl":"http://127.0.0.1:9000/"}"#);
        assert_eq!(
            external.account("default").expect("d").endpoint(),
            SignalEndpoint::External {
                url: "http://127.0.0.1:9000".into()
            }
        );
        let managed = parse(
            r#"{"cliPath":"/usr/bin/signal-cli","httpHost":"127.0.0.2","httpPort":9001,
                "accounts":{"spawned":{"httpUrl":"http://127.0.0.2:9001","autoStart":true}}}"#,
        );
        let SignalEndpoint::Managed(daemon) = managed.account("default").expect("d").endpoint()
        else {
            panic!("managed expected")
        };
        assert_eq!(daemon.cli_path, "/usr/bin/signal-cli");
        assert_eq!(daemon.url, "http://127.0.0.2:9001");
        assert_eq!(
            (daemon.http_host.as_str(), daemon.http_port),
            ("127.0.0.2", 9001)
        );
        assert!(matches!(
            managed.account("spawned").expect("s").endpoint(),
            SignalEndpoint::Managed(ManagedDaemon { ref url, .. }) if url == "http://127.0.0.2:9001"
        ));
    }

    #[test]
    fn unknown_transport_kinds_and_keys_are_refused() {
        assert!(serde_json::from_str::<SignalConfig>(r#"{"transport":{"kind":"dbus"}}"#).is_err());
        assert!(serde_json::from_str::<SignalConfig>(
            r#"{"groups":{"g":{"requireMention":true}}}"#
        )
        .is_ok());
        assert!(serde_json::from_str::<SignalConfig>(r#"{"groups":{"g":{"x":1}}}"#).is_err());
    }
}
