//! A WhatsApp device (`pincer::channels::whatsapp`) against a socket-level
//! fake of WhatsApp's multi-device Web server (`tests/support/fake_whatsapp.rs`:
//! WebSocket, Noise XX/IK, binary stanzas; it also plays the phone that scans
//! the QR code). The device runs on pincer's own socket, its sealed LMDB store
//! and the crate's client. Proves: linking by QR code; a restart logging in
//! from the store without a QR code; a lost connection reconnected and
//! counted; a direct message decrypted and handed on, and the answer sent
//! back readable by the contact; a device removed on the phone reported logged out and not
//! reconnected, and its stored credentials refused on the next start; a
//! malformed and an oversized frame each closing one connection, the device
//! reconnecting; a flood of server stanzas all answered. Groups (the fake
//! hosts them: group info, sender keys): mentions by number and LID, replies
//! to the bot and others' mentions told apart; the answer read by every
//! member; read receipts; bad group stanzas skipped; a flood of group
//! messages held at the queue's cap. Self chat handed on, the owner's other
//! chats and the device's own echo not.

#[allow(dead_code)]
#[path = "support/fake_whatsapp.rs"]
mod fake_whatsapp;

use std::path::Path;
use std::time::Duration;

use fake_whatsapp::FakeWhatsApp;
use pincer::channels::whatsapp::transport::MAX_WS_MESSAGE_BYTES;
use pincer::channels::whatsapp::{
    InboundText, LinkState, LinkStatus, SealedBackend, SessionOptions, WhatsAppSession,
};
use pincer::store::{Store, StoreOptions};
use tokio::sync::watch;

/// The crate waits up to 10 s after each login for the phone to share its app-state keys (the fake's phone
/// does not), so a connect takes that long.
const WAIT: Duration = Duration::from_secs(45);

fn options(fake: &FakeWhatsApp, store: &Store) -> SessionOptions {
    SessionOptions {
        url: fake.url(),
        version: Some((2, 3000, 1_023_456_789)),
        http: reqwest::Client::new(),
        backend: SealedBackend::new(store.sealed("whatsapp/default").expect("sealed records")),
        inbound: None,
        media_base: None,
    }
}

fn open_store(dir: &Path) -> Store {
    Store::open(dir, StoreOptions::default()).expect("store")
}

/// Opens `dir` again once the stopped device's last tasks have let go of the previous handle.
async fn reopen_store(dir: &Path) -> Store {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match Store::open(dir, StoreOptions::default()) {
            Ok(store) => return store,
            Err(e) if tokio::time::Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("the stopped device still holds the store: {e}"),
        }
    }
}

async fn wait_for(
    status: &mut watch::Receiver<LinkStatus>,
    what: &str,
    pred: impl Fn(&LinkStatus) -> bool,
) -> LinkStatus {
    let result = tokio::time::timeout(WAIT, status.wait_for(|s| pred(s)))
        .await
        .map(|r| r.map(|s| s.clone()));
    match result {
        Ok(Ok(s)) => s,
        _ => panic!(
            "timed out waiting for {what}; status: {:?}",
            *status.borrow()
        ),
    }
}

/// Starts a device on `store`, links it by scanning its QR code, and waits until it is connected.
async fn linked_session(fake: &FakeWhatsApp, store: &Store) -> WhatsAppSession {
    let session = WhatsAppSession::start(options(fake, store))
        .await
        .expect("start");
    let mut status = session.watch();
    let waiting = wait_for(&mut status, "a QR code", |s| {
        s.state == LinkState::WaitingForScan
    })
    .await;
    let qr = waiting.qr.expect("the status carries the QR payload");
    assert_eq!(
        qr.split(',').count(),
        5,
        "ref,noise,identity,adv,client type: {qr}"
    );
    assert!(
        waiting
            .qr_ttl_secs
            .is_some_and(|ttl| (50..=60).contains(&ttl)),
        "the first code lasts (up to) 60 s: {:?}",
        waiting.qr_ttl_secs
    );
    fake.scan_qr(&qr).await.expect("scan");
    let connected = wait_for(&mut status, "connected", |s| {
        s.state == LinkState::Connected
    })
    .await;
    assert_eq!(
        connected.linked_jid.as_deref(),
        Some(format!("{}:1@s.whatsapp.net", fake.phone).as_str())
    );
    assert_eq!(connected.qr, None, "no QR once linked");
    session
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_links_by_qr_code_and_a_restart_logs_in_from_the_store() {
    let fake = FakeWhatsApp::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    {
        let store = open_store(dir.path());
        let session = linked_session(&fake, &store).await;
        session.stop().await;
    }
    let before = fake.log();
    assert_eq!(before.registrations, 1, "{before:?}");
    assert_eq!(
        before.paired.len(),
        1,
        "the device signed its identity: {before:?}"
    );

    // As a new process: the data directory reopened, no QR code.
    let store = reopen_store(dir.path()).await;
    let session = WhatsAppSession::start(options(&fake, &store))
        .await
        .expect("restart");
    let mut status = session.watch();
    let connected = wait_for(&mut status, "connected again", |s| {
        s.state == LinkState::Connected
    })
    .await;
    assert!(connected.linked);
    assert_eq!(
        connected.linked_jid.as_deref(),
        Some(format!("{}:1@s.whatsapp.net", fake.phone).as_str()),
        "the linked account is read from the store"
    );
    let log = fake.log();
    assert_eq!(log.registrations, 1, "not registered again: {log:?}");
    assert!(
        log.logins > before.logins,
        "logged in with the stored device: {log:?}"
    );
    session.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_connection_is_reconnected_and_counted() {
    let fake = FakeWhatsApp::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open_store(dir.path());
    let session = linked_session(&fake, &store).await;
    let mut status = session.watch();
    let logins = fake.log().logins;
    fake.drop_connection().await;
    let lost = wait_for(&mut status, "the loss", |s| s.disconnects == 1).await;
    assert!(lost.last_disconnect.is_some(), "{lost:?}");
    wait_for(&mut status, "connected again", |s| {
        s.state == LinkState::Connected && s.disconnects == 1
    })
    .await;
    assert_eq!(
        fake.log().logins,
        logins + 1,
        "logged in again after backoff"
    );
    session.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_removed_on_the_phone_is_reported_logged_out() {
    let fake = FakeWhatsApp::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    {
        let store = open_store(dir.path());
        let session = linked_session(&fake, &store).await;
        let mut status = session.watch();
        let connections = fake.log().connections;
        fake.log_out().await;
        let out = wait_for(&mut status, "logged out", |s| {
            s.state == LinkState::LoggedOut
        })
        .await;
        assert!(
            out.last_error.as_deref().unwrap_or("").contains("removed"),
            "{out:?}"
        );
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(
            fake.log().connections,
            connections,
            "a logged-out device does not reconnect"
        );
        assert_eq!(session.status().state, LinkState::LoggedOut);
        session.stop().await;
    }
    // The next start presents the stored credentials; the server refuses them.
    let store = reopen_store(dir.path()).await;
    let session = WhatsAppSession::start(options(&fake, &store))
        .await
        .expect("restart");
    let mut status = session.watch();
    let out = wait_for(&mut status, "refused", |s| s.state == LinkState::LoggedOut).await;
    assert!(
        out.last_error.as_deref().unwrap_or("").contains("refused"),
        "{out:?}"
    );
    session.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_stanzas_are_skipped_and_the_connection_keeps_working() {
    let fake = FakeWhatsApp::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open_store(dir.path());
    let session = linked_session(&fake, &store).await;
    // Encrypted frames whose content is not a stanza: not binary XML, a bad compression flag, empty.
    fake.send_sealed(vec![0, 0xff, 0xfe, 0x01, 0x99])
        .await
        .expect("garbage");
    fake.send_sealed(vec![2, 1, 2, 3]).await.expect("bad zlib");
    fake.send_sealed(Vec::new()).await.expect("empty");
    fake.send_stanza(FakeWhatsApp::ping("after-garbage"))
        .await
        .expect("ping");
    let deadline = tokio::time::Instant::now() + WAIT;
    while !fake.log().results.iter().any(|id| id == "after-garbage") {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the ping after the garbage was not answered: {:?}",
            session.status()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let status = session.status();
    assert_eq!(
        (status.state, status.disconnects),
        (LinkState::Connected, 0)
    );
    session.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_message_ends_that_connection_and_the_device_reconnects() {
    let fake = FakeWhatsApp::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open_store(dir.path());
    let session = linked_session(&fake, &store).await;
    let mut status = session.watch();
    fake.send_raw(vec![0; MAX_WS_MESSAGE_BYTES + 1])
        .await
        .expect("oversized");
    let lost = wait_for(&mut status, "the oversized message's disconnect", |s| {
        s.disconnects == 1
    })
    .await;
    let reason = lost.last_disconnect.unwrap_or_default();
    assert!(
        reason.to_lowercase().contains("too long") || reason.contains("size"),
        "the reason names the size: {reason}"
    );
    wait_for(&mut status, "connected after it", |s| {
        s.state == LinkState::Connected && s.disconnects == 1
    })
    .await;
    session.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_message_is_decrypted_and_handed_on() {
    let fake = FakeWhatsApp::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open_store(dir.path());
    let (inbound, mut received) = tokio::sync::mpsc::channel(8);
    let session = WhatsAppSession::start(SessionOptions {
        inbound: Some(inbound),
        media_base: None,
        ..options(&fake, &store)
    })
    .await
    .expect("start");
    let mut status = session.watch();
    let qr = wait_for(&mut status, "a QR code", |s| s.qr.is_some())
        .await
        .qr
        .expect("qr");
    fake.scan_qr(&qr).await.expect("scan");
    wait_for(&mut status, "connected", |s| {
        s.state == LinkState::Connected
    })
    .await;
    let deadline = tokio::time::Instant::now() + WAIT;
    while fake.bundle().is_none() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no pre-keys uploaded"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    fake.send_dm("15557654321", "3EB0DM0001", "hello pincer")
        .await
        .expect("dm");
    let text = tokio::time::timeout(WAIT, received.recv())
        .await
        .expect("a message within the wait")
        .expect("the queue is open");
    assert_eq!(text.text, "hello pincer");
    assert_eq!(text.chat, "15557654321@s.whatsapp.net");
    assert_eq!(text.id, "3EB0DM0001");
    assert_eq!(text.push_name, "Alice");
    assert!(!text.is_group);

    // The answer goes back in the same session, readable by the contact.
    let id = session
        .send_text(&text.chat, "hello Alice")
        .await
        .expect("send");
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let sent = fake.sent_texts();
        if let Some(found) = sent.iter().find(|(_, sent_id, _)| *sent_id == id) {
            assert_eq!(found.0, "15557654321@s.whatsapp.net");
            assert_eq!(found.2, "hello Alice");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the answer did not reach the contact; unreadable: {:?}; sent: {sent:?}; stanzas: {:?}",
            fake.unreadable(),
            fake.log()
                .stanzas_in
                .iter()
                .rev()
                .take(12)
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    session.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_direct_messages_waits_for_room_in_the_bounded_queue_and_none_is_lost() {
    let fake = FakeWhatsApp::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open_store(dir.path());
    const QUEUE: usize = 4;
    const FLOOD: usize = 40;
    let (inbound, mut received) = tokio::sync::mpsc::channel(QUEUE);
    let session = WhatsAppSession::start(SessionOptions {
        inbound: Some(inbound.clone()),
        media_base: None,
        ..options(&fake, &store)
    })
    .await
    .expect("start");
    let mut status = session.watch();
    let qr = wait_for(&mut status, "a QR code", |s| s.qr.is_some())
        .await
        .qr
        .expect("qr");
    fake.scan_qr(&qr).await.expect("scan");
    wait_for(&mut status, "connected", |s| {
        s.state == LinkState::Connected
    })
    .await;
    let deadline = tokio::time::Instant::now() + WAIT;
    while fake.bundle().is_none() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no pre-keys uploaded"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for i in 0..FLOOD {
        fake.send_dm(
            "15557654321",
            &format!("3EB0FLOOD{i:04}"),
            &format!("message {i}"),
        )
        .await
        .expect("dm");
    }
    // Nobody reads yet: the queue fills to its cap and the device waits.
    let deadline = tokio::time::Instant::now() + WAIT;
    while inbound.capacity() > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the queue never filled"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(inbound.capacity(), 0, "held at its cap of {QUEUE}");
    let mut texts = Vec::new();
    while texts.len() < FLOOD {
        let text = tokio::time::timeout(WAIT, received.recv())
            .await
            .unwrap_or_else(|_| panic!("only {} of {FLOOD} arrived", texts.len()))
            .expect("open");
        texts.push(text.text);
    }
    let mut expected: Vec<String> = (0..FLOOD).map(|i| format!("message {i}")).collect();
    let mut sorted = texts.clone();
    sorted.sort();
    expected.sort();
    assert_eq!(sorted, expected, "every message arrived once");
    session.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_server_stanzas_is_all_answered() {
    let fake = FakeWhatsApp::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open_store(dir.path());
    let session = linked_session(&fake, &store).await;
    const FLOOD: usize = 1_000;
    for i in 0..FLOOD {
        fake.send_stanza(FakeWhatsApp::ping(&format!("flood-{i}")))
            .await
            .expect("ping");
    }
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let answered = fake
            .log()
            .results
            .iter()
            .filter(|id| id.starts_with("flood-"))
            .count();
        if answered == FLOOD {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{answered} of {FLOOD} pings answered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(session.status().state, LinkState::Connected);
    assert_eq!(session.status().disconnects, 0);
    session.stop().await;
}

const ALICE: &str = "15557654321";
const BOB: &str = "15553334444";
const GROUP: &str = "120363000000000001@g.us";

/// A linked device whose received texts go to a queue of `queue`, with its pre-keys uploaded.
async fn linked_with_inbound(
    fake: &FakeWhatsApp,
    store: &Store,
    queue: usize,
) -> (
    WhatsAppSession,
    tokio::sync::mpsc::Sender<InboundText>,
    tokio::sync::mpsc::Receiver<InboundText>,
) {
    let (inbound, received) = tokio::sync::mpsc::channel(queue);
    let session = WhatsAppSession::start(SessionOptions {
        inbound: Some(inbound.clone()),
        ..options(fake, store)
    })
    .await
    .expect("start");
    let mut status = session.watch();
    let qr = wait_for(&mut status, "a QR code", |s| s.qr.is_some())
        .await
        .qr
        .expect("qr");
    fake.scan_qr(&qr).await.expect("scan");
    wait_for(&mut status, "connected", |s| {
        s.state == LinkState::Connected
    })
    .await;
    let deadline = tokio::time::Instant::now() + WAIT;
    while fake.bundle().is_none() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no pre-keys uploaded"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (session, inbound, received)
}

async fn next_text(
    received: &mut tokio::sync::mpsc::Receiver<InboundText>,
    what: &str,
) -> InboundText {
    tokio::time::timeout(WAIT, received.recv())
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
        .expect("queue open")
}

async fn eventually(what: &str, condition: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !condition() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never happened: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_messages_carry_mentions_and_replies_and_the_answer_reaches_every_member() {
    let fake = FakeWhatsApp::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open_store(dir.path());
    let (session, _inbound, mut received) = linked_with_inbound(&fake, &store, 8).await;
    fake.add_group(GROUP, &[ALICE, BOB]);
    let own = fake.own_jid();

    fake.send_group_text(GROUP, ALICE, "3EB0G0001", "morning all", &[], None)
        .await
        .expect("group text");
    let plain = next_text(&mut received, "a plain group text").await;
    assert!(plain.is_group, "{plain:?}");
    assert_eq!(plain.chat, GROUP);
    assert!(plain.sender.starts_with(ALICE), "{plain:?}");
    assert_eq!(plain.text, "morning all");
    assert!(!plain.mentions_me && !plain.replies_to_me && !plain.from_me);
    assert_eq!(
        plain.own_number.as_deref(),
        Some(fake.phone.to_string().as_str())
    );

    // Bob @-mentions the linked number; Alice its LID; Alice someone else; Bob quotes the bot.
    fake.send_group_text(
        GROUP,
        BOB,
        "3EB0G0002",
        "@15550001111 help",
        std::slice::from_ref(&own),
        None,
    )
    .await
    .expect("mention");
    let mention = next_text(&mut received, "a mention").await;
    assert!(
        mention.mentions_me && !mention.mentions_others,
        "{mention:?}"
    );
    assert!(mention.sender.starts_with(BOB));
    fake.send_group_text(
        GROUP,
        ALICE,
        "3EB0G0003",
        "@bot",
        &["99887766@lid".into()],
        None,
    )
    .await
    .expect("lid mention");
    assert!(next_text(&mut received, "a LID mention").await.mentions_me);
    fake.send_group_text(
        GROUP,
        ALICE,
        "3EB0G0004",
        "@carol",
        &["15559990000@s.whatsapp.net".into()],
        None,
    )
    .await
    .expect("other mention");
    let other = next_text(&mut received, "someone else mentioned").await;
    assert!(!other.mentions_me && other.mentions_others, "{other:?}");
    fake.send_group_text(GROUP, BOB, "3EB0G0005", "thanks!", &[], Some(&own))
        .await
        .expect("reply");
    let reply = next_text(&mut received, "a reply to the bot").await;
    assert!(reply.replies_to_me && !reply.mentions_me, "{reply:?}");

    // The answer goes to the group: every member decrypts it with the device's sender key.
    let id = session
        .send_text(GROUP, "hello group")
        .await
        .expect("group send");
    eventually("both members read the answer", || {
        let read = fake.group_texts();
        [ALICE, BOB].iter().all(|m| {
            read.iter().any(|(g, who, sent, text)| {
                g == GROUP && who == m && *sent == id && text == "hello group"
            })
        })
    })
    .await;
    assert!(fake.unreadable().is_empty(), "{:?}", fake.unreadable());
    // A second answer reuses the distributed sender key (no new distribution needed to read it).
    let id2 = session
        .send_text(GROUP, "and again")
        .await
        .expect("group send");
    eventually("the second answer", || {
        fake.group_texts()
            .iter()
            .any(|(_, who, sent, text)| who == ALICE && *sent == id2 && text == "and again")
    })
    .await;

    // Read receipts: in a group naming the member, in a DM without.
    session
        .mark_read(GROUP, Some(&format!("{ALICE}@s.whatsapp.net")), "3EB0G0001")
        .await
        .expect("group receipt");
    session
        .mark_read(&format!("{BOB}@s.whatsapp.net"), None, "3EB0DM9")
        .await
        .expect("dm receipt");
    eventually("both read receipts", || {
        let receipts = fake.receipts();
        receipts.iter().any(|r| {
            r.kind == "read"
                && r.to == GROUP
                && r.id == "3EB0G0001"
                && r.participant.as_deref() == Some(&format!("{ALICE}@s.whatsapp.net"))
        }) && receipts
            .iter()
            .any(|r| r.kind == "read" && r.id == "3EB0DM9" && r.participant.is_none())
    })
    .await;
    session.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_group_stanzas_are_skipped_and_the_next_group_message_still_arrives() {
    use whatsapp_rust::wacore_binary::builder::NodeBuilder;
    let fake = FakeWhatsApp::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open_store(dir.path());
    let (session, _inbound, mut received) = linked_with_inbound(&fake, &store, 8).await;
    fake.add_group(GROUP, &[ALICE]);
    fake.send_group_text(GROUP, ALICE, "3EB0B0001", "first", &[], None)
        .await
        .expect("group text");
    assert_eq!(next_text(&mut received, "the first").await.text, "first");
    let connections = fake.log().connections;
    // A sender-key message that is not one, and a group message without its participant.
    let garbage = NodeBuilder::new("message")
        .attrs([
            ("from", GROUP.to_string()),
            ("participant", format!("{ALICE}@s.whatsapp.net")),
            ("type", "text".to_string()),
            ("id", "3EB0B0002".to_string()),
            ("t", "1750000100".to_string()),
        ])
        .children([NodeBuilder::new("enc")
            .attrs([("v", "2".to_string()), ("type", "skmsg".to_string())])
            .bytes(vec![0x33, 1, 2, 3, 4, 5])
            .build()])
        .build();
    fake.send_stanza(garbage).await.expect("garbage");
    let orphan = NodeBuilder::new("message")
        .attrs([
            ("from", GROUP.to_string()),
            ("type", "text".to_string()),
            ("id", "3EB0B0003".to_string()),
            ("t", "1750000100".to_string()),
        ])
        .children([NodeBuilder::new("enc")
            .attrs([("v", "2".to_string()), ("type", "skmsg".to_string())])
            .bytes(vec![0x33, 9, 9])
            .build()])
        .build();
    fake.send_stanza(orphan).await.expect("orphan");
    fake.send_group_text(GROUP, ALICE, "3EB0B0004", "still there?", &[], None)
        .await
        .expect("group text");
    let next = next_text(&mut received, "the message after the bad ones").await;
    assert_eq!(
        next.text, "still there?",
        "nothing from the bad stanzas: {next:?}"
    );
    assert_eq!(
        fake.log().connections,
        connections,
        "the connection stayed up"
    );
    assert_eq!(session.status().state, LinkState::Connected);
    session.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_group_messages_waits_for_room_in_the_bounded_queue_and_none_is_lost() {
    let fake = FakeWhatsApp::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open_store(dir.path());
    const QUEUE: usize = 4;
    const FLOOD: usize = 40;
    let (session, inbound, mut received) = linked_with_inbound(&fake, &store, QUEUE).await;
    fake.add_group(GROUP, &[ALICE, BOB]);
    for i in 0..FLOOD {
        let from = if i % 2 == 0 { ALICE } else { BOB };
        fake.send_group_text(
            GROUP,
            from,
            &format!("3EB0GF{i:04}"),
            &format!("group {i}"),
            &[],
            None,
        )
        .await
        .expect("group text");
    }
    eventually("the queue filled", || inbound.capacity() == 0).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(inbound.capacity(), 0, "held at its cap of {QUEUE}");
    let mut texts = Vec::new();
    while texts.len() < FLOOD {
        let text = next_text(&mut received, "the flood").await;
        assert!(text.is_group && text.chat == GROUP, "{text:?}");
        texts.push(text.text);
    }
    let mut expected: Vec<String> = (0..FLOOD).map(|i| format!("group {i}")).collect();
    texts.sort();
    expected.sort();
    assert_eq!(texts, expected, "every group message arrived once");
    session.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_chat_is_handed_on_but_not_the_owners_other_chats_nor_the_devices_own_echo() {
    let fake = FakeWhatsApp::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open_store(dir.path());
    let (session, _inbound, mut received) = linked_with_inbound(&fake, &store, 8).await;
    let own = fake.own_jid();

    // The owner writes to Alice from the phone: not for the bot.
    fake.send_from_phone(&format!("{ALICE}@s.whatsapp.net"), "3EB0S0001", "hi Alice")
        .await
        .expect("owner to alice");
    fake.send_self_chat("3EB0S0002", "note to self")
        .await
        .expect("self chat");
    let note = next_text(&mut received, "the self-chat message").await;
    assert_eq!(
        note.text, "note to self",
        "the owner's other chat was not handed on"
    );
    assert!(note.from_me && !note.is_group, "{note:?}");
    assert_eq!(note.chat, own);

    // The device answers in the self chat; its own message coming back is not a new message.
    let id = session.send_text(&own, "noted").await.expect("send");
    eventually("the answer on the phone", || {
        fake.sent_texts()
            .iter()
            .any(|(to, sent, text)| *to == own && *sent == id && text == "noted")
    })
    .await;
    fake.send_self_chat(&id, "noted").await.expect("echo");
    fake.send_self_chat("3EB0S0003", "second note")
        .await
        .expect("self chat");
    let next = next_text(&mut received, "the next self-chat message").await;
    assert_eq!(next.text, "second note", "the echo was not handed on");
    session.stop().await;
}
