//! Layer 2 of the message path: which agent answers a message and in which
//! session. `bindings` are indexed once per config version (`index.rs`),
//! resolved through seven tiers to an agent id with the tier that matched
//! (`matchedBy`), turned into upstream's session keys (`session_key.rs`) and
//! remembered in a bounded result cache. A config reload swaps index and
//! cache together, atomically. Broadcast groups fan one message out to
//! several agents, each in its own session.
//!
//! Routing is pure computation over the config: it must not touch storage
//! or know any platform API.

pub mod index;
pub mod session_key;

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::schema::bindings::{BroadcastStrategy, PeerKind};
use crate::config::schema::session::DmScope;
use crate::config::Config;

use index::{peer_label, BindingIndex, MatchScope};
use parking_lot::{Mutex, RwLock};
use session_key::{
    main_session_key, normalize_account_id, normalize_agent_id, peer_session_key, PeerKeyParts,
};

/// Most results the route cache holds; it is cleared whole when full
/// (upstream's `MAX_RESOLVED_ROUTE_CACHE_KEYS`).
pub const MAX_ROUTE_CACHE_KEYS: usize = 4_000;

/// Which tier chose the agent (upstream's `matchedBy` strings).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MatchedBy {
    Peer,
    PeerParent,
    PeerWildcard,
    GuildRoles,
    Guild,
    Team,
    Account,
    Channel,
    Default,
}

impl MatchedBy {
    /// The binding tiers, narrowest first.
    pub const BINDING_TIERS: [MatchedBy; 8] = [
        MatchedBy::Peer,
        MatchedBy::PeerParent,
        MatchedBy::PeerWildcard,
        MatchedBy::GuildRoles,
        MatchedBy::Guild,
        MatchedBy::Team,
        MatchedBy::Account,
        MatchedBy::Channel,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            MatchedBy::Peer => "binding.peer",
            MatchedBy::PeerParent => "binding.peer.parent",
            MatchedBy::PeerWildcard => "binding.peer.wildcard",
            MatchedBy::GuildRoles => "binding.guild+roles",
            MatchedBy::Guild => "binding.guild",
            MatchedBy::Team => "binding.team",
            MatchedBy::Account => "binding.account",
            MatchedBy::Channel => "binding.channel",
            MatchedBy::Default => "default",
        }
    }
}

/// The conversation a message came from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RoutePeer {
    pub kind: PeerKind,
    pub id: String,
}

impl RoutePeer {
    pub fn new(kind: PeerKind, id: impl Into<String>) -> RoutePeer {
        RoutePeer {
            kind,
            id: id.into().trim().to_string(),
        }
    }
}

/// What routing needs to know about a message.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct RouteInput {
    pub channel: String,
    pub account_id: Option<String>,
    pub peer: Option<RoutePeer>,
    /// The parent conversation of a thread (bindings inherit from it).
    pub parent_peer: Option<RoutePeer>,
    pub guild_id: Option<String>,
    pub team_id: Option<String>,
    pub member_roles: Vec<String>,
    /// The agent the conversation itself names (a Telegram forum topic's `agentId`): it answers
    /// instead of the one the bindings choose, in its own session for the conversation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_override: Option<String>,
}

/// Where a message goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub agent_id: String,
    pub channel: String,
    pub account_id: String,
    pub session_key: String,
    pub main_session_key: String,
    pub matched_by: MatchedBy,
}

/// One config version's routing tables.
struct RoutingTables {
    index: BindingIndex,
    agent_ids: Vec<String>,
    default_agent: String,
    dm_scope: DmScope,
    main_key: String,
    /// `session.scope: "global"`: main sessions are the one `global` session.
    global_scope: bool,
    identity_links: std::collections::BTreeMap<String, Vec<String>>,
    broadcast: HashMap<String, Vec<String>>,
    broadcast_strategy: BroadcastStrategy,
    cache: Mutex<HashMap<String, Route>>,
}

/// The router: resolve routes against the current tables; `reload` swaps
/// the index and an empty cache in one step. Cheap to share behind an `Arc`.
pub struct Router {
    tables: RwLock<Arc<RoutingTables>>,
}

impl Router {
    pub fn new(config: &Config) -> Router {
        Router {
            tables: RwLock::new(Arc::new(RoutingTables::build(config))),
        }
    }

    /// Rebuilds index and cache for a new config version.
    pub fn reload(&self, config: &Config) {
        let fresh = Arc::new(RoutingTables::build(config));
        *self.tables.write() = fresh;
    }

    fn current(&self) -> Arc<RoutingTables> {
        self.tables.read().clone()
    }

    /// Resolves one message to an agent and session.
    pub fn resolve(&self, input: &RouteInput) -> Route {
        let tables = self.current();
        let key = cache_key(input, tables.dm_scope);
        if let Some(hit) = tables.cache_get(&key) {
            return hit;
        }
        let route = tables.resolve_uncached(input);
        tables.cache_put(key, route.clone());
        route
    }

    /// The routes of every agent a message goes to: the broadcast group of
    /// its peer (each agent in its own session), else the one resolved route.
    pub fn resolve_all(&self, input: &RouteInput) -> (Vec<Route>, BroadcastStrategy) {
        let tables = self.current();
        let group = input
            .peer
            .as_ref()
            .and_then(|peer| tables.broadcast.get(&peer.id));
        match group {
            Some(agents) if !agents.is_empty() => {
                let routes = agents
                    .iter()
                    .map(|agent| tables.route_for(input, agent, MatchedBy::Peer))
                    .collect();
                (routes, tables.broadcast_strategy)
            }
            _ => (vec![self.resolve(input)], BroadcastStrategy::Parallel),
        }
    }

    /// Entries in the result cache (for tests and status).
    pub fn cached_routes(&self) -> usize {
        self.current().cache.lock().len()
    }

    /// Bindings in the current index.
    pub fn binding_count(&self) -> usize {
        self.current().index.len()
    }
}

impl RoutingTables {
    fn build(config: &Config) -> RoutingTables {
        RoutingTables {
            index: BindingIndex::build(&config.bindings),
            agent_ids: config.agents.list.iter().map(|a| a.id.clone()).collect(),
            default_agent: config.agents.default_agent_id(),
            dm_scope: config.session.dm_scope,
            main_key: config.session.main_key.clone(),
            global_scope: session_key::is_global_scope(&config.session),
            identity_links: config.session.identity_links.clone(),
            broadcast: config
                .broadcast
                .peers
                .iter()
                .map(|(peer, agents)| (peer.trim().to_string(), agents.clone()))
                .collect(),
            broadcast_strategy: config.broadcast.strategy,
            cache: Mutex::new(HashMap::new()),
        }
    }

    fn cache_get(&self, key: &str) -> Option<Route> {
        self.cache.lock().get(key).cloned()
    }

    fn cache_put(&self, key: String, route: Route) {
        let mut cache = self.cache.lock();
        if cache.len() >= MAX_ROUTE_CACHE_KEYS {
            cache.clear();
        }
        cache.insert(key, route);
    }

    fn resolve_uncached(&self, input: &RouteInput) -> Route {
        let channel = input.channel.trim().to_lowercase();
        let account = normalize_account_id(input.account_id.as_deref());
        let scope = MatchScope {
            channel: &channel,
            account_id: &account,
            peer: input.peer.as_ref(),
            parent_peer: input.parent_peer.as_ref().filter(|p| !p.id.is_empty()),
            guild_id: input.guild_id.as_deref().map(str::trim),
            team_id: input.team_id.as_deref().map(str::trim),
            member_roles: &input.member_roles,
        };
        let (agent, matched_by) = self
            .index
            .resolve(&scope)
            .unwrap_or_else(|| (self.default_agent.clone(), MatchedBy::Default));
        let agent = input
            .agent_override
            .as_deref()
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map_or(agent, str::to_string);
        self.route_for(input, &agent, matched_by)
    }

    /// An existing agent id: the requested one if listed (or nothing is
    /// listed), else the default agent.
    fn existing_agent(&self, requested: &str) -> String {
        let wanted = normalize_agent_id(requested);
        if self.agent_ids.is_empty() {
            return wanted;
        }
        match self
            .agent_ids
            .iter()
            .find(|id| normalize_agent_id(id) == wanted)
        {
            Some(_) => wanted,
            None => normalize_agent_id(&self.default_agent),
        }
    }

    fn route_for(&self, input: &RouteInput, agent: &str, matched_by: MatchedBy) -> Route {
        let agent_id = self.existing_agent(agent);
        let channel = input.channel.trim().to_lowercase();
        let account_id = normalize_account_id(input.account_id.as_deref());
        let main = main_session_key(&agent_id, &self.main_key);
        let session_key = match &input.peer {
            None => main.clone(),
            Some(peer) => peer_session_key(&PeerKeyParts {
                agent_id: &agent_id,
                main_key: &self.main_key,
                channel: &channel,
                account_id: &account_id,
                peer_kind: peer.kind,
                peer_id: &peer.id,
                dm_scope: self.dm_scope,
                identity_links: &self.identity_links,
            }),
        };
        let (session_key, main) = if self.global_scope {
            let global = session_key::GLOBAL_SESSION_KEY.to_string();
            let session_key = if session_key == main {
                global.clone()
            } else {
                session_key
            };
            (session_key, global)
        } else {
            (session_key, main)
        };
        Route {
            agent_id,
            channel,
            account_id,
            session_key,
            main_session_key: main,
            matched_by,
        }
    }
}

/// The cache key: every input that can change the answer (roles sorted, so
/// their order does not matter).
fn cache_key(input: &RouteInput, dm_scope: DmScope) -> String {
    let mut roles: Vec<&str> = input.member_roles.iter().map(String::as_str).collect();
    roles.sort_unstable();
    format!(
        "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{:?}\t{}",
        input.channel.trim().to_lowercase(),
        normalize_account_id(input.account_id.as_deref()),
        peer_label(input.peer.as_ref()),
        peer_label(input.parent_peer.as_ref()),
        input.guild_id.as_deref().unwrap_or("-"),
        input.team_id.as_deref().unwrap_or("-"),
        roles.join(","),
        dm_scope,
        input.agent_override.as_deref().unwrap_or("-"),
    )
}
