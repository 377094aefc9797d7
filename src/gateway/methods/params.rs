//! Reading method params with errors that name the field, as
//! `invalid <method> params: <field> …`.

use serde_json::{Map, Value};

use crate::gateway::frames::ErrorShape;

/// A view over one method's params object.
pub struct Params<'a> {
    method: &'a str,
    obj: Option<&'a Map<String, Value>>,
}

impl<'a> Params<'a> {
    /// `params` must be an object or absent.
    pub fn new(method: &'a str, params: &'a Value) -> Result<Self, ErrorShape> {
        match params {
            Value::Null => Ok(Params { method, obj: None }),
            Value::Object(obj) => Ok(Params {
                method,
                obj: Some(obj),
            }),
            _ => Err(ErrorShape::invalid(format!(
                "invalid {method} params: params must be an object"
            ))),
        }
    }

    fn error(&self, message: String) -> ErrorShape {
        ErrorShape::invalid(format!("invalid {} params: {message}", self.method))
    }

    pub fn raw(&self, name: &str) -> Option<&'a Value> {
        self.obj.and_then(|o| o.get(name)).filter(|v| !v.is_null())
    }

    pub fn opt_str(&self, name: &str) -> Result<Option<&'a str>, ErrorShape> {
        match self.raw(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.as_str())),
            Some(_) => Err(self.error(format!("{name} must be a string"))),
        }
    }

    /// A required string; `allow_empty` for fields like `chat.send.message`.
    pub fn str(&self, name: &str, allow_empty: bool) -> Result<&'a str, ErrorShape> {
        match self.opt_str(name)? {
            Some(s) if allow_empty || !s.trim().is_empty() => Ok(s),
            Some(_) => Err(self.error(format!("{name} must be a non-empty string"))),
            None => Err(self.error(format!("{name} is required"))),
        }
    }

    pub fn opt_u64(&self, name: &str, min: u64, max: u64) -> Result<Option<u64>, ErrorShape> {
        match self.raw(name) {
            None => Ok(None),
            Some(Value::Number(n)) => match n.as_u64() {
                Some(v) if (min..=max).contains(&v) => Ok(Some(v)),
                _ => Err(self.error(format!("{name} must be an integer from {min} to {max}"))),
            },
            Some(_) => Err(self.error(format!("{name} must be an integer from {min} to {max}"))),
        }
    }

    pub fn opt_bool(&self, name: &str) -> Result<Option<bool>, ErrorShape> {
        match self.raw(name) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(_) => Err(self.error(format!("{name} must be a boolean"))),
        }
    }

    /// Whether the field is present with an explicit `null` (clear it).
    pub fn is_null(&self, name: &str) -> bool {
        self.obj
            .and_then(|o| o.get(name))
            .is_some_and(Value::is_null)
    }

    pub fn has(&self, name: &str) -> bool {
        self.obj.is_some_and(|o| o.contains_key(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn errors_name_method_and_field() {
        let value = json!({"limit": 0, "key": 5});
        let p = Params::new("chat.history", &value).expect("object");
        assert_eq!(
            p.opt_u64("limit", 1, 1000).expect_err("range").message,
            "invalid chat.history params: limit must be an integer from 1 to 1000"
        );
        assert_eq!(
            p.str("sessionKey", false).expect_err("missing").message,
            "invalid chat.history params: sessionKey is required"
        );
        assert!(p.opt_str("key").is_err());
        assert!(Params::new("x", &json!([1])).is_err());
    }
}
