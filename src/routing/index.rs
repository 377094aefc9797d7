//! The binding index: `bindings` grouped once per config version by channel
//! and account, then by tier (peer key, guild with roles, guild, team,
//! account-wide, channel-wide), so a resolution looks at a handful of
//! candidates instead of every binding.
//!
//! Resolution walks the tiers narrowest first: peer → parent peer (thread
//! inheritance) → wildcard peer kind → guild+roles → guild → team → account
//! → channel → default agent, and within a tier the binding listed first in
//! the config wins. This file must not touch storage or build session keys.

use std::collections::{HashMap, HashSet};

use crate::config::schema::bindings::{Binding, PeerKind};

use super::session_key::{normalize_account_id, peer_kind_name};
use super::{MatchedBy, RoutePeer};

/// One binding, normalised for matching.
#[derive(Debug, Clone)]
struct IndexedBinding {
    order: usize,
    agent_id: String,
    any_account: bool,
    peer: PeerConstraint,
    guild_id: Option<String>,
    team_id: Option<String>,
    roles: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
enum PeerConstraint {
    None,
    Exact(PeerKind, String),
    AnyOfKind(PeerKind),
}

/// The bindings of one channel+account, split by tier.
#[derive(Debug, Default)]
struct TierIndex {
    by_peer: HashMap<String, Vec<usize>>,
    by_peer_wildcard: Vec<usize>,
    by_guild_with_roles: HashMap<String, Vec<usize>>,
    by_guild: HashMap<String, Vec<usize>>,
    by_team: HashMap<String, Vec<usize>>,
    by_account: Vec<usize>,
    by_channel: Vec<usize>,
}

/// All bindings of one channel: per-account ones and `accountId: "*"` ones.
#[derive(Debug, Default)]
struct ChannelBindings {
    by_account: HashMap<String, TierIndex>,
    any_account: TierIndex,
}

/// What a message offers for matching.
#[derive(Debug, Clone, Default)]
pub struct MatchScope<'a> {
    pub channel: &'a str,
    pub account_id: &'a str,
    pub peer: Option<&'a RoutePeer>,
    pub parent_peer: Option<&'a RoutePeer>,
    pub guild_id: Option<&'a str>,
    pub team_id: Option<&'a str>,
    pub member_roles: &'a [String],
}

/// The index over one config version's bindings.
#[derive(Debug, Default)]
pub struct BindingIndex {
    bindings: Vec<IndexedBinding>,
    channels: HashMap<String, ChannelBindings>,
}

/// Peer index keys: groups and channels are interchangeable upstream.
fn peer_keys(kind: PeerKind, id: &str) -> Vec<String> {
    match kind {
        PeerKind::Group => vec![format!("group:{id}"), format!("channel:{id}")],
        PeerKind::Channel => vec![format!("channel:{id}"), format!("group:{id}")],
        PeerKind::Direct => vec![format!("direct:{id}")],
    }
}

fn kinds_match(binding: PeerKind, actual: PeerKind) -> bool {
    binding == actual || (binding != PeerKind::Direct && actual != PeerKind::Direct)
}

fn non_empty(value: Option<&str>) -> Option<String> {
    value
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_string)
}

impl BindingIndex {
    /// Builds the index; bindings without a channel or with an empty peer id
    /// are skipped (they can never match).
    pub fn build(bindings: &[Binding]) -> BindingIndex {
        let mut index = BindingIndex::default();
        for binding in bindings {
            let channel = binding.r#match.channel.trim().to_lowercase();
            if channel.is_empty() {
                continue;
            }
            let Some(indexed) = normalise(index.bindings.len(), binding) else {
                continue;
            };
            let account = binding.r#match.account_id.as_deref().map(str::trim);
            let slot = index.bindings.len();
            let bucket = index.channels.entry(channel).or_default();
            let tiers = if indexed.any_account {
                &mut bucket.any_account
            } else {
                bucket
                    .by_account
                    .entry(normalize_account_id(account))
                    .or_default()
            };
            tiers.insert(slot, &indexed);
            index.bindings.push(indexed);
        }
        index
    }

    /// Number of bindings indexed.
    pub fn len(&self) -> usize {
        self.bindings.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bindings.is_empty()
    }

    /// The first matching binding's agent and the tier that matched.
    pub fn resolve(&self, scope: &MatchScope<'_>) -> Option<(String, MatchedBy)> {
        let channel = self.channels.get(scope.channel)?;
        let account = channel.by_account.get(scope.account_id);
        let tiers: [&TierIndex; 2] = [account.unwrap_or(&EMPTY_TIERS), &channel.any_account];
        for tier in MatchedBy::BINDING_TIERS {
            if let Some(found) = self.resolve_tier(tier, &tiers, scope) {
                return Some((self.bindings[found].agent_id.clone(), tier));
            }
        }
        None
    }

    /// The earliest-listed candidate of one tier that matches `scope`.
    fn resolve_tier(
        &self,
        tier: MatchedBy,
        sources: &[&TierIndex; 2],
        scope: &MatchScope<'_>,
    ) -> Option<usize> {
        let scope_peer = match tier {
            MatchedBy::PeerParent => Some(scope.parent_peer?),
            MatchedBy::Peer | MatchedBy::PeerWildcard => Some(scope.peer?),
            _ => scope.peer,
        };
        let mut best: Option<usize> = None;
        for source in sources {
            for slot in source.candidates(tier, scope, scope_peer) {
                if best.is_some_and(|b| self.bindings[b].order <= self.bindings[slot].order) {
                    continue;
                }
                if matches(&self.bindings[slot], scope, scope_peer) {
                    best = Some(slot);
                }
            }
        }
        best
    }
}

static EMPTY_TIERS: std::sync::LazyLock<TierIndex> = std::sync::LazyLock::new(TierIndex::default);

impl TierIndex {
    fn insert(&mut self, slot: usize, binding: &IndexedBinding) {
        match (&binding.peer, &binding.guild_id, &binding.team_id) {
            (PeerConstraint::Exact(kind, id), _, _) => {
                for key in peer_keys(*kind, id) {
                    self.by_peer.entry(key).or_default().push(slot);
                }
            }
            (PeerConstraint::AnyOfKind(_), _, _) => self.by_peer_wildcard.push(slot),
            (PeerConstraint::None, Some(guild), _) if !binding.roles.is_empty() => self
                .by_guild_with_roles
                .entry(guild.clone())
                .or_default()
                .push(slot),
            (PeerConstraint::None, Some(guild), _) => {
                self.by_guild.entry(guild.clone()).or_default().push(slot)
            }
            (PeerConstraint::None, None, Some(team)) => {
                self.by_team.entry(team.clone()).or_default().push(slot)
            }
            (PeerConstraint::None, None, None) if binding.any_account => self.by_channel.push(slot),
            (PeerConstraint::None, None, None) => self.by_account.push(slot),
        }
    }

    fn candidates(
        &self,
        tier: MatchedBy,
        scope: &MatchScope<'_>,
        scope_peer: Option<&RoutePeer>,
    ) -> Vec<usize> {
        let keyed = |map: &HashMap<String, Vec<usize>>, key: Option<&str>| {
            key.and_then(|k| map.get(k)).cloned().unwrap_or_default()
        };
        match tier {
            MatchedBy::Peer | MatchedBy::PeerParent => {
                let Some(peer) = scope_peer else {
                    return Vec::new();
                };
                let mut seen = HashSet::new();
                peer_keys(peer.kind, &peer.id)
                    .iter()
                    .filter_map(|key| self.by_peer.get(key))
                    .flatten()
                    .copied()
                    .filter(|slot| seen.insert(*slot))
                    .collect()
            }
            MatchedBy::PeerWildcard => self.by_peer_wildcard.clone(),
            MatchedBy::GuildRoles if !scope.member_roles.is_empty() => {
                keyed(&self.by_guild_with_roles, scope.guild_id)
            }
            MatchedBy::Guild => keyed(&self.by_guild, scope.guild_id),
            MatchedBy::Team => keyed(&self.by_team, scope.team_id),
            MatchedBy::Account => self.by_account.clone(),
            MatchedBy::Channel => self.by_channel.clone(),
            MatchedBy::GuildRoles | MatchedBy::Default => Vec::new(),
        }
    }
}

fn normalise(order: usize, binding: &Binding) -> Option<IndexedBinding> {
    let m = &binding.r#match;
    let peer = match &m.peer {
        None => PeerConstraint::None,
        Some(peer) => match peer.id.trim() {
            "" => return None,
            "*" => PeerConstraint::AnyOfKind(peer.kind),
            id => PeerConstraint::Exact(peer.kind, id.to_string()),
        },
    };
    Some(IndexedBinding {
        order,
        agent_id: binding.agent_id.clone(),
        any_account: m.account_id.as_deref().map(str::trim) == Some("*"),
        peer,
        guild_id: non_empty(m.guild_id.as_deref()),
        team_id: non_empty(m.team_id.as_deref()),
        roles: m
            .roles
            .iter()
            .map(|r| r.trim().to_string())
            .filter(|r| !r.is_empty())
            .collect(),
    })
}

/// Whether every constraint of `binding` holds for the message.
fn matches(binding: &IndexedBinding, scope: &MatchScope<'_>, peer: Option<&RoutePeer>) -> bool {
    let peer_ok = match &binding.peer {
        PeerConstraint::None => true,
        PeerConstraint::Exact(kind, id) => {
            peer.is_some_and(|p| kinds_match(*kind, p.kind) && &p.id == id)
        }
        PeerConstraint::AnyOfKind(kind) => peer.is_some_and(|p| kinds_match(*kind, p.kind)),
    };
    let guild_ok = binding
        .guild_id
        .as_deref()
        .is_none_or(|g| scope.guild_id == Some(g));
    let team_ok = binding
        .team_id
        .as_deref()
        .is_none_or(|t| scope.team_id == Some(t));
    // Upstream: a binding's role list matches when the member holds any of them.
    let roles_ok = binding.roles.is_empty()
        || binding
            .roles
            .iter()
            .any(|role| scope.member_roles.contains(role));
    peer_ok && guild_ok && team_ok && roles_ok
}

/// A peer rendered for logs and cache keys (`group:123`).
pub fn peer_label(peer: Option<&RoutePeer>) -> String {
    match peer {
        Some(p) if !p.id.is_empty() => format!("{}:{}", peer_kind_name(p.kind), p.id),
        _ => "-".to_string(),
    }
}
