//! Routing inputs: `bindings` (which agent answers which channel, account,
//! peer, guild or team) and `broadcast` (peers whose messages several
//! agents all process).
//!
//! Shapes follow OpenClaw's `AgentBinding` and `BroadcastConfig`. Resolution
//! (the tiered match) belongs to `routing/`, not here.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BindingType {
    /// Route matching messages to `agentId` (the only kind pincer runs).
    #[default]
    Route,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Binding {
    #[serde(rename = "type")]
    pub r#type: Option<BindingType>,
    pub agent_id: String,
    pub comment: Option<String>,
    #[serde(rename = "match")]
    pub r#match: BindingMatch,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct BindingMatch {
    /// Channel id ("telegram", "discord", …); required.
    pub channel: String,
    /// Account id, or "*" for any account.
    pub account_id: Option<String>,
    pub peer: Option<PeerMatch>,
    pub guild_id: Option<String>,
    pub team_id: Option<String>,
    /// Discord role ids, any of which matches.
    pub roles: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PeerKind {
    /// A direct message ("dm" is upstream's deprecated spelling).
    #[serde(alias = "dm")]
    Direct,
    Group,
    Channel,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PeerMatch {
    pub kind: PeerKind,
    pub id: String,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BroadcastStrategy {
    #[default]
    Parallel,
    Sequential,
}

/// `broadcast`: `{strategy?, "<peerId>": ["agentA", "agentB"]}`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BroadcastConfig {
    pub strategy: BroadcastStrategy,
    /// Peer id → agents that all process its messages.
    pub peers: BTreeMap<String, Vec<String>>,
}

impl Serialize for BroadcastConfig {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.peers.len() + 1))?;
        map.serialize_entry("strategy", &self.strategy)?;
        for (peer, agents) in &self.peers {
            map.serialize_entry(peer, agents)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for BroadcastConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(BroadcastVisitor)
    }
}

struct BroadcastVisitor;

impl<'de> Visitor<'de> for BroadcastVisitor {
    type Value = BroadcastConfig;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object of peer ids to agent id lists, with an optional strategy")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut config = BroadcastConfig::default();
        while let Some(key) = map.next_key::<String>()? {
            if key == "strategy" {
                config.strategy = map.next_value()?;
            } else {
                let agents: Vec<String> = map.next_value()?;
                config.peers.insert(key, agents);
            }
        }
        Ok(config)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(BroadcastConfig::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binding_parses_upstream_match_shape() {
        let binding: Binding = serde_json::from_str(
            r#"{"agentId":"work","match":{"channel":"telegram","accountId":"bot2",
                "peer":{"kind":"dm","id":"42"}}}"#,
        )
        .expect("binding");
        assert_eq!(binding.agent_id, "work");
        assert_eq!(binding.r#match.channel, "telegram");
        assert_eq!(
            binding.r#match.peer.as_ref().map(|p| p.kind),
            Some(PeerKind::Direct)
        );
    }

    #[test]
    fn broadcast_separates_strategy_from_peers() {
        let broadcast: BroadcastConfig =
            serde_json::from_str(r#"{"strategy":"sequential","120363@g.us":["a","b"]}"#)
                .expect("broadcast");
        assert_eq!(broadcast.strategy, BroadcastStrategy::Sequential);
        assert_eq!(
            broadcast.peers["120363@g.us"],
            vec!["a".to_string(), "b".to_string()]
        );
        let round_trip: BroadcastConfig =
            serde_json::from_value(serde_json::to_value(&broadcast).expect("serialize"))
                .expect("deserialize");
        assert_eq!(round_trip, broadcast);
    }

    #[test]
    fn broadcast_peer_must_list_agents() {
        assert!(serde_json::from_str::<BroadcastConfig>(r#"{"peer":"agent"}"#).is_err());
    }
}
