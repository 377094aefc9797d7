//! Ogg files (Telegram voice notes are Ogg/Opus) checked without decoding
//! audio: every page's header, length and CRC are walked with a fixed buffer,
//! so a truncated or damaged file is named before it is uploaded anywhere,
//! and the duration comes from the last page's granule position (Opus runs at
//! 48 kHz, less the pre-skip its header declares; Vorbis at its stated rate).

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

/// Bytes of the file read at a time.
const READ_BUFFER_BYTES: usize = 64 * 1024;
/// Length of a page header before its segment table.
const PAGE_HEADER_BYTES: usize = 27;
const FLAG_END_OF_STREAM: u8 = 0x04;

/// The audio codec of the first logical stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OggCodec {
    Opus,
    Vorbis,
    Other,
}

/// What the walk found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OggInfo {
    pub codec: OggCodec,
    pub pages: u64,
    /// Known for Opus and Vorbis.
    pub duration_ms: Option<u64>,
    /// The last page carries the end-of-stream flag.
    pub ended: bool,
}

/// Why a file is not a sound Ogg stream; the text is meant for the user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OggError {
    #[error("the file is not an Ogg stream")]
    NotOgg,
    #[error("the recording is truncated: it ends inside page {page}, at byte {at}")]
    Truncated { page: u64, at: u64 },
    #[error("the recording is damaged: page {page} at byte {at} {what}")]
    Damaged {
        page: u64,
        at: u64,
        what: &'static str,
    },
    #[error("the recording could not be read: {0}")]
    Io(String),
}

/// Ogg's CRC-32 (polynomial 0x04c11db7, not reflected, initial 0).
fn crc_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    for (i, slot) in table.iter_mut().enumerate() {
        let mut r = (i as u32) << 24;
        for _ in 0..8 {
            r = if r & 0x8000_0000 != 0 {
                (r << 1) ^ 0x04c1_1db7
            } else {
                r << 1
            };
        }
        *slot = r;
    }
    table
}

fn crc_update(table: &[u32; 256], crc: u32, bytes: &[u8]) -> u32 {
    bytes.iter().fold(crc, |crc, &b| {
        (crc << 8) ^ table[(((crc >> 24) as u8) ^ b) as usize]
    })
}

/// Reads exactly `buf.len()` bytes; `Ok(false)` at a clean end of file
/// before the first byte, `Err(got)` with the bytes read when it ends inside.
fn fill<R: Read>(reader: &mut R, buf: &mut [u8]) -> Result<bool, Result<usize, String>> {
    let mut got = 0;
    while got < buf.len() {
        match reader.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => return Err(Ok(got)),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Err(e.to_string())),
        }
    }
    Ok(true)
}

/// Walks every page of the Ogg file at `path` (blocking).
pub fn check(path: &Path) -> Result<OggInfo, OggError> {
    let file = File::open(path).map_err(|e| OggError::Io(e.to_string()))?;
    check_reader(BufReader::with_capacity(READ_BUFFER_BYTES, file))
}

/// As [`check`], over any reader.
pub fn check_reader<R: Read>(mut reader: R) -> Result<OggInfo, OggError> {
    let table = crc_table();
    let mut at: u64 = 0;
    let mut pages: u64 = 0;
    let mut codec = OggCodec::Other;
    let mut first_serial = None;
    let (mut pre_skip, mut rate) = (0u64, 48_000u64);
    let mut last_granule: Option<u64> = None;
    let mut ended = false;
    let mut body = vec![0u8; 255 * 255];
    loop {
        let mut header = [0u8; PAGE_HEADER_BYTES];
        match fill(&mut reader, &mut header) {
            Ok(true) => {}
            Ok(false) if pages > 0 => break,
            Ok(false) => return Err(OggError::NotOgg),
            Err(Ok(_)) if pages == 0 => return Err(OggError::NotOgg),
            Err(Ok(_)) => {
                return Err(OggError::Truncated {
                    page: pages + 1,
                    at,
                })
            }
            Err(Err(e)) => return Err(OggError::Io(e)),
        }
        if &header[..4] != b"OggS" {
            if pages == 0 {
                return Err(OggError::NotOgg);
            }
            return Err(OggError::Damaged {
                page: pages + 1,
                at,
                what: "does not start with \"OggS\"",
            });
        }
        if header[4] != 0 {
            return Err(OggError::Damaged {
                page: pages + 1,
                at,
                what: "has an unknown version",
            });
        }
        let flags = header[5];
        let granule = u64::from_le_bytes(header[6..14].try_into().unwrap_or([0; 8]));
        let serial = u32::from_le_bytes(header[14..18].try_into().unwrap_or([0; 4]));
        let stored_crc = u32::from_le_bytes(header[22..26].try_into().unwrap_or([0; 4]));
        let segments = usize::from(header[26]);
        let mut table_bytes = [0u8; 255];
        let lacing = &mut table_bytes[..segments];
        match fill(&mut reader, lacing) {
            Ok(true) => {}
            Ok(false) | Err(Ok(_)) => {
                return Err(OggError::Truncated {
                    page: pages + 1,
                    at,
                })
            }
            Err(Err(e)) => return Err(OggError::Io(e)),
        }
        let body_len: usize = lacing.iter().map(|&l| usize::from(l)).sum();
        let data = &mut body[..body_len];
        match fill(&mut reader, data) {
            Ok(true) => {}
            Ok(false) if body_len == 0 => {}
            Ok(false) | Err(Ok(_)) => {
                return Err(OggError::Truncated {
                    page: pages + 1,
                    at,
                })
            }
            Err(Err(e)) => return Err(OggError::Io(e)),
        }
        let mut crc_header = header;
        crc_header[22..26].copy_from_slice(&[0; 4]);
        let mut crc = crc_update(&table, 0, &crc_header);
        crc = crc_update(&table, crc, lacing);
        crc = crc_update(&table, crc, data);
        if crc != stored_crc {
            return Err(OggError::Damaged {
                page: pages + 1,
                at,
                what: "fails its checksum",
            });
        }
        if pages == 0 {
            first_serial = Some(serial);
            if data.starts_with(b"OpusHead") && data.len() >= 12 {
                codec = OggCodec::Opus;
                pre_skip = u64::from(u16::from_le_bytes([data[10], data[11]]));
            } else if data.starts_with(b"\x01vorbis") && data.len() >= 16 {
                codec = OggCodec::Vorbis;
                rate = u64::from(u32::from_le_bytes([data[12], data[13], data[14], data[15]]));
            }
        }
        if Some(serial) == first_serial && granule != u64::MAX {
            last_granule = Some(granule);
            ended = flags & FLAG_END_OF_STREAM != 0;
        }
        pages += 1;
        at += (PAGE_HEADER_BYTES + segments + body_len) as u64;
    }
    let duration_ms = match codec {
        OggCodec::Opus => last_granule.map(|g| g.saturating_sub(pre_skip) * 1000 / 48_000),
        OggCodec::Vorbis if rate > 0 => last_granule.map(|g| g * 1000 / rate),
        _ => None,
    };
    Ok(OggInfo {
        codec,
        pages,
        duration_ms,
        ended,
    })
}

/// Writes Ogg pages: used by tests and the benchmark to make voice notes.
pub mod writer {
    /// One page with `packets` (each under 255 × 255 bytes in all).
    pub fn page(serial: u32, sequence: u32, granule: u64, flags: u8, packets: &[&[u8]]) -> Vec<u8> {
        let mut lacing = Vec::new();
        for packet in packets {
            let mut left = packet.len();
            loop {
                let n = left.min(255);
                lacing.push(n as u8);
                left -= n;
                if n < 255 {
                    break;
                }
            }
        }
        let mut page = b"OggS".to_vec();
        page.push(0);
        page.push(flags);
        page.extend_from_slice(&granule.to_le_bytes());
        page.extend_from_slice(&serial.to_le_bytes());
        page.extend_from_slice(&sequence.to_le_bytes());
        page.extend_from_slice(&[0; 4]);
        page.push(lacing.len() as u8);
        page.extend_from_slice(&lacing);
        for packet in packets {
            page.extend_from_slice(packet);
        }
        let table = super::crc_table();
        let crc = super::crc_update(&table, 0, &page);
        page[22..26].copy_from_slice(&crc.to_le_bytes());
        page
    }

    /// An Ogg/Opus stream of `seconds` of 20 ms packets of `packet_bytes`
    /// bytes each (content not real speech), written with `emit` page by
    /// page (one second a page).
    pub fn opus_stream(seconds: u64, packet_bytes: usize, mut emit: impl FnMut(&[u8])) {
        let serial = 0x5049_4e43;
        let mut head = b"OpusHead".to_vec();
        head.extend_from_slice(&[1, 1]);
        head.extend_from_slice(&312u16.to_le_bytes());
        head.extend_from_slice(&48_000u32.to_le_bytes());
        head.extend_from_slice(&[0, 0, 0]);
        emit(&page(serial, 0, 0, 0x02, &[&head]));
        let mut tags = b"OpusTags".to_vec();
        tags.extend_from_slice(&6u32.to_le_bytes());
        tags.extend_from_slice(b"pincer");
        tags.extend_from_slice(&0u32.to_le_bytes());
        emit(&page(serial, 1, 0, 0, &[&tags]));
        // A 20 ms SILK frame's TOC byte, then filler.
        let mut packet = vec![0x0bu8];
        packet.resize(packet_bytes.max(1), 0x5a);
        let packets: Vec<&[u8]> = (0..50).map(|_| packet.as_slice()).collect();
        for second in 0..seconds {
            let last = second + 1 == seconds;
            let granule = 312 + (second + 1) * 48_000;
            let flags = if last { 0x04 } else { 0 };
            emit(&page(serial, 2 + second as u32, granule, flags, &packets));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn voice_note(seconds: u64) -> Vec<u8> {
        let mut bytes = Vec::new();
        writer::opus_stream(seconds, 40, |page| bytes.extend_from_slice(page));
        bytes
    }

    #[test]
    fn a_whole_voice_note_is_measured() {
        let info = check_reader(voice_note(600).as_slice()).expect("sound");
        assert_eq!(info.codec, OggCodec::Opus);
        assert_eq!(info.pages, 602);
        assert_eq!(info.duration_ms, Some(600_000));
        assert!(info.ended);
    }

    #[test]
    fn a_truncated_voice_note_is_named() {
        let bytes = voice_note(5);
        let cut = &bytes[..bytes.len() - 100];
        let error = check_reader(cut).expect_err("truncated");
        assert!(
            matches!(error, OggError::Truncated { page: 7, .. }),
            "{error}"
        );
        assert!(error.to_string().contains("truncated"), "{error}");
    }

    #[test]
    fn damage_and_foreign_files_are_named() {
        let mut bytes = voice_note(2);
        let last = bytes.len() - 10;
        bytes[last] ^= 0xff;
        let error = check_reader(bytes.as_slice()).expect_err("damaged");
        assert!(error.to_string().contains("checksum"), "{error}");
        assert_eq!(check_reader(&b"ID3\x03 an mp3"[..]), Err(OggError::NotOgg));
        assert_eq!(check_reader(&b""[..]), Err(OggError::NotOgg));
    }
}
