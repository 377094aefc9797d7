//! Discord gateway frames (API v10, JSON encoding): opcodes, the frame
//! envelope, HELLO / READY fields, the IDENTIFY and RESUME payloads, and
//! what each close code means for reconnecting.
//!
//! Pure data: no I/O, no session state.

use serde::Deserialize;
use serde_json::{json, Value};

/// Gateway opcodes used by a bot.
pub mod op {
    pub const DISPATCH: u64 = 0;
    pub const HEARTBEAT: u64 = 1;
    pub const IDENTIFY: u64 = 2;
    pub const RESUME: u64 = 6;
    pub const RECONNECT: u64 = 7;
    pub const INVALID_SESSION: u64 = 9;
    pub const HELLO: u64 = 10;
    pub const HEARTBEAT_ACK: u64 = 11;
}

/// Gateway intents pincer asks for.
pub mod intents {
    pub const GUILDS: u64 = 1 << 0;
    pub const GUILD_MESSAGES: u64 = 1 << 9;
    pub const DIRECT_MESSAGES: u64 = 1 << 12;
    /// Privileged: must be enabled for the bot in the developer portal.
    pub const MESSAGE_CONTENT: u64 = 1 << 15;
    /// Everything a chat assistant needs: guilds, their messages, DMs, message text.
    pub const ASSISTANT: u64 = GUILDS | GUILD_MESSAGES | DIRECT_MESSAGES | MESSAGE_CONTENT;
}

/// Gateway API version every connection asks for (`?v=10&encoding=json`).
pub const GATEWAY_VERSION: &str = "10";

/// One gateway frame: `{"op", "d", "s", "t"}`.
#[derive(Debug, Clone, Deserialize)]
pub struct GatewayFrame {
    pub op: u64,
    #[serde(default)]
    pub d: Value,
    #[serde(default)]
    pub s: Option<u64>,
    #[serde(default)]
    pub t: Option<String>,
}

/// The fields of READY a bot keeps.
#[derive(Debug, Clone, Deserialize)]
pub struct Ready {
    pub session_id: String,
    pub resume_gateway_url: Option<String>,
    pub user: ReadyUser,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ReadyUser {
    pub id: String,
    pub username: String,
}

/// `op 10 HELLO`'s heartbeat interval, if the frame is a HELLO.
pub fn hello_interval_ms(frame: &GatewayFrame) -> Option<u64> {
    if frame.op != op::HELLO {
        return None;
    }
    frame.d.get("heartbeat_interval").and_then(Value::as_u64)
}

/// `op 1`: the last sequence number seen (or null).
pub fn heartbeat(seq: Option<u64>) -> String {
    json!({"op": op::HEARTBEAT, "d": seq}).to_string()
}

/// `op 2 IDENTIFY` with the token, intents and connection properties.
pub fn identify(token: &str, intents: u64) -> String {
    json!({
        "op": op::IDENTIFY,
        "d": {
            "token": token,
            "intents": intents,
            "properties": {
                "os": std::env::consts::OS,
                "browser": "pincer",
                "device": "pincer",
            },
        },
    })
    .to_string()
}

/// `op 6 RESUME` of an earlier session.
pub fn resume(token: &str, session_id: &str, seq: Option<u64>) -> String {
    json!({
        "op": op::RESUME,
        "d": {"token": token, "session_id": session_id, "seq": seq},
    })
    .to_string()
}

/// What a gateway close code means for the next connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseAction {
    /// Reconnect and resume the session.
    Resume,
    /// Reconnect with a fresh IDENTIFY (the session is gone).
    Reidentify,
    /// Do not reconnect: the configuration is wrong.
    Fatal,
}

/// Discord's close codes: 4004 (authentication failed) and 4010–4014
/// (bad shard, sharding required, bad API version, bad or disallowed
/// intents) are fatal; 4007 (bad sequence) and 4009 (session timed out)
/// need a new session; everything else may resume.
pub fn close_action(code: u16) -> CloseAction {
    match code {
        4004 | 4010..=4014 => CloseAction::Fatal,
        4007 | 4009 => CloseAction::Reidentify,
        _ => CloseAction::Resume,
    }
}

/// A human-readable reason for a fatal close code.
pub fn close_reason(code: u16) -> &'static str {
    match code {
        4004 => "authentication failed (bad bot token)",
        4010 => "invalid shard",
        4011 => "sharding required",
        4012 => "invalid API version",
        4013 => "invalid intents",
        4014 => "disallowed intents (enable Message Content in the developer portal)",
        _ => "gateway closed the connection",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_codes_decide_between_resume_reidentify_and_giving_up() {
        assert_eq!(close_action(4004), CloseAction::Fatal);
        for code in 4010..=4014 {
            assert_eq!(close_action(code), CloseAction::Fatal, "{code}");
        }
        assert_eq!(close_action(4007), CloseAction::Reidentify);
        assert_eq!(close_action(4009), CloseAction::Reidentify);
        assert_eq!(close_action(4000), CloseAction::Resume);
        assert_eq!(close_action(1006), CloseAction::Resume);
    }

    #[test]
    fn identify_carries_token_intents_and_properties() {
        let frame: Value =
            serde_json::from_str(&identify("tok", intents::ASSISTANT)).expect("json");
        assert_eq!(frame["op"], 2);
        assert_eq!(frame["d"]["token"], "tok");
        assert_eq!(frame["d"]["intents"], 37_377);
        assert_eq!(frame["d"]["properties"]["browser"], "pincer");
    }

    #[test]
    fn hello_interval_is_read_only_from_hello() {
        let hello: GatewayFrame =
            serde_json::from_str(r#"{"op":10,"d":{"heartbeat_interval":41250}}"#).expect("json");
        assert_eq!(hello_interval_ms(&hello), Some(41_250));
        let ack: GatewayFrame = serde_json::from_str(r#"{"op":11}"#).expect("json");
        assert_eq!(hello_interval_ms(&ack), None);
    }
}
