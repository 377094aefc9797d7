use super::*;

#[test]
fn notes_name_the_file_its_size_and_the_limit() {
    assert_eq!(
        too_large_note(
            MediaKind::Document,
            Some("report.pdf"),
            Some(12 * 1024 * 1024 + 300_000),
            5 * 1024 * 1024
        ),
        "<media:document> (report.pdf, 12.3 MB: over the 5.0 MB limit, not downloaded)"
    );
    assert_eq!(
        too_large_note(MediaKind::Image, None, None, 1_048),
        "<media:image> (over the 1.0 KB limit, not downloaded)"
    );
}

#[test]
fn common_formats_are_sniffed() {
    assert_eq!(sniff_mime(&[0xff, 0xd8, 0xff, 0xe0, 0]), Some("image/jpeg"));
    assert_eq!(sniff_mime(b"\x89PNG\r\n\x1a\n...."), Some("image/png"));
    assert_eq!(sniff_mime(b"OggS\0\x02"), Some("audio/ogg"));
    assert_eq!(sniff_mime(b"RIFF\0\0\0\0WEBPVP8 "), Some("image/webp"));
    assert_eq!(sniff_mime(b"%PDF-1.7"), Some("application/pdf"));
    assert_eq!(sniff_mime(b"hello"), None);
}

#[test]
fn remote_file_kind_comes_from_its_type_else_its_name() {
    let typed = RemoteFile {
        mime_type: Some("audio/ogg".into()),
        file_name: Some("x.png".into()),
        ..RemoteFile::default()
    };
    assert_eq!(typed.kind(), MediaKind::Audio);
    let named = RemoteFile {
        file_name: Some("Cat.PNG".into()),
        ..RemoteFile::default()
    };
    assert_eq!(named.kind(), MediaKind::Image);
    assert_eq!(RemoteFile::default().kind(), MediaKind::Document);
}

#[test]
fn limits_take_the_account_cap_else_the_default_else_five_mb() {
    let defaults = MediaDefaults {
        default_max_mb: Some(2.0),
        ..MediaDefaults::default()
    };
    let account = defaults.limits("discord", Some(0.5));
    assert_eq!(account.max_file_bytes, 512 * 1024);
    assert!(account.dir.ends_with("pincer-media/discord"));
    let default = defaults.limits("slack", None);
    assert_eq!(default.max_file_bytes, 2 * 1024 * 1024);
    let bare = MediaDefaults::default().limits("slack", None);
    assert_eq!(bare.max_file_bytes, 5 * 1024 * 1024);
}

#[tokio::test]
async fn directory_cap_removes_the_oldest_files_first() {
    let dir = tempfile::tempdir().expect("temp dir");
    for (name, age_secs) in [("old", 300), ("mid", 200), ("new", 100)] {
        let path = dir.path().join(name);
        std::fs::write(&path, vec![0u8; 1000]).expect("write");
        let when = std::time::SystemTime::now() - std::time::Duration::from_secs(age_secs);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .expect("open")
            .set_modified(when)
            .expect("mtime");
    }
    prepare_dir(dir.path(), 2000).await.expect("prepare");
    assert!(!dir.path().join("old").exists());
    assert!(dir.path().join("mid").exists());
    assert!(dir.path().join("new").exists());
}

fn item(path: &Path) -> MediaItem {
    MediaItem {
        path: path.to_string_lossy().into_owned(),
        mime_type: Some("image/png".into()),
        ..MediaItem::default()
    }
}

#[test]
fn removal_stays_inside_the_media_root() {
    let root = tempfile::tempdir().expect("root");
    let outside = tempfile::tempdir().expect("outside");
    let inside_file = root.path().join("discord").join("dc-1.png");
    std::fs::create_dir_all(inside_file.parent().expect("parent")).expect("dir");
    std::fs::write(&inside_file, b"x").expect("write");
    let outside_file = outside.path().join("keep.txt");
    std::fs::write(&outside_file, b"x").expect("write");
    let sneaky = root.path().join("..").join(
        outside
            .path()
            .strip_prefix(root.path().parent().expect("parent"))
            .unwrap_or(outside.path())
            .join("keep.txt"),
    );
    remove_files(
        &[item(&inside_file), item(&outside_file), item(&sneaky)],
        root.path(),
    );
    assert!(!inside_file.exists());
    assert!(outside_file.exists());
}

#[test]
fn a_gone_file_becomes_a_note_and_a_present_one_stays() {
    let dir = tempfile::tempdir().expect("dir");
    let present = dir.path().join("here.png");
    std::fs::write(&present, b"x").expect("write");
    let mut message = InboundMessage {
        body: "look".into(),
        media: vec![item(&present), item(&dir.path().join("gone.png"))],
        ..InboundMessage::default()
    };
    drop_missing(&mut message);
    assert_eq!(message.media.len(), 1);
    assert_eq!(
        message.body,
        "look\n<media:image> (the file is no longer available)"
    );
}
