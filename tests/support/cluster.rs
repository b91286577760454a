//! The platform and hostile tenants on a plane of a suite's own: an operator watching every
//! namespace, a cluster-admin client, and tenants acting as RBAC-limited users of their own
//! namespace (what `edit` gives: AgentCards, ConfigMaps, Ingresses, Services; never
//! `agentcards/status`). Suites using it run their tests one at a time.
#![allow(dead_code)]

use std::path::Path;
use std::time::{Duration, Instant};

use agentcard_operator::contract::*;
use agentcard_operator::crd::AgentCard;
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::{json, Value};

use super::condition;
use super::http::Resp;
use super::operator::Operator;
use super::plane::{client_for, dedicated_kubeconfig, install_crds, wait_for};

/// One test at a time: each runs its own operator watching every namespace.
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Hosts every namespace may publish on; the shared ones take disjoint prefixes of several
/// namespaces.
pub const OPERATOR_FLAGS: &[&str] = &[
    "--allowed-hosts",
    "*.open.test,*.shared.test",
    "--shared-hosts",
    "*.shared.test",
];

pub fn kubeconfig() -> &'static Path {
    dedicated_kubeconfig()
}

pub fn rand_tag() -> String {
    format!("{:06x}", super::plane::rand_u32() & 0xff_ffff)
}

/// The platform's side: a cluster-admin client and the operator.
pub struct Platform {
    pub admin: Client,
    pub op: Operator,
    pub opns: String,
    _serial: tokio::sync::MutexGuard<'static, ()>,
}

impl Platform {
    pub async fn start(extra: &[&str]) -> Platform {
        let serial = SERIAL.lock().await;
        let admin = client_for(kubeconfig()).await;
        install_crds(&admin).await;
        let opns = format!("ops-{}", rand_tag());
        create_namespace(&admin, &opns, json!({})).await;
        let mut flags: Vec<&str> = OPERATOR_FLAGS.to_vec();
        flags.extend_from_slice(extra);
        let op = Operator::start_on(kubeconfig(), &opns, None, &flags);
        Platform {
            admin,
            op,
            opns,
            _serial: serial,
        }
    }

    pub fn get(&self, host: &str, path: &str) -> Resp {
        self.op.get(host, path)
    }
}

pub async fn create_namespace(admin: &Client, name: &str, annotations: Value) {
    let ns: Namespace = serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": annotations}
    }))
    .unwrap();
    Api::<Namespace>::all(admin.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
}

/// A tenant: a namespace and a client acting as the tenant's own user.
pub struct Tenant {
    pub ns: String,
    pub client: Client,
    pub cards: Api<AgentCard>,
}

impl Tenant {
    pub async fn new(p: &Platform, ns: &str) -> Tenant {
        Self::with_annotations(p, ns, json!({})).await
    }

    pub async fn with_annotations(p: &Platform, ns: &str, annotations: Value) -> Tenant {
        create_namespace(&p.admin, ns, annotations).await;
        // What the aggregated `edit` role gives a team: its namespace's objects, never the
        // status of its AgentCards.
        let role: Role = serde_json::from_value(json!({
            "metadata": {"name": "tenant"},
            "rules": [
                {"apiGroups": [""], "resources": ["configmaps", "services"], "verbs": ["*"]},
                {"apiGroups": ["networking.k8s.io"], "resources": ["ingresses"], "verbs": ["*"]},
                {"apiGroups": ["agentcard.dev"], "resources": ["agentcards"], "verbs": ["*"]},
            ]
        }))
        .unwrap();
        Api::<Role>::namespaced(p.admin.clone(), ns)
            .create(&PostParams::default(), &role)
            .await
            .unwrap();
        let user = format!("tenant-{ns}");
        let binding: RoleBinding = serde_json::from_value(json!({
            "metadata": {"name": "tenant"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tenant"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]
        }))
        .unwrap();
        Api::<RoleBinding>::namespaced(p.admin.clone(), ns)
            .create(&PostParams::default(), &binding)
            .await
            .unwrap();
        // The API server's authorizer sees a new binding a moment later: wait until it grants
        // the tenant its AgentCards, so that a first apply is not refused with 403.
        let reviews: Api<SubjectAccessReview> = Api::all(p.admin.clone());
        let review: SubjectAccessReview = serde_json::from_value(json!({
            "spec": {"user": user, "resourceAttributes": {
                "namespace": ns, "verb": "patch", "group": "agentcard.dev", "resource": "agentcards"
            }}
        }))
        .unwrap();
        let granted = wait_for(Duration::from_secs(10), || async {
            reviews
                .create(&PostParams::default(), &review)
                .await
                .ok()
                .and_then(|r| r.status)
                .is_some_and(|s| s.allowed)
        })
        .await;
        assert!(
            granted.is_ok(),
            "the tenant's RoleBinding in {ns} never took effect"
        );
        let kc = Kubeconfig::read_from(kubeconfig()).unwrap();
        let mut config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .unwrap();
        config.auth_info.impersonate = Some(user);
        let client = Client::try_from(config).unwrap();
        Tenant {
            ns: ns.to_string(),
            cards: Api::namespaced(client.clone(), ns),
            client,
        }
    }

    pub async fn apply(&self, manifest: &Value) -> Result<AgentCard, kube::Error> {
        let name = manifest["metadata"]["name"].as_str().unwrap().to_string();
        self.cards
            .patch(
                &name,
                &PatchParams::apply("tenant").force(),
                &Patch::Apply(manifest),
            )
            .await
    }

    pub async fn delete(&self, name: &str) {
        self.cards
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }
}

/// A valid AgentCard manifest for `host` + `prefix`.
pub fn card(name: &str, host: &str, prefix: &str) -> Value {
    json!({
        "apiVersion": "agentcard.dev/v1alpha1",
        "kind": "AgentCard",
        "metadata": {"name": name},
        "spec": {
            "publish": {"host": host, "pathPrefix": prefix},
            "card": {
                "name": format!("Agent {name}"), "description": "An agent.", "version": "1.0.0",
                "supportedInterfaces": [{"url": format!("https://{host}{prefix}/a2a"),
                    "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
                "capabilities": {}, "defaultInputModes": ["text/plain"],
                "defaultOutputModes": ["text/plain"],
                "skills": [{"id": "s", "name": "S", "description": "d", "tags": ["t"]}]
            }
        }
    })
}

pub fn card_path(prefix: &str) -> String {
    format!("{prefix}{PATH_CARD}")
}

pub fn refused(reason: &'static str) -> impl Fn(&AgentCard) -> bool {
    move |c| {
        condition(c, "Ready").is_some_and(|(s, r, _)| s == "False" && r == reason)
            && c.status.as_ref().and_then(|s| s.observed_generation) == c.metadata.generation
    }
}

pub fn hash_of(c: &AgentCard) -> Option<String> {
    c.status.as_ref()?.content_hash.clone()
}

/// Wait until `pred` holds for card `ns/name`, read as the platform sees it.
pub async fn wait_card(
    p: &Platform,
    ns: &str,
    name: &str,
    what: &str,
    pred: impl Fn(&AgentCard) -> bool,
) -> AgentCard {
    let api: Api<AgentCard> = Api::namespaced(p.admin.clone(), ns);
    super::operator::wait_card(&api, name, &p.op, &format!("{ns}: {what}"), pred).await
}

pub fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(80)..].join("\n")
}

/// Wait until `host` + `path` answers with `etag` (`None`: 404); returns how long it took.
pub async fn wait_served(p: &Platform, host: &str, path: &str, etag: Option<&str>) -> Duration {
    let started = Instant::now();
    let want = etag.map(|h| format!("\"{h}\""));
    let ok = wait_for(Duration::from_secs(20), || {
        let r = p.get(host, path);
        let got = (r.status == 200).then(|| r.header("etag").unwrap_or_default().to_string());
        std::future::ready(got == want)
    })
    .await;
    assert!(
        ok.is_ok(),
        "{host}{path}: expected {want:?}, got status {} etag {:?}",
        p.get(host, path).status,
        p.get(host, path).header("etag")
    );
    started.elapsed()
}

/// Split `https://host/path` into host and path.
pub fn split_url(url: &str) -> (String, String) {
    let rest = url.strip_prefix("https://").unwrap_or(url);
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    (host.to_string(), format!("/{path}"))
}
