//! Model backends: the [`Provider`] trait and its types (`provider.rs`), one
//! backend per wire format (`openai/` for chat completions, `anthropic/` for
//! Anthropic Messages, `ollama.rs` for Ollama's native chat), the HTTP
//! plumbing they share (`http.rs`), and model resolution from the config to a
//! provider instance (`models.rs`).
//!
//! Nothing here retries or fails over: that policy is `agent/failover.rs`,
//! above the providers.

pub mod anthropic;
mod http;
pub mod models;
pub mod ollama;
pub mod openai;
mod provider;

pub use anthropic::AnthropicProvider;
pub use ollama::OllamaProvider;
pub use openai::OpenAiCompatProvider;
pub use provider::{
    BoxFuture, ChatMessage, Completion, ImagePart, Provider, ProviderError, ProviderRequest, Role,
    StreamEvent, ToolCall, ToolSpec, Usage,
};
