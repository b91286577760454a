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
use super::config::{Config, Settings};
use super::error::Error;
use super::events::Events;
use super::keys::signing::Signing;
use super::limits::Limits;
use super::metrics::ControllerMetrics;
use super::routes::ownership::Ownership;
use super::watches::CardsByHost;
use super::writes::seen::Written;
use crate::crd::{AgentCard, AgentDirectory};
use crate::directory::federation::Federation;

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
    pub cards_by_host: Arc<Mutex<CardsByHost>>,
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
    pub federation: Arc<Federation>,
    /// The agents' Services' ready ports (the `BackendReady` condition).
    pub backends: Arc<crate::controller::agentcard::backends::Backends>,
    /// How many cards each directory lists, kept by the counting task.
    pub counts: Arc<super::agentdirectory::count::Counts>,
    /// The AgentCardApprovals, for the cards' verdicts.
    pub approvals: super::agentcard::approval::Approvals,
}

/// What the wiring hands [`Context::new`]: the client, the process's recorder and metrics,
/// the shared stores, and the handles the watches it started keep in step.
pub struct Parts {
    /// API client.
    pub client: Client,
    /// Event publisher.
    pub recorder: Arc<Events>,
    /// Controller metrics.
    pub metrics: Arc<ControllerMetrics>,
    /// Every AgentCard.
    pub cards: Store<AgentCard>,
    /// Every Namespace.
    pub namespaces: Store<Namespace>,
    /// Every AgentDirectory.
    pub directories: Store<AgentDirectory>,
    /// The cards by host and namespace.
    pub cards_by_host: Arc<Mutex<CardsByHost>>,
    /// Who holds which route.
    pub ownership: Ownership,
    /// The keys that sign.
    pub signing: Signing,
    /// What the operator wrote.
    pub written: Written,
    /// The directories' upstreams as this process syncs them.
    pub federation: Arc<Federation>,
    /// The AgentCardApprovals.
    pub approvals: super::agentcard::approval::Approvals,
}

impl Context {
    /// The context of `config`'s controllers over `parts`; what no watch feeds (limits,
    /// retry delays, verdicts, the import client, backend and count tables) starts empty here.
    pub fn new(config: &Config, parts: Parts) -> Result<Context, Error> {
        let sources = Sources::new(
            parts.client.clone(),
            config.source_allow_unmanaged_endpoints,
        )
        .map_err(|e| Error::Internal(format!("building the source HTTP client: {e}")))?;
        Ok(Context {
            client: parts.client,
            recorder: parts.recorder,
            metrics: parts.metrics,
            settings: config.settings.clone(),
            allowed_hosts: config.allowed_hosts.clone(),
            cards: parts.cards,
            cards_by_host: parts.cards_by_host,
            namespaces: parts.namespaces,
            directories: parts.directories,
            ownership: parts.ownership,
            signing: parts.signing,
            written: parts.written,
            limits: Limits {
                max_cards_per_namespace: config.max_cards_per_namespace,
                max_card_bytes: config.max_card_bytes,
                max_namespace_card_bytes: config.max_namespace_card_bytes,
            },
            backoff: Backoff::default(),
            sources,
            verdicts: Default::default(),
            federation: parts.federation,
            backends: Arc::default(),
            counts: Arc::default(),
            approvals: parts.approvals,
        })
    }

    /// Annotations of namespace `ns` (empty when unknown).
    pub fn namespace_annotations(&self, ns: &str) -> BTreeMap<String, String> {
        self.namespaces
            .get(&ObjectRef::new(ns))
            .map(|n| n.annotations().clone())
            .unwrap_or_default()
    }
}
