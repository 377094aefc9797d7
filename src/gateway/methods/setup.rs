//! `pincer.setup.*`: the first-run setup page's methods (pincer's own;
//! OpenClaw sets up through its CLI wizard). Only a setup session
//! (`gateway/setup.rs`) may call them, and only while setup is open:
//!
//! - `pincer.setup.status`: is setup open, where the config goes, and what
//!   first boot refused from the boot partition (`firstboot-error.json`),
//!   with its key path;
//! - `pincer.setup.test`: one real call to the provider the page describes
//!   (OpenAI-compatible, Anthropic or Ollama), not yet saved;
//! - `pincer.setup.channel`: checks a Telegram bot token (`getMe`), a
//!   Discord bot token (`GET /gateway/bot`) or Slack tokens (`auth.test`);
//! - `pincer.setup.apply`: writes provider, model, chat tokens and the
//!   gateway password into the config file (validated first, nothing written
//!   when invalid), pairs the page's device as the owner's, and restarts the
//!   gateway in place: the new process runs with the password, so setup is
//!   closed from then on.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::config::Config;
use crate::gateway::clients::ClientInfo;
use crate::gateway::frames::ErrorShape;
use crate::gateway::pairing::{self, PairingAsk};
use crate::gateway::setup::{self, SetupGrant};
use crate::gateway::state::GatewayState;
use crate::system::clock::now_ms;

use super::params::Params;

/// Shortest gateway password setup accepts.
pub const MIN_PASSWORD_CHARS: usize = 8;
/// How long the provider test and token checks may take.
pub const SETUP_CALL_TIMEOUT_MS: u64 = 20_000;
/// Wait between the `apply` answer and the restart (the answer goes out first).
pub const RESTART_DELAY_MS: u64 = 300;

/// A provider kind the page offers: id, wire API, default base URL, key needed.
struct Kind {
    id: &'static str,
    api: &'static str,
    base_url: &'static str,
    needs_key: bool,
}

const KINDS: [Kind; 3] = [
    Kind {
        id: "openai",
        api: "openai-completions",
        base_url: "https://api.openai.com/v1",
        needs_key: true,
    },
    Kind {
        id: "anthropic",
        api: "anthropic-messages",
        base_url: "https://api.anthropic.com",
        needs_key: true,
    },
    Kind {
        id: "ollama",
        api: "ollama",
        base_url: "http://127.0.0.1:11434",
        needs_key: false,
    },
];

/// The provider the page describes, checked.
struct Choice {
    kind: &'static Kind,
    base_url: String,
    api_key: Option<String>,
    model: String,
}

impl Choice {
    fn reference(&self) -> String {
        format!("{}/{}", self.kind.id, self.model)
    }

    /// `models.providers.<id>`.
    fn provider_json(&self) -> Value {
        let mut provider = json!({
            "baseUrl": self.base_url, "api": self.kind.api, "models": [{"id": self.model}],
        });
        if let Some(key) = &self.api_key {
            provider["apiKey"] = json!(key);
        }
        provider
    }
}

fn invalid(method: &str, message: impl std::fmt::Display) -> ErrorShape {
    ErrorShape::invalid(format!("invalid {method} params: {message}"))
}

fn choice(method: &str, params: &Value) -> Result<Choice, ErrorShape> {
    let provider = params
        .get("provider")
        .filter(|v| v.is_object())
        .ok_or_else(|| invalid(method, "provider must be an object"))?;
    let p = Params::new(method, provider)?;
    let kind_name = p.str("kind", false)?;
    let kind = KINDS.iter().find(|k| k.id == kind_name).ok_or_else(|| {
        invalid(
            method,
            format!("provider.kind must be one of openai, anthropic, ollama, got {kind_name:?}"),
        )
    })?;
    let base_url = p
        .opt_str("baseUrl")?
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .unwrap_or(kind.base_url)
        .trim_end_matches('/')
        .to_string();
    if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
        return Err(invalid(
            method,
            format!("provider.baseUrl must be an http(s) URL, got {base_url:?}"),
        ));
    }
    let api_key = p
        .opt_str("apiKey")?
        .map(str::trim)
        .filter(|k| !k.is_empty());
    if kind.needs_key && api_key.is_none() {
        return Err(invalid(
            method,
            format!("provider.apiKey is required for {}", kind.id),
        ));
    }
    let model = p.str("model", false)?.trim().to_string();
    Ok(Choice {
        kind,
        base_url,
        api_key: api_key.map(str::to_string),
        model,
    })
}

/// The caller's setup grant, while setup is open.
fn session<'a>(state: &GatewayState, info: &'a ClientInfo) -> Result<&'a SetupGrant, ErrorShape> {
    let grant = info.setup.as_ref().ok_or_else(|| {
        ErrorShape::invalid("first-run setup methods need a setup session (setup is done, or this connection authenticated)")
    })?;
    if !setup::is_open(state) {
        return Err(ErrorShape::invalid(
            "first-run setup is done: sign in with the gateway password",
        ));
    }
    Ok(grant)
}

/// Runs one `pincer.setup.*` method for a setup session.
pub async fn handle(
    state: &Arc<GatewayState>,
    info: &ClientInfo,
    method: &str,
    params: &Value,
) -> Result<Value, ErrorShape> {
    let grant = session(state, info)?;
    match method {
        "pincer.setup.status" => Ok(status(state)),
        "pincer.setup.test" => test(state, params).await,
        "pincer.setup.channel" => channel(state, params).await,
        "pincer.setup.apply" => apply(state, grant, params).await,
        other => Err(ErrorShape::invalid(format!("unknown method: {other}"))),
    }
}

fn status(state: &GatewayState) -> Value {
    let loaded = state.loaded();
    let path = loaded
        .path
        .clone()
        .or_else(|| crate::config::candidate_paths(None).into_iter().next());
    let firstboot = match crate::system::firstboot_error::load(&state.services.data_dir) {
        Ok(record) => record
            .iter()
            .map(|(file, refused)| {
                json!({
                    "file": file, "error": refused.error, "keyPath": refused.key_path,
                    "keptAs": refused.kept_as.display().to_string(), "atMs": refused.at_ms,
                })
            })
            .collect(),
        Err(e) => {
            vec![json!({"file": crate::system::firstboot_error::FIRSTBOOT_ERROR_FILE, "error": e})]
        }
    };
    let kinds: Vec<Value> = KINDS
        .iter()
        .map(|k| json!({"kind": k.id, "baseUrl": k.base_url, "needsKey": k.needs_key}))
        .collect();
    json!({
        "open": setup::is_open(state),
        "configPath": path.map(|p| p.display().to_string()),
        "firstboot": firstboot,
        "providers": kinds,
        "minPasswordChars": MIN_PASSWORD_CHARS,
    })
}

/// A config with only the chosen provider as the default model (read by
/// the config's own parser: a second `Deserialize` of the whole config for
/// `serde_json::Value` would cost the binary hundreds of KiB).
fn probe_config(choice: &Choice) -> Result<Config, ErrorShape> {
    let value = json!({
        "models": {"providers": {choice.kind.id: choice.provider_json()}},
        "agents": {"defaults": {"model": {"primary": choice.reference()}}},
    });
    crate::config::parse_value(value, "provider").map_err(|e| super::config::invalid_config(&e))
}

async fn test(state: &GatewayState, params: &Value) -> Result<Value, ErrorShape> {
    let choice = choice("pincer.setup.test", params)?;
    let config = probe_config(&choice)?;
    let timeout = Duration::from_millis(SETUP_CALL_TIMEOUT_MS);
    let results =
        crate::agent::probe_provider(&config, choice.kind.id, None, &state.http(), timeout)
            .await
            .map_err(|e| ErrorShape::invalid(e.to_string()))?;
    let first = results
        .first()
        .ok_or_else(|| ErrorShape::unavailable("nothing was probed"))?;
    Ok(json!({
        "ok": first.status == crate::agent::ProbeStatus::Ok,
        "status": first.status.as_str(),
        "model": first.model,
        "latencyMs": first.latency_ms,
        "error": first.error,
        "reply": first.reply,
    }))
}

async fn channel(state: &GatewayState, params: &Value) -> Result<Value, ErrorShape> {
    let method = "pincer.setup.channel";
    let p = Params::new(method, params)?;
    let channel = p.str("channel", false)?;
    let token = p.str("token", false)?.trim();
    let config = state.config();
    let http = state.http();
    let timeout = Duration::from_millis(SETUP_CALL_TIMEOUT_MS);
    match channel {
        "telegram" => {
            let account = config
                .channels
                .telegram
                .as_ref()
                .and_then(|t| t.account("default"));
            let root = account.as_ref().and_then(|a| a.api_root.clone());
            let api =
                crate::channels::telegram::api::BotApi::new(http, root.as_deref(), token, timeout);
            match api.get_me().await {
                Ok(me) => Ok(
                    json!({"ok": true, "channel": channel, "id": me.id.to_string(), "username": me.username}),
                ),
                Err(e) => Ok(
                    json!({"ok": false, "channel": channel, "error": api.redact(&e.to_string())}),
                ),
            }
        }
        "discord" => {
            let account = config
                .channels
                .discord
                .as_ref()
                .and_then(|d| d.account("default"));
            let base = account
                .map(|a| a.effective_api_base_url())
                .unwrap_or_else(|| {
                    crate::config::schema::discord::DEFAULT_DISCORD_API_BASE_URL.to_string()
                });
            let rest = crate::channels::discord::rest::DiscordRest::new(&base, token, http)
                .map_err(ErrorShape::invalid)?;
            match tokio::time::timeout(timeout, rest.gateway_url()).await {
                Ok(Ok(_)) => Ok(json!({"ok": true, "channel": channel})),
                Ok(Err(e)) => Ok(json!({"ok": false, "channel": channel, "error": e.to_string()})),
                Err(_) => Ok(
                    json!({"ok": false, "channel": channel, "error": "Discord did not answer in time"}),
                ),
            }
        }
        "slack" => {
            let app_token = p.str("appToken", false)?.trim();
            let account = config
                .channels
                .slack
                .as_ref()
                .and_then(|s| s.account("default"));
            let url = account
                .map(|a| a.effective_api_url())
                .unwrap_or_else(|| crate::config::schema::slack::DEFAULT_SLACK_API_URL.to_string());
            let web = crate::channels::slack::web::SlackWeb::new(&url, token, app_token, http)
                .map_err(ErrorShape::invalid)?;
            match tokio::time::timeout(timeout, web.auth_test()).await {
                Ok(Ok(me)) => Ok(json!({"ok": true, "channel": channel, "id": me.user_id})),
                Ok(Err(e)) => Ok(json!({"ok": false, "channel": channel, "error": e.to_string()})),
                Err(_) => Ok(
                    json!({"ok": false, "channel": channel, "error": "Slack did not answer in time"}),
                ),
            }
        }
        other => Err(invalid(
            method,
            format!("channel must be telegram, discord or slack, got {other:?}"),
        )),
    }
}

/// The chat tokens of an `apply`, as `channels` keys.
fn channels_patch(method: &str, params: &Value) -> Result<Value, ErrorShape> {
    let mut patch = serde_json::Map::new();
    let Some(channels) = params.get("channels").filter(|v| !v.is_null()) else {
        return Ok(Value::Object(patch));
    };
    let text = |section: &str, key: &str| -> Result<Option<String>, ErrorShape> {
        match channels.get(section).and_then(|s| s.get(key)) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.trim().to_string())),
            Some(_) => Err(invalid(
                method,
                format!("channels.{section}.{key} must be a string"),
            )),
        }
    };
    if let Some(token) = text("telegram", "botToken")? {
        patch.insert("telegram".into(), json!({"botToken": token}));
    }
    if let Some(token) = text("discord", "token")? {
        patch.insert("discord".into(), json!({"token": token}));
    }
    match (text("slack", "botToken")?, text("slack", "appToken")?) {
        (Some(bot), Some(app)) => {
            patch.insert("slack".into(), json!({"botToken": bot, "appToken": app}));
        }
        (None, None) => {}
        _ => {
            return Err(invalid(
                method,
                "channels.slack needs both botToken and appToken",
            ))
        }
    }
    Ok(Value::Object(patch))
}

async fn apply(
    state: &Arc<GatewayState>,
    grant: &SetupGrant,
    params: &Value,
) -> Result<Value, ErrorShape> {
    let method = "pincer.setup.apply";
    let choice = choice(method, params)?;
    let p = Params::new(method, params)?;
    let password = p.str("password", false)?;
    if password.chars().count() < MIN_PASSWORD_CHARS {
        return Err(invalid(
            method,
            format!("password must have at least {MIN_PASSWORD_CHARS} characters"),
        ));
    }
    let patch = json!({
        "models": {"providers": {choice.kind.id: choice.provider_json()}},
        "agents": {"defaults": {"model": {"primary": choice.reference()}}},
        "channels": channels_patch(method, params)?,
        "gateway": {"auth": {"mode": "password", "password": password}},
    });
    let loaded = state.loaded();
    let mut next = if loaded.raw.trim().is_empty() {
        json!({})
    } else {
        crate::config::parse_json5(&loaded.raw, "config").map_err(|e| {
            ErrorShape::unavailable(format!("the current config file no longer parses: {e}"))
        })?
    };
    crate::config::merge_patch(&mut next, &patch);
    super::config::check(&next)?;
    // The page's device is the owner's from now on: paired before the
    // password exists, so its first sign-in is not a pairing request.
    let ask = PairingAsk {
        device_id: &grant.device_id,
        public_key: &grant.public_key,
        role: "operator",
        scopes: &grant.scopes,
        client_id: &grant.client_id,
        client_mode: &grant.client_mode,
        display_name: grant.display_name.as_deref(),
        platform: grant.platform.as_deref(),
        device_family: None,
        remote_ip: String::new(),
        is_loopback: false,
    };
    let store = &state.services.store;
    store
        .run_blocking(|| pairing::approve_directly(store, &ask, now_ms()))
        .map_err(|e| ErrorShape::unavailable(format!("device store unavailable: {e}")))?;
    let committed = super::config::commit(state, &next, method)?;
    log::info!(
        "first-run setup applied from the Control UI ({}): provider {}, config {}; restarting",
        grant.device_id,
        choice.reference(),
        committed.path.display()
    );
    let restarting = Arc::clone(state);
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(RESTART_DELAY_MS)).await;
        restarting
            .lifecycle
            .request_restart("first-run setup applied");
    });
    Ok(json!({
        "ok": true,
        "path": committed.path.display().to_string(),
        "model": choice.reference(),
        "deviceId": grant.device_id,
        "restarting": true,
    }))
}
