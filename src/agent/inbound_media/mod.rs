//! Understanding an admitted message's attachments before its turn, as OpenClaw's media
//! understanding does (`tools.media`): voice notes and audio become transcripts through an
//! OpenAI-compatible `/audio/transcriptions` endpoint (`audio.rs`), images become image parts for a
//! vision model, prepared within the board's pixel, memory and size limits, and documents (PDF,
//! plain text) become bounded `<file>` blocks (`files.rs`). What the model reads follows upstream:
//! `[Audio]` / `Transcript:` sections, `<file name=… mime=…>` blocks wrapped as untrusted content,
//! and `[Image attachment not analyzed: …]`-style markers (at most five, then a summary).
//! Whatever went wrong is also said to the sender, in plain words.
//!
//! Every file is read from disk with bounded buffers; the only bytes held whole are the prepared
//! images' (bounded by `imageMaxSide` and `KEEP_ORIGINAL_BYTES`), at most [`MAX_TURN_IMAGES`] per
//! turn. Jobs of all conversations share the board's `media.concurrency`.
//!
//! This module must not talk to a chat platform: the caller sends the notices.

mod audio;
mod files;

use std::path::PathBuf;
use std::sync::OnceLock;

use tokio::sync::Semaphore;

use crate::config::Config;
use crate::media::MediaBudget;
use crate::pipeline::context::MediaItem;

use super::providers::ImagePart;

pub use audio::{audio_models, AudioModel, EMPTY_VOICE_NOTE_PLACEHOLDER, MIN_AUDIO_FILE_BYTES};

/// Images one turn hands to the model at most (further ones get a marker).
pub const MAX_TURN_IMAGES: usize = 4;
/// Markers (skipped or failed attachments) rendered per message; the rest are summarised.
pub const MAX_SKIPPED_MARKERS: usize = 5;

/// What to understand.
pub struct MediaInput<'a> {
    pub config: &'a Config,
    pub http: &'a reqwest::Client,
    /// The agent that answers (its model decides whether images are passed).
    pub agent_id: &'a str,
    pub items: &'a [MediaItem],
    /// Where images re-encoded for the model are written (and removed once read).
    pub prepared_dir: PathBuf,
    pub budget: MediaBudget,
}

/// What the message's attachments gave.
#[derive(Debug, Default)]
pub struct Understood {
    /// Sections for the model after the message's own text (empty: nothing to add).
    pub agent_text: String,
    /// The transcripts, joined as upstream's `{{Transcript}}` (`Audio 1:` … for several).
    pub transcript: Option<String>,
    /// Images for a vision model.
    pub images: Vec<ImagePart>,
    /// What went wrong, for the sender.
    pub notices: Vec<String>,
}

/// One section of the model's text and whether it counts against the marker budget.
struct Block {
    text: String,
    marker: bool,
}

impl Block {
    fn content(text: String) -> Block {
        Block {
            text,
            marker: false,
        }
    }

    fn marker(text: String) -> Block {
        Block { text, marker: true }
    }
}

/// The capability an attachment goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Capability {
    Audio,
    Image,
    Video,
    Document,
}

impl Capability {
    fn of(item: &MediaItem) -> Capability {
        match item.mime_type.as_deref().unwrap_or("") {
            m if m.starts_with("audio/") => Capability::Audio,
            m if m.starts_with("image/") => Capability::Image,
            m if m.starts_with("video/") => Capability::Video,
            _ => Capability::Document,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Capability::Audio => "Audio",
            Capability::Image => "Image",
            Capability::Video => "Video",
            Capability::Document => "Document",
        }
    }
}

/// The board's media jobs at once, shared by every conversation.
fn job_slots(budget: &MediaBudget) -> &'static Semaphore {
    static SLOTS: OnceLock<Semaphore> = OnceLock::new();
    SLOTS.get_or_init(|| Semaphore::new(budget.concurrency.max(1)))
}

/// Understands `input.items` in order. Never fails: what cannot be used becomes a marker for the
/// model and a notice for the sender.
pub async fn understand(input: MediaInput<'_>) -> Understood {
    let mut understood = Understood::default();
    let mut transcripts: Vec<String> = Vec::new();
    let mut blocks: Vec<Block> = Vec::new();
    let vision = super::providers::models::primary_takes_images(input.config, input.agent_id);
    let audio_models = audio_models(input.config);
    for item in input.items {
        let slot = job_slots(&input.budget).acquire().await;
        if slot.is_err() {
            log::warn!("media jobs closed; an attachment was left out");
            break;
        }
        match Capability::of(item) {
            Capability::Audio => {
                let outcome = audio::transcribe_item(&input, &audio_models, item).await;
                match outcome {
                    audio::AudioOutcome::Transcript(text) => transcripts.push(text),
                    audio::AudioOutcome::Disabled => blocks.push(Block::marker(
                        "[Audio attachment not analyzed: audio understanding is disabled]".into(),
                    )),
                    audio::AudioOutcome::NoModel => blocks.push(Block::marker(
                        "[Audio attachment not analyzed: no audio-understanding model is configured]"
                            .into(),
                    )),
                    audio::AudioOutcome::Failed(reason) => {
                        blocks.push(Block::marker(
                            "[Audio attachment could not be analyzed]".into(),
                        ));
                        understood.notices.push(format!(
                            "Your voice message could not be transcribed: {reason}."
                        ));
                    }
                }
            }
            Capability::Image if !vision => blocks.push(Block::marker(
                "[Image attachment not analyzed: no image-understanding model is configured]"
                    .into(),
            )),
            Capability::Image if understood.images.len() >= MAX_TURN_IMAGES => blocks.push(
                Block::marker("[Image attachment not processed: attachment limit reached]".into()),
            ),
            Capability::Image => match files::prepare_image(&input, item).await {
                Ok(image) => understood.images.push(image),
                Err(reason) => {
                    blocks.push(Block::marker(
                        "[Image attachment could not be analyzed]".into(),
                    ));
                    understood
                        .notices
                        .push(format!("Your image was not shown to the model: {reason}."));
                }
            },
            Capability::Video => blocks.push(Block::marker(
                "[Video attachment not analyzed: no video-understanding model is configured]"
                    .into(),
            )),
            Capability::Document => {
                let (block, notice) = files::read_document(&input, item).await;
                blocks.push(block);
                understood.notices.extend(notice);
            }
        }
    }
    let mut sections = Vec::new();
    let audio = audio_sections(&transcripts);
    if !audio.is_empty() {
        sections.push(audio);
    }
    sections.extend(with_marker_budget(blocks));
    understood.agent_text = sections.join("\n\n");
    understood.transcript = joined_transcript(&transcripts);
    understood
}

/// `[Audio]\nTranscript:\n…`, numbered `[Audio 1/2]` when there are several (upstream's format;
/// the message's own text stays where it is, above).
fn audio_sections(transcripts: &[String]) -> String {
    let count = transcripts.len();
    transcripts
        .iter()
        .enumerate()
        .map(|(i, text)| {
            let suffix = if count > 1 {
                format!(" {}/{count}", i + 1)
            } else {
                String::new()
            };
            format!("[Audio{suffix}]\nTranscript:\n{text}")
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// Upstream's `{{Transcript}}`: the one transcript, or `Audio N:` sections.
fn joined_transcript(transcripts: &[String]) -> Option<String> {
    match transcripts {
        [] => None,
        [one] => Some(one.clone()),
        many => Some(
            many.iter()
                .enumerate()
                .map(|(i, t)| format!("Audio {}:\n{t}", i + 1))
                .collect::<Vec<_>>()
                .join("\n\n"),
        ),
    }
}

/// At most [`MAX_SKIPPED_MARKERS`] markers; the rest become `[N more attachments skipped]`.
fn with_marker_budget(blocks: Vec<Block>) -> Vec<String> {
    let mut out = Vec::new();
    let (mut markers, mut over) = (0usize, 0usize);
    for block in blocks {
        if block.marker && markers >= MAX_SKIPPED_MARKERS {
            over += 1;
            continue;
        }
        markers += usize::from(block.marker);
        out.push(block.text);
    }
    if over > 0 {
        let plural = if over == 1 { "" } else { "s" };
        out.push(format!("[{over} more attachment{plural} skipped]"));
    }
    out
}

/// A short name for an attachment in messages: the sender's file name, else its kind.
fn display_name(item: &MediaItem) -> String {
    item.file_name
        .as_deref()
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .unwrap_or_else(|| Capability::of(item).label().to_lowercase())
}

#[cfg(test)]
mod tests;
