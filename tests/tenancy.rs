//! Tenant isolation on the real control plane, tried as a hostile tenant would: the operator
//! watches **every** namespace (on a plane of this suite's own, so no other suite's cards are
//! touched), and each tenant acts through its own identity with the rights a namespace `edit`
//! role gives (AgentCards, ConfigMaps, Ingresses, Services in its namespace; never
//! `agentcards/status`). Every test ends with the cluster-wide check: a card whose status has a
//! URL serves exactly its status's content hash there, a card without one is served nowhere,
//! and every Ingress the operator wrote routes a host its card holds.
//!
//! The tests share one plane and run one at a time (each with a fresh operator watching all
//! namespaces, as after a restart: the cards of earlier tests stay and are reconciled again).

mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use agentcard_operator::contract::*;
use agentcard_operator::controller::agentcard::card::{backend_ingress_name_of, ingress_name};
use agentcard_operator::controller::routes::routing::MAX_INGRESS_NAME;
use agentcard_operator::crd::AgentCard;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use serde_json::json;
use support::cluster::*;
use support::operator::Operator;
use support::plane::{client_for, install_crds, wait_for};
use support::{condition, ready};

/// The cluster-wide check, retried until it holds (the operator may still be settling):
/// every card with a `status.url` serves exactly its `status.contentHash` there; every card
/// without one is served nowhere (its route answers 404, or the bytes of the card holding
/// that route); every route in `gone` is served by nobody but a current holder; every Ingress
/// the operator wrote routes the host its card holds.
async fn invariant(p: &Platform, gone: &[(String, String)]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let problems = invariant_problems(p, gone).await;
        if problems.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the served state disagrees with the AgentCards:\n{}\noperator log:\n{}",
            problems.join("\n"),
            tail(&p.op.logs())
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

async fn invariant_problems(p: &Platform, gone: &[(String, String)]) -> Vec<String> {
    let mut problems = Vec::new();
    let cards = Api::<AgentCard>::all(p.admin.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let mut claimed: HashMap<(String, String), String> = HashMap::new();
    let mut held_hosts: HashMap<String, String> = HashMap::new();
    for c in &cards {
        let key = format!("{}/{}", c.namespace().unwrap_or_default(), c.name_any());
        let status = c.status.clone().unwrap_or_default();
        match (&status.url, &status.content_hash) {
            (Some(url), Some(hash)) => {
                let (host, path) = split_url(url);
                let r = p.get(&host, &path);
                let etag = r.header("etag").unwrap_or_default().to_string();
                if r.status != 200 || etag != format!("\"{hash}\"") {
                    problems.push(format!(
                        "{key}: status says {url} serves {hash}, server answers {} {etag}",
                        r.status
                    ));
                }
                claimed.insert((host.clone(), path), hash.clone());
                held_hosts.insert(key, host);
            }
            (None, None) => {}
            _ => problems.push(format!("{key}: url and contentHash disagree: {status:?}")),
        }
    }
    for c in &cards {
        let status = c.status.clone().unwrap_or_default();
        if status.url.is_some() {
            continue;
        }
        let host = c.spec.publish.host.clone();
        let path = card_path(&normalize_prefix(&c.spec.publish.path_prefix));
        let r = p.get(&host, &path);
        if r.status == 200 {
            let etag = r
                .header("etag")
                .unwrap_or_default()
                .trim_matches('"')
                .to_string();
            if claimed.get(&(host.clone(), path.clone())) != Some(&etag) {
                problems.push(format!(
                    "{}/{}: has no url, yet {host}{path} serves {etag}, which no card's status claims",
                    c.namespace().unwrap_or_default(),
                    c.name_any()
                ));
            }
        }
    }
    for (host, path) in gone {
        let r = p.get(host, path);
        if r.status != 200 {
            continue;
        }
        let etag = r
            .header("etag")
            .unwrap_or_default()
            .trim_matches('"')
            .to_string();
        if claimed.get(&(host.clone(), path.clone())) != Some(&etag) {
            problems.push(format!("{host}{path}: still serves {etag}"));
        }
    }
    let ingresses = Api::<Ingress>::all(p.admin.clone())
        .list(&ListParams::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGER}")))
        .await
        .unwrap()
        .items;
    for ing in ingresses {
        let ns = ing.namespace().unwrap_or_default();
        // Ingresses of earlier tests' operators (other operator namespaces) are not this one's.
        if ns.starts_with("ops-") && ns != p.opns {
            continue;
        }
        let Some(card) = ing.annotations().get(ANN_CARD).cloned() else {
            problems.push(format!("Ingress {ns}/{} names no card", ing.name_any()));
            continue;
        };
        let hosts: Vec<String> = ing
            .spec
            .iter()
            .flat_map(|s| s.rules.iter().flatten())
            .filter_map(|r| r.host.clone())
            .collect();
        match held_hosts.get(&card) {
            Some(h) if hosts.iter().all(|x| x == h) => {}
            other => problems.push(format!(
                "Ingress {ns}/{} routes {hosts:?} for {card}, which holds {other:?}",
                ing.name_any()
            )),
        }
    }
    problems
}

fn admission_message(err: kube::Error) -> String {
    match err {
        kube::Error::Api(s) => s.message,
        other => panic!("expected an admission error, got {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_path_outside_the_route_subtree_is_refused() {
    let p = Platform::start(&[]).await;
    let t = rand_tag();
    let host = format!("b-{t}.shared.test");
    let victim = Tenant::new(&p, &format!("victim-{t}")).await;
    let attacker = Tenant::new(&p, &format!("attacker-{t}")).await;
    let mut v = card("agent", &host, "/v");
    v["spec"]["backend"] = json!({"serviceName": "agent", "port": 8080, "path": "/v/a2a/v1"});
    victim.apply(&v).await.unwrap();
    let vc = wait_card(&p, &victim.ns, "agent", "Ready", ready).await;

    // The attacker holds /x on the same shared host and aims its backend at the victim's path.
    for path in ["/v/a2a/v1", "/a2a", "/x/../v/a2a/v1", "/xv"] {
        let mut a = card("thief", &host, "/x");
        a["spec"]["backend"] = json!({"serviceName": "mine", "port": 80, "path": path});
        let msg = admission_message(attacker.apply(&a).await.unwrap_err());
        assert!(msg.contains("spec.backend.path"), "{path}: {msg}");
    }
    // Inside its own subtree it is fine, and it does not touch the victim's route.
    let mut a = card("thief", &host, "/x");
    a["spec"]["backend"] = json!({"serviceName": "mine", "port": 80, "path": "/x/a2a"});
    attacker.apply(&a).await.unwrap();
    wait_card(&p, &attacker.ns, "thief", "Ready", ready).await;
    let backend = Api::<Ingress>::namespaced(p.admin.clone(), &victim.ns)
        .get(&backend_ingress_name_of("agent"))
        .await
        .unwrap();
    let rule = &backend.spec.unwrap().rules.unwrap()[0];
    assert_eq!(rule.host.as_deref(), Some(host.as_str()));
    assert_eq!(
        rule.http.as_ref().unwrap().paths[0].path.as_deref(),
        Some("/v/a2a/v1")
    );
    wait_served(&p, &host, &card_path("/v"), hash_of(&vc).as_deref()).await;
    invariant(&p, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_card_past_the_schemas_bounds_is_refused_at_admission_with_the_field_named() {
    let p = Platform::start(&[]).await;
    let t = rand_tag();
    let tenant = Tenant::new(&p, &format!("big-{t}")).await;
    let host = format!("big-{t}.open.test");
    tenant.apply(&card("agent", &host, "")).await.unwrap();
    let good = wait_card(&p, &tenant.ns, "agent", "Ready", ready).await;
    let skill =
        |i: usize| json!({"id": format!("s{i}"), "name": "S", "description": "d", "tags": ["t"]});
    type Edit = Box<dyn Fn(&mut serde_json::Value)>;
    let cases: Vec<(&str, Edit)> = vec![
        (
            "spec.card.description",
            Box::new(|c| c["spec"]["card"]["description"] = json!("x".repeat(1024 * 1024))),
        ),
        (
            "spec.card.skills",
            Box::new(move |c| {
                c["spec"]["card"]["skills"] = json!((0..600).map(skill).collect::<Vec<_>>())
            }),
        ),
        (
            "spec.card.skills[0].tags",
            Box::new(|c| c["spec"]["card"]["skills"][0]["tags"] = json!(vec!["t"; 200])),
        ),
        (
            "spec.card.skills[0].examples[0]",
            Box::new(|c| c["spec"]["card"]["skills"][0]["examples"] = json!(["e".repeat(10_000)])),
        ),
    ];
    for (field, edit) in cases {
        let mut c = card("agent", &host, "");
        edit(&mut c);
        let msg = admission_message(tenant.apply(&c).await.unwrap_err());
        assert!(
            msg.contains(field),
            "{field}: {}",
            &msg[..msg.len().min(400)]
        );
    }
    // Nothing of it reached the card: the last good one is still served.
    wait_served(&p, &host, PATH_CARD, hash_of(&good).as_deref()).await;
    invariant(&p, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_past_its_byte_budget_publishes_its_oldest_cards_and_no_other_namespace_pays() {
    let p = Platform::start(&["--max-namespace-card-bytes", "8000"]).await;
    let t = rand_tag();
    let big = Tenant::new(&p, &format!("budget-{t}")).await;
    let other = Tenant::new(&p, &format!("budget-other-{t}")).await;
    let sized = |name: &str, host: &str, pad: usize| {
        let mut c = card(name, host, "");
        c["spec"]["card"]["description"] = json!("d".repeat(pad));
        c
    };
    for i in 0..3 {
        let name = format!("c{i}");
        big.apply(&sized(&name, &format!("{name}-{t}.open.test"), 3000))
            .await
            .unwrap();
        // Creation times a second apart: the order is the cards' age.
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    wait_card(&p, &big.ns, "c0", "Ready", ready).await;
    wait_card(&p, &big.ns, "c1", "Ready", ready).await;
    let c2 = wait_card(
        &p,
        &big.ns,
        "c2",
        "NamespaceByteBudget",
        refused("NamespaceByteBudget"),
    )
    .await;
    let msg = condition(&c2, "Ready").unwrap().2;
    assert!(
        msg.contains("--max-namespace-card-bytes") && msg.contains("8000"),
        "{msg}"
    );
    assert_eq!(
        p.get(&format!("c2-{t}.open.test"), PATH_CARD).status,
        404,
        "a card past the budget is not served"
    );
    // Another namespace has a budget of its own.
    other
        .apply(&sized("alone", &format!("alone-{t}.open.test"), 6000))
        .await
        .unwrap();
    wait_card(&p, &other.ns, "alone", "Ready", ready).await;
    // Room made: the waiting card publishes.
    big.delete("c0").await;
    wait_card(&p, &big.ns, "c2", "Ready", ready).await;
    invariant(&p, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_configmap_cannot_publish_on_a_host_its_namespace_does_not_hold() {
    let p = Platform::start(&[]).await;
    let t = rand_tag();
    let victim_host = format!("v-{t}.open.test");
    let own_host = format!("e-{t}.open.test");
    let attacker = Tenant::new(&p, &format!("attacker-{t}")).await;
    attacker.apply(&card("evil", &own_host, "")).await.unwrap();
    let evil = wait_card(&p, &attacker.ns, "evil", "Ready", ready).await;
    let cms: Api<ConfigMap> = Api::namespaced(attacker.client.clone(), &attacker.ns);
    let real = cms.get(&card_configmap_name("evil")).await.unwrap();

    // A hand-made copy: labels copied, controlled by the attacker's own Ready card, its
    // confirmed bytes, the victim's host — created before the victim's card.
    let mut forged: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "evil-copy", "labels": real.metadata.labels,
            "ownerReferences": real.metadata.owner_references},
        "data": real.data,
    }))
    .unwrap();
    let mut ann = real.metadata.annotations.clone().unwrap_or_default();
    ann.insert(ANN_HOST.into(), victim_host.clone());
    forged.metadata.annotations = Some(ann.clone());
    cms.create(&PostParams::default(), &forged).await.unwrap();
    // The attacker re-points its real ConfigMap too, and tries to confirm bytes itself.
    let patch =
        json!({"metadata": {"annotations": {ANN_HOST: victim_host, ANN_MAX_AGE: "999999"}}});
    cms.patch(
        &card_configmap_name("evil"),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .unwrap();
    let forge_status = json!({"status": {"url": format!("https://{victim_host}{PATH_CARD}"),
        "served": {"host": victim_host, "maxAgeSeconds": 1, "publishedAt": "2020-01-01T00:00:00Z", "since": "2000-01-01T00:00:00Z"}}});
    let err = attacker
        .cards
        .patch_status(
            "evil",
            &PatchParams::default(),
            &Patch::Merge(&forge_status),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 403),
        "{err}"
    );

    tokio::time::sleep(Duration::from_millis(1100)).await;
    let victim = Tenant::new(&p, &format!("victim-{t}")).await;
    victim
        .apply(&card("weather", &victim_host, ""))
        .await
        .unwrap();
    let vc = wait_card(&p, &victim.ns, "weather", "Ready", ready).await;
    wait_served(&p, &victim_host, PATH_CARD, hash_of(&vc).as_deref()).await;
    let r = p.get(&victim_host, PATH_CARD);
    assert_eq!(r.header("cache-control"), Some("public, max-age=300"));
    // The attacker's card is still served where it holds, and only there.
    wait_served(&p, &own_host, PATH_CARD, hash_of(&evil).as_deref()).await;
    // Its ConfigMap is put back by the operator.
    wait_for(Duration::from_secs(10), || async {
        cms.get(&card_configmap_name("evil"))
            .await
            .is_ok_and(|cm| cm.annotations().get(ANN_HOST) == Some(&own_host))
    })
    .await
    .expect("the operator repairs its ConfigMap");
    invariant(&p, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingress_names_never_collide_and_the_longest_names_publish() {
    let p = Platform::start(&[]).await;
    let t = rand_tag();
    let base = format!("coll-{t}");
    let team_a = Tenant::new(&p, &format!("{base}-a")).await;
    let team = Tenant::new(&p, &base).await;
    team_a
        .apply(&card("weather", &format!("one-{t}.open.test"), ""))
        .await
        .unwrap();
    team.apply(&card("a-weather", &format!("two-{t}.open.test"), ""))
        .await
        .unwrap();
    let one = wait_card(&p, &team_a.ns, "weather", "Ready", ready).await;
    wait_card(&p, &team.ns, "a-weather", "Ready", ready).await;
    let names = (
        ingress_name(&team_a.ns, "weather"),
        ingress_name(&team.ns, "a-weather"),
    );
    assert_ne!(names.0, names.1);
    let ingresses: Api<Ingress> = Api::namespaced(p.admin.clone(), &p.opns);
    let written = ingresses.get(&names.0).await.unwrap().spec;
    ingresses.get(&names.1).await.unwrap();
    // Someone re-points the card's Ingress, then deletes it: the operator puts it back.
    let elsewhere = json!({"spec": {"rules": [{"host": "elsewhere.open.test", "http": {"paths": [
        {"path": "/", "pathType": "Prefix",
         "backend": {"service": {"name": "other", "port": {"number": 80}}}}]}}]}});
    ingresses
        .patch(&names.0, &PatchParams::default(), &Patch::Merge(&elsewhere))
        .await
        .unwrap();
    let as_written = || async {
        ingresses
            .get_opt(&names.0)
            .await
            .is_ok_and(|i| i.is_some_and(|i| i.spec == written))
    };
    wait_for(Duration::from_secs(10), as_written)
        .await
        .expect("an edited Ingress is repaired");
    ingresses
        .delete(&names.0, &DeleteParams::default())
        .await
        .unwrap();
    wait_for(Duration::from_secs(10), as_written)
        .await
        .expect("a deleted Ingress is put back");
    // Deleting one card removes its own route only.
    team.delete("a-weather").await;
    wait_for(Duration::from_secs(20), || async {
        matches!(ingresses.get_opt(&names.1).await, Ok(None))
    })
    .await
    .expect("the deleted card's Ingress goes");
    assert!(ingresses.get_opt(&names.0).await.unwrap().is_some());
    wait_served(
        &p,
        &format!("one-{t}.open.test"),
        PATH_CARD,
        hash_of(&one).as_deref(),
    )
    .await;

    // A 63-character namespace and a 253-character card name, with a backend.
    let long_ns = format!("long-{t}-{}", "n".repeat(63 - 6 - t.len()));
    assert_eq!(long_ns.len(), 63);
    let long = Tenant::new(&p, &long_ns).await;
    let long_name = "c".repeat(253);
    let host = format!("long-{t}.open.test");
    let mut m = card(&long_name, &host, "");
    m["spec"]["backend"] = json!({"serviceName": "agent", "port": 8080});
    long.apply(&m).await.unwrap();
    let lc = wait_card(&p, &long.ns, &long_name, "Ready", ready).await;
    wait_served(&p, &host, PATH_CARD, hash_of(&lc).as_deref()).await;
    let card_route = ingress_name(&long.ns, &long_name);
    let backend = backend_ingress_name_of(&long_name);
    assert!(card_route.len() <= MAX_INGRESS_NAME && backend.len() <= MAX_INGRESS_NAME);
    ingresses.get(&card_route).await.unwrap();
    Api::<Ingress>::namespaced(p.admin.clone(), &long.ns)
        .get(&backend)
        .await
        .unwrap();
    invariant(&p, &[(format!("two-{t}.open.test"), PATH_CARD.to_string())]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_ingress_settings_follow_the_operator_policy_and_status_stays_clean() {
    // This platform lets tenants choose cert-manager's settings (by default they may not).
    let p = Platform::start(&["--ingress-allowed-annotations", "cert-manager.io/*"]).await;
    let t = rand_tag();
    let tenant = Tenant::new(&p, &format!("policy-{t}")).await;
    let host = format!("p-{t}.open.test");
    let ingresses: Api<Ingress> = Api::namespaced(p.admin.clone(), &p.opns);
    let route = ingress_name(&tenant.ns, "agent");

    let mut m = card("agent", &host, "");
    m["spec"]["publish"]["ingress"] = json!({"annotations": {
        "nginx.ingress.kubernetes.io/server-snippet": "return 200 'pwned';",
        "nginx.ingress.kubernetes.io/auth-url": "http://evil.example/",
        "cert-manager.io/cluster-issuer": "letsencrypt",
    }});
    tenant.apply(&m).await.unwrap();
    let c = wait_card(&p, &tenant.ns, "agent", "refused", refused("InvalidSpec")).await;
    let msg = condition(&c, "Ready").unwrap().2;
    assert!(
        msg.contains(
            "spec.publish.ingress.annotations[\"nginx.ingress.kubernetes.io/server-snippet\"]"
        ) && msg.contains("auth-url"),
        "{msg}"
    );
    assert!(ingresses.get_opt(&route).await.unwrap().is_none());

    // An ingress class of its own choosing is refused too; TLS Secret names are the operator's.
    m["spec"]["publish"]["ingress"] = json!({"className": "internal-admin",
        "tlsSecretName": "wildcard-production",
        "annotations": {"cert-manager.io/cluster-issuer": "letsencrypt"}});
    tenant.apply(&m).await.unwrap();
    let c = wait_card(
        &p,
        &tenant.ns,
        "agent",
        "refused class",
        refused("InvalidSpec"),
    )
    .await;
    assert!(condition(&c, "Ready")
        .unwrap()
        .2
        .contains("spec.publish.ingress.className"));
    m["spec"]["publish"]["ingress"]
        .as_object_mut()
        .unwrap()
        .remove("className");
    tenant.apply(&m).await.unwrap();
    wait_card(&p, &tenant.ns, "agent", "Ready", ready).await;
    let ing = ingresses.get(&route).await.unwrap();
    assert_eq!(
        ing.annotations()
            .get("cert-manager.io/cluster-issuer")
            .map(String::as_str),
        Some("letsencrypt")
    );
    let spec = ing.spec.unwrap();
    assert_eq!(spec.ingress_class_name, None);
    assert_eq!(
        spec.tls.unwrap()[0].secret_name.as_deref(),
        Some(format!("agentcard-tls-{host}").as_str())
    );

    // An annotation removed from the spec is removed from the Ingress.
    m["spec"]["publish"]["ingress"] = json!({});
    // And a lint warning appears in status, then disappears once fixed.
    m["spec"]["card"]["supportedInterfaces"]
        .as_array_mut()
        .unwrap()
        .push(json!({"url": "https://agent.team.svc.cluster.local/a2a",
            "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"}));
    tenant.apply(&m).await.unwrap();
    let c = wait_card(&p, &tenant.ns, "agent", "Ready with a warning", |c| {
        ready(c) && c.status.as_ref().is_some_and(|s| !s.warnings.is_empty())
    })
    .await;
    assert!(c.status.unwrap().warnings[0].contains("cluster-internal"));
    wait_for(Duration::from_secs(10), || async {
        ingresses.get(&route).await.is_ok_and(|i| {
            !i.annotations()
                .contains_key("cert-manager.io/cluster-issuer")
        })
    })
    .await
    .expect("the removed annotation leaves the Ingress");
    m["spec"]["card"]["supportedInterfaces"]
        .as_array_mut()
        .unwrap()
        .pop();
    tenant.apply(&m).await.unwrap();
    let c = wait_card(&p, &tenant.ns, "agent", "warnings cleared", |c| {
        ready(c) && c.status.as_ref().is_some_and(|s| s.warnings.is_empty())
    })
    .await;
    // No endless status patches: the card stays as it is.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let later = tenant.cards.get("agent").await.unwrap();
    assert_eq!(later.resource_version(), c.resource_version());
    invariant(&p, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_the_certificate_issuer_of_a_card_route_is_the_platforms_not_a_tenants() {
    let p = Platform::start(&[
        "--ingress-annotation",
        "cert-manager.io/cluster-issuer=platform-ca",
    ])
    .await;
    let t = rand_tag();
    let host = format!("iss-{t}.shared.test");
    let a = Tenant::new(&p, &format!("iss-a-{t}")).await;
    let b = Tenant::new(&p, &format!("iss-b-{t}")).await;
    a.apply(&card("agent", &host, "/a")).await.unwrap();
    wait_card(&p, &a.ns, "agent", "Ready", ready).await;
    // Another tenant of the shared host tries to pick the certificate of the host.
    let mut m = card("agent", &host, "/b");
    m["spec"]["publish"]["ingress"] =
        json!({"annotations": {"cert-manager.io/cluster-issuer": "attacker-ca"}});
    b.apply(&m).await.unwrap();
    let c = wait_card(&p, &b.ns, "agent", "refused", refused("InvalidSpec")).await;
    assert!(condition(&c, "Ready")
        .unwrap()
        .2
        .contains("spec.publish.ingress.annotations[\"cert-manager.io/cluster-issuer\"]"));
    // Every card route on the host carries the platform's issuer and nobody else's.
    let ingresses: Api<Ingress> = Api::namespaced(p.admin.clone(), &p.opns);
    let route = ingresses.get(&ingress_name(&a.ns, "agent")).await.unwrap();
    assert_eq!(
        route
            .annotations()
            .get("cert-manager.io/cluster-issuer")
            .map(String::as_str),
        Some("platform-ca")
    );
    assert!(ingresses
        .get_opt(&ingress_name(&b.ns, "agent"))
        .await
        .unwrap()
        .is_none());
    invariant(&p, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_overlap_across_namespaces_but_nest_inside_one() {
    let p = Platform::start(&[]).await;
    let t = rand_tag();
    let shared = format!("s-{t}.shared.test");
    let own = format!("u-{t}.open.test");
    let a = Tenant::new(&p, &format!("a-{t}")).await;
    let b = Tenant::new(&p, &format!("b-{t}")).await;
    let c = Tenant::new(&p, &format!("c-{t}")).await;

    // A shared host: disjoint prefixes of different namespaces.
    a.apply(&card("one", &shared, "/a")).await.unwrap();
    let a1 = wait_card(&p, &a.ns, "one", "Ready", ready).await;
    b.apply(&card("two", &shared, "/b")).await.unwrap();
    let b2 = wait_card(&p, &b.ns, "two", "Ready", ready).await;
    // Nested either way round across namespaces is an overlap, named with its holder.
    for (prefix, holder) in [
        ("/a/sub", format!("{}/one", a.ns)),
        ("", format!("{}/one", a.ns)),
    ] {
        c.apply(&card("three", &shared, prefix)).await.unwrap();
        let c3 = wait_card(&p, &c.ns, "three", "conflict", refused("HostConflict")).await;
        let msg = condition(&c3, "Ready").unwrap().2;
        assert!(
            msg.contains(&holder) || msg.contains(&format!("{}/two", b.ns)),
            "{msg}"
        );
        assert!(c3.status.unwrap().url.is_none());
    }
    // Inside one namespace nested claims are fine; an exact duplicate goes to the holder.
    a.apply(&card("deep", &shared, "/a/deep")).await.unwrap();
    let deep = wait_card(&p, &a.ns, "deep", "Ready", ready).await;
    a.apply(&card("dup", &shared, "/a")).await.unwrap();
    let dup = wait_card(&p, &a.ns, "dup", "conflict", refused("HostConflict")).await;
    assert!(condition(&dup, "Ready")
        .unwrap()
        .2
        .contains(&format!("{}/one", a.ns)));

    // A host that is not shared: one namespace holds it whole.
    a.apply(&card("own", &own, "/a")).await.unwrap();
    wait_card(&p, &a.ns, "own", "Ready", ready).await;
    b.apply(&card("other", &own, "/b")).await.unwrap();
    let other = wait_card(&p, &b.ns, "other", "conflict", refused("HostConflict")).await;
    let msg = condition(&other, "Ready").unwrap().2;
    assert!(
        msg.contains(&format!("{}/own", a.ns)) && msg.contains("not shared"),
        "{msg}"
    );

    wait_served(&p, &shared, &card_path("/a"), hash_of(&a1).as_deref()).await;
    wait_served(&p, &shared, &card_path("/b"), hash_of(&b2).as_deref()).await;
    wait_served(
        &p,
        &shared,
        &card_path("/a/deep"),
        hash_of(&deep).as_deref(),
    )
    .await;
    wait_served(&p, &own, &card_path("/b"), None).await;
    invariant(&p, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_card_to_be_ready_holds_until_deleted_and_invalid_edits_keep_serving() {
    let p = Platform::start(&[]).await;
    let t = rand_tag();
    let host = format!("h-{t}.open.test");
    let early = Tenant::new(&p, &format!("early-{t}")).await;
    let late = Tenant::new(&p, &format!("late-{t}")).await;
    // The older card is invalid: it never publishes, so it squats nothing.
    let mut broken = card("old", &host, "");
    broken["spec"]["card"]["supportedInterfaces"][0]["url"] = json!("ftp://nowhere");
    early.apply(&broken).await.unwrap();
    wait_card(&p, &early.ns, "old", "invalid", refused("InvalidSpec")).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    late.apply(&card("new", &host, "")).await.unwrap();
    let holder = wait_card(&p, &late.ns, "new", "Ready", ready).await;
    let held = hash_of(&holder).unwrap();
    // Fixed later, the older card does not take the host away.
    early.apply(&card("old", &host, "")).await.unwrap();
    let old = wait_card(&p, &early.ns, "old", "conflict", refused("HostConflict")).await;
    assert!(condition(&old, "Ready")
        .unwrap()
        .2
        .contains(&format!("{}/new", late.ns)));

    // The holder's invalid edit keeps its last good card served, and its status says so.
    let mut bad = card("new", &host, "");
    bad["spec"]["card"]["skills"][0]["id"] = json!("");
    late.apply(&bad).await.unwrap();
    let kept = wait_card(&p, &late.ns, "new", "invalid edit", refused("InvalidSpec")).await;
    assert_eq!(hash_of(&kept).as_deref(), Some(held.as_str()));
    assert!(kept.status.as_ref().unwrap().url.is_some());
    wait_served(&p, &host, PATH_CARD, Some(&held)).await;
    invariant(&p, &[]).await;

    // Deleted, it stops being served at once, and the waiting card takes over.
    late.delete("new").await;
    let gone = wait_served_not(&p, &host, PATH_CARD, &held).await;
    eprintln!("deleted card no longer served after {gone:?}");
    let next = wait_card(&p, &early.ns, "old", "Ready after the holder left", ready).await;
    wait_served(&p, &host, PATH_CARD, hash_of(&next).as_deref()).await;
    invariant(&p, &[]).await;
}

/// Wait until `host` + `path` no longer serves `etag`; how long it took.
async fn wait_served_not(p: &Platform, host: &str, path: &str, etag: &str) -> Duration {
    let started = Instant::now();
    let quoted = format!("\"{etag}\"");
    wait_for(Duration::from_secs(20), || {
        let r = p.get(host, path);
        std::future::ready(r.status != 200 || r.header("etag") != Some(quoted.as_str()))
    })
    .await
    .unwrap_or_else(|()| panic!("{host}{path} still serves {etag}"));
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_a_host_allowance_unpublishes_within_seconds() {
    let p = Platform::start(&[]).await;
    let t = rand_tag();
    let host = format!("p-{t}.private.test");
    let tenant = Tenant::with_annotations(
        &p,
        &format!("granted-{t}"),
        json!({"agentcard.dev/allowed-hosts": host}),
    )
    .await;
    // Another namespace may not use the host at all.
    let other = Tenant::new(&p, &format!("other-{t}")).await;
    other.apply(&card("x", &host, "/x")).await.unwrap();
    wait_card(&p, &other.ns, "x", "not allowed", refused("HostNotAllowed")).await;

    tenant.apply(&card("agent", &host, "")).await.unwrap();
    let c = wait_card(&p, &tenant.ns, "agent", "Ready", ready).await;
    let hash = hash_of(&c).unwrap();
    wait_served(&p, &host, PATH_CARD, Some(&hash)).await;

    let patch = json!({"metadata": {"annotations": {"agentcard.dev/allowed-hosts": null}}});
    Api::<Namespace>::all(p.admin.clone())
        .patch(&tenant.ns, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let took = wait_served_not(&p, &host, PATH_CARD, &hash).await;
    eprintln!("allowance revoked: card no longer served after {took:?}");
    let c = wait_card(
        &p,
        &tenant.ns,
        "agent",
        "HostNotAllowed",
        refused("HostNotAllowed"),
    )
    .await;
    let status = c.status.unwrap();
    assert!(status.url.is_none() && status.content_hash.is_none() && status.served.is_none());
    wait_for(Duration::from_secs(10), || async {
        let cm = Api::<ConfigMap>::namespaced(p.admin.clone(), &tenant.ns)
            .get_opt(&card_configmap_name("agent"))
            .await;
        let ing = Api::<Ingress>::namespaced(p.admin.clone(), &p.opns)
            .get_opt(&ingress_name(&tenant.ns, "agent"))
            .await;
        matches!((cm, ing), (Ok(None), Ok(None)))
    })
    .await
    .expect("ConfigMap and Ingress go with the claim");
    invariant(&p, &[(host, PATH_CARD.to_string())]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moving_a_card_frees_its_old_host_and_a_move_into_a_held_host_unpublishes() {
    let p = Platform::start(&[]).await;
    let t = rand_tag();
    let (one, two) = (format!("one-{t}.open.test"), format!("two-{t}.open.test"));
    let mover = Tenant::new(&p, &format!("mover-{t}")).await;
    let waiter = Tenant::new(&p, &format!("waiter-{t}")).await;
    mover.apply(&card("agent", &one, "")).await.unwrap();
    wait_card(&p, &mover.ns, "agent", "Ready", ready).await;
    waiter.apply(&card("agent", &one, "")).await.unwrap();
    wait_card(&p, &waiter.ns, "agent", "conflict", refused("HostConflict")).await;

    mover.apply(&card("agent", &two, "")).await.unwrap();
    let moved = wait_card(&p, &mover.ns, "agent", "Ready on the new host", |c| {
        ready(c)
            && c.status
                .as_ref()
                .and_then(|s| s.url.as_deref())
                .is_some_and(|u| u.contains(&two))
    })
    .await;
    wait_served(&p, &two, PATH_CARD, hash_of(&moved).as_deref()).await;
    let took_over = wait_card(&p, &waiter.ns, "agent", "Ready on the freed host", ready).await;
    wait_served(&p, &one, PATH_CARD, hash_of(&took_over).as_deref()).await;
    let ing = Api::<Ingress>::namespaced(p.admin.clone(), &p.opns)
        .get(&ingress_name(&mover.ns, "agent"))
        .await
        .unwrap();
    assert_eq!(
        ing.spec.unwrap().rules.unwrap()[0].host.as_deref(),
        Some(two.as_str())
    );

    // Moving onto a host another namespace holds: refused, and nothing stays served.
    mover.apply(&card("agent", &one, "")).await.unwrap();
    let lost = wait_card(&p, &mover.ns, "agent", "conflict", refused("HostConflict")).await;
    assert!(lost.status.unwrap().url.is_none());
    wait_served(&p, &two, PATH_CARD, None).await;
    wait_served(&p, &one, PATH_CARD, hash_of(&took_over).as_deref()).await;
    invariant(&p, &[(two, PATH_CARD.to_string())]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_card_goes_at_once_frees_its_host_and_leaves_nothing_behind() {
    let p = Platform::start(&[]).await;
    let t = rand_tag();
    let host = format!("f-{t}.open.test");
    let holder = Tenant::new(&p, &format!("holder-{t}")).await;
    let waiter = Tenant::new(&p, &format!("waiter-{t}")).await;
    holder.apply(&card("agent", &host, "")).await.unwrap();
    wait_card(&p, &holder.ns, "agent", "Ready", ready).await;
    waiter.apply(&card("agent", &host, "")).await.unwrap();
    wait_card(&p, &waiter.ns, "agent", "conflict", refused("HostConflict")).await;
    let ingresses: Api<Ingress> = Api::namespaced(p.admin.clone(), &p.opns);
    let holder_ingress = ingress_name(&holder.ns, "agent");
    assert!(ingresses.get_opt(&holder_ingress).await.unwrap().is_some());

    // The holder deletes its card: nothing of the operator's holds it in deletion (no
    // finalizer), so it is gone at once; what it had is cleaned up after the fact.
    assert!(
        holder
            .cards
            .get("agent")
            .await
            .unwrap()
            .metadata
            .finalizers
            .is_none(),
        "the operator put a finalizer on the card"
    );
    holder
        .cards
        .delete("agent", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    let vanished = holder.cards.get_opt("agent").await.unwrap().is_none();
    assert!(vanished, "the card was held in deletion");

    // Its host is free for the waiting namespace, and its Ingress in the operator's namespace
    // is gone with it.
    let next = wait_card(&p, &waiter.ns, "agent", "Ready on the freed host", ready).await;
    wait_served(&p, &host, PATH_CARD, hash_of(&next).as_deref()).await;
    wait_for(Duration::from_secs(20), || async {
        ingresses.get_opt(&holder_ingress).await.unwrap().is_none()
    })
    .await
    .expect("the vanished card's Ingress is removed");
    invariant(&p, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_the_operator_did_not_create_are_never_adopted() {
    let p = Platform::start(&[]).await;
    let t = rand_tag();
    let tenant = Tenant::new(&p, &format!("adopt-{t}")).await;
    let cms: Api<ConfigMap> = Api::namespaced(tenant.client.clone(), &tenant.ns);
    let mine: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": card_configmap_name("mine")},
        "data": {"settings": "keep me"}
    }))
    .unwrap();
    cms.create(&PostParams::default(), &mine).await.unwrap();
    tenant
        .apply(&card("mine", &format!("m-{t}.open.test"), ""))
        .await
        .unwrap();
    let c = wait_card(&p, &tenant.ns, "mine", "NameInUse", refused("NameInUse")).await;
    assert!(condition(&c, "Ready")
        .unwrap()
        .2
        .contains(&card_configmap_name("mine")));
    let after = cms.get(&card_configmap_name("mine")).await.unwrap();
    assert!(
        after.metadata.owner_references.is_none(),
        "adopted: {after:?}"
    );
    assert_eq!(after.data, mine.data);

    // The same for an Ingress of the tenant's that has the backend route's name.
    let ing: Ingress = serde_json::from_value(json!({
        "metadata": {"name": backend_ingress_name_of("svc")},
        "spec": {"rules": [{"host": "mine.example", "http": {"paths": [{"path": "/", "pathType": "Prefix",
            "backend": {"service": {"name": "mine", "port": {"number": 80}}}}]}}]}
    }))
    .unwrap();
    let ings: Api<Ingress> = Api::namespaced(tenant.client.clone(), &tenant.ns);
    ings.create(&PostParams::default(), &ing).await.unwrap();
    let mut svc = card("svc", &format!("svc-{t}.open.test"), "");
    svc["spec"]["backend"] = json!({"serviceName": "agent", "port": 8080});
    tenant.apply(&svc).await.unwrap();
    wait_card(&p, &tenant.ns, "svc", "NameInUse", refused("NameInUse")).await;
    let kept = ings.get(&backend_ingress_name_of("svc")).await.unwrap();
    assert!(kept.metadata.owner_references.is_none());
    assert_eq!(kept.spec, ing.spec);

    // Deleting the card leaves the tenant's objects alone.
    tenant.delete("mine").await;
    tenant.delete("svc").await;
    wait_for(Duration::from_secs(20), || async {
        matches!(tenant.cards.get_opt("mine").await, Ok(None))
            && matches!(tenant.cards.get_opt("svc").await, Ok(None))
    })
    .await
    .expect("cards deleted");
    assert_eq!(
        cms.get(&card_configmap_name("mine")).await.unwrap().data,
        mine.data
    );
    assert!(ings
        .get_opt(&backend_ingress_name_of("svc"))
        .await
        .unwrap()
        .is_some());
    invariant(&p, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configmaps_a_tenant_labels_as_the_operators_cost_a_replica_a_few_bytes_not_their_size() {
    let p = Platform::start(&[]).await;
    let t = rand_tag();
    let tenant = Tenant::new(&p, &format!("hog-{t}")).await;
    let host = format!("hog-{t}.open.test");
    tenant.apply(&card("real", &host, "")).await.unwrap();
    let real = wait_card(&p, &tenant.ns, "real", "Ready", ready).await;
    wait_served(&p, &host, PATH_CARD, hash_of(&real).as_deref()).await;
    let cms: Api<ConfigMap> = Api::namespaced(tenant.client.clone(), &tenant.ns);
    let own = cms.get(&card_configmap_name("real")).await.unwrap();
    // Let the start-up's allocations settle before the baseline.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = p.op.rss_kib();

    // 60 ConfigMaps of 900 KiB, labelled as the operator's: half of them also claim to be
    // controlled by the tenant's Ready card, the others the JWKS and change-feed kinds.
    const COUNT: usize = 60;
    let filler = "a".repeat(900 * 1024);
    for i in 0..COUNT {
        let (content, owners) = match i % 3 {
            0 => (CONTENT_CARD, own.metadata.owner_references.clone()),
            1 => (CONTENT_JWKS, None),
            _ => (CONTENT_FEED, None),
        };
        let mut labels = own.metadata.labels.clone().unwrap_or_default();
        labels.insert(LABEL_CONTENT.into(), content.into());
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": format!("hog-{i}"), "labels": labels,
                "annotations": {ANN_DIRECTORY: "d"}, "ownerReferences": owners},
            "data": {KEY_CARD: filler, "more": "b"},
        }))
        .unwrap();
        cms.create(&PostParams::default(), &cm).await.unwrap();
    }
    // The watch events have long arrived by then (on the old code, the store held them all).
    tokio::time::sleep(Duration::from_secs(8)).await;
    let after = p.op.rss_kib();
    let grown_mib = after.saturating_sub(before) as f64 / 1024.0;
    eprintln!(
        "RSS before {:.1} MiB, after {COUNT} ConfigMaps of 900 KiB: {:.1} MiB (+{grown_mib:.1} MiB)",
        before as f64 / 1024.0,
        after as f64 / 1024.0
    );
    assert!(
        grown_mib < 20.0,
        "the replica grew by {grown_mib:.1} MiB for {:.1} MiB of a tenant's ConfigMaps",
        (COUNT * 900) as f64 / 1024.0
    );
    // Nothing of it is served, the tenant's own card still is, and the API is unharmed.
    wait_served(&p, &host, PATH_CARD, hash_of(&real).as_deref()).await;
    invariant(&p, &[]).await;
    for i in 0..COUNT {
        let _ = cms
            .delete(&format!("hog-{i}"), &DeleteParams::default())
            .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controllers_that_fail_give_up_the_lease_and_the_process_exits() {
    let _serial = SERIAL.lock().await;
    let admin = client_for(kubeconfig()).await;
    install_crds(&admin).await;
    let opns = format!("ops-fail-{}", rand_tag());
    create_namespace(&admin, &opns, json!({})).await;
    // The controllers cannot start: the signing Secret's name is not a valid object name, so
    // creating it fails after this process took the lease.
    let mut op = Operator::spawn_on(
        kubeconfig(),
        &opns,
        Some(&opns),
        &[
            "--signing-secret",
            "Not_A_Valid_Name",
            "--identity",
            "failing-one",
        ],
    );
    let status = op
        .wait_exit(Duration::from_secs(30))
        .unwrap_or_else(|| panic!("the process kept running:\n{}", op.logs()));
    assert!(!status.success(), "exit status {status}");
    let logs = op.logs();
    assert!(logs.contains("giving up the lease"), "{logs}");
    let lease = Api::<Lease>::namespaced(admin.clone(), &opns)
        .get("agentcard-operator-leader")
        .await
        .unwrap();
    let holder = lease.spec.and_then(|s| s.holder_identity);
    assert_ne!(holder.as_deref(), Some("failing-one"), "the lease was kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenant_cannot_route_read_or_replace_a_cards_extended_card() {
    let p = Platform::start(&[]).await;
    let t = rand_tag();
    let host = format!("x-{t}.open.test");
    let audience = format!("https://{host}");
    let victim = Tenant::new(&p, &format!("victim-{t}")).await;
    let attacker = Tenant::new(&p, &format!("attacker-{t}")).await;
    for (ns, name) in [(&victim.ns, "caller"), (&attacker.ns, "thief")] {
        support::service_account(&p.admin, ns, name).await;
    }
    let token = |ns: &str, sa: &str| {
        let args = [
            "create",
            "token",
            sa,
            "-n",
            ns,
            "--audience",
            audience.as_str(),
        ];
        format!("Bearer {}", support::kubectl(kubeconfig(), &args).trim())
    };
    let (caller, thief) = (token(&victim.ns, "caller"), token(&attacker.ns, "thief"));

    // The victim's REST agent with an extended card for its own namespace's ServiceAccounts.
    let mut m = card("weather", &host, "");
    m["spec"]["backend"] =
        json!({"serviceName": "weather", "port": 8080, "protocolBinding": "HTTP+JSON"});
    m["spec"]["extendedCard"] = json!({
        "skills": [{"id": "private", "name": "Private", "description": "For partners.", "tags": ["t"]}],
        "auth": {"serviceAccount": {"audiences": [audience], "namespaces": [victim.ns]}}
    });
    victim.apply(&m).await.unwrap();
    wait_card(
        &p,
        &victim.ns,
        "weather",
        "Ready with an extended card",
        |c| ready(c) && c.status.as_ref().is_some_and(|s| s.extended_card.is_some()),
    )
    .await;
    let path = "/a2a/extendedAgentCard";
    let get = |auth: &str| {
        let headers = [("Host", host.as_str()), ("Authorization", auth)];
        support::http::request(p.op.server.addr, "GET", path, &headers)
    };
    let victim_cms: Api<ConfigMap> = Api::namespaced(p.admin.clone(), &victim.ns);
    let genuine = victim_cms
        .get(&extended_configmap_name("weather"))
        .await
        .unwrap()
        .data
        .unwrap()[KEY_EXTENDED]
        .clone();
    wait_for(Duration::from_secs(20), || {
        std::future::ready(get(&caller).status == 200)
    })
    .await
    .expect("the victim's caller reads the extended card");

    // The attacker's card on the same host and path, accepting the attacker's own tokens: it
    // never holds the route.
    let mut evil = m.clone();
    evil["spec"]["extendedCard"]["auth"] =
        json!({"serviceAccount": {"audiences": [audience], "namespaces": [attacker.ns]}});
    attacker.apply(&evil).await.unwrap();
    wait_card(
        &p,
        &attacker.ns,
        "weather",
        "HostConflict",
        refused("HostConflict"),
    )
    .await;
    // A ConfigMap of the attacker's namespace under the victim's extended card's name, with
    // the victim card as its controller and other bytes; the victim's namespace refuses it.
    let victim_card: AgentCard = Api::namespaced(p.admin.clone(), &victim.ns)
        .get("weather")
        .await
        .unwrap();
    let forged: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": extended_configmap_name("weather"),
            "labels": {LABEL_MANAGED_BY: MANAGER, LABEL_CONTENT: CONTENT_EXTENDED},
            "ownerReferences": [{"apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentCard",
                "name": "weather", "uid": victim_card.uid().unwrap(), "controller": true}]},
        "data": {KEY_EXTENDED: "{\"name\": \"forged\"}"}
    }))
    .unwrap();
    let attacker_cms: Api<ConfigMap> = Api::namespaced(attacker.client.clone(), &attacker.ns);
    attacker_cms
        .delete(
            &extended_configmap_name("weather"),
            &DeleteParams::default(),
        )
        .await
        .ok();
    attacker_cms
        .create(&PostParams::default(), &forged)
        .await
        .unwrap();
    let into_victim: Api<ConfigMap> = Api::namespaced(attacker.client.clone(), &victim.ns);
    let err = into_victim
        .create(&PostParams::default(), &forged)
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 403),
        "{err}"
    );

    // Reads: the attacker's token is refused, the victim's caller still gets the genuine bytes.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let r = get(&thief);
    assert_eq!(r.status, 401, "{}", String::from_utf8_lossy(&r.body));
    let r = get(&caller);
    assert_eq!(r.status, 200);
    assert_eq!(r.body, genuine.as_bytes());
    invariant(&p, &[]).await;
}
