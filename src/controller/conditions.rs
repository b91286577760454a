//! Status conditions as both controllers write them: each carries the generation it
//! describes, and keeps its transition time while its status stays the same.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::crd::CardCondition;

/// Condition type: the card (or directory) is served as specified.
pub const READY: &str = "Ready";
/// Condition type: the Gateways accepted the HTTPRoutes (HTTPRoute routing only).
pub const ROUTED: &str = "Routed";
/// Condition type: every upstream of a directory answered at its last refresh.
pub const UPSTREAMS_READY: &str = "UpstreamsReady";

/// A status condition as a status holds it: Kubernetes' own `Condition` (directories), or
/// an AgentCard's [`CardCondition`], whose words point at a static vocabulary. Each is made
/// directly, with no copy of the other kind in between (this runs on every reconcile).
pub trait StatusCondition: Sized {
    /// The condition's type.
    fn kind(&self) -> &str;
    /// `True`, `False` or `Unknown`.
    fn state(&self) -> &str;
    /// When the status last changed.
    fn since(&self) -> &Time;
    /// A condition of these fields.
    fn make(
        type_: &str,
        status: &str,
        reason: &str,
        message: String,
        observed_generation: Option<i64>,
        last_transition_time: Time,
    ) -> Self;
}

/// Both condition kinds name their fields alike; only the strings' types differ.
macro_rules! status_condition {
    ($($kind:ty),*) => {$(
        impl StatusCondition for $kind {
            fn kind(&self) -> &str {
                &self.type_
            }

            fn state(&self) -> &str {
                &self.status
            }

            fn since(&self) -> &Time {
                &self.last_transition_time
            }

            fn make(
                type_: &str,
                status: &str,
                reason: &str,
                message: String,
                observed_generation: Option<i64>,
                last_transition_time: Time,
            ) -> Self {
                Self {
                    type_: type_.into(),
                    status: status.into(),
                    reason: reason.into(),
                    message,
                    observed_generation,
                    last_transition_time,
                }
            }
        }
    )*};
}

status_condition!(Condition, CardCondition);

/// Condition `type_` True (`ok`) or False, keeping its transition time from `prev` when its
/// status did not change.
pub fn condition<C: StatusCondition>(
    prev: &[C],
    type_: &str,
    ok: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: &Time,
) -> C {
    let status = if ok { "True" } else { "False" };
    condition_with(prev, type_, status, reason, message, generation, now)
}

/// Condition `type_` with `status` (True, False or Unknown), keeping its transition time from
/// `prev` when its status did not change.
pub fn condition_with<C: StatusCondition>(
    prev: &[C],
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: &Time,
) -> C {
    let since = prev
        .iter()
        .find(|c| c.kind() == type_ && c.state() == status)
        .map_or_else(|| now.clone(), |c| c.since().clone());
    C::make(type_, status, reason, message, generation, since)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_condition_keeps_its_transition_time_while_its_status_stays() {
        let t0 = Time("2026-01-01T00:00:00Z".parse().unwrap());
        let t1 = Time("2026-01-02T00:00:00Z".parse().unwrap());
        let first: CardCondition =
            condition(&[], READY, true, "Published", "a".into(), Some(1), &t0);
        assert_eq!(first.last_transition_time, t0);
        let same = condition(
            std::slice::from_ref(&first),
            READY,
            true,
            "Published",
            "b".into(),
            Some(2),
            &t1,
        );
        assert_eq!(same.last_transition_time, t0);
        assert_eq!(same.observed_generation, Some(2));
        let flipped = condition(&[first], READY, false, "Invalid", "c".into(), Some(2), &t1);
        assert_eq!(flipped.last_transition_time, t1);
        assert_eq!(flipped.status, "False");
    }
}
