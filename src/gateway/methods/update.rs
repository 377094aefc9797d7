//! `update.status` and `update.apply`: the appliance's A/B updates through RAUC, for the
//! Control UI and operators (both need `operator.admin`, as upstream's `update.*` methods).
//!
//! `update.status` answers in upstream's shape where the Control UI reads it — `sentinel`
//! (the last update's outcome as upstream's restart sentinel: `kind: "update"`, `status` `ok`
//! once the new slot runs, `error` when it was rolled back; `null` before any installation or
//! while one waits for its reboot) and `updateAvailable` (`null`: pincer does not look for
//! releases) — plus pincer's own: `rauc` (what RAUC reports, or `available: false` and why on
//! a host without RAUC) and `store` (the schema versions of this pincer's store).
//!
//! `update.apply { bundle }` installs a bundle at an absolute path on the gateway's host (RAUC
//! runs as root outside the gateway's private /tmp and must see it: a path under the data dir). It checks the bundle's store-schema claim first,
//! then sends RAUC's progress to the caller as `pincer.update.progress` events
//! `{ bundle, percent, message, depth }` (upstream has no progress event for updates) and
//! answers when RAUC completes. It shares upstream's control-plane write budget (3 per minute)
//! with `config.apply` and `config.patch`. Every failure becomes an `ErrorShape` in
//! [`error_shape`], and only there.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use crate::gateway::clients::ClientInfo;
use crate::gateway::frames::{ErrorCode, ErrorShape};
use crate::gateway::state::GatewayState;
use crate::store::{OLDEST_SCHEMA_VERSION, SCHEMA_VERSION};
use crate::system::clock::now_ms;
use crate::system::rauc::bundle::{self, BundleError};
use crate::system::rauc::{Outcome, Progress, Rauc, RaucError, Status};

use super::params::Params;

/// The progress event's name.
pub const UPDATE_PROGRESS_EVENT: &str = "pincer.update.progress";
/// How long `update.status` waits for RAUC.
const STATUS_TIMEOUT: Duration = Duration::from_secs(10);

/// Why an update method failed.
#[derive(Debug)]
pub enum UpdateError {
    Rauc(RaucError),
    Bundle(BundleError),
    TimedOut(&'static str),
}

/// The one mapping of update failures to the protocol's errors.
pub fn error_shape(method: &str, error: UpdateError) -> ErrorShape {
    match error {
        UpdateError::Rauc(RaucError::Unavailable(why)) => {
            ErrorShape::unavailable(format!("{method} unavailable: {why}"))
        }
        UpdateError::Rauc(RaucError::Busy(why)) => {
            ErrorShape::unavailable(format!("{method}: RAUC is busy: {why}")).retry_after(5_000)
        }
        UpdateError::Rauc(RaucError::Bus(why)) => {
            ErrorShape::unavailable(format!("{method}: talking to RAUC failed: {why}"))
        }
        UpdateError::Rauc(e @ (RaucError::Refused(_) | RaucError::InstallFailed(_))) => {
            ErrorShape::invalid(format!("{method}: bundle refused: {e}"))
                .with_details(json!({"code": "UPDATE_REFUSED", "raucError": e.to_string()}))
        }
        UpdateError::Bundle(e @ BundleError::Spawn(_)) => {
            ErrorShape::unavailable(format!("{method}: {e}"))
        }
        UpdateError::Bundle(e @ BundleError::StoreMismatch { range, found }) => {
            ErrorShape::invalid(format!("{method}: bundle refused: {e}")).with_details(json!({
                "code": "STORE_SCHEMA_MISMATCH",
                "storeSchema": found,
                "bundleOpens": {"min": range.min, "max": range.max},
            }))
        }
        UpdateError::Bundle(e) => ErrorShape::invalid(format!("{method}: bundle refused: {e}"))
            .with_details(json!({"code": "UPDATE_REFUSED", "reason": e.to_string()})),
        UpdateError::TimedOut(what) => {
            ErrorShape::new(ErrorCode::Unavailable, format!("{method}: {what}"))
        }
    }
}

/// `update.status`.
pub async fn status(params: &Value) -> Result<Value, ErrorShape> {
    Params::new("update.status", params)?;
    let read = async { Rauc::connect().await?.status().await };
    let rauc = match tokio::time::timeout(STATUS_TIMEOUT, read).await {
        Ok(Ok(status)) => Ok(status),
        Ok(Err(RaucError::Unavailable(why))) => Err(why),
        Ok(Err(other)) => return Err(error_shape("update.status", UpdateError::Rauc(other))),
        Err(_) => {
            return Err(error_shape(
                "update.status",
                UpdateError::TimedOut("RAUC did not answer within 10 s"),
            ))
        }
    };
    Ok(status_answer(&rauc))
}

/// The answer for RAUC's status, or for its absence.
pub fn status_answer(rauc: &Result<Status, String>) -> Value {
    let (sentinel, rauc) = match rauc {
        Ok(status) => (sentinel(status), status.to_json()),
        Err(why) => (Value::Null, json!({"available": false, "reason": why})),
    };
    json!({
        "sentinel": sentinel,
        "updateAvailable": null,
        "rauc": rauc,
        "store": {
            "schemaVersion": SCHEMA_VERSION,
            "opens": {"min": OLDEST_SCHEMA_VERSION, "max": SCHEMA_VERSION},
        },
    })
}

/// The last installation's outcome as upstream's update restart sentinel.
pub fn sentinel(status: &Status) -> Value {
    let Some((slot, outcome)) = status.last_outcome() else {
        return Value::Null;
    };
    let version = slot.bundle_version.clone().unwrap_or_default();
    let ts = slot.installed_at_ms().unwrap_or_default();
    let booted = status.booted();
    match outcome {
        Outcome::RebootPending => Value::Null,
        Outcome::Booted => json!({
            "kind": "update",
            "status": "ok",
            "ts": ts,
            "message": format!("{version} runs from {} (installed by RAUC)", slot.name),
            "stats": {"mode": "rauc", "after": {"version": version}},
        }),
        Outcome::RolledBack => json!({
            "kind": "update",
            "status": "error",
            "ts": ts,
            "message": format!(
                "{version} was installed into {} but did not come up healthy; the system rolled \
                 back to {}",
                slot.name,
                booted.map_or("the other slot", |b| b.name.as_str())
            ),
            "stats": {
                "mode": "rauc",
                "reason": "rolled-back",
                "before": {"version": booted.and_then(|b| b.bundle_version.clone())},
                "after": {"version": version},
            },
        }),
    }
}

/// `update.apply { bundle }`.
pub async fn apply(
    state: &GatewayState,
    info: &ClientInfo,
    params: &Value,
) -> Result<Value, ErrorShape> {
    const METHOD: &str = "update.apply";
    let p = Params::new(METHOD, params)?;
    let bundle_path = p.str("bundle", false)?;
    if !Path::new(bundle_path).is_absolute() {
        return Err(ErrorShape::invalid(format!(
            "invalid {METHOD} params: bundle must be an absolute path on the gateway's host, got {bundle_path:?}"
        )));
    }
    if let Err(retry_ms) = state.claim_config_write(now_ms()) {
        return Err(ErrorShape::unavailable(format!(
            "{METHOD} rate limited: at most 3 control-plane writes (config.apply, config.patch, update.apply) per minute"
        ))
        .retry_after(retry_ms));
    }
    let fail = |e| error_shape(METHOD, e);
    let mut rauc = Rauc::connect()
        .await
        .map_err(|e| fail(UpdateError::Rauc(e)))?;
    let manifest = bundle::read_manifest(Path::new(bundle_path))
        .await
        .map_err(|e| fail(UpdateError::Bundle(e)))?;
    // The running gateway opened its store, so the store is at this build's schema.
    bundle::check_store(&manifest, Some(SCHEMA_VERSION))
        .map_err(|e| fail(UpdateError::Bundle(e)))?;
    log::info!(
        "update.apply: {} asked to install {bundle_path} ({} {})",
        info.conn_id,
        manifest.compatible,
        manifest.version
    );
    let mut forward = |progress: &Progress| {
        state.clients.send_to(
            &info.conn_id,
            UPDATE_PROGRESS_EVENT,
            &progress_payload(bundle_path, progress),
        );
    };
    match rauc.install(bundle_path, &mut forward).await {
        Ok(()) => {
            log::info!(
                "update.apply: installed {bundle_path} ({})",
                manifest.version
            );
            Ok(json!({
                "ok": true,
                "bundle": {
                    "path": bundle_path,
                    "compatible": manifest.compatible,
                    "version": manifest.version,
                },
                "rebootRequired": true,
            }))
        }
        Err(e) => {
            log::warn!("update.apply: {bundle_path} not installed: {e}");
            Err(fail(UpdateError::Rauc(e)))
        }
    }
}

/// The progress event's payload.
pub fn progress_payload(bundle: &str, progress: &Progress) -> Value {
    json!({
        "bundle": bundle,
        "percent": progress.percent,
        "message": progress.message,
        "depth": progress.depth,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::system::rauc::Slot;

    fn slot(name: &str, state: &str, boot: &str, installed: Option<&str>) -> Slot {
        Slot {
            name: name.into(),
            state: Some(state.into()),
            boot_status: Some(boot.into()),
            installed_timestamp: installed.map(str::to_string),
            bundle_version: installed.map(|_| "2026.12.1".to_string()),
            ..Slot::default()
        }
    }

    #[test]
    fn the_sentinel_follows_the_last_installation() {
        let mut status = Status {
            slots: vec![
                slot("rootfs.0", "booted", "good", None),
                slot("rootfs.1", "inactive", "good", Some("2026-11-27T15:05:40Z")),
            ],
            ..Status::default()
        };
        assert_eq!(sentinel(&status), Value::Null, "waiting for its reboot");
        status.slots[1].boot_status = Some("bad".into());
        let rolled = sentinel(&status);
        assert_eq!(rolled["kind"], "update");
        assert_eq!(rolled["status"], "error");
        assert_eq!(rolled["stats"]["reason"], "rolled-back");
        assert_eq!(rolled["ts"], 1_795_791_940_000u64);
        status.slots[0].state = Some("inactive".into());
        status.slots[1].state = Some("booted".into());
        assert_eq!(sentinel(&status)["status"], "ok");
        let fresh = Status {
            slots: vec![slot("rootfs.0", "booted", "good", None)],
            ..Status::default()
        };
        assert_eq!(sentinel(&fresh), Value::Null);
    }

    #[test]
    fn without_rauc_the_answer_says_so_in_upstreams_shape() {
        let answer = status_answer(&Err("no system bus".into()));
        assert_eq!(answer["sentinel"], Value::Null);
        assert_eq!(answer["updateAvailable"], Value::Null);
        assert_eq!(answer["rauc"]["available"], false);
        assert_eq!(answer["rauc"]["reason"], "no system bus");
        assert_eq!(answer["store"]["schemaVersion"], SCHEMA_VERSION);
    }

    #[test]
    fn failures_map_to_protocol_errors() {
        let shape = error_shape(
            "update.apply",
            UpdateError::Rauc(RaucError::Unavailable("x".into())),
        );
        assert_eq!(shape.to_json()["code"], "UNAVAILABLE");
        let shape = error_shape(
            "update.apply",
            UpdateError::Rauc(RaucError::Busy("y".into())),
        );
        assert_eq!(shape.to_json()["retryable"], true);
        let shape = error_shape(
            "update.apply",
            UpdateError::Rauc(RaucError::InstallFailed("Compatible mismatch".into())),
        );
        let json = shape.to_json();
        assert_eq!(json["code"], "INVALID_REQUEST");
        assert_eq!(json["details"]["code"], "UPDATE_REFUSED");
        assert!(
            json["message"]
                .as_str()
                .unwrap_or_default()
                .contains("Compatible mismatch"),
            "{json}"
        );
        let range = bundle::SchemaRange { min: 2, max: 3 };
        let shape = error_shape(
            "update.apply",
            UpdateError::Bundle(BundleError::StoreMismatch { range, found: 1 }),
        );
        assert_eq!(shape.to_json()["details"]["code"], "STORE_SCHEMA_MISMATCH");
    }
}
