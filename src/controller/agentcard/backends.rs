//! Whether an agent's own Service can take traffic, from the cluster itself: its
//! EndpointSlices' ready endpoints, without probing the agent over the network.
//!
//! Data flow: one EndpointSlice watch ([`watch`]) feeds [`Backends`], which keeps per Service
//! only the names of its ports that have a ready endpoint (per slice, so an event costs
//! O(that slice)). When that set changes for a Service, the cards of its namespace that name
//! it (`spec.backend` or `spec.source`) are reconciled; their status stage asks [`state`]
//! (the Service's ports from the API server, the ready ports from here) for the
//! `BackendReady` condition, which the directories read as `reachable`.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use futures::channel::mpsc::UnboundedSender;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, ResourceExt};

use crate::controller::watches::CardsByHost;
use crate::crd::AgentCard;
use crate::process::AbortOnDrop;

/// How soon a card whose backend is not ready looks at its Service again: a Service created
/// without endpoints, or a port renumbered, changes no EndpointSlice.
pub const RECHECK: std::time::Duration = std::time::Duration::from_secs(30);

/// The label naming an EndpointSlice's Service.
const SERVICE_NAME: &str = "kubernetes.io/service-name";

/// A Service: `(namespace, name)`.
type ServiceKey = (String, String);

/// The ready ports of every Service with EndpointSlices, kept slice by slice.
#[derive(Default)]
pub struct Backends {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Per Service, per slice: the port names with a ready endpoint (`""` for an unnamed port).
    by_service: HashMap<ServiceKey, HashMap<String, BTreeSet<String>>>,
    /// Which Service each slice belongs to (a slice's label could move).
    service_of: HashMap<(String, String), ServiceKey>,
}

impl State {
    fn ready_ports(&self, key: &ServiceKey) -> BTreeSet<String> {
        self.view(key).unwrap_or_default()
    }

    /// What the cards of a Service see: its ready ports, `None` while it has no slice at all
    /// (a slice appearing, even without a ready endpoint, is news: the Service exists).
    fn view(&self, key: &ServiceKey) -> Option<BTreeSet<String>> {
        self.by_service
            .get(key)
            .map(|slices| slices.values().flatten().cloned().collect())
    }

    /// Record `slice` (`None`: deleted); the Services whose ready ports changed.
    fn set(
        &mut self,
        slice_key: (String, String),
        next: Option<(ServiceKey, BTreeSet<String>)>,
    ) -> Vec<ServiceKey> {
        let mut touched = Vec::new();
        let before_service = self.service_of.get(&slice_key).cloned();
        let mut services: Vec<ServiceKey> = before_service.iter().cloned().collect();
        if let Some((svc, _)) = &next {
            if !services.contains(svc) {
                services.push(svc.clone());
            }
        }
        let before: Vec<Option<BTreeSet<String>>> = services.iter().map(|s| self.view(s)).collect();
        if let Some(old) = before_service {
            if let Some(slices) = self.by_service.get_mut(&old) {
                slices.remove(&slice_key.1);
                if slices.is_empty() {
                    self.by_service.remove(&old);
                }
            }
            self.service_of.remove(&slice_key);
        }
        if let Some((svc, ports)) = next {
            self.by_service
                .entry(svc.clone())
                .or_default()
                .insert(slice_key.1.clone(), ports);
            self.service_of.insert(slice_key, svc);
        }
        for (svc, was) in services.into_iter().zip(before) {
            if self.view(&svc) != was {
                touched.push(svc);
            }
        }
        touched
    }
}

/// What a slice says: its Service, and its port names when it has a ready endpoint.
fn summary(slice: &EndpointSlice) -> Option<(ServiceKey, BTreeSet<String>)> {
    let svc = slice.labels().get(SERVICE_NAME)?.clone();
    let ns = slice.namespace().unwrap_or_default();
    // A ready condition left out means ready (the API's rule).
    let ready = slice
        .endpoints
        .iter()
        .any(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true));
    let ports = if ready {
        slice
            .ports
            .iter()
            .flatten()
            .map(|p| p.name.clone().unwrap_or_default())
            .collect()
    } else {
        BTreeSet::new()
    };
    Some(((ns, svc), ports))
}

fn slice_key(slice: &EndpointSlice) -> (String, String) {
    (slice.namespace().unwrap_or_default(), slice.name_any())
}

impl Backends {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        crate::locks::lock(&self.state)
    }

    /// Record an added or changed slice; the Services whose ready ports changed.
    pub fn apply(&self, slice: &EndpointSlice) -> Vec<ServiceKey> {
        self.lock().set(slice_key(slice), summary(slice))
    }

    /// Forget a deleted slice; the Services whose ready ports changed.
    pub fn delete(&self, slice: &EndpointSlice) -> Vec<ServiceKey> {
        self.lock().set(slice_key(slice), None)
    }

    /// Replace everything with a fresh list; the Services whose ready ports changed.
    pub fn replace(&self, slices: &[EndpointSlice]) -> Vec<ServiceKey> {
        let mut state = self.lock();
        let old: Vec<(String, String)> = state.service_of.keys().cloned().collect();
        let fresh: BTreeSet<(String, String)> = slices.iter().map(slice_key).collect();
        let mut touched = Vec::new();
        for key in old.into_iter().filter(|k| !fresh.contains(k)) {
            touched.extend(state.set(key, None));
        }
        for s in slices {
            touched.extend(state.set(slice_key(s), summary(s)));
        }
        touched.sort();
        touched.dedup();
        touched
    }

    #[cfg(test)]
    fn view_is_none(&self, namespace: &str, name: &str) -> bool {
        self.lock()
            .view(&(namespace.to_string(), name.to_string()))
            .is_none()
    }

    /// The port names of Service `namespace/name` that have a ready endpoint.
    pub fn ready_ports(&self, namespace: &str, name: &str) -> BTreeSet<String> {
        self.lock()
            .ready_ports(&(namespace.to_string(), name.to_string()))
    }
}

/// The Service a card's agent is reached at, and on which port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServicePort<'a> {
    /// The Service's name (in the card's namespace).
    pub name: &'a str,
    /// The port's number.
    pub port: i32,
}

/// The Service and port a card's agent is reached at (`spec.backend`, else `spec.source`).
pub fn service_of(card: &AgentCard) -> Option<ServicePort<'_>> {
    if let Some(b) = card.spec.backend.as_deref() {
        return Some(ServicePort {
            name: b.service_name.as_str(),
            port: b.port,
        });
    }
    card.spec.source.as_deref().map(|s| ServicePort {
        name: s.service.name.as_str(),
        port: s.service.port,
    })
}

/// The `BackendReady` condition a card earns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Whether the agent's Service can take traffic.
    pub ready: bool,
    /// `EndpointsReady`, `NoService`, `PortMissing` or `NoReadyEndpoint`.
    pub reason: &'static str,
    /// What a user reads.
    pub message: String,
}

impl Verdict {
    fn new(ready: bool, reason: &'static str, message: String) -> Verdict {
        Verdict {
            ready,
            reason,
            message,
        }
    }
}

/// The `BackendReady` verdict for `card` (pure): `service` is its Service as read (`None`:
/// not found), `ready_ports` the port names with a ready endpoint.
pub fn judge(
    namespace: &str,
    name: &str,
    port: i32,
    service: Option<&Service>,
    ready_ports: &BTreeSet<String>,
) -> Verdict {
    let Some(svc) = service else {
        return Verdict::new(
            false,
            "NoService",
            format!("Service {namespace}/{name} does not exist"),
        );
    };
    let found = svc
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .and_then(|ports| ports.iter().find(|p| p.port == port));
    let Some(p) = found else {
        return Verdict::new(
            false,
            "PortMissing",
            format!("Service {namespace}/{name} has no port {port}"),
        );
    };
    let port_name = p.name.clone().unwrap_or_default();
    if ready_ports.contains(&port_name) {
        Verdict::new(
            true,
            "EndpointsReady",
            format!("Service {namespace}/{name} has a ready endpoint on port {port}"),
        )
    } else {
        Verdict::new(
            false,
            "NoReadyEndpoint",
            format!("Service {namespace}/{name} has no ready endpoint on port {port}"),
        )
    }
}

/// The `BackendReady` verdict for `card` now; `None` for a card without a backend or source,
/// or when the Service could not be read (the previous verdict stands).
pub async fn state(client: &Client, backends: &Backends, card: &AgentCard) -> Option<Verdict> {
    let ServicePort { name, port } = service_of(card)?;
    let ns = card.namespace().unwrap_or_default();
    let api: Api<Service> = Api::namespaced(client.clone(), &ns);
    let service = match api.get_opt(name).await {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!(error = %e, service = name, "could not read a backend Service");
            return None;
        }
    };
    Some(judge(
        &ns,
        name,
        port,
        service.as_ref(),
        &backends.ready_ports(&ns, name),
    ))
}

/// Watch EndpointSlices (all namespaces, or `namespace`) into `backends`, sending the cards
/// whose Service's ready ports changed.
pub fn watch(
    client: &Client,
    namespace: Option<&str>,
    backends: Arc<Backends>,
    cards: Store<AgentCard>,
    index: Arc<Mutex<CardsByHost>>,
    refs: UnboundedSender<ObjectRef<AgentCard>>,
) -> AbortOnDrop {
    let api: Api<EndpointSlice> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let config = watcher::Config::default().labels(SERVICE_NAME);
    AbortOnDrop::spawn(tracing::info_span!("backend_watch"), async move {
        let mut listing: Vec<EndpointSlice> = Vec::new();
        let mut events = watcher(api, config).default_backoff().boxed();
        while let Some(event) = events.next().await {
            let touched = match event {
                Ok(watcher::Event::Apply(s)) => backends.apply(&s),
                Ok(watcher::Event::Delete(s)) => backends.delete(&s),
                Ok(watcher::Event::Init) => {
                    listing.clear();
                    Vec::new()
                }
                Ok(watcher::Event::InitApply(s)) => {
                    listing.push(s);
                    Vec::new()
                }
                Ok(watcher::Event::InitDone) => backends.replace(&std::mem::take(&mut listing)),
                Err(e) => {
                    tracing::debug!(error = %e, "EndpointSlice watch");
                    Vec::new()
                }
            };
            for (ns, svc) in touched {
                let keys = crate::locks::lock(&index).in_namespace(&ns);
                for key in keys {
                    let names_it = cards
                        .get(&key)
                        .is_some_and(|c| service_of(&c).is_some_and(|s| s.name == svc));
                    if names_it {
                        let _ = refs.unbounded_send(key);
                    }
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn slice(name: &str, svc: &str, ready: Option<bool>, port: Option<&str>) -> EndpointSlice {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "agents", "labels": {SERVICE_NAME: svc}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": ready}}],
            "ports": [{"name": port, "port": 8080}]
        }))
        .unwrap()
    }

    fn service(port: i32, name: Option<&str>) -> Service {
        serde_json::from_value(
            json!({"metadata": {"name": "svc"}, "spec": {"ports": [{"port": port, "name": name}]}}),
        )
        .unwrap()
    }

    #[test]
    fn only_changes_of_a_services_ready_ports_are_reported() {
        let b = Backends::default();
        let key = ("agents".to_string(), "svc".to_string());
        assert_eq!(
            b.apply(&slice("s1", "svc", Some(false), Some("http"))),
            vec![key.clone()],
            "a first slice: the Service exists"
        );
        assert_eq!(
            b.apply(&slice("s1", "svc", None, Some("http"))),
            vec![key.clone()]
        );
        assert_eq!(
            b.apply(&slice("s2", "svc", Some(true), Some("http"))),
            vec![],
            "still ready"
        );
        assert_eq!(b.delete(&slice("s1", "svc", None, Some("http"))), vec![]);
        assert_eq!(
            b.delete(&slice("s2", "svc", None, Some("http"))),
            vec![key.clone()]
        );
        assert!(b.view_is_none("agents", "svc"), "no slice left");
        assert!(b.ready_ports("agents", "svc").is_empty());
        b.apply(&slice("s3", "svc", Some(true), None));
        assert_eq!(b.replace(&[]), vec![key]);
    }

    #[test]
    fn the_verdict_names_what_is_missing() {
        let ready: BTreeSet<String> = ["http".to_string()].into();
        assert_eq!(judge("a", "svc", 80, None, &ready).reason, "NoService");
        let svc = service(80, Some("http"));
        assert_eq!(
            judge("a", "svc", 81, Some(&svc), &ready).reason,
            "PortMissing"
        );
        assert_eq!(
            judge("a", "svc", 80, Some(&svc), &ready).reason,
            "EndpointsReady"
        );
        assert_eq!(
            judge("a", "svc", 80, Some(&svc), &BTreeSet::new()).reason,
            "NoReadyEndpoint"
        );
        let unnamed = service(80, None);
        let any: BTreeSet<String> = [String::new()].into();
        assert!(judge("a", "svc", 80, Some(&unnamed), &any).ready);
    }
}
