//! Registry depth on the real control plane: reachability of listed agents (their Services'
//! EndpointSlices), lifecycle and successors (deprecated: headers; retired: 410, tombstone,
//! then gone), breaking-change checks on edits (each `spec.publish.compatibility` rule), ARD
//! v0.91 (the manifest at `/.well-known/ard.json` and `GET /agents/{identifier}` validated
//! against tests/data/ard-v0.91), and the directory as MCP tools called through the official
//! MCP Python SDK client. Every view of the directory (native API, ARD, change feed, web page,
//! MCP) is checked to say the same of the same card.

mod support;

use std::time::{Duration, Instant};

use agentcard_operator::contract::ANN_CONTENT_HASH;
use agentcard_operator::crd::AgentCard;
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::{ConfigMap, Event, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::ResourceExt;
use serde_json::{json, Value};
use support::cluster::*;
use support::directory::*;
use support::plane::wait_for;
use support::{condition, ready};

/// A directory over `namespaces` only (tests share the plane).
fn directory_of(name: &str, host: &str, namespaces: &[&str], extra: Value) -> Value {
    let mut d = directory(
        name,
        host,
        json!({"namespaceSelector": {"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": namespaces}]}}),
    );
    for (k, v) in extra.as_object().into_iter().flatten() {
        d["spec"][k] = v.clone();
    }
    d
}

async fn apply_object<K>(api: &Api<K>, name: &str, v: &Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    api.patch(name, &PatchParams::apply("test").force(), &Patch::Apply(v))
        .await
        .unwrap_or_else(|e| panic!("applying {name}: {e}"));
}

/// Service `ns/name` with one port.
async fn service(p: &Platform, ns: &str, name: &str, port: i32) {
    let api: Api<Service> = Api::namespaced(p.admin.clone(), ns);
    let v = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
        "spec": {"ports": [{"name": "http", "port": port, "targetPort": 8080}]}});
    apply_object(&api, name, &v).await;
}

/// Its EndpointSlice, with one endpoint that is ready or not.
async fn slice(p: &Platform, ns: &str, svc: &str, ready: bool) {
    let api: Api<EndpointSlice> = Api::namespaced(p.admin.clone(), ns);
    let name = format!("{svc}-1");
    let v = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "labels": {"kubernetes.io/service-name": svc}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.1.2.3"], "conditions": {"ready": ready}}],
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]});
    apply_object(&api, &name, &v).await;
}

fn backend_is(reason: &'static str) -> impl Fn(&AgentCard) -> bool {
    move |c| condition(c, "BackendReady").is_some_and(|(_, r, _)| r == reason)
}

/// The native `_meta` of card `ns/name` in the directory on `host` (`null` until listed).
fn meta(p: &Platform, host: &str, ns: &str, name: &str) -> Value {
    let r = get(p, host, &format!("/v1/agents/{ns}/{name}"), &[]);
    if r.status != 200 {
        return Value::Null;
    }
    json_of(&r)["_meta"]["agentcard.dev/directory"].clone()
}

/// The last change-feed item of `identifier`.
fn last_change(p: &Platform, host: &str, identifier: &str) -> Option<Value> {
    let v = json_of(&get(p, host, "/v1/changes?limit=1000", &[]));
    v["changes"]
        .as_array()?
        .iter()
        .rfind(|c| c["identifier"] == identifier)
        .cloned()
}

/// Wait until `f` holds of the directory's answers (they follow the card within seconds).
async fn eventually(what: &str, mut f: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    let ok = wait_for(Duration::from_secs(20), || std::future::ready(f())).await;
    assert!(ok.is_ok(), "{what} did not happen");
    started.elapsed()
}

fn html(p: &Platform, host: &str, path: &str) -> String {
    let r = get(p, host, path, &[("Accept", "text/html")]);
    assert_eq!(r.status, 200);
    String::from_utf8_lossy(&r.body).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reachability_follows_the_agents_endpoints_in_every_view_of_the_directory() {
    let p = Platform::start(&[]).await;
    let t = rand_tag();
    let tenant = Tenant::new(&p, &format!("reach-{t}")).await;
    let ns = tenant.ns.clone();
    let mut agent = card("agent", &format!("agent-{t}.open.test"), "");
    agent["spec"]["backend"] = json!({"serviceName": "agent", "port": 8000});
    tenant.apply(&agent).await.unwrap();
    tenant
        .apply(&card("plain", &format!("plain-{t}.open.test"), ""))
        .await
        .unwrap();
    let c = wait_card(
        &p,
        &ns,
        "agent",
        "BackendReady NoService",
        backend_is("NoService"),
    )
    .await;
    assert!(ready(&c), "an agent without a Service is still published");
    let host = format!("reach-{t}.open.test");
    apply_directory(
        &p,
        &directory_of(&format!("reach-{t}"), &host, &[&ns], json!({})),
    )
    .await;
    wait_directory(&p, &format!("reach-{t}"), "two cards", dir_ready(2)).await;
    let id = format!("urn:air:agent-{t}.open.test:{ns}:agent");
    eventually("reachable false", || {
        meta(&p, &host, &ns, "agent")["reachable"] == "false"
    })
    .await;
    assert_eq!(meta(&p, &host, &ns, "plain")["reachable"], "unknown");

    // The Service without a ready endpoint (its slice, as the EndpointSlice controller makes
    // it for a Service with a selector), then a ready endpoint.
    service(&p, &ns, "agent", 8000).await;
    slice(&p, &ns, "agent", false).await;
    wait_card(
        &p,
        &ns,
        "agent",
        "NoReadyEndpoint",
        backend_is("NoReadyEndpoint"),
    )
    .await;
    let t0 = Instant::now();
    slice(&p, &ns, "agent", true).await;
    eventually("reachable true", || {
        meta(&p, &host, &ns, "agent")["reachable"] == "true"
    })
    .await;
    let latency = t0.elapsed();
    println!(
        "reachability latency (EndpointSlice ready → directory answers reachable): {} ms",
        latency.as_millis()
    );
    let c = wait_card(
        &p,
        &ns,
        "agent",
        "EndpointsReady",
        backend_is("EndpointsReady"),
    )
    .await;
    assert_eq!(condition(&c, "BackendReady").unwrap().0, "True");

    // Every view agrees.
    let names_of = |q: &str| names(&json_of(&get(&p, &host, &format!("/v1/agents?{q}"), &[])));
    assert_eq!(names_of("reachable=true"), vec!["agent"]);
    assert_eq!(names_of("reachable=unknown"), vec!["plain"]);
    let ard = json_of(&get(&p, &host, &format!("/agents/{id}"), &[]));
    assert_eq!(ard["metadata"]["reachable"], "true", "{ard}");
    let facets = json_of(&get(&p, &host, "/v1/facets", &[]));
    assert!(
        facets["facets"]["reachable"]
            .as_array()
            .unwrap()
            .contains(&json!({"value": "true", "count": 1})),
        "{facets}"
    );
    eventually("the feed says reachable", || {
        last_change(&p, &host, &id).is_some_and(|c| c["reachable"] == "true")
    })
    .await;
    let page = html(&p, &host, "/");
    assert!(
        page.contains(
            "data-reachable=\"true\" title=\"its Service has a ready endpoint\">reachable<"
        ),
        "{page}"
    );

    // Not ready: still listed, said so everywhere.
    slice(&p, &ns, "agent", false).await;
    eventually("reachable false again", || {
        meta(&p, &host, &ns, "agent")["reachable"] == "false"
    })
    .await;
    assert_eq!(
        names_of(""),
        vec!["agent", "plain"],
        "an unreachable agent stays listed"
    );
    assert_eq!(names_of("reachable=false"), vec!["agent"]);
    eventually("the feed says unreachable", || {
        last_change(&p, &host, &id).is_some_and(|c| c["reachable"] == "false")
    })
    .await;
    assert!(html(&p, &host, "/").contains("data-reachable=\"false\""));
    let ard = json_of(&get(&p, &host, &format!("/agents/{id}"), &[]));
    assert_eq!(ard["metadata"]["reachable"], "false");

    // The port the card names goes away from the Service (no slice changes: the card looks
    // at its Service again within RECHECK while its backend is not ready).
    service(&p, &ns, "agent", 9000).await;
    let cards: Api<AgentCard> = Api::namespaced(p.admin.clone(), &ns);
    let found = wait_for(Duration::from_secs(45), || async {
        cards
            .get("agent")
            .await
            .is_ok_and(|c| backend_is("PortMissing")(&c))
    })
    .await;
    assert!(found.is_ok(), "PortMissing");
    let c = cards.get("agent").await.unwrap();
    assert!(
        condition(&c, "BackendReady")
            .unwrap()
            .2
            .contains("no port 8000"),
        "{:?}",
        condition(&c, "BackendReady")
    );
    assert!(ready(&c));
}

/// A card of `name` on its own host with `skill`, naming `successor` when deprecated.
fn agent_card(t: &str, name: &str, display: &str, lifecycle: Value) -> Value {
    let mut c = card(name, &format!("{name}-{t}.open.test"), "");
    c["spec"]["card"]["name"] = json!(display);
    c["spec"]["card"]["skills"] = json!([{"id": "forecast", "name": "Forecast",
        "description": "Weather forecasts.", "tags": ["weather"],
        "examples": ["rain tomorrow?", "sunny on Friday?"]}]);
    if !lifecycle.is_null() {
        c["spec"]["lifecycle"] = lifecycle;
    }
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deprecated_agents_say_so_and_name_their_successor_and_retired_ones_are_gone() {
    let p = Platform::start(&["--retired-retention-seconds", "12"]).await;
    let t = rand_tag();
    let tenant = Tenant::new(&p, &format!("life-{t}")).await;
    let ns = tenant.ns.clone();
    // "old" would rank first on "forecast" by its name; deprecated, it ranks after "new".
    tenant
        .apply(&agent_card(&t, "new", "Weather", Value::Null))
        .await
        .unwrap();
    let deprecated = json!({"state": "Deprecated", "message": "use the new agent",
        "sunset": "2027-06-30", "successor": {"name": "new"}});
    tenant
        .apply(&agent_card(
            &t,
            "old",
            "Forecast forecast",
            deprecated.clone(),
        ))
        .await
        .unwrap();
    tenant
        .apply(&agent_card(
            &t,
            "orphan",
            "Orphan",
            json!({"state": "Deprecated", "successor": {"name": "missing"}}),
        ))
        .await
        .unwrap();
    let new = wait_card(&p, &ns, "new", "Ready", ready).await;
    let old = wait_card(&p, &ns, "old", "Ready", ready).await;
    let orphan = wait_card(&p, &ns, "orphan", "Successor warning", |c| {
        condition(c, "Successor").is_some_and(|(s, r, _)| s == "False" && r == "SuccessorNotFound")
    })
    .await;
    assert!(
        ready(&orphan),
        "a missing successor is a warning, the card is published"
    );
    let new_url = new.status.unwrap().url.unwrap();

    // The card's own URL: Deprecation, Sunset and the successor's Link.
    let served = old.status.as_ref().unwrap().served.clone().unwrap();
    let since: jiff::Timestamp = served.lifecycle.as_ref().unwrap().since.parse().unwrap();
    let (old_host, path) = split_url(old.status.as_ref().unwrap().url.as_deref().unwrap());
    let link = format!("<{new_url}>; rel=\"successor-version\"");
    // The successor's URL is known once it is served (until then its identifier is linked).
    eventually("the successor's URL linked", || {
        p.get(&old_host, &path).header("link") == Some(link.as_str())
    })
    .await;
    let r = p.get(&old_host, &path);
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("deprecation"),
        Some(format!("@{}", since.as_second()).as_str())
    );
    assert_eq!(r.header("sunset"), Some("Wed, 30 Jun 2027 00:00:00 GMT"));
    assert_eq!(
        r.header("link"),
        Some(format!("<{new_url}>; rel=\"successor-version\"").as_str())
    );
    assert!(p
        .get(&format!("new-{t}.open.test"), &path)
        .header("deprecation")
        .is_none());

    // The directory: state, message and successor; a filter; deprecated ranked after active.
    let host = format!("life-{t}.open.test");
    apply_directory(
        &p,
        &directory_of(&format!("life-{t}"), &host, &[&ns], json!({})),
    )
    .await;
    wait_directory(&p, &format!("life-{t}"), "three cards", dir_ready(3)).await;
    let old_id = format!("urn:air:old-{t}.open.test:{ns}:old");
    let new_id = format!("urn:air:new-{t}.open.test:{ns}:new");
    eventually("listed as deprecated", || {
        meta(&p, &host, &ns, "old")["lifecycle"]["state"] == "Deprecated"
    })
    .await;
    let m = meta(&p, &host, &ns, "old");
    assert_eq!(m["lifecycle"]["message"], "use the new agent");
    assert_eq!(m["lifecycle"]["successor"], json!(new_id));
    assert_eq!(m["lifecycle"]["successorUrl"], json!(new_url));
    assert_eq!(m["lifecycle"]["sunset"], "2027-06-30");
    assert_eq!(meta(&p, &host, &ns, "new")["lifecycle"]["state"], "Active");
    let listed = |q: &str| names(&json_of(&get(&p, &host, &format!("/v1/agents?{q}"), &[])));
    assert_eq!(listed("lifecycle=Deprecated"), vec!["old", "orphan"]);
    let search = json_of(&post(
        &p,
        &host,
        "/search",
        &json!({"query": {"text": "forecast"}}),
        &[],
    ));
    let ranked: Vec<&str> = search["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["identifier"].as_str().unwrap())
        .collect();
    let (pos_new, pos_old) = (
        ranked.iter().position(|i| *i == new_id).unwrap(),
        ranked.iter().position(|i| *i == old_id).unwrap(),
    );
    assert!(pos_new < pos_old, "deprecated ranked first: {search}");
    assert!(
        search["results"][pos_old]["score"].as_u64() > search["results"][pos_new]["score"].as_u64(),
        "the deprecated card scores higher and still ranks after: {search}"
    );
    let ard = json_of(&get(&p, &host, &format!("/agents/{old_id}"), &[]));
    assert_eq!(ard["metadata"]["lifecycle"], "Deprecated");
    assert_eq!(ard["metadata"]["successor"], json!(new_id));
    eventually("the feed says deprecated", || {
        last_change(&p, &host, &old_id).is_some_and(|c| c["lifecycle"]["state"] == "Deprecated")
    })
    .await;
    let page = html(&p, &host, "/");
    assert!(page.contains("data-lifecycle=\"Deprecated\""), "{page}");
    assert!(
        page.contains(&format!("href=\"{new_url}\"")),
        "the successor is linked: {page}"
    );

    // Retired: 410 with the successor, a tombstone in the directory, a change in the feed.
    let mut retired = deprecated.clone();
    retired["state"] = json!("Retired");
    tenant
        .apply(&agent_card(&t, "old", "Forecast forecast", retired))
        .await
        .unwrap();
    let retired_at = Instant::now();
    let c = wait_card(&p, &ns, "old", "retired", |c| {
        c.status.as_ref().is_some_and(|s| s.retired_at.is_some())
    })
    .await;
    assert!(ready(&c), "published (as gone) during its retention");
    eventually("410 Gone", || p.get(&old_host, &path).status == 410).await;
    let r = p.get(&old_host, &path);
    assert_eq!(
        r.header("link"),
        Some(format!("<{new_url}>; rel=\"successor-version\"").as_str())
    );
    eventually("the tombstone", || {
        listed("lifecycle=Retired") == vec!["old"]
    })
    .await;
    assert_eq!(
        listed(""),
        vec!["new", "orphan"],
        "a retired card is not listed by default"
    );
    let ard_alias = format!("/agents/{}", old_id.replacen("urn:air:", "urn:ai:", 1));
    let tomb = json_of(&get(&p, &host, &ard_alias, &[]));
    assert_eq!(tomb["metadata"]["lifecycle"], "Retired", "{tomb}");
    assert_eq!(tomb["metadata"]["successor"], json!(new_id));
    let manifest = json_of(&get(&p, &host, "/.well-known/ard.json", &[]));
    assert!(
        !manifest.to_string().contains(&old_id),
        "a tombstone is not crawled: {manifest}"
    );
    eventually("the feed says retired", || {
        last_change(&p, &host, &old_id).is_some_and(|c| c["lifecycle"]["state"] == "Retired")
    })
    .await;

    // After the retention: 404, unpublished, gone from the directory and deleted in the feed.
    let c = wait_card(
        &p,
        &ns,
        "old",
        "unpublished after its retention",
        refused("Retired"),
    )
    .await;
    assert!(
        retired_at.elapsed() >= Duration::from_secs(10),
        "unpublished early"
    );
    assert!(c.status.unwrap().served.is_none());
    eventually("404", || p.get(&old_host, &path).status == 404).await;
    eventually("gone from the directory", || {
        listed("lifecycle=Retired").is_empty()
    })
    .await;
    assert_eq!(
        get(&p, &host, &format!("/agents/{old_id}"), &[]).status,
        404
    );
    eventually("deleted in the feed", || {
        last_change(&p, &host, &old_id).is_some_and(|c| c["type"] == "delete")
    })
    .await;
}

/// A card with two skills, two interfaces, two input modes, no security, streaming and an
/// optional extension.
fn rich(name: &str, host: &str, compatibility: Option<&str>) -> Value {
    let mut c = card(name, host, "");
    c["spec"]["card"]["supportedInterfaces"] = json!([
        {"url": format!("https://{host}/a2a"), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        {"url": format!("https://{host}/grpc"), "protocolBinding": "GRPC", "protocolVersion": "1.0"}]);
    c["spec"]["card"]["capabilities"] = json!({"streaming": true,
        "extensions": [{"uri": "https://ext.example/trace", "required": false}]});
    c["spec"]["card"]["defaultInputModes"] = json!(["text/plain", "application/json"]);
    c["spec"]["card"]["skills"] = json!([
        {"id": "one", "name": "One", "description": "d", "tags": ["t"]},
        {"id": "two", "name": "Two", "description": "d", "tags": ["t"]}]);
    if let Some(rule) = compatibility {
        c["spec"]["publish"]["compatibility"] = json!(rule);
    }
    c
}

/// `rich` with every kind of breaking change at once.
fn broken(name: &str, host: &str, compatibility: Option<&str>, version: &str) -> Value {
    let mut c = rich(name, host, compatibility);
    let card = &mut c["spec"]["card"];
    card["version"] = json!(version);
    card["supportedInterfaces"] = json!([
        {"url": format!("https://{host}/v2/a2a"), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]);
    card["capabilities"] = json!({"streaming": false});
    card["defaultInputModes"] = json!(["text/plain"]);
    card["securitySchemes"] =
        json!({"key": {"apiKeySecurityScheme": {"location": "header", "name": "X-Key"}}});
    card["securityRequirements"] = json!([{"schemes": {"key": {"list": []}}}]);
    card["skills"] = json!([{"id": "one", "name": "One", "description": "d", "tags": ["t"]}]);
    c
}

fn compatible(c: &AgentCard) -> Option<(String, String, String)> {
    condition(c, "Compatible")
        .filter(|_| c.status.as_ref().and_then(|s| s.observed_generation) == c.metadata.generation)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edits_that_break_callers_are_found_and_each_compatibility_rule_applies() {
    let p = Platform::start(&[]).await;
    let t = rand_tag();
    let tenant = Tenant::new(&p, &format!("compat-{t}")).await;
    let ns = tenant.ns.clone();
    let hash = |c: &AgentCard| hash_of(c).unwrap();

    // Warn (the default): published, every finding listed with its JSON path, an Event.
    let host = format!("warn-{t}.open.test");
    tenant.apply(&rich("warn", &host, None)).await.unwrap();
    let before = hash(&wait_card(&p, &ns, "warn", "Ready", ready).await);
    tenant
        .apply(&broken("warn", &host, None, "1.0.0"))
        .await
        .unwrap();
    let c = wait_card(&p, &ns, "warn", "Compatible False", |c| {
        compatible(c).is_some_and(|(s, _, _)| s == "False") && ready(c)
    })
    .await;
    assert_ne!(hash(&c), before, "a Warn edit is published");
    let (_, reason, message) = compatible(&c).unwrap();
    assert_eq!(reason, "BreakingChange");
    for (path, kind) in [
        ("$.skills[1]", "SkillRemoved"),
        ("$.supportedInterfaces[0].url", "InterfaceUrlChanged"),
        ("$.supportedInterfaces[1]", "InterfaceRemoved"),
        ("$.defaultInputModes", "ModeRemoved"),
        ("$.securityRequirements", "SecurityTightened"),
        ("$.capabilities.streaming", "CapabilityRemoved"),
        ("$.capabilities.extensions[0]", "CapabilityRemoved"),
    ] {
        assert!(
            message.contains(&format!("{path}: ")) && message.contains(kind),
            "{path} ({kind}) missing: {message}"
        );
    }
    let events: Api<Event> = Api::namespaced(p.admin.clone(), &ns);
    let found = wait_for(Duration::from_secs(10), || async {
        events.list(&ListParams::default()).await.is_ok_and(|l| {
            l.items.iter().any(|e| {
                e.reason.as_deref() == Some("BreakingChange")
                    && e.type_.as_deref() == Some("Warning")
                    && e.message
                        .as_deref()
                        .is_some_and(|n| n.contains("$.skills[1]"))
            })
        })
    })
    .await;
    assert!(found.is_ok(), "no BreakingChange Event");
    // A later compatible edit: Compatible again.
    let mut fine = broken("warn", &host, None, "1.0.0");
    fine["spec"]["card"]["description"] = json!("Now with more words.");
    tenant.apply(&fine).await.unwrap();
    wait_card(&p, &ns, "warn", "Compatible True", |c| {
        compatible(c).is_some_and(|(s, r, _)| s == "True" && r == "Compatible")
    })
    .await;

    // Block: refused, the last good card stays served.
    let host = format!("block-{t}.open.test");
    tenant
        .apply(&rich("block", &host, Some("Block")))
        .await
        .unwrap();
    let good = hash(&wait_card(&p, &ns, "block", "Ready", ready).await);
    tenant
        .apply(&broken("block", &host, Some("Block"), "2.0.0"))
        .await
        .unwrap();
    let c = wait_card(&p, &ns, "block", "refused", refused("BreakingChange")).await;
    let (_, _, message) = condition(&c, "Ready").unwrap();
    assert!(
        message.contains("spec.publish.compatibility is Block"),
        "{message}"
    );
    assert!(message.contains("$.skills[1]"), "{message}");
    assert!(
        message.contains("the last good card stays served"),
        "{message}"
    );
    assert_eq!(hash(&c), good);
    assert_eq!(compatible(&c).unwrap().0, "False");
    let (h, pth) = split_url(c.status.as_ref().unwrap().url.as_deref().unwrap());
    assert_eq!(
        p.get(&h, &pth).header("etag"),
        Some(format!("\"{good}\"").as_str()),
        "the card served is the last good one"
    );
    // An additive edit passes Block.
    let mut more = rich("block", &host, Some("Block"));
    more["spec"]["card"]["skills"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "three", "name": "Three", "description": "d", "tags": ["t"]}));
    tenant.apply(&more).await.unwrap();
    let c = wait_card(&p, &ns, "block", "additive edit published", |c| {
        ready(c) && compatible(c).is_some_and(|(s, _, _)| s == "True")
    })
    .await;
    assert_ne!(hash(&c), good);

    // RequireMajorVersion: refused without a major bump, published with one.
    let host = format!("major-{t}.open.test");
    tenant
        .apply(&rich("major", &host, Some("RequireMajorVersion")))
        .await
        .unwrap();
    let good = hash(&wait_card(&p, &ns, "major", "Ready", ready).await);
    tenant
        .apply(&broken(
            "major",
            &host,
            Some("RequireMajorVersion"),
            "1.1.0",
        ))
        .await
        .unwrap();
    let c = wait_card(&p, &ns, "major", "refused", refused("BreakingChange")).await;
    assert!(
        condition(&c, "Ready")
            .unwrap()
            .2
            .contains("does not bump its major version"),
        "{:?}",
        condition(&c, "Ready")
    );
    assert_eq!(hash(&c), good);
    tenant
        .apply(&broken(
            "major",
            &host,
            Some("RequireMajorVersion"),
            "2.0.0",
        ))
        .await
        .unwrap();
    let c = wait_card(&p, &ns, "major", "published with a major bump", |c| {
        ready(c) && compatible(c).is_some_and(|(_, r, _)| r == "MajorVersionBumped")
    })
    .await;
    assert_ne!(hash(&c), good);
}

/// Refuse every write of the status of the AgentCards of `ns` (a ValidatingAdmissionPolicy,
/// as a webhook outage or an API server shedding load would), until [`allow_status_writes`];
/// returns once the API server applies it.
async fn refuse_status_writes(p: &Platform, ns: &str, card: &str) {
    let name = format!("refuse-card-status-{ns}");
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(p.admin.clone());
    apply_object(&policies, &name, &json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {"failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": ["agentcard.dev"],
                "apiVersions": ["*"], "operations": ["UPDATE"], "resources": ["agentcards/status"]}]},
            "validations": [{"expression": "false", "message": "status writes refused by the test"}]}
    }))
    .await;
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(p.admin.clone());
    apply_object(&bindings, &name, &json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}}
    }))
    .await;
    // In effect once a (dry-run) status write of the card is refused.
    let cards: Api<AgentCard> = Api::namespaced(p.admin.clone(), ns);
    let probe = json!({"status": {"warnings": ["probe"]}});
    let refused = wait_for(Duration::from_secs(20), || async {
        cards
            .patch_status(
                card,
                &PatchParams {
                    dry_run: true,
                    ..Default::default()
                },
                &Patch::Merge(&probe),
            )
            .await
            .is_err_and(|e| e.to_string().contains("status writes refused by the test"))
    })
    .await;
    assert!(
        refused.is_ok(),
        "the policy refusing status writes did not take effect"
    );
}

/// Let status writes of `ns` through again.
async fn allow_status_writes(p: &Platform, ns: &str) {
    let name = format!("refuse-card-status-{ns}");
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(p.admin.clone());
    bindings.delete(&name, &Default::default()).await.unwrap();
}

/// How many passes over card `ns/name` the operator's log shows failing.
fn failed_passes(p: &Platform, ns: &str, name: &str) -> usize {
    let card = format!("card={ns}/{name} ");
    p.op.logs()
        .lines()
        .filter(|l| l.contains("reconcile failed") && l.contains(&card))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_breaking_edit_is_reported_even_when_its_status_write_failed_at_first() {
    let mut p = Platform::start(&[]).await;
    let t = rand_tag();
    let tenant = Tenant::new(&p, &format!("lost-{t}")).await;
    let ns = tenant.ns.clone();
    let host = format!("lost-{t}.open.test");
    tenant.apply(&rich("warn", &host, None)).await.unwrap();
    let first = hash_of(&wait_card(&p, &ns, "warn", "Ready", ready).await).unwrap();
    let path = "/.well-known/agent-card.json";

    // A breaking edit while the API server refuses the card's status: the new card is
    // written to its ConfigMap, the status cannot confirm it, and the operator retries.
    refuse_status_writes(&p, &ns, "warn").await;
    let failed_before = failed_passes(&p, &ns, "warn");
    tenant
        .apply(&broken("warn", &host, None, "1.0.0"))
        .await
        .unwrap();
    let written = |not: String| {
        let configmaps: Api<ConfigMap> = Api::namespaced(p.admin.clone(), &ns);
        async move {
            let ok = wait_for(Duration::from_secs(20), || async {
                configmaps.get("agentcard-warn").await.is_ok_and(|cm| {
                    cm.annotations()
                        .get(ANN_CONTENT_HASH)
                        .is_some_and(|h| *h != not)
                })
            })
            .await;
            assert!(ok.is_ok(), "the edit was not written");
        }
    };
    written(first.clone()).await;
    eventually("a retry after the status write failed", || {
        failed_passes(&p, &ns, "warn") >= failed_before + 2
    })
    .await;
    let api: Api<AgentCard> = Api::namespaced(p.admin.clone(), &ns);
    let c = api.get("warn").await.unwrap();
    assert_eq!(
        c.status.as_ref().and_then(|s| s.observed_generation),
        Some(1)
    );
    assert!(condition(&c, "Compatible").is_none(), "{:?}", c.status);
    // Bytes the status does not confirm are not served: the first card still is.
    assert_eq!(
        p.get(&host, path).header("etag"),
        Some(format!("\"{first}\"").as_str())
    );

    // Once the status can be written, it says what the edit that was published broke.
    allow_status_writes(&p, &ns).await;
    let c = wait_card(&p, &ns, "warn", "Compatible False after the retry", |c| {
        compatible(c).is_some_and(|(s, r, m)| {
            s == "False" && r == "BreakingChange" && m.contains("$.skills[1]")
        })
    })
    .await;
    assert_ne!(hash_of(&c).as_deref(), Some(first.as_str()));
    let events: Api<Event> = Api::namespaced(p.admin.clone(), &ns);
    let found = wait_for(Duration::from_secs(10), || async {
        events.list(&ListParams::default()).await.is_ok_and(|l| {
            l.items.iter().any(|e| {
                e.reason.as_deref() == Some("BreakingChange")
                    && e.message
                        .as_deref()
                        .is_some_and(|n| n.contains("$.skills[1]"))
            })
        })
    })
    .await;
    assert!(found.is_ok(), "no BreakingChange Event");

    // An edit published just before the operator restarts, its status refused meanwhile: the
    // new process never saw the card it replaced, and says it cannot tell what broke.
    let second = hash_of(&c).unwrap();
    refuse_status_writes(&p, &ns, "warn").await;
    let mut fine = broken("warn", &host, None, "1.0.0");
    fine["spec"]["card"]["description"] = json!("Now with more words.");
    tenant.apply(&fine).await.unwrap();
    written(second.clone()).await;
    p.op.kill();
    allow_status_writes(&p, &ns).await;
    p.op = support::operator::Operator::start_on(kubeconfig(), &p.opns, None, OPERATOR_FLAGS);
    let c = wait_card(
        &p,
        &ns,
        "warn",
        "Compatible Unknown after the restart",
        |c| compatible(c).is_some_and(|(s, r, _)| s == "Unknown" && r == "NotCompared") && ready(c),
    )
    .await;
    assert_ne!(hash_of(&c).as_deref(), Some(second.as_str()));
    // The next edit is compared again.
    let mut more = fine.clone();
    more["spec"]["card"]["description"] = json!("Now with even more words.");
    tenant.apply(&more).await.unwrap();
    wait_card(&p, &ns, "warn", "Compatible True on the next edit", |c| {
        compatible(c).is_some_and(|(s, r, _)| s == "True" && r == "Compatible")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manifest_and_entries_are_valid_ard_v091_and_v09_at_both_paths() {
    let p = Platform::start(&[]).await;
    let t = rand_tag();
    let tenant = Tenant::new(&p, &format!("ard-{t}")).await;
    let ns = tenant.ns.clone();
    let mut c = agent_card(&t, "weather", "Weather", Value::Null);
    c["spec"]["card"]["skills"][0]["examples"] = json!(["a", "b", "c", "d", "e", "f", "g"]);
    tenant.apply(&c).await.unwrap();
    tenant
        .apply(&agent_card(&t, "one", "One", Value::Null))
        .await
        .unwrap();
    wait_card(&p, &ns, "weather", "Ready", ready).await;
    wait_card(&p, &ns, "one", "Ready", ready).await;
    let host = format!("ard-{t}.open.test");
    apply_directory(
        &p,
        &directory_of(&format!("ard-{t}"), &host, &[&ns], json!({})),
    )
    .await;
    wait_directory(&p, &format!("ard-{t}"), "two cards", dir_ready(2)).await;
    eventually("listed", || {
        names(&json_of(&get(&p, &host, "/v1/agents", &[]))) == vec!["one", "weather"]
    })
    .await;

    // The primary path (v0.91) and the v0.9 path serve a manifest valid under each schema.
    let primary = get(&p, &host, "/.well-known/ard.json", &[]);
    assert_eq!(primary.status, 200);
    let manifest = json_of(&primary);
    assert_schema_v091("manifest", &manifest);
    assert_schema(
        "manifest",
        &json_of(&get(&p, &host, "/.well-known/ai-catalog.json", &[])),
    );
    assert_eq!(
        primary.header("link"),
        Some("</.well-known/ard.json>; rel=\"ard\""),
        "every answer links the manifest"
    );
    let id = format!("urn:air:weather-{t}.open.test:{ns}:weather");
    let entry = manifest["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["identifier"] == id)
        .unwrap()
        .clone();
    // Seven skill examples: the first five are the representative queries.
    assert_eq!(
        entry["representativeQueries"],
        json!(["a", "b", "c", "d", "e"])
    );

    // GET /agents/{identifier}: the entry, cacheable, revalidated with 304; urn:ai: alias.
    let path = format!("/agents/{id}");
    let r = get(&p, &host, &path, &[]);
    assert_eq!(r.status, 200);
    let one = json_of(&r);
    assert_schema_v091("ardEntry", &one);
    assert_schema_v091("ArdEntry", &one);
    assert_eq!(one, entry, "the same entry as in the manifest");
    let etag = r.header("etag").unwrap().to_string();
    assert!(r.header("cache-control").unwrap().contains("max-age="));
    let again = get(&p, &host, &path, &[("If-None-Match", &etag)]);
    assert_eq!(again.status, 304);
    let alias = get(&p, &host, &path.replacen("urn:air:", "urn:ai:", 1), &[]);
    assert_eq!(json_of(&alias), one);
    let bad = get(&p, &host, "/agents/not-an-id", &[]);
    assert_eq!(bad.status, 400);
    assert_eq!(json_of(&bad)["errorCode"], "INVALID_ARGUMENT");
    assert_schema_v091("Error", &json_of(&bad));
    let missing = get(
        &p,
        &host,
        &format!("/agents/urn:air:nowhere.test:{ns}:x"),
        &[],
    );
    assert_eq!(missing.status, 404);
    assert_eq!(missing.header("cache-control"), Some("no-store"));

    // v0.91 search: query.@context accepted, results point at the registry's base URL.
    let body = json!({"query": {"text": "forecast", "@context": {"ard": "https://agenticresourcediscovery.org/context/v1"},
        "filter": {"identifier": id.replacen("urn:air:", "urn:ai:", 1)}}});
    let search = json_of(&post(&p, &host, "/search", &body, &[]));
    assert_schema_v091("SearchResponse", &search);
    let results = search["results"].as_array().unwrap();
    assert_eq!(results.len(), 1, "{search}");
    let source = results[0]["source"].as_str().unwrap();
    let base = source.strip_prefix("https://").unwrap();
    assert_eq!(base, host, "{source}");
    assert_eq!(
        get(&p, &host, &path, &[]).status,
        200,
        "{source}/agents/{{id}} is the entry"
    );
    let page = html(&p, &host, "/");
    assert!(page.contains("<link rel=\"ard\" href=\"/.well-known/ard.json\">"));
}

/// Run the MCP Python SDK client against the operator's server for `host`: its verdict.
fn mcp_client(p: &Platform, host: &str, token: Option<&str>, calls: &Value) -> Value {
    let mut cmd = std::process::Command::new(support::oracle().join("mcp-venv/bin/python"));
    cmd.arg(support::root().join("tests/oracle/mcp_client.py"))
        .arg(format!("http://{}/mcp", p.op.server.addr))
        .arg(host)
        .arg(token.unwrap_or_default());
    let out = support::run(cmd, Some(calls.to_string().as_bytes()));
    let line = out
        .stdout
        .split(|b| *b == b'\n')
        .rfind(|l| l.starts_with(b"{"))
        .unwrap_or_else(|| panic!("no answer: {}", String::from_utf8_lossy(&out.stderr)));
    serde_json::from_slice(line).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_directory_answers_as_mcp_tools_to_the_official_sdk_client() {
    let p = Platform::start(&[]).await;
    let t = rand_tag();
    let a = Tenant::new(&p, &format!("mcp-a-{t}")).await;
    let b = Tenant::new(&p, &format!("mcp-b-{t}")).await;
    a.apply(&agent_card(&t, "weather", "Weather", Value::Null))
        .await
        .unwrap();
    let mut other = card("translate", &format!("translate-{t}.open.test"), "");
    other["spec"]["card"]["capabilities"] = json!({"streaming": true});
    b.apply(&other).await.unwrap();
    wait_card(&p, &a.ns, "weather", "Ready", ready).await;
    wait_card(&p, &b.ns, "translate", "Ready", ready).await;
    let host = format!("mcp-{t}.open.test");
    apply_directory(
        &p,
        &directory_of(&format!("mcp-{t}"), &host, &[&a.ns, &b.ns], json!({})),
    )
    .await;
    wait_directory(&p, &format!("mcp-{t}"), "two cards", dir_ready(2)).await;
    eventually("listed", || {
        names(&json_of(&get(&p, &host, "/v1/agents", &[]))) == vec!["translate", "weather"]
    })
    .await;

    let id = format!("urn:air:weather-{t}.open.test:{}:weather", a.ns);
    let calls = json!([
        {"tool": "search_agents", "arguments": {"q": "forecast"}},
        {"tool": "search_agents", "arguments": {"capability": "streaming", "limit": 1}},
        {"tool": "get_agent_card", "arguments": {"identifier": id}},
        {"tool": "get_agent_card", "arguments": {"namespace": b.ns, "name": "translate"}},
        {"tool": "list_facets", "arguments": {}},
        {"tool": "search_agents", "arguments": {"limit": "ten"}},
        {"tool": "search_agents", "arguments": {"colour": "red"}},
        {"tool": "search_agents", "arguments": {"limit": 1000}},
        {"tool": "get_agent_card", "arguments": {"name": "weather"}},
        {"tool": "get_agent_card", "arguments": {"identifier": "urn:air:nowhere.test:x:y"}},
        {"tool": "no_such_tool", "arguments": {}}
    ]);
    let v = mcp_client(&p, &host, None, &calls);
    let mut tools: Vec<&String> = v["tools"].as_object().unwrap().keys().collect();
    tools.sort();
    assert_eq!(
        tools,
        ["get_agent_card", "list_facets", "search_agents"],
        "{v}"
    );
    assert!(
        v["tools"]["search_agents"]["properties"]["skill"].is_object(),
        "{v}"
    );
    let call = |i: usize| &v["calls"][i];
    let native = |path: &str| json_of(&get(&p, &host, path, &[]));
    // Each tool returns what the native API returns.
    assert_eq!(call(0)["isError"], false, "{}", call(0));
    assert_eq!(call(0)["structured"], native("/v1/agents?q=forecast"));
    assert_eq!(
        call(1)["structured"],
        native("/v1/agents?capability=streaming&limit=1")
    );
    assert_eq!(
        call(2)["structured"],
        native(&format!("/v1/agents/{}/weather", a.ns))
    );
    assert_eq!(
        call(3)["structured"],
        native(&format!("/v1/agents/{}/translate", b.ns))
    );
    assert_eq!(call(4)["structured"], native("/v1/facets"));
    // Bad arguments: tool errors naming the argument; an unknown tool: a protocol error.
    let text = |i: usize| call(i)["text"][0].as_str().unwrap_or_default().to_string();
    for (i, needle) in [
        (5, "limit"),
        (6, "colour"),
        (7, "limit"),
        (8, "namespace"),
        (9, "no agent"),
    ] {
        assert_eq!(call(i)["isError"], true, "{}", call(i));
        assert!(text(i).contains(needle), "{needle}: {}", text(i));
    }
    assert_eq!(call(10)["error"]["code"], -32602, "{}", call(10));

    // Kubernetes access mode: the bearer token is the caller.
    let khost = format!("mcpk-{t}.open.test");
    apply_directory(
        &p,
        &directory_of(
            &format!("mcpk-{t}"),
            &khost,
            &[&a.ns, &b.ns],
            json!({"access": {"mode": "Kubernetes"}}),
        ),
    )
    .await;
    wait_directory(&p, &format!("mcpk-{t}"), "two cards", dir_ready(2)).await;
    let token = service_account_token(&p, &a.ns, "reader", &[&a.ns]).await;
    let calls = json!([{"tool": "search_agents", "arguments": {}},
        {"tool": "get_agent_card", "arguments": {"namespace": b.ns, "name": "translate"}},
        {"tool": "list_facets", "arguments": {}}]);
    let bearer = format!("Bearer {token}");
    let as_reader = || {
        json_of(&get(
            &p,
            &khost,
            "/v1/agents",
            &[("Authorization", &bearer)],
        ))
    };
    eventually("the reader sees its namespace", || {
        names(&as_reader()) == vec!["weather"]
    })
    .await;
    let native = as_reader();
    let v = mcp_client(&p, &khost, Some(&token), &calls);
    assert_eq!(v["calls"][0]["structured"], native, "{v}");
    assert_eq!(
        v["calls"][1]["isError"], true,
        "another namespace's card is not there: {v}"
    );
    assert_eq!(
        v["calls"][2]["structured"]["metadata"]["total"], 1,
        "facets count only what the caller sees: {v}"
    );
    let r = support::http::request_with_body(
        p.op.server.addr,
        "POST",
        "/mcp",
        &[
            ("Host", &khost),
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
        ],
        Some(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#),
    );
    assert_eq!(r.status, 401, "no token: refused before MCP");
}
