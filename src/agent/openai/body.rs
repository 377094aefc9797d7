//! The chat-completions request body, serialized straight from the prompt: every field borrows from the
//! `ProviderRequest`, so a turn copies neither the system prompt nor the tools' JSON schemas into a JSON tree
//! before writing them (building that tree was ~6 % of the gateway's CPU per turn).
//!
//! Field order and values are OpenAI's: `model`, `messages`, `stream: true` with
//! `stream_options.include_usage`, then `max_tokens`, `reasoning_effort` and `tools` when set.

use serde::Serialize;

use super::super::failover::ThinkingLevel;
use super::super::provider::{ChatMessage, ProviderRequest, ToolCall, ToolSpec};
use super::super::reasoning::reasoning_effort;

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
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    tools: Vec<Tool<'a>>,
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
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    tool_calls: Vec<Call<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
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
        tools: request.tools.iter().map(tool).collect(),
    }
}

fn message(message: &ChatMessage) -> Message<'_> {
    let calls_only = !message.tool_calls.is_empty() && message.content.is_empty();
    Message {
        role: message.role.as_str(),
        content: (!calls_only).then_some(message.content.as_str()),
        tool_calls: message.tool_calls.iter().map(call).collect(),
        tool_call_id: message.tool_call_id.as_deref(),
    }
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
