//! Device identity proof: Ed25519 signatures over the connect challenge.
//!
//! A device id is the lowercase hex SHA-256 of the raw 32-byte public key; the
//! key travels as base64url (PEM is accepted too). The signed payload is
//! upstream's `v3|…` string, with the older `v2|…` form still accepted.
//! This file checks proofs and mints device tokens; who is paired lives in
//! `pairing.rs`.

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use ed25519_dalek::{Signature, Verifier, VerifyingKey};
use rand::RngCore;
use sha2::{Digest, Sha256};

/// How far `signedAt` may be from the gateway's clock.
pub const DEVICE_SIGNATURE_SKEW_MS: u64 = 2 * 60 * 1000;

/// The `device` object of `connect` params.
#[derive(Debug, Clone)]
pub struct DeviceProof {
    pub id: String,
    pub public_key: String,
    pub signature: String,
    pub signed_at_ms: u64,
    pub nonce: String,
}

/// What the signature covers besides the device itself.
#[derive(Debug, Clone)]
pub struct SignedContext<'a> {
    pub client_id: &'a str,
    pub client_mode: &'a str,
    pub role: &'a str,
    pub scopes: &'a [String],
    pub token: &'a str,
    pub platform: Option<&'a str>,
    pub device_family: Option<&'a str>,
}

/// Why a device proof was refused: upstream's detail code and reason text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceAuthError {
    pub code: &'static str,
    pub reason: &'static str,
    pub message: &'static str,
}

const fn refusal(
    code: &'static str,
    reason: &'static str,
    message: &'static str,
) -> DeviceAuthError {
    DeviceAuthError {
        code,
        reason,
        message,
    }
}

/// Decodes a public key given as base64url raw bytes or as a PEM SPKI block.
pub fn decode_public_key(text: &str) -> Option<[u8; 32]> {
    let trimmed = text.trim();
    let bytes = if trimmed.starts_with("-----BEGIN") {
        let body: String = trimmed
            .lines()
            .filter(|l| !l.starts_with("-----"))
            .collect::<Vec<_>>()
            .join("");
        let der = STANDARD.decode(body).ok()?;
        // An Ed25519 SPKI is a fixed 12-byte prefix followed by the raw key.
        der.get(der.len().checked_sub(32)?..)?.to_vec()
    } else {
        URL_SAFE_NO_PAD.decode(trimmed.trim_end_matches('=')).ok()?
    };
    bytes.try_into().ok()
}

/// The device id for a raw public key.
pub fn device_id_for(raw_key: &[u8; 32]) -> String {
    hex::encode(Sha256::digest(raw_key))
}

fn normalise_meta(value: Option<&str>) -> String {
    value
        .map(|v| v.trim().to_ascii_lowercase())
        .unwrap_or_default()
}

/// The v3 payload string a client signs.
pub fn payload_v3(proof: &DeviceProof, ctx: &SignedContext<'_>) -> String {
    format!(
        "{}|{}|{}",
        payload_v2(proof, ctx).replacen("v2|", "v3|", 1),
        normalise_meta(ctx.platform),
        normalise_meta(ctx.device_family)
    )
}

/// The legacy v2 payload string.
pub fn payload_v2(proof: &DeviceProof, ctx: &SignedContext<'_>) -> String {
    format!(
        "v2|{}|{}|{}|{}|{}|{}|{}|{}",
        proof.id,
        ctx.client_id,
        ctx.client_mode,
        ctx.role,
        ctx.scopes.join(","),
        proof.signed_at_ms,
        ctx.token,
        proof.nonce
    )
}

/// Checks a device proof against the challenge nonce and the clock, in
/// upstream's order. Returns the raw public key on success.
pub fn verify(
    proof: &DeviceProof,
    ctx: &SignedContext<'_>,
    expected_nonce: &str,
    now_ms: u64,
) -> Result<[u8; 32], DeviceAuthError> {
    let key = decode_public_key(&proof.public_key).ok_or(refusal(
        "DEVICE_AUTH_PUBLIC_KEY_INVALID",
        "device-public-key",
        "device public key invalid",
    ))?;
    if device_id_for(&key) != proof.id.trim().to_ascii_lowercase() {
        return Err(refusal(
            "DEVICE_AUTH_DEVICE_ID_MISMATCH",
            "device-id-mismatch",
            "device identity mismatch",
        ));
    }
    if now_ms.abs_diff(proof.signed_at_ms) > DEVICE_SIGNATURE_SKEW_MS {
        return Err(refusal(
            "DEVICE_AUTH_SIGNATURE_EXPIRED",
            "device-signature-stale",
            "device signature expired",
        ));
    }
    if proof.nonce.is_empty() {
        return Err(refusal(
            "DEVICE_AUTH_NONCE_REQUIRED",
            "device-nonce-missing",
            "device nonce required",
        ));
    }
    if proof.nonce != expected_nonce {
        return Err(refusal(
            "DEVICE_AUTH_NONCE_MISMATCH",
            "device-nonce-mismatch",
            "device nonce mismatch",
        ));
    }
    let invalid = refusal(
        "DEVICE_AUTH_SIGNATURE_INVALID",
        "device-signature",
        "device signature invalid",
    );
    let sig_bytes = URL_SAFE_NO_PAD
        .decode(proof.signature.trim().trim_end_matches('='))
        .or_else(|_| STANDARD.decode(proof.signature.trim()))
        .map_err(|_| invalid.clone())?;
    let signature = Signature::from_slice(&sig_bytes).map_err(|_| invalid.clone())?;
    let verifying = VerifyingKey::from_bytes(&key).map_err(|_| invalid.clone())?;
    let v3 = payload_v3(proof, ctx);
    if verifying.verify(v3.as_bytes(), &signature).is_ok() {
        return Ok(key);
    }
    let v2 = payload_v2(proof, ctx);
    if verifying.verify(v2.as_bytes(), &signature).is_ok() {
        return Ok(key);
    }
    Err(invalid)
}

/// A fresh random secret, base64url without padding (32 bytes of entropy).
pub fn new_device_token() -> String {
    let mut bytes = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

/// How device tokens are kept at rest: only their SHA-256.
pub fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::{Signer, SigningKey};

    fn signed(
        key: &SigningKey,
        ctx: &SignedContext<'_>,
        nonce: &str,
        at: u64,
        v3: bool,
    ) -> DeviceProof {
        let raw = key.verifying_key().to_bytes();
        let mut proof = DeviceProof {
            id: device_id_for(&raw),
            public_key: URL_SAFE_NO_PAD.encode(raw),
            signature: String::new(),
            signed_at_ms: at,
            nonce: nonce.into(),
        };
        let payload = if v3 {
            payload_v3(&proof, ctx)
        } else {
            payload_v2(&proof, ctx)
        };
        proof.signature = URL_SAFE_NO_PAD.encode(key.sign(payload.as_bytes()).to_bytes());
        proof
    }

    fn ctx(scopes: &[String]) -> SignedContext<'_> {
        SignedContext {
            client_id: "cli",
            client_mode: "cli",
            role: "operator",
            scopes,
            token: "tok",
            platform: Some(" Linux "),
            device_family: None,
        }
    }

    #[test]
    fn v3_and_v2_signatures_verify() {
        let key = SigningKey::from_bytes(&[7u8; 32]);
        let scopes = vec!["operator.read".to_string()];
        for v3 in [true, false] {
            let proof = signed(&key, &ctx(&scopes), "n1", 1_000_000, v3);
            assert!(verify(&proof, &ctx(&scopes), "n1", 1_000_500).is_ok());
        }
    }

    #[test]
    fn wrong_nonce_stale_time_and_tampered_scope_are_refused() {
        let key = SigningKey::from_bytes(&[9u8; 32]);
        let scopes = vec!["operator.read".to_string()];
        let proof = signed(&key, &ctx(&scopes), "n1", 1_000_000, true);
        let err = verify(&proof, &ctx(&scopes), "n2", 1_000_000).expect_err("nonce");
        assert_eq!(err.code, "DEVICE_AUTH_NONCE_MISMATCH");
        let err = verify(
            &proof,
            &ctx(&scopes),
            "n1",
            1_000_000 + DEVICE_SIGNATURE_SKEW_MS + 1,
        )
        .expect_err("stale");
        assert_eq!(err.message, "device signature expired");
        let wider = vec!["operator.admin".to_string()];
        let err = verify(&proof, &ctx(&wider), "n1", 1_000_000).expect_err("scopes");
        assert_eq!(err.code, "DEVICE_AUTH_SIGNATURE_INVALID");
    }

    #[test]
    fn id_must_match_key() {
        let key = SigningKey::from_bytes(&[3u8; 32]);
        let scopes = vec![];
        let mut proof = signed(&key, &ctx(&scopes), "n", 5, true);
        proof.id = "00".repeat(32);
        let err = verify(&proof, &ctx(&scopes), "n", 5).expect_err("id");
        assert_eq!(err.message, "device identity mismatch");
    }

    #[test]
    fn pem_public_keys_decode() {
        let key = SigningKey::from_bytes(&[1u8; 32]);
        let raw = key.verifying_key().to_bytes();
        let mut der = vec![
            0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
        ];
        der.extend_from_slice(&raw);
        let pem = format!(
            "-----BEGIN PUBLIC KEY-----\n{}\n-----END PUBLIC KEY-----\n",
            STANDARD.encode(&der)
        );
        assert_eq!(decode_public_key(&pem), Some(raw));
    }
}
