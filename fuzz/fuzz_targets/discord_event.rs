//! Discord gateway frames (`{"op","d","s","t"}`) as the WebSocket delivers them, and the payloads inside:
//! HELLO's interval, MESSAGE_CREATE translation (with and without channel info), attachments, channel records,
//! close codes. Properties: no panic; heap linear in the frame.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pincer::channels::discord::payload::{
    close_action, close_reason, hello_interval_ms, GatewayFrame,
};
use pincer::channels::discord::translate::{
    attachments_of, needs_channel_info, translate_message, BotIdentity, ChannelInfo,
    TranslateContext,
};
use pincer::config::AllowBots;
use pincer_fuzz::{linear_budget, within_budget};

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let (head, body) = data.split_at(3);
    let code = u16::from_le_bytes([head[0], head[1]]);
    let _ = close_action(code);
    let _ = close_reason(code);
    let allow_bots = match head[2] % 3 {
        0 => AllowBots::Never,
        1 => AllowBots::Always,
        _ => AllowBots::Mentions,
    };
    let Ok(text) = std::str::from_utf8(body) else {
        return;
    };
    within_budget(
        "discord frame",
        linear_budget(text.len(), 64, 64 * 1024),
        || {
            let Ok(frame) = serde_json::from_str::<GatewayFrame>(text) else {
                return;
            };
            let _ = hello_interval_ms(&frame);
            let ctx = TranslateContext {
                account_id: "default".to_string(),
                bot: BotIdentity {
                    user_id: "1000".to_string(),
                    username: "pincer".to_string(),
                },
                allow_bots,
            };
            let channel = ChannelInfo::from_json(&frame.d).map(|(_, info)| info);
            let _ = needs_channel_info(&frame.d);
            let _ = attachments_of(&frame.d);
            let _ = translate_message(&frame.d, &ctx, None);
            let _ = translate_message(&frame.d, &ctx, channel.as_ref());
        },
    );
});
