//! The settings of a WhatsApp account and of the group a message came from:
//! `dmPolicy`/`allowFrom` (entries are phone numbers, `+` optional,
//! `whatsapp:` in front dropped, or `"*"`), `groupPolicy` with
//! `groupAllowFrom` (else `allowFrom`), the `groups` map keyed by group JID
//! or `"*"`, `historyLimit`, `textChunkLimit` and `streaming`.
//!
//! Upstream's two group layers: the `groups` map is the group allowlist once
//! it has entries (`"*"` admits every group; with `groupPolicy: allowlist`
//! and no map, a group is admitted when there are group senders), and the
//! sender policy (`open` admits every member, `allowlist` only listed
//! senders, none listed: nobody). `requireMention` comes from the group's
//! entry, else `"*"`'s, else true. Pure config reading, like the rest of
//! `settings/`.

use crate::channels::settings::{activation, ChannelSettings};
use crate::channels::InboundEvent;
use crate::config::schema::channels::StreamingKeys;
use crate::config::schema::common::GroupPolicy;
use crate::config::Config;
use crate::pipeline::access::GroupScope;

/// One `allowFrom` entry as the message path spells senders (`+<digits>`),
/// `"*"` as is; `None` for an entry that names nobody.
pub(crate) fn whatsapp_sender(entry: &str) -> Option<String> {
    let entry = entry.trim();
    let entry = entry.strip_prefix("whatsapp:").unwrap_or(entry).trim();
    if entry == "*" {
        return Some("*".into());
    }
    let entry = entry.split('@').next().unwrap_or(entry);
    let digits: String = entry.chars().filter(char::is_ascii_digit).collect();
    (!digits.is_empty()).then(|| format!("+{digits}"))
}

impl ChannelSettings {
    pub(super) fn apply_whatsapp(&mut self, config: &Config, account_id: &str) {
        let Some(account) = config
            .channels
            .whatsapp
            .as_ref()
            .and_then(|w| w.account(account_id))
        else {
            return;
        };
        let access = &mut self.access;
        access.dm_policy = account.effective_dm_policy();
        access.allow_from = account
            .effective_allow_from()
            .iter()
            .filter_map(|e| whatsapp_sender(e))
            .collect();
        if let Some(policy) = account.group_policy {
            access.group_policy = policy;
        }
        access.group_allow_from = senders(&account.effective_group_allow_from());
        // Group admission is decided per group (`whatsapp_group`).
        access.allowed_groups = vec!["*".to_string()];
        if let Some(limit) = account.history_limit {
            self.group_history_limit = limit as usize;
        }
        self.text_chunk_limit = Some(account.effective_text_chunk_limit() as usize);
        self.chunk_mode = account.effective_chunk_mode();
        self.streaming = account.effective_streaming_mode();
        self.apply_block_streaming(
            account.block_streaming(),
            account.streaming.as_ref().map(|s| s as &dyn StreamingKeys),
        );
    }
}

impl ChannelSettings {
    /// A message the linked account sent itself ("message yourself", marked
    /// by the adapter with `from == to`): the owner is admitted whatever
    /// `allowFrom` says, unless `dmPolicy` is disabled (upstream's rule).
    pub(crate) fn whatsapp_self_chat(&mut self, event: &InboundEvent) {
        let message = &event.message;
        if message.from == message.to && !message.sender_id.is_empty() {
            self.access.allow_from.push(message.sender_id.clone());
        }
    }
}

/// The sender entries of a list, normalised (`"*"` kept).
fn senders(entries: &[String]) -> Vec<String> {
    entries.iter().filter_map(|e| whatsapp_sender(e)).collect()
}

impl ChannelSettings {
    /// What the account's config says about one group (its JID): admitted
    /// or not by the `groups` map, which members are answered, whether a
    /// mention is needed, and the group's `systemPrompt`.
    pub(crate) fn whatsapp_group(&mut self, config: &Config, event: &InboundEvent, group: &str) {
        let Some(account) = config
            .channels
            .whatsapp
            .as_ref()
            .and_then(|w| w.account(&event.account_id))
        else {
            return;
        };
        let groups = account.groups.clone().unwrap_or_default();
        let own = groups.get(group);
        let wildcard = groups.get("*");
        let group_senders = senders(&account.effective_group_allow_from());
        let policy = self.access.group_policy;
        let admitted = if groups.is_empty() {
            policy != GroupPolicy::Allowlist || !group_senders.is_empty()
        } else {
            own.is_some() || wildcard.is_some()
        };
        self.access.group = GroupScope {
            disabled: !admitted,
            unlisted: false,
            // Open: every member; allowlist: the listed senders only (none: nobody).
            senders: Some(match policy {
                GroupPolicy::Open => vec!["*".to_string()],
                _ => group_senders,
            }),
            roles: Vec::new(),
        };
        let require_mention = own
            .and_then(|g| g.require_mention)
            .or_else(|| wildcard.and_then(|g| g.require_mention))
            .unwrap_or(true);
        self.access.activation = activation(require_mention);
        self.group_system_prompt = own
            .and_then(|g| g.system_prompt.as_ref())
            .or_else(|| wildcard.and_then(|g| g.system_prompt.as_ref()))
            .map(|p| p.trim().to_string())
            .filter(|p| !p.is_empty());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::schema::common::DmPolicy;

    #[test]
    fn whatsapp_account_keys_reach_the_access_policy() {
        let config = crate::config::parse_str(
            r#"{ channels: { whatsapp: { dmPolicy: "allowlist",
                 allowFrom: ["+1 555 0100", 1666, "whatsapp:1777@s.whatsapp.net", "nobody"],
                 textChunkLimit: 900, streaming: { chunkMode: "newline", block: { enabled: true } },
                 accounts: { open: { dmPolicy: "open", allowFrom: ["*"] } } } } }"#,
            "test",
        )
        .expect("config");
        let settings = ChannelSettings::resolve(&config, "whatsapp", "default");
        assert_eq!(settings.access.dm_policy, DmPolicy::Allowlist);
        assert_eq!(
            settings.access.allow_from,
            vec!["+15550100", "+1666", "+1777"]
        );
        assert_eq!(settings.access.group_policy, GroupPolicy::Allowlist);
        assert_eq!(
            settings.access.group_allow_from,
            vec!["+15550100", "+1666", "+1777"],
            "groupAllowFrom falls back to allowFrom"
        );
        assert_eq!(settings.text_chunk_limit, Some(900));
        assert_eq!(
            settings.chunk_mode,
            crate::config::schema::ChunkMode::Newline
        );
        assert!(settings.block_streaming);
        let open = ChannelSettings::resolve(&config, "whatsapp", "open");
        assert_eq!(open.access.dm_policy, DmPolicy::Open);
        assert_eq!(open.access.allow_from, vec!["*"]);
        let bare =
            crate::config::parse_str(r#"{ channels: { whatsapp: {} } }"#, "test").expect("config");
        let settings = ChannelSettings::resolve(&bare, "whatsapp", "default");
        assert_eq!(settings.access.dm_policy, DmPolicy::Pairing);
        assert_eq!(settings.text_chunk_limit, Some(4000));
    }

    fn group_event(group: &str, sender: &str) -> InboundEvent {
        InboundEvent {
            channel: "whatsapp".into(),
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

    /// (activation, refusal with a mention, system prompt) for `sender` in `group`.
    fn decide(
        json5: &str,
        group: &str,
        sender: &str,
    ) -> (
        crate::pipeline::access::GroupActivation,
        Option<crate::pipeline::access::Refusal>,
        Option<String>,
    ) {
        let config = crate::config::parse_str(json5, "test").expect("config");
        let event = group_event(group, sender);
        let settings = ChannelSettings::for_event(&config, &event);
        let refusal = crate::pipeline::access::check_group(
            &settings.access,
            &event.message,
            true,
            crate::pipeline::access::GroupOrigin::default(),
        );
        (
            settings.access.activation,
            refusal,
            settings.group_system_prompt,
        )
    }

    #[test]
    fn groups_follow_upstreams_two_layers_and_mention_defaults() {
        use crate::pipeline::access::{GroupActivation, Refusal};
        // No groups map, allowlist (the default) with senders from allowFrom.
        let listed = r#"{ channels: { whatsapp: { allowFrom: ["+1555"] } } }"#;
        assert_eq!(
            decide(listed, "1@g.us", "+1555"),
            (GroupActivation::Mention, None, None)
        );
        assert_eq!(
            decide(listed, "1@g.us", "+1999").1,
            Some(Refusal::SenderNotAllowedInGroup)
        );
        // Allowlist with nobody listed: no group is answered.
        let nobody = r#"{ channels: { whatsapp: {} } }"#;
        assert!(decide(nobody, "1@g.us", "+1555").1.is_some());
        // Open: every member of every group, mentions needed.
        let open = r#"{ channels: { whatsapp: { groupPolicy: "open" } } }"#;
        assert_eq!(decide(open, "1@g.us", "+1999").1, None);
        // The groups map admits only its groups, even under open.
        let mapped = r#"{ channels: { whatsapp: { groupPolicy: "open",
            groups: { "7@g.us": { requireMention: false, systemPrompt: " Be brief. " } } } } }"#;
        assert_eq!(
            decide(mapped, "7@g.us", "+1999"),
            (GroupActivation::All, None, Some("Be brief.".into()))
        );
        assert_eq!(
            decide(mapped, "8@g.us", "+1999").1,
            Some(Refusal::GroupEntryDisabled)
        );
        // "*" admits every group and sets the default; a group's entry wins.
        let wildcard = r#"{ channels: { whatsapp: { groupPolicy: "open",
            groups: { "*": { requireMention: false }, "7@g.us": { requireMention: true } } } } }"#;
        assert_eq!(decide(wildcard, "8@g.us", "+1").0, GroupActivation::All);
        assert_eq!(decide(wildcard, "7@g.us", "+1").0, GroupActivation::Mention);
        // groupAllowFrom replaces allowFrom for groups; disabled answers nothing.
        let senders =
            r#"{ channels: { whatsapp: { allowFrom: ["+1555"], groupAllowFrom: ["+1777"] } } }"#;
        assert_eq!(
            decide(senders, "1@g.us", "+1555").1,
            Some(Refusal::SenderNotAllowedInGroup)
        );
        assert_eq!(decide(senders, "1@g.us", "+1777").1, None);
        let disabled =
            r#"{ channels: { whatsapp: { groupPolicy: "disabled", groupAllowFrom: ["*"] } } }"#;
        assert_eq!(
            decide(disabled, "1@g.us", "+1777").1,
            Some(Refusal::GroupDisabled)
        );
        // Per account: its own map and policy.
        let accounts = r#"{ channels: { whatsapp: { groupPolicy: "open",
            accounts: { work: { groupPolicy: "disabled" } } } } }"#;
        let config = crate::config::parse_str(accounts, "test").expect("config");
        assert_eq!(
            ChannelSettings::resolve(&config, "whatsapp", "work")
                .access
                .group_policy,
            GroupPolicy::Disabled
        );
    }
}
