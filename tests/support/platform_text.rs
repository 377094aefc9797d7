//! What the chat platforms accept as message text, as pure functions shared by the fakes (which refuse what
//! the real service refuses) and the fuzz targets (which hold pincer's formatters to the same rules).

/// Tags Telegram's HTML parse mode accepts.
pub const HTML_TAGS: &[&str] = &[
    "b",
    "strong",
    "i",
    "em",
    "u",
    "ins",
    "s",
    "strike",
    "del",
    "span",
    "tg-spoiler",
    "a",
    "code",
    "pre",
    "blockquote",
    "tg-emoji",
];

/// Telegram's HTML: the allowed tags, balanced; `&` only as an entity.
pub fn telegram_html_visible(text: &str) -> Result<String, String> {
    let fail = |what: String| Err(format!("can't parse entities: {what}"));
    let mut visible = String::new();
    let mut open: Vec<String> = Vec::new();
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if c == '<' {
            let Some(end) = rest.find('>') else {
                return fail("unclosed start tag".into());
            };
            let tag = &rest[1..end];
            let name: String = tag
                .trim_start_matches('/')
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            if !HTML_TAGS.contains(&name.as_str()) {
                return fail(format!("Unsupported start tag \"{name}\""));
            }
            if tag.starts_with('/') {
                if open.pop().as_deref() != Some(name.as_str()) {
                    return fail(format!("Unexpected end tag \"{name}\""));
                }
            } else {
                open.push(name);
            }
            rest = &rest[end + 1..];
        } else if c == '&' {
            let entity = ["&amp;", "&lt;", "&gt;", "&quot;"]
                .into_iter()
                .find(|e| rest.starts_with(e));
            let Some(entity) = entity else {
                return fail("unsupported entity".into());
            };
            visible.push(match entity {
                "&amp;" => '&',
                "&lt;" => '<',
                "&gt;" => '>',
                _ => '"',
            });
            rest = &rest[entity.len()..];
        } else {
            visible.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    if let Some(unclosed) = open.pop() {
        return fail(format!(
            "Can't find end tag corresponding to start tag \"{unclosed}\""
        ));
    }
    Ok(visible)
}
