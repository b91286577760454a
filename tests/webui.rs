//! The directory's web page in a real browser: Debian's headless Chromium driven by
//! playwright-core (`tests/oracle/browse.mjs`) against the operator on a plane of this suite's
//! own. Search narrows results, filters combine, paging walks every result once, a card page
//! shows a verified signature and, once its key is gone from the JWKS, says it no longer
//! verifies; a hostile card (script in text fields, a `javascript:` URI, a very long string,
//! right-to-left text) runs no script and breaks no layout at desktop and phone widths; axe-core
//! finds no WCAG A/AA violation. Screenshots go to `target/tmp/webui-shots/`.

mod support;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use agentcard_operator::crd::AgentDirectory;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{json, Value};
use support::cluster::*;
use support::plane::{dedicated_kubeconfig, wait_for};
use support::ready;

const SKILLS: [&str; 4] = ["translate", "summarize", "forecast", "schedule"];
const TAGS: [&str; 3] = ["language", "weather", "office"];
const PROVIDERS: [&str; 2] = ["Acme", "Globex"];

fn agent(i: usize, host: &str) -> Value {
    let mut c = card(&format!("agent-{i:02}"), host, "");
    // Unpadded numbers: the page lists "Agent 2" before "Agent 10".
    c["spec"]["card"]["name"] = json!(format!("Agent {i}"));
    c["spec"]["card"]["provider"] =
        json!({"organization": PROVIDERS[i % 2], "url": "https://example.com"});
    c["spec"]["card"]["skills"] = json!([{
        "id": SKILLS[i % 4], "name": format!("{} skill", SKILLS[i % 4]),
        "description": "Does its job.", "tags": [TAGS[i % 3]],
        "examples": [format!("{} this", SKILLS[i % 4]), "and that"]
    }]);
    c
}

fn hostile(host: &str) -> Value {
    let mut c = card("hostile", host, "");
    let long = "W".repeat(3000);
    c["spec"]["card"]["name"] = json!("<script>window.__pwned=1</script>Evil \u{202E}gnp.exe");
    c["spec"]["card"]["description"] = json!(format!(
        "<img src=x onerror=\"window.__pwned=1;alert(1)\"> עברית العربية \u{202E}override {long}"
    ));
    c["spec"]["card"]["capabilities"] =
        json!({"extensions": [{"uri": "javascript:alert(document.cookie)"}]});
    c["spec"]["card"]["skills"] = json!([{
        "id": "evil", "name": "\"><svg onload=alert(1)>", "description": "</pre><script>alert(1)</script>",
        "tags": ["</style><script>window.__pwned=1</script>"],
        "examples": ["javascript:alert(1)", "{{7*7}} ${7*7}"]
    }]);
    c
}

/// The browser browse.mjs drives: `$CHROMIUM`, else Debian's `/usr/bin/chromium`. Its absence
/// fails the test at once, naming what installs it.
fn chromium() -> PathBuf {
    let path = std::env::var_os("CHROMIUM")
        .filter(|p| !p.is_empty())
        .map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from);
    assert!(
        path.is_file(),
        "no browser at {}: the web page test drives Debian's chromium; `scripts/test` installs \
         it (as root or with passwordless sudo), or run `apt-get install chromium` (or set \
         CHROMIUM to a Chromium binary)",
        path.display()
    );
    path
}

/// Run one browse.mjs command; its JSON verdict.
fn browse(host: &str, addr: std::net::SocketAddr, shots: &PathBuf, args: &[&str]) -> Value {
    let oracle = support::oracle();
    let out = Command::new("node")
        .arg(support::root().join("tests/oracle/browse.mjs"))
        .args(["--resolve", &format!("{host}={addr}"), "--shots"])
        .arg(shots)
        .args(args)
        .env("NODE_PATH", oracle.join("node/node_modules"))
        .env("CHROMIUM", chromium())
        .output()
        .expect("running node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .rfind(|l| l.starts_with('{'))
        .unwrap_or_else(|| {
            panic!(
                "browse.mjs {args:?} printed nothing: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let v: Value = serde_json::from_str(line).unwrap();
    assert!(
        v.get("error").is_none(),
        "browse.mjs {args:?}: {}",
        v["error"]
    );
    v
}

fn names(v: &Value) -> BTreeSet<String> {
    v["names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_directory_page_works_in_chromium_and_renders_hostile_cards_inert() {
    chromium();
    let mut p = Platform::start(&[]).await;
    let t = rand_tag();
    let a = Tenant::new(&p, &format!("web-a-{t}")).await;
    let b = Tenant::new(&p, &format!("web-b-{t}")).await;
    let n = 24;
    for i in 0..n {
        let tenant = if i % 2 == 0 { &a } else { &b };
        tenant
            .apply(&agent(i, &format!("a{i}-{t}.open.test")))
            .await
            .unwrap();
    }
    b.apply(&hostile(&format!("evil-{t}.open.test")))
        .await
        .unwrap();
    for i in 0..n {
        let ns = if i % 2 == 0 { &a.ns } else { &b.ns };
        wait_card(&p, ns, &format!("agent-{i:02}"), "Ready", ready).await;
    }
    wait_card(&p, &b.ns, "hostile", "Ready", ready).await;
    let host = format!("web-{t}.open.test");
    let dir = json!({
        "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentDirectory",
        "metadata": {"name": format!("web-{t}")},
        "spec": {"publish": {"host": host}, "displayName": "Example agents",
                 "namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": [a.ns, b.ns]}]}}
    });
    let dirs: Api<AgentDirectory> = Api::all(p.admin.clone());
    dirs.patch(
        &format!("web-{t}"),
        &PatchParams::apply("test").force(),
        &Patch::Apply(&dir),
    )
    .await
    .unwrap();
    wait_for(Duration::from_secs(30), || async {
        dirs.get(&format!("web-{t}"))
            .await
            .is_ok_and(|d| d.status.is_some_and(|s| s.cards == n as i64 + 1))
    })
    .await
    .expect("the directory lists every card");
    // The pages come from a `serve --from-cluster` process, so they stay up once the operator
    // is stopped below.
    let server = support::http::Server::start(
        &["--from-cluster", "--namespace", &p.opns],
        &[("KUBECONFIG", dedicated_kubeconfig())],
    );
    server.wait_ready(Duration::from_secs(30));
    let addr = server.addr;
    let base = format!("http://{host}/");
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("webui-shots");
    std::fs::create_dir_all(&shots).unwrap();
    let go = |args: &[&str]| browse(&host, addr, &shots, args);
    // The page sees what the server serves: wait for the snapshot to list them all.
    wait_for(Duration::from_secs(15), || {
        std::future::ready(
            go(&["search", &base, "Agent"])["summary"] == format!("{} agents found", n),
        )
    })
    .await
    .expect("the catalog lists every agent");

    // Search narrows: the skill name "translate" is in every fourth card.
    let want: BTreeSet<String> = (0..n)
        .filter(|i| i % 4 == 0)
        .map(|i| format!("Agent {i}"))
        .collect();
    let r = go(&["search", &base, "translate"]);
    assert_eq!(names(&r), want, "{r}");
    assert_eq!(r["summary"], format!("{} agents found", want.len()));

    // Filters combine: OR within one, AND across.
    let r = go(&[
        "filter",
        &base,
        "tag=weather",
        "tag=office",
        "provider=Acme",
    ]);
    let want: BTreeSet<String> = (0..n)
        .filter(|i| TAGS[i % 3] != "language" && PROVIDERS[i % 2] == "Acme")
        .map(|i| format!("Agent {i}"))
        .collect();
    assert_eq!(names(&r), want, "{r}");

    // Paging walks every result once.
    let walk = go(&["walk", &format!("{base}?limit=7")]);
    let pages: Vec<Vec<String>> = serde_json::from_value(walk["pages"].clone()).unwrap();
    assert!(pages.iter().all(|p| p.len() <= 7) && pages.len() == (n + 1).div_ceil(7));
    let all: Vec<String> = pages.concat();
    let unique: BTreeSet<&String> = all.iter().collect();
    assert_eq!((all.len(), unique.len()), (n + 1, n + 1), "{pages:?}");
    // In the order people read names, numbers by value, across pages.
    let agents: Vec<&String> = all.iter().filter(|t| t.starts_with("Agent ")).collect();
    let want: Vec<String> = (0..n).map(|i| format!("Agent {i}")).collect();
    assert_eq!(agents, want.iter().collect::<Vec<_>>(), "{pages:?}");

    // A card page shows its signature verified against the served JWKS.
    let page = format!("{base}agents/{}/agent-00", a.ns);
    let c = go(&["card", &page]);
    assert_eq!(c["verified"], "true", "{c}");
    assert!(c["signature"].as_str().unwrap().contains("ES256"));

    // The hostile card: no script runs, no javascript: link, no horizontal overflow, and the
    // pages pass axe-core.
    let evil = format!("{base}agents/{}/hostile", b.ns);
    let evil_listed = format!("{base}?q=Evil");
    // Inert by escaping, not only by the CSP: the served pages hold the tenant's markup as
    // text (the only script element is the page's own), and carry the CSP.
    for path in [format!("/agents/{}/hostile", b.ns), "/?q=Evil".to_string()] {
        let r = server.get(&host, &path, &[("Accept", "text/html")]);
        assert_eq!(r.status, 200, "{path}");
        assert_eq!(
            r.header("content-security-policy"),
            Some(agentcard_operator::directory::html::CSP),
            "{path}"
        );
        let page = String::from_utf8_lossy(&r.body);
        assert!(
            page.contains("Evil"),
            "{path}: the hostile card is not on it"
        );
        assert_eq!(page.matches("<script").count(), 1, "{path}: {page}");
        assert!(page.contains("<script src="), "{path}");
        for raw in ["<img", "<svg", "</style><script", "</pre><script"] {
            assert!(!page.contains(raw), "{path}: {raw} unescaped");
        }
    }
    for (url, shot) in [
        (evil.as_str(), "hostile-card"),
        (evil_listed.as_str(), "catalog-hostile"),
        (base.as_str(), "catalog"),
        (page.as_str(), "card"),
    ] {
        let r = go(&["audit", url, shot]);
        assert_eq!(r["dialogs"], json!([]), "{shot}: {r}");
        for width in ["desktop", "phone"] {
            assert_eq!(r[width]["pwned"], false, "{shot} {width}: {r}");
            assert_eq!(r[width]["scriptLinks"], 0, "{shot} {width}: {r}");
            assert_eq!(
                r[width]["overflow"], 0,
                "{shot} {width}: the layout overflows: {r}"
            );
        }
        assert_eq!(r["violations"], json!([]), "{shot}: axe-core: {r}");
    }

    // The key leaves the JWKS (edited while no operator runs to repair it): the same page now
    // says the signature does not verify.
    p.op.kill();
    let jwks: Api<ConfigMap> = Api::namespaced(p.admin.clone(), &p.opns);
    let patch = json!({"data": {"jwks.json": "{\"keys\":[]}"}});
    jwks.patch(
        "agentcard-jwks",
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .unwrap();
    wait_for(Duration::from_secs(15), || {
        std::future::ready(go(&["card", &page])["verified"] == "false")
    })
    .await
    .expect("the card page says the signature no longer verifies");
    let c = go(&["card", &page]);
    assert!(
        c["signature"].as_str().unwrap().contains("Does not verify"),
        "{c}"
    );
    eprintln!("screenshots in {}", shots.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_result_shows_its_reachability_and_lifecycle_as_a_badge() {
    chromium();
    let p = Platform::start(&[]).await;
    let t = rand_tag();
    let tenant = Tenant::new(&p, &format!("badge-{t}")).await;
    let ns = tenant.ns.clone();
    let with_backend = |name: &str| {
        let mut c = card(name, &format!("{name}-{t}.open.test"), "");
        c["spec"]["card"]["name"] = json!(format!("Agent {name}"));
        c["spec"]["backend"] = json!({"serviceName": name, "port": 8000});
        c
    };
    tenant.apply(&with_backend("up")).await.unwrap();
    tenant.apply(&with_backend("down")).await.unwrap();
    let mut old = card("old", &format!("old-{t}.open.test"), "");
    old["spec"]["card"]["name"] = json!("Agent old");
    old["spec"]["lifecycle"] = json!({"state": "Deprecated", "successor": {"name": "up"}});
    tenant.apply(&old).await.unwrap();
    // "up" gets a Service with a ready endpoint; "down" has none.
    let services: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(p.admin.clone(), &ns);
    let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "up"},
        "spec": {"ports": [{"name": "http", "port": 8000}]}});
    services
        .patch("up", &PatchParams::apply("test"), &Patch::Apply(&svc))
        .await
        .unwrap();
    let slices: Api<k8s_openapi::api::discovery::v1::EndpointSlice> =
        Api::namespaced(p.admin.clone(), &ns);
    let slice = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "up-1", "labels": {"kubernetes.io/service-name": "up"}},
        "addressType": "IPv4", "endpoints": [{"addresses": ["10.9.9.9"]}],
        "ports": [{"name": "http", "port": 8000}]});
    slices
        .patch("up-1", &PatchParams::apply("test"), &Patch::Apply(&slice))
        .await
        .unwrap();
    for name in ["up", "down", "old"] {
        wait_card(&p, &ns, name, "Ready", ready).await;
    }
    let host = format!("badges-{t}.open.test");
    let dir = json!({
        "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentDirectory",
        "metadata": {"name": format!("badges-{t}")},
        "spec": {"publish": {"host": host}, "displayName": "Badges",
                 "namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": [ns]}]}}
    });
    Api::<AgentDirectory>::all(p.admin.clone())
        .patch(
            &format!("badges-{t}"),
            &PatchParams::apply("test").force(),
            &Patch::Apply(&dir),
        )
        .await
        .unwrap();
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("webui-shots");
    std::fs::create_dir_all(&shots).unwrap();
    let base = format!("http://{host}/");
    let addr = p.op.server.addr;
    let seen = |v: &Value, name: &str| {
        v["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .cloned()
    };
    let mut last = Value::Null;
    let ok = wait_for(Duration::from_secs(30), || {
        last = browse(&host, addr, &shots, &["badges", &base]);
        // The successor is linked by its identifier until "old" has looked again for its URL.
        let up = seen(&last, "Agent up");
        let old = seen(&last, "Agent old");
        std::future::ready(
            up.is_some_and(|u| u["reachable"] == "true")
                && old.is_some_and(|o| {
                    o["lifecycleText"]
                        .as_str()
                        .is_some_and(|t| t.starts_with("deprecated → https://"))
                }),
        )
    })
    .await;
    assert!(ok.is_ok(), "no reachable badge or successor link: {last}");
    let up = seen(&last, "Agent up").unwrap();
    assert_eq!(up["reachableText"], "reachable", "{last}");
    assert_eq!(up["visible"], true, "{last}");
    let down = seen(&last, "Agent down").unwrap();
    assert_eq!(down["reachable"], "false", "{last}");
    assert_eq!(down["reachableText"], "unreachable", "{last}");
    let old = seen(&last, "Agent old").unwrap();
    assert_eq!(old["reachable"], "unknown", "{last}");
    assert_eq!(old["lifecycle"], "Deprecated", "{last}");
    assert!(
        old["lifecycleText"]
            .as_str()
            .unwrap()
            .starts_with("deprecated → https://up-"),
        "{last}"
    );
    // The same as the native API says.
    let native = support::http::request(addr, "GET", "/v1/agents", &[("Host", &host)]);
    let v: Value = serde_json::from_slice(&native.body).unwrap();
    for a in v["agents"].as_array().unwrap() {
        let m = &a["_meta"]["agentcard.dev/directory"];
        let name = format!("Agent {}", m["name"].as_str().unwrap());
        let shown = seen(&last, &name).unwrap();
        assert_eq!(shown["reachable"], m["reachable"], "{name}");
        let state = m["lifecycle"]["state"].as_str().unwrap();
        assert_eq!(
            shown["lifecycle"],
            if state == "Active" {
                Value::Null
            } else {
                json!(state)
            },
            "{name}"
        );
    }
}
