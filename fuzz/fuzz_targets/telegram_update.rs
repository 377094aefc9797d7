//! Telegram Bot API payloads: a `getUpdates` reply (the long poll) or one update (a webhook body), read and
//! translated into inbound events, with mention detection and media picking. Properties: no panic on any JSON
//! a server (or a forged webhook) could send; heap linear in the body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pincer::channels::telegram::inbound::{
    forum_topic, mentions_bot, message_of, translate, BotIdentity,
};
use pincer::channels::telegram::media::attachment_of;
use pincer::channels::telegram::wire::{Envelope, Update};
use pincer_fuzz::{linear_budget, within_budget};

fn handle(update: &Update) {
    let bot = BotIdentity {
        id: 42,
        username: Some("pincer_bot".to_string()),
    };
    for message in [message_of(update), update.edited_message.as_ref()]
        .into_iter()
        .flatten()
    {
        let text = message
            .text
            .as_deref()
            .or(message.caption.as_deref())
            .unwrap_or("");
        let _ = mentions_bot(text, &message.entities, &bot);
        let _ = forum_topic(message);
        let _ = attachment_of(message, 20 * 1024 * 1024);
        let event = translate("default", &bot, message);
        assert_eq!(event.channel, "telegram");
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, body)) = data.split_first() else {
        return;
    };
    within_budget(
        "telegram update",
        linear_budget(body.len(), 64, 64 * 1024),
        || {
            if mode % 2 == 0 {
                if let Ok(envelope) = serde_json::from_slice::<Envelope<Vec<Update>>>(body) {
                    envelope.result.iter().flatten().for_each(handle);
                }
            } else if let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) {
                if let Ok(update) = serde_json::from_value::<Update>(value) {
                    handle(&update);
                }
            }
        },
    );
});
