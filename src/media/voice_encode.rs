//! Voice notes made from uncompressed speech: a WAV file (16-bit PCM or
//! 32-bit float, any channel count, any rate) or raw 16-bit PCM (OpenAI's
//! `pcm`: 24 kHz mono little-endian) encoded to Ogg/Opus as RFC 7845 lays it
//! out, so Telegram's `sendVoice` takes it as push-to-talk:
//! - page 1 `OpusHead` (version 1, mono, pre-skip 312 samples at 48 kHz,
//!   the source's rate, gain 0, mapping family 0), page 2 `OpusTags`
//!   (vendor `pincer`, no comments), then audio pages of 20 ms packets, one
//!   second a page, each page's granule position the 48 kHz sample count of
//!   the packets it completes; the last page carries end-of-stream and a
//!   granule of pre-skip + the audio's length, trimming the padding;
//! - the encoder is opus-rs (a pure-Rust port of libopus: nothing to
//!   cross-build in C), mono VoIP at [`VOICE_BITRATE_BPS`]; a rate Opus does
//!   not take (8, 12, 16, 24 or 48 kHz) is resampled to 48 kHz (linear, for
//!   speech), channels are averaged to one.
//!
//! Streamed and bounded: the input is read [`READ_CHUNK_BYTES`] at a time
//! and at most one 20 ms frame of samples and one page of packets are held;
//! a recording longer than the caller's limit stops the encoding with a
//! clear error, and the output is written page by page. Blocking: run it off
//! the async workers.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;

use super::ogg::writer::page;

/// Opus bit rate of a voice note (Telegram's own voice notes are near it).
pub const VOICE_BITRATE_BPS: i32 = 32_000;
/// Encoder delay declared as the pre-skip (libopus's lookahead at 48 kHz:
/// 2.5 ms plus 4 ms of delay compensation).
pub const PRE_SKIP_48K: u64 = 312;
/// Bytes of input read at a time.
pub const READ_CHUNK_BYTES: usize = 64 * 1024;
/// Packets (20 ms each) per Ogg page: one second.
const PACKETS_PER_PAGE: usize = 50;
/// Largest Opus packet (RFC 6716) plus room.
const MAX_PACKET_BYTES: usize = 1500;
const OPUS_RATES: [u32; 5] = [8_000, 12_000, 16_000, 24_000, 48_000];
const SERIAL: u32 = 0x7069_6e63;

/// What the input is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PcmInput {
    /// A RIFF/WAVE file (its `fmt ` chunk says the rest).
    Wav,
    /// Headerless little-endian 16-bit PCM.
    Raw { rate: u32, channels: u16 },
}

/// What was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncodedVoice {
    pub duration_ms: u64,
    pub bytes: u64,
}

/// Why no voice note was made; the text is meant for the chat.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("the audio is not a WAV file pincer reads: {0}")]
    BadWav(String),
    #[error("the audio is longer than {max_seconds} s, the longest voice note pincer makes")]
    TooLong { max_seconds: u64 },
    #[error("the audio holds no sound")]
    Empty,
    #[error("the Opus encoder failed: {0}")]
    Encoder(String),
    #[error("the voice note could not be written: {0}")]
    Io(String),
}

fn io(error: std::io::Error) -> EncodeError {
    EncodeError::Io(error.to_string())
}

/// Whether `head` (a file's first bytes) is a RIFF/WAVE file.
pub fn is_wav(head: &[u8]) -> bool {
    head.len() >= 12 && &head[..4] == b"RIFF" && &head[8..12] == b"WAVE"
}

/// The sample layout of the audio data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Layout {
    rate: u32,
    channels: u16,
    float: bool,
    bytes_per_sample: usize,
    /// Bytes of audio data (`None`: to the end of the file, as a streamed
    /// WAV whose sizes were unknown says).
    data_bytes: Option<u64>,
}

/// Encodes `input` (of kind `kind`) into the Ogg/Opus file `out`.
pub fn encode_file(
    input: &Path,
    kind: PcmInput,
    out: &Path,
    max_seconds: u64,
) -> Result<EncodedVoice, EncodeError> {
    let reader = BufReader::with_capacity(READ_CHUNK_BYTES, File::open(input).map_err(io)?);
    let writer = BufWriter::new(File::create(out).map_err(io)?);
    let result = encode(reader, kind, writer, max_seconds);
    if result.is_err() {
        let _ = std::fs::remove_file(out);
    }
    result
}

/// [`encode_file`] from any reader to any writer (the fuzz target feeds it bytes in memory).
pub fn encode<R: Read, W: Write>(
    mut reader: R,
    kind: PcmInput,
    writer: W,
    max_seconds: u64,
) -> Result<EncodedVoice, EncodeError> {
    let layout = match kind {
        PcmInput::Wav => read_wav_header(&mut reader)?,
        PcmInput::Raw { rate, channels } => Layout {
            rate,
            channels: channels.max(1),
            float: false,
            bytes_per_sample: 2,
            data_bytes: None,
        },
    };
    encode_stream(reader, layout, writer, max_seconds)
}

fn read_exact_or<R: Read>(reader: &mut R, buf: &mut [u8], what: &str) -> Result<(), EncodeError> {
    reader
        .read_exact(buf)
        .map_err(|_| EncodeError::BadWav(format!("it ends inside {what}")))
}

/// Walks the RIFF chunks up to `data`, reading `fmt `.
fn read_wav_header<R: Read>(reader: &mut R) -> Result<Layout, EncodeError> {
    let mut riff = [0u8; 12];
    read_exact_or(reader, &mut riff, "its RIFF header")?;
    if !is_wav(&riff) {
        return Err(EncodeError::BadWav("no RIFF/WAVE header".into()));
    }
    let mut format: Option<(u16, u16, u32, u16)> = None;
    for _ in 0..64 {
        let mut chunk = [0u8; 8];
        read_exact_or(reader, &mut chunk, "a chunk header")?;
        let id = [chunk[0], chunk[1], chunk[2], chunk[3]];
        let size = u32::from_le_bytes([chunk[4], chunk[5], chunk[6], chunk[7]]);
        match &id {
            b"fmt " => {
                if !(16..=64).contains(&size) {
                    return Err(EncodeError::BadWav(format!("a fmt chunk of {size} bytes")));
                }
                let mut fmt = vec![0u8; size as usize + (size as usize & 1)];
                read_exact_or(reader, &mut fmt, "its fmt chunk")?;
                let mut tag = u16::from_le_bytes([fmt[0], fmt[1]]);
                let channels = u16::from_le_bytes([fmt[2], fmt[3]]);
                let rate = u32::from_le_bytes([fmt[4], fmt[5], fmt[6], fmt[7]]);
                let bits = u16::from_le_bytes([fmt[14], fmt[15]]);
                // WAVE_FORMAT_EXTENSIBLE: the sub-format's first two bytes.
                if tag == 0xfffe && fmt.len() >= 26 {
                    tag = u16::from_le_bytes([fmt[24], fmt[25]]);
                }
                format = Some((tag, channels, rate, bits));
            }
            b"data" => {
                let Some((tag, channels, rate, bits)) = format else {
                    return Err(EncodeError::BadWav(
                        "the data comes before its fmt chunk".into(),
                    ));
                };
                let (float, bytes_per_sample) = match (tag, bits) {
                    (1, 16) => (false, 2),
                    (3, 32) => (true, 4),
                    _ => {
                        return Err(EncodeError::BadWav(format!(
                            "format {tag} with {bits}-bit samples (pincer reads 16-bit PCM and 32-bit float)"
                        )))
                    }
                };
                if channels == 0 || !(4_000..=192_000).contains(&rate) {
                    return Err(EncodeError::BadWav(format!(
                        "{channels} channels at {rate} Hz"
                    )));
                }
                // Streamed WAVs write 0 or 0xffffffff when the size was unknown.
                let data_bytes = (size != 0 && size != u32::MAX).then_some(u64::from(size));
                return Ok(Layout {
                    rate,
                    channels,
                    float,
                    bytes_per_sample,
                    data_bytes,
                });
            }
            _ => {
                let skip = u64::from(size) + u64::from(size & 1);
                let skipped =
                    std::io::copy(&mut reader.take(skip), &mut std::io::sink()).map_err(io)?;
                if skipped < skip {
                    return Err(EncodeError::BadWav("it ends inside a chunk".into()));
                }
            }
        }
    }
    Err(EncodeError::BadWav("no data chunk".into()))
}

/// Linear resampling of a mono stream to 48 kHz, one sample at a time.
struct Resampler {
    /// Input samples per output sample.
    step: f64,
    /// Position of the next output sample, in input samples after `previous`.
    position: f64,
    previous: f32,
}

impl Resampler {
    fn push(&mut self, sample: f32, mut emit: impl FnMut(f32)) {
        while self.position <= 1.0 {
            let t = self.position as f32;
            emit(self.previous + (sample - self.previous) * t);
            self.position += self.step;
        }
        self.position -= 1.0;
        self.previous = sample;
    }
}

/// The Ogg/Opus writer: frames in, pages out.
struct OggOpus<W: Write> {
    out: W,
    encoder: opus_rs::OpusEncoder,
    frame: Vec<f32>,
    frame_len: usize,
    /// 48 kHz samples per packet.
    packet_48k: u64,
    packets: Vec<Vec<u8>>,
    granule: u64,
    sequence: u32,
    written: u64,
}

impl<W: Write> OggOpus<W> {
    fn new(mut out: W, encode_rate: u32, source_rate: u32) -> Result<Self, EncodeError> {
        let mut encoder =
            opus_rs::OpusEncoder::new(encode_rate as i32, 1, opus_rs::Application::Voip)
                .map_err(|e| EncodeError::Encoder(e.to_string()))?;
        encoder.bitrate_bps = VOICE_BITRATE_BPS;
        let mut head = b"OpusHead".to_vec();
        head.extend_from_slice(&[1, 1]);
        head.extend_from_slice(&(PRE_SKIP_48K as u16).to_le_bytes());
        head.extend_from_slice(&source_rate.to_le_bytes());
        head.extend_from_slice(&[0, 0, 0]);
        let mut tags = b"OpusTags".to_vec();
        tags.extend_from_slice(&6u32.to_le_bytes());
        tags.extend_from_slice(b"pincer");
        tags.extend_from_slice(&0u32.to_le_bytes());
        let first = page(SERIAL, 0, 0, 0x02, &[&head]);
        let second = page(SERIAL, 1, 0, 0, &[&tags]);
        out.write_all(&first).map_err(io)?;
        out.write_all(&second).map_err(io)?;
        let frame_len = (encode_rate / 50) as usize;
        Ok(OggOpus {
            out,
            encoder,
            frame: Vec::with_capacity(frame_len),
            frame_len,
            packet_48k: 960,
            packets: Vec::with_capacity(PACKETS_PER_PAGE),
            granule: 0,
            sequence: 2,
            written: (first.len() + second.len()) as u64,
        })
    }

    fn push(&mut self, sample: f32) -> Result<(), EncodeError> {
        self.frame.push(sample);
        if self.frame.len() == self.frame_len {
            self.encode_frame()?;
        }
        Ok(())
    }

    fn encode_frame(&mut self) -> Result<(), EncodeError> {
        let mut packet = vec![0u8; MAX_PACKET_BYTES];
        let n = self
            .encoder
            .encode(&self.frame, self.frame_len, &mut packet)
            .map_err(|e| EncodeError::Encoder(e.to_string()))?;
        packet.truncate(n);
        self.frame.clear();
        self.granule += self.packet_48k;
        self.packets.push(packet);
        if self.packets.len() == PACKETS_PER_PAGE {
            self.flush_page(self.granule, 0)?;
        }
        Ok(())
    }

    fn flush_page(&mut self, granule: u64, flags: u8) -> Result<(), EncodeError> {
        let packets: Vec<&[u8]> = self.packets.iter().map(Vec::as_slice).collect();
        let bytes = page(SERIAL, self.sequence, granule, flags, &packets);
        self.out.write_all(&bytes).map_err(io)?;
        self.written += bytes.len() as u64;
        self.sequence += 1;
        self.packets.clear();
        Ok(())
    }

    /// Pads with silence until the encoder's delay is flushed, then writes
    /// the last page with the trimmed granule position.
    fn finish(mut self, samples_48k: u64) -> Result<u64, EncodeError> {
        let end = PRE_SKIP_48K + samples_48k;
        while self.granule + (self.frame.len() as u64 * self.packet_48k / self.frame_len as u64)
            < end
            || !self.frame.is_empty()
        {
            self.push(0.0)?;
        }
        self.flush_page(end.min(self.granule), 0x04)?;
        self.out.flush().map_err(io)?;
        Ok(self.written)
    }
}

fn encode_stream<R: Read, W: Write>(
    mut reader: R,
    layout: Layout,
    out: W,
    max_seconds: u64,
) -> Result<EncodedVoice, EncodeError> {
    let native = OPUS_RATES.contains(&layout.rate);
    let encode_rate = if native { layout.rate } else { 48_000 };
    let mut ogg = OggOpus::new(out, encode_rate, layout.rate)?;
    ogg.packet_48k = 960;
    let mut resampler = (!native).then(|| Resampler {
        step: f64::from(layout.rate) / 48_000.0,
        position: 0.0,
        previous: 0.0,
    });
    let channels = usize::from(layout.channels);
    let frame_bytes = layout.bytes_per_sample * channels;
    let max_frames = max_seconds.saturating_mul(u64::from(layout.rate));
    let mut left = layout.data_bytes.unwrap_or(u64::MAX);
    let mut buf = vec![0u8; READ_CHUNK_BYTES - READ_CHUNK_BYTES % frame_bytes.max(1)];
    let mut carry = 0usize;
    let mut frames: u64 = 0;
    loop {
        let want = (buf.len() - carry).min(usize::try_from(left).unwrap_or(usize::MAX));
        if want == 0 && carry < frame_bytes {
            break;
        }
        let n = reader.read(&mut buf[carry..carry + want]).map_err(io)?;
        if n == 0 {
            break;
        }
        left = left.saturating_sub(n as u64);
        let have = carry + n;
        let whole = have - have % frame_bytes;
        for frame in buf[..whole].chunks_exact(frame_bytes) {
            frames += 1;
            if frames > max_frames {
                return Err(EncodeError::TooLong { max_seconds });
            }
            let mut sum = 0.0f32;
            for sample in frame.chunks_exact(layout.bytes_per_sample) {
                sum += if layout.float {
                    f32::from_le_bytes([sample[0], sample[1], sample[2], sample[3]])
                        .clamp(-1.0, 1.0)
                } else {
                    f32::from(i16::from_le_bytes([sample[0], sample[1]])) / 32_768.0
                };
            }
            let mono = sum / channels as f32;
            match resampler.as_mut() {
                Some(resampler) => {
                    let mut failed = None;
                    resampler.push(mono, |s| {
                        if failed.is_none() {
                            failed = ogg.push(s).err();
                        }
                    });
                    if let Some(error) = failed {
                        return Err(error);
                    }
                }
                None => ogg.push(mono)?,
            }
        }
        buf.copy_within(whole..have, 0);
        carry = have - whole;
    }
    if frames == 0 {
        return Err(EncodeError::Empty);
    }
    let samples_48k = frames * 48_000 / u64::from(layout.rate);
    let bytes = ogg.finish(samples_48k)?;
    Ok(EncodedVoice {
        duration_ms: frames * 1000 / u64::from(layout.rate),
        bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::media::ogg::{check_reader, OggCodec};

    /// `seconds` of a 440 Hz tone as a 16-bit WAV at `rate` with `channels`.
    fn tone_wav(rate: u32, channels: u16, seconds: f64, streamed: bool) -> Vec<u8> {
        let frames = (f64::from(rate) * seconds) as u32;
        let data_len = frames * 2 * u32::from(channels);
        let mut wav = b"RIFF".to_vec();
        wav.extend_from_slice(&(if streamed { u32::MAX } else { 36 + data_len }).to_le_bytes());
        wav.extend_from_slice(b"WAVEfmt ");
        wav.extend_from_slice(&16u32.to_le_bytes());
        wav.extend_from_slice(&1u16.to_le_bytes());
        wav.extend_from_slice(&channels.to_le_bytes());
        wav.extend_from_slice(&rate.to_le_bytes());
        wav.extend_from_slice(&(rate * 2 * u32::from(channels)).to_le_bytes());
        wav.extend_from_slice(&(2 * channels).to_le_bytes());
        wav.extend_from_slice(&16u16.to_le_bytes());
        wav.extend_from_slice(b"LIST");
        wav.extend_from_slice(&4u32.to_le_bytes());
        wav.extend_from_slice(b"INFO");
        wav.extend_from_slice(b"data");
        wav.extend_from_slice(&(if streamed { u32::MAX } else { data_len }).to_le_bytes());
        for i in 0..frames {
            let t = f64::from(i) / f64::from(rate);
            let s = ((t * 440.0 * std::f64::consts::TAU).sin() * 12_000.0) as i16;
            for _ in 0..channels {
                wav.extend_from_slice(&s.to_le_bytes());
            }
        }
        wav
    }

    fn encode_bytes(wav: &[u8], max_seconds: u64) -> Result<(Vec<u8>, EncodedVoice), EncodeError> {
        let layout = read_wav_header(&mut &wav[..])?;
        let header_len = wav.windows(4).position(|w| w == b"data").expect("data") + 8;
        let mut out = Vec::new();
        let done = encode_stream(&wav[header_len..], layout, &mut out, max_seconds)?;
        Ok((out, done))
    }

    /// The Opus packets of an Ogg stream after its two header pages.
    fn packets(ogg: &[u8]) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut at = 0;
        let mut page_no = 0;
        while at + 27 <= ogg.len() {
            let segments = usize::from(ogg[at + 26]);
            let lacing = &ogg[at + 27..at + 27 + segments];
            let mut body = at + 27 + segments;
            let mut packet = Vec::new();
            for &l in lacing {
                packet.extend_from_slice(&ogg[body..body + usize::from(l)]);
                body += usize::from(l);
                if l < 255 {
                    if page_no >= 2 {
                        out.push(std::mem::take(&mut packet));
                    }
                    packet.clear();
                }
            }
            at = body;
            page_no += 1;
        }
        out
    }

    #[test]
    fn a_wav_tone_becomes_a_sound_ogg_opus_voice_note() {
        for (rate, channels, streamed) in [(24_000, 1, false), (44_100, 2, true), (16_000, 1, true)]
        {
            let wav = tone_wav(rate, channels, 1.5, streamed);
            let (ogg, done) = encode_bytes(&wav, 60).expect("encoded");
            assert_eq!(done.duration_ms, 1500, "{rate}");
            let info = check_reader(ogg.as_slice()).expect("a sound Ogg stream");
            assert_eq!(info.codec, OggCodec::Opus);
            assert!(info.ended, "end-of-stream on the last page");
            assert_eq!(
                info.duration_ms,
                Some(1500),
                "granule - pre-skip at {rate} Hz"
            );
            assert_eq!(&ogg[28..36], b"OpusHead");
            assert_eq!(u16::from_le_bytes([ogg[38], ogg[39]]), 312, "pre-skip");
            assert_eq!(
                u32::from_le_bytes([ogg[40], ogg[41], ogg[42], ogg[43]]),
                rate
            );
            // Decoded, the tone is there: real audio, not filler.
            let mut decoder = opus_rs::OpusDecoder::new(48_000, 1).expect("decoder");
            let mut pcm = vec![0f32; 960];
            let mut energy = 0.0f64;
            let mut count = 0usize;
            for packet in packets(&ogg) {
                let n = decoder.decode(&packet, 960, &mut pcm).expect("decodes");
                energy += pcm[..n]
                    .iter()
                    .map(|s| f64::from(*s) * f64::from(*s))
                    .sum::<f64>();
                count += n;
            }
            let rms = (energy / count as f64).sqrt();
            assert!(
                rms > 0.1 && rms < 0.5,
                "a tone of amplitude 0.37 (RMS 0.26): {rms} at {rate}"
            );
        }
    }

    #[test]
    fn too_long_bad_and_empty_audio_are_refused_by_name() {
        let wav = tone_wav(8_000, 1, 3.0, false);
        assert_eq!(
            encode_bytes(&wav, 2).map(|_| ()),
            Err(EncodeError::TooLong { max_seconds: 2 })
        );
        let mut mp3ish = b"RIFF\0\0\0\0WAVEfmt \x10\0\0\0\x55\0\x01\0".to_vec();
        mp3ish.extend_from_slice(&[0x40, 0x1f, 0, 0, 0, 0, 0, 0, 2, 0, 16, 0]);
        mp3ish.extend_from_slice(b"data\x04\0\0\0\0\0\0\0");
        let error = read_wav_header(&mut &mp3ish[..]).expect_err("format 85");
        assert!(error.to_string().contains("format 85"), "{error}");
        let empty = tone_wav(8_000, 1, 0.0, false);
        assert_eq!(encode_bytes(&empty, 2).map(|_| ()), Err(EncodeError::Empty));
        assert!(read_wav_header(&mut &b"ID3\x04 mp3"[..]).is_err());
    }

    #[test]
    fn raw_pcm_is_read_as_told() {
        let wav = tone_wav(24_000, 1, 0.5, false);
        let header_len = wav.windows(4).position(|w| w == b"data").expect("data") + 8;
        let dir = tempfile::tempdir().expect("tempdir");
        let raw = dir.path().join("speech.pcm");
        std::fs::write(&raw, &wav[header_len..]).expect("raw");
        let out = dir.path().join("speech.ogg");
        let done = encode_file(
            &raw,
            PcmInput::Raw {
                rate: 24_000,
                channels: 1,
            },
            &out,
            60,
        )
        .expect("encoded");
        assert_eq!(done.duration_ms, 500);
        let info = crate::media::ogg::check(&out).expect("sound");
        assert_eq!(info.duration_ms, Some(500));
        assert_eq!(done.bytes, std::fs::metadata(&out).expect("meta").len());
    }
}
