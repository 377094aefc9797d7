//! A deserializer over parsed JSON that refuses an array where an object
//! (struct) is expected.
//!
//! Serde's derived structs also accept a sequence of field values by
//! position, so `gateway: [18789]` would quietly set the port and a stray
//! array would produce a baffling error deep inside it. Reading through
//! this wrapper makes that "expected an object, got an array" at the right
//! path. Everything else is delegated to `serde_json::Value` unchanged.

use serde::de::{
    self, DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, SeqAccess, Unexpected,
    Visitor,
};
use serde::forward_to_deserialize_any;
use serde_json::{Map, Value};

type Error = serde_json::Error;

/// JSON that deserializes like `serde_json::Value`, minus arrays-as-structs.
pub(crate) struct Strict(pub Value);

fn unexpected(value: &Value) -> Unexpected<'_> {
    match value {
        Value::Null => Unexpected::Unit,
        Value::Bool(b) => Unexpected::Bool(*b),
        Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => Unexpected::Unsigned(u),
            (None, Some(i), _) => Unexpected::Signed(i),
            (_, _, f) => Unexpected::Float(f.unwrap_or(f64::NAN)),
        },
        Value::String(s) => Unexpected::Str(s),
        Value::Array(_) => Unexpected::Seq,
        Value::Object(_) => Unexpected::Map,
    }
}

impl<'de> Deserializer<'de> for Strict {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Array(items) => visitor.visit_seq(StrictSeq(items.into_iter())),
            Value::Object(map) => visitor.visit_map(StrictMap::new(map)),
            other => other.deserialize_any(visitor),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.0 {
            Value::Object(map) => visitor.visit_map(StrictMap::new(map)),
            other => Err(de::Error::invalid_type(unexpected(&other), &visitor)),
        }
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Object(map) => visitor.visit_map(StrictMap::new(map)),
            other => Err(de::Error::invalid_type(unexpected(&other), &visitor)),
        }
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Array(items) => visitor.visit_seq(StrictSeq(items.into_iter())),
            other => Err(de::Error::invalid_type(unexpected(&other), &visitor)),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            other => visitor.visit_some(Strict(other)),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.0.deserialize_enum(name, variants, visitor)
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct tuple tuple_struct identifier ignored_any
    }
}

struct StrictSeq(std::vec::IntoIter<Value>);

impl<'de> SeqAccess<'de> for StrictSeq {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        self.0
            .next()
            .map(|item| seed.deserialize(Strict(item)))
            .transpose()
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.0.len())
    }
}

struct StrictMap {
    entries: serde_json::map::IntoIter,
    value: Option<Value>,
}

impl StrictMap {
    fn new(map: Map<String, Value>) -> Self {
        StrictMap {
            entries: map.into_iter(),
            value: None,
        }
    }
}

impl<'de> MapAccess<'de> for StrictMap {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        match self.entries.next() {
            Some((key, value)) => {
                self.value = Some(value);
                let key: de::value::StringDeserializer<Error> = key.into_deserializer();
                seed.deserialize(key).map(Some)
            }
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        let value = self.value.take().unwrap_or(Value::Null);
        seed.deserialize(Strict(value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Inner {
        port: u16,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Outer {
        inner: Option<Inner>,
        list: Vec<u8>,
        raw: Value,
    }

    #[test]
    fn objects_lists_and_raw_values_read_as_usual() {
        let outer = Outer::deserialize(Strict(
            json!({"inner": {"port": 1}, "list": [1, 2], "raw": {"a": [null]}}),
        ))
        .expect("strict read");
        assert_eq!(outer.inner, Some(Inner { port: 1 }));
        assert_eq!(outer.list, vec![1, 2]);
        assert_eq!(outer.raw, json!({"a": [null]}));
    }

    #[test]
    fn array_in_place_of_a_struct_is_refused() {
        let err = Outer::deserialize(Strict(json!({"inner": [1], "list": [], "raw": null})))
            .expect_err("array struct");
        assert_eq!(
            err.to_string(),
            "invalid type: sequence, expected struct Inner"
        );
        assert!(
            Inner::deserialize(json!([1])).is_ok(),
            "plain serde_json accepts it, which is the point"
        );
    }
}
