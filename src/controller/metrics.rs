//! Controller metrics (prometheus-client): reconciles, failures by bounded category and
//! reconcile durations, each by `controller` (`agentcard`, `agentdirectory`); cards by Ready
//! condition; API requests by verb and resource.

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
}

/// The controller's metrics.
pub struct ControllerMetrics {
    /// Reconciles run, by controller.
    reconciles: Family<ControllerLabels, Counter>,
    /// Reconciles that failed, by controller and category.
    failures: Family<FailureLabels, Counter>,
    /// Reconcile duration in seconds, by controller.
    duration: Durations,
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
            reconciles: Family::default(),
            failures: Family::default(),
            duration: Family::new_with_constructor(duration_histogram),
            cards: Family::default(),
            api_calls: Family::default(),
            events_dropped: Counter::default(),
            ready: Default::default(),
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
            "agentcard_events_dropped",
            "Kubernetes Events dropped because the queue to the Event writer was full",
            self.events_dropped.clone(),
        );
    }
}
