//! Who gets an answer: group gating (groupPolicy open|allowlist|disabled,
//! groupAllowFrom, activation mention|all|keyword|reply per group) and the
//! DM policy (pairing | allowlist | open with `"*"` | disabled) with DM
//! pairing codes: 8 characters from `ABCDEFGHJKLMNPQRSTUVWXYZ23456789`,
//! valid for 1 h, at most 3 pending per channel account, kept in the store.
//! An unpaired sender's message never reaches the agent.
//!
//! This file decides; it must not send the pairing reply itself.

use rand::Rng;

use crate::config::schema::common::{DmPolicy, GroupPolicy};
use crate::store::{DmPairingLimits, DmPairingRequest, PendingDmPairing, Store, StoreError};

use super::context::InboundMessage;

/// Alphabet of pairing codes (no 0/O/1/I).
pub const PAIRING_CODE_ALPHABET: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZ23456789";
/// Characters in a pairing code.
pub const PAIRING_CODE_LEN: usize = 8;
/// How long a pairing code stays valid.
pub const PAIRING_CODE_TTL_MS: u64 = 60 * 60 * 1000;
/// Pending codes allowed per channel account.
pub const MAX_PENDING_PAIRINGS: usize = 3;
/// The limits handed to the store.
pub const PAIRING_LIMITS: DmPairingLimits = DmPairingLimits {
    ttl_ms: PAIRING_CODE_TTL_MS,
    max_pending_per_account: MAX_PENDING_PAIRINGS,
};

/// When the bot answers in a group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum GroupActivation {
    /// Only when mentioned (default).
    #[default]
    Mention,
    All,
    /// When the text contains one of these words (case-insensitive).
    Keyword(Vec<String>),
    /// Only replies to the bot's own messages.
    Reply,
}

/// A channel account's access settings, as its adapter read them.
#[derive(Debug, Clone, Default)]
pub struct AccessPolicy {
    pub channel: String,
    pub account_id: String,
    pub dm_policy: DmPolicy,
    pub allow_from: Vec<String>,
    pub group_policy: GroupPolicy,
    pub group_allow_from: Vec<String>,
    /// Group ids allowed under `groupPolicy: allowlist` (`*` for all).
    pub allowed_groups: Vec<String>,
    /// Activation in the message's group (its entry, else the defaults).
    pub activation: GroupActivation,
    /// What the config says about the message's own group.
    pub group: GroupScope,
}

/// One group's own entry (a Telegram group or forum topic, a Discord guild
/// channel, a Slack channel), resolved by the channel's settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupScope {
    /// `enabled: false` on the entry: nothing there is answered.
    pub disabled: bool,
    /// The server lists its channels and this one is not among them.
    pub unlisted: bool,
    /// Senders allowed in this group, replacing groupAllowFrom (Telegram's
    /// per-group `allowFrom`, Discord's and Slack's `users`); an empty list
    /// admits nobody.
    pub senders: Option<Vec<String>>,
    /// Member roles allowed in this group (Discord's `roles`): a sender
    /// with one of them is admitted as if listed in `senders`.
    pub roles: Vec<String>,
}

/// Why a message gets no run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    DmDisabled,
    NotAllowed,
    /// Pairing: reply with this code and the approval instructions.
    PairingCode(String),
    /// Pairing: too many pending codes, nothing to send.
    PairingBusy,
    GroupDisabled,
    /// The group's (or topic's, channel's) own entry has `enabled: false`.
    GroupEntryDisabled,
    GroupNotAllowed,
    SenderNotAllowedInGroup,
    NotActivated,
}

/// A fresh random pairing code.
pub fn new_pairing_code() -> String {
    let mut rng = rand::thread_rng();
    (0..PAIRING_CODE_LEN)
        .map(|_| PAIRING_CODE_ALPHABET[rng.gen_range(0..PAIRING_CODE_ALPHABET.len())] as char)
        .collect()
}

/// The reply an unpaired sender gets.
pub fn pairing_reply(channel: &str, sender_id: &str, code: &str) -> String {
    format!(
        "pincer: access not configured.\n\nYour {channel} user id: {sender_id}\n\nPairing code: {code}\n\n\
         Ask the bot owner to approve with:\npincer pairing approve {channel} {code}"
    )
}

fn listed(list: &[String], id: &str) -> bool {
    list.iter().any(|entry| {
        let entry = entry.trim();
        entry == "*" || entry == id || entry.rsplit(':').next() == Some(id)
    })
}

/// Decides a direct message. Blocks on the store: call from a blocking context.
pub fn check_dm(
    policy: &AccessPolicy,
    msg: &InboundMessage,
    store: &Store,
    now_ms: u64,
) -> Result<Option<Refusal>, StoreError> {
    let sender = msg.sender_id.as_str();
    let approved = || store.dm_pairing_is_approved(&policy.channel, &policy.account_id, sender);
    match policy.dm_policy {
        DmPolicy::Disabled => Ok(Some(Refusal::DmDisabled)),
        DmPolicy::Open if policy.allow_from.iter().any(|a| a.trim() == "*") => Ok(None),
        DmPolicy::Open | DmPolicy::Allowlist => {
            if listed(&policy.allow_from, sender) || approved()? {
                Ok(None)
            } else {
                Ok(Some(Refusal::NotAllowed))
            }
        }
        DmPolicy::Pairing => {
            if listed(&policy.allow_from, sender) || approved()? {
                return Ok(None);
            }
            let pending = PendingDmPairing {
                code: String::new(),
                account_id: policy.account_id.clone(),
                sender_id: sender.to_string(),
                sender_name: msg.sender_name.clone(),
                created_at_ms: now_ms,
            };
            let mut codes = new_pairing_code;
            Ok(Some(
                match store.dm_pairing_request(
                    &policy.channel,
                    &pending,
                    PAIRING_LIMITS,
                    &mut codes,
                )? {
                    DmPairingRequest::Created(code) | DmPairingRequest::Existing(code) => {
                        Refusal::PairingCode(code)
                    }
                    DmPairingRequest::TooManyPending => Refusal::PairingBusy,
                },
            ))
        }
    }
}

/// Where a group message was sent from, beyond the message itself.
#[derive(Debug, Clone, Copy, Default)]
pub struct GroupOrigin<'a> {
    /// The server the group lives in (a Discord guild): the allowlist may
    /// name either the group or its space (Discord's `guilds` are keyed by
    /// guild).
    pub space: Option<&'a str>,
    /// The sender's roles in that server.
    pub member_roles: &'a [String],
}

/// Decides a group message (policy, the group's own entry, allowlists,
/// activation).
pub fn check_group(
    policy: &AccessPolicy,
    msg: &InboundMessage,
    bot_mentioned: bool,
    origin: GroupOrigin<'_>,
) -> Option<Refusal> {
    let group = msg.group_id.as_deref().unwrap_or_default();
    let space_listed = origin
        .space
        .is_some_and(|space| listed(&policy.allowed_groups, space));
    match policy.group_policy {
        GroupPolicy::Disabled => return Some(Refusal::GroupDisabled),
        GroupPolicy::Allowlist
            if policy.group.unlisted
                || (!listed(&policy.allowed_groups, group) && !space_listed) =>
        {
            return Some(Refusal::GroupNotAllowed)
        }
        _ => {}
    }
    if policy.group.disabled {
        return Some(Refusal::GroupEntryDisabled);
    }
    if !sender_admitted(policy, msg, origin.member_roles) {
        return Some(Refusal::SenderNotAllowedInGroup);
    }
    let activated = match &policy.activation {
        GroupActivation::All => true,
        GroupActivation::Mention => bot_mentioned || msg.mentioned || msg.is_reply_to_bot,
        GroupActivation::Reply => msg.is_reply_to_bot,
        GroupActivation::Keyword(words) => {
            let body = msg.body.to_lowercase();
            words.iter().any(|w| body.contains(&w.to_lowercase()))
        }
    };
    (!activated).then_some(Refusal::NotActivated)
}

/// The group's own senders/roles when it has them, else groupAllowFrom,
/// else allowFrom (never pairing approvals).
fn sender_admitted(policy: &AccessPolicy, msg: &InboundMessage, member_roles: &[String]) -> bool {
    let scope = &policy.group;
    if scope.senders.is_some() || !scope.roles.is_empty() {
        let by_id = scope
            .senders
            .as_ref()
            .is_some_and(|senders| listed(senders, &msg.sender_id));
        let by_role = member_roles
            .iter()
            .any(|role| scope.roles.iter().any(|r| r.trim() == "*" || r == role));
        return by_id || by_role;
    }
    let senders = if policy.group_allow_from.is_empty() {
        &policy.allow_from
    } else {
        &policy.group_allow_from
    };
    senders.is_empty() || listed(senders, &msg.sender_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_use_the_unambiguous_alphabet() {
        for _ in 0..50 {
            let code = new_pairing_code();
            assert_eq!(code.len(), PAIRING_CODE_LEN);
            assert!(
                code.bytes().all(|b| PAIRING_CODE_ALPHABET.contains(&b)),
                "{code}"
            );
        }
    }

    #[test]
    fn group_allowlist_may_name_the_group_or_its_guild() {
        let policy = AccessPolicy {
            group_policy: GroupPolicy::Allowlist,
            allowed_groups: vec!["77".into()],
            ..AccessPolicy::default()
        };
        let msg = InboundMessage {
            group_id: Some("500".into()),
            sender_id: "42".into(),
            ..InboundMessage::default()
        };
        let from = |space| GroupOrigin {
            space,
            member_roles: &[],
        };
        assert_eq!(check_group(&policy, &msg, true, from(Some("77"))), None);
        assert_eq!(
            check_group(&policy, &msg, true, from(Some("78"))),
            Some(Refusal::GroupNotAllowed)
        );
        assert_eq!(
            check_group(&policy, &msg, true, from(None)),
            Some(Refusal::GroupNotAllowed)
        );
    }
}
