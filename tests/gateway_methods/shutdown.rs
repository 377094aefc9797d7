//! Graceful shutdown: a turn in progress at SIGTERM still answers.

use serde_json::json;

use super::{admin, start};
use crate::support::fake_openai::{FakeOpenAi, FakeReply};
use crate::support::ws_client::Read;

#[tokio::test]
async fn sigterm_lets_a_running_turn_deliver_its_final_answer_before_closing() {
    let fake = FakeOpenAi::start().await;
    let pieces = ["slow ", "but ", "complete ", "answer"];
    fake.push_reply(FakeReply::Text {
        chunks: pieces.iter().map(|p| p.to_string()).collect(),
        delay_ms: 150,
    });
    let mut gateway = start(&fake);
    let mut client = admin(&gateway, 1).await;
    let id = client
        .request(
            "agent",
            json!({"message": "take your time", "sessionKey": "main", "idempotencyKey": "slow-1"}),
        )
        .await;
    // The run is under way once its first text arrives.
    client
        .event_where("agent", |payload| payload["stream"] == "assistant")
        .await;
    gateway.sigterm();

    let expected = pieces.concat();
    let (mut final_res, mut chat_final, mut shutdown) = (None, None, false);
    loop {
        match client.read().await {
            Read::Frame(frame) if frame["type"] == "res" && frame["id"] == id => {
                if frame["payload"]["status"] != "accepted" {
                    final_res = Some(frame);
                }
            }
            Read::Frame(frame)
                if frame["event"] == "chat" && frame["payload"]["state"] == "final" =>
            {
                chat_final = Some(frame["payload"].clone());
            }
            Read::Frame(frame) if frame["event"] == "shutdown" => shutdown = true,
            Read::Frame(_) => {}
            Read::Closed { .. } => break,
        }
    }
    assert!(shutdown, "clients were told about the shutdown");
    let final_res = final_res.expect("the final res arrived before the close");
    assert_eq!(final_res["ok"], true, "{final_res}");
    assert_eq!(final_res["payload"]["summary"], "completed");
    assert_eq!(
        final_res["payload"]["result"]["payloads"][0]["text"],
        expected
    );
    let chat_final = chat_final.expect("the chat final event arrived before the close");
    assert_eq!(chat_final["message"]["content"][0]["text"], expected);
    assert!(gateway.terminate().success(), "exit status 0");
}
