use super::*;

fn budget() -> MediaBudget {
    MediaBudget::default()
}

/// A `width` × `height` RGBA PNG with a gradient.
fn write_png(path: &Path, width: u32, height: u32) {
    let file = File::create(path).expect("create");
    let mut encoder = png::Encoder::new(BufWriter::new(file), width, height);
    encoder.set_color(png::ColorType::Rgba);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().expect("header");
    let mut data = Vec::with_capacity(width as usize * height as usize * 4);
    for y in 0..height {
        for x in 0..width {
            data.extend_from_slice(&[(x % 256) as u8, (y % 256) as u8, 128, 255]);
        }
    }
    writer.write_image_data(&data).expect("data");
}

/// A `width` × `height` RGB JPEG; `exif_orientation` adds an EXIF segment.
fn write_jpeg(path: &Path, width: u16, height: u16, progressive: bool, orientation: Option<u16>) {
    let mut out = Vec::new();
    let mut encoder = jpeg_encoder::Encoder::new(&mut out, 85);
    encoder.set_progressive(progressive);
    if let Some(o) = orientation {
        let mut exif = b"Exif\0\0MM\0\x2a\0\0\0\x08\0\x01".to_vec();
        exif.extend_from_slice(&[0x01, 0x12, 0, 3, 0, 0, 0, 1]);
        exif.extend_from_slice(&o.to_be_bytes());
        exif.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
        encoder.add_app_segment(1, exif).expect("exif");
    }
    let pixels: Vec<u8> = (0..u32::from(width) * u32::from(height))
        .flat_map(|i| [(i % 251) as u8, (i % 241) as u8, 90])
        .collect();
    encoder
        .encode(&pixels, width, height, jpeg_encoder::ColorType::Rgb)
        .expect("encode");
    std::fs::write(path, out).expect("write");
}

fn probe_file(path: &Path) -> ImageHeader {
    probe(&mut BufReader::new(File::open(path).expect("open"))).expect("probe")
}

#[test]
fn a_large_png_is_downscaled_row_by_row_to_a_jpeg() {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = dir.path().join("big.png");
    write_png(&source, 3000, 2000);
    let limits = ImageLimits::default();
    // Far less than the 24 MB the whole RGBA image takes.
    let tight = MediaBudget {
        decode_bytes: 8 * 1024 * 1024,
        ..budget()
    };
    let prepared = prepare(&source, dir.path(), &tight, &limits).expect("prepared");
    assert!(!prepared.original);
    assert_eq!((prepared.width, prepared.height), (1200, 800));
    assert_eq!(prepared.mime, "image/jpeg");
    let header = probe_file(&prepared.path);
    assert_eq!(
        (header.format, header.width, header.height),
        (ImageFormat::Jpeg, 1200, 800)
    );
}

#[test]
fn a_png_bomb_is_refused_from_its_header() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bomb = dir.path().join("bomb.png");
    let mut bytes = b"\x89PNG\r\n\x1a\n".to_vec();
    bytes.extend_from_slice(&13u32.to_be_bytes());
    bytes.extend_from_slice(b"IHDR");
    bytes.extend_from_slice(&50_000u32.to_be_bytes());
    bytes.extend_from_slice(&50_000u32.to_be_bytes());
    bytes.extend_from_slice(&[8, 2, 0, 0, 0, 0, 0, 0, 0]);
    bytes.resize(4096, 0);
    std::fs::write(&bomb, bytes).expect("write");
    let error =
        prepare(&bomb, dir.path(), &budget(), &ImageLimits::default()).expect_err("refused");
    assert!(matches!(
        error,
        ImageError::TooManyPixels {
            width: 50_000,
            height: 50_000,
            ..
        }
    ));
    let text = error.to_string();
    assert!(
        text.contains("50000 × 50000") && text.contains("2500.0 megapixels"),
        "{text}"
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).expect("dir").count(),
        1,
        "nothing written"
    );
}

#[test]
fn a_big_baseline_jpeg_is_decoded_scaled_within_a_small_budget() {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = dir.path().join("photo.jpg");
    write_jpeg(&source, 4000, 3000, false, None);
    // Whole, the 4000 × 3000 image takes 84 MB to decode; at 1/4 (1000 × 750 decoded, 800 × 600
    // out) under 7 MB.
    let small = MediaBudget {
        decode_bytes: 7 * 1024 * 1024,
        ..budget()
    };
    let limits = ImageLimits {
        max_side: 800,
        ..ImageLimits::default()
    };
    let prepared = prepare(&source, dir.path(), &small, &limits).expect("prepared");
    assert_eq!((prepared.width, prepared.height), (800, 600));
    // Below that, the most detail that fits: 1/8 (500 × 375), not refused.
    let smaller = MediaBudget {
        decode_bytes: 3 * 1024 * 1024,
        ..budget()
    };
    let prepared = prepare(&source, dir.path(), &smaller, &limits).expect("prepared");
    assert_eq!((prepared.width, prepared.height), (500, 375));
}

#[test]
fn a_progressive_jpeg_over_the_budget_is_refused_before_decoding() {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = dir.path().join("progressive.jpg");
    write_jpeg(&source, 2000, 1500, true, None);
    let small = MediaBudget {
        decode_bytes: 4 * 1024 * 1024,
        ..budget()
    };
    let error = prepare(&source, dir.path(), &small, &ImageLimits::default()).expect_err("refused");
    assert!(
        matches!(error, ImageError::TooLargeToDecode { format: "JPEG", .. }),
        "{error}"
    );
    // A progressive JPEG keeps every coefficient (18 MB here) whatever the scale: at 24 MiB the
    // most detail that fits is 1/4, decoded whole it needs 48 MiB.
    let mid =
        prepare(&source, dir.path(), &budget(), &ImageLimits::default()).expect("fits 24 MiB");
    assert_eq!((mid.width, mid.height), (500, 375));
    let roomy = MediaBudget {
        decode_bytes: 48 * 1024 * 1024,
        ..budget()
    };
    let roomy = prepare(&source, dir.path(), &roomy, &ImageLimits::default()).expect("fits 48 MiB");
    assert_eq!((roomy.width, roomy.height), (1200, 900));
}

#[test]
fn exif_orientation_turns_the_result_upright() {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = dir.path().join("sideways.jpg");
    write_jpeg(&source, 400, 300, false, Some(6));
    assert_eq!(probe_file(&source).orientation, 6);
    let prepared =
        prepare(&source, dir.path(), &budget(), &ImageLimits::default()).expect("prepared");
    assert!(!prepared.original, "an oriented JPEG is re-encoded upright");
    assert_eq!((prepared.width, prepared.height), (300, 400));
}

#[test]
fn a_small_image_is_kept_as_it_is() {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = dir.path().join("small.jpg");
    write_jpeg(&source, 640, 480, false, None);
    let prepared =
        prepare(&source, dir.path(), &budget(), &ImageLimits::default()).expect("prepared");
    assert!(prepared.original);
    assert_eq!(prepared.path, source);
}

#[test]
fn truncated_and_oversized_files_are_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = dir.path().join("cut.png");
    write_png(&source, 1600, 1600);
    let bytes = std::fs::read(&source).expect("read");
    std::fs::write(&source, &bytes[..bytes.len() / 3]).expect("cut");
    let error = prepare(&source, dir.path(), &budget(), &ImageLimits::default()).expect_err("cut");
    assert!(
        error.to_string().contains("truncated") || error.to_string().contains("malformed"),
        "{error}"
    );
    let limits = ImageLimits {
        max_source_bytes: 100,
        ..ImageLimits::default()
    };
    let error = prepare(&source, dir.path(), &budget(), &limits).expect_err("too big");
    assert!(matches!(error, ImageError::FileTooLarge { .. }), "{error}");
}
