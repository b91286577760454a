//! What every reconcile shares: the client, the Event recorder and metrics, the operator's
//! settings, the stores both controllers read, and one handle per concern of the controllers'
//! state (routes, keys, writes, limits, retries, imported cards). A pipeline stage is handed
//! the parts it uses, not the whole context.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Namespace;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};

use super::agentcard::source::Sources;
use super::backoff::Backoff;
use super::config::Settings;
use super::events::Events;
use super::limits::Limits;
use super::metrics::ControllerMetrics;
use super::ownership::Ownership;
use super::signing::Signing;
use super::watches::CardIndex;
use super::written::Written;
use crate::crd::{AgentCard, AgentDirectory};

/// Shared by every reconcile (see the module doc).
pub struct Context {
    /// API client.
    pub client: Client,
    /// Event publisher (kube's recorder, its memory bounded).
    pub recorder: Arc<Events>,
    /// Controller metrics.
    pub metrics: Arc<ControllerMetrics>,
    /// Operator settings.
    pub settings: Settings,
    /// Operator-wide allowed host patterns.
    pub allowed_hosts: Vec<String>,
    /// Every AgentCard (compacted, see [`crate::store::compact_card`]); the card and directory
    /// controllers read the same store.
    pub cards: Store<AgentCard>,
    /// The cards by host and namespace, in step with `cards`.
    pub index: Arc<Mutex<CardIndex>>,
    /// Every Namespace (allowed-hosts annotations, directory selectors).
    pub namespaces: Store<Namespace>,
    /// Every AgentDirectory.
    pub directories: Store<AgentDirectory>,
    /// Who holds which route.
    pub ownership: Ownership,
    /// The keys that sign.
    pub signing: Signing,
    /// What the operator wrote, as seen or as written.
    pub written: Written,
    /// Cards per namespace, bytes per card.
    pub limits: Limits,
    /// Retry delays of failing objects.
    pub backoff: Backoff,
    /// The cards imported from agents (`spec.source`).
    pub sources: Sources,
    /// The compatibility verdicts whose status has not landed yet.
    pub verdicts: super::agentcard::compatibility::Verdicts,
    /// The directories' upstreams as this process syncs them (for their status).
    pub federation: Arc<crate::directory::federation::Federation>,
    /// The agents' Services' ready ports (the `BackendReady` condition).
    pub backends: Arc<super::backends::Backends>,
    /// How many cards each directory lists, kept by the counting task.
    pub counts: Arc<super::agentdirectory::count::Counts>,
}

impl Context {
    /// Annotations of namespace `ns` (empty when unknown).
    pub fn namespace_annotations(&self, ns: &str) -> BTreeMap<String, String> {
        self.namespaces
            .get(&ObjectRef::new(ns))
            .map(|n| n.annotations().clone())
            .unwrap_or_default()
    }
}
