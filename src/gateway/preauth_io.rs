//! A byte budget on a socket before its handshake completes.
//!
//! Until the client is authenticated, at most `budget` bytes are read from the
//! socket; past that the read fails and the connection is closed with 1009
//! `preauth payload too large`. This bounds what an unauthenticated peer can
//! make the gateway buffer, whatever frame size it announces.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Shared switches of one connection's budget.
#[derive(Debug, Default)]
pub struct PreauthGate {
    authenticated: AtomicBool,
    overflowed: AtomicBool,
    read_bytes: AtomicUsize,
}

impl PreauthGate {
    /// Lifts the budget (after `hello-ok`).
    pub fn open(&self) {
        self.authenticated.store(true, Ordering::Release);
    }

    /// Whether the budget was exceeded.
    pub fn overflowed(&self) -> bool {
        self.overflowed.load(Ordering::Acquire)
    }
}

/// A stream whose reads obey a [`PreauthGate`].
pub struct PreauthLimitedIo<S> {
    inner: S,
    gate: Arc<PreauthGate>,
    budget: usize,
}

impl<S> PreauthLimitedIo<S> {
    pub fn new(inner: S, budget: usize) -> (Self, Arc<PreauthGate>) {
        let gate = Arc::new(PreauthGate::default());
        (
            PreauthLimitedIo {
                inner,
                gate: gate.clone(),
                budget,
            },
            gate,
        )
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for PreauthLimitedIo<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.gate.authenticated.load(Ordering::Acquire) {
            return Pin::new(&mut self.inner).poll_read(cx, buf);
        }
        let used = self.gate.read_bytes.load(Ordering::Acquire);
        if used >= self.budget {
            self.gate.overflowed.store(true, Ordering::Release);
            return Poll::Ready(Err(io::Error::other("preauth payload too large")));
        }
        let allowed = (self.budget - used).min(buf.remaining());
        let mut limited = buf.take(allowed);
        let result = Pin::new(&mut self.inner).poll_read(cx, &mut limited);
        let filled = limited.filled().len();
        // SAFETY: `limited` wrote `filled` initialised bytes into `buf`'s unfilled part.
        unsafe { buf.assume_init(filled) };
        buf.advance(filled);
        self.gate.read_bytes.fetch_add(filled, Ordering::AcqRel);
        result
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for PreauthLimitedIo<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, data)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn reads_stop_at_the_budget_until_opened() {
        let (client, server) = tokio::io::duplex(1 << 16);
        let (mut limited, gate) = PreauthLimitedIo::new(server, 10);
        let mut client = client;
        client.write_all(&[1u8; 30]).await.expect("write");
        let mut buf = [0u8; 30];
        let n = limited.read(&mut buf).await.expect("first read");
        assert_eq!(n, 10);
        assert!(limited.read(&mut buf).await.is_err());
        assert!(gate.overflowed());
        gate.open();
        let n = limited.read(&mut buf).await.expect("after open");
        assert_eq!(n, 20);
    }
}
