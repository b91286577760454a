//! Controller metrics (prometheus-client): reconciles, failures by bounded category and
//! reconcile durations, each by `controller` (`agentcard`, `agentdirectory`); cards by Ready
//! condition, status and reason; whether this replica leads; API requests by verb and resource.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// The `controller` label's value for the AgentCard controller.
pub const CARD_CONTROLLER: &str = "agentcard";
/// The `controller` label's value for the AgentDirectory controller.
pub const DIRECTORY_CONTROLLER: &str = "agentdirectory";

/// Which controller a reconcile metric counts.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    /// [`CARD_CONTROLLER`] or [`DIRECTORY_CONTROLLER`].
    pub controller: &'static str,
}

/// Failure labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    /// [`CARD_CONTROLLER`] or [`DIRECTORY_CONTROLLER`].
    pub controller: &'static str,
    /// [`super::Error::category`].
    pub category: &'static str,
}

/// A reconcile's duration histogram, its buckets fixed.
type Durations = Family<ControllerLabels, Histogram, fn() -> Histogram>;

fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 14))
}

/// Times one reconcile: observed in its controller's histogram when dropped.
pub struct ReconcileTimer {
    histogram: Histogram,
    started: std::time::Instant,
}

impl Drop for ReconcileTimer {
    fn drop(&mut self) {
        self.histogram.observe(self.started.elapsed().as_secs_f64());
    }
}

/// Cards-by-condition label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConditionLabels {
    /// Condition type.
    pub condition: &'static str,
    /// `True`, `False` or `Unknown`.
    pub status: &'static str,
    /// The condition's reason (`Published`, or [`super::Error::reason`]: a fixed set).
    pub reason: &'static str,
}

/// The reason of a Ready card.
pub const PUBLISHED: &str = "Published";

/// A card's Ready condition as the last reconcile left it: its status and reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReadyState {
    /// `True` or `False`.
    pub status: &'static str,
    /// `Published`, or the error's [`super::Error::reason`].
    pub reason: &'static str,
}

/// Signing-key label: where a key stands in the staged rotation.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KeyStageLabels {
    /// `signing` (cards are signed with it), `waiting` (published, signs once clients' cached
    /// JWKS have expired) or `published` (in the JWKS only).
    pub stage: &'static str,
}

/// Where the staged key rotation stands, as the JWKS publisher last wrote it: how many keys
/// are at each stage, and when a waiting key is due to sign (an alert fires when that time has
/// long passed and it still waits).
#[derive(Clone, Debug, Default)]
pub struct SigningGauges {
    /// Keys by stage.
    pub keys: Family<KeyStageLabels, Gauge>,
    /// Unix time at which the waiting active key starts signing; 0 while none waits.
    pub activates_at: Gauge,
}

impl SigningGauges {
    /// Record a publication: the keys that sign, those in the JWKS, and the waiting key's
    /// activation time.
    pub fn set(&self, signing: usize, published: usize, activates_at: Option<i64>) {
        let waiting = usize::from(activates_at.is_some());
        let only_published = published.saturating_sub(signing + waiting);
        for (stage, n) in [
            ("signing", signing),
            ("waiting", waiting),
            ("published", only_published),
        ] {
            self.keys
                .get_or_create(&KeyStageLabels { stage })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        self.activates_at.set(activates_at.unwrap_or(0));
    }
}

/// Labels of a directory's upstream (both named by the cluster-scoped AgentDirectory, which
/// only cluster admins write: bounded by them, never by a tenant).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamLabels {
    /// The AgentDirectory.
    pub directory: String,
    /// The upstream's name in its `spec.upstreams`.
    pub upstream: String,
}

/// The controller's metrics.
pub struct ControllerMetrics {
    /// Reconciles run, by controller.
    reconciles: Family<ControllerLabels, Counter>,
    /// Reconciles that failed, by controller and category.
    failures: Family<FailureLabels, Counter>,
    /// Reconcile duration in seconds, by controller.
    duration: Durations,
    /// Cards by condition, status and reason.
    pub cards: Family<ConditionLabels, Gauge>,
    /// 1 while this replica holds the lease (its controllers write), else 0.
    pub leader: Gauge,
    /// The staged key rotation, as the lease holder's JWKS publisher last wrote it.
    pub signing: SigningGauges,
    /// 1 when this replica's last refresh of a directory's upstream reached it, else 0 (every
    /// replica syncs upstreams: each says what it serves).
    upstreams: Family<UpstreamLabels, Gauge>,
    /// Requests to the API server, by verb and resource (see [`super::api_calls`]).
    pub api_calls: super::api_calls::ApiCalls,
    /// Events dropped because the queue to the Event writer was full.
    pub events_dropped: Counter,
    /// Ready state of each card this process reconciled while leading, feeding `cards` on
    /// scrape.
    ready: std::sync::Mutex<std::collections::HashMap<String, ReadyState>>,
    /// `Drifted` state of each card compared with its agent's own card, likewise.
    drift: std::sync::Mutex<std::collections::HashMap<String, ReadyState>>,
}

impl Default for ControllerMetrics {
    fn default() -> Self {
        ControllerMetrics {
            reconciles: Family::default(),
            failures: Family::default(),
            duration: Family::new_with_constructor(duration_histogram),
            cards: Family::default(),
            leader: Gauge::default(),
            signing: SigningGauges::default(),
            upstreams: Family::default(),
            api_calls: Family::default(),
            events_dropped: Counter::default(),
            ready: Default::default(),
            drift: Default::default(),
        }
    }
}

impl ControllerMetrics {
    /// Count a reconcile of `controller` starting; the returned timer observes its duration
    /// when dropped (whatever way the reconcile ends).
    pub fn reconcile_started(&self, controller: &'static str) -> ReconcileTimer {
        let labels = ControllerLabels { controller };
        self.reconciles.get_or_create(&labels).inc();
        ReconcileTimer {
            histogram: self.duration.get_or_create(&labels).clone(),
            started: std::time::Instant::now(),
        }
    }

    /// Count a failed reconcile of `controller`, by its error's bounded category.
    pub fn count_failure(&self, controller: &'static str, category: &'static str) {
        self.failures
            .get_or_create(&FailureLabels {
                controller,
                category,
            })
            .inc();
    }

    /// Record the Ready state of card `key`, or forget it (`None`).
    pub fn set_ready(&self, key: String, state: Option<ReadyState>) {
        let mut ready = crate::locks::lock(&self.ready);
        match state {
            Some(s) => ready.insert(key, s),
            None => ready.remove(&key),
        };
    }

    /// Record the `Drifted` condition of card `key`, or forget it (`None`: drift off, or the
    /// card gone).
    pub fn set_drift(&self, key: String, state: Option<ReadyState>) {
        let mut drift = crate::locks::lock(&self.drift);
        match state {
            Some(s) => drift.insert(key, s),
            None => drift.remove(&key),
        };
    }

    /// Say whether this replica leads. On losing the lease it forgets the cards' states: the
    /// new leader reports them, so a sum over replicas counts each card once.
    pub fn set_leading(&self, leading: bool) {
        self.leader.set(i64::from(leading));
        if !leading {
            crate::locks::lock(&self.ready).clear();
            crate::locks::lock(&self.drift).clear();
        }
    }

    /// Recompute the cards-by-condition gauges (called before each scrape): one series per
    /// state some card is in (a reason no card has any more drops out, so its alert resolves),
    /// and `Ready=True` always, 0 on a replica that does not lead; likewise `Drifted` for the
    /// cards compared with their agent's own card.
    pub fn refresh_cards(&self) {
        let mut counts: std::collections::HashMap<ReadyState, i64> =
            std::collections::HashMap::new();
        counts.insert(
            ReadyState {
                status: "True",
                reason: PUBLISHED,
            },
            0,
        );
        for s in crate::locks::lock(&self.ready).values() {
            *counts.entry(*s).or_default() += 1;
        }
        self.cards.clear();
        for (state, n) in counts {
            self.cards
                .get_or_create(&ConditionLabels {
                    condition: "Ready",
                    status: state.status,
                    reason: state.reason,
                })
                .set(n);
        }
        let mut drifted: std::collections::HashMap<ReadyState, i64> =
            std::collections::HashMap::new();
        for s in crate::locks::lock(&self.drift).values() {
            *drifted.entry(*s).or_default() += 1;
        }
        for (state, n) in drifted {
            self.cards
                .get_or_create(&ConditionLabels {
                    condition: "Drifted",
                    status: state.status,
                    reason: state.reason,
                })
                .set(n);
        }
    }

    /// Recompute the upstream gauges from `reachability` (called before each scrape), so an
    /// upstream no longer in any spec drops out.
    pub fn refresh_upstreams(&self, reachability: Vec<(String, String, bool)>) {
        self.upstreams.clear();
        for (directory, upstream, up) in reachability {
            self.upstreams
                .get_or_create(&UpstreamLabels {
                    directory,
                    upstream,
                })
                .set(i64::from(up));
        }
    }

    /// Register in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "agentcard_reconciles",
            "Reconciles, by controller (agentcard, agentdirectory)",
            self.reconciles.clone(),
        );
        registry.register(
            "agentcard_reconcile_failures",
            "Failed reconciles, by controller and category",
            self.failures.clone(),
        );
        registry.register(
            "agentcard_reconcile_duration_seconds",
            "Reconcile duration, by controller",
            self.duration.clone(),
        );
        registry.register(
            "agentcard_cards",
            "AgentCards by condition and status",
            self.cards.clone(),
        );
        registry.register(
            "agentcard_api_requests",
            "Requests this process sent to the API server, by verb and resource",
            self.api_calls.clone(),
        );
        registry.register(
            "agentcard_leader",
            "1 while this replica holds the lease and its controllers write, else 0",
            self.leader.clone(),
        );
        registry.register(
            "agentcard_signing_keys",
            "Signing keys by stage of the staged rotation (signing, waiting, published)",
            self.signing.keys.clone(),
        );
        registry.register(
            "agentcard_signing_key_activation_timestamp_seconds",
            "Unix time at which the waiting active signing key starts signing (0: none waits)",
            self.signing.activates_at.clone(),
        );
        registry.register(
            "agentcard_directory_upstream_up",
            "1 when this replica's last refresh of a directory's upstream reached it, else 0",
            self.upstreams.clone(),
        );
        registry.register(
            "agentcard_events_dropped",
            "Kubernetes Events dropped because the queue to the Event writer was full",
            self.events_dropped.clone(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrape(m: &ControllerMetrics) -> String {
        let mut registry = Registry::default();
        m.register(&mut registry);
        m.refresh_cards();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        text
    }

    #[test]
    fn cards_are_counted_by_reason_and_forgotten_when_the_lease_goes() {
        let m = ControllerMetrics::default();
        m.set_leading(true);
        let failed = |reason| {
            Some(ReadyState {
                status: "False",
                reason,
            })
        };
        m.set_ready("a/x".into(), failed("HostConflict"));
        m.set_ready("a/y".into(), failed("HostConflict"));
        m.set_ready("b/z".into(), failed("InvalidSpec"));
        let text = scrape(&m);
        for line in [
            r#"agentcard_cards{condition="Ready",status="False",reason="HostConflict"} 2"#,
            r#"agentcard_cards{condition="Ready",status="False",reason="InvalidSpec"} 1"#,
            r#"agentcard_cards{condition="Ready",status="True",reason="Published"} 0"#,
            "agentcard_leader 1",
        ] {
            assert!(text.contains(line), "{line} missing:\n{text}");
        }
        // A card fixed: its reason's series goes, so the alert on it resolves.
        m.set_ready(
            "b/z".into(),
            Some(ReadyState {
                status: "True",
                reason: PUBLISHED,
            }),
        );
        let text = scrape(&m);
        assert!(!text.contains("InvalidSpec"), "{text}");
        assert!(
            text.contains(r#"status="True",reason="Published"} 1"#),
            "{text}"
        );
        // Another replica leads now: this one counts nothing, so a sum over replicas is right.
        m.set_leading(false);
        let text = scrape(&m);
        assert!(!text.contains("HostConflict"), "{text}");
        assert!(text.contains("agentcard_leader 0"), "{text}");
    }

    #[test]
    fn signing_stages_and_the_activation_time_are_reported() {
        let m = ControllerMetrics::default();
        m.signing.set(1, 3, Some(1_700_000_000));
        let text = scrape(&m);
        for line in [
            r#"agentcard_signing_keys{stage="signing"} 1"#,
            r#"agentcard_signing_keys{stage="waiting"} 1"#,
            r#"agentcard_signing_keys{stage="published"} 1"#,
            "agentcard_signing_key_activation_timestamp_seconds 1700000000",
        ] {
            assert!(text.contains(line), "{line} missing:\n{text}");
        }
        m.signing.set(2, 2, None);
        let text = scrape(&m);
        assert!(
            text.contains(r#"agentcard_signing_keys{stage="waiting"} 0"#),
            "{text}"
        );
        assert!(
            text.contains("agentcard_signing_key_activation_timestamp_seconds 0"),
            "{text}"
        );
    }
}
