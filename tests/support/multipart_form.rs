//! `multipart/form-data` bodies (RFC 7578) as the real services parse them, for the fakes that
//! take uploads (OpenAI's transcriptions, Telegram's sendPhoto/sendVoice/…, Discord's message
//! attachments, Slack's file upload URL). Strict: CRLF line ends, a closing delimiter, a
//! `Content-Disposition: form-data; name=…` header on every part; anything else is an error
//! naming what is wrong. Product code must never use this.

/// The boundary of a `multipart/form-data; boundary=…` content type.
pub fn boundary(content_type: &str) -> Option<String> {
    let (kind, params) = content_type.split_once(';')?;
    if !kind.trim().eq_ignore_ascii_case("multipart/form-data") {
        return None;
    }
    params.split(';').find_map(|p| {
        p.trim()
            .strip_prefix("boundary=")
            .map(|b| b.trim_matches('"').to_string())
    })
}

pub struct FormPart {
    pub name: String,
    pub file_name: Option<String>,
    pub content_type: String,
    pub body: Vec<u8>,
}

/// The parts of a `multipart/form-data` body (RFC 7578), strictly: CRLF line ends, a closing
/// delimiter, a `Content-Disposition: form-data; name=…` header on every part.
pub fn parts(raw: &[u8], boundary: &str) -> Result<Vec<FormPart>, String> {
    let delimiter = format!("--{boundary}");
    let find = |hay: &[u8], needle: &[u8], from: usize| {
        hay.get(from..)
            .and_then(|h| h.windows(needle.len()).position(|w| w == needle))
            .map(|p| p + from)
    };
    let mut at = find(raw, delimiter.as_bytes(), 0).ok_or("no multipart boundary in the body")?;
    let mut parts = Vec::new();
    loop {
        at += delimiter.len();
        if raw.get(at..at + 2) == Some(b"--") {
            return Ok(parts);
        }
        if raw.get(at..at + 2) != Some(b"\r\n") {
            return Err("malformed multipart body (no CRLF after a boundary)".into());
        }
        at += 2;
        let head_end = find(raw, b"\r\n\r\n", at).ok_or("a part without headers")?;
        let head = String::from_utf8_lossy(&raw[at..head_end]).into_owned();
        let body_start = head_end + 4;
        let next = find(raw, format!("\r\n{delimiter}").as_bytes(), body_start)
            .ok_or("a part without a closing boundary (truncated body)")?;
        let mut name = None;
        let mut file_name = None;
        let mut content_type = String::from("text/plain");
        for line in head.split("\r\n") {
            let (key, value) = line.split_once(':').ok_or("a malformed part header")?;
            match key.trim().to_ascii_lowercase().as_str() {
                "content-disposition" => {
                    for param in value.split(';').map(str::trim) {
                        if let Some(v) = param.strip_prefix("name=") {
                            name = Some(v.trim_matches('"').to_string());
                        } else if let Some(v) = param.strip_prefix("filename=") {
                            file_name = Some(v.trim_matches('"').to_string());
                        }
                    }
                }
                "content-type" => content_type = value.trim().to_string(),
                _ => {}
            }
        }
        parts.push(FormPart {
            name: name.ok_or("a part without a name")?,
            file_name,
            content_type,
            body: raw[body_start..next].to_vec(),
        });
        at = next + 2;
    }
}
