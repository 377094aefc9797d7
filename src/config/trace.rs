//! Every key path the schema accepts, found by deserializing [`Config`]
//! from a tracing deserializer instead of a file.
//!
//! The tracer answers each request of the derived `Deserialize` impls the
//! way the loader would, with one sample: a struct yields each of its field
//! names, an option is present, a map has one entry named `*`, a list one
//! element (`[]`), an enum its first variant, a scalar a neutral value. The
//! paths where a value ends are recorded. So the list comes from the types
//! the loader uses and cannot drift from them; `config keys` and the
//! register's test both read it. This file never reads files or the
//! environment.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::fmt::Write as _;

use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, Expected, IntoDeserializer, MapAccess,
    SeqAccess, VariantAccess, Visitor,
};
use serde::Deserialize;

use super::Config;

type Error = de::value::Error;

/// The key paths [`Config`] accepts, sorted. Map entries are written `*`
/// (`models.providers.*.baseUrl`), list elements `[]`
/// (`agents.list[].id`); a list or map of plain values is one key.
pub fn accepted_keys() -> Result<Vec<String>, String> {
    let found = RefCell::new(BTreeSet::new());
    Config::deserialize(Tracer {
        path: String::new(),
        found: &found,
    })
    .map_err(|err| format!("tracing the config schema failed: {err}"))?;
    Ok(found.into_inner().into_iter().collect())
}

/// A leaf path as the register writes it: a trailing `[]` or `.*` of a
/// list or map of plain values belongs to the key holding it.
fn leaf_key(path: &str) -> &str {
    let mut key = path;
    loop {
        match key.strip_suffix("[]").or_else(|| key.strip_suffix(".*")) {
            Some(shorter) => key = shorter,
            None => return key,
        }
    }
}

struct Tracer<'a> {
    path: String,
    found: &'a RefCell<BTreeSet<String>>,
}

impl<'a> Tracer<'a> {
    fn record(&self) {
        let key = leaf_key(&self.path);
        if !key.is_empty() {
            self.found.borrow_mut().insert(key.to_string());
        }
    }

    fn child(&self, segment: &str) -> Tracer<'a> {
        let path = if self.path.is_empty() {
            segment.to_string()
        } else {
            format!("{}.{segment}", self.path)
        };
        Tracer {
            path,
            found: self.found,
        }
    }

    fn element(&self) -> Tracer<'a> {
        Tracer {
            path: format!("{}[]", self.path),
            found: self.found,
        }
    }
}

/// What a hand-written visitor asks for, from its `expecting` text: the
/// custom visitors in `schema/` accept numbers, booleans or text, and this
/// picks one they take.
fn expecting(visitor: &dyn Expected) -> String {
    let mut text = String::new();
    let _ = write!(text, "{visitor}");
    text
}

impl<'de, 'a> Deserializer<'de> for Tracer<'a> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.record();
        let wanted = expecting(&visitor);
        if wanted.contains("number") {
            visitor.visit_u64(1)
        } else if wanted.contains("object") {
            // A value written as text or an object: the object's own keys
            // are not visible from here, so the whole value is one key.
            visitor.visit_map(Fields {
                names: &[],
                parent: self,
            })
        } else if wanted.starts_with("true") || wanted.ends_with("or false") {
            visitor.visit_bool(false)
        } else {
            visitor.visit_str("1")
        }
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.record();
        visitor.visit_bool(false)
    }

    fn deserialize_i64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.record();
        visitor.visit_i64(1)
    }

    fn deserialize_u64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.record();
        visitor.visit_u64(1)
    }

    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.record();
        visitor.visit_f64(0.5)
    }

    fn deserialize_i8<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_i64(visitor)
    }

    fn deserialize_i16<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_i64(visitor)
    }

    fn deserialize_i32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_i64(visitor)
    }

    fn deserialize_u8<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_u64(visitor)
    }

    fn deserialize_u16<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_u64(visitor)
    }

    fn deserialize_u32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_u64(visitor)
    }

    fn deserialize_f32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_f64(visitor)
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_str(visitor)
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.record();
        visitor.visit_str("1")
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_some(self)
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.record();
        visitor.visit_unit()
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_seq(OneElement(Some(self.element())))
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_map(Fields {
            names: &["*"],
            parent: self,
        })
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_map(Fields {
            names: fields,
            parent: self,
        })
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.record();
        let first = variants.first().copied().unwrap_or_default();
        visitor.visit_enum(FirstVariant(first))
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_unit()
    }

    serde::forward_to_deserialize_any! {
        i128 u128 char bytes byte_buf
        unit_struct tuple tuple_struct identifier
    }
}

/// A struct's fields (or a map's one `*` entry), each traced once.
struct Fields<'a> {
    names: &'static [&'static str],
    parent: Tracer<'a>,
}

impl<'de> MapAccess<'de> for Fields<'_> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        let Some(name) = self.names.first() else {
            return Ok(None);
        };
        seed.deserialize((*name).into_deserializer()).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        let (name, rest) = self
            .names
            .split_first()
            .ok_or_else(|| de::Error::custom("value asked before its key"))?;
        self.names = rest;
        seed.deserialize(self.parent.child(name))
    }
}

struct OneElement<'a>(Option<Tracer<'a>>);

impl<'de> SeqAccess<'de> for OneElement<'_> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        self.0
            .take()
            .map(|tracer| seed.deserialize(tracer))
            .transpose()
    }
}

/// An enum read as its first (unit) variant.
struct FirstVariant(&'static str);

impl<'de> EnumAccess<'de> for FirstVariant {
    type Error = Error;
    type Variant = Self;

    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Result<(V::Value, Self), Error> {
        let variant = seed.deserialize(self.0.into_deserializer())?;
        Ok((variant, self))
    }
}

impl<'de> VariantAccess<'de> for FirstVariant {
    type Error = Error;

    fn unit_variant(self) -> Result<(), Error> {
        Ok(())
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, _seed: T) -> Result<T::Value, Error> {
        Err(de::Error::custom(format!(
            "variant {} carries data",
            self.0
        )))
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, _visitor: V) -> Result<V::Value, Error> {
        Err(de::Error::custom(format!(
            "variant {} carries data",
            self.0
        )))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Error> {
        Err(de::Error::custom(format!(
            "variant {} carries data",
            self.0
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_reaches_nested_struct_map_and_list_keys() {
        let keys = accepted_keys().expect("schema traces");
        for key in [
            "gateway.port",
            "agents.list[].id",
            "models.providers.*.baseUrl",
            "bindings[].agentId",
        ] {
            assert!(keys.iter().any(|k| k == key), "{key} missing from {keys:?}");
        }
        assert!(!keys.iter().any(|k| k.ends_with("[]") || k.ends_with(".*")));
    }

    #[test]
    fn leaf_key_folds_plain_lists_and_maps_into_their_key() {
        assert_eq!(
            leaf_key("agents.defaults.skills[]"),
            "agents.defaults.skills"
        );
        assert_eq!(
            leaf_key("tools.elevated.allowFrom.*[]"),
            "tools.elevated.allowFrom"
        );
        assert_eq!(leaf_key("agents.list[].id"), "agents.list[].id");
    }
}
