//! The platform formatters: model markdown → Telegram HTML (also Matrix's `formatted_body`) and → Slack mrkdwn.
//! Properties: Telegram's HTML passes the fake Telegram's parser (the tags Telegram accepts, balanced, `&` only
//! as an entity: what the real Bot API refuses with "can't parse entities"), and shows no more characters than
//! the markdown had (so a chunk within the limit stays within it); Slack's mrkdwn has `&`, `<` and `>` only as
//! its escapes or in `<url|text>` links. Heap linear in the input.
#![no_main]

#[path = "../../tests/support/platform_text.rs"]
mod platform_text;

use libfuzzer_sys::fuzz_target;
use pincer::channels::slack::mrkdwn::markdown_to_mrkdwn;
use pincer::channels::telegram::format::markdown_to_html;
use pincer_fuzz::{linear_budget, within_budget};

fn check_mrkdwn(text: &str) -> Result<(), String> {
    let mut rest = text;
    while let Some(at) = rest.find(['&', '<', '>']) {
        let tail = &rest[at..];
        if let Some(after) = tail.strip_prefix('&') {
            if !["amp;", "lt;", "gt;"].iter().any(|e| after.starts_with(e)) {
                return Err(format!("a bare & at {tail:?}"));
            }
            rest = after;
        } else if tail.starts_with('<') {
            let Some(end) = tail.find('>') else {
                return Err(format!("an unclosed < at {tail:?}"));
            };
            let inner = &tail[1..end];
            if inner.contains('<') || inner.contains('\n') || !inner.contains('|') {
                return Err(format!("a < that is not a link: {:?}", &tail[..=end]));
            }
            rest = &tail[end + 1..];
        } else {
            return Err(format!("a bare > at {tail:?}"));
        }
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let Ok(markdown) = std::str::from_utf8(data) else {
        return;
    };
    within_budget(
        "formatters",
        linear_budget(markdown.len(), 48, 64 * 1024),
        || {
            let html = markdown_to_html(markdown);
            let visible = platform_text::telegram_html_visible(&html).unwrap_or_else(|e| {
                panic!("Telegram would refuse {html:?} (from {markdown:?}): {e}")
            });
            let (shown, had) = (visible.chars().count(), markdown.chars().count());
            assert!(
                shown <= had,
                "{shown} visible characters from {had}: {html:?}"
            );
            let mrkdwn = markdown_to_mrkdwn(markdown);
            if let Err(e) = check_mrkdwn(&mrkdwn) {
                panic!("Slack mrkdwn {mrkdwn:?} (from {markdown:?}): {e}");
            }
        },
    );
});
