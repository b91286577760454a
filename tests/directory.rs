//! AgentDirectory on the real control plane: what is listed (selectors, opt-out label,
//! namespace labels, deletion), status counts, the host it holds, the manifest and both APIs
//! validated against the ARD v0.9 schemas in tests/data/ard-v0.9, HTTP caching, and Kubernetes
//! access mode where two ServiceAccounts with different RBAC get different answers and totals
//! and facets leak nothing. The operator watches every namespace on a plane of this suite's own.

#[path = "support/dircards.rs"]
mod dircards;
mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use agentcard_operator::crd::AgentDirectory;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{json, Value};
use support::cluster::*;
use support::directory::*;
use support::http::{request_with_body, Resp};
use support::plane::wait_for;
use support::{condition, ready};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_lists_the_served_cards_its_selectors_pick_and_speaks_ard() {
    let p = Platform::start(&[]).await;
    let t = rand_tag();
    let a = Tenant::new(&p, &format!("team-a-{t}")).await;
    let b = Tenant::new(&p, &format!("team-b-{t}")).await;
    let other = Tenant::new(&p, &format!("other-{t}")).await;
    let key = format!("dir-{t}");
    let label = |ns: &str, team: Option<&str>| {
        let ns = ns.to_string();
        let admin = p.admin.clone();
        let team = team.map(str::to_string);
        let key = key.clone();
        async move {
            let patch = json!({"metadata": {"labels": {key: team}}});
            Api::<Namespace>::all(admin)
                .patch(&ns, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .unwrap();
        }
    };
    label(&a.ns, Some("yes")).await;
    label(&b.ns, Some("yes")).await;

    let host = |n: &str| format!("{n}-{t}.open.test");
    a.apply(&rich_card(
        "weather",
        &host("weather"),
        "forecast",
        &["weather", "climate"],
        "Acme",
    ))
    .await
    .unwrap();
    let mut hidden = rich_card("hidden", &host("hidden"), "secret", &["weather"], "Acme");
    hidden["metadata"]["labels"] = json!({"agentcard.dev/listed": "false"});
    a.apply(&hidden).await.unwrap();
    let mut internal = rich_card("internal", &host("internal"), "ops", &["ops"], "Acme");
    internal["metadata"]["labels"] = json!({"tier": "internal"});
    a.apply(&internal).await.unwrap();
    b.apply(&rich_card(
        "travel",
        &host("travel"),
        "book",
        &["travel", "weather"],
        "Globex",
    ))
    .await
    .unwrap();
    other
        .apply(&rich_card(
            "elsewhere",
            &host("elsewhere"),
            "x",
            &["weather"],
            "Initech",
        ))
        .await
        .unwrap();
    let weather = wait_card(&p, &a.ns, "weather", "Ready", ready).await;
    for (ns, name) in [
        (&a.ns, "hidden"),
        (&a.ns, "internal"),
        (&b.ns, "travel"),
        (&other.ns, "elsewhere"),
    ] {
        wait_card(&p, ns, name, "Ready", ready).await;
    }

    let dhost = format!("dir-{t}.open.test");
    apply_directory(
        &p,
        &directory(
            &format!("dir-{t}"),
            &dhost,
            json!({
                "namespaceSelector": {"matchLabels": {format!("dir-{t}"): "yes"}},
                "cardSelector": {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["internal"]}]},
                "description": "Every team's agents",
            }),
        ),
    )
    .await;
    let d = wait_directory(&p, &format!("dir-{t}"), "Ready with 2 cards", dir_ready(2)).await;
    assert_eq!(
        d.status.unwrap().url.as_deref(),
        Some(format!("https://{dhost}/.well-known/ard.json").as_str())
    );
    wait_listed(&p, &dhost, &["travel", "weather"]).await;

    // The directory host's did:web document lists the signing key (ES256), as card hosts do.
    let jwks = get(&p, &host("weather"), "/.well-known/jwks.json", &[]).body;
    let did = get(&p, &dhost, "/.well-known/did.json", &[]);
    assert_eq!(did.status, 200);
    assert_eq!(
        support::assert_did_document(&did.body, &dhost, &jwks).len(),
        1
    );
    let card_did = get(&p, &host("weather"), "/.well-known/did.json", &[]);
    support::assert_did_document(&card_did.body, &host("weather"), &jwks);

    // The manifest, at both well-known paths, valid against the AI Catalog schema.
    let m1 = get(&p, &dhost, "/.well-known/ai-catalog.json", &[]);
    let m2 = get(&p, &dhost, "/.well-known/ard.json", &[]);
    assert_eq!((m1.status, &m1.body), (200, &m2.body));
    let manifest = json_of(&m1);
    assert_schema("manifest", &manifest);
    let entries = manifest["entries"].as_array().unwrap();
    let ids: BTreeSet<&str> = entries
        .iter()
        .map(|e| e["identifier"].as_str().unwrap())
        .collect();
    assert!(ids.contains(format!("urn:air:{}:{}:weather", host("weather"), a.ns).as_str()));
    let w = entries
        .iter()
        .find(|e| e["identifier"].as_str().unwrap().ends_with(":weather"))
        .unwrap();
    assert_eq!(w["type"], "application/a2a-agent-card+json");
    assert_eq!(
        w["url"],
        weather.status.as_ref().unwrap().url.clone().unwrap()
    );
    assert_eq!(
        w["representativeQueries"],
        json!(["please forecast", "forecast now"])
    );
    assert_eq!(w["tags"], json!(["weather", "climate"]));
    assert!(entries
        .iter()
        .any(|e| e["type"] == "application/ai-registry+json"));
    assert_eq!(entries.len(), 3);
    // HTTP caching: strong ETag, 304, public.
    let etag = m1.header("etag").unwrap().to_string();
    assert_eq!(m1.header("cache-control"), Some("public, max-age=30"));
    assert_eq!(
        get(
            &p,
            &dhost,
            "/.well-known/ard.json",
            &[("If-None-Match", &etag)]
        )
        .status,
        304
    );

    // Native API: filters, the card verbatim, facets.
    let r = json_of(&get(
        &p,
        &dhost,
        "/v1/agents?tag=weather&provider=globex",
        &[],
    ));
    assert_eq!(names(&r), ["travel"]);
    let r = json_of(&get(
        &p,
        &dhost,
        "/v1/agents?skill=forecast&skill=book",
        &[],
    ));
    assert_eq!(names(&r), ["travel", "weather"]);
    let item = get(&p, &dhost, &format!("/v1/agents/{}/weather", a.ns), &[]);
    let served = p.get(&host("weather"), "/.well-known/agent-card.json");
    let verbatim: Value = json_of(&item)["card"].clone();
    assert_eq!(
        verbatim,
        serde_json::from_slice::<Value>(&served.body).unwrap()
    );
    let f = json_of(&get(&p, &dhost, "/v1/facets", &[]));
    assert_eq!(
        f["facets"]["tag"][0],
        json!({"value": "weather", "count": 2})
    );
    let bad = get(&p, &dhost, "/v1/agents?colour=red", &[]);
    assert_eq!(bad.status, 400);
    assert_schema("Error", &json_of(&bad));
    assert!(json_of(&bad)["message"]
        .as_str()
        .unwrap()
        .contains("colour"));

    // ARD registry API.
    let s = post(
        &p,
        &dhost,
        "/search",
        &json!({"query": {"text": "weather forecast"}}),
        &[],
    );
    assert_eq!(s.status, 200, "{}", String::from_utf8_lossy(&s.body));
    let s = json_of(&s);
    assert_schema("SearchResponse", &s);
    assert!(s["results"][0]["identifier"]
        .as_str()
        .unwrap()
        .ends_with(":weather"));
    let l = json_of(&get(
        &p,
        &dhost,
        "/agents?filter=tags%20%3D%20%27travel%27",
        &[],
    ));
    assert_schema("ListResponse", &l);
    assert_eq!(l["total"], 1);
    let x = post(
        &p,
        &dhost,
        "/explore",
        &json!({"resultType": {"facets": [{"field": "tags"}, {"field": "type"}]}}),
        &[],
    );
    let x = json_of(&x);
    assert_schema("ExploreResponse", &x);
    assert_eq!(x["facets"]["type"]["buckets"][0]["count"], 2);
    let one = get(
        &p,
        &dhost,
        &format!("/agents/{}", w["identifier"].as_str().unwrap()),
        &[],
    );
    assert_eq!(one.status, 200);
    assert_schema("catalogEntry", &json_of(&one));
    let bad = post(
        &p,
        &dhost,
        "/search",
        &json!({"query": {"text": "x"}, "bogus": 1}),
        &[],
    );
    assert_eq!(bad.status, 400);
    assert_schema("Error", &json_of(&bad));

    // Namespace labels, the opt-out label and deletion show within a second or so.
    label(&b.ns, None).await;
    let took = wait_listed(&p, &dhost, &["weather"]).await;
    eprintln!("namespace label removed: gone from the directory after {took:?}");
    label(&b.ns, Some("yes")).await;
    wait_listed(&p, &dhost, &["travel", "weather"]).await;
    let mut opted_out = rich_card(
        "weather",
        &host("weather"),
        "forecast",
        &["weather", "climate"],
        "Acme",
    );
    opted_out["metadata"]["labels"] = json!({"agentcard.dev/listed": "false"});
    a.apply(&opted_out).await.unwrap();
    let took = wait_listed(&p, &dhost, &["travel"]).await;
    eprintln!("card opted out: gone from the directory after {took:?}");
    wait_directory(&p, &format!("dir-{t}"), "count 1", dir_ready(1)).await;
    b.delete("travel").await;
    let took = wait_listed(&p, &dhost, &[]).await;
    eprintln!("card deleted: gone from the directory after {took:?}");
    wait_directory(&p, &format!("dir-{t}"), "count 0", dir_ready(0)).await;

    // The directory holds its whole host: no card beneath it, no second directory on it.
    other.apply(&card("squatter", &dhost, "/x")).await.unwrap();
    let sq = wait_card(
        &p,
        &other.ns,
        "squatter",
        "conflict",
        refused("HostConflict"),
    )
    .await;
    assert!(condition(&sq, "Ready")
        .unwrap()
        .2
        .contains(&format!("AgentDirectory dir-{t}")));
    // (The second one as an earlier version left it: with its finalizer, which goes.)
    let mut second = directory(&format!("dir2-{t}"), &dhost, json!({}));
    second["metadata"]["finalizers"] =
        json!([agentcard_operator::controller::finalizers::LEGACY_DIRECTORY]);
    apply_directory(&p, &second).await;
    wait_directory(&p, &format!("dir2-{t}"), "conflict, no finalizer", |d| {
        d.metadata.finalizers.as_ref().is_none_or(Vec::is_empty)
            && d.status.as_ref().is_some_and(|s| {
                s.conditions.iter().any(|c| c.reason == "HostConflict") && s.served.is_none()
            })
    })
    .await;
    let api: Api<AgentDirectory> = Api::all(p.admin.clone());
    api.delete(&format!("dir2-{t}"), &DeleteParams::default())
        .await
        .unwrap();

    // Deleted, the directory goes at once (nothing holds it in deletion), is served no more,
    // and its host is free.
    api.delete(&format!("dir-{t}"), &DeleteParams::default())
        .await
        .unwrap();
    assert!(api.get_opt(&format!("dir-{t}")).await.unwrap().is_none());
    wait_for(Duration::from_secs(15), || {
        std::future::ready(get(&p, &dhost, "/.well-known/ard.json", &[]).status == 404)
    })
    .await
    .expect("a deleted directory is not served");
    wait_card(
        &p,
        &other.ns,
        "squatter",
        "Ready once the host is free",
        ready,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_registry_answers_under_its_path_prefix_with_caching_cors_paging_and_bounds() {
    let p = Platform::start(&[]).await;
    let t = rand_tag();
    let tenant = Tenant::new(&p, &format!("http-{t}")).await;
    let names_all: Vec<String> = (0..5).map(|i| format!("agent-{i}")).collect();
    for (i, name) in names_all.iter().enumerate() {
        let tags = ["shared", if i % 2 == 0 { "even" } else { "odd" }];
        tenant
            .apply(&rich_card(
                name,
                &format!("{name}-{t}.open.test"),
                &format!("skill{i}"),
                &tags,
                "Acme",
            ))
            .await
            .unwrap();
    }
    for name in &names_all {
        wait_card(&p, &tenant.ns, name, "Ready", ready).await;
    }
    let dname = format!("http-{t}");
    let dhost = format!("http-{t}.open.test");
    let only = json!({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": tenant.ns}},
        "publish": {"host": dhost, "pathPrefix": "/registry"}});
    apply_directory(&p, &directory(&dname, &dhost, only)).await;
    wait_directory(&p, &dname, "Ready with 5 cards", dir_ready(5)).await;
    let listed = wait_for(Duration::from_secs(15), || {
        std::future::ready(get(&p, &dhost, "/registry/v1/agents", &[]).status == 200)
    })
    .await;
    assert!(
        listed.is_ok(),
        "the directory is not served under its prefix"
    );

    // The lease holder wrote the directory's Ingress: its whole host to the operator.
    let ing =
        Api::<k8s_openapi::api::networking::v1::Ingress>::namespaced(p.admin.clone(), &p.opns)
            .get(&agentcard_operator::controller::agentdirectory::ingress_name(&dname))
            .await
            .unwrap();
    let rule = &ing.spec.unwrap().rules.unwrap()[0];
    assert_eq!(rule.host.as_deref(), Some(dhost.as_str()));
    let path = &rule.http.as_ref().unwrap().paths[0];
    assert_eq!(
        (path.path.as_deref(), path.path_type.as_str()),
        (Some("/"), "Prefix")
    );

    // The APIs live under the prefix; the well-known manifest also at the host's root.
    assert_eq!(get(&p, &dhost, "/v1/agents", &[]).status, 404);
    let m = get(&p, &dhost, "/.well-known/ard.json", &[]);
    assert_eq!(m.status, 200);
    assert_eq!(
        get(&p, &dhost, "/registry/.well-known/ard.json", &[]).body,
        m.body
    );

    // Every GET has a strong ETag and answers 304 to it; CORS lets browsers read it all.
    let one = format!("/registry/v1/agents/{}/agent-0", tenant.ns);
    let id = format!("urn:air:agent-0-{t}.open.test:{}:agent-0", tenant.ns);
    let by_id = format!("/registry/agents/{id}");
    for path in [
        "/registry/v1/agents?tag=shared",
        "/registry/v1/facets",
        "/registry/agents",
        "/registry/.well-known/ai-catalog.json",
        one.as_str(),
        by_id.as_str(),
    ] {
        let r = get(&p, &dhost, path, &[("Origin", "https://app.example")]);
        assert_eq!(
            r.status,
            200,
            "{path}: {}",
            String::from_utf8_lossy(&r.body)
        );
        assert_eq!(r.header("access-control-allow-origin"), Some("*"), "{path}");
        assert!(
            r.header("access-control-expose-headers")
                .is_some_and(|h| h.contains("ETag")),
            "{path}"
        );
        let etag = r
            .header("etag")
            .unwrap_or_else(|| panic!("{path}: no ETag"));
        assert!(etag.starts_with('"'), "{path}: {etag}");
        let again = get(&p, &dhost, path, &[("If-None-Match", etag)]);
        assert_eq!(again.status, 304, "{path}");
        assert!(again.body.is_empty(), "{path}");
    }
    let pre = support::http::request(
        p.op.server.addr,
        "OPTIONS",
        "/registry/search",
        &[
            ("Host", &dhost),
            ("Origin", "https://app.example"),
            ("Access-Control-Request-Method", "POST"),
            ("Access-Control-Request-Headers", "content-type"),
        ],
    );
    assert!(pre.status == 204 || pre.status == 200, "{}", pre.status);
    assert!(pre
        .header("access-control-allow-methods")
        .is_some_and(|m| m.contains("POST")));

    // Paging walks every entry once: native cursors, ARD page tokens for search and list.
    let mut seen = Vec::new();
    let mut path = "/registry/v1/agents?limit=2".to_string();
    loop {
        let page = json_of(&get(&p, &dhost, &path, &[]));
        assert!(page["agents"].as_array().unwrap().len() <= 2);
        seen.extend(names(&page));
        match page["metadata"]["nextCursor"].as_str() {
            Some(c) => path = format!("/registry/v1/agents?limit=2&cursor={c}"),
            None => break,
        }
    }
    seen.sort();
    assert_eq!(seen, names_all);
    for (what, first) in [
        (
            "search",
            json!({"query": {"text": "shared"}, "pageSize": 2}),
        ),
        ("agents", Value::Null),
    ] {
        let mut ids = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let page = if what == "search" {
                let mut body = first.clone();
                if let Some(t) = &token {
                    body["pageToken"] = json!(t);
                }
                json_of(&post(&p, &dhost, "/registry/search", &body, &[]))
            } else {
                let q = token
                    .as_ref()
                    .map(|t| format!("&pageToken={t}"))
                    .unwrap_or_default();
                let page = json_of(&get(
                    &p,
                    &dhost,
                    &format!("/registry/agents?pageSize=2{q}"),
                    &[],
                ));
                assert_eq!(page["total"], 5);
                page
            };
            let key = if what == "search" { "results" } else { "items" };
            let items = page[key].as_array().unwrap();
            assert!(items.len() <= 2, "{what}: {page}");
            ids.extend(
                items
                    .iter()
                    .map(|e| e["identifier"].as_str().unwrap().to_string()),
            );
            match page["pageToken"].as_str() {
                Some(t) => token = Some(t.to_string()),
                None => break,
            }
        }
        let unique: BTreeSet<&String> = ids.iter().collect();
        assert_eq!((ids.len(), unique.len()), (5, 5), "{what}: {ids:?}");
    }

    // A field asked for twice is counted once, not lost.
    let x = json_of(&post(
        &p,
        &dhost,
        "/registry/explore",
        &json!({"resultType": {"facets": [{"field": "tags"}, {"field": "tags"}]}}),
        &[],
    ));
    assert_eq!(
        x["facets"]["tags"]["buckets"][0],
        json!({"value": "shared", "count": 5}),
        "{x}"
    );

    // A page that is not there is a 404 page: not cached, no validator, even to `*`.
    let missing = get(
        &p,
        &dhost,
        &format!("/registry/agents/{}/nobody", tenant.ns),
        &[("Accept", "text/html"), ("If-None-Match", "*")],
    );
    assert_eq!(missing.status, 404);
    assert_eq!(missing.header("etag"), None);
    assert_eq!(missing.header("cache-control"), Some("no-store"));
    assert!(missing
        .header("content-type")
        .is_some_and(|c| c.starts_with("text/html")));
    assert!(missing.header("content-security-policy").is_some());
    assert!(String::from_utf8_lossy(&missing.body).contains("NOT_FOUND"));

    // Request bodies are bounded.
    let big = vec![b' '; 64 * 1024];
    let r = request_with_body(
        p.op.server.addr,
        "POST",
        "/registry/search",
        &[("Host", &dhost), ("Content-Type", "application/json")],
        Some(&big),
    );
    assert_eq!(r.status, 413);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_kubernetes_mode_each_caller_sees_what_its_rbac_allows() {
    let p = Platform::start(&[]).await;
    let t = rand_tag();
    let a = Tenant::new(&p, &format!("k-a-{t}")).await;
    let b = Tenant::new(&p, &format!("k-b-{t}")).await;
    let host = |n: &str| format!("{n}-{t}.open.test");
    a.apply(&rich_card(
        "alpha",
        &host("alpha"),
        "one",
        &["shared", "a-only"],
        "Acme",
    ))
    .await
    .unwrap();
    b.apply(&rich_card(
        "beta",
        &host("beta"),
        "two",
        &["shared", "b-only"],
        "Globex",
    ))
    .await
    .unwrap();
    wait_card(&p, &a.ns, "alpha", "Ready", ready).await;
    wait_card(&p, &b.ns, "beta", "Ready", ready).await;
    let dhost = format!("kdir-{t}.open.test");
    let selector = json!({"namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": [a.ns, b.ns]}]},
        "access": {"mode": "Kubernetes"}});
    apply_directory(&p, &directory(&format!("kdir-{t}"), &dhost, selector)).await;
    wait_directory(&p, &format!("kdir-{t}"), "Ready with 2 cards", dir_ready(2)).await;

    let token_a = service_account_token(&p, &a.ns, "reader-a", &[&a.ns]).await;
    let token_both = service_account_token(&p, &b.ns, "reader-both", &[&a.ns, &b.ns]).await;
    let bearer = |t: &str| format!("Bearer {t}");

    // No token, or a bad one: 401 in the ARD error shape (once every replica serves the
    // directory: its status can be written a moment before the servers rebuild their sites).
    wait_for(Duration::from_secs(10), || {
        std::future::ready(get(&p, &dhost, "/v1/agents", &[]).status == 401)
    })
    .await
    .expect("the directory is served");
    let r = get(&p, &dhost, "/v1/agents", &[]);
    assert_eq!(r.status, 401);
    assert_schema("Error", &json_of(&r));
    assert_eq!(
        get(
            &p,
            &dhost,
            "/v1/agents",
            &[("Authorization", "Bearer not-a-token")]
        )
        .status,
        401
    );

    let ba = bearer(&token_a);
    let wait_names = |auth: String, want: Vec<&'static str>| {
        let p = &p;
        let dhost = dhost.clone();
        async move {
            let ok = wait_for(Duration::from_secs(15), || {
                let r = get(p, &dhost, "/v1/agents", &[("Authorization", &auth)]);
                std::future::ready(r.status == 200 && names(&json_of(&r)) == want)
            })
            .await;
            assert!(
                ok.is_ok(),
                "{want:?}: {}",
                String::from_utf8_lossy(
                    &get(p, &dhost, "/v1/agents", &[("Authorization", &auth)]).body
                )
            );
        }
    };
    wait_names(ba.clone(), vec!["alpha"]).await;
    wait_names(bearer(&token_both), vec!["alpha", "beta"]).await;

    // Totals, facets, the manifest, search and lookups leak nothing of team b to reader a.
    let r = get(&p, &dhost, "/v1/agents", &[("Authorization", &ba)]);
    assert_eq!(r.header("cache-control"), Some("private, max-age=30"));
    assert!(r
        .header("vary")
        .is_some_and(|v| v.contains("Authorization")));
    assert_eq!(json_of(&r)["metadata"]["total"], 1);
    let f = json_of(&get(&p, &dhost, "/v1/facets", &[("Authorization", &ba)]));
    let text = f.to_string();
    assert!(
        !text.contains("b-only") && !text.contains("Globex") && !text.contains(&b.ns),
        "{text}"
    );
    assert_eq!(
        f["facets"]["tag"],
        json!([{"value": "a-only", "count": 1}, {"value": "shared", "count": 1}])
    );
    let m = json_of(&get(
        &p,
        &dhost,
        "/.well-known/ard.json",
        &[("Authorization", &ba)],
    ));
    assert!(!m.to_string().contains(&b.ns));
    let s = json_of(&post(
        &p,
        &dhost,
        "/search",
        &json!({"query": {"text": "shared"}}),
        &[("Authorization", &ba)],
    ));
    assert_eq!(s["results"].as_array().unwrap().len(), 1);
    let l = json_of(&get(&p, &dhost, "/agents", &[("Authorization", &ba)]));
    assert_eq!(l["total"], 1);
    assert_eq!(
        get(
            &p,
            &dhost,
            &format!("/v1/agents/{}/beta", b.ns),
            &[("Authorization", &ba)]
        )
        .status,
        404
    );
    let x = json_of(&post(
        &p,
        &dhost,
        "/explore",
        &json!({"resultType": {"facets": [{"field": "metadata.namespace"}]}}),
        &[("Authorization", &ba)],
    ));
    assert_eq!(
        x["facets"]["metadata.namespace"]["buckets"],
        json!([{"value": a.ns, "count": 1}])
    );

    // The web page shows the same: reader a's catalog lists alpha only, and beta's page is
    // not found; without a token the page is refused.
    let html = [("Accept", "text/html"), ("Authorization", ba.as_str())];
    let page = get(&p, &dhost, "/", &html);
    assert_eq!(page.status, 200);
    assert_eq!(page.header("vary"), Some("Accept, Authorization"));
    let text = String::from_utf8_lossy(&page.body);
    assert!(
        text.contains(">Agent alpha<") && !text.contains("beta") && !text.contains("Globex"),
        "{text}"
    );
    assert_eq!(
        get(&p, &dhost, &format!("/agents/{}/beta", b.ns), &html).status,
        404
    );
    assert_eq!(get(&p, &dhost, "/", &[("Accept", "text/html")]).status, 401);
}

/// Token reviews the operator has asked for so far (its own API request counts).
fn token_reviews(p: &Platform) -> f64 {
    agentcard_operator::controller::api_calls::read_counts(&p.op.metrics())
        .get(&("create".to_string(), "tokenreviews".to_string()))
        .copied()
        .unwrap_or(0.0)
}

/// A random bearer token no API server issued.
fn random_token(i: usize) -> String {
    format!("Bearer flood-{}-{i}-{}", rand_tag(), rand_tag())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_unknown_tokens_costs_one_review_each_and_leaves_known_callers_alone() {
    let p = Platform::start(&[]).await;
    let t = rand_tag();
    let a = Tenant::new(&p, &format!("flood-{t}")).await;
    a.apply(&rich_card(
        "alpha",
        &format!("alpha-{t}.open.test"),
        "one",
        &["x"],
        "Acme",
    ))
    .await
    .unwrap();
    wait_card(&p, &a.ns, "alpha", "Ready", ready).await;
    let dhost = format!("fdir-{t}.open.test");
    let selector = json!({"namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": [a.ns]}]},
        "access": {"mode": "Kubernetes"}});
    apply_directory(&p, &directory(&format!("fdir-{t}"), &dhost, selector)).await;
    wait_directory(&p, &format!("fdir-{t}"), "Ready with 1 card", dir_ready(1)).await;
    let known = format!(
        "Bearer {}",
        service_account_token(&p, &a.ns, "reader", &[&a.ns]).await
    );
    let addr = p.op.server.addr;
    let ask = move |auth: &str| {
        support::http::request(
            addr,
            "GET",
            "/v1/agents",
            &[("Host", &dhost), ("Authorization", auth)],
        )
        .status
    };
    wait_for(Duration::from_secs(15), || {
        std::future::ready(ask(&known) == 200)
    })
    .await
    .expect("the known caller is served");

    // One new token asked about by 100 requests at once: one review; asked again within the
    // rejection period: none.
    let before = token_reviews(&p);
    let burst = random_token(0);
    let statuses: Vec<u16> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..100).map(|_| s.spawn(|| ask(&burst))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(statuses.iter().all(|s| *s == 401), "{statuses:?}");
    assert_eq!(token_reviews(&p) - before, 1.0, "one review for one token");
    assert_eq!(ask(&burst), 401);
    assert_eq!(
        token_reviews(&p) - before,
        1.0,
        "a rejected token is remembered"
    );

    // 5,000 requests with random tokens, 32 at a time, while the known caller keeps asking.
    let (rss_before, reviews_before) = (p.op.rss_kib(), token_reviews(&p));
    let flood_started = std::time::Instant::now();
    let done = std::sync::atomic::AtomicBool::new(false);
    let (flood, latencies) = std::thread::scope(|s| {
        let caller = s.spawn(|| {
            let mut seen = Vec::new();
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let started = std::time::Instant::now();
                let status = ask(&known);
                seen.push((status, started.elapsed()));
                std::thread::sleep(Duration::from_millis(5));
            }
            seen
        });
        let workers: Vec<_> = (0..32)
            .map(|w| {
                let ask = &ask;
                s.spawn(move || {
                    (0..5000 / 32 + 1)
                        .map(|i| ask(&random_token(w * 1000 + i)))
                        .collect::<Vec<u16>>()
                })
            })
            .collect();
        let flood: Vec<u16> = workers
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        (flood, caller.join().unwrap())
    });
    let flood_lasted = flood_started.elapsed();
    let reviews = token_reviews(&p) - reviews_before;
    let rss_after = p.op.rss_kib();
    assert!(
        flood.iter().all(|s| *s == 401 || *s == 503),
        "a random token got in: {:?}",
        flood
            .iter()
            .filter(|s| **s != 401 && **s != 503)
            .collect::<Vec<_>>()
    );
    // One review per random token at most, and the known caller's token asked about again
    // once per cache period (in the background, on its own budget) besides.
    let known_refreshes = (flood_lasted.as_secs_f64()
        / agentcard_operator::directory::access::TTL.as_secs_f64())
    .floor()
        + 1.0;
    assert!(
        reviews <= flood.len() as f64 + known_refreshes,
        "{reviews} reviews for {} tokens and at most {known_refreshes} refreshes of the known one in {flood_lasted:?}",
        flood.len()
    );
    assert!(
        latencies.iter().all(|(s, _)| *s == 200),
        "the known caller was refused during the flood: {:?}",
        latencies.iter().filter(|(s, _)| *s != 200).count()
    );
    let mut times: Vec<Duration> = latencies.iter().map(|(_, d)| *d).collect();
    times.sort();
    let pct = |q: f64| times[((times.len() - 1) as f64 * q) as usize];
    let shed = flood.iter().filter(|s| **s == 503).count();
    eprintln!(
        "token flood: {} requests, {reviews} token reviews, {shed} shed with 503; known caller: {} requests, p50 {:?}, p99 {:?}; operator RSS {} -> {} KiB",
        flood.len(),
        latencies.len(),
        pct(0.5),
        pct(0.99),
        rss_before,
        rss_after
    );
    assert!(
        rss_after < rss_before + 64 * 1024,
        "memory grew by {} KiB",
        rss_after.saturating_sub(rss_before)
    );
}

/// A client following a directory's change feed (`GET /v1/changes`) page by page: what it
/// holds (identifier → content hash), and the last sequence number it acknowledged.
#[derive(Default)]
struct Follower {
    cursor: Option<String>,
    have: std::collections::BTreeMap<String, String>,
    last_seq: u64,
    namespaces: BTreeSet<String>,
}

impl Follower {
    /// One page from the server at `addr`; returns how many changes it carried. Fails when a
    /// change at or before one already acknowledged comes again (public mode has no view
    /// changes, which may repeat a position).
    fn poll(
        &mut self,
        addr: std::net::SocketAddr,
        host: &str,
        auth: Option<&str>,
        view: bool,
    ) -> usize {
        let path = match &self.cursor {
            Some(c) => format!("/v1/changes?since={c}&limit=50"),
            None => "/v1/changes?limit=50".to_string(),
        };
        let mut headers = vec![("Host", host)];
        if let Some(a) = auth {
            headers.push(("Authorization", a));
        }
        let r = support::http::request(addr, "GET", &path, &headers);
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        assert_eq!(r.header("cache-control"), Some("no-store"));
        let v = json_of(&r);
        let changes = v["changes"].as_array().unwrap();
        for c in changes {
            // Kubernetes mode shows no sequence numbers (they would count hidden changes).
            let seq = c["seq"].as_u64().unwrap_or(self.last_seq + 1);
            if !view {
                assert!(
                    seq > self.last_seq,
                    "change {seq} came again (acknowledged up to {}): {c}",
                    self.last_seq
                );
            }
            self.last_seq = self.last_seq.max(seq);
            let id = c["identifier"].as_str().unwrap().to_string();
            self.namespaces
                .insert(c["namespace"].as_str().unwrap().to_string());
            match c["type"].as_str().unwrap() {
                "upsert" => {
                    let card = &c["card"];
                    assert!(card.is_object(), "an upsert carries the card: {c}");
                    self.have
                        .insert(id, c["contentHash"].as_str().unwrap().to_string());
                }
                "delete" => {
                    self.have.remove(&id);
                }
                other => panic!("change type {other}"),
            }
        }
        self.cursor = Some(v["metadata"]["nextCursor"].as_str().unwrap().to_string());
        changes.len()
    }

    /// Poll until a page is empty.
    fn catch_up(&mut self, addr: std::net::SocketAddr, host: &str, auth: Option<&str>, view: bool) {
        while self.poll(addr, host, auth, view) > 0 {}
    }
}

/// What the directory lists (native API, every page): identifier → content hash.
fn listing(
    addr: std::net::SocketAddr,
    host: &str,
    auth: Option<&str>,
) -> std::collections::BTreeMap<String, String> {
    let mut out = std::collections::BTreeMap::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/agents?limit=100&cursor={c}"),
            None => "/v1/agents?limit=100".to_string(),
        };
        let mut headers = vec![("Host", host)];
        if let Some(a) = auth {
            headers.push(("Authorization", a));
        }
        let v = json_of(&support::http::request(addr, "GET", &path, &headers));
        for a in v["agents"].as_array().unwrap() {
            let m = &a["_meta"]["agentcard.dev/directory"];
            out.insert(
                m["identifier"].as_str().unwrap().to_string(),
                m["contentHash"].as_str().unwrap().to_string(),
            );
        }
        match v["metadata"]["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => return out,
        }
    }
}

/// Follow until what the follower holds is what the directory lists (or fail after `within`).
async fn converge(
    f: &mut Follower,
    addr: std::net::SocketAddr,
    host: &str,
    auth: Option<&str>,
    view: bool,
    within: Duration,
) {
    let deadline = Instant::now() + within;
    let mut headers = vec![("Host", host)];
    if let Some(a) = auth {
        headers.push(("Authorization", a));
    }
    // A new directory is served, and its feed recorded by the lease holder, within seconds.
    wait_for(within, || {
        std::future::ready(
            support::http::request(addr, "GET", "/v1/changes", &headers).status == 200,
        )
    })
    .await
    .expect("the feed is recorded");
    loop {
        f.catch_up(addr, host, auth, view);
        let listed = listing(addr, host, auth);
        if f.have == listed {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the feed did not end at what is listed:\nfeed: {:?}\nlisted: {:?}",
            f.have,
            listed
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// [`converge`] until the follower holds `want` entries: the feed ending at what is listed is
/// not enough while the directory has not yet seen the last edits (a deletion still in
/// progress is listed, and so followed, until the card is gone).
async fn converge_to(
    f: &mut Follower,
    (addr, host, auth): (std::net::SocketAddr, &str, Option<&str>),
    view: bool,
    want: usize,
    within: Duration,
) {
    let deadline = Instant::now() + within;
    loop {
        converge(f, addr, host, auth, view, within).await;
        if f.have.len() == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the feed holds {} entries, not {want}: {:?}",
            f.have.len(),
            f.have
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_feed_follower_ends_with_what_is_listed_across_a_restart_and_a_hand_over() {
    // Small parts: the log is kept in several ConfigMaps, assembled by each replica.
    let mut p = Platform::start(&["--feed-part-bytes", "1024"]).await;
    let mut flags = support::cluster::OPERATOR_FLAGS.to_vec();
    flags.extend(["--feed-part-bytes", "1024"]);
    let t = rand_tag();
    let team = Tenant::new(&p, &format!("feed-{t}")).await;
    let dname = format!("feed-{t}");
    let dhost = format!("feed-{t}.open.test");
    let selector =
        json!({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": team.ns}}});
    apply_directory(&p, &directory(&dname, &dhost, selector)).await;
    wait_directory(&p, &dname, "Ready", dir_ready(0)).await;
    // A second replica: it serves, the first leads.
    let mut second = support::operator::Operator::start_on(
        support::cluster::kubeconfig(),
        &p.opns,
        None,
        &flags,
    );
    let mut follower = Follower::default();
    wait_for(Duration::from_secs(15), || {
        std::future::ready(get(&p, &dhost, "/v1/changes", &[]).status == 200)
    })
    .await
    .expect("the feed is recorded");

    let mut rng = dircards::Rng(0xfeed);
    let cards: Api<agentcard_operator::crd::AgentCard> = Api::namespaced(p.admin.clone(), &team.ns);
    // A deleted name is not used again: a card re-created under a name whose ConfigMap the
    // garbage collector has not removed yet waits for it (see the note on name reuse).
    let mut names: Vec<String> = (0..40).map(|i| format!("a{i}")).collect();
    let mut live: BTreeSet<String> = BTreeSet::new();
    let mut replicas = vec![p.op.server.addr, second.server.addr];
    for op in 0..1000 {
        let slot = rng.below(names.len());
        let name = &names[slot].clone();
        if live.contains(name) && rng.below(4) == 0 {
            cards.delete(name, &DeleteParams::default()).await.unwrap();
            live.remove(name);
            names[slot] = format!("a{slot}-{op}");
        } else {
            let mut c = card(name, &format!("{name}-{t}.open.test"), "");
            c["spec"]["card"]["description"] = json!(format!("Version {op}."));
            if team.apply(&c).await.is_ok() {
                live.insert(name.clone());
            }
        }
        if op % 25 == 0 {
            let addr = replicas[op / 25 % replicas.len()];
            follower.poll(addr, &dhost, None, false);
        }
        if op == 333 {
            // The follower replica restarts.
            drop(second);
            second = support::operator::Operator::start_on(
                support::cluster::kubeconfig(),
                &p.opns,
                None,
                &flags,
            );
            replicas = vec![p.op.server.addr, second.server.addr];
        }
        if op == 666 {
            // The lease holder stops; the other replica takes over.
            p.op.terminate();
            assert!(
                p.op.wait_exit(Duration::from_secs(20)).is_some(),
                "the holder stops"
            );
            replicas = vec![second.server.addr];
        }
    }
    converge(
        &mut follower,
        second.server.addr,
        &dhost,
        None,
        false,
        Duration::from_secs(120),
    )
    .await;
    assert!(
        !follower.have.is_empty(),
        "nothing is listed at the end:\n{}",
        tail(&second.logs())
    );
    let parts = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(p.admin.clone(), &p.opns)
        .list(&kube::api::ListParams::default().labels("agentcard.dev/content=feed-part"))
        .await
        .unwrap();
    assert!(
        !parts.items.is_empty(),
        "the log was kept in one ConfigMap only"
    );
    println!("the log is kept in {} ConfigMaps", parts.items.len() + 1);
    // A new follower from the start gets the same set.
    let mut fresh = Follower::default();
    fresh.catch_up(second.server.addr, &dhost, None, false);
    assert_eq!(fresh.have, follower.have);
}

/// Read a stream of Server-Sent Events until `want` events of those types arrived (or fail
/// after 30 s); returns `(event, id, data)` of each.
/// Open a change stream on `host` and read until its response head is in: the status.
fn open_stream(addr: std::net::SocketAddr, host: &str) -> (std::net::TcpStream, u16) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let req =
        format!("GET /v1/changes HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\n\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    while !raw.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
    }
    let status = String::from_utf8_lossy(&raw)
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (s, status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_holds_a_bounded_share_of_the_change_streams() {
    let p = Platform::start(&[
        "--max-feed-streams-per-client",
        "3",
        // Clients connect directly (no proxy in between): streams count per address.
        "--max-connections-per-client",
        "100",
    ])
    .await;
    let t = rand_tag();
    let team = Tenant::new(&p, &format!("streams-{t}")).await;
    let dname = format!("streams-{t}");
    let dhost = format!("streams-{t}.open.test");
    let selector =
        json!({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": team.ns}}});
    apply_directory(&p, &directory(&dname, &dhost, selector)).await;
    wait_for(Duration::from_secs(30), || {
        std::future::ready(get(&p, &dhost, "/v1/changes", &[]).status == 200)
    })
    .await
    .expect("the feed is recorded");
    let addr = p.op.server.addr;
    let held: Vec<std::net::TcpStream> = (0..3)
        .map(|i| {
            let (s, status) = open_stream(addr, &dhost);
            assert_eq!(status, 200, "stream {i}");
            s
        })
        .collect();
    // The fourth of the same client: 429, told when to come back; plain pages still answer.
    let (_, status) = open_stream(addr, &dhost);
    assert_eq!(status, 429);
    assert_eq!(get(&p, &dhost, "/v1/changes", &[]).status, 200);
    // A stream closed is a stream the client may open again.
    drop(held);
    let reopened = wait_for(Duration::from_secs(10), || {
        std::future::ready(open_stream(addr, &dhost).1 == 200)
    })
    .await;
    assert!(reopened.is_ok(), "a closed stream's slot comes back");
}

fn read_events(
    addr: std::net::SocketAddr,
    path: &str,
    host: &str,
    last_event_id: Option<&str>,
    want: usize,
) -> Vec<(String, String, Value)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\n");
    if let Some(id) = last_event_id {
        req.push_str(&format!("Last-Event-ID: {id}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut raw = String::new();
    let mut buf = [0u8; 65536];
    loop {
        let events = parse_events(&raw);
        if events.len() >= want {
            assert!(raw.starts_with("HTTP/1.1 200"), "{raw}");
            assert!(
                raw.to_ascii_lowercase()
                    .contains("content-type: text/event-stream"),
                "{raw}"
            );
            return events;
        }
        assert!(
            Instant::now() < deadline,
            "{} events of {want}: {raw}",
            events.len()
        );
        match s.read(&mut buf) {
            Ok(0) => panic!("stream closed: {raw}"),
            Ok(n) => raw.push_str(&String::from_utf8_lossy(&buf[..n])),
            Err(_) => {}
        }
    }
}

fn parse_events(raw: &str) -> Vec<(String, String, Value)> {
    let mut out = Vec::new();
    let mut id = String::new();
    let mut event = String::new();
    for line in raw.lines() {
        if let Some(v) = line.strip_prefix("id: ") {
            id = v.to_string();
        } else if let Some(v) = line.strip_prefix("event: ") {
            event = v.to_string();
        } else if let Some(v) = line.strip_prefix("data: ") {
            out.push((event.clone(), id.clone(), serde_json::from_str(v).unwrap()));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn feed_cursors_expire_past_retention_and_streams_resume_from_the_last_event() {
    let p = Platform::start(&["--feed-retention", "2"]).await;
    let t = rand_tag();
    let team = Tenant::new(&p, &format!("fr-{t}")).await;
    let dname = format!("fr-{t}");
    let dhost = format!("fr-{t}.open.test");
    let selector =
        json!({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": team.ns}}});
    apply_directory(&p, &directory(&dname, &dhost, selector)).await;
    for n in ["e1", "e2", "e3", "e4"] {
        team.apply(&card(n, &format!("{n}-{t}.open.test"), ""))
            .await
            .unwrap();
    }
    wait_directory(&p, &dname, "Ready with 4 cards", dir_ready(4)).await;
    let mut f = Follower::default();
    converge(
        &mut f,
        p.op.server.addr,
        &dhost,
        None,
        false,
        Duration::from_secs(30),
    )
    .await;
    let start = f.cursor.clone().unwrap();

    // A stream from `start` sees the next change, then is closed.
    let id_of = |n: &str| format!("urn:air:{n}-{t}.open.test:{}:{n}", team.ns);
    team.apply(&card("e5", &format!("e5-{t}.open.test"), ""))
        .await
        .unwrap();
    let events = read_events(
        p.op.server.addr,
        &format!("/v1/changes?since={start}"),
        &dhost,
        None,
        1,
    );
    assert_eq!(events[0].0, "upsert");
    assert_eq!(events[0].2["identifier"], id_of("e5"));
    assert!(events[0].2["card"].is_object());
    let resume = events[0].1.clone();
    // Changes while it is closed arrive when it resumes with Last-Event-ID, and nothing before.
    team.apply(&card("e6", &format!("e6-{t}.open.test"), ""))
        .await
        .unwrap();
    team.delete("e1").await;
    let events = read_events(p.op.server.addr, "/v1/changes", &dhost, Some(&resume), 2);
    let got: BTreeSet<(String, String)> = events
        .iter()
        .map(|(e, _, d)| (e.clone(), d["identifier"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(
        got,
        [
            ("delete".to_string(), id_of("e1")),
            ("upsert".to_string(), id_of("e6"))
        ]
        .into()
    );

    // Bad cursors: 400 naming the parameter.
    let r = get(&p, &dhost, "/v1/changes?since=not-a-cursor", &[]);
    assert_eq!(r.status, 400);
    assert!(json_of(&r)["message"]
        .as_str()
        .unwrap()
        .starts_with("since: "));
    let r = get(&p, &dhost, "/v1/changes?limit=0", &[]);
    assert_eq!(r.status, 400);
    // Three more deletes leave four tombstones where two are kept: `start` has expired.
    for n in ["e2", "e3", "e4"] {
        team.delete(n).await;
    }
    let expired = wait_for(Duration::from_secs(30), || {
        std::future::ready(
            get(&p, &dhost, &format!("/v1/changes?since={start}"), &[]).status == 410,
        )
    })
    .await;
    let r = get(&p, &dhost, &format!("/v1/changes?since={start}"), &[]);
    assert!(
        expired.is_ok(),
        "{} {}",
        r.status,
        String::from_utf8_lossy(&r.body)
    );
    assert_eq!(json_of(&r)["error"]["code"], "CURSOR_EXPIRED");
    // A client that re-lists and follows from the latest cursor is whole again.
    let mut again = Follower::default();
    converge(
        &mut again,
        p.op.server.addr,
        &dhost,
        None,
        false,
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(again.have.len(), 2, "e5 and e6: {:?}", again.have);
}

/// A Kubernetes-mode directory `name` (host `<name>.open.test`) over `namespaces`: its host.
async fn kubernetes_directory(p: &Platform, name: &str, namespaces: &[&str]) -> String {
    let host = format!("{name}.open.test");
    let selector = json!({"namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": namespaces}]},
        "access": {"mode": "Kubernetes"}});
    apply_directory(p, &directory(name, &host, selector)).await;
    host
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_kubernetes_mode_the_feed_shows_a_caller_only_the_namespaces_it_may_read() {
    let p = Platform::start(&[]).await;
    let t = rand_tag();
    let a = Tenant::new(&p, &format!("fk-a-{t}")).await;
    let b = Tenant::new(&p, &format!("fk-b-{t}")).await;
    let dhost = kubernetes_directory(&p, &format!("fk-{t}"), &[&a.ns, &b.ns]).await;
    let token_a = format!(
        "Bearer {}",
        service_account_token(&p, &a.ns, "feed-a", &[&a.ns]).await
    );
    let token_both = format!(
        "Bearer {}",
        service_account_token(&p, &b.ns, "feed-both", &[&a.ns, &b.ns]).await
    );
    wait_for(Duration::from_secs(15), || {
        std::future::ready(get(&p, &dhost, "/v1/changes", &[]).status == 401)
    })
    .await
    .expect("the feed asks for a token");
    let mut fa = Follower::default();
    let mut fboth = Follower::default();
    for round in 0..3 {
        for (tenant, tag) in [(&a, "a"), (&b, "b")] {
            for i in 0..3 {
                let name = format!("{tag}{i}");
                let mut c = card(&name, &format!("{name}-{t}.open.test"), "");
                c["spec"]["card"]["description"] = json!(format!("Round {round}."));
                tenant.apply(&c).await.unwrap();
            }
            if round == 2 {
                tenant.delete(&format!("{tag}0")).await;
            }
        }
        fa.poll(p.op.server.addr, &dhost, Some(&token_a), true);
        fboth.poll(p.op.server.addr, &dhost, Some(&token_both), true);
    }
    let addr = p.op.server.addr;
    let within = Duration::from_secs(60);
    converge_to(&mut fa, (addr, &dhost, Some(&token_a)), true, 2, within).await;
    converge_to(
        &mut fboth,
        (addr, &dhost, Some(&token_both)),
        true,
        4,
        within,
    )
    .await;
    assert_eq!(
        fa.namespaces,
        [a.ns.clone()].into(),
        "the a-only caller saw another namespace's changes"
    );
    assert_eq!(fa.have.len(), 2);
    assert_eq!(fboth.namespaces, [a.ns.clone(), b.ns.clone()].into());
    assert_eq!(fboth.have.len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_kubernetes_mode_a_cursor_opens_only_for_its_caller_and_hidden_changes_are_not_countable(
) {
    use agentcard_operator::directory::feed::{namespace_hash, Cursor};
    let mut p = Platform::start(&[]).await;
    let t = rand_tag();
    let victim = Tenant::new(&p, &format!("fs-a-{t}")).await;
    let evil = Tenant::new(&p, &format!("fs-evil-{t}")).await;
    let dhost = kubernetes_directory(&p, &format!("fs-{t}"), &[&victim.ns, &evil.ns]).await;
    let token_victim = format!(
        "Bearer {}",
        service_account_token(&p, &victim.ns, "reader", &[&victim.ns]).await
    );
    let token_evil = format!(
        "Bearer {}",
        service_account_token(&p, &evil.ns, "reader", &[&evil.ns]).await
    );
    evil.apply(&card("e0", &format!("e0-{t}.open.test"), ""))
        .await
        .unwrap();
    for i in 0..3 {
        let name = format!("v{i}");
        victim
            .apply(&card(&name, &format!("{name}-{t}.open.test"), ""))
            .await
            .unwrap();
    }
    let addr = p.op.server.addr;
    for (token, want) in [(&token_victim, 3), (&token_evil, 1)] {
        let listed = wait_for(Duration::from_secs(60), || {
            let r = get(
                &p,
                &dhost,
                "/v1/agents?limit=100",
                &[("Authorization", token)],
            );
            let n = serde_json::from_slice::<Value>(&r.body)
                .ok()
                .and_then(|v| v["agents"].as_array().map(Vec::len));
            std::future::ready(n == Some(want))
        })
        .await;
        assert!(listed.is_ok(), "{want} cards listed");
    }
    let mut fv = Follower::default();
    converge(
        &mut fv,
        addr,
        &dhost,
        Some(&token_victim),
        true,
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(fv.have.len(), 3);
    let mut fe = Follower::default();
    converge(
        &mut fe,
        addr,
        &dhost,
        Some(&token_evil),
        true,
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(fe.have.len(), 1);
    let evil_cursor = fe.cursor.clone().unwrap();
    fn feed_page(p: &Platform, host: &str, cursor: &str, auth: &str, param: &str) -> Resp {
        let (path, mut headers) = match param {
            "since" => (format!("/v1/changes?since={cursor}"), vec![]),
            _ => ("/v1/changes".to_string(), vec![("Last-Event-ID", cursor)]),
        };
        headers.push(("Authorization", auth));
        get(p, host, &path, &headers)
    }
    let quiet = feed_page(&p, &dhost, &evil_cursor, &token_evil, "since");
    assert_eq!(quiet.status, 200);
    assert_eq!(json_of(&quiet)["metadata"]["count"], 0);

    // The victim's cards change and go: tombstones in a namespace the attacker may not read.
    for i in 0..3 {
        victim.delete(&format!("v{i}")).await;
    }
    for i in 3..8 {
        let name = format!("v{i}");
        victim
            .apply(&card(&name, &format!("{name}-{t}.open.test"), ""))
            .await
            .unwrap();
    }
    // Listed first (a converge could end at a listing that has only some of them yet).
    let listed = wait_for(Duration::from_secs(60), || {
        std::future::ready(listing(addr, &dhost, Some(&token_victim)).len() == 5)
    })
    .await;
    assert!(listed.is_ok(), "the victim's 5 cards are listed");
    converge(
        &mut fv,
        addr,
        &dhost,
        Some(&token_victim),
        true,
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(fv.have.len(), 5);

    // The old attack: a cursor that claims the victim's namespace was readable before.
    let epoch = evil_cursor
        .strip_prefix("2.")
        .and_then(|r| r.split('.').next())
        .expect("a sealed cursor names its log")
        .to_string();
    let forged = Cursor {
        epoch,
        seq: 0,
        seen: Some([namespace_hash(&victim.ns), namespace_hash(&evil.ns)].into()),
    }
    .encode();
    let mut altered = evil_cursor.clone().into_bytes();
    let last = altered.len() - 2;
    altered[last] = if altered[last] == b'A' { b'B' } else { b'A' };
    let altered = String::from_utf8(altered).unwrap();
    let victims = fv.cursor.clone().unwrap();
    for (what, cursor) in [
        ("forged", &forged),
        ("altered", &altered),
        ("the victim's", &victims),
    ] {
        for param in ["since", "Last-Event-ID"] {
            let r = feed_page(&p, &dhost, cursor, &token_evil, param);
            let body = String::from_utf8_lossy(&r.body).to_string();
            assert_eq!(r.status, 400, "{what} cursor in {param}: {body}");
            assert!(
                json_of(&r)["error"]["message"]
                    .as_str()
                    .unwrap()
                    .starts_with(&format!("{param}: ")),
                "{what}: {body}"
            );
            assert!(!body.contains(&victim.ns), "{what}: {body}");
        }
    }
    // Its own cursor: nothing for it, and nothing that counts what it cannot see — no
    // sequence numbers, and a page of the same size as before the victim's changes.
    let after = feed_page(&p, &dhost, &evil_cursor, &token_evil, "since");
    assert_eq!(after.status, 200);
    let v = json_of(&after);
    assert_eq!(v["metadata"]["count"], 0, "{v}");
    assert_eq!(after.body.len(), quiet.body.len(), "{v}");
    assert!(!String::from_utf8_lossy(&after.body).contains(&victim.ns));
    // An edit of its own comes through without a `seq`.
    let mut e0 = card("e0", &format!("e0-{t}.open.test"), "");
    e0["spec"]["card"]["description"] = json!("Edited.");
    evil.apply(&e0).await.unwrap();
    let seen = wait_for(Duration::from_secs(30), || {
        let r = feed_page(&p, &dhost, &evil_cursor, &token_evil, "since");
        std::future::ready(json_of(&r)["metadata"]["count"] == 1)
    })
    .await;
    assert!(seen.is_ok(), "the caller's own change arrives");
    let own = json_of(&feed_page(&p, &dhost, &evil_cursor, &token_evil, "since"));
    assert!(own["changes"][0].get("seq").is_none(), "{own}");
    assert_eq!(own["changes"][0]["namespace"], json!(evil.ns));

    // Across a restart (and so a hand-over: a new process takes the lease), the caller's
    // cursor still opens, and the victim's still does not open for it.
    p.op.kill();
    p.op = support::operator::Operator::start_on(
        support::cluster::kubeconfig(),
        &p.opns,
        None,
        support::cluster::OPERATOR_FLAGS,
    );
    p.op.wait_ready();
    let again = wait_for(Duration::from_secs(30), || {
        std::future::ready(feed_page(&p, &dhost, &evil_cursor, &token_evil, "since").status == 200)
    })
    .await;
    assert!(
        again.is_ok(),
        "the caller's cursor opens on the new process"
    );
    assert_eq!(
        feed_page(&p, &dhost, &victims, &token_evil, "since").status,
        400
    );
    assert_eq!(
        feed_page(&p, &dhost, &victims, &token_victim, "since").status,
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_ard_upstream_reaches_no_internal_address_lists_no_non_card_and_shadows_nothing()
{
    let p = Platform::start(&[]).await;
    let t = rand_tag();
    let team = Tenant::new(&p, &format!("fh-{t}")).await;
    team.apply(&card("local", &format!("local-{t}.open.test"), ""))
        .await
        .unwrap();
    let local_host = format!("local-{t}.open.test");
    // An "internal service": a JSON document that is no card.
    let internal = support::upstream::Canned::start(|_| {
        support::upstream::json_response(r#"{"instance-id":"i-123","secret":"s3cr3t"}"#)
    });
    // A registry that lists: the internal document by URL, a real card inline, one claiming
    // the local card's namespace/name, one with a 2 MB identifier, and more than maxEntries.
    let real = card("r1", "r1.ard.example", "")["spec"]["card"].to_string();
    let claim = card("local", "evil.example", "")["spec"]["card"]
        .to_string()
        .replace("An agent.", "A shadow.");
    let (ns, internal_addr) = (team.ns.clone(), internal.addr);
    let huge = format!("urn:air:x:{}", "a".repeat(2 * 1024 * 1024));
    let registry = support::upstream::Canned::start(move |line| {
        let items = vec![
            json!({"identifier": "urn:air:ard.example:x:internal", "displayName": "i", "type": agentcard_operator::directory::ard::TYPE_A2A,
                   "url": format!("http://{internal_addr}/latest/meta-data")}),
            json!({"identifier": "urn:air:ard.example:x:r1", "displayName": "r1", "type": agentcard_operator::directory::ard::TYPE_A2A,
                   "data": serde_json::from_str::<Value>(&real).unwrap()}),
            json!({"identifier": format!("urn:air:evil.example:{ns}:local"), "displayName": "s",
                   "type": agentcard_operator::directory::ard::TYPE_A2A, "data": serde_json::from_str::<Value>(&claim).unwrap()}),
            json!({"identifier": huge, "displayName": "h", "type": agentcard_operator::directory::ard::TYPE_A2A, "data": {}}),
        ];
        let mut extra: Vec<Value> = (0..50)
            .map(|i| {
                json!({"identifier": format!("urn:air:ard.example:x:more{i:02}"),
                "displayName": "m", "type": agentcard_operator::directory::ard::TYPE_A2A,
                "data": serde_json::from_str::<Value>(&real).unwrap()})
            })
            .collect();
        let body = if line.contains("pageToken=2") {
            json!({"items": extra.split_off(25)})
        } else if line.contains("pageToken=1") {
            extra.truncate(25);
            json!({"items": extra, "pageToken": "2"})
        } else {
            json!({"items": items, "pageToken": "1"})
        };
        support::upstream::json_response(&body.to_string())
    });
    let (dname, dhost) = (format!("fh-{t}"), format!("fh-{t}.open.test"));
    let mut spec = directory(
        &dname,
        &dhost,
        json!({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": team.ns}}}),
    );
    let reg = format!("http://{}", registry.addr);
    let by_name = format!("http://localhost:{}", registry.addr.port());
    // The API server's address (the `kubernetes` Service's), inside a range the spec names.
    let api_ip =
        kube::Api::<k8s_openapi::api::core::v1::Service>::namespaced(p.admin.clone(), "default")
            .get("kubernetes")
            .await
            .unwrap()
            .spec
            .unwrap()
            .cluster_ip
            .unwrap();
    let api_range = format!("{}.0.0.0/8", api_ip.split('.').next().unwrap());
    let api_url = format!("https://{api_ip}/");
    spec["spec"]["upstreams"] = json!([
        // Named explicitly: loopback allowed, plain HTTP allowed.
        {"name": "hostile", "url": reg, "kind": "ARD", "refreshSeconds": 5, "maxEntries": 10,
         "allowHttp": true, "allowAddresses": ["127.0.0.0/8"]},
        // Not named: plain HTTP refused; loopback refused, by address or by a name.
        {"name": "no-http", "url": reg, "kind": "ARD", "refreshSeconds": 5,
         "allowAddresses": ["127.0.0.0/8"]},
        {"name": "no-loopback", "url": reg, "kind": "ARD", "refreshSeconds": 5, "allowHttp": true},
        {"name": "no-loopback-name", "url": by_name, "kind": "ARD", "refreshSeconds": 5, "allowHttp": true},
        // The API server: refused even inside a named range.
        {"name": "api-server", "url": api_url, "kind": "ARD", "refreshSeconds": 5,
         "allowAddresses": [api_range]},
    ]);
    apply_directory(&p, &spec).await;
    let d = wait_upstreams(&p, &dname, "every upstream judged", |u| {
        u.len() == 5
            && u[0].reachable
            && u[0].entries > 0
            && u[1..].iter().all(|x| !x.reachable && x.message.is_some())
    })
    .await;
    let u = &d.status.as_ref().unwrap().upstreams;
    let message = |i: usize| u[i].message.clone().unwrap_or_default();
    assert!(message(1).contains("allowHttp"), "{}", message(1));
    assert!(
        message(2).contains("127.0.0.1 is not an address"),
        "{}",
        message(2)
    );
    assert!(
        message(3).contains("resolves to no address"),
        "{}",
        message(3)
    );
    assert!(
        message(4).contains("the Kubernetes API server's address"),
        "{}",
        message(4)
    );
    // Status text from an upstream is cut: the 2 MB identifier is named by 1 KiB of it.
    assert!(message(0).len() < 4096, "{} bytes", message(0).len());
    // What is listed: the real card and the first of the rest up to maxEntries; never the
    // internal document, the 2 MB identifier, or entries past maxEntries.
    let v = json_of(&get(&p, &dhost, "/v1/agents?limit=100", &[]));
    let names: Vec<String> = v["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            a["_meta"]["agentcard.dev/directory"]["identifier"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert!(
        names.contains(&"urn:air:ard.example:x:r1".to_string()),
        "{names:?}"
    );
    assert!(!names.iter().any(|n| n.ends_with(":internal")), "{names:?}");
    assert!(!names.iter().any(|n| n.len() > 1000));
    assert!(
        !String::from_utf8_lossy(&get(&p, &dhost, "/v1/agents?limit=100", &[]).body)
            .contains("s3cr3t")
    );
    assert!(
        u[0].entries <= 10,
        "{} entries past maxEntries 10",
        u[0].entries
    );
    assert!(u[0].refused > 0);
    // The local card keeps its own namespace/name: the native item and the HTML page are the
    // local one's, and its origin is none.
    let path = format!("/v1/agents/{}/local", team.ns);
    wait_for(Duration::from_secs(30), || {
        std::future::ready(
            get(&p, &dhost, &path, &[]).status == 200
                && p.get(&local_host, "/.well-known/agent-card.json").status == 200,
        )
    })
    .await
    .expect("the local card is listed");
    let item = get(&p, &dhost, &path, &[]);
    assert_eq!(item.status, 200);
    assert_eq!(
        raw_card(&item).as_bytes(),
        &p.get(&local_host, "/.well-known/agent-card.json").body[..]
    );
    assert!(json_of(&item)["_meta"]["agentcard.dev/directory"]
        .get("origin")
        .is_none());
    let html = get(
        &p,
        &dhost,
        &format!("/agents/{}/local", team.ns),
        &[("Accept", "text/html")],
    );
    assert!(!String::from_utf8_lossy(&html.body).contains("A shadow."));
    // The federated entry's origin says where the operator read it.
    let r1 = v["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["_meta"]["agentcard.dev/directory"]["identifier"] == "urn:air:ard.example:x:r1")
        .unwrap()
        .clone();
    let origin_url = r1["_meta"]["agentcard.dev/directory"]["origin"]["url"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(origin_url.starts_with(&reg), "{origin_url}");
}

/// The native page's agents: name → (upstream, verified) for federated ones, `None` for local.
fn origins(v: &Value) -> std::collections::BTreeMap<String, Option<(String, bool)>> {
    v["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            let m = &a["_meta"]["agentcard.dev/directory"];
            let origin = m.get("origin").map(|o| {
                (
                    o["upstream"].as_str().unwrap().to_string(),
                    o["verified"].as_bool().unwrap(),
                )
            });
            (m["name"].as_str().unwrap().to_string(), origin)
        })
        .collect()
}

/// The exact bytes of the card a native item carries.
fn raw_card(r: &Resp) -> String {
    #[derive(serde::Deserialize)]
    struct Item {
        card: Box<serde_json::value::RawValue>,
    }
    let item: Item = serde_json::from_slice(&r.body).unwrap();
    item.card.get().to_string()
}

async fn wait_upstreams(
    p: &Platform,
    dir: &str,
    what: &str,
    pred: impl Fn(&[agentcard_operator::crd::agentdirectory::UpstreamStatus]) -> bool,
) -> AgentDirectory {
    wait_directory(p, dir, what, |d| {
        d.status.as_ref().is_some_and(|s| pred(&s.upstreams))
    })
    .await
}

fn upstreams_ready(d: &AgentDirectory) -> Option<String> {
    let s = d.status.as_ref()?;
    s.conditions
        .iter()
        .find(|c| c.type_ == "UpstreamsReady")
        .map(|c| c.status.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_federates_another_through_its_change_feed() {
    let p = Platform::start(&[]).await;
    let t = rand_tag();
    let a = Tenant::new(&p, &format!("fa-{t}")).await;
    let b = Tenant::new(&p, &format!("fb-{t}")).await;
    let (adir, bdir) = (format!("fa-{t}"), format!("fb-{t}"));
    let (ahost, bhost) = (format!("fa-{t}.open.test"), format!("fb-{t}.open.test"));
    let sel = |ns: &str| json!({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}});
    let host = |n: &str| format!("{n}-{t}.open.test");
    apply_directory(&p, &directory(&adir, &ahost, sel(&a.ns))).await;
    for n in ["a1", "a2"] {
        a.apply(&card(n, &host(n), "")).await.unwrap();
    }
    b.apply(&card("b1", &host("b1"), "")).await.unwrap();
    wait_directory(&p, &adir, "Ready with 2 cards", dir_ready(2)).await;
    // A's directory and JWKS as B reaches them (through what would be A's Ingress).
    let feed = support::upstream::Proxy::start(p.op.server.addr, &ahost);
    let keys = support::upstream::Proxy::start(p.op.server.addr, &host("a1"));
    let mut spec = directory(&bdir, &bhost, sel(&b.ns));
    spec["spec"]["upstreams"] = json!([{
        "name": "a", "url": format!("http://{}", feed.addr), "refreshSeconds": 5, "allowHttp": true, "allowAddresses": ["127.0.0.0/8"],
        "trust": {"jwksUrl": format!("http://{}/.well-known/jwks.json", keys.addr)}
    }]);
    apply_directory(&p, &spec).await;

    // B lists its own card and A's, each of A's with its origin, verified with A's keys.
    wait_listed(&p, &bhost, &["a1", "a2", "b1"]).await;
    let listed = origins(&json_of(&get(&p, &bhost, "/v1/agents", &[])));
    assert_eq!(listed["a1"], Some(("a".to_string(), true)));
    assert_eq!(listed["b1"], None);
    let d = wait_upstreams(&p, &bdir, "upstream a synced with 2 entries", |u| {
        u.len() == 1 && u[0].entries == 2 && u[0].reachable
    })
    .await;
    assert_eq!(upstreams_ready(&d).as_deref(), Some("True"));
    // The bytes B serves are A's, and verify with the Python SDK against A's JWKS.
    let served_by_a = p.get(&host("a1"), "/.well-known/agent-card.json").body;
    let in_b = raw_card(&get(&p, &bhost, &format!("/v1/agents/{}/a1", a.ns), &[]));
    assert_eq!(in_b.as_bytes(), &served_by_a[..], "B serves A's bytes");
    let jwks = p.get(&host("a1"), "/.well-known/jwks.json").body;
    let verdict = support::python_sdk_verdict(in_b.as_bytes(), &jwks);
    assert!(verdict.valid, "{verdict:?}");
    // The ARD views say where it came from.
    let ard = json_of(&get(&p, &bhost, "/agents", &[]));
    let a1_id = format!("urn:air:{}:{}:a1", host("a1"), a.ns);
    let entry = ard["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["identifier"] == a1_id)
        .expect("a1 in B's ARD listing")
        .clone();
    assert_eq!(entry["metadata"]["originUpstream"], "a");
    assert_eq!(entry["metadata"]["originVerified"], true);
    assert_eq!(entry["provenance"][0]["relation"], "copiedFrom");
    assert_schema("ListResponse", &ard);

    // An edit under A changes B; a delete under A removes it from B and B's feed says so.
    let mut follower = Follower::default();
    converge(
        &mut follower,
        p.op.server.addr,
        &bhost,
        None,
        false,
        Duration::from_secs(30),
    )
    .await;
    let mut edited = card("a1", &host("a1"), "");
    edited["spec"]["card"]["description"] = json!("Edited under A.");
    edited["spec"]["lifecycle"] = json!({"state": "Deprecated", "message": "moving on"});
    a.apply(&edited).await.unwrap();
    a.delete("a2").await;
    wait_listed(&p, &bhost, &["a1", "b1"]).await;
    let ok = wait_for(Duration::from_secs(30), || {
        let r = get(&p, &bhost, &format!("/v1/agents/{}/a1", a.ns), &[]);
        let now_a = p.get(&host("a1"), "/.well-known/agent-card.json").body;
        std::future::ready(r.status == 200 && raw_card(&r).as_bytes() == &now_a[..])
    })
    .await;
    assert!(ok.is_ok(), "B serves A's edited card");
    // ... and says what A says of it: deprecated, reachability unknown (no backend).
    let ok = wait_for(Duration::from_secs(30), || {
        let m = json_of(&get(&p, &bhost, &format!("/v1/agents/{}/a1", a.ns), &[]))["_meta"]
            ["agentcard.dev/directory"]
            .clone();
        std::future::ready(
            m["lifecycle"]["state"] == "Deprecated"
                && m["lifecycle"]["message"] == "moving on"
                && m["reachable"] == "unknown",
        )
    })
    .await;
    assert!(ok.is_ok(), "B shows A's lifecycle");
    // The ARD views agree: a1 with its new content hash, a2 gone.
    let a2_id = format!("urn:air:{}:{}:a2", host("a2"), a.ns);
    let edited_hash = json_of(&get(&p, &bhost, &format!("/v1/agents/{}/a1", a.ns), &[]))["_meta"]
        ["agentcard.dev/directory"]["contentHash"]
        .clone();
    let ard = json_of(&get(&p, &bhost, "/agents", &[]));
    let ids: Vec<&str> = ard["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["identifier"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&a1_id.as_str()) && !ids.contains(&a2_id.as_str()),
        "{ids:?}"
    );
    let one = json_of(&get(&p, &bhost, &format!("/agents/{a1_id}"), &[]));
    assert_eq!(one["metadata"]["contentHash"], edited_hash, "{one}");
    converge(
        &mut follower,
        p.op.server.addr,
        &bhost,
        None,
        false,
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(follower.have.len(), 2);
    assert!(!follower.have.contains_key(&a2_id));
    assert_eq!(
        Some(&follower.have[&a1_id]),
        edited_hash.as_str().map(str::to_string).as_ref()
    );

    // A unreachable: B keeps the entries and says so.
    feed.stop();
    let d = wait_upstreams(&p, &bdir, "upstream a unreachable", |u| {
        u.len() == 1 && !u[0].reachable
    })
    .await;
    assert_eq!(upstreams_ready(&d).as_deref(), Some("False"));
    wait_listed(&p, &bhost, &["a1", "b1"]).await;
    a.apply(&card("a3", &host("a3"), "")).await.unwrap();
    wait_directory(&p, &adir, "Ready with 2 cards", dir_ready(2)).await;
    // A back: B catches up from its cursor, without reading A's feed from the start again.
    let before = feed.requests().len();
    let feed = feed.restart();
    wait_listed(&p, &bhost, &["a1", "a3", "b1"]).await;
    wait_upstreams(&p, &bdir, "upstream a reachable again", |u| u[0].reachable).await;
    let after: Vec<String> = feed.requests()[before..].to_vec();
    assert!(!after.is_empty());
    assert!(
        after.iter().all(|l| l.contains("since=")),
        "a request read the feed from the start: {after:#?}"
    );
    println!(
        "caught up after A came back with {} requests: {after:?}",
        after.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn federation_refuses_what_it_cannot_trust_and_loses_nothing_local() {
    let p = Platform::start(&[]).await;
    let t = rand_tag();
    let a = Tenant::new(&p, &format!("ha-{t}")).await;
    let b = Tenant::new(&p, &format!("hb-{t}")).await;
    let (adir, bdir) = (format!("ha-{t}"), format!("hb-{t}"));
    let (ahost, bhost) = (format!("ha-{t}.open.test"), format!("hb-{t}.open.test"));
    let sel = |ns: &str| json!({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}});
    let host = |n: &str| format!("{n}-{t}.open.test");
    a.apply(&card("a1", &host("a1"), "")).await.unwrap();
    b.apply(&card("b1", &host("b1"), "")).await.unwrap();
    let a1 = wait_card(&p, &a.ns, "a1", "Ready", ready).await;
    let b1 = wait_card(&p, &b.ns, "b1", "Ready", ready).await;
    // Ready is written before the card server has read the ConfigMap back: wait until both
    // cards are served before reading their bytes.
    wait_served(
        &p,
        &host("a1"),
        agentcard_operator::contract::PATH_CARD,
        hash_of(&a1).as_deref(),
    )
    .await;
    wait_served(
        &p,
        &host("b1"),
        agentcard_operator::contract::PATH_CARD,
        hash_of(&b1).as_deref(),
    )
    .await;
    let a1_bytes =
        String::from_utf8(p.get(&host("a1"), "/.well-known/agent-card.json").body).unwrap();
    let b1_id = format!("urn:air:{}:{}:b1", host("b1"), b.ns);

    // Hostile upstreams: a 50 MiB answer, a redirect elsewhere, a forged signature, a claim
    // on B's own card's identifier.
    let big = support::upstream::Canned::start(|_| {
        let mut r = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 52428800\r\n\r\n".to_vec();
        r.extend(std::iter::repeat_n(b' ', 1 << 20));
        r
    });
    let redirect = support::upstream::Canned::start(|_| {
        b"HTTP/1.1 302 Found\r\nLocation: http://169.254.169.254/latest\r\nContent-Length: 0\r\n\r\n".to_vec()
    });
    let page = |identifier: String, card: String| {
        let body = format!(
            r#"{{"changes":[{{"seq":1,"type":"upsert","identifier":"{identifier}","namespace":"x","name":"x","card":{card}}}],"metadata":{{"nextCursor":"c","registry":"urn:air:hostile.example:agentcard-operator:h"}}}}"#
        );
        move |line: &str| {
            if line.contains("since=") {
                support::upstream::json_response(r#"{"changes":[],"metadata":{"nextCursor":"c"}}"#)
            } else {
                support::upstream::json_response(&body)
            }
        }
    };
    let forged_card = a1_bytes.replace("An agent.", "A forged agent.");
    assert_ne!(forged_card, a1_bytes);
    let forged = support::upstream::Canned::start(page(
        format!("urn:air:{}:{}:forged", host("a1"), a.ns),
        forged_card,
    ));
    let claim = support::upstream::Canned::start(page(b1_id.clone(), a1_bytes.clone()));
    let keys = support::upstream::Proxy::start(p.op.server.addr, &host("a1"));
    let jwks_url = format!("http://{}/.well-known/jwks.json", keys.addr);
    // The same keys in a Secret of the operator's namespace (trust.jwks).
    let jwks_secret = format!("trusted-jwks-{t}");
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
        "metadata": {"name": jwks_secret},
        "stringData": {"jwks.json": String::from_utf8(p.get(&host("a1"), "/.well-known/jwks.json").body).unwrap()}
    }))
    .unwrap();
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(p.admin.clone(), &p.opns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let mut spec = directory(&bdir, &bhost, sel(&b.ns));
    spec["spec"]["upstreams"] = json!([
        {"name": "big", "url": format!("http://{}", big.addr), "refreshSeconds": 5, "allowHttp": true, "allowAddresses": ["127.0.0.0/8"]},
        {"name": "redirect", "url": format!("http://{}", redirect.addr), "refreshSeconds": 5, "allowHttp": true, "allowAddresses": ["127.0.0.0/8"]},
        {"name": "forged", "url": format!("http://{}", forged.addr), "refreshSeconds": 5, "allowHttp": true, "allowAddresses": ["127.0.0.0/8"], "trust": {"jwksUrl": jwks_url}},
        {"name": "claim", "url": format!("http://{}", claim.addr), "refreshSeconds": 5, "allowHttp": true, "allowAddresses": ["127.0.0.0/8"]},
        {"name": "forged-secret", "url": format!("http://{}", forged.addr), "refreshSeconds": 5, "allowHttp": true, "allowAddresses": ["127.0.0.0/8"], "trust": {"jwks": {"name": jwks_secret}}},
    ]);
    apply_directory(&p, &spec).await;
    let d = wait_upstreams(&p, &bdir, "every hostile upstream judged", |u| {
        u.len() == 5
            && u[4].refused == 1
            && !u[0].reachable
            && !u[1].reachable
            && u[2].reachable
            && u[2].refused == 1
            && u[3].shadowed == 1
    })
    .await;
    let u = &d.status.as_ref().unwrap().upstreams;
    let message = |i: usize| u[i].message.clone().unwrap_or_default();
    assert!(message(0).contains("larger than"), "{}", message(0));
    assert!(message(1).contains("another origin"), "{}", message(1));
    assert!(
        message(2).contains("no signature verifies"),
        "{}",
        message(2)
    );
    assert!(message(3).contains(&b1_id), "{}", message(3));
    assert!(
        message(4).contains(&format!(
            "no signature verifies with the trusted keys (Secret {jwks_secret})"
        )),
        "{}",
        message(4)
    );
    assert_eq!(upstreams_ready(&d).as_deref(), Some("False"));
    // Nothing local lost: B lists its own card, with its own bytes.
    wait_listed(&p, &bhost, &["b1"]).await;
    let mine = raw_card(&get(&p, &bhost, &format!("/v1/agents/{}/b1", b.ns), &[]));
    assert_eq!(
        mine.as_bytes(),
        &p.get(&host("b1"), "/.well-known/agent-card.json").body[..]
    );

    // A loop: A federates B and B federates A. Each lists the other's card once, and refuses
    // its own read back.
    let to_a = support::upstream::Proxy::start(p.op.server.addr, &ahost);
    let to_b = support::upstream::Proxy::start(p.op.server.addr, &bhost);
    let mut aspec = directory(&adir, &ahost, sel(&a.ns));
    aspec["spec"]["upstreams"] = json!([{"name": "b", "url": format!("http://{}", to_b.addr), "refreshSeconds": 5, "allowHttp": true, "allowAddresses": ["127.0.0.0/8"]}]);
    apply_directory(&p, &aspec).await;
    spec["spec"]["upstreams"] = json!([{"name": "a", "url": format!("http://{}", to_a.addr), "refreshSeconds": 5, "allowHttp": true, "allowAddresses": ["127.0.0.0/8"]}]);
    apply_directory(&p, &spec).await;
    wait_listed(&p, &ahost, &["a1", "b1"]).await;
    wait_listed(&p, &bhost, &["a1", "b1"]).await;
    let d = wait_upstreams(
        &p,
        &adir,
        "A refuses its own card read back through B",
        |u| u.len() == 1 && u[0].refused == 1,
    )
    .await;
    let m = d.status.unwrap().upstreams[0]
        .message
        .clone()
        .unwrap_or_default();
    assert!(m.contains("read back"), "{m}");
    // B's card in A: `via` is the upstream as A's spec names it, whatever B says; `path` is
    // what B says (B's registry), used to cut the loop.
    let v = json_of(&get(&p, &ahost, "/v1/agents?limit=100", &[]));
    let b1 = v["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["_meta"]["agentcard.dev/directory"]["name"] == "b1")
        .unwrap()["_meta"]["agentcard.dev/directory"]["origin"]
        .clone();
    assert_eq!(b1["via"], json!([format!("http://{}", to_b.addr)]), "{b1}");
    let path = b1["path"].as_array().unwrap();
    assert_eq!(path.len(), 1, "{b1}");
    assert!(
        path[0].as_str().unwrap().ends_with(&format!(":{bdir}")),
        "{b1}"
    );
    // Still so a few refreshes later: nothing bounces.
    tokio::time::sleep(Duration::from_secs(12)).await;
    wait_listed(&p, &ahost, &["a1", "b1"]).await;
    wait_listed(&p, &bhost, &["a1", "b1"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ard_registry_not_ours_is_paged_and_listed_with_its_origin() {
    let p = Platform::start(&[]).await;
    let t = rand_tag();
    let work = tempfile::tempdir().unwrap();
    let cards = work.path().join("cards");
    std::fs::create_dir(&cards).unwrap();
    for n in ["r1", "r2", "r3", "inline-r4", "inline-r5"] {
        let c = card(n, &format!("{n}.ard.example"), "");
        std::fs::write(
            cards.join(format!("{n}.json")),
            c["spec"]["card"].to_string(),
        )
        .unwrap();
    }
    let mut registry = support::netns::Proc(
        std::process::Command::new("python3")
            .arg(support::root().join("tests/oracle/ard_registry.py"))
            .arg(&cards)
            .arg("2")
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(registry.0.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let url = line.trim().strip_prefix("listening ").unwrap().to_string();
    let (dname, dhost) = (format!("ard-{t}"), format!("ard-{t}.open.test"));
    let mut spec = directory(
        &dname,
        &dhost,
        json!({"namespaceSelector": {"matchLabels": {"none": "none"}}}),
    );
    spec["spec"]["upstreams"] = json!([{"name": "ard", "url": url, "kind": "ARD", "refreshSeconds": 5, "allowHttp": true, "allowAddresses": ["127.0.0.0/8"]}]);
    apply_directory(&p, &spec).await;
    wait_listed(&p, &dhost, &["inline-r4", "inline-r5", "r1", "r2", "r3"]).await;
    let listed = origins(&json_of(&get(&p, &dhost, "/v1/agents", &[])));
    assert!(
        listed
            .values()
            .all(|o| o == &Some(("ard".to_string(), false))),
        "{listed:?}"
    );
    wait_upstreams(&p, &dname, "5 entries from the ARD registry", |u| {
        u.len() == 1 && u[0].entries == 5 && u[0].reachable
    })
    .await;
    // Nothing changed: one conditional request per refresh.
    let log = work.path().join("requests.log");
    let lines = || std::fs::read_to_string(&log).unwrap().lines().count();
    let before = lines();
    tokio::time::sleep(Duration::from_secs(11)).await;
    let text = std::fs::read_to_string(&log).unwrap();
    let steady: Vec<&str> = text.lines().skip(before).collect();
    assert!(!steady.is_empty() && steady.len() <= 3, "{steady:#?}");
    assert!(
        steady
            .iter()
            .all(|l| l.starts_with("GET /agents?pageSize=100 ")),
        "{steady:#?}"
    );
    println!(
        "steady state: {} requests in 11 s (refresh every 5 s): {steady:?}",
        steady.len()
    );
    drop(registry);
}
