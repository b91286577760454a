//! The bytes a signed card is published as.
//!
//! Published bytes are the signed card without empties (but with the REQUIRED `capabilities`
//! object, even when empty), serialised with JCS: deterministic,
//! so the same card and signatures always give the same bytes and the same ETag on every
//! replica, and a reader's canonicalisation of them reproduces the signed payload.

use serde_json::Value;

use super::canonical::{jcs, prune_empties, to_value};
use super::card::AgentCard;
use super::compat::{add_v03_fields, CompatError};

/// Options for what is published beside the v1.0 card.
#[derive(Clone, Copy, Debug, Default)]
pub struct PublishOptions {
    /// Add the v0.3 fields for older clients (see [`super::compat`]).
    pub v03_compat: bool,
}

/// The published JSON value of a signed card.
pub fn published_value(signed: &AgentCard, opts: PublishOptions) -> Result<Value, CompatError> {
    let mut value = to_value(signed);
    prune_empties(&mut value);
    if let Value::Object(map) = &mut value {
        // REQUIRED even when it says nothing: clients reject a card without it.
        map.entry("capabilities")
            .or_insert_with(|| Value::Object(Default::default()));
    }
    if opts.v03_compat {
        if let Value::Object(map) = &mut value {
            add_v03_fields(signed, map)?;
        }
    }
    Ok(value)
}

/// The published bytes of a signed card (JCS, no trailing newline).
pub fn published_bytes(signed: &AgentCard, opts: PublishOptions) -> Result<Vec<u8>, CompatError> {
    published_value(signed, opts).map(|v| jcs(&v))
}
