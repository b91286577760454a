//! The test control plane is a real Kubernetes control plane: it reports the version built
//! from Go modules, enforces structural schemas and CEL rules, and runs the garbage collector
//! and namespace controller.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use serde_json::json;
use support::plane::{client, wait_for, TestNamespace};

fn built_version() -> String {
    let gomod =
        std::fs::read_to_string(support::root().join("tests/controlplane/kube/go.mod")).unwrap();
    gomod
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("require k8s.io/kubernetes ")
                .or_else(|| l.trim().strip_prefix("k8s.io/kubernetes "))
        })
        .map(|v| v.split_whitespace().next().unwrap().to_string())
        .expect("k8s.io/kubernetes version in tests/controlplane/kube/go.mod")
}

#[tokio::test]
async fn the_server_reports_the_version_built_from_go_modules() {
    let client = client().await;
    let info = client.apiserver_version().await.unwrap();
    assert_eq!(info.git_version, built_version());
}

fn crd(group: &str, schema: serde_json::Value) -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{group}")},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": schema}}]
        }
    }))
    .unwrap()
}

#[tokio::test]
async fn a_crd_whose_schema_is_not_structural_is_rejected() {
    let client = client().await;
    let api: Api<CustomResourceDefinition> = Api::all(client);
    // `spec` has properties but no type: not structural.
    let schema = json!({"type": "object", "properties": {"spec": {"properties": {"size": {"type": "integer"}}}}});
    let err = api
        .create(
            &PostParams::default(),
            &crd("nonstructural.agentcard.test", schema),
        )
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 422, "{s:?}");
            assert!(s.message.contains("type: Required value"), "{}", s.message);
        }
        other => panic!("expected a 422 from the API server, got {other:?}"),
    }
}

#[tokio::test]
async fn an_object_violating_a_cel_rule_is_rejected() {
    let client = client().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let group = format!("cel{}.agentcard.test", std::process::id());
    let schema = json!({
        "type": "object",
        "properties": {"spec": {
            "type": "object",
            "properties": {"replicas": {"type": "integer"}},
            "x-kubernetes-validations": [{"rule": "self.replicas <= 10", "message": "at most 10 replicas"}]
        }}
    });
    let created = crds
        .create(&PostParams::default(), &crd(&group, schema))
        .await
        .unwrap();
    let name = created.metadata.name.clone().unwrap();
    support::plane::wait_established(&crds, &name).await;

    let ns = TestNamespace::new(&client, "cel").await;
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(&group, "v1", "Widget"),
        "widgets",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns.name, &ar);
    let mk = |name: &str, replicas: i64| -> DynamicObject {
        let mut o = DynamicObject::new(name, &ar);
        o.data = json!({"spec": {"replicas": replicas}});
        o
    };
    // Discovery of a brand-new CRD can lag a moment behind Established.
    let mut last_err = None;
    for _ in 0..50 {
        match api.create(&PostParams::default(), &mk("fine", 3)).await {
            Ok(_) => {
                last_err = None;
                break;
            }
            Err(e) => last_err = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        last_err.is_none(),
        "an object within the rule is rejected: {last_err:?}"
    );
    let err = api
        .create(&PostParams::default(), &mk("too-many", 20))
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 422, "{s:?}");
            assert!(s.message.contains("at most 10 replicas"), "{}", s.message);
        }
        other => panic!("expected a 422 from the API server, got {other:?}"),
    }
    crds.delete(&name, &DeleteParams::default()).await.unwrap();
}

#[tokio::test]
async fn deleting_an_owner_removes_its_owned_configmap() {
    let client = client().await;
    let ns = TestNamespace::new(&client, "gc").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let owner: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "owner"}, "data": {"a": "b"}})).unwrap();
    let owner = api.create(&PostParams::default(), &owner).await.unwrap();
    let owned: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "owned", "ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid.unwrap()
        }]},
        "data": {"c": "d"}
    }))
    .unwrap();
    api.create(&PostParams::default(), &owned).await.unwrap();
    api.delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    wait_for(Duration::from_secs(60), || async {
        matches!(api.get_opt("owned").await, Ok(None))
    })
    .await
    .expect("the garbage collector deletes the owned ConfigMap");
}

#[tokio::test]
async fn deleting_a_namespace_completes() {
    let client = client().await;
    let name = format!("t-nsdel-{}", std::process::id());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &name);
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "content"}, "data": {"k": "v"}}))
            .unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    namespaces
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    wait_for(Duration::from_secs(90), || async {
        matches!(namespaces.get_opt(&name).await, Ok(None))
    })
    .await
    .expect("the namespace controller finishes deleting the namespace");
}

/// The description of the field at `path` (below the resource's schema) in the API server's
/// OpenAPI v3 document, following `$ref`s and array items as `kubectl explain` does; `None`
/// when the path leads into a Kubernetes type (ObjectMeta, Condition), which is not ours.
fn description_at(doc: &serde_json::Value, root: &str, path: &[String]) -> Option<String> {
    let schemas = &doc["components"]["schemas"];
    // `$ref`, or `allOf: [{$ref}]` as the API server writes a field with a description.
    fn resolve<'a>(
        schemas: &'a serde_json::Value,
        mut s: &'a serde_json::Value,
    ) -> Option<&'a serde_json::Value> {
        loop {
            let r = s["$ref"]
                .as_str()
                .or_else(|| s["allOf"][0]["$ref"].as_str());
            match r.and_then(|r| r.strip_prefix("#/components/schemas/")) {
                Some(name) if name.starts_with("dev.agentcard.") => s = &schemas[name],
                Some(_) => return None,
                None => return Some(s),
            }
        }
    }
    let mut schema = resolve(schemas, &schemas[root])?;
    let mut described = schema.clone();
    for field in path {
        // Into list items and map values, as `kubectl explain` shows their fields.
        loop {
            if schema["type"] == "array" {
                schema = resolve(schemas, &schema["items"])?;
            } else if schema["properties"].is_null() && schema["additionalProperties"].is_object() {
                schema = resolve(schemas, &schema["additionalProperties"])?;
            } else {
                break;
            }
        }
        let property = &schema["properties"][field.as_str()];
        described = property.clone();
        schema = resolve(schemas, property)?;
    }
    Some(
        described["description"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

/// The field paths `kubectl explain --recursive` lists (two spaces a level below `FIELDS:`).
fn explained_fields(out: &str) -> Vec<Vec<String>> {
    let mut fields = Vec::new();
    let mut stack: Vec<String> = Vec::new();
    let lines = out
        .lines()
        .skip_while(|l| !l.starts_with("FIELDS:"))
        .skip(1);
    for line in lines {
        // A field is `name<TAB><type>`; `enum: …` lines list a field's values.
        let Some(name) = line.split_whitespace().next().filter(|n| !n.ends_with(':')) else {
            continue;
        };
        let depth = (line.len() - line.trim_start().len()) / 2;
        if depth == 0 {
            continue;
        }
        stack.truncate(depth - 1);
        stack.push(name.to_string());
        fields.push(stack.clone());
    }
    fields
}

/// `kubectl explain` tells a platform engineer what each resource and each of its fields is:
/// no field of ours is undescribed, and no description is the derive macro's placeholder.
#[tokio::test]
async fn kubectl_explain_describes_every_field_of_our_resources() {
    let client = client().await;
    support::plane::install_crds(&client).await;
    let kubeconfig = support::plane::kubeconfig();
    // The API server publishes a new CRD's OpenAPI a moment after it is Established.
    let openapi = || {
        let out = std::process::Command::new("kubectl")
            .args(["get", "--raw", "/openapi/v3/apis/agentcard.dev/v1alpha1"])
            .env("KUBECONFIG", kubeconfig)
            .output()
            .ok()?;
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        let schemas = &doc["components"]["schemas"];
        let all = [
            "AgentCard",
            "AgentDirectory",
            "AgentDiscovery",
            "AgentCardApproval",
        ]
        .iter()
        .all(|k| schemas[format!("dev.agentcard.v1alpha1.{k}")]["properties"]["spec"].is_object());
        all.then_some(doc)
    };
    let mut doc = None;
    for _ in 0..120 {
        doc = openapi();
        if doc.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let doc = doc.expect("the API server publishes our resources' OpenAPI v3 within a minute");
    let resources = [
        ("agentcards", "dev.agentcard.v1alpha1.AgentCard"),
        ("agentdirectories", "dev.agentcard.v1alpha1.AgentDirectory"),
        ("agentdiscoveries", "dev.agentcard.v1alpha1.AgentDiscovery"),
        (
            "agentcardapprovals",
            "dev.agentcard.v1alpha1.AgentCardApproval",
        ),
    ];
    // Every CRD the operator ships is walked (a new resource cannot be left out).
    let crds = agentcard_operator::crd::crds_yaml().unwrap();
    let crds: Vec<serde_json::Value> = agentcard_operator::yaml::from_str_multiple(&crds).unwrap();
    let mut shipped: Vec<String> = crds
        .iter()
        .map(|c| c["spec"]["names"]["plural"].as_str().unwrap().to_string())
        .collect();
    shipped.sort();
    let mut walked: Vec<String> = resources.iter().map(|(r, _)| r.to_string()).collect();
    walked.sort();
    assert_eq!(walked, shipped, "the resources walked are the CRDs shipped");
    for (resource, root) in resources {
        let top = support::kubectl(kubeconfig, &["explain", resource]);
        let about = top
            .split("DESCRIPTION:")
            .nth(1)
            .and_then(|d| d.split("FIELDS:").next())
            .unwrap_or_default()
            .trim()
            .to_string();
        assert!(
            about.len() > 80 && !about.contains("Auto-generated"),
            "{resource}: {about:?}"
        );
        let fields = explained_fields(&support::kubectl(
            kubeconfig,
            &["explain", resource, "--recursive"],
        ));
        assert!(fields.len() > 40, "{resource}: {} fields", fields.len());
        let mut undescribed = Vec::new();
        for path in &fields {
            match description_at(&doc, root, path) {
                Some(text) if text.trim().is_empty() || text.contains("Auto-generated") => {
                    undescribed.push(path.join("."));
                }
                Some(_) => {}
                // Kubernetes' own types (ObjectMeta, Condition) are described by Kubernetes.
                None => assert!(
                    path[0] == "metadata" || path.iter().any(|p| p == "conditions"),
                    "{resource}: {} is not in the OpenAPI document",
                    path.join(".")
                ),
            }
        }
        assert!(
            undescribed.is_empty(),
            "{resource}: fields kubectl explain shows without a description: {undescribed:#?}"
        );
    }
}
