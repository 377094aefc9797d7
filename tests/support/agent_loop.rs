//! Drives the agent's tool loop (`run_tool_loop`) directly for provider and failover tests: a
//! temporary store and workspace, the built-in tool registry, a config built
//! from JSON, and a sleeper that records backoff delays instead of sleeping.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use pincer::agent::providers::models::{resolve_chain, ResolvedModel};
use pincer::agent::providers::{BoxFuture, ChatMessage};
use pincer::agent::{
    run_tool_loop, FailoverPolicy, LoopInput, LoopResult, ReasoningLevel, RetryPolicy, RunEvent,
    Sleeper, TurnEnv, TurnSpec,
};
use pincer::config::Config;
use pincer::store::{Store, StoreOptions};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Records every requested delay and returns at once.
#[derive(Default)]
pub struct RecordingSleeper {
    pub delays: Mutex<Vec<Duration>>,
}

impl Sleeper for RecordingSleeper {
    fn sleep(&self, delay: Duration) -> BoxFuture<'_, ()> {
        self.delays.lock().expect("lock").push(delay);
        Box::pin(async {})
    }
}

/// A store, workspace and config for running the loop.
pub struct LoopHarness {
    pub env: TurnEnv,
    pub sleeper: Arc<RecordingSleeper>,
    /// The reasoning level runs use (off unless a test sets it).
    pub reasoning: ReasoningLevel,
    _dir: tempfile::TempDir,
}

impl LoopHarness {
    /// `config` is JSON of a pincer config (models, agents).
    pub fn new(config: Value) -> LoopHarness {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Store::open(&dir.path().join("store"), StoreOptions::default()).expect("store");
        let workspace = dir.path().join("workspace");
        std::fs::create_dir_all(&workspace).expect("workspace");
        let config: Config = serde_json::from_value(config).expect("config parses");
        let env = TurnEnv {
            store,
            config: Arc::new(config),
            http: reqwest::Client::new(),
            tools: Arc::new(pincer::tools::ToolRegistry::builtin()),
            workspace,
            services: Default::default(),
            steer: None,
            overrides: Default::default(),
            settlement: None,
        };
        LoopHarness {
            env,
            sleeper: Arc::default(),
            reasoning: ReasoningLevel::Off,
            _dir: dir,
        }
    }

    /// The agent's model chain, with backoff going to the recording sleeper.
    pub fn models(&self) -> Vec<ResolvedModel> {
        let mut models =
            resolve_chain(&self.env.config, "main", None, &self.env.http).expect("models resolve");
        for model in &mut models {
            model.policy = Arc::new(FailoverPolicy {
                retry: RetryPolicy::default(),
                sleeper: self.sleeper.clone(),
            });
        }
        models
    }

    /// Runs one turn with `read` allowed; returns the result and every event.
    pub async fn run(
        &self,
        models: &[ResolvedModel],
        message: &str,
        cancel: &CancellationToken,
    ) -> (LoopResult, Vec<RunEvent>) {
        self.run_watching(models, message, cancel, |_| {}).await
    }

    /// Like [`LoopHarness::run`], calling `on_event` for each event as it comes.
    pub async fn run_watching(
        &self,
        models: &[ResolvedModel],
        message: &str,
        cancel: &CancellationToken,
        mut on_event: impl FnMut(&RunEvent),
    ) -> (LoopResult, Vec<RunEvent>) {
        let spec = TurnSpec {
            run_id: "run-1".into(),
            agent_id: "main".into(),
            session_key: "main".into(),
            message: message.into(),
            timeout_ms: 60_000,
            model_override: None,
            extra_system_prompt: None,
            label: None,
            channel: None,
            skill_filter: None,
            interaction: true,
            images: Vec::new(),
        };
        let (events, mut received) = mpsc::channel(4096);
        let input = LoopInput {
            env: &self.env,
            spec: &spec,
            session_id: "session-1",
            models,
            allowed_tools: vec!["read".into()],
            cancel,
            events: &events,
            window: pincer::agent::resolve_window(&self.env.config, None),
            system_prompt: "You are a test.".into(),
            last_call_ms: None,
            reasoning: self.reasoning,
            steer: None,
        };
        let messages = vec![
            ChatMessage::system("You are a test."),
            ChatMessage::user(message),
        ];
        let mut seen = Vec::new();
        let turn = run_tool_loop(input, messages);
        tokio::pin!(turn);
        let result = loop {
            tokio::select! {
                result = &mut turn => break result,
                Some(event) = received.recv() => {
                    on_event(&event);
                    seen.push(event);
                }
            }
        };
        while let Ok(event) = received.try_recv() {
            on_event(&event);
            seen.push(event);
        }
        (result, seen)
    }
}

/// The final text of a finished loop, or a panic naming how it ended.
pub fn done_text(result: &LoopResult) -> String {
    match result {
        LoopResult::Done { text, .. } => text.clone(),
        LoopResult::Stopped { partial, status } => {
            panic!("stopped ({}) with {partial:?}", status.as_str())
        }
        LoopResult::Failed { message, .. } => panic!("failed: {message}"),
    }
}
