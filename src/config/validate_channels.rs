//! Channel rules upstream enforces at load time: `dmPolicy: "open"` needs
//! `"*"` in `allowFrom`, `dmPolicy: "allowlist"` needs at least one sender,
//! a Telegram webhook needs a secret, Slack HTTP mode needs a signing
//! secret. Each rule runs on the channel level and on every enabled
//! account (with the account's keys over the channel's).

use super::schema::*;
use super::validate::{Check, Validator};

/// What the DM rules need to know of one account.
struct DmView {
    policy: DmPolicy,
    allow_from: Vec<String>,
}

pub(crate) fn check_channels(v: &Validator, channels: &ChannelsConfig) -> Check {
    if let Some(telegram) = &channels.telegram {
        check_telegram(v, telegram)?;
    }
    if let Some(discord) = &channels.discord {
        let view = |a: &DiscordAccountConfig| DmView {
            policy: a.effective_dm_policy(),
            allow_from: a.effective_allow_from(),
        };
        check_dm(v, "discord", &view(&discord.base()), "channels.discord")?;
        for id in discord.accounts.keys() {
            let account = discord.account(id).unwrap_or_default();
            if account.effective_enabled() {
                check_dm(
                    v,
                    "discord",
                    &view(&account),
                    &format!("channels.discord.accounts.{id}"),
                )?;
            }
        }
    }
    if let Some(slack) = &channels.slack {
        check_slack(v, slack)?;
    }
    Ok(())
}

fn check_dm(v: &Validator, channel: &str, view: &DmView, path: &str) -> Check {
    let allow_path = format!("{path}.allowFrom");
    match view.policy {
        DmPolicy::Open => v.ensure(
            view.allow_from.iter().any(|entry| entry.trim() == "*"),
            allow_path,
            format!("channels.{channel}.dmPolicy=\"open\" requires allowFrom to include \"*\""),
        ),
        DmPolicy::Allowlist => v.ensure(
            view.allow_from.iter().any(|entry| !entry.trim().is_empty()),
            allow_path,
            format!("channels.{channel}.dmPolicy=\"allowlist\" requires allowFrom to contain at least one sender ID"),
        ),
        DmPolicy::Pairing | DmPolicy::Disabled => Ok(()),
    }
}

fn is_set(value: Option<&String>) -> bool {
    value.is_some_and(|v| !v.trim().is_empty())
}

fn check_telegram(v: &Validator, telegram: &TelegramConfig) -> Check {
    let view = |a: &TelegramAccountConfig| DmView {
        policy: a.effective_dm_policy(),
        allow_from: a.allow_from.clone().unwrap_or_default(),
    };
    let base = telegram.base();
    check_dm(v, "telegram", &view(&base), "channels.telegram")?;
    v.ensure(
        !is_set(base.webhook_url.as_ref()) || is_set(base.webhook_secret.as_ref()),
        "channels.telegram.webhookSecret",
        "channels.telegram.webhookUrl requires channels.telegram.webhookSecret",
    )?;
    for id in telegram.accounts.keys() {
        let account = telegram.account(id).unwrap_or_default();
        if !account.effective_enabled() {
            continue;
        }
        let path = format!("channels.telegram.accounts.{id}");
        check_dm(v, "telegram", &view(&account), &path)?;
        v.ensure(
            !is_set(account.webhook_url.as_ref()) || is_set(account.webhook_secret.as_ref()),
            format!("{path}.webhookSecret"),
            "a Telegram webhookUrl requires channels.telegram.webhookSecret or the account's webhookSecret",
        )?;
    }
    Ok(())
}

fn check_slack(v: &Validator, slack: &SlackConfig) -> Check {
    let view = |a: &SlackAccountConfig| DmView {
        policy: a.effective_dm_policy(),
        allow_from: a.effective_allow_from(),
    };
    let base = slack.base();
    check_dm(v, "slack", &view(&base), "channels.slack")?;
    v.ensure(
        base.effective_mode() != SlackMode::Http || is_set(base.signing_secret.as_ref()),
        "channels.slack.signingSecret",
        "channels.slack.mode=\"http\" requires channels.slack.signingSecret",
    )?;
    for id in slack.accounts.keys() {
        let account = slack.account(id).unwrap_or_default();
        if !account.effective_enabled() {
            continue;
        }
        let path = format!("channels.slack.accounts.{id}");
        check_dm(v, "slack", &view(&account), &path)?;
        v.ensure(
            account.effective_mode() != SlackMode::Http || is_set(account.signing_secret.as_ref()),
            format!("{path}.signingSecret"),
            "Slack HTTP mode requires channels.slack.signingSecret or the account's signingSecret",
        )?;
    }
    Ok(())
}
