//! Images for a vision model, or for a chat that compresses what it is sent:
//! [`prepare`] measures the file from its header, refuses what is over the
//! board's pixel cap or decode budget before decoding anything, and writes a
//! JPEG whose longer side fits the limit (EXIF orientation applied, alpha
//! flattened onto white). A JPEG or PNG already within the limits is used as
//! it is.

pub mod decode;
pub mod probe;
pub mod resample;

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

pub use probe::{probe, ImageFormat, ImageHeader};

use super::budget::MediaBudget;

/// Why an image was not prepared; the text is meant for the user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    #[error("the file is not an image pincer can read (PNG, JPEG or WebP)")]
    NotAnImage,
    #[error("{0} images are not supported (send PNG, JPEG or WebP)")]
    Unsupported(&'static str),
    #[error("the image is {width} × {height} pixels ({}); this board opens images of at most {}, so it was not decoded", megapixels(*width, *height), megapixels_of(*max_pixels))]
    TooManyPixels {
        width: u32,
        height: u32,
        max_pixels: u64,
    },
    #[error("the {format} image ({width} × {height}) would need {} of memory to decode; this board allows {}", mib(*needed_bytes), mib(*budget_bytes))]
    TooLargeToDecode {
        format: &'static str,
        width: u32,
        height: u32,
        needed_bytes: usize,
        budget_bytes: usize,
    },
    #[error("the file is {}, over the {} limit for images", mib(*bytes as usize), mib(*max_bytes as usize))]
    FileTooLarge { bytes: u64, max_bytes: u64 },
    #[error("the image is damaged: {0}")]
    Corrupt(String),
    #[error("the image could not be read: {0}")]
    Io(String),
}

fn megapixels(width: u32, height: u32) -> String {
    megapixels_of(u64::from(width) * u64::from(height))
}

fn megapixels_of(pixels: u64) -> String {
    format!("{:.1} megapixels", pixels as f64 / 1_000_000.0)
}

fn mib(bytes: usize) -> String {
    if bytes == usize::MAX {
        return "more than can be addressed".to_string();
    }
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// What the prepared image may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageLimits {
    /// Longer side of the result, in pixels.
    pub max_side: u32,
    /// A source file larger than this is refused unread.
    pub max_source_bytes: u64,
    /// A JPEG or PNG within `max_side` and this size is used unchanged.
    pub keep_original_bytes: u64,
    /// JPEG quality of a re-encoded image (1–100).
    pub quality: u8,
}

impl Default for ImageLimits {
    fn default() -> Self {
        ImageLimits {
            max_side: 1200,
            max_source_bytes: 10 * 1024 * 1024,
            keep_original_bytes: 1024 * 1024,
            quality: 82,
        }
    }
}

/// An image ready to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedImage {
    pub path: PathBuf,
    pub mime: &'static str,
    pub width: u32,
    pub height: u32,
    pub bytes: u64,
    /// The source file itself (nothing was written).
    pub original: bool,
}

/// Prepares `source` within `limits`, writing a new JPEG into `out_dir` when
/// it must be re-encoded (blocking: call it off the async workers).
pub fn prepare(
    source: &Path,
    out_dir: &Path,
    budget: &MediaBudget,
    limits: &ImageLimits,
) -> Result<PreparedImage, ImageError> {
    let bytes = std::fs::metadata(source)
        .map_err(|e| ImageError::Io(e.to_string()))?
        .len();
    if bytes > limits.max_source_bytes {
        return Err(ImageError::FileTooLarge {
            bytes,
            max_bytes: limits.max_source_bytes,
        });
    }
    let mut reader = BufReader::new(File::open(source).map_err(|e| ImageError::Io(e.to_string()))?);
    let header = probe(&mut reader)?;
    drop(reader);
    if header.pixels() > budget.max_image_pixels {
        return Err(ImageError::TooManyPixels {
            width: header.width,
            height: header.height,
            max_pixels: budget.max_image_pixels,
        });
    }
    let within = header.width.max(header.height) <= limits.max_side;
    let keepable = matches!(header.format, ImageFormat::Png | ImageFormat::Jpeg)
        && header.orientation == 1
        && bytes <= limits.keep_original_bytes;
    if within && keepable {
        return Ok(PreparedImage {
            path: source.to_path_buf(),
            mime: header.format.mime(),
            width: header.width,
            height: header.height,
            bytes,
            original: true,
        });
    }
    // The target before orientation: a rotated image swaps its sides.
    let (out_w, out_h) = resample::fit_within(header.width, header.height, limits.max_side);
    let (image, orientation) = decode::decode(source, &header, out_w, out_h, budget.decode_bytes)?;
    let image = resample::orient(image, orientation);
    let path = super::area::new_file(out_dir, "img", "jpg");
    let written = encode_jpeg(&image, &path, limits.quality)?;
    Ok(PreparedImage {
        path,
        mime: "image/jpeg",
        width: image.width,
        height: image.height,
        bytes: written,
        original: false,
    })
}

/// Writes `image` as a baseline JPEG; returns its size.
pub fn encode_jpeg(
    image: &resample::RgbImage,
    path: &Path,
    quality: u8,
) -> Result<u64, ImageError> {
    let io = |e: std::io::Error| ImageError::Io(e.to_string());
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let file = File::create(path).map_err(io)?;
    let mut out = BufWriter::new(file);
    let (w, h) = (
        u16::try_from(image.width).map_err(|_| ImageError::Corrupt("too wide to encode".into()))?,
        u16::try_from(image.height)
            .map_err(|_| ImageError::Corrupt("too tall to encode".into()))?,
    );
    let encoder = jpeg_encoder::Encoder::new(&mut out, quality.clamp(1, 100));
    encoder
        .encode(&image.pixels, w, h, jpeg_encoder::ColorType::Rgb)
        .map_err(|e| ImageError::Io(e.to_string()))?;
    out.flush().map_err(io)?;
    drop(out);
    Ok(std::fs::metadata(path).map_err(io)?.len())
}

#[cfg(test)]
mod tests;
