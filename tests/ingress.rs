//! A real ingress controller in the loop: Traefik v3.6.12 (built from Go modules) reads the
//! Ingresses the operator writes and routes real HTTP to the operator's server and to an
//! agent's Service.
//!
//! The Kubernetes API refuses loopback addresses in EndpointSlices, so the scenario runs in a
//! private network namespace of its own (`unshare --net`, root): the loopback device there also
//! carries 192.0.2.10, every process listens on all addresses, and hand-made EndpointSlices
//! point the chart's Service and the agent's Service at 192.0.2.10. The plane, the operator,
//! Traefik and the stand-in agent all run inside that namespace: the outer test re-runs this
//! test binary there for the inner one.

mod support;

use std::time::Duration;

use agentcard_operator::crd::AgentCard;
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::cluster::card;
use support::netns;
use support::operator::{wait_card, Operator};
use support::plane::{client_for, dedicated_kubeconfig, wait_for};
use support::ready;
use support::tools::Tool;

const OPERATOR_PORT: u16 = 18080;
const AGENT_PORT: u16 = 19000;
const TRAEFIK_PORT: u16 = 18000;

#[test]
fn traefik_routes_cards_jwks_and_agent_traffic_to_what_the_operator_wrote() {
    netns::run_inside(
        "inside_a_private_network_namespace",
        "served through Traefik: card, JWKS, agent path; 404 after deletion",
        &[Tool::Helm, Tool::Traefik],
    );
}

fn through_traefik(host: &str, path: &str) -> support::http::Resp {
    netns::get(TRAEFIK_PORT, host, path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs inside the network namespace the outer test makes"]
async fn inside_a_private_network_namespace() {
    netns::setup_loopback();
    let kubeconfig = dedicated_kubeconfig();
    let client = client_for(kubeconfig).await;

    // The chart, its Service backed by this namespace's operator process.
    let ns = "agentcard-system";
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
        )
        .await
        .unwrap();
    let helm = support::tools::helm_command(kubeconfig)
        .args([
            "install",
            "rel",
            "charts/agentcard-operator",
            "--namespace",
            ns,
            "--set",
            "ingress.tls=none",
        ])
        .output()
        .unwrap();
    assert!(
        helm.status.success(),
        "{}",
        String::from_utf8_lossy(&helm.stderr)
    );
    netns::endpoint_slice(&client, ns, "rel-agentcard-operator", "http", OPERATOR_PORT).await;
    let listen = format!("0.0.0.0:{OPERATOR_PORT}");
    let op = Operator::start_on(
        kubeconfig,
        ns,
        None,
        &[
            "--listen",
            &listen,
            "--admin-listen",
            "0.0.0.0:18081",
            "--service-name",
            "rel-agentcard-operator",
            "--ingress-tls",
            "none",
        ],
    );

    // A stand-in agent: a static HTTP server answering its A2A path.
    let root = tempfile::tempdir().unwrap();
    let _agent = netns::agent(root.path(), AGENT_PORT, "hello from the agent");
    let tenant = "team";
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": tenant}})).unwrap(),
        )
        .await
        .unwrap();
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "agent"},
        "spec": {"ports": [{"name": "a2a", "port": AGENT_PORT, "targetPort": AGENT_PORT}]}
    }))
    .unwrap();
    Api::<Service>::namespaced(client.clone(), tenant)
        .create(&PostParams::default(), &svc)
        .await
        .unwrap();
    netns::endpoint_slice(&client, tenant, "agent", "a2a", AGENT_PORT).await;

    // Traefik, watching Ingresses with the plane's kubeconfig.
    let log = root.path().join("traefik.log");
    let _traefik = netns::traefik(
        kubeconfig,
        &format!(":{TRAEFIK_PORT}"),
        &["kubernetesIngress"],
        &log,
    );
    let traefik_log = || std::fs::read_to_string(&log).unwrap_or_default();

    // A card with a backend, published by the operator, reached through Traefik.
    let host = "weather.agents.test";
    let mut m = card("weather", host, "");
    m["spec"]["backend"] = json!({"serviceName": "agent", "port": AGENT_PORT, "path": "/a2a/v1"});
    let cards: Api<AgentCard> = Api::namespaced(client.clone(), tenant);
    cards
        .patch(
            "weather",
            &PatchParams::apply("test").force(),
            &Patch::Apply(&m),
        )
        .await
        .unwrap();
    let c = wait_card(&cards, "weather", &op, "Ready", ready).await;
    let hash = c.status.unwrap().content_hash.unwrap();
    let served = wait_for(Duration::from_secs(60), || {
        // The exact bytes the status confirms. (Traefik's Go transport asks for gzip and
        // decompresses, so the ETag it passes on may be the gzip representation's.)
        let r = through_traefik(host, "/.well-known/agent-card.json");
        std::future::ready(
            r.status == 200 && agentcard_operator::contract::content_hash(&r.body) == hash,
        )
    })
    .await;
    if served.is_err() {
        let r = through_traefik(host, "/.well-known/agent-card.json");
        let direct = op.get(host, "/.well-known/agent-card.json");
        panic!(
            "the card is not served through Traefik: {} {:?} (the operator directly: {} {:?}); Traefik log:\n{}",
            r.status, r.headers, direct.status, direct.headers, traefik_log()
        );
    }
    let card_resp = through_traefik(host, "/.well-known/agent-card.json");
    let jwks = through_traefik(host, "/.well-known/jwks.json");
    assert_eq!(jwks.status, 200, "JWKS through Traefik");
    let reached = wait_for(Duration::from_secs(20), || {
        let agent = through_traefik(host, "/a2a/v1");
        std::future::ready(agent.status == 200 && agent.body == b"hello from the agent")
    })
    .await;
    let agent = through_traefik(host, "/a2a/v1");
    assert!(
        reached.is_ok(),
        "the agent's path through Traefik: {} {:?} {}",
        agent.status,
        agent.headers,
        String::from_utf8_lossy(&agent.body)
    );
    let verdict = support::python_sdk_verdict(&card_resp.body, &jwks.body);
    assert!(
        verdict.valid,
        "the Python SDK rejects the card served through Traefik: {:?}",
        verdict.error
    );

    // A REST agent with an extended card the operator answers: Traefik sends the exact path
    // `<backend path>/extendedAgentCard` to the operator (it wins over the backend's prefix
    // route; the stand-in agent has a file there it would otherwise serve), which asks the
    // API server about the caller's ServiceAccount token; the official Python SDK's REST
    // transport fetches the extended card through Traefik and verifies it.
    std::fs::create_dir_all(root.path().join("a2a/rest")).unwrap();
    std::fs::write(
        root.path().join("a2a/rest/extendedAgentCard"),
        "the agent's",
    )
    .unwrap();
    let rest_host = "rest.agents.test";
    let audience = format!("https://{rest_host}");
    let mut rest = card("rest", rest_host, "");
    rest["spec"]["backend"] = json!({"serviceName": "agent", "port": AGENT_PORT,
        "path": "/a2a/rest", "protocolBinding": "HTTP+JSON"});
    rest["spec"]["extendedCard"] = json!({
        "skills": [{"id": "more", "name": "More", "description": "For callers.", "tags": ["t"]}],
        "auth": {"serviceAccount": {"audiences": [audience]}}
    });
    support::apply_card(&client, tenant, &rest).await;
    wait_card(&cards, "rest", &op, "Ready with an extended card", |c| {
        ready(c) && c.status.as_ref().is_some_and(|s| s.extended_card.is_some())
    })
    .await;
    support::service_account(&client, tenant, "caller").await;
    let token = support::kubectl(
        kubeconfig,
        &[
            "create",
            "token",
            "caller",
            "-n",
            tenant,
            "--audience",
            &audience,
        ],
    )
    .trim()
    .to_string();
    let traefik: std::net::SocketAddr = format!("127.0.0.1:{TRAEFIK_PORT}").parse().unwrap();
    let path = "/a2a/rest/extendedAgentCard";
    let bearer = format!("Bearer {token}");
    let with_token = || {
        support::http::request(
            traefik,
            "GET",
            path,
            &[("Host", rest_host), ("Authorization", &bearer)],
        )
    };
    let routed = wait_for(Duration::from_secs(60), || {
        std::future::ready(with_token().status == 200)
    })
    .await;
    let r = with_token();
    assert!(
        routed.is_ok(),
        "the extended card through Traefik: {} {}; Traefik log:\n{}",
        r.status,
        String::from_utf8_lossy(&r.body),
        traefik_log()
    );
    let ext_cm = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), tenant)
        .get("extended-agentcard-rest")
        .await
        .unwrap();
    assert_eq!(
        r.body,
        ext_cm.data.unwrap()["extended-agent-card.json"].as_bytes(),
        "not the extended card's bytes"
    );
    let without = through_traefik(rest_host, path);
    assert_eq!(
        without.status,
        401,
        "{}",
        String::from_utf8_lossy(&without.body)
    );
    assert!(without
        .header("www-authenticate")
        .is_some_and(|c| c.starts_with("Bearer")));
    let rest_jwks = root.path().join("jwks.json");
    std::fs::write(
        &rest_jwks,
        &through_traefik(rest_host, "/.well-known/jwks.json").body,
    )
    .unwrap();
    let (fetched, verdict) = support::sdk_extended(
        &format!("http://{traefik}"),
        (rest_host, "/a2a/rest", "HTTP+JSON"),
        &rest_jwks,
        Some(&token),
    );
    assert!(fetched, "the Python SDK through Traefik: {verdict}");
    assert_eq!(verdict["skills"], json!(["s", "more"]));
    cards
        .delete("rest", &DeleteParams::default())
        .await
        .unwrap();

    // Deleted, the card's routes go: Traefik answers 404.
    cards
        .delete("weather", &DeleteParams::default())
        .await
        .unwrap();
    let gone = wait_for(Duration::from_secs(60), || {
        std::future::ready(through_traefik(host, "/.well-known/agent-card.json").status == 404)
    })
    .await;
    assert!(
        gone.is_ok(),
        "still routed after deletion; Traefik log:\n{}",
        traefik_log()
    );
    // The server answers 404 for a deleted card whatever routes remain: the Ingresses
    // themselves are gone, and the agent's path (which the agent would answer) too.
    let ingresses_gone = wait_for(Duration::from_secs(30), || async {
        let left = |namespace: &'static str| {
            let api: Api<Ingress> = Api::namespaced(client.clone(), namespace);
            async move { api.list(&Default::default()).await.map(|l| l.items.len()) }
        };
        matches!((left(ns).await, left(tenant).await), (Ok(0), Ok(0)))
    })
    .await;
    if ingresses_gone.is_err() {
        let mut left = Vec::new();
        for namespace in [ns, tenant] {
            let api: Api<Ingress> = Api::namespaced(client.clone(), namespace);
            for i in api.list(&Default::default()).await.unwrap().items {
                left.push(format!(
                    "{namespace}/{} {:?} {:?}",
                    i.metadata.name.unwrap_or_default(),
                    i.metadata.annotations,
                    i.metadata.owner_references
                ));
            }
        }
        panic!("the card's Ingresses outlive it: {left:#?}");
    }
    let unrouted = wait_for(Duration::from_secs(60), || {
        std::future::ready(through_traefik(host, "/a2a/v1").status == 404)
    })
    .await;
    assert!(
        unrouted.is_ok(),
        "the agent's path is still routed: {}",
        through_traefik(host, "/a2a/v1").status
    );
    println!("served through Traefik: card, JWKS, agent path; 404 after deletion");
}
