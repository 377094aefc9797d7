//! WhatsApp media on a device (`pincer::channels::whatsapp`) against the
//! socket-level fake server and its media CDN (`tests/support/fake_whatsapp.rs`,
//! `tests/support/fake_whatsapp_media.rs`: the `media_conn` IQ, uploads and
//! downloads, WhatsApp's media encryption written independently of the crate).
//! Proves: a contact's photo is downloaded, decrypted and equal to what was
//! sent, its caption as the text; a file declared over the cap is refused
//! before any download; one that lies about its size stops at the cap; a
//! corrupt MAC, a wrong media key, a missing blob and a file whose hash is
//! not the message's are refused with a clear reason and leave no file behind, and the next text still arrives; a photo,
//! a voice note (`ptt`, Ogg/Opus) and a document pincer sends are uploaded
//! encrypted (exact `Content-Length`, the blob's hash as token) and the
//! contact decrypts each to the bytes sent.

#[allow(dead_code)]
#[path = "support/fake_whatsapp.rs"]
mod fake_whatsapp;
#[allow(dead_code)]
#[path = "support/media_files.rs"]
mod media_files;

use std::path::Path;
use std::time::Duration;

use fake_whatsapp::media::{self as cdn, FakeMediaCdn};
use fake_whatsapp::FakeWhatsApp;
use pincer::channels::media::{MediaKind, MediaLimits, MediaOutcome};
use pincer::channels::whatsapp::{
    InboundText, LinkState, OutboundMedia, SealedBackend, SessionOptions, WhatsAppSession,
};
use pincer::channels::UploadKind;
use pincer::store::{Store, StoreOptions};
use tokio::sync::mpsc;
use whatsapp_rust::buffa::MessageField;
use whatsapp_rust::waproto::whatsapp as wa;

/// Hang guard (the crate waits up to 10 s after login for app-state keys the fake's phone never shares).
const WAIT: Duration = Duration::from_secs(45);
const ALICE: &str = "15557654321";

struct Rig {
    fake: FakeWhatsApp,
    cdn: FakeMediaCdn,
    session: WhatsAppSession,
    received: mpsc::Receiver<InboundText>,
    _store: Store,
    _dir: tempfile::TempDir,
}

/// A linked, connected device whose media goes to the fake CDN, with pre-keys uploaded.
async fn rig() -> Rig {
    let fake = FakeWhatsApp::start().await;
    let cdn = FakeMediaCdn::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open(dir.path(), StoreOptions::default()).expect("store");
    let (inbound, received) = mpsc::channel(8);
    let session = WhatsAppSession::start(SessionOptions {
        url: fake.url(),
        version: Some((2, 3000, 1_023_456_789)),
        http: reqwest::Client::new(),
        backend: SealedBackend::new(store.sealed("whatsapp/default").expect("sealed")),
        inbound: Some(inbound),
        media_base: Some(cdn.base_url()),
    })
    .await
    .expect("start");
    let mut status = session.watch();
    let qr = tokio::time::timeout(WAIT, status.wait_for(|s| s.qr.is_some()))
        .await
        .expect("a QR code")
        .expect("status")
        .qr
        .clone()
        .expect("qr");
    fake.scan_qr(&qr).await.expect("scan");
    tokio::time::timeout(WAIT, status.wait_for(|s| s.state == LinkState::Connected))
        .await
        .expect("connected")
        .expect("status");
    let deadline = tokio::time::Instant::now() + WAIT;
    while fake.bundle().is_none() {
        assert!(tokio::time::Instant::now() < deadline, "no pre-keys");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Rig {
        fake,
        cdn,
        session,
        received,
        _store: store,
        _dir: dir,
    }
}

async fn next(received: &mut mpsc::Receiver<InboundText>) -> InboundText {
    tokio::time::timeout(WAIT, received.recv())
        .await
        .expect("a message within the wait")
        .expect("the queue is open")
}

/// An image message for `enc` stored at `direct_path`.
fn image_message(enc: &cdn::EncryptedMedia, direct_path: &str, caption: &str) -> wa::Message {
    wa::Message {
        image_message: MessageField::some(wa::message::ImageMessage {
            url: Some(format!("https://{}{direct_path}", cdn::MEDIA_HOST)),
            direct_path: Some(direct_path.to_string()),
            mimetype: Some("image/jpeg".into()),
            caption: Some(caption.to_string()),
            media_key: Some(enc.media_key.to_vec()),
            file_sha256: Some(enc.file_sha256.to_vec()),
            file_enc_sha256: Some(enc.file_enc_sha256.to_vec()),
            file_length: Some(enc.file_length),
            media_key_timestamp: Some(1_750_000_000),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn limits(dir: &Path, cap: u64) -> MediaLimits {
    MediaLimits {
        dir: dir.to_path_buf(),
        max_file_bytes: cap,
        max_dir_bytes: 64 * 1024 * 1024,
    }
}

fn files_in(dir: &Path) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

fn skipped(outcome: MediaOutcome) -> String {
    match outcome {
        MediaOutcome::Skipped(note) => note,
        MediaOutcome::Saved(item) => panic!("expected a refusal, got {item:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn received_media_is_downloaded_decrypted_and_checked_within_the_cap() {
    let mut rig = rig().await;
    let media_dir = tempfile::tempdir().expect("media dir");

    // A photo with a caption: handed on with its caption as the text, then downloaded and decrypted.
    let photo = media_files::jpeg(64, 48);
    let enc = cdn::encrypt(&photo, cdn::IMAGE_KEYS);
    rig.cdn.put("/v/t62.7118-24/photo.enc", enc.blob.clone());
    rig.fake
        .send_dm_message(
            ALICE,
            "3EB0PHOTO1",
            image_message(&enc, "/v/t62.7118-24/photo.enc", "what is this?"),
        )
        .await
        .expect("photo");
    let message = next(&mut rig.received).await;
    assert_eq!(message.text, "what is this?");
    assert_eq!(message.id, "3EB0PHOTO1");
    let media = message.media.clone().expect("the photo");
    assert_eq!(media.kind, MediaKind::Image);
    assert_eq!(media.file_length, Some(photo.len() as u64));
    let saved = match rig
        .session
        .download_media(&media, &limits(media_dir.path(), 1024 * 1024))
        .await
    {
        MediaOutcome::Saved(item) => item,
        MediaOutcome::Skipped(note) => {
            panic!(
                "not downloaded: {note}; CDN refused {:?}",
                rig.cdn.refused()
            )
        }
    };
    assert_eq!(std::fs::read(&saved.path).expect("file"), photo);
    assert_eq!(saved.mime_type.as_deref(), Some("image/jpeg"));
    assert!(saved
        .path
        .starts_with(media_dir.path().to_str().expect("utf-8")));
    assert_eq!(
        rig.cdn.downloads(),
        vec!["/v/t62.7118-24/photo.enc".to_string()]
    );
    std::fs::remove_file(&saved.path).expect("clean");

    // Declared over the cap: refused without asking the CDN.
    let note = skipped(
        rig.session
            .download_media(&media, &limits(media_dir.path(), 100))
            .await,
    );
    assert!(note.contains("over the 100 B limit"), "{note}");
    assert_eq!(rig.cdn.downloads().len(), 1, "nothing fetched for it");

    // A message that understates its size: the file stops at the cap while decrypting.
    let mut understated = enc.clone();
    understated.file_length = 10;
    rig.fake
        .send_dm_message(
            ALICE,
            "3EB0PHOTO2",
            image_message(&understated, "/v/t62.7118-24/photo.enc", ""),
        )
        .await
        .expect("lying photo");
    let lying = next(&mut rig.received).await.media.expect("media");
    let note = skipped(
        rig.session
            .download_media(&lying, &limits(media_dir.path(), photo.len() as u64 / 2))
            .await,
    );
    assert!(note.contains("over the"), "{note}");
    assert_eq!(files_in(media_dir.path()), 0, "no partial file kept");

    // A corrupt MAC: refused as failing its integrity check, no file kept.
    let mut corrupt = enc.blob.clone();
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0xFF;
    rig.cdn.put("/v/t62.7118-24/corrupt.enc", corrupt);
    rig.fake
        .send_dm_message(
            ALICE,
            "3EB0PHOTO3",
            image_message(&enc, "/v/t62.7118-24/corrupt.enc", ""),
        )
        .await
        .expect("corrupt photo");
    let corrupt = next(&mut rig.received).await.media.expect("media");
    let note = skipped(
        rig.session
            .download_media(&corrupt, &limits(media_dir.path(), 1024 * 1024))
            .await,
    );
    assert!(note.contains("integrity check (MAC mismatch)"), "{note}");
    assert_eq!(files_in(media_dir.path()), 0);

    // A wrong media key reads as the same failed check; a path the CDN does not have as its answer.
    let mut wrong_key = enc.clone();
    wrong_key.media_key = [7u8; 32];
    rig.fake
        .send_dm_message(
            ALICE,
            "3EB0PHOTO4",
            image_message(&wrong_key, "/v/t62.7118-24/photo.enc", ""),
        )
        .await
        .expect("wrong key");
    rig.fake
        .send_dm_message(
            ALICE,
            "3EB0PHOTO5",
            image_message(&enc, "/v/t62.7118-24/gone.enc", ""),
        )
        .await
        .expect("bad path");
    let wrong_key = next(&mut rig.received).await.media.expect("media");
    let gone = next(&mut rig.received).await.media.expect("media");
    let note = skipped(
        rig.session
            .download_media(&wrong_key, &limits(media_dir.path(), 1024 * 1024))
            .await,
    );
    assert!(note.contains("MAC mismatch"), "{note}");
    let note = skipped(
        rig.session
            .download_media(&gone, &limits(media_dir.path(), 1024 * 1024))
            .await,
    );
    assert!(note.contains("HTTP 404"), "{note}");
    assert_eq!(files_in(media_dir.path()), 0);

    // A sound MAC over a file that is not the one the message names (its fileSha256): refused.
    let mut wrong_hash = enc.clone();
    wrong_hash.file_sha256 = [0u8; 32];
    rig.fake
        .send_dm_message(
            ALICE,
            "3EB0PHOTO6",
            image_message(&wrong_hash, "/v/t62.7118-24/photo.enc", ""),
        )
        .await
        .expect("wrong hash");
    let wrong_hash = next(&mut rig.received).await.media.expect("media");
    let note = skipped(
        rig.session
            .download_media(&wrong_hash, &limits(media_dir.path(), 1024 * 1024))
            .await,
    );
    assert!(note.contains("SHA-256 differs"), "{note}");
    assert_eq!(files_in(media_dir.path()), 0);

    // The device goes on: the next text arrives.
    rig.fake
        .send_dm(ALICE, "3EB0TEXT1", "still there?")
        .await
        .expect("text");
    let text = next(&mut rig.received).await;
    assert_eq!(text.text, "still there?");
    assert!(text.media.is_none());
    rig.session.stop().await;
}

/// Waits for a message the device sent to Alice that `pick` accepts.
async fn sent_to_alice<T>(fake: &FakeWhatsApp, pick: impl Fn(&wa::Message) -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let sent = fake.sent_messages();
        if let Some(found) = sent
            .iter()
            .filter(|(to, _, _)| to.starts_with(ALICE))
            .find_map(|(_, _, m)| pick(m))
        {
            return found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not sent; unreadable: {:?}",
            fake.unreadable()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sent_media_is_uploaded_encrypted_and_the_contact_decrypts_it() {
    let mut rig = rig().await;
    // Alice writes first, so the device has her session.
    rig.fake
        .send_dm(ALICE, "3EB0HELLO", "send me things")
        .await
        .expect("dm");
    let chat = next(&mut rig.received).await.chat;
    let files = tempfile::tempdir().expect("files");

    // A photo with a caption.
    let photo = media_files::jpeg(40, 30);
    let photo_path = files.path().join("chart.jpg");
    std::fs::write(&photo_path, &photo).expect("photo");
    rig.session
        .send_media(
            &chat,
            &OutboundMedia {
                path: &photo_path,
                file_name: "chart.jpg",
                mime: "image/jpeg",
                kind: UploadKind::Photo,
                caption: Some("Here is the chart."),
            },
        )
        .await
        .unwrap_or_else(|e| panic!("send: {e}; CDN refused {:?}", rig.cdn.refused()));
    let image = sent_to_alice(&rig.fake, |m| m.image_message.as_option().cloned()).await;
    assert_eq!(image.caption.as_deref(), Some("Here is the chart."));
    assert_eq!(image.mimetype.as_deref(), Some("image/jpeg"));
    assert_eq!(image.file_length, Some(photo.len() as u64));
    let opened = rig
        .cdn
        .open(
            image.direct_path.as_deref().expect("direct path"),
            image.media_key.as_deref().expect("key"),
            image.file_enc_sha256.as_deref().expect("enc hash"),
            image.file_sha256.as_deref().expect("hash"),
            cdn::IMAGE_KEYS,
        )
        .expect("Alice decrypts the photo");
    assert_eq!(opened, photo);
    assert_eq!(rig.cdn.uploads()[0].kind, "image");

    // A voice note: push-to-talk, Ogg/Opus, and the caption as its own text.
    let voice = media_files::voice_note(2);
    let voice_path = files.path().join("note.ogg");
    std::fs::write(&voice_path, &voice).expect("voice");
    rig.session
        .send_media(
            &chat,
            &OutboundMedia {
                path: &voice_path,
                file_name: "note.ogg",
                mime: "audio/ogg",
                kind: UploadKind::Voice,
                caption: Some("Listen."),
            },
        )
        .await
        .expect("send voice");
    let audio = sent_to_alice(&rig.fake, |m| m.audio_message.as_option().cloned()).await;
    assert_eq!(audio.ptt, Some(true), "a voice note is push-to-talk");
    assert_eq!(audio.mimetype.as_deref(), Some("audio/ogg; codecs=opus"));
    assert_eq!(audio.seconds, Some(2), "its length from the Ogg pages");
    let opened = rig
        .cdn
        .open(
            audio.direct_path.as_deref().expect("direct path"),
            audio.media_key.as_deref().expect("key"),
            audio.file_enc_sha256.as_deref().expect("enc hash"),
            audio.file_sha256.as_deref().expect("hash"),
            cdn::AUDIO_KEYS,
        )
        .expect("Alice decrypts the voice note");
    assert_eq!(opened, voice);
    let caption = sent_to_alice(&rig.fake, |m| {
        m.conversation.clone().filter(|t| t == "Listen.")
    })
    .await;
    assert_eq!(caption, "Listen.");

    // A document keeps its name and caption.
    let pdf = media_files::pdf(&["quarterly report"]);
    let pdf_path = files.path().join("report.pdf");
    std::fs::write(&pdf_path, &pdf).expect("pdf");
    rig.session
        .send_media(
            &chat,
            &OutboundMedia {
                path: &pdf_path,
                file_name: "report.pdf",
                mime: "application/pdf",
                kind: UploadKind::Document,
                caption: Some("The report."),
            },
        )
        .await
        .expect("send document");
    let document = sent_to_alice(&rig.fake, |m| m.document_message.as_option().cloned()).await;
    assert_eq!(document.file_name.as_deref(), Some("report.pdf"));
    assert_eq!(document.caption.as_deref(), Some("The report."));
    let opened = rig
        .cdn
        .open(
            document.direct_path.as_deref().expect("direct path"),
            document.media_key.as_deref().expect("key"),
            document.file_enc_sha256.as_deref().expect("enc hash"),
            document.file_sha256.as_deref().expect("hash"),
            cdn::DOCUMENT_KEYS,
        )
        .expect("Alice decrypts the document");
    assert_eq!(opened, pdf);
    let kinds: Vec<String> = rig.cdn.uploads().into_iter().map(|u| u.kind).collect();
    assert_eq!(kinds, vec!["image", "audio", "document"]);
    assert!(rig.cdn.refused().is_empty(), "{:?}", rig.cdn.refused());
    rig.session.stop().await;
}
