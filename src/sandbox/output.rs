//! Capped capture of one output stream of a sandboxed command.
//!
//! A stream is kept as its first `head_bytes` and its last `tail_bytes`; everything between is
//! counted and dropped, so memory stays bounded however much the command prints. This file owns
//! the buffer and the async drain loop; it must not decide when a command is killed (the runner
//! does) and it never grows a buffer past its cap.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio_util::sync::CancellationToken;

/// Size of the buffer one read from a pipe fills.
const READ_CHUNK_BYTES: usize = 8 * 1024;

/// Per-stream caps on captured output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct OutputLimits {
    /// Bytes kept from the start of each stream.
    pub head_bytes: usize,
    /// Bytes kept from the end of each stream.
    pub tail_bytes: usize,
}

impl Default for OutputLimits {
    fn default() -> Self {
        Self {
            head_bytes: 32 * 1024,
            tail_bytes: 32 * 1024,
        }
    }
}

/// What was captured of one stream: head, tail and how much was dropped between them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CapturedStream {
    /// The first bytes of the stream (at most `head_bytes`).
    pub head: Vec<u8>,
    /// The last bytes of the stream (at most `tail_bytes`), empty when nothing was elided.
    pub tail: Vec<u8>,
    /// Bytes dropped between head and tail.
    pub elided_bytes: u64,
    /// Bytes the command wrote to the stream in total.
    pub total_bytes: u64,
}

impl CapturedStream {
    /// True when part of the stream was dropped.
    pub fn is_truncated(&self) -> bool {
        self.elided_bytes > 0
    }

    /// The stream as text (invalid UTF-8 replaced), with a marker where bytes were elided.
    pub fn to_text(&self) -> String {
        let mut text = String::from_utf8_lossy(&self.head).into_owned();
        if self.elided_bytes > 0 {
            let _ = write!(text, "\n[… {} bytes elided …]\n", self.elided_bytes);
        }
        text.push_str(&String::from_utf8_lossy(&self.tail));
        text
    }
}

/// Bounded head + tail buffer; `push` never lets memory grow past the caps.
#[derive(Debug)]
pub struct HeadTailBuffer {
    limits: OutputLimits,
    head: Vec<u8>,
    /// Ring of the last `tail_bytes` bytes after the head filled; `tail_start` is its oldest byte.
    tail: Vec<u8>,
    tail_start: usize,
    total_bytes: u64,
}

impl HeadTailBuffer {
    /// An empty buffer with the given caps.
    pub fn new(limits: OutputLimits) -> Self {
        Self {
            limits,
            head: Vec::with_capacity(limits.head_bytes.min(READ_CHUNK_BYTES)),
            tail: Vec::new(),
            tail_start: 0,
            total_bytes: 0,
        }
    }

    /// Appends bytes, keeping only the head and the most recent tail.
    pub fn push(&mut self, mut bytes: &[u8]) {
        self.total_bytes += bytes.len() as u64;
        let head_room = self.limits.head_bytes - self.head.len();
        if head_room > 0 {
            let taken = head_room.min(bytes.len());
            self.head.extend_from_slice(&bytes[..taken]);
            bytes = &bytes[taken..];
        }
        self.push_tail(bytes);
    }

    fn push_tail(&mut self, bytes: &[u8]) {
        let cap = self.limits.tail_bytes;
        if cap == 0 || bytes.is_empty() {
            return;
        }
        // Only the last `cap` bytes of this chunk can survive.
        let bytes = &bytes[bytes.len().saturating_sub(cap)..];
        for &byte in bytes {
            if self.tail.len() < cap {
                self.tail.push(byte);
            } else {
                self.tail[self.tail_start] = byte;
                self.tail_start = (self.tail_start + 1) % cap;
            }
        }
    }

    /// Bytes pushed so far.
    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    /// Finishes the capture.
    pub fn finish(self) -> CapturedStream {
        let mut tail = Vec::with_capacity(self.tail.len());
        tail.extend_from_slice(&self.tail[self.tail_start..]);
        tail.extend_from_slice(&self.tail[..self.tail_start]);
        let kept = (self.head.len() + tail.len()) as u64;
        CapturedStream {
            head: self.head,
            tail,
            elided_bytes: self.total_bytes - kept,
            total_bytes: self.total_bytes,
        }
    }
}

/// Reads a stream into a capped buffer until its end, a read error, or `stop` is cancelled;
/// the second value is true when the stream was cut off by `stop` before its end.
pub async fn drain<R: AsyncRead + Unpin>(
    mut reader: R,
    limits: OutputLimits,
    stop: CancellationToken,
) -> (CapturedStream, bool) {
    let mut buffer = HeadTailBuffer::new(limits);
    let mut chunk = [0u8; READ_CHUNK_BYTES];
    loop {
        tokio::select! {
            read = reader.read(&mut chunk) => match read {
                Ok(0) | Err(_) => return (buffer.finish(), false),
                Ok(read) => buffer.push(&chunk[..read]),
            },
            () = stop.cancelled() => return (buffer.finish(), true),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(head_bytes: usize, tail_bytes: usize) -> OutputLimits {
        OutputLimits {
            head_bytes,
            tail_bytes,
        }
    }

    #[test]
    fn short_output_is_kept_whole() {
        let mut buffer = HeadTailBuffer::new(limits(8, 8));
        buffer.push(b"hello");
        let captured = buffer.finish();
        assert_eq!(captured.head, b"hello");
        assert!(captured.tail.is_empty());
        assert_eq!(captured.elided_bytes, 0);
        assert_eq!(captured.to_text(), "hello");
    }

    #[test]
    fn output_between_head_and_tail_caps_is_kept_without_elision() {
        let mut buffer = HeadTailBuffer::new(limits(4, 4));
        buffer.push(b"abcdefg");
        let captured = buffer.finish();
        assert_eq!(captured.head, b"abcd");
        assert_eq!(captured.tail, b"efg");
        assert!(!captured.is_truncated());
        assert_eq!(captured.to_text(), "abcdefg");
    }

    #[test]
    fn long_output_keeps_head_and_tail_and_counts_the_middle() {
        let mut buffer = HeadTailBuffer::new(limits(3, 3));
        for chunk in [&b"STA"[..], b"RT-middle-", b"E", b"ND"] {
            buffer.push(chunk);
        }
        let captured = buffer.finish();
        assert_eq!(captured.head, b"STA");
        assert_eq!(captured.tail, b"END");
        assert_eq!(captured.total_bytes, 16);
        assert_eq!(captured.elided_bytes, 10);
        assert_eq!(captured.to_text(), "STA\n[… 10 bytes elided …]\nEND");
    }

    #[test]
    fn tail_ring_keeps_the_latest_bytes_across_many_small_pushes() {
        let mut buffer = HeadTailBuffer::new(limits(0, 5));
        for byte in b"0123456789abc" {
            buffer.push(&[*byte]);
        }
        let captured = buffer.finish();
        assert_eq!(captured.tail, b"89abc");
        assert_eq!(captured.elided_bytes, 8);
    }

    #[test]
    fn memory_stays_within_caps_for_large_input() {
        let mut buffer = HeadTailBuffer::new(limits(16, 16));
        let chunk = vec![b'x'; 64 * 1024];
        for _ in 0..64 {
            buffer.push(&chunk);
        }
        assert!(buffer.head.capacity() <= READ_CHUNK_BYTES);
        assert!(buffer.tail.len() <= 16);
        assert_eq!(buffer.total_bytes(), 64 * 64 * 1024);
    }

    #[tokio::test]
    async fn drain_reads_a_stream_to_its_end() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let (captured, cut_off) = drain(&data[..], limits(10, 10), CancellationToken::new()).await;
        assert!(!cut_off);
        assert_eq!(captured.total_bytes, 100_000);
        assert_eq!(captured.head, &data[..10]);
        assert_eq!(captured.tail, &data[data.len() - 10..]);
    }

    #[tokio::test]
    async fn drain_stops_when_cancelled_and_keeps_what_it_read() {
        let (mut writer, reader) = tokio::io::duplex(64);
        tokio::io::AsyncWriteExt::write_all(&mut writer, b"partial")
            .await
            .expect("write");
        let stop = CancellationToken::new();
        let task = tokio::spawn(drain(reader, limits(100, 100), stop.clone()));
        tokio::task::yield_now().await;
        stop.cancel();
        let (captured, cut_off) = task.await.expect("drain task");
        assert!(cut_off, "writer still open, so the stream was cut off");
        assert_eq!(captured.head, b"partial");
        drop(writer);
    }
}
