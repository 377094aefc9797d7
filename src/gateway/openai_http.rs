//! `POST /v1/chat/completions`: OpenAI's chat-completions API in front of an
//! agent, streaming (SSE ending in `data: [DONE]`) or not.
//!
//! `model` names the agent (`openclaw`, `openclaw/<agentId>`,
//! `openclaw:<agentId>`, `agent:<agentId>`). Without `user` or the
//! `x-openclaw-session-key` header every request gets a fresh session.

use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::stream;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::agent::{RunEvent, RunOutcome, RunStatus, TurnSpec, DEFAULT_RUN_TIMEOUT_MS};
use crate::system::clock::now_ms;

use super::http::{
    auth_error_response, check_bearer, json_response, method_not_allowed, read_json, Body,
};
use super::runs::{self, RunOrigin};
use super::state::GatewayState;

/// Largest chat-completions request body unless
/// `gateway.http.endpoints.chatCompletions.maxBodyBytes` sets another.
pub const MAX_CHAT_BODY_BYTES: usize = 4 * 1024 * 1024;

fn api_error(status: StatusCode, kind: &str, message: String) -> Response<Body> {
    json_response(
        status,
        &json!({"error": {"message": message, "type": kind}}),
    )
}

/// The agent a `model` value names, if it names one.
pub fn agent_for_model(model: &str, default_agent: &str) -> Option<String> {
    let model = model.trim();
    if model == "openclaw" || model == "openclaw/default" || model == "pincer" {
        return Some(default_agent.to_string());
    }
    ["openclaw/", "openclaw:", "agent:", "pincer/"]
        .iter()
        .find_map(|prefix| model.strip_prefix(prefix))
        .filter(|id| !id.is_empty())
        .map(str::to_string)
}

fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

struct Parsed {
    agent_id: String,
    message: String,
    system: Option<String>,
    stream: bool,
    model: String,
    user: Option<String>,
}

fn parse(body: &Value, default_agent: &str, header_agent: Option<&str>) -> Result<Parsed, String> {
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("openclaw")
        .to_string();
    let agent_id = match header_agent {
        Some(agent) => agent.to_string(),
        None => agent_for_model(&model, default_agent)
            .ok_or_else(|| format!("model {model:?} does not name an agent: use \"openclaw\" or \"openclaw/<agentId>\""))?,
    };
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .filter(|m| !m.is_empty())
        .ok_or("messages must be a non-empty array")?;
    let mut system = Vec::new();
    let mut history = Vec::new();
    for m in messages {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        let text = content_text(m.get("content").unwrap_or(&Value::Null));
        match role {
            "system" | "developer" => system.push(text),
            "user" | "assistant" => history.push((role, text)),
            other => return Err(format!("unsupported message role {other:?}")),
        }
    }
    let Some((last_role, last)) = history.pop() else {
        return Err("messages must contain a user message".into());
    };
    if last_role != "user" {
        return Err("the last message must be from the user".into());
    }
    let message = if history.is_empty() {
        last
    } else {
        let earlier: Vec<String> = history.iter().map(|(r, t)| format!("{r}: {t}")).collect();
        format!(
            "[Conversation so far]\n{}\n[Current message]\n{last}",
            earlier.join("\n")
        )
    };
    Ok(Parsed {
        agent_id,
        message,
        system: (!system.is_empty()).then(|| system.join("\n\n")),
        stream: body.get("stream").and_then(Value::as_bool).unwrap_or(false),
        model,
        user: body.get("user").and_then(Value::as_str).map(str::to_string),
    })
}

/// Serves one chat-completions request.
pub async fn chat_completions(
    state: Arc<GatewayState>,
    req: Request<Incoming>,
    ip: IpAddr,
) -> Response<Body> {
    if req.method() != Method::POST {
        return method_not_allowed("POST");
    }
    if let Err(error) = check_bearer(&state, &req, ip) {
        return auth_error_response(error);
    }
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let header_agent = header("x-openclaw-agent-id");
    let header_session = header("x-openclaw-session-key");
    let limit = state
        .config()
        .gateway
        .http
        .endpoints
        .chat_completions
        .max_body_bytes
        .map_or(MAX_CHAT_BODY_BYTES, |bytes| {
            usize::try_from(bytes).unwrap_or(usize::MAX)
        });
    let body = match read_json(req, limit).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let config = state.config();
    let default_agent = config.agents.default_agent_id();
    let parsed = match parse(&body, &default_agent, header_agent.as_deref()) {
        Ok(parsed) => parsed,
        Err(message) => {
            return api_error(StatusCode::BAD_REQUEST, "invalid_request_error", message)
        }
    };
    if !config.agents.list.is_empty() && !config.agents.list.iter().any(|a| a.id == parsed.agent_id)
    {
        return api_error(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!("unknown agent id: {}", parsed.agent_id),
        );
    }
    let run_id = format!("chatcmpl-{}", uuid::Uuid::new_v4().simple());
    let session_key = match (header_session, &parsed.user) {
        (Some(key), _) => {
            super::methods::sessions::canonical_key(&config, Some(&parsed.agent_id), Some(&key))
        }
        (None, Some(user)) => format!("agent:{}:openai-user:{user}", parsed.agent_id),
        (None, None) => format!("agent:{}:openai:{run_id}", parsed.agent_id),
    };
    let spec = TurnSpec {
        run_id: run_id.clone(),
        agent_id: parsed.agent_id.clone(),
        session_key,
        message: parsed.message.clone(),
        timeout_ms: config
            .agents
            .defaults
            .timeout_seconds
            .map(|s| u64::from(s) * 1000)
            .unwrap_or(DEFAULT_RUN_TIMEOUT_MS),
        model_override: None,
        extra_system_prompt: parsed.system.clone(),
        label: None,
        channel: Some("openai-http".into()),
        skill_filter: None,
        interaction: true,
        images: Vec::new(),
    };
    let (tap_tx, tap_rx) = mpsc::channel(64);
    if let Err(error) = runs::start(
        &state,
        spec,
        RunOrigin {
            tap: Some(tap_tx),
            ..Default::default()
        },
    ) {
        return api_error(StatusCode::SERVICE_UNAVAILABLE, "api_error", error.message);
    }
    if parsed.stream {
        streaming(tap_rx, run_id, parsed.model)
    } else {
        whole(tap_rx, run_id, parsed.model).await
    }
}

async fn whole(mut rx: mpsc::Receiver<RunEvent>, run_id: String, model: String) -> Response<Body> {
    while let Some(event) = rx.recv().await {
        if let RunEvent::Finished(outcome) = event {
            return match outcome.status {
                RunStatus::Ok | RunStatus::Aborted => {
                    json_response(StatusCode::OK, &completion(&outcome, &run_id, &model))
                }
                _ => api_error(
                    StatusCode::BAD_GATEWAY,
                    "api_error",
                    outcome.error.unwrap_or_else(|| "run failed".into()),
                ),
            };
        }
    }
    api_error(
        StatusCode::INTERNAL_SERVER_ERROR,
        "api_error",
        "the run ended without a result".into(),
    )
}

fn completion(outcome: &RunOutcome, run_id: &str, model: &str) -> Value {
    json!({
        "id": run_id, "object": "chat.completion", "created": now_ms() / 1000, "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": outcome.text}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": outcome.usage.input_tokens, "completion_tokens": outcome.usage.output_tokens,
            "total_tokens": outcome.usage.input_tokens + outcome.usage.output_tokens,
        },
    })
}

fn chunk(run_id: &str, model: &str, delta: Value, finish: Option<&str>) -> Bytes {
    let chunk = json!({
        "id": run_id, "object": "chat.completion.chunk", "created": now_ms() / 1000, "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    });
    Bytes::from(format!("data: {chunk}\n\n"))
}

fn streaming(rx: mpsc::Receiver<RunEvent>, run_id: String, model: String) -> Response<Body> {
    let first = chunk(&run_id, &model, json!({"role": "assistant"}), None);
    let events = stream::unfold(
        (rx, run_id, model, Some(first), false),
        |(mut rx, run_id, model, pending, done)| async move {
            if let Some(bytes) = pending {
                return Some((
                    Ok::<_, Infallible>(Frame::data(bytes)),
                    (rx, run_id, model, None, done),
                ));
            }
            if done {
                return None;
            }
            loop {
                match rx.recv().await {
                    Some(RunEvent::Delta { delta, .. }) => {
                        let bytes = chunk(&run_id, &model, json!({"content": delta}), None);
                        return Some((Ok(Frame::data(bytes)), (rx, run_id, model, None, false)));
                    }
                    Some(RunEvent::Finished(outcome)) => {
                        let mut bytes = match outcome.status {
                            RunStatus::Ok | RunStatus::Aborted => {
                                chunk(&run_id, &model, json!({}), Some("stop")).to_vec()
                            }
                            _ => {
                                let error = json!({"error": {"message": outcome.error, "type": "api_error"}});
                                format!("data: {error}\n\n").into_bytes()
                            }
                        };
                        bytes.extend_from_slice(b"data: [DONE]\n\n");
                        return Some((
                            Ok(Frame::data(Bytes::from(bytes))),
                            (rx, run_id, model, None, true),
                        ));
                    }
                    // Reasoning never leaves through the OpenAI-compatible endpoint.
                    Some(
                        RunEvent::Started { .. }
                        | RunEvent::Tool { .. }
                        | RunEvent::ReasoningDelta { .. }
                        | RunEvent::ReasoningBlock { .. },
                    ) => continue,
                    None => return None,
                }
            }
        },
    );
    let mut response = Response::new(StreamBody::new(events).boxed());
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_names_map_to_agents() {
        assert_eq!(agent_for_model("openclaw", "main").as_deref(), Some("main"));
        assert_eq!(
            agent_for_model("openclaw/default", "main").as_deref(),
            Some("main")
        );
        assert_eq!(
            agent_for_model("openclaw/work", "main").as_deref(),
            Some("work")
        );
        assert_eq!(
            agent_for_model("openclaw:work", "main").as_deref(),
            Some("work")
        );
        assert_eq!(
            agent_for_model("agent:home", "main").as_deref(),
            Some("home")
        );
        assert_eq!(agent_for_model("gpt-4o", "main"), None);
    }

    #[test]
    fn earlier_turns_become_context_and_system_is_kept() {
        let body = json!({"model": "openclaw", "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": [{"type": "text", "text": "and now?"}]},
        ]});
        let parsed = parse(&body, "main", None).expect("valid");
        assert_eq!(parsed.system.as_deref(), Some("be brief"));
        assert!(parsed.message.contains("user: hi") && parsed.message.ends_with("and now?"));
        assert!(parse(&json!({"messages": []}), "main", None).is_err());
        assert!(parse(
            &json!({"model": "gpt-4", "messages": [{"role": "user", "content": "x"}]}),
            "main",
            None
        )
        .is_err());
    }
}
