//! signal-cli's event stream (`/api/v1/events`, Server-Sent Events) in chunks of arbitrary sizes, each event's
//! JSON translated as the Signal channel does. Properties: no event's data over `MAX_SSE_EVENT_BYTES`; the
//! reader holds no line past `MAX_SSE_LINE_BYTES`; no panic on any payload; heap linear in the stream.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pincer::channels::signal::sse::{SseItem, SseReader, MAX_SSE_EVENT_BYTES};
use pincer::channels::signal::translate::{sender_id, translate, BotIdentity, Context};
use pincer_fuzz::{chunks, linear_budget, split_parts, within_budget};
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let parts = split_parts(data, 2);
    let stream = parts[0];
    let lengths = parts.get(1).copied().unwrap_or(&[]);
    let bot = BotIdentity {
        number: "+15550001111".to_string(),
        uuid: Some("5f0c1d2e-0000-4000-8000-000000000001".to_string()),
    };
    within_budget(
        "signal events",
        linear_budget(stream.len(), 64, 64 * 1024),
        || {
            let mut reader = SseReader::default();
            let mut items = Vec::new();
            for chunk in chunks(stream, lengths) {
                reader.feed(chunk, &mut items);
            }
            for item in items {
                let SseItem::Event { data, .. } = item else {
                    continue;
                };
                assert!(
                    data.len() <= MAX_SSE_EVENT_BYTES,
                    "an event of {} bytes",
                    data.len()
                );
                let Ok(payload) = serde_json::from_str::<Value>(&data) else {
                    continue;
                };
                for ignore_attachments in [false, true] {
                    let ctx = Context {
                        account_id: "default",
                        bot: &bot,
                        ignore_attachments,
                    };
                    let _ = translate(&ctx, &payload);
                }
                let _ = sender_id(&payload["envelope"]);
            }
        },
    );
});
