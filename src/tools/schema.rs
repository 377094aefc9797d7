//! Tool parameter schemas as each provider accepts them.
//!
//! Every provider gets a top-level `{"type": "object", "properties": …}`
//! (OpenAI-compatible endpoints refuse anything else): a missing `type` is
//! added, a top-level `anyOf`/`oneOf` of object variants is merged into one
//! object, and anything else becomes an empty object. Gemini models (the
//! provider id or model id names `gemini` or `google`, as upstream decides,
//! also behind an OpenAI-compatible proxy) additionally get the keyword
//! cleanup upstream's `clean-for-gemini` does: local `$ref`s inlined,
//! unsupported keywords dropped, `const` turned into `enum`, literal and
//! nullable unions flattened, `null` removed from type lists.
//!
//! Pure functions on JSON values: this file never changes what a tool
//! accepts, only how its schema is advertised.

use std::collections::{BTreeMap, HashSet};

use serde_json::{json, Map, Value};

use super::ToolSpec;

/// Keywords Gemini's schema subset rejects (upstream's list).
pub const GEMINI_UNSUPPORTED_KEYWORDS: [&str; 23] = [
    "patternProperties",
    "additionalProperties",
    "$schema",
    "$id",
    "$ref",
    "$defs",
    "definitions",
    "examples",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "multipleOf",
    "pattern",
    "format",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minProperties",
    "maxProperties",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "$comment",
];

/// How deep `$ref`s are followed before a cycle is cut to `{}`.
const MAX_REF_DEPTH: usize = 16;

/// Which schema dialect a model gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaDialect {
    /// A top-level object; keywords left as written.
    Standard,
    /// A top-level object plus Gemini's keyword cleanup.
    Gemini,
}

impl SchemaDialect {
    /// Gemini when the provider or model id names Gemini/Google (also via an
    /// OpenAI-compatible proxy), unless the provider is Anthropic's.
    pub fn for_model(provider_id: &str, model_id: &str) -> SchemaDialect {
        let provider = provider_id.to_ascii_lowercase();
        let model = model_id.to_ascii_lowercase();
        let geminiish =
            provider.contains("gemini") || provider.contains("google") || model.contains("gemini");
        if geminiish && !provider.contains("anthropic") {
            SchemaDialect::Gemini
        } else {
            SchemaDialect::Standard
        }
    }
}

/// The specs with their parameters normalised for `dialect`.
pub fn normalize_specs(specs: &[ToolSpec], dialect: SchemaDialect) -> Vec<ToolSpec> {
    specs
        .iter()
        .map(|spec| ToolSpec {
            name: spec.name.clone(),
            description: spec.description.clone(),
            parameters: normalize_parameters(&spec.parameters, dialect),
        })
        .collect()
}

/// One tool's parameters as `dialect` wants them: always a top-level object.
pub fn normalize_parameters(schema: &Value, dialect: SchemaDialect) -> Value {
    let object = top_level_object(schema);
    match dialect {
        SchemaDialect::Standard => object,
        SchemaDialect::Gemini => {
            let mut cleaned = clean_for_gemini(&object);
            // The cleanup may drop the object's type only if it came from a union.
            if let Value::Object(map) = &mut cleaned {
                map.insert("type".into(), json!("object"));
                map.entry("properties").or_insert_with(|| json!({}));
            }
            cleaned
        }
    }
}

/// Repairs the top level into `{"type": "object", "properties": …}`.
fn top_level_object(schema: &Value) -> Value {
    let Value::Object(map) = schema else {
        return json!({"type": "object", "properties": {}});
    };
    let union = ["anyOf", "oneOf"]
        .into_iter()
        .find_map(|k| map.get(k).and_then(Value::as_array));
    if let Some(variants) = union {
        return merge_object_variants(map, variants);
    }
    let mut out = map.clone();
    let is_object = match out.get("type") {
        None => true,
        Some(Value::String(t)) => t == "object",
        Some(_) => false,
    };
    if !is_object {
        return json!({"type": "object", "properties": {}});
    }
    out.insert("type".into(), json!("object"));
    if !out.get("properties").is_some_and(Value::is_object) {
        out.insert("properties".into(), json!({}));
    }
    Value::Object(out)
}

/// Merges the properties of object variants; a property is required only
/// when every variant requires it, and literal values of one property across
/// variants become one `enum`.
fn merge_object_variants(root: &Map<String, Value>, variants: &[Value]) -> Value {
    let mut properties: BTreeMap<String, Value> = BTreeMap::new();
    let mut required_counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut object_variants = 0usize;
    for variant in variants {
        let Some(props) = variant.get("properties").and_then(Value::as_object) else {
            continue;
        };
        object_variants += 1;
        for (name, prop) in props {
            match properties.get_mut(name) {
                None => {
                    properties.insert(name.clone(), prop.clone());
                }
                Some(existing) => merge_literal_enum(existing, prop),
            }
        }
        for name in variant
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            *required_counts.entry(name.to_string()).or_default() += 1;
        }
    }
    let required: Vec<&String> = required_counts
        .iter()
        .filter(|(_, n)| **n == object_variants && object_variants > 0)
        .map(|(k, _)| k)
        .collect();
    let mut out = Map::new();
    for key in ["title", "description"] {
        if let Some(v) = root.get(key) {
            out.insert(key.into(), v.clone());
        }
    }
    out.insert("type".into(), json!("object"));
    out.insert("properties".into(), json!(properties));
    if !required.is_empty() {
        out.insert("required".into(), json!(required));
    }
    Value::Object(out)
}

/// Folds `other`'s literal value(s) into `existing`'s enum when both are literals.
fn merge_literal_enum(existing: &mut Value, other: &Value) {
    let (Some(mut values), Some(more)) = (literal_values(existing), literal_values(other)) else {
        return;
    };
    for v in more {
        if !values.contains(&v) {
            values.push(v);
        }
    }
    if let Value::Object(map) = existing {
        map.remove("const");
        map.insert("enum".into(), Value::Array(values));
    }
}

fn literal_values(schema: &Value) -> Option<Vec<Value>> {
    if let Some(c) = schema.get("const") {
        return Some(vec![c.clone()]);
    }
    schema.get("enum").and_then(Value::as_array).cloned()
}

/// Upstream's Gemini cleanup, applied recursively.
pub fn clean_for_gemini(schema: &Value) -> Value {
    let mut defs = BTreeMap::new();
    collect_defs(schema, &mut defs);
    clean(schema, &defs, &mut Vec::new())
}

fn collect_defs(schema: &Value, defs: &mut BTreeMap<String, Value>) {
    for key in ["$defs", "definitions"] {
        if let Some(map) = schema.get(key).and_then(Value::as_object) {
            for (name, def) in map {
                defs.insert(name.clone(), def.clone());
            }
        }
    }
}

fn copy_meta(from: &Map<String, Value>, to: &mut Map<String, Value>) {
    for key in ["description", "title", "default"] {
        if let Some(v) = from.get(key) {
            to.insert(key.into(), v.clone());
        }
    }
}

fn clean(schema: &Value, defs: &BTreeMap<String, Value>, refs: &mut Vec<String>) -> Value {
    match schema {
        Value::Array(items) => Value::Array(items.iter().map(|i| clean(i, defs, refs)).collect()),
        Value::Object(obj) => clean_object(obj, defs, refs),
        other => other.clone(),
    }
}

fn clean_object(
    obj: &Map<String, Value>,
    defs: &BTreeMap<String, Value>,
    refs: &mut Vec<String>,
) -> Value {
    let mut defs_here;
    let defs = if obj.contains_key("$defs") || obj.contains_key("definitions") {
        defs_here = defs.clone();
        collect_defs(&Value::Object(obj.clone()), &mut defs_here);
        &defs_here
    } else {
        defs
    };
    if let Some(reference) = obj.get("$ref").and_then(Value::as_str) {
        return inline_ref(obj, reference, defs, refs);
    }
    let mut unions = BTreeMap::new();
    for key in ["anyOf", "oneOf"] {
        if let Some(variants) = obj.get(key).and_then(Value::as_array) {
            let cleaned: Vec<Value> = variants.iter().map(|v| clean(v, defs, refs)).collect();
            match simplify_union(obj, cleaned) {
                Union::Simplified(value) => return value,
                Union::Kept(kept) => {
                    unions.insert(key, kept);
                }
            }
        }
    }
    let mut out = Map::new();
    for (key, value) in obj {
        if GEMINI_UNSUPPORTED_KEYWORDS.contains(&key.as_str()) {
            continue;
        }
        match key.as_str() {
            "const" => {
                out.insert("enum".into(), json!([value]));
            }
            "type" if !unions.is_empty() => {}
            "type" => {
                out.insert(key.clone(), clean_type(value));
            }
            "properties" => {
                let props = value.as_object().map(|props| {
                    props
                        .iter()
                        .map(|(k, v)| (k.clone(), clean(v, defs, refs)))
                        .collect::<Map<_, _>>()
                });
                out.insert(
                    key.clone(),
                    props.map_or_else(|| value.clone(), Value::Object),
                );
            }
            "items" | "allOf" => {
                out.insert(key.clone(), clean(value, defs, refs));
            }
            "anyOf" | "oneOf" => {
                let kept = unions.remove(key.as_str()).unwrap_or_default();
                out.insert(key.clone(), Value::Array(kept));
            }
            _ => {
                out.insert(key.clone(), value.clone());
            }
        }
    }
    Value::Object(out)
}

/// `["string", "null"]` → `"string"`; a list of several stays a list without `null`.
fn clean_type(value: &Value) -> Value {
    let Some(types) = value.as_array() else {
        return value.clone();
    };
    if !types.iter().all(Value::is_string) {
        return value.clone();
    }
    let kept: Vec<Value> = types
        .iter()
        .filter(|t| t.as_str() != Some("null"))
        .cloned()
        .collect();
    match kept.as_slice() {
        [one] => one.clone(),
        _ => Value::Array(kept),
    }
}

fn inline_ref(
    obj: &Map<String, Value>,
    reference: &str,
    defs: &BTreeMap<String, Value>,
    refs: &mut Vec<String>,
) -> Value {
    let name = reference
        .strip_prefix("#/$defs/")
        .or_else(|| reference.strip_prefix("#/definitions/"))
        .map(|n| n.replace("~1", "/").replace("~0", "~"));
    let resolved = name.as_deref().and_then(|n| defs.get(n));
    let mut out = Map::new();
    match resolved {
        Some(target) if !refs.iter().any(|r| r == reference) && refs.len() < MAX_REF_DEPTH => {
            refs.push(reference.to_string());
            let cleaned = clean(target, defs, refs);
            refs.pop();
            match cleaned {
                Value::Object(map) => out = map,
                other => return other,
            }
        }
        // A cycle or an unknown target: an unconstrained schema.
        _ => {}
    }
    copy_meta(obj, &mut out);
    Value::Object(out)
}

enum Union {
    Simplified(Value),
    Kept(Vec<Value>),
}

fn is_null_schema(variant: &Value) -> bool {
    let Some(map) = variant.as_object() else {
        return false;
    };
    map.get("const") == Some(&Value::Null)
        || map.get("enum") == Some(&json!([null]))
        || map.get("type") == Some(&json!("null"))
        || map.get("type") == Some(&json!(["null"]))
}

/// Drops `null` variants, then flattens literal unions into one `enum`, or a
/// union left with one variant into that variant.
fn simplify_union(obj: &Map<String, Value>, variants: Vec<Value>) -> Union {
    let before = variants.len();
    let non_null: Vec<Value> = variants
        .into_iter()
        .filter(|v| !is_null_schema(v))
        .collect();
    let stripped = non_null.len() != before;
    if let Some((kind, values)) = literal_union(&non_null) {
        let mut out = Map::new();
        out.insert("type".into(), json!(kind));
        out.insert("enum".into(), Value::Array(values));
        copy_meta(obj, &mut out);
        return Union::Simplified(Value::Object(out));
    }
    if stripped && non_null.len() == 1 {
        let lone = non_null.into_iter().next().unwrap_or(Value::Null);
        return Union::Simplified(match lone {
            Value::Object(mut map) => {
                copy_meta(obj, &mut map);
                Value::Object(map)
            }
            other => other,
        });
    }
    Union::Kept(non_null)
}

/// `[{const: "a", type: "string"}, {enum: ["b"], type: "string"}]` → `("string", ["a", "b"])`.
fn literal_union(variants: &[Value]) -> Option<(String, Vec<Value>)> {
    if variants.is_empty() {
        return None;
    }
    let mut kind: Option<String> = None;
    let mut values = Vec::new();
    let mut seen = HashSet::new();
    for variant in variants {
        let map = variant.as_object()?;
        let value = match (map.get("const"), map.get("enum").and_then(Value::as_array)) {
            (Some(c), _) => c.clone(),
            (None, Some(e)) if e.len() == 1 => e[0].clone(),
            _ => return None,
        };
        let variant_kind = match map.get("type") {
            Some(Value::String(t)) => t.clone(),
            Some(Value::Array(t)) if t.len() == 1 => t[0].as_str()?.to_string(),
            _ => return None,
        };
        match &kind {
            None => kind = Some(variant_kind),
            Some(k) if *k != variant_kind => return None,
            Some(_) => {}
        }
        if seen.insert(value.to_string()) {
            values.push(value);
        }
    }
    kind.map(|k| (k, values))
}

#[cfg(test)]
mod tests;
