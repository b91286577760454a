//! The card server fed by the published ConfigMaps of a real control plane, each confirmed by
//! its AgentCard's status, which also gives the route. No operator runs here: the tests write
//! what it would.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use agentcard_operator::contract::*;
use agentcard_operator::crd::AgentCard;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;
use support::http::{eventually, Server};
use support::plane::{client, client_for, install_crds, kubeconfig, OwnPlane, TestNamespace};

/// The ConfigMap the operator would write for card `name` (named as it names it: only that
/// ConfigMap of a card is kept by the server).
fn card_cm(name: &str, host: &str, prefix: &str, body: &str, extra: &[(&str, &str)]) -> ConfigMap {
    let mut ann: BTreeMap<String, String> = BTreeMap::from([
        (ANN_HOST.into(), host.into()),
        (ANN_PATH_PREFIX.into(), prefix.into()),
        (ANN_MAX_AGE.into(), "42".into()),
        (ANN_PUBLISHED_AT.into(), "2026-01-02T03:04:05Z".into()),
    ]);
    for (k, v) in extra {
        ann.insert((*k).into(), (*v).into());
    }
    serde_json::from_value(json!({
        "metadata": {
            "name": card_configmap_name(name),
            "labels": {LABEL_MANAGED_BY: MANAGER, LABEL_CONTENT: CONTENT_CARD},
            "annotations": ann,
        },
        "data": {KEY_CARD: body},
    }))
    .unwrap()
}

/// `cm` with `owner` (an AgentCard) as its controller.
fn owned(mut cm: ConfigMap, owner: &AgentCard) -> ConfigMap {
    let reference = json!({
        "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentCard",
        "name": owner.metadata.name, "uid": owner.metadata.uid, "controller": true
    });
    cm.metadata.owner_references = Some(vec![serde_json::from_value(reference).unwrap()]);
    cm
}

fn jwks_cm(body: &str) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": "agentcard-jwks", "labels": {LABEL_MANAGED_BY: MANAGER, LABEL_CONTENT: CONTENT_JWKS}},
        "data": {KEY_JWKS: body},
    }))
    .unwrap()
}

async fn apply(api: &Api<ConfigMap>, cm: &ConfigMap) {
    let name = cm.metadata.name.clone().unwrap();
    api.patch(
        &name,
        &PatchParams::apply("agentcard-tests").force(),
        &Patch::Apply(cm),
    )
    .await
    .unwrap();
}

/// An AgentCard to own a published ConfigMap.
async fn owner(api: &Api<AgentCard>, name: &str, host: &str) -> AgentCard {
    let card = json!({
        "apiVersion": "agentcard.dev/v1alpha1",
        "kind": "AgentCard",
        "metadata": {"name": name},
        "spec": {
            "publish": {"host": host},
            "card": {
                "name": "N", "description": "D", "version": "1",
                "supportedInterfaces": [{"url": format!("https://{host}/a2a"), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
                "capabilities": {}, "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
                "skills": [{"id": "s", "name": "S", "description": "d", "tags": ["t"]}]
            }
        }
    });
    api.patch(
        name,
        &PatchParams::apply("agentcard-tests").force(),
        &Patch::Apply(&card),
    )
    .await
    .unwrap()
}

/// What the operator writes once it published `body` from `cm`: the hash, the ConfigMap and
/// the route in the card's status (the route here as the test's annotations describe it).
async fn confirm(api: &Api<AgentCard>, name: &str, cm: &ConfigMap, body: &str) {
    let ann = cm.metadata.annotations.clone().unwrap_or_default();
    let get = |k: &str| ann.get(k).cloned().unwrap_or_default();
    let patch = json!({"status": {
        "contentHash": content_hash(body.as_bytes()),
        "configMap": cm.metadata.name,
        "served": {
            "host": get(ANN_HOST),
            "pathPrefix": normalize_prefix(&get(ANN_PATH_PREFIX)),
            "legacyPath": get(ANN_LEGACY_PATH) == "true",
            "maxAgeSeconds": get(ANN_MAX_AGE).parse::<i64>().unwrap_or(300),
            "publishedAt": get(ANN_PUBLISHED_AT),
            "since": "2026-01-01T00:00:00Z",
        },
    }});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// Publish `body` for `owner` as the operator does: ConfigMap, then status.
async fn publish(
    cms: &Api<ConfigMap>,
    owners: &Api<AgentCard>,
    owner: &AgentCard,
    cm: ConfigMap,
    body: &str,
) {
    apply(cms, &owned(cm.clone(), owner)).await;
    confirm(owners, owner.metadata.name.as_deref().unwrap(), &cm, body).await;
}

fn unique_host(tag: &str) -> String {
    format!("{tag}-{}.agents.test", std::process::id())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirmed_configmaps_are_served_and_update_latency_is_reported() {
    let client = client().await;
    let op = TestNamespace::new(&client, "op").await;
    let ns = TestNamespace::new(&client, "cards").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let owners: Api<AgentCard> = Api::namespaced(client.clone(), &ns.name);
    let host = unique_host("watch");
    let (a, b) = (
        owner(&owners, "a", &host).await,
        owner(&owners, "b", &host).await,
    );
    let legacy = [(ANN_LEGACY_PATH, "true")];
    publish(
        &cms,
        &owners,
        &a,
        card_cm("a", &host, "", r#"{"name":"v1"}"#, &legacy),
        r#"{"name":"v1"}"#,
    )
    .await;
    publish(
        &cms,
        &owners,
        &b,
        card_cm("b", &host, "/team-b/", r#"{"name":"b"}"#, &[]),
        r#"{"name":"b"}"#,
    )
    .await;
    apply(
        &Api::namespaced(client.clone(), &op.name),
        &jwks_cm(r#"{"keys":[]}"#),
    )
    .await;
    // A JWKS ConfigMap outside the operator's namespace must not be served.
    apply(&cms, &jwks_cm(r#"{"keys":["forged"]}"#)).await;
    // Card ConfigMaps nobody confirmed must not be served: anyone who can write ConfigMaps in a
    // namespace could otherwise publish on any host.
    let forged = unique_host("forged");
    apply(
        &cms,
        &card_cm("forged", &forged, "", r#"{"name":"forged"}"#, &[]),
    )
    .await;
    let c = owner(&owners, "c", &forged).await;
    publish(
        &cms,
        &owners,
        &c,
        card_cm("c", &forged, "/c", r#"{"name":"unconfirmed"}"#, &[]),
        "other bytes",
    )
    .await;

    let server = Server::start(
        &["--from-cluster", "--namespace", &op.name],
        &[("KUBECONFIG", kubeconfig())],
    );
    server.wait_ready(Duration::from_secs(30));
    let r = server.get(&host, PATH_CARD, &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.body, br#"{"name":"v1"}"#);
    assert_eq!(r.header("cache-control"), Some("public, max-age=42"));
    assert_eq!(
        r.header("last-modified"),
        Some("Fri, 02 Jan 2026 03:04:05 GMT")
    );
    assert_eq!(server.get(&host, PATH_LEGACY, &[]).status, 200);
    assert_eq!(
        server
            .get(&host, "/team-b/.well-known/agent-card.json", &[])
            .body,
        br#"{"name":"b"}"#
    );
    assert_eq!(
        server
            .get(&host, "/team-b/.well-known/agent.json", &[])
            .status,
        404
    );
    assert_eq!(server.get(&host, PATH_JWKS, &[]).body, br#"{"keys":[]}"#);
    assert_eq!(
        server.get(&forged, PATH_CARD, &[]).status,
        404,
        "an unowned ConfigMap was served"
    );
    assert_eq!(
        server
            .get(&forged, "/c/.well-known/agent-card.json", &[])
            .status,
        404,
        "unconfirmed bytes were served"
    );

    // An update waits for its confirmation; until then the last confirmed version is served.
    apply(
        &cms,
        &owned(
            card_cm("a", &host, "", r#"{"name":"pending"}"#, &legacy),
            &a,
        ),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(server.get(&host, PATH_CARD, &[]).body, br#"{"name":"v1"}"#);

    // Update latency: from the operator's writes (ConfigMap, then status) to the new bytes served.
    let mut latencies = Vec::new();
    for i in 0..5 {
        let body = format!(r#"{{"name":"v{}"}}"#, i + 2);
        let started = Instant::now();
        publish(
            &cms,
            &owners,
            &a,
            card_cm("a", &host, "", &body, &legacy),
            &body,
        )
        .await;
        let written = started.elapsed();
        eventually(Duration::from_secs(10), || {
            (server.get(&host, PATH_CARD, &[]).body == body.as_bytes()).then_some(())
        })
        .expect("the update is served");
        latencies.push((written, started.elapsed()));
    }
    eprintln!("update latency, 5 updates as (writes acknowledged, new bytes served) since the writes began: {latencies:?}");

    // A ConfigMap forged in the same namespace with the annotations of another route and a
    // controller reference to a confirmed card changes nothing: the route is the status's.
    apply(
        &cms,
        &owned(
            card_cm("forged-route", &host, "/team-b/", r#"{"name":"v6"}"#, &[]),
            &a,
        ),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        server
            .get(&host, "/team-b/.well-known/agent-card.json", &[])
            .body,
        br#"{"name":"b"}"#
    );

    owners.delete("a", &DeleteParams::default()).await.unwrap();
    eventually(Duration::from_secs(10), || {
        (server.get(&host, PATH_CARD, &[]).status == 404).then_some(())
    })
    .expect("a deleted card stops being served");
    assert_eq!(
        server
            .get(&host, "/team-b/.well-known/agent-card.json", &[])
            .status,
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_ready_until_the_first_sync() {
    // A kubeconfig whose server does not answer: the first sync never completes.
    let dir = tempfile::tempdir().unwrap();
    let dead = support::http::free_port();
    let kc = std::fs::read_to_string(kubeconfig()).unwrap();
    let re = regex::Regex::new(r"server: https://127\.0\.0\.1:\d+").unwrap();
    let path = dir.path().join("kubeconfig");
    std::fs::write(
        &path,
        re.replace(&kc, format!("server: https://{dead}").as_str())
            .as_bytes(),
    )
    .unwrap();
    let server = Server::start(
        &["--from-cluster", "--namespace", "x"],
        &[("KUBECONFIG", &path)],
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(server.ready_status(), 503);
    assert_eq!(
        server.get("any.example", PATH_CARD, &[]).status,
        404,
        "the public port still answers"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cards_keep_being_served_while_the_api_server_is_down() {
    let plane = OwnPlane::start();
    let client = client_for(&plane.kubeconfig()).await;
    install_crds(&client).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let owners: Api<AgentCard> = Api::namespaced(client.clone(), "default");
    let host = unique_host("outage");
    let body = r#"{"name":"survivor"}"#;
    let card = owner(&owners, "survivor", &host).await;
    publish(
        &cms,
        &owners,
        &card,
        card_cm("survivor", &host, "", body, &[]),
        body,
    )
    .await;
    let server = Server::start(
        &["--from-cluster", "--namespace", "kube-system"],
        &[("KUBECONFIG", &plane.kubeconfig())],
    );
    server.wait_ready(Duration::from_secs(30));
    // The first list may come from the API server's watch cache a moment behind the status
    // patched just before the replica started (kube's streaming list asks for any version):
    // the card is served once the watch brings it.
    let served = eventually(Duration::from_secs(10), || {
        (server.get(&host, PATH_CARD, &[]).status == 200).then_some(())
    });
    assert!(served.is_some(), "the card was never served");
    plane.stop();
    std::thread::sleep(Duration::from_secs(3));
    let r = server.get(&host, PATH_CARD, &[]);
    assert_eq!(
        r.status, 200,
        "the last known card is served during the outage"
    );
    assert_eq!(r.body, body.as_bytes());
    assert_eq!(
        server.ready_status(),
        200,
        "still ready: it has a full copy to serve"
    );
}
