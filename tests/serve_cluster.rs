//! The card server fed by a watch on the published ConfigMaps of a real control plane.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use agentcard_operator::contract::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use support::http::{eventually, Server};
use support::plane::{client, client_for, kubeconfig, OwnPlane, TestNamespace};

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
    serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": name,
            "labels": {LABEL_MANAGED_BY: MANAGER, LABEL_CONTENT: CONTENT_CARD},
            "annotations": ann,
        },
        "data": {KEY_CARD: body},
    }))
    .unwrap()
}

fn jwks_cm(body: &str) -> ConfigMap {
    serde_json::from_value(serde_json::json!({
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

fn unique_host(tag: &str) -> String {
    format!("{tag}-{}.agents.test", std::process::id())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configmap_changes_are_served_and_update_latency_is_reported() {
    let client = client().await;
    let op = TestNamespace::new(&client, "op").await;
    let ns = TestNamespace::new(&client, "cards").await;
    let cards: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let host = unique_host("watch");
    apply(
        &cards,
        &card_cm(
            "a",
            &host,
            "",
            r#"{"name":"v1"}"#,
            &[(ANN_LEGACY_PATH, "true")],
        ),
    )
    .await;
    apply(
        &cards,
        &card_cm("b", &host, "/team-b/", r#"{"name":"b"}"#, &[]),
    )
    .await;
    apply(
        &Api::namespaced(client.clone(), &op.name),
        &jwks_cm(r#"{"keys":[]}"#),
    )
    .await;
    // A JWKS ConfigMap outside the operator's namespace must not be served.
    apply(&cards, &jwks_cm(r#"{"keys":["forged"]}"#)).await;

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

    // Update latency: from the API write returning to the new bytes being served.
    let mut latencies = Vec::new();
    for i in 0..5 {
        let body = format!(r#"{{"name":"v{}"}}"#, i + 2);
        let started = Instant::now();
        apply(
            &cards,
            &card_cm("a", &host, "", &body, &[(ANN_LEGACY_PATH, "true")]),
        )
        .await;
        let written = started.elapsed();
        eventually(Duration::from_secs(10), || {
            (server.get(&host, PATH_CARD, &[]).body == body.as_bytes()).then_some(())
        })
        .expect("the update is served");
        latencies.push((written, started.elapsed()));
    }
    eprintln!("update latency, 5 updates as (API write acknowledged, new bytes served) since the write began: {latencies:?}");

    cards.delete("a", &DeleteParams::default()).await.unwrap();
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
    let cards: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let host = unique_host("outage");
    apply(
        &cards,
        &card_cm("survivor", &host, "", r#"{"name":"survivor"}"#, &[]),
    )
    .await;
    let server = Server::start(
        &["--from-cluster", "--namespace", "kube-system"],
        &[("KUBECONFIG", &plane.kubeconfig())],
    );
    server.wait_ready(Duration::from_secs(30));
    assert_eq!(server.get(&host, PATH_CARD, &[]).status, 200);
    plane.stop();
    std::thread::sleep(Duration::from_secs(3));
    let r = server.get(&host, PATH_CARD, &[]);
    assert_eq!(
        r.status, 200,
        "the last known card is served during the outage"
    );
    assert_eq!(r.body, br#"{"name":"survivor"}"#);
    assert_eq!(
        server.ready_status(),
        200,
        "still ready: it has a full copy to serve"
    );
}
