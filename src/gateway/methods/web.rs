//! `web.login.start` and `web.login.wait`: linking a channel account by QR
//! code (WhatsApp), as upstream's gateway has them — callable with
//! `operator.admin`, not advertised in `hello-ok` — for the Control UI's
//! WhatsApp card and `pincer channels login`.
//!
//! The gateway only validates params, finds the adapter that links by QR code
//! (the `channel` param, else the first such adapter) and shapes the answer;
//! linking itself is the adapter's [`QrLogin`] capability. Results carry
//! upstream's fields (`qrDataUrl`, `message`, `connected`) and a few of
//! pincer's, which upstream's clients ignore: `qr` (the payload, for a
//! terminal rendering), `linkedAs` (`+number`), `waiting` (the login goes on).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::channels::{Channel, QrLogin, QrLoginError, QrLoginStart, QrLoginWait};
use crate::gateway::frames::ErrorShape;
use crate::gateway::state::GatewayState;

use super::params::Params;

/// Upstream's default wait for the first QR code, and its floor.
pub const START_TIMEOUT_DEFAULT_MS: u64 = 30_000;
pub const START_TIMEOUT_MIN_MS: u64 = 5_000;
/// Upstream's default wait for the scan, and its floor.
pub const WAIT_TIMEOUT_DEFAULT_MS: u64 = 120_000;
pub const WAIT_TIMEOUT_MIN_MS: u64 = 1_000;
/// pincer's ceiling on either wait (a request holds its connection's handler task).
pub const TIMEOUT_MAX_MS: u64 = 600_000;
/// Upstream's schema: `currentQrDataUrl` is a PNG data URL of at most this many characters.
pub const MAX_QR_DATA_URL_CHARS: usize = 16_384;

const START_KEYS: &[&str] = &["channel", "force", "timeoutMs", "verbose", "accountId"];
const WAIT_KEYS: &[&str] = &[
    "channel",
    "sessionKey",
    "timeoutMs",
    "accountId",
    "currentQrDataUrl",
];

/// Refuses a property upstream's closed schema does not have.
fn closed(method: &str, params: &Value, keys: &[&str]) -> Result<(), ErrorShape> {
    if let Some(unknown) = params
        .as_object()
        .and_then(|o| o.keys().find(|k| !keys.contains(&k.as_str())))
    {
        return Err(ErrorShape::invalid(format!(
            "invalid {method} params: unexpected property {unknown:?} (allowed: {})",
            keys.join(", ")
        )));
    }
    Ok(())
}

fn timeout(p: &Params<'_>, default_ms: u64, min_ms: u64) -> Result<Duration, ErrorShape> {
    let ms = p.opt_u64("timeoutMs", 0, u64::MAX)?.unwrap_or(default_ms);
    Ok(Duration::from_millis(ms.clamp(min_ms, TIMEOUT_MAX_MS)))
}

/// The adapter asked for (`channel`), else the first that links by QR code.
fn provider(state: &GatewayState, channel: Option<&str>) -> Result<Arc<dyn Channel>, ErrorShape> {
    let registry = &state.services.channels;
    let found = match channel.map(|c| c.trim().to_ascii_lowercase()) {
        Some(id) => registry.get(&id),
        None => registry
            .ids()
            .iter()
            .filter_map(|id| registry.get(id))
            .find(|adapter| adapter.qr_login().is_some()),
    };
    match found {
        Some(adapter) if adapter.qr_login().is_some() => Ok(adapter),
        Some(adapter) => Err(ErrorShape::invalid(format!(
            "web login is not supported by provider {} (only WhatsApp links by QR code)",
            adapter.id()
        ))),
        None => Err(ErrorShape::invalid(format!(
            "web login provider is not available: {}",
            missing_provider_hint(state)
        ))),
    }
}

/// Why no adapter links by QR code here.
fn missing_provider_hint(state: &GatewayState) -> String {
    let configured = state
        .config()
        .channels
        .whatsapp
        .as_ref()
        .map(|w| w.base().effective_enabled());
    match configured {
        Some(true) if cfg!(not(feature = "whatsapp")) => {
            "this pincer was built without the WhatsApp channel (cargo feature `whatsapp`)".into()
        }
        Some(true) => "the WhatsApp channel (channels.whatsapp) is not running".into(),
        Some(false) => "channels.whatsapp is disabled (enabled: false)".into(),
        None => "no channel that links by QR code is configured (add channels.whatsapp)".into(),
    }
}

fn login_error(error: QrLoginError) -> ErrorShape {
    match error {
        QrLoginError::UnknownAccount { .. } | QrLoginError::Disabled { .. } => {
            ErrorShape::invalid(error.to_string())
        }
        QrLoginError::Unavailable(message) => ErrorShape::unavailable(message),
    }
}

fn qr_login(adapter: &Arc<dyn Channel>) -> Result<&dyn QrLogin, ErrorShape> {
    adapter
        .qr_login()
        .ok_or_else(|| ErrorShape::invalid("web login is not supported by this provider"))
}

/// `web.login.start`.
pub async fn start(state: &GatewayState, params: &Value) -> Result<Value, ErrorShape> {
    const METHOD: &str = "web.login.start";
    let p = Params::new(METHOD, params)?;
    closed(METHOD, params, START_KEYS)?;
    let channel = p.opt_str("channel")?;
    if channel.is_some_and(|c| c.trim().is_empty()) {
        return Err(ErrorShape::invalid(format!(
            "invalid {METHOD} params: channel must be a non-empty string"
        )));
    }
    let request = QrLoginStart {
        account_id: p.opt_str("accountId")?.map(str::to_string),
        force: p.opt_bool("force")?.unwrap_or(false),
        timeout: timeout(&p, START_TIMEOUT_DEFAULT_MS, START_TIMEOUT_MIN_MS)?,
    };
    // `verbose` is accepted as upstream does: it only adds logging there.
    p.opt_bool("verbose")?;
    let adapter = provider(state, channel)?;
    let started = qr_login(&adapter)?
        .login_qr_start(request)
        .await
        .map_err(login_error)?;
    let mut out = Map::new();
    if let Some(url) = started.qr_data_url {
        out.insert("qrDataUrl".into(), json!(url));
    }
    out.insert("message".into(), json!(started.message));
    if let Some(connected) = started.connected {
        out.insert("connected".into(), json!(connected));
    }
    if let Some(qr) = started.qr_text {
        out.insert("qr".into(), json!(qr));
    }
    if let Some(who) = started.linked_as {
        out.insert("linkedAs".into(), json!(who));
    }
    Ok(Value::Object(out))
}

/// `channels.logout` (scope `operator.admin`, as upstream): unlinks an
/// account of a channel that links by QR code; other channels are refused
/// as upstream refuses a channel without a logout. Answers upstream's
/// `channel`, `accountId`, `cleared` and WhatsApp's `loggedOut`.
pub async fn logout(state: &GatewayState, params: &Value) -> Result<Value, ErrorShape> {
    const METHOD: &str = "channels.logout";
    let p = Params::new(METHOD, params)?;
    closed(METHOD, params, &["channel", "accountId"])?;
    let channel = p
        .opt_str("channel")?
        .map(|c| c.trim().to_ascii_lowercase())
        .filter(|c| !c.is_empty())
        .ok_or_else(|| ErrorShape::invalid(format!("invalid {METHOD} channel")))?;
    let adapter = state
        .services
        .channels
        .get(&channel)
        .ok_or_else(|| ErrorShape::invalid(format!("channel {channel} is not running here")))?;
    let logout = adapter
        .qr_login()
        .ok_or_else(|| ErrorShape::invalid(format!("channel {channel} does not support logout")))?;
    let account_id = p
        .opt_str("accountId")?
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(str::to_string);
    let done = logout.logout(account_id).await.map_err(login_error)?;
    Ok(json!({
        "channel": channel,
        "accountId": done.account_id,
        "cleared": done.cleared,
        "loggedOut": done.logged_out,
    }))
}

/// `web.login.wait`.
pub async fn wait(state: &GatewayState, params: &Value) -> Result<Value, ErrorShape> {
    const METHOD: &str = "web.login.wait";
    let p = Params::new(METHOD, params)?;
    closed(METHOD, params, WAIT_KEYS)?;
    let channel = p.opt_str("channel")?;
    for name in ["channel", "sessionKey"] {
        if p.opt_str(name)?.is_some_and(|v| v.trim().is_empty()) {
            return Err(ErrorShape::invalid(format!(
                "invalid {METHOD} params: {name} must be a non-empty string"
            )));
        }
    }
    let current = p.opt_str("currentQrDataUrl")?;
    if let Some(url) = current {
        if url.len() > MAX_QR_DATA_URL_CHARS || !url.starts_with("data:image/png;base64,") {
            return Err(ErrorShape::invalid(format!(
                "invalid {METHOD} params: currentQrDataUrl must be a data:image/png;base64, URL of at most {MAX_QR_DATA_URL_CHARS} characters"
            )));
        }
    }
    let request = QrLoginWait {
        account_id: p.opt_str("accountId")?.map(str::to_string),
        timeout: timeout(&p, WAIT_TIMEOUT_DEFAULT_MS, WAIT_TIMEOUT_MIN_MS)?,
        current_qr_data_url: current.map(str::to_string),
    };
    let adapter = provider(state, channel)?;
    let waited = qr_login(&adapter)?
        .login_qr_wait(request)
        .await
        .map_err(login_error)?;
    let mut out = Map::new();
    out.insert("connected".into(), json!(waited.connected));
    out.insert("message".into(), json!(waited.message));
    if let Some(url) = waited.qr_data_url {
        out.insert("qrDataUrl".into(), json!(url));
    }
    if let Some(qr) = waited.qr_text {
        out.insert("qr".into(), json!(qr));
    }
    if let Some(who) = waited.linked_as {
        out.insert("linkedAs".into(), json!(who));
    }
    if waited.waiting {
        out.insert("waiting".into(), json!(true));
    }
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_properties_are_refused_by_name() {
        let params = json!({"accountId": "default", "qr": true});
        let error = closed("web.login.start", &params, START_KEYS).expect_err("closed");
        assert!(
            error.message.contains("unexpected property \"qr\""),
            "{}",
            error.message
        );
        assert!(closed("web.login.wait", &json!({"sessionKey": "k"}), WAIT_KEYS).is_ok());
    }

    #[test]
    fn timeouts_default_and_clamp_as_upstream() {
        let none = json!({});
        let p = Params::new("web.login.start", &none).expect("params");
        assert_eq!(
            timeout(&p, START_TIMEOUT_DEFAULT_MS, START_TIMEOUT_MIN_MS).expect("t"),
            Duration::from_secs(30)
        );
        let tiny = json!({"timeoutMs": 10});
        let p = Params::new("web.login.start", &tiny).expect("params");
        assert_eq!(
            timeout(&p, START_TIMEOUT_DEFAULT_MS, START_TIMEOUT_MIN_MS).expect("t"),
            Duration::from_secs(5)
        );
        let huge = json!({"timeoutMs": 86_400_000u64});
        let p = Params::new("web.login.wait", &huge).expect("params");
        assert_eq!(
            timeout(&p, WAIT_TIMEOUT_DEFAULT_MS, WAIT_TIMEOUT_MIN_MS).expect("t"),
            Duration::from_millis(TIMEOUT_MAX_MS)
        );
        let negative = json!({"timeoutMs": -1});
        let p = Params::new("web.login.wait", &negative).expect("params");
        assert!(timeout(&p, WAIT_TIMEOUT_DEFAULT_MS, WAIT_TIMEOUT_MIN_MS).is_err());
    }
}
