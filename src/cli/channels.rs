//! `pincer channels login [whatsapp] [--account ID] [--force]`: links a
//! WhatsApp account through the running gateway (`web.login.start`, then
//! `web.login.wait` until the phone scanned the code), printing each QR code
//! in the terminal as Unicode half blocks. Exits 0 once linked (or when the
//! account is linked already), nonzero when linking failed or timed out.
//! Printing only: the gateway and the channel do the linking.

use std::io::Write;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::client::GatewayClient;
use super::{ChannelsCommand, ConnectArgs, GlobalArgs};

type Connect = fn(&GlobalArgs, &ConnectArgs) -> Result<GatewayClient, String>;

/// How long one `web.login.wait` call waits before the CLI asks again.
const WAIT_CALL_MS: u64 = 30_000;
/// Extra time a call may take beyond its own `timeoutMs` (the answer's trip).
const CALL_SLACK: Duration = Duration::from_secs(15);

pub fn run(global: &GlobalArgs, command: ChannelsCommand, connect: Connect) -> Result<(), String> {
    match command {
        ChannelsCommand::Login {
            channel,
            channel_flag,
            account,
            force,
            timeout,
            connect: args,
        } => {
            let channel = channel_flag
                .or(channel)
                .unwrap_or_else(|| "whatsapp".into())
                .to_ascii_lowercase();
            let mut client = connect(global, &args)?;
            login(
                &mut client,
                &channel,
                account.as_deref(),
                force,
                Duration::from_secs(timeout),
            )
        }
    }
}

fn with_account(mut params: Value, account: Option<&str>) -> Value {
    if let Some(account) = account {
        params["accountId"] = json!(account);
    }
    params
}

/// Prints a QR payload for a terminal (or says why it cannot).
fn print_qr(answer: &Value) -> Result<(), String> {
    let payload = answer["qr"].as_str().ok_or(
        "the gateway sent a QR image without its payload (field qr); is it a pincer gateway?",
    )?;
    let drawn = draw(payload)?;
    let mut out = std::io::stdout().lock();
    writeln!(out).map_err(|e| e.to_string())?;
    out.write_all(drawn.as_bytes()).map_err(|e| e.to_string())?;
    writeln!(out).map_err(|e| e.to_string())?;
    out.flush().map_err(|e| e.to_string())
}

#[cfg(feature = "whatsapp")]
fn draw(payload: &str) -> Result<String, String> {
    crate::media::qr::terminal(payload).map_err(|e| e.to_string())
}

#[cfg(not(feature = "whatsapp"))]
fn draw(_payload: &str) -> Result<String, String> {
    Err("this pincer was built without the WhatsApp channel (cargo feature `whatsapp`), which draws QR codes".into())
}

fn login(
    client: &mut GatewayClient,
    channel: &str,
    account: Option<&str>,
    force: bool,
    timeout: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    let start_ms: u64 = 30_000;
    let params = with_account(
        json!({"channel": channel, "force": force, "timeoutMs": start_ms}),
        account,
    );
    let started = client.call_with_timeout(
        "web.login.start",
        params,
        Duration::from_millis(start_ms) + CALL_SLACK,
    )?;
    let message = started["message"].as_str().unwrap_or_default();
    let Some(mut current) = started["qrDataUrl"].as_str().map(str::to_string) else {
        if let Some(who) = started["linkedAs"].as_str() {
            println!("{message}");
            println!("linked as {who}");
            return Ok(());
        }
        return Err(format!("no QR code: {message}"));
    };
    println!("{message}");
    print_qr(&started)?;
    println!("Waiting for the scan…");
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "not linked: nobody scanned the QR code within {} s",
                timeout.as_secs()
            ));
        }
        let wait_ms = WAIT_CALL_MS.min(left.as_millis() as u64).max(1_000);
        let params = with_account(
            json!({"channel": channel, "timeoutMs": wait_ms, "currentQrDataUrl": current}),
            account,
        );
        let waited = client.call_with_timeout(
            "web.login.wait",
            params,
            Duration::from_millis(wait_ms) + CALL_SLACK,
        )?;
        let message = waited["message"].as_str().unwrap_or_default();
        if waited["connected"] == true {
            println!("{message}");
            println!(
                "linked as {}",
                waited["linkedAs"].as_str().unwrap_or("an unknown number")
            );
            return Ok(());
        }
        if let Some(url) = waited["qrDataUrl"].as_str() {
            current = url.to_string();
            println!("{message}");
            print_qr(&waited)?;
            continue;
        }
        // Nothing new: still waiting (asked again until the deadline), or linking ended.
        if waited["waiting"] != true {
            return Err(format!("not linked: {message}"));
        }
    }
}
