//! The settings of a Signal account and of the group a message came
//! from: `dmPolicy`/`allowFrom`, `groupPolicy`/`groupAllowFrom` (whose
//! entries name senders or groups, as upstream documents), and the
//! `groups` entries keyed by group id or `"*"` with `requireMention`.
//!
//! Sender entries are E.164 numbers (`+15551234567`, a bare number gets
//! its `+`) or `uuid:<id>` (a bare UUID gets the prefix); group entries
//! are `group:<id>` or a raw group id; `signal:` in front of either is
//! dropped. Pure config reading, like the rest of `settings/`.

use crate::channels::settings::{activation, ChannelSettings};
use crate::channels::InboundEvent;
use crate::config::schema::channels::StreamingKeys;
use crate::config::Config;
use crate::pipeline::access::GroupScope;

/// What one allowlist entry names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SignalEntry {
    Anyone,
    /// A sender as the message path spells it (`+1555…`, `uuid:…`).
    Sender(String),
    Group(String),
}

fn is_uuid(text: &str) -> bool {
    text.len() == 36
        && text.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// Classifies one `allowFrom` / `groupAllowFrom` entry.
pub(crate) fn signal_entry(entry: &str) -> Option<SignalEntry> {
    let entry = entry.trim();
    let entry = entry.strip_prefix("signal:").unwrap_or(entry).trim();
    if entry.is_empty() {
        return None;
    }
    if entry == "*" {
        return Some(SignalEntry::Anyone);
    }
    if let Some(group) = entry.strip_prefix("group:") {
        return Some(SignalEntry::Group(group.trim().to_string()));
    }
    if let Some(uuid) = entry.strip_prefix("uuid:") {
        return Some(SignalEntry::Sender(format!(
            "uuid:{}",
            uuid.trim().to_lowercase()
        )));
    }
    if is_uuid(entry) {
        return Some(SignalEntry::Sender(format!(
            "uuid:{}",
            entry.to_lowercase()
        )));
    }
    let digits = entry.strip_prefix('+').unwrap_or(entry);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        return Some(SignalEntry::Sender(format!("+{digits}")));
    }
    Some(SignalEntry::Group(entry.to_string()))
}

/// The sender entries of a list (and `"*"`).
fn senders(entries: &[String]) -> Vec<String> {
    entries
        .iter()
        .filter_map(|e| match signal_entry(e)? {
            SignalEntry::Anyone => Some("*".to_string()),
            SignalEntry::Sender(id) => Some(id),
            SignalEntry::Group(_) => None,
        })
        .collect()
}

/// The group entries of a list.
fn groups(entries: &[String]) -> Vec<String> {
    entries
        .iter()
        .filter_map(|e| match signal_entry(e)? {
            SignalEntry::Group(id) => Some(id),
            _ => None,
        })
        .collect()
}

impl ChannelSettings {
    pub(super) fn apply_signal(&mut self, config: &Config, account_id: &str) {
        let Some(account) = config
            .channels
            .signal
            .as_ref()
            .and_then(|s| s.account(account_id))
        else {
            return;
        };
        let group_allow_from = account.group_allow_from.clone().unwrap_or_default();
        let access = &mut self.access;
        access.dm_policy = account.effective_dm_policy();
        access.allow_from = senders(&account.effective_allow_from());
        access.group_policy = account.effective_group_policy();
        access.group_allow_from = senders(&group_allow_from);
        // A group is admitted under allowlist by its own entry, by its id in
        // groupAllowFrom, or (upstream's sender check) by a listed sender.
        let mut allowed: Vec<String> = account
            .groups
            .clone()
            .unwrap_or_default()
            .into_keys()
            .map(|key| match signal_entry(&key) {
                Some(SignalEntry::Group(id)) => id,
                _ => key,
            })
            .collect();
        allowed.extend(groups(&group_allow_from));
        if !access.group_allow_from.is_empty() {
            allowed.push("*".to_string());
        }
        access.allowed_groups = allowed;
        self.text_chunk_limit = Some(account.effective_text_chunk_limit() as usize);
        self.chunk_mode = account.effective_chunk_mode();
        self.streaming = account.effective_streaming_mode();
        self.apply_block_streaming(
            account.block_streaming(),
            account.streaming.as_ref().map(|s| s as &dyn StreamingKeys),
        );
        if let Some(limit) = account.history_limit {
            self.group_history_limit = limit as usize;
        }
    }

    /// The group's entry (by id, else `"*"`): a group of its own answers
    /// every message unless `requireMention: true`; under `"*"` or no
    /// entry mentions are needed unless `requireMention: false`. A group
    /// named in groupAllowFrom admits all its members.
    pub(crate) fn signal_group(&mut self, config: &Config, event: &InboundEvent, group: &str) {
        let Some(account) = config
            .channels
            .signal
            .as_ref()
            .and_then(|s| s.account(&event.account_id))
        else {
            return;
        };
        let entries = account.groups.clone().unwrap_or_default();
        let own = entries.iter().find(
            |(key, _)| matches!(signal_entry(key), Some(SignalEntry::Group(ref id)) if id == group),
        );
        let require_mention = match own {
            Some((_, entry)) => entry.require_mention.unwrap_or(false),
            None => entries
                .get("*")
                .and_then(|e| e.require_mention)
                .unwrap_or(true),
        };
        let listed_by_id = groups(account.group_allow_from.as_deref().unwrap_or_default())
            .iter()
            .any(|id| id == group);
        self.access.group = GroupScope {
            senders: listed_by_id.then(|| vec!["*".to_string()]),
            ..GroupScope::default()
        };
        self.access.activation = activation(require_mention);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::schema::common::{DmPolicy, GroupPolicy};
    use crate::pipeline::access::{check_group, GroupActivation, GroupOrigin, Refusal};

    fn config(json5: &str) -> Config {
        crate::config::parse_str(json5, "test").expect("config")
    }

    fn group_event(group: &str, sender: &str) -> InboundEvent {
        InboundEvent {
            channel: "signal".into(),
            account_id: "default".into(),
            message: crate::pipeline::context::InboundMessage {
                group_id: Some(group.into()),
                sender_id: sender.into(),
                ..Default::default()
            },
            route: crate::routing::RouteInput::default(),
            bot_mentioned: false,
            bot_username: None,
        }
    }

    #[test]
    fn entries_are_told_apart_and_normalised() {
        assert_eq!(signal_entry(" * "), Some(SignalEntry::Anyone));
        assert_eq!(
            signal_entry("15551234567"),
            Some(SignalEntry::Sender("+15551234567".into()))
        );
        assert_eq!(
            signal_entry("signal:+1555"),
            Some(SignalEntry::Sender("+1555".into()))
        );
        assert_eq!(
            signal_entry("123E4567-E89B-12D3-A456-426614174000"),
            Some(SignalEntry::Sender(
                "uuid:123e4567-e89b-12d3-a456-426614174000".into()
            ))
        );
        assert_eq!(
            signal_entry("signal:group:abc+/="),
            Some(SignalEntry::Group("abc+/=".into()))
        );
        assert_eq!(
            signal_entry("Zm9vYmFy="),
            Some(SignalEntry::Group("Zm9vYmFy=".into()))
        );
        assert_eq!(signal_entry("  "), None);
    }

    #[test]
    fn signal_account_keys_reach_the_access_policy() {
        let config = config(
            r#"{ channels: { signal: { account: "+1000", dmPolicy: "allowlist",
                 allowFrom: ["+1555", 1666, "uuid:AB", "group:G"], groupPolicy: "open",
                 groupAllowFrom: ["group:G1", "+1777"], textChunkLimit: 900, historyLimit: 4,
                 streaming: { chunkMode: "newline", block: { enabled: true } },
                 groups: { "G2": { requireMention: true } } } } }"#,
        );
        let settings = ChannelSettings::resolve(&config, "signal", "default");
        let access = &settings.access;
        assert_eq!(access.dm_policy, DmPolicy::Allowlist);
        assert_eq!(access.allow_from, vec!["+1555", "+1666", "uuid:ab"]);
        assert_eq!(access.group_policy, GroupPolicy::Open);
        assert_eq!(access.group_allow_from, vec!["+1777"]);
        assert_eq!(access.allowed_groups, vec!["G2", "G1", "*"]);
        assert_eq!(settings.text_chunk_limit, Some(900));
        assert_eq!(
            settings.chunk_mode,
            crate::config::schema::ChunkMode::Newline
        );
        assert!(settings.block_streaming);
        assert_eq!(settings.group_history_limit, 4);
    }

    #[test]
    fn group_entries_decide_mentions_and_listed_groups_admit_everyone() {
        let config = config(
            r#"{ channels: { signal: { account: "+1000", groupPolicy: "allowlist",
                 groupAllowFrom: ["group:OPEN", "+1777"],
                 groups: { "QUIET": {}, "LOUD": { requireMention: true }, "*": { requireMention: false } } } } }"#,
        );
        let decide = |group: &str, sender: &str| {
            let event = group_event(group, sender);
            let mut settings = ChannelSettings::resolve(&config, "signal", "default");
            settings.signal_group(&config, &event, group);
            (
                settings.access.activation.clone(),
                check_group(
                    &settings.access,
                    &event.message,
                    true,
                    GroupOrigin::default(),
                ),
            )
        };
        assert_eq!(decide("QUIET", "+1777").0, GroupActivation::All);
        assert_eq!(decide("LOUD", "+1777").0, GroupActivation::Mention);
        assert_eq!(decide("OTHER", "+1777").0, GroupActivation::All);
        // A stranger is admitted in the group listed by id, not elsewhere.
        assert_eq!(decide("OPEN", "+1999").1, None);
        assert_eq!(
            decide("QUIET", "+1999").1,
            Some(Refusal::SenderNotAllowedInGroup)
        );
        // No entry in `groups`: mentions needed.
        let bare = crate::config::parse_str(
            r#"{ channels: { signal: { account: "+1000", groupPolicy: "open" } } }"#,
            "test",
        )
        .expect("config");
        let event = group_event("ANY", "+1");
        let mut settings = ChannelSettings::resolve(&bare, "signal", "default");
        settings.signal_group(&bare, &event, "ANY");
        assert_eq!(settings.access.activation, GroupActivation::Mention);
    }
}
