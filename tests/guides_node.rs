//! The guides that need Pods (`<!-- runs on: a real node -->`) run as written on a real node
//! (`tests/node/`): the operator's image built here and imported into containerd as a
//! registry would have served it, `helm` on `PATH`, Traefik serving the Ingresses the
//! operator writes at `SERVER`, a Vault server (`VAULT_ADDR`, a dev server's root token as
//! `VAULT_TOKEN`) the Pods reach on the node's address, and the agents the guides start from
//! already running in `NS` (Deployments and Services, as a team would have them: `echo`, whose
//! card the import guide publishes, and `helper`, which the discovery guide finds). Every `sh`
//! block of those guides runs in the index's order, in one bash per guide; `helm install` is
//! the guide's own.

mod support;

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Node as KubeNode};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use support::guides::{self, Place};
use support::netns::Proc;
use support::node::{self, ctr, Node};
use support::plane::{client_for, wait_for};
use support::tools::Tool;

const DONE: &str = "node guides: every shell block ran";
/// Where Traefik serves the Ingresses inside the node.
const TRAEFIK: &str = "127.0.0.1:18000";
/// The namespace the guides' team publishes in.
const NS: &str = "team-echo";

#[test]
fn the_guides_that_need_pods_run_on_a_real_node() {
    assert!(
        !guides::at(Place::Node).is_empty(),
        "no guide is marked to run on a node"
    );
    let image = support::image::operator_image();
    let node = Node::start();
    node.run_inside(
        "inside_the_node",
        DONE,
        &[Tool::Helm, Tool::Traefik, Tool::Vault],
        &[
            ("AGENTCARD_IMAGE_TAR", image.tar.as_os_str()),
            ("AGENTCARD_IMAGE", OsStr::new(&image.image)),
        ],
    );
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"))
}

/// The node's InternalIP, where Pods reach what runs on the node.
async fn node_address(client: &kube::Client) -> String {
    let nodes = Api::<KubeNode>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    nodes.items[0]
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .and_then(|a| a.iter().find(|a| a.type_ == "InternalIP"))
        .map(|a| a.address.clone())
        .expect("the node has an InternalIP")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run inside the node by the_guides_that_need_pods_run_on_a_real_node"]
async fn inside_the_node() {
    let dir = node::inside_dir();
    let kubeconfig = node::kubeconfig(&dir);
    let client = client_for(&kubeconfig).await;
    let image = env("AGENTCARD_IMAGE");
    ctr(&["images", "import", &env("AGENTCARD_IMAGE_TAR")]);

    // What the platform already has: an ingress controller, a Vault, a team's agents.
    let _traefik = support::netns::traefik(
        &kubeconfig,
        TRAEFIK,
        &["kubernetesIngress"],
        &dir.join("guides-traefik.log"),
    );
    let node_ip = node_address(&client).await;
    let vault_addr = format!("http://{node_ip}:8200");
    let _vault = Proc(
        Command::new(Tool::Vault.path())
            .args([
                "server",
                "-dev",
                "-dev-root-token-id=root",
                &format!("-dev-listen-address={node_ip}:8200"),
            ])
            .stdout(std::fs::File::create(dir.join("guides-vault.log")).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting vault"),
    );
    let http = reqwest::Client::new();
    let health = format!("{vault_addr}/v1/sys/health");
    let up = wait_for(Duration::from_secs(60), || async {
        http.get(&health).send().await.is_ok()
    })
    .await;
    assert!(up.is_ok(), "vault did not start");
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap(),
        )
        .await
        .unwrap();
    for (name, card_name) in [("echo", "Echo"), ("helper", "Helper")] {
        node::start_agent(
            &client,
            NS,
            &image,
            &node::StandIn {
                name,
                host: &format!("{name}.agents.internal"),
                card_name,
                labels: json!({}),
                app_protocol: None,
            },
        )
        .await;
    }

    let bin = Path::new(env!("CARGO_BIN_EXE_agentcard-operator"));
    let path = guides::path_with(&[bin, Tool::Helm.path(), Tool::Vault.path()]);
    let work = tempfile::tempdir().unwrap();
    let helm_home = work.path().join(".helm");
    let env = [
        ("KUBECONFIG", kubeconfig.display().to_string()),
        ("PATH", path),
        ("NS", NS.to_string()),
        ("OPERATOR_NS", "agentcard-system".to_string()),
        ("SERVER", format!("http://{TRAEFIK}")),
        (
            "CHART",
            support::root()
                .join("charts/agentcard-operator")
                .display()
                .to_string(),
        ),
        ("IMAGE", image.clone()),
        ("VAULT_ADDR", vault_addr),
        ("VAULT_TOKEN", "root".to_string()),
        (
            "HELM_CACHE_HOME",
            helm_home.join("cache").display().to_string(),
        ),
        (
            "HELM_CONFIG_HOME",
            helm_home.join("config").display().to_string(),
        ),
        (
            "HELM_DATA_HOME",
            helm_home.join("data").display().to_string(),
        ),
    ];
    for guide in guides::at(Place::Node) {
        let out = guide.run(work.path(), &env);
        let context = || {
            let pods = support::kubectl(
                &kubeconfig,
                &["get", "pods", "-A", "-o", "wide", "--no-headers"],
            );
            let logs = Command::new("kubectl")
                .args([
                    "logs",
                    "-n",
                    "agentcard-system",
                    "-l",
                    "app.kubernetes.io/name=agentcard-operator",
                    "--tail=40",
                    "--prefix",
                ])
                .env("KUBECONFIG", &kubeconfig)
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            format!("pods\n{pods}\n--- operator\n{logs}")
        };
        assert!(
            out.status.success(),
            "{}",
            guides::failure(&guide, &out, &context())
        );
        println!("{}: ran", guide.file);
    }
    println!("{DONE}");
}
