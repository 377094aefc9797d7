//! QR codes for linking a chat device by scanning (WhatsApp's linked
//! devices): a payload encoded once into its modules ([`QrModules`]), then
//! drawn as a PNG `data:` URL (what `web.login.start` answers and the Control
//! UI shows in an `<img>`) or as Unicode half blocks for a terminal (`pincer
//! channels login`), both with the 4-module quiet zone a scanner needs.
//!
//! It knows no chat platform; the payload is opaque text. Built with the
//! `whatsapp` feature (the only user), on the `qrcode` crate's encoder and the
//! `png` crate pincer already has.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;

/// Light modules around the code, as the QR standard asks (ISO/IEC 18004).
pub const QUIET_ZONE_MODULES: usize = 4;
/// Pixels per module in the PNG: a 49-module code (version 8 + quiet zone)
/// becomes 294 × 294 pixels.
pub const PNG_PIXELS_PER_MODULE: usize = 6;
/// The longest `data:` URL the image may take: upstream's schema caps
/// `web.login.wait`'s `currentQrDataUrl` at 16384 characters, and a client
/// sends the URL it was given back there.
pub const MAX_DATA_URL_CHARS: usize = 16_384;
/// The longest payload encoded (a WhatsApp link payload is about 150 bytes).
pub const MAX_PAYLOAD_BYTES: usize = 1_024;

/// Why a payload could not be drawn.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum QrError {
    #[error("a QR payload of {0} bytes is over the {MAX_PAYLOAD_BYTES}-byte limit")]
    TooLong(usize),
    #[error("cannot encode the QR payload: {0}")]
    Encode(String),
    #[error("cannot write the QR image: {0}")]
    Png(String),
    #[error("the QR image's data URL is {0} characters, over {MAX_DATA_URL_CHARS}")]
    DataUrlTooLong(usize),
}

/// The modules of one QR code, quiet zone included, row by row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QrModules {
    /// Modules per side, quiet zone included.
    size: usize,
    /// `true` = dark, `size * size` of them.
    dark: Vec<bool>,
}

impl QrModules {
    /// Encodes `payload` (error correction level M, the smallest version that holds it).
    pub fn encode(payload: &str) -> Result<QrModules, QrError> {
        if payload.len() > MAX_PAYLOAD_BYTES {
            return Err(QrError::TooLong(payload.len()));
        }
        let code =
            qrcode::QrCode::new(payload.as_bytes()).map_err(|e| QrError::Encode(e.to_string()))?;
        let inner = code.width();
        let colors = code.to_colors();
        let size = inner + 2 * QUIET_ZONE_MODULES;
        let mut dark = vec![false; size * size];
        for y in 0..inner {
            for x in 0..inner {
                dark[(y + QUIET_ZONE_MODULES) * size + x + QUIET_ZONE_MODULES] =
                    colors[y * inner + x] == qrcode::Color::Dark;
            }
        }
        Ok(QrModules { size, dark })
    }

    /// Modules per side, quiet zone included.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Whether the module at column `x`, row `y` is dark (outside: light).
    pub fn is_dark(&self, x: usize, y: usize) -> bool {
        x < self.size && y < self.size && self.dark[y * self.size + x]
    }

    /// A 1-bit greyscale PNG, [`PNG_PIXELS_PER_MODULE`] pixels per module.
    pub fn to_png(&self) -> Result<Vec<u8>, QrError> {
        let side = self.size * PNG_PIXELS_PER_MODULE;
        let row_bytes = side.div_ceil(8);
        let mut pixels = vec![0u8; row_bytes * side];
        for y in 0..side {
            for x in 0..side {
                // Bit 1 is white in a greyscale PNG.
                if !self.is_dark(x / PNG_PIXELS_PER_MODULE, y / PNG_PIXELS_PER_MODULE) {
                    pixels[y * row_bytes + x / 8] |= 0x80 >> (x % 8);
                }
            }
        }
        let side = u32::try_from(side).map_err(|e| QrError::Png(e.to_string()))?;
        let mut png = Vec::new();
        let mut encoder = png::Encoder::new(&mut png, side, side);
        encoder.set_color(png::ColorType::Grayscale);
        encoder.set_depth(png::BitDepth::One);
        encoder.set_compression(png::Compression::High);
        let mut writer = encoder
            .write_header()
            .map_err(|e| QrError::Png(e.to_string()))?;
        writer
            .write_image_data(&pixels)
            .map_err(|e| QrError::Png(e.to_string()))?;
        writer.finish().map_err(|e| QrError::Png(e.to_string()))?;
        Ok(png)
    }

    /// The PNG as a `data:image/png;base64,…` URL, within [`MAX_DATA_URL_CHARS`].
    pub fn to_png_data_url(&self) -> Result<String, QrError> {
        let url = format!("data:image/png;base64,{}", STANDARD.encode(self.to_png()?));
        if url.len() > MAX_DATA_URL_CHARS {
            return Err(QrError::DataUrlTooLong(url.len()));
        }
        Ok(url)
    }

    /// The code for a terminal: two module rows per text line as Unicode half
    /// blocks, light modules drawn and dark ones left blank — the polarity
    /// that reads right on a dark-background terminal, as `qrencode -t UTF8`
    /// draws it. Every line has the same width; lines end with `\n`.
    pub fn to_terminal(&self) -> String {
        let mut out = String::with_capacity((self.size * 3 + 1) * self.size.div_ceil(2));
        for y in (0..self.size).step_by(2) {
            for x in 0..self.size {
                let top_light = !self.is_dark(x, y);
                // Past the last row (an odd size) is the terminal's dark background.
                let bottom_light = y + 1 < self.size && !self.is_dark(x, y + 1);
                out.push(match (top_light, bottom_light) {
                    (true, true) => '█',
                    (true, false) => '▀',
                    (false, true) => '▄',
                    (false, false) => ' ',
                });
            }
            out.push('\n');
        }
        out
    }
}

/// `payload` as a PNG `data:` URL.
pub fn png_data_url(payload: &str) -> Result<String, QrError> {
    QrModules::encode(payload)?.to_png_data_url()
}

/// `payload` drawn for a terminal.
pub fn terminal(payload: &str) -> Result<String, QrError> {
    Ok(QrModules::encode(payload)?.to_terminal())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAYLOAD: &str = "2@Rk9PQkFSQkFaMTIzNDU2Nzg5MGFiY2RlZmdoaWprbG1ub3BxcnN0dXZ3eHl6,\
        x7k2Yb8fNw3pQ1sT9uV0wX4yZ5aB6cD7eF8gH9iJ0kL=,mN1oP2qR3sT4uV5wX6yZ7aB8cD9eF0gH1iJ2kL3mN4=,\
        oP5qR6sT7uV8wX9yZ0aB1cD2eF3gH4iJ5kL6mN7oP8=,1";

    #[test]
    fn the_quiet_zone_is_light_and_the_finder_corner_dark() {
        let qr = QrModules::encode(PAYLOAD).expect("encode");
        assert_eq!(qr.size() % 2, 1, "QR sizes are odd: {}", qr.size());
        for i in 0..qr.size() {
            for q in 0..QUIET_ZONE_MODULES {
                assert!(!qr.is_dark(i, q) && !qr.is_dark(q, i));
                assert!(!qr.is_dark(i, qr.size() - 1 - q));
            }
        }
        // The top-left finder pattern starts right after the quiet zone.
        assert!(qr.is_dark(QUIET_ZONE_MODULES, QUIET_ZONE_MODULES));
    }

    #[test]
    fn the_data_url_is_a_png_within_the_schema_limit() {
        let url = png_data_url(PAYLOAD).expect("png");
        let b64 = url.strip_prefix("data:image/png;base64,").expect("prefix");
        let png = STANDARD.decode(b64).expect("base64");
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        assert!(url.len() < MAX_DATA_URL_CHARS, "{}", url.len());
        // Deterministic: the same payload gives the same URL (clients compare them).
        assert_eq!(png_data_url(PAYLOAD).expect("again"), url);
    }

    #[test]
    fn the_terminal_rendering_has_one_line_per_two_rows() {
        let qr = QrModules::encode(PAYLOAD).expect("encode");
        let text = qr.to_terminal();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), qr.size().div_ceil(2));
        assert!(lines.iter().all(|l| l.chars().count() == qr.size()));
        // The quiet zone's first line is all light.
        assert!(lines[0].chars().all(|c| c == '█'));
    }

    #[test]
    fn an_oversized_payload_is_refused() {
        let long = "x".repeat(MAX_PAYLOAD_BYTES + 1);
        assert_eq!(
            QrModules::encode(&long),
            Err(QrError::TooLong(MAX_PAYLOAD_BYTES + 1))
        );
    }
}
