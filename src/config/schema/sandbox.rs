//! The sandbox settings (`agents.defaults.sandbox`, `agents.list[].sandbox`):
//! which sessions run tools in the sandbox, what of the workspace they see,
//! and the resource limits upstream writes under `sandbox.docker`.
//!
//! Pincer's sandbox is namespaces + landlock + seccomp + rlimits, not
//! Docker, so only the `docker` keys with a meaning there are accepted
//! (network, limits, env, user); image, container naming, extra mounts,
//! capabilities and the root's writability are not (`unsupported.rs`).
//! Security refusals (host network) are in `validate_agents.rs`.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

use crate::config::de as cde;
use crate::config::duration::parse_byte_size;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    #[default]
    Off,
    /// Every session except the agent's main one.
    NonMain,
    All,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkspaceAccess {
    None,
    Ro,
    Rw,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxLayer {
    Namespaces,
    Landlock,
    Seccomp,
    Cgroup,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxNetwork {
    None,
    Host,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxScope {
    Session,
    Agent,
    Shared,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct SandboxConfig {
    pub mode: Option<SandboxMode>,
    pub workspace_access: Option<WorkspaceAccess>,
    pub scope: Option<SandboxScope>,
    pub workspace_root: Option<PathBuf>,
    /// pincer: the sandbox's network, `none` (own namespace with only `lo`,
    /// the default) or `host` (opt out for this agent).
    pub network: Option<SandboxNetwork>,
    /// pincer: layers that must be available, or `exec` is refused naming the
    /// missing one (empty: at least namespaces or landlock).
    pub require: Vec<SandboxLayer>,
    pub docker: Option<SandboxLimits>,
}

/// Limits and mounts for sandboxed commands (upstream key `docker`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct SandboxLimits {
    /// "none" or "bridge"; "host" is refused.
    pub network: Option<String>,
    /// "uid" or "uid:gid" (numbers) commands run as inside the sandbox.
    pub user: Option<String>,
    pub env: BTreeMap<String, String>,
    pub pids_limit: Option<u32>,
    /// Memory cap as size text ("512m", "2g") or bytes.
    #[serde(deserialize_with = "cde::opt_text_or_number")]
    pub memory: Option<String>,
    /// CPU share (0.5, 1, 2).
    pub cpus: Option<f64>,
    /// Resource limits by name (`nofile`, `nproc`, `fsize`).
    pub ulimits: BTreeMap<String, Ulimit>,
}

/// `docker.user` as numbers: `"uid"` (gid 0, as Docker gives a bare numeric uid) or `"uid:gid"`;
/// `None` for anything else (validation refuses it: the sandbox has no user database for names).
pub fn parse_sandbox_user(text: &str) -> Option<(u32, u32)> {
    let (uid, gid) = match text.trim().split_once(':') {
        Some((uid, gid)) => (uid, Some(gid)),
        None => (text.trim(), None),
    };
    let uid = uid.parse().ok()?;
    let gid = match gid {
        Some(gid) => gid.parse().ok()?,
        None => 0,
    };
    Some((uid, gid))
}

impl SandboxLimits {
    /// The memory cap in bytes, if one is set and parses.
    pub fn memory_bytes(&self) -> Option<u64> {
        self.memory
            .as_deref()
            .and_then(|text| parse_byte_size(text).ok())
    }
}

/// One rlimit: a single value for both soft and hard, or a pair.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Ulimit {
    Both(u64),
    Pair {
        soft: Option<u64>,
        hard: Option<u64>,
    },
}

impl<'de> Deserialize<'de> for Ulimit {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(UlimitVisitor)
    }
}

struct UlimitVisitor;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UlimitPair {
    soft: Option<u64>,
    hard: Option<u64>,
}

impl<'de> Visitor<'de> for UlimitVisitor {
    type Value = Ulimit;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a number, \"soft:hard\" text or {soft, hard}")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Ulimit, E> {
        Ok(Ulimit::Both(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Ulimit, E> {
        u64::try_from(v)
            .map(Ulimit::Both)
            .map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Ulimit, E> {
        let parse = |part: &str| part.trim().parse::<u64>().ok();
        match v.split_once(':') {
            None => parse(v).map(Ulimit::Both),
            Some((soft, hard)) => match (parse(soft), parse(hard)) {
                (Some(soft), Some(hard)) => Some(Ulimit::Pair {
                    soft: Some(soft),
                    hard: Some(hard),
                }),
                _ => None,
            },
        }
        .ok_or_else(|| E::invalid_value(de::Unexpected::Str(v), &self))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Ulimit, A::Error> {
        let pair = UlimitPair::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok(Ulimit::Pair {
            soft: pair.soft,
            hard: pair.hard,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ulimit_accepts_number_text_and_object() {
        let limits: BTreeMap<String, Ulimit> = serde_json::from_str(
            r#"{"nofile": 1024, "nproc": "64:128", "fsize": {"soft": 1, "hard": 2}}"#,
        )
        .expect("ulimit forms");
        assert_eq!(limits["nofile"], Ulimit::Both(1024));
        assert_eq!(
            limits["nproc"],
            Ulimit::Pair {
                soft: Some(64),
                hard: Some(128)
            }
        );
        assert_eq!(
            limits["fsize"],
            Ulimit::Pair {
                soft: Some(1),
                hard: Some(2)
            }
        );
        assert!(serde_json::from_str::<Ulimit>("\"lots\"").is_err());
    }

    #[test]
    fn memory_limit_reads_size_text_or_bytes() {
        let limits: SandboxLimits =
            serde_json::from_str(r#"{"memory": "512m"}"#).expect("memory text");
        assert_eq!(limits.memory_bytes(), Some(512 * 1024 * 1024));
        let limits: SandboxLimits =
            serde_json::from_str(r#"{"memory": 1048576}"#).expect("memory bytes");
        assert_eq!(limits.memory_bytes(), Some(1_048_576));
    }
}
