//! Serde helpers for the value shapes OpenClaw's schema allows that plain
//! derives cannot express with good errors: ports, sender ids written as
//! numbers or strings, sizes and durations written as numbers or text.
//!
//! Every helper goes through the deserializer it is handed (never through an
//! intermediate `serde_json::Value`), so `serde_path_to_error` still sees the
//! full JSON path of a bad value.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

/// A TCP port; the error says "expected a 16-bit port number".
pub fn port<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u16, D::Error> {
    deserializer.deserialize_u16(PortVisitor)
}

/// An optional TCP port (`null` or absent → `None`).
pub fn opt_port<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u16>, D::Error> {
    deserializer.deserialize_option(OptionOf(PortVisitor))
}

#[derive(Clone, Copy)]
struct PortVisitor;

impl Visitor<'_> for PortVisitor {
    type Value = u16;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a 16-bit port number")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u16, E> {
        u16::try_from(v).map_err(|_| E::invalid_value(de::Unexpected::Unsigned(v), &self))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<u16, E> {
        u16::try_from(v).map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<u16, E> {
        Err(E::invalid_value(de::Unexpected::Float(v), &self))
    }
}

/// Text that upstream also accepts as a plain number (`pruneAfter: 30`,
/// `maxDiskBytes: 1048576`, sender ids): numbers become their decimal text.
#[derive(Clone, Copy)]
struct TextOrNumberVisitor(&'static str);

impl Visitor<'_> for TextOrNumberVisitor {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.0)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
        Ok(v.to_string())
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<String, E> {
        Ok(v)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<String, E> {
        Ok(v.to_string())
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<String, E> {
        Ok(v.to_string())
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<String, E> {
        if v.is_finite() && v.fract() == 0.0 && v.abs() < 1e15 {
            Ok(format!("{v:.0}"))
        } else {
            Ok(v.to_string())
        }
    }
}

/// Optional duration or size text, also accepting a bare number.
pub fn opt_text_or_number<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<String>, D::Error> {
    deserializer.deserialize_option(OptionOf(TextOrNumberVisitor("a string or a number")))
}

/// A sender/chat id written either as a string or a number.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Id(String);

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_any(TextOrNumberVisitor("an id (string or number)"))
            .map(Id)
    }
}

/// A list of ids (`[123, "tg:456", "*"]`) as strings.
pub fn id_list<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    let ids: Vec<Id> = Vec::deserialize(deserializer)?;
    Ok(ids.into_iter().map(|id| id.0).collect())
}

/// An optional list of ids; `None` when absent, so account overrides can
/// tell "not set" from "set to empty".
pub fn opt_id_list<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Vec<String>>, D::Error> {
    let ids: Option<Vec<Id>> = Option::deserialize(deserializer)?;
    Ok(ids.map(|ids| ids.into_iter().map(|id| id.0).collect()))
}

/// A map from channel/provider name to a list of ids.
pub fn id_list_map<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<std::collections::BTreeMap<String, Vec<String>>, D::Error> {
    let map: std::collections::BTreeMap<String, Vec<Id>> = Deserialize::deserialize(deserializer)?;
    Ok(map
        .into_iter()
        .map(|(key, ids)| (key, ids.into_iter().map(|id| id.0).collect()))
        .collect())
}

/// An optional single id written as a string or a number.
pub fn opt_id<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    let id: Option<Id> = Option::deserialize(deserializer)?;
    Ok(id.map(|id| id.0))
}

/// Wraps a visitor so `null`/absent reads as `None`.
struct OptionOf<V>(V);

impl<'de, V: Visitor<'de> + Copy> Visitor<'de> for OptionOf<V> {
    type Value = Option<V::Value>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.0.expecting(f)
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self.0).map(Some)
    }
}
