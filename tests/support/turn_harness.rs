//! A harness for agent-turn tests: a store and workspace in a temp dir, the
//! fake OpenAI server as the only provider, and helpers to seed history, run
//! one turn through `run_turn` and read what the model received.

use std::path::Path;
use std::sync::Arc;

use pincer::agent::{run_turn, RunOutcome, TurnEnv, TurnSpec};
use pincer::store::{SessionEntry, Store, StoreOptions, TranscriptEntry};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::fake_openai::FakeOpenAi;

pub const SESSION_KEY: &str = "agent:main:main";
pub const SESSION_ID: &str = "session-ctx";

pub struct Harness {
    pub fake: FakeOpenAi,
    _dir: tempfile::TempDir,
    pub env: TurnEnv,
}

impl Harness {
    pub async fn start(defaults: &str) -> Harness {
        Harness::start_with_store(defaults, StoreOptions::default()).await
    }

    /// [`Harness::start`] with a store opened with `options` (a small `max_disk_bytes`, say).
    pub async fn start_with_store(defaults: &str, options: StoreOptions) -> Harness {
        let fake = FakeOpenAi::start().await;
        let dir = tempfile::tempdir().expect("tempdir");
        let text = format!(
            r#"{{
  models: {{ providers: {{ fake: {{ baseUrl: "{}", apiKey: "sk-test", api: "openai-completions",
                                   models: [{{ id: "gpt-test", contextWindow: 128000 }}] }} }} }},
  agents: {{ defaults: {{ model: {{ primary: "fake/gpt-test" }} {defaults} }} }},
}}"#,
            fake.base_url()
        );
        let config = pincer::config::parse_str(&text, "test").expect("test config parses");
        let store = Store::open(&dir.path().join("store"), options).expect("store");
        let workspace = dir.path().join("workspace");
        std::fs::create_dir_all(&workspace).expect("workspace");
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
        Harness {
            fake,
            _dir: dir,
            env,
        }
    }

    pub fn workspace(&self) -> &Path {
        &self.env.workspace
    }

    pub fn write(&self, name: &str, text: &str) {
        let path = self.workspace().join(name);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("dirs");
        std::fs::write(path, text).expect("write workspace file");
    }

    /// Records earlier history directly in the store.
    pub fn seed(&self, entries: &[(&str, String, Option<Value>)]) {
        if self.env.store.session(SESSION_KEY).expect("read").is_none() {
            let session = SessionEntry::new(SESSION_ID, 1);
            self.env
                .store
                .put_session(SESSION_KEY, &session)
                .expect("session");
        }
        for (role, text, extra) in entries {
            let entry = TranscriptEntry {
                role: role.to_string(),
                text: text.clone(),
                timestamp_ms: 1_000,
                extra_json: extra.as_ref().map(Value::to_string),
                ..TranscriptEntry::default()
            };
            self.env
                .store
                .append_transcript(SESSION_ID, &entry)
                .expect("append");
        }
    }

    pub async fn turn(&self, run_id: &str, message: &str) -> RunOutcome {
        self.turn_cancellable(run_id, message, CancellationToken::new())
            .await
    }

    /// [`Harness::turn`] with the run's cancellation token.
    pub async fn turn_cancellable(
        &self,
        run_id: &str,
        message: &str,
        cancel: CancellationToken,
    ) -> RunOutcome {
        let spec = TurnSpec {
            run_id: run_id.into(),
            agent_id: "main".into(),
            session_key: SESSION_KEY.into(),
            message: message.into(),
            timeout_ms: 30_000,
            model_override: None,
            extra_system_prompt: Some("EXTRA-INSTRUCTIONS".into()),
            label: None,
            channel: None,
            skill_filter: None,
            interaction: true,
            images: Vec::new(),
        };
        let (tx, mut rx) = tokio::sync::mpsc::channel(64);
        let drain = tokio::spawn(async move { while rx.recv().await.is_some() {} });
        let outcome = run_turn(&self.env, &spec, cancel, tx).await;
        drain.await.expect("drain");
        outcome
    }

    /// The harness session's stored entry.
    pub fn session(&self) -> SessionEntry {
        self.env
            .store
            .session(SESSION_KEY)
            .expect("read the session")
            .expect("the session exists")
    }

    pub fn request_messages(&self, index: usize) -> Vec<Value> {
        self.fake.requests()[index].body["messages"]
            .as_array()
            .expect("messages")
            .clone()
    }

    pub fn system_prompt(&self, index: usize) -> String {
        let messages = self.request_messages(index);
        assert_eq!(messages[0]["role"], "system");
        messages[0]["content"].as_str().expect("text").to_string()
    }
}
