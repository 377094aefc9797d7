//! Every schema field has a reader: a key pincer accepts must change what
//! pincer does, so each Rust field of the config structs is read (`.field`)
//! somewhere in `src/` outside the config module. A read inside one of the
//! schema's accessors (`effective_*`, in `src/config/schema/` and
//! `src/config/mod.rs`) counts when code outside the config module calls
//! that accessor; validation and loading never count.
//!
//! A textual check: it cannot tell two fields of the same name apart, so it
//! finds keys nothing reads at all, the common failure ("parsed and never
//! read"), not every misuse.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// Fields read only by the loader or validation, on purpose.
const READ_ONLY_BY_CONFIG: &[(&str, &str)] = &[
    ("schema", "`$schema` is an editor hint, ignored by design"),
    ("meta", "upstream bookkeeping, kept as written"),
    (
        "comment",
        "bindings[].comment is a note for humans, ignored upstream too",
    ),
    // commands.* and agents.defaults keys with one working value: validation
    // refuses the others as "not supported by pincer" (config/validate.rs)
    (
        "bash",
        "commands.bash: only false (no `!`/`/bash` chat command)",
    ),
    (
        "bash_foreground_ms",
        "commands.bashForegroundMs: only the default (no `/bash`)",
    ),
    (
        "debug",
        "commands.debug: only false (no `/debug` chat command)",
    ),
    (
        "native",
        "commands.native: only false (no native command menus)",
    ),
    (
        "native_skills",
        "commands.nativeSkills: only false (no native command menus)",
    ),
    (
        "use_access_groups",
        "commands.useAccessGroups: only true (commands obey access rules)",
    ),
    (
        "block_streaming_break",
        "agents.defaults.blockStreamingBreak: only text_end (blocks go out as written)",
    ),
];

/// Fields other issue-14 helpers are wiring up in parallel; each goes
/// when its owner's change lands. Names are shared across structs, so one
/// entry can excuse a field of the same name elsewhere: keep this short.
const OWNED_ELSEWHERE: &[(&str, &str)] = &[
    // owned by issue 14 exec-security (tools.exec, sandbox, gateway.auth)
    ("background_ms", "tools.exec"),
    ("notify_on_exit", "tools.exec"),
    ("notify_on_exit_empty_success", "tools.exec"),
];

/// Unread fields of the register helper's own area that are not done yet:
/// each is to be implemented with a behavioural test or moved to the
/// unsupported table (`src/config/unsupported.rs`). Issue 14.
const NOT_DONE_YET: &[(&str, &str)] = &[
    ("agent_dir", "agents.list[].agentDir"),
    ("auth_header", "models.providers.*.authHeader"),
    ("cache_read", "models.providers.*.models[].cost.cacheRead"),
    ("cache_write", "models.providers.*.models[].cost.cacheWrite"),
    ("remote", "gateway.remote and memorySearch.remote"),
    ("ssh_identity", "gateway.remote"),
    ("ssh_target", "gateway.remote"),
    ("transport", "gateway.remote"),
    ("chat_history_max_chars", "gateway.webchat"),
    ("webchat", "gateway.webchat, channels.webchat"),
    ("by_provider", "tools.byProvider"),
    ("cache_ttl_minutes", "tools.web.*.cacheTtlMinutes"),
    ("readability", "tools.web.fetch.readability"),
    ("fs", "tools.fs"),
    ("workspace_only", "tools.fs.workspaceOnly"),
    ("sync_interval_minutes", "memorySearch.sync.intervalMinutes"),
    ("sync_on_search", "memorySearch.sync.onSearch"),
    ("sync_on_session_start", "memorySearch.sync.onSessionStart"),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Source without its `#[cfg(test)]` module (tests reading a field prove
/// nothing about the product).
fn product_code(text: &str) -> &str {
    text.split("#[cfg(test)]").next().unwrap_or(text)
}

/// `pub name:` fields of structs and the `fields { name: T, }` blocks of the
/// channel account macro.
fn schema_fields(text: &str) -> Vec<String> {
    let mut fields = Vec::new();
    let mut in_macro_fields = false;
    for line in product_code(text).lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("fields {") {
            in_macro_fields = true;
            continue;
        }
        if in_macro_fields && trimmed == "}" {
            in_macro_fields = false;
            continue;
        }
        let declaration = trimmed
            .strip_prefix("pub ")
            .or(in_macro_fields.then_some(trimmed));
        let Some(rest) = declaration else { continue };
        if rest.starts_with("//") || rest.starts_with("#[") {
            continue;
        }
        if let Some((name, _)) = rest.split_once(": ") {
            if !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            {
                fields.push(name.to_string());
            }
        }
    }
    fields
}

/// `(name, body)` of each `fn` in a file, a body running to the next `fn`.
fn functions(text: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        let declared = trimmed
            .strip_prefix("pub fn ")
            .or_else(|| trimmed.strip_prefix("pub(crate) fn "))
            .or_else(|| trimmed.strip_prefix("fn "));
        match declared.and_then(|rest| rest.split(['(', '<']).next()) {
            Some(name) => out.push((name.to_string(), String::new())),
            None => {
                if let Some((_, body)) = out.last_mut() {
                    body.push_str(line);
                    body.push('\n');
                }
            }
        }
    }
    out
}

/// Whether `name(` is called as a method or a path (`.name(`, `::name(`).
fn calls(text: &str, name: &str) -> bool {
    text.contains(&format!(".{name}(")) || text.contains(&format!("::{name}("))
}

/// Whether `.name` appears not followed by an identifier character.
fn reads(text: &str, name: &str) -> bool {
    let needle = format!(".{name}");
    text.match_indices(&needle).any(|(at, _)| {
        let after = text[at + needle.len()..].bytes().next();
        !after.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_')
    })
}

#[test]
fn every_schema_field_is_read_outside_the_config_loader() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut schema_files = Vec::new();
    rust_files(&root.join("src/config/schema"), &mut schema_files);
    schema_files.push(root.join("src/config/mod.rs"));

    let mut fields = BTreeSet::new();
    for file in &schema_files {
        let text = fs::read_to_string(file).expect("schema file");
        fields.extend(schema_fields(&text));
    }
    assert!(fields.len() > 100, "schema parse found only {fields:?}");

    let mut readers = String::new();
    let mut all = Vec::new();
    rust_files(&root.join("src"), &mut all);
    for file in all {
        if !file.starts_with(root.join("src/config")) {
            let text = fs::read_to_string(&file).expect("source file");
            readers.push_str(product_code(&text));
            readers.push('\n');
        }
    }
    // The schema's accessors (`effective_*`, `memory_search_for`) read
    // fields for the rest of the crate: an accessor's body counts once
    // something outside the config module calls it, directly or through
    // another live accessor.
    let mut accessors: Vec<(String, String)> = Vec::new();
    for file in &schema_files {
        let text = fs::read_to_string(file).expect("schema file");
        accessors.extend(functions(product_code(&text)));
    }
    loop {
        let (live, rest): (Vec<_>, Vec<_>) = accessors
            .into_iter()
            .partition(|(name, _)| calls(&readers, name));
        accessors = rest;
        if live.is_empty() {
            break;
        }
        for (_, body) in live {
            readers.push_str(&body);
            readers.push('\n');
        }
    }

    let excused: BTreeSet<&str> = READ_ONLY_BY_CONFIG
        .iter()
        .chain(OWNED_ELSEWHERE)
        .chain(NOT_DONE_YET)
        .map(|(name, _)| *name)
        .collect();
    let unread: Vec<&String> = fields
        .iter()
        .filter(|name| !excused.contains(name.as_str()) && !reads(&readers, name))
        .collect();
    assert!(
        unread.is_empty(),
        "schema fields nothing outside the config loader reads (implement or move to the unsupported table): {unread:?}"
    );
    let stale: Vec<&&str> = excused
        .iter()
        .filter(|name| !fields.contains(**name))
        .collect();
    assert!(
        stale.is_empty(),
        "exceptions naming no schema field: {stale:?}"
    );
    let read_anyway: Vec<&&str> = excused
        .iter()
        .filter(|name| !READ_ONLY_BY_CONFIG.iter().any(|(n, _)| n == *name))
        .filter(|name| reads(&readers, name))
        .collect();
    assert!(
        read_anyway.is_empty(),
        "fields excused as unread that now have a reader (drop them from the lists): {read_anyway:?}"
    );
}
