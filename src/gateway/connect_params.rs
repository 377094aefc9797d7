//! `connect` params: parsed and checked field by field, so a bad handshake
//! gets an error that names the field and what is allowed.

use serde_json::Value;

use super::auth::PresentedAuth;
use super::device_auth::DeviceProof;

/// Client ids upstream's schema accepts (v3 and v4), compared case-insensitively.
pub const CLIENT_IDS: &[&str] = &[
    "webchat-ui",
    "openclaw-control-ui",
    "openclaw-tui",
    "webchat",
    "cli",
    "gateway-client",
    "openclaw-macos",
    "openclaw-ios",
    "openclaw-android",
    "node-host",
    "test",
    "fingerprint",
    "openclaw-probe",
    "openclaw-browser-copilot",
    "openclaw-linux",
    "openclaw-watchos",
    "openclaw-worker",
];

/// Client modes upstream's schema accepts.
pub const CLIENT_MODES: &[&str] = &[
    "webchat", "cli", "ui", "backend", "node", "probe", "test", "worker",
];

/// The `client` object.
#[derive(Debug, Clone, Default)]
pub struct ClientDescriptor {
    pub id: String,
    pub display_name: Option<String>,
    pub version: String,
    pub platform: String,
    pub device_family: Option<String>,
    pub model_identifier: Option<String>,
    pub mode: String,
    pub instance_id: Option<String>,
}

/// Parsed `connect` params.
#[derive(Debug, Clone, Default)]
pub struct ConnectParams {
    pub min_protocol: u32,
    pub max_protocol: u32,
    pub client: ClientDescriptor,
    pub caps: Vec<String>,
    pub role: String,
    pub scopes: Vec<String>,
    pub device: Option<DeviceProof>,
    pub auth: PresentedAuth,
    pub bootstrap_token: Option<String>,
}

fn field<'a>(obj: &'a serde_json::Map<String, Value>, name: &str) -> Option<&'a Value> {
    obj.get(name).filter(|v| !v.is_null())
}

fn string(
    obj: &serde_json::Map<String, Value>,
    path: &str,
    name: &str,
    required: bool,
) -> Result<Option<String>, String> {
    match field(obj, name) {
        None if required => Err(format!("{path}{name} is required")),
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(format!(
            "{path}{name} must be a string, got {}",
            kind(other)
        )),
    }
}

fn strings(obj: &serde_json::Map<String, Value>, name: &str) -> Result<Vec<String>, String> {
    match field(obj, name) {
        None => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| match v {
                Value::String(s) => Ok(s.clone()),
                other => Err(format!(
                    "{name} must contain only strings, got {}",
                    kind(other)
                )),
            })
            .collect(),
        Some(other) => Err(format!(
            "{name} must be an array of strings, got {}",
            kind(other)
        )),
    }
}

fn protocol(obj: &serde_json::Map<String, Value>, name: &str) -> Result<u32, String> {
    match field(obj, name) {
        Some(Value::Number(n)) => n
            .as_u64()
            .filter(|v| *v >= 1 && *v <= u32::MAX as u64)
            .map(|v| v as u32)
            .ok_or_else(|| format!("{name} must be an integer >= 1, got {n}")),
        Some(other) => Err(format!(
            "{name} must be an integer >= 1, got {}",
            kind(other)
        )),
        None => Err(format!("{name} is required")),
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Parses `connect` params; the error text follows `invalid connect params: `.
pub fn parse(params: &Value) -> Result<ConnectParams, String> {
    let Value::Object(obj) = params else {
        return Err(format!("params must be an object, got {}", kind(params)));
    };
    let min_protocol = protocol(obj, "minProtocol")?;
    let max_protocol = protocol(obj, "maxProtocol")?;
    let client = match field(obj, "client") {
        Some(Value::Object(c)) => parse_client(c)?,
        Some(other) => return Err(format!("client must be an object, got {}", kind(other))),
        None => return Err("client is required".into()),
    };
    let role = string(obj, "", "role", false)?.unwrap_or_else(|| "operator".into());
    if role != "operator" && role != "node" {
        return Err(format!(
            "role must be \"operator\" or \"node\", got {role:?}"
        ));
    }
    let device = match field(obj, "device") {
        Some(Value::Object(d)) => Some(parse_device(d)?),
        Some(other) => return Err(format!("device must be an object, got {}", kind(other))),
        None => None,
    };
    let (auth, bootstrap_token) = match field(obj, "auth") {
        Some(Value::Object(a)) => (
            PresentedAuth {
                token: string(a, "auth.", "token", false)?,
                password: string(a, "auth.", "password", false)?,
                device_token: string(a, "auth.", "deviceToken", false)?,
            },
            string(a, "auth.", "bootstrapToken", false)?,
        ),
        Some(other) => return Err(format!("auth must be an object, got {}", kind(other))),
        None => (PresentedAuth::default(), None),
    };
    Ok(ConnectParams {
        min_protocol,
        max_protocol,
        client,
        caps: strings(obj, "caps")?,
        role,
        scopes: strings(obj, "scopes")?,
        device,
        auth,
        bootstrap_token,
    })
}

fn parse_client(c: &serde_json::Map<String, Value>) -> Result<ClientDescriptor, String> {
    let id = string(c, "client.", "id", true)?.unwrap_or_default();
    let id_lower = id.to_ascii_lowercase();
    if !CLIENT_IDS.contains(&id_lower.as_str()) {
        return Err(format!(
            "client.id must be one of {}, got {id:?}",
            CLIENT_IDS.join(", ")
        ));
    }
    let mode = string(c, "client.", "mode", true)?.unwrap_or_default();
    if !CLIENT_MODES.contains(&mode.as_str()) {
        return Err(format!(
            "client.mode must be one of {}, got {mode:?}",
            CLIENT_MODES.join(", ")
        ));
    }
    Ok(ClientDescriptor {
        id: id_lower,
        display_name: string(c, "client.", "displayName", false)?,
        version: string(c, "client.", "version", true)?.unwrap_or_default(),
        platform: string(c, "client.", "platform", true)?.unwrap_or_default(),
        device_family: string(c, "client.", "deviceFamily", false)?,
        model_identifier: string(c, "client.", "modelIdentifier", false)?,
        mode,
        instance_id: string(c, "client.", "instanceId", false)?,
    })
}

fn parse_device(d: &serde_json::Map<String, Value>) -> Result<DeviceProof, String> {
    let signed_at_ms = match field(d, "signedAt") {
        Some(Value::Number(n)) => n
            .as_u64()
            .ok_or_else(|| format!("device.signedAt must be a non-negative integer, got {n}"))?,
        Some(other) => {
            return Err(format!(
                "device.signedAt must be an integer, got {}",
                kind(other)
            ))
        }
        None => return Err("device.signedAt is required".into()),
    };
    Ok(DeviceProof {
        id: string(d, "device.", "id", true)?.unwrap_or_default(),
        public_key: string(d, "device.", "publicKey", true)?.unwrap_or_default(),
        signature: string(d, "device.", "signature", true)?.unwrap_or_default(),
        signed_at_ms,
        nonce: string(d, "device.", "nonce", false)?.unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn minimal() -> Value {
        json!({"minProtocol": 3, "maxProtocol": 4,
               "client": {"id": "cli", "version": "1", "platform": "linux", "mode": "cli"}})
    }

    #[test]
    fn minimal_params_parse_with_operator_default() {
        let p = parse(&minimal()).expect("valid");
        assert_eq!((p.min_protocol, p.max_protocol), (3, 4));
        assert_eq!(p.role, "operator");
        assert!(p.device.is_none());
    }

    #[test]
    fn errors_name_the_field_and_allowed_values() {
        let mut bad = minimal();
        bad["client"]["id"] = json!("bogus");
        let err = parse(&bad).expect_err("bad id");
        assert!(
            err.starts_with("client.id must be one of") && err.contains("gateway-client"),
            "{err}"
        );
        let mut bad = minimal();
        bad["maxProtocol"] = json!("4");
        assert_eq!(
            parse(&bad).expect_err("string"),
            "maxProtocol must be an integer >= 1, got a string"
        );
        let mut bad = minimal();
        bad["client"].as_object_mut().expect("obj").remove("mode");
        assert_eq!(parse(&bad).expect_err("mode"), "client.mode is required");
        let mut bad = minimal();
        bad["scopes"] = json!([1]);
        assert!(parse(&bad).expect_err("scopes").contains("only strings"));
    }

    #[test]
    fn client_id_is_case_insensitive() {
        let mut p = minimal();
        p["client"]["id"] = json!("Gateway-Client");
        assert_eq!(parse(&p).expect("valid").client.id, "gateway-client");
    }
}
