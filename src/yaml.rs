//! YAML in and out: the manifests and cards users hand the offline commands (`render`,
//! `lint`), and what the operator prints (`crds`, `keygen --format secret`).
//!
//! Text goes through [`serde_saphyr`], the YAML crate `kube` itself uses (so the dependency
//! tree holds one YAML implementation, and no unmaintained or C-derived one): a pure-Rust
//! YAML 1.2 parser with serde support. Read with YAML 1.2's core schema (only `true`/`false`
//! are booleans: `yes`, `on` and `no` stay strings, as Kubernetes reads them), a duplicate
//! key refused with its place, and a budget on events, alias replays, nesting and size, so a
//! hostile document (a "billion laughs" of nested aliases, a deeply nested one) is a clear
//! error after bounded work instead of memory.

use serde::de::DeserializeOwned;
use serde::Serialize;

/// Why YAML could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum YamlError {
    /// The text is not YAML, breaks a rule (a duplicate key), exceeds the budget, or does
    /// not fit the type asked for; the message says where.
    #[error("{0}")]
    Read(#[from] serde_saphyr::Error),
    /// A value could not be written as YAML.
    #[error("writing YAML: {0}")]
    Write(#[from] serde_saphyr::SerializeError),
}

/// How user input is read: YAML 1.2 core schema booleans, numbers with a leading zero kept as
/// text, duplicate keys refused, the crate's default budget (a million events and alias replays, 64 levels of nesting, 250,000 nodes).
fn options() -> serde_saphyr::Options {
    let mut options = serde_saphyr::Options::default();
    options.duplicate_keys = serde_saphyr::DuplicateKeyPolicy::Error;
    options.strict_booleans = true;
    options.legacy_octal_numbers = false;
    // `010` stays the text it is (as serde_yaml read it), neither octal 8 nor a float.
    options.leading_zero_numbers_as_strings = true;
    options
}

/// Read one YAML document (JSON is YAML too) as `T`.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, YamlError> {
    Ok(serde_saphyr::from_str_with_options(text, options())?)
}

/// Read every document of a `---`-separated stream as `T`.
pub fn from_str_multiple<T: DeserializeOwned>(text: &str) -> Result<Vec<T>, YamlError> {
    Ok(serde_saphyr::from_multiple_with_options(text, options())?)
}

/// Write `value` as one YAML document.
pub fn to_string<T: Serialize>(value: &T) -> Result<String, YamlError> {
    Ok(serde_saphyr::to_string(value)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    #[test]
    fn yaml_1_2_scalars_and_round_trips() {
        let v: Value = from_str("a: yes\nb: on\nc: true\nd: 010\ne: '1.0'\nf: ~\n").unwrap();
        assert_eq!(
            v,
            json!({"a": "yes", "b": "on", "c": true, "d": "010", "e": "1.0", "f": null})
        );
        let written = to_string(&v).unwrap();
        assert_eq!(from_str::<Value>(&written).unwrap(), v, "{written}");
    }

    #[test]
    fn duplicate_keys_are_refused_with_their_place() {
        let err = from_str::<Value>("name: a\nskills: []\nname: b\n").unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("name") && text.to_lowercase().contains("duplicate"),
            "{text}"
        );
    }

    #[test]
    fn a_billion_laughs_is_an_error_not_memory() {
        let mut doc = String::from("a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
        for i in 1..10 {
            let prev = format!("*a{}", i - 1);
            let list = vec![prev; 10].join(", ");
            doc.push_str(&format!("a{i}: &a{i} [{list}]\n"));
        }
        let err = from_str::<Value>(&doc).unwrap_err();
        assert!(!err.to_string().is_empty());
        let deep = format!("{}1{}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(from_str::<Value>(&deep).is_err());
    }

    #[test]
    fn streams_read_every_document() {
        let docs: Vec<Value> = from_str_multiple("a: 1\n---\nb: 2\n").unwrap();
        assert_eq!(docs, [json!({"a": 1}), json!({"b": 2})]);
    }
}
