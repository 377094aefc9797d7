//! `pairing.list` and `pairing.approve` over the protocol, against the
//! gateway's real store: codes the DM pipeline created are listed (per
//! channel, expired ones not), approving one allows the sender, seeds the
//! owner and removes the code, unknown or reused codes are refused, and
//! both methods need `operator.pairing`.

use pincer::pipeline::access::{MAX_PENDING_PAIRINGS, PAIRING_CODE_TTL_MS};
use pincer::store::{DmPairingLimits, PendingDmPairing, Store, StoreOptions};
use serde_json::{json, Value};

use super::{admin, start, TOKEN};
use crate::support::fake_openai::FakeOpenAi;
use crate::support::ws_client::{Device, TestClient};

fn now_ms() -> u64 {
    pincer::system::clock::now_ms()
}

/// Asks for a code as the DM pipeline does when a stranger writes.
fn request_code(store: &Store, channel: &str, sender: &str, code: &str, created_at_ms: u64) {
    let pending = PendingDmPairing {
        code: String::new(),
        account_id: "default".into(),
        sender_id: sender.into(),
        sender_name: Some(format!("{sender} name")),
        created_at_ms,
    };
    let limits = DmPairingLimits {
        ttl_ms: PAIRING_CODE_TTL_MS,
        max_pending_per_account: MAX_PENDING_PAIRINGS,
    };
    store
        .dm_pairing_request(channel, &pending, limits, &mut || code.to_string())
        .expect("pairing request stored");
}

fn codes(payload: &Value) -> Vec<(String, String)> {
    payload["pending"]
        .as_array()
        .expect("pending")
        .iter()
        .map(|p| {
            (
                p["channel"].as_str().unwrap_or("").to_string(),
                p["code"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_codes_are_listed_and_approving_one_allows_the_sender() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    // The gateway holds the store open; LMDB lets this process write beside it.
    let store = Store::open(&gateway.data_dir().join("store"), StoreOptions::default())
        .expect("open the gateway's store");
    request_code(&store, "telegram", "1001", "TGCODE01", now_ms());
    request_code(&store, "discord", "2002", "DCCODE02", now_ms());
    request_code(
        &store,
        "telegram",
        "3003",
        "OLDCODE3",
        now_ms() - PAIRING_CODE_TTL_MS - 1,
    );
    let mut client = admin(&gateway, 60).await;

    let all = client.call("pairing.list", json!({})).await;
    assert_eq!(all["ok"], true, "{all}");
    let mut listed = codes(&all["payload"]);
    listed.sort();
    assert_eq!(
        listed,
        vec![
            ("discord".to_string(), "DCCODE02".to_string()),
            ("telegram".to_string(), "TGCODE01".to_string())
        ],
        "expired codes are not listed"
    );
    let telegram = client
        .call("pairing.list", json!({"channel": "Telegram"}))
        .await;
    assert_eq!(
        codes(&telegram["payload"]),
        vec![("telegram".into(), "TGCODE01".into())]
    );
    assert_eq!(telegram["payload"]["pending"][0]["id"], "1001");
    assert_eq!(telegram["payload"]["pending"][0]["name"], "1001 name");

    let approved = client
        .call(
            "pairing.approve",
            json!({"channel": "telegram", "code": "tgcode01"}),
        )
        .await;
    assert_eq!(approved["ok"], true, "{approved}");
    assert_eq!(
        approved["payload"],
        json!({"approved": true, "channel": "telegram", "id": "1001", "accountId": "default",
               "ownerSeeded": true})
    );
    assert!(store
        .dm_pairing_is_approved("telegram", "default", "1001")
        .expect("read"));
    assert_eq!(
        store.dm_pairing_owner().expect("read").as_deref(),
        Some("telegram:1001")
    );
    let after = client.call("pairing.list", json!({})).await;
    assert_eq!(
        codes(&after["payload"]),
        vec![("discord".into(), "DCCODE02".into())]
    );

    let second = client
        .call(
            "pairing.approve",
            json!({"channel": "discord", "code": "DCCODE02"}),
        )
        .await;
    assert_eq!(
        second["payload"]["ownerSeeded"], false,
        "only the first approval seeds the owner"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_reused_or_expired_codes_and_missing_scopes_are_refused() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let store = Store::open(&gateway.data_dir().join("store"), StoreOptions::default())
        .expect("open the gateway's store");
    request_code(&store, "telegram", "1001", "TGCODE01", now_ms());
    request_code(
        &store,
        "telegram",
        "3003",
        "OLDCODE3",
        now_ms() - PAIRING_CODE_TTL_MS - 1,
    );
    let mut client = admin(&gateway, 61).await;
    for (code, why) in [("NOPE0000", "unknown"), ("OLDCODE3", "expired")] {
        let res = client
            .call(
                "pairing.approve",
                json!({"channel": "telegram", "code": code}),
            )
            .await;
        assert_eq!(res["ok"], false, "{why}: {res}");
        assert_eq!(res["error"]["code"], "INVALID_REQUEST", "{why}");
        assert!(
            res["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains(code)),
            "{res}"
        );
    }
    assert!(!store
        .dm_pairing_is_approved("telegram", "default", "3003")
        .expect("read"));
    let missing = client
        .call("pairing.approve", json!({"channel": "telegram"}))
        .await;
    assert_eq!(missing["error"]["code"], "INVALID_REQUEST");
    assert!(
        missing["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("code")),
        "{missing}"
    );
    let first = client
        .call(
            "pairing.approve",
            json!({"channel": "telegram", "code": "TGCODE01"}),
        )
        .await;
    assert_eq!(first["ok"], true, "{first}");
    let reused = client
        .call(
            "pairing.approve",
            json!({"channel": "telegram", "code": "TGCODE01"}),
        )
        .await;
    assert_eq!(
        reused["ok"], false,
        "a code is good for one approval: {reused}"
    );

    request_code(&store, "telegram", "4004", "TGCODE04", now_ms());
    let device = Device::new(62);
    let (mut reader, _) = TestClient::connect(
        &gateway.url(),
        Some(TOKEN),
        &["operator.read", "operator.write"],
        Some(&device),
    )
    .await;
    for (method, params) in [
        ("pairing.list", json!({})),
        (
            "pairing.approve",
            json!({"channel": "telegram", "code": "TGCODE04"}),
        ),
    ] {
        let res = reader.call(method, params).await;
        assert_eq!(res["ok"], false, "{method} without operator.pairing: {res}");
    }
    assert!(!store
        .dm_pairing_is_approved("telegram", "default", "4004")
        .expect("read"));
}
