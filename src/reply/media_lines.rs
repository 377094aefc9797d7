//! OpenClaw's reply convention for attachments: a line of the agent's reply
//! that starts with `MEDIA:` names a file or URL to send, and the tag
//! `[[audio_as_voice]]` asks for audio to go as a voice note. This file pulls
//! both out of the text, by upstream's rules restated:
//! - only a line whose first non-blank characters are `MEDIA:` (any case)
//!   counts, and never a line inside a fenced code block;
//! - the rest of the line is the source, optionally in backticks or quotes
//!   (a quoted source may hold spaces); unquoted, each whitespace-separated
//!   word is a candidate, stray quotes and brackets trimmed from its ends;
//! - a candidate counts when it is at most 4,096 characters, without
//!   whitespace unless quoted, and either an `https://` URL without user
//!   info whose host is a public name or address (no `localhost`, `.local`,
//!   `.internal`, single-label or private/loopback/link-local address), or a
//!   local path (`/…`, `./…`, `~/…`, `file:` URLs, or a relative path with a
//!   `/`) with no `..` segment; failing all words, the whole rest of the line
//!   is tried once more with spaces allowed and as a bare file name with an
//!   extension;
//! - words that do not count stay in the text (the `MEDIA:` word goes); a
//!   line whose source does not count but looks like a local path is dropped
//!   whole, anything else is left as it was;
//! - `[[audio_as_voice]]` (spaces inside allowed, any case) outside code is
//!   removed from the text and sets [`MediaSplit::audio_as_voice`].
//!
//! Whether a local path may be read at all (inside the agent's workspace or
//! the media area) is the sender's check, not this file's: this file only
//! parses and knows nothing about files or platforms.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::fences::parse_fence_spans;

/// Longest source accepted, in characters (upstream's limit).
pub const MAX_MEDIA_SOURCE_CHARS: usize = 4096;

/// A reply's text with its attachments taken out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MediaSplit {
    /// What is left to show (trailing whitespace trimmed).
    pub text: String,
    /// The sources, in order (`file:` prefixes removed).
    pub media: Vec<String>,
    /// `[[audio_as_voice]]` was present.
    pub audio_as_voice: bool,
    /// Sources of `MEDIA:` lines that did not count but looked like a local
    /// path (their lines are dropped: the sender says they were not sent,
    /// where upstream is silent). A refused URL stays in the text.
    pub refused: Vec<String>,
}

/// Splits `raw` into visible text, media sources and the voice tag.
pub fn split_media_lines(raw: &str) -> MediaSplit {
    let trimmed = raw.trim_end();
    let lower = trimmed.to_ascii_lowercase();
    if !lower.contains("media:") && !trimmed.contains("[[") {
        return MediaSplit {
            text: trimmed.to_string(),
            ..MediaSplit::default()
        };
    }
    let fences = parse_fence_spans(trimmed);
    let mut media = Vec::new();
    let mut refused = Vec::new();
    let mut kept: Vec<String> = Vec::new();
    let mut offset = 0;
    for line in trimmed.split('\n') {
        let start = offset;
        offset += line.len() + 1;
        let in_code = fences
            .iter()
            .any(|f| f.contains(start) || f.contains(start + line.len().saturating_sub(1)));
        let head = line.trim_start();
        let is_directive = head.len() >= 6 && head[..6].eq_ignore_ascii_case("media:");
        if in_code || !is_directive {
            kept.push(line.to_string());
            continue;
        }
        let before = media.len();
        let rest = directive_line(&head[6..], &mut media);
        if media.len() == before {
            let payload = clean_candidate(head[6..].trim());
            if looks_like_local_path(payload) {
                refused.push(payload.to_string());
            }
        }
        if let Some(rest) = rest {
            kept.push(rest);
        }
    }
    let visible = kept.join("\n");
    let visible = visible.trim_start_matches(['\n', ' ', '\t']).to_string();
    let (text, audio_as_voice) = strip_voice_tags(&visible);
    MediaSplit {
        text: text.trim_end().to_string(),
        media,
        audio_as_voice,
        refused,
    }
}

/// What a reader is shown of a finished reply: its text without `MEDIA:`
/// lines and `[[audio_as_voice]]` (the files go out apart).
pub fn display_text(raw: &str) -> String {
    split_media_lines(raw).text
}

/// [`display_text`] of a reply still streaming: a last line that is, or
/// may still become, a `MEDIA:` line (`M`, `ME`, … `MEDIA:…`) and an
/// unclosed `[[` are held back until the text after them shows what they
/// are (upstream's rule for live text), so a reader never sees a directive
/// flash by.
pub fn live_display_text(raw: &str) -> String {
    display_text(hold_trailing_directive(raw))
}

/// `text` without a trailing directive that may be incomplete.
fn hold_trailing_directive(text: &str) -> &str {
    let mut cut = text.len();
    let mut trim = false;
    if let Some(open) = text.rfind("[[") {
        if !text[open + 2..].contains("]]") {
            cut = open;
            trim = true;
        }
    }
    if text.ends_with('[') && text.len() - 1 < cut {
        cut = text.len() - 1;
        trim = true;
    }
    let line_start = text.rfind('\n').map_or(0, |i| i + 1);
    let last = &text[line_start..];
    let directive = last
        .trim_start()
        .get(..6)
        .is_some_and(|head| head.eq_ignore_ascii_case("media:"));
    let bare = last.trim_start_matches([' ', '\t']);
    let prefix = !bare.is_empty()
        && bare.len() <= 5
        && "MEDIA".starts_with(bare.to_ascii_uppercase().as_str());
    if (directive || prefix) && line_start < cut {
        cut = line_start;
    }
    let held = &text[..cut];
    if trim {
        held.trim_end()
    } else {
        held
    }
}

/// One `MEDIA:` line's payload: sources go to `media`; returns what stays
/// on the line (`None`: the line goes).
fn directive_line(payload: &str, media: &mut Vec<String>) -> Option<String> {
    let payload = payload.trim();
    let payload = payload
        .strip_prefix('`')
        .map(|p| p.strip_suffix('`').unwrap_or(p))
        .unwrap_or(payload);
    if let Some(quoted) = unwrap_quoted(payload) {
        if let Some(source) = valid_source(quoted, true, true) {
            media.push(source);
            return None;
        }
        return (!looks_like_local_path(quoted)).then(|| format!("MEDIA:{payload}"));
    }
    let parts = merge_path_words(payload);
    let mut found = Vec::new();
    let mut invalid = Vec::new();
    for part in &parts {
        let candidate = clean_candidate(part);
        let spaced = candidate.contains(char::is_whitespace);
        match valid_source(candidate, spaced, false) {
            Some(source) => found.push(source),
            None if !spaced || !has_traversal(candidate) => invalid.push(part.as_str()),
            None => {}
        }
    }
    let whole = clean_candidate(payload);
    // One path whose spaces split it ("./my photo.png").
    let spaced_path = found.len() == 1
        && !invalid.is_empty()
        && !parts.iter().skip(1).any(|p| begins_source(p))
        && payload.contains(char::is_whitespace)
        && looks_like_local_path(payload);
    if spaced_path {
        if let Some(source) = valid_source(whole, true, false) {
            media.push(source);
            return None;
        }
    }
    if found.is_empty() {
        if let Some(source) = valid_source(whole, true, true) {
            media.push(source);
            return None;
        }
        return (!looks_like_local_path(payload)).then(|| line_text(payload));
    }
    media.extend(found);
    let rest = invalid.join(" ");
    (!rest.trim().is_empty()).then_some(rest)
}

/// Whether a word starts a source of its own (a root or a scheme).
fn begins_source(word: &str) -> bool {
    let candidate = without_file_scheme(clean_candidate(word));
    candidate.starts_with(['/', '~', '\\'])
        || candidate.starts_with("./")
        || candidate.starts_with("../")
        || has_scheme(candidate)
}

/// The payload's words, a rooted path's following words joined to it unless
/// they start a source of their own, or the path already has an extension
/// and the word counts on its own.
fn merge_path_words(payload: &str) -> Vec<String> {
    let mut parts: Vec<String> = Vec::new();
    let mut previous_end = 0;
    let mut search = 0;
    for word in payload.split_whitespace() {
        let at = search + payload[search..].find(word).unwrap_or(0);
        let end = at + word.len();
        let join = parts.last().is_some_and(|previous| {
            let previous = without_file_scheme(clean_candidate(previous));
            let rooted = previous.starts_with(['/', '~'])
                || previous.starts_with("./")
                || previous.starts_with("../");
            rooted
                && !begins_source(word)
                && (!has_extension(previous)
                    || valid_source(clean_candidate(word), false, false).is_none())
        });
        match parts.last_mut() {
            Some(last) if join => last.push_str(&payload[previous_end..end]),
            _ => parts.push(word.to_string()),
        }
        previous_end = end;
        search = end;
    }
    parts
}

fn line_text(payload: &str) -> String {
    format!("MEDIA: {payload}")
}

/// The inside of `"…"`, `'…'` or `` `…` ``.
fn unwrap_quoted(value: &str) -> Option<&str> {
    let value = value.trim();
    let first = value.chars().next()?;
    if value.len() < 2 || !matches!(first, '"' | '\'' | '`') || !value.ends_with(first) {
        return None;
    }
    Some(value[1..value.len() - 1].trim())
}

/// Stray quotes and brackets trimmed from a word's ends.
fn clean_candidate(raw: &str) -> &str {
    raw.trim_start_matches(['`', '"', '\'', '[', '{', '('])
        .trim_end_matches(['`', '"', '\'', '\\', '}', ')', ']', ','])
}

/// `file://` / `file:` removed.
fn without_file_scheme(source: &str) -> &str {
    let lower = source.get(..7).map(str::to_ascii_lowercase);
    if lower.as_deref() == Some("file://") {
        return &source[7..];
    }
    let lower = source.get(..5).map(str::to_ascii_lowercase);
    if lower.as_deref() == Some("file:") {
        return &source[5..];
    }
    source
}

fn has_scheme(candidate: &str) -> bool {
    let Some((scheme, _)) = candidate.split_once(':') else {
        return false;
    };
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '.' | '-'))
}

fn has_traversal(candidate: &str) -> bool {
    candidate.split(['/', '\\']).any(|segment| segment == "..")
        || (candidate.starts_with('~') && !candidate.starts_with("~/"))
}

fn looks_like_local_path(candidate: &str) -> bool {
    let candidate = without_file_scheme(candidate);
    candidate.starts_with('/')
        || candidate.starts_with("./")
        || candidate.starts_with("../")
        || candidate.starts_with('~')
        || (!has_scheme(candidate) && candidate.contains('/'))
}

fn has_extension(candidate: &str) -> bool {
    candidate.rsplit_once('.').is_some_and(|(stem, ext)| {
        !stem.is_empty()
            && (1..=10).contains(&ext.len())
            && ext.chars().all(|c| c.is_alphanumeric() || c == '_')
    })
}

/// The source when `candidate` counts (see the module's rules).
fn valid_source(candidate: &str, allow_spaces: bool, allow_bare_name: bool) -> Option<String> {
    let source = without_file_scheme(candidate.trim());
    if source.is_empty() || source.chars().count() > MAX_MEDIA_SOURCE_CHARS {
        return None;
    }
    if !allow_spaces && source.contains(char::is_whitespace) {
        return None;
    }
    let lower = source.to_ascii_lowercase();
    if lower.starts_with("http://") || lower.starts_with("https://") {
        return allowed_remote_url(source).then(|| source.to_string());
    }
    if has_traversal(source) {
        return None;
    }
    let local = source.starts_with('/')
        || source.starts_with("./")
        || source.starts_with("~/")
        || (!has_scheme(source) && source.contains('/'));
    let bare = allow_bare_name && !has_scheme(source) && has_extension(source);
    (local || bare).then(|| source.to_string())
}

/// An `https` URL without credentials to a public host.
pub fn allowed_remote_url(source: &str) -> bool {
    let Ok(url) = reqwest::Url::parse(source) else {
        return false;
    };
    if url.scheme() != "https" || !url.username().is_empty() || url.password().is_some() {
        return false;
    }
    let Some(host) = url.host_str() else {
        return false;
    };
    match host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
    {
        Ok(ip) => !blocked_ip(ip),
        Err(_) => !blocked_hostname(host),
    }
}

fn blocked_hostname(name: &str) -> bool {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    if name.is_empty() || !name.contains('.') || name.split('.').any(str::is_empty) {
        return true;
    }
    matches!(
        name.as_str(),
        "localhost" | "localhost.localdomain" | "metadata.google.internal"
    ) || [".localhost", ".local", ".internal"]
        .iter()
        .any(|suffix| name.ends_with(suffix))
}

/// Loopback, private, link-local, unspecified, multicast, shared, documentation
/// and other special-use addresses.
pub fn blocked_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => blocked_ipv4(v4),
        IpAddr::V6(v6) => blocked_ipv6(v6),
    }
}

fn blocked_ipv4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        || a >= 240
        || (a == 100 && (64..128).contains(&b))
        || (a == 198 && (b == 18 || b == 19))
}

fn blocked_ipv6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return blocked_ipv4(v4);
    }
    let first = ip.segments()[0];
    ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || (first & 0xfe00) == 0xfc00
        || (first & 0xffc0) == 0xfe80
        || first == 0x2001 && ip.segments()[1] == 0x0db8
}

/// `[[audio_as_voice]]` tags outside code removed; whether there was one.
fn strip_voice_tags(text: &str) -> (String, bool) {
    if !text.contains("[[") {
        return (text.to_string(), false);
    }
    let fences = parse_fence_spans(text);
    let mut out = String::with_capacity(text.len());
    let mut found = false;
    let mut at = 0;
    while let Some(found_at) = text[at..].find("[[") {
        let open = at + found_at;
        let tag_end = text[open..].find("]]").map(|e| open + e + 2);
        let is_tag = tag_end.is_some_and(|end| {
            let inner = &text[open + 2..end - 2];
            inner.trim().eq_ignore_ascii_case("audio_as_voice")
        });
        match tag_end {
            Some(end) if is_tag && !fences.iter().any(|f| f.contains(open)) => {
                out.push_str(&text[at..open]);
                found = true;
                at = end;
            }
            _ => {
                out.push_str(&text[at..open + 2]);
                at = open + 2;
            }
        }
    }
    out.push_str(&text[at..]);
    if !found {
        return (text.to_string(), false);
    }
    // Blank space the tag leaves behind.
    let tidy: Vec<&str> = out.split('\n').map(str::trim_end).collect();
    let tidy = tidy.join("\n");
    (tidy.trim_matches('\n').to_string(), true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(raw: &str) -> MediaSplit {
        split_media_lines(raw)
    }

    #[test]
    fn media_lines_become_attachments_and_leave_the_text() {
        let out = split("Here is the chart.\nMEDIA: ./out/chart.png\nEnjoy!");
        assert_eq!(out.text, "Here is the chart.\nEnjoy!");
        assert_eq!(out.media, vec!["./out/chart.png"]);
        assert!(!out.audio_as_voice);
        let out = split("  media:`/tmp/a b/report.pdf`");
        assert_eq!(out.media, vec!["/tmp/a b/report.pdf"]);
        assert_eq!(out.text, "");
        let out = split("MEDIA: \"~/my photo.jpg\"\nMEDIA: file:///srv/x.ogg");
        assert_eq!(out.media, vec!["~/my photo.jpg", "/srv/x.ogg"]);
        let out = split("MEDIA: https://example.com/cat.jpg https://example.org/dog.png");
        assert_eq!(
            out.media,
            vec!["https://example.com/cat.jpg", "https://example.org/dog.png"]
        );
        let out = split("MEDIA: ./my photo.png");
        assert_eq!(out.media, vec!["./my photo.png"]);
        let out = split("MEDIA: cat.png");
        assert_eq!(out.media, vec!["cat.png"], "a bare name with an extension");
    }

    #[test]
    fn only_line_starts_outside_code_count() {
        let raw = "Use it like this:\n```\nMEDIA: ./in/code.png\n```\nsee MEDIA: ./mid.png";
        let out = split(raw);
        assert!(out.media.is_empty(), "{out:?}");
        assert_eq!(out.text, raw);
    }

    #[test]
    fn refused_sources_stay_or_go_by_upstreams_rules() {
        for url in [
            "http://example.com/a.png",
            "https://localhost/a.png",
            "https://127.0.0.1/a.png",
            "https://10.0.0.8/a.png",
            "https://[::1]/a.png",
            "https://printer.local/a.png",
            "https://intranet/a.png",
            "https://user:pw@example.com/a.png",
        ] {
            let out = split(&format!("MEDIA: {url}"));
            assert!(out.media.is_empty(), "{url} refused: {out:?}");
            assert_eq!(out.text, format!("MEDIA: {url}"), "kept as text");
        }
        let out = split("text\nMEDIA: ../../etc/shadow");
        assert!(out.media.is_empty());
        assert_eq!(out.refused, vec!["../../etc/shadow"], "said, not silent");
        assert_eq!(out.text, "text", "a refused local path is dropped");
        let out = split("MEDIA: https://example.com/a.png and-some-word");
        assert_eq!(out.media, vec!["https://example.com/a.png"]);
        assert_eq!(out.text, "and-some-word");
        let long = format!("MEDIA: /{}", "a".repeat(MAX_MEDIA_SOURCE_CHARS + 1));
        assert!(split(&long).media.is_empty());
    }

    #[test]
    fn the_voice_tag_is_taken_out() {
        let out = split("[[audio_as_voice]]\nMEDIA: ./note.ogg\nListen.");
        assert!(out.audio_as_voice);
        assert_eq!(out.media, vec!["./note.ogg"]);
        assert_eq!(out.text, "Listen.");
        let out = split("Say [[ AUDIO_AS_VOICE ]] hi");
        assert!(out.audio_as_voice);
        assert_eq!(out.text, "Say  hi");
        let out = split("`[[x]]` and [[reply_to_current]]");
        assert!(!out.audio_as_voice);
        assert_eq!(out.text, "`[[x]]` and [[reply_to_current]]");
    }

    #[test]
    fn live_text_holds_back_what_may_become_a_directive() {
        assert_eq!(live_display_text("Here you go.\nM"), "Here you go.");
        assert_eq!(live_display_text("Here you go.\n  MEDI"), "Here you go.");
        assert_eq!(
            live_display_text("Here you go.\nMEDIA: ./cha"),
            "Here you go."
        );
        assert_eq!(
            live_display_text("Here you go.\nMEDIA: ./chart.png\nEnj"),
            "Here you go.\nEnj"
        );
        assert_eq!(live_display_text("Sure [[audio_as"), "Sure");
        assert_eq!(live_display_text("Sure ["), "Sure");
        assert_eq!(
            live_display_text("Sure [[audio_as_voice]] thing"),
            "Sure  thing"
        );
        assert_eq!(live_display_text("Mostly sunny"), "Mostly sunny");
        assert_eq!(live_display_text("Medium"), "Medium");
        assert_eq!(
            display_text("Done.\nMEDIA: ./a.png\n[[audio_as_voice]]"),
            "Done."
        );
    }

    #[test]
    fn plain_text_passes_untouched() {
        assert_eq!(split("hello  \n").text, "hello");
        assert_eq!(split("the media: section").text, "the media: section");
    }
}
