//! The chat-completions request body, serialized straight from the prompt: every field borrows from the
//! `ProviderRequest`, so a turn copies neither the system prompt nor the tools' JSON schemas into a JSON tree
//! before writing them (building that tree was ~6 % of the gateway's CPU per turn).
//!
//! Field order and values are OpenAI's: `model`, `messages`, `stream: true` with
//! `stream_options.include_usage`, then `max_tokens`, `reasoning_effort` and `tools` when set.
//!
//! The `tools` array is the same for every call with the same tool set (the registry shares one
//! `Arc<[ToolSpec]>` per set), so it is written once per set and kept (`MAX_TOOL_SETS`): writing the
//! schemas was ~6 % of the gateway's CPU per turn.

use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use serde::Serialize;
use serde_json::value::RawValue;

use super::super::provider::{ChatMessage, ProviderRequest, ToolCall, ToolSpec};
use crate::agent::failover::ThinkingLevel;
use crate::agent::reasoning::reasoning_effort;

#[derive(Serialize)]
pub(super) struct RequestBody<'a> {
    model: &'a str,
    messages: Vec<Message<'a>>,
    stream: bool,
    stream_options: StreamOptions,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<ToolsJson>,
}

/// Tool sets whose `tools` array is kept written.
const MAX_TOOL_SETS: usize = 16;

/// A tool set's `tools` array, already JSON.
struct ToolsJson(Arc<RawValue>);

impl Serialize for ToolsJson {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

/// A tool set (held weakly: a set no longer in use is not kept alive, and its place is taken first) and its
/// written `tools` array.
type KeptToolSet = (Weak<[ToolSpec]>, Arc<RawValue>);

/// Written `tools` arrays by tool set.
static TOOL_SETS: Mutex<Vec<KeptToolSet>> = Mutex::new(Vec::new());

/// The `tools` array of `specs`, written once per set; `None` for no tools.
fn tools_json(specs: &Arc<[ToolSpec]>) -> Option<ToolsJson> {
    if specs.is_empty() {
        return None;
    }
    let mut sets = TOOL_SETS.lock();
    let kept = sets.iter().find_map(|(set, json)| {
        let alive = set.upgrade()?;
        Arc::ptr_eq(&alive, specs).then(|| json.clone())
    });
    if let Some(json) = kept {
        return Some(ToolsJson(json));
    }
    let tools: Vec<Tool<'_>> = specs.iter().map(tool).collect();
    let json: Arc<RawValue> = serde_json::value::to_raw_value(&tools)
        .expect("tool specs serialize: JSON values with string keys")
        .into();
    sets.retain(|(set, _)| set.strong_count() > 0);
    if sets.len() >= MAX_TOOL_SETS {
        sets.remove(0);
    }
    sets.push((Arc::downgrade(specs), json.clone()));
    Some(ToolsJson(json))
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

/// One prompt message in chat-completions form (tool calls and results included).
#[derive(Serialize)]
struct Message<'a> {
    role: &'static str,
    /// `null` for an assistant message that only calls tools.
    content: Option<Content<'a>>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    tool_calls: Vec<Call<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
}

/// A message's content: text, or text and image parts (a user message with images).
#[derive(Serialize)]
#[serde(untagged)]
enum Content<'a> {
    Text(&'a str),
    Parts(Vec<Part<'a>>),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Part<'a> {
    Text { text: &'a str },
    ImageUrl { image_url: ImageUrl },
}

#[derive(Serialize)]
struct ImageUrl {
    url: String,
}

#[derive(Serialize)]
struct Call<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: CallFunction<'a>,
}

#[derive(Serialize)]
struct CallFunction<'a> {
    name: &'a str,
    arguments: &'a str,
}

#[derive(Serialize)]
struct Tool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: ToolFunction<'a>,
}

#[derive(Serialize)]
struct ToolFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a serde_json::Value,
}

pub(super) fn request_body(request: &ProviderRequest, thinking: ThinkingLevel) -> RequestBody<'_> {
    RequestBody {
        model: &request.model,
        messages: request.messages.iter().map(message).collect(),
        stream: true,
        stream_options: StreamOptions {
            include_usage: true,
        },
        max_tokens: request.max_tokens,
        reasoning_effort: reasoning_effort(thinking, &request.model),
        tools: tools_json(&request.tools),
    }
}

fn message(message: &ChatMessage) -> Message<'_> {
    let calls_only = !message.tool_calls.is_empty() && message.content.is_empty();
    Message {
        role: message.role.as_str(),
        content: (!calls_only).then(|| content(message)),
        tool_calls: message.tool_calls.iter().map(call).collect(),
        tool_call_id: message.tool_call_id.as_deref(),
    }
}

/// Text alone, or (with images) a text part then one `image_url` part per image as a data URL.
fn content(message: &ChatMessage) -> Content<'_> {
    if message.images.is_empty() {
        return Content::Text(&message.content);
    }
    let mut parts = Vec::with_capacity(message.images.len() + 1);
    if !message.content.is_empty() {
        parts.push(Part::Text {
            text: &message.content,
        });
    }
    parts.extend(message.images.iter().map(|image| Part::ImageUrl {
        image_url: ImageUrl {
            url: image.data_url(),
        },
    }));
    Content::Parts(parts)
}

fn call(call: &ToolCall) -> Call<'_> {
    Call {
        id: &call.id,
        kind: "function",
        function: CallFunction {
            name: &call.name,
            arguments: &call.arguments,
        },
    }
}

fn tool(tool: &ToolSpec) -> Tool<'_> {
    Tool {
        kind: "function",
        function: ToolFunction {
            name: &tool.name,
            description: &tool.description,
            parameters: &tool.parameters,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_message_with_images_becomes_text_and_image_url_parts() {
        use crate::agent::providers::ImagePart;
        let mut user = ChatMessage::user("what is this?");
        user.images = vec![ImagePart {
            mime: "image/jpeg".into(),
            base64: "/9j/AA==".into(),
        }];
        let request = ProviderRequest {
            model: "gpt-vision".into(),
            messages: vec![ChatMessage::system("s"), user],
            max_tokens: None,
            tools: Arc::from(Vec::new()),
        };
        let body = serde_json::to_value(request_body(&request, ThinkingLevel::Off)).expect("json");
        assert_eq!(
            body["messages"][0]["content"], "s",
            "text alone stays a string"
        );
        assert_eq!(
            body["messages"][1]["content"],
            serde_json::json!([
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/AA=="}},
            ])
        );
    }

    fn set(names: &[&str]) -> Arc<[ToolSpec]> {
        names
            .iter()
            .map(|name| ToolSpec {
                name: name.to_string(),
                description: format!("the {name} tool"),
                parameters: serde_json::json!({"type": "object", "properties": {}}),
            })
            .collect::<Vec<_>>()
            .into()
    }

    fn written(specs: &Arc<[ToolSpec]>) -> Arc<RawValue> {
        tools_json(specs).expect("a set with tools").0
    }

    #[test]
    fn a_tool_set_is_written_once_and_each_set_gets_its_own_array() {
        let read_write = set(&["read", "write"]);
        let first = written(&read_write);
        assert!(Arc::ptr_eq(&first, &written(&read_write)), "kept");
        let parsed: serde_json::Value = serde_json::from_str(first.get()).expect("JSON");
        assert_eq!(parsed[1]["function"]["name"], "write");
        assert_eq!(parsed[0]["type"], "function");
        let exec = set(&["exec"]);
        let other: serde_json::Value = serde_json::from_str(written(&exec).get()).expect("JSON");
        assert_eq!(other[0]["function"]["name"], "exec");
        assert!(tools_json(&set(&[])).is_none());
    }

    #[test]
    fn a_kept_array_does_not_keep_its_tool_set_alive() {
        let specs = set(&["cron"]);
        let weak = Arc::downgrade(&specs);
        written(&specs);
        drop(specs);
        assert_eq!(weak.strong_count(), 0);
    }
}
