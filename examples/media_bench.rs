//! Inbound media's memory cost, run by `scripts/bench --media`: the gateway, with the Telegram channel on the
//! fake Telegram and a vision model plus a transcription model on the fake OpenAI, is sent a photo of about
//! 20 MB (a JPEG of noise, just under the Bot API's 20 MB download limit) and then a 10-minute voice note
//! (Ogg/Opus). For each it prints the gateway's idle VmRSS, its peak (VmHWM, reset between the two through
//! `/proc/<pid>/clear_refs`) and the peak above idle; the goal is at most 32 MiB above idle.
//!
//! It reports numbers only (no thresholds); it fails only when a reply never comes.
//!
//!   cargo run --release --example media_bench -- --bin target/release/pincer

#[allow(dead_code)]
#[path = "../tests/support/fake_openai.rs"]
mod fake_openai;
#[allow(dead_code)]
#[path = "../tests/support/fake_telegram.rs"]
mod fake_telegram;
#[path = "support/gateway_child.rs"]
mod gateway_child;
#[allow(dead_code)]
#[path = "../tests/support/media_files.rs"]
mod media_files;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fake_openai::FakeOpenAi;
use fake_telegram::FakeTelegram;
use gateway_child::status_kib;
use rand::{Rng, SeedableRng};

const TELEGRAM_TOKEN: &str = "123456789:AAE-media_TOKEN_value";
const READY_TIMEOUT: Duration = Duration::from_secs(60);
const REPLY_TIMEOUT: Duration = Duration::from_secs(300);
/// The Bot API's getFile limit is 20 MB: the photo stays just under it.
const PHOTO_TARGET_BYTES: usize = 19_500_000;
const VOICE_SECONDS: u64 = 600;

#[derive(Debug, thiserror::Error)]
enum BenchError {
    #[error("usage: media_bench --bin PATH: {0}")]
    Usage(String),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Failed(String),
}

/// A JPEG of random pixels, grown until it is about `target` bytes (noise barely compresses).
fn noise_jpeg(target: usize) -> (Vec<u8>, (u32, u32)) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(20);
    let mut side: u32 = 2000;
    loop {
        let pixels: Vec<u8> = (0..side as usize * side as usize * 3)
            .map(|_| rng.gen())
            .collect();
        let mut out = Vec::new();
        let encoded = jpeg_encoder::Encoder::new(&mut out, 92).encode(
            &pixels,
            side as u16,
            side as u16,
            jpeg_encoder::ColorType::Rgb,
        );
        if encoded.is_err() {
            return (out, (side, side));
        }
        if out.len() >= target * 95 / 100 && out.len() <= target {
            return (out, (side, side));
        }
        let scale = (target as f64 * 0.98 / out.len() as f64).sqrt();
        side = ((f64::from(side) * scale) as u32).clamp(256, 8000);
    }
}

/// Resets the peak resident set size (VmHWM) to the current one.
fn reset_peak(pid: u32) -> Result<(), BenchError> {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5")
        .map_err(|e| BenchError::Failed(format!("cannot reset VmHWM of {pid}: {e}")))
}

fn mib(kib: u64) -> String {
    format!("{:.2} MiB", kib as f64 / 1024.0)
}

fn spawn_gateway(bin: &PathBuf, dir: &std::path::Path, config: &str) -> Result<Child, BenchError> {
    let config_path = dir.join("pincer.json5");
    std::fs::write(&config_path, config)?;
    let mut child = Command::new(bin)
        .arg("gateway")
        .args(["--port", "0", "--token", "media-bench"])
        .arg("--config")
        .arg(&config_path)
        .arg("--data-dir")
        .arg(dir.join("data"))
        .env_remove("PINCER_CONFIG")
        .env_remove("PINCER_DATA_DIR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    if gateway_child::wait_ready(&mut child, READY_TIMEOUT).is_none() {
        let _ = child.kill();
        let _ = child.wait();
        return Err(BenchError::Failed(
            "the gateway did not become ready".into(),
        ));
    }
    Ok(child)
}

async fn wait_for_replies(telegram: &FakeTelegram, count: usize) -> Result<Duration, BenchError> {
    let started = Instant::now();
    while telegram.calls_of("sendMessage").len() < count {
        if started.elapsed() > REPLY_TIMEOUT {
            return Err(BenchError::Failed(format!(
                "no reply {count} within {REPLY_TIMEOUT:?}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(started.elapsed())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), BenchError> {
    let mut args = std::env::args().skip(1);
    let bin = match (args.next().as_deref(), args.next()) {
        (Some("--bin"), Some(path)) => PathBuf::from(path),
        _ => return Err(BenchError::Usage("--bin is required".into())),
    };
    let llm = FakeOpenAi::start().await;
    let telegram = FakeTelegram::start(TELEGRAM_TOKEN, 42, "pincer_bot").await;
    let dir = tempfile::tempdir()?;
    let config = format!(
        r#"{{
  models: {{ providers: {{ fake: {{ baseUrl: "{}", apiKey: "sk-bench", api: "openai-completions",
      models: [{{ id: "gpt-vision", contextWindow: 128000, input: ["text", "image"] }}] }} }} }},
  agents: {{ defaults: {{ model: {{ primary: "fake/gpt-vision" }} }} }},
  tools: {{ media: {{ image: {{ maxBytes: 26214400 }}, models: [{{ provider: "fake", model: "whisper-1", capabilities: ["audio"] }}] }} }},
  channels: {{ telegram: {{ botToken: "{TELEGRAM_TOKEN}", apiRoot: "{}", allowFrom: [7], streaming: "off", mediaMaxMb: 25 }} }},
}}"#,
        llm.base_url(),
        telegram.api_root()
    );
    let mut child = spawn_gateway(&bin, dir.path(), &config)?;
    let pid = child.id();

    let (photo, size) = noise_jpeg(PHOTO_TARGET_BYTES);
    let voice = media_files::voice_note(VOICE_SECONDS);
    // Settled, and the first long poll parked.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let idle = status_kib(pid, "VmRSS:");
    reset_peak(pid)?;
    telegram.push_message(telegram.photo_message(
        "bench-photo",
        photo.clone(),
        size,
        Some("what is this?"),
    ));
    let photo_time = wait_for_replies(&telegram, 1).await?;
    let photo_peak = status_kib(pid, "VmHWM:");

    tokio::time::sleep(Duration::from_secs(3)).await;
    let between = status_kib(pid, "VmRSS:");
    reset_peak(pid)?;
    llm.push_transcript("a ten minute voice note");
    telegram.push_message(telegram.voice_message("bench-voice", voice.clone(), VOICE_SECONDS));
    let voice_time = wait_for_replies(&telegram, 2).await?;
    let voice_peak = status_kib(pid, "VmHWM:");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = status_kib(pid, "VmRSS:");
    let _ = child.kill();
    let _ = child.wait();

    println!(
        "photo: {} bytes JPEG, {}x{} px; voice note: {} s Ogg/Opus, {} bytes",
        photo.len(),
        size.0,
        size.1,
        VOICE_SECONDS,
        voice.len()
    );
    println!("idle VmRSS (5 s after ready)            {}", mib(idle));
    println!(
        "photo turn: peak VmHWM {}  = {} above idle  (reply after {:.1} s)",
        mib(photo_peak),
        mib(photo_peak.saturating_sub(idle)),
        photo_time.as_secs_f64()
    );
    println!("VmRSS 3 s after the photo's reply         {}", mib(between));
    println!(
        "voice turn: peak VmHWM {}  = {} above idle, {} above the RSS before it  (reply after {:.1} s)",
        mib(voice_peak),
        mib(voice_peak.saturating_sub(idle)),
        mib(voice_peak.saturating_sub(between)),
        voice_time.as_secs_f64()
    );
    println!("VmRSS 3 s after the voice note's reply    {}", mib(after));
    let images = llm.image_parts();
    if let Some((mime, bytes)) = images.first() {
        println!(
            "the model received one {mime} image part of {} bytes",
            bytes.len()
        );
    }
    println!("transcriptions requested: {}", llm.transcriptions().len());
    for call in telegram.calls_of("sendMessage") {
        let text = call.body["text"].as_str().unwrap_or_default();
        println!("reply: {}", text.chars().take(160).collect::<String>());
    }
    Ok(())
}
