//! Every schema field has a reader: a key pincer accepts must change what
//! pincer does, so each Rust field of the config structs is read (`.field`)
//! somewhere in `src/` outside the config module. A read inside one of the
//! schema's accessors (`effective_*`, in `src/config/schema/` and
//! `src/config/mod.rs`) counts when code outside the config module calls
//! that accessor; validation and loading never count.
//!
//! Two textual checks. The first finds keys nothing reads at all (the
//! common failure, "parsed and never read"). The second matches each field
//! to its struct: a read of `.input` counts for `ModelCost.input` only in a
//! file (or accessor) that has a `ModelCost` in reach — naming the type,
//! reading a field declared with it (`.cost`), or calling an accessor that
//! returns it; methods of `impl ModelCost` have it in reach. So a common
//! name read somewhere unrelated no longer passes. Neither check proves a
//! key works: that is each key's behavioural test.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// Fields read only by the config module, on purpose: by the loader, by
/// validation (a key accepted at the one value pincer behaves like) or by
/// config's own runtime code.
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
    (
        "r#type",
        "bindings[].type accepts one value (\"route\"): nothing to branch on",
    ),
    // `Struct.field` entries excuse that one struct's field (a common name
    // such as `mode` stays checked everywhere else)
    (
        "SandboxLimits.network",
        "sandbox.docker.network: only \"none\", the sandbox's own network (validate_agents.rs refuses \"bridge\")",
    ),
    (
        "CompactionConfig.mode",
        "agents.defaults.compaction.mode: only \"default\" (pincer's one summary style; validate_agents.rs refuses \"safeguard\")",
    ),
    (
        "GatewayConfig.mode",
        "gateway.mode: only \"local\" (validate.rs refuses \"remote\"): pincer is the gateway",
    ),
    (
        "ReloadConfig.debounce_ms",
        "gateway.reload.debounceMs: read by the config file watcher itself (config/reload.rs)",
    ),
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

/// A config struct: its name(s) and its fields with their declared types.
/// The channel account macro declares two structs (account and channel)
/// over one field list.
#[derive(Debug, Default)]
struct SchemaStruct {
    names: Vec<String>,
    fields: Vec<(String, String)>,
    /// An enum's variants (`Chain(ModelChain)`): no fields of its own, it
    /// makes the types it wraps reachable through its name.
    is_enum: bool,
}

fn is_field_name(name: &str) -> bool {
    let name = name.strip_prefix("r#").unwrap_or(name);
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// The structs of a schema file: `pub struct Name { pub field: Type, … }`
/// and the `account A; channel C; fields { field: Type, }` blocks of the
/// channel account macro.
fn schema_structs(text: &str) -> Vec<SchemaStruct> {
    let mut out: Vec<SchemaStruct> = Vec::new();
    let mut open: Option<SchemaStruct> = None;
    let mut macro_names: Vec<String> = Vec::new();
    for line in product_code(text).lines() {
        let trimmed = line.trim();
        for keyword in ["account ", "channel "] {
            if let Some(name) = trimmed
                .strip_prefix(keyword)
                .and_then(|rest| rest.strip_suffix(';'))
            {
                if !name.starts_with('$') {
                    macro_names.push(name.to_string());
                }
            }
        }
        if trimmed.starts_with("fields {") {
            open = Some(SchemaStruct {
                names: std::mem::take(&mut macro_names),
                fields: Vec::new(),
                is_enum: false,
            });
            continue;
        }
        let declared = trimmed
            .strip_prefix("pub struct ")
            .map(|rest| (rest, false))
            .or_else(|| trimmed.strip_prefix("pub enum ").map(|rest| (rest, true)));
        if let Some((rest, is_enum)) = declared {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if rest.trim_end().ends_with('{') && !name.is_empty() {
                open = Some(SchemaStruct {
                    names: vec![name],
                    fields: Vec::new(),
                    is_enum,
                });
            }
            continue;
        }
        let Some(current) = open.as_mut() else {
            continue;
        };
        if trimmed == "}" {
            out.extend(open.take());
            continue;
        }
        if trimmed.starts_with("//") || trimmed.starts_with("#[") {
            continue;
        }
        if current.is_enum {
            // `Variant(Type),`: kept as a pseudo-field `(variant, Type)`.
            if let Some((variant, ty)) = trimmed.split_once('(') {
                current.fields.push((variant.to_string(), ty.to_string()));
            }
            continue;
        }
        let declaration = trimmed.strip_prefix("pub ").unwrap_or(trimmed);
        if let Some((name, ty)) = declaration.split_once(": ") {
            if is_field_name(name) {
                current.fields.push((name.to_string(), ty.to_string()));
            }
        }
    }
    out
}

/// `(name, signature, body)` of each `fn` in a file, a body running to the
/// next `fn`. A method's body starts with the type of its `impl` block
/// (`impl X` or `impl Trait for X`), so `self.field` counts as a read in
/// reach of `X`.
fn functions(text: &str) -> Vec<(String, String, String)> {
    let mut out: Vec<(String, String, String)> = Vec::new();
    let mut impl_type = String::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        if line.starts_with("impl") || trimmed.starts_with("impl $") {
            impl_type = impl_target(trimmed);
        }
        let declared = trimmed
            .strip_prefix("pub fn ")
            .or_else(|| trimmed.strip_prefix("pub(crate) fn "))
            .or_else(|| trimmed.strip_prefix("fn "));
        match declared.and_then(|rest| rest.split(['(', '<']).next()) {
            Some(name) => out.push((
                name.to_string(),
                line.to_string(),
                format!("impl {impl_type}\n"),
            )),
            None => {
                if let Some((_, signature, body)) = out.last_mut() {
                    if !signature.contains('{') {
                        signature.push_str(line);
                    }
                    body.push_str(line);
                    body.push('\n');
                }
            }
        }
    }
    out
}

/// `X` of `impl X {`, `impl<T> X<T> {` and `impl Trait for X {`.
fn impl_target(header: &str) -> String {
    let rest = match header.split_once(" for ") {
        Some((_, target)) => target,
        None => {
            let rest = header.trim_start_matches("impl");
            match rest.trim_start().strip_prefix('<') {
                Some(generic) => generic.split_once('>').map_or("", |(_, t)| t),
                None => rest,
            }
        }
    };
    rest.trim()
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '$')
        .collect()
}

/// Whether `name(` is called as a method or a path (`.name(`, `::name(`).
fn calls(text: &str, name: &str) -> bool {
    text.contains(&format!(".{name}(")) || text.contains(&format!("::{name}("))
}

fn is_ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Whether `.name` appears not followed by an identifier character.
fn reads(text: &str, name: &str) -> bool {
    let needle = format!(".{name}");
    text.match_indices(&needle).any(|(at, _)| {
        let after = text[at + needle.len()..].bytes().next();
        !after.is_some_and(is_ident_byte)
    })
}

/// Whether `word` appears as a whole identifier.
fn mentions(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(at, _)| {
        let before = text[..at].bytes().next_back();
        let after = text[at + word.len()..].bytes().next();
        !before.is_some_and(is_ident_byte) && !after.is_some_and(is_ident_byte)
    })
}

/// How code reaches a struct: its type name, the fields declared with it
/// (`fs: Option<FsToolsConfig>` → `.fs`), and the schema accessors that
/// return it (`memory_search_for(…) -> ResolvedMemorySearch`).
#[derive(Debug, Default)]
struct Handles {
    types: Vec<String>,
    fields: Vec<String>,
    accessors: Vec<String>,
}

impl Handles {
    fn touched_by(&self, text: &str) -> bool {
        self.types.iter().any(|t| mentions(text, t))
            || self.fields.iter().any(|f| reads(text, f))
            || self.accessors.iter().any(|a| calls(text, a))
    }
}

/// One unit of reading code: a source file outside the config module, or
/// the body of a schema accessor that such code calls.
struct Reader {
    name: String,
    text: String,
}

struct Schema {
    structs: Vec<SchemaStruct>,
    accessors: Vec<(String, String, String)>,
}

fn load_schema(root: &Path) -> Schema {
    let mut files = Vec::new();
    rust_files(&root.join("src/config/schema"), &mut files);
    files.push(root.join("src/config/mod.rs"));
    let mut structs = Vec::new();
    let mut accessors = Vec::new();
    for file in &files {
        let text = fs::read_to_string(file).expect("schema file");
        structs.extend(schema_structs(&text));
        accessors.extend(functions(product_code(&text)));
    }
    Schema { structs, accessors }
}

/// Source files outside the config module, then the bodies of the schema
/// accessors they call, directly or through another live accessor.
fn readers(root: &Path, schema: &Schema) -> Vec<Reader> {
    let mut all = Vec::new();
    rust_files(&root.join("src"), &mut all);
    let mut out = Vec::new();
    for file in all {
        if !file.starts_with(root.join("src/config")) {
            let text = fs::read_to_string(&file).expect("source file");
            out.push(Reader {
                name: file
                    .strip_prefix(root)
                    .unwrap_or(&file)
                    .display()
                    .to_string(),
                text: product_code(&text).to_string(),
            });
        }
    }
    let mut pending: Vec<&(String, String, String)> = schema.accessors.iter().collect();
    loop {
        let (live, rest): (Vec<_>, Vec<_>) = pending
            .into_iter()
            .partition(|(name, _, _)| out.iter().any(|r| calls(&r.text, name)));
        pending = rest;
        if live.is_empty() {
            break;
        }
        for (name, _, body) in live {
            out.push(Reader {
                name: format!("config accessor {name}"),
                text: body.clone(),
            });
        }
    }
    out
}

fn handles_of(item: &SchemaStruct, schema: &Schema) -> Handles {
    let mut handles = Handles {
        types: item.names.clone(),
        ..Handles::default()
    };
    for other in &schema.structs {
        for (field, ty) in &other.fields {
            if item.names.iter().any(|n| mentions(ty, n)) {
                if other.is_enum {
                    handles.types.extend(other.names.iter().cloned());
                } else {
                    handles.fields.push(field.clone());
                }
            }
        }
    }
    for (name, signature, _) in &schema.accessors {
        let returns = signature.split_once("->").map(|(_, r)| r).unwrap_or("");
        if item.names.iter().any(|n| mentions(returns, n)) {
            handles.accessors.push(name.clone());
        }
    }
    handles
}

#[test]
fn every_schema_field_is_read_outside_the_config_loader() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let schema = load_schema(root);
    let fields: BTreeSet<&str> = schema
        .structs
        .iter()
        .filter(|s| !s.is_enum)
        .flat_map(|s| s.fields.iter().map(|(name, _)| name.as_str()))
        .collect();
    assert!(fields.len() > 100, "schema parse found only {fields:?}");
    let readers = readers(root, &schema);

    let qualified: BTreeSet<String> = schema
        .structs
        .iter()
        .filter(|s| !s.is_enum)
        .flat_map(|s| s.fields.iter().map(|(f, _)| format!("{}.{f}", s.names[0])))
        .collect();
    let (one_struct, excused): (Vec<&str>, Vec<&str>) = READ_ONLY_BY_CONFIG
        .iter()
        .map(|(name, _)| *name)
        .partition(|name| name.contains('.'));
    let excused: BTreeSet<&str> = excused.into_iter().collect();
    let no_such: Vec<&&str> = one_struct
        .iter()
        .filter(|key| !qualified.contains(**key))
        .collect();
    assert!(
        no_such.is_empty(),
        "`Struct.field` exceptions naming no schema field: {no_such:?}"
    );
    let read = |name: &str| readers.iter().any(|r| reads(&r.text, name));
    let unread: Vec<&str> = fields
        .iter()
        .copied()
        .filter(|name| !excused.contains(name) && !read(name))
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
}

/// A field counts as read only where its own struct is in reach: in a file
/// (or accessor) that also names the struct's type, reads a field declared
/// with that type, or calls an accessor returning it. A common name
/// (`input`, `enabled`) read somewhere else proves nothing about this
/// struct's key.
#[test]
fn every_schema_field_is_read_where_its_struct_is_in_reach() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let schema = load_schema(root);
    let readers = readers(root, &schema);
    let excused = |name: &str, key: &str| {
        READ_ONLY_BY_CONFIG
            .iter()
            .any(|(n, _)| *n == name || *n == key)
    };
    let mut findings = Vec::new();
    for item in schema.structs.iter().filter(|s| !s.is_enum) {
        let handles = handles_of(item, &schema);
        // The root is in reach of everything that has the config.
        let root_struct = item.names == ["Config"];
        let in_reach: Vec<&Reader> = readers
            .iter()
            .filter(|r| root_struct || handles.touched_by(&r.text))
            .collect();
        for (field, _) in &item.fields {
            let key = format!("{}.{field}", item.names[0]);
            if excused(field, &key) || in_reach.iter().any(|r| reads(&r.text, field)) {
                continue;
            }
            let elsewhere: Vec<&str> = readers
                .iter()
                .filter(|r| reads(&r.text, field))
                .map(|r| r.name.as_str())
                .take(3)
                .collect();
            findings.push(format!("{key} (`.{field}` read only in {elsewhere:?})"));
        }
    }
    assert!(
        findings.is_empty(),
        "schema fields whose name is read only where their struct is out of reach \
         (implement, or move the key to src/config/unsupported.rs):\n  {}",
        findings.join("\n  ")
    );
}

#[test]
fn reach_check_tells_a_struct_field_from_a_namesake() {
    let schema = Schema {
        structs: schema_structs(
            "pub struct Cost {\n    pub input: f64,\n}\npub struct Model {\n    pub input: Vec<String>,\n    pub cost: Option<Cost>,\n}\n",
        ),
        accessors: Vec::new(),
    };
    assert!(schema.structs.iter().all(|s| !s.is_enum));
    let cost = handles_of(&schema.structs[0], &schema);
    assert_eq!(cost.fields, vec!["cost".to_string()]);
    assert!(!cost.touched_by("let x = m.input;"));
    assert!(cost.touched_by("let x = m.cost.map(|c| c.input);"));
    assert!(cost.touched_by("fn f(c: &Cost) {}"));
    assert!(!cost.touched_by("fn f(c: &CostTable) {}"));
}
