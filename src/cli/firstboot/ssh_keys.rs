//! The SSH keys a user drops on the boot partition (`authorized_keys`): checked line by
//! line and installed as root's authorized keys on the data partition. Public keys are
//! not secret, so the file stays on the boot partition as the list of record: present,
//! it replaces the installed keys (an empty file revokes them all); absent, the installed
//! keys stay.

use base64::Engine as _;

/// The keys' name on the boot partition.
pub const AUTHORIZED_KEYS_FILE: &str = "authorized_keys";
/// The largest `authorized_keys` read from the boot partition.
pub const MAX_AUTHORIZED_KEYS_BYTES: u64 = 64 * 1024;

/// Key types OpenSSH 9 accepts for user authentication.
const KEY_TYPES: [&str; 8] = [
    "ssh-ed25519",
    "ssh-rsa",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
    "rsa-sha2-512",
];

/// Checks every line (`<type> <base64 key> [comment]`; blank lines and `#` comments
/// allowed) and returns the file as it will be installed. Options before the key type
/// (`command=…`, `from=…`) are refused: first boot installs plain keys only.
pub fn parse(text: &str) -> Result<String, String> {
    let mut out = String::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut fields = line.split_whitespace();
        let kind = fields.next().unwrap_or_default();
        if !KEY_TYPES.contains(&kind) {
            return Err(format!(
                "{AUTHORIZED_KEYS_FILE}: line {}: expected a key type ({}) first, got {kind:?} \
                 (options before the key are not supported)",
                n + 1,
                KEY_TYPES.join(", ")
            ));
        }
        let blob = fields.next().unwrap_or_default();
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(blob)
            .map_err(|e| {
                format!(
                    "{AUTHORIZED_KEYS_FILE}: line {}: the key is not base64: {e}",
                    n + 1
                )
            })?;
        // The blob starts with the key type again, as a length-prefixed string.
        let named = decoded
            .get(..4)
            .map(|len| u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize)
            .and_then(|len| decoded.get(4..4 + len));
        if named != Some(kind.as_bytes()) {
            return Err(format!(
                "{AUTHORIZED_KEYS_FILE}: line {}: the key does not match its type {kind}",
                n + 1
            ));
        }
        out.push_str(line);
        out.push('\n');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJE7lxUeADwgZ3i0789caWPAJoNUkckqREYFuZFSnTdk user@laptop";

    #[test]
    fn plain_keys_and_comments_are_kept() {
        let text = format!("# mine\n\n{KEY}\n");
        assert_eq!(parse(&text).expect("valid"), format!("{KEY}\n"));
    }

    #[test]
    fn a_line_that_is_not_a_key_is_refused_with_its_number() {
        let err = parse(&format!("{KEY}\nhello world\n")).expect_err("refused");
        assert!(err.contains("line 2"), "{err}");
        let err = parse("command=\"ls\" ssh-ed25519 AAAA\n").expect_err("options");
        assert!(err.contains("options"), "{err}");
        let err = parse("ssh-ed25519 !!!notbase64\n").expect_err("blob");
        assert!(err.contains("not base64"), "{err}");
        // an RSA key's blob under the ed25519 type
        let err = parse("ssh-ed25519 AAAAB3NzaC1yc2EAAAADAQABAAABAQ==\n").expect_err("type");
        assert!(err.contains("does not match"), "{err}");
    }
}
