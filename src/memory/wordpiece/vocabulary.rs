//! The WordPiece vocabulary in compact form: every token's bytes back to back in one string arena, entry
//! ends and ids as `u32`s, and an open-addressing hash table of entry indexes (about 25 bytes per token
//! instead of a heap `String` plus a map entry each). Also reads the JSON `{token: id}` map straight into it.
//! This file must not know about normalization or the rest of `tokenizer.json`.

use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

/// Marks an empty slot of the vocabulary hash table.
const EMPTY_SLOT: u32 = u32::MAX;

/// The vocabulary: every token's bytes back to back in one arena, and an open-addressing hash table.
#[derive(Default)]
pub(super) struct Vocabulary {
    arena: String,
    /// Entry `i` spans `arena[ends[i - 1]..ends[i]]` (from 0 for the first).
    ends: Vec<u32>,
    ids: Vec<u32>,
    /// Entry indexes by hash, `EMPTY_SLOT` where free; the length is a power of two.
    slots: Vec<u32>,
}

/// FNV-1a over the continuation prefix (when `continued`) then the piece, without joining them.
fn token_hash(prefix: &str, continued: bool, piece: &str) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    let head: &[u8] = if continued { prefix.as_bytes() } else { &[] };
    for &byte in head.iter().chain(piece.as_bytes()) {
        hash = (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193);
    }
    hash
}

impl Vocabulary {
    fn entry(&self, index: usize) -> &str {
        let start = if index == 0 { 0 } else { self.ends[index - 1] };
        &self.arena[start as usize..self.ends[index] as usize]
    }

    fn push(&mut self, token: &str, id: u32) -> Result<(), String> {
        self.arena.push_str(token);
        let end =
            u32::try_from(self.arena.len()).map_err(|_| "vocabulary over 4 GiB".to_string())?;
        self.ends.push(end);
        self.ids.push(id);
        Ok(())
    }

    /// Builds the hash table; a token listed twice keeps its last id (as a JSON map read into a HashMap).
    pub(super) fn index(&mut self) {
        self.arena.shrink_to_fit();
        self.ends.shrink_to_fit();
        self.ids.shrink_to_fit();
        let capacity = (self.ids.len() * 2).next_power_of_two().max(16);
        self.slots = vec![EMPTY_SLOT; capacity];
        let mask = capacity - 1;
        for entry in 0..self.ids.len() {
            let token = self.entry(entry);
            let mut slot = token_hash("", false, token) as usize & mask;
            loop {
                let held = self.slots[slot];
                if held == EMPTY_SLOT || self.entry(held as usize) == token {
                    self.slots[slot] = entry as u32;
                    break;
                }
                slot = (slot + 1) & mask;
            }
        }
    }

    /// The id of `prefix + piece` (or of `piece` when not `continued`).
    pub(super) fn lookup(&self, prefix: &str, continued: bool, piece: &str) -> Option<u32> {
        let mask = self.slots.len() - 1;
        let head = if continued { prefix } else { "" };
        let mut slot = token_hash(prefix, continued, piece) as usize & mask;
        loop {
            let held = self.slots[slot];
            if held == EMPTY_SLOT {
                return None;
            }
            let token = self.entry(held as usize);
            if token.len() == head.len() + piece.len()
                && token.starts_with(head)
                && &token[head.len()..] == piece
            {
                return Some(self.ids[held as usize]);
            }
            slot = (slot + 1) & mask;
        }
    }

    /// Entries as listed in the file (a token listed twice counts twice).
    pub(super) fn len(&self) -> usize {
        self.ids.len()
    }

    pub(super) fn heap_bytes(&self) -> usize {
        self.arena.capacity()
            + 4 * (self.ends.capacity() + self.ids.capacity() + self.slots.capacity())
    }
}

/// Reads a JSON `{token: id}` map straight into the arena; a JSON array (Unigram's vocabulary) is skipped
/// and leaves `is_map` false.
#[derive(Default)]
pub(super) struct VocabField {
    pub(super) vocabulary: Vocabulary,
    pub(super) is_map: bool,
}

/// Appends one map key to the arena as it is read (borrowed or unescaped, never kept as a `String`).
struct ArenaKey<'v>(&'v mut String);

impl<'de> DeserializeSeed<'de> for ArenaKey<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl Visitor<'_> for ArenaKey<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a vocabulary token")
    }
    fn visit_str<E: serde::de::Error>(self, token: &str) -> Result<(), E> {
        self.0.push_str(token);
        Ok(())
    }
}

impl<'de> Deserialize<'de> for VocabField {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(VocabVisitor)
    }
}

struct VocabVisitor;

impl<'de> Visitor<'de> for VocabVisitor {
    type Value = VocabField;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a vocabulary map or list")
    }
    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<VocabField, M::Error> {
        let mut vocabulary = Vocabulary::default();
        let mut token = String::new();
        while map.next_key_seed(ArenaKey(&mut token))?.is_some() {
            let id: u32 = map.next_value()?;
            vocabulary
                .push(&token, id)
                .map_err(serde::de::Error::custom)?;
            token.clear();
        }
        Ok(VocabField {
            vocabulary,
            is_map: true,
        })
    }
    fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<VocabField, S::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(VocabField::default())
    }
}
