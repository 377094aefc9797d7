//! The part of a message's settings that depends on its group: the
//! Telegram group (or `"*"`) entry and its forum topic, the Discord guild
//! and guild channel, the Slack channel, the Matrix room (its rules are in
//! `settings/matrix.rs`), the Signal group (`settings/signal.rs`), the
//! WhatsApp group (`settings/whatsapp.rs`). Each platform's entry can switch the group off,
//! restrict its senders (Discord also by member role), override the group
//! policy and decide `requireMention`, resolved in upstream's order; it can
//! add a `systemPrompt` to the turn (Telegram: the group's then the
//! topic's) and narrow its `skills` (the topic's over the group's), and a
//! Telegram topic can name the agent that answers (`agentId`). Slack's
//! `dm.replyToMode` applies to direct messages.
//!
//! Pure config reading, like `settings/`.

use crate::config::schema::common::GroupPolicy;
use crate::config::Config;
use crate::pipeline::access::GroupScope;
use crate::pipeline::context::ChatType;

use super::settings::{activation, ChannelSettings};
use super::InboundEvent;

/// The first of `entries` that has a value for `key`.
fn first_set<T: Copy, E>(entries: &[Option<&E>], key: impl Fn(&E) -> Option<T>) -> Option<T> {
    entries.iter().flatten().find_map(|entry| key(entry))
}

/// A Discord channel name as upstream keys it: lower case, no leading `#`
/// or `@`, runs of anything but `a-z0-9` as one `-`, no `-` at either end.
fn discord_slug(name: &str) -> String {
    let name = name.trim().trim_start_matches(['#', '@']).to_lowercase();
    let mut slug = String::with_capacity(name.len());
    for c in name.chars() {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            slug.push(c);
        } else if !slug.ends_with('-') {
            slug.push('-');
        }
    }
    slug.trim_matches('-').to_string()
}

/// A non-empty id list, or `None` (upstream treats an empty `users` /
/// `roles` list as no restriction).
fn restriction(list: Option<&Vec<String>>) -> Option<Vec<String>> {
    list.filter(|l| !l.is_empty()).cloned()
}

impl ChannelSettings {
    /// The settings for one inbound message: the account's, then what the
    /// message's own group entry says (enabled, senders, roles, group
    /// policy, requireMention), resolved as upstream does per platform.
    pub fn for_event(config: &Config, event: &InboundEvent) -> ChannelSettings {
        let mut settings = ChannelSettings::resolve(config, &event.channel, &event.account_id);
        let Some(group) = event.message.group_id.as_deref() else {
            settings.direct_reply_to_mode(config, event);
            if event.channel == "whatsapp" {
                settings.whatsapp_self_chat(event);
            }
            return settings;
        };
        match event.channel.as_str() {
            "telegram" => settings.telegram_group(config, event, group),
            "discord" => settings.discord_channel(config, event, group),
            "slack" => settings.slack_channel(config, event, group),
            "matrix" => settings.matrix_room(config, event, group),
            "signal" => settings.signal_group(config, event, group),
            "whatsapp" => settings.whatsapp_group(config, event, group),
            _ => {}
        }
        settings
    }

    /// Slack's `dm.replyToMode` for direct messages (over `replyToMode`).
    fn direct_reply_to_mode(&mut self, config: &Config, event: &InboundEvent) {
        if event.channel != "slack" {
            return;
        }
        let dm_mode = config
            .channels
            .slack
            .as_ref()
            .and_then(|s| s.account(&event.account_id))
            .and_then(|a| a.dm.and_then(|dm| dm.reply_to_mode));
        if let Some(mode) = dm_mode {
            self.reply_to_mode = mode;
        }
    }

    /// `groups.<chat id>` (else `groups."*"`) and its `topics.<thread id>`:
    /// the topic's keys over the group's; requireMention topic → group →
    /// `"*"` → true; under allowlist a group admitted by `"*"` alone needs
    /// listed senders.
    fn telegram_group(&mut self, config: &Config, event: &InboundEvent, group: &str) {
        let Some(account) = config
            .channels
            .telegram
            .as_ref()
            .and_then(|t| t.account(&event.account_id))
        else {
            return;
        };
        let groups = account.groups.unwrap_or_default();
        let own = groups.get(group);
        let wildcard = groups.get("*");
        let entry = own.or(wildcard);
        let topic = event
            .message
            .thread_id
            .as_deref()
            .and_then(|t| entry.and_then(|e| e.topics.get(t)));
        let access = &mut self.access;
        access.group = GroupScope {
            disabled: entry.is_some_and(|e| e.enabled == Some(false))
                || topic.is_some_and(|t| t.enabled == Some(false)),
            unlisted: false,
            senders: topic
                .and_then(|t| t.allow_from.clone())
                .or_else(|| entry.and_then(|e| e.allow_from.clone())),
            roles: Vec::new(),
        };
        if let Some(policy) = topic
            .and_then(|t| t.group_policy)
            .or_else(|| entry.and_then(|e| e.group_policy))
        {
            access.group_policy = policy;
        }
        // Under allowlist, a group only "*" admits needs listed senders
        // (groupAllowFrom, else allowFrom): with none, nobody is answered
        // there; a group with its own entry is itself the allowlist.
        let no_senders = access.group_allow_from.is_empty() && access.allow_from.is_empty();
        if access.group_policy == GroupPolicy::Allowlist
            && own.is_none()
            && access.group.senders.is_none()
            && no_senders
        {
            access.group.senders = Some(Vec::new());
        }
        let require_mention = topic
            .and_then(|t| t.require_mention)
            .or_else(|| first_set(&[own, wildcard], |g| g.require_mention));
        access.activation = activation(require_mention.unwrap_or(true));
        self.group_system_prompt = joined_prompts(&[
            entry.and_then(|e| e.system_prompt.as_deref()),
            topic.and_then(|t| t.system_prompt.as_deref()),
        ]);
        self.skill_filter = topic
            .and_then(|t| t.skills.clone())
            .or_else(|| entry.and_then(|e| e.skills.clone()));
        self.agent_override = topic
            .and_then(|t| t.agent_id.as_deref())
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(str::to_string);
    }

    /// `guilds.<guild id>` (else `"*"`), its `channels.<channel id>` (else
    /// the channel's name as a slug, `general` or `#general`, else the
    /// thread's parent, else `"*"`): users/roles of the channel, else of
    /// the guild; requireMention channel → guild → true; a guild that lists
    /// channels admits only those (and not one with `allow: false`).
    fn discord_channel(&mut self, config: &Config, event: &InboundEvent, channel: &str) {
        let Some(account) = config
            .channels
            .discord
            .as_ref()
            .and_then(|d| d.account(&event.account_id))
        else {
            return;
        };
        if self.group_dm(
            event,
            account
                .dm
                .as_ref()
                .map(|dm| (dm.group_enabled, &dm.group_channels)),
        ) {
            return;
        }
        let guilds = account.guilds.unwrap_or_default();
        let guild = event
            .route
            .guild_id
            .as_deref()
            .and_then(|id| guilds.get(id))
            .or_else(|| guilds.get("*"));
        let parent = event.route.parent_peer.as_ref().map(|p| p.id.as_str());
        let channels = guild.map(|g| &g.channels);
        let slug = event.message.group_name.as_deref().map(discord_slug);
        let entry = channels.and_then(|c| {
            c.get(channel)
                .or_else(|| {
                    slug.as_ref()
                        .and_then(|s| c.get(s).or_else(|| c.get(&format!("#{s}"))))
                })
                .or_else(|| parent.and_then(|p| c.get(p)))
                .or_else(|| c.get("*"))
        });
        let users = entry
            .and_then(|c| c.users.as_ref())
            .or_else(|| guild.and_then(|g| g.users.as_ref()));
        let roles = entry
            .and_then(|c| c.roles.as_ref())
            .or_else(|| guild.and_then(|g| g.roles.as_ref()));
        let access = &mut self.access;
        access.group = GroupScope {
            disabled: entry.is_some_and(|c| c.enabled == Some(false)),
            unlisted: (channels.is_some_and(|c| !c.is_empty()) && entry.is_none())
                || entry.is_some_and(|c| c.allow == Some(false)),
            senders: restriction(users),
            roles: restriction(roles).unwrap_or_default(),
        };
        let require_mention = entry
            .and_then(|c| c.require_mention)
            .or_else(|| guild.and_then(|g| g.require_mention));
        access.activation = activation(require_mention.unwrap_or(true));
        self.group_system_prompt =
            joined_prompts(&[entry.and_then(|c| c.system_prompt.as_deref())]);
        self.skill_filter = entry.and_then(|c| c.skills.clone());
    }

    /// A group DM (Discord's, Slack's `mpim`) is answered only with
    /// `dm.groupEnabled` (default false), and when `dm.groupChannels` lists
    /// channels only in those; no mention needed (upstream's mention gate is
    /// for guild channels and rooms). False when the message is no group DM.
    fn group_dm(
        &mut self,
        event: &InboundEvent,
        dm: Option<(Option<bool>, &Option<Vec<String>>)>,
    ) -> bool {
        if event.message.chat_type != Some(ChatType::Group) {
            return false;
        }
        let (enabled, channels) = dm.unwrap_or((None, &None));
        let access = &mut self.access;
        access.group = GroupScope {
            disabled: !enabled.unwrap_or(false),
            ..GroupScope::default()
        };
        access.group_policy = GroupPolicy::Allowlist;
        access.allowed_groups = channels
            .clone()
            .filter(|c| !c.is_empty())
            .unwrap_or_else(|| vec!["*".to_string()]);
        access.activation = activation(false);
        true
    }

    /// `channels.<channel id>` (else `"*"`): its `users`, `enabled`, `allow`
    /// (false: off the allowlist), and
    /// requireMention channel → account → true.
    fn slack_channel(&mut self, config: &Config, event: &InboundEvent, channel: &str) {
        let Some(account) = config
            .channels
            .slack
            .as_ref()
            .and_then(|s| s.account(&event.account_id))
        else {
            return;
        };
        if self.group_dm(
            event,
            account
                .dm
                .as_ref()
                .map(|dm| (dm.group_enabled, &dm.group_channels)),
        ) {
            return;
        }
        let channels = account.channels.unwrap_or_default();
        let entry = channels.get(channel).or_else(|| channels.get("*"));
        let access = &mut self.access;
        access.group = GroupScope {
            disabled: entry.is_some_and(|c| c.enabled == Some(false)),
            unlisted: entry.is_some_and(|c| c.allow == Some(false)),
            senders: restriction(entry.and_then(|c| c.users.as_ref())),
            roles: Vec::new(),
        };
        let require_mention = entry
            .and_then(|c| c.require_mention)
            .or(account.require_mention);
        access.activation = activation(require_mention.unwrap_or(true));
        self.group_system_prompt =
            joined_prompts(&[entry.and_then(|c| c.system_prompt.as_deref())]);
        self.skill_filter = entry.and_then(|c| c.skills.clone());
    }
}

/// The non-blank prompts, trimmed, one paragraph each (upstream joins them so).
fn joined_prompts(parts: &[Option<&str>]) -> Option<String> {
    let parts: Vec<&str> = parts
        .iter()
        .flatten()
        .map(|p| p.trim())
        .filter(|p| !p.is_empty())
        .collect();
    (!parts.is_empty()).then(|| parts.join("\n\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::schema::common::ReplyToMode;
    use crate::pipeline::access::GroupActivation;

    /// A group message on `channel` in `group` (`guild`, `thread` when given).
    fn group_event(
        channel: &str,
        group: &str,
        guild: Option<&str>,
        thread: Option<&str>,
    ) -> InboundEvent {
        InboundEvent {
            channel: channel.into(),
            account_id: "default".into(),
            message: crate::pipeline::context::InboundMessage {
                group_id: Some(group.into()),
                thread_id: thread.map(str::to_string),
                ..Default::default()
            },
            route: crate::routing::RouteInput {
                channel: channel.into(),
                guild_id: guild.map(str::to_string),
                ..Default::default()
            },
            bot_mentioned: false,
            bot_username: None,
        }
    }

    #[test]
    fn require_mention_is_resolved_per_group_not_per_account() {
        let config = crate::config::parse_str(
            r#"{ channels: {
                 telegram: { botToken: "t", groups: { "-1": { requireMention: false }, "-2": {} } },
                 discord: { token: "t", guilds: { "77": { requireMention: false,
                   channels: { "500": {}, "501": { requireMention: true } } }, "78": {} } },
                 slack: { botToken: "xoxb-1", appToken: "xapp-1",
                   channels: { C1: { requireMention: false }, C2: {} } } } }"#,
            "test",
        )
        .expect("config");
        let activation = |channel: &str, group: &str, guild: Option<&str>| {
            ChannelSettings::for_event(&config, &group_event(channel, group, guild, None))
                .access
                .activation
        };
        assert_eq!(activation("telegram", "-1", None), GroupActivation::All);
        assert_eq!(activation("telegram", "-2", None), GroupActivation::Mention);
        assert_eq!(
            activation("discord", "500", Some("77")),
            GroupActivation::All
        );
        assert_eq!(
            activation("discord", "501", Some("77")),
            GroupActivation::Mention
        );
        assert_eq!(
            activation("discord", "600", Some("78")),
            GroupActivation::Mention
        );
        assert_eq!(activation("slack", "C1", None), GroupActivation::All);
        assert_eq!(activation("slack", "C2", None), GroupActivation::Mention);
    }

    #[test]
    fn channel_entries_add_their_system_prompt_and_skills() {
        let config = crate::config::parse_str(
            r#"{ channels: {
                 discord: { token: "t", guilds: { "77": { channels: {
                   "500": { systemPrompt: " Be brief. ", skills: ["git"] }, "501": {} } } } },
                 slack: { botToken: "xoxb-1", appToken: "xapp-1",
                   channels: { C1: { systemPrompt: "Use threads.", skills: [] } } } } }"#,
            "test",
        )
        .expect("config");
        let settings = |channel: &str, group: &str, guild: Option<&str>| {
            ChannelSettings::for_event(&config, &group_event(channel, group, guild, None))
        };
        let discord = settings("discord", "500", Some("77"));
        assert_eq!(discord.group_system_prompt.as_deref(), Some("Be brief."));
        assert_eq!(discord.skill_filter, Some(vec!["git".to_string()]));
        let bare = settings("discord", "501", Some("77"));
        assert_eq!((bare.group_system_prompt, bare.skill_filter), (None, None));
        let slack = settings("slack", "C1", None);
        assert_eq!(slack.group_system_prompt.as_deref(), Some("Use threads."));
        assert_eq!(
            slack.skill_filter,
            Some(Vec::new()),
            "an empty list allows no skill"
        );
        assert_eq!(settings("slack", "C2", None).group_system_prompt, None);
        assert_eq!(settings("discord", "500", Some("77")).agent_override, None);
    }

    #[test]
    fn wildcard_group_and_topic_entries_resolve_like_upstream() {
        let config = crate::config::parse_str(
            r#"{ channels: { telegram: { botToken: "t", groups: {
                 "*": { requireMention: false },
                 "-2": { requireMention: true },
                 "-3": { allowFrom: [7], topics: { "5": { enabled: false },
                                                   "6": { allowFrom: [8], requireMention: true } } },
                 "-4": { enabled: false } } } } }"#,
            "test",
        )
        .expect("config");
        let settings = |group: &str, topic: Option<&str>| {
            ChannelSettings::for_event(&config, &group_event("telegram", group, None, topic)).access
        };
        assert_eq!(settings("-9", None).activation, GroupActivation::All);
        assert_eq!(settings("-2", None).activation, GroupActivation::Mention);
        assert_eq!(settings("-3", None).activation, GroupActivation::All);
        assert_eq!(
            settings("-3", None).group.senders,
            Some(vec!["7".to_string()])
        );
        assert!(settings("-3", Some("5")).group.disabled);
        let topic = settings("-3", Some("6"));
        assert_eq!(topic.group.senders, Some(vec!["8".to_string()]));
        assert_eq!(topic.activation, GroupActivation::Mention);
        assert!(settings("-4", None).group.disabled);
        assert!(!settings("-9", None).group.disabled);
        // Only "*" admits -9 and no sender is listed: nobody is answered there.
        assert_eq!(settings("-9", None).group.senders, Some(Vec::new()));
    }

    #[test]
    fn discord_users_and_roles_come_from_the_channel_else_the_guild() {
        let config = crate::config::parse_str(
            r#"{ channels: { discord: { token: "t", guilds: {
                 "77": { roles: ["crew"], channels: { "500": {}, "501": { users: [43], roles: ["admin"] },
                                                       "502": { enabled: false } } },
                 "78": {} } } } }"#,
            "test",
        )
        .expect("config");
        let scope = |group: &str, guild: &str| {
            ChannelSettings::for_event(&config, &group_event("discord", group, Some(guild), None))
                .access
                .group
        };
        assert_eq!(scope("500", "77").roles, vec!["crew".to_string()]);
        assert_eq!(scope("500", "77").senders, None);
        assert_eq!(scope("501", "77").senders, Some(vec!["43".to_string()]));
        assert_eq!(scope("501", "77").roles, vec!["admin".to_string()]);
        assert!(scope("502", "77").disabled);
        assert!(scope("503", "77").unlisted, "77 lists its channels");
        assert!(!scope("600", "78").unlisted, "78 lists none");
        assert_eq!(discord_slug("#Help Desk__2"), "help-desk-2");
        let config = crate::config::parse_str(
            r##"{ channels: { discord: { token: "t", guilds: {
                 "77": { channels: { general: { users: [42] }, "#help": { enabled: false } } } } } } }"##,
            "test",
        )
        .expect("config");
        let named = |name: &str| {
            let mut event = group_event("discord", "900", Some("77"), None);
            event.message.group_name = Some(name.to_string());
            ChannelSettings::for_event(&config, &event).access.group
        };
        assert_eq!(named("General").senders, Some(vec!["42".to_string()]));
        assert!(named("help").disabled);
        assert!(named("random").unlisted);
    }

    #[test]
    fn slack_direct_messages_take_dm_reply_to_mode() {
        let config = crate::config::parse_str(
            r#"{ channels: { slack: { botToken: "xoxb-1", appToken: "xapp-1",
                 replyToMode: "off", dm: { replyToMode: "all" } } } }"#,
            "test",
        )
        .expect("config");
        let mut direct = group_event("slack", "D1", None, None);
        direct.message.group_id = None;
        let mode = |event: &InboundEvent| ChannelSettings::for_event(&config, event).reply_to_mode;
        assert_eq!(mode(&direct), ReplyToMode::All);
        assert_eq!(
            mode(&group_event("slack", "C1", None, None)),
            ReplyToMode::Off
        );
    }
}
