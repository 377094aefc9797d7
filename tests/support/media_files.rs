//! Real files for the media tests, built in memory: a JPEG photo (a gradient,
//! encoded with `jpeg-encoder`), an Ogg/Opus voice note (pages with real CRCs,
//! through `pincer::media::ogg::writer`) and the same cut inside a page, a PNG
//! whose header claims 50,000 × 50,000 pixels over a deflate stream of zeros (a
//! decompression bomb), a small PDF with a text page, and a ZIP archive.

/// A `width` × `height` baseline JPEG of a colour gradient.
pub fn jpeg(width: u16, height: u16) -> Vec<u8> {
    let mut pixels = Vec::with_capacity(usize::from(width) * usize::from(height) * 3);
    for y in 0..height {
        for x in 0..width {
            pixels.extend_from_slice(&[
                (u32::from(x) * 255 / u32::from(width)) as u8,
                (u32::from(y) * 255 / u32::from(height)) as u8,
                128,
            ]);
        }
    }
    let mut out = Vec::new();
    jpeg_encoder::Encoder::new(&mut out, 85)
        .encode(&pixels, width, height, jpeg_encoder::ColorType::Rgb)
        .expect("encode a test JPEG");
    out
}

/// An Ogg/Opus voice note of `seconds` (20 ms packets of filler bytes).
pub fn voice_note(seconds: u64) -> Vec<u8> {
    let mut out = Vec::new();
    pincer::media::ogg::writer::opus_stream(seconds, 40, |page| out.extend_from_slice(page));
    out
}

/// The same voice note with its last page cut in half.
pub fn truncated_voice_note(seconds: u64) -> Vec<u8> {
    let whole = voice_note(seconds);
    let last_page = whole
        .windows(4)
        .rposition(|w| w == b"OggS")
        .expect("the stream has pages");
    let cut = last_page + (whole.len() - last_page) / 2;
    whole[..cut].to_vec()
}

fn png_crc(bytes: &[u8]) -> u32 {
    let mut crc = 0xffff_ffffu32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn png_chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let mut body = kind.to_vec();
    body.extend_from_slice(data);
    out.extend_from_slice(&body);
    out.extend_from_slice(&png_crc(&body).to_be_bytes());
}

/// A PNG that says it is `side` × `side` RGB pixels; its IDAT is the zlib stream of the first
/// rows of zeros (a few KB that would inflate to gigabytes if decoded to the end).
pub fn png_bomb(side: u32) -> Vec<u8> {
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&side.to_be_bytes());
    ihdr.extend_from_slice(&side.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
    png_chunk(&mut out, b"IHDR", &ihdr);
    let rows = vec![0u8; 4 * 1024 * 1024];
    let idat = miniz_oxide::deflate::compress_to_vec_zlib(&rows, 9);
    png_chunk(&mut out, b"IDAT", &idat);
    png_chunk(&mut out, b"IEND", &[]);
    out
}

/// A one-page PDF whose page says each of `lines`.
pub fn pdf(lines: &[&str]) -> Vec<u8> {
    let mut content = String::from("BT /F1 12 Tf 72 720 Td");
    for (i, line) in lines.iter().enumerate() {
        if i > 0 {
            content.push_str(" 0 -16 Td");
        }
        content.push_str(&format!(" ({line}) Tj"));
    }
    content.push_str(" ET");
    let stream = miniz_oxide::deflate::compress_to_vec_zlib(content.as_bytes(), 6);
    let objects: Vec<(u32, String, Option<Vec<u8>>)> = vec![
        (1, "<< /Type /Catalog /Pages 2 0 R >>".into(), None),
        (
            2,
            "<< /Type /Pages /Kids [3 0 R] /Count 1 /Resources << /Font << /F1 4 0 R >> >> >>"
                .into(),
            None,
        ),
        (
            3,
            "<< /Type /Page /Parent 2 0 R /Contents 5 0 R >>".into(),
            None,
        ),
        (
            4,
            "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".into(),
            None,
        ),
        (
            5,
            format!("<< /Length {} /Filter /FlateDecode >>", stream.len()),
            Some(stream),
        ),
    ];
    let mut out = b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n".to_vec();
    let mut offsets = Vec::new();
    for (num, dict, data) in &objects {
        offsets.push(out.len());
        out.extend_from_slice(format!("{num} 0 obj\n{dict}").as_bytes());
        if let Some(data) = data {
            out.extend_from_slice(b"\nstream\n");
            out.extend_from_slice(data);
            out.extend_from_slice(b"\nendstream");
        }
        out.extend_from_slice(b"\nendobj\n");
    }
    let xref = out.len();
    out.extend_from_slice(
        format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes(),
    );
    for offset in offsets {
        out.extend_from_slice(format!("{offset:010} 00000 n \n").as_bytes());
    }
    out.extend_from_slice(
        format!(
            "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
            objects.len() + 1
        )
        .as_bytes(),
    );
    out
}

/// A ZIP archive holding one stored text file.
pub fn zip() -> Vec<u8> {
    let name = b"secret.txt";
    let data = b"not a pdf";
    let mut out = Vec::new();
    out.extend_from_slice(b"PK\x03\x04");
    out.extend_from_slice(&[20, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out.extend_from_slice(&(name.len() as u16).to_le_bytes());
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(name);
    out.extend_from_slice(data);
    out.extend_from_slice(b"PK\x05\x06");
    out.extend_from_slice(&[0; 18]);
    out
}
