//! Outbound media through the real binary and the fake Telegram Bot API: a reply's `MEDIA:` lines
//! (upstream's convention) leave the text and arrive as uploads the fake parses as Telegram
//! would: a photo by `sendPhoto` (the text as its caption), a large photo re-encoded within the
//! size limit first, a voice note by `sendVoice` when the reply says `[[audio_as_voice]]`, a PDF by
//! `sendDocument`. Bad input gets one clear message in the chat and the gateway keeps answering:
//! a missing file, a path outside the workspace, a file over Telegram's 50 MB cap, a truncated
//! voice note.

mod support;

use std::path::PathBuf;

use support::fake_openai::{FakeOpenAi, FakeReply};
use support::fake_telegram::{FakeTelegram, RecordedCall};
use support::gateway::GatewayProcess;
use support::media_files;
use support::telegram_harness::{dm, BOT_ID, BOT_USERNAME, TOKEN};

const GATEWAY_TOKEN: &str = "media-out-token";

fn start(fake: &FakeOpenAi, telegram: &FakeTelegram) -> GatewayProcess {
    let config = format!(
        r#"{{
  models: {{ providers: {{ fake: {{ baseUrl: "{}", apiKey: "sk-test", api: "openai-completions",
      models: [{{ id: "gpt-test", contextWindow: 128000 }}] }} }} }},
  agents: {{ defaults: {{ model: {{ primary: "fake/gpt-test" }} }} }},
  channels: {{ telegram: {{ botToken: "{TOKEN}", apiRoot: "{}", allowFrom: [7], streaming: "off" }} }},
}}"#,
        fake.base_url(),
        telegram.api_root()
    );
    GatewayProcess::start_with_private_tmp(&config, &["--port", "0", "--token", GATEWAY_TOKEN])
}

fn reply(text: &str) -> FakeReply {
    FakeReply::Text {
        chunks: vec![text.to_string()],
        delay_ms: 0,
    }
}

/// The default agent's workspace (created here: the test puts files in it before the reply).
fn workspace(gateway: &GatewayProcess) -> PathBuf {
    let dir = gateway.data_dir().join("workspace");
    std::fs::create_dir_all(&dir).expect("workspace");
    dir
}

fn file_of(call: &RecordedCall, field: &str) -> Vec<u8> {
    call.files
        .iter()
        .find(|f| f.field == field)
        .unwrap_or_else(|| panic!("no {field} file in {call:?}"))
        .bytes
        .clone()
}

/// The width and height in a baseline JPEG's SOF0 header.
fn jpeg_size(bytes: &[u8]) -> (u16, u16) {
    let at = bytes
        .windows(2)
        .position(|w| w == [0xff, 0xc0])
        .expect("SOF0");
    let h = u16::from_be_bytes([bytes[at + 5], bytes[at + 6]]);
    let w = u16::from_be_bytes([bytes[at + 7], bytes[at + 8]]);
    (w, h)
}

#[tokio::test]
async fn a_media_line_arrives_as_a_photo_with_the_text_as_its_caption() {
    let fake = FakeOpenAi::start().await;
    let telegram = FakeTelegram::start(TOKEN, BOT_ID, BOT_USERNAME).await;
    let gateway = start(&fake, &telegram);
    let photo = media_files::jpeg(320, 200);
    std::fs::write(workspace(&gateway).join("chart.jpg"), &photo).expect("write");
    fake.push_reply(reply("Here is the **chart**.\nMEDIA: ./chart.jpg"));
    telegram.push_message(dm("send me the chart"));
    let sent = telegram.wait_for_calls("sendPhoto", 1).await;
    assert_eq!(file_of(&sent[0], "photo"), photo, "the file as it is");
    let upload = &sent[0].files[0];
    assert_eq!(upload.file_name, "chart.jpg");
    assert_eq!(upload.content_type, "image/jpeg");
    assert_eq!(sent[0].body["chat_id"], "7");
    assert_eq!(sent[0].body["caption"], "Here is the <b>chart</b>.");
    assert_eq!(sent[0].body["parse_mode"], "HTML");
    assert!(
        telegram.calls_of("sendMessage").is_empty(),
        "the text went as the caption, not a message of its own"
    );
}

#[tokio::test]
async fn a_large_photo_is_downscaled_and_a_voice_note_and_a_pdf_go_their_own_ways() {
    let fake = FakeOpenAi::start().await;
    let telegram = FakeTelegram::start(TOKEN, BOT_ID, BOT_USERNAME).await;
    let gateway = start(&fake, &telegram);
    let dir = workspace(&gateway);
    std::fs::create_dir_all(dir.join("out")).expect("dir");
    std::fs::write(dir.join("out/big.jpg"), media_files::jpeg(4000, 1000)).expect("write");
    let voice = media_files::voice_note(3);
    std::fs::write(dir.join("note.ogg"), &voice).expect("write");
    let pdf = media_files::pdf(&["Quarterly report"]);
    std::fs::write(dir.join("report.pdf"), &pdf).expect("write");
    fake.push_reply(reply(
        "[[audio_as_voice]]\nAll three:\nMEDIA: out/big.jpg\nMEDIA: `./note.ogg`\nMEDIA: ./report.pdf",
    ));
    telegram.push_message(dm("everything please"));
    let document = telegram.wait_for_calls("sendDocument", 1).await;
    let photo = telegram.calls_of("sendPhoto");
    let voice_calls = telegram.calls_of("sendVoice");
    assert_eq!(photo.len(), 1);
    let jpeg = file_of(&photo[0], "photo");
    assert_eq!(jpeg_size(&jpeg), (2048, 512), "re-encoded within 2048 px");
    assert_eq!(photo[0].body["caption"], "All three:");
    assert_eq!(voice_calls.len(), 1, "push-to-talk, not an audio file");
    assert!(telegram.calls_of("sendAudio").is_empty());
    assert_eq!(file_of(&voice_calls[0], "voice"), voice);
    assert_eq!(voice_calls[0].files[0].content_type, "audio/ogg");
    assert_eq!(file_of(&document[0], "document"), pdf);
    assert_eq!(document[0].files[0].content_type, "application/pdf");
    assert!(voice_calls[0].body.get("caption").is_none(), "one caption");
    let outbound = gateway.tmp_dir().join("pincer-media/outbound");
    // Removed once the reply's last upload is answered (a hang guard, not a timing claim).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let left = std::fs::read_dir(&outbound).map_or(0, |d| d.count());
        if left == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the re-encoded copy is removed after sending ({left} left)"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(
        outbound.exists(),
        "the copy was made in the media area's outbound folder"
    );
}

#[tokio::test]
async fn bad_media_gets_one_clear_message_and_the_gateway_keeps_answering() {
    let fake = FakeOpenAi::start().await;
    let telegram = FakeTelegram::start(TOKEN, BOT_ID, BOT_USERNAME).await;
    let mut gateway = start(&fake, &telegram);
    let dir = workspace(&gateway);
    let huge = std::fs::File::create(dir.join("huge.zip")).expect("create");
    huge.set_len(51 * 1024 * 1024).expect("sparse 51 MB");
    std::fs::write(dir.join("cut.ogg"), media_files::truncated_voice_note(3)).expect("write");
    let outside = gateway.data_dir().join("secret.txt");
    std::fs::write(&outside, "not for the chat").expect("write");
    fake.push_reply(reply(&format!(
        "[[audio_as_voice]]\nTried:\nMEDIA: ./missing.png\nMEDIA: {}\nMEDIA: /etc/passwd\nMEDIA: ./huge.zip\nMEDIA: ./cut.ogg",
        outside.display()
    )));
    telegram.push_message(dm("send the files"));
    let texts = telegram.wait_for_calls("sendMessage", 2).await;
    let said: Vec<String> = texts
        .iter()
        .map(|c| c.body["text"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(said[0], "Tried:", "the text still arrives");
    let notice = &said[1];
    assert!(notice.starts_with("⚠️ Not sent:"), "{notice}");
    for expected in [
        "./missing.png: no such file",
        &format!("{}: outside the agent's workspace", outside.display()),
        "/etc/passwd: outside the agent's workspace",
        "huge.zip is 51.0 MB; Telegram takes files up to 50.0 MB",
        "cut.ogg: the recording is truncated",
    ] {
        assert!(notice.contains(expected), "{expected:?} in {notice}");
    }
    for method in ["sendPhoto", "sendDocument", "sendVoice", "sendAudio"] {
        assert!(telegram.calls_of(method).is_empty(), "no {method}");
    }
    fake.push_reply(reply("still here"));
    telegram.push_message(dm("are you there?"));
    let texts = telegram.wait_for_calls("sendMessage", 3).await;
    assert_eq!(texts[2].body["text"], "still here");
    assert!(gateway.alive());
}

#[tokio::test]
async fn the_message_tool_and_the_send_method_take_media_urls() {
    let fake = FakeOpenAi::start().await;
    let telegram = FakeTelegram::start(TOKEN, BOT_ID, BOT_USERNAME).await;
    let gateway = start(&fake, &telegram);
    let dir = workspace(&gateway);
    let photo = media_files::jpeg(64, 48);
    std::fs::write(dir.join("plan.jpg"), &photo).expect("write");
    let voice = media_files::voice_note(2);
    std::fs::write(dir.join("hello.ogg"), &voice).expect("write");
    fake.push_reply(FakeReply::ToolCalls {
        calls: vec![(
            "call-1".into(),
            "message".into(),
            r#"{"action":"send","channel":"telegram","target":"99","message":"The plan","media":"./plan.jpg"}"#
                .into(),
        )],
    });
    fake.push_reply(reply("Sent it."));
    telegram.push_message(dm("send 99 the plan"));
    let photos = telegram.wait_for_calls("sendPhoto", 1).await;
    assert_eq!(photos[0].body["chat_id"], "99");
    assert_eq!(photos[0].body["caption"], "The plan");
    assert_eq!(file_of(&photos[0], "photo"), photo);
    telegram.wait_for_calls("sendMessage", 1).await;

    let (mut client, _) = support::ws_client::TestClient::connect(
        &gateway.url(),
        Some(GATEWAY_TOKEN),
        &["operator.admin"],
        None,
    )
    .await;
    let sent = client
        .call(
            "send",
            serde_json::json!({"to": "7", "channel": "telegram", "mediaUrl": "hello.ogg",
                "asVoice": true, "idempotencyKey": "send-voice-1"}),
        )
        .await;
    assert_eq!(sent["ok"], true, "{sent}");
    let voices = telegram.wait_for_calls("sendVoice", 1).await;
    assert_eq!(file_of(&voices[0], "voice"), voice);
    assert_eq!(sent["payload"]["channel"], "telegram");
    assert!(sent["payload"]["messageId"]
        .as_str()
        .is_some_and(|id| !id.is_empty()));
    let refused = client
        .call(
            "send",
            serde_json::json!({"to": "7", "channel": "telegram", "mediaUrls": ["/etc/hostname"],
                "idempotencyKey": "send-bad-1"}),
        )
        .await;
    assert_eq!(refused["ok"], false, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("/etc/hostname: outside the agent's workspace"),
        "{message}"
    );
}

#[tokio::test]
async fn the_web_chat_shows_a_replys_image_inline() {
    use base64::Engine;
    use support::ws_client::{Read, TestClient};
    let fake = FakeOpenAi::start().await;
    let telegram = FakeTelegram::start(TOKEN, BOT_ID, BOT_USERNAME).await;
    let gateway = start(&fake, &telegram);
    let photo = media_files::jpeg(120, 80);
    std::fs::write(workspace(&gateway).join("sky.jpg"), &photo).expect("write");
    fake.push_reply(reply("Tonight's sky:\nMEDIA: ./sky.jpg"));
    let (mut client, _) = TestClient::connect(
        &gateway.url(),
        Some(GATEWAY_TOKEN),
        &["operator.admin"],
        None,
    )
    .await;
    let params =
        serde_json::json!({"sessionKey": "main", "message": "show me", "idempotencyKey": "wc-1"});
    client.request("chat.send", params).await;
    let final_event = loop {
        match client.read().await {
            Read::Frame(f) if f["event"] == "chat" && f["payload"]["state"] == "final" => {
                break f["payload"].clone()
            }
            Read::Frame(_) => {}
            Read::Closed { code, reason } => panic!("closed ({code} {reason})"),
        }
    };
    let content = final_event["message"]["content"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        content[0],
        serde_json::json!({"type": "text", "text": "Tonight's sky:"})
    );
    assert_eq!(content[1]["type"], "input_image");
    let url = content[1]["image_url"].as_str().expect("a data URL");
    let data = url
        .strip_prefix("data:image/jpeg;base64,")
        .expect("a JPEG data URL");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .expect("base64");
    assert_eq!(bytes, photo, "the image as it is (small enough)");
}

fn start_speaking(fake: &FakeOpenAi, telegram: &FakeTelegram, auto: &str) -> GatewayProcess {
    start_speaking_with(fake, telegram, auto, "")
}

/// [`start_speaking`] with more `providers.openai` keys (`extra`, JSON5 after a comma).
fn start_speaking_with(
    fake: &FakeOpenAi,
    telegram: &FakeTelegram,
    auto: &str,
    extra: &str,
) -> GatewayProcess {
    let config = format!(
        r#"{{
  models: {{ providers: {{ fake: {{ baseUrl: "{base}", apiKey: "sk-test", api: "openai-completions",
      models: [{{ id: "gpt-test", contextWindow: 128000 }}] }} }} }},
  agents: {{ defaults: {{ model: {{ primary: "fake/gpt-test" }} }} }},
  tools: {{ media: {{ models: [{{ provider: "fake", model: "whisper-1", capabilities: ["audio"] }}] }} }},
  tts: {{ auto: "{auto}", providers: {{ openai: {{ apiKey: "sk-tts", baseUrl: "{base}" {extra} }} }} }},
  channels: {{ telegram: {{ botToken: "{TOKEN}", apiRoot: "{api}", allowFrom: [7], streaming: "off",
      tts: {{ providers: {{ openai: {{ speakerVoice: "nova" }} }} }} }} }},
}}"#,
        base = fake.base_url(),
        api = telegram.api_root()
    );
    GatewayProcess::start_with_private_tmp(&config, &["--port", "0", "--token", GATEWAY_TOKEN])
}

#[tokio::test]
async fn a_voice_note_is_answered_with_a_spoken_reply_under_tts_inbound() {
    let fake = FakeOpenAi::start().await;
    fake.push_transcript("Will it rain tomorrow?");
    let telegram = FakeTelegram::start(TOKEN, BOT_ID, BOT_USERNAME).await;
    let _gateway = start_speaking(&fake, &telegram, "inbound");
    fake.push_reply(reply("Typed first."));
    telegram.push_message(dm("a typed question"));
    telegram.wait_for_calls("sendMessage", 1).await;
    fake.push_reply(reply("**No** rain tomorrow."));
    telegram.push_message(telegram.voice_message("voice-1", media_files::voice_note(2), 2));
    let voices = telegram.wait_for_calls("sendVoice", 1).await;
    assert_eq!(
        voices[0].body["caption"], "<b>No</b> rain tomorrow.",
        "the voice note carries the text reply as its caption"
    );
    let texts = telegram.calls_of("sendMessage");
    assert_eq!(
        texts.len(),
        1,
        "only the typed question's answer: {texts:?}"
    );
    let speech = fake.speech_requests();
    assert_eq!(
        speech.len(),
        1,
        "the typed message was not spoken: {speech:?}"
    );
    assert_eq!(speech[0]["input"], "No rain tomorrow.");
    assert_eq!(speech[0]["response_format"], "opus");
    assert_eq!(speech[0]["voice"], "nova", "the channel's layer");
    assert_eq!(speech[0]["model"], "gpt-4o-mini-tts");
    let sent = &voices[0].files[0];
    assert_eq!(sent.content_type, "audio/ogg");
    let info = pincer::media::ogg::check_reader(sent.bytes.as_slice()).expect("a sound Ogg stream");
    assert_eq!(info.codec, pincer::media::ogg::OggCodec::Opus);
    let authorized = fake.requests().iter().any(|r| {
        r.path == "/v1/audio/speech"
            && r.headers.get("authorization").map(String::as_str) == Some("Bearer sk-tts")
    });
    assert!(authorized, "the tts provider's key");
}

#[tokio::test]
async fn speech_that_is_not_opus_is_refused_in_the_chat() {
    let fake = FakeOpenAi::start().await;
    fake.speak_as_mp3();
    let telegram = FakeTelegram::start(TOKEN, BOT_ID, BOT_USERNAME).await;
    let mut gateway = start_speaking(&fake, &telegram, "always");
    fake.push_reply(reply("Hello there."));
    telegram.push_message(dm("hi"));
    let texts = telegram.wait_for_calls("sendMessage", 2).await;
    assert_eq!(texts[0].body["text"], "Hello there.");
    let notice = texts[1].body["text"].as_str().unwrap_or_default();
    assert!(
        notice.contains("cannot make a voice note of") && notice.contains("WAV"),
        "{notice}"
    );
    assert!(telegram.calls_of("sendVoice").is_empty());
    assert!(telegram.calls_of("sendAudio").is_empty());
    assert!(gateway.alive());
}

#[tokio::test]
async fn tagged_speaks_only_a_tagged_reply_and_the_tags_leave_the_text() {
    let fake = FakeOpenAi::start().await;
    let telegram = FakeTelegram::start(TOKEN, BOT_ID, BOT_USERNAME).await;
    let _gateway = start_speaking(&fake, &telegram, "tagged");
    fake.push_reply(reply("Just typed, nothing said."));
    telegram.push_message(dm("hi"));
    let texts = telegram.wait_for_calls("sendMessage", 1).await;
    assert_eq!(texts[0].body["text"], "Just typed, nothing said.");
    fake.push_reply(reply(
        "[[tts:voice=shimmer]]The **forecast** is dry.[[tts:text]]Dry all week.[[/tts:text]]",
    ));
    telegram.push_message(dm("weather?"));
    let voices = telegram.wait_for_calls("sendVoice", 1).await;
    assert_eq!(voices[0].body["caption"], "The <b>forecast</b> is dry.");
    let speech = fake.speech_requests();
    assert_eq!(
        speech.len(),
        1,
        "only the tagged reply is spoken: {speech:?}"
    );
    assert_eq!(
        speech[0]["input"], "Dry all week.",
        "the hidden spoken text"
    );
    assert_eq!(speech[0]["voice"], "shimmer", "the tag's voice");
    assert_eq!(
        telegram.calls_of("sendMessage").len(),
        1,
        "the tagged reply went as the caption"
    );
}

#[tokio::test]
async fn a_reply_too_long_for_a_caption_follows_its_voice_note() {
    let fake = FakeOpenAi::start().await;
    let telegram = FakeTelegram::start(TOKEN, BOT_ID, BOT_USERNAME).await;
    let _gateway = start_speaking(&fake, &telegram, "always");
    let long = "Sunny and mild. ".repeat(80);
    fake.push_reply(reply(&long));
    telegram.push_message(dm("long forecast"));
    let texts = telegram.wait_for_calls("sendMessage", 1).await;
    let voices = telegram.calls_of("sendVoice");
    assert_eq!(voices.len(), 1, "{:?}", telegram.calls());
    assert!(
        voices[0].body.get("caption").is_none(),
        "{} characters are over Telegram's 1,024",
        long.trim().chars().count()
    );
    assert_eq!(texts[0].body["text"], long.trim());
    assert!(
        voices[0].at <= texts[0].at,
        "the voice note first, the text after (upstream's follow-up text)"
    );
}

#[tokio::test]
async fn the_web_chat_embeds_a_replys_audio() {
    use base64::Engine;
    use support::ws_client::{Read, TestClient};
    let fake = FakeOpenAi::start().await;
    let telegram = FakeTelegram::start(TOKEN, BOT_ID, BOT_USERNAME).await;
    let gateway = start(&fake, &telegram);
    let note = media_files::voice_note(2);
    std::fs::write(workspace(&gateway).join("note.ogg"), &note).expect("write");
    fake.push_reply(reply("Listen:\nMEDIA: ./note.ogg\n[[audio_as_voice]]"));
    let (mut client, _) = TestClient::connect(
        &gateway.url(),
        Some(GATEWAY_TOKEN),
        &["operator.admin"],
        None,
    )
    .await;
    let params = serde_json::json!({"sessionKey": "main", "message": "say it", "idempotencyKey": "wc-audio"});
    client.request("chat.send", params).await;
    let final_event = loop {
        match client.read().await {
            Read::Frame(f) if f["event"] == "chat" && f["payload"]["state"] == "final" => {
                break f["payload"].clone()
            }
            Read::Frame(_) => {}
            Read::Closed { code, reason } => panic!("closed ({code} {reason})"),
        }
    };
    let content = &final_event["message"]["content"];
    assert_eq!(
        content[0],
        serde_json::json!({"type": "text", "text": "Listen:"})
    );
    let block = &content[1];
    assert_eq!(block["type"], "attachment", "{block}");
    assert_eq!(block["attachment"]["kind"], "audio");
    assert_eq!(block["attachment"]["label"], "note.ogg");
    assert_eq!(block["attachment"]["mimeType"], "audio/ogg");
    assert_eq!(block["attachment"]["isVoiceNote"], true);
    let url = block["attachment"]["url"].as_str().expect("a data URL");
    let data = url
        .strip_prefix("data:audio/ogg;base64,")
        .expect("an Ogg data URL");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .expect("base64");
    assert_eq!(bytes, note, "the voice note as it is");
}

#[tokio::test]
async fn speech_that_comes_as_wav_is_encoded_to_an_opus_voice_note() {
    let fake = FakeOpenAi::start().await;
    fake.speak_as_wav();
    let telegram = FakeTelegram::start(TOKEN, BOT_ID, BOT_USERNAME).await;
    let _gateway = start_speaking(&fake, &telegram, "always");
    // 45 characters: the fake speaks 3 seconds of tone.
    let said = "The forecast is dry all week, sunny and mild.";
    fake.push_reply(reply(said));
    telegram.push_message(dm("weather?"));
    let voices = telegram.wait_for_calls("sendVoice", 1).await;
    assert_eq!(voices[0].body["caption"], said);
    let sent = &voices[0].files[0];
    assert_eq!(sent.content_type, "audio/ogg");
    let info = pincer::media::ogg::check_reader(sent.bytes.as_slice()).expect("a sound Ogg stream");
    assert_eq!(info.codec, pincer::media::ogg::OggCodec::Opus);
    assert!(info.ended);
    assert_eq!(
        info.duration_ms,
        Some(3000),
        "the WAV's 3 s, trimmed by granule"
    );
    assert!(
        sent.bytes.len() < 3 * 24_000 * 2 / 4,
        "compressed: {} bytes for 3 s",
        sent.bytes.len()
    );
    assert!(
        telegram.calls_of("sendMessage").is_empty(),
        "no notice, the text went as the caption"
    );
}

#[tokio::test]
async fn speech_asked_as_raw_pcm_is_encoded_to_an_opus_voice_note() {
    let fake = FakeOpenAi::start().await;
    let telegram = FakeTelegram::start(TOKEN, BOT_ID, BOT_USERNAME).await;
    let _gateway = start_speaking_with(&fake, &telegram, "always", r#", responseFormat: "pcm""#);
    // 30 characters: the fake speaks 2 seconds of 24 kHz samples without a header.
    let said = "Two seconds of speech, please.";
    fake.push_reply(reply(said));
    telegram.push_message(dm("talk"));
    let voices = telegram.wait_for_calls("sendVoice", 1).await;
    assert_eq!(fake.speech_requests()[0]["response_format"], "pcm");
    let sent = &voices[0].files[0];
    let info = pincer::media::ogg::check_reader(sent.bytes.as_slice()).expect("a sound Ogg stream");
    assert_eq!(info.codec, pincer::media::ogg::OggCodec::Opus);
    assert_eq!(info.duration_ms, Some(2000));
    assert_eq!(voices[0].body["caption"], said);
}
