//! Connected WebSocket clients: the registry, event fan-out with the global
//! sequence number, presence, and slow-consumer handling.
//!
//! Each connection has an outbound queue whose *bytes* are counted: a client
//! that stops reading cannot make the gateway buffer without bound. Past the
//! limit an event marked drop-if-slow is skipped for that client; anything
//! else closes it with 1008 `slow consumer`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::frames::{event_frame, StateVersion};
use super::scopes;

/// A text frame as queued: reference-counted, so a broadcast holds one copy of its frame however
/// many connections still have it queued (1,000 clients each queueing their own copy of every
/// presence frame took gigabytes; `scripts/bench --scale`).
pub type Frame = tokio_tungstenite::tungstenite::Utf8Bytes;

/// What the writer task of a connection sends.
#[derive(Debug)]
pub enum Outbound {
    Text(Frame),
    Close { code: u16, reason: String },
}

/// The sending half of one connection's outbound queue, with byte accounting.
#[derive(Debug, Clone)]
pub struct ClientSender {
    tx: mpsc::UnboundedSender<Outbound>,
    queued_bytes: Arc<AtomicUsize>,
    max_buffered_bytes: usize,
}

/// What happened to one send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOutcome {
    Queued,
    /// Over the buffer limit and the frame was droppable.
    Dropped,
    /// Over the buffer limit: the connection is being closed.
    Closed,
}

impl ClientSender {
    /// A new queue; the receiver goes to the connection's writer task.
    pub fn channel(
        max_buffered_bytes: usize,
    ) -> (
        ClientSender,
        mpsc::UnboundedReceiver<Outbound>,
        Arc<AtomicUsize>,
    ) {
        let (tx, rx) = mpsc::unbounded_channel();
        let queued_bytes = Arc::new(AtomicUsize::new(0));
        let sender = ClientSender {
            tx,
            queued_bytes: queued_bytes.clone(),
            max_buffered_bytes,
        };
        (sender, rx, queued_bytes)
    }

    /// Queues a text frame unless the client is too far behind.
    pub fn send(&self, text: impl Into<Frame>, drop_if_slow: bool) -> SendOutcome {
        let text = text.into();
        let len = text.len();
        let queued = self.queued_bytes.load(Ordering::Acquire);
        if queued + len > self.max_buffered_bytes {
            if drop_if_slow {
                return SendOutcome::Dropped;
            }
            self.close(1008, "slow consumer");
            return SendOutcome::Closed;
        }
        self.queued_bytes.fetch_add(len, Ordering::AcqRel);
        if self.tx.send(Outbound::Text(text)).is_err() {
            self.queued_bytes.fetch_sub(len, Ordering::AcqRel);
            return SendOutcome::Closed;
        }
        SendOutcome::Queued
    }

    /// Asks the writer to close the socket with a code and reason.
    pub fn close(&self, code: u16, reason: &str) {
        let _ = self.tx.send(Outbound::Close {
            code,
            reason: reason.to_string(),
        });
    }
}

/// Everything the gateway knows about an authenticated connection.
#[derive(Debug, Clone)]
pub struct ClientInfo {
    pub conn_id: String,
    pub ip: IpAddr,
    pub role: String,
    pub scopes: Vec<String>,
    pub caps: Vec<String>,
    pub protocol: u32,
    pub client_id: String,
    pub client_mode: String,
    pub client_version: String,
    pub platform: Option<String>,
    pub device_family: Option<String>,
    pub display_name: Option<String>,
    pub instance_id: Option<String>,
    pub device_id: Option<String>,
    pub connected_at_ms: u64,
    /// A first-run setup session (no scopes; only `pincer.setup.*`).
    pub setup: Option<super::setup::SetupGrant>,
}

impl ClientInfo {
    /// Whether this client may see events guarded by `scope`.
    pub fn may_see(&self, scope: Option<&str>) -> bool {
        let Some(scope) = scope else { return true };
        if self.role != "operator" {
            return false;
        }
        let method_like = match scope {
            scopes::READ => "health",
            scopes::PAIRING => "device.pair.list",
            scopes::APPROVALS => "exec.approval.resolve",
            _ => "",
        };
        scopes::authorize(method_like, &self.scopes).is_ok()
    }

    /// The client's `PresenceEntry`.
    pub fn presence(&self) -> Value {
        json!({
            "host": self.display_name.clone().unwrap_or_else(|| self.client_id.clone()),
            "ip": self.ip.to_string(),
            "version": self.client_version,
            "platform": self.platform,
            "deviceFamily": self.device_family,
            "mode": self.client_mode,
            "reason": "connect",
            "ts": self.connected_at_ms,
            "deviceId": self.device_id,
            "roles": [self.role],
            "scopes": self.scopes,
            "instanceId": self.instance_id,
        })
    }
}

struct Entry {
    info: ClientInfo,
    sender: ClientSender,
}

/// Options for one broadcast.
#[derive(Debug, Clone, Copy, Default)]
pub struct BroadcastOptions<'a> {
    pub drop_if_slow: bool,
    /// Only clients holding this scope receive it.
    pub scope: Option<&'a str>,
    pub state_version: Option<StateVersion>,
}

/// The registry of authenticated connections.
#[derive(Default)]
pub struct ClientRegistry {
    entries: Mutex<HashMap<String, Entry>>,
    seq: AtomicU64,
    presence_version: AtomicU64,
    health_version: AtomicU64,
    presence: Mutex<PresenceThrottle>,
}

/// When the `presence` snapshot last went out, and whether a later one is already due.
#[derive(Debug, Default)]
struct PresenceThrottle {
    last_sent: Option<std::time::Instant>,
    pending: bool,
}

/// When a presence change is announced (see [`ClientRegistry::presence_timing`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PresenceTiming {
    /// Broadcast the snapshot now.
    Now,
    /// Broadcast it after this long, once for every change until then.
    Later(std::time::Duration),
    /// A later broadcast is already due and will carry this change.
    AlreadyDue,
}

impl ClientRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Presence is a snapshot, so a burst of connects and disconnects needs only its first and its
    /// last: at most one broadcast per `window` (the first change at once, the rest folded into one
    /// at the window's end). Without it, N clients connecting made N snapshots of up to N entries
    /// each for every client: 1,000 connects queued ~125 MB of presence frames.
    pub fn presence_timing(&self, window: std::time::Duration) -> PresenceTiming {
        let mut throttle = self.presence.lock();
        if throttle.pending {
            return PresenceTiming::AlreadyDue;
        }
        let now = std::time::Instant::now();
        match throttle.last_sent {
            Some(last) if now.duration_since(last) < window => {
                throttle.pending = true;
                PresenceTiming::Later(window - now.duration_since(last))
            }
            _ => {
                throttle.last_sent = Some(now);
                PresenceTiming::Now
            }
        }
    }

    /// The folded broadcast [`PresenceTiming::Later`] asked for goes out now.
    pub fn presence_sent_later(&self) {
        let mut throttle = self.presence.lock();
        throttle.pending = false;
        throttle.last_sent = Some(std::time::Instant::now());
    }

    /// Adds a connection after its hello; bumps the presence version.
    pub fn insert(&self, info: ClientInfo, sender: ClientSender) {
        self.entries
            .lock()
            .insert(info.conn_id.clone(), Entry { info, sender });
        self.presence_version.fetch_add(1, Ordering::AcqRel);
    }

    /// Queues a new connection's `hello-ok` and registers the connection in
    /// one step: from the moment the client reads its hello it is listed in
    /// presence and receives broadcasts, and no event is queued ahead of it.
    pub fn insert_with_hello(&self, info: ClientInfo, sender: ClientSender, hello: String) {
        let mut entries = self.entries.lock();
        sender.send(hello, false);
        entries.insert(info.conn_id.clone(), Entry { info, sender });
        drop(entries);
        self.presence_version.fetch_add(1, Ordering::AcqRel);
    }

    /// Removes a connection; returns whether it was there.
    pub fn remove(&self, conn_id: &str) -> bool {
        let removed = self.entries.lock().remove(conn_id).is_some();
        if removed {
            self.presence_version.fetch_add(1, Ordering::AcqRel);
        }
        removed
    }

    pub fn len(&self) -> usize {
        self.entries.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether a connection advertised a capability (e.g. `tool-events`).
    pub fn has_cap(&self, conn_id: &str, cap: &str) -> bool {
        self.entries
            .lock()
            .get(conn_id)
            .is_some_and(|e| e.info.caps.iter().any(|c| c == cap))
    }

    pub fn infos(&self) -> Vec<ClientInfo> {
        self.entries
            .lock()
            .values()
            .map(|e| e.info.clone())
            .collect()
    }

    /// The current `stateVersion`.
    pub fn state_version(&self) -> StateVersion {
        StateVersion {
            presence: self.presence_version.load(Ordering::Acquire),
            health: self.health_version.load(Ordering::Acquire),
        }
    }

    /// Bumps and returns the health version (for a `health` broadcast).
    pub fn bump_health(&self) -> StateVersion {
        self.health_version.fetch_add(1, Ordering::AcqRel);
        self.state_version()
    }

    /// Sends an event to every eligible client with the next global `seq`.
    pub fn broadcast(&self, event: &str, payload: &Value, options: BroadcastOptions<'_>) -> u64 {
        let seq = self.seq.fetch_add(1, Ordering::AcqRel) + 1;
        let frame = Frame::from(event_frame(
            event,
            payload,
            Some(seq),
            options.state_version,
        ));
        for entry in self.entries.lock().values() {
            if entry.info.may_see(options.scope) {
                entry.sender.send(frame.clone(), options.drop_if_slow);
            }
        }
        seq
    }

    /// Sends an event to one connection, without a `seq` (targeted events carry none).
    pub fn send_to(&self, conn_id: &str, event: &str, payload: &Value) -> bool {
        let sender = self.entries.lock().get(conn_id).map(|e| e.sender.clone());
        match sender {
            Some(sender) => {
                sender.send(event_frame(event, payload, None, None), false) == SendOutcome::Queued
            }
            None => false,
        }
    }

    /// Sends a raw frame (a late `res`) to one connection.
    pub fn send_raw(&self, conn_id: &str, frame: String) -> bool {
        let sender = self.entries.lock().get(conn_id).map(|e| e.sender.clone());
        sender.is_some_and(|s| s.send(frame, false) == SendOutcome::Queued)
    }

    /// Closes every connection with a code and reason.
    pub fn close_all(&self, code: u16, reason: &str) {
        for entry in self.entries.lock().values() {
            entry.sender.close(code, reason);
        }
    }

    /// Closes every connection of one device (after its removal or revocation).
    pub fn close_device(&self, device_id: &str, code: u16, reason: &str) -> usize {
        let mut closed = 0;
        for entry in self.entries.lock().values() {
            if entry.info.device_id.as_deref() == Some(device_id) {
                entry.sender.close(code, reason);
                closed += 1;
            }
        }
        closed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(conn: &str, scopes: &[&str]) -> ClientInfo {
        ClientInfo {
            conn_id: conn.into(),
            ip: "127.0.0.1".parse().expect("ip"),
            role: "operator".into(),
            scopes: scopes.iter().map(|s| s.to_string()).collect(),
            caps: vec![],
            protocol: 4,
            client_id: "test".into(),
            client_mode: "test".into(),
            client_version: "1".into(),
            platform: None,
            device_family: None,
            display_name: None,
            instance_id: None,
            device_id: None,
            connected_at_ms: 0,
            setup: None,
        }
    }

    #[test]
    fn broadcast_numbers_events_and_respects_scope() {
        let registry = ClientRegistry::new();
        let (a, mut rx_a, _) = ClientSender::channel(1 << 20);
        let (b, mut rx_b, _) = ClientSender::channel(1 << 20);
        registry.insert(info("a", &[scopes::READ]), a);
        registry.insert(info("b", &[]), b);
        let options = BroadcastOptions {
            scope: Some(scopes::READ),
            ..Default::default()
        };
        assert_eq!(registry.broadcast("chat", &json!({}), options), 1);
        assert_eq!(
            registry.broadcast("tick", &json!({}), BroadcastOptions::default()),
            2
        );
        let Ok(Outbound::Text(first)) = rx_a.try_recv() else {
            panic!("a got chat")
        };
        assert!(first.contains("\"seq\":1"));
        let Ok(Outbound::Text(only)) = rx_b.try_recv() else {
            panic!("b got tick")
        };
        assert!(only.contains("\"tick\"") && only.contains("\"seq\":2"));
    }

    #[test]
    fn a_broadcast_frame_is_one_allocation_however_many_clients_queue_it() {
        let registry = ClientRegistry::new();
        let mut receivers = Vec::new();
        for n in 0..3 {
            let (sender, rx, queued) = ClientSender::channel(1 << 20);
            registry.insert(info(&format!("c{n}"), &[]), sender);
            receivers.push((rx, queued));
        }
        let payload = json!({"presence": vec!["x".repeat(100); 100]});
        registry.broadcast("presence", &payload, BroadcastOptions::default());
        let mut addresses = Vec::new();
        for (rx, queued) in &mut receivers {
            let Ok(Outbound::Text(frame)) = rx.try_recv() else {
                panic!("every client got the frame")
            };
            // each client's budget still counts the frame's whole length
            assert_eq!(queued.load(Ordering::Acquire), frame.len());
            addresses.push(frame.as_ptr());
        }
        assert!(
            addresses.windows(2).all(|w| w[0] == w[1]),
            "the clients share one copy"
        );
    }

    #[test]
    fn presence_changes_in_a_burst_go_out_first_and_once_more_at_the_end() {
        let registry = ClientRegistry::new();
        let window = std::time::Duration::from_secs(60);
        assert_eq!(registry.presence_timing(window), PresenceTiming::Now);
        let PresenceTiming::Later(wait) = registry.presence_timing(window) else {
            panic!("the second change waits for the window's end")
        };
        assert!(wait <= window);
        for _ in 0..100 {
            assert_eq!(registry.presence_timing(window), PresenceTiming::AlreadyDue);
        }
        registry.presence_sent_later();
        // the folded broadcast opened a new window
        assert!(matches!(
            registry.presence_timing(window),
            PresenceTiming::Later(_)
        ));
        let quiet = ClientRegistry::new();
        let none = std::time::Duration::ZERO;
        assert_eq!(quiet.presence_timing(none), PresenceTiming::Now);
        assert_eq!(quiet.presence_timing(none), PresenceTiming::Now);
    }

    #[test]
    fn slow_consumer_drops_droppable_and_closes_otherwise() {
        let (sender, mut rx, _) = ClientSender::channel(10);
        assert_eq!(sender.send("12345678", false), SendOutcome::Queued);
        assert_eq!(sender.send("12345", true), SendOutcome::Dropped);
        assert_eq!(sender.send("12345", false), SendOutcome::Closed);
        assert!(matches!(rx.try_recv(), Ok(Outbound::Text(_))));
        match rx.try_recv() {
            Ok(Outbound::Close { code, reason }) => {
                assert_eq!(code, 1008);
                assert_eq!(reason, "slow consumer");
            }
            other => panic!("expected close, got {other:?}"),
        }
    }
}
