//! Outbound message content: model markdown as `org.matrix.custom.html`
//! (the Telegram HTML converter's output with spoilers as
//! `data-mx-spoiler` spans and line breaks as `<br>` outside code blocks),
//! the markdown itself as the plain `body`; replies, threads and edits as
//! `m.relates_to`; uploaded files as `m.image`/`m.video`/`m.audio`/`m.file`.
//!
//! Pure shaping: this file must not send anything.

use serde_json::{json, Value};

use crate::channels::telegram::format::markdown_to_html;
use crate::channels::{TextFormat, UploadKind};

/// Markdown → Matrix HTML.
pub fn to_html(markdown: &str) -> String {
    let html = markdown_to_html(markdown)
        .replace("<tg-spoiler>", "<span data-mx-spoiler>")
        .replace("</tg-spoiler>", "</span>");
    let mut out = String::with_capacity(html.len() + 32);
    let mut in_pre = false;
    let mut rest = html.as_str();
    while let Some(c) = rest.chars().next() {
        if rest.starts_with("<pre") {
            in_pre = true;
        } else if rest.starts_with("</pre>") {
            in_pre = false;
        }
        if c == '\n' && !in_pre {
            out.push_str("<br>");
        } else {
            out.push(c);
        }
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// The content of a text message (`m.text`), with HTML for markdown.
pub fn text_content(text: &str, format: TextFormat) -> Value {
    let mut content = json!({ "msgtype": "m.text", "body": text });
    if format == TextFormat::Markdown {
        let html = to_html(text);
        if html != escape_only(text) {
            content["format"] = json!("org.matrix.custom.html");
            content["formatted_body"] = json!(html);
        }
    }
    content
}

/// The `m.room.message` content of an uploaded file: `m.image`, `m.video`,
/// `m.audio` (a voice note also carries MSC3245's voice marker, as Element
/// sends them) or `m.file`; with a caption, `body` is the caption and
/// `filename` the file's name (the spec's captioned media), else `body` is
/// the name.
pub fn file_content(
    kind: UploadKind,
    mxc: &str,
    file_name: &str,
    mime: &str,
    bytes: u64,
    caption: Option<&str>,
) -> Value {
    let msgtype = match kind {
        UploadKind::Photo => "m.image",
        UploadKind::Video => "m.video",
        UploadKind::Audio | UploadKind::Voice => "m.audio",
        UploadKind::Document => "m.file",
    };
    let mut content = match caption {
        Some(caption) => text_content(caption, TextFormat::Markdown),
        None => json!({ "body": file_name }),
    };
    content["msgtype"] = json!(msgtype);
    content["filename"] = json!(file_name);
    content["url"] = json!(mxc);
    content["info"] = json!({ "mimetype": mime, "size": bytes });
    if kind == UploadKind::Voice {
        content["org.matrix.msc1767.audio"] = json!({});
        content["org.matrix.msc3245.voice"] = json!({});
    }
    content
}

/// `text` HTML-escaped with line breaks, i.e. what plain text renders as.
fn escape_only(text: &str) -> String {
    crate::channels::telegram::format::escape_html(text).replace('\n', "<br>")
}

/// `m.relates_to` for an answer: in `thread` (a thread root) when given,
/// quoting `reply_to` when given.
pub fn relation(thread: Option<&str>, reply_to: Option<&str>) -> Option<Value> {
    match (thread, reply_to) {
        (Some(root), reply) => Some(json!({
            "rel_type": "m.thread",
            "event_id": root,
            "is_falling_back": reply.is_none(),
            "m.in_reply_to": { "event_id": reply.unwrap_or(root) },
        })),
        (None, Some(reply)) => Some(json!({ "m.in_reply_to": { "event_id": reply } })),
        (None, None) => None,
    }
}

/// An edit of `event_id` to `text` (`m.replace`).
pub fn edit_content(event_id: &str, text: &str, format: TextFormat) -> Value {
    let new_content = text_content(text, format);
    let mut content = json!({
        "msgtype": "m.text",
        "body": format!("* {text}"),
        "m.new_content": new_content,
        "m.relates_to": { "rel_type": "m.replace", "event_id": event_id },
    });
    if let Some(html) = content["m.new_content"]["formatted_body"]
        .as_str()
        .map(str::to_string)
    {
        content["format"] = json!("org.matrix.custom.html");
        content["formatted_body"] = json!(format!("* {html}"));
    }
    content
}

/// A reaction with `key` to `event_id`.
pub fn reaction_content(event_id: &str, key: &str) -> Value {
    json!({ "m.relates_to": { "rel_type": "m.annotation", "event_id": event_id, "key": key } })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_becomes_matrix_html_with_line_breaks_outside_code() {
        let html = to_html("**bold** and ||secret||\nnext\n```\na\nb\n```");
        assert!(html.contains("<b>bold</b>"), "{html}");
        assert!(
            html.contains("<span data-mx-spoiler>secret</span>"),
            "{html}"
        );
        assert!(html.contains("<br>next"), "{html}");
        assert!(html.contains("<pre>a\nb</pre>"), "{html}");
    }

    #[test]
    fn plain_text_gets_no_formatted_body() {
        let content = text_content("just words\nand lines", TextFormat::Markdown);
        assert!(content.get("formatted_body").is_none(), "{content}");
        let content = text_content("**bold**", TextFormat::Markdown);
        assert_eq!(content["format"], "org.matrix.custom.html");
        let plain = text_content("**bold**", TextFormat::Plain);
        assert!(plain.get("formatted_body").is_none());
    }

    #[test]
    fn relations_thread_and_quote() {
        assert_eq!(relation(None, None), None);
        assert_eq!(
            relation(None, Some("$q")),
            Some(json!({"m.in_reply_to": {"event_id": "$q"}}))
        );
        let threaded = relation(Some("$root"), None).expect("thread");
        assert_eq!(threaded["rel_type"], "m.thread");
        assert_eq!(threaded["is_falling_back"], true);
        let edit = edit_content("$old", "**new**", TextFormat::Markdown);
        assert_eq!(edit["m.relates_to"]["rel_type"], "m.replace");
        assert_eq!(edit["m.new_content"]["body"], "**new**");
    }
}
