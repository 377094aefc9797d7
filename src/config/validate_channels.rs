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
    if let Some(signal) = &channels.signal {
        #[cfg(not(feature = "signal"))]
        v.ensure(
            !signal.base().effective_enabled(),
            "channels.signal",
            "this pincer was built without the Signal channel (cargo feature `signal`); build it with the feature or set enabled: false",
        )?;
        check_signal(v, signal)?;
    }
    if let Some(whatsapp) = &channels.whatsapp {
        #[cfg(not(feature = "whatsapp"))]
        v.ensure(
            !whatsapp.base().effective_enabled(),
            "channels.whatsapp",
            "this pincer was built without the WhatsApp channel (cargo feature `whatsapp`); build it with the feature or set enabled: false",
        )?;
        for id in whatsapp.account_ids() {
            let account = whatsapp.account(&id).unwrap_or_default();
            let path = if whatsapp.accounts.contains_key(&id) {
                format!("channels.whatsapp.accounts.{id}")
            } else {
                "channels.whatsapp".to_string()
            };
            let view = DmView {
                policy: account.effective_dm_policy(),
                allow_from: account.effective_allow_from(),
            };
            check_dm(v, "whatsapp", &view, &path)?;
        }
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

fn check_signal(v: &Validator, signal: &SignalConfig) -> Check {
    check_signal_account(v, &signal.base(), "channels.signal")?;
    for id in signal.accounts.keys() {
        let account = signal.account(id).unwrap_or_default();
        if account.effective_enabled() {
            check_signal_account(v, &account, &format!("channels.signal.accounts.{id}"))?;
        }
    }
    Ok(())
}

/// A daemon URL as upstream takes it: http(s), no credentials in it.
fn check_signal_url(v: &Validator, url: &str, path: String) -> Check {
    let parsed = reqwest::Url::parse(url.trim());
    let ok = parsed.as_ref().is_ok_and(|u| {
        matches!(u.scheme(), "http" | "https")
            && u.username().is_empty()
            && u.password().is_none()
            && u.host_str().is_some()
    });
    v.ensure(
        ok,
        path,
        format!("{url:?} is not an http:// or https:// URL without credentials"),
    )
}

fn check_signal_account(v: &Validator, account: &SignalAccountConfig, path: &str) -> Check {
    let view = DmView {
        policy: account.effective_dm_policy(),
        allow_from: account.effective_allow_from(),
    };
    check_dm(v, "signal", &view, path)?;
    if let Some(url) = account.http_url.as_deref().filter(|u| !u.trim().is_empty()) {
        check_signal_url(v, url, format!("{path}.httpUrl"))?;
    }
    v.ensure(
        account.http_port != Some(0),
        format!("{path}.httpPort"),
        "must be between 1 and 65535",
    )?;
    let Some(transport) = &account.transport else {
        return Ok(());
    };
    let kind = transport.kind.unwrap_or_default();
    v.ensure(
        kind != SignalTransportKind::Container,
        format!("{path}.transport.kind"),
        "\"container\" (bbernhard's signal-cli-rest-api) is not supported by pincer; run signal-cli's own daemon (\"managed-native\" or \"external-native\")",
    )?;
    match transport.url.as_deref() {
        Some(url) => check_signal_url(v, url, format!("{path}.transport.url"))?,
        None => v.ensure(
            kind != SignalTransportKind::ExternalNative,
            format!("{path}.transport.url"),
            "transport.kind \"external-native\" requires transport.url (the daemon's http:// address)",
        )?,
    }
    if kind == SignalTransportKind::ExternalNative {
        for (key, set) in [
            ("cliPath", transport.cli_path.is_some()),
            ("configPath", transport.config_path.is_some()),
            ("httpHost", transport.http_host.is_some()),
            ("httpPort", transport.http_port.is_some()),
            ("startupTimeoutMs", transport.startup_timeout_ms.is_some()),
            ("receiveMode", transport.receive_mode.is_some()),
            ("ignoreStories", transport.ignore_stories.is_some()),
        ] {
            v.ensure(
                !set,
                format!("{path}.transport.{key}"),
                "only a managed-native transport takes this key",
            )?;
        }
    }
    v.ensure(
        transport.http_port != Some(0),
        format!("{path}.transport.httpPort"),
        "must be between 1 and 65535",
    )?;
    v.ensure(
        transport
            .startup_timeout_ms
            .is_none_or(|ms| (1_000..=120_000).contains(&ms)),
        format!("{path}.transport.startupTimeoutMs"),
        "must be between 1000 and 120000",
    )
}
