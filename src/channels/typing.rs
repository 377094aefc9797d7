//! The typing indicator through an adapter's `Typing` capability: started
//! when a message is queued, repeated every `TYPING_REFRESH_MS` (platforms
//! show "typing…" for a few seconds only), stopped when the first block of
//! the reply is sent or the run ends (the pipeline's `TypingGuard` drives
//! `stop_typing`), and never kept up longer than `TYPING_MAX_MS`.
//!
//! This file only pulses the indicator; it must not send replies.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::pipeline::TypingIndicator;

use super::{Channel, OutboundTarget};

/// How often "typing…" is re-sent while a reply is being prepared.
pub const TYPING_REFRESH_MS: u64 = 4_000;
/// The longest a typing indicator is kept up for one message.
pub const TYPING_MAX_MS: u64 = 120_000;

/// A typing indicator for one conversation.
pub struct ChannelTyping {
    channel: Arc<dyn Channel>,
    target: OutboundTarget,
    stop: CancellationToken,
}

impl ChannelTyping {
    /// `None` when the adapter has no typing capability.
    pub fn for_target(channel: Arc<dyn Channel>, target: OutboundTarget) -> Option<ChannelTyping> {
        channel.typing()?;
        Some(ChannelTyping {
            channel,
            target,
            stop: CancellationToken::new(),
        })
    }
}

impl TypingIndicator for ChannelTyping {
    fn start_typing(&self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let channel = self.channel.clone();
        let target = self.target.clone();
        let stop = self.stop.clone();
        runtime.spawn(async move {
            let deadline = tokio::time::Instant::now() + Duration::from_millis(TYPING_MAX_MS);
            while !stop.is_cancelled() && tokio::time::Instant::now() < deadline {
                if let Some(typing) = channel.typing() {
                    if let Err(error) = typing.send_typing(&target).await {
                        log::debug!("{} typing indicator failed: {error}", channel.id());
                    }
                }
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(Duration::from_millis(TYPING_REFRESH_MS)) => {}
                }
            }
        });
    }

    fn stop_typing(&self) {
        self.stop.cancel();
    }
}
