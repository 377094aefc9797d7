//! `sessions.list/patch/reset/delete`, `chat.history` and `agent.wait`.

use pincer::store::{Store, StoreOptions};
use serde_json::{json, Value};

use super::{admin, run_agent, start};
use crate::support::fake_openai::FakeOpenAi;
use crate::support::gateway::{config_with_provider, GatewayProcess};
use crate::support::ws_client::TestClient;

const MAIN_KEY: &str = "agent:main:main";

/// The `sessions.list` row for `key`, if listed.
async fn session_row(client: &mut TestClient, key: &str) -> Option<Value> {
    let res = client.call("sessions.list", json!({})).await;
    assert_eq!(res["ok"], true, "{res}");
    res["payload"]["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .find(|row| row["key"] == key)
        .cloned()
}

/// `(role, text)` of each message `chat.history` returns.
async fn history(client: &mut TestClient, params: Value) -> Vec<(String, String)> {
    let res = client.call("chat.history", params).await;
    assert_eq!(res["ok"], true, "{res}");
    res["payload"]["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| {
            let role = m["role"].as_str().expect("role").to_string();
            let text = m["content"][0]["text"].as_str().expect("text").to_string();
            (role, text)
        })
        .collect()
}

fn pair(role: &str, text: &str) -> (String, String) {
    (role.to_string(), text.to_string())
}

#[tokio::test]
async fn sessions_list_shows_a_chatted_session_with_its_token_counts() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let mut client = admin(&gateway, 1).await;
    let final_res = run_agent(&mut client, "main", "count my tokens please").await;

    let row = session_row(&mut client, MAIN_KEY)
        .await
        .expect("the main session is listed");
    assert_eq!(row["kind"], "direct");
    assert!(row["updatedAt"].as_u64().is_some_and(|t| t > 0), "{row}");
    assert_eq!(
        row["sessionId"],
        final_res["payload"]["result"]["meta"]["agentMeta"]["sessionId"]
    );
    assert!(row["sessionId"].as_str().is_some_and(|id| !id.is_empty()));
    // The fake reports prompt tokens as the words of the request's messages
    // and completion tokens as the reply's chunks (4 characters each).
    let request = fake.requests().pop().expect("a provider request");
    let prompt_words: usize = request.body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| {
            m["content"]
                .as_str()
                .unwrap_or("")
                .split_whitespace()
                .count()
        })
        .sum();
    let input = row["inputTokens"].as_u64().expect("inputTokens");
    let output = row["outputTokens"].as_u64().expect("outputTokens");
    assert_eq!(input, prompt_words as u64, "{row}");
    assert_eq!(
        output,
        "echo: count my tokens please".len().div_ceil(4) as u64,
        "{row}"
    );
    assert_eq!(row["totalTokens"].as_u64(), Some(input + output));
}

#[tokio::test]
async fn sessions_patch_sets_label_and_thinking_level_and_null_clears() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let mut client = admin(&gateway, 2).await;
    let res = client
        .call(
            "sessions.patch",
            json!({"key": "main", "label": "Work", "thinkingLevel": "high"}),
        )
        .await;
    assert_eq!(res["ok"], true, "{res}");
    assert_eq!(res["payload"]["key"], MAIN_KEY);
    let row = session_row(&mut client, MAIN_KEY).await.expect("listed");
    assert_eq!(
        (&row["label"], &row["thinkingLevel"]),
        (&json!("Work"), &json!("high"))
    );

    let res = client
        .call("sessions.patch", json!({"key": "main", "label": null}))
        .await;
    assert_eq!(res["ok"], true, "{res}");
    let row = session_row(&mut client, MAIN_KEY).await.expect("listed");
    assert!(row["label"].is_null(), "label cleared: {row}");
    assert_eq!(row["thinkingLevel"], "high", "untouched field kept");
}

#[tokio::test]
async fn sessions_patch_refuses_an_unknown_thinking_level_naming_the_allowed_ones() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let mut client = admin(&gateway, 3).await;
    let res = client
        .call(
            "sessions.patch",
            json!({"key": "main", "thinkingLevel": "extreme"}),
        )
        .await;
    assert_eq!(res["ok"], false, "{res}");
    assert_eq!(res["error"]["code"], "INVALID_REQUEST");
    let message = res["error"]["message"].as_str().expect("message");
    assert!(message.contains("thinkingLevel"), "{message}");
    for allowed in ["off", "minimal", "low", "medium", "high", "xhigh"] {
        assert!(message.contains(allowed), "{allowed} named: {message}");
    }
    assert!(
        session_row(&mut client, MAIN_KEY).await.is_none(),
        "nothing stored"
    );
}

#[tokio::test]
async fn sessions_reset_gives_a_new_session_id_and_empty_history() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let mut client = admin(&gateway, 4).await;
    run_agent(&mut client, "main", "remember this").await;
    let old_id = session_row(&mut client, MAIN_KEY).await.expect("listed")["sessionId"].clone();
    assert_eq!(
        history(&mut client, json!({"sessionKey": "main"}))
            .await
            .len(),
        2
    );

    let res = client.call("sessions.reset", json!({"key": "main"})).await;
    assert_eq!(res["ok"], true, "{res}");
    let new_id = res["payload"]["entry"]["sessionId"].clone();
    assert!(new_id.as_str().is_some_and(|id| !id.is_empty()), "{res}");
    assert_ne!(new_id, old_id);
    assert_eq!(
        session_row(&mut client, MAIN_KEY).await.expect("listed")["sessionId"],
        new_id
    );
    assert!(history(&mut client, json!({"sessionKey": "main"}))
        .await
        .is_empty());

    // The next turn starts from nothing: after the system prompt the model
    // sees one message.
    run_agent(&mut client, "main", "fresh start").await;
    // (The /new session flush may also ask the model for a note name, in the background.)
    let last = fake
        .requests()
        .into_iter()
        .rev()
        .find(|r| r.body["messages"].to_string().contains("fresh start"))
        .expect("the turn's provider request");
    let conversation = last.body["messages"]
        .as_array()
        .map(|m| m.iter().filter(|m| m["role"] != "system").count());
    assert_eq!(conversation, Some(1), "{}", last.body);
}

#[tokio::test]
async fn sessions_delete_removes_the_entry_and_its_transcript() {
    let fake = FakeOpenAi::start().await;
    let mut gateway = start(&fake);
    let mut client = admin(&gateway, 5).await;
    run_agent(&mut client, "drop", "to be deleted").await;
    run_agent(&mut client, "keep", "to be kept").await;
    let dropped = session_row(&mut client, "agent:main:drop")
        .await
        .expect("listed");
    let kept = session_row(&mut client, "agent:main:keep")
        .await
        .expect("listed");

    let res = client.call("sessions.delete", json!({"key": "drop"})).await;
    assert_eq!(
        res["payload"],
        json!({"ok": true, "key": "agent:main:drop", "deleted": true})
    );
    let res = client
        .call(
            "sessions.delete",
            json!({"key": "keep", "deleteTranscript": false}),
        )
        .await;
    assert_eq!(res["payload"]["deleted"], true, "{res}");
    assert!(session_row(&mut client, "agent:main:drop").await.is_none());
    assert!(session_row(&mut client, "agent:main:keep").await.is_none());
    assert!(history(&mut client, json!({"sessionKey": "drop"}))
        .await
        .is_empty());
    let unknown = client
        .call("sessions.delete", json!({"key": "never-was"}))
        .await;
    assert_eq!(unknown["ok"], true, "{unknown}");
    assert_eq!(unknown["payload"]["deleted"], false);

    // The transcripts as the store holds them, once the gateway has let go.
    assert!(gateway.terminate().success());
    let store = Store::open(&gateway.data_dir().join("store"), StoreOptions::default())
        .expect("open the gateway's store");
    let transcript = |row: &Value| {
        store
            .transcript_tail(row["sessionId"].as_str().expect("sessionId"), 10)
            .expect("read transcript")
    };
    assert!(transcript(&dropped).is_empty(), "transcript deleted");
    assert_eq!(
        transcript(&kept).len(),
        2,
        "deleteTranscript: false keeps it"
    );
}

#[tokio::test]
async fn chat_history_limit_keeps_the_newest_messages_oldest_first() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let mut client = admin(&gateway, 6).await;
    for message in ["one", "two", "three"] {
        run_agent(&mut client, "main", message).await;
    }
    let all = history(&mut client, json!({"sessionKey": "main"})).await;
    let expected: Vec<(String, String)> = ["one", "two", "three"]
        .iter()
        .flat_map(|m| [pair("user", m), pair("assistant", &format!("echo: {m}"))])
        .collect();
    assert_eq!(all, expected);

    let newest = history(&mut client, json!({"sessionKey": "main", "limit": 3})).await;
    assert_eq!(newest, expected[3..].to_vec());
}

#[tokio::test]
async fn chat_history_max_chars_truncates_long_messages() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let mut client = admin(&gateway, 7).await;
    let long = "abcdefghijklmnopqrstuvwxyz";
    run_agent(&mut client, "main", long).await;
    let short = history(&mut client, json!({"sessionKey": "main", "maxChars": 5})).await;
    assert_eq!(short.len(), 2);
    for (_, text) in &short {
        assert!(
            text.chars().count() <= 6,
            "at most 5 characters and a mark: {text}"
        );
    }
    assert!(
        short[0].1.starts_with("abcde") && short[0].1 != long,
        "{short:?}"
    );
    assert!(short[1].1.starts_with("echo:"), "{short:?}");
    let full = history(&mut client, json!({"sessionKey": "main"})).await;
    assert_eq!(full[0].1, long, "without maxChars the text is whole");
}

#[tokio::test]
async fn chat_history_max_chars_from_the_config_is_the_default_a_request_overrides() {
    let fake = FakeOpenAi::start().await;
    let config = config_with_provider(&fake.base_url()).replacen(
        '{',
        r#"{ gateway: { webchat: { chatHistoryMaxChars: 4 } },"#,
        1,
    );
    let gateway = super::start_with(&config);
    let mut client = admin(&gateway, 10).await;
    let long = "abcdefghijklmnopqrstuvwxyz";
    run_agent(&mut client, "main", long).await;
    let capped = history(&mut client, json!({"sessionKey": "main"})).await;
    assert_eq!(capped[0].1, "abcd…", "{capped:?}");
    let wider = history(&mut client, json!({"sessionKey": "main", "maxChars": 10})).await;
    assert_eq!(wider[0].1, "abcdefghij…", "{wider:?}");
}

#[tokio::test]
async fn agent_wait_reports_ok_for_a_finished_run_and_timeout_for_an_unknown_one() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let mut client = admin(&gateway, 8).await;
    let final_res = run_agent(&mut client, "main", "finish me").await;
    let run_id = final_res["payload"]["runId"].clone();

    let res = client.call("agent.wait", json!({"runId": run_id})).await;
    assert_eq!(res["ok"], true, "{res}");
    let waited = &res["payload"];
    assert_eq!(waited["status"], "ok", "{waited}");
    assert_eq!(waited["runId"], run_id);
    let started = waited["startedAt"].as_u64().expect("startedAt");
    assert!(waited["endedAt"].as_u64().expect("endedAt") >= started);

    let res = client
        .call(
            "agent.wait",
            json!({"runId": "no-such-run", "timeoutMs": 200}),
        )
        .await;
    assert_eq!(res["ok"], true, "{res}");
    assert_eq!(res["payload"]["status"], "timeout");
}

/// The session id an `agent` turn's final `res` reports.
fn turn_session_id(final_res: &Value) -> String {
    final_res["payload"]["result"]["meta"]["agentMeta"]["sessionId"]
        .as_str()
        .expect("sessionId")
        .to_string()
}

#[tokio::test]
async fn an_agent_turn_in_a_session_idle_past_idle_minutes_runs_in_a_new_session() {
    let fake = FakeOpenAi::start().await;
    let config = config_with_provider(&fake.base_url()).replacen(
        '{',
        r#"{ session: { reset: { mode: "idle", idleMinutes: 30 } },"#,
        1,
    );
    let args = ["--port", "0", "--token", super::TOKEN];
    let mut gateway = GatewayProcess::start(&config, &args);
    let mut client = admin(&gateway, 9).await;
    let first = turn_session_id(&run_agent(&mut client, "main", "remember pelican").await);
    let again = turn_session_id(&run_agent(&mut client, "main", "still there?").await);
    assert_eq!(again, first, "a fresh session continues");

    // Age the session while the gateway is down: the store belongs to one process at a time.
    drop(client);
    assert!(gateway.terminate().success());
    {
        let store = Store::open(&gateway.data_dir().join("store"), StoreOptions::default())
            .expect("open the gateway's store");
        let mut entry = store.session(MAIN_KEY).expect("read").expect("exists");
        assert!(
            entry.last_interaction_at_ms.is_some(),
            "an agent turn is the user's interaction"
        );
        entry.updated_at_ms -= 31 * 60_000;
        entry.created_at_ms -= 31 * 60_000;
        entry.last_interaction_at_ms = entry.last_interaction_at_ms.map(|at| at - 31 * 60_000);
        store.put_session(MAIN_KEY, &entry).expect("write");
    }
    gateway.crash_and_restart(&config, &args);
    let mut client = admin(&gateway, 9).await;
    let second = turn_session_id(&run_agent(&mut client, "main", "what was the word?").await);
    assert_ne!(second, first, "idle for 31 of 30 minutes: a new session");
    let last = fake.requests().pop().expect("a provider request");
    assert!(
        !last.body["messages"].to_string().contains("pelican"),
        "the new session's transcript is empty"
    );
}

#[tokio::test]
async fn chat_send_into_a_session_whose_send_policy_is_deny_is_refused() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let mut client = admin(&gateway, 10).await;
    let res = client
        .call(
            "sessions.patch",
            json!({"key": "main", "sendPolicy": "deny"}),
        )
        .await;
    assert_eq!(res["ok"], true, "{res}");
    let send = json!({"sessionKey": "main", "message": "hello", "idempotencyKey": "sp-1"});
    let res = client.call("chat.send", send).await;
    assert_eq!(res["ok"], false, "{res}");
    assert_eq!(res["error"]["code"], "INVALID_REQUEST", "{res}");
    assert!(
        res["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("send blocked by session policy")),
        "{res}"
    );
    assert!(fake.requests().is_empty(), "no turn ran");

    let res = client
        .call(
            "sessions.patch",
            json!({"key": "main", "sendPolicy": "allow"}),
        )
        .await;
    assert_eq!(res["ok"], true, "{res}");
    let send = json!({"sessionKey": "main", "message": "hello", "idempotencyKey": "sp-2"});
    let res = client.call("chat.send", send).await;
    assert_eq!(res["ok"], true, "{res}");
}
