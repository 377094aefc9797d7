//! The gateway's side of the message path: it builds the channel hub with
//! the ports the hub needs (`HubDeps`), tells web clients about deliveries
//! that failed, and answers the requests waiting on web chat turns from the
//! idempotency cache (`WebchatAnswers`): the answers are written with the
//! turn's reply when it is recorded, else when the run ends.
//!
//! This file translates between the hub and the protocol; it must not run
//! turns or decide what a message gets.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use serde_json::{json, Value};

use crate::agent::ReplySettlement;
use crate::agent::RunStartError;
use crate::agent::{RunOutcome, RunStatus};
use crate::channels::hub::{ChannelHub, HubObserver};
use crate::channels::outbound::DeliveryError;
use crate::channels::turns::{TurnAnswers, WebchatAnswers};
use crate::pipeline::InboundPipeline;
use crate::store::Settlement;
use crate::system::clock::now_ms;

use super::clients::BroadcastOptions;
use super::frames::ErrorShape;
use super::idempotency;
use super::runs::{final_payload, start_error};
use super::scopes;
use super::state::GatewayState;

/// The gateway's hub.
pub fn hub_of(state: &GatewayState) -> Arc<ChannelHub> {
    state.services.hub.clone()
}

/// The gateway's inbound pipeline (its echo tracker records replies).
pub fn pipeline_of(state: &Arc<GatewayState>) -> Arc<InboundPipeline> {
    hub_of(state).pipeline.clone()
}

/// Failed deliveries become `agent` events with stream `error` for readers.
pub struct GatewayHubObserver {
    pub state: Weak<GatewayState>,
}

impl HubObserver for GatewayHubObserver {
    fn delivery_failed(&self, run_id: Option<&str>, session_key: &str, error: &DeliveryError) {
        let Some(state) = self.state.upgrade() else {
            return;
        };
        let payload = json!({
            "runId": run_id, "sessionKey": session_key, "stream": "error", "ts": now_ms(),
            "data": {"kind": "delivery", "error": error.to_string()},
        });
        state.clients.broadcast(
            "agent",
            &payload,
            BroadcastOptions {
                drop_if_slow: true,
                scope: Some(scopes::READ),
                state_version: None,
            },
        );
    }
}

/// Web chat answers kept in the idempotency cache.
pub struct GatewayAnswers {
    pub state: Weak<GatewayState>,
}

impl WebchatAnswers for GatewayAnswers {
    fn forget(&self, key: &str) {
        if let Some(state) = self.state.upgrade() {
            state.idempotency.forget(key);
        }
    }

    fn refuse(&self, keys: &[String], error: &RunStartError) {
        let Some(state) = self.state.upgrade() else {
            return;
        };
        let error = start_error(error.clone());
        for key in keys {
            state.idempotency.finish(
                key,
                false,
                json!({"status": "error", "summary": error.message}),
                Some(error.to_json()),
                now_ms(),
            );
        }
    }

    fn begin(&self, keys: Vec<String>, done: Vec<String>) -> Arc<dyn TurnAnswers> {
        Arc::new(WebchatSettlement {
            state: self.state.clone(),
            keys,
            done,
            committed: AtomicBool::new(false),
            answer: Mutex::new(None),
        })
    }
}

/// A run's final answer for the idempotency cache: `ok`, the `res` payload
/// and the error as JSON.
type Answer = (bool, Value, Option<Value>);

fn answer_of(outcome: &RunOutcome) -> Answer {
    let (ok, payload, error) = final_payload(outcome);
    (ok, payload, error.as_ref().map(ErrorShape::to_json))
}

/// The web chat's idempotency answers and the removal of its messages'
/// records, committed with the run's reply.
struct WebchatSettlement {
    state: Weak<GatewayState>,
    keys: Vec<String>,
    done: Vec<String>,
    committed: AtomicBool,
    /// The answer the settlements carry, for the cache in memory afterwards.
    answer: Mutex<Option<Answer>>,
}

impl ReplySettlement for WebchatSettlement {
    fn settlements(&self, outcome: &RunOutcome) -> Vec<Settlement> {
        let (ok, payload, error) = answer_of(outcome);
        let now = now_ms();
        let settlements = self
            .keys
            .iter()
            .enumerate()
            .map(|(i, key)| {
                let done = if i == 0 { self.done.as_slice() } else { &[] };
                idempotency::settlement(key, ok, &payload, error.as_ref(), now, done)
            })
            .collect();
        *self.answer.lock() = Some((ok, payload, error));
        settlements
    }

    fn committed(&self) {
        self.committed.store(true, Ordering::Release);
    }
}

impl WebchatSettlement {
    /// The inbox records the run's end answers: none when the store refused the turn's message or reply
    /// (the web chat's answer is its recorded reply), so the next start runs those messages again.
    fn answered_records(&self, outcome: &RunOutcome) -> &[String] {
        if outcome.unrecorded.is_some() {
            log::warn!(
                "run {}: its answer was not recorded; its messages stay in the inbox for the next start",
                outcome.run_id
            );
            return &[];
        }
        &self.done
    }
}

impl TurnAnswers for WebchatSettlement {
    fn settle(&self, outcome: &RunOutcome) {
        let Some(state) = self.state.upgrade() else {
            return;
        };
        // The answer the reply's commit kept, when it was committed.
        let kept = self
            .committed
            .load(Ordering::Acquire)
            .then(|| self.answer.lock().take())
            .flatten();
        if let Some((ok, payload, error)) = kept {
            for key in &self.keys {
                state.idempotency.finish_persisted(
                    key,
                    ok,
                    payload.clone(),
                    error.clone(),
                    now_ms(),
                );
            }
            return;
        }
        // Not committed with a reply: the first key's commit also removes
        // the `done` records, unless the store refused the turn's writes.
        let (ok, payload, error) = answer_of(outcome);
        let done = self.answered_records(outcome);
        state.services.store.run_blocking(|| {
            for (i, key) in self.keys.iter().enumerate() {
                let done = if i == 0 { done } else { &[] };
                state.idempotency.finish_settling(
                    key,
                    ok,
                    payload.clone(),
                    error.clone(),
                    now_ms(),
                    done,
                );
            }
        });
        if outcome.status == RunStatus::Error {
            log::debug!(
                "run {} ended with an error: {:?}",
                outcome.run_id,
                outcome.error
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::Unrecorded;

    fn settlement() -> WebchatSettlement {
        WebchatSettlement {
            state: Weak::new(),
            keys: vec!["chat:run-1".into()],
            done: vec!["webchat-inbox/1".into()],
            committed: AtomicBool::new(false),
            answer: Mutex::new(None),
        }
    }

    #[test]
    fn a_run_whose_answer_was_not_recorded_keeps_its_messages() {
        let owner = settlement();
        let mut outcome = RunOutcome::without_turn("run-1", "agent:main:main", RunStatus::Ok, 1);
        assert_eq!(owner.answered_records(&outcome), ["webchat-inbox/1"]);
        outcome.status = RunStatus::Error;
        assert_eq!(owner.answered_records(&outcome), ["webchat-inbox/1"]);
        for unrecorded in [Unrecorded::Message, Unrecorded::Reply] {
            outcome.unrecorded = Some(unrecorded);
            assert!(owner.answered_records(&outcome).is_empty());
        }
    }
}
