//! The QR-login capability: an account linked by scanning a QR code with the
//! phone (WhatsApp's linked devices), as the gateway's `web.login.start` and
//! `web.login.wait` drive it for the Control UI and `pincer channels login`.
//!
//! Only the platform adapter knows how its device links; the gateway asks an
//! adapter for this capability ([`super::Channel::qr_login`]) and maps the
//! answers to upstream's result shapes. Nothing here talks to a platform.

use std::time::Duration;

use super::BoxFuture;

/// `web.login.start`: show a QR code for an account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QrLoginStart {
    /// The account (`None`: the channel's default account).
    pub account_id: Option<String>,
    /// Forget a linked device and link afresh.
    pub force: bool,
    /// How long to wait for the first QR code.
    pub timeout: Duration,
}

/// What `web.login.start` answers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QrLoginStarted {
    /// The QR code as a PNG `data:` URL, when one waits to be scanned.
    pub qr_data_url: Option<String>,
    /// The QR payload itself (for a terminal rendering), with `qr_data_url`.
    pub qr_text: Option<String>,
    /// What happened, for a person.
    pub message: String,
    /// `Some(true)` when the account is linked and connected (no QR needed).
    pub connected: Option<bool>,
    /// Who the account is linked as (`+15551234567`), when it is.
    pub linked_as: Option<String>,
}

/// `web.login.wait`: wait for the scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QrLoginWait {
    pub account_id: Option<String>,
    /// How long to wait before answering "still waiting".
    pub timeout: Duration,
    /// The QR data URL the caller shows: a newer code is answered at once.
    pub current_qr_data_url: Option<String>,
}

/// What `web.login.wait` answers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QrLoginWaited {
    pub connected: bool,
    pub message: String,
    /// A newer QR code than the caller's `current_qr_data_url`.
    pub qr_data_url: Option<String>,
    pub qr_text: Option<String>,
    /// Who the account is linked as, once connected.
    pub linked_as: Option<String>,
    /// The login goes on (the wait timed out, or a newer code came): ask again.
    pub waiting: bool,
}

/// What logging an account out did (`channels.logout`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QrLoggedOut {
    pub account_id: String,
    /// The stored device (its keys and sessions) was deleted.
    pub cleared: bool,
    /// The platform was told to remove the device (it was connected).
    pub logged_out: bool,
}

/// Why a QR login could not be attempted at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QrLoginError {
    #[error("{channel} has no account {account_id:?} (configured: {configured})")]
    UnknownAccount {
        channel: &'static str,
        account_id: String,
        configured: String,
    },
    #[error("{channel} account {account_id} is disabled (enabled: false)")]
    Disabled {
        channel: &'static str,
        account_id: String,
    },
    #[error("{0}")]
    Unavailable(String),
}

/// An adapter whose accounts link by QR code.
pub trait QrLogin: Send + Sync {
    /// Shows a QR code for the account (or says it is linked already).
    fn login_qr_start(
        &self,
        request: QrLoginStart,
    ) -> BoxFuture<'_, Result<QrLoginStarted, QrLoginError>>;

    /// Waits until the account is linked, the code changes, linking fails or `timeout` passes.
    fn login_qr_wait(
        &self,
        request: QrLoginWait,
    ) -> BoxFuture<'_, Result<QrLoginWaited, QrLoginError>>;

    /// Unlinks the account (`None`: the default one): the platform is told to
    /// remove the device when it is connected, the stored device is deleted,
    /// and the account waits for a new scan.
    fn logout(
        &self,
        account_id: Option<String>,
    ) -> BoxFuture<'_, Result<QrLoggedOut, QrLoginError>>;
}
