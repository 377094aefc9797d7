//! `device.pair.list/remove` and `device.token.rotate/revoke`.

use serde_json::{json, Value};

use super::{admin, start, TOKEN};
use crate::support::fake_openai::FakeOpenAi;
use crate::support::ws_client::{Device, Read, TestClient};

/// A device that may read and manage pairing (its own token included).
const PAIRING_SCOPES: &[&str] = &["operator.read", "operator.pairing"];

/// Connects `device` with the shared token; returns the client and the device token it was issued.
async fn connect_device(url: &str, device: &Device) -> (TestClient, String) {
    let (client, hello) = TestClient::connect(url, Some(TOKEN), PAIRING_SCOPES, Some(device)).await;
    let token = hello["auth"]["deviceToken"]
        .as_str()
        .expect("a device token is issued")
        .to_string();
    (client, token)
}

/// Sends `connect` authenticated by `device_token` alone; returns the `res`.
async fn connect_with_device_token(url: &str, device: &Device, device_token: &str) -> Value {
    let mut client = TestClient::open(url).await;
    let params = client.connect_params_with_device_token(device_token, PAIRING_SCOPES, device);
    let id = client.request("connect", params).await;
    client.response(&id).await
}

fn assert_token_mismatch(res: &Value) {
    assert_eq!(res["ok"], false, "{res}");
    assert_eq!(res["error"]["code"], "INVALID_REQUEST");
    assert_eq!(
        res["error"]["details"]["code"], "AUTH_DEVICE_TOKEN_MISMATCH",
        "{res}"
    );
}

#[tokio::test]
async fn device_pair_list_shows_the_loopback_paired_device_without_its_token() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let device = Device::new(1);
    let (mut client, token) = connect_device(&gateway.url(), &device).await;
    let res = client.call("device.pair.list", json!({})).await;
    assert_eq!(res["ok"], true, "{res}");
    assert_eq!(res["payload"]["pending"], json!([]));
    let paired = res["payload"]["paired"].as_array().expect("paired");
    let entry = paired
        .iter()
        .find(|d| d["deviceId"] == device.id().as_str())
        .expect("the connected device is listed");
    assert!(entry["approvedAtMs"].as_u64().is_some(), "{entry}");
    assert_eq!(entry["connected"], true);
    assert_eq!(entry["roles"], json!(["operator"]));
    assert_eq!(entry["tokens"][0]["role"], "operator");
    assert!(
        !res.to_string().contains(&token),
        "token material never listed"
    );
}

#[tokio::test]
async fn rotated_device_token_connects_and_the_old_one_stops_working() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let device = Device::new(2);
    let (mut client, old_token) = connect_device(&gateway.url(), &device).await;
    // The issued token works on its own before the rotation.
    let res = connect_with_device_token(&gateway.url(), &device, &old_token).await;
    assert_eq!(res["ok"], true, "{res}");

    let res = client
        .call(
            "device.token.rotate",
            json!({"deviceId": device.id(), "role": "operator"}),
        )
        .await;
    assert_eq!(res["ok"], true, "{res}");
    let new_token = res["payload"]["token"]
        .as_str()
        .expect("own device gets the token");
    assert_ne!(new_token, old_token);

    let res = connect_with_device_token(&gateway.url(), &device, new_token).await;
    assert_eq!(res["ok"], true, "{res}");
    assert_eq!(res["payload"]["auth"]["scopes"], json!(PAIRING_SCOPES));
    assert_token_mismatch(&connect_with_device_token(&gateway.url(), &device, &old_token).await);
}

#[tokio::test]
async fn revoked_device_token_fails_with_device_token_mismatch() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let device = Device::new(3);
    let (mut client, token) = connect_device(&gateway.url(), &device).await;
    let res = connect_with_device_token(&gateway.url(), &device, &token).await;
    assert_eq!(res["ok"], true, "works before the revocation: {res}");

    let res = client
        .call(
            "device.token.revoke",
            json!({"deviceId": device.id(), "role": "operator"}),
        )
        .await;
    assert_eq!(res["ok"], true, "{res}");
    assert!(res["payload"]["revokedAtMs"].as_u64().is_some(), "{res}");
    assert_token_mismatch(&connect_with_device_token(&gateway.url(), &device, &token).await);
}

#[tokio::test]
async fn device_pair_remove_closes_that_devices_connections() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let removed = Device::new(4);
    let (mut doomed, _) = connect_device(&gateway.url(), &removed).await;
    let mut admin = admin(&gateway, 5).await;

    let res = admin
        .call("device.pair.remove", json!({"deviceId": removed.id()}))
        .await;
    assert_eq!(res["ok"], true, "{res}");
    assert_eq!(res["payload"]["deviceId"], removed.id().as_str());
    loop {
        match doomed.read().await {
            Read::Frame(_) => continue,
            Read::Closed { code, reason } => {
                assert_eq!((code, reason.as_str()), (1008, "device removed"));
                break;
            }
        }
    }
    // The remover's own connection is untouched; the device is gone.
    let list = admin.call("device.pair.list", json!({})).await;
    let paired = list["payload"]["paired"].as_array().expect("paired");
    assert!(
        paired
            .iter()
            .all(|d| d["deviceId"] != removed.id().as_str()),
        "{list}"
    );
}
