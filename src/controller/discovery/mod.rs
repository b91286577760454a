//! The AgentDiscovery controller (lease holder only): for each discovery, [`select::plan`]
//! (pure) says which cards it writes, which of its cards are stale and which were claimed;
//! [`reconcile`] writes them (server-side apply with a field manager of its own, so an edit by
//! anyone else shows in `managedFields` and claims the card), deletes the stale ones, lets
//! claimed ones go (their owner reference to the Service removed, so they no longer go with
//! it), and writes the status.
//!
//! Data flow: watches of this controller's own (nothing else needs them all), started once an
//! AgentDiscovery exists, of Services, Deployments and StatefulSets (each cut to what
//! [`select`] reads: labels, selectors, ports) and, once kagent's CRD is installed, kagent
//! Agents; the shared card and Namespace watches
//! ([`crate::hub`]) and the discoveries' own watch. Any change to one of them looks at every
//! discovery again (there are few), the controller's debounce coalescing bursts. What the cards then publish is the card
//! controller's business, as for any card with `spec.source`.

pub mod select;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Namespace, PodTemplateSpec, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

use super::error::Error;
use super::metrics::ControllerMetrics;
use crate::crd::agentdiscovery::{AgentDiscovery, AgentDiscoveryStatus, Listing};
use crate::crd::AgentCard;
use crate::directory::select::LABEL_LISTED;
use select::{
    Cluster, KagentAgent, Plan, Wanted, Workload, DISCOVERY_MANAGER, KAGENT_AGENT,
    LABEL_DISCOVERED_BY,
};

/// The `controller` label of the discovery's reconcile metrics.
pub const DISCOVERY_CONTROLLER: &str = "agentdiscovery";
/// Most skipped agents a status lists.
const MAX_SKIPPED: usize = 20;
/// How often a discovery is looked at again without a change.
const RECHECK: Duration = Duration::from_secs(600);
/// How soon a discovery is looked at again while the stores it reads are not listed yet.
const STORES_RECHECK: Duration = Duration::from_secs(1);

/// A shared watch's events ([`crate::hub::Hub::subscribe`]).
pub type Events<K> = futures::channel::mpsc::UnboundedReceiver<crate::hub::Shared<K>>;

/// What the reconciles read and write.
pub struct DiscoveryContext {
    /// API client.
    pub client: Client,
    /// Every Service the discovery may search.
    pub services: Store<Service>,
    /// Every Deployment (cut to its labels and its Pods' labels).
    pub deployments: Store<Deployment>,
    /// Every StatefulSet (cut likewise).
    pub statefulsets: Store<StatefulSet>,
    /// Every kagent Agent (cut to what its card may say), empty until kagent's CRD exists.
    pub agents: Store<DynamicObject>,
    /// Whether kagent's Agents answered a list (its CRD is installed): from then on a
    /// discovery of them waits for their store to be listed.
    pub kagent_installed: Arc<std::sync::atomic::AtomicBool>,
    /// Every Namespace.
    pub namespaces: Store<Namespace>,
    /// Every AgentCard.
    pub cards: Store<AgentCard>,
    /// Every AgentDiscovery (who writes a Service found by two).
    pub discoveries: Store<AgentDiscovery>,
    /// The controllers' metrics.
    pub metrics: Arc<ControllerMetrics>,
    /// Retry delays per discovery.
    pub backoff: super::backoff::Backoff,
}

/// Run the discovery controller until the process stops, when the AgentDiscovery CRD is
/// installed (without it, there is nothing to discover and this returns at once).
pub async fn run(
    client: Client,
    watch_namespace: Option<String>,
    cards: (Store<AgentCard>, Events<AgentCard>),
    namespaces: (Store<Namespace>, Events<Namespace>),
    metrics: Arc<ControllerMetrics>,
) {
    let discoveries: Api<AgentDiscovery> = Api::all(client.clone());
    if let Err(e) = discoveries
        .list_metadata(&kube::api::ListParams::default().limit(1))
        .await
    {
        tracing::info!(error = %e, "AgentDiscovery is not installed (or not readable): no discovery");
        return;
    }
    let controller = Controller::new(discoveries, watcher::Config::default()).with_config(
        kube::runtime::controller::Config::default().debounce(Duration::from_millis(500)),
    );
    // The cluster's Services and workloads are watched only once a discovery exists: an
    // installation that discovers nothing holds none of them.
    let first = controller.store();
    let (services, service_events) = watch(
        scoped::<Service>(&client, watch_namespace.as_deref()),
        |s: &mut Service| {
            lean(&mut s.metadata);
            s.status = None;
        },
    );
    let (deployments, deployment_events) = watch(
        scoped::<Deployment>(&client, watch_namespace.as_deref()),
        |d: &mut Deployment| {
            lean(&mut d.metadata);
            d.status = None;
            d.spec = d
                .spec
                .take()
                .map(|spec| k8s_openapi::api::apps::v1::DeploymentSpec {
                    template: pod_labels_only(spec.template),
                    ..Default::default()
                });
        },
    );
    let (statefulsets, statefulset_events) = watch(
        scoped::<StatefulSet>(&client, watch_namespace.as_deref()),
        |d: &mut StatefulSet| {
            lean(&mut d.metadata);
            d.status = None;
            d.spec = d
                .spec
                .take()
                .map(|spec| k8s_openapi::api::apps::v1::StatefulSetSpec {
                    template: pod_labels_only(spec.template),
                    ..Default::default()
                });
        },
    );
    let (agents, kagent_installed, agent_events) =
        watch_kagent_agents(&client, watch_namespace.as_deref());
    let card_events = cards.1.map(|_| ());
    let namespace_events = namespaces.1.map(|_| ());
    let triggers = futures::stream::select_all([
        once_discovering(&first, service_events).boxed(),
        once_discovering(&first, deployment_events).boxed(),
        once_discovering(&first, statefulset_events).boxed(),
        once_discovering(&first, agent_events).boxed(),
        card_events.boxed(),
        namespace_events.boxed(),
    ]);
    let ctx = Arc::new(DiscoveryContext {
        client,
        services,
        deployments,
        statefulsets,
        agents,
        kagent_installed,
        namespaces: namespaces.0,
        cards: cards.0,
        discoveries: controller.store(),
        metrics,
        backoff: super::backoff::Backoff::default(),
    });
    controller
        .reconcile_all_on(triggers)
        .run(reconcile, error_policy, ctx)
        .for_each(|_| futures::future::ready(()))
        .await;
}

/// Reconcile one AgentDiscovery: plan, write, delete, release, status.
#[tracing::instrument(skip_all, fields(discovery = %d.name_any()))]
pub async fn reconcile(
    d: Arc<AgentDiscovery>,
    ctx: Arc<DiscoveryContext>,
) -> Result<Action, Error> {
    let _timer = ctx.metrics.reconcile_started(DISCOVERY_CONTROLLER);
    if d.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    // Before every store it reads is listed, an empty store would read as agents gone, and
    // their cards would be deleted (at every start): wait.
    if !stores_listed(&ctx, &d) {
        return Ok(Action::requeue(STORES_RECHECK));
    }
    let all = ctx.discoveries.state();
    let all: Vec<&AgentDiscovery> = all
        .iter()
        .map(AsRef::as_ref)
        .filter(|x| x.meta().deletion_timestamp.is_none())
        .collect();
    let services = ctx.services.state();
    let services: Vec<&Service> = services.iter().map(AsRef::as_ref).collect();
    let namespaces = ctx.namespaces.state();
    let namespaces: BTreeMap<String, &Namespace> = namespaces
        .iter()
        .map(|n| (n.name_any(), n.as_ref()))
        .collect();
    let cards = ctx.cards.state();
    let cards: Vec<&AgentCard> = cards.iter().map(AsRef::as_ref).collect();
    let workloads = workloads(&ctx);
    let agents: Vec<KagentAgent> = ctx
        .agents
        .state()
        .iter()
        .filter_map(|o| KagentAgent::from_object(o))
        .collect();
    let plan = select::plan(
        &d,
        &all,
        &Cluster {
            services: &services,
            namespaces: &namespaces,
            cards: &cards,
            workloads: &workloads,
            agents: &agents,
        },
    );
    tracing::debug!(
        discovery = %d.name_any(),
        found = plan.found.total,
        cards = plan.wanted.len(),
        stale = plan.stale.len(),
        claimed = plan.claimed.len(),
        "planned"
    );
    let by_key: BTreeMap<(String, String), &AgentCard> = cards
        .iter()
        .map(|c| ((c.namespace().unwrap_or_default(), c.name_any()), *c))
        .collect();
    for w in &plan.wanted {
        let current = by_key.get(&(w.namespace.clone(), w.name.clone())).copied();
        write_card(&ctx.client, &d, w, current).await?;
    }
    for (ns, name) in &plan.stale {
        let api: Api<AgentCard> = Api::namespaced(ctx.client.clone(), ns);
        let uid = by_key
            .get(&(ns.clone(), name.clone()))
            .and_then(|c| c.uid());
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid,
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(name, &dp).await {
            Ok(_) => {
                tracing::info!(namespace = %ns, card = %name, "deleted a discovered card no longer wanted")
            }
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    for (ns, name) in &plan.claimed {
        if let Some(card) = by_key.get(&(ns.clone(), name.clone())) {
            release(&ctx.client, &d, card).await?;
        }
    }
    let next = status(&d, &plan, &by_key);
    if d.status.as_ref() != Some(&next) {
        let api: Api<AgentDiscovery> = Api::all(ctx.client.clone());
        super::writes::apply_status(&api, &d.name_any(), &next).await?;
    }
    ctx.backoff.reset(&backoff_key(&d));
    Ok(Action::requeue(RECHECK))
}

/// Transient failures: per-discovery exponential backoff.
pub fn error_policy(d: Arc<AgentDiscovery>, error: &Error, ctx: Arc<DiscoveryContext>) -> Action {
    ctx.metrics
        .count_failure(DISCOVERY_CONTROLLER, error.category());
    let delay = ctx.backoff.next(&backoff_key(&d));
    tracing::warn!(discovery = %d.name_any(), category = error.category(), error = %error, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

fn backoff_key(d: &AgentDiscovery) -> String {
    format!("AgentDiscovery/{}", d.name_any())
}

/// The card discovery writes for `w`: its labels, its owner (the Service, or the kagent Agent)
/// and the spec that imports the agent's own card (with what the Agent declares as defaults)
/// and routes the agent's traffic on the card's host.
pub fn desired(d: &AgentDiscovery, w: &Wanted) -> serde_json::Value {
    let mut labels = serde_json::Map::new();
    labels.insert(LABEL_DISCOVERED_BY.into(), json!(d.name_any()));
    if d.spec.listing == Listing::AfterClaim {
        labels.insert(LABEL_LISTED.into(), json!("false"));
    }
    // The agent's own traffic is routed on the card's host too: an agent in a cluster names
    // itself by an internal URL (`http://<service>.<namespace>:8080`), which the published card
    // then carries as its public interface instead (`https://<host>/a2a`).
    let mut spec = json!({
        "publish": {"host": w.host},
        "source": {"service": {"name": w.service, "port": w.port}},
        "backend": {"serviceName": w.service, "port": w.port},
    });
    if let Some(defaults) = &w.defaults {
        spec["defaults"] = json!(defaults);
    }
    json!({
        "apiVersion": "agentcard.dev/v1alpha1",
        "kind": "AgentCard",
        "metadata": {
            "name": w.name,
            "namespace": w.namespace,
            "labels": labels,
            "ownerReferences": [{
                "apiVersion": w.owner.api_version, "kind": w.owner.kind, "name": w.owner.name,
                "uid": w.owner.uid, "controller": false, "blockOwnerDeletion": false,
            }],
        },
        "spec": spec,
    })
}

/// Whether `current` already holds everything discovery `d` writes for `w` (then nothing is
/// written): read off the typed card, so a reconcile over every card serialises none.
fn holds(current: &AgentCard, d: &AgentDiscovery, w: &Wanted) -> bool {
    let labels = current.labels();
    let listed_held = d.spec.listing != Listing::AfterClaim
        || labels.get(LABEL_LISTED).map(String::as_str) == Some("false");
    let spec = &current.spec;
    labels.get(LABEL_DISCOVERED_BY) == Some(&d.name_any())
        && listed_held
        && current
            .owner_references()
            .iter()
            .any(|o| o.uid == w.owner.uid)
        && spec.publish.host == w.host
        && spec
            .source
            .as_ref()
            .is_some_and(|s| s.service.name == w.service && s.service.port == w.port)
        && spec.backend.as_ref().is_some_and(|b| {
            b.service_name == w.service
                && b.port == w.port
                && b.path.is_none()
                && b.protocol_binding.is_none()
                && b.protocol_version.is_none()
        })
        && spec.defaults.as_deref() == w.defaults.as_ref()
}

async fn write_card(
    client: &Client,
    d: &AgentDiscovery,
    w: &Wanted,
    current: Option<&AgentCard>,
) -> Result<(), Error> {
    if current.is_some_and(|c| holds(c, d, w)) {
        return Ok(());
    }
    let want = desired(d, w);
    let api: Api<AgentCard> = Api::namespaced(client.clone(), &w.namespace);
    api.patch(
        &w.name,
        &PatchParams::apply(DISCOVERY_MANAGER).force(),
        &Patch::Apply(&want),
    )
    .await?;
    tracing::info!(namespace = %w.namespace, card = %w.name, host = %w.host, "wrote a discovered card");
    Ok(())
}

/// Whether owner reference `o` is one discovery writes (a Service, or a kagent Agent).
fn discovered_owner(o: &k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference) -> bool {
    (o.kind == "Service" && o.api_version == "v1")
        || (o.kind == KAGENT_AGENT.2 && o.api_version.starts_with(&format!("{}/", KAGENT_AGENT.0)))
}

/// Let a claimed card go: no owner reference to its Service or Agent (it no longer goes with it) and,
/// under `AfterClaim`, no `listed: "false"` (its new owner decides). JSON patches with tests,
/// so a concurrent change is never overwritten.
async fn release(client: &Client, d: &AgentDiscovery, card: &AgentCard) -> Result<(), Error> {
    let owners = card.metadata.owner_references.clone().unwrap_or_default();
    let kept: Vec<_> = owners
        .iter()
        .filter(|o| !discovered_owner(o))
        .cloned()
        .collect();
    let mut ops = Vec::new();
    if kept.len() != owners.len() {
        ops.push(json!({"op": "test", "path": "/metadata/ownerReferences", "value": owners}));
        ops.push(json!({"op": "replace", "path": "/metadata/ownerReferences", "value": kept}));
    }
    if d.spec.listing == Listing::AfterClaim
        && card.labels().get(LABEL_LISTED).map(String::as_str) == Some("false")
    {
        let path = format!("/metadata/labels/{}", LABEL_LISTED.replace('/', "~1"));
        ops.push(json!({"op": "test", "path": path, "value": "false"}));
        ops.push(json!({"op": "remove", "path": path}));
    }
    if ops.is_empty() {
        return Ok(());
    }
    let patch = serde_json::from_value(json!(ops)).map_err(|e| Error::Internal(e.to_string()))?;
    let api: Api<AgentCard> =
        Api::namespaced(client.clone(), &card.namespace().unwrap_or_default());
    match api
        .patch(
            &card.name_any(),
            &PatchParams {
                field_manager: Some(DISCOVERY_MANAGER.into()),
                ..PatchParams::default()
            },
            &Patch::<()>::Json(patch),
        )
        .await
    {
        Ok(_) => {
            tracing::info!(namespace = ?card.namespace(), card = %card.name_any(), "a discovered card was claimed: let go");
            Ok(())
        }
        // Changed meanwhile: the next reconcile sees the new state.
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 || s.code == 422 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The status for `plan`: counts, the agents left alone, and `Ready`.
fn status(
    d: &AgentDiscovery,
    plan: &Plan,
    cards: &BTreeMap<(String, String), &AgentCard>,
) -> AgentDiscoveryStatus {
    let published = plan
        .wanted
        .iter()
        .filter_map(|w| cards.get(&(w.namespace.clone(), w.name.clone())))
        .filter(|c| {
            c.status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            })
        })
        .count();
    let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    let message = format!(
        "{} found, {} cards written ({} published), {} claimed, {} left alone",
        plan.found.total,
        plan.wanted.len(),
        published,
        plan.claimed.len(),
        plan.skipped.len()
    );
    let previous = d
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"));
    let generation = d.meta().generation;
    let transition = previous
        .filter(|p| p.status == "True" && p.observed_generation == generation)
        .map_or_else(
            || Time(jiff::Timestamp::now()),
            |p| p.last_transition_time.clone(),
        );
    AgentDiscoveryStatus {
        observed_generation: generation,
        conditions: vec![Condition {
            type_: "Ready".into(),
            status: "True".into(),
            reason: "Discovered".into(),
            message,
            observed_generation: generation,
            last_transition_time: transition,
        }],
        found: plan.found.clone(),
        cards: count(plan.wanted.len()),
        published: count(published),
        claimed: count(plan.claimed.len()),
        skipped: plan.skipped.iter().take(MAX_SKIPPED).cloned().collect(),
    }
}

/// An Api over every namespace, or the one the operator watches.
fn scoped<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Drop what discovery never reads of an object's metadata (memory: every Service and
/// workload of the cluster is held).
fn lean(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    meta.annotations = None;
}

/// A Pod template cut to its labels.
fn pod_labels_only(template: PodTemplateSpec) -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: template.metadata.and_then(|m| m.labels),
            ..ObjectMeta::default()
        }),
        spec: None,
    }
}

/// A reflector over `api`, each object cut by `cut` before it is stored; the store and a
/// stream that ticks on every change.
fn watch<K>(
    api: Api<K>,
    cut: impl FnMut(&mut K) + Send + 'static,
) -> (Store<K>, impl Stream<Item = ()> + Send + 'static)
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let (store, writer) = reflector::store();
    let events = reflector::reflector(writer, watcher(api, watcher::Config::default()).modify(cut))
        .default_backoff()
        .touched_objects()
        .map(|_| ());
    (store, events)
}

/// kagent's Agents, once its CRD is installed: until a list succeeds (kagent absent, or not
/// yet), the store stays empty and the list is tried again with a growing pause (5 s to
/// 5 min), so kagent installed later is found without a restart.
fn watch_kagent_agents(
    client: &Client,
    namespace: Option<&str>,
) -> (
    Store<DynamicObject>,
    Arc<std::sync::atomic::AtomicBool>,
    impl Stream<Item = ()> + Send + 'static,
) {
    let (group, version, kind, plural) = KAGENT_AGENT;
    let resource = ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: format!("{group}/{version}"),
        kind: kind.into(),
        plural: plural.into(),
    };
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let writer = reflector::store::Writer::new(resource);
    let store = writer.as_reader();
    let installed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readable = installed.clone();
    let events = futures::stream::once(async move {
        let mut pause = Duration::from_secs(5);
        while let Err(e) = api.list_metadata(&kube::api::ListParams::default().limit(1)).await {
            tracing::debug!(error = %e, retry_in = ?pause, "kagent Agents are not readable (kagent not installed?)");
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(300));
        }
        tracing::info!("kagent Agents are readable: discovering them");
        readable.store(true, std::sync::atomic::Ordering::Relaxed);
        reflector::reflector(
            writer,
            watcher(api, watcher::Config::default()).modify(keep_card_fields),
        )
        .default_backoff()
        .touched_objects()
        .map(|_| ())
    })
    .flatten();
    (store, installed, events)
}

/// A kagent Agent cut to what its card may say: never its prompt, tools or model.
fn keep_card_fields(o: &mut DynamicObject) {
    lean(&mut o.metadata);
    let spec = o.data.get("spec").cloned().unwrap_or_default();
    let mut kept = serde_json::Map::new();
    for field in [
        "type",
        "description",
        "version",
        "provider",
        "documentationUrl",
        "iconUrl",
    ] {
        if let Some(v) = spec.get(field) {
            kept.insert(field.into(), v.clone());
        }
    }
    if let Some(a2a) = spec.pointer("/declarative/a2aConfig") {
        kept.insert("declarative".into(), json!({"a2aConfig": a2a}));
    }
    o.data = json!({"spec": kept});
}

/// The Deployments and StatefulSets the watches hold, as [`select`] reads them.
fn workloads(ctx: &DiscoveryContext) -> Vec<Workload> {
    let of = |kind: &'static str, meta: &ObjectMeta, template: Option<&PodTemplateSpec>| Workload {
        kind,
        namespace: meta.namespace.clone().unwrap_or_default(),
        name: meta.name.clone().unwrap_or_default(),
        labels: meta.labels.clone().unwrap_or_default(),
        pod_labels: template
            .and_then(|t| t.metadata.as_ref())
            .and_then(|m| m.labels.clone())
            .unwrap_or_default(),
    };
    let mut out: Vec<Workload> = ctx
        .deployments
        .state()
        .iter()
        .map(|d| {
            of(
                "Deployment",
                &d.metadata,
                d.spec.as_ref().map(|s| &s.template),
            )
        })
        .collect();
    out.extend(ctx.statefulsets.state().iter().map(|d| {
        of(
            "StatefulSet",
            &d.metadata,
            d.spec.as_ref().map(|s| &s.template),
        )
    }));
    out
}

/// How often an installation with no AgentDiscovery looks whether one appeared.
const FIRST_DISCOVERY_CHECK: Duration = Duration::from_secs(2);

/// `events` (a watch: nothing is listed until it is polled), started once `discoveries` holds
/// an AgentDiscovery; from then on it runs until the process stops.
fn once_discovering<S>(
    discoveries: &Store<AgentDiscovery>,
    events: S,
) -> impl Stream<Item = ()> + Send + 'static
where
    S: Stream<Item = ()> + Send + 'static,
{
    let discoveries = discoveries.clone();
    futures::stream::once(async move {
        while discoveries.state().is_empty() {
            tokio::time::sleep(FIRST_DISCOVERY_CHECK).await;
        }
        events
    })
    .flatten()
}

/// Whether `store` holds a first full list (without waiting).
fn listed<K>(store: &Store<K>) -> bool
where
    K: kube::runtime::reflector::Lookup + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    futures::FutureExt::now_or_never(store.wait_until_ready()).is_some_and(|r| r.is_ok())
}

/// Whether every store discovery `d` reads is listed: Services, Deployments, StatefulSets,
/// cards, Namespaces, and kagent's Agents when `d` searches them and kagent is installed.
fn stores_listed(ctx: &DiscoveryContext, d: &AgentDiscovery) -> bool {
    let kagent = d
        .spec
        .sources
        .contains(&crate::crd::agentdiscovery::DiscoverySource::KagentAgents)
        && ctx
            .kagent_installed
            .load(std::sync::atomic::Ordering::Relaxed);
    listed(&ctx.services)
        && listed(&ctx.deployments)
        && listed(&ctx.statefulsets)
        && listed(&ctx.cards)
        && listed(&ctx.namespaces)
        && (!kagent || listed(&ctx.agents))
}
