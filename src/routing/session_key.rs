//! Session keys exactly as OpenClaw spells them: `agent:<id>:<mainKey>` for
//! the main session, per-peer / per-channel-peer / per-account-channel-peer
//! DM variants, `agent:<id>:<channel>:<kind>:<peerId>` for groups and
//! channels, `:thread:<id>` suffixes for topics and threads, `cron:<jobId>`
//! and `hook:<uuid>`; `identityLinks` fold one person's peers together.
//!
//! Pure string building: this file must not look at bindings or storage.

use std::collections::BTreeMap;

use crate::config::schema::bindings::PeerKind;
use crate::config::schema::session::{DmScope, SessionConfig};

/// Agent id used when none is given (upstream's `DEFAULT_AGENT_ID`).
pub const DEFAULT_AGENT_ID: &str = "main";
/// Main session key used when none is configured.
pub const DEFAULT_MAIN_KEY: &str = "main";
/// Account id used when a message names none.
pub const DEFAULT_ACCOUNT_ID: &str = "default";
/// Longest agent id kept after normalisation.
const MAX_AGENT_ID_CHARS: usize = 64;

/// Lowercases an agent id and folds characters outside `[a-z0-9_-]` to `-`
/// (empty → `main`), as upstream's `normalizeAgentId`.
pub fn normalize_agent_id(raw: &str) -> String {
    let lowered = raw.trim().to_lowercase();
    let mut out = String::with_capacity(lowered.len());
    let mut last_dash = false;
    for c in lowered.chars() {
        if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
            out.push(c);
            last_dash = c == '-';
        } else if !last_dash {
            out.push('-');
            last_dash = true;
        }
    }
    let trimmed: String = out
        .trim_matches('-')
        .chars()
        .take(MAX_AGENT_ID_CHARS)
        .collect();
    if trimmed.is_empty() {
        DEFAULT_AGENT_ID.to_string()
    } else {
        trimmed
    }
}

/// Lowercased account id, `default` when empty.
pub fn normalize_account_id(raw: Option<&str>) -> String {
    match raw.map(str::trim).filter(|a| !a.is_empty()) {
        Some(account) => account.to_lowercase(),
        None => DEFAULT_ACCOUNT_ID.to_string(),
    }
}

/// `agent:<id>:<mainKey>`.
pub fn main_session_key(agent_id: &str, main_key: &str) -> String {
    let main_key = main_key.trim().to_lowercase();
    let main_key = if main_key.is_empty() {
        DEFAULT_MAIN_KEY.to_string()
    } else {
        main_key
    };
    format!("agent:{}:{main_key}", normalize_agent_id(agent_id))
}

/// The key `session.scope: "global"` gives every agent's main session.
pub const GLOBAL_SESSION_KEY: &str = "global";

/// Whether `session.scope` is `"global"` (the default is `"per-sender"`).
pub fn is_global_scope(session: &SessionConfig) -> bool {
    session.scope.as_deref() == Some("global")
}

/// The main session of `agent_id` under the configured scope: `agent:<id>:<mainKey>`, or `global` when
/// `session.scope` is `"global"` (as upstream's canonical main-session alias).
pub fn scoped_main_session_key(session: &SessionConfig, agent_id: &str) -> String {
    if is_global_scope(session) {
        GLOBAL_SESSION_KEY.to_string()
    } else {
        main_session_key(agent_id, &session.main_key)
    }
}

/// `key` with an agent's main-session key replaced by `global` under `session.scope: "global"`.
pub fn scope_main_alias(session: &SessionConfig, agent_id: &str, key: String) -> String {
    if is_global_scope(session) && key == main_session_key(agent_id, &session.main_key) {
        GLOBAL_SESSION_KEY.to_string()
    } else {
        key
    }
}

/// Everything a peer's session key depends on.
#[derive(Debug, Clone, Copy)]
pub struct PeerKeyParts<'a> {
    pub agent_id: &'a str,
    pub main_key: &'a str,
    pub channel: &'a str,
    pub account_id: &'a str,
    pub peer_kind: PeerKind,
    pub peer_id: &'a str,
    pub dm_scope: DmScope,
    pub identity_links: &'a BTreeMap<String, Vec<String>>,
}

/// The session key of a peer: DMs by `dmScope`, groups and channels by id.
pub fn peer_session_key(parts: &PeerKeyParts<'_>) -> String {
    let agent = normalize_agent_id(parts.agent_id);
    let channel = non_empty_lower(parts.channel, "unknown");
    if parts.peer_kind != PeerKind::Direct {
        let peer = non_empty_lower(parts.peer_id, "unknown");
        let kind = peer_kind_name(parts.peer_kind);
        return format!("agent:{agent}:{channel}:{kind}:{peer}");
    }
    let mut peer = parts.peer_id.trim().to_string();
    if parts.dm_scope != DmScope::Main {
        if let Some(linked) = linked_peer(parts.identity_links, parts.channel, &peer) {
            peer = linked;
        }
    }
    let peer = peer.to_lowercase();
    if peer.is_empty() {
        return main_session_key(parts.agent_id, parts.main_key);
    }
    match parts.dm_scope {
        DmScope::Main => main_session_key(parts.agent_id, parts.main_key),
        DmScope::PerPeer => format!("agent:{agent}:direct:{peer}"),
        DmScope::PerChannelPeer => format!("agent:{agent}:{channel}:direct:{peer}"),
        DmScope::PerAccountChannelPeer => {
            let account = normalize_account_id(Some(parts.account_id));
            format!("agent:{agent}:{channel}:{account}:direct:{peer}")
        }
    }
}

/// A thread or topic inside a base session: `<base>:thread:<id>`.
pub fn thread_session_key(base: &str, thread_id: &str) -> String {
    let thread = thread_id.trim().to_lowercase();
    if thread.is_empty() {
        base.to_string()
    } else {
        format!("{base}:thread:{thread}")
    }
}

/// A Telegram forum topic: the group key with a `:topic:<id>` suffix, as
/// upstream's Telegram adapter builds it.
pub fn telegram_topic_session_key(group_key: &str, topic_id: &str) -> String {
    format!("{group_key}:topic:{}", topic_id.trim())
}

/// A cron job's own session.
pub fn cron_session_key(job_id: &str) -> String {
    format!("cron:{}", job_id.trim())
}

/// A webhook's one-off session.
pub fn hook_session_key(hook_uuid: &str) -> String {
    format!("hook:{}", hook_uuid.trim())
}

/// The agent of an `agent:<id>:…` key (`None` for `global`, `cron:…`, …).
pub fn agent_of_key(key: &str) -> Option<&str> {
    key.strip_prefix("agent:")?.split(':').next()
}

/// The chat a group or channel session key names (the inverse of
/// [`peer_session_key`] for groups and channels, with
/// [`thread_session_key`] / [`telegram_topic_session_key`] suffixes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyedChat {
    pub channel: String,
    pub peer: String,
    pub thread: Option<String>,
}

/// The group or channel chat of `key`, if it names one
/// (`agent:<id>:<channel>:group|channel:<peer>[:topic|thread:<n>]`).
pub fn chat_of_key(key: &str) -> Option<KeyedChat> {
    let parts: Vec<&str> = key.split(':').collect();
    let rest = match parts.as_slice() {
        ["agent", _agent, rest @ ..] => rest,
        rest => rest,
    };
    let [channel, kind, peer @ ..] = rest else {
        return None;
    };
    if !matches!(*kind, "group" | "channel") || peer.is_empty() {
        return None;
    }
    let (peer, thread) = match peer {
        [head @ .., "topic" | "thread", n] if !head.is_empty() => {
            (head.join(":"), Some(n.to_string()))
        }
        _ => (peer.join(":"), None),
    };
    Some(KeyedChat {
        channel: channel.to_string(),
        peer,
        thread,
    })
}

/// The wire name of a peer kind in session keys.
pub fn peer_kind_name(kind: PeerKind) -> &'static str {
    match kind {
        PeerKind::Direct => "direct",
        PeerKind::Group => "group",
        PeerKind::Channel => "channel",
    }
}

fn non_empty_lower(text: &str, fallback: &str) -> String {
    let lowered = text.trim().to_lowercase();
    if lowered.is_empty() {
        fallback.to_string()
    } else {
        lowered
    }
}

/// The canonical name `identityLinks` gives this peer (matching the bare id
/// or `<channel>:<id>`, case-insensitively), if any.
fn linked_peer(
    links: &BTreeMap<String, Vec<String>>,
    channel: &str,
    peer_id: &str,
) -> Option<String> {
    if peer_id.is_empty() {
        return None;
    }
    let bare = peer_id.to_lowercase();
    let scoped = format!("{}:{bare}", channel.trim().to_lowercase());
    links.iter().find_map(|(canonical, ids)| {
        let canonical = canonical.trim();
        let hit = ids.iter().any(|id| {
            let id = id.trim().to_lowercase();
            !id.is_empty() && (id == bare || id == scoped)
        });
        (hit && !canonical.is_empty()).then(|| canonical.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_ids_are_folded_like_upstream() {
        assert_eq!(normalize_agent_id("Work"), "work");
        assert_eq!(normalize_agent_id("my agent!"), "my-agent");
        assert_eq!(normalize_agent_id("  "), "main");
    }

    #[test]
    fn empty_dm_peer_falls_back_to_main() {
        let links = BTreeMap::new();
        let key = peer_session_key(&PeerKeyParts {
            agent_id: "a",
            main_key: "main",
            channel: "telegram",
            account_id: "default",
            peer_kind: PeerKind::Direct,
            peer_id: "",
            dm_scope: DmScope::PerPeer,
            identity_links: &links,
        });
        assert_eq!(key, "agent:a:main");
    }
}
