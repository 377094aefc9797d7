//! One run's replies to a chat channel. The run's events arrive here (a tap
//! on the gateway's run forwarder, so web clients see the same run as `chat`
//! events) and leave as platform messages:
//! - without a preview (streaming `off`, or an adapter that cannot edit) and
//!   with block streaming on, assistant deltas go through the reply layer:
//!   `BlockChunker` (limits from `blockStreamingChunk`, capped by the
//!   channel's text limit) → `Coalescer` → human delay → `ReplyDispatcher`
//!   (strict order, idle exactly once) → `outbound::send_text` (split to
//!   the limits, retried); with block streaming off (upstream's default)
//!   the shaped final text goes the same way when the run ends;
//! - with a preview (`partial`, `block`, `progress`) the first text is sent
//!   once it has `PREVIEW_MIN_INITIAL_CHARS`, then edited in place at most
//!   once per throttle interval, and the final edit carries the shaped final
//!   text (what does not fit follows as new messages).
//!
//! The final text is shaped by `reply::shape` (NO_REPLY dropped, the tool
//! error fallback when nothing else reached the user, reasoning never
//! shown). Every outbound text is recorded in the echo tracker. A delivery
//! that finally fails is logged and returned in the [`DeliveryReport`]; it
//! never stops the run or holds its lane beyond the retry policy's bound.
//!
//! This file must not choose where replies go (the hub does) nor call a
//! platform API other than through the `Channel` trait.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use parking_lot::Mutex;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::agent::{RunEvent, RunOutcome, RunStatus};
use crate::config::schema::channels::StreamingMode;
use crate::pipeline::{InboundPipeline, TypingGuard};
use crate::reply::shape::{normalize, ToolFailure};
use crate::reply::{
    finalize, BlockChunker, ChunkerLimits, CoalesceLimits, Coalescer, DispatcherOptions,
    HumanDelay, ReplyDispatcher, ReplyKind, ReplyPayload, ReplySink, ShapeOptions, SinkError,
};

use super::media_out::{send_media_reply, MediaReply, MediaSources};
use super::outbound::{self, split_for_limits, with_retry, DeliveryError, ReplyQuote};
use super::settings::ChannelSettings;
use super::{Channel, OutboundTarget, TextFormat, TextLimits};
use crate::reply::media_lines::{live_display_text, split_media_lines};

/// Characters a reply needs before its preview message is sent (a short
/// answer, or a `NO_REPLY`, never flashes a preview).
pub const PREVIEW_MIN_INITIAL_CHARS: usize = 30;
/// The preview text of `progress` mode before any tool ran.
pub const PROGRESS_PREVIEW_TEXT: &str = "⏳ Working…";

/// Where one run's replies go.
#[derive(Clone)]
pub struct ReplyRoute {
    pub channel: Arc<dyn Channel>,
    pub target: OutboundTarget,
    pub settings: ChannelSettings,
    pub session_key: String,
    /// The session's `/verbose` level when the run started.
    pub verbose: ToolVerbosity,
    /// Which of the reply's messages quote the message it answers.
    pub quote: Arc<ReplyQuote>,
    /// Where the reply's attachments may come from.
    pub media: MediaSources,
    /// The final reply is also spoken (`tts`), as a voice note.
    pub speech: Option<super::speech::SpeechPlan>,
}

/// `/verbose` (a session's `verboseLevel`): tool summaries in the chat.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ToolVerbosity {
    /// Tool calls stay out of the chat.
    #[default]
    Off,
    /// Each tool call is announced as its own message when it starts.
    On,
    /// As `On`, and each result follows (cut to [`TOOL_RESULT_PREVIEW_CHARS`]).
    Full,
}

impl ToolVerbosity {
    /// From a session's `verboseLevel` ("off", "on", "full").
    pub fn from_level(level: Option<&str>) -> ToolVerbosity {
        match level {
            Some("on") => ToolVerbosity::On,
            Some("full") => ToolVerbosity::Full,
            _ => ToolVerbosity::Off,
        }
    }
}

/// Characters of a tool argument shown in a `/verbose` summary.
pub const TOOL_ARG_PREVIEW_CHARS: usize = 80;
/// Characters of a tool result shown with `/verbose full`.
pub const TOOL_RESULT_PREVIEW_CHARS: usize = 300;

/// The argument that says what a call does (a path, a command, a query, a URL…).
fn tool_subject(args: &serde_json::Value) -> Option<String> {
    const KEYS: [&str; 7] = [
        "path",
        "command",
        "query",
        "url",
        "sessionKey",
        "message",
        "action",
    ];
    let text = KEYS
        .iter()
        .find_map(|key| args.get(*key).and_then(serde_json::Value::as_str))?;
    let line = text.lines().next().unwrap_or_default();
    Some(clip(line, TOOL_ARG_PREVIEW_CHARS))
}

/// The `/verbose` message for a tool event, if the level shows it.
fn tool_summary(
    verbosity: ToolVerbosity,
    phase: &str,
    name: &str,
    args: &serde_json::Value,
    result: Option<&String>,
    is_error: bool,
) -> Option<String> {
    match (verbosity, phase) {
        (ToolVerbosity::Off, _) => None,
        (_, "start") => Some(match tool_subject(args) {
            Some(subject) => format!("🔧 {name}: {subject}"),
            None => format!("🔧 {name}"),
        }),
        (ToolVerbosity::Full, "result") => {
            let mark = if is_error { "⚠️" } else { "↳" };
            let text = result.map_or("", String::as_str);
            Some(format!(
                "{mark} {name}: {}",
                clip(text.trim(), TOOL_RESULT_PREVIEW_CHARS)
            ))
        }
        _ => None,
    }
}

/// What happened to one run's replies.
#[derive(Debug, Clone, Default)]
pub struct DeliveryReport {
    pub messages_sent: usize,
    pub edits: usize,
    pub failures: Vec<DeliveryError>,
}

struct Progress {
    report: DeliveryReport,
    typing: Vec<TypingGuard>,
}

/// Counters and typing guards shared by the sink, the preview and the run.
#[derive(Clone)]
struct Shared {
    inner: Arc<Mutex<Progress>>,
    pipeline: Arc<InboundPipeline>,
    session_key: String,
}

impl Shared {
    fn sent(&self, pieces: &[String]) {
        for piece in pieces {
            self.pipeline.record_outbound(&self.session_key, piece);
        }
        let mut progress = self.inner.lock();
        progress.report.messages_sent += pieces.len();
        for guard in &mut progress.typing {
            guard.first_block_sent();
        }
    }

    fn failed(&self, error: DeliveryError) {
        log::warn!("reply to {} not delivered: {error}", self.session_key);
        self.inner.lock().report.failures.push(error);
    }

    fn stop_typing(&self) {
        self.inner.lock().typing.clear();
    }
}

/// The dispatcher's sink: one payload → one or more platform messages.
struct ChannelReplySink {
    route: ReplyRoute,
    limits: TextLimits,
    shared: Shared,
}

impl ReplySink for ChannelReplySink {
    fn deliver(
        &self,
        payload: ReplyPayload,
        _kind: ReplyKind,
    ) -> BoxFuture<'_, Result<(), SinkError>> {
        Box::pin(async move {
            let route = &self.route;
            let mut payload = payload;
            if route.speech.is_some() {
                payload.text = super::speech::visible_text(&payload.text);
                if payload.text.trim().is_empty() && payload.media_urls.is_empty() {
                    return Ok(());
                }
            }
            let split = split_media_lines(&payload.text);
            if !split.media.is_empty()
                || !split.refused.is_empty()
                || !payload.media_urls.is_empty()
            {
                return self.deliver_media(&payload, split).await;
            }
            let sent = outbound::send_quoting(
                &*route.channel,
                &route.target,
                &route.quote,
                &payload.text,
                TextFormat::Markdown,
                route.settings.retry,
                self.limits,
            )
            .await;
            match sent {
                Ok(_) => {
                    self.shared
                        .sent(&split_for_limits(&payload.text, self.limits));
                    Ok(())
                }
                Err(error) => {
                    let message = error.to_string();
                    self.shared.failed(error);
                    Err(SinkError::Delivery(message))
                }
            }
        })
    }
}

impl ChannelReplySink {
    /// A payload with attachments: its text and files through `media_out`.
    async fn deliver_media(
        &self,
        payload: &ReplyPayload,
        split: crate::reply::media_lines::MediaSplit,
    ) -> Result<(), SinkError> {
        let route = &self.route;
        let mut media = payload.media_urls.clone();
        media.extend(split.media);
        let reply = MediaReply {
            text: &split.text,
            media: &media,
            refused: &split.refused,
            audio_as_voice: payload.audio_as_voice || split.audio_as_voice,
        };
        let delivery = send_media_reply(
            &*route.channel,
            &route.target,
            &route.quote,
            route.settings.retry,
            self.limits,
            &route.media,
            reply,
        )
        .await;
        for text in &delivery.texts {
            self.shared
                .pipeline
                .record_outbound(&self.shared.session_key, text);
        }
        {
            let mut progress = self.shared.inner.lock();
            progress.report.messages_sent += delivery.messages;
            for guard in &mut progress.typing {
                guard.first_block_sent();
            }
        }
        let message = delivery.failures.first().map(ToString::to_string);
        for error in delivery.failures {
            self.shared.failed(error);
        }
        match message {
            Some(message) if delivery.messages == 0 => Err(SinkError::Delivery(message)),
            _ => Ok(()),
        }
    }
}

/// What the event loop saw of the run.
#[derive(Default)]
struct RunSummary {
    outcome: Option<RunOutcome>,
    tool_error: Option<ToolFailure>,
}

impl RunSummary {
    /// The text a spoken reply says: a finished run's answer (not an error,
    /// not a silent reply).
    fn spoken_text(&self) -> Option<String> {
        let outcome = self.outcome.as_ref()?;
        if outcome.status != RunStatus::Ok {
            return None;
        }
        let shaped = crate::reply::FinishedRun {
            assistant_texts: vec![outcome.text.clone()],
            ..Default::default()
        };
        let text: Vec<String> = finalize(&shaped, &ShapeOptions::default())
            .into_iter()
            .filter(|p| !p.is_error)
            .map(|p| p.text)
            .collect();
        let text = text.join("\n");
        (!text.trim().is_empty()).then_some(text)
    }

    fn note_tool(&mut self, phase: &str, name: &str, result: Option<&String>, is_error: bool) {
        if phase == "result" && is_error {
            self.tool_error = Some(ToolFailure {
                tool_name: name.to_string(),
                error: result.cloned(),
            });
        }
    }
}

/// Delivers one run's replies; returns when everything was sent (or failed).
pub async fn deliver_run(
    route: ReplyRoute,
    pipeline: Arc<InboundPipeline>,
    typing: Vec<TypingGuard>,
    events: mpsc::Receiver<RunEvent>,
) -> DeliveryReport {
    let limits = route.settings.text_limits(route.channel.text_limits());
    let shared = Shared {
        inner: Arc::new(Mutex::new(Progress {
            report: DeliveryReport::default(),
            typing,
        })),
        pipeline,
        session_key: route.session_key.clone(),
    };
    let on_idle_shared = shared.clone();
    let options = DispatcherOptions {
        human_delay: HumanDelay::from_config(&route.settings.human_delay),
        shape: ShapeOptions::default(),
        on_idle: Some(Arc::new(move || on_idle_shared.stop_typing())),
        ..DispatcherOptions::default()
    };
    let sink = Arc::new(ChannelReplySink {
        route: route.clone(),
        limits,
        shared: shared.clone(),
    });
    let dispatcher = ReplyDispatcher::new(sink, options);
    let preview = route.settings.streaming != StreamingMode::Off && route.channel.edit().is_some();
    let end = if preview {
        RunEnd {
            spoken: stream_preview(&route, limits, &shared, &dispatcher, events).await,
            held: Vec::new(),
        }
    } else {
        let hold = route.speech.is_some();
        stream_blocks(&route, limits, &dispatcher, events, hold).await
    };
    let speech = route
        .speech
        .as_ref()
        .zip(end.spoken.as_deref())
        .and_then(|(plan, text)| plan.for_reply(text));
    let voice = match speech {
        Some((plan, spoken)) => Some(voice_note(&route, &plan, &spoken).await),
        None => None,
    };
    let mut notice = None;
    let mut voice_file = None;
    match voice {
        // The voice note carries the held text as its caption (`media_out`
        // sends a text too long for one after it, as upstream).
        Some(Ok(path)) => {
            let text: Vec<String> = end.held.into_iter().map(|p| p.text).collect();
            let payload = ReplyPayload {
                text: text.join("\n\n"),
                media_urls: vec![path.display().to_string()],
                audio_as_voice: true,
                ..ReplyPayload::default()
            };
            dispatcher.enqueue(ReplyKind::Final, payload).await;
            voice_file = Some(path);
        }
        other => {
            for payload in end.held {
                dispatcher.enqueue(ReplyKind::Final, payload).await;
            }
            if let Some(Err(error)) = other {
                notice = Some(format!("⚠️ {error}"));
            }
        }
    }
    dispatcher.mark_complete();
    dispatcher.wait_idle().await;
    if let Some(path) = voice_file {
        let _ = tokio::fs::remove_file(&path).await;
    }
    if let Some(notice) = notice {
        let sent = outbound::send_quoting(
            &*route.channel,
            &route.target,
            &route.quote,
            &notice,
            TextFormat::Plain,
            route.settings.retry,
            limits,
        )
        .await;
        if let Err(error) = sent {
            shared.failed(error);
        }
    }
    shared.stop_typing();
    let report = shared.inner.lock().report.clone();
    report
}

/// What a run's stream left for the end: the text to speak, and with
/// block streaming off the final text payloads held back so a voice note can
/// carry them as its caption.
#[derive(Default)]
struct RunEnd {
    spoken: Option<String>,
    held: Vec<ReplyPayload>,
}

/// No preview: deltas → chunker → coalescer → dispatcher; the tool error
/// fallback or an error notice at the end when nothing else was said.
/// With `hold_final`, the final text is returned instead of sent.
async fn stream_blocks(
    route: &ReplyRoute,
    limits: TextLimits,
    dispatcher: &ReplyDispatcher,
    mut events: mpsc::Receiver<RunEvent>,
    hold_final: bool,
) -> RunEnd {
    let settings = &route.settings;
    let chunking = ChunkerLimits::resolve(settings.block_chunk.as_ref(), Some(limits.max_chars));
    let mut chunker = BlockChunker::new(chunking);
    let coalesce = CoalesceLimits::resolve(
        settings.block_coalesce.as_ref(),
        settings.coalesce_defaults,
        &chunking,
        Some(limits.max_chars),
    );
    let coalescer = Coalescer::new(coalesce).spawn(dispatcher.clone());
    let mut summary = RunSummary::default();
    let blocks = settings.block_streaming;
    while let Some(event) = events.recv().await {
        match event {
            RunEvent::Delta { delta, .. } if blocks => {
                for block in chunker.push(&delta) {
                    coalescer.push(ReplyPayload::text(block)).await;
                }
            }
            // Block streaming off: the whole text goes out when the run ends.
            RunEvent::Delta { .. } => {}
            RunEvent::Tool {
                phase,
                name,
                args,
                result,
                is_error,
                ..
            } => {
                summary.note_tool(phase, &name, result.as_ref(), is_error);
                let shown = tool_summary(
                    route.verbose,
                    phase,
                    &name,
                    &args,
                    result.as_ref(),
                    is_error,
                );
                if let Some(text) = shown {
                    dispatcher
                        .enqueue(ReplyKind::Tool, ReplyPayload::text(text))
                        .await;
                }
            }
            RunEvent::Finished(outcome) => {
                summary.outcome = Some(*outcome);
                break;
            }
            // Reasoning stays out of channels until they render it apart.
            RunEvent::Started { .. }
            | RunEvent::ReasoningDelta { .. }
            | RunEvent::ReasoningBlock { .. } => {}
        }
    }
    let aborted = summary
        .outcome
        .as_ref()
        .is_none_or(|o| o.status == RunStatus::Aborted);
    if !aborted {
        for block in chunker.finish() {
            coalescer.push(ReplyPayload::text(block)).await;
        }
    }
    coalescer.finish().await;
    let mut held = Vec::new();
    for payload in closing_payloads(&summary, !blocks, route.speech.is_some()) {
        if hold_final && !blocks && !payload.is_error {
            held.push(payload);
        } else {
            dispatcher.enqueue(ReplyKind::Final, payload).await;
        }
    }
    RunEnd {
        spoken: summary.spoken_text(),
        held,
    }
}

/// The end-of-run payloads: with `include_text` the shaped final text; in
/// any case the tool-error fallback or the run's error notice when the user
/// would otherwise hear nothing.
fn closing_payloads(
    summary: &RunSummary,
    include_text: bool,
    strip_tts_tags: bool,
) -> Vec<ReplyPayload> {
    let Some(outcome) = &summary.outcome else {
        return Vec::new();
    };
    match outcome.status {
        RunStatus::Aborted => Vec::new(),
        RunStatus::Error | RunStatus::Timeout if outcome.text.trim().is_empty() => {
            let reason = outcome.error.as_deref().unwrap_or("the run failed");
            vec![ReplyPayload {
                is_error: true,
                ..ReplyPayload::text(format!("⚠️ {reason}"))
            }]
        }
        _ => {
            let shaped = crate::reply::FinishedRun {
                assistant_texts: vec![outcome.text.clone()],
                last_tool_error: summary.tool_error.clone(),
                ..Default::default()
            };
            finalize(&shaped, &ShapeOptions::default())
                .into_iter()
                .filter(|p| include_text || p.is_error)
                .map(|mut p| {
                    if strip_tts_tags {
                        p.text = super::speech::visible_text(&p.text);
                    }
                    p
                })
                .collect()
        }
    }
}

/// The preview message of a run, as the preview task left it.
#[derive(Debug, Default)]
struct PreviewMessage {
    message_id: Option<String>,
    shown: String,
}

/// Preview: a watched text is sent, then edited (throttled); the final edit
/// and any overflow go out after the run.
async fn stream_preview(
    route: &ReplyRoute,
    limits: TextLimits,
    shared: &Shared,
    dispatcher: &ReplyDispatcher,
    mut events: mpsc::Receiver<RunEvent>,
) -> Option<String> {
    let mode = route.settings.streaming;
    let (text_tx, text_rx) = watch::channel(String::new());
    let min_chars = if mode == StreamingMode::Progress {
        1
    } else {
        PREVIEW_MIN_INITIAL_CHARS
    };
    let preview = tokio::spawn(run_preview(
        route.clone(),
        limits,
        shared.clone(),
        text_rx,
        min_chars,
    ));
    let chunking =
        ChunkerLimits::for_preview(route.settings.preview_chunk.as_ref(), limits.max_chars);
    let mut chunker = BlockChunker::new(chunking);
    let (mut blocks_text, mut tools) = (String::new(), Vec::<String>::new());
    let mut summary = RunSummary::default();
    if mode == StreamingMode::Progress {
        text_tx.send_replace(PROGRESS_PREVIEW_TEXT.to_string());
    }
    while let Some(event) = events.recv().await {
        match event {
            RunEvent::Delta { text, delta } => match mode {
                StreamingMode::Block => {
                    for block in chunker.push(&delta) {
                        blocks_text.push_str(&block);
                        text_tx.send_replace(blocks_text.clone());
                    }
                }
                StreamingMode::Progress => {}
                _ => {
                    text_tx.send_replace(text);
                }
            },
            RunEvent::Tool {
                phase,
                name,
                args,
                result,
                is_error,
                ..
            } => {
                summary.note_tool(phase, &name, result.as_ref(), is_error);
                let shown = tool_summary(
                    route.verbose,
                    phase,
                    &name,
                    &args,
                    result.as_ref(),
                    is_error,
                );
                if let Some(text) = shown {
                    dispatcher
                        .enqueue(ReplyKind::Tool, ReplyPayload::text(text))
                        .await;
                }
                if mode == StreamingMode::Progress && phase == "start" {
                    tools.push(name);
                    text_tx.send_replace(format!("{PROGRESS_PREVIEW_TEXT} ({})", tools.join(", ")));
                }
            }
            RunEvent::Finished(outcome) => {
                summary.outcome = Some(*outcome);
                break;
            }
            // Reasoning stays out of channels until they render it apart.
            RunEvent::Started { .. }
            | RunEvent::ReasoningDelta { .. }
            | RunEvent::ReasoningBlock { .. } => {}
        }
    }
    drop(text_tx);
    let message = preview.await.unwrap_or_default();
    finish_preview(route, limits, shared, dispatcher, &summary, message).await;
    summary.spoken_text()
}

/// The spoken reply as an Ogg/Opus file in the media area
/// (`channels::speech`), or why there is none.
async fn voice_note(
    route: &ReplyRoute,
    plan: &super::speech::SpeechPlan,
    spoken: &str,
) -> Result<std::path::PathBuf, super::speech::SpeechError> {
    let dir = route.media.media_root.join("outbound");
    if let Err(error) = crate::media::area::make_room_async(
        &dir,
        crate::media::MediaBudget::for_this_board().area_bytes,
    )
    .await
    {
        log::warn!("spoken reply: media area: {error}");
    }
    let path = crate::media::area::new_file(&dir, "speech", "ogg");
    super::speech::synthesize_voice_note(&route.media.http, plan, spoken, &path).await?;
    Ok(path)
}

/// The text cut to `max_chars` characters (an ellipsis marks the cut).
fn clip(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max_chars.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// Sends the first preview text, then edits it as the watched text changes,
/// at most once per throttle interval; ends when the run's loop drops the
/// sender (the final edit is not its job).
async fn run_preview(
    route: ReplyRoute,
    limits: TextLimits,
    shared: Shared,
    mut texts: watch::Receiver<String>,
    min_chars: usize,
) -> PreviewMessage {
    let throttle = Duration::from_millis(route.settings.preview_throttle_ms);
    let mut preview = PreviewMessage::default();
    let mut last_update: Option<Instant> = None;
    let channel = &*route.channel;
    while texts.changed().await.is_ok() {
        if let Some(at) = last_update {
            tokio::time::sleep_until(at + throttle).await;
        }
        if texts.has_changed().is_err() {
            break;
        }
        let text = {
            let raw = texts.borrow_and_update();
            let shown = if route.speech.is_some() {
                crate::reply::tts_tags::live_visible_text(&raw)
            } else {
                raw.clone()
            };
            clip(&live_display_text(&shown), limits.max_chars)
        };
        if text.trim().is_empty() || text == preview.shown {
            continue;
        }
        let result = match &preview.message_id {
            None if text.chars().count() < min_chars => continue,
            None => {
                let target = route.quote.next_target(&route.target);
                with_retry(route.settings.retry, channel.id(), || {
                    channel.send_text(&target, &text, TextFormat::Markdown)
                })
                .await
                .map(|sent| {
                    preview.message_id = Some(sent.message_id);
                    shared.sent(std::slice::from_ref(&text));
                })
            }
            Some(id) => edit(&route, id, &text).await.map(|()| {
                shared.pipeline.record_outbound(&shared.session_key, &text);
                shared.inner.lock().report.edits += 1;
            }),
        };
        if let Err(error) = result {
            shared.failed(error);
            break;
        }
        preview.shown = text;
        last_update = Some(Instant::now());
    }
    preview
}

async fn edit(route: &ReplyRoute, message_id: &str, text: &str) -> Result<(), DeliveryError> {
    let channel = &*route.channel;
    let Some(editor) = channel.edit() else {
        return Err(DeliveryError::CannotEdit(channel.id().to_string()));
    };
    outbound::edit_text(
        channel,
        editor,
        &route.target,
        message_id,
        text,
        route.settings.retry,
    )
    .await
}

/// After the run: the final edit of the preview with the shaped text's first
/// piece, the rest (and any fallback) as new messages; a preview whose run
/// ended silent is deleted where the platform allows it.
async fn finish_preview(
    route: &ReplyRoute,
    limits: TextLimits,
    shared: &Shared,
    dispatcher: &ReplyDispatcher,
    summary: &RunSummary,
    message: PreviewMessage,
) {
    let aborted = summary
        .outcome
        .as_ref()
        .is_none_or(|o| o.status == RunStatus::Aborted);
    let payloads = closing_payloads(summary, true, route.speech.is_some());
    let Some(message_id) = message.message_id else {
        for payload in payloads {
            dispatcher.enqueue(ReplyKind::Final, payload).await;
        }
        return;
    };
    if aborted {
        return;
    }
    let mut attachments = Vec::new();
    let mut pieces: Vec<String> = payloads
        .iter()
        .filter_map(|p| normalize(p.clone(), &ShapeOptions::default()).ok())
        .flat_map(|p| {
            let split = split_media_lines(&p.text);
            if !split.media.is_empty() || !split.refused.is_empty() || !p.media_urls.is_empty() {
                let mut media_urls = p.media_urls.clone();
                media_urls.extend(split.media);
                // Refused paths go back as lines: the sink names them in the chat.
                let refused: Vec<String> = split
                    .refused
                    .iter()
                    .map(|r| format!("MEDIA: {r}"))
                    .collect();
                attachments.push(ReplyPayload {
                    text: refused.join("\n"),
                    media_urls,
                    audio_as_voice: p.audio_as_voice || split.audio_as_voice,
                    ..ReplyPayload::default()
                });
            }
            split_for_limits(&split.text, limits)
        })
        .collect();
    // The files follow the edited text, in order.
    let enqueue_attachments = |dispatcher: &ReplyDispatcher, attachments: Vec<ReplyPayload>| {
        let dispatcher = dispatcher.clone();
        async move {
            for payload in attachments {
                dispatcher.enqueue(ReplyKind::Final, payload).await;
            }
        }
    };
    if pieces.is_empty() {
        if !attachments.is_empty() {
            enqueue_attachments(dispatcher, attachments).await;
            return;
        }
        if let Some(deleter) = route.channel.delete() {
            if let Err(error) = deleter.delete(&route.target, &message_id).await {
                log::debug!("silent reply: preview not deleted: {error}");
            }
        }
        return;
    }
    let first = pieces.remove(0);
    if first != message.shown {
        match edit(route, &message_id, &first).await {
            Ok(()) => {
                shared.pipeline.record_outbound(&shared.session_key, &first);
                shared.inner.lock().report.edits += 1;
            }
            Err(error) => shared.failed(error),
        }
    }
    for piece in pieces {
        dispatcher
            .enqueue(ReplyKind::Final, ReplyPayload::text(piece))
            .await;
    }
    enqueue_attachments(dispatcher, attachments).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn verbose_levels_show_calls_and_full_shows_results() {
        let args = json!({"command": "ls -la\nrm -rf /"});
        let result = "a\nb".to_string();
        let show = |level, phase| tool_summary(level, phase, "exec", &args, Some(&result), false);
        assert_eq!(show(ToolVerbosity::Off, "start"), None);
        assert_eq!(
            show(ToolVerbosity::On, "start").as_deref(),
            Some("🔧 exec: ls -la")
        );
        assert_eq!(show(ToolVerbosity::On, "result"), None);
        assert_eq!(
            show(ToolVerbosity::Full, "result").as_deref(),
            Some("↳ exec: a\nb")
        );
        let long = "x".repeat(TOOL_RESULT_PREVIEW_CHARS * 2);
        let cut = tool_summary(
            ToolVerbosity::Full,
            "result",
            "read",
            &json!({}),
            Some(&long),
            true,
        )
        .expect("shown");
        assert!(cut.starts_with("⚠️ read: ") && cut.ends_with('…'), "{cut}");
        assert_eq!(ToolVerbosity::from_level(Some("full")), ToolVerbosity::Full);
        assert_eq!(ToolVerbosity::from_level(None), ToolVerbosity::Off);
    }
}
