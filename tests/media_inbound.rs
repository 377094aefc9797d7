//! Inbound media through the real binary: the fake Telegram Bot API delivers a voice note, a photo
//! and a PDF (files served by `getFile` and the file download); pincer transcribes the voice note
//! at the fake OpenAI server's `/audio/transcriptions` (multipart, the recording as uploaded), hands
//! the photo to the vision model as an `image_url` data URL (downscaled to the board's limit) and
//! puts the PDF's text in the prompt as a `<file>` block. Bad input gets a clear message in the
//! chat and the gateway keeps answering: a truncated voice note, a 50,000 × 50,000 PNG bomb, a ZIP
//! archive named `report.pdf`, a file over `mediaMaxMb`.

mod support;

use serde_json::Value;
use support::fake_openai::FakeOpenAi;
use support::fake_telegram::FakeTelegram;
use support::gateway::GatewayProcess;
use support::media_files;
use support::telegram_harness::{dm, BOT_ID, BOT_USERNAME, TOKEN};

const GATEWAY_TOKEN: &str = "media-e2e-token";

/// A vision model (`input: ["text", "image"]`) and a transcription entry on the same fake server.
fn start(fake: &FakeOpenAi, telegram: &FakeTelegram, extra_tools: &str) -> GatewayProcess {
    let media = format!(
        r#"models: [{{ provider: "fake", model: "whisper-1", capabilities: ["audio"] }}] {extra_tools}"#
    );
    start_with_media(fake, telegram, &media)
}

fn start_with_media(fake: &FakeOpenAi, telegram: &FakeTelegram, media: &str) -> GatewayProcess {
    let config = format!(
        r#"{{
  models: {{ providers: {{ fake: {{ baseUrl: "{}", apiKey: "sk-test", api: "openai-completions",
      models: [{{ id: "gpt-vision", contextWindow: 128000, input: ["text", "image"] }}] }} }} }},
  agents: {{ defaults: {{ model: {{ primary: "fake/gpt-vision" }} }} }},
  session: {{ dmScope: "per-channel-peer" }},
  tools: {{ media: {{ {media} }} }},
  channels: {{ telegram: {{ botToken: "{TOKEN}", apiRoot: "{}", allowFrom: [7, 8], streaming: "off", mediaMaxMb: 1 }} }},
}}"#,
        fake.base_url(),
        telegram.api_root()
    );
    GatewayProcess::start_with_private_tmp(&config, &["--port", "0", "--token", GATEWAY_TOKEN])
}

fn texts(telegram: &FakeTelegram) -> Vec<String> {
    telegram
        .calls_of("sendMessage")
        .iter()
        .map(|c| c.body["text"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The user message of the `n`th chat request, as text (its text part when it has parts).
fn user_text(fake: &FakeOpenAi, n: usize) -> String {
    let chats: Vec<Value> = fake
        .requests()
        .into_iter()
        .filter(|r| r.path == "/v1/chat/completions")
        .map(|r| r.body)
        .collect();
    let messages = chats[n]["messages"].as_array().cloned().unwrap_or_default();
    let last = messages
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .cloned()
        .unwrap_or_default();
    match &last["content"] {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

async fn wait_for_texts(telegram: &FakeTelegram, count: usize) -> Vec<String> {
    telegram.wait_for_calls("sendMessage", count).await;
    texts(telegram)
}

#[tokio::test]
async fn a_voice_note_is_transcribed_into_the_turn() {
    let fake = FakeOpenAi::start().await;
    fake.push_transcript("Remind me to water the plants tomorrow.");
    let telegram = FakeTelegram::start(TOKEN, BOT_ID, BOT_USERNAME).await;
    let _gateway = start(&fake, &telegram, r#", audio: { language: "en" }"#);
    let recording = media_files::voice_note(3);
    telegram.push_message(telegram.voice_message("voice-1", recording.clone(), 3));
    let answers = wait_for_texts(&telegram, 1).await;
    let uploads = fake.transcriptions();
    assert_eq!(uploads.len(), 1, "one transcription");
    let upload = &uploads[0];
    assert_eq!(upload.file_bytes, recording, "the recording as sent");
    assert_eq!(upload.file_name, "audio.ogg");
    assert_eq!(upload.file_content_type, "audio/ogg");
    assert_eq!(
        upload.fields.get("model").map(String::as_str),
        Some("whisper-1")
    );
    assert_eq!(
        upload.fields.get("language").map(String::as_str),
        Some("en")
    );
    assert!(
        !upload.fields.contains_key("prompt"),
        "no prompt unless configured"
    );
    assert_eq!(upload.authorization.as_deref(), Some("Bearer sk-test"));
    let asked = user_text(&fake, 0);
    assert!(
        asked.contains("[Audio]\nTranscript:\nRemind me to water the plants tomorrow."),
        "{asked}"
    );
    assert!(
        answers[0].contains("Remind me to water the plants"),
        "{answers:?}"
    );
}

#[tokio::test]
async fn a_slow_transcription_holds_its_conversation_and_no_other() {
    // Chats 7 and 8 are two sessions (dmScope per-channel-peer; under "main" every DM shares one
    // session, and the other chat's message would rightly wait too).
    let fake = FakeOpenAi::start().await;
    fake.set_transcription_delay(std::time::Duration::from_secs(3));
    fake.push_transcript("first, the voice note");
    let telegram = FakeTelegram::start(TOKEN, BOT_ID, BOT_USERNAME).await;
    let _gateway = start(&fake, &telegram, "");
    telegram.push_message(telegram.voice_message("voice-slow", media_files::voice_note(2), 2));
    telegram.push_message(dm("second, typed after it"));
    let mut other = dm("hello from another chat");
    other["chat"]["id"] = 8.into();
    other["from"]["id"] = 8.into();
    telegram.push_message(other);
    // Chat 7's messages may be answered in one turn (the queue collects) or two: wait for the
    // answer that echoes the typed message.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    let sent = loop {
        let sent = telegram.calls_of("sendMessage");
        if sent.iter().any(|c| {
            c.body["text"]
                .as_str()
                .unwrap_or_default()
                .contains("second, typed")
        }) {
            break sent;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no answer to chat 7: {sent:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(
        sent[0].body["chat_id"].to_string().trim_matches('"'),
        "8",
        "the other chat is answered while the voice note is transcribed: {sent:?}"
    );
    // The voice note's conversation kept its order: its transcript before the typed message.
    let last = fake
        .requests()
        .into_iter()
        .filter(|r| r.path == "/v1/chat/completions")
        .map(|r| r.body["messages"].to_string())
        .rfind(|m| m.contains("second, typed after it"))
        .expect("the typed message reached the model");
    let transcript = last
        .find("first, the voice note")
        .expect("transcript in the history");
    let typed = last.find("second, typed after it").expect("typed message");
    assert!(transcript < typed, "{last}");
}

#[tokio::test]
async fn audio_keys_pick_the_model_and_shape_the_request_and_the_transcript() {
    let fake = FakeOpenAi::start().await;
    fake.push_transcript("Ann speaking, about the garden.");
    let telegram = FakeTelegram::start(TOKEN, BOT_ID, BOT_USERNAME).await;
    // The first entry takes nothing over 10 bytes: the second one transcribes.
    let media = r#"models: [
        { provider: "fake", model: "tiny", capabilities: ["audio"], maxBytes: 10 },
        { provider: "fake", model: "whisper-1", capabilities: ["audio"], prompt: "Names: Ann",
          headers: { "X-Whisper-Pool": "lan" } },
      ],
      audio: { maxChars: 12 }"#;
    let _gateway = start_with_media(&fake, &telegram, media);
    telegram.push_message(telegram.voice_message("voice-2", media_files::voice_note(2), 2));
    wait_for_texts(&telegram, 1).await;
    let uploads = fake.transcriptions();
    assert_eq!(
        uploads.len(),
        1,
        "the over-size entry was skipped, not called"
    );
    let upload = &uploads[0];
    assert_eq!(
        upload.fields.get("model").map(String::as_str),
        Some("whisper-1")
    );
    assert_eq!(
        upload.fields.get("prompt").map(String::as_str),
        Some("Names: Ann")
    );
    assert_eq!(
        upload.headers.get("x-whisper-pool").map(String::as_str),
        Some("lan")
    );
    let asked = user_text(&fake, 0);
    assert!(
        asked.contains("[Audio]\nTranscript:\nAnn speaking"),
        "{asked}"
    );
    assert!(
        !asked.contains("Ann speaking,"),
        "cut at maxChars (12): {asked}"
    );
}

#[tokio::test]
async fn a_photo_reaches_the_vision_model_downscaled_and_a_pdf_as_text() {
    let fake = FakeOpenAi::start().await;
    let telegram = FakeTelegram::start(TOKEN, BOT_ID, BOT_USERNAME).await;
    let _gateway = start(&fake, &telegram, "");
    // 2000 px wide: over the generic board's 1568 px side, so it is re-encoded.
    let photo = media_files::jpeg(2000, 1000);
    assert!(photo.len() < 1024 * 1024, "under mediaMaxMb");
    telegram.push_message(telegram.photo_message(
        "photo-1",
        photo,
        (2000, 1000),
        Some("what is this?"),
    ));
    wait_for_texts(&telegram, 1).await;
    let images = fake.image_parts();
    assert_eq!(images.len(), 1, "one image part");
    let (mime, bytes) = &images[0];
    assert_eq!(mime, "image/jpeg");
    let header = pincer::media::image::probe(&mut std::io::Cursor::new(bytes)).expect("a JPEG");
    assert_eq!(
        (header.width, header.height),
        (1568, 784),
        "downscaled to the board's side"
    );
    assert!(user_text(&fake, 0).contains("what is this?"));

    let pdf = media_files::pdf(&["Invoice 42", "Total due: 99 EUR"]);
    telegram.push_message(telegram.document_message(
        "doc-1",
        "invoice.pdf",
        "application/pdf",
        pdf,
        true,
    ));
    wait_for_texts(&telegram, 2).await;
    let asked = user_text(&fake, 1);
    assert!(
        asked.contains("<file name=\"invoice.pdf\" mime=\"application/pdf\">"),
        "{asked}"
    );
    assert!(asked.contains("Invoice 42\nTotal due: 99 EUR"), "{asked}");
    assert!(
        asked.contains("<<<EXTERNAL_UNTRUSTED_CONTENT id="),
        "{asked}"
    );
}

#[tokio::test]
async fn bad_media_gets_a_clear_message_and_the_gateway_keeps_answering() {
    let fake = FakeOpenAi::start().await;
    let telegram = FakeTelegram::start(TOKEN, BOT_ID, BOT_USERNAME).await;
    let mut gateway = start(&fake, &telegram, "");

    telegram.push_message(telegram.voice_message(
        "voice-cut",
        media_files::truncated_voice_note(3),
        3,
    ));
    let said = wait_for_texts(&telegram, 2).await.join("\n");
    assert!(
        said.contains("Your voice message could not be transcribed: the recording is truncated"),
        "{said}"
    );
    assert!(
        fake.transcriptions().is_empty(),
        "a cut recording is never uploaded"
    );

    telegram.push_message(telegram.photo_message(
        "bomb",
        media_files::png_bomb(50_000),
        (50_000, 50_000),
        None,
    ));
    let said = wait_for_texts(&telegram, 4).await.join("\n");
    assert!(
        said.contains("Your image was not shown to the model: the image is 50000 × 50000 pixels"),
        "{said}"
    );
    assert!(
        fake.image_parts().is_empty(),
        "the bomb never reaches the model"
    );

    telegram.push_message(telegram.document_message(
        "zip",
        "report.pdf",
        "application/pdf",
        media_files::zip(),
        true,
    ));
    let said = wait_for_texts(&telegram, 6).await.join("\n");
    assert!(
        said.contains(
            "Your file could not be read: report.pdf is not a PDF: its content is a ZIP archive"
        ),
        "{said}"
    );
    let asked = user_text(&fake, 2);
    assert!(
        asked.contains("[Unsupported document format: application/zip."),
        "{asked}"
    );

    let big = vec![b'x'; 2 * 1024 * 1024];
    telegram.push_message(telegram.document_message("big", "huge.txt", "text/plain", big, false));
    let said = wait_for_texts(&telegram, 8).await.join("\n");
    assert!(
        said.contains("The document you sent was not used (huge.txt, 2.0 MB: over the 1.0 MB limit, not downloaded)."),
        "{said}"
    );
    assert!(
        !telegram.downloads().iter().any(|d| d.contains("big")),
        "never fetched"
    );

    telegram.push_message(dm("still there?"));
    let said = wait_for_texts(&telegram, 9).await;
    assert!(
        said.last().is_some_and(|t| t.contains("still there?")),
        "{said:?}"
    );
    assert!(gateway.alive(), "the gateway survived every file");
}
