//! A model's streamed reply body, arriving in chunks of arbitrary sizes: OpenAI-compatible SSE, Anthropic SSE or
//! Ollama NDJSON (first byte), through each provider's `BodyDecoder`. Properties: no panic; the text deltas
//! sent while streaming add up to the completion's text; text and tool calls stay within the stated caps;
//! heap linear in the body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pincer::agent::providers::openai::{MAX_COMPLETION_TEXT_BYTES, MAX_TOOL_CALLS};
use pincer::agent::providers::{anthropic, ollama, openai, Completion, ProviderError, StreamEvent};
use pincer_fuzz::{chunks, linear_budget, runtime, split_parts, within_budget};
use tokio::sync::mpsc;

enum Decoder {
    OpenAi(openai::BodyDecoder),
    Anthropic(anthropic::BodyDecoder),
    Ollama(ollama::BodyDecoder),
}

impl Decoder {
    async fn feed(&mut self, bytes: &[u8]) -> Result<Option<Completion>, ProviderError> {
        match self {
            Decoder::OpenAi(d) => d.feed(bytes).await,
            Decoder::Anthropic(d) => d.feed(bytes).await,
            Decoder::Ollama(d) => d.feed(bytes).await,
        }
    }

    async fn end(self) -> Result<Completion, ProviderError> {
        match self {
            Decoder::OpenAi(d) => d.end().await,
            Decoder::Anthropic(d) => d.end().await,
            Decoder::Ollama(d) => d.end().await,
        }
    }
}

async fn decode(
    kind: u8,
    body: &[u8],
    lengths: &[u8],
) -> (Result<Completion, ProviderError>, String) {
    let (tx, mut rx) = mpsc::channel(16);
    let collector = tokio::spawn(async move {
        let mut text = String::new();
        while let Some(event) = rx.recv().await {
            if let StreamEvent::TextDelta(delta) = event {
                text.push_str(&delta);
            }
        }
        text
    });
    let mut decoder = match kind % 3 {
        0 => Decoder::OpenAi(openai::BodyDecoder::new(tx)),
        1 => Decoder::Anthropic(anthropic::BodyDecoder::new(tx)),
        _ => Decoder::Ollama(ollama::BodyDecoder::new(tx)),
    };
    let mut outcome = None;
    for chunk in chunks(body, lengths) {
        match decoder.feed(chunk).await {
            Ok(Some(completion)) => {
                outcome = Some(Ok(completion));
                break;
            }
            Ok(None) => {}
            Err(error) => {
                outcome = Some(Err(error));
                break;
            }
        }
    }
    let outcome = match outcome {
        Some(outcome) => {
            drop(decoder);
            outcome
        }
        None => decoder.end().await,
    };
    let streamed = collector.await.expect("the collector task");
    (outcome, streamed)
}

fuzz_target!(|data: &[u8]| {
    let Some((&kind, rest)) = data.split_first() else {
        return;
    };
    let parts = split_parts(rest, 2);
    let body = parts[0];
    let lengths = parts.get(1).copied().unwrap_or(&[]);
    within_budget(
        "llm stream",
        linear_budget(body.len(), 64, 256 * 1024),
        || {
            let (outcome, streamed) = runtime().block_on(decode(kind, body, lengths));
            match outcome {
                Ok(completion) => {
                    assert_eq!(
                        streamed, completion.text,
                        "streamed deltas differ from the completion"
                    );
                    assert!(completion.text.len() <= MAX_COMPLETION_TEXT_BYTES);
                    assert!(completion.tool_calls.len() <= MAX_TOOL_CALLS);
                }
                Err(error) => assert!(!error.to_string().is_empty(), "an error says why"),
            }
        },
    );
});
