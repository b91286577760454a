//! The AgentCard controller on the real control plane, run as users run it (`agentcard-operator
//! run`): every behaviour of the issue, each test in its own namespaces with its own operator.

mod support;

use std::time::Duration;

use agentcard_operator::contract::*;
use agentcard_operator::controller::agentcard::card::{backend_ingress_name_of, ingress_name};
use agentcard_operator::controller::api_calls::read_counts;
use agentcard_operator::crd::AgentCard;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Namespace, Secret};
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{json, Value};
use support::operator::Operator;
use support::plane::{client, wait_for, TestNamespace};

/// The README example with its own name and host.
fn example(name: &str, host: &str) -> Value {
    let text =
        std::fs::read_to_string(support::root().join("examples/weather-agent.yaml")).unwrap();
    let mut v: Value = agentcard_operator::yaml::from_str(&text).unwrap();
    v["metadata"] = json!({"name": name});
    v["spec"]["publish"]["host"] = json!(host);
    v["spec"]["card"]["supportedInterfaces"][0]["url"] = json!(format!("https://{host}/a2a/v1"));
    v
}

fn host(tag: &str, ns: &str) -> String {
    format!("{tag}.{ns}.agents.test")
}

async fn apply(api: &Api<AgentCard>, manifest: &Value) -> Result<AgentCard, kube::Error> {
    let name = manifest["metadata"]["name"].as_str().unwrap().to_string();
    let mut m = manifest.clone();
    m["apiVersion"] = json!("agentcard.dev/v1alpha1");
    m["kind"] = json!("AgentCard");
    api.patch(
        &name,
        &PatchParams::apply("platform-engineer").force(),
        &Patch::Apply(&m),
    )
    .await
}

use support::operator::wait_card;
use support::{condition, ready};

async fn served_bytes(client: &Client, ns: &str, card: &str) -> Option<String> {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    cms.get_opt(&format!("agentcard-{card}"))
        .await
        .ok()??
        .data?
        .get(KEY_CARD)
        .cloned()
}

struct Setup {
    client: Client,
    op_ns: TestNamespace,
    ns: TestNamespace,
    cards: Api<AgentCard>,
    operator: Operator,
}

async fn setup(tag: &str, extra: &[&str]) -> Setup {
    let client = client().await;
    let op_ns = TestNamespace::new(&client, &format!("{tag}-op")).await;
    let ns = TestNamespace::new(&client, tag).await;
    let operator = Operator::start(&op_ns.name, &ns.name, extra);
    let cards = Api::namespaced(client.clone(), &ns.name);
    Setup {
        client,
        op_ns,
        ns,
        cards,
        operator,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_example_is_ready_served_and_verifies_with_the_python_sdk() {
    let s = setup("create", &[]).await;
    let host = host("weather", &s.ns.name);
    apply(&s.cards, &example("weather", &host)).await.unwrap();
    let card = wait_card(&s.cards, "weather", &s.operator, "Ready", ready).await;
    let status = card.status.clone().unwrap();
    assert_eq!(
        status.url.as_deref(),
        Some(format!("https://{host}/.well-known/agent-card.json").as_str())
    );
    assert_eq!(status.config_map.as_deref(), Some("agentcard-weather"));
    assert_eq!(status.skills.as_deref(), Some("forecast,alerts"));
    assert!(condition(&card, "Signed").is_some_and(|(s, _, _)| s == "True"));
    assert!(condition(&card, "Published").is_some_and(|(s, _, _)| s == "True"));

    // The ConfigMap: owned by the card, labelled, annotated, holding the exact bytes served.
    let cms: Api<ConfigMap> = Api::namespaced(s.client.clone(), &s.ns.name);
    let cm = cms.get("agentcard-weather").await.unwrap();
    let labels = cm.metadata.labels.clone().unwrap();
    assert_eq!(
        labels.get(LABEL_MANAGED_BY).map(String::as_str),
        Some(MANAGER)
    );
    let ann = cm.metadata.annotations.clone().unwrap();
    assert_eq!(ann.get(ANN_HOST), Some(&host));
    assert_eq!(ann.get(ANN_CONTENT_HASH), status.content_hash.as_ref());
    assert_eq!(ann.get(ANN_KEY_ID), status.key_id.as_ref());
    let owner = &cm.metadata.owner_references.clone().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.controller),
        ("AgentCard", "weather", Some(true))
    );
    let body = cm.data.unwrap()[KEY_CARD].clone();

    // Served over HTTP by the operator, with the JWKS it publishes.
    let served = support::http::eventually(Duration::from_secs(10), || {
        let r = s.operator.get(&host, PATH_CARD);
        (r.status == 200).then_some(r)
    })
    .expect("the card is served");
    assert_eq!(served.body, body.as_bytes());
    assert_eq!(
        served.header("etag"),
        Some(format!("\"{}\"", status.content_hash.unwrap()).as_str())
    );
    let jwks = s.operator.get(&host, PATH_JWKS);
    assert_eq!(jwks.status, 200);

    // The official Python SDK verifies the ConfigMap's card against the served JWKS.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("card.json"), &body).unwrap();
    std::fs::write(dir.path().join("jwks.json"), &jwks.body).unwrap();
    let v = &support::sdk_verify(
        support::Sdk::Python,
        &dir.path().join("jwks.json"),
        &[dir.path().join("card.json")],
    )[0];
    assert!(
        v.valid,
        "the Python SDK rejects the published card: {:?}",
        v.error
    );

    // The Ingress in the operator's namespace routes the well-known paths (Exact) to the server.
    let ing: Api<Ingress> = Api::namespaced(s.client.clone(), &s.op_ns.name);
    let ingress = ing.get(&ingress_name(&s.ns.name, "weather")).await.unwrap();
    let rule = &ingress.spec.unwrap().rules.unwrap()[0];
    assert_eq!(rule.host.as_deref(), Some(host.as_str()));
    let paths: Vec<(String, String)> = rule
        .http
        .as_ref()
        .unwrap()
        .paths
        .iter()
        .map(|p| (p.path.clone().unwrap(), p.path_type.clone()))
        .collect();
    assert!(
        paths.contains(&(PATH_CARD.to_string(), "Exact".to_string())),
        "{paths:?}"
    );
    assert!(
        paths.contains(&(PATH_JWKS.to_string(), "Exact".to_string())),
        "{paths:?}"
    );
    assert!(
        !paths.iter().any(|(p, _)| p == PATH_LEGACY),
        "legacy path only when enabled"
    );

    // kubectl shows the columns users expect.
    let out = std::process::Command::new("kubectl")
        .args(["get", "agentcards", "-n", &s.ns.name])
        .env("KUBECONFIG", support::plane::kubeconfig())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let header: Vec<&str> = text
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["NAME", "HOST", "SKILLS", "SIGNED", "SOURCE", "ORIGIN", "APPROVAL", "READY", "AGE"],
        "{text}"
    );
    assert!(
        text.contains("forecast,alerts") && text.contains(&host) && text.contains("True"),
        "{text}"
    );

    // `kubectl explain` documents the card from the CRD schema.
    let out = std::process::Command::new("kubectl")
        .args(["explain", "agentcards.spec.card.skills"])
        .env("KUBECONFIG", support::plane::kubeconfig())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("What the agent can do"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("tags") && text.contains("Keywords for discovery"),
        "{text}"
    );

    // Metrics of the controller and the server.
    let m = String::from_utf8(
        support::http::request(s.operator.server.admin, "GET", "/metrics", &[("Host", "a")]).body,
    )
    .unwrap();
    assert!(m.contains("agentcard_reconciles_total"), "{m}");
    // The operator's own API requests, by verb and resource (one ConfigMap created for the card).
    for sample in [
        "agentcard_api_requests_total{verb=\"create\",resource=\"configmaps\"} 1",
        "agentcard_api_requests_total{verb=\"patch\",resource=\"agentcards/status\"}",
        "agentcard_api_requests_total{verb=\"watch\",resource=\"agentcards\"}",
    ] {
        assert!(
            m.contains(sample),
            "no {sample} in:\n{m}\noperator log:\n{}",
            s.operator.logs()
        );
    }
    assert!(
        m.contains("agentcard_cards{condition=\"Ready\",status=\"True\",reason=\"Published\"} 1"),
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_republish_and_unchanged_cards_keep_identical_bytes_across_restarts() {
    let mut s = setup("update", &[]).await;
    let host = host("upd", &s.ns.name);
    apply(&s.cards, &example("card", &host)).await.unwrap();
    wait_card(&s.cards, "card", &s.operator, "Ready", ready).await;
    let first = served_bytes(&s.client, &s.ns.name, "card").await.unwrap();

    let mut m = example("card", &host);
    m["spec"]["card"]["description"] = json!("Forecasts, alerts and now pollen counts.");
    m["spec"]["publish"]["legacyPath"] = json!(true);
    apply(&s.cards, &m).await.unwrap();
    let card = wait_card(
        &s.cards,
        "card",
        &s.operator,
        "Ready at generation 2",
        |c| ready(c) && c.metadata.generation == Some(2),
    )
    .await;
    let second = served_bytes(&s.client, &s.ns.name, "card").await.unwrap();
    assert_ne!(first, second);
    assert!(second.contains("pollen"));
    assert_eq!(card.status.unwrap().observed_generation, Some(2));
    support::http::eventually(Duration::from_secs(10), || {
        (s.operator.get(&host, PATH_LEGACY).status == 200).then_some(())
    })
    .expect("legacy path served once enabled");

    // A restart re-reconciles everything: the bytes (and so the ETag) must not change.
    s.operator.kill();
    let op2 = Operator::start(&s.op_ns.name, &s.ns.name, &["--lease-duration", "5"]);
    wait_for(Duration::from_secs(30), || async {
        op2.logs().contains("acquired the lease")
    })
    .await
    .expect("restarted operator leads");
    // Wait until the new process has really reconciled the card (at start, then after an
    // edit), so the comparison below cannot pass for want of a reconcile.
    let reconciles = || {
        let m = support::http::request(op2.server.admin, "GET", "/metrics", &[("Host", "a")]).body;
        String::from_utf8_lossy(&m)
            .lines()
            .find_map(|l| {
                l.strip_prefix("agentcard_reconciles_total{controller=\"agentcard\"} ")
                    .and_then(|v| v.trim().parse::<u64>().ok())
            })
            .unwrap_or(0)
    };
    support::http::eventually(Duration::from_secs(30), || {
        (reconciles() >= 1).then_some(())
    })
    .expect("the restarted operator reconciles the card at start");
    // Trigger a reconcile with a no-op change of metadata (after the first one: an edit made
    // while the new leader starts is folded into its first reconcile).
    let patch = json!({"metadata": {"labels": {"touched": "yes"}}});
    s.cards
        .patch("card", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    if support::http::eventually(Duration::from_secs(30), || {
        (reconciles() >= 2).then_some(())
    })
    .is_none()
    {
        panic!(
            "the restarted operator did not reconcile the card twice; its log:\n{}",
            op2.logs()
        );
    }
    assert_eq!(
        served_bytes(&s.client, &s.ns.name, "card").await.unwrap(),
        second,
        "re-signing an unchanged card changed the bytes"
    );
    // What the restarted process asked of the API server (its own count, by verb and
    // resource): with nothing changed it wrote nothing but its Lease, and it watched each kind
    // once (the card server and the controllers share the watches; ConfigMaps twice: the
    // published ones and the JWKS).
    let metrics = support::http::request(op2.server.admin, "GET", "/metrics", &[("Host", "a")]);
    let calls = read_counts(&String::from_utf8_lossy(&metrics.body));
    assert!(!calls.is_empty(), "no API request counts in the metrics");
    let writes: Vec<_> = calls
        .iter()
        .filter(|((verb, resource), n)| {
            ["create", "update", "patch", "delete"].contains(&verb.as_str())
                && resource != "leases"
                && **n > 0.0
        })
        .collect();
    assert!(
        writes.is_empty(),
        "the restarted operator wrote with nothing changed: {writes:?}"
    );
    let watches = |resource: &str| {
        calls
            .get(&("watch".to_string(), resource.to_string()))
            .copied()
            .unwrap_or_default()
    };
    assert_eq!(watches("agentcards"), 1.0, "{calls:?}");
    assert_eq!(watches("namespaces"), 1.0, "{calls:?}");
    assert_eq!(watches("configmaps"), 2.0, "{calls:?}");
    // The local plane serves streaming lists (WatchList): the shared watches' first lists are
    // their watches' first events, with no list request (and no page held whole).
    let lists = |resource: &str| {
        calls
            .get(&("list".to_string(), resource.to_string()))
            .copied()
            .unwrap_or_default()
    };
    for resource in ["agentcards", "namespaces"] {
        assert_eq!(lists(resource), 0.0, "{resource} listed: {calls:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_operator_lists_the_cards_in_pages() {
    // Where they list (`--initial-list pages`, or an API server without streaming lists) the
    // watches list in pages (`--list-page-size`), never in one response of every object: at
    // 100,000 cards one response would be hundreds of megabytes in the API server and here.
    let mut s = setup("pages", &[]).await;
    let names = ["p1", "p2", "p3"];
    for name in names {
        apply(&s.cards, &example(name, &host(name, &s.ns.name)))
            .await
            .unwrap();
    }
    for name in names {
        wait_card(&s.cards, name, &s.operator, "Ready", ready).await;
    }
    s.operator.kill();
    let op2 = Operator::start(
        &s.op_ns.name,
        &s.ns.name,
        &[
            "--lease-duration",
            "5",
            "--initial-list",
            "pages",
            "--list-page-size",
            "1",
        ],
    );
    // Every card served by the new process (it listed them all, one page each).
    for name in names {
        let h = host(name, &s.ns.name);
        support::http::eventually(Duration::from_secs(60), || {
            (op2.get(&h, PATH_CARD).status == 200).then_some(())
        })
        .unwrap_or_else(|| panic!("{name} not served after the restart; log:\n{}", op2.logs()));
    }
    let metrics = support::http::request(op2.server.admin, "GET", "/metrics", &[("Host", "a")]);
    let calls = read_counts(&String::from_utf8_lossy(&metrics.body));
    let lists = calls
        .get(&("list".to_string(), "agentcards".to_string()))
        .copied()
        .unwrap_or_default();
    // Three cards, one a page: three list requests (a fourth only if the watch relisted).
    assert!(
        lists >= 3.0,
        "the cards were listed in {lists} request(s): {calls:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_edit_keeps_the_last_good_card_and_says_why() {
    let s = setup("invalid", &[]).await;
    let host = host("inv", &s.ns.name);
    apply(&s.cards, &example("card", &host)).await.unwrap();
    wait_card(&s.cards, "card", &s.operator, "Ready", ready).await;
    let good = served_bytes(&s.client, &s.ns.name, "card").await.unwrap();

    let mut m = example("card", &host);
    m["spec"]["card"]["skills"][1]["id"] = json!("forecast");
    m["spec"]["card"]["description"] = json!("");
    apply(&s.cards, &m).await.unwrap();
    let card = wait_card(&s.cards, "card", &s.operator, "Ready=False", |c| {
        condition(c, "Ready").is_some_and(|(st, r, _)| st == "False" && r == "InvalidSpec")
    })
    .await;
    let (_, _, message) = condition(&card, "Ready").unwrap();
    assert!(
        message.contains("spec.card.skills[1].id: duplicate of skills[0].id"),
        "{message}"
    );
    assert!(
        message.contains("spec.card.description: required"),
        "{message}"
    );
    assert!(
        message.contains("the last good card stays served"),
        "{message}"
    );
    let status = card.status.clone().unwrap();
    assert!(
        status.content_hash.is_some() && status.url.is_some(),
        "the served card is still reported"
    );
    assert_eq!(
        served_bytes(&s.client, &s.ns.name, "card").await.unwrap(),
        good,
        "the invalid edit replaced the good card"
    );

    // A Warning Event says why, once.
    let events: Api<Event> = Api::namespaced(s.client.clone(), &s.ns.name);
    let ok = wait_for(Duration::from_secs(10), || async {
        events
            .list(&ListParams::default())
            .await
            .map(|l| {
                l.items.iter().any(|e| {
                    e.reason.as_deref() == Some("InvalidSpec")
                        && e.type_.as_deref() == Some("Warning")
                })
            })
            .unwrap_or(false)
    })
    .await;
    assert!(ok.is_ok(), "no Warning Event for the invalid edit");

    // What the API server can check is refused at admission, with the field named.
    let mut bad = example("other", "Not_A_Host");
    bad["spec"]["card"]["skills"] = json!([]);
    let err = apply(&s.cards, &bad).await.unwrap_err().to_string();
    assert!(
        err.contains("spec.publish.host") && err.contains("DNS name"),
        "{err}"
    );
    assert!(
        err.contains("spec.card.skills: at least one skill"),
        "{err}"
    );

    // Fixing the card publishes it again.
    apply(&s.cards, &example("card", &host)).await.unwrap();
    wait_card(&s.cards, "card", &s.operator, "Ready again", ready).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cards_beyond_the_namespace_and_size_limits_say_so_and_publish_once_they_fit() {
    let s = setup(
        "limits",
        &["--max-cards-per-namespace", "2", "--max-card-bytes", "6000"],
    )
    .await;
    for name in ["first", "second"] {
        apply(&s.cards, &example(name, &host(name, &s.ns.name)))
            .await
            .unwrap();
        wait_card(&s.cards, name, &s.operator, "Ready", ready).await;
    }
    // A third card in the namespace is refused, naming the limit and the flag.
    apply(&s.cards, &example("third", &host("third", &s.ns.name)))
        .await
        .unwrap();
    let third = wait_card(&s.cards, "third", &s.operator, "NamespaceCardLimit", |c| {
        condition(c, "Ready").is_some_and(|(st, r, _)| st == "False" && r == "NamespaceCardLimit")
    })
    .await;
    let (_, _, message) = condition(&third, "Ready").unwrap();
    assert!(
        message.contains("at most 2 per namespace")
            && message.contains("--max-cards-per-namespace")
            && message.contains("number 3"),
        "{message}"
    );
    assert!(
        served_bytes(&s.client, &s.ns.name, "third").await.is_none(),
        "a card beyond the limit was written"
    );
    // The oldest cards keep publishing; once one goes, the waiting card publishes.
    s.cards
        .delete("first", &DeleteParams::default())
        .await
        .unwrap();
    wait_card(&s.cards, "third", &s.operator, "Ready once it fits", ready).await;

    // A card edited past the size limit says so; its last good version stays served.
    let good = served_bytes(&s.client, &s.ns.name, "second").await.unwrap();
    let mut big = example("second", &host("second", &s.ns.name));
    big["spec"]["card"]["description"] = json!("x".repeat(7000));
    apply(&s.cards, &big).await.unwrap();
    let second = wait_card(&s.cards, "second", &s.operator, "CardTooLarge", |c| {
        condition(c, "Ready").is_some_and(|(st, r, _)| st == "False" && r == "CardTooLarge")
    })
    .await;
    let (_, _, message) = condition(&second, "Ready").unwrap();
    assert!(
        message.contains("spec.card") && message.contains("--max-card-bytes"),
        "{message}"
    );
    assert_eq!(
        served_bytes(&s.client, &s.ns.name, "second").await.unwrap(),
        good,
        "the oversized edit replaced the good card"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_older_card_keeps_a_contested_host() {
    let s = setup("conflict", &[]).await;
    let host = host("shared", &s.ns.name);
    apply(&s.cards, &example("first", &host)).await.unwrap();
    wait_card(&s.cards, "first", &s.operator, "Ready", ready).await;
    // Creation timestamps have one-second resolution.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    apply(&s.cards, &example("second", &host)).await.unwrap();
    let second = wait_card(&s.cards, "second", &s.operator, "HostConflict", |c| {
        condition(c, "Ready").is_some_and(|(st, r, _)| st == "False" && r == "HostConflict")
    })
    .await;
    assert!(condition(&second, "Ready")
        .unwrap()
        .2
        .contains(&format!("{}/first", s.ns.name)));
    assert!(
        served_bytes(&s.client, &s.ns.name, "second")
            .await
            .is_none(),
        "the loser published nothing"
    );
    assert!(
        ready(&s.cards.get("first").await.unwrap()),
        "the older card keeps its host"
    );

    // A different prefix on the same host is no conflict.
    let mut third = example("third", &host);
    third["spec"]["publish"]["pathPrefix"] = json!("/team-c");
    apply(&s.cards, &third).await.unwrap();
    wait_card(&s.cards, "third", &s.operator, "Ready", ready).await;

    // When the older card goes, the newer one takes the host.
    s.cards
        .delete("first", &DeleteParams::default())
        .await
        .unwrap();
    wait_card(
        &s.cards,
        "second",
        &s.operator,
        "Ready after the older card left",
        ready,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_publish_only_on_allowed_hosts() {
    let s = setup("allow", &["--allowed-hosts", "*.shared.agents.test"]).await;
    let allowed = format!("a-{}.shared.agents.test", s.ns.name);
    apply(&s.cards, &example("ok", &allowed)).await.unwrap();
    wait_card(&s.cards, "ok", &s.operator, "Ready", ready).await;

    let own = host("own", &s.ns.name);
    apply(&s.cards, &example("own", &own)).await.unwrap();
    let refused = wait_card(&s.cards, "own", &s.operator, "HostNotAllowed", |c| {
        condition(c, "Ready").is_some_and(|(st, r, _)| st == "False" && r == "HostNotAllowed")
    })
    .await;
    assert!(condition(&refused, "Ready").unwrap().2.contains(&own));
    assert!(served_bytes(&s.client, &s.ns.name, "own").await.is_none());

    // A cluster admin grants the host to the namespace: the card is published without an edit.
    let namespaces: Api<Namespace> = Api::all(s.client.clone());
    let patch = json!({"metadata": {"annotations": {"agentcard.dev/allowed-hosts": format!("*.{}.agents.test", s.ns.name)}}});
    namespaces
        .patch(&s.ns.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    wait_card(&s.cards, "own", &s.operator, "Ready once allowed", ready).await;
}

async fn merge_secret(secrets: &Api<Secret>, patch: &Value) {
    let params = PatchParams::default();
    secrets
        .patch("agentcard-signing-keys", &params, &Patch::Merge(patch))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_rotation_resigns_every_card_and_a_broken_secret_changes_nothing() {
    // A short JWKS max-age, so the staged rotation runs in seconds.
    let s = setup("keys", &["--jwks-max-age", "4"]).await;
    let (h1, h2) = (host("k1", &s.ns.name), host("k2", &s.ns.name));
    apply(&s.cards, &example("one", &h1)).await.unwrap();
    apply(&s.cards, &example("two", &h2)).await.unwrap();
    let first = wait_card(&s.cards, "one", &s.operator, "Ready", ready).await;
    wait_card(&s.cards, "two", &s.operator, "Ready", ready).await;
    let old_kid = first.status.unwrap().key_id.unwrap();
    // A client's JWKS, fetched before the rotation and never refreshed.
    let cached = support::http::eventually(Duration::from_secs(10), || {
        let r = s.operator.get(&h1, PATH_JWKS);
        (r.status == 200).then_some(r)
    })
    .expect("the JWKS is served");
    assert_eq!(cached.header("cache-control"), Some("public, max-age=4"));
    let cached = agentcard_operator::a2a::Jwks::from_slice(&cached.body).unwrap();

    // Add an EdDSA key and make it active.
    let secrets: Api<Secret> = Api::namespaced(s.client.clone(), &s.op_ns.name);
    let key = agentcard_operator::a2a::SigningKey::generate(
        agentcard_operator::a2a::Algorithm::EdDSA,
        Some("rotated-1"),
    )
    .unwrap();
    let patch = json!({
        "metadata": {"annotations": {"agentcard.dev/active-key": "rotated-1"}},
        "stringData": {"rotated-1.jwk.json": key.private_jwk_json().unwrap()},
    });
    merge_secret(&secrets, &patch).await;
    // Published at once; the cards say when it will sign, and keep the old key until then.
    let waiting = wait_card(&s.cards, "one", &s.operator, "activation scheduled", |c| {
        condition(c, "Signed").is_some_and(|(st, _, m)| {
            st == "True" && m.contains("key rotated-1 is published and signs from")
        })
    })
    .await;
    assert_eq!(
        waiting.status.unwrap().key_id.as_deref(),
        Some(old_kid.as_str())
    );
    // Every card served during and after the rotation verifies with the JWKS cached before it.
    let started = std::time::Instant::now();
    let mut checked = 0;
    loop {
        let mut rotated = 0;
        for h in [&h1, &h2] {
            let r = s.operator.get(h, PATH_CARD);
            assert_eq!(r.status, 200);
            let card = agentcard_operator::a2a::AgentCard::from_json_lenient(&r.body).unwrap();
            agentcard_operator::a2a::jws::verify_card(&card, &cached).unwrap_or_else(|e| {
                panic!("a card served during the rotation fails with the cached JWKS: {e}")
            });
            checked += 1;
            if card.signatures.len() == 2 {
                rotated += 1;
            }
        }
        if rotated == 2 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "never re-signed with the new key"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!(
        "{checked} served cards verified with the pre-rotation JWKS; new key signing after {:?}",
        started.elapsed()
    );
    // The new key signed no earlier than one max-age after the JWKS first held it.
    let cms: Api<ConfigMap> = Api::namespaced(s.client.clone(), &s.op_ns.name);
    let jwks_cm = cms.get("agentcard-jwks").await.unwrap();
    let first_published: std::collections::BTreeMap<String, String> =
        serde_json::from_str(&jwks_cm.annotations()["agentcard.dev/keys-published-at"]).unwrap();
    let published: jiff::Timestamp = first_published["rotated-1"].parse().unwrap();
    let cards_cms: Api<ConfigMap> = Api::namespaced(s.client.clone(), &s.ns.name);
    for name in ["one", "two"] {
        let signed_at: jiff::Timestamp = cards_cms
            .get(&format!("agentcard-{name}"))
            .await
            .unwrap()
            .annotations()[ANN_PUBLISHED_AT]
            .parse()
            .unwrap();
        assert!(
            signed_at >= published + jiff::SignedDuration::from_secs(4),
            "{name} was signed with the new key at {signed_at}, before {published} + 4 s"
        );
    }
    for name in ["one", "two"] {
        let c = wait_card(
            &s.cards,
            name,
            &s.operator,
            "re-signed with the new key",
            |c| {
                ready(c)
                    && c.status.as_ref().and_then(|st| st.key_id.as_deref()) == Some("rotated-1")
            },
        )
        .await;
        let (_, _, message) = condition(&c, "Signed").unwrap();
        assert_eq!(message, format!("signed with keys rotated-1, {old_kid}"));
        let body = served_bytes(&s.client, &s.ns.name, name).await.unwrap();
        let card = agentcard_operator::a2a::AgentCard::from_json_lenient(body.as_bytes()).unwrap();
        let jwks = agentcard_operator::a2a::Jwks::from_signing_keys([&key]);
        assert_eq!(
            agentcard_operator::a2a::jws::verify_card(&card, &jwks)
                .unwrap()
                .kid,
            "rotated-1"
        );
    }
    // The JWKS lists both keys.
    let ok = wait_for(Duration::from_secs(10), || async {
        cms.get_opt("agentcard-jwks")
            .await
            .ok()
            .flatten()
            .and_then(|c| c.data)
            .and_then(|d| d.get(KEY_JWKS).cloned())
            .is_some_and(|j| j.contains("rotated-1") && j.contains(&old_kid))
    })
    .await;
    assert!(ok.is_ok(), "the JWKS does not list the old and the new key");
    let events: Api<Event> = Api::namespaced(s.client.clone(), &s.op_ns.name);
    let reasons: Vec<String> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|e| e.reason)
        .collect();
    for reason in ["KeyActivationScheduled", "KeysActivated"] {
        assert!(
            reasons.iter().any(|r| r == reason),
            "no {reason} Event: {reasons:?}"
        );
    }

    // Back to the old key by the annotation alone (the keys are unchanged): re-signed again.
    merge_secret(
        &secrets,
        &json!({"metadata": {"annotations": {"agentcard.dev/active-key": old_kid}}}),
    )
    .await;
    for name in ["one", "two"] {
        wait_card(
            &s.cards,
            name,
            &s.operator,
            "re-signed with the old key",
            |c| ready(c) && c.status.as_ref().and_then(|st| st.key_id.as_deref()) == Some(&old_kid),
        )
        .await;
    }

    // A broken Secret: cards stay as they are, status says why.
    let before = served_bytes(&s.client, &s.ns.name, "one").await.unwrap();
    let patch = json!({"stringData": {"rotated-1.jwk.json": "{\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"x\":\"broken\"}"}});
    merge_secret(&secrets, &patch).await;
    wait_card(&s.cards, "one", &s.operator, "KeyUnavailable", |c| {
        condition(c, "Signed").is_some_and(|(st, r, _)| st == "False" && r == "KeyUnavailable")
    })
    .await;
    assert_eq!(
        served_bytes(&s.client, &s.ns.name, "one").await.unwrap(),
        before
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_key_stays_published_while_an_invalid_card_is_still_signed_with_it() {
    let s = setup("retired", &["--jwks-max-age", "2"]).await;
    let (hg, hs) = (host("good", &s.ns.name), host("stuck", &s.ns.name));
    apply(&s.cards, &example("good", &hg)).await.unwrap();
    apply(&s.cards, &example("stuck", &hs)).await.unwrap();
    wait_card(&s.cards, "good", &s.operator, "Ready", ready).await;
    let first = wait_card(&s.cards, "stuck", &s.operator, "Ready", ready).await;
    let old_kid = first.status.unwrap().key_id.unwrap();
    // The stuck card's latest edit is invalid: its last good version stays served.
    let mut bad = example("stuck", &hs);
    bad["spec"]["card"]["description"] = json!("");
    apply(&s.cards, &bad).await.unwrap();
    wait_card(&s.cards, "stuck", &s.operator, "Ready=False", |c| {
        condition(c, "Ready").is_some_and(|(st, _, _)| st == "False")
    })
    .await;
    let stuck_bytes = served_bytes(&s.client, &s.ns.name, "stuck").await.unwrap();

    // Rotate to a new key, then remove the old one from the Secret.
    let secrets: Api<Secret> = Api::namespaced(s.client.clone(), &s.op_ns.name);
    let key = agentcard_operator::a2a::SigningKey::generate(
        agentcard_operator::a2a::Algorithm::ES256,
        Some("next-1"),
    )
    .unwrap();
    merge_secret(
        &secrets,
        &json!({
            "metadata": {"annotations": {"agentcard.dev/active-key": "next-1"}},
            "stringData": {"next-1.jwk.json": key.private_jwk_json().unwrap()},
        }),
    )
    .await;
    wait_card(
        &s.cards,
        "good",
        &s.operator,
        "signed with the new key",
        |c| ready(c) && c.status.as_ref().and_then(|st| st.key_id.as_deref()) == Some("next-1"),
    )
    .await;
    let secret = secrets.get("agentcard-signing-keys").await.unwrap();
    let old_entry = secret
        .data
        .unwrap_or_default()
        .keys()
        .find(|k| !k.starts_with("next-1"))
        .cloned()
        .unwrap();
    merge_secret(&secrets, &json!({"data": {old_entry: null}})).await;
    // The good card is signed with the new key alone; the stuck one says its key is retired.
    wait_card(
        &s.cards,
        "good",
        &s.operator,
        "signed by the new key alone",
        |c| condition(c, "Signed").is_some_and(|(_, _, m)| m == "signed with key next-1"),
    )
    .await;
    let stuck = wait_card(
        &s.cards,
        "stuck",
        &s.operator,
        "retired key reported",
        |c| {
            condition(c, "Signed")
                .is_some_and(|(st, r, _)| st == "True" && r == "SignedWithRetiredKey")
        },
    )
    .await;
    let (_, _, message) = condition(&stuck, "Signed").unwrap();
    assert!(message.contains(&old_kid), "{message}");
    assert_eq!(
        served_bytes(&s.client, &s.ns.name, "stuck").await.unwrap(),
        stuck_bytes
    );
    // A client fetching the JWKS now still verifies the stuck card as served.
    let jwks = s.operator.get(&hs, PATH_JWKS);
    let jwks = agentcard_operator::a2a::Jwks::from_slice(&jwks.body).unwrap();
    assert!(jwks.find(&old_kid).is_some() && jwks.find("next-1").is_some());
    let served = s.operator.get(&hs, PATH_CARD);
    let card = agentcard_operator::a2a::AgentCard::from_json_lenient(&served.body).unwrap();
    agentcard_operator::a2a::jws::verify_card(&card, &jwks).unwrap();

    // A tenant copies the old-key card into a ConfigMap of its own with the operator's labels:
    // that does not keep the old key published (only cards' confirmed ConfigMaps count).
    let cms: Api<ConfigMap> = Api::namespaced(s.client.clone(), &s.ns.name);
    let forged: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "forged", "labels": {LABEL_MANAGED_BY: MANAGER, LABEL_CONTENT: CONTENT_CARD}},
        "data": {KEY_CARD: stuck_bytes},
    }))
    .unwrap();
    cms.create(&Default::default(), &forged).await.unwrap();
    // Fixed, the card is signed with the new key, and the old key leaves the JWKS.
    apply(&s.cards, &example("stuck", &hs)).await.unwrap();
    wait_card(&s.cards, "stuck", &s.operator, "re-signed", |c| {
        ready(c) && c.status.as_ref().and_then(|st| st.key_id.as_deref()) == Some("next-1")
    })
    .await;
    let gone = support::http::eventually(Duration::from_secs(20), || {
        let r = s.operator.get(&hs, PATH_JWKS);
        let j = agentcard_operator::a2a::Jwks::from_slice(&r.body).ok()?;
        (j.find(&old_kid).is_none()).then_some(())
    });
    assert!(gone.is_some(), "the retired key stayed in the JWKS");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_card_removes_its_ingress_and_configmap() {
    let s = setup("delete", &[]).await;
    let mut m = example("gone", &host("gone", &s.ns.name));
    m["spec"]["backend"] = json!({"serviceName": "weather-agent", "port": 8000, "path": "/a2a/v1"});
    apply(&s.cards, &m).await.unwrap();
    wait_card(&s.cards, "gone", &s.operator, "Ready", ready).await;
    let ing_name = ingress_name(&s.ns.name, "gone");
    let op_ingresses: Api<Ingress> = Api::namespaced(s.client.clone(), &s.op_ns.name);
    let local: Api<Ingress> = Api::namespaced(s.client.clone(), &s.ns.name);
    assert!(op_ingresses.get_opt(&ing_name).await.unwrap().is_some());
    let backend = local.get(&backend_ingress_name_of("gone")).await.unwrap();
    let path = &backend.spec.unwrap().rules.unwrap()[0]
        .http
        .clone()
        .unwrap()
        .paths[0];
    assert_eq!(path.backend.service.as_ref().unwrap().name, "weather-agent");
    // The backend interface is written into the card, first.
    let body: Value =
        serde_json::from_str(&served_bytes(&s.client, &s.ns.name, "gone").await.unwrap()).unwrap();
    assert_eq!(
        body["supportedInterfaces"][0]["url"],
        format!("https://{}/a2a/v1", host("gone", &s.ns.name))
    );

    s.cards
        .delete("gone", &DeleteParams::default())
        .await
        .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(s.client.clone(), &s.ns.name);
    let done = wait_for(Duration::from_secs(60), || async {
        matches!(op_ingresses.get_opt(&ing_name).await, Ok(None))
            && matches!(cms.get_opt("agentcard-gone").await, Ok(None))
            && matches!(
                local.get_opt(&backend_ingress_name_of("gone")).await,
                Ok(None)
            )
            && matches!(s.cards.get_opt("gone").await, Ok(None))
    })
    .await;
    assert!(
        done.is_ok(),
        "deletion left objects behind\n{}",
        s.operator.logs()
    );
}

/// The finalizers of card `name`.
async fn finalizers_of(cards: &Api<AgentCard>, name: &str) -> Vec<String> {
    cards
        .get(name)
        .await
        .unwrap()
        .metadata
        .finalizers
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cards_deleted_while_the_operator_is_down_leave_nothing_and_old_finalizers_go() {
    use agentcard_operator::controller::finalizers::LEGACY_CARD;
    let mut s = setup("sweep", &[]).await;
    // A card as an earlier version left it (its finalizer, beside someone else's), and a new one.
    let mut old = example("old", &host("old", &s.ns.name));
    old["metadata"]["finalizers"] = json!([LEGACY_CARD, "example.com/hold"]);
    apply(&s.cards, &old).await.unwrap();
    apply(&s.cards, &example("gone", &host("gone", &s.ns.name)))
        .await
        .unwrap();
    wait_card(&s.cards, "old", &s.operator, "Ready", ready).await;
    wait_card(&s.cards, "gone", &s.operator, "Ready", ready).await;
    // The earlier version's finalizer goes on the next reconcile, and only it; the operator
    // adds none.
    let cleared = wait_for(Duration::from_secs(30), || async {
        finalizers_of(&s.cards, "old").await == ["example.com/hold"]
    })
    .await;
    assert!(
        cleared.is_ok(),
        "{:?}",
        finalizers_of(&s.cards, "old").await
    );
    assert!(finalizers_of(&s.cards, "gone").await.is_empty());

    // With the operator down, a deleted card goes at once: nothing holds it in deletion.
    s.operator.terminate();
    assert!(s.operator.wait_exit(Duration::from_secs(30)).is_some());
    s.cards
        .delete("gone", &DeleteParams::default())
        .await
        .unwrap();
    assert!(s.cards.get_opt("gone").await.unwrap().is_none());
    let op_ingresses: Api<Ingress> = Api::namespaced(s.client.clone(), &s.op_ns.name);
    let (gone_route, old_route) = (
        ingress_name(&s.ns.name, "gone"),
        ingress_name(&s.ns.name, "old"),
    );
    assert!(op_ingresses.get_opt(&gone_route).await.unwrap().is_some());

    // The next operator sweeps its route in the operator's namespace at start-up (garbage
    // collection took its ConfigMap), and leaves the live card's alone.
    s.operator = Operator::start(&s.op_ns.name, &s.ns.name, &[]);
    let cms: Api<ConfigMap> = Api::namespaced(s.client.clone(), &s.ns.name);
    let swept = wait_for(Duration::from_secs(60), || async {
        matches!(op_ingresses.get_opt(&gone_route).await, Ok(None))
            && matches!(cms.get_opt("agentcard-gone").await, Ok(None))
    })
    .await;
    assert!(
        swept.is_ok(),
        "the deleted card's route stayed\n{}",
        s.operator.logs()
    );
    assert!(op_ingresses.get_opt(&old_route).await.unwrap().is_some());

    // A card held in deletion by someone else's finalizer is taken off the air at once.
    s.cards
        .delete("old", &DeleteParams::default())
        .await
        .unwrap();
    let off = wait_for(Duration::from_secs(30), || async {
        matches!(op_ingresses.get_opt(&old_route).await, Ok(None))
    })
    .await;
    assert!(
        off.is_ok(),
        "a card being deleted stayed routed\n{}",
        s.operator.logs()
    );
    assert!(s.cards.get_opt("old").await.unwrap().is_some());
    s.cards
        .patch(
            "old",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    let went = wait_for(Duration::from_secs(30), || async {
        matches!(s.cards.get_opt("old").await, Ok(None))
    })
    .await;
    assert!(went.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_scoped_to_one_namespace_keeps_and_serves_only_that_namespace() {
    let s = setup("scoped", &[]).await;
    // A second installation, for another namespace, publishes a card there.
    let other_op = TestNamespace::new(&s.client, "scoped-other-op").await;
    let other = TestNamespace::new(&s.client, "scoped-other").await;
    let other_operator = Operator::start(&other_op.name, &other.name, &[]);
    let other_cards: Api<AgentCard> = Api::namespaced(s.client.clone(), &other.name);
    let theirs = host("theirs", &other.name);
    apply(&other_cards, &example("theirs", &theirs))
        .await
        .unwrap();
    wait_card(&other_cards, "theirs", &other_operator, "Ready", ready).await;
    apply(&s.cards, &example("ours", &host("ours", &s.ns.name)))
        .await
        .unwrap();
    wait_card(&s.cards, "ours", &s.operator, "Ready", ready).await;
    let path = PATH_CARD;
    let served = wait_for(Duration::from_secs(20), || {
        std::future::ready(
            other_operator.get(&theirs, path).status == 200
                && s.operator.get(&host("ours", &s.ns.name), path).status == 200,
        )
    })
    .await;
    assert!(served.is_ok(), "each installation serves its own card");
    // The first installation never stored the other namespace's card or its ConfigMap: its
    // server does not know the host.
    assert_eq!(s.operator.get(&theirs, path).status, 404);
    assert_eq!(
        other_operator.get(&host("ours", &s.ns.name), path).status,
        404
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_operators_one_reconciles_and_the_other_takes_over() {
    let client = client().await;
    let op_ns = TestNamespace::new(&client, "ha-op").await;
    let ns = TestNamespace::new(&client, "ha").await;
    let a = Operator::start(
        &op_ns.name,
        &ns.name,
        &["--lease-duration", "6", "--identity", "op-a"],
    );
    let b = Operator::start(
        &op_ns.name,
        &ns.name,
        &["--lease-duration", "6", "--identity", "op-b"],
    );
    let holder = support::operator::lease_holder(&client, &op_ns.name).await;
    let (mut leader, follower) = if holder == "op-a" { (a, b) } else { (b, a) };
    // Exactly one process runs the controllers.
    assert!(
        leader.logs().contains("acquired the lease"),
        "{}",
        leader.logs()
    );
    assert!(
        !follower.logs().contains("acquired the lease"),
        "{}",
        follower.logs()
    );

    let cards: Api<AgentCard> = Api::namespaced(client.clone(), &ns.name);
    let h = host("ha", &ns.name);
    apply(&cards, &example("card", &h)).await.unwrap();
    wait_card(&cards, "card", &leader, "Ready", ready).await;
    // Both processes serve it.
    for o in [&leader, &follower] {
        support::http::eventually(Duration::from_secs(10), || {
            (o.get(&h, PATH_CARD).status == 200).then_some(())
        })
        .expect("served by every replica");
    }

    // The leader dies without releasing the lease: the other takes over within the lease duration.
    leader.kill();
    let started = std::time::Instant::now();
    wait_for(Duration::from_secs(20), || async {
        follower.logs().contains("acquired the lease")
    })
    .await
    .expect("takeover");
    eprintln!(
        "takeover after {:?} (lease duration 6 s)",
        started.elapsed()
    );
    apply(&cards, &example("after", &host("after", &ns.name)))
        .await
        .unwrap();
    wait_card(&cards, "after", &follower, "Ready after takeover", ready).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_jwks_is_repaired_and_its_last_modified_follows_its_bytes() {
    let s = setup("jwks", &[]).await;
    let h = host("j", &s.ns.name);
    apply(&s.cards, &example("one", &h)).await.unwrap();
    wait_card(&s.cards, "one", &s.operator, "Ready", ready).await;
    // The JWKS is published before the first card signed with its keys: once the card is
    // served, so is the key that verifies it.
    support::http::eventually(Duration::from_secs(10), || {
        (s.operator.get(&h, PATH_CARD).status == 200).then_some(())
    })
    .expect("the card is served");
    let served = || s.operator.get(&h, PATH_JWKS);
    let first = served();
    assert_eq!(first.status, 200, "a card is served before its JWKS");
    let (etag, modified) = (
        first.header("etag").unwrap().to_string(),
        first.header("last-modified").unwrap().to_string(),
    );
    let cms: Api<ConfigMap> = Api::namespaced(s.client.clone(), &s.op_ns.name);

    // Deleted: written again, same bytes, same Last-Modified.
    cms.delete("agentcard-jwks", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(Duration::from_secs(20), || async {
        cms.get_opt("agentcard-jwks").await.ok().flatten().is_some()
    })
    .await
    .expect("the JWKS ConfigMap is written again");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let again = served();
    assert_eq!(again.header("etag"), Some(etag.as_str()));
    assert_eq!(again.header("last-modified"), Some(modified.as_str()));

    // Edited by hand: repaired.
    let patch = json!({"data": {"jwks.json": "{\"keys\":[]}"}});
    cms.patch(
        "agentcard-jwks",
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .unwrap();
    wait_for(Duration::from_secs(20), || {
        std::future::ready(served().header("etag") == Some(etag.as_str()))
    })
    .await
    .expect("an edited JWKS is repaired");

    // New keys: new bytes, and Last-Modified moves with them.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let secrets: Api<Secret> = Api::namespaced(s.client.clone(), &s.op_ns.name);
    let key = agentcard_operator::a2a::SigningKey::generate(
        agentcard_operator::a2a::Algorithm::ES256,
        Some("added-1"),
    )
    .unwrap();
    let old_kid = s
        .cards
        .get("one")
        .await
        .unwrap()
        .status
        .unwrap()
        .key_id
        .unwrap();
    merge_secret(
        &secrets,
        &json!({
            "metadata": {"annotations": {"agentcard.dev/active-key": old_kid}},
            "stringData": {"added-1.jwk.json": key.private_jwk_json().unwrap()},
        }),
    )
    .await;
    wait_for(Duration::from_secs(20), || {
        std::future::ready(served().header("etag").is_some_and(|e| e != etag))
    })
    .await
    .unwrap_or_else(|()| {
        panic!(
            "the JWKS with the added key is not served: {}\n{}",
            String::from_utf8_lossy(&served().body),
            s.operator.logs()
        )
    });
    let later = served();
    let parse = |v: &str| httpdate::parse_http_date(v).unwrap();
    assert!(
        parse(later.header("last-modified").unwrap()) > parse(&modified),
        "Last-Modified did not move with the bytes: {modified} then {:?}",
        later.header("last-modified")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sigterm_the_lease_holder_gives_the_lease_up_then_drains() {
    let client = client().await;
    let op_ns = TestNamespace::new(&client, "drain-op").await;
    let ns = TestNamespace::new(&client, "drain").await;
    let mut op = Operator::start(
        &op_ns.name,
        &ns.name,
        &["--identity", "draining-one", "--drain-seconds", "8"],
    );
    let holder = || support::operator::current_lease_holder(&client, &op_ns.name);
    wait_for(Duration::from_secs(20), || async {
        holder().await.as_deref() == Some("draining-one")
    })
    .await
    .expect("it leads");
    op.terminate();
    let ready = |op: &Operator| {
        support::http::request(op.server.admin, "GET", "/readyz", &[("Host", "admin")]).status
    };
    wait_for(Duration::from_secs(2), || {
        std::future::ready(ready(&op) == 503)
    })
    .await
    .expect("/readyz turns 503 at once");
    // The lease goes first, while the server still drains: a takeover does not wait for it.
    wait_for(Duration::from_secs(6), || async {
        holder().await.as_deref() != Some("draining-one")
    })
    .await
    .unwrap_or_else(|_| panic!("the lease was kept through the drain:\n{}", op.logs()));
    assert!(
        op.wait_exit(Duration::ZERO).is_none(),
        "it exited before its drain ended:\n{}",
        op.logs()
    );
    assert_eq!(ready(&op), 503, "it still answers while draining");
    let status = op
        .wait_exit(Duration::from_secs(30))
        .unwrap_or_else(|| panic!("it did not exit:\n{}", op.logs()));
    assert!(status.success(), "{status}\n{}", op.logs());
    assert!(op.logs().contains("lease released"), "{}", op.logs());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_given_up_is_taken_over_before_it_would_have_expired() {
    let client = client().await;
    let op_ns = TestNamespace::new(&client, "handover-op").await;
    let ns = TestNamespace::new(&client, "handover").await;
    // A long lease: a follower that waited for its expiry would take 60 s.
    let args = |id: &'static str| {
        [
            "--lease-duration",
            "60",
            "--identity",
            id,
            "--drain-seconds",
            "1",
        ]
    };
    let a = Operator::start(&op_ns.name, &ns.name, &args("op-a"));
    let holder = support::operator::lease_holder(&client, &op_ns.name).await;
    assert_eq!(holder, "op-a");
    let b = Operator::start(&op_ns.name, &ns.name, &args("op-b"));
    // op-b is up and waiting (it serves) before op-a goes.
    support::http::eventually(Duration::from_secs(20), || {
        (support::http::request(b.server.admin, "GET", "/readyz", &[("Host", "admin")]).status
            == 200)
            .then_some(())
    })
    .expect("the second replica ready");
    assert!(!b.logs().contains("acquired the lease"), "{}", b.logs());
    let released = std::time::Instant::now();
    a.terminate();
    wait_for(Duration::from_secs(30), || async {
        b.logs().contains("acquired the lease")
    })
    .await
    .unwrap_or_else(|_| panic!("no takeover within half the lease:\n{}", b.logs()));
    eprintln!(
        "takeover {:?} after SIGTERM (lease duration 60 s)",
        released.elapsed()
    );
    assert_eq!(
        support::operator::current_lease_holder(&client, &op_ns.name)
            .await
            .as_deref(),
        Some("op-b")
    );
}

/// The resource version of a list of `api` now (a watch from it sees only later writes).
async fn list_version<K>(api: &Api<K>) -> String
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let list = api.list_metadata(&ListParams::default()).await.unwrap();
    list.metadata.resource_version.unwrap()
}

/// Every write to `ns`'s AgentCards and ConfigMaps from now on, as `kind/name@resourceVersion`
/// (a watch from the current list: what exists now is not counted).
async fn count_writes(
    client: &Client,
    ns: &str,
) -> (
    std::sync::Arc<std::sync::Mutex<std::collections::BTreeSet<String>>>,
    agentcard_operator::process::AbortOnDrop,
) {
    use futures::StreamExt;
    let seen = std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeSet::new()));
    let cards: Api<AgentCard> = Api::namespaced(client.clone(), ns);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let (rv_cards, rv_cms) = (list_version(&cards).await, list_version(&cms).await);
    let record = seen.clone();
    let task = tokio::spawn(async move {
        let wp = kube::api::WatchParams::default().timeout(290);
        let mut card_events = cards.watch(&wp, &rv_cards).await.unwrap().boxed();
        let mut cm_events = cms.watch(&wp, &rv_cms).await.unwrap().boxed();
        loop {
            let entry = tokio::select! {
                Some(Ok(kube::api::WatchEvent::Modified(c) | kube::api::WatchEvent::Added(c))) = card_events.next() =>
                    format!("AgentCard/{}@{}", c.name_any(), c.resource_version().unwrap_or_default()),
                Some(Ok(kube::api::WatchEvent::Modified(c) | kube::api::WatchEvent::Added(c))) = cm_events.next() =>
                    format!("ConfigMap/{}@{}", c.name_any(), c.resource_version().unwrap_or_default()),
                else => break,
            };
            record.lock().unwrap().insert(entry);
        }
    });
    (seen, agentcard_operator::process::AbortOnDrop(task))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_installations_with_different_keys_hold_a_shared_card_instead_of_fighting() {
    let client = client().await;
    let ns = TestNamespace::new(&client, "contest").await;
    let (ns_a, ns_b) = (
        TestNamespace::new(&client, "contest-a").await,
        TestNamespace::new(&client, "contest-b").await,
    );
    // Installation A publishes two cards with its own key.
    let mut a = Operator::start(&ns_a.name, &ns.name, &["--lease-duration", "6"]);
    let cards: Api<AgentCard> = Api::namespaced(client.clone(), &ns.name);
    let names = ["one", "two"];
    for n in names {
        apply(&cards, &example(n, &host(n, &ns.name)))
            .await
            .unwrap();
    }
    let mut key_a = String::new();
    for n in names {
        let c = wait_card(&cards, n, &a, "Ready", ready).await;
        let status = c.status.unwrap();
        assert_eq!(status.operator.as_deref(), Some(ns_a.name.as_str()));
        key_a = status.key_id.unwrap();
    }
    let served_before: Vec<_> =
        futures::future::join_all(names.iter().map(|n| served_bytes(&client, &ns.name, n))).await;

    // Installation B, with another key, watches the same namespace for a minute.
    let (writes, _watch) = count_writes(&client, &ns.name).await;
    let b = Operator::start(&ns_b.name, &ns.name, &["--lease-duration", "6"]);
    let contended = |c: &AgentCard| {
        c.status.as_ref().is_some_and(|s| {
            let mut both = vec![ns_a.name.clone(), ns_b.name.clone()];
            both.sort();
            s.contenders == both
        }) && condition(c, "Conflict").is_some_and(|(s, r, m)| {
            s == "True" && r == "Conflict" && m.contains(&ns_a.name) && m.contains(&ns_b.name)
        })
    };
    for n in names {
        wait_card(&cards, n, &b, "Conflict", contended).await;
    }
    tokio::time::sleep(Duration::from_secs(60)).await;
    let during: Vec<String> = writes.lock().unwrap().iter().cloned().collect();
    eprintln!(
        "two installations, one minute: {} writes to the 2 contested cards and their ConfigMaps: {during:?}",
        during.len()
    );
    for n in names {
        let c = cards.get(n).await.unwrap();
        assert!(contended(&c), "{n}: {:?}", c.status);
        assert!(ready(&c), "{n} is no longer served: {:?}", c.status);
        assert_eq!(c.status.unwrap().key_id.as_deref(), Some(key_a.as_str()));
    }
    // Held: one status write per card, the served bytes untouched, A still serves them.
    assert!(
        during.iter().all(|w| w.starts_with("AgentCard/")) && during.len() <= 2 * names.len(),
        "{during:#?}"
    );
    let served_after: Vec<_> =
        futures::future::join_all(names.iter().map(|n| served_bytes(&client, &ns.name, n))).await;
    assert_eq!(
        served_after, served_before,
        "a contested card was rewritten"
    );
    assert_eq!(a.get(&host("one", &ns.name), PATH_CARD).status, 200);
    // One Warning Event per card, and both installations count the conflict.
    let events: Api<Event> = Api::namespaced(client.clone(), &ns.name);
    let conflict_events = || async {
        events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("Conflict"))
            .count()
    };
    // Events are written by a background writer: wait for them, then check none more came.
    let _ = wait_for(Duration::from_secs(10), || async {
        conflict_events().await >= names.len()
    })
    .await;
    assert_eq!(
        conflict_events().await,
        names.len(),
        "one Conflict Event per card"
    );
    for o in [&a, &b] {
        assert!(
            o.metrics()
                .contains("agentcard_reconcile_failures_total{controller=\"agentcard\",category=\"operator_conflict\"}"),
            "{}",
            o.metrics()
        );
    }

    // A stops: B takes the cards over, signs them with its key, and the conflict is over.
    a.terminate();
    a.wait_exit(Duration::from_secs(30));
    let stopped = std::time::Instant::now();
    // B looks again within its backoff (at most a minute).
    let taken_over = |c: &AgentCard| {
        ready(c)
            && c.status.as_ref().is_some_and(|s| {
                s.operator.as_deref() == Some(ns_b.name.as_str())
                    && s.contenders.is_empty()
                    && s.key_id.as_ref().is_some_and(|k| *k != key_a)
            })
            && condition(c, "Conflict").is_none()
    };
    let over = wait_for(Duration::from_secs(90), || async {
        futures::future::join_all(names.iter().map(|n| cards.get(n)))
            .await
            .iter()
            .all(|c| c.as_ref().is_ok_and(taken_over))
    })
    .await;
    assert!(
        over.is_ok(),
        "B did not take over: {:?}\n{}",
        cards.get("one").await.unwrap().status,
        b.logs()
    );
    eprintln!(
        "installation A stopped: B published both cards with its key after {:?}",
        stopped.elapsed()
    );
}

/// The extended card's ConfigMap bytes, if it exists.
async fn extended_bytes(client: &Client, ns: &str, card: &str) -> Option<String> {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    cms.get_opt(&extended_configmap_name(card))
        .await
        .ok()??
        .data?
        .get(KEY_EXTENDED)
        .cloned()
}

fn parse_card(body: &str) -> agentcard_operator::a2a::AgentCard {
    agentcard_operator::a2a::AgentCard::from_json_lenient(body.as_bytes()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extended_card_is_a_signed_superset_published_with_the_public_card() {
    use futures::StreamExt;
    use kube::api::{WatchEvent, WatchParams};

    let s = setup("extended", &[]).await;
    let host = host("ext", &s.ns.name);
    let mut m = example("weather", &host);
    m["spec"]["extendedCard"] = json!({
        "description": "Forecasts, alerts and the forty-year archive, for signed-in partners.",
        "skills": [{"id": "archive", "name": "Archive", "description": "Past weather of a place.",
                    "tags": ["weather", "history"], "securityRequirements": [{"schemes": {"partner": {"list": []}}}]}],
        "supportedInterfaces": [{"url": format!("https://{host}/a2a/rest"), "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"}],
        "securitySchemes": {"partner": {"mtlsSecurityScheme": {"description": "partner certificates"}}}
    });
    apply(&s.cards, &m).await.unwrap();
    let card = wait_card(&s.cards, "weather", &s.operator, "Ready", ready).await;
    let status = card.status.clone().unwrap();
    let ext_status = status.extended_card.clone().expect("status.extendedCard");
    assert_eq!(ext_status.config_map, "extended-agentcard-weather");

    // The extended card: its own ConfigMap, owned by the card, its hash on the status.
    let cms: Api<ConfigMap> = Api::namespaced(s.client.clone(), &s.ns.name);
    let cm = cms.get("extended-agentcard-weather").await.unwrap();
    let owner = &cm.metadata.owner_references.clone().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.controller),
        ("AgentCard", "weather", Some(true))
    );
    let ext_body = cm.data.unwrap()[KEY_EXTENDED].clone();
    assert_eq!(content_hash(ext_body.as_bytes()), ext_status.content_hash);

    // The public card served advertises it and lists nothing of it.
    let served = support::http::eventually(Duration::from_secs(10), || {
        let r = s.operator.get(&host, PATH_CARD);
        (r.status == 200).then_some(r)
    })
    .expect("the card is served");
    let public = parse_card(std::str::from_utf8(&served.body).unwrap());
    assert_eq!(public.capabilities.extended_agent_card, Some(true));
    assert!(!public.skills.iter().any(|s| s.id == "archive"));
    assert!(!String::from_utf8_lossy(&served.body).contains("forty-year"));
    let extended = parse_card(&ext_body);
    let ids: Vec<&str> = extended.skills.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["forecast", "alerts", "archive"]);
    assert!(
        agentcard_operator::a2a::extended::missing(&public, &extended).is_empty(),
        "the extended card lacks something of the public one"
    );

    // Both official SDKs verify both cards with the JWKS the operator publishes.
    let jwks = s.operator.get(&host, PATH_JWKS);
    assert_eq!(jwks.status, 200);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("jwks.json"), &jwks.body).unwrap();
    std::fs::write(dir.path().join("public.json"), &served.body).unwrap();
    std::fs::write(dir.path().join("extended.json"), &ext_body).unwrap();
    let files = [
        dir.path().join("public.json"),
        dir.path().join("extended.json"),
    ];
    for sdk in [support::Sdk::Python, support::Sdk::Js] {
        for v in support::sdk_verify(sdk, &dir.path().join("jwks.json"), &files) {
            assert!(v.valid, "{sdk:?} rejects a card: {:?}", v.error);
        }
    }

    // The agent serving the mounted bytes: the official Python SDK's JSON-RPC server, given both
    // ConfigMaps' bytes as the files a Pod mounting them reads, answers GetExtendedAgentCard;
    // the SDK's JSON-RPC client fetches it there and verifies its signature with the JWKS.
    let agent = support::ExtendedAgent::start(&files[0], &files[1]);
    let (fetched, verdict) = support::sdk_extended(
        &format!("http://{}", agent.addr),
        (&host, "/a2a", "JSONRPC"),
        &dir.path().join("jwks.json"),
        None,
    );
    assert!(fetched, "{verdict}");
    assert_eq!(verdict["skills"], json!(["forecast", "alerts", "archive"]));
    drop(agent);

    // An edit of the public card updates both, the extended card first: a watch of the
    // namespace's ConfigMaps shows the extended card's write before the public card's.
    let list = cms.list(&ListParams::default()).await.unwrap();
    let from = list.metadata.resource_version.unwrap();
    let mut events = cms
        .watch(&WatchParams::default().labels(LABEL_MANAGED_BY), &from)
        .await
        .unwrap()
        .boxed();
    m["spec"]["card"]["skills"][0]["description"] = json!("Hourly, daily and ten-day forecasts.");
    apply(&s.cards, &m).await.unwrap();
    let mut order = Vec::new();
    while order.len() < 2 {
        let next = tokio::time::timeout(Duration::from_secs(60), events.next())
            .await
            .expect("both ConfigMaps change")
            .expect("the watch goes on")
            .unwrap();
        if let WatchEvent::Modified(cm) = next {
            let body = cm.data.as_ref().and_then(|d| d.values().next().cloned());
            if body.is_some_and(|b| b.contains("ten-day")) {
                order.push(cm.name_any());
            }
        }
    }
    assert_eq!(order, ["extended-agentcard-weather", "agentcard-weather"]);
    wait_card(
        &s.cards,
        "weather",
        &s.operator,
        "Ready at generation 2",
        |c| ready(c) && c.metadata.generation == Some(2),
    )
    .await;
    let extended = parse_card(
        &extended_bytes(&s.client, &s.ns.name, "weather")
            .await
            .unwrap(),
    );
    assert_eq!(
        extended.skills[0].description,
        "Hourly, daily and ten-day forecasts."
    );

    // An extended card that would hide or change a public skill is refused with the field
    // named; both cards stay as they were.
    let (good_public, good_ext) = (
        served_bytes(&s.client, &s.ns.name, "weather")
            .await
            .unwrap(),
        extended_bytes(&s.client, &s.ns.name, "weather")
            .await
            .unwrap(),
    );
    let mut bad = m.clone();
    bad["spec"]["extendedCard"]["skills"][0]["id"] = json!("forecast");
    bad["spec"]["extendedCard"]["skills"][0]["name"] = json!("");
    apply(&s.cards, &bad).await.unwrap();
    let card = wait_card(&s.cards, "weather", &s.operator, "Ready=False", |c| {
        condition(c, "Ready").is_some_and(|(st, r, _)| st == "False" && r == "InvalidSpec")
    })
    .await;
    let (_, _, message) = condition(&card, "Ready").unwrap();
    assert!(
        message.contains("spec.extendedCard.skills[0].id") && message.contains("public card"),
        "{message}"
    );
    assert_eq!(
        served_bytes(&s.client, &s.ns.name, "weather")
            .await
            .unwrap(),
        good_public
    );
    assert_eq!(
        extended_bytes(&s.client, &s.ns.name, "weather")
            .await
            .unwrap(),
        good_ext
    );
    let mut blank = m.clone();
    blank["spec"]["extendedCard"]["skills"][0]["name"] = json!("");
    apply(&s.cards, &blank).await.unwrap();
    let card = wait_card(
        &s.cards,
        "weather",
        &s.operator,
        "a nameless extra skill refused",
        |c| {
            condition(c, "Ready").is_some_and(|(st, _, m)| st == "False" && m.contains("name"))
                && c.status.as_ref().and_then(|s| s.observed_generation) == c.metadata.generation
        },
    )
    .await;
    let (_, _, message) = condition(&card, "Ready").unwrap();
    assert!(
        message.contains("spec.extendedCard.skills[0].name"),
        "{message}"
    );

    // Without spec.extendedCard: the capability is off and the extended card is gone.
    let mut plain = m.clone();
    plain["spec"]
        .as_object_mut()
        .unwrap()
        .remove("extendedCard");
    apply(&s.cards, &plain).await.unwrap();
    let card = wait_card(
        &s.cards,
        "weather",
        &s.operator,
        "Ready without extendedCard",
        |c| ready(c) && c.status.as_ref().is_some_and(|s| s.extended_card.is_none()),
    )
    .await;
    let public = parse_card(
        &served_bytes(&s.client, &s.ns.name, "weather")
            .await
            .unwrap(),
    );
    assert_eq!(public.capabilities.extended_agent_card, None);
    assert!(card.status.unwrap().extended_card.is_none());
    wait_for(Duration::from_secs(30), || async {
        cms.get_opt("extended-agentcard-weather")
            .await
            .is_ok_and(|c| c.is_none())
    })
    .await
    .expect("the extended card's ConfigMap is deleted");

    // A ConfigMap someone else holds under an extended card's name is never written over: the
    // card says NameInUse, and no public card advertises an extended card that is not there.
    let squatted: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "extended-agentcard-squat"},
        "data": {KEY_EXTENDED: "{\"name\": \"not the operator's\"}"}
    }))
    .unwrap();
    cms.create(&Default::default(), &squatted).await.unwrap();
    let mut squat = example("squat", &format!("squat.{}.agents.test", s.ns.name));
    squat["spec"]["extendedCard"] = m["spec"]["extendedCard"].clone();
    apply(&s.cards, &squat).await.unwrap();
    let card = wait_card(&s.cards, "squat", &s.operator, "NameInUse", |c| {
        condition(c, "Ready").is_some_and(|(st, r, _)| st == "False" && r == "NameInUse")
    })
    .await;
    let (_, _, message) = condition(&card, "Ready").unwrap();
    assert!(message.contains("extended-agentcard-squat"), "{message}");
    assert!(served_bytes(&s.client, &s.ns.name, "squat").await.is_none());
    assert_eq!(
        extended_bytes(&s.client, &s.ns.name, "squat")
            .await
            .as_deref(),
        Some("{\"name\": \"not the operator's\"}"),
        "the squatter's ConfigMap was written over"
    );
}

/// The plane's API server URL and CA certificate (PEM), from its kubeconfig.
fn plane_server_and_ca() -> (String, Vec<u8>) {
    let kc = kube::config::Kubeconfig::read_from(support::plane::kubeconfig()).unwrap();
    let cluster = kc.clusters[0].cluster.clone().unwrap();
    let ca = base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD,
        cluster.certificate_authority_data.unwrap(),
    )
    .unwrap();
    (cluster.server.unwrap(), ca)
}

/// The issuer of the plane's ServiceAccount tokens.
const PLANE_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// A token of ServiceAccount `sa` of `ns` as `kubectl create token` makes it (`audience`
/// `None`: the API server's own).
fn sa_token(ns: &str, sa: &str, audience: Option<&str>) -> String {
    let mut args = vec!["create", "token", sa, "-n", ns];
    if let Some(a) = audience {
        args.extend(["--audience", a]);
    }
    support::kubectl(support::plane::kubeconfig(), &args)
        .trim()
        .to_string()
}

/// A JWT with `claims` signed RS256 with the PEM key `key` under key id `kid`.
fn jwt_signed(key: &[u8], kid: &str, claims: &Value) -> String {
    let signer = josekit::jws::RS256.signer_from_pem(key).unwrap();
    let mut header = josekit::jws::JwsHeader::new();
    header.set_token_type("JWT");
    header.set_key_id(kid);
    let payload = josekit::jwt::JwtPayload::from_map(claims.as_object().unwrap().clone()).unwrap();
    josekit::jwt::encode_with_signer(&payload, &header, &signer).unwrap()
}

fn now_secs() -> i64 {
    jiff::Timestamp::now().as_second()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_answers_the_rest_extended_card_to_the_callers_its_auth_accepts() {
    use k8s_openapi::api::rbac::v1::ClusterRoleBinding;

    // The plane's ServiceAccount issuer as an OIDC issuer the platform configured: its
    // discovery document and JWKS fetched from the API server, trusting the plane's CA.
    let (server, ca) = plane_server_and_ca();
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, &ca).unwrap();
    let issuer_flag = format!("{PLANE_ISSUER}={server}/.well-known/openid-configuration");
    let s = setup(
        "extrest",
        &[
            "--oidc-issuer",
            &issuer_flag,
            "--oidc-ca-file",
            ca_file.to_str().unwrap(),
        ],
    )
    .await;
    let ns = s.ns.name.clone();
    // Anyone may read the issuer's discovery document and keys, as an OIDC issuer publishes
    // them (the binding Kubernetes documents for that).
    let bindings: Api<ClusterRoleBinding> = Api::all(s.client.clone());
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "agentcard-test-issuer-discovery"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "system:service-account-issuer-discovery"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                      "name": "system:unauthenticated"}]
    }))
    .unwrap();
    bindings
        .patch(
            "agentcard-test-issuer-discovery",
            &PatchParams::apply("agentcard-tests").force(),
            &Patch::Apply(&binding),
        )
        .await
        .unwrap();
    for name in ["caller", "stranger"] {
        support::service_account(&s.client, &ns, name).await;
    }

    let host = host("extrest", &ns);
    let audience = format!("https://{host}");
    let caller = format!("system:serviceaccount:{ns}:caller");
    let mut m = example("weather", &host);
    m["spec"]["backend"] =
        json!({"serviceName": "weather", "port": 8080, "protocolBinding": "HTTP+JSON"});
    m["spec"]["extendedCard"] = json!({
        "description": "Forecasts, alerts and the forty-year archive, for signed-in partners.",
        "skills": [{"id": "archive", "name": "Archive", "description": "Past weather of a place.",
                    "tags": ["weather", "history"]}],
        "auth": {"oidc": {"issuer": PLANE_ISSUER, "audiences": [audience],
                          "requiredClaims": {"sub": caller}}}
    });
    apply(&s.cards, &m).await.unwrap();
    let card = wait_card(
        &s.cards,
        "weather",
        &s.operator,
        "Ready with an extended card",
        |c| ready(c) && c.status.as_ref().is_some_and(|s| s.extended_card.is_some()),
    )
    .await;
    let status = card.status.unwrap();
    let path = "/a2a/extendedAgentCard";
    assert_eq!(
        status
            .served
            .as_ref()
            .and_then(|r| r.extended_path.as_deref()),
        Some(path)
    );
    // The operator's route sends that exact path to its own server.
    let ingresses: Api<Ingress> = Api::namespaced(s.client.clone(), &s.op_ns.name);
    let ing = ingresses.get(&ingress_name(&ns, "weather")).await.unwrap();
    let ing = serde_json::to_value(ing).unwrap();
    assert!(
        ing["spec"]["rules"][0]["http"]["paths"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["path"] == path && p["pathType"] == "Exact"),
        "{ing}"
    );
    let ext_body = extended_bytes(&s.client, &ns, "weather").await.unwrap();
    let ext_hash = status.extended_card.unwrap().content_hash;

    // A token of the caller, made for the card's audience: the extended card's exact bytes,
    // cached privately, revalidated by its ETag.
    let token = sa_token(&ns, "caller", Some(&audience));
    let bearer = format!("Bearer {token}");
    let get = |auth: &str| {
        let headers: Vec<(&str, &str)> = match auth {
            "" => vec![("Host", host.as_str())],
            a => vec![("Host", host.as_str()), ("Authorization", a)],
        };
        support::http::request(s.operator.server.addr, "GET", path, &headers)
    };
    let ok = support::http::eventually(Duration::from_secs(30), || {
        let r = get(&bearer);
        (r.status == 200).then_some(r)
    })
    .unwrap_or_else(|| {
        let r = get(&bearer);
        panic!(
            "the caller's token is not accepted: {} {}\n{}",
            r.status,
            String::from_utf8_lossy(&r.body),
            s.operator.logs()
        )
    });
    assert_eq!(ok.body, ext_body.as_bytes());
    assert!(
        ok.header("cache-control").unwrap().starts_with("private"),
        "{:?}",
        ok.header("cache-control")
    );
    assert!(ok.header("vary").unwrap().contains("Authorization"));
    let etag = format!("\"{ext_hash}\"");
    assert_eq!(ok.header("etag"), Some(etag.as_str()));
    let again = support::http::request(
        s.operator.server.addr,
        "GET",
        path,
        &[
            ("Host", &host),
            ("Authorization", &bearer),
            ("If-None-Match", &etag),
        ],
    );
    assert_eq!(again.status, 304);

    // Refused, each with a Bearer challenge and the A2A error body, nothing of the card: no
    // token; a token for another audience; one of another ServiceAccount (the required
    // claim); the caller's token with its payload changed; a token of another issuer.
    let unauthorized = |r: &support::http::Resp, what: &str| {
        assert_eq!(
            r.status,
            401,
            "{what}: {}",
            String::from_utf8_lossy(&r.body)
        );
        assert!(
            r.header("www-authenticate")
                .is_some_and(|c| c.starts_with("Bearer realm=")),
            "{what}: {:?}",
            r.header("www-authenticate")
        );
        let body: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(body["error"]["status"], "UNAUTHENTICATED", "{what}");
        assert!(
            !String::from_utf8_lossy(&r.body).contains("forty-year"),
            "{what}"
        );
        r.header("www-authenticate").unwrap().to_string()
    };
    unauthorized(&get(""), "no token");
    let other_audience = sa_token(&ns, "caller", Some("https://elsewhere.example"));
    let c = unauthorized(
        &get(&format!("Bearer {other_audience}")),
        "another audience",
    );
    assert!(c.contains("invalid_token") && c.contains("audience"), "{c}");
    let default_audience = sa_token(&ns, "caller", None);
    unauthorized(
        &get(&format!("Bearer {default_audience}")),
        "the API server's audience",
    );
    let stranger = sa_token(&ns, "stranger", Some(&audience));
    let c = unauthorized(
        &get(&format!("Bearer {stranger}")),
        "another ServiceAccount",
    );
    assert!(c.contains("claim sub"), "{c}");
    let parts: Vec<&str> = token.split('.').collect();
    let mut claims: Value = serde_json::from_slice(
        &base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, parts[1])
            .unwrap(),
    )
    .unwrap();
    claims["exp"] = json!(now_secs() + 86_400);
    let tampered = format!(
        "{}.{}.{}",
        parts[0],
        base64::Engine::encode(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD,
            serde_json::to_vec(&claims).unwrap()
        ),
        parts[2]
    );
    let c = unauthorized(&get(&format!("Bearer {tampered}")), "a tampered token");
    assert!(c.contains("signature"), "{c}");
    let foreign = agentcard_operator::a2a::SigningKey::generate(
        agentcard_operator::a2a::Algorithm::RS256,
        Some("foreign"),
    )
    .unwrap();
    let foreign_pem = foreign.private_pem().unwrap();
    let mut foreign_claims = claims.clone();
    foreign_claims["iss"] = json!("https://issuer.elsewhere.example");
    let forged = jwt_signed(foreign_pem.as_bytes(), "foreign", &foreign_claims);
    unauthorized(&get(&format!("Bearer {forged}")), "another issuer");

    // Signed with the issuer's own key (the plane's): accepted while valid, refused once
    // expired; so the refusal is the expiry's, not the signature's.
    let sa_key = std::fs::read(
        support::plane::kubeconfig()
            .parent()
            .unwrap()
            .join("pki/sa.key"),
    )
    .unwrap();
    let jwks: Value = serde_json::from_str(
        &s.client
            .request_text(
                http::Request::get("/openid/v1/jwks")
                    .body(Vec::new())
                    .unwrap(),
            )
            .await
            .unwrap(),
    )
    .unwrap();
    let kid = jwks["keys"][0]["kid"].as_str().unwrap().to_string();
    let mut own = claims.clone();
    own["exp"] = json!(now_secs() + 600);
    assert_eq!(
        get(&format!("Bearer {}", jwt_signed(&sa_key, &kid, &own))).status,
        200
    );
    own["exp"] = json!(now_secs() - 600);
    let c = unauthorized(
        &get(&format!("Bearer {}", jwt_signed(&sa_key, &kid, &own))),
        "an expired token",
    );
    assert!(c.contains("expired"), "{c}");

    // The official Python SDK as the client: its REST transport fetches the extended card
    // with the caller's token and verifies its signature with the published JWKS; without a
    // token it gets the 401.
    let jwks_file = dir.path().join("jwks.json");
    std::fs::write(&jwks_file, &s.operator.get(&host, PATH_JWKS).body).unwrap();
    let base = format!("http://{}", s.operator.server.addr);
    let (fetched, verdict) = support::sdk_extended(
        &base,
        (&host, "/a2a", "HTTP+JSON"),
        &jwks_file,
        Some(&token),
    );
    assert!(fetched, "{verdict}");
    assert_eq!(verdict["skills"], json!(["forecast", "alerts", "archive"]));
    let (fetched, verdict) =
        support::sdk_extended(&base, (&host, "/a2a", "HTTP+JSON"), &jwks_file, None);
    assert!(
        !fetched && verdict["error"].as_str().unwrap().contains("401"),
        "{verdict}"
    );

    // ServiceAccount tokens reviewed by the API server instead: the caller's token for the
    // audience is accepted, the API server's own audience is not.
    m["spec"]["extendedCard"]["auth"] =
        json!({"serviceAccount": {"audiences": [audience], "namespaces": [ns]}});
    apply(&s.cards, &m).await.unwrap();
    support::http::eventually(Duration::from_secs(30), || {
        let r = get(&format!("Bearer {default_audience}"));
        (r.status == 401).then_some(())
    })
    .expect("the default audience is refused");
    let by_review = support::http::eventually(Duration::from_secs(30), || {
        let r = get(&bearer);
        (r.status == 200).then_some(r)
    })
    .expect("the caller's token is accepted by a TokenReview");
    assert_eq!(by_review.body, ext_body.as_bytes());
    unauthorized(
        &get(&format!("Bearer {other_audience}")),
        "another audience (review)",
    );
    unauthorized(&get(&format!("Bearer {forged}")), "a forged token (review)");

    // Without spec.extendedCard: the public card no longer claims one, and the path answers
    // the A2A ExtendedAgentCardNotConfiguredError to everyone.
    m["spec"].as_object_mut().unwrap().remove("extendedCard");
    apply(&s.cards, &m).await.unwrap();
    let answer = support::http::eventually(Duration::from_secs(30), || {
        let r = get(&bearer);
        (r.status == 400).then_some(r)
    })
    .expect("the not-configured error");
    let body: Value = serde_json::from_slice(&answer.body).unwrap();
    assert_eq!(body["error"]["status"], "FAILED_PRECONDITION");
    assert_eq!(
        body["error"]["details"][0]["reason"],
        "EXTENDED_AGENT_CARD_NOT_CONFIGURED"
    );
    let public = parse_card(&served_bytes(&s.client, &ns, "weather").await.unwrap());
    assert_eq!(public.capabilities.extended_agent_card, None);
}
