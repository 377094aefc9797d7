//! The layer rule of ARCHITECTURE.md, enforced: a module of `src/` may import
//! only from its own layer or a layer below it.
//!
//! The test reads every `crate::…` path in `src/` (in `use` items and in
//! expressions alike, outside comments) and fails naming the file and line of
//! each import that goes up a layer. `module_graph` prints the graph of
//! top-level modules and the cycles in it:
//! `cargo test --test architecture -- --nocapture print_module_graph`.
//! It also holds the lock policy: no `std::sync` lock in `src/`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The layers, bottom to top (ARCHITECTURE.md's table).
const LAYERS: &[&[&str]] = &[
    &["system", "config"],
    &["store"],
    &["sandbox", "memory", "media", "reply", "routing", "queue"],
    &["pipeline", "tools"],
    &["agent"],
    &["channels", "cron", "heartbeat"],
    &["gateway"],
    &["cli", "app"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

/// One `crate::<module>` reference found in a source file.
struct Import {
    file: PathBuf,
    line: usize,
    from: String,
    to: String,
}

fn source_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .expect("src/ is readable")
        .map(|entry| entry.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            source_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file of `src/` belongs to (`src/agent/turn.rs` → `agent`).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(src).ok()?;
    let first = relative.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    match name {
        "lib" | "main" => None,
        other => Some(other.to_string()),
    }
}

/// Removes `//` comments (doc comments included) and string literals, so
/// that a path named in prose or in a message is not taken for an import.
fn code_of(line: &str) -> String {
    let mut code = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        if in_string {
            match c {
                '\\' => {
                    chars.next();
                }
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '/' if chars.peek() == Some(&'/') => break,
            _ => code.push(c),
        }
    }
    code
}

/// The modules named by `crate::X` paths in one line of code, including the
/// groups of `use crate::{a::…, b::…}`.
fn imported_modules(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let preceded_by_ident = rest[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_');
        rest = &rest[at + "crate::".len()..];
        if preceded_by_ident {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    found.push(name);
                }
            }
            continue;
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() {
            found.push(name);
        }
    }
    found
}

fn imports() -> Vec<Import> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    source_files(&src, &mut files);
    let mut found = Vec::new();
    for file in files {
        let Some(from) = module_of(&src, &file) else {
            continue;
        };
        let text = fs::read_to_string(&file).expect("source file is UTF-8");
        let mut in_block_comment = false;
        for (index, line) in text.lines().enumerate() {
            let trimmed = line.trim_start();
            if in_block_comment {
                in_block_comment = !trimmed.contains("*/");
                continue;
            }
            if trimmed.starts_with("/*") {
                in_block_comment = !trimmed.contains("*/");
                continue;
            }
            for to in imported_modules(&code_of(line)) {
                if to != from {
                    found.push(Import {
                        file: file.strip_prefix(&src).unwrap_or(&file).to_path_buf(),
                        line: index + 1,
                        from: from.clone(),
                        to,
                    });
                }
            }
        }
    }
    found
}

/// The edges of the module graph, with how many references each carries.
fn graph(imports: &[Import]) -> BTreeMap<(String, String), usize> {
    let mut edges = BTreeMap::new();
    for import in imports {
        *edges
            .entry((import.from.clone(), import.to.clone()))
            .or_insert(0) += 1;
    }
    edges
}

/// The strongly connected components with more than one module (Tarjan).
fn cycles(edges: &BTreeMap<(String, String), usize>) -> Vec<Vec<String>> {
    let nodes: BTreeSet<&String> = edges.keys().flat_map(|(a, b)| [a, b]).collect();
    let nodes: Vec<&String> = nodes.into_iter().collect();
    let index_of = |name: &String| nodes.iter().position(|n| *n == name).expect("known node");
    let mut adjacency = vec![Vec::new(); nodes.len()];
    for (from, to) in edges.keys() {
        adjacency[index_of(from)].push(index_of(to));
    }
    struct Tarjan<'a> {
        adjacency: &'a [Vec<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        components: Vec<Vec<usize>>,
    }
    impl Tarjan<'_> {
        fn visit(&mut self, v: usize) {
            self.index[v] = Some(self.next);
            self.low[v] = self.next;
            self.next += 1;
            self.stack.push(v);
            self.on_stack[v] = true;
            for &w in &self.adjacency[v] {
                match self.index[w] {
                    None => {
                        self.visit(w);
                        self.low[v] = self.low[v].min(self.low[w]);
                    }
                    Some(index) if self.on_stack[w] => self.low[v] = self.low[v].min(index),
                    Some(_) => {}
                }
            }
            if Some(self.low[v]) == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack[w] = false;
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                self.components.push(component);
            }
        }
    }
    let mut tarjan = Tarjan {
        adjacency: &adjacency,
        index: vec![None; nodes.len()],
        low: vec![0; nodes.len()],
        on_stack: vec![false; nodes.len()],
        stack: Vec::new(),
        next: 0,
        components: Vec::new(),
    };
    for v in 0..nodes.len() {
        if tarjan.index[v].is_none() {
            tarjan.visit(v);
        }
    }
    let mut found: Vec<Vec<String>> = tarjan
        .components
        .into_iter()
        .filter(|component| component.len() > 1)
        .map(|component| {
            let mut names: Vec<String> = component.iter().map(|&v| nodes[v].clone()).collect();
            names.sort();
            names
        })
        .collect();
    found.sort();
    found
}

#[test]
fn every_top_level_module_has_a_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    source_files(&src, &mut files);
    let unplaced: BTreeSet<String> = files
        .iter()
        .filter_map(|file| module_of(&src, file))
        .filter(|module| layer_of(module).is_none())
        .collect();
    assert!(
        unplaced.is_empty(),
        "modules missing from the layer table (add them to ARCHITECTURE.md and LAYERS): {unplaced:?}"
    );
}

#[test]
fn imports_go_down_the_layers_only() {
    let upward: Vec<String> = imports()
        .iter()
        .filter(
            |import| match (layer_of(&import.from), layer_of(&import.to)) {
                (Some(from), Some(to)) => to > from,
                _ => false,
            },
        )
        .map(|import| {
            format!(
                "src/{}:{}: `{}` (layer {}) imports `{}` (layer {})",
                import.file.display(),
                import.line,
                import.from,
                layer_of(&import.from).unwrap_or_default(),
                import.to,
                layer_of(&import.to).unwrap_or_default(),
            )
        })
        .collect();
    assert!(
        upward.is_empty(),
        "{} imports go up a layer:\n{}",
        upward.len(),
        upward.join("\n")
    );
}

#[test]
fn module_graph_has_no_cycles() {
    let found = cycles(&graph(&imports()));
    assert!(found.is_empty(), "module cycles: {found:?}");
}

/// The lock policy of ARCHITECTURE.md: `src/` locks with `parking_lot`, whose
/// locks do not poison, never with `std::sync`'s.
#[test]
fn synchronous_locks_are_parking_lot() {
    const STD_LOCK_NAMES: &[&str] = &[
        "Mutex",
        "MutexGuard",
        "RwLock",
        "RwLockReadGuard",
        "RwLockWriteGuard",
        "PoisonError",
    ];
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    source_files(&src, &mut files);
    let mut found = Vec::new();
    for file in files {
        let text = fs::read_to_string(&file).expect("source file is UTF-8");
        for (index, line) in text.lines().enumerate() {
            let code = code_of(line);
            let std_lock = code.contains("std::sync::")
                && code
                    .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .any(|word| STD_LOCK_NAMES.contains(&word));
            if std_lock {
                let relative = file.strip_prefix(&src).unwrap_or(&file);
                found.push(format!(
                    "src/{}:{}: {}",
                    relative.display(),
                    index + 1,
                    line.trim()
                ));
            }
        }
    }
    assert!(
        found.is_empty(),
        "std::sync locks in src/ (use parking_lot's):\n{}",
        found.join("\n")
    );
}

/// Session entries have one writer outside the store: `agent/sessions.rs` (`SessionOps`,
/// `SessionIndex`); the turn's own records go through the store's turn writes. Test code (files named
/// `tests.rs` / `*_tests.rs`, and everything after a `#[cfg(test)]` line) may seed entries directly.
/// The WhatsApp backend implements whatsapp-rust's `SignalStore::put_session` (Signal-protocol ratchet
/// state, kept in sealed records): a namesake, not a session entry.
#[test]
fn session_entries_are_written_only_by_agent_sessions() {
    const WRITERS: &[&str] = &["put_session(", "update_session("];
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    source_files(&src, &mut files);
    let mut found = Vec::new();
    for file in files {
        let relative = file.strip_prefix(&src).unwrap_or(&file).to_path_buf();
        let name = relative.to_string_lossy().replace('\\', "/");
        if name.starts_with("store/")
            || name == "agent/sessions.rs"
            || name == "channels/whatsapp/backend.rs"
            || name.ends_with("/tests.rs")
            || name.ends_with("_tests.rs")
        {
            continue;
        }
        let text = fs::read_to_string(&file).expect("source file is UTF-8");
        for (index, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("#[cfg(test)]") {
                break;
            }
            let code = code_of(line);
            if WRITERS.iter().any(|w| code.contains(w)) {
                found.push(format!("src/{name}:{}: {}", index + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "session entries written outside agent/sessions.rs (use SessionIndex or SessionOps):\n{}",
        found.join("\n")
    );
}

/// One D-Bus client, one way to RAUC (ARCHITECTURE.md, "Updates"): the bus is spoken only in
/// `system/dbus/`, RAUC's bus name appears only under `system/` (its client and the bus's tests), and a
/// method call is built nowhere else.
#[test]
fn dbus_and_rauc_are_reached_through_system_only() {
    const OWNED: &[(&str, &str)] = &[
        ("de.pengutronix.rauc", "system/"),
        ("Message::method_call(", "system/"),
        ("AUTH EXTERNAL", "system/dbus/"),
    ];
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    source_files(&src, &mut files);
    let mut found = Vec::new();
    for file in files {
        let relative = file.strip_prefix(&src).unwrap_or(&file).to_path_buf();
        let name = relative.to_string_lossy().replace('\\', "/");
        let text = fs::read_to_string(&file).expect("source file is UTF-8");
        for (index, line) in text.lines().enumerate() {
            for (needle, home) in OWNED {
                if line.contains(needle) && !name.starts_with(home) {
                    found.push(format!(
                        "src/{name}:{}: {needle} outside src/{home}",
                        index + 1
                    ));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "D-Bus or RAUC reached around system/:\n{}",
        found.join("\n")
    );
}

/// Prints the graph of top-level modules and its cycles (see the file's doc).
#[test]
fn print_module_graph() {
    let edges = graph(&imports());
    println!("module graph of src/ (from -> to: references)");
    for ((from, to), count) in &edges {
        println!("  {from} -> {to}: {count}");
    }
    let found = cycles(&edges);
    println!("cycles: {}", found.len());
    for cycle in &found {
        println!("  {}", cycle.join(", "));
    }
}

#[test]
fn the_scanner_sees_grouped_and_expression_paths_but_not_prose() {
    assert_eq!(
        imported_modules("use crate::{agent::Run, store::Store};"),
        vec!["agent", "store"]
    );
    assert_eq!(
        imported_modules("let x = crate::gateway::state::now();"),
        vec!["gateway"]
    );
    assert_eq!(
        imported_modules(&code_of("/// see crate::gateway")),
        Vec::<String>::new()
    );
    assert_eq!(
        imported_modules(&code_of(r#"let s = "crate::gateway";"#)),
        Vec::<String>::new()
    );
    assert_eq!(imported_modules("use $crate::x;"), vec!["x"]);
    assert_eq!(imported_modules("pincer_crate::x"), Vec::<String>::new());
}
