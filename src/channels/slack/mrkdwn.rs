//! Model markdown → Slack mrkdwn: `&`, `<`, `>` escaped as Slack requires,
//! `**bold**`/`__bold__` → `*bold*`, `~~strike~~` → `~strike~`,
//! `[text](url)` → `<url|text>`, `# Heading` → `*Heading*`; code spans and
//! fenced blocks are left as they are (escaped only). Single-`*` italics
//! are not rewritten (Slack shows them bold).
//!
//! Pure text work, no I/O.

/// Escapes the three characters Slack treats as markup.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Converts markdown to mrkdwn.
pub fn markdown_to_mrkdwn(markdown: &str) -> String {
    let mut out = Vec::new();
    let mut in_fence = false;
    for line in markdown.split('\n') {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            out.push(escape(line));
            continue;
        }
        if in_fence {
            out.push(escape(line));
            continue;
        }
        out.push(convert_line(line));
    }
    out.join("\n")
}

fn convert_line(line: &str) -> String {
    let trimmed = line.trim_start();
    let hashes = trimmed.chars().take_while(|c| *c == '#').count();
    if (1..=6).contains(&hashes) && trimmed[hashes..].starts_with(' ') {
        let heading = trimmed[hashes..].trim();
        return format!("*{}*", convert_inline(heading));
    }
    convert_inline(line)
}

/// Converts outside of `code` spans.
fn convert_inline(text: &str) -> String {
    text.split('`')
        .enumerate()
        .map(|(i, part)| {
            if i % 2 == 1 {
                escape(part)
            } else {
                convert_plain(part)
            }
        })
        .collect::<Vec<_>>()
        .join("`")
}

fn convert_plain(text: &str) -> String {
    let escaped = escape(text);
    let linked = convert_links(&escaped);
    linked
        .replace("**", "*")
        .replace("__", "*")
        .replace("~~", "~")
}

/// `[text](url)` → `<url|text>` (on already escaped text).
fn convert_links(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find("](").map(|i| open + i) else {
            break;
        };
        let Some(end) = rest[close + 2..].find(')').map(|i| close + 2 + i) else {
            break;
        };
        let label = &rest[open + 1..close];
        let url = &rest[close + 2..end];
        if url.contains(char::is_whitespace) || label.contains('[') {
            out.push_str(&rest[..open + 1]);
            rest = &rest[open + 1..];
            continue;
        }
        out.push_str(&rest[..open]);
        out.push_str(&format!("<{url}|{label}>"));
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bold_strike_links_and_headings_become_mrkdwn() {
        assert_eq!(
            markdown_to_mrkdwn("## Plan\n**bold** and ~~old~~ see [docs](https://x.io/a?b=1&c=2)"),
            "*Plan*\n*bold* and ~old~ see <https://x.io/a?b=1&amp;c=2|docs>"
        );
    }

    #[test]
    fn code_is_only_escaped() {
        assert_eq!(
            markdown_to_mrkdwn("`a **b** <c>` x\n```\n**raw** <tag>\n```"),
            "`a **b** &lt;c&gt;` x\n```\n**raw** &lt;tag&gt;\n```"
        );
    }

    #[test]
    fn bracket_text_without_a_link_is_kept() {
        assert_eq!(markdown_to_mrkdwn("[note] 1 < 2"), "[note] 1 &lt; 2");
    }
}
