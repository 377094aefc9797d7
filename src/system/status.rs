//! The status pulse: the running components (channel accounts, the
//! heartbeat, cron, the command queue, runs, the memory index) call
//! [`changed`] when a figure they report changes; the gateway waits on
//! [`subscribe`] to send its debounced `health` event.
//!
//! It carries no figures, only "something changed" (a counter). Each
//! component keeps its own figures and the gateway reads them; this file
//! must not learn what they are.

use std::sync::OnceLock;

use tokio::sync::watch;

fn sender() -> &'static watch::Sender<u64> {
    static PULSE: OnceLock<watch::Sender<u64>> = OnceLock::new();
    PULSE.get_or_init(|| watch::channel(0).0)
}

/// A reported figure changed (cheap; callable from any thread, with or
/// without a runtime, with or without listeners).
pub fn changed() {
    sender().send_modify(|count| *count = count.wrapping_add(1));
}

/// A receiver that wakes after each [`changed`] (several changes between two
/// waits wake it once).
pub fn subscribe() -> watch::Receiver<u64> {
    sender().subscribe()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_change_wakes_a_subscriber() {
        // Other tests of this process pulse too: only "woken after a change" is certain.
        let mut rx = subscribe();
        rx.mark_unchanged();
        changed();
        assert!(rx.has_changed().expect("sender lives"));
        tokio::time::timeout(std::time::Duration::from_secs(5), rx.changed())
            .await
            .expect("woken")
            .expect("sender lives");
    }
}
