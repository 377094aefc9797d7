//! A recording `ReplySink` standing in for a channel's outbound adapter: it
//! records every delivery with its tokio timestamp, can take time per send,
//! fails sends whose text contains "FAIL", and notes if two sends overlap.
//!
//! Included by the `tests/reply_*.rs` files with `#[path]`.
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use pincer::reply::{ReplyKind, ReplyPayload, ReplySink, SinkError};
use tokio::time::Instant;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub kind: ReplyKind,
    pub text: String,
    pub at: Instant,
}

/// How long one send takes, by position in the delivery sequence.
pub type Latency = Box<dyn Fn(usize) -> SendTime + Send + Sync>;

pub enum SendTime {
    Instant,
    /// Yield to the scheduler this many times (for real-time runtimes).
    Yields(usize),
    /// Sleep on tokio's clock (for paused-time tests).
    Sleep(Duration),
}

pub struct RecordingSink {
    deliveries: Mutex<Vec<Delivery>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    calls: AtomicUsize,
    latency: Latency,
}

impl RecordingSink {
    pub fn new() -> Arc<Self> {
        Self::with_latency(Box::new(|_| SendTime::Instant))
    }

    pub fn with_latency(latency: Latency) -> Arc<Self> {
        Arc::new(Self {
            deliveries: Mutex::new(Vec::new()),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
            calls: AtomicUsize::new(0),
            latency,
        })
    }

    pub fn deliveries(&self) -> Vec<Delivery> {
        self.deliveries.lock().expect("sink lock").clone()
    }

    pub fn texts(&self) -> Vec<String> {
        self.deliveries().into_iter().map(|d| d.text).collect()
    }

    pub fn delivered(&self) -> usize {
        self.deliveries.lock().expect("sink lock").len()
    }

    pub fn max_in_flight(&self) -> usize {
        self.max_in_flight.load(Ordering::SeqCst)
    }
}

impl ReplySink for RecordingSink {
    fn deliver(
        &self,
        payload: ReplyPayload,
        kind: ReplyKind,
    ) -> BoxFuture<'_, Result<(), SinkError>> {
        Box::pin(async move {
            let now_in_flight = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.max_in_flight
                .fetch_max(now_in_flight, Ordering::SeqCst);
            let call = self.calls.fetch_add(1, Ordering::SeqCst);
            match (self.latency)(call) {
                SendTime::Instant => {}
                SendTime::Yields(n) => {
                    for _ in 0..n {
                        tokio::task::yield_now().await;
                    }
                }
                SendTime::Sleep(d) => tokio::time::sleep(d).await,
            }
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            if payload.text.contains("FAIL") {
                return Err(SinkError::Delivery("platform rejected the message".into()));
            }
            self.deliveries.lock().expect("sink lock").push(Delivery {
                kind,
                text: payload.text,
                at: Instant::now(),
            });
            Ok(())
        })
    }
}
