//! Model markdown → Telegram's HTML parse mode: bold, italic, strikethrough,
//! spoilers, inline code, fenced code blocks, links, headings (bold), block
//! quotes and bullet lists, with `&`, `<`, `>` (and `"` in attributes)
//! escaped everywhere else.
//!
//! The output is always balanced HTML using only tags Telegram accepts: a
//! delimiter without its partner stays literal text. This file must not
//! send anything; the plain-text fallback lives in the adapter.

/// Escapes text for Telegram HTML.
pub fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            _ => out.push(c),
        }
    }
    out
}

fn escape_attr(text: &str) -> String {
    escape_html(text).replace('"', "&quot;")
}

/// Converts markdown to Telegram HTML.
pub fn markdown_to_html(markdown: &str) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut lines = markdown.lines().peekable();
    let mut quote: Vec<String> = Vec::new();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if let Some(fence_info) = trimmed.strip_prefix("```") {
            flush_quote(&mut quote, &mut out);
            // An unclosed fence runs to the end of the text.
            let mut body = Vec::new();
            for inner in lines.by_ref() {
                if inner.trim_start().starts_with("```") {
                    break;
                }
                body.push(inner);
            }
            out.push(code_block(fence_info.trim(), &body.join("\n")));
            continue;
        }
        if let Some(quoted) = trimmed.strip_prefix('>') {
            quote.push(render_inline(quoted.strip_prefix(' ').unwrap_or(quoted)));
            continue;
        }
        flush_quote(&mut quote, &mut out);
        out.push(render_line(line));
    }
    flush_quote(&mut quote, &mut out);
    out.join("\n")
}

fn flush_quote(quote: &mut Vec<String>, out: &mut Vec<String>) {
    if !quote.is_empty() {
        out.push(format!("<blockquote>{}</blockquote>", quote.join("\n")));
        quote.clear();
    }
}

fn code_block(language: &str, body: &str) -> String {
    let language: String = language
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '_' | '#'))
        .collect();
    if language.is_empty() {
        format!("<pre>{}</pre>", escape_html(body))
    } else {
        format!(
            "<pre><code class=\"language-{language}\">{}</code></pre>",
            escape_html(body)
        )
    }
}

/// One line outside code blocks and quotes: headings and bullets first.
fn render_line(line: &str) -> String {
    let trimmed = line.trim_start();
    let hashes = trimmed.chars().take_while(|c| *c == '#').count();
    if (1..=6).contains(&hashes) && trimmed[hashes..].starts_with(' ') {
        return format!("<b>{}</b>", render_inline(trimmed[hashes..].trim()));
    }
    let indent = &line[..line.len() - trimmed.len()];
    for bullet in ["- ", "* ", "+ "] {
        if let Some(item) = trimmed.strip_prefix(bullet) {
            return format!("{indent}• {}", render_inline(item));
        }
    }
    render_inline(line)
}

/// Paired inline delimiters, longest first, with their tags.
const PAIRS: &[(&str, &str)] = &[
    ("**", "b"),
    ("__", "b"),
    ("~~", "s"),
    ("||", "tg-spoiler"),
    ("*", "i"),
    ("_", "i"),
];

/// Renders inline markdown (spans never cross lines).
pub fn render_inline(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    let mut i = 0;
    while i < text.len() {
        let rest = &text[i..];
        if let Some((html, used)) = inline_span(text, i) {
            out.push_str(&html);
            i += used;
            continue;
        }
        let c = rest.chars().next().expect("index is inside the text");
        out.push_str(&escape_html(&c.to_string()));
        i += c.len_utf8();
    }
    out
}

/// A span starting at byte `at` of `text`: its HTML and the bytes it used.
fn inline_span(text: &str, at: usize) -> Option<(String, usize)> {
    let rest = &text[at..];
    if let Some(code) = rest.strip_prefix('`') {
        let end = code.find('`')?;
        if end == 0 {
            return None;
        }
        return Some((
            format!("<code>{}</code>", escape_html(&code[..end])),
            end + 2,
        ));
    }
    if rest.starts_with('[') {
        return link(rest);
    }
    for (delimiter, tag) in PAIRS {
        if !rest.starts_with(delimiter) {
            continue;
        }
        let inner_start = delimiter.len();
        if !opens(text, at, delimiter) {
            return None;
        }
        let end = find_closing(rest, inner_start, delimiter)?;
        let inner = &rest[inner_start..end];
        return Some((
            format!("<{tag}>{}</{tag}>", render_inline(inner)),
            end + delimiter.len(),
        ));
    }
    None
}

/// Whether the delimiter at `at` can open a span: followed by a non-space,
/// and (for `_`) not inside a word, so `snake_case` stays as is.
fn opens(text: &str, at: usize, delimiter: &str) -> bool {
    let after = text[at + delimiter.len()..].chars().next();
    if after.is_none_or(char::is_whitespace) {
        return false;
    }
    if delimiter.starts_with('_') {
        let before = text[..at].chars().next_back();
        if before.is_some_and(char::is_alphanumeric) {
            return false;
        }
    }
    true
}

/// The byte offset (in `rest`) of the delimiter closing a span opened at 0.
fn find_closing(rest: &str, from: usize, delimiter: &str) -> Option<usize> {
    let mut search = from;
    while let Some(found) = rest[search..].find(delimiter) {
        let end = search + found;
        let before = rest[..end].chars().next_back();
        let after = rest[end + delimiter.len()..].chars().next();
        let single = delimiter.len() == 1;
        // `*a**` must not close an italic on the first star of a bold pair.
        let doubled = single && after == Some(delimiter.chars().next().unwrap_or(' '));
        let word_bound = !delimiter.starts_with('_') || !after.is_some_and(char::is_alphanumeric);
        if end > from && before.is_some_and(|c| !c.is_whitespace()) && !doubled && word_bound {
            return Some(end);
        }
        search = end + delimiter.len();
    }
    None
}

/// `[label](url)` with an http(s), tg or mailto url.
fn link(rest: &str) -> Option<(String, usize)> {
    let close = rest.find("](")?;
    let label = &rest[1..close];
    let url_start = close + 2;
    let url_len = rest[url_start..].find(')')?;
    let url = rest[url_start..url_start + url_len].trim();
    let allowed = ["http://", "https://", "tg://", "mailto:"]
        .iter()
        .any(|scheme| url.to_lowercase().starts_with(scheme));
    if label.is_empty() || !allowed || url.contains(char::is_whitespace) {
        return None;
    }
    Some((
        format!(
            "<a href=\"{}\">{}</a>",
            escape_attr(url),
            render_inline(label)
        ),
        url_start + url_len + 1,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emphasis_code_and_links_become_tags() {
        assert_eq!(
            markdown_to_html("**bold** and *it* and _it2_ and ~~gone~~ and `x < y`"),
            "<b>bold</b> and <i>it</i> and <i>it2</i> and <s>gone</s> and <code>x &lt; y</code>"
        );
        assert_eq!(
            markdown_to_html("see [the docs](https://example.com/a?b=1&c=\"2\")"),
            "see <a href=\"https://example.com/a?b=1&amp;c=&quot;2&quot;\">the docs</a>"
        );
        assert_eq!(
            markdown_to_html("**bold with *italic* inside**"),
            "<b>bold with <i>italic</i> inside</b>"
        );
    }

    #[test]
    fn html_special_characters_are_escaped_outside_tags() {
        assert_eq!(
            markdown_to_html("a < b && c > d <script>"),
            "a &lt; b &amp;&amp; c &gt; d &lt;script&gt;"
        );
    }

    #[test]
    fn code_blocks_keep_their_content_verbatim_and_escaped() {
        let md = "before\n```rust\nlet x = a**b < c;\n```\nafter";
        assert_eq!(
            markdown_to_html(md),
            "before\n<pre><code class=\"language-rust\">let x = a**b &lt; c;</code></pre>\nafter"
        );
        assert_eq!(
            markdown_to_html("```\nunclosed *x*"),
            "<pre>unclosed *x*</pre>"
        );
    }

    #[test]
    fn unpaired_delimiters_and_snake_case_stay_literal() {
        assert_eq!(markdown_to_html("2 * 3 = 6"), "2 * 3 = 6");
        assert_eq!(markdown_to_html("my_var_name"), "my_var_name");
        assert_eq!(markdown_to_html("**not closed"), "**not closed");
        assert_eq!(
            markdown_to_html("[label](javascript:x)"),
            "[label](javascript:x)"
        );
    }

    #[test]
    fn headings_bullets_and_quotes_are_rendered() {
        assert_eq!(
            markdown_to_html("# Title\n- one\n* two\n> quoted *a*\n> more\nend"),
            "<b>Title</b>\n• one\n• two\n<blockquote>quoted <i>a</i>\nmore</blockquote>\nend"
        );
    }
}
