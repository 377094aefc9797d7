//! The typing indicator through an adapter's `Typing` capability: started
//! when a message is queued, repeated every `typingIntervalSeconds` (platforms
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

/// The longest a typing indicator is kept up for one message.
pub const TYPING_MAX_MS: u64 = 120_000;

/// A typing indicator for one conversation.
pub struct ChannelTyping {
    channel: Arc<dyn Channel>,
    target: OutboundTarget,
    interval_ms: u64,
    stop: CancellationToken,
}

impl ChannelTyping {
    /// `None` when the adapter has no typing capability.
    pub fn for_target(
        channel: Arc<dyn Channel>,
        target: OutboundTarget,
        interval_ms: u64,
    ) -> Option<ChannelTyping> {
        channel.typing()?;
        Some(ChannelTyping {
            channel,
            target,
            interval_ms: interval_ms.max(1),
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
        let interval = Duration::from_millis(self.interval_ms);
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
                    _ = tokio::time::sleep(interval) => {}
                }
            }
        });
    }

    fn stop_typing(&self) {
        self.stop.cancel();
    }
}
