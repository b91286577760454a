//! The canonical form of a card: the exact bytes a signature covers.
//!
//! Byte-compatible with the official A2A SDKs (a2a-sdk, @a2a-js/sdk), which is what lets any
//! client verify our signatures:
//! 1. the typed card (ProtoJSON presence already applied by its serde attributes: plain
//!    scalars at their default are skipped, optional booleans keep an explicit `false`) is
//!    turned into a JSON value without `signatures`;
//! 2. empties (`""`, `null`, `[]`, `{}`) are removed recursively, including objects and arrays
//!    that become empty by that removal and inside free-form `params`;
//! 3. RFC 8785 (JCS) serialises the result: keys in UTF-16 code-unit order, ECMAScript number
//!    formatting (every number as a double), minimal string escapes.

use serde_json::Value;

use super::card::AgentCard;

/// The card as the JSON value that is canonicalised: no signatures, no empties.
pub fn signed_value(card: &AgentCard) -> Value {
    let mut value = to_value(card);
    if let Value::Object(map) = &mut value {
        map.remove("signatures");
    }
    prune_empties(&mut value);
    value
}

/// The canonical bytes of `card` (the JWS payload).
pub fn canonical_bytes(card: &AgentCard) -> Vec<u8> {
    jcs(&signed_value(card))
}

/// RFC 8785 serialisation of any JSON value.
pub fn jcs(value: &Value) -> Vec<u8> {
    // Serialising a `serde_json::Value` cannot fail: keys are strings, numbers are finite.
    serde_jcs::to_vec(value).unwrap_or_default()
}

/// The typed card as a JSON value (serialising the typed card cannot fail).
pub(crate) fn to_value(card: &AgentCard) -> Value {
    serde_json::to_value(card).unwrap_or(Value::Null)
}

/// Remove `""`, `null`, `[]` and `{}` recursively; returns whether `value` itself is empty now.
pub fn prune_empties(value: &mut Value) -> bool {
    match value {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(items) => {
            items.retain_mut(|v| !prune_empties(v));
            items.is_empty()
        }
        Value::Object(map) => {
            map.retain(|_, v| !prune_empties(v));
            map.is_empty()
        }
        Value::Bool(_) | Value::Number(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn canon(v: Value) -> String {
        String::from_utf8(jcs(&v)).unwrap()
    }

    #[test]
    fn numbers_print_as_ecmascript_doubles() {
        let v: Value = serde_json::from_str(
            r#"[1e21, 1e-7, 250.0, -0, -0.0, 9007199254740993, 123456789012345678901234567890, 0.1, 1e20, 5e-324]"#,
        )
        .unwrap();
        assert_eq!(
            canon(v),
            "[1e+21,1e-7,250,0,0,9007199254740992,1.2345678901234568e+29,0.1,100000000000000000000,5e-324]"
        );
    }

    #[test]
    fn keys_sort_by_utf16_code_units() {
        // U+1F600 is D83D DE00 in UTF-16, below U+FB00; by code point it would sort after.
        let v = json!({"\u{fb00}": 1, "\u{1F600}": 2, "a": 3, "B": 4});
        assert_eq!(canon(v), "{\"B\":4,\"a\":3,\"\u{1F600}\":2,\"\u{fb00}\":1}");
    }

    #[test]
    fn strings_escape_minimally() {
        let v = json!("a\u{7f}\u{8}\u{c}\n\r\t\"\\\u{1}\u{1f}/<>&é");
        assert_eq!(
            canon(v),
            "\"a\u{7f}\\b\\f\\n\\r\\t\\\"\\\\\\u0001\\u001f/<>&é\""
        );
    }

    #[test]
    fn empties_are_removed_recursively() {
        let mut v = json!({"a": "", "b": null, "c": [], "d": {}, "e": {"f": [{}, [], ""]}, "g": 0, "h": false, "i": [0, "", "x"]});
        prune_empties(&mut v);
        assert_eq!(v, json!({"g": 0, "h": false, "i": [0, "x"]}));
    }
}
