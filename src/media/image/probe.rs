//! An image's format and size from its header alone: PNG's `IHDR`, JPEG's
//! start-of-frame segment (found by skipping segments by their lengths, at
//! most [`MAX_HEADER_SCAN_BYTES`] into the file), WebP's `VP8`/`VP8L`/`VP8X`
//! chunk, GIF's logical screen. Nothing is decoded: a 50,000 × 50,000 PNG is
//! measured from its first 33 bytes and refused before any pixel exists.

use std::io::{Read, Seek, SeekFrom};

use super::ImageError;

/// How far into a JPEG the start-of-frame segment is looked for (EXIF and
/// ICC segments come first; each is at most 64 KiB).
pub const MAX_HEADER_SCAN_BYTES: u64 = 2 * 1024 * 1024;

/// The image formats pincer recognises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageFormat {
    Png,
    Jpeg,
    Webp,
    Gif,
}

impl ImageFormat {
    pub fn name(self) -> &'static str {
        match self {
            ImageFormat::Png => "PNG",
            ImageFormat::Jpeg => "JPEG",
            ImageFormat::Webp => "WebP",
            ImageFormat::Gif => "GIF",
        }
    }

    pub fn mime(self) -> &'static str {
        match self {
            ImageFormat::Png => "image/png",
            ImageFormat::Jpeg => "image/jpeg",
            ImageFormat::Webp => "image/webp",
            ImageFormat::Gif => "image/gif",
        }
    }
}

/// What the header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageHeader {
    pub format: ImageFormat,
    pub width: u32,
    pub height: u32,
    /// A progressive JPEG or an interlaced (Adam7) PNG: decoders must hold
    /// the whole image's data before producing a row.
    pub progressive: bool,
    /// Colour components (JPEG: 1, 3 or 4).
    pub components: u8,
    /// The EXIF orientation (1–8; 1 when there is none).
    pub orientation: u16,
}

impl ImageHeader {
    pub fn pixels(&self) -> u64 {
        u64::from(self.width) * u64::from(self.height)
    }
}

fn corrupt(what: &str) -> ImageError {
    ImageError::Corrupt(what.to_string())
}

fn read_exact<R: Read>(reader: &mut R, buf: &mut [u8], what: &str) -> Result<(), ImageError> {
    reader.read_exact(buf).map_err(|error| match error.kind() {
        std::io::ErrorKind::UnexpectedEof => corrupt(&format!("the file ends inside its {what}")),
        _ => ImageError::Io(error.to_string()),
    })
}

/// Reads the header of the image in `reader` (positioned at its start).
pub fn probe<R: Read + Seek>(reader: &mut R) -> Result<ImageHeader, ImageError> {
    let mut head = [0u8; 12];
    let got = read_up_to(reader, &mut head)?;
    let head = &head[..got];
    reader
        .seek(SeekFrom::Start(0))
        .map_err(|e| ImageError::Io(e.to_string()))?;
    if head.starts_with(b"\x89PNG\r\n\x1a\n") {
        probe_png(reader)
    } else if head.starts_with(&[0xff, 0xd8]) {
        probe_jpeg(reader)
    } else if head.starts_with(b"RIFF") && head.get(8..12) == Some(b"WEBP") {
        probe_webp(reader)
    } else if head.starts_with(b"GIF87a") || head.starts_with(b"GIF89a") {
        probe_gif(reader)
    } else {
        Err(ImageError::NotAnImage)
    }
}

fn read_up_to<R: Read>(reader: &mut R, buf: &mut [u8]) -> Result<usize, ImageError> {
    let mut got = 0;
    while got < buf.len() {
        match reader.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(ImageError::Io(e.to_string())),
        }
    }
    Ok(got)
}

fn be32(bytes: &[u8]) -> u32 {
    u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

fn probe_png<R: Read>(reader: &mut R) -> Result<ImageHeader, ImageError> {
    // Signature (8), chunk length (4), "IHDR" (4), then 13 bytes of IHDR.
    let mut buf = [0u8; 29];
    read_exact(reader, &mut buf, "PNG header")?;
    if &buf[12..16] != b"IHDR" || be32(&buf[8..12]) != 13 {
        return Err(corrupt("the PNG does not start with its IHDR chunk"));
    }
    let (width, height) = (be32(&buf[16..20]), be32(&buf[20..24]));
    if width == 0 || height == 0 {
        return Err(corrupt("the PNG says it has no pixels"));
    }
    Ok(ImageHeader {
        format: ImageFormat::Png,
        width,
        height,
        progressive: buf[28] == 1,
        components: match buf[25] {
            0 => 1,
            4 => 2,
            6 => 4,
            _ => 3,
        },
        orientation: 1,
    })
}

fn probe_jpeg<R: Read + Seek>(reader: &mut R) -> Result<ImageHeader, ImageError> {
    let mut pos: u64 = 2;
    let mut orientation = 1;
    reader
        .seek(SeekFrom::Start(pos))
        .map_err(|e| ImageError::Io(e.to_string()))?;
    while pos < MAX_HEADER_SCAN_BYTES {
        let mut marker = [0u8; 2];
        read_exact(reader, &mut marker, "JPEG header")?;
        pos += 2;
        if marker[0] != 0xff {
            return Err(corrupt("the JPEG's segments are malformed"));
        }
        let code = marker[1];
        match code {
            // Fill bytes before a marker.
            0xff => {
                reader
                    .seek(SeekFrom::Current(-1))
                    .map_err(|e| ImageError::Io(e.to_string()))?;
                pos -= 1;
                continue;
            }
            // Markers without a length.
            0x01 | 0xd0..=0xd7 => continue,
            0xd9 | 0xda => return Err(corrupt("the JPEG has no frame header")),
            _ => {}
        }
        let mut len = [0u8; 2];
        read_exact(reader, &mut len, "JPEG header")?;
        let len = u16::from_be_bytes(len);
        if len < 2 {
            return Err(corrupt("the JPEG's segments are malformed"));
        }
        let is_frame = matches!(code, 0xc0..=0xcf) && !matches!(code, 0xc4 | 0xc8 | 0xcc);
        if is_frame {
            let mut frame = [0u8; 6];
            read_exact(reader, &mut frame, "JPEG frame header")?;
            let height = u32::from(u16::from_be_bytes([frame[1], frame[2]]));
            let width = u32::from(u16::from_be_bytes([frame[3], frame[4]]));
            if width == 0 || height == 0 {
                return Err(corrupt("the JPEG says it has no pixels"));
            }
            return Ok(ImageHeader {
                format: ImageFormat::Jpeg,
                width,
                height,
                progressive: matches!(code, 0xc2 | 0xc6 | 0xca | 0xce),
                components: frame[5],
                orientation,
            });
        }
        if code == 0xe1 {
            let mut segment = vec![0u8; usize::from(len) - 2];
            read_exact(reader, &mut segment, "JPEG EXIF segment")?;
            if segment.starts_with(b"Exif\0\0") {
                orientation = super::resample::exif_orientation(&segment);
            }
            pos += u64::from(len);
            continue;
        }
        reader
            .seek(SeekFrom::Current(i64::from(len) - 2))
            .map_err(|e| ImageError::Io(e.to_string()))?;
        pos += u64::from(len);
    }
    Err(corrupt(
        "the JPEG's frame header was not found in its first 2 MiB",
    ))
}

fn probe_webp<R: Read>(reader: &mut R) -> Result<ImageHeader, ImageError> {
    // "RIFF" size "WEBP", then the first chunk's fourcc and size, then data.
    let mut buf = [0u8; 30];
    read_exact(reader, &mut buf, "WebP header")?;
    let chunk = &buf[12..16];
    let data = &buf[20..];
    let (width, height) = match chunk {
        b"VP8 " => {
            if data[3..6] != [0x9d, 0x01, 0x2a] {
                return Err(corrupt("the WebP's VP8 frame header is malformed"));
            }
            let w = u32::from(u16::from_le_bytes([data[6], data[7]]) & 0x3fff);
            let h = u32::from(u16::from_le_bytes([data[8], data[9]]) & 0x3fff);
            (w, h)
        }
        b"VP8L" => {
            if data[0] != 0x2f {
                return Err(corrupt("the WebP's lossless header is malformed"));
            }
            let bits = u32::from_le_bytes([data[1], data[2], data[3], data[4]]);
            ((bits & 0x3fff) + 1, ((bits >> 14) & 0x3fff) + 1)
        }
        b"VP8X" => {
            let w = u32::from_le_bytes([data[4], data[5], data[6], 0]) + 1;
            let h = u32::from_le_bytes([data[7], data[8], data[9], 0]) + 1;
            (w, h)
        }
        _ => return Err(corrupt("the WebP has no image chunk")),
    };
    if width == 0 || height == 0 {
        return Err(corrupt("the WebP says it has no pixels"));
    }
    Ok(ImageHeader {
        format: ImageFormat::Webp,
        width,
        height,
        progressive: false,
        components: 4,
        orientation: 1,
    })
}

fn probe_gif<R: Read>(reader: &mut R) -> Result<ImageHeader, ImageError> {
    let mut buf = [0u8; 10];
    read_exact(reader, &mut buf, "GIF header")?;
    Ok(ImageHeader {
        format: ImageFormat::Gif,
        width: u32::from(u16::from_le_bytes([buf[6], buf[7]])),
        height: u32::from(u16::from_le_bytes([buf[8], buf[9]])),
        progressive: false,
        components: 3,
        orientation: 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    /// A PNG's signature and IHDR chunk (no image data follows).
    pub fn png_header(width: u32, height: u32, interlaced: bool) -> Vec<u8> {
        let mut bytes = b"\x89PNG\r\n\x1a\n".to_vec();
        bytes.extend_from_slice(&13u32.to_be_bytes());
        bytes.extend_from_slice(b"IHDR");
        bytes.extend_from_slice(&width.to_be_bytes());
        bytes.extend_from_slice(&height.to_be_bytes());
        bytes.extend_from_slice(&[8, 2, 0, 0, u8::from(interlaced)]);
        bytes.extend_from_slice(&[0, 0, 0, 0]);
        bytes
    }

    #[test]
    fn a_png_bomb_is_measured_from_its_header() {
        let header = probe(&mut Cursor::new(png_header(50_000, 50_000, false))).expect("probed");
        assert_eq!(header.format, ImageFormat::Png);
        assert_eq!(header.pixels(), 2_500_000_000);
        assert!(!header.progressive);
    }

    #[test]
    fn jpeg_frames_are_found_past_other_segments() {
        let mut jpeg = vec![0xff, 0xd8];
        // An APP1 segment of 100 bytes, then a progressive frame header.
        jpeg.extend_from_slice(&[0xff, 0xe1, 0, 100]);
        jpeg.extend(std::iter::repeat_n(0u8, 98));
        jpeg.extend_from_slice(&[0xff, 0xc2, 0, 17, 8, 0x0b, 0xb8, 0x0f, 0xa0, 3]);
        jpeg.extend(std::iter::repeat_n(0u8, 9));
        let header = probe(&mut Cursor::new(jpeg)).expect("probed");
        assert_eq!((header.width, header.height), (4000, 3000));
        assert!(header.progressive);
        assert_eq!(header.components, 3);
    }

    #[test]
    fn truncated_and_foreign_files_are_named_as_such() {
        let cut =
            probe(&mut Cursor::new(b"\x89PNG\r\n\x1a\n\0\0".to_vec())).expect_err("truncated");
        assert!(cut.to_string().contains("ends inside"), "{cut}");
        assert!(matches!(
            probe(&mut Cursor::new(b"PK\x03\x04 not an image".to_vec())),
            Err(ImageError::NotAnImage)
        ));
    }

    #[test]
    fn webp_sizes_come_from_each_chunk_kind() {
        let mut lossless = b"RIFF\0\0\0\0WEBPVP8L\0\0\0\0".to_vec();
        let bits: u32 = (640 - 1) | ((480 - 1) << 14);
        lossless.push(0x2f);
        lossless.extend_from_slice(&bits.to_le_bytes());
        lossless.extend(std::iter::repeat_n(0u8, 10));
        let header = probe(&mut Cursor::new(lossless)).expect("probed");
        assert_eq!((header.width, header.height), (640, 480));
    }
}
