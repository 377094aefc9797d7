//! Channel rules upstream enforces at load time: `dmPolicy: "open"` needs
//! `"*"` in `allowFrom`, `dmPolicy: "allowlist"` needs at least one sender,
//! a Telegram webhook needs a secret, Slack HTTP mode needs a signing
//! secret; Matrix has no end-to-end encryption in pincer and room
//! allowlists name rooms by id or alias. Each rule runs on the channel level and on every enabled
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
    if let Some(matrix) = &channels.matrix {
        #[cfg(not(feature = "matrix"))]
        v.ensure(
            !matrix.base().effective_enabled(),
            "channels.matrix",
            "this pincer was built without the Matrix channel (cargo feature `matrix`); build it with the feature or set enabled: false",
        )?;
        check_matrix(v, matrix)?;
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

fn check_matrix(v: &Validator, matrix: &MatrixConfig) -> Check {
    check_matrix_account(v, &matrix.base(), "channels.matrix")?;
    for id in matrix.accounts.keys() {
        let account = matrix.account(id).unwrap_or_default();
        if account.effective_enabled() {
            check_matrix_account(v, &account, &format!("channels.matrix.accounts.{id}"))?;
        }
    }
    Ok(())
}

fn check_matrix_account(v: &Validator, account: &MatrixAccountConfig, path: &str) -> Check {
    v.ensure(
        account.encryption != Some(true),
        format!("{path}.encryption"),
        "true is not supported by pincer (no end-to-end encryption: pincer answers in unencrypted rooms only and refuses encrypted ones; leave encryption off)",
    )?;
    let mode = account.streaming.as_ref().and_then(|s| s.mode);
    if let Some(mode @ (MatrixStreamingMode::Quiet | MatrixStreamingMode::Progress)) = mode {
        let name = if mode == MatrixStreamingMode::Quiet {
            "quiet"
        } else {
            "progress"
        };
        return Err(v.fail(
            format!("{path}.streaming.mode"),
            format!("\"{name}\" is not supported by pincer (use \"partial\" or \"off\")"),
        ));
    }
    let allow_from = account.effective_dm_allow_from();
    match account.effective_dm_policy() {
        DmPolicy::Open => v.ensure(
            allow_from.iter().any(|entry| entry.trim() == "*"),
            format!("{path}.dm.allowFrom"),
            "channels.matrix.dm.policy=\"open\" requires dm.allowFrom to include \"*\"",
        )?,
        DmPolicy::Allowlist if account.allowlist_only != Some(true) => v.ensure(
            allow_from.iter().any(|entry| !entry.trim().is_empty()),
            format!("{path}.dm.allowFrom"),
            "channels.matrix.dm.policy=\"allowlist\" requires dm.allowFrom to contain at least one user ID",
        )?,
        _ => {}
    }
    for entry in account.auto_join_allowlist.iter().flatten() {
        let entry = entry.trim();
        v.ensure(
            entry == "*" || entry.starts_with('!') || entry.starts_with('#'),
            format!("{path}.autoJoinAllowlist"),
            format!("{entry:?} is not a room ID (!room:server), an alias (#alias:server) or \"*\""),
        )?;
    }
    Ok(())
}
