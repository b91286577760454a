//! The Helm chart: lint (defaults and every option), the values schema, what it renders (least
//! privilege, the restricted Pod Security profile, the CRDs `agentcard-operator crds` prints),
//! and on a plane of its own: install into a namespace enforcing the restricted profile (the
//! ReplicaSet's Pods are admitted; a non-compliant variant is refused), the operator run with
//! the chart's ServiceAccount token publishing a card, what that identity cannot do, upgrade,
//! and uninstall leaving nothing but the CRDs. helm is built from Go modules
//! (`tests/tools/build`).

mod support;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use agentcard_operator::crd::AgentCard;
use agentcard_operator::yaml;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::{json, Value};
use support::cluster::{card, rand_tag, SERIAL};
use support::operator::{wait_card, Operator};
use support::plane::{client_for, dedicated_kubeconfig, wait_for};
use support::ready;

const CHART: &str = "charts/agentcard-operator";

fn helm(args: &[&str]) -> Output {
    support::tools::helm_command(dedicated_kubeconfig())
        .args(args)
        .output()
        .expect("running helm")
}

fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "helm failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The rendered documents for `extra` helm arguments.
fn render(extra: &[&str]) -> Vec<Value> {
    let mut args = vec!["template", "rel", CHART, "--namespace", "ops"];
    args.extend_from_slice(extra);
    let text = ok(helm(&args));
    documents(&text)
}

/// The objects of a `---`-separated stream (documents of comments only, as helm prints for an
/// empty template, left out); a document that is not YAML fails the test.
fn documents(text: &str) -> Vec<Value> {
    let docs: Vec<Value> = yaml::from_str_multiple(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    docs.into_iter().filter(Value::is_object).collect()
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

#[test]
fn the_chart_lints_and_its_schema_refuses_unknown_keys() {
    ok(helm(&["lint", "--strict", CHART]));
    ok(helm(&[
        "lint",
        "--strict",
        CHART,
        "-f",
        "tests/data/chart/all-values.yaml",
    ]));
    for (set, needle) in [
        ("bogus=1", "additional properties 'bogus' not allowed"),
        (
            "operator.bogus=1",
            "additional properties 'bogus' not allowed",
        ),
        ("ingress.tls=everything", "/ingress/tls"),
        ("replicaCount=0", "/replicaCount"),
        ("podAntiAffinity=maybe", "/podAntiAffinity"),
        (
            "operator.drainSeconds=60",
            "below terminationGracePeriodSeconds",
        ),
        // Draining 20 s leaves too little of the default 30 s to finish requests and hand over.
        (
            "operator.drainSeconds=20",
            "at least 15 s below terminationGracePeriodSeconds",
        ),
    ] {
        let out = helm(&["template", "rel", CHART, "--set", set]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{set} was accepted");
        assert!(err.contains(needle), "{set}: {err}");
    }
}

/// The chart values the guides show (a `yaml` block starting `# <file>.yaml: chart values`)
/// pass `helm lint --strict` and the schema, and change what is rendered.
#[test]
fn the_values_the_guides_show_pass_the_schema_and_take_effect() {
    let shown = support::guides::chart_values();
    assert!(!shown.is_empty(), "no guide shows chart values");
    let default = of_kind(&render(&[]), "Deployment")[0].clone();
    let dir = tempfile::tempdir().unwrap();
    for (guide, file, text) in shown {
        let path = dir.path().join(&file);
        std::fs::write(&path, &text).unwrap();
        let path = path.to_str().unwrap();
        ok(helm(&["lint", "--strict", CHART, "-f", path]));
        let docs = render(&["-f", path]);
        let deployment = of_kind(&docs, "Deployment")[0].clone();
        assert_ne!(
            deployment["spec"]["template"], default["spec"]["template"],
            "{guide}: {file} changes nothing the chart renders"
        );
    }
}

#[test]
fn the_rendered_chart_is_least_privilege_restricted_and_carries_the_generated_crds() {
    for extra in [&[][..], &["-f", "tests/data/chart/all-values.yaml"][..]] {
        let docs = render(extra);
        for role in of_kind(&docs, "ClusterRole")
            .into_iter()
            .chain(of_kind(&docs, "Role"))
        {
            for rule in role["rules"].as_array().unwrap() {
                for key in ["apiGroups", "resources", "verbs"] {
                    let values: Vec<&str> = rule[key]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|v| v.as_str().unwrap())
                        .collect();
                    assert!(
                        !values.contains(&"*"),
                        "wildcard in {}: {rule}",
                        role["metadata"]["name"]
                    );
                    if role["kind"] == "ClusterRole" && key == "resources" {
                        assert!(
                            !values.contains(&"secrets"),
                            "cluster-wide Secret access: {rule}"
                        );
                        assert!(
                            role["metadata"]["name"]
                                .as_str()
                                .unwrap()
                                .ends_with("operator")
                                || role["metadata"]["name"].as_str().unwrap() == "platform-cards"
                                || !values.iter().any(|r| r.ends_with("/status")),
                            "a user role grants status: {rule}"
                        );
                    }
                }
            }
        }
        // The operator's own roles: `update` only where owner references need it, Secrets and
        // the Lease by name (only `create` cannot be limited so).
        for role in of_kind(&docs, "ClusterRole")
            .into_iter()
            .chain(of_kind(&docs, "Role"))
            .filter(|r| !r["metadata"]["name"].as_str().unwrap().ends_with("-edit"))
        {
            for rule in role["rules"].as_array().unwrap() {
                let strs = |key: &str| -> Vec<&str> {
                    rule[key]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .collect()
                };
                let (resources, verbs) = (strs("resources"), strs("verbs"));
                if verbs.contains(&"update") {
                    assert!(
                        resources.iter().all(|r| r.ends_with("/finalizers")),
                        "update beyond finalizers: {rule}"
                    );
                }
                if (resources.contains(&"secrets") || resources.contains(&"leases"))
                    && verbs != ["create"]
                {
                    assert!(
                        !strs("resourceNames").is_empty(),
                        "Secrets or Leases not limited by name: {rule}"
                    );
                }
            }
        }
        let deployment = of_kind(&docs, "Deployment")[0];
        let pod = &deployment["spec"]["template"]["spec"];
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
        assert_eq!(pod["securityContext"]["runAsUser"], 65532);
        assert_eq!(
            pod["securityContext"]["seccompProfile"]["type"],
            "RuntimeDefault"
        );
        let c = &pod["containers"][0];
        assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
        assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
        assert_eq!(c["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
        let env: Vec<&str> = c["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert!(env.contains(&"POD_NAME") && env.contains(&"POD_NAMESPACE"));
        assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
        assert_eq!(c["readinessProbe"]["httpGet"]["port"], "admin");
        let selector = deployment["spec"]["selector"]["matchLabels"]
            .as_object()
            .unwrap();
        let mut keys: Vec<&String> = selector.keys().collect();
        keys.sort();
        assert_eq!(
            keys,
            ["app.kubernetes.io/instance", "app.kubernetes.io/name"]
        );
    }
    // Every flag of `run` is reachable from values.
    let all = render(&["-f", "tests/data/chart/all-values.yaml"]);
    let args: Vec<String> = of_kind(&all, "Deployment")[0]["spec"]["template"]["spec"]
        ["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    for flag in [
        "--shared-hosts=shared.agents.example.com",
        "--watch-namespace=agents",
        "--initial-list=pages",
        "--list-page-size=2000",
        "--no-create-signing-secret",
        "--signing-secret=platform-signing-keys",
        "--ingress-class=public",
        "--ingress-allowed-classes=internal",
        "--ingress-tls=secret:wildcard-agents",
        "--token-audiences=agentcard-directory",
        "--concurrency=8",
        "--lease-duration=20",
        "--service-name=platform-cards",
        "--route-kind=HTTPRoute",
        "--gateway=infra/public/https",
        "--gateway-allowed-sections=web",
        "--service-port=8080",
        "--drain-seconds=20",
        "--jwks-max-age=120",
    ] {
        assert!(
            args.iter().any(|a| a == flag),
            "{flag} missing from {args:?}"
        );
    }
    // The CRDs are the generated ones, kept on uninstall by default, absent when disabled.
    let generated = support::run(
        {
            let mut c = support::bin();
            c.arg("crds");
            c
        },
        None,
    );
    let generated = documents(&String::from_utf8_lossy(&generated.stdout));
    let docs = render(&[]);
    let crds = of_kind(&docs, "CustomResourceDefinition");
    assert_eq!(crds.len(), generated.len());
    for (rendered, want) in crds.iter().zip(&generated) {
        assert_eq!(
            rendered["spec"], want["spec"],
            "the chart's CRD differs from `agentcard-operator crds`"
        );
        assert_eq!(
            rendered["metadata"]["annotations"]["helm.sh/resource-policy"],
            "keep"
        );
    }
    assert!(of_kind(
        &render(&["--set", "crds.enabled=false"]),
        "CustomResourceDefinition"
    )
    .is_empty());
    // HTTPRoute RBAC only when that routing is on, and never without a Gateway.
    let grants_routes = |docs: &[Value]| {
        of_kind(docs, "ClusterRole")
            .iter()
            .any(|r| r.to_string().contains("httproutes"))
    };
    assert!(!grants_routes(&render(&[])));
    assert!(grants_routes(&all));
    let out = helm(&["template", "rel", CHART, "--set", "routing.kind=HTTPRoute"]);
    assert!(
        !out.status.success(),
        "HTTPRoute routing without a Gateway was accepted"
    );
    let unkept = render(&["--set", "crds.keep=false"]);
    assert!(of_kind(&unkept, "CustomResourceDefinition")[0]["metadata"]["annotations"].is_null());
}

async fn restricted_namespace(client: &Client, name: &str) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name, "labels": {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "latest",
    }}}))
    .unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

async fn pods(client: &Client, ns: &str, release: &str) -> usize {
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("app.kubernetes.io/instance={release}")))
        .await
        .map(|l| l.items.len())
        .unwrap_or(0)
}

/// Whether `user` (with the ServiceAccount groups) may `verb` `resource` (in `namespace`).
async fn can(
    client: &Client,
    sa: (&str, &str),
    verb: &str,
    group: &str,
    resource: &str,
    namespace: Option<&str>,
) -> bool {
    can_named(client, sa, verb, group, resource, namespace, None).await
}

/// [`can`] for the object named `object` (None: any object).
async fn can_named(
    client: &Client,
    sa: (&str, &str),
    verb: &str,
    group: &str,
    resource: &str,
    namespace: Option<&str>,
    object: Option<&str>,
) -> bool {
    let (ns, name) = sa;
    let review: SubjectAccessReview = serde_json::from_value(json!({"spec": {
        "user": format!("system:serviceaccount:{ns}:{name}"),
        "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{ns}"), "system:authenticated"],
        "resourceAttributes": {"verb": verb, "group": group, "resource": resource, "namespace": namespace, "name": object},
    }}))
    .unwrap();
    Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .unwrap()
        .status
        .is_some_and(|s| s.allowed)
}

/// An annotation of Chart.yaml that holds YAML (Artifact Hub's lists), parsed.
fn annotation(chart: &Value, key: &str) -> Value {
    let text = chart["annotations"][key]
        .as_str()
        .unwrap_or_else(|| panic!("Chart.yaml has no annotation {key}"));
    yaml::from_str(text).unwrap_or_else(|e| panic!("{key}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn artifact_hub_lists_the_chart_with_the_crds_examples_and_image_it_ships() {
    let root = support::root();
    let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap();
    let chart: Value = yaml::from_str(&read("charts/agentcard-operator/Chart.yaml")).unwrap();
    let values: Value = yaml::from_str(&read("charts/agentcard-operator/values.yaml")).unwrap();
    let a = &chart["annotations"];
    assert_eq!(a["artifacthub.io/operator"], "true");
    assert_eq!(a["artifacthub.io/license"], "Apache-2.0");
    let levels = [
        "Basic Install",
        "Seamless Upgrades",
        "Full Lifecycle",
        "Deep Insights",
        "Auto Pilot",
    ];
    assert!(levels.contains(&a["artifacthub.io/operatorCapabilities"].as_str().unwrap()));
    let categories = [
        "ai-machine-learning",
        "database",
        "integration-delivery",
        "monitoring-logging",
        "networking",
        "security",
        "storage",
        "streaming-messaging",
    ];
    assert!(categories.contains(&a["artifacthub.io/category"].as_str().unwrap()));
    for link in annotation(&chart, "artifacthub.io/links")
        .as_array()
        .unwrap()
    {
        assert!(link["name"].is_string(), "{link}");
        assert!(
            link["url"].as_str().unwrap().starts_with("https://"),
            "{link}"
        );
    }
    // The image is the one the chart installs by default.
    let images = annotation(&chart, "artifacthub.io/images");
    let want = format!(
        "{}:{}",
        values["image"]["repository"].as_str().unwrap(),
        chart["appVersion"].as_str().unwrap()
    );
    assert_eq!(images.as_array().unwrap().len(), 1);
    assert_eq!(images[0]["image"], want.as_str());
    // The CRDs are those `agentcard-operator crds` prints, at the version they serve and store.
    let generated = support::run(
        {
            let mut c = support::bin();
            c.arg("crds");
            c
        },
        None,
    );
    let mut shipped: Vec<(String, String, String)> =
        documents(&String::from_utf8_lossy(&generated.stdout))
            .iter()
            .map(|crd| {
                let stored = crd["spec"]["versions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|v| v["storage"] == true)
                    .unwrap();
                (
                    crd["spec"]["names"]["kind"].as_str().unwrap().to_string(),
                    stored["name"].as_str().unwrap().to_string(),
                    crd["metadata"]["name"].as_str().unwrap().to_string(),
                )
            })
            .collect();
    let crds = annotation(&chart, "artifacthub.io/crds");
    let mut listed: Vec<(String, String, String)> = crds
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            assert!(
                !c["description"].as_str().unwrap_or_default().is_empty(),
                "{c}"
            );
            assert!(
                !c["displayName"].as_str().unwrap_or_default().is_empty(),
                "{c}"
            );
            let s = |k: &str| c[k].as_str().unwrap().to_string();
            (s("kind"), s("version"), s("name"))
        })
        .collect();
    shipped.sort();
    listed.sort();
    assert_eq!(
        listed, shipped,
        "artifacthub.io/crds lists other CRDs than the chart ships"
    );
    // The examples are examples/ verbatim, and the API server takes them (a server-side dry
    // run against the CRDs, the card in a namespace of this test).
    let examples = annotation(&chart, "artifacthub.io/crdsExamples");
    let files: Vec<Value> = ["examples/weather-agent.yaml", "examples/directory.yaml"]
        .iter()
        .map(|p| yaml::from_str(&read(p)).unwrap())
        .collect();
    assert_eq!(
        examples.as_array().unwrap(),
        &files,
        "crdsExamples differ from examples/"
    );
    let client = support::plane::client().await;
    let ns = support::plane::TestNamespace::new(&client, "ahub").await;
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let mut card: AgentCard = serde_json::from_value(files[0].clone()).unwrap();
    card.metadata.namespace = Some(ns.name.clone());
    Api::<AgentCard>::namespaced(client.clone(), &ns.name)
        .create(&dry, &card)
        .await
        .expect("the AgentCard example is refused by the API server");
    let directory: agentcard_operator::crd::AgentDirectory =
        serde_json::from_value(files[1].clone()).unwrap();
    Api::<agentcard_operator::crd::AgentDirectory>::all(client.clone())
        .create(&dry, &directory)
        .await
        .expect("the AgentDirectory example is refused by the API server");
    // The repository's metadata, which the release workflow pushes as the tag Artifact Hub reads.
    let repo: Value = yaml::from_str(&read("artifacthub-repo.yml")).unwrap();
    assert!(!repo["owners"].as_array().unwrap().is_empty());
    let release = read(".github/workflows/release.yml");
    assert!(
        release.contains("charts/agentcard-operator:artifacthub.io")
            && release.contains("artifacthub-repo.yml:application/vnd.cncf.artifacthub.repository-metadata.layer.v1.yaml"),
        "the release workflow does not publish artifacthub-repo.yml"
    );
}

/// A client of the dedicated plane acting as `user` (impersonated by its admin).
async fn as_user(user: &str) -> Client {
    let kc = kube::config::Kubeconfig::read_from(dedicated_kubeconfig()).unwrap();
    let mut config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .unwrap();
    config.auth_info.impersonate = Some(user.to_string());
    Client::try_from(config).unwrap()
}

/// A kubeconfig for the plane that authenticates with `token`.
fn token_kubeconfig(dir: &Path, token: &str) -> std::path::PathBuf {
    let admin: Value =
        yaml::from_str(&std::fs::read_to_string(dedicated_kubeconfig()).unwrap()).unwrap();
    let cluster = admin["clusters"][0]["cluster"].clone();
    let kc = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "plane", "cluster": serde_json::to_value(&cluster).unwrap()}],
        "users": [{"name": "chart", "user": {"token": token}}],
        "contexts": [{"name": "chart", "context": {"cluster": "plane", "user": "chart"}}],
        "current-context": "chart",
    });
    let path = dir.join("kubeconfig");
    std::fs::write(&path, yaml::to_string(&kc).unwrap()).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn installed_on_a_restricted_namespace_it_runs_with_least_privilege_and_uninstalls_cleanly() {
    let _serial = SERIAL.lock().await;
    let client = client_for(dedicated_kubeconfig()).await;
    let t = rand_tag();
    let ns = format!("agentcard-system-{t}");
    restricted_namespace(&client, &ns).await;
    ok(helm(&[
        "install",
        "rel",
        CHART,
        "--namespace",
        &ns,
        "--set",
        "ingress.tls=none",
        "--set",
        "operator.allowedHosts={*.chart.test}",
    ]));
    // The controller-manager's ReplicaSet controller creates the Pods; Pod Security admission
    // would refuse them if they broke the restricted profile.
    wait_for(Duration::from_secs(30), || async {
        pods(&client, &ns, "rel").await == 2
    })
    .await
    .unwrap_or_else(|()| panic!("the chart's Pods were not admitted in {ns}"));
    // Control: the same chart with privilege escalation allowed is refused there.
    let bad_ns = format!("agentcard-bad-{t}");
    restricted_namespace(&client, &bad_ns).await;
    ok(helm(&[
        "install",
        "bad",
        CHART,
        "--namespace",
        &bad_ns,
        "--set",
        "crds.enabled=false",
        // The approver ClusterRole is cluster-wide, named once: the first release made it.
        "--set",
        "approval.approverRole.create=false",
        "--set",
        "securityContext.allowPrivilegeEscalation=true",
    ]));
    let rs = Api::<ReplicaSet>::namespaced(client.clone(), &bad_ns);
    wait_for(Duration::from_secs(30), || async {
        rs.list(&ListParams::default()).await.is_ok_and(|l| {
            l.items.iter().any(|r| {
                r.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| {
                        cs.iter().any(|c| {
                            c.type_ == "ReplicaFailure"
                                && c.message
                                    .as_deref()
                                    .unwrap_or_default()
                                    .contains("PodSecurity")
                        })
                    })
            })
        })
    })
    .await
    .expect("a non-compliant Pod is refused by Pod Security admission");
    assert_eq!(pods(&client, &bad_ns, "bad").await, 0);
    ok(helm(&["uninstall", "bad", "--namespace", &bad_ns]));

    // The operator, run with the chart's ServiceAccount token, publishes a card.
    let sa = "rel-agentcard-operator";
    let req: TokenRequest =
        serde_json::from_value(json!({"spec": {"expirationSeconds": 3600}})).unwrap();
    let token = Api::<ServiceAccount>::namespaced(client.clone(), &ns)
        .create_subresource::<_, TokenRequest>("token", sa, &PostParams::default(), &req)
        .await
        .unwrap()
        .status
        .unwrap()
        .token;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = token_kubeconfig(dir.path(), &token);
    let op = Operator::start_on(
        &kubeconfig,
        &ns,
        None,
        &[
            "--service-name",
            "rel-agentcard-operator",
            "--allowed-hosts",
            "*.chart.test",
            "--ingress-tls",
            "none",
        ],
    );
    let tenant_ns = format!("team-{t}");
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": tenant_ns}})).unwrap(),
        )
        .await
        .unwrap();
    let cards: Api<AgentCard> = Api::namespaced(client.clone(), &tenant_ns);
    let host = format!("hello-{t}.chart.test");
    cards
        .patch(
            "hello",
            &PatchParams::apply("test").force(),
            &Patch::Apply(card("hello", &host, "")),
        )
        .await
        .unwrap();
    let c = wait_card(&cards, "hello", &op, "Ready under the chart's RBAC", ready).await;
    // Served once the server's watch saw the status (a moment after Ready, at most).
    let served = support::plane::wait_for(Duration::from_secs(10), || {
        std::future::ready(op.get(&host, "/.well-known/agent-card.json").status == 200)
    })
    .await;
    assert!(served.is_ok(), "not served:\n{}", op.logs());
    let r = op.get(&host, "/.well-known/agent-card.json");
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("etag").map(|e| e.trim_matches('"').to_string()),
        c.status.unwrap().content_hash
    );
    drop(op);

    // What that identity may not do.
    let id = (ns.as_str(), sa);
    let signing = "agentcard-signing-keys";
    assert!(
        can_named(&client, id, "get", "", "secrets", Some(&ns), Some(signing)).await,
        "its own signing Secret"
    );
    assert!(
        !can_named(
            &client,
            id,
            "get",
            "",
            "secrets",
            Some(&ns),
            Some("sh.helm.release.v1.rel.v1")
        )
        .await,
        "other Secrets of its namespace (the release's values)"
    );
    assert!(
        !can(&client, id, "get", "", "secrets", Some(&tenant_ns)).await,
        "Secrets elsewhere"
    );
    assert!(
        !can(&client, id, "list", "", "secrets", None).await,
        "Secrets cluster-wide"
    );
    assert!(
        !can(
            &client,
            id,
            "create",
            "rbac.authorization.k8s.io",
            "clusterrolebindings",
            None
        )
        .await
    );
    assert!(!can(&client, id, "delete", "", "namespaces", None).await);
    // Imported cards: the agent's Service and its EndpointSlices, read only.
    assert!(can(&client, id, "get", "", "services", Some(&tenant_ns)).await);
    assert!(
        can(
            &client,
            id,
            "list",
            "discovery.k8s.io",
            "endpointslices",
            Some(&tenant_ns)
        )
        .await
    );
    assert!(!can(&client, id, "update", "", "services", Some(&tenant_ns)).await);
    // The Pods imported endpoints name, by name; listing Pods and Nodes only with
    // operator.sourceAllowUnmanagedEndpoints.
    assert!(can(&client, id, "get", "", "pods", Some(&tenant_ns)).await);
    assert!(!can(&client, id, "list", "", "pods", None).await);
    assert!(!can(&client, id, "list", "", "nodes", None).await);
    assert!(
        !can(
            &client,
            id,
            "create",
            "apps",
            "deployments",
            Some(&tenant_ns)
        )
        .await
    );
    // Tenants get AgentCards through edit, never their status.
    let tenant_user = |verb: &'static str, resource: &'static str| {
        let client = client.clone();
        let tenant_ns = tenant_ns.clone();
        async move {
            let binding: k8s_openapi::api::rbac::v1::RoleBinding = serde_json::from_value(json!({
                "metadata": {"name": "team-edit"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}]
            }))
            .unwrap();
            let _ = Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(
                client.clone(),
                &tenant_ns,
            )
            .create(&PostParams::default(), &binding)
            .await;
            let review: SubjectAccessReview = serde_json::from_value(json!({"spec": {"user": "alice",
                "resourceAttributes": {"verb": verb, "group": "agentcard.dev", "resource": resource, "namespace": tenant_ns}}}))
            .unwrap();
            Api::<SubjectAccessReview>::all(client)
                .create(&PostParams::default(), &review)
                .await
                .unwrap()
                .status
                .is_some_and(|s| s.allowed)
        }
    };
    wait_for(Duration::from_secs(10), || {
        tenant_user("create", "agentcards")
    })
    .await
    .expect("edit aggregates the chart's <fullname>-edit role");
    assert!(!tenant_user("patch", "agentcards/status").await);

    // Approvals: alice (edit in her namespace) cannot write one, so she never approves her own
    // card; bob, bound to the chart's agentcard-approver ClusterRole, can, in his own name only
    // (the chart's ValidatingAdmissionPolicy), and an approval is never edited.
    let approval = |approver: &str| -> agentcard_operator::crd::AgentCardApproval {
        serde_json::from_value(json!({
            "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentCardApproval",
            "metadata": {"name": format!("hello-{t}")},
            "spec": {"directory": "company", "card": {"namespace": tenant_ns, "name": "hello"},
                "contentHash": "0123456789abcdef0123456789abcdef", "approver": approver}
        }))
        .unwrap()
    };
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let alice = Api::<agentcard_operator::crd::AgentCardApproval>::all(as_user("alice").await);
    let refused = alice.create(&dry, &approval("alice")).await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(e)) if e.code == 403),
        "a tenant with edit may create approvals: {refused:?}"
    );
    let bob_binding: k8s_openapi::api::rbac::v1::ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": format!("approvers-{t}")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "agentcard-approver"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "bob"}]
    }))
    .unwrap();
    let crbs = Api::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>::all(client.clone());
    crbs.create(&PostParams::default(), &bob_binding)
        .await
        .unwrap();
    let bob = Api::<agentcard_operator::crd::AgentCardApproval>::all(as_user("bob").await);
    wait_for(Duration::from_secs(15), || async {
        bob.create(&dry, &approval("bob")).await.is_ok()
    })
    .await
    .expect("the approver role lets bob approve in his own name");
    let mut impostor = Err(kube::Error::LinesCodecMaxLineLengthExceeded);
    let refused = wait_for(Duration::from_secs(15), || {
        let (bob, a, dry) = (bob.clone(), approval("alice"), dry.clone());
        async move { bob.create(&dry, &a).await.is_err() }
    })
    .await;
    if refused.is_ok() {
        impostor = bob.create(&dry, &approval("alice")).await;
    }
    assert!(
        matches!(&impostor, Err(kube::Error::Api(e)) if e.message.contains("spec.approver")),
        "an approval in another's name is refused by the chart's policy: {impostor:?}"
    );
    let made = bob
        .create(&PostParams::default(), &approval("bob"))
        .await
        .unwrap();
    let edited = bob
        .patch(
            &made.metadata.name.clone().unwrap(),
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"contentHash": "ffffffffffffffffffffffffffffffff"}})),
        )
        .await;
    assert!(edited.is_err(), "an approval was edited: {edited:?}");
    crbs.delete(&format!("approvers-{t}"), &Default::default())
        .await
        .unwrap();

    // Upgrade, then uninstall: nothing of the release is left but the CRDs.
    ok(helm(&[
        "upgrade",
        "rel",
        CHART,
        "--namespace",
        &ns,
        "--reuse-values",
        "--set",
        "replicaCount=1",
    ]));
    wait_for(Duration::from_secs(30), || async {
        pods(&client, &ns, "rel").await == 1
    })
    .await
    .expect("upgrade to one replica");
    ok(helm(&["uninstall", "rel", "--namespace", &ns]));
    let left = ok(Command::new("kubectl")
        .args([
            "get",
            "all,sa,role,rolebinding,clusterrole,clusterrolebinding,cm,secret",
            "-A",
            "-l",
            "app.kubernetes.io/instance=rel",
            "-o",
            "name",
        ])
        .env("KUBECONFIG", dedicated_kubeconfig())
        .output()
        .unwrap());
    wait_for(Duration::from_secs(30), || {
        let out = Command::new("kubectl")
            .args([
                "get",
                "all,sa,role,rolebinding,clusterrole,clusterrolebinding",
                "-A",
                "-l",
                "app.kubernetes.io/instance=rel",
                "-o",
                "name",
            ])
            .env("KUBECONFIG", dedicated_kubeconfig())
            .output()
            .unwrap();
        std::future::ready(out.status.success() && out.stdout.is_empty())
    })
    .await
    .unwrap_or_else(|()| panic!("left behind after uninstall: {left}"));
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    assert!(
        crds.get_opt("agentcards.agentcard.dev")
            .await
            .unwrap()
            .is_some(),
        "crds.keep keeps the CRDs"
    );
    assert!(crds
        .get_opt("agentdirectories.agentcard.dev")
        .await
        .unwrap()
        .is_some());
}
