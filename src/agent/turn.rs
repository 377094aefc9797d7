//! One agent turn: record the user's message, stream the model's reply with
//! fallbacks, record the reply, and report progress as [`RunEvent`]s.
//!
//! The turn reads and writes the session index and transcript through the
//! store; it never touches gateway connections. Every path ends in exactly one
//! [`RunOutcome`].

use std::borrow::Cow;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::store::{SessionEntry, Store, TranscriptEntry};
use crate::system::clock::now_ms;

use super::failover::ThinkingLevel;
use super::history::{prompt_messages, PromptHistory};
use super::providers::models::{resolve_chain, ResolvedModel};
use super::providers::Usage;
use super::reasoning::ReasoningLevel;
use super::runs::{RunEvent, RunOutcome, RunStatus, Unrecorded};
use super::tool_loop::{self, LoopInput, LoopResult};
use super::user_turn::{same_but_time, session_for, user_entry, UserMessage};
use super::{context, prompt, prompt_files, skills, store_wait};

/// The one bootstrap file a `light_context` run keeps.
pub const LIGHT_CONTEXT_FILE: &str = "HEARTBEAT.md";
/// The run timeout when neither the request nor the config sets one.
pub const DEFAULT_RUN_TIMEOUT_MS: u64 = 600_000;

/// What to run.
#[derive(Debug, Clone)]
pub struct TurnSpec {
    pub run_id: String,
    pub agent_id: String,
    pub session_key: String,
    pub message: String,
    pub timeout_ms: u64,
    pub model_override: Option<String>,
    pub extra_system_prompt: Option<String>,
    pub label: Option<String>,
    pub channel: Option<String>,
    /// The skills the conversation allows (a group's or channel's `skills`), within the agent's
    /// own list; `None`: the agent's list alone.
    pub skill_filter: Option<Vec<String>>,
    /// A user's message (a chat, `chat.send`, the `agent` method), not a heartbeat, cron job or
    /// announcement: the turn is the session's last interaction (`session.reset`'s idle window).
    pub interaction: bool,
    /// Images the user's message carries to a vision model (prepared within the board's limits;
    /// not kept in the transcript).
    pub images: Vec<super::providers::ImagePart>,
}

/// What a turn needs from the gateway.
#[derive(Clone)]
pub struct TurnEnv {
    pub store: Store,
    pub config: Arc<Config>,
    pub http: reqwest::Client,
    pub tools: Arc<crate::tools::ToolRegistry>,
    /// The agent's workspace (file tools and `exec` are confined to it).
    pub workspace: std::path::PathBuf,
    /// Shared tool services (background processes, approvals), passed through to tools.
    pub services: crate::tools::ToolServices,
    /// Messages steered into this run by the command queue (taken before
    /// each model call after the first).
    pub steer: Option<crate::queue::SteerInbox>,
    /// What this run does differently from an ordinary turn (heartbeats).
    pub overrides: TurnOverrides,
    /// Writes the run's owner commits together with the reply.
    pub settlement: Option<Arc<dyn ReplySettlement>>,
}

/// Writes a run's owner wants in the commit of the reply (the web chat's idempotency answers and the removal
/// of its messages' durable records), so a turn ends with one commit instead of two.
pub trait ReplySettlement: Send + Sync {
    /// The writes for `outcome`, the run's result as it will be reported.
    fn settlements(&self, outcome: &RunOutcome) -> Vec<crate::store::Settlement>;
    /// Called once they are committed with the reply; a run whose reply was not recorded never calls it.
    fn committed(&self);
}

/// Per-run departures from an ordinary turn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TurnOverrides {
    /// Of the workspace's bootstrap files only HEARTBEAT.md goes into the system prompt (heartbeat
    /// `lightContext`, as upstream's lightweight bootstrap for heartbeat runs).
    pub light_context: bool,
    /// The reasoning level instead of the session's (heartbeat `includeReasoning` collects it).
    pub reasoning: Option<ReasoningLevel>,
}

/// Runs one turn to its end. Never panics on provider or store failures:
/// they become an `Error` outcome.
pub async fn run_turn(
    env: &TurnEnv,
    spec: &TurnSpec,
    cancel: CancellationToken,
    events: mpsc::Sender<RunEvent>,
) -> RunOutcome {
    let started_at_ms = now_ms();
    let mut outcome = RunOutcome {
        run_id: spec.run_id.clone(),
        session_key: spec.session_key.clone(),
        session_id: String::new(),
        status: RunStatus::Ok,
        started_at_ms,
        ended_at_ms: started_at_ms,
        text: String::new(),
        error: None,
        usage: Usage::default(),
        provider: None,
        model: None,
        stop_reason: None,
        unrecorded: None,
    };
    let _ = events.send(RunEvent::Started { started_at_ms }).await;
    // Store commits wait for fsync and the prompt reads files: one hand-off
    // to a blocking thread, unless the store's commits are quick (`run_blocking`).
    // A store that refuses the user's message (a full disk) is waited for.
    let what = format!("run {}: could not record the message", spec.run_id);
    let prepared = store_wait::retry(&cancel, store_wait::WAIT_BUDGET, &what, || {
        env.store.run_blocking(|| prepare(env, spec, started_at_ms))
    })
    .await;
    let prepared = match prepared {
        Ok(prepared) => prepared,
        Err(e) => {
            log::error!("{what}: {e}");
            outcome.unrecorded = Some(Unrecorded::Message);
            return fail(outcome, format!("session store: {e}"));
        }
    };
    let start = env.store.run_blocking(|| start_turn(env, spec, prepared));
    let TurnStart {
        session,
        models,
        window,
        allowed_tools,
        system_prompt,
        history,
    } = match start {
        Ok(start) => start,
        Err((session_id, message)) => {
            outcome.session_id = session_id;
            return fail(outcome, message);
        }
    };
    outcome.session_id = session.session_id.clone();
    // Near auto-compaction, one silent turn lets the agent save durable notes first.
    let flush = super::memory_flush::FlushTurn {
        env,
        spec,
        session: &session,
        models: &models,
        allowed_tools: &allowed_tools,
        cancel: &cancel,
        window,
        system_prompt: &system_prompt,
    };
    super::memory_flush::run_if_due(flush, &history.messages).await;
    let input = LoopInput {
        env,
        spec,
        session_id: &session.session_id,
        models: &models,
        allowed_tools,
        cancel: &cancel,
        events: &events,
        window,
        system_prompt,
        last_call_ms: history.last_call_ms,
        reasoning: env
            .overrides
            .reasoning
            .unwrap_or_else(|| ReasoningLevel::of_session(&session)),
        steer: env.steer.as_ref(),
    };
    let result = tool_loop::run(input, history.messages).await;
    outcome.ended_at_ms = now_ms();
    match result {
        LoopResult::Done {
            completion,
            model,
            text,
        } => {
            outcome.text = text;
            outcome.usage = completion.usage;
            outcome.stop_reason = completion.stop_reason;
            outcome.provider = Some(model.provider_id);
            outcome.model = Some(model.model_id);
        }
        LoopResult::Stopped { partial, status } => {
            outcome.text = partial;
            outcome.status = status;
            outcome.stop_reason = Some(status.as_str().to_string());
            if status == RunStatus::Timeout {
                outcome.error = Some(format!("run timed out after {} ms", spec.timeout_ms));
            }
        }
        LoopResult::Failed { partial, message } => {
            outcome.text = partial;
            outcome.status = RunStatus::Error;
            outcome.error = Some(message);
        }
    }
    // A store that refuses the reply (a full disk) is waited for: the answer exists only in memory.
    let what = format!("run {}: could not record the reply", spec.run_id);
    let recorded = store_wait::retry(&cancel, store_wait::WAIT_BUDGET, &what, || {
        env.store
            .run_blocking(|| record_reply(env, spec, session.clone(), &outcome))
    })
    .await;
    if let Err(e) = recorded {
        log::error!("{what}: {e}");
        if outcome.status == RunStatus::Ok {
            outcome.unrecorded = Some(Unrecorded::Reply);
            return fail(outcome, format!("could not record the reply: {e}"));
        }
    }
    outcome
}

/// What a turn starts from: its session (the user's message recorded), the
/// model chain, the context window, the tools it may use and its prompt.
struct TurnStart {
    session: SessionEntry,
    models: Vec<ResolvedModel>,
    window: context::ContextWindow,
    allowed_tools: Vec<String>,
    system_prompt: String,
    history: PromptHistory,
}

/// Records the user's message and builds the prompt (blocks on the store and
/// the workspace files). A failure carries the session id known so far.
fn start_turn(
    env: &TurnEnv,
    spec: &TurnSpec,
    (session, first_run): (SessionEntry, bool),
) -> Result<TurnStart, (String, String)> {
    let failed = |message: String| (session.session_id.clone(), message);
    let mut models = resolve_chain(
        &env.config,
        &spec.agent_id,
        spec.model_override.as_deref(),
        &env.http,
    )
    .map_err(|e| failed(e.to_string()))?;
    // A session's thinking level (`sessions.patch`, `/think`) beats the default.
    if let Some(level) = session
        .thinking_level
        .as_deref()
        .and_then(ThinkingLevel::parse)
    {
        models = models.iter().map(|m| m.with_profile(0, level)).collect();
    }
    let primary = &models[0];
    let window = context::resolve_window(&env.config, primary.context_window);
    let model_ref = format!("{}/{}", primary.provider_id, primary.model_id);
    context::guard_window(&model_ref, window).map_err(|e| failed(e.to_string()))?;
    let allowed_tools = crate::tools::policy::restrict_for_depth(
        &env.config,
        session.spawn_depth.unwrap_or(0),
        super::subagents::max_spawn_depth(&env.config),
        crate::tools::policy::allowed_tools(
            &env.config,
            &spec.agent_id,
            Some(crate::tools::policy::RunModel {
                provider: &primary.provider_id,
                model: &primary.model_id,
            }),
            &env.tools.names(),
        ),
    );
    let allowed_tools = crate::tools::sandbox_workspace::restrict_tools(
        &env.config,
        &spec.agent_id,
        &spec.session_key,
        allowed_tools,
    );
    let system_prompt = system_prompt(env, spec, &model_ref, &allowed_tools, first_run);
    let history = prompt_messages(
        env,
        &spec.session_key,
        &session.session_id,
        &system_prompt,
        window,
    )
    .map_err(|e| failed(format!("session store: {e}")))?;
    let mut history = history;
    attach_images(&mut history.messages, &spec.images);
    Ok(TurnStart {
        session,
        models,
        window,
        allowed_tools,
        system_prompt,
        history,
    })
}

/// The turn's images go with its user message, the last one of the prompt.
fn attach_images(
    messages: &mut [super::providers::ChatMessage],
    images: &[super::providers::ImagePart],
) {
    if images.is_empty() {
        return;
    }
    let user = messages
        .iter_mut()
        .rev()
        .find(|m| m.role == super::providers::Role::User);
    match user {
        Some(message) => message.images = images.to_vec(),
        None => log::warn!("a turn's images found no user message to go with"),
    }
}

fn fail(mut outcome: RunOutcome, message: String) -> RunOutcome {
    outcome.status = RunStatus::Error;
    outcome.error = Some(message);
    outcome.ended_at_ms = now_ms();
    outcome
}

/// Loads or creates the session and records the user's message. Returns the
/// session and whether this is its first run (nothing recorded before).
fn prepare(
    env: &TurnEnv,
    spec: &TurnSpec,
    now: u64,
) -> Result<(SessionEntry, bool), crate::store::StoreError> {
    let stored = env.store.session(&spec.session_key)?;
    let message = UserMessage {
        session_key: &spec.session_key,
        run_id: &spec.run_id,
        text: &spec.message,
        label: spec.label.as_deref(),
        channel: spec.channel.as_deref(),
        now_ms: now,
        interaction: spec.interaction,
    };
    let session = session_for(stored.clone(), &message);
    let tail = env.store.transcript_tail(&session.session_id, 2)?;
    // A message replayed after a crash runs again under the same run id: its
    // user turn is already recorded when nothing came after it. So is the
    // web chat's message that `chat.send` recorded with its inbox record.
    let recorded = tail.last().is_some_and(|(_, entry)| {
        entry.role == "user" && entry.run_id.as_deref() == Some(spec.run_id.as_str())
    });
    let first_run = tail.is_empty() || (recorded && tail.len() == 1);
    // Recorded with the session entry as this turn would leave it: nothing to write.
    if recorded && stored.as_ref().is_some_and(|s| same_but_time(s, &session)) {
        return Ok((session, first_run));
    }
    // The user's message and the session entry in one commit.
    let kept = session.clone();
    env.store.record_turn(
        &spec.session_key,
        &session.session_id,
        (!recorded).then(|| user_entry(&message)).as_ref(),
        move |_| Some(kept.clone()),
    )?;
    Ok((session, first_run))
}

/// The system prompt for this turn: workspace files, skills, tools, runtime.
fn system_prompt(
    env: &TurnEnv,
    spec: &TurnSpec,
    model_ref: &str,
    tool_names: &[String],
    first_run: bool,
) -> String {
    let limits = prompt::BootstrapLimits::from_config(&env.config);
    let files = prompt_files::PROMPT_FILES.load(&env.workspace, first_run, limits);
    // The kept files are borrowed; only a light-context run copies its one file.
    let bootstrap: Cow<'_, [prompt::BootstrapFile]> = if env.overrides.light_context {
        files
            .bootstrap
            .iter()
            .filter(|file| file.name == LIGHT_CONTEXT_FILE)
            .cloned()
            .collect()
    } else {
        Cow::Borrowed(&files.bootstrap)
    };
    let allowlist = prompt::merge_skill_filters(
        spec.skill_filter.as_deref(),
        prompt::skill_allowlist(&env.config, &spec.agent_id),
    );
    let skills = skills::allowed(&files.skills, allowlist.as_deref());
    let runtime = prompt::RuntimeInfo {
        agent_id: spec.agent_id.clone(),
        host: crate::system::host_name(),
        model: model_ref.to_string(),
        now_ms: now_ms(),
        timezone: env.config.agents.defaults.user_timezone.clone(),
    };
    prompt::build_system_prompt(&prompt::PromptParts {
        workspace: &env.workspace,
        workspace_access: crate::tools::sandbox_workspace::access_for(
            &env.config,
            &spec.agent_id,
            &spec.session_key,
        ),
        tool_names,
        skills: &skills,
        bootstrap: &bootstrap,
        extra_system_prompt: spec.extra_system_prompt.as_deref(),
        runtime: &runtime,
    })
}

/// Appends the reply to the transcript and updates the session's counters.
fn record_reply(
    env: &TurnEnv,
    spec: &TurnSpec,
    session: SessionEntry,
    outcome: &RunOutcome,
) -> Result<(), crate::store::StoreError> {
    let reply =
        (!outcome.text.is_empty() || outcome.status == RunStatus::Ok).then(|| TranscriptEntry {
            role: "assistant".into(),
            text: outcome.text.clone(),
            timestamp_ms: outcome.ended_at_ms,
            run_id: Some(spec.run_id.clone()),
            stop_reason: outcome.stop_reason.clone(),
            input_tokens: Some(outcome.usage.input_tokens),
            output_tokens: Some(outcome.usage.output_tokens),
            extra_json: None,
        });
    let (ended_at_ms, usage) = (outcome.ended_at_ms, outcome.usage);
    let aborted = outcome.status == RunStatus::Aborted;
    let settle = move |mut entry: SessionEntry| {
        entry.updated_at_ms = ended_at_ms;
        entry.input_tokens += usage.input_tokens;
        entry.output_tokens += usage.output_tokens;
        entry.total_tokens = entry.input_tokens + entry.output_tokens;
        entry.aborted_last_run = aborted;
        entry
    };
    let settlements = env
        .settlement
        .as_ref()
        .map(|owner| owner.settlements(outcome))
        .unwrap_or_default();
    // The reply, the session's totals and the owner's settlements in one
    // commit; the entry is read in the same transaction, so a patch landed
    // meanwhile is kept.
    let session_id = session.session_id.clone();
    env.store.record_turn_settling(
        &spec.session_key,
        &session_id,
        reply.as_ref(),
        move |current| match current {
            Some(current) if current.session_id == session.session_id => Some(settle(current)),
            // The session was reset meanwhile; leave the new one alone.
            Some(_) => None,
            None => Some(settle(session.clone())),
        },
        &settlements,
    )?;
    if let Some(owner) = &env.settlement {
        owner.committed();
    }
    Ok(())
}
