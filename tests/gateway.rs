//! Gateway API routing end to end: the operator run with `--route-kind HTTPRoute` attaches its
//! HTTPRoutes to a Gateway served by Traefik's Gateway provider (Traefik v3.6.12 and the
//! Gateway API standard CRDs of the version it uses, both from Go modules). Through Traefik:
//! the card, the JWKS and the agent's path; the Python SDK verifies the card; a card whose
//! namespace the Gateway's listener does not allow reports `Routed=False` with the Gateway's
//! reason; deleting a card removes its routes (Traefik answers 404 for the card and the
//! agent's path); switching an Ingress-routed card to HTTPRoutes replaces its Ingress; a
//! directory gets its own HTTPRoute and reports the Gateway's verdict as `Routed`. Runs in a private network namespace (see
//! `support::netns`).

mod support;

use std::process::{Command, Stdio};
use std::time::Duration;

use agentcard_operator::controller::agentcard::card::{backend_ingress_name_of, ingress_name};
use agentcard_operator::controller::agentdirectory;
use agentcard_operator::crd::{AgentCard, AgentDirectory};
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::{json, Value};
use support::cluster::card;
use support::netns;
use support::operator::{wait_card, Operator};
use support::plane::{client_for, dedicated_kubeconfig, wait_established, wait_for};
use support::tools::Tool;
use support::{condition, ready};

const OPERATOR_PORT: u16 = 18080;
const AGENT_PORT: u16 = 19000;
const GATEWAY_PORT: u16 = 18000;

#[test]
fn traefik_gateway_routes_what_the_operators_httproutes_say() {
    netns::run_inside(
        "inside_a_private_network_namespace",
        "gateway: card, JWKS and agent served; refused route reported; 404 after deletion",
        &[Tool::Helm, Tool::Traefik, Tool::GatewayApi],
    );
}

async fn namespace(client: &Client, name: &str, labels: Value) {
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

async fn apply_dynamic(client: &Client, obj: Value) {
    let api_version = obj["apiVersion"].as_str().unwrap().to_string();
    let kind = obj["kind"].as_str().unwrap().to_string();
    let (group, version) = api_version.split_once('/').unwrap();
    let ar =
        kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(group, version, &kind));
    let name = obj["metadata"]["name"].as_str().unwrap().to_string();
    let api: Api<DynamicObject> = match obj["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    let obj: DynamicObject = serde_json::from_value(obj).unwrap();
    api.patch(
        &name,
        &PatchParams::apply("test").force(),
        &Patch::Apply(&obj),
    )
    .await
    .unwrap();
}

async fn agent_service(client: &Client, ns: &str) {
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "agent"},
        "spec": {"ports": [{"name": "a2a", "port": AGENT_PORT, "targetPort": AGENT_PORT}]}
    }))
    .unwrap();
    Api::<Service>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &svc)
        .await
        .unwrap();
    netns::endpoint_slice(client, ns, "agent", "a2a", AGENT_PORT).await;
}

/// The HTTPRoute `ns/name`, if it exists.
async fn route_in(client: &Client, ns: &str, name: &str) -> Option<DynamicObject> {
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &agentcard_operator::controller::routes::routing::httproute_resource(),
    );
    api.get_opt(name).await.unwrap()
}

/// `(type, value)` of every path match of a route's rules.
fn matches_of(route: &DynamicObject) -> Vec<(String, String)> {
    route.data["spec"]["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|r| r["matches"].as_array().cloned().unwrap_or_default())
        .map(|m| {
            (
                m["path"]["type"].as_str().unwrap_or_default().to_string(),
                m["path"]["value"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn with_backend(name: &str, host: &str) -> Value {
    let mut m = card(name, host, "");
    m["spec"]["backend"] = json!({"serviceName": "agent", "port": AGENT_PORT, "path": "/a2a/v1"});
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs inside the network namespace the outer test makes"]
async fn inside_a_private_network_namespace() {
    netns::setup_loopback();
    let kubeconfig = dedicated_kubeconfig();
    let client = client_for(kubeconfig).await;
    support::kubectl(
        kubeconfig,
        &[
            "apply",
            "--server-side",
            "-f",
            support::tools::gateway_api_crds().to_str().unwrap(),
        ],
    );
    // Polled: `kubectl wait` fails at once when a CRD's status is not written yet.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in [
        "httproutes.gateway.networking.k8s.io",
        "gateways.gateway.networking.k8s.io",
    ] {
        wait_established(&crds, name).await;
    }

    let ns = "agentcard-system";
    namespace(&client, ns, json!({"gateway-access": "true"})).await;
    let helm = support::tools::helm_command(kubeconfig)
        .args([
            "install",
            "rel",
            "charts/agentcard-operator",
            "--namespace",
            ns,
            "--set",
            "routing.kind=HTTPRoute",
            "--set",
            "routing.gateways={agentcard-system/public}",
        ])
        .output()
        .unwrap();
    assert!(
        helm.status.success(),
        "{}",
        String::from_utf8_lossy(&helm.stderr)
    );
    netns::endpoint_slice(&client, ns, "rel-agentcard-operator", "http", OPERATOR_PORT).await;

    // The platform's Gateway: routes only from namespaces labelled gateway-access=true.
    apply_dynamic(
        &client,
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
            "metadata": {"name": "traefik"},
            "spec": {"controllerName": "traefik.io/gateway-controller"}
        }),
    )
    .await;
    apply_dynamic(&client, json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "public", "namespace": ns},
        "spec": {"gatewayClassName": "traefik", "listeners": [{
            "name": "web", "port": GATEWAY_PORT, "protocol": "HTTP",
            "allowedRoutes": {"namespaces": {"from": "Selector", "selector": {"matchLabels": {"gateway-access": "true"}}}}
        }]}
    })).await;

    let root = tempfile::tempdir().unwrap();
    let _agent = netns::agent(root.path(), AGENT_PORT, "hello through the gateway");
    let log = root.path().join("traefik.log");
    let _traefik = netns::traefik(
        kubeconfig,
        &format!(":{GATEWAY_PORT}"),
        &["kubernetesGateway", "kubernetesIngress"],
        &log,
    );
    let traefik_log = || std::fs::read_to_string(&log).unwrap_or_default();
    let through = |host: &str, path: &str| netns::get(GATEWAY_PORT, host, path);

    // First with Ingress routing: a card published, routed by an Ingress Traefik also reads.
    let team = "team";
    namespace(&client, team, json!({"gateway-access": "true"})).await;
    agent_service(&client, team).await;
    // Serving stays up whatever the operators do: a `serve --from-cluster` process behind the
    // Service; the operators below only reconcile, one after the other (a restart that
    // switches the route kind).
    let _server = netns::Proc(
        Command::new(env!("CARGO_BIN_EXE_agentcard-operator"))
            .args(["serve", "--from-cluster", "--namespace", ns])
            .args(["--listen", &format!("0.0.0.0:{OPERATOR_PORT}")])
            .args(["--admin-listen", "0.0.0.0:18083"])
            .env("KUBECONFIG", kubeconfig)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let common = [
        "--listen",
        "127.0.0.1:0",
        "--admin-listen",
        "127.0.0.1:0",
        "--lease-duration",
        "3",
        "--service-name",
        "rel-agentcard-operator",
        "--ingress-tls",
        "none",
    ];
    let cards: Api<AgentCard> = Api::namespaced(client.clone(), team);
    let host = "weather.agents.test";
    {
        let op = Operator::start_on(kubeconfig, ns, None, &common);
        cards
            .patch(
                "weather",
                &PatchParams::apply("test").force(),
                &Patch::Apply(with_backend("weather", host)),
            )
            .await
            .unwrap();
        wait_card(&cards, "weather", &op, "Ready with an Ingress", ready).await;
        let ingresses: Api<Ingress> = Api::namespaced(client.clone(), ns);
        assert_eq!(
            ingresses
                .list(&Default::default())
                .await
                .unwrap()
                .items
                .len(),
            1
        );
    }

    // Then the operator switches to HTTPRoutes on the Gateway: routes written, Ingress gone
    // once the Gateway accepted them, and the card served through Traefik all along.
    let before = wait_for(Duration::from_secs(60), || {
        std::future::ready(through(host, "/.well-known/agent-card.json").status == 200)
    })
    .await;
    assert!(
        before.is_ok(),
        "not served through the Ingress: Traefik {}, the server directly {}\n{}",
        through(host, "/.well-known/agent-card.json").status,
        netns::get(OPERATOR_PORT, host, "/.well-known/agent-card.json").status,
        traefik_log()
    );
    let watching = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let gaps = {
        let watching = watching.clone();
        let host = host.to_string();
        std::thread::spawn(move || {
            let mut failures = Vec::new();
            let mut probes = 0;
            while watching.load(std::sync::atomic::Ordering::Relaxed) {
                let r = netns::get(GATEWAY_PORT, &host, "/.well-known/agent-card.json");
                probes += 1;
                if r.status != 200 {
                    failures.push(r.status);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            (probes, failures)
        })
    };
    let mut flags = common.to_vec();
    flags.extend_from_slice(&[
        "--route-kind",
        "HTTPRoute",
        "--gateway",
        "agentcard-system/public",
    ]);
    let op = Operator::start_on(kubeconfig, ns, None, &flags);
    let c = wait_card(&cards, "weather", &op, "Routed by the Gateway", |c| {
        ready(c) && condition(c, "Routed").is_some_and(|(s, _, _)| s == "True")
    })
    .await;
    let hash = c.status.as_ref().unwrap().content_hash.clone().unwrap();
    assert_eq!(
        c.status.as_ref().unwrap().route_kind.as_deref(),
        Some("HTTPRoute")
    );
    wait_for(Duration::from_secs(20), || async {
        Api::<Ingress>::namespaced(client.clone(), ns)
            .list(&Default::default())
            .await
            .is_ok_and(|l| l.items.is_empty())
    })
    .await
    .expect("the Ingress goes once the HTTPRoutes are accepted");
    // A moment more of traffic on the routes alone, then the verdict on the switch.
    tokio::time::sleep(Duration::from_secs(2)).await;
    watching.store(false, std::sync::atomic::Ordering::Relaxed);
    let (probes, failures) = gaps.join().unwrap();
    assert!(probes > 20, "too few probes: {probes}");
    assert!(
        failures.is_empty(),
        "served with gaps during the switch: {failures:?} of {probes}"
    );
    println!("switch Ingress -> HTTPRoute: {probes} probes through Traefik, none failed");
    let served = wait_for(Duration::from_secs(60), || {
        let r = through(host, "/.well-known/agent-card.json");
        std::future::ready(
            r.status == 200 && agentcard_operator::contract::content_hash(&r.body) == hash,
        )
    })
    .await;
    assert!(
        served.is_ok(),
        "not served through the Gateway: {:?}\n{}",
        through(host, "/.well-known/agent-card.json").status,
        traefik_log()
    );
    let jwks = through(host, "/.well-known/jwks.json");
    assert_eq!(jwks.status, 200);
    let reached = wait_for(Duration::from_secs(20), || {
        std::future::ready(through(host, "/a2a/v1").body == b"hello through the gateway")
    })
    .await;
    assert!(
        reached.is_ok(),
        "agent path: {}",
        through(host, "/a2a/v1").status
    );
    let verdict = support::python_sdk_verdict(
        &through(host, "/.well-known/agent-card.json").body,
        &jwks.body,
    );
    assert!(verdict.valid, "{:?}", verdict.error);

    // The routes themselves: the well-known paths exactly, in the operator's namespace under
    // the card's collision-free name; the agent's path by prefix in the card's namespace;
    // both on the platform's Gateway and the card's host.
    let public_name = ingress_name(team, "weather");
    let backend_name = backend_ingress_name_of("weather");
    let public = route_in(&client, ns, &public_name)
        .await
        .expect("the card's HTTPRoute in the operator's namespace");
    let backend = route_in(&client, team, &backend_name)
        .await
        .expect("the backend HTTPRoute in the card's namespace");
    for r in [&public, &backend] {
        assert_eq!(
            r.data["spec"]["parentRefs"],
            json!([{"group": "gateway.networking.k8s.io", "kind": "Gateway", "namespace": ns, "name": "public"}])
        );
        assert_eq!(r.data["spec"]["hostnames"], json!([host]));
    }
    assert_eq!(
        matches_of(&public),
        [
            ("Exact", "/.well-known/agent-card.json"),
            ("Exact", "/.well-known/jwks.json"),
            ("Exact", "/.well-known/did.json")
        ]
        .map(|(t, p)| (t.to_string(), p.to_string()))
    );
    assert_eq!(
        matches_of(&backend),
        [("PathPrefix".to_string(), "/a2a/v1".to_string())]
    );

    // A directory is routed the same way: its whole host on the Gateway, Routed from the
    // Gateway's verdict, its registry answered through Traefik.
    let dhost = "directory.agents.test";
    apply_dynamic(
        &client,
        json!({"apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentDirectory",
               "metadata": {"name": "everyone"}, "spec": {"publish": {"host": dhost}}}),
    )
    .await;
    let directories: Api<AgentDirectory> = Api::all(client.clone());
    let routed = wait_for(Duration::from_secs(60), || async {
        directories.get("everyone").await.is_ok_and(|d| {
            d.status.is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == "Routed" && c.status == "True")
                    && s.conditions
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True")
            })
        })
    })
    .await;
    assert!(
        routed.is_ok(),
        "directory not Routed: {:?}",
        directories.get("everyone").await.map(|d| d.status)
    );
    let droute = route_in(&client, ns, &agentdirectory::ingress_name("everyone"))
        .await
        .expect("the directory's HTTPRoute");
    assert_eq!(droute.data["spec"]["hostnames"], json!([dhost]));
    assert_eq!(
        matches_of(&droute),
        [("PathPrefix".to_string(), "/".to_string())]
    );
    assert!(Api::<Ingress>::namespaced(client.clone(), ns)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .is_empty());
    let listed = wait_for(Duration::from_secs(60), || {
        let r = through(dhost, "/v1/agents");
        std::future::ready(r.status == 200 && String::from_utf8_lossy(&r.body).contains(host))
    })
    .await;
    assert!(
        listed.is_ok(),
        "directory not answered through the Gateway: {}\n{}",
        through(dhost, "/v1/agents").status,
        traefik_log()
    );

    // A namespace the listener does not allow: its backend route is refused, and says so.
    let outsider = "outsider";
    namespace(&client, outsider, json!({})).await;
    agent_service(&client, outsider).await;
    let theirs: Api<AgentCard> = Api::namespaced(client.clone(), outsider);
    theirs
        .patch(
            "blocked",
            &PatchParams::apply("test").force(),
            &Patch::Apply(with_backend("blocked", "blocked.agents.test")),
        )
        .await
        .unwrap();
    let blocked = wait_card(
        &theirs,
        "blocked",
        &op,
        "Routed=False from the Gateway",
        |c| condition(c, "Routed").is_some_and(|(s, _, _)| s == "False"),
    )
    .await;
    let (_, reason, message) = condition(&blocked, "Routed").unwrap();
    assert_eq!(reason, "NotAllowedByListeners", "{message}");
    assert!(message.contains("outsider/"), "{message}");

    // Deleted, the card's routes go: Traefik answers 404.
    cards
        .delete("weather", &DeleteParams::default())
        .await
        .unwrap();
    let gone = wait_for(Duration::from_secs(60), || {
        std::future::ready(through(host, "/.well-known/agent-card.json").status == 404)
    })
    .await;
    assert!(
        gone.is_ok(),
        "still routed after deletion:\n{}",
        traefik_log()
    );
    // The server answers 404 for a deleted card whatever routes remain: the routes themselves
    // are gone, and the agent's path (which the agent would answer) is no longer routed.
    let routes_gone = wait_for(Duration::from_secs(30), || async {
        route_in(&client, ns, &public_name).await.is_none()
            && route_in(&client, team, &backend_name).await.is_none()
    })
    .await;
    assert!(routes_gone.is_ok(), "the card's HTTPRoutes outlive it");
    let unrouted = wait_for(Duration::from_secs(60), || {
        std::future::ready(through(host, "/a2a/v1").status == 404)
    })
    .await;
    assert!(
        unrouted.is_ok(),
        "the agent's path is still routed: {}",
        through(host, "/a2a/v1").status
    );
    println!("gateway: card, JWKS and agent served; refused route reported; 404 after deletion");
}
