use serde_json::{json, Value};

use super::*;
use crate::tools::ToolRegistry;

/// Every key used anywhere inside a schema (property names excluded).
fn keywords(schema: &Value, out: &mut Vec<String>) {
    match schema {
        Value::Object(map) => {
            for (key, value) in map {
                if key == "properties" {
                    for prop in value.as_object().into_iter().flat_map(|m| m.values()) {
                        keywords(prop, out);
                    }
                    continue;
                }
                out.push(key.clone());
                keywords(value, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|i| keywords(i, out)),
        _ => {}
    }
}

#[test]
fn builtin_tool_schemas_pass_gemini_cleanup_with_their_properties_intact() {
    let registry = ToolRegistry::builtin();
    let specs = registry.specs(
        &registry
            .names()
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>(),
    );
    assert!(specs.len() >= 10, "the built-in tools are all listed");
    let cleaned = normalize_specs(&specs, SchemaDialect::Gemini);
    let mut dropped_somewhere = false;
    for (before, after) in specs.iter().zip(&cleaned) {
        assert_eq!(after.parameters["type"], "object", "{}", after.name);
        let mut used = Vec::new();
        keywords(&after.parameters, &mut used);
        for keyword in &used {
            assert!(
                !GEMINI_UNSUPPORTED_KEYWORDS.contains(&keyword.as_str()),
                "{} still has {keyword}",
                after.name
            );
        }
        let names = |v: &Value| -> Vec<String> {
            v["properties"]
                .as_object()
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default()
        };
        assert_eq!(
            names(&before.parameters),
            names(&after.parameters),
            "{}",
            after.name
        );
        assert_eq!(
            before.parameters.get("required"),
            after.parameters.get("required")
        );
        dropped_somewhere |= before.parameters != after.parameters;
    }
    assert!(
        dropped_somewhere,
        "some built-in schema carries a Gemini-rejected keyword"
    );
    let list = cleaned
        .iter()
        .find(|s| s.name == "sessions_list")
        .expect("sessions_list");
    assert_eq!(
        list.parameters["properties"]["limit"],
        json!({"type": "integer"})
    );
}

#[test]
fn builtin_tool_schemas_are_already_objects_for_openai() {
    let registry = ToolRegistry::builtin();
    let specs = registry.specs(
        &registry
            .names()
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>(),
    );
    for (before, after) in specs
        .iter()
        .zip(normalize_specs(&specs, SchemaDialect::Standard))
    {
        assert_eq!(after.parameters["type"], "object");
        assert!(after.parameters["properties"].is_object(), "{}", after.name);
        // Nothing but the repair: keywords stay for strict OpenAI validators.
        if before.parameters.get("properties").is_some() {
            assert_eq!(before.parameters, after.parameters, "{}", after.name);
        }
    }
}

#[test]
fn missing_type_or_non_object_top_level_is_repaired() {
    let no_type = json!({"properties": {"q": {"type": "string"}}, "required": ["q"]});
    assert_eq!(
        normalize_parameters(&no_type, SchemaDialect::Standard),
        json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]})
    );
    for bad in [
        json!(null),
        json!("x"),
        json!({"type": "string"}),
        json!({}),
    ] {
        let fixed = normalize_parameters(&bad, SchemaDialect::Standard);
        assert_eq!(fixed["type"], "object", "{bad}");
        assert!(fixed["properties"].is_object(), "{bad}");
    }
}

#[test]
fn top_level_union_of_actions_merges_into_one_object() {
    let schema = json!({"description": "process control", "anyOf": [
        {"type": "object", "properties": {"action": {"const": "list", "type": "string"}}, "required": ["action"]},
        {"type": "object", "properties": {"action": {"const": "kill", "type": "string"},
                                          "sessionId": {"type": "string"}}, "required": ["action", "sessionId"]},
    ]});
    let merged = normalize_parameters(&schema, SchemaDialect::Standard);
    assert_eq!(merged["type"], "object");
    assert_eq!(merged["description"], "process control");
    assert_eq!(
        merged["properties"]["action"]["enum"],
        json!(["list", "kill"])
    );
    assert_eq!(
        merged["required"],
        json!(["action"]),
        "sessionId is not required by every variant"
    );
    assert!(merged.get("anyOf").is_none());
}

#[test]
fn gemini_cleanup_turns_const_into_enum_and_flattens_unions() {
    let schema = json!({"type": "object", "$schema": "http://json-schema.org/draft-07/schema#",
    "additionalProperties": false,
    "patternProperties": {"^x-": {"type": "string"}},
    "properties": {
        "mode": {"anyOf": [{"const": "fast", "type": "string"}, {"const": "slow", "type": "string"}],
                 "description": "speed"},
        "note": {"anyOf": [{"type": "string", "maxLength": 10}, {"type": "null"}], "description": "optional"},
        "kind": {"const": "x"},
        "tags": {"type": ["array", "null"], "items": {"type": "string", "format": "uri"}, "minItems": 1},
        "either": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
    }});
    let cleaned = normalize_parameters(&schema, SchemaDialect::Gemini);
    let props = &cleaned["properties"];
    assert_eq!(
        props["mode"],
        json!({"type": "string", "enum": ["fast", "slow"], "description": "speed"})
    );
    assert_eq!(
        props["note"],
        json!({"type": "string", "description": "optional"})
    );
    assert_eq!(props["kind"], json!({"enum": ["x"]}));
    assert_eq!(
        props["tags"],
        json!({"type": "array", "items": {"type": "string"}})
    );
    assert_eq!(
        props["either"],
        json!({"oneOf": [{"type": "string"}, {"type": "integer"}]})
    );
    for gone in ["$schema", "additionalProperties", "patternProperties"] {
        assert!(cleaned.get(gone).is_none(), "{gone} dropped");
    }
}

#[test]
fn gemini_cleanup_inlines_local_refs_and_cuts_cycles() {
    let schema = json!({"type": "object",
        "$defs": {"Point": {"type": "object", "properties": {"x": {"type": "number", "minimum": 0}}},
                  "Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}},
        "properties": {"at": {"$ref": "#/$defs/Point", "description": "where"},
                       "list": {"$ref": "#/$defs/Node"},
                       "lost": {"$ref": "#/$defs/Missing", "title": "gone"}}});
    let cleaned = clean_for_gemini(&schema);
    assert_eq!(
        cleaned["properties"]["at"],
        json!({"type": "object", "properties": {"x": {"type": "number"}}, "description": "where"})
    );
    assert_eq!(
        cleaned["properties"]["list"]["properties"]["next"],
        json!({})
    );
    assert_eq!(cleaned["properties"]["lost"], json!({"title": "gone"}));
    assert!(cleaned.get("$defs").is_none());
}

#[test]
fn gemini_is_chosen_by_provider_or_model_id_but_never_for_anthropic() {
    assert_eq!(
        SchemaDialect::for_model("google", "gemini-2.5-pro"),
        SchemaDialect::Gemini
    );
    assert_eq!(
        SchemaDialect::for_model("openrouter", "google/gemini-2.5-flash"),
        SchemaDialect::Gemini
    );
    assert_eq!(
        SchemaDialect::for_model("newapi", "Gemini-2.0"),
        SchemaDialect::Gemini
    );
    assert_eq!(
        SchemaDialect::for_model("openai", "gpt-5"),
        SchemaDialect::Standard
    );
    assert_eq!(
        SchemaDialect::for_model("anthropic-google-vertex", "claude"),
        SchemaDialect::Standard
    );
}

#[test]
fn spec_sets_are_built_once_per_tool_set_and_dialect() {
    let registry = ToolRegistry::builtin();
    let some = vec!["read".to_string(), "exec".to_string()];
    let first = registry.specs_for(&some, SchemaDialect::Standard);
    let again = registry.specs_for(&some, SchemaDialect::Standard);
    assert!(
        std::sync::Arc::ptr_eq(&first, &again),
        "shared, not rebuilt"
    );
    assert_eq!(
        first.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
        ["exec", "read"]
    );
    let gemini = registry.specs_for(&some, SchemaDialect::Gemini);
    assert!(!std::sync::Arc::ptr_eq(&first, &gemini));
    let fewer = registry.specs_for(&some[..1], SchemaDialect::Standard);
    assert_eq!(fewer.len(), 1);
    // The cache is bounded: many distinct sets never grow it past its cap,
    // and the answers stay right.
    let names: Vec<String> = registry.names().iter().map(|n| n.to_string()).collect();
    for i in 0..names.len() {
        let set = registry.specs_for(&names[..=i], SchemaDialect::Standard);
        assert_eq!(set.len(), i + 1);
    }
}
