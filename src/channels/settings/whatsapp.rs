//! The settings of a WhatsApp account: `dmPolicy`/`allowFrom` (entries are
//! phone numbers, `+` optional, `whatsapp:` in front dropped, or `"*"`),
//! `textChunkLimit` and `streaming`. Direct messages only: groups stay
//! disabled. Pure config reading, like the rest of `settings/`.

use crate::channels::settings::ChannelSettings;
use crate::config::schema::channels::StreamingKeys;
use crate::config::schema::common::GroupPolicy;
use crate::config::Config;

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
        access.group_policy = GroupPolicy::Disabled;
        self.text_chunk_limit = Some(account.effective_text_chunk_limit() as usize);
        self.chunk_mode = account.effective_chunk_mode();
        self.streaming = account.effective_streaming_mode();
        self.apply_block_streaming(
            account.block_streaming(),
            account.streaming.as_ref().map(|s| s as &dyn StreamingKeys),
        );
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
        assert_eq!(settings.access.group_policy, GroupPolicy::Disabled);
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
}
