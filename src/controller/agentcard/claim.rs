//! Claim: the card takes its route (host + path prefix) in the claims table before anything
//! is built, or learns which card or directory holds an overlapping one (`HostConflict`).

use kube::ResourceExt;

use super::card::prefix;
use crate::controller::error::Error;
use crate::controller::routes::ownership::Ownership;
use crate::controller::routes::table::Claim;
use crate::crd::AgentCard;

/// The claim `card` asks for, from `now` on (an existing claim keeps its own time).
pub fn wanted(card: &AgentCard, now: jiff::Timestamp) -> Claim {
    Claim {
        host: card.spec.publish.host.to_ascii_lowercase(),
        prefix: prefix(card),
        namespace: card.namespace().unwrap_or_default(),
        name: card.name_any(),
        uid: card.uid().unwrap_or_default(),
        since: now,
        whole_host: false,
    }
}

/// The claim stage: `card`'s claim as held (since when), or the conflict.
pub fn take(card: &AgentCard, ownership: &Ownership, now: jiff::Timestamp) -> Result<Claim, Error> {
    ownership.acquire(wanted(card, now))
}
