//! Slack payloads: a Socket Mode envelope (`{"envelope_id","type":"events_api","payload"}`) or an Events API
//! request body (`event_callback`), translated into inbound events with their files. Properties: no panic on
//! any JSON; heap linear in the body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pincer::channels::slack::translate::{files_of, translate_event, TranslateContext};
use pincer::channels::slack::web::SlackIdentity;
use pincer_fuzz::{linear_budget, within_budget};
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, body)) = data.split_first() else {
        return;
    };
    within_budget(
        "slack event",
        linear_budget(body.len(), 64, 64 * 1024),
        || {
            let Ok(value) = serde_json::from_slice::<Value>(body) else {
                return;
            };
            // Socket Mode wraps the Events API body in an envelope's `payload`.
            let payload = value.get("payload").unwrap_or(&value);
            let ctx = TranslateContext {
                account_id: "default".to_string(),
                bot: SlackIdentity {
                    user_id: "U0BOT".to_string(),
                    bot_id: Some("B0BOT".to_string()),
                    team_id: Some("T0TEAM".to_string()),
                    username: "pincer".to_string(),
                },
                allow_bots: mode % 2 == 1,
            };
            let _ = files_of(payload);
            let _ = translate_event(payload, &ctx);
        },
    );
});
