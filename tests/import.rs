//! Import: an AgentCard with `spec.source` publishes the card a real agent serves.
//!
//! The agent is built with the official Python SDK (`tests/oracle/py_agent.py`: the SDK's own
//! card route under uvicorn). The operator reaches it the way it would in a cluster: through
//! the Service's EndpointSlices. The Kubernetes API refuses loopback addresses there, so the
//! scenario runs in a private network namespace (see `support::netns`), with the operator
//! watching every namespace, as a platform runs it.

mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentcard_operator::contract::{content_hash, PATH_CARD, PATH_JWKS};
use agentcard_operator::crd::AgentCard;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::{json, Value};
use support::netns;
use support::operator::{wait_card, Operator};
use support::plane::{client_for, dedicated_kubeconfig, install_crds};
use support::{condition, ready, requests_answered, Sdk};

const AGENT_PORT: u16 = 19100;
/// The operator's public port, on every address of the namespace (a hostile slice names it).
const OPERATOR_PORT: u16 = 18080;
/// The path hostile sources fetch, so the agent's log tells their requests from the team's.
const PROBE_PATH: &str = "/hostile-probe";
const HOST: &str = "echo.agents.test";
const DONE: &str =
    "imported: v1.0 and v0.3, refreshed, kept through garbage and outage, hostile sources and endpoints refused";

#[test]
fn an_agent_built_with_the_python_sdk_is_imported_signed_refreshed_and_kept() {
    netns::run_inside("inside_a_private_network_namespace", DONE, &[]);
}

fn source_reachable(c: &AgentCard) -> Option<(String, String, String)> {
    condition(c, "SourceReachable")
}

async fn service(client: &Client, ns: &str, value: Value) {
    let svc: Service = serde_json::from_value(value).unwrap();
    Api::<Service>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &svc)
        .await
        .unwrap();
}

fn imported(name: &str, host: &str, service: &str) -> Value {
    json!({
        "apiVersion": "agentcard.dev/v1alpha1",
        "kind": "AgentCard",
        "metadata": {"name": name},
        "spec": {
            "source": {"service": {"name": service, "port": 80}, "refreshSeconds": 10},
            "overrides": {"skillTags": ["imported"], "documentationUrl": "https://docs.example.org/echo"},
            "publish": {"host": host},
            "backend": {"serviceName": service, "port": 80}
        }
    })
}

/// The operator watching every namespace, its public port on every address.
fn start_operator(kubeconfig: &Path, opns: &str, extra: &[&str]) -> Operator {
    let listen = format!("0.0.0.0:{OPERATOR_PORT}");
    let mut args = vec![
        "--ingress-tls",
        "none",
        "--listen",
        &listen,
        "--admin-listen",
        "127.0.0.1:0",
    ];
    args.extend_from_slice(extra);
    Operator::start_on(kubeconfig, opns, None, &args)
}

/// The Pod `ns/name` holding `ip`, as kubelet would report it (no kubelet runs on this plane).
async fn agent_pod(client: &Client, ns: &str, name: &str, ip: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "echo"}},
        "spec": {"containers": [{"name": "agent", "image": "example.org/echo:1"}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    pods.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]}})),
    )
    .await
    .unwrap();
}

/// Requests `PROBE_PATH` got at the agent so far.
fn probes(requests: &Path) -> usize {
    std::fs::read_to_string(requests)
        .unwrap_or_default()
        .lines()
        .filter(|l| *l == PROBE_PATH)
        .count()
}

/// A card of `ns` importing from Service `name`, whose only endpoint is a hand-made
/// EndpointSlice naming `address:port` (and `pod` as its targetRef); `probe`: the card asks
/// for the agent's probe path, so a request that reaches the agent is counted.
async fn hand_made_source(
    client: &Client,
    ns: &str,
    name: &str,
    (address, port, pod): (&str, u16, Option<(&str, &str)>),
    probe: bool,
) {
    service(
        client,
        ns,
        json!({"metadata": {"name": name},
               "spec": {"ports": [{"name": "http", "port": 80, "targetPort": port}]}}),
    )
    .await;
    let slice_name = format!("{name}-hand-made");
    let slice = netns::Slice {
        name: &slice_name,
        address,
        pod,
    };
    slice.create(client, ns, name, "http", port).await;
    let mut card = imported(name, &format!("{name}.{ns}.test"), name);
    if probe {
        card["spec"]["source"]["path"] = json!(PROBE_PATH);
    }
    support::apply_card(client, ns, &card).await;
}

/// Hand-made EndpointSlices naming addresses that are not the card's namespace's Pods: each
/// refused with `EndpointNotAllowed` naming the address, and no request sent there (the agent
/// logs its requests; the operator counts those it answers). With
/// `--source-allow-unmanaged-endpoints`, a selector-less Service in front of the team's own
/// address imports; the hostile ones stay refused.
async fn hostile_endpoints(
    client: &Client,
    op: &mut Operator,
    kubeconfig: &Path,
    opns: &str,
    requests: &Path,
) {
    let (team, evil) = ("team", "evil");
    // (namespace, card, address, port, targetRef, what the refusal says)
    type Refused<'a> = (
        &'a str,
        &'a str,
        &'a str,
        u16,
        Option<(&'a str, &'a str)>,
        &'a str,
    );
    let cases: [Refused; 4] = [
        (
            evil,
            "other-pod",
            netns::PEER_ADDR,
            AGENT_PORT,
            Some((team, "echo-0")),
            "its targetRef is Pod team/echo-0, not a Pod of this namespace",
        ),
        (
            evil,
            "no-pod",
            netns::PEER_ADDR,
            AGENT_PORT,
            None,
            "the endpoint names no Pod",
        ),
        (
            evil,
            "operator",
            netns::ADDR,
            OPERATOR_PORT,
            None,
            "the operator's own address",
        ),
        (
            team,
            "vm",
            netns::PEER_ADDR,
            AGENT_PORT,
            None,
            "the endpoint names no Pod",
        ),
    ];
    let before = (probes(requests), requests_answered(&op.metrics()));
    for (ns, name, address, port, pod, _) in cases {
        hand_made_source(client, ns, name, (address, port, pod), ns == evil).await;
    }
    let refused = |c: &AgentCard| {
        source_reachable(c).is_some_and(|(s, r, _)| s == "False" && r == "EndpointNotAllowed")
    };
    for (ns, name, address, port, _, why) in cases {
        let cards = Api::<AgentCard>::namespaced(client.clone(), ns);
        let c = wait_card(&cards, name, op, "EndpointNotAllowed", refused).await;
        let (_, _, message) = source_reachable(&c).unwrap();
        assert!(
            message.contains(&format!("endpoint {address}:{port} of Service {ns}/{name}"))
                && message.contains(why)
                && message.contains("--source-allow-unmanaged-endpoints") == why.contains("Pod"),
            "{name}: {message}"
        );
        assert!(
            !ready(&c) && c.status.unwrap().url.is_none(),
            "{name} is published"
        );
    }
    // Refused sources are retried within seconds: give them several tries.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = (probes(requests), requests_answered(&op.metrics()));
    assert_eq!(
        after, before,
        "requests reached refused endpoints (agent, operator)"
    );

    // A Service of the team's with an external IP: another namespace's endpoint naming it is
    // refused with the opt-in too.
    const TEAM_EXTERNAL_IP: &str = "203.0.113.7";
    service(
        client,
        team,
        json!({"metadata": {"name": "public"},
               "spec": {"ports": [{"name": "http", "port": 80}], "externalIPs": [TEAM_EXTERNAL_IP]}}),
    )
    .await;
    // The opt-in: the team's selector-less Service imports; the hostile ones stay refused
    // (another namespace's Pod holds the address, or it is the operator's).
    op.kill();
    *op = start_operator(kubeconfig, opns, &["--source-allow-unmanaged-endpoints"]);
    let team_cards = Api::<AgentCard>::namespaced(client.clone(), team);
    wait_card(&team_cards, "vm", op, "Ready with the opt-in", |c| {
        ready(c) && source_reachable(c).is_some_and(|(s, _, _)| s == "True")
    })
    .await;
    let before = (probes(requests), requests_answered(&op.metrics()));
    let evil_cards = Api::<AgentCard>::namespaced(client.clone(), evil);
    for (name, why) in [
        ("other-pod", "the address of a Pod of another namespace"),
        ("no-pod", "the address of a Pod of another namespace"),
        ("operator", "the operator's own address"),
    ] {
        let c = wait_card(&evil_cards, name, op, why, |c| {
            refused(c) && source_reachable(c).is_some_and(|(_, _, m)| m.contains(why))
        })
        .await;
        assert!(!ready(&c), "{name} is published with the opt-in");
    }
    // With the opt-in, still never: cloud metadata outside the link-local range, shared
    // address space, another namespace's external IP, a targetRef name no Pod can have.
    // (card, address, targetRef, what the refusal says)
    type Case<'a> = (&'a str, &'a str, Option<(&'a str, &'a str)>, &'a str);
    let more: [Case; 4] = [
        (
            "metadata",
            "100.100.100.200",
            None,
            "special-purpose address",
        ),
        ("cgnat", "100.64.0.9", None, "special-purpose address"),
        (
            "external",
            TEAM_EXTERNAL_IP,
            None,
            "a load balancer or external IP of a Service of another namespace",
        ),
        (
            "bad-ref",
            netns::PEER_ADDR,
            Some((evil, "../../../api/v1/namespaces/team/secrets/x")),
            "names no valid Pod name",
        ),
    ];
    for (name, address, pod, _) in more {
        hand_made_source(client, evil, name, (address, AGENT_PORT, pod), true).await;
    }
    for (name, address, _, why) in more {
        let c = wait_card(&evil_cards, name, op, why, |c| {
            refused(c) && source_reachable(c).is_some_and(|(_, _, m)| m.contains(why))
        })
        .await;
        let (_, _, message) = source_reachable(&c).unwrap();
        assert!(message.contains(address), "{name}: {message}");
        assert!(!ready(&c), "{name} is published with the opt-in");
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        (probes(requests), requests_answered(&op.metrics())),
        before,
        "requests reached refused endpoints with the opt-in"
    );
}

/// The agent, in its own network namespace (the operator never fetches from its own
/// addresses), appending each request it gets to `requests`.
fn start_agent(peer: &netns::Peer, control: &Path, requests: &Path) -> netns::Proc {
    let python = support::oracle().join("venv/bin/python");
    netns::Proc(
        peer.command(python)
            .arg(support::root().join("tests/oracle/py_agent.py"))
            .args(["--port", &AGENT_PORT.to_string()])
            .arg("--control")
            .arg(control)
            .arg("--requests")
            .arg(requests)
            .arg("--tokens")
            .arg(requests.with_file_name("tokens.txt"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting the Python SDK agent"),
    )
}

fn set_mode(control: &Path, mode: &str, version: &str) {
    std::fs::write(
        control,
        json!({"mode": mode, "version": version}).to_string(),
    )
    .unwrap();
}

/// The served card, once its bytes are the ones `status.contentHash` names and `pred` holds.
async fn served_when(
    op: &Operator,
    cards: &Api<AgentCard>,
    within: Duration,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let r = op.get(HOST, PATH_CARD);
        let hash = cards
            .get("echo")
            .await
            .ok()
            .and_then(|c| c.status)
            .and_then(|s| s.content_hash);
        if r.status == 200 && hash.as_deref() == Some(content_hash(&r.body).as_str()) {
            let v: Value = serde_json::from_slice(&r.body).unwrap();
            if pred(&v) {
                return v;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the served card never matched: {} {}\n{}",
            r.status,
            String::from_utf8_lossy(&r.body),
            support::cluster::tail(&op.logs())
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Both official SDKs verify the served card against the served JWKS.
fn sdks_verify(op: &Operator, card: &Value) {
    let dir = tempfile::tempdir().unwrap();
    let (card_file, jwks_file) = (dir.path().join("card.json"), dir.path().join("jwks.json"));
    std::fs::write(&card_file, card.to_string()).unwrap();
    std::fs::write(&jwks_file, op.get(HOST, PATH_JWKS).body).unwrap();
    for sdk in [Sdk::Python, Sdk::Js] {
        let v = support::sdk_verify(sdk, &jwks_file, std::slice::from_ref(&card_file))
            .pop()
            .unwrap();
        assert!(v.valid, "{sdk:?} rejects the imported card: {:?}", v.error);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs inside the network namespace the outer test makes"]
async fn inside_a_private_network_namespace() {
    netns::setup_loopback();
    let kubeconfig = dedicated_kubeconfig();
    let client = client_for(kubeconfig).await;
    install_crds(&client).await;
    let opns = "agentcard-system";
    support::cluster::create_namespace(&client, opns, json!({})).await;
    let mut op = start_operator(kubeconfig, opns, &[]);

    // The agent, its Pod, its Service and the EndpointSlice naming the Pod. No kubelet runs
    // on this plane: the test writes the Pod's status as a kubelet would, giving it the
    // agent's address.
    let dir = tempfile::tempdir().unwrap();
    let control = dir.path().join("control.json");
    let requests = dir.path().join("requests.log");
    set_mode(&control, "v1", "1.0.0");
    let peer = netns::Peer::start();
    let mut agent = Some(start_agent(&peer, &control, &requests));
    let team = "team";
    support::cluster::create_namespace(&client, team, json!({})).await;
    agent_pod(&client, team, "echo-0", netns::PEER_ADDR).await;
    service(
        &client,
        team,
        json!({"metadata": {"name": "echo"},
               "spec": {"ports": [{"name": "http", "port": 80, "targetPort": AGENT_PORT}]}}),
    )
    .await;
    let slice = netns::Slice {
        name: "echo-test",
        address: netns::PEER_ADDR,
        pod: Some((team, "echo-0")),
    };
    slice
        .create(&client, team, "echo", "http", AGENT_PORT)
        .await;

    // Published: signed, on the public host, interface moved to the backend's public path,
    // overrides applied; the official SDKs verify it.
    let cards: Api<AgentCard> = Api::namespaced(client.clone(), team);
    let started = Instant::now();
    cards
        .patch(
            "echo",
            &PatchParams::apply("test").force(),
            &Patch::Apply(&imported("echo", HOST, "echo")),
        )
        .await
        .unwrap();
    let c = wait_card(&cards, "echo", &op, "Ready", |c| {
        ready(c) && source_reachable(c).is_some_and(|(s, _, _)| s == "True")
    })
    .await;
    let v = served_when(&op, &cards, Duration::from_secs(20), |v| {
        v["version"] == "1.0.0"
    })
    .await;
    println!(
        "imported and served {:?} after the apply",
        started.elapsed()
    );
    assert_eq!(v["name"], "Echo Agent");
    assert_eq!(
        v["supportedInterfaces"][0],
        json!({"url": format!("https://{HOST}/a2a"), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"})
    );
    assert_eq!(v["skills"][0]["tags"], json!(["echo", "test", "imported"]));
    assert_eq!(v["documentationUrl"], "https://docs.example.org/echo");
    assert!(v["signatures"].as_array().is_some_and(|s| s.len() == 1));
    let status = c.status.clone().unwrap();
    let src = status.source.clone().unwrap();
    assert_eq!(
        src.url,
        "http://echo.team.svc:80/.well-known/agent-card.json"
    );
    assert_eq!(src.version.as_deref(), Some("1.0"));
    assert!(src.etag.is_some() && src.fetched_at.is_some(), "{src:?}");
    assert!(
        status.warnings.iter().any(|w| w.contains("examples[0]")),
        "the SDK card's empty example is reported, not refused: {:?}",
        status.warnings
    );
    sdks_verify(&op, &v);
    let out = Command::new("kubectl")
        .args(["get", "agentcards", "-n", team, "-o", "wide"])
        .env("KUBECONFIG", kubeconfig)
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    let row: Vec<&str> = table
        .lines()
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert!(
        table
            .lines()
            .next()
            .is_some_and(|h| h.contains("SOURCE") && h.contains("FETCHED"))
            && row.first() == Some(&"echo")
            && row[1..].contains(&"echo"),
        "kubectl get shows the source:\n{table}"
    );

    // Unchanged, a refresh is a conditional request the SDK answers 304.
    wait_card(&cards, "echo", &op, "NotModified", |c| {
        source_reachable(c).is_some_and(|(s, r, _)| s == "True" && r == "NotModified")
    })
    .await;

    // The agent's card changes: the published one follows within the refresh interval.
    set_mode(&control, "v1", "1.0.1");
    let changed = Instant::now();
    served_when(&op, &cards, Duration::from_secs(25), |v| {
        v["version"] == "1.0.1"
    })
    .await;
    println!(
        "a changed agent card was republished after {:?} (refresh 10 s)",
        changed.elapsed()
    );

    // A v0.3 agent: converted to v1.0, signed, verified.
    set_mode(&control, "v03", "2.0.0");
    let v = served_when(&op, &cards, Duration::from_secs(25), |v| {
        v["version"] == "2.0.0"
    })
    .await;
    assert_eq!(
        v["supportedInterfaces"][0],
        json!({"url": format!("https://{HOST}/a2a"), "protocolBinding": "JSONRPC", "protocolVersion": "0.3"})
    );
    assert!(v.get("url").is_none() && v.get("preferredTransport").is_none());
    let c = cards.get("echo").await.unwrap();
    assert_eq!(
        c.status.unwrap().source.unwrap().version.as_deref(),
        Some("0.3")
    );
    sdks_verify(&op, &v);
    let good = content_hash(&op.get(HOST, PATH_CARD).body);

    // Garbage, then no agent at all: the last good card stays served, and the status says why.
    for (what, reason) in [("garbage", "InvalidCard"), ("gone", "Unreachable")] {
        if what == "garbage" {
            set_mode(&control, "garbage", "3.0.0");
        } else {
            agent.take();
        }
        let c = wait_card(&cards, "echo", &op, reason, |c| {
            source_reachable(c).is_some_and(|(s, r, _)| s == "False" && r == reason)
        })
        .await;
        let (_, _, message) = source_reachable(&c).unwrap();
        assert!(
            message.contains("echo.team.svc") && message.contains("last good card stays served"),
            "{message}"
        );
        assert!(ready(&c), "{what}: Ready must stay True: {:?}", c.status);
        assert_eq!(
            c.status.unwrap().content_hash.as_deref(),
            Some(good.as_str())
        );
        let r = op.get(HOST, PATH_CARD);
        assert_eq!(
            (r.status, content_hash(&r.body)),
            (200, good.clone()),
            "{what}"
        );
    }

    // An operator restarted while the agent is still gone has nothing in memory: the last good
    // card, read back from its ConfigMap, stays published with the same bytes.
    op.kill();
    let mut op = start_operator(kubeconfig, opns, &[]);
    let c = wait_card(&cards, "echo", &op, "Unreachable after a restart", |c| {
        ready(c) && source_reachable(c).is_some_and(|(s, r, _)| s == "False" && r == "Unreachable")
    })
    .await;
    assert_eq!(
        c.status.unwrap().content_hash.as_deref(),
        Some(good.as_str())
    );
    let served = support::http::eventually(Duration::from_secs(10), || {
        let r = op.get(HOST, PATH_CARD);
        (r.status == 200).then(|| content_hash(&r.body))
    });
    assert_eq!(
        served.as_deref(),
        Some(good.as_str()),
        "the restarted operator serves the last good card"
    );

    // The agent is back: the card is fetched again.
    set_mode(&control, "v1", "4.0.0");
    agent = Some(start_agent(&peer, &control, &requests));
    served_when(&op, &cards, Duration::from_secs(30), |v| {
        v["version"] == "4.0.0"
    })
    .await;

    // The agent serves an extended card to callers with a token: imported with a token the
    // operator requests for the team's ServiceAccount and the audience the team names, it is
    // published as the card's extended card (signed, the public card and more), and the token
    // the agent received names that ServiceAccount and audience.
    support::service_account(&client, team, "importer").await;
    std::fs::write(
        &control,
        json!({"mode": "v1", "version": "5.0.0", "extended": true}).to_string(),
    )
    .unwrap();
    let mut with_extended = imported("echo", HOST, "echo");
    with_extended["spec"]["source"]["extendedCard"] =
        json!({"serviceAccountName": "importer", "audience": "https://echo.team.internal"});
    support::apply_card(&client, team, &with_extended).await;
    let c = wait_card(
        &cards,
        "echo",
        &op,
        "Ready with an imported extended card",
        |c| {
            ready(c)
                && c.status.as_ref().is_some_and(|s| s.extended_card.is_some())
                && source_reachable(c).is_some_and(|(s, _, _)| s == "True")
        },
    )
    .await;
    let public = served_when(&op, &cards, Duration::from_secs(30), |v| {
        v["version"] == "5.0.0"
    })
    .await;
    assert_eq!(public["capabilities"]["extendedAgentCard"], true);
    assert!(!public.to_string().contains("echo-history"));
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), team);
    let ext_cm = cms.get("extended-agentcard-echo").await.unwrap();
    let ext_body = ext_cm.data.unwrap()["extended-agent-card.json"].clone();
    assert_eq!(
        content_hash(ext_body.as_bytes()),
        c.status.unwrap().extended_card.unwrap().content_hash
    );
    let ext: Value = serde_json::from_str(&ext_body).unwrap();
    let ids: Vec<&str> = ext["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["echo", "echo-history"]);
    // The overrides apply to the imported extended card as to the public card.
    assert_eq!(ext["skills"][1]["tags"], json!(["echo", "imported"]));
    assert_eq!(
        ext["description"],
        "Echoes what it is told, and remembers what it was told before."
    );
    sdks_verify(&op, &ext);
    let token = std::fs::read_to_string(requests.with_file_name("tokens.txt")).unwrap();
    let review: k8s_openapi::api::authentication::v1::TokenReview = serde_json::from_value(
        json!({"spec": {"token": token, "audiences": ["https://echo.team.internal"]}}),
    )
    .unwrap();
    let reviewed = Api::<k8s_openapi::api::authentication::v1::TokenReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(reviewed.authenticated, Some(true), "{reviewed:?}");
    assert_eq!(
        reviewed.user.unwrap().username.as_deref(),
        Some("system:serviceaccount:team:importer")
    );
    // A ServiceAccount that does not exist: the source says so, and both last good cards stay.
    let good_ext = ext_body.clone();
    with_extended["spec"]["source"]["extendedCard"]["serviceAccountName"] = json!("nobody");
    support::apply_card(&client, team, &with_extended).await;
    let c = wait_card(&cards, "echo", &op, "CredentialUnavailable", |c| {
        source_reachable(c).is_some_and(|(s, r, _)| s == "False" && r == "CredentialUnavailable")
    })
    .await;
    assert!(ready(&c));
    let (_, _, message) = source_reachable(&c).unwrap();
    assert!(message.contains("team/nobody"), "{message}");
    let kept = cms.get("extended-agentcard-echo").await.unwrap();
    assert_eq!(kept.data.unwrap()["extended-agent-card.json"], good_ext);
    support::apply_card(&client, team, &imported("echo", HOST, "echo")).await;

    // A hostile tenant: its source can only name a Service of its own namespace. One that does
    // not exist there (the victim's is in `team`), or an ExternalName Service pointing at the
    // victim's, publishes nothing; `spec.source` has no namespace to set.
    let evil = "evil";
    support::cluster::create_namespace(&client, evil, json!({})).await;
    service(
        &client,
        evil,
        json!({"metadata": {"name": "alias"},
               "spec": {"type": "ExternalName", "externalName": "echo.team.svc.cluster.local",
                        "ports": [{"name": "http", "port": 80}]}}),
    )
    .await;
    let evil_cards: Api<AgentCard> = Api::namespaced(client.clone(), evil);
    for (name, svc, reason) in [
        ("steal", "echo", "ServiceNotFound"),
        ("alias", "alias", "ServiceNotAllowed"),
    ] {
        evil_cards
            .patch(
                name,
                &PatchParams::apply("test").force(),
                &Patch::Apply(&imported(name, &format!("{name}.evil.test"), svc)),
            )
            .await
            .unwrap();
        let c = wait_card(&evil_cards, name, &op, reason, |c| {
            source_reachable(c).is_some_and(|(s, r, _)| s == "False" && r == reason)
        })
        .await;
        let (s, r, _) = condition(&c, "Ready").unwrap();
        assert_eq!((s.as_str(), r.as_str()), ("False", "SourceUnavailable"));
        assert!(c.status.unwrap().url.is_none(), "{name} is served");
        assert_eq!(op.get(&format!("{name}.evil.test"), PATH_CARD).status, 404);
    }
    let mut cross = imported("cross", "cross.evil.test", "echo");
    cross["spec"]["source"]["service"]["namespace"] = json!(team);
    let refused = evil_cards
        .patch(
            "cross",
            &PatchParams::apply("test").force().validation_strict(),
            &Patch::Apply(&cross),
        )
        .await;
    assert!(
        refused.is_err(),
        "spec.source.service.namespace must not exist"
    );
    let mut both = imported("both", "both.evil.test", "alias");
    both["spec"]["card"] =
        support::cluster::card("both", "both.evil.test", "")["spec"]["card"].clone();
    let err = evil_cards
        .patch(
            "both",
            &PatchParams::apply("test").force(),
            &Patch::Apply(&both),
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("exactly one of card and source"),
        "{err}"
    );
    hostile_endpoints(&client, &mut op, kubeconfig, opns, &requests).await;
    drop(agent);
    println!("{DONE}");
}
