//! The decoders, each checked against the decode budget before it starts and
//! feeding the downscaler as it goes:
//! - JPEG through jpeg-decoder with its DCT scaling (1/2, 1/4, 1/8): the
//!   largest scale whose buffers fit the budget and still give at least the
//!   target size, so a 48-megapixel photo is decoded at 1/8 into a few
//!   megabytes. A progressive JPEG keeps every coefficient of the full image
//!   (2 bytes per sample) until its last scan: refused when that exceeds the
//!   budget.
//! - PNG through the png crate, one row at a time (memory: two rows); an
//!   interlaced PNG needs its whole frame and is refused over the budget.
//! - WebP through image-webp, whole frame (refused over the budget).

use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use super::probe::{ImageFormat, ImageHeader};
use super::resample::{downscaler_bytes, exif_orientation, Downscaler, Layout, RgbImage};
use super::ImageError;

/// Bytes of the file read ahead by each decoder.
const READ_BUFFER_BYTES: usize = 64 * 1024;

fn open(path: &Path) -> Result<BufReader<File>, ImageError> {
    let file = File::open(path).map_err(|e| ImageError::Io(e.to_string()))?;
    Ok(BufReader::with_capacity(READ_BUFFER_BYTES, file))
}

fn too_large(header: &ImageHeader, needed: usize, budget: usize) -> ImageError {
    ImageError::TooLargeToDecode {
        format: header.format.name(),
        width: header.width,
        height: header.height,
        needed_bytes: needed,
        budget_bytes: budget,
    }
}

/// Decodes `path` into an RGB image of `out_w` × `out_h` (before its EXIF
/// orientation is applied), within `budget` bytes of working memory.
pub fn decode(
    path: &Path,
    header: &ImageHeader,
    out_w: u32,
    out_h: u32,
    budget: usize,
) -> Result<(RgbImage, u16), ImageError> {
    match header.format {
        ImageFormat::Jpeg => decode_jpeg(path, header, out_w, out_h, budget),
        ImageFormat::Png => decode_png(path, header, out_w, out_h, budget).map(|i| (i, 1)),
        ImageFormat::Webp => decode_webp(path, header, out_w, out_h, budget).map(|i| (i, 1)),
        ImageFormat::Gif => Err(ImageError::Unsupported("GIF")),
    }
}

/// The working memory of a JPEG decoded at 1/`scale`.
fn jpeg_bytes(header: &ImageHeader, scale: u32, out_w: u32, out_h: u32) -> usize {
    let (w, h) = (
        header.width.div_ceil(scale) as usize,
        header.height.div_ceil(scale) as usize,
    );
    let components = usize::from(header.components.max(1));
    // Component planes plus the colour-converted output (up to 4 bytes a pixel).
    let planes = w * h * (components + 4);
    let coefficients = if header.progressive {
        header.width as usize * header.height as usize * components * 2
    } else {
        0
    };
    planes + coefficients + downscaler_bytes(w as u32, out_w, out_h)
}

fn decode_jpeg(
    path: &Path,
    header: &ImageHeader,
    out_w: u32,
    out_h: u32,
    budget: usize,
) -> Result<(RgbImage, u16), ImageError> {
    // Largest scale first (most detail): 1, 2, 4, 8; the first that fits and
    // still covers the target size.
    let covers = |s: u32| header.width.div_ceil(s) >= out_w && header.height.div_ceil(s) >= out_h;
    let scale = [1u32, 2, 4, 8]
        .into_iter()
        .find(|&s| jpeg_bytes(header, s, out_w, out_h) <= budget && covers(s))
        // None that fits covers it: the most detail that fits.
        .or_else(|| {
            [1u32, 2, 4, 8]
                .into_iter()
                .find(|&s| jpeg_bytes(header, s, out_w, out_h) <= budget)
        })
        .ok_or_else(|| too_large(header, jpeg_bytes(header, 8, out_w, out_h), budget))?;
    let mut decoder = jpeg_decoder::Decoder::new(open(path)?);
    decoder.set_max_decoding_buffer_size(budget);
    decoder.read_info().map_err(jpeg_error)?;
    let (sw, sh) = (
        header.width.div_ceil(scale).min(u32::from(u16::MAX)) as u16,
        header.height.div_ceil(scale).min(u32::from(u16::MAX)) as u16,
    );
    let (dw, dh) = decoder.scale(sw, sh).map_err(jpeg_error)?;
    let info = decoder
        .info()
        .ok_or_else(|| ImageError::Corrupt("the JPEG has no frame header".into()))?;
    let orientation = decoder.exif_data().map_or(1, exif_orientation);
    let pixels = decoder.decode().map_err(jpeg_error)?;
    let (dw, dh) = (u32::from(dw), u32::from(dh));
    let (out_w, out_h) = (out_w.min(dw), out_h.min(dh));
    let mut scaler = Downscaler::new(dw, dh, out_w, out_h);
    use jpeg_decoder::PixelFormat;
    let row_len = dw as usize * info.pixel_format.pixel_bytes();
    let mut converted = Vec::new();
    for row in pixels.chunks_exact(row_len.max(1)) {
        match info.pixel_format {
            PixelFormat::L8 => scaler.push_row(row, Layout::Gray),
            PixelFormat::RGB24 => scaler.push_row(row, Layout::Rgb),
            PixelFormat::L16 => {
                converted.clear();
                converted.extend(row.chunks_exact(2).map(|s| s[0]));
                scaler.push_row(&converted, Layout::Gray);
            }
            PixelFormat::CMYK32 => {
                converted.clear();
                for p in row.chunks_exact(4) {
                    let k = u32::from(p[3]);
                    for &c in &p[..3] {
                        converted.push((u32::from(c) * k / 255) as u8);
                    }
                }
                scaler.push_row(&converted, Layout::Rgb);
            }
        }
    }
    drop(pixels);
    Ok((scaler.finish(), orientation))
}

fn jpeg_error(error: jpeg_decoder::Error) -> ImageError {
    match error {
        jpeg_decoder::Error::Io(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            ImageError::Corrupt("the JPEG is truncated".into())
        }
        jpeg_decoder::Error::Io(e) => ImageError::Io(e.to_string()),
        jpeg_decoder::Error::Unsupported(feature) => ImageError::Corrupt(format!(
            "the JPEG uses an unsupported feature ({feature:?})"
        )),
        other => ImageError::Corrupt(format!("the JPEG is malformed ({other})")),
    }
}

fn png_error(error: png::DecodingError) -> ImageError {
    match error {
        png::DecodingError::IoError(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            ImageError::Corrupt("the PNG is truncated".into())
        }
        png::DecodingError::IoError(e) => ImageError::Io(e.to_string()),
        png::DecodingError::LimitsExceeded => {
            ImageError::Corrupt("the PNG needs more memory than this board gives a decode".into())
        }
        other => ImageError::Corrupt(format!("the PNG is malformed ({other})")),
    }
}

fn decode_png(
    path: &Path,
    header: &ImageHeader,
    out_w: u32,
    out_h: u32,
    budget: usize,
) -> Result<RgbImage, ImageError> {
    let (w, h) = (header.width as usize, header.height as usize);
    // Two rows of up to 8 bytes a pixel (16-bit RGBA) while streaming; the
    // whole frame for an interlaced image.
    let rows = if header.progressive { h } else { 2 };
    let needed = w * rows * 8 + downscaler_bytes(header.width, out_w, out_h);
    if needed > budget {
        return Err(too_large(header, needed, budget));
    }
    let limits = png::Limits { bytes: budget };
    let mut decoder = png::Decoder::new_with_limits(open(path)?, limits);
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    decoder.set_ignore_text_chunk(true);
    let mut reader = decoder.read_info().map_err(png_error)?;
    let layout = match reader.output_color_type().0 {
        png::ColorType::Grayscale => Layout::Gray,
        png::ColorType::GrayscaleAlpha => Layout::GrayAlpha,
        png::ColorType::Rgba => Layout::Rgba,
        png::ColorType::Rgb | png::ColorType::Indexed => Layout::Rgb,
    };
    let mut scaler = Downscaler::new(header.width, header.height, out_w, out_h);
    if header.progressive {
        let size = reader
            .output_buffer_size()
            .ok_or_else(|| too_large(header, usize::MAX, budget))?;
        let mut frame = vec![0u8; size];
        let info = reader.next_frame(&mut frame).map_err(png_error)?;
        for row in frame.chunks_exact(info.line_size.max(1)).take(h) {
            scaler.push_row(row, layout);
        }
    } else {
        while let Some(row) = reader.next_row().map_err(png_error)? {
            scaler.push_row(row.data(), layout);
        }
    }
    Ok(scaler.finish())
}

fn decode_webp(
    path: &Path,
    header: &ImageHeader,
    out_w: u32,
    out_h: u32,
    budget: usize,
) -> Result<RgbImage, ImageError> {
    // The RGBA frame plus the decoder's own planes (about as much again).
    let needed = header.width as usize * header.height as usize * 8
        + downscaler_bytes(header.width, out_w, out_h);
    if needed > budget {
        return Err(too_large(header, needed, budget));
    }
    let mut decoder = image_webp::WebPDecoder::new(open(path)?)
        .map_err(|e| ImageError::Corrupt(format!("the WebP is malformed ({e})")))?;
    let size = decoder
        .output_buffer_size()
        .ok_or_else(|| too_large(header, usize::MAX, budget))?;
    let (w, _) = decoder.dimensions();
    let layout = if decoder.has_alpha() {
        Layout::Rgba
    } else {
        Layout::Rgb
    };
    let mut frame = vec![0u8; size];
    decoder
        .read_image(&mut frame)
        .map_err(|e| ImageError::Corrupt(format!("the WebP is malformed ({e})")))?;
    let mut scaler = Downscaler::new(header.width, header.height, out_w, out_h);
    for row in frame.chunks_exact((w as usize * layout.channels()).max(1)) {
        scaler.push_row(row, layout);
    }
    Ok(scaler.finish())
}
