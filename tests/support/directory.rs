//! What the directory tests share: AgentDirectory manifests and waits, requests to a directory
//! host through the operator's server, and ARD schema validation with the Python oracle.

use std::time::{Duration, Instant};

use agentcard_operator::crd::AgentDirectory;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

use super::cluster::*;
use super::http::{request_with_body, Resp};
use super::plane::wait_for;

pub fn directory(name: &str, host: &str, extra: Value) -> Value {
    let mut d = json!({
        "apiVersion": "agentcard.dev/v1alpha1",
        "kind": "AgentDirectory",
        "metadata": {"name": name},
        "spec": {"publish": {"host": host}, "displayName": format!("Directory {name}")}
    });
    if let (Some(spec), Some(extra)) = (d["spec"].as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            spec.insert(k.clone(), v.clone());
        }
    }
    d
}

pub async fn apply_directory(p: &Platform, manifest: &Value) {
    let name = manifest["metadata"]["name"].as_str().unwrap();
    Api::<AgentDirectory>::all(p.admin.clone())
        .patch(
            name,
            &PatchParams::apply("platform").force(),
            &Patch::Apply(manifest),
        )
        .await
        .unwrap();
}

pub async fn wait_directory(
    p: &Platform,
    name: &str,
    what: &str,
    pred: impl Fn(&AgentDirectory) -> bool,
) -> AgentDirectory {
    let api: Api<AgentDirectory> = Api::all(p.admin.clone());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let d = api.get(name).await.ok();
        if let Some(d) = d.as_ref().filter(|d| pred(d)) {
            return d.clone();
        }
        assert!(
            Instant::now() < deadline,
            "directory {name}: {what} did not happen; last status {:?}\n{}",
            d.and_then(|d| d.status),
            tail(&p.op.logs())
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub fn dir_ready(cards: i64) -> impl Fn(&AgentDirectory) -> bool {
    move |d| {
        d.status.as_ref().is_some_and(|s| {
            s.cards == cards
                && s.observed_generation == d.metadata.generation
                && s.conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
        })
    }
}

/// A card with skills, tags, examples and a provider.
pub fn rich_card(name: &str, host: &str, skill: &str, tags: &[&str], provider: &str) -> Value {
    let mut c = card(name, host, "");
    c["spec"]["card"]["provider"] = json!({"organization": provider, "url": "https://example.com"});
    c["spec"]["card"]["skills"] = json!([{
        "id": skill, "name": format!("{skill} skill"), "description": format!("Does {skill}."),
        "tags": tags, "examples": [format!("please {skill}"), format!("{skill} now")]
    }]);
    c
}

pub fn get(p: &Platform, host: &str, path: &str, headers: &[(&str, &str)]) -> Resp {
    let mut h = vec![("Host", host)];
    h.extend_from_slice(headers);
    super::http::request(p.op.server.addr, "GET", path, &h)
}

pub fn post(p: &Platform, host: &str, path: &str, body: &Value, headers: &[(&str, &str)]) -> Resp {
    let mut h = vec![("Host", host), ("Content-Type", "application/json")];
    h.extend_from_slice(headers);
    let body = serde_json::to_vec(body).unwrap();
    request_with_body(p.op.server.addr, "POST", path, &h, Some(&body))
}

pub fn json_of(r: &Resp) -> Value {
    serde_json::from_slice(&r.body).unwrap_or_else(|e| {
        panic!(
            "{} not JSON ({e}): {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        )
    })
}

/// Validate `doc` against an ARD v0.9 schema (see tests/oracle/ard_validate.py).
pub fn assert_schema(schema: &str, doc: &Value) {
    validate("ard-v0.9", schema, doc);
}

/// Validate `doc` against an ARD v0.91 schema (see tests/oracle/ard_validate.py):
/// `manifest`, `ardEntry`, or a component of its OpenAPI document.
pub fn assert_schema_v091(schema: &str, doc: &Value) {
    validate("ard-v0.91", schema, doc);
}

fn validate(data: &str, schema: &str, doc: &Value) {
    let input = format!("{}\n", json!({"schema": schema, "doc": doc}));
    let mut cmd = std::process::Command::new(super::oracle().join("venv/bin/python"));
    cmd.arg(super::root().join("tests/oracle/ard_validate.py"))
        .arg(super::root().join("tests/data").join(data));
    let out = super::run(cmd, Some(input.as_bytes()));
    let verdict: Value = serde_json::from_slice(
        out.stdout
            .split(|b| *b == b'\n')
            .find(|l| l.starts_with(b"{"))
            .unwrap_or_else(|| panic!("no verdict: {}", String::from_utf8_lossy(&out.stderr))),
    )
    .unwrap();
    assert_eq!(verdict["ok"], true, "{data} {schema}: {verdict}\n{doc:#}");
}

/// The `_meta` identities of a native page, sorted (none for an answer that is not a page).
pub fn names(v: &Value) -> Vec<String> {
    let mut out: Vec<String> = v["agents"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| {
            a["_meta"]["agentcard.dev/directory"]["name"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    out.sort();
    out
}

pub async fn wait_listed(p: &Platform, host: &str, want: &[&str]) -> Duration {
    let started = Instant::now();
    let want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
    let ok = wait_for(Duration::from_secs(15), || {
        let r = get(p, host, "/v1/agents", &[]);
        std::future::ready(r.status == 200 && names(&json_of(&r)) == want)
    })
    .await;
    assert!(
        ok.is_ok(),
        "{host}: expected {want:?}, got {}",
        String::from_utf8_lossy(&get(p, host, "/v1/agents", &[]).body)
    );
    started.elapsed()
}

/// A token of a new ServiceAccount `ns/name` that may read the AgentCards of `may_read`.
pub async fn service_account_token(
    p: &Platform,
    ns: &str,
    name: &str,
    may_read: &[&str],
) -> String {
    let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    let sas: Api<ServiceAccount> = Api::namespaced(p.admin.clone(), ns);
    sas.create(&PostParams::default(), &sa).await.unwrap();
    for target in may_read {
        let role: Role = serde_json::from_value(json!({
            "metadata": {"name": format!("read-{name}")},
            "rules": [{"apiGroups": ["agentcard.dev"], "resources": ["agentcards"], "verbs": ["get", "list"]}]
        }))
        .unwrap();
        let roles: Api<Role> = Api::namespaced(p.admin.clone(), target);
        let _ = roles.create(&PostParams::default(), &role).await;
        let binding: RoleBinding = serde_json::from_value(json!({
            "metadata": {"name": format!("read-{name}")},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": format!("read-{name}")},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}]
        }))
        .unwrap();
        Api::<RoleBinding>::namespaced(p.admin.clone(), target)
            .create(&PostParams::default(), &binding)
            .await
            .unwrap();
    }
    let req: TokenRequest =
        serde_json::from_value(json!({"spec": {"expirationSeconds": 3600}})).unwrap();
    let tr: TokenRequest = sas
        .create_subresource("token", name, &PostParams::default(), &req)
        .await
        .unwrap();
    tr.status.unwrap().token
}
