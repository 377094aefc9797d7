//! The Telegram adapter's outbound side against the fake Bot API: markdown
//! sent as HTML the API accepts, the one plain-text fallback, error
//! classification for the retry policy, edits/deletes/reactions, text
//! limits, token redaction, and accounts without a token.

mod support;

use std::sync::Arc;

use pincer::channels::telegram::TelegramChannel;
use pincer::channels::{Channel, SendError, TextFormat};
use pincer::config::schema::telegram::TelegramConfig;
use pincer::store::{Store, StoreOptions};
use serde_json::json;
use support::fake_telegram::Failure;
use support::telegram_harness::*;

#[tokio::test]
async fn markdown_is_sent_as_telegram_html_the_api_accepts() {
    let h = Harness::new().await;
    let channel = h.channel(&h.store(), json!({}));
    let sent = channel
        .send_text(
            &target("7"),
            "**Hi** <you> & `a<b`\n- [docs](https://x.dev/?a=1&b=2)",
            TextFormat::Markdown,
        )
        .await
        .expect("send");
    let calls = h.fake.calls_of("sendMessage");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].body["parse_mode"], json!("HTML"));
    assert_eq!(
        calls[0].body["text"],
        json!("<b>Hi</b> &lt;you&gt; &amp; <code>a&lt;b</code>\n• <a href=\"https://x.dev/?a=1&amp;b=2\">docs</a>")
    );
    assert_eq!(calls[0].body["chat_id"], json!("7"));
    assert!(sent.message_id.parse::<i64>().is_ok(), "{sent:?}");
    let status = channel.status();
    assert!(status[0].last_outbound_at_ms.is_some());
}

#[tokio::test]
async fn rejected_markup_is_resent_once_as_plain_text() {
    let h = Harness::new().await;
    let channel = h.channel(&h.store(), json!({}));
    h.fake.fail_next("sendMessage", Failure::ParseEntities);
    channel
        .send_text(&target("7"), "**odd** markup", TextFormat::Markdown)
        .await
        .expect("plain-text fallback succeeds");
    let calls = h.fake.calls_of("sendMessage");
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1].body["text"], json!("**odd** markup"));
    assert!(calls[1].body.get("parse_mode").is_none());

    h.fake.fail_next("sendMessage", Failure::ParseEntities);
    h.fake.fail_next("sendMessage", Failure::ParseEntities);
    let error = channel
        .send_text(&target("7"), "*again*", TextFormat::Markdown)
        .await
        .expect_err("both attempts refused");
    assert!(
        matches!(error, SendError::Permanent(ref t) if t.contains("can't parse entities")),
        "{error:?}"
    );
    assert_eq!(
        h.fake.calls_of("sendMessage").len(),
        4,
        "the fallback is tried once only"
    );

    h.fake.fail_next("sendMessage", Failure::ParseEntities);
    let error = channel
        .send_text(&target("7"), "plain", TextFormat::Plain)
        .await
        .expect_err("plain text has no fallback");
    assert!(matches!(error, SendError::Permanent(_)));
    assert_eq!(h.fake.calls_of("sendMessage").len(), 5);
}

#[tokio::test]
async fn api_failures_are_classified_for_the_retry_policy() {
    let h = Harness::new().await;
    let channel = h.channel(&h.store(), json!({}));
    let to = target("7");
    let send = || channel.send_text(&to, "hi", TextFormat::Plain);
    h.fake.fail_next(
        "sendMessage",
        Failure::RateLimited {
            retry_after_secs: 7,
        },
    );
    assert_eq!(
        send().await,
        Err(SendError::RateLimited {
            retry_after_ms: 7_000
        })
    );
    h.fake.fail_next("sendMessage", Failure::Server(502));
    assert!(matches!(send().await, Err(SendError::Transient(_))));
    h.fake
        .fail_next("sendMessage", Failure::BadRequest("chat not found".into()));
    assert!(matches!(send().await, Err(SendError::Permanent(t)) if t.contains("chat not found")));
    assert_eq!(
        h.fake.calls_of("sendMessage").len(),
        3,
        "the adapter never retries by itself"
    );
    assert!(send().await.is_ok());
}

#[tokio::test]
async fn edits_deletes_and_reactions_reach_the_api() {
    let h = Harness::new().await;
    let channel = h.channel(&h.store(), json!({}));
    let to = target("7");
    let sent = channel
        .send_text(&to, "draft", TextFormat::Markdown)
        .await
        .expect("send");
    let edit = channel.edit().expect("edit capability");
    edit.edit_text(
        &to,
        &sent.message_id,
        "draft **more**",
        TextFormat::Markdown,
    )
    .await
    .expect("edit");
    edit.edit_text(
        &to,
        &sent.message_id,
        "draft **more**",
        TextFormat::Markdown,
    )
    .await
    .expect("an unchanged edit is not an error");
    let edits = h.fake.calls_of("editMessageText");
    assert_eq!(edits.len(), 2);
    assert_eq!(edits[0].body["text"], json!("draft <b>more</b>"));
    assert_eq!(edits[0].body["message_id"].to_string(), sent.message_id);
    let missing = edit.edit_text(&to, "999999", "x", TextFormat::Plain).await;
    assert!(
        matches!(missing, Err(SendError::Permanent(_))),
        "{missing:?}"
    );

    channel
        .reactions()
        .expect("reactions")
        .react(&to, &sent.message_id, "👀")
        .await
        .expect("react");
    let reaction = &h.fake.calls_of("setMessageReaction")[0].body;
    assert_eq!(
        reaction["reaction"],
        json!([{ "type": "emoji", "emoji": "👀" }])
    );
    channel
        .delete()
        .expect("delete")
        .delete(&to, &sent.message_id)
        .await
        .expect("delete");
    assert_eq!(
        h.fake.calls_of("deleteMessage")[0].body["message_id"].to_string(),
        sent.message_id
    );
}

#[tokio::test]
async fn text_limits_are_telegrams_hard_cap_and_oversized_text_is_refused_locally() {
    let h = Harness::new().await;
    let channel = h.channel(&h.store(), json!({}));
    // The adapter reports the platform's cap; the 4,000-character default
    // chunk size is the account settings' (`textChunkLimit`).
    assert_eq!(channel.text_limits().max_chars, 4_096);
    assert_eq!(channel.text_limits().max_lines, None);
    let long = "x".repeat(4_097);
    let refused = channel
        .send_text(&target("7"), &long, TextFormat::Plain)
        .await;
    assert!(matches!(refused, Err(SendError::Permanent(_))));
    assert!(h.fake.calls_of("sendMessage").is_empty());
    let at_cap = "y".repeat(4_096);
    channel
        .send_text(&target("7"), &at_cap, TextFormat::Plain)
        .await
        .expect("4,096 characters are accepted");
}

#[tokio::test]
async fn the_token_never_appears_in_errors_status_or_debug_output() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let dead_root = format!("http://{}", closed.local_addr().expect("addr"));
    drop(closed);
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open(&dir.path().join("data"), StoreOptions::default()).expect("store");
    let config: TelegramConfig =
        serde_json::from_value(json!({ "botToken": TOKEN, "apiRoot": dead_root })).expect("config");
    let channel = TelegramChannel::new(&config, store, options(&dir.path().join("media")));
    let secret = TOKEN.split_once(':').expect("token shape").1;

    let error = channel
        .send_text(&target("7"), "hi", TextFormat::Plain)
        .await
        .expect_err("nothing listens there");
    assert!(matches!(error, SendError::Transient(_)), "{error:?}");
    assert!(!error.to_string().contains(secret), "{error}");

    let sink = Arc::new(RecordingSink::default());
    channel.start(sink).await.expect("start");
    let status = wait_for_status(&channel, "a connection error", |s| s.last_error.is_some()).await;
    channel.stop().await;
    let shown = status.last_error.expect("error");
    assert!(shown.contains("getMe"), "{shown}");
    assert!(!shown.contains(secret), "{shown}");
    assert!(!status.connected);
    assert!(!format!("{channel:?}").contains(secret));
}

#[tokio::test]
async fn accounts_without_a_token_are_listed_but_cannot_send() {
    let h = Harness::new().await;
    let store = h.store();
    let config: TelegramConfig = serde_json::from_value(json!({
        "apiRoot": h.fake.api_root(),
        "accounts": { "home": { "botToken": TOKEN }, "spare": {} }
    }))
    .expect("config");
    let channel = TelegramChannel::new(&config, store, options(&h.media_dir));
    let status = channel.status();
    let summary: Vec<(String, bool)> = status
        .iter()
        .map(|s| (s.account_id.clone(), s.configured))
        .collect();
    assert_eq!(
        summary,
        [("home".to_string(), true), ("spare".to_string(), false)]
    );
    let mut to_spare = target("7");
    to_spare.account_id = "spare".into();
    assert_eq!(
        channel.send_text(&to_spare, "hi", TextFormat::Plain).await,
        Err(SendError::NoAccount("spare".into()))
    );
    let mut to_default = target("7");
    to_default.account_id = String::new();
    channel
        .send_text(&to_default, "hi", TextFormat::Plain)
        .await
        .expect("an empty account id means the only configured account");
}

#[tokio::test]
async fn replies_thread_to_the_message_and_link_previews_follow_the_config() {
    let h = Harness::new().await;
    let channel = h.channel(&h.store(), json!({ "linkPreview": false }));
    let mut to = target("7");
    to.reply_to_message_id = Some("55".into());
    channel
        .send_text(&to, "see https://example.com", TextFormat::Plain)
        .await
        .expect("send");
    let body = &h.fake.calls_of("sendMessage")[0].body;
    assert_eq!(
        body["reply_parameters"],
        json!({ "message_id": 55, "allow_sending_without_reply": true })
    );
    assert_eq!(body["link_preview_options"], json!({ "is_disabled": true }));
}

#[tokio::test]
async fn an_account_with_a_proxy_reaches_the_api_through_it() {
    let h = Harness::new().await;
    // The Bot API host does not resolve; only the proxy (the fake) can answer.
    let store = h.store();
    let channel = h.channel(
        &store,
        json!({ "apiRoot": "http://api.telegram.invalid", "proxy": h.fake.api_root() }),
    );
    channel
        .send_text(&target("7"), "via proxy", TextFormat::Plain)
        .await
        .expect("sent through the proxy");
    assert_eq!(h.fake.calls_of("sendMessage").len(), 1);
    let direct = h.channel(&store, json!({ "apiRoot": "http://api.telegram.invalid" }));
    let refused = direct
        .send_text(&target("7"), "direct", TextFormat::Plain)
        .await;
    assert!(
        matches!(refused, Err(SendError::Transient(_))),
        "{refused:?}"
    );
}

#[tokio::test]
async fn the_token_comes_from_token_file_and_an_unreadable_one_is_reported() {
    let h = Harness::new().await;
    let token_file = h.media_dir.with_file_name("bot-token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).expect("write token file");
    let config: TelegramConfig = serde_json::from_value(json!({
        "apiRoot": h.fake.api_root(),
        "accounts": {
            "filed": { "tokenFile": token_file },
            "missing": { "tokenFile": h.media_dir.with_file_name("nope") }
        }
    }))
    .expect("config");
    let channel = TelegramChannel::new(&config, h.store(), options(&h.media_dir));
    let mut to = target("7");
    to.account_id = "filed".into();
    channel
        .send_text(&to, "hi", TextFormat::Plain)
        .await
        .expect("the token from the file is accepted by the API");
    let missing = channel
        .status()
        .into_iter()
        .find(|s| s.account_id == "missing")
        .expect("listed");
    assert!(!missing.configured);
    assert!(missing.last_error.is_some_and(|e| e.contains("tokenFile")));
}
