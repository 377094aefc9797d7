use super::*;

fn deflate(data: &[u8]) -> Vec<u8> {
    miniz_oxide::deflate::compress_to_vec_zlib(data, 6)
}

/// A PDF from `(object number, body, stream data)`; the trailer names
/// `root` and, when set, `/Encrypt`.
fn build(objects: &[(u32, String, Option<Vec<u8>>)], root: u32, encrypt: bool) -> Vec<u8> {
    let mut pdf = b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n".to_vec();
    for (num, body, stream) in objects {
        pdf.extend_from_slice(format!("{num} 0 obj\n{body}").as_bytes());
        if let Some(data) = stream {
            pdf.extend_from_slice(b"\nstream\n");
            pdf.extend_from_slice(data);
            pdf.extend_from_slice(b"\nendstream");
        }
        pdf.extend_from_slice(b"\nendobj\n");
    }
    let encrypt = if encrypt { " /Encrypt 99 0 R" } else { "" };
    pdf.extend_from_slice(
        format!("trailer\n<< /Size 20 /Root {root} 0 R{encrypt} >>\nstartxref\n0\n%%EOF\n")
            .as_bytes(),
    );
    pdf
}

fn content_stream(num: u32, text: &str) -> (u32, String, Option<Vec<u8>>) {
    let data = deflate(text.as_bytes());
    (
        num,
        format!("<< /Length {} /Filter /FlateDecode >>", data.len()),
        Some(data),
    )
}

fn two_page_pdf() -> Vec<u8> {
    build(
        &[
            (1, "<< /Type /Catalog /Pages 2 0 R >>".into(), None),
            (2, "<< /Type /Pages /Kids [3 0 R 4 0 R] /Count 2 /Resources << /Font << /F1 5 0 R >> >> >>".into(), None),
            (3, "<< /Type /Page /Parent 2 0 R /Contents 6 0 R >>".into(), None),
            (4, "<< /Type /Page /Parent 2 0 R /Contents [7 0 R] >>".into(), None),
            (5, "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".into(), None),
            content_stream(6, "BT /F1 12 Tf 72 720 Td (Invoice 42) Tj 0 -16 Td (Total: 12,50 \\200) Tj ET"),
            content_stream(7, "BT /F1 12 Tf 72 720 Td [(Second) -300 (page)] TJ ET"),
        ],
        1,
        false,
    )
}

fn limits() -> PdfLimits {
    PdfLimits {
        max_pages: 20,
        max_chars: 60_000,
        inflate_bytes: 16 * 1024 * 1024,
    }
}

fn extract_bytes(bytes: &[u8], limits: PdfLimits) -> Result<PdfText, PdfError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("doc.pdf");
    std::fs::write(&path, bytes).expect("write");
    extract(&path, limits)
}

#[test]
fn pages_come_out_in_tree_order_with_their_lines() {
    let text = extract_bytes(&two_page_pdf(), limits()).expect("text");
    // A blank line between pages.
    assert_eq!(text.text, "Invoice 42\nTotal: 12,50 €\n\nSecond page");
    assert_eq!(
        (text.pages_read, text.pages_total, text.truncated),
        (2, 2, false)
    );
}

#[test]
fn page_and_character_caps_mark_the_text_truncated() {
    let one_page = PdfLimits {
        max_pages: 1,
        ..limits()
    };
    let text = extract_bytes(&two_page_pdf(), one_page).expect("text");
    assert_eq!(text.text, "Invoice 42\nTotal: 12,50 €");
    assert!(text.truncated);
    let few_chars = PdfLimits {
        max_chars: 7,
        ..limits()
    };
    let text = extract_bytes(&two_page_pdf(), few_chars).expect("text");
    assert_eq!(text.text, "Invoice");
    assert!(text.truncated);
}

#[test]
fn encrypted_and_foreign_files_are_refused() {
    let objects = [(1, "<< /Type /Catalog >>".to_string(), None)];
    assert_eq!(
        extract_bytes(&build(&objects, 1, true), limits()),
        Err(PdfError::Encrypted)
    );
    assert_eq!(
        extract_bytes(b"PK\x03\x04\x14\0\0\0 a zip archive", limits()),
        Err(PdfError::NotPdf)
    );
}

#[test]
fn a_compression_bomb_stops_at_the_inflate_budget() {
    // 16 MiB of text-showing operators compress to well under a MiB.
    let mut huge = String::from("BT ");
    while huge.len() < 16 * 1024 * 1024 {
        huge.push_str("(aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa) Tj ");
    }
    let pdf = build(
        &[
            (1, "<< /Type /Catalog /Pages 2 0 R >>".into(), None),
            (2, "<< /Type /Pages /Kids [3 0 R] >>".into(), None),
            (3, "<< /Type /Page /Contents 4 0 R >>".into(), None),
            content_stream(4, &huge),
        ],
        1,
        false,
    );
    assert!(pdf.len() < 1024 * 1024, "the bomb is small: {}", pdf.len());
    let tight = PdfLimits {
        inflate_bytes: 1024 * 1024,
        max_chars: 100_000_000,
        ..limits()
    };
    let text = extract_bytes(&pdf, tight).expect("text");
    // At most the budget's worth of operators was read (30 characters each).
    assert!(text.text.len() <= 1024 * 1024, "{}", text.text.len());
    assert!(text.text.len() > 100_000);
}

#[test]
fn objects_inside_object_streams_and_indirect_lengths_are_found() {
    let fonts = "<< /Type /Font /Subtype /Type0 /BaseFont /X /ToUnicode 9 0 R >>";
    let page =
        "<< /Type /Page /Parent 2 0 R /Resources << /Font << /C0 5 0 R >> >> /Contents 6 0 R >>";
    let pages = "<< /Type /Pages /Kids [3 0 R] /Count 1 >>";
    let members = [(2u32, pages), (3, page), (5, fonts)];
    let mut header = String::new();
    let mut body = String::new();
    for (num, text) in members {
        header.push_str(&format!("{num} {} ", body.len()));
        body.push_str(text);
        body.push('\n');
    }
    let objstm = format!("{header}{body}");
    let objstm_data = deflate(objstm.as_bytes());
    let cmap = "/CIDInit /ProcSet findresource begin 1 begincodespacerange <0000> <FFFF> endcodespacerange 2 beginbfchar <0001> <0048> <0002> <0069> endbfchar endcmap";
    let content = deflate(b"BT /C0 10 Tf 1 0 0 1 50 700 Tm <00010002> Tj ET");
    let pdf = build(
        &[
            (1, "<< /Type /Catalog /Pages 2 0 R >>".into(), None),
            (
                8,
                format!(
                    "<< /Type /ObjStm /N 3 /First {} /Filter /FlateDecode /Length 10 0 R >>",
                    header.len()
                ),
                Some(objstm_data.clone()),
            ),
            (10, format!("{}", objstm_data.len()), None),
            (
                6,
                format!("<< /Length {} /Filter /FlateDecode >>", content.len()),
                Some(content),
            ),
            (
                9,
                format!("<< /Length {} >>", cmap.len()),
                Some(cmap.as_bytes().to_vec()),
            ),
        ],
        1,
        false,
    );
    let text = extract_bytes(&pdf, limits()).expect("text");
    assert_eq!(text.text, "Hi");
}
