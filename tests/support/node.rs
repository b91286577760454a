//! A control plane with a real node (`tests/node/`: kubelet, kube-proxy, kube-scheduler,
//! containerd, runc and CNI), all in private network and mount namespaces. The outer test
//! starts it, then re-runs this test binary inside those namespaces for an inner, ignored test
//! that does the work (Pod and Service addresses, the plane and `ctr` are only reachable
//! there). Nothing can be downloaded in there: the outer test builds and installs first.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::api::{Api, PostParams};
use kube::Client;
use serde_json::{json, Value};

use super::root;
use super::tools::Tool;

/// A node and its plane, stopped when dropped (and by a watchdog if this process dies).
pub struct Node {
    /// Its directory (`tests/node/start DIR`).
    pub dir: PathBuf,
}

impl Node {
    /// Build what the node needs and start it in a directory of this test binary's own.
    pub fn start() -> Node {
        let dir =
            PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("node-{}", std::process::id()));
        let out = Command::new("bash")
            .arg(root().join("tests/node/start"))
            .arg(&dir)
            .output()
            .expect("running tests/node/start");
        assert!(
            out.status.success(),
            "the node did not start:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!("{}", String::from_utf8_lossy(&out.stderr));
        // However this process ends, the node goes with it.
        super::on_exit_stop(&root().join("tests/node/stop"), &dir, false);
        Node { dir }
    }

    /// Re-run this test binary's `inner` test inside the node's namespaces, with `tools` and
    /// the SDK oracles prepared outside first and `env` set; its output, after asserting it
    /// passed and printed `done`.
    pub fn run_inside(
        &self,
        inner: &str,
        done: &str,
        tools: &[Tool],
        env: &[(&str, &OsStr)],
    ) -> String {
        let mut exec = Command::new("bash");
        exec.arg(root().join("tests/node/exec"))
            .arg(&self.dir)
            .env("AGENTCARD_IN_NODE", "1")
            .env("AGENTCARD_NODE_DIR", &self.dir);
        for (k, v) in env {
            exec.env(k, v);
        }
        super::run_inner(exec, inner, done, tools)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(root().join("tests/node/stop"))
            .arg(&self.dir)
            .output();
    }
}

/// Inside: the node's directory (asserting this runs inside, started by the outer test).
pub fn inside_dir() -> PathBuf {
    assert_eq!(
        std::env::var("AGENTCARD_IN_NODE").as_deref(),
        Ok("1"),
        "run by the outer test"
    );
    PathBuf::from(std::env::var_os("AGENTCARD_NODE_DIR").expect("AGENTCARD_NODE_DIR"))
}

/// Inside: the node's plane's kubeconfig.
pub fn kubeconfig(dir: &Path) -> PathBuf {
    dir.join("plane/kubeconfig")
}

/// Inside: run `ctr -n k8s.io ARGS` against the node's containerd; its stdout, after
/// asserting it succeeded.
pub fn ctr(args: &[&str]) -> String {
    let out = Command::new("ctr")
        .args(["-n", "k8s.io"])
        .args(args)
        .output()
        .expect("running ctr");
    assert!(
        out.status.success(),
        "ctr {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A stand-in agent `name` in namespace `ns`: the operator's own image serving a card from a
/// ConfigMap volume, on any name it is reached by, and on `host` also a directory of it
/// (`/v1/agents`); its Deployment carries `labels`, its Service's port `app_protocol`.
pub struct StandIn<'a> {
    /// Its Deployment's, Service's and card ConfigMap's (`<name>-card`) name.
    pub name: &'a str,
    /// The host it also serves its directory on.
    pub host: &'a str,
    /// Its card's `name`.
    pub card_name: &'a str,
    /// Its Deployment's labels.
    pub labels: Value,
    /// Its Service port's `appProtocol`, if any.
    pub app_protocol: Option<&'a str>,
}

/// Create agent `agent` in `ns` (ConfigMap, Deployment, Service) from `image`.
pub async fn start_agent(client: &Client, ns: &str, image: &str, agent: &StandIn<'_>) {
    let StandIn { name, host, .. } = *agent;
    let card = json!({
        "name": agent.card_name, "description": "Says what it hears.", "version": "2.0.0",
        "supportedInterfaces": [{"url": format!("http://{name}.{ns}.svc:80/"),
            "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "capabilities": {}, "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "echo", "name": "Echo", "description": "Echoes text.", "tags": ["echo"]}]
    });
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": format!("{name}-card")},
        "data": {format!("{host}.json"): card.to_string()}
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    let restricted = json!({
        "runAsNonRoot": true, "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
        "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}
    });
    let deploy: Deployment = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": agent.labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "automountServiceAccountToken": false,
                    "containers": [{
                        "name": "agent", "image": image, "imagePullPolicy": "Never",
                        "args": ["serve", "--from-dir", "/cards", "--fallback-host", host,
                                 "--directory-host", host],
                        "ports": [{"name": "http", "containerPort": 8080},
                                  {"name": "admin", "containerPort": 8081}],
                        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "admin"},
                                           "periodSeconds": 2},
                        "securityContext": restricted,
                        "volumeMounts": [{"name": "cards", "mountPath": "/cards"}]
                    }],
                    "volumes": [{"name": "cards", "configMap": {"name": format!("{name}-card")}}]
                }
            }
        }
    }))
    .unwrap();
    Api::<Deployment>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &deploy)
        .await
        .unwrap();
    let mut port = json!({"name": "http", "port": 80, "targetPort": "http"});
    if let Some(p) = agent.app_protocol {
        port["appProtocol"] = json!(p);
    }
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"selector": {"app": name}, "ports": [port]}
    }))
    .unwrap();
    Api::<Service>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &svc)
        .await
        .unwrap();
}
