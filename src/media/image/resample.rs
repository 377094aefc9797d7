//! Rows in, a smaller RGB image out: an area-averaging downscaler that takes
//! one decoded row at a time (any of gray, gray+alpha, RGB, RGBA; alpha is
//! flattened onto white), so a large image is never held at full size. Its
//! memory is the output image plus one row of sums. Also the EXIF
//! orientations, applied to the small output.

/// A finished RGB image (8 bits per channel, rows top to bottom).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RgbImage {
    pub width: u32,
    pub height: u32,
    pub pixels: Vec<u8>,
}

/// How a decoded row's samples are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    Gray,
    GrayAlpha,
    Rgb,
    Rgba,
}

impl Layout {
    pub fn channels(self) -> usize {
        match self {
            Layout::Gray => 1,
            Layout::GrayAlpha => 2,
            Layout::Rgb => 3,
            Layout::Rgba => 4,
        }
    }
}

/// The output size for an `width` × `height` image whose longer side may be
/// at most `max_side` (the aspect ratio kept, never enlarged, at least 1).
pub fn fit_within(width: u32, height: u32, max_side: u32) -> (u32, u32) {
    let longer = width.max(height);
    if longer <= max_side || max_side == 0 {
        return (width.max(1), height.max(1));
    }
    let scale = f64::from(max_side) / f64::from(longer);
    let w = (f64::from(width) * scale).round().max(1.0) as u32;
    let h = (f64::from(height) * scale).round().max(1.0) as u32;
    (w.min(max_side), h.min(max_side))
}

/// Bytes a downscaler to `out_w` × `out_h` from a `in_w`-wide input holds.
pub fn downscaler_bytes(in_w: u32, out_w: u32, out_h: u32) -> usize {
    let out = out_w as usize * out_h as usize * 3;
    out + out_w as usize * 3 * 4 + in_w as usize * 4 + out_w as usize * 4
}

/// Averages input rows into output pixels.
pub struct Downscaler {
    in_w: u32,
    in_h: u32,
    out_w: u32,
    out_h: u32,
    /// Output column of each input column.
    column: Vec<u32>,
    /// Input columns falling into each output column.
    column_count: Vec<u32>,
    sums: Vec<u32>,
    rows_in_sums: u32,
    current_out_row: u32,
    out: Vec<u8>,
    next_in_row: u32,
}

impl Downscaler {
    pub fn new(in_w: u32, in_h: u32, out_w: u32, out_h: u32) -> Downscaler {
        let (out_w, out_h) = (out_w.clamp(1, in_w.max(1)), out_h.clamp(1, in_h.max(1)));
        let column: Vec<u32> = (0..in_w)
            .map(|x| (u64::from(x) * u64::from(out_w) / u64::from(in_w)) as u32)
            .collect();
        let mut column_count = vec![0u32; out_w as usize];
        for &c in &column {
            column_count[c as usize] += 1;
        }
        Downscaler {
            in_w,
            in_h,
            out_w,
            out_h,
            column,
            column_count,
            sums: vec![0; out_w as usize * 3],
            rows_in_sums: 0,
            current_out_row: 0,
            out: Vec::with_capacity(out_w as usize * out_h as usize * 3),
            next_in_row: 0,
        }
    }

    fn out_row_of(&self, y: u32) -> u32 {
        (u64::from(y) * u64::from(self.out_h) / u64::from(self.in_h)) as u32
    }

    fn emit(&mut self) {
        let rows = self.rows_in_sums.max(1);
        for (x, count) in self.column_count.iter().enumerate() {
            let n = (count * rows).max(1);
            for c in 0..3 {
                let sum = self.sums[x * 3 + c];
                self.out.push(((sum + n / 2) / n) as u8);
            }
        }
        self.sums.iter_mut().for_each(|s| *s = 0);
        self.rows_in_sums = 0;
        self.current_out_row += 1;
    }

    /// Adds the next input row (rows must come in order, each `in_w` pixels).
    pub fn push_row(&mut self, row: &[u8], layout: Layout) {
        if self.next_in_row >= self.in_h {
            return;
        }
        let target = self.out_row_of(self.next_in_row);
        while self.current_out_row < target {
            self.emit();
        }
        let channels = layout.channels();
        for (x, pixel) in row
            .chunks_exact(channels)
            .take(self.in_w as usize)
            .enumerate()
        {
            let (r, g, b) = rgb_of(pixel, layout);
            let at = self.column[x] as usize * 3;
            self.sums[at] += u32::from(r);
            self.sums[at + 1] += u32::from(g);
            self.sums[at + 2] += u32::from(b);
        }
        self.rows_in_sums += 1;
        self.next_in_row += 1;
    }

    /// Input rows taken so far.
    pub fn rows_taken(&self) -> u32 {
        self.next_in_row
    }

    /// The output image (rows the input never gave are repeated from the
    /// last one, so a short read still yields a whole image).
    pub fn finish(mut self) -> RgbImage {
        if self.rows_in_sums > 0 {
            self.emit();
        }
        let row_bytes = self.out_w as usize * 3;
        while (self.out.len() / row_bytes.max(1)) < self.out_h as usize {
            let start = self.out.len().saturating_sub(row_bytes);
            let last: Vec<u8> = if self.out.is_empty() {
                vec![255; row_bytes]
            } else {
                self.out[start..].to_vec()
            };
            self.out.extend_from_slice(&last);
        }
        RgbImage {
            width: self.out_w,
            height: self.out_h,
            pixels: self.out,
        }
    }
}

/// One pixel as RGB; alpha is flattened onto white.
fn rgb_of(pixel: &[u8], layout: Layout) -> (u8, u8, u8) {
    let over_white = |c: u8, a: u8| -> u8 {
        let (c, a) = (u32::from(c), u32::from(a));
        ((c * a + 255 * (255 - a) + 127) / 255) as u8
    };
    match layout {
        Layout::Gray => (pixel[0], pixel[0], pixel[0]),
        Layout::GrayAlpha => {
            let v = over_white(pixel[0], pixel[1]);
            (v, v, v)
        }
        Layout::Rgb => (pixel[0], pixel[1], pixel[2]),
        Layout::Rgba => (
            over_white(pixel[0], pixel[3]),
            over_white(pixel[1], pixel[3]),
            over_white(pixel[2], pixel[3]),
        ),
    }
}

/// Applies an EXIF orientation (1–8) to `image`.
pub fn orient(image: RgbImage, orientation: u16) -> RgbImage {
    if !(2..=8).contains(&orientation) {
        return image;
    }
    let (w, h) = (image.width as usize, image.height as usize);
    let transposed = orientation >= 5;
    let (out_w, out_h) = if transposed { (h, w) } else { (w, h) };
    let mut out = vec![0u8; w * h * 3];
    for y in 0..h {
        for x in 0..w {
            // Where the stored pixel (x, y) lands in the displayed image.
            let (dx, dy) = match orientation {
                2 => (w - 1 - x, y),
                3 => (w - 1 - x, h - 1 - y),
                4 => (x, h - 1 - y),
                5 => (y, x),
                6 => (h - 1 - y, x),
                7 => (h - 1 - y, w - 1 - x),
                _ => (y, w - 1 - x),
            };
            let from = (y * w + x) * 3;
            let to = (dy * out_w + dx) * 3;
            out[to..to + 3].copy_from_slice(&image.pixels[from..from + 3]);
        }
    }
    RgbImage {
        width: out_w as u32,
        height: out_h as u32,
        pixels: out,
    }
}

/// The orientation tag (0x0112) of a JPEG's EXIF data (`Exif\0\0` already
/// stripped, as jpeg-decoder returns it), 1 when absent or unreadable.
pub fn exif_orientation(exif: &[u8]) -> u16 {
    let tiff = exif.strip_prefix(b"Exif\0\0").unwrap_or(exif);
    if tiff.len() < 8 {
        return 1;
    }
    let little = match &tiff[..2] {
        b"II" => true,
        b"MM" => false,
        _ => return 1,
    };
    let u16_at = |at: usize| -> Option<u16> {
        let b = tiff.get(at..at + 2)?;
        Some(if little {
            u16::from_le_bytes([b[0], b[1]])
        } else {
            u16::from_be_bytes([b[0], b[1]])
        })
    };
    let u32_at = |at: usize| -> Option<u32> {
        let b = tiff.get(at..at + 4)?;
        Some(if little {
            u32::from_le_bytes([b[0], b[1], b[2], b[3]])
        } else {
            u32::from_be_bytes([b[0], b[1], b[2], b[3]])
        })
    };
    let Some(ifd) = u32_at(4).map(|o| o as usize) else {
        return 1;
    };
    let Some(entries) = u16_at(ifd) else {
        return 1;
    };
    for i in 0..usize::from(entries.min(256)) {
        let entry = ifd + 2 + i * 12;
        if u16_at(entry) == Some(0x0112) {
            return u16_at(entry + 8)
                .filter(|o| (1..=8).contains(o))
                .unwrap_or(1);
        }
    }
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_fit_the_longer_side_and_never_grow() {
        assert_eq!(fit_within(4000, 3000, 1200), (1200, 900));
        assert_eq!(fit_within(3000, 4000, 1200), (900, 1200));
        assert_eq!(fit_within(800, 600, 1200), (800, 600));
        assert_eq!(fit_within(50_000, 1, 1000), (1000, 1));
    }

    #[test]
    fn averaging_halves_a_checkerboard_to_gray() {
        let mut scaler = Downscaler::new(4, 4, 2, 2);
        for y in 0..4 {
            let row: Vec<u8> = (0..4)
                .flat_map(|x| {
                    let v = if (x + y) % 2 == 0 { 0 } else { 254 };
                    [v, v, v]
                })
                .collect();
            scaler.push_row(&row, Layout::Rgb);
        }
        let image = scaler.finish();
        assert_eq!((image.width, image.height), (2, 2));
        assert!(image.pixels.iter().all(|&v| v == 127), "{:?}", image.pixels);
    }

    #[test]
    fn transparent_pixels_become_white_and_short_reads_are_padded() {
        let mut scaler = Downscaler::new(2, 4, 2, 2);
        scaler.push_row(&[0, 0, 0, 0, 10, 20, 30, 255], Layout::Rgba);
        let image = scaler.finish();
        assert_eq!(&image.pixels[..6], &[255, 255, 255, 10, 20, 30]);
        assert_eq!(
            &image.pixels[6..],
            &image.pixels[..6],
            "missing rows repeat the last"
        );
    }

    #[test]
    fn orientation_six_turns_a_wide_image_upright() {
        // 2 × 1: red then blue; orientation 6 (rotate 90° clockwise) gives 1 × 2, red on top.
        let image = RgbImage {
            width: 2,
            height: 1,
            pixels: vec![255, 0, 0, 0, 0, 255],
        };
        let turned = orient(image, 6);
        assert_eq!((turned.width, turned.height), (1, 2));
        assert_eq!(turned.pixels, vec![255, 0, 0, 0, 0, 255]);
        let mut exif = b"Exif\0\0MM\0\x2a\0\0\0\x08\0\x01".to_vec();
        exif.extend_from_slice(&[0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, 6, 0, 0]);
        assert_eq!(exif_orientation(&exif), 6);
        assert_eq!(exif_orientation(b"garbage"), 1);
    }
}
