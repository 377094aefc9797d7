//! The settings of a Matrix account and of the room a message came from:
//! `dm.policy`/`dm.allowFrom` (with `dm.enabled` and `allowlistOnly`),
//! `groupPolicy`/`groupAllowFrom`, the room entries of `groups` (legacy
//! `rooms`) keyed by room id or alias, with `enabled`, `users`,
//! `requireMention`/`autoReply`, `systemPrompt` and `skills`.
//!
//! Matrix user ids are the only allowlist entries upstream honours by
//! default: other entries (display names) are dropped here. Pure config
//! reading, like the rest of `settings/`.

use crate::channels::settings::{activation, ChannelSettings};
use crate::channels::InboundEvent;
use crate::config::schema::channels::StreamingKeys;
use crate::config::schema::common::ReplyToMode;
use crate::config::schema::matrix::MatrixRoomConfig;
use crate::config::Config;
use crate::pipeline::access::GroupScope;

/// The Matrix user ids of an allowlist (`@user:server`, optionally written
/// `matrix:@user:server`) and `"*"`; anything else is ignored.
pub(crate) fn matrix_user_ids(entries: &[String]) -> Vec<String> {
    entries
        .iter()
        .map(|e| e.trim())
        .map(|e| e.strip_prefix("matrix:").unwrap_or(e))
        .filter(|e| *e == "*" || (e.starts_with('@') && e.contains(':')))
        .map(str::to_string)
        .collect()
}

impl ChannelSettings {
    pub(super) fn apply_matrix(&mut self, config: &Config, account_id: &str) {
        let Some(account) = config
            .channels
            .matrix
            .as_ref()
            .and_then(|m| m.account(account_id))
        else {
            return;
        };
        let rooms = account.effective_rooms();
        let access = &mut self.access;
        access.dm_policy = account.effective_dm_policy();
        access.allow_from = matrix_user_ids(&account.effective_dm_allow_from());
        access.group_allow_from =
            matrix_user_ids(account.group_allow_from.as_deref().unwrap_or_default());
        access.group_policy = account.effective_group_policy();
        access.allowed_groups = rooms
            .iter()
            .filter(|(_, room)| room.enabled != Some(false))
            .map(|(key, _)| key.clone())
            .collect();
        self.text_chunk_limit = Some(account.effective_text_chunk_limit() as usize);
        self.chunk_mode = account.effective_chunk_mode();
        self.streaming = account.effective_streaming_mode();
        self.apply_block_streaming(
            account.block_streaming(),
            account.streaming.as_ref().map(|s| s as &dyn StreamingKeys),
        );
        self.reply_to_mode = account.reply_to_mode.unwrap_or(ReplyToMode::Off);
        if account.ack_reaction.is_some() {
            self.ack_reaction = account.ack_reaction.clone();
        }
        if let Some(scope) = account.ack_reaction_scope {
            self.ack_reaction_scope = scope;
        }
        if let Some(limit) = account.history_limit {
            self.group_history_limit = limit as usize;
        }
    }

    /// The room's entry (by room id, else by one of its aliases, else
    /// `"*"`): `enabled: false` makes it unlisted; `users` replaces
    /// groupAllowFrom; mentions are needed unless `autoReply: true` or
    /// `requireMention: false` (autoReply wins when both are set).
    pub(crate) fn matrix_room(&mut self, config: &Config, event: &InboundEvent, room: &str) {
        let Some(account) = config
            .channels
            .matrix
            .as_ref()
            .and_then(|m| m.account(&event.account_id))
        else {
            return;
        };
        let rooms = account.effective_rooms();
        let by_name = rooms.get(room).map(|e| (room.to_string(), e)).or_else(|| {
            event
                .message
                .group_aliases
                .iter()
                .find_map(|alias| rooms.get(alias).map(|e| (alias.clone(), e)))
        });
        let entry: Option<&MatrixRoomConfig> =
            by_name.as_ref().map(|(_, e)| *e).or_else(|| rooms.get("*"));
        let access = &mut self.access;
        // A room listed by alias is the room itself on the allowlist.
        if let Some((key, e)) = &by_name {
            if key != room && e.enabled != Some(false) {
                access.allowed_groups.push(room.to_string());
            }
        }
        access.group = GroupScope {
            disabled: false,
            unlisted: entry.is_some_and(|e| e.enabled == Some(false)),
            senders: entry
                .and_then(|e| e.users.as_ref())
                .filter(|users| !users.is_empty())
                .map(|users| matrix_user_ids(users)),
            roles: Vec::new(),
        };
        let require_mention = match entry {
            Some(e) => match e.auto_reply {
                Some(auto) => !auto,
                None => e.require_mention.unwrap_or(true),
            },
            None => true,
        };
        access.activation = activation(require_mention);
        self.group_system_prompt = entry
            .and_then(|e| e.system_prompt.as_deref())
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(str::to_string);
        self.skill_filter = entry.and_then(|e| e.skills.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::schema::common::{DmPolicy, GroupPolicy};
    use crate::pipeline::access::GroupActivation;

    fn config(json5: &str) -> Config {
        crate::config::parse_str(json5, "test").expect("config")
    }

    fn room_event(room: &str, aliases: &[&str]) -> InboundEvent {
        InboundEvent {
            channel: "matrix".into(),
            account_id: "default".into(),
            message: crate::pipeline::context::InboundMessage {
                group_id: Some(room.into()),
                group_aliases: aliases.iter().map(|a| a.to_string()).collect(),
                ..Default::default()
            },
            route: crate::routing::RouteInput::default(),
            bot_mentioned: false,
            bot_username: None,
        }
    }

    #[test]
    fn matrix_account_keys_reach_the_access_policy() {
        let config = config(
            r#"{ channels: { matrix: { homeserver: "https://hs", accessToken: "t",
                 dm: { policy: "allowlist", allowFrom: ["@ann:hs", "Ann Display", "matrix:@bob:hs"] },
                 groupPolicy: "open", groupAllowFrom: ["@ann:hs"], textChunkLimit: 1200,
                 ackReaction: "👀", ackReactionScope: "all", historyLimit: 7,
                 groups: { "!r:hs": {}, "!off:hs": { enabled: false } } } } }"#,
        );
        let settings = ChannelSettings::resolve(&config, "matrix", "default");
        let access = &settings.access;
        assert_eq!(access.dm_policy, DmPolicy::Allowlist);
        assert_eq!(access.allow_from, vec!["@ann:hs", "@bob:hs"]);
        assert_eq!(access.group_allow_from, vec!["@ann:hs"]);
        assert_eq!(access.group_policy, GroupPolicy::Open);
        assert_eq!(access.allowed_groups, vec!["!r:hs"]);
        assert_eq!(settings.text_chunk_limit, Some(1200));
        assert_eq!(settings.ack_reaction.as_deref(), Some("👀"));
        assert_eq!(
            settings.ack_reaction_for(false, false),
            Some("👀"),
            "ackReactionScope all covers DMs"
        );
        assert_eq!(settings.group_history_limit, 7);
    }

    #[test]
    fn a_room_is_found_by_id_or_alias_and_auto_reply_wins_over_require_mention() {
        let config = config(
            r##"{ channels: { matrix: { homeserver: "https://hs", accessToken: "t",
                 groups: { "#ops:hs": { autoReply: true, requireMention: true, users: ["@ann:hs"],
                                        systemPrompt: " Be brief. ", skills: ["weather"] },
                           "!quiet:hs": { enabled: false } } } } }"##,
        );
        let mut settings = ChannelSettings::resolve(&config, "matrix", "default");
        settings.matrix_room(&config, &room_event("!ops:hs", &["#ops:hs"]), "!ops:hs");
        assert!(settings
            .access
            .allowed_groups
            .contains(&"!ops:hs".to_string()));
        assert_eq!(settings.access.activation, GroupActivation::All);
        assert_eq!(
            settings.access.group.senders,
            Some(vec!["@ann:hs".to_string()])
        );
        assert_eq!(settings.group_system_prompt.as_deref(), Some("Be brief."));
        assert_eq!(settings.skill_filter, Some(vec!["weather".to_string()]));

        let mut quiet = ChannelSettings::resolve(&config, "matrix", "default");
        quiet.matrix_room(&config, &room_event("!quiet:hs", &[]), "!quiet:hs");
        assert!(quiet.access.group.unlisted);

        let mut other = ChannelSettings::resolve(&config, "matrix", "default");
        other.matrix_room(&config, &room_event("!other:hs", &[]), "!other:hs");
        assert_eq!(other.access.activation, GroupActivation::Mention);
        assert!(!other
            .access
            .allowed_groups
            .contains(&"!other:hs".to_string()));
    }
}
