//! What the reader needs from a table's `CREATE TABLE` text: its column names in order (a record holds
//! its values in that order), the `INTEGER PRIMARY KEY` column that stands for the rowid, and the key
//! columns of the indexes SQLite made for `PRIMARY KEY` and `UNIQUE` constraints (their schema rows
//! carry no SQL: `sqlite_autoindex_<table>_<N>` is the N-th such constraint in the text). Columns added
//! later by `ALTER TABLE … ADD COLUMN` are in the stored text too. Also the key columns of a plain
//! `CREATE INDEX` (no expressions, no `WHERE`).
//!
//! This file must not read pages; it reads schema text.

/// A table's columns as its `CREATE TABLE` text declares them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TableShape {
    pub columns: Vec<String>,
    /// The column that is an alias of the rowid (`INTEGER PRIMARY KEY`).
    pub rowid_alias: Option<usize>,
    /// Key columns of each automatic index, in the order SQLite numbers them; empty for one whose order
    /// is not BINARY (a `COLLATE`), which the reader cannot walk by key.
    pub auto_indexes: Vec<Vec<String>>,
    /// Columns declared with a collation of their own: an index on them is not in BINARY order.
    pub collated: Vec<String>,
}

/// `sql` without its comments (`-- …` to the end of the line, `/* … */`), quotes left intact.
fn strip_comments(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(open), _) => {
                if c == open {
                    quote = None;
                }
                out.push(c);
            }
            (None, '-') if chars.peek() == Some(&'-') => {
                for skipped in chars.by_ref() {
                    if skipped == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            (None, '/') if chars.peek() == Some(&'*') => {
                chars.next();
                let mut last = ' ';
                for skipped in chars.by_ref() {
                    if last == '*' && skipped == '/' {
                        break;
                    }
                    last = skipped;
                }
                out.push(' ');
            }
            (None, '\'' | '"' | '`') => {
                quote = Some(c);
                out.push(c);
            }
            (None, '[') => {
                quote = Some(']');
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    out
}

/// Splits `text` at the commas outside parentheses and quotes.
fn split_top_level(text: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut quote, mut start) = (Vec::new(), 0i32, None, 0);
    for (at, c) in text.char_indices() {
        match (quote, c) {
            (Some(open), c) if c == open => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"' | '`') => quote = Some(c),
            (None, '[') => quote = Some(']'),
            (None, '(') => depth += 1,
            (None, ')') => depth -= 1,
            (None, ',') if depth == 0 => {
                parts.push(&text[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

/// The text between the first `(` and its matching `)`, and what follows it.
fn parenthesised(text: &str) -> Option<(&str, &str)> {
    let open = text.find('(')?;
    let (mut depth, mut quote) = (0i32, None);
    for (at, c) in text[open..].char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"' | '`') => quote = Some(c),
            (None, '[') => quote = Some(']'),
            (None, '(') => depth += 1,
            (None, ')') => {
                depth -= 1;
                if depth == 0 {
                    let close = open + at;
                    return Some((&text[open + 1..close], &text[close + 1..]));
                }
            }
            _ => {}
        }
    }
    None
}

/// The first token of `text` (a name, unquoted) and the rest.
fn first_name(text: &str) -> (String, &str) {
    let text = text.trim_start();
    let close = match text.chars().next() {
        Some('"') => Some('"'),
        Some('`') => Some('`'),
        Some('[') => Some(']'),
        Some('\'') => Some('\''),
        _ => None,
    };
    if let Some(close) = close {
        if let Some(end) = text[1..].find(close) {
            return (text[1..1 + end].to_string(), &text[end + 2..]);
        }
    }
    let end = text
        .find(|c: char| c.is_whitespace() || c == '(' || c == ',')
        .unwrap_or(text.len());
    (text[..end].to_string(), &text[end..])
}

fn words_upper(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_uppercase)
        .collect()
}

/// Names in a parenthesised key list (`(a, b COLLATE nocase DESC)`); `None` for an expression.
fn key_list(text: &str) -> Option<Vec<String>> {
    let (inside, _) = parenthesised(text)?;
    split_top_level(inside)
        .into_iter()
        .map(key_column)
        .collect()
}

/// One key column: a name, maybe followed by `COLLATE name` and `ASC`/`DESC`; `None` for an expression.
fn key_column(part: &str) -> Option<String> {
    let (name, rest) = first_name(part);
    let rest = rest.trim();
    let plain = rest.is_empty()
        || (rest.starts_with(|c: char| c.is_ascii_alphabetic())
            && !rest.contains(|c: char| "()+-*/|<>=!%&~".contains(c)));
    (!name.is_empty() && plain).then_some(name)
}

/// Reads a `CREATE TABLE` statement.
pub fn parse_table(sql: &str) -> Result<TableShape, String> {
    let sql = strip_comments(sql);
    let (inside, _) = parenthesised(&sql).ok_or("no column list")?;
    let mut shape = TableShape::default();
    for part in split_top_level(inside) {
        let words = words_upper(part);
        let first = words.first().map(String::as_str).unwrap_or_default();
        if matches!(
            first,
            "CONSTRAINT" | "PRIMARY" | "UNIQUE" | "CHECK" | "FOREIGN"
        ) {
            let keyed = words.iter().any(|w| w == "PRIMARY" || w == "UNIQUE");
            if keyed && first != "CHECK" && first != "FOREIGN" {
                let key = key_list(part).ok_or("a key of expressions")?;
                let binary = !words.iter().any(|w| w == "COLLATE");
                shape
                    .auto_indexes
                    .push(if binary { key } else { Vec::new() });
            }
            continue;
        }
        let (name, rest) = first_name(part);
        if name.is_empty() {
            return Err(format!("a column without a name in {part:?}"));
        }
        let rest_words = words_upper(rest);
        let primary = rest_words
            .windows(2)
            .any(|w| w[0] == "PRIMARY" && w[1] == "KEY");
        let integer = rest_words.first().is_some_and(|w| w == "INTEGER");
        let descending = rest_words.iter().any(|w| w == "DESC");
        let collated = rest_words.iter().any(|w| w == "COLLATE");
        if collated {
            shape.collated.push(name.clone());
        }
        if primary && integer && !descending {
            shape.rowid_alias = Some(shape.columns.len());
        } else if primary || rest_words.iter().any(|w| w == "UNIQUE") {
            shape.auto_indexes.push(vec![name.clone()]);
        }
        shape.columns.push(name);
    }
    let collated = shape.collated.clone();
    for key in &mut shape.auto_indexes {
        if key
            .iter()
            .any(|column| collated.iter().any(|c| c.eq_ignore_ascii_case(column)))
        {
            key.clear();
        }
    }
    Ok(shape)
}

/// The key columns of a `CREATE INDEX` statement, or `None` when the index is partial (`WHERE`), over
/// expressions or collated: such an index cannot answer "every row with this key" in BINARY order.
pub fn parse_index(sql: &str) -> Option<Vec<String>> {
    let sql = &strip_comments(sql);
    let on = sql.to_ascii_uppercase().find(" ON ")?;
    let (_, after) = parenthesised(&sql[on..])?;
    let collated = words_upper(sql).iter().any(|w| w == "COLLATE");
    if collated || words_upper(after).iter().any(|w| w == "WHERE") {
        return None;
    }
    key_list(&sql[on..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_keys_and_the_rowid_alias() {
        let shape = parse_table(
            "CREATE TABLE t (\n  id INTEGER PRIMARY KEY,\n  \"name\" TEXT NOT NULL UNIQUE,\n  \
             note TEXT CHECK (note IS NULL OR length(note) < 10),\n  [when] INTEGER,\n  \
             PRIMARY KEY (name, \"when\" DESC),\n  FOREIGN KEY (note) REFERENCES x(y)\n) STRICT",
        )
        .expect("parse");
        assert_eq!(shape.columns, vec!["id", "name", "note", "when"]);
        assert_eq!(shape.rowid_alias, Some(0));
        assert_eq!(
            shape.auto_indexes,
            vec![vec!["name".to_string()], vec!["name".into(), "when".into()]]
        );
    }

    #[test]
    fn comments_are_not_columns_and_their_quotes_do_not_count() {
        let shape = parse_table(
            "CREATE TABLE l (\n  a TEXT NOT NULL, -- the other's key\n  /* b's note, (old) */ b INTEGER,\n  \
             PRIMARY KEY (a, b)\n) STRICT",
        )
        .expect("parse");
        assert_eq!(shape.columns, vec!["a", "b"]);
        assert_eq!(shape.auto_indexes, vec![vec!["a".to_string(), "b".into()]]);
    }

    #[test]
    fn a_text_primary_key_gets_an_index_not_the_rowid() {
        let shape =
            parse_table("CREATE TABLE s (key TEXT NOT NULL PRIMARY KEY, v TEXT)").expect("parse");
        assert_eq!(shape.rowid_alias, None);
        assert_eq!(shape.auto_indexes, vec![vec!["key".to_string()]]);
    }

    #[test]
    fn plain_indexes_are_read_and_partial_ones_are_not() {
        assert_eq!(
            parse_index("CREATE INDEX i ON t (session_id, seq)"),
            Some(vec!["session_id".to_string(), "seq".into()])
        );
        assert_eq!(parse_index("CREATE INDEX i ON t (a) WHERE a > 0"), None);
        assert_eq!(parse_index("CREATE INDEX i ON t (lower(a))"), None);
    }
}
