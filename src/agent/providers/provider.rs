//! The provider trait: one streaming chat call against a model backend.
//!
//! A provider turns a [`ProviderRequest`] into a stream of [`StreamEvent`]s sent
//! on a bounded channel, and returns the finished [`Completion`]. It honours the
//! cancellation token by dropping the HTTP request, so an aborted run stops
//! costing tokens at once.

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Who spoke a message in the prompt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Role {
    System,
    #[default]
    User,
    Assistant,
    /// A tool's result, answering one of the assistant's tool calls.
    Tool,
}

impl Role {
    /// The role name as chat-completion APIs spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// One tool call the model asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments as the model wrote them (JSON text, possibly invalid).
    pub arguments: String,
}

pub use crate::tools::ToolSpec;

/// An image a user message carries to a vision model: its bytes as base64
/// (a prepared image, bounded by the board's image limits), shared between
/// retries and fallbacks instead of copied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImagePart {
    /// `image/jpeg`, `image/png`, …
    pub mime: String,
    pub base64: std::sync::Arc<str>,
}

impl ImagePart {
    /// `data:<mime>;base64,<data>` (OpenAI's `image_url`).
    pub fn data_url(&self) -> String {
        format!("data:{};base64,{}", self.mime, self.base64)
    }
}

/// One message of the prompt.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChatMessage {
    pub role: Role,
    pub content: String,
    /// For user messages: images for a vision model (the turn's own message only).
    pub images: Vec<ImagePart>,
    /// For assistant messages: the tool calls it made.
    pub tool_calls: Vec<ToolCall>,
    /// For tool messages: the call this result answers.
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    pub fn system(content: impl Into<String>) -> Self {
        ChatMessage {
            role: Role::System,
            content: content.into(),
            ..Default::default()
        }
    }

    pub fn user(content: impl Into<String>) -> Self {
        ChatMessage {
            role: Role::User,
            content: content.into(),
            ..Default::default()
        }
    }

    pub fn assistant(content: impl Into<String>) -> Self {
        ChatMessage {
            role: Role::Assistant,
            content: content.into(),
            ..Default::default()
        }
    }

    /// A tool result for the call `call_id`.
    pub fn tool_result(call_id: impl Into<String>, content: impl Into<String>) -> Self {
        ChatMessage {
            role: Role::Tool,
            content: content.into(),
            tool_call_id: Some(call_id.into()),
            ..Default::default()
        }
    }
}

/// Everything a provider needs for one streamed call.
#[derive(Debug, Clone)]
pub struct ProviderRequest {
    /// The model id as the provider knows it (without the `provider/` prefix).
    pub model: String,
    pub messages: Vec<ChatMessage>,
    pub max_tokens: Option<u32>,
    /// Tools offered to the model (empty: none); shared between calls.
    pub tools: std::sync::Arc<[ToolSpec]>,
}

/// Token counts reported by the provider.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// One increment of a streamed reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEvent {
    /// New assistant text, in order.
    TextDelta(String),
    /// New thinking text (Anthropic thinking blocks, OpenAI-compatible
    /// `reasoning_content`, Ollama `thinking`), in order; never part of the answer.
    ReasoningDelta(String),
}

/// The finished reply.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Completion {
    pub text: String,
    /// Tool calls the model made, in order (empty for a final answer).
    pub tool_calls: Vec<ToolCall>,
    pub usage: Usage,
    pub stop_reason: Option<String>,
}

/// Why a provider call failed.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    #[error("provider answered HTTP {status}: {message}")]
    Http {
        status: u16,
        message: String,
        /// From a `retry-after` header, when the provider sent one.
        retry_after_ms: Option<u64>,
    },
    #[error("provider unreachable: {0}")]
    Network(String),
    #[error("provider stream malformed: {0}")]
    Protocol(String),
    #[error("run aborted")]
    Cancelled,
}

/// A boxed future, so providers can sit behind `dyn Provider`.
pub use futures_util::future::BoxFuture;

/// A model backend that streams chat completions.
pub trait Provider: Send + Sync {
    /// Streams one reply: every text increment goes to `events` as it arrives,
    /// and the whole reply is returned at the end. Returns
    /// [`ProviderError::Cancelled`] promptly once `cancel` fires.
    fn stream<'a>(
        &'a self,
        request: ProviderRequest,
        events: mpsc::Sender<StreamEvent>,
        cancel: CancellationToken,
    ) -> BoxFuture<'a, Result<Completion, ProviderError>>;
}
