use std::collections::{HashMap, VecDeque};

use super::*;
use crate::tools::sessions_send::{SessionReply, SessionRunStatus, SessionStartError};
use futures_util::future::BoxFuture;
use parking_lot::Mutex;

/// Answers each session's runs from its own script; records every start
/// and announcement.
#[derive(Default)]
struct ScriptedRunner {
    scripts: Mutex<HashMap<String, VecDeque<&'static str>>>,
    outcomes: Mutex<HashMap<String, String>>,
    started: Mutex<Vec<SessionSend>>,
    announced: Mutex<Vec<(String, String)>>,
    has_chat: bool,
}

impl ScriptedRunner {
    fn new(requester: &[&'static str], target: &[&'static str], has_chat: bool) -> Arc<Self> {
        let runner = ScriptedRunner {
            has_chat,
            ..Default::default()
        };
        {
            let mut scripts = runner.scripts.lock();
            scripts.insert(
                "agent:main:main".into(),
                requester.iter().copied().collect(),
            );
            scripts.insert("agent:ops:main".into(), target.iter().copied().collect());
        }
        Arc::new(runner)
    }

    fn steps(&self) -> Vec<(String, String, String)> {
        self.started
            .lock()
            .iter()
            .map(|s| {
                (
                    s.session_key.clone(),
                    s.message.clone(),
                    s.extra_system_prompt.clone(),
                )
            })
            .collect()
    }
}

impl SessionRunner for ScriptedRunner {
    fn start(&self, send: SessionSend) -> Result<String, SessionStartError> {
        let text = self
            .scripts
            .lock()
            .get_mut(&send.session_key)
            .and_then(VecDeque::pop_front)
            .ok_or_else(|| {
                SessionStartError::Refused(format!("no script left for {}", send.session_key))
            })?;
        let mut started = self.started.lock();
        started.push(send);
        let run_id = format!("run-{}", started.len());
        self.outcomes
            .lock()
            .insert(run_id.clone(), text.to_string());
        Ok(run_id)
    }

    fn wait<'a>(&'a self, run_id: &'a str, _t: Duration) -> BoxFuture<'a, Option<SessionReply>> {
        let text = self.outcomes.lock().get(run_id).cloned();
        Box::pin(async move {
            let _ = run_id;
            Some(SessionReply {
                status: SessionRunStatus::Ok,
                text: text?,
                error: None,
            })
        })
    }

    fn announce<'a>(&'a self, key: &'a str, text: String) -> BoxFuture<'a, Result<bool, String>> {
        self.announced.lock().push((key.to_string(), text));
        let has_chat = self.has_chat;
        Box::pin(async move { Ok(has_chat) })
    }
}

fn flow(max_turns: u8) -> AgentToAgentFlow {
    AgentToAgentFlow {
        requester_key: "agent:main:main".into(),
        requester_agent: "main".into(),
        requester_channel: Some("telegram".into()),
        target_key: "agent:ops:main".into(),
        target_agent: "ops".into(),
        message: "is the backup done?".into(),
        first_reply: Some("yes, at 02:00".into()),
        wait_run_id: None,
        step_timeout: Duration::from_secs(5),
        max_turns,
    }
}

#[tokio::test]
async fn the_sessions_answer_each_other_in_turn_then_the_target_announces() {
    let runner = ScriptedRunner::new(
        &["how big was it?"],
        &["12 GB", "Backup done: 12 GB at 02:00"],
        true,
    );
    let runner_dyn: Arc<dyn SessionRunner> = runner.clone();
    // Turn 3 (the requester again) ends the rounds with REPLY_SKIP.
    runner
        .scripts
        .lock()
        .get_mut("agent:main:main")
        .expect("script")
        .push_back(REPLY_SKIP);
    let announced = flow(5).run(runner_dyn).await;
    assert_eq!(announced.as_deref(), Some("Backup done: 12 GB at 02:00"));
    let steps = runner.steps();
    let sessions: Vec<(&str, &str)> = steps
        .iter()
        .map(|(key, message, _)| (key.as_str(), message.as_str()))
        .collect();
    assert_eq!(
        sessions,
        vec![
            ("agent:main:main", "yes, at 02:00"),
            ("agent:ops:main", "how big was it?"),
            ("agent:main:main", "12 GB"),
            ("agent:ops:main", ANNOUNCE_MESSAGE),
        ]
    );
    assert!(steps[0].2.contains("Turn 1 of 5") && steps[0].2.contains("Agent 1 (requester)"));
    assert!(steps[1].2.contains("Turn 2 of 5") && steps[1].2.contains("You are Agent 2"));
    assert!(steps[0]
        .2
        .contains("Agent 1 (requester) channel: telegram."));
    let announce_prompt = &steps[3].2;
    assert!(announce_prompt.contains("Original request: is the backup done?"));
    assert!(announce_prompt.contains("Round 1 reply: yes, at 02:00"));
    assert!(announce_prompt.contains("Latest reply: 12 GB"));
    assert_eq!(
        runner.announced.lock().clone(),
        vec![(
            "agent:ops:main".to_string(),
            "Backup done: 12 GB at 02:00".to_string()
        )]
    );
}

#[tokio::test]
async fn rounds_stop_at_the_configured_maximum() {
    let runner = ScriptedRunner::new(&["a", "c"], &["b", "d", "summary"], true);
    flow(2).run(runner.clone()).await;
    let keys: Vec<String> = runner.steps().into_iter().map(|(key, _, _)| key).collect();
    assert_eq!(
        keys,
        ["agent:main:main", "agent:ops:main", "agent:ops:main"],
        "two rounds, then the announce step"
    );
}

#[tokio::test]
async fn zero_turns_goes_straight_to_the_announce_step_and_skip_posts_nothing() {
    let runner = ScriptedRunner::new(&[], &[ANNOUNCE_SKIP], true);
    assert_eq!(flow(0).run(runner.clone()).await, None);
    assert_eq!(runner.steps().len(), 1);
    assert!(runner.announced.lock().is_empty());
}

#[tokio::test]
async fn a_target_without_a_chat_announces_nothing() {
    let runner = ScriptedRunner::new(&[], &["news"], false);
    assert_eq!(flow(0).run(runner.clone()).await, None);
    assert_eq!(runner.announced.lock().len(), 1, "tried once");
}

#[tokio::test]
async fn fire_and_forget_waits_for_the_first_reply_itself() {
    let runner = ScriptedRunner::new(&[REPLY_SKIP], &["first", "told"], true);
    // The target's first run, started by the tool.
    let first = runner
        .start(SessionSend {
            agent_id: "ops".into(),
            session_key: "agent:ops:main".into(),
            message: "hello".into(),
            extra_system_prompt: String::new(),
        })
        .expect("start");
    let mut waiting = flow(3);
    waiting.first_reply = None;
    waiting.wait_run_id = Some(first);
    assert_eq!(waiting.run(runner.clone()).await.as_deref(), Some("told"));
    let steps = runner.steps();
    assert_eq!(steps[1].1, "first", "the requester got the target's reply");
}
