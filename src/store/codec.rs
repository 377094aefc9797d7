//! Encoding of the store's keys and values.
//!
//! A stored value is one record-version byte followed by the postcard encoding of that version's shape, so a
//! type can change shape later: the decoder dispatches on the byte and upgrades older shapes. This file owns the
//! prefix, the checks on decode (unknown or newer version, malformed or trailing bytes) and the rules every key
//! obeys. It never touches LMDB and never panics on stored bytes: bad bytes become `StoreError::Corrupt`.

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::StoreError;

/// Longest key LMDB accepts with its default build (`MDB_MAXKEYSIZE`).
pub(super) const MAX_KEY_BYTES: usize = 511;

/// A value type kept in one of the store's databases.
pub(super) trait Record: Serialize + DeserializeOwned {
    /// The record version this build writes.
    const VERSION: u8;

    /// Decodes a record written with an older `version`. Types that have never changed shape know none.
    fn upgrade(version: u8, _body: &[u8]) -> Result<Self, String> {
        Err(format!("unknown record version {version}"))
    }
}

/// Encodes `record` as version byte + postcard.
pub(super) fn encode<R: Record>(
    db: &'static str,
    key: &str,
    record: &R,
) -> Result<Vec<u8>, StoreError> {
    postcard::to_extend(record, vec![R::VERSION]).map_err(|error| StoreError::Encode {
        db,
        key: key.to_string(),
        reason: error.to_string(),
    })
}

/// Decodes a stored value; the error text says what is wrong with the bytes (callers add db and key).
pub(super) fn decode<R: Record>(bytes: &[u8]) -> Result<R, String> {
    let (&version, body) = bytes
        .split_first()
        .ok_or_else(|| "empty value".to_string())?;
    if version > R::VERSION {
        return Err(format!(
            "record version {version} is newer than this pincer supports ({}); do not downgrade pincer",
            R::VERSION
        ));
    }
    if version < R::VERSION {
        return R::upgrade(version, body);
    }
    let (record, rest) = postcard::take_from_bytes::<R>(body)
        .map_err(|error| format!("malformed record: {error}"))?;
    if !rest.is_empty() {
        return Err(format!("{} trailing bytes after the record", rest.len()));
    }
    Ok(record)
}

/// Decodes a value stored under a text key, naming the database and key when the bytes are bad.
pub(super) fn decode_at<R: Record>(
    db: &'static str,
    key: &str,
    bytes: &[u8],
) -> Result<R, StoreError> {
    decode(bytes).map_err(|reason| corrupt(db, key, reason))
}

/// The error for a bad record at `key` in `db`.
pub(super) fn corrupt(db: &'static str, key: &str, reason: String) -> StoreError {
    StoreError::Corrupt {
        db,
        key: key.to_string(),
        reason,
    }
}

/// A stored key as text, for errors and listings; keys that are not UTF-8 are corrupt.
pub(super) fn key_text<'k>(db: &'static str, key: &'k [u8]) -> Result<&'k str, StoreError> {
    std::str::from_utf8(key).map_err(|_| {
        corrupt(
            db,
            &String::from_utf8_lossy(key),
            "key is not UTF-8".to_string(),
        )
    })
}

/// Checks a text key: not empty and at most `MAX_KEY_BYTES` long.
pub(super) fn check_key(db: &'static str, key: &str) -> Result<(), StoreError> {
    if key.is_empty() {
        return Err(StoreError::InvalidKey {
            db,
            reason: "key is empty".to_string(),
        });
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(StoreError::InvalidKey {
            db,
            reason: format!("key is {} bytes; the limit is {MAX_KEY_BYTES}", key.len()),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Sample {
        name: String,
        count: u64,
    }

    impl Record for Sample {
        const VERSION: u8 = 2;

        fn upgrade(version: u8, body: &[u8]) -> Result<Self, String> {
            match version {
                1 => {
                    let name: String = postcard::from_bytes(body).map_err(|e| e.to_string())?;
                    Ok(Sample { name, count: 0 })
                }
                other => Err(format!("unknown record version {other}")),
            }
        }
    }

    #[test]
    fn encoded_record_starts_with_its_version_and_round_trips() {
        let sample = Sample {
            name: "a".into(),
            count: 300,
        };
        let bytes = encode("test", "k", &sample).expect("encode");
        assert_eq!(bytes[0], 2);
        assert_eq!(decode::<Sample>(&bytes), Ok(sample));
    }

    #[test]
    fn older_record_version_is_upgraded() {
        let mut bytes = vec![1];
        bytes.extend(postcard::to_stdvec(&"old".to_string()).expect("encode"));
        assert_eq!(
            decode::<Sample>(&bytes),
            Ok(Sample {
                name: "old".into(),
                count: 0
            })
        );
    }

    #[test]
    fn newer_record_version_is_refused_with_a_reason() {
        let reason = decode::<Sample>(&[9, 1, 2]).expect_err("newer version");
        assert!(reason.contains("record version 9"), "{reason}");
    }

    #[test]
    fn malformed_empty_and_trailing_bytes_are_errors() {
        assert!(decode::<Sample>(&[]).is_err());
        // Length prefix 200 with no string bytes behind it.
        assert!(decode::<Sample>(&[2, 200, 1]).is_err());
        let mut bytes = encode(
            "test",
            "k",
            &Sample {
                name: "a".into(),
                count: 1,
            },
        )
        .expect("encode");
        bytes.push(0);
        let reason = decode::<Sample>(&bytes).expect_err("trailing byte");
        assert!(reason.contains("trailing"), "{reason}");
    }

    #[test]
    fn decode_at_names_database_and_key() {
        let error =
            decode_at::<Sample>("sessions", "agent:main:main", &[2, 200]).expect_err("corrupt");
        match error {
            StoreError::Corrupt { db, key, .. } => {
                assert_eq!(db, "sessions");
                assert_eq!(key, "agent:main:main");
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn keys_must_be_non_empty_and_short_enough() {
        assert!(check_key("sessions", "agent:main:main").is_ok());
        assert!(matches!(
            check_key("sessions", ""),
            Err(StoreError::InvalidKey { .. })
        ));
        assert!(check_key("sessions", &"k".repeat(MAX_KEY_BYTES)).is_ok());
        assert!(matches!(
            check_key("sessions", &"k".repeat(MAX_KEY_BYTES + 1)),
            Err(StoreError::InvalidKey { .. })
        ));
        assert!(key_text("sessions", &[0xff, 0xfe]).is_err());
    }
}
