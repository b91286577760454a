//! Controller metrics (prometheus-client): reconciles, failures by bounded category,
//! reconcile duration, cards by Ready condition, API requests by verb and resource.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// Failure label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    /// [`super::Error::category`].
    pub category: &'static str,
}

/// Cards-by-condition label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConditionLabels {
    /// Condition type.
    pub condition: &'static str,
    /// `True`, `False` or `Unknown`.
    pub status: &'static str,
}

/// The controller's metrics.
pub struct ControllerMetrics {
    /// Reconciles run.
    pub reconciles: Counter,
    /// Reconciles that failed, by category.
    pub failures: Family<FailureLabels, Counter>,
    /// Reconcile duration in seconds.
    pub duration: Histogram,
    /// Cards by condition and status.
    pub cards: Family<ConditionLabels, Gauge>,
    /// Requests to the API server, by verb and resource (see [`super::api_calls`]).
    pub api_calls: super::api_calls::ApiCalls,
    /// Events dropped because the queue to the Event writer was full.
    pub events_dropped: Counter,
    /// Ready status of each card this process reconciled, feeding `cards` on scrape.
    ready: std::sync::Mutex<std::collections::HashMap<String, &'static str>>,
}

impl Default for ControllerMetrics {
    fn default() -> Self {
        ControllerMetrics {
            reconciles: Counter::default(),
            failures: Family::default(),
            duration: Histogram::new(exponential_buckets(0.001, 2.0, 14)),
            cards: Family::default(),
            api_calls: Family::default(),
            events_dropped: Counter::default(),
            ready: Default::default(),
        }
    }
}

impl ControllerMetrics {
    /// Record the Ready status (`True`/`False`) of card `key`, or forget it (`None`).
    pub fn set_ready(&self, key: String, status: Option<&'static str>) {
        let mut ready = crate::locks::lock(&self.ready);
        match status {
            Some(s) => ready.insert(key, s),
            None => ready.remove(&key),
        };
    }

    /// Recompute the cards-by-condition gauges (called before each scrape).
    pub fn refresh_cards(&self) {
        let ready = crate::locks::lock(&self.ready);
        for status in ["True", "False"] {
            let n = ready.values().filter(|s| **s == status).count();
            self.cards
                .get_or_create(&ConditionLabels {
                    condition: "Ready",
                    status,
                })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// Register in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "agentcard_reconciles",
            "AgentCard reconciles",
            self.reconciles.clone(),
        );
        registry.register(
            "agentcard_reconcile_failures",
            "Failed AgentCard reconciles by category",
            self.failures.clone(),
        );
        registry.register(
            "agentcard_reconcile_duration_seconds",
            "AgentCard reconcile duration",
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
            "agentcard_events_dropped",
            "Kubernetes Events dropped because the queue to the Event writer was full",
            self.events_dropped.clone(),
        );
    }
}
