//! Tests that route real traffic through an ingress controller run in a private network
//! namespace: the Kubernetes API refuses loopback addresses in EndpointSlices, so there the
//! loopback device also carries [`ADDR`], every process listens on all addresses, and
//! hand-made EndpointSlices point Services at [`ADDR`]. The outer test re-runs its own binary
//! under `unshare --net` (root) for an inner, ignored test that does the work. Nothing can be
//! downloaded in there: the outer test builds the Go tools and installs the SDK oracles first.

use std::process::{Child, Command, Stdio};

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, PostParams};
use kube::Client;
use serde_json::json;

/// The address the namespace's processes are reached at through EndpointSlices.
pub const ADDR: &str = "192.0.2.10";

/// Re-run this test binary's `inner` test inside a new network namespace, with the plane's
/// binaries, `tools` and the SDK oracles prepared outside it first (a cold cache downloads
/// them); its output, after asserting it passed and printed `done`.
pub fn run_inside(inner: &str, done: &str, tools: &[super::tools::Tool]) -> String {
    super::plane::build_binaries();
    let mut unshare = Command::new("unshare");
    unshare.args(["--net", "--"]).env("AGENTCARD_IN_NETNS", "1");
    super::run_inner(unshare, inner, done, tools)
}

/// Traefik reading the plane of `kubeconfig` with `providers` (`kubernetesIngress`,
/// `kubernetesGateway`), listening on `address` (`:18000`, `127.0.0.1:18000`), logging to
/// `log`; stopped when dropped.
pub fn traefik(
    kubeconfig: &std::path::Path,
    address: &str,
    providers: &[&str],
    log: &std::path::Path,
) -> Proc {
    let mut cmd = Command::new(super::tools::traefik());
    cmd.args([
        "--global.checkNewVersion=false",
        "--global.sendAnonymousUsage=false",
        &format!("--entryPoints.web.address={address}"),
        "--log.level=INFO",
    ]);
    for p in providers {
        cmd.arg(format!("--providers.{p}=true"));
    }
    Proc(
        cmd.env("KUBECONFIG", kubeconfig)
            .stdout(std::fs::File::create(log).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting Traefik"),
    )
}

/// Inside the namespace: bring loopback up with [`ADDR`] on it.
pub fn setup_loopback() {
    assert_eq!(
        std::env::var("AGENTCARD_IN_NETNS").as_deref(),
        Ok("1"),
        "run by the outer test"
    );
    for args in [
        vec!["link", "set", "lo", "up"],
        vec!["addr", "add", "192.0.2.10/32", "dev", "lo"],
    ] {
        let st = Command::new("ip").args(&args).status().unwrap();
        assert!(st.success(), "ip {args:?} failed");
    }
}

/// A child process killed on drop.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An EndpointSlice of Service `ns/service` with one endpoint, [`ADDR`]:`port`.
pub async fn endpoint_slice(client: &Client, ns: &str, service: &str, port_name: &str, port: u16) {
    let slice: EndpointSlice = serde_json::from_value(json!({
        "metadata": {"name": format!("{service}-test"), "labels": {
            "kubernetes.io/service-name": service,
            "endpointslice.kubernetes.io/managed-by": "agentcard-tests",
        }},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [ADDR], "conditions": {"ready": true}}],
        "ports": [{"name": port_name, "port": port, "protocol": "TCP"}],
    }))
    .unwrap();
    Api::<EndpointSlice>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &slice)
        .await
        .unwrap();
}

/// A stand-in agent: a static HTTP server on `port` answering `/a2a/v1` with `body`.
pub fn agent(root: &std::path::Path, port: u16, body: &str) -> Proc {
    std::fs::create_dir_all(root.join("a2a")).unwrap();
    std::fs::write(root.join("a2a/v1"), body).unwrap();
    Proc(
        Command::new("python3")
            .args([
                "-m",
                "http.server",
                &port.to_string(),
                "--bind",
                "0.0.0.0",
                "--directory",
            ])
            .arg(root)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

/// GET `path` for `host` on `127.0.0.1:port`; status 0 while nothing listens there yet
/// (Traefik may still be starting).
pub fn get(port: u16, host: &str, path: &str) -> super::http::Resp {
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    if std::net::TcpStream::connect(addr).is_err() {
        return super::http::Resp {
            status: 0,
            headers: Default::default(),
            body: Vec::new(),
        };
    }
    super::http::request(addr, "GET", path, &[("Host", host)])
}
