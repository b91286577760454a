//! Unit-test support for the reconciles: a [`Context`] over a mock API server
//! (`tower-test`), as kube-rs's `controller-rs` tests its reconciler, with writers for every
//! store a reconcile reads.
//!
//! Data flow: a reconcile's requests go to [`ApiServer`], a small in-memory API server that
//! records each request (method, path, body) in order and answers it as the real one would
//! for the few verbs the controllers use (create, apply / merge patch, delete, get). A test
//! runs a reconcile, reads what was asked ([`ApiServer::take`]), and feeds what was written
//! back into the stores ([`TestContext::observe`]) as the watches would, to run the next one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::channel::mpsc::{unbounded, UnboundedReceiver};
use http::{Request, Response};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::client::Body;
use kube::runtime::events::Reporter;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::Client;
use serde_json::{json, Value};
use tokio::sync::watch;

use super::config::Config;
use super::context::{Context, Parts};
use super::events::Events;
use super::keys::signing::KeySource;
use super::keys::signing::{PublishedKeys, Signing};
use super::keys::source::SignerUri;
use super::keys::{secret_for, KeyCache, Rotation};

/// The signing Secret of the fake API's operator namespace.
const SIGNING_SECRET: &str = "agentcard-signing-key";
use super::metrics::ControllerMetrics;
use super::routes::ownership::{Ownership, OwnershipInputs};
use super::watches::CardsByHost;
use super::writes::seen::Written;
use crate::a2a::{Algorithm, SigningKey};
use crate::crd::{AgentCard, AgentDirectory};
use crate::store::{NamedWriter, SeenConfigMap, SeenIngress};

/// One request the reconcile sent.
#[derive(Clone, Debug)]
pub struct Recorded {
    /// `GET`, `POST`, `PATCH`, `DELETE`.
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// The query (`fieldManager=…&force=true`), if any.
    pub query: String,
    /// The body as JSON (`Null` when empty).
    pub body: Value,
}

impl Recorded {
    /// `"METHOD path"`, for asserting a sequence at a glance.
    pub fn line(&self) -> String {
        format!("{} {}", self.method, self.path)
    }
}

/// The mock API server: its objects by path, and the requests in the order they came.
#[derive(Clone, Default)]
pub struct ApiServer {
    objects: Arc<Mutex<HashMap<String, Value>>>,
    requests: Arc<Mutex<Vec<Recorded>>>,
    version: Arc<Mutex<u64>>,
}

impl ApiServer {
    /// The requests since the last call, in order; Events apart (see [`Self::events`]).
    pub fn take(&self) -> Vec<Recorded> {
        std::mem::take(&mut *crate::locks::lock(&self.requests))
    }

    /// The object the server holds at `path`.
    pub fn object(&self, path: &str) -> Option<Value> {
        crate::locks::lock(&self.objects).get(path).cloned()
    }

    /// Hold `object` at `path` (what another party wrote).
    pub fn put(&self, path: &str, object: Value) {
        crate::locks::lock(&self.objects).insert(path.to_string(), object);
    }

    fn next_version(&self) -> String {
        let mut v = crate::locks::lock(&self.version);
        *v += 1;
        v.to_string()
    }

    /// Answer one request as the API server would.
    fn answer(
        &self,
        (method, path, query): (&str, &str, &str),
        content_type: &str,
        body: Value,
    ) -> (u16, Value) {
        let mut objects = crate::locks::lock(&self.objects);
        match method {
            // A collection the reconcilers list (by label): its objects directly under it.
            "GET" if path.ends_with("/controllerrevisions") => {
                let selector: Vec<(String, String)> = url::form_urlencoded::parse(query.as_bytes())
                    .filter(|(k, _)| k == "labelSelector")
                    .flat_map(|(_, v)| {
                        v.split(',')
                            .filter_map(|kv| kv.split_once('='))
                            .map(|(k, v)| (k.to_string(), v.to_string()))
                            .collect::<Vec<_>>()
                    })
                    .collect();
                let items: Vec<Value> = objects
                    .iter()
                    .filter(|(k, _)| {
                        k.strip_prefix(path)
                            .and_then(|rest| rest.strip_prefix('/'))
                            .is_some_and(|name| !name.contains('/'))
                    })
                    .map(|(_, o)| o.clone())
                    .filter(|o| {
                        selector
                            .iter()
                            .all(|(k, v)| o["metadata"]["labels"][k].as_str() == Some(v))
                    })
                    .collect();
                let list = json!({"apiVersion": "v1", "kind": "List",
                    "metadata": {"resourceVersion": "1"}, "items": items});
                (200, list)
            }
            "GET" => match objects.get(path) {
                Some(o) => (200, o.clone()),
                None => (404, not_found(path)),
            },
            "POST" => {
                let name = body["metadata"]["name"]
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("generated-{}", objects.len()));
                let at = format!("{path}/{name}");
                if objects.contains_key(&at) {
                    return (409, status(409, "AlreadyExists", &at));
                }
                let mut created = body;
                created["metadata"]["name"] = json!(name);
                created["metadata"]["resourceVersion"] = json!(self.next_version());
                created["metadata"]["uid"] = json!(format!("uid-{name}"));
                objects.insert(at, created.clone());
                (201, created)
            }
            "PATCH" => {
                let (object_path, subresource) = match path.strip_suffix("/status") {
                    Some(p) => (p.to_string(), true),
                    None => (path.to_string(), false),
                };
                let apply = content_type.contains("apply-patch");
                let mut object = match objects.get(&object_path) {
                    Some(o) => o.clone(),
                    None if apply && !subresource => json!({"metadata": {}}),
                    None => return (404, not_found(path)),
                };
                if subresource {
                    object["status"] = body["status"].clone();
                } else if apply {
                    let meta = object["metadata"].clone();
                    object = body;
                    for k in ["uid", "creationTimestamp"] {
                        if !meta[k].is_null() {
                            object["metadata"][k] = meta[k].clone();
                        }
                    }
                } else {
                    json_merge(&mut object, body);
                }
                object["metadata"]["resourceVersion"] = json!(self.next_version());
                objects.insert(object_path, object.clone());
                (200, object)
            }
            "DELETE" => match objects.remove(path) {
                Some(o) => (200, o),
                None => (404, not_found(path)),
            },
            _ => (405, status(405, "MethodNotAllowed", path)),
        }
    }

    /// Serve `handle` until the client is dropped.
    async fn serve(self, mut handle: tower_test::mock::Handle<Request<Body>, Response<Body>>) {
        while let Some((request, send)) = handle.next_request().await {
            let method = request.method().to_string();
            let path = request.uri().path().to_string();
            let query = request.uri().query().unwrap_or_default().to_string();
            let content_type = request
                .headers()
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string();
            let bytes = request
                .into_body()
                .collect_bytes()
                .await
                .unwrap_or_default();
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            crate::locks::lock(&self.requests).push(Recorded {
                method: method.clone(),
                path: path.clone(),
                query,
                body: body.clone(),
            });
            let request = crate::locks::lock(&self.requests)
                .last()
                .map(|r| r.query.clone())
                .unwrap_or_default();
            let (code, answer) = self.answer((&method, &path, &request), &content_type, body);
            let response = Response::builder()
                .status(code)
                .header(http::header::CONTENT_TYPE, "application/json")
                .body(Body::from(serde_json::to_vec(&answer).unwrap_or_default()))
                .unwrap_or_else(|_| Response::new(Body::empty()));
            send.send_response(response);
        }
    }
}

fn not_found(path: &str) -> Value {
    status(404, "NotFound", path)
}

fn status(code: u16, reason: &str, path: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
           "reason": reason, "message": format!("{path}: {reason}")})
}

fn json_merge(into: &mut Value, patch: Value) {
    match (into, patch) {
        (Value::Object(into), Value::Object(patch)) => {
            for (k, v) in patch {
                if v.is_null() {
                    into.remove(&k);
                } else {
                    json_merge(into.entry(k).or_insert(Value::Null), v);
                }
            }
        }
        (into, patch) => *into = patch,
    }
}

/// A context over the mock [`ApiServer`], with the writers of every store it reads.
pub struct TestContext {
    /// What the reconciles are handed.
    pub ctx: Arc<Context>,
    /// The mock API server.
    pub api: ApiServer,
    /// The signing key (active, published, signing).
    pub key: SigningKey,
    cards: Writer<AgentCard>,
    namespaces: Writer<Namespace>,
    directories: Writer<AgentDirectory>,
    configmaps: NamedWriter<SeenConfigMap>,
    ingresses: NamedWriter<SeenIngress>,
    /// Kept so the Secret's store and the publisher's word stay alive.
    _keys: (Writer<Secret>, watch::Sender<Option<PublishedKeys>>),
    /// Cards and directories re-checked after a release (the trigger edges' ends).
    pub peers: (
        UnboundedReceiver<ObjectRef<AgentCard>>,
        UnboundedReceiver<ObjectRef<AgentDirectory>>,
    ),
}

/// The operator's namespace in tests.
pub const OPERATOR_NS: &str = "ops";

/// An operator in [`OPERATOR_NS`] that lets every namespace publish on `*.example.com`.
pub fn config() -> Config {
    let mut settings = super::agentcard::build::tests::settings();
    settings.operator_namespace = OPERATOR_NS.into();
    Config {
        settings,
        signer: SignerUri::Secret(SIGNING_SECRET.into()),
        pkcs11_module: None,
        vault: None,
        create_signing_secret: false,
        allowed_hosts: vec!["*.example.com".into()],
        shared_hosts: vec![],
        instance: "test".into(),
        watch_namespace: None,
        concurrency: 0,
        jwks_max_age: 300,
        max_cards_per_namespace: 0,
        max_card_bytes: 64 * 1024,
        max_namespace_card_bytes: 0,
        source_allow_unmanaged_endpoints: false,
    }
}

impl Context {
    /// A context for unit tests (see the module doc): `config`'s operator over a fresh mock
    /// API server, its stores empty but for the signing Secret, whose one ES256 key is
    /// published and signs.
    pub fn for_tests(config: &Config) -> TestContext {
        let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let api = ApiServer::default();
        tokio::spawn(api.clone().serve(handle));
        let client = Client::new(service, "default");
        let opns = config.settings.operator_namespace.clone();

        let key = SigningKey::generate(Algorithm::ES256, Some("test-key")).expect("a key");
        let mut secret = secret_for(&key, SIGNING_SECRET, Some(&opns)).expect("a Secret");
        // As the API server holds it: `data`, with a resourceVersion.
        secret.data = secret.string_data.take().map(|d| {
            d.into_iter()
                .map(|(k, v)| (k, k8s_openapi::ByteString(v.into_bytes())))
                .collect()
        });
        secret.metadata.resource_version = Some("1".into());
        let mut secrets = Writer::<Secret>::default();
        secrets.apply_watcher_event(&watcher::Event::Apply(secret));
        let (published_tx, published) = watch::channel(Some(PublishedKeys {
            revoked: Default::default(),
            version: "1".into(),
            rotation: Rotation {
                signing: vec![key.kid().to_string()],
                ..Rotation::default()
            },
        }));

        let cards = Writer::<AgentCard>::default();
        let namespaces = Writer::<Namespace>::default();
        let directories = Writer::<AgentDirectory>::default();
        let configmaps = NamedWriter::<SeenConfigMap>::default();
        let ingresses = NamedWriter::<SeenIngress>::default();
        let cards_by_host = Arc::new(Mutex::new(CardsByHost::default()));
        let (peers, peers_rx) = unbounded();
        let (directory_peers, directory_peers_rx) = unbounded();
        let metrics = Arc::new(ControllerMetrics::default());
        let ctx = Context::new(
            config,
            Parts {
                recorder: Arc::new(Events::new(
                    client.clone(),
                    Reporter {
                        controller: crate::contract::MANAGER.into(),
                        instance: Some("test".into()),
                    },
                )),
                metrics,
                cards: cards.as_reader(),
                namespaces: namespaces.as_reader(),
                directories: directories.as_reader(),
                approvals: crate::controller::agentcard::approval::Approvals {
                    store: Writer::<crate::crd::AgentCardApproval>::default().as_reader(),
                    listed: tokio::sync::watch::channel(true).1,
                },
                cards_by_host: cards_by_host.clone(),
                ownership: Ownership::new(OwnershipInputs {
                    shared_hosts: config.shared_hosts.clone(),
                    cards: cards.as_reader(),
                    directories: directories.as_reader(),
                    cards_by_host,
                    peers,
                    directory_peers,
                    directories_wait: Some(Duration::ZERO),
                    directories_listed: watch::channel(true).1,
                    cards_listed: watch::channel(true).1,
                }),
                signing: Signing {
                    source: KeySource::Secret {
                        uri: config.signer.to_string(),
                        key: kube::runtime::reflector::ObjectRef::new(SIGNING_SECRET).within(&opns),
                        secrets: secrets.as_reader(),
                        cache: Arc::new(KeyCache::default()),
                    },
                    published,
                },
                written: Written {
                    operator_namespace: opns,
                    configmaps: configmaps.as_reader(),
                    ingresses: ingresses.as_reader(),
                    routes: None,
                    memo: Arc::default(),
                    configmaps_written: Arc::default(),
                    statuses: Arc::default(),
                },
                client,
                federation: Arc::default(),
            },
        )
        .expect("a context");
        TestContext {
            ctx: Arc::new(ctx),
            api,
            key,
            cards,
            namespaces,
            directories,
            configmaps,
            ingresses,
            _keys: (secrets, published_tx),
            peers: (peers_rx, directory_peers_rx),
        }
    }
}

impl TestContext {
    /// Put `card` in the card store (and the card index), as the card watch would.
    pub fn card(&mut self, card: &AgentCard) -> Arc<AgentCard> {
        self.api.put(
            &card_path(card),
            serde_json::to_value(card).expect("a card serializes"),
        );
        self.cards
            .apply_watcher_event(&watcher::Event::Apply(card.clone()));
        crate::locks::lock(&self.ctx.cards_by_host).apply(card);
        self.ctx
            .cards
            .get(&ObjectRef::from_obj(card))
            .expect("the card is stored")
    }

    /// Put `dir` in the directory store.
    pub fn directory(&mut self, dir: &AgentDirectory) -> Arc<AgentDirectory> {
        self.api.put(
            &directory_path(dir),
            serde_json::to_value(dir).expect("a directory serializes"),
        );
        self.directories
            .apply_watcher_event(&watcher::Event::Apply(dir.clone()));
        self.ctx
            .directories
            .get(&ObjectRef::from_obj(dir))
            .expect("the directory is stored")
    }

    /// Put namespace `name` (with `annotations`) in the Namespace store.
    pub fn namespace(&mut self, name: &str, annotations: Value) {
        let ns: Namespace = serde_json::from_value(json!({
            "metadata": {"name": name, "annotations": annotations}
        }))
        .expect("a Namespace");
        self.namespaces
            .apply_watcher_event(&watcher::Event::Apply(ns));
    }

    /// Bring every ConfigMap and Ingress the mock server holds (and the status of `card`,
    /// when given) into the stores, as their watches would: the next reconcile reads them.
    pub fn observe(&mut self, card: Option<&AgentCard>) -> Option<Arc<AgentCard>> {
        let objects = crate::locks::lock(&self.api.objects).clone();
        let mut configmaps = Vec::new();
        let mut ingresses = Vec::new();
        for (path, object) in &objects {
            if path.contains("/configmaps/") {
                configmaps.push(serde_json::from_value::<SeenConfigMap>(object.clone()));
            } else if path.contains("/ingresses/") {
                ingresses.push(serde_json::from_value::<SeenIngress>(object.clone()));
            }
        }
        let configmaps: Vec<SeenConfigMap> =
            configmaps.into_iter().filter_map(Result::ok).collect();
        let ingresses: Vec<SeenIngress> = ingresses.into_iter().filter_map(Result::ok).collect();
        for (memo_kind, metas) in [
            (
                "ConfigMap",
                configmaps.iter().map(|c| &c.metadata).collect::<Vec<_>>(),
            ),
            ("Ingress", ingresses.iter().map(|i| &i.metadata).collect()),
        ] {
            for meta in metas {
                let (ns, name) = (
                    meta.namespace.clone().unwrap_or_default(),
                    meta.name.clone().unwrap_or_default(),
                );
                self.ctx.written.memo.forget(memo_kind, &ns, &name);
                if memo_kind == "ConfigMap" {
                    self.ctx
                        .written
                        .configmaps_written
                        .forget(memo_kind, &ns, &name);
                }
            }
        }
        relist(|e| self.configmaps.apply_watcher_event(e), configmaps);
        relist(|e| self.ingresses.apply_watcher_event(e), ingresses);
        let card = card?;
        let path = card_path(card);
        let held = objects.get(&path)?;
        let seen: AgentCard = serde_json::from_value(held.clone()).ok()?;
        self.ctx.written.statuses.forget(
            super::writes::seen::STATUS_WRITE,
            &seen.metadata.namespace.clone().unwrap_or_default(),
            &seen.metadata.name.clone().unwrap_or_default(),
        );
        Some(self.card(&seen))
    }
}

/// The `Ready` condition of a status as written: `(status, reason, message)`.
pub fn ready(status: &Value) -> (String, String, String) {
    let c = status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .cloned()
        .unwrap_or_default();
    let text = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    (text("status"), text("reason"), text("message"))
}

/// Replace what a store holds with `objects` (each event given to `apply`), as a relist would.
fn relist<K>(mut apply: impl FnMut(&watcher::Event<K>), objects: Vec<K>) {
    apply(&watcher::Event::Init);
    for o in objects {
        apply(&watcher::Event::InitApply(o));
    }
    apply(&watcher::Event::InitDone);
}

/// The mock server's path of `card`.
pub fn card_path(card: &AgentCard) -> String {
    format!(
        "/apis/agentcard.dev/v1alpha1/namespaces/{}/agentcards/{}",
        card.metadata.namespace.as_deref().unwrap_or_default(),
        card.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The mock server's path of `dir`.
pub fn directory_path(dir: &AgentDirectory) -> String {
    format!(
        "/apis/agentcard.dev/v1alpha1/agentdirectories/{}",
        dir.metadata.name.as_deref().unwrap_or_default()
    )
}
