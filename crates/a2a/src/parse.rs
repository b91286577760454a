//! From JSON to an [`AgentCard`], with every unknown field and type error named by its path.
//!
//! Cards arrive from two kinds of authors. A user's own card (a manifest, a file given to
//! `render`) is parsed [`Strictness::Strict`]: an unknown field is almost always a typo or a
//! v0.3 name, and publishing without it would silently lose data, so it is an error. A card
//! someone else signed (given to `verify`) is parsed [`Strictness::Lenient`], as A2A readers
//! SHOULD: unknown fields are dropped, which is also what the official SDKs do before they
//! compute the canonical form a signature covers.

use serde_json::Value;

use super::card::AgentCard;
use super::report::{PathBuf, Problem, Problems};

/// Whether unknown fields are errors or dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strictness {
    /// Unknown fields are errors (cards users write).
    Strict,
    /// Unknown fields are dropped (cards others signed).
    Lenient,
}

/// A parsed card and the paths of the fields it dropped (lenient mode).
#[derive(Clone, Debug)]
pub struct Parsed {
    /// The card.
    pub card: AgentCard,
    /// Paths of fields that are not part of the A2A v1.0 card.
    pub unknown_fields: Vec<String>,
}

/// Parse a card from a JSON value.
pub fn card_from_value(value: &Value, strictness: Strictness) -> Result<Parsed, Problems> {
    if !value.is_object() {
        return Err(Problems(vec![Problem::error(
            "",
            format!("an Agent Card must be a JSON object, found {}", kind(value)),
        )]));
    }
    let mut unknown = Vec::new();
    let mut on_unknown = |p: serde_ignored::Path<'_>| unknown.push(ignored_path(&p));
    let ignored = serde_ignored::Deserializer::new(value, &mut on_unknown);
    let card = match serde_path_to_error::deserialize::<_, AgentCard>(ignored) {
        Ok(card) => card,
        Err(e) => {
            let path = typed_path(e.path());
            return Err(Problems(vec![Problem::error(path, e.inner().to_string())]));
        }
    };
    if strictness == Strictness::Strict && !unknown.is_empty() {
        return Err(Problems(
            unknown
                .into_iter()
                .map(|p| Problem::error(p, "unknown field (not part of the A2A v1.0 Agent Card)"))
                .collect(),
        ));
    }
    Ok(Parsed {
        card,
        unknown_fields: unknown,
    })
}

/// Parse a card from JSON text.
pub fn card_from_slice(bytes: &[u8], strictness: Strictness) -> Result<Parsed, Problems> {
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| Problems(vec![Problem::error("", format!("not valid JSON: {e}"))]))?;
    card_from_value(&value, strictness)
}

impl AgentCard {
    /// Parse a card some other party signed: unknown fields are dropped, as A2A readers do.
    pub fn from_json_lenient(bytes: &[u8]) -> Result<AgentCard, Problems> {
        card_from_slice(bytes, Strictness::Lenient).map(|p| p.card)
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn typed_path(path: &serde_path_to_error::Path) -> String {
    let mut out = PathBuf::default();
    for seg in path.iter() {
        out = match seg {
            serde_path_to_error::Segment::Seq { index } => out.index(*index),
            serde_path_to_error::Segment::Map { key } => out.field(key),
            serde_path_to_error::Segment::Enum { variant } => out.field(variant),
            serde_path_to_error::Segment::Unknown => out.field("?"),
        };
    }
    out.as_str().to_string()
}

fn ignored_path(path: &serde_ignored::Path<'_>) -> String {
    fn walk(path: &serde_ignored::Path<'_>) -> PathBuf {
        match path {
            serde_ignored::Path::Root => PathBuf::default(),
            serde_ignored::Path::Seq { parent, index } => walk(parent).index(*index),
            serde_ignored::Path::Map { parent, key } => walk(parent).field(key),
            serde_ignored::Path::Some { parent }
            | serde_ignored::Path::NewtypeStruct { parent }
            | serde_ignored::Path::NewtypeVariant { parent } => walk(parent),
        }
    }
    walk(path).as_str().to_string()
}
