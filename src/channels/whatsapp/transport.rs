//! The socket under whatsapp-rust: one WebSocket per connection attempt
//! (`wss://web.whatsapp.com/ws/chat` with WhatsApp Web's `Origin`, or a
//! configured URL), opened through pincer's own client (`channels/ws.rs`:
//! rustls, bounded connect time and message size). The crate frames, encrypts
//! and reconnects; this file only moves bytes, through bounded queues both
//! ways: a full inbound queue stops reading the socket (TCP pushes back on
//! the server) and a full outbound queue makes a send wait.

use std::sync::Arc;

use futures_util::{SinkExt, StreamExt};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use whatsapp_rust::anyhow;
use whatsapp_rust::async_channel;
use whatsapp_rust::bytes::Bytes;
use whatsapp_rust::transport::{DisconnectReason, Transport, TransportEvent, TransportFactory};

use crate::channels::ws;

/// WhatsApp Web's chat socket.
pub const WHATSAPP_WS_URL: &str = "wss://web.whatsapp.com/ws/chat";
/// The `Origin` WhatsApp's server expects of a Web client.
const ORIGIN: &str = "https://web.whatsapp.com";
/// Largest WebSocket message accepted (one Noise frame is at most 16 MiB by its
/// 3-byte length; stanzas are far smaller, media goes over HTTPS).
pub const MAX_WS_MESSAGE_BYTES: usize = 4 * 1024 * 1024;
/// Messages read from the socket and not yet taken by the client.
pub const INBOUND_QUEUE: usize = 64;
/// Writes queued for the socket.
pub const OUTBOUND_QUEUE: usize = 64;

/// Opens a fresh WebSocket for each connection the client makes.
#[derive(Debug, Clone)]
pub struct WsTransportFactory {
    url: String,
}

impl WsTransportFactory {
    pub fn new(url: impl Into<String>) -> WsTransportFactory {
        WsTransportFactory { url: url.into() }
    }
}

enum Outgoing {
    Data(Bytes),
    Close,
}

struct WsTransport {
    outgoing: mpsc::Sender<Outgoing>,
}

#[whatsapp_rust::async_trait]
impl Transport for WsTransport {
    async fn send(&self, data: Bytes) -> anyhow::Result<()> {
        self.outgoing
            .send(Outgoing::Data(data))
            .await
            .map_err(|_| anyhow::anyhow!("the WhatsApp socket is closed"))
    }

    async fn disconnect(&self) {
        let _ = self.outgoing.send(Outgoing::Close).await;
    }
}

#[whatsapp_rust::async_trait]
impl TransportFactory for WsTransportFactory {
    async fn create_transport(
        &self,
    ) -> anyhow::Result<(Arc<dyn Transport>, async_channel::Receiver<TransportEvent>)> {
        let socket =
            ws::connect_with_headers(&self.url, MAX_WS_MESSAGE_BYTES, &[("Origin", ORIGIN)])
                .await
                .map_err(|e| anyhow::anyhow!("WhatsApp socket {}: {e}", self.url))?;
        let (mut sink, mut stream) = socket.split();
        let (events, events_rx) = async_channel::bounded(INBOUND_QUEUE);
        let (outgoing, mut outgoing_rx) = mpsc::channel::<Outgoing>(OUTBOUND_QUEUE);
        tokio::spawn(async move {
            while let Some(Outgoing::Data(data)) = outgoing_rx.recv().await {
                if sink.send(Message::Binary(data)).await.is_err() {
                    break;
                }
            }
            let _ = sink.close().await;
        });
        let _ = events.send(TransportEvent::Connected).await;
        tokio::spawn(async move {
            let reason = loop {
                match stream.next().await {
                    Some(Ok(Message::Binary(data))) => {
                        if events
                            .send(TransportEvent::DataReceived(data))
                            .await
                            .is_err()
                        {
                            return;
                        }
                    }
                    Some(Ok(Message::Close(frame))) => {
                        break DisconnectReason::ServerClose {
                            code: frame.as_ref().map(|f| u16::from(f.code)),
                            reason: frame.map(|f| f.reason.to_string()).unwrap_or_default(),
                        }
                    }
                    Some(Ok(Message::Text(_))) => {
                        break DisconnectReason::ReadError(
                            "the server sent a text message on the binary chat socket".into(),
                        )
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => break DisconnectReason::ReadError(e.to_string()),
                    None => break DisconnectReason::StreamEnded,
                }
            };
            let _ = events.send(TransportEvent::Disconnected(reason)).await;
        });
        Ok((Arc::new(WsTransport { outgoing }), events_rx))
    }
}
