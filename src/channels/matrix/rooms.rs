//! What one account knows about its rooms: whether a room is direct (listed
//! in the account's `m.direct`, or a membership in it flagged `is_direct`;
//! as upstream, never by its member count: two people may share many
//! rooms), end-to-end
//! encrypted (`m.room.encryption` in its state), its name and aliases —
//! learnt from `/sync` (state, summaries, account data) and, for a room not
//! seen since start, asked once from the homeserver. Bounded: at most
//! `MAX_ROOMS` rooms are remembered (the oldest forgotten first; it is
//! asked again if it speaks again), and the encrypted rooms already told
//! that pincer cannot read them likewise.
//!
//! This file must not gate messages or send replies.

use std::collections::{HashMap, HashSet, VecDeque};

use parking_lot::Mutex;
use serde_json::Value;

use super::api::{ApiError, MatrixApi};

/// Rooms remembered per account.
pub const MAX_ROOMS: usize = 4_096;

/// One room as far as the message path cares.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoomInfo {
    pub joined_members: Option<usize>,
    pub encrypted: bool,
    /// A membership in the room is flagged `is_direct` (a DM invite).
    pub direct_flag: bool,
    pub name: Option<String>,
    /// The canonical alias and its alternatives.
    pub aliases: Vec<String>,
}

/// The rooms of one account.
#[derive(Debug, Default)]
pub struct Rooms {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    rooms: HashMap<String, RoomInfo>,
    order: VecDeque<String>,
    /// Rooms the `m.direct` account data lists.
    direct: HashSet<String>,
    /// Encrypted rooms already given the notice.
    notified: HashSet<String>,
}

impl Inner {
    fn entry(&mut self, room_id: &str) -> &mut RoomInfo {
        if !self.rooms.contains_key(room_id) {
            while self.rooms.len() >= MAX_ROOMS {
                let Some(oldest) = self.order.pop_front() else {
                    break;
                };
                self.rooms.remove(&oldest);
            }
            self.order.push_back(room_id.to_string());
        }
        self.rooms.entry(room_id.to_string()).or_default()
    }
}

impl Rooms {
    /// The room's info, when known.
    pub fn get(&self, room_id: &str) -> Option<RoomInfo> {
        self.inner.lock().rooms.get(room_id).cloned()
    }

    pub fn len(&self) -> usize {
        self.inner.lock().rooms.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the room is direct: `m.direct` lists it, or a membership
    /// in it is flagged `is_direct`.
    pub fn is_direct(&self, room_id: &str) -> bool {
        let inner = self.inner.lock();
        inner.direct.contains(room_id) || inner.rooms.get(room_id).is_some_and(|r| r.direct_flag)
    }

    /// The room is direct (the bot joined it from an `is_direct` invite).
    pub fn mark_direct(&self, room_id: &str) {
        self.inner.lock().entry(room_id).direct_flag = true;
    }

    /// Replaces the direct rooms from an `m.direct` content (user id →
    /// room ids).
    pub fn set_direct(&self, content: &Value) {
        let rooms: HashSet<String> = content
            .as_object()
            .into_iter()
            .flat_map(|users| users.values())
            .filter_map(Value::as_array)
            .flatten()
            .filter_map(Value::as_str)
            .take(MAX_ROOMS)
            .map(str::to_string)
            .collect();
        self.inner.lock().direct = rooms;
    }

    /// Learns from one joined room of a `/sync` answer: its summary's
    /// member count and the state and timeline events that describe it.
    pub fn learn(&self, room_id: &str, room: &Value) {
        let mut inner = self.inner.lock();
        let info = inner.entry(room_id);
        if let Some(count) = room["summary"]["m.joined_member_count"].as_u64() {
            info.joined_members = usize::try_from(count).ok();
        }
        let events = room["state"]["events"]
            .as_array()
            .into_iter()
            .chain(room["timeline"]["events"].as_array())
            .flatten();
        for event in events {
            if event.get("state_key").is_none() {
                continue;
            }
            let content = &event["content"];
            match event["type"].as_str().unwrap_or("") {
                "m.room.encryption" => info.encrypted = true,
                "m.room.name" => info.name = content["name"].as_str().map(str::to_string),
                "m.room.canonical_alias" => info.aliases = aliases_of(content),
                "m.room.member" if content["is_direct"] == true => info.direct_flag = true,
                // A join or leave changes the count: asked again on need
                // unless the summary says it.
                "m.room.member" if room["summary"]["m.joined_member_count"].is_null() => {
                    info.joined_members = None;
                }
                _ => {}
            }
        }
    }

    /// The room's info, asked from the homeserver when it is not known
    /// (or its member count is not); `me` is the bot, whose membership may
    /// flag the room direct.
    pub async fn resolve(
        &self,
        api: &MatrixApi,
        room_id: &str,
        me: &str,
    ) -> Result<RoomInfo, ApiError> {
        if let Some(info) = self.get(room_id).filter(|i| i.joined_members.is_some()) {
            return Ok(info);
        }
        let known = self.get(room_id);
        let joined = api.joined_member_count(room_id).await?;
        let asked = match &known {
            Some(_) => None,
            None => Some(Self::ask(api, room_id, me).await?),
        };
        let mut inner = self.inner.lock();
        let info = inner.entry(room_id);
        info.joined_members = Some(joined);
        if let Some(asked) = asked {
            info.encrypted |= asked.encrypted;
            info.direct_flag |= asked.direct_flag;
            if info.name.is_none() {
                info.name = asked.name;
            }
            if info.aliases.is_empty() {
                info.aliases = asked.aliases;
            }
        }
        Ok(info.clone())
    }

    /// A room's state as far as the message path cares, asked event by event.
    async fn ask(api: &MatrixApi, room_id: &str, me: &str) -> Result<RoomInfo, ApiError> {
        let state = |kind: &'static str, key: &'static str| api.state(room_id, kind, key);
        let encrypted = state("m.room.encryption", "").await?.is_some();
        let name = state("m.room.name", "")
            .await?
            .and_then(|c| c["name"].as_str().map(str::to_string));
        let aliases = state("m.room.canonical_alias", "")
            .await?
            .map(|c| aliases_of(&c))
            .unwrap_or_default();
        let direct_flag = api
            .state(room_id, "m.room.member", me)
            .await?
            .is_some_and(|c| c["is_direct"] == true);
        Ok(RoomInfo {
            joined_members: None,
            encrypted,
            direct_flag,
            name,
            aliases,
        })
    }

    /// The room became encrypted (an `m.room.encrypted` event in it).
    pub fn mark_encrypted(&self, room_id: &str) {
        self.inner.lock().entry(room_id).encrypted = true;
    }

    /// True the first time an encrypted room is to be told (then false).
    pub fn first_notice(&self, room_id: &str) -> bool {
        let mut inner = self.inner.lock();
        if inner.notified.len() >= MAX_ROOMS {
            inner.notified.clear();
        }
        inner.notified.insert(room_id.to_string())
    }
}

/// `alias` and `alt_aliases` of an `m.room.canonical_alias` content.
fn aliases_of(content: &Value) -> Vec<String> {
    content["alias"]
        .as_str()
        .into_iter()
        .chain(
            content["alt_aliases"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str),
        )
        .take(16)
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_room_is_direct_by_m_direct_or_is_direct_never_by_size() {
        let rooms = Rooms::default();
        rooms.learn("!two:hs", &json!({"summary": {"m.joined_member_count": 2}}));
        rooms.learn(
            "!many:hs",
            &json!({"summary": {"m.joined_member_count": 5}}),
        );
        rooms.learn(
            "!flagged:hs",
            &json!({"state": {"events": [{"type": "m.room.member", "state_key": "@pincer:hs",
                "content": {"membership": "invite", "is_direct": true}}]}}),
        );
        assert!(!rooms.is_direct("!two:hs"), "two members is no DM");
        assert!(!rooms.is_direct("!many:hs"));
        assert!(rooms.is_direct("!flagged:hs"));
        rooms.set_direct(&json!({"@ann:hs": ["!many:hs"]}));
        assert!(rooms.is_direct("!many:hs"));
        assert!(!rooms.is_direct("!unknown:hs"));
        rooms.mark_direct("!two:hs");
        assert!(rooms.is_direct("!two:hs"));
    }

    #[test]
    fn state_events_teach_encryption_name_and_aliases() {
        let rooms = Rooms::default();
        rooms.learn(
            "!r:hs",
            &json!({"state": {"events": [
                {"type": "m.room.name", "state_key": "", "content": {"name": "Ops"}},
                {"type": "m.room.canonical_alias", "state_key": "",
                 "content": {"alias": "#ops:hs", "alt_aliases": ["#ops2:hs"]}}
            ]}, "timeline": {"events": [
                {"type": "m.room.encryption", "state_key": "", "content": {"algorithm": "m.megolm.v1.aes-sha2"}},
                {"type": "m.room.message", "content": {"body": "not state"}}
            ]}}),
        );
        let info = rooms.get("!r:hs").expect("known");
        assert!(info.encrypted);
        assert_eq!(info.name.as_deref(), Some("Ops"));
        assert_eq!(info.aliases, vec!["#ops:hs", "#ops2:hs"]);
    }

    #[test]
    fn the_room_memory_is_bounded() {
        let rooms = Rooms::default();
        for i in 0..MAX_ROOMS + 10 {
            rooms.learn(&format!("!r{i}:hs"), &json!({}));
        }
        assert_eq!(rooms.len(), MAX_ROOMS);
        assert!(rooms.get("!r0:hs").is_none(), "the oldest went first");
        assert!(rooms.get(&format!("!r{}:hs", MAX_ROOMS + 9)).is_some());
        assert!(rooms.first_notice("!e:hs"));
        assert!(!rooms.first_notice("!e:hs"));
    }
}
