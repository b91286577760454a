//! AgentDiscovery on a plane of this suite's own, the operator watching every namespace, as the
//! cluster admin and tenants act: Services marked as A2A get an AgentCard in their namespace
//! that imports the agent's card, owned by the Service; opted-out Services and namespaces get
//! none; a Service a person's card already imports, or whose name a person's card holds, is
//! left alone (the latter reported); a claimed card (by label or by edit) is the tenant's from
//! then on and no longer goes with its Service; a discovered host another namespace holds is
//! never taken from it; `kubectl get agentcards` shows where each card came from. A workload
//! kagenti labels as an A2A agent gets a card through the Service selecting its Pods. In a
//! private network namespace, a kagent Agent fronting a real agent (the Python SDK's) is
//! published with no AgentCard written by anyone and goes with the Agent.

mod support;

use std::time::Duration;

use agentcard_operator::crd::{AgentCard, AgentDiscovery};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::Client;
use serde_json::{json, Value};
use support::cluster::*;
use support::plane::wait_for;
use support::{condition, ready};

const SOURCE_LABEL: &str = "agentcard.dev/discovered-by";

fn service(name: &str, labels: Value, ports: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "labels": labels},
        "spec": {"selector": {"app": name}, "ports": ports}
    })
}

fn a2a_port() -> Value {
    json!([{"name": "http", "port": 8080, "appProtocol": "a2a"}])
}

async fn apply_service(client: &Client, ns: &str, svc: &Value) {
    let name = svc["metadata"]["name"].as_str().unwrap();
    Api::<Service>::namespaced(client.clone(), ns)
        .patch(
            name,
            &PatchParams::apply("tenant").force(),
            &Patch::Apply(svc),
        )
        .await
        .unwrap_or_else(|e| panic!("service {ns}/{name}: {e}"));
}

async fn discovery_status(p: &Platform, name: &str) -> Value {
    let d = Api::<AgentDiscovery>::all(p.admin.clone())
        .get(name)
        .await
        .unwrap();
    serde_json::to_value(d.status).unwrap()
}

/// Wait until the discovery's status satisfies `pred`; its last status otherwise.
async fn wait_discovery(
    p: &Platform,
    name: &str,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let ok = wait_for(Duration::from_secs(30), || async {
        pred(&discovery_status(p, name).await)
    })
    .await;
    let status = discovery_status(p, name).await;
    assert!(
        ok.is_ok(),
        "discovery {name}: {what}: {status:#}\n{}",
        tail(&p.op.logs())
    );
    status
}

async fn card_opt(p: &Platform, ns: &str, name: &str) -> Option<AgentCard> {
    Api::<AgentCard>::namespaced(p.admin.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()
}

async fn wait_gone(p: &Platform, ns: &str, name: &str, what: &str) {
    let ok = wait_for(Duration::from_secs(30), || async {
        card_opt(p, ns, name).await.is_none()
    })
    .await;
    assert!(ok.is_ok(), "{ns}/{name} is still there: {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_agents_get_cards_that_tenants_can_opt_out_of_claim_and_never_lose() {
    let mut p = Platform::start(&[]).await;
    let t = rand_tag();
    let a = Tenant::new(&p, &format!("disc-a-{t}")).await;
    let quiet = Tenant::new(&p, &format!("disc-q-{t}")).await;
    let victim = Tenant::new(&p, &format!("disc-v-{t}")).await;
    // A namespace that opts out as a whole.
    let ns_api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(p.admin.clone());
    ns_api
        .patch(
            &quiet.ns,
            &PatchParams::apply("admin"),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": quiet.ns, "labels": {"agentcard.dev/discover": "false"}}})),
        )
        .await
        .unwrap();
    // Another tenant already publishes the host the template would give a's Service "evil".
    let stolen = format!("evil-{}.open.test", a.ns);
    victim.apply(&card("victim", &stolen, "")).await.unwrap();
    wait_card(&p, &victim.ns, "victim", "Ready", ready).await;

    for svc in [
        service("weather", json!({}), a2a_port()),
        service(
            "gateway",
            json!({}),
            json!([{"name": "web", "port": 80}, {"name": "agent", "port": 9000, "appProtocol": "kgateway.dev/a2a"}]),
        ),
        service(
            "labelled",
            json!({"agentcard.dev/discover": "true"}),
            json!([{"port": 81}]),
        ),
        service("plain", json!({}), json!([{"port": 80}])),
        service(
            "optout",
            json!({"agentcard.dev/discover": "false"}),
            a2a_port(),
        ),
        service("curated", json!({}), a2a_port()),
        service("taken", json!({}), a2a_port()),
        service("evil", json!({}), a2a_port()),
    ] {
        apply_service(&a.client, &a.ns, &svc).await;
    }
    apply_service(
        &quiet.client,
        &quiet.ns,
        &service("hidden", json!({}), a2a_port()),
    )
    .await;
    // The tenant's own work: a card importing "curated" under another name, and a declared
    // card holding the name "taken".
    a.apply(&json!({
        "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentCard",
        "metadata": {"name": "curated-card"},
        "spec": {"publish": {"host": format!("curated-{}.open.test", a.ns)},
                 "source": {"service": {"name": "curated", "port": 8080}}}
    }))
    .await
    .unwrap();
    a.apply(&card("taken", &format!("taken-{}.open.test", a.ns), ""))
        .await
        .unwrap();

    // A workload kagenti labels as an A2A agent, behind a Service with no A2A port of its own.
    let planner: k8s_openapi::api::apps::v1::Deployment = serde_json::from_value(json!({
        "metadata": {"name": "planner-v2", "labels": {"kagenti.io/type": "agent", "protocol.kagenti.io/a2a": ""}},
        "spec": {
            "selector": {"matchLabels": {"app": "planner"}},
            "template": {
                "metadata": {"labels": {"app": "planner"}},
                "spec": {"containers": [{"name": "agent", "image": "example.org/planner:2"}]}
            }
        }
    }))
    .unwrap();
    Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(p.admin.clone(), &a.ns)
        .create(&Default::default(), &planner)
        .await
        .unwrap();
    apply_service(
        &a.client,
        &a.ns,
        &service(
            "planner",
            json!({}),
            json!([{"name": "metrics", "port": 9090}, {"name": "http", "port": 8000}]),
        ),
    )
    .await;

    // The cluster admin's discovery, over the test's namespaces only.
    let name = format!("disc-{t}");
    Api::<AgentDiscovery>::all(p.admin.clone())
        .patch(
            &name,
            &PatchParams::apply("admin").force(),
            &Patch::Apply(json!({
                "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentDiscovery",
                "metadata": {"name": name},
                "spec": {
                    "hostTemplate": "{name}-{namespace}.open.test",
                    "sources": ["Services", "KagentiWorkloads"],
                    "listing": "AfterClaim",
                    "namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": [a.ns, quiet.ns, victim.ns]}]}
                }
            })),
        )
        .await
        .unwrap();
    // Found: weather, gateway, labelled, curated, taken, evil (not plain, optout or hidden),
    // and planner through its workload; written: weather, gateway, labelled, evil, planner;
    // "taken" reported.
    let status = wait_discovery(&p, &name, "5 cards of 7 found", |s| {
        s["found"]["services"] == 6
            && s["found"]["kagentiWorkloads"] == 1
            && s["found"]["total"] == 7
            && s["cards"] == 5
    })
    .await;
    assert_eq!(status["skipped"].as_array().unwrap().len(), 1, "{status:#}");
    assert_eq!(status["skipped"][0]["name"], "taken");
    assert_eq!(status["skipped"][0]["reason"], "NameTaken");
    assert_eq!(status["conditions"][0]["type"], "Ready");
    // As the cluster admin reads it.
    let table = support::kubectl(kubeconfig(), &["get", "agentdiscoveries", &name]);
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap_or_default()
        .split("  ")
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .collect();
    assert_eq!(
        header,
        [
            "NAME",
            "HOST TEMPLATE",
            "FOUND",
            "CARDS",
            "PUBLISHED",
            "READY",
            "AGE"
        ],
        "{table}"
    );
    let row: Vec<&str> = table
        .lines()
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        &row[..4],
        [name.as_str(), "{name}-{namespace}.open.test", "7", "5"],
        "{table}"
    );
    // A restart deletes nothing: the new operator looks at the discovery only once it has
    // listed what the discovery reads (an empty store would read as every agent gone).
    let uids = |cards: Vec<AgentCard>| -> Vec<String> {
        let mut v: Vec<String> = cards
            .into_iter()
            .filter(|c| {
                c.metadata
                    .labels
                    .as_ref()
                    .is_some_and(|l| l.contains_key(SOURCE_LABEL))
            })
            .filter_map(|c| c.metadata.uid)
            .collect();
        v.sort();
        v
    };
    let before = uids(a.cards.list(&Default::default()).await.unwrap().items);
    assert_eq!(before.len(), 5);
    p.op.kill();
    p.op = support::operator::Operator::start_on(kubeconfig(), &p.opns, None, OPERATOR_FLAGS);
    let looked = wait_for(Duration::from_secs(30), || {
        std::future::ready(p.op.logs().contains(&format!("planned discovery={name}")))
    })
    .await;
    assert!(
        looked.is_ok(),
        "the restarted operator never reconciled the discovery"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        uids(a.cards.list(&Default::default()).await.unwrap().items),
        before,
        "a restart deleted or replaced discovered cards\n{}",
        tail(&p.op.logs())
    );

    // A second discovery finding the same agents writes nothing: the first by name does.
    let second = format!("{name}-second");
    Api::<AgentDiscovery>::all(p.admin.clone())
        .patch(
            &second,
            &PatchParams::apply("admin").force(),
            &Patch::Apply(json!({
                "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentDiscovery",
                "metadata": {"name": second},
                "spec": {
                    "hostTemplate": "{name}.{namespace}.other.test",
                    "sources": ["Services", "KagentiWorkloads"],
                    "namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": [a.ns]}]}
                }
            })),
        )
        .await
        .unwrap();
    wait_discovery(&p, &second, "found them, wrote none", |s| {
        s["found"]["total"] == 7 && s["cards"] == 0
    })
    .await;
    let weather = card_opt(&p, &a.ns, "weather").await.unwrap();
    assert_eq!(
        weather.metadata.labels.as_ref().unwrap()[SOURCE_LABEL],
        name
    );
    assert_eq!(
        weather.spec.publish.host,
        format!("weather-{}.open.test", a.ns)
    );
    Api::<AgentDiscovery>::all(p.admin.clone())
        .delete(&second, &DeleteParams::default())
        .await
        .unwrap();

    let weather = card_opt(&p, &a.ns, "weather")
        .await
        .expect("a card for weather");
    assert_eq!(
        weather.metadata.labels.as_ref().unwrap()[SOURCE_LABEL],
        name
    );
    // Listed by no directory until someone claims it.
    assert_eq!(
        weather.metadata.labels.as_ref().unwrap()["agentcard.dev/listed"],
        "false"
    );
    let owner = &weather.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("Service", "weather")
    );
    let source = weather.spec.source.as_ref().unwrap();
    assert_eq!(
        (source.service.name.as_str(), source.service.port),
        ("weather", 8080)
    );
    assert_eq!(
        weather.spec.publish.host,
        format!("weather-{}.open.test", a.ns)
    );
    let gateway = card_opt(&p, &a.ns, "gateway").await.unwrap();
    assert_eq!(gateway.spec.source.as_ref().unwrap().service.port, 9000);
    // The kagenti workload's card imports from the Service selecting its Pods, its http port,
    // and goes with that Service.
    let planner = card_opt(&p, &a.ns, "planner")
        .await
        .expect("a card for planner");
    let source = planner.spec.source.as_ref().unwrap();
    assert_eq!(
        (source.service.name.as_str(), source.service.port),
        ("planner", 8000)
    );
    assert_eq!(
        planner.metadata.owner_references.as_ref().unwrap()[0].kind,
        "Service"
    );
    for absent in ["plain", "optout", "curated"] {
        assert!(
            card_opt(&p, &a.ns, absent).await.is_none(),
            "{absent} got a card"
        );
    }
    assert!(card_opt(&p, &quiet.ns, "hidden").await.is_none());
    // The person's card named "taken" is untouched.
    let taken = card_opt(&p, &a.ns, "taken").await.unwrap();
    assert!(!taken
        .metadata
        .labels
        .unwrap_or_default()
        .contains_key(SOURCE_LABEL));
    assert!(taken.spec.source.is_none());

    // The discovered "evil" asks for a host the victim holds: never served (with no agent
    // behind it the import stops first, SourceUnavailable; with one it would be HostConflict,
    // as for any card), and the victim keeps its host.
    wait_card(&p, &a.ns, "evil", "not Ready", |c| {
        condition(c, "Ready").is_some_and(|(s, r, _)| {
            s == "False" && (r == "HostConflict" || r == "SourceUnavailable")
        })
    })
    .await;
    let served = p.get(&stolen, "/.well-known/agent-card.json");
    assert_eq!(served.status, 200);
    assert!(String::from_utf8_lossy(&served.body).contains("Agent victim"));

    // Where each card came from, as kubectl shows it.
    wait_for(Duration::from_secs(20), || async {
        let t = support::kubectl(
            kubeconfig(),
            &["get", "agentcards", "-n", &a.ns, "-o", "json"],
        );
        let v: Value = serde_json::from_str(&t).unwrap();
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["status"]["origin"].is_string())
    })
    .await
    .expect("every card has an origin");
    let text = support::kubectl(kubeconfig(), &["get", "agentcards", "-n", &a.ns]);
    assert_eq!(origin_of_text(&text, "weather"), "Discovered", "{text}");
    assert_eq!(origin_of_text(&text, "taken"), "Declared", "{text}");

    // Opting a Service out deletes its discovered card.
    apply_service(
        &a.client,
        &a.ns,
        &service(
            "labelled",
            json!({"agentcard.dev/discover": "false"}),
            json!([{"port": 81}]),
        ),
    )
    .await;
    wait_gone(&p, &a.ns, "labelled", "its Service opted out").await;

    // Claimed by label: discovery lets go (no owner reference to the Service) and the card
    // stays when its Service goes; an unclaimed card goes with its Service.
    a.cards
        .patch(
            "weather",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"agentcard.dev/claimed": "true"}}})),
        )
        .await
        .unwrap();
    wait_discovery(&p, &name, "weather claimed", |s| s["claimed"] == 1).await;
    wait_for(Duration::from_secs(20), || async {
        card_opt(&p, &a.ns, "weather").await.is_some_and(|c| {
            let listed_again = !c
                .metadata
                .labels
                .unwrap_or_default()
                .contains_key("agentcard.dev/listed");
            listed_again
                && c.metadata
                    .owner_references
                    .unwrap_or_default()
                    .iter()
                    .all(|o| o.kind != "Service")
        })
    })
    .await
    .expect("the claimed card still goes with its Service, or is still kept from directories");
    let services: Api<Service> = Api::namespaced(a.client.clone(), &a.ns);
    services
        .delete("weather", &DeleteParams::default())
        .await
        .unwrap();
    services
        .delete("evil", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(
        &p,
        &a.ns,
        "evil",
        "its Service was deleted (garbage collection)",
    )
    .await;
    assert!(
        card_opt(&p, &a.ns, "weather").await.is_some(),
        "the claimed card went with its Service"
    );

    // Claimed by an edit with the tenant's own field manager: discovery stops writing it and
    // never reverts the edit.
    let edited = format!("my-gateway-{}.open.test", a.ns);
    a.cards
        .patch(
            "gateway",
            &PatchParams::apply("team-gitops").force(),
            &Patch::Apply(json!({
                "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentCard",
                "metadata": {"name": "gateway"},
                "spec": {"publish": {"host": edited}}
            })),
        )
        .await
        .unwrap();
    wait_discovery(&p, &name, "gateway claimed too", |s| s["claimed"] == 2).await;
    let gateway = card_opt(&p, &a.ns, "gateway").await.unwrap();
    assert_eq!(gateway.spec.publish.host, edited);
    let text = support::kubectl(kubeconfig(), &["get", "agentcards", "-n", &a.ns]);
    wait_for(Duration::from_secs(20), || async {
        let text = support::kubectl(kubeconfig(), &["get", "agentcards", "-n", &a.ns]);
        origin_of_text(&text, "gateway") == "Claimed"
    })
    .await
    .unwrap_or_else(|()| panic!("gateway is not shown Claimed: {text}"));

    // Deleting the discovery deletes nothing a tenant claimed.
    Api::<AgentDiscovery>::all(p.admin.clone())
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    assert!(card_opt(&p, &a.ns, "gateway").await.is_some());
    assert!(condition(&card_opt(&p, &victim.ns, "victim").await.unwrap(), "Ready").is_some());
}

/// The ORIGIN column of card `name` in `kubectl get agentcards` output (read at the header's
/// offset: empty columns leave no word to count).
fn origin_of_text(text: &str, name: &str) -> String {
    let header = text.lines().next().unwrap_or_default();
    let Some(at) = header.find("ORIGIN") else {
        return String::new();
    };
    text.lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .and_then(|l| l.get(at..))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_default()
        .to_string()
}

/// The Python SDK agent's port in its own network namespace.
const AGENT_PORT: u16 = 19100;
const KAGENT_DONE: &str =
    "a kagent Agent published with no AgentCard written by anyone, verified by both SDKs, gone with the Agent";

#[test]
fn a_kagent_agent_is_published_with_no_yaml_and_goes_with_the_agent() {
    support::netns::run_inside(
        "kagent_inside_a_private_network_namespace",
        KAGENT_DONE,
        &[],
    );
}

/// kagent's own Agent, as kagent's users write it (its prompt included), on a plane with
/// kagent's CRD from `tests/data/kagent` and no kagent controller: the Service kagent would
/// create fronts the Python SDK agent in its own network namespace (as the import tests run
/// it). A discovery of `KagentAgents` publishes the agent's own card, with what the Agent
/// declares filling what the card leaves out and nothing of its prompt; deleting the Agent
/// unpublishes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs inside the network namespace the outer test makes"]
async fn kagent_inside_a_private_network_namespace() {
    use support::netns;
    // kagent's CRD installed as kagent's chart installs it, before the operator starts.
    let (_, client, op) = inside_with_operator(&["tests/data/kagent/kagent.dev_agents.yaml"]).await;
    let kagent_agents = kube::api::ApiResource {
        group: "kagent.dev".into(),
        version: "v1alpha2".into(),
        api_version: "kagent.dev/v1alpha2".into(),
        kind: "Agent".into(),
        plural: "agents".into(),
    };

    // The agent, its Pod and the Service kagent makes for an Agent (named after it), whose
    // EndpointSlice names the Pod.
    let team = "team";
    let (agent, _peer) = agent_behind_service(&client, team, "k8s-helper", 8080).await;

    // The kagent Agent, with a prompt that must never be published.
    let prompt = "You are the cluster's helper. Never reveal the escalation password hunter2.";
    let agents =
        Api::<kube::api::DynamicObject>::namespaced_with(client.clone(), team, &kagent_agents);
    agents
        .patch(
            "k8s-helper",
            &PatchParams::apply("kagent-user").force(),
            &Patch::Apply(json!({
                "apiVersion": "kagent.dev/v1alpha2", "kind": "Agent",
                "metadata": {"name": "k8s-helper", "namespace": team},
                "spec": {
                    "type": "Declarative",
                    "description": "What kagent says of the helper.",
                    "documentationUrl": "https://docs.example.org/k8s-helper",
                    "declarative": {
                        "systemMessage": prompt,
                        "a2aConfig": {"skills": [{"id": "pods", "name": "Pods", "description": "Lists pods.", "tags": ["k8s"]}]}
                    }
                }
            })),
        )
        .await
        .unwrap();

    // The cluster admin's discovery of kagent's Agents; nobody writes an AgentCard.
    Api::<AgentDiscovery>::all(client.clone())
        .patch(
            "kagent",
            &PatchParams::apply("admin").force(),
            &Patch::Apply(json!({
                "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentDiscovery",
                "metadata": {"name": "kagent"},
                "spec": {"hostTemplate": "{name}.{namespace}.agents.test", "sources": ["KagentAgents"], "listing": "AfterClaim"}
            })),
        )
        .await
        .unwrap();
    let cards: Api<AgentCard> = Api::namespaced(client.clone(), team);
    let host = "k8s-helper.team.agents.test";
    let c = support::operator::wait_card(&cards, "k8s-helper", &op, "discovered and Ready", ready)
        .await;
    let owner = &c.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (
            owner.api_version.as_str(),
            owner.kind.as_str(),
            owner.name.as_str()
        ),
        ("kagent.dev/v1alpha2", "Agent", "k8s-helper")
    );
    assert_eq!(c.metadata.labels.as_ref().unwrap()[SOURCE_LABEL], "kagent");
    assert_eq!(
        c.status.as_ref().unwrap().origin.as_deref(),
        Some("Discovered")
    );
    let hash = c.status.as_ref().unwrap().content_hash.clone().unwrap();
    let mut served = Vec::new();
    let ok = wait_for(Duration::from_secs(20), || {
        let r = op.get(host, agentcard_operator::contract::PATH_CARD);
        let good = r.status == 200 && agentcard_operator::contract::content_hash(&r.body) == hash;
        if good {
            served = r.body;
        }
        std::future::ready(good)
    })
    .await;
    assert!(
        ok.is_ok(),
        "{host} never served the discovered card\n{}",
        tail(&op.logs())
    );
    let card: Value = serde_json::from_slice(&served).unwrap();
    // The agent's own card has the last word; the Agent fills what it leaves out.
    assert_eq!(card["name"], "Echo Agent");
    assert_eq!(card["description"], "Echoes what it is told.");
    // The agent's in-cluster URL is not what callers get: its traffic is routed on the host.
    assert_eq!(
        card["supportedInterfaces"][0]["url"],
        format!("https://{host}/a2a")
    );
    assert_eq!(
        card["documentationUrl"],
        "https://docs.example.org/k8s-helper"
    );
    let text = String::from_utf8_lossy(&served);
    assert!(
        !text.contains("hunter2"),
        "the prompt was published: {text}"
    );
    let spec = serde_json::to_string(&c.spec).unwrap();
    assert!(
        !spec.contains("hunter2"),
        "the prompt was copied into the AgentCard: {spec}"
    );
    // Both official SDKs verify it against the served JWKS.
    let files = tempfile::tempdir().unwrap();
    let (card_file, jwks_file) = (
        files.path().join("card.json"),
        files.path().join("jwks.json"),
    );
    std::fs::write(&card_file, &served).unwrap();
    std::fs::write(
        &jwks_file,
        op.get(host, agentcard_operator::contract::PATH_JWKS).body,
    )
    .unwrap();
    for sdk in [support::Sdk::Python, support::Sdk::Js] {
        let v = support::sdk_verify(sdk, &jwks_file, std::slice::from_ref(&card_file))
            .pop()
            .unwrap();
        assert!(
            v.valid,
            "{sdk:?} rejects the discovered card: {:?}",
            v.error
        );
    }
    let status = wait_discovery_on(&client, "kagent", |s| {
        s["found"]["kagentAgents"] == 1 && s["published"] == 1
    })
    .await;
    assert_eq!(status["cards"], 1, "{status:#}");

    // A hostile tenant's selector-less Service marked as A2A, whose hand-made EndpointSlice
    // names team's agent Pod: discovered like any Service, and refused like any import
    // (EndpointNotAllowed, never served).
    let evil = "evil";
    create_namespace(&client, evil, json!({})).await;
    apply_service(
        &client,
        evil,
        &json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "sneaky"},
            "spec": {"ports": [{"name": "http", "port": 8080, "targetPort": AGENT_PORT, "appProtocol": "a2a"}]}
        }),
    )
    .await;
    netns::Slice {
        name: "sneaky-test",
        address: netns::PEER_ADDR,
        pod: Some((team, "k8s-helper-0")),
    }
    .create(&client, evil, "sneaky", "http", AGENT_PORT)
    .await;
    // Another namespace already holds the host the template gives team's Service "clash"
    // (in front of team's own agent Pod, so its card can be fetched): the discovered card is
    // HostConflict, never served, and the holder keeps its host.
    let clash_host = "clash.team.agents.test";
    let victim = "victim";
    create_namespace(&client, victim, json!({})).await;
    support::apply_card(
        &client,
        victim,
        &support::cluster::card("holder", clash_host, ""),
    )
    .await;
    let victim_cards: Api<AgentCard> = Api::namespaced(client.clone(), victim);
    support::operator::wait_card(&victim_cards, "holder", &op, "Ready", ready).await;
    apply_service(
        &client,
        team,
        &json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "clash"},
            "spec": {"ports": [{"name": "http", "port": 8080, "targetPort": AGENT_PORT, "appProtocol": "a2a"}]}
        }),
    )
    .await;
    netns::Slice {
        name: "clash-test",
        address: netns::PEER_ADDR,
        pod: Some((team, "k8s-helper-0")),
    }
    .create(&client, team, "clash", "http", AGENT_PORT)
    .await;
    Api::<AgentDiscovery>::all(client.clone())
        .patch(
            "services",
            &PatchParams::apply("admin").force(),
            &Patch::Apply(json!({
                "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentDiscovery",
                "metadata": {"name": "services"},
                "spec": {
                    "hostTemplate": "{name}.{namespace}.agents.test",
                    "namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": [evil, team]}]}
                }
            })),
        )
        .await
        .unwrap();
    let evil_cards: Api<AgentCard> = Api::namespaced(client.clone(), evil);
    let refused =
        support::operator::wait_card(&evil_cards, "sneaky", &op, "EndpointNotAllowed", |c| {
            condition(c, "SourceReachable")
                .is_some_and(|(s, r, _)| s == "False" && r == "EndpointNotAllowed")
        })
        .await;
    assert!(!ready(&refused), "{:?}", refused.status);
    assert_eq!(
        op.get(
            "sneaky.evil.agents.test",
            agentcard_operator::contract::PATH_CARD
        )
        .status,
        404
    );
    let clashing = support::operator::wait_card(&cards, "clash", &op, "HostConflict", |c| {
        condition(c, "Ready").is_some_and(|(s, r, _)| s == "False" && r == "HostConflict")
    })
    .await;
    assert_eq!(
        clashing.metadata.labels.as_ref().unwrap()[SOURCE_LABEL],
        "services"
    );
    let held = op.get(clash_host, agentcard_operator::contract::PATH_CARD);
    assert_eq!(held.status, 200);
    assert!(
        String::from_utf8_lossy(&held.body).contains("Agent holder"),
        "the holder lost its host: {}",
        String::from_utf8_lossy(&held.body)
    );

    // Listing AfterClaim: a directory over the namespace lists the card only while someone
    // has claimed it; the claim given up (the label removed), discovery takes it back.
    let dhost = "agents.directory.test";
    Api::<agentcard_operator::crd::AgentDirectory>::all(client.clone())
        .patch(
            "agents",
            &PatchParams::apply("admin").force(),
            &Patch::Apply(support::directory::directory(
                "agents",
                dhost,
                json!({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": team}}}),
            )),
        )
        .await
        .unwrap();
    let listed = |want: usize| {
        let op = &op;
        async move {
            let r = op.get(dhost, "/v1/agents");
            r.status == 200
                && serde_json::from_slice::<Value>(&r.body)
                    .is_ok_and(|v| v["agents"].as_array().is_some_and(|a| a.len() == want))
        }
    };
    let label = |claimed: Option<&str>| {
        let cards = cards.clone();
        let patch = json!({"metadata": {"labels": {"agentcard.dev/claimed": claimed}}});
        async move {
            cards
                .patch("k8s-helper", &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .unwrap();
        }
    };
    let ok = wait_for(Duration::from_secs(20), || listed(0)).await;
    assert!(ok.is_ok(), "the directory does not answer");
    label(Some("true")).await;
    let ok = wait_for(Duration::from_secs(30), || listed(1)).await;
    assert!(
        ok.is_ok(),
        "the claimed card is not listed\n{}",
        tail(&op.logs())
    );
    label(None).await;
    let ok = wait_for(Duration::from_secs(30), || async {
        listed(0).await
            && cards.get("k8s-helper").await.is_ok_and(|c| {
                c.metadata
                    .owner_references
                    .unwrap_or_default()
                    .iter()
                    .any(|o| o.kind == "Agent")
            })
    })
    .await;
    assert!(
        ok.is_ok(),
        "discovery did not take the unclaimed card back\n{}",
        tail(&op.logs())
    );

    // The Agent deleted: its card goes with it (garbage collection), and so does the page.
    agents
        .delete("k8s-helper", &DeleteParams::background())
        .await
        .unwrap();
    let gone = wait_for(Duration::from_secs(60), || async {
        cards.get_opt("k8s-helper").await.unwrap().is_none()
            && op.get(host, agentcard_operator::contract::PATH_CARD).status == 404
    })
    .await;
    assert!(
        gone.is_ok(),
        "the card outlived its Agent\n{}",
        tail(&op.logs())
    );
    drop(agent);
    println!("{KAGENT_DONE}");
}

/// Wait until discovery `name`'s status (read with `client`) satisfies `pred`; that status.
async fn wait_discovery_on(client: &Client, name: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let read = || async {
        let d = Api::<AgentDiscovery>::all(client.clone())
            .get(name)
            .await
            .unwrap();
        serde_json::to_value(d.status).unwrap()
    };
    let ok = wait_for(Duration::from_secs(30), || async { pred(&read().await) }).await;
    let status = read().await;
    assert!(ok.is_ok(), "discovery {name}: {status:#}");
    status
}

const DRIFT_DONE: &str =
    "a curated card compared with what its agent serves: drifted, in sync, not compared, off";

#[test]
fn a_curated_card_says_when_its_agent_serves_something_else() {
    support::netns::run_inside("drift_inside_a_private_network_namespace", DRIFT_DONE, &[]);
}

/// The curated card the Python SDK agent would serve, with `extra_skills` beside its own.
fn curated(extra_skills: &[&str], drift: Value) -> Value {
    let mut skills = vec![json!({
        "id": "echo", "name": "Echo", "description": "Repeats the input.",
        "tags": ["echo", "test"], "examples": ["say hello"]
    })];
    for id in extra_skills {
        skills.push(
            json!({"id": id, "name": id, "description": "Not what the agent does.", "tags": ["t"]}),
        );
    }
    json!({
        "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentCard",
        "metadata": {"name": "echo"},
        "spec": {
            "card": {
                "name": "Echo Agent", "description": "Echoes what it is told.", "version": "1.0.0",
                "provider": {"organization": "Example Org", "url": "https://example.org"},
                "capabilities": {"streaming": true},
                "defaultInputModes": ["text"], "defaultOutputModes": ["text", "application/json"],
                "skills": skills
            },
            "publish": {"host": "echo.agents.test"},
            "backend": {"serviceName": "echo", "port": 80},
            "drift": drift
        }
    })
}

/// A declared card with a backend in front of the Python SDK agent (in its own network
/// namespace, as the import tests run it): the card the agent serves itself is fetched through
/// the namespace's own Pod and compared with the published one. A skill the agent does not
/// serve is `Drifted=True` (`StructuralDrift`, its path and kind named) with a Warning Event, a
/// metric and `drift` in the directory's native API; the card mended is `InSync`; the agent
/// gone is `Unknown` (`NotCompared`, why); drift turned off removes the condition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs inside the network namespace the outer test makes"]
async fn drift_inside_a_private_network_namespace() {
    let (kubeconfig, client, op) = inside_with_operator(&[]).await;
    let team = "team";
    let (agent, _peer) = agent_behind_service(&client, team, "echo", 80).await;
    let dhost = "agents.directory.test";
    Api::<agentcard_operator::crd::AgentDirectory>::all(client.clone())
        .patch(
            "agents",
            &PatchParams::apply("admin").force(),
            &Patch::Apply(support::directory::directory(
                "agents",
                dhost,
                json!({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": team}}}),
            )),
        )
        .await
        .unwrap();

    // Curated with a skill the agent does not serve: published, and drifted.
    let cards: Api<AgentCard> = Api::namespaced(client.clone(), team);
    support::apply_card(
        &client,
        team,
        &curated(&["translate"], json!({"intervalSeconds": 30})),
    )
    .await;
    let drifted = |reason: &'static str| {
        move |c: &AgentCard| {
            ready(c) && condition(c, "Drifted").is_some_and(|(_, r, _)| r == reason)
        }
    };
    let c = support::operator::wait_card(
        &cards,
        "echo",
        &op,
        "StructuralDrift",
        drifted("StructuralDrift"),
    )
    .await;
    let (status, _, message) = condition(&c, "Drifted").unwrap();
    assert_eq!(status, "True");
    assert!(
        message.contains(
            "$.skills[1]: published but not served: skill \"translate\" removed (SkillRemoved)"
        ) && message.contains("http://echo.team.svc:80/.well-known/agent-card.json"),
        "{message}"
    );
    // Interface URLs are what the operator rewrites: not a difference.
    assert!(!message.contains("supportedInterfaces"), "{message}");
    let events = support::kubectl(
        kubeconfig,
        &[
            "get",
            "events",
            "-n",
            team,
            "--field-selector",
            "reason=Drifted",
            "-o",
            "json",
        ],
    );
    let events: Value = serde_json::from_str(&events).unwrap();
    assert_eq!(events["items"].as_array().unwrap().len(), 1, "{events:#}");
    let metrics = op.metrics();
    assert!(
        metrics.lines().any(|l| l
            == r#"agentcard_cards{condition="Drifted",status="True",reason="StructuralDrift"} 1"#),
        "{}",
        metrics
            .lines()
            .filter(|l| l.starts_with("agentcard_cards"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let native = wait_for(Duration::from_secs(20), || async {
        let r = op.get(dhost, "/v1/agents/team/echo");
        r.status == 200
            && serde_json::from_slice::<Value>(&r.body).is_ok_and(|v| {
                v["_meta"]["agentcard.dev/directory"]["drift"]["state"] == "structural"
            })
    })
    .await;
    assert!(
        native.is_ok(),
        "{}",
        String::from_utf8_lossy(&op.get(dhost, "/v1/agents/team/echo").body)
    );
    // The directory's web page shows it, with the differences as the badge's title.
    let html = |op: &support::operator::Operator| {
        support::http::request(
            op.server.addr,
            "GET",
            "/",
            &[("Host", dhost), ("Accept", "text/html")],
        )
    };
    let page = String::from_utf8_lossy(&html(&op).body).into_owned();
    assert!(
        page.contains(r#"data-drift="structural""#) && page.contains("translate"),
        "{page}"
    );

    // Mended: in sync at once (the agent's card is not fetched again for that).
    support::apply_card(&client, team, &curated(&[], json!({"intervalSeconds": 30}))).await;
    let c = support::operator::wait_card(&cards, "echo", &op, "InSync", drifted("InSync")).await;
    assert_eq!(condition(&c, "Drifted").unwrap().0, "False");
    let badge_gone = wait_for(Duration::from_secs(20), || async {
        let page = html(&op);
        page.status == 200 && !String::from_utf8_lossy(&page.body).contains("data-drift=")
    })
    .await;
    assert!(badge_gone.is_ok(), "the page still shows drift");

    // The agent gone: not compared, and why; the curated card stays served.
    drop(agent);
    // Asked again one interval (30 s) after the last look at most.
    let not_compared = drifted("NotCompared");
    let seen = wait_for(Duration::from_secs(75), || async {
        cards.get("echo").await.is_ok_and(|c| not_compared(&c))
    })
    .await;
    let c = cards.get("echo").await.unwrap();
    assert!(
        seen.is_ok(),
        "never NotCompared: {:?}\n{}",
        c.status,
        tail(&op.logs())
    );
    let (status, _, message) = condition(&c, "Drifted").unwrap();
    assert_eq!(status, "Unknown");
    assert!(message.contains("could not be compared"), "{message}");
    assert_eq!(
        op.get("echo.agents.test", agentcard_operator::contract::PATH_CARD)
            .status,
        200
    );

    // Off: no condition, and nothing fetched.
    support::apply_card(&client, team, &curated(&[], json!({"mode": "Off"}))).await;
    support::operator::wait_card(&cards, "echo", &op, "no Drifted condition", |c| {
        ready(c) && condition(c, "Drifted").is_none()
    })
    .await;
    println!("{DRIFT_DONE}");
}

/// The Python SDK agent in a network namespace of its own, and in namespace `ns` (created) a
/// Pod holding its address (as kubelet would report it), a Service `name` on `port` and an
/// EndpointSlice naming the Pod: how import and drift reach an agent here. The agent stops
/// when its handle drops; the peer namespace lives as long as the returned peer.
async fn agent_behind_service(
    client: &Client,
    ns: &str,
    name: &str,
    port: u16,
) -> (support::netns::Proc, support::netns::Peer) {
    use support::netns;
    let control =
        std::env::temp_dir().join(format!("agent-control-{}-{name}.json", std::process::id()));
    std::fs::write(
        &control,
        json!({"mode": "v1", "version": "1.0.0"}).to_string(),
    )
    .unwrap();
    let peer = netns::Peer::start();
    let agent = netns::Proc(
        peer.command(support::oracle().join("venv/bin/python"))
            .arg(support::root().join("tests/oracle/py_agent.py"))
            .args(["--port", &AGENT_PORT.to_string()])
            .arg("--control")
            .arg(&control)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("starting the Python SDK agent"),
    );
    create_namespace(client, ns, json!({})).await;
    let pod_name = format!("{name}-0");
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), ns);
    let pod = serde_json::from_value(json!({
        "metadata": {"name": pod_name, "labels": {"app": name}},
        "spec": {"containers": [{"name": "agent", "image": "example.org/agent:1"}]}
    }))
    .unwrap();
    pods.create(&Default::default(), &pod).await.unwrap();
    pods.patch_status(
        &pod_name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running", "podIP": netns::PEER_ADDR, "podIPs": [{"ip": netns::PEER_ADDR}]}})),
    )
    .await
    .unwrap();
    apply_service(
        client,
        ns,
        &json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name},
            "spec": {"ports": [{"name": "http", "port": port, "targetPort": AGENT_PORT}]}
        }),
    )
    .await;
    netns::Slice {
        name: &format!("{name}-test"),
        address: netns::PEER_ADDR,
        pod: Some((ns, &pod_name)),
    }
    .create(client, ns, name, "http", AGENT_PORT)
    .await;
    (agent, peer)
}

/// Inside the outer test's network namespace: loopback up, this binary's own plane with our
/// CRDs and `extra_crds` (repository paths; each served before the operator starts), and the
/// operator watching every namespace.
async fn inside_with_operator(
    extra_crds: &[&str],
) -> (
    &'static std::path::Path,
    Client,
    support::operator::Operator,
) {
    support::netns::setup_loopback();
    let kubeconfig = support::plane::dedicated_kubeconfig();
    let client = support::plane::client_for(kubeconfig).await;
    support::plane::install_crds(&client).await;
    for crd in extra_crds {
        let path = support::root().join(crd);
        let applied = support::kubectl(
            kubeconfig,
            &[
                "apply",
                "--server-side",
                "-o",
                "name",
                "-f",
                path.to_str().unwrap(),
            ],
        );
        // Established once its resources answer a list.
        let name = applied
            .trim()
            .trim_start_matches("customresourcedefinition.apiextensions.k8s.io/")
            .to_string();
        let resource = name.split('.').next().unwrap_or_default().to_string();
        let served = wait_for(Duration::from_secs(60), || {
            let out = std::process::Command::new("kubectl")
                .args(["get", &resource, "-A", "-o", "name"])
                .env("KUBECONFIG", kubeconfig)
                .output();
            std::future::ready(out.is_ok_and(|o| o.status.success()))
        })
        .await;
        assert!(served.is_ok(), "{name} never served its resources");
    }
    let opns = "agentcard-system";
    create_namespace(&client, opns, json!({})).await;
    let op =
        support::operator::Operator::start_on(kubeconfig, opns, None, &["--ingress-tls", "none"]);
    (kubeconfig, client, op)
}
