//! OpenClaw's spoken-reply tags in a reply's text (`tts.auto: "tagged"`
//! speaks only a reply that carries one), pulled out by upstream's rules
//! restated, in its order, never inside fenced or inline code:
//! 1. `[[tts:text]]…[[/tts:text]]`: the inside is what is spoken and is not
//!    shown; the whole block leaves the text;
//! 2. `[[tts]]…[[/tts]]`: the inside stays in the text and is what is
//!    spoken (unless a block of the first kind said otherwise);
//! 3. `[[tts:key=value …]]`: settings for this reply (`voice`,
//!    `openai_voice`, `speakervoice`/`speaker_voice` choose the voice;
//!    `model`, `openai_model` the model; other keys are ignored), removed;
//! 4. a lone `[[tts]]` and any closing `[[/tts…]]` are removed.
//!
//! Any of these marks the reply as tagged. Spaces inside the brackets and
//! letter case do not matter. This file only parses text; whether to speak
//! is the channel's decision.

use super::fences::parse_fence_spans;

/// What a reply's tags say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TtsTags {
    /// The text to show, tags removed.
    pub visible: String,
    /// A tag was present.
    pub tagged: bool,
    /// What to speak instead of the visible text.
    pub spoken: Option<String>,
    /// A voice the reply asked for.
    pub voice: Option<String>,
    /// A model the reply asked for.
    pub model: Option<String>,
}

/// Pulls the tags out of `text`.
pub fn extract_tts_tags(text: &str) -> TtsTags {
    if !has_tts_tag(text) {
        return TtsTags {
            visible: text.to_string(),
            ..TtsTags::default()
        };
    }
    let mut spoken: Option<String> = None;
    let (mut voice, mut model) = (None, None);
    // 1. Hidden spoken text.
    let visible = replace_pairs(text, Kind::HiddenOpen, Kind::HiddenClose, |inner| {
        spoken.get_or_insert_with(|| inner.trim().to_string());
        String::new()
    });
    // 2. Shown and spoken text.
    let visible = replace_pairs(&visible, Kind::Open, Kind::Close, |inner| {
        let shown = inner.trim().to_string();
        spoken.get_or_insert_with(|| shown.clone());
        shown
    });
    // 3. Settings; 4. lone openers and closers.
    let visible = replace_single(&visible, |kind, body| match kind {
        Kind::Settings | Kind::HiddenOpen => {
            read_settings(body, &mut voice, &mut model);
            true
        }
        Kind::Open | Kind::Close | Kind::HiddenClose => true,
        Kind::Other => false,
    });
    TtsTags {
        tagged: visible != text || spoken.is_some(),
        visible,
        spoken,
        voice,
        model,
    }
}

/// [`extract_tts_tags`]'s visible text of a reply still streaming: an
/// unclosed `[[`, and a hidden block not yet closed, are held back.
pub fn live_visible_text(text: &str) -> String {
    let mut cut = text.len();
    if let Some(open) = text.rfind("[[") {
        if !text[open + 2..].contains("]]") {
            cut = open;
        }
    }
    if text.ends_with('[') {
        cut = cut.min(text.len() - 1);
    }
    let held = &text[..cut];
    let tags = find_tags(held);
    let mut open_hidden = None;
    for tag in &tags {
        match tag.kind {
            Kind::HiddenOpen if open_hidden.is_none() => open_hidden = Some(tag.start),
            Kind::HiddenClose => open_hidden = None,
            _ => {}
        }
    }
    let held = &held[..open_hidden.unwrap_or(held.len())];
    extract_tts_tags(held).visible
}

/// Whether `text` may hold a tag at all (the fast path).
fn has_tts_tag(text: &str) -> bool {
    text.contains("[[") && text.to_ascii_lowercase().contains("tts")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `[[tts:text]]`
    HiddenOpen,
    /// `[[/tts:text]]`
    HiddenClose,
    /// `[[tts]]`
    Open,
    /// `[[/tts]]` or `[[/tts:…]]`
    Close,
    /// `[[tts:…]]`
    Settings,
    Other,
}

struct Tag {
    start: usize,
    end: usize,
    kind: Kind,
    /// What follows `tts:` in a settings tag.
    body: String,
}

fn classify(inner: &str) -> (Kind, String) {
    let squashed: String = inner
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect::<String>()
        .to_ascii_lowercase();
    let body = || {
        inner
            .split_once(':')
            .map(|(_, rest)| rest.trim().to_string())
            .unwrap_or_default()
    };
    match squashed.as_str() {
        "tts:text" => (Kind::HiddenOpen, body()),
        "/tts:text" => (Kind::HiddenClose, String::new()),
        "tts" => (Kind::Open, String::new()),
        "/tts" => (Kind::Close, String::new()),
        s if s.starts_with("/tts:") => (Kind::Close, String::new()),
        s if s.starts_with("tts:") && !inner.contains(']') => (Kind::Settings, body()),
        _ => (Kind::Other, String::new()),
    }
}

/// The `[[…]]` tags of `text` outside fenced and inline code.
fn find_tags(text: &str) -> Vec<Tag> {
    let code = code_spans(text);
    let in_code = |at: usize| code.iter().any(|(start, end)| at >= *start && at < *end);
    let mut tags = Vec::new();
    let mut at = 0;
    while let Some(found) = text[at..].find("[[") {
        let start = at + found;
        let Some(close) = text[start + 2..].find("]]") else {
            break;
        };
        let end = start + 2 + close + 2;
        if in_code(start) {
            at = start + 2;
            continue;
        }
        let (kind, body) = classify(&text[start + 2..end - 2]);
        if kind == Kind::Other {
            at = start + 2;
            continue;
        }
        tags.push(Tag {
            start,
            end,
            kind,
            body,
        });
        at = end;
    }
    tags
}

/// Byte ranges of fenced blocks and inline code spans.
fn code_spans(text: &str) -> Vec<(usize, usize)> {
    let fences: Vec<(usize, usize)> = parse_fence_spans(text)
        .into_iter()
        .map(|f| (f.start, f.end.unwrap_or(text.len())))
        .collect();
    let mut spans = fences.clone();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if fences.iter().any(|(s, e)| i >= *s && i < *e) || bytes[i] != b'`' {
            i += 1;
            continue;
        }
        let run = bytes[i..].iter().take_while(|b| **b == b'`').count();
        let ticks = &text[i..i + run];
        let after = i + run;
        let closing = text[after..]
            .match_indices(ticks)
            .find(|(at, _)| {
                let end = after + at + run;
                bytes.get(end) != Some(&b'`') && (after + at == 0 || bytes[after + at - 1] != b'`')
            })
            .map(|(at, _)| after + at + run);
        match closing {
            Some(end) => {
                spans.push((i, end));
                i = end;
            }
            None => i = after,
        }
    }
    spans
}

/// Each `open`…`close` pair (the nearest close after an open) replaced by
/// `inside(text between)`.
fn replace_pairs(
    text: &str,
    open: Kind,
    close: Kind,
    mut inside: impl FnMut(&str) -> String,
) -> String {
    let tags = find_tags(text);
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    let mut index = 0;
    while index < tags.len() {
        let tag = &tags[index];
        if tag.kind != open || tag.start < at {
            index += 1;
            continue;
        }
        let Some(offset) = tags[index + 1..].iter().position(|t| t.kind == close) else {
            break;
        };
        let closer = &tags[index + 1 + offset];
        out.push_str(&text[at..tag.start]);
        out.push_str(&inside(&text[tag.end..closer.start]));
        at = closer.end;
        index += 1 + offset + 1;
    }
    out.push_str(&text[at..]);
    out
}

/// Every tag for which `remove(kind, body)` says so taken out.
fn replace_single(text: &str, mut remove: impl FnMut(Kind, &str) -> bool) -> String {
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for tag in find_tags(text) {
        if remove(tag.kind, &tag.body) {
            out.push_str(&text[at..tag.start]);
            at = tag.end;
        }
    }
    out.push_str(&text[at..]);
    out
}

/// `key=value` words of a settings tag.
fn read_settings(body: &str, voice: &mut Option<String>, model: &mut Option<String>) {
    for word in body.split_whitespace() {
        let Some((key, value)) = word.split_once('=') else {
            continue;
        };
        let (key, value) = (key.trim().to_ascii_lowercase(), value.trim());
        if key.is_empty() || value.is_empty() {
            continue;
        }
        match key.as_str() {
            "voice" | "openai_voice" | "openaivoice" | "speakervoice" | "speaker_voice" => {
                *voice = Some(value.to_string())
            }
            "model" | "openai_model" | "openaimodel" => *model = Some(value.to_string()),
            _ => log::debug!("tts tag: key {key} is not used by pincer"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn untagged_text_is_untouched() {
        let tags = extract_tts_tags("Plain [[reply_to_current]] text");
        assert!(!tags.tagged);
        assert_eq!(tags.visible, "Plain [[reply_to_current]] text");
    }

    #[test]
    fn each_kind_of_tag_by_upstreams_rules() {
        let tags = extract_tts_tags("[[tts]]Hello there.");
        assert!(tags.tagged);
        assert_eq!(tags.visible, "Hello there.");
        assert_eq!(tags.spoken, None);

        let tags = extract_tts_tags("Read this: [[tts]] Short version. [[/tts]] Done.");
        assert_eq!(tags.visible, "Read this: Short version. Done.");
        assert_eq!(tags.spoken.as_deref(), Some("Short version."));

        let tags =
            extract_tts_tags("A table follows.[[tts:text]] Here is the summary. [[/tts:text]]");
        assert_eq!(tags.visible, "A table follows.");
        assert_eq!(tags.spoken.as_deref(), Some("Here is the summary."));

        let tags = extract_tts_tags("[[ TTS: voice=nova model=tts-1 speed=1.2 ]]Hi!");
        assert!(tags.tagged);
        assert_eq!(tags.visible, "Hi!");
        assert_eq!(tags.voice.as_deref(), Some("nova"));
        assert_eq!(tags.model.as_deref(), Some("tts-1"));

        let tags = extract_tts_tags("Bye [[/tts]]");
        assert!(tags.tagged);
        assert_eq!(tags.visible, "Bye ");
    }

    #[test]
    fn tags_in_code_stay() {
        let text = "Use `[[tts]]` to speak.\n```\n[[tts:voice=x]]\n```";
        let tags = extract_tts_tags(text);
        assert!(!tags.tagged);
        assert_eq!(tags.visible, text);
    }

    #[test]
    fn live_text_holds_back_unfinished_tags() {
        assert_eq!(live_visible_text("Hello [[tt"), "Hello ");
        assert_eq!(live_visible_text("Hello ["), "Hello ");
        assert_eq!(live_visible_text("Shown.[[tts:text]]secret so f"), "Shown.");
        assert_eq!(
            live_visible_text("Shown.[[tts:text]]secret[[/tts:text]] more"),
            "Shown. more"
        );
    }
}
