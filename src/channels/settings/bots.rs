//! The settings of the bot platforms (Telegram, Discord, Slack): each
//! account's keys read into [`ChannelSettings`].
//!
//! Pure config reading, like the rest of `settings/`.

use crate::channels::settings::{activation, ChannelSettings};
use crate::config::schema::channels::StreamingKeys;
use crate::config::schema::common::{DmPolicy, ReplyToMode};
use crate::config::Config;

use crate::channels::outbound::RetryPolicy;

impl ChannelSettings {
    pub(super) fn apply_telegram(&mut self, config: &Config, account_id: &str) {
        let Some(account) = config
            .channels
            .telegram
            .as_ref()
            .and_then(|t| t.account(account_id))
        else {
            return;
        };
        let groups = account.groups.clone().unwrap_or_default();
        let access = &mut self.access;
        access.dm_policy = account.effective_dm_policy();
        access.allow_from = account.allow_from.clone().unwrap_or_default();
        access.group_allow_from = account.group_allow_from.clone().unwrap_or_default();
        access.group_policy = account.effective_group_policy();
        access.allowed_groups = groups.keys().cloned().collect();
        self.text_chunk_limit = Some(account.effective_text_chunk_limit() as usize);
        self.chunk_mode = account.effective_chunk_mode();
        self.streaming = account.effective_streaming_mode();
        self.apply_block_streaming(
            account.block_streaming(),
            account.streaming.as_ref().map(|s| s as &dyn StreamingKeys),
        );
        self.reply_to_mode = account.reply_to_mode.unwrap_or(ReplyToMode::Off);
        self.retry = RetryPolicy::from_config(&account.effective_retry());
        if account.ack_reaction.is_some() {
            self.ack_reaction = account.ack_reaction.clone();
        }
        if let Some(limit) = account.history_limit {
            self.group_history_limit = limit as usize;
        }
    }

    pub(super) fn apply_discord(&mut self, config: &Config, account_id: &str) {
        let Some(account) = config
            .channels
            .discord
            .as_ref()
            .and_then(|d| d.account(account_id))
        else {
            return;
        };
        let access = &mut self.access;
        access.dm_policy = account.effective_dm_policy();
        // `dm.enabled: false` answers no direct message at all.
        if account.dm.as_ref().and_then(|dm| dm.enabled) == Some(false) {
            access.dm_policy = DmPolicy::Disabled;
        }
        access.allow_from = account.effective_allow_from();
        access.group_policy = account.effective_group_policy();
        access.allowed_groups = account
            .guilds
            .as_ref()
            .map(|g| g.keys().cloned().collect())
            .unwrap_or_default();
        self.text_chunk_limit = Some(account.effective_text_chunk_limit() as usize);
        self.max_lines_per_message = Some(account.effective_max_lines_per_message() as usize);
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
        let mut retry = account.effective_retry();
        if account.retry.is_none() {
            retry.min_delay_ms = crate::channels::outbound::DEFAULT_MIN_DELAY_MS;
        }
        self.retry = RetryPolicy::from_config(&retry);
        if let Some(limit) = account.history_limit {
            self.group_history_limit = limit as usize;
        }
    }

    pub(super) fn apply_slack(&mut self, config: &Config, account_id: &str) {
        let Some(account) = config
            .channels
            .slack
            .as_ref()
            .and_then(|s| s.account(account_id))
        else {
            return;
        };
        let access = &mut self.access;
        access.dm_policy = account.effective_dm_policy();
        // `dm.enabled: false` answers no direct message at all.
        if account.dm.as_ref().and_then(|dm| dm.enabled) == Some(false) {
            access.dm_policy = DmPolicy::Disabled;
        }
        access.allow_from = account.effective_allow_from();
        access.group_policy = account.effective_group_policy();
        // `channels` is Slack's channel allowlist (keyed by channel id).
        access.allowed_groups = account
            .channels
            .as_ref()
            .map(|c| c.keys().cloned().collect())
            .unwrap_or_default();
        access.activation = activation(account.require_mention.unwrap_or(true));
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
        if let Some(limit) = account.history_limit {
            self.group_history_limit = limit as usize;
        }
    }
}
