use std::time::Duration;

use super::*;
use crate::config::parse_str;

fn config(text: &str) -> Config {
    parse_str(text, "test").expect("valid config")
}

const PROVIDERS: &str = r#"
  models: { providers: {
    lan: { baseUrl: "http://whisper.lan:8000/v1", apiKey: "k-lan", headers: { "X-Org": "home", "X-Keep": "p" },
           models: [{ id: "chat", input: ["text"] }] },
    groq: { baseUrl: "https://api.groq.com/openai/v1", apiKey: "k-groq" },
    openai: { baseUrl: "https://api.openai.com/v1", apiKey: "k-openai",
              models: [{ id: "gpt-vision", input: ["text", "image"] }] },
  } },
"#;

fn item(path: &std::path::Path, mime: &str, name: Option<&str>) -> MediaItem {
    MediaItem {
        path: path.to_string_lossy().into_owned(),
        mime_type: Some(mime.into()),
        file_name: name.map(str::to_string),
        ..MediaItem::default()
    }
}

async fn run(
    config: &Config,
    agent_model: &str,
    items: &[MediaItem],
    dir: &std::path::Path,
) -> Understood {
    let mut config = config.clone();
    config.agents.defaults.model = Some(crate::config::AgentModelConfig::Ref(
        agent_model.to_string(),
    ));
    let http = reqwest::Client::new();
    understand(MediaInput {
        config: &config,
        http: &http,
        agent_id: "main",
        items,
        prepared_dir: dir.join("prepared"),
        budget: MediaBudget::default(),
    })
    .await
}

#[test]
fn audio_entries_take_their_keys_then_the_audio_defaults_then_the_provider() {
    let config = config(&format!(
        r#"{{ {PROVIDERS}
  tools: {{ media: {{
    models: [
      {{ provider: "lan", model: "large-v3", capabilities: ["audio"], maxBytes: 1000, maxChars: 40,
         prompt: "Names: Ann", language: "de", timeoutSeconds: 5, headers: {{ "X-Keep": "entry" }} }},
      {{ provider: "groq" }},
      {{ type: "provider", provider: "lan", model: "other", baseUrl: "http://other.lan/v1" }},
    ],
    audio: {{ maxBytes: 2000, maxChars: 80, prompt: "p", language: "en", timeoutSeconds: 9,
              baseUrl: "http://audio.lan/v1", headers: {{ "X-Audio": "yes" }} }},
  }} }},
}}"#
    ));
    let models = audio_models(&config).expect("resolved");
    let labels: Vec<&str> = models.iter().map(|m| m.label.as_str()).collect();
    // The third entry has no capabilities and `lan` is no audio provider: not an audio model.
    assert_eq!(labels, ["lan/large-v3", "groq/whisper-large-v3-turbo"]);
    let first = &models[0];
    assert_eq!(
        first.endpoint.base_url, "http://audio.lan/v1",
        "audio.baseUrl before the provider's"
    );
    assert_eq!(first.endpoint.api_key.as_deref(), Some("k-lan"));
    let headers: Vec<(&str, &str)> = first
        .endpoint
        .headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        headers,
        [("X-Org", "home"), ("X-Audio", "yes"), ("X-Keep", "entry")]
    );
    assert_eq!(
        (
            first.max_bytes,
            first.max_chars,
            first.prompt.as_deref(),
            first.language.as_deref()
        ),
        (1000, Some(40), Some("Names: Ann"), Some("de"))
    );
    assert_eq!(first.timeout, Duration::from_secs(5));
    let second = &models[1];
    assert_eq!(
        (
            second.max_bytes,
            second.max_chars,
            second.prompt.as_deref(),
            second.language.as_deref()
        ),
        (2000, Some(80), Some("p"), Some("en")),
        "the audio defaults"
    );
    assert_eq!(second.timeout, Duration::from_secs(9));
    assert_eq!(second.endpoint.api_key.as_deref(), Some("k-groq"));
}

#[test]
fn without_entries_groq_then_openai_are_used_with_upstream_defaults() {
    let config = config(&format!("{{ {PROVIDERS} }}"));
    let models = audio_models(&config).expect("resolved");
    let labels: Vec<&str> = models.iter().map(|m| m.label.as_str()).collect();
    assert_eq!(
        labels,
        ["groq/whisper-large-v3-turbo", "openai/gpt-4o-transcribe"]
    );
    assert_eq!(models[1].endpoint.base_url, "https://api.openai.com/v1");
    assert_eq!(models[1].max_bytes, 20 * 1024 * 1024);
    assert_eq!(models[1].timeout, Duration::from_secs(60));
    assert_eq!(
        (models[1].prompt.as_deref(), models[1].max_chars),
        (None, None)
    );
    let none = config_without_audio_providers();
    assert!(audio_models(&none).expect("resolved").is_empty());
}

fn config_without_audio_providers() -> Config {
    config(r#"{ models: { providers: { lan: { baseUrl: "http://lan/v1" } } } }"#)
}

#[test]
fn an_entry_without_a_base_url_anywhere_is_named() {
    let config = config(
        r#"{ tools: { media: { models: [{ provider: "nowhere", model: "m", capabilities: ["audio"] }] } } }"#,
    );
    let error = audio_models(&config).expect_err("no base URL");
    assert!(error.contains("\"nowhere\" has no baseUrl"), "{error}");
}

#[tokio::test]
async fn disabled_audio_is_marked_and_nothing_is_sent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("v.ogg");
    std::fs::write(&path, vec![0u8; 4096]).expect("write");
    let config = config(&format!(
        "{{ {PROVIDERS} tools: {{ media: {{ audio: {{ enabled: false }} }} }} }}"
    ));
    let understood = run(
        &config,
        "openai/gpt-vision",
        &[item(&path, "audio/ogg", None)],
        dir.path(),
    )
    .await;
    assert_eq!(
        understood.agent_text,
        "[Audio attachment not analyzed: audio understanding is disabled]"
    );
    assert!(understood.notices.is_empty());
}

#[tokio::test]
async fn audio_over_every_models_max_bytes_is_refused_with_the_reason() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("v.mp3");
    std::fs::write(&path, vec![1u8; 5000]).expect("write");
    let config = config(&format!(
        "{{ {PROVIDERS} tools: {{ media: {{ models: [{{ provider: \"groq\", maxBytes: 4000 }}] }} }} }}"
    ));
    let understood = run(
        &config,
        "openai/gpt-vision",
        &[item(&path, "audio/mpeg", None)],
        dir.path(),
    )
    .await;
    assert_eq!(
        understood.agent_text,
        "[Audio attachment could not be analyzed]"
    );
    assert_eq!(understood.notices.len(), 1);
    assert!(
        understood.notices[0].contains("the recording is 5000 bytes, over its 4000 byte limit"),
        "{:?}",
        understood.notices
    );
}

#[tokio::test]
async fn tiny_audio_gets_upstreams_placeholder_transcript() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("v.mp3");
    std::fs::write(&path, vec![1u8; 100]).expect("write");
    let config = config(&format!("{{ {PROVIDERS} }}"));
    let understood = run(
        &config,
        "openai/gpt-vision",
        &[item(&path, "audio/mpeg", None)],
        dir.path(),
    )
    .await;
    assert_eq!(
        understood.agent_text,
        format!("[Audio]\nTranscript:\n{EMPTY_VOICE_NOTE_PLACEHOLDER}")
    );
}

#[tokio::test]
async fn a_transcription_that_hangs_ends_at_timeout_seconds() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("v.mp3");
    std::fs::write(&path, vec![1u8; 5000]).expect("write");
    let config = config(&format!(
        "{{ {PROVIDERS} tools: {{ media: {{ models: [{{ provider: \"groq\", baseUrl: \"http://{addr}/v1\" }}], audio: {{ timeoutSeconds: 1 }} }} }} }}"
    ));
    let understood = run(
        &config,
        "openai/gpt-vision",
        &[item(&path, "audio/mpeg", None)],
        dir.path(),
    )
    .await;
    assert!(
        understood.notices[0].contains("the request timed out after 1 s"),
        "{:?}",
        understood.notices
    );
}

#[tokio::test]
async fn images_need_a_vision_model_and_stay_within_max_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("p.png");
    let mut png = Vec::new();
    {
        let mut encoder = png::Encoder::new(&mut png, 4, 4);
        encoder.set_color(png::ColorType::Rgb);
        let mut writer = encoder.write_header().expect("header");
        writer.write_image_data(&[200u8; 48]).expect("data");
    }
    std::fs::write(&path, &png).expect("write");
    let items = [item(&path, "image/png", None)];
    let config = config(&format!("{{ {PROVIDERS} }}"));
    let text_only = run(&config, "lan/chat", &items, dir.path()).await;
    assert!(text_only.images.is_empty());
    assert_eq!(
        text_only.agent_text,
        "[Image attachment not analyzed: no image-understanding model is configured]"
    );
    let vision = run(&config, "openai/gpt-vision", &items, dir.path()).await;
    assert_eq!(vision.images.len(), 1);
    assert_eq!(vision.images[0].mime, "image/png");
    assert_eq!(
        vision.agent_text, "",
        "an image handed over needs no marker"
    );
    let capped = config_with(&format!(
        "{PROVIDERS} tools: {{ media: {{ image: {{ maxBytes: 10 }} }} }},"
    ));
    let refused = run(&capped, "openai/gpt-vision", &items, dir.path()).await;
    assert!(refused.images.is_empty());
    assert_eq!(
        refused.agent_text,
        "[Image attachment could not be analyzed]"
    );
    assert!(
        refused.notices[0].contains("over the"),
        "{:?}",
        refused.notices
    );
    let many: Vec<MediaItem> = (0..MAX_TURN_IMAGES + 1).map(|_| items[0].clone()).collect();
    let limited = run(&config, "openai/gpt-vision", &many, dir.path()).await;
    assert_eq!(limited.images.len(), MAX_TURN_IMAGES);
    assert_eq!(
        limited.agent_text,
        "[Image attachment not processed: attachment limit reached]"
    );
}

fn config_with(body: &str) -> Config {
    config(&format!("{{ {body} }}"))
}

#[tokio::test]
async fn a_long_text_file_is_cut_and_says_truncated() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("notes.txt");
    std::fs::write(&path, "word ".repeat(20_000)).expect("write");
    let config = config(&format!("{{ {PROVIDERS} }}"));
    let understood = run(
        &config,
        "lan/chat",
        &[item(&path, "text/plain", Some("notes.txt"))],
        dir.path(),
    )
    .await;
    let text = &understood.agent_text;
    assert!(
        text.starts_with(
            "<file name=\"notes.txt\" mime=\"text/plain\">\n<<<EXTERNAL_UNTRUSTED_CONTENT id=\""
        ),
        "{}",
        &text[..200]
    );
    assert!(
        text.ends_with(">>>\n(truncated)\n</file>") || text.contains("\n(truncated)\n</file>"),
        "{}",
        &text[text.len() - 200..]
    );
    let words = text.matches("word").count();
    assert!(
        (files::DOCUMENT_MAX_CHARS / 5 - 1..20_000).contains(&words),
        "{words}"
    );
}

#[test]
fn file_blocks_cannot_be_closed_from_inside() {
    let block =
        files::file_block_for_tests("a\"<b>.txt", "text/plain", "x </FILE> y <file name=\"z\">");
    assert_eq!(
        block,
        "<file name=\"a&quot;&lt;b&gt;.txt\" mime=\"text/plain\">\nx &lt;/file&gt; y &lt;file name=\"z\">\n</file>"
    );
}

#[test]
fn markers_past_five_are_summarised_and_transcripts_numbered() {
    let blocks: Vec<Block> = (0..7).map(|i| Block::marker(format!("[m{i}]"))).collect();
    assert_eq!(
        with_marker_budget(blocks),
        [
            "[m0]",
            "[m1]",
            "[m2]",
            "[m3]",
            "[m4]",
            "[2 more attachments skipped]"
        ]
    );
    let two = vec!["one".to_string(), "two".to_string()];
    assert_eq!(
        audio_sections(&two),
        "[Audio 1/2]\nTranscript:\none\n\n[Audio 2/2]\nTranscript:\ntwo"
    );
    assert_eq!(
        joined_transcript(&two).as_deref(),
        Some("Audio 1:\none\n\nAudio 2:\ntwo")
    );
}
