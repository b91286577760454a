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
    let slice = Slice {
        name: &format!("{service}-test"),
        address: ADDR,
        pod: None,
    };
    slice.create(client, ns, service, port_name, port).await;
}

/// A hand-made EndpointSlice with one ready endpoint: `address`, and a `targetRef` to the Pod
/// `(namespace, name)` when given.
pub struct Slice<'a> {
    /// The slice's name.
    pub name: &'a str,
    /// The endpoint's address.
    pub address: &'a str,
    /// The Pod the endpoint says it is.
    pub pod: Option<(&'a str, &'a str)>,
}

impl Slice<'_> {
    /// Create it for Service `ns/service`, its port `port_name` at `port`.
    pub async fn create(
        &self,
        client: &Client,
        ns: &str,
        service: &str,
        port_name: &str,
        port: u16,
    ) {
        let mut endpoint = json!({"addresses": [self.address], "conditions": {"ready": true}});
        if let Some((pod_ns, pod)) = self.pod {
            endpoint["targetRef"] = json!({"kind": "Pod", "namespace": pod_ns, "name": pod});
        }
        let slice: EndpointSlice = serde_json::from_value(json!({
            "metadata": {"name": self.name, "labels": {
                "kubernetes.io/service-name": service,
                "endpointslice.kubernetes.io/managed-by": "agentcard-tests",
            }},
            "addressType": "IPv4",
            "endpoints": [endpoint],
            "ports": [{"name": port_name, "port": port, "protocol": "TCP"}],
        }))
        .unwrap();
        Api::<EndpointSlice>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &slice)
            .await
            .unwrap();
    }
}

/// The address of [`Peer`]'s network namespace.
pub const PEER_ADDR: &str = "192.0.2.20";

/// A second network namespace inside this one, linked to it by a veth pair (this side
/// 192.0.2.1/24, the peer [`PEER_ADDR`]/24): for a process that must not share the operator's
/// addresses, as an agent Pod does not. Gone when dropped.
pub struct Peer {
    holder: Proc,
}

impl Peer {
    /// Make the namespace and the link.
    pub fn start() -> Peer {
        let holder = Proc(
            Command::new("unshare")
                .args(["--net", "--", "sleep", "infinity"])
                .spawn()
                .expect("unshare"),
        );
        let pid = holder.0.id().to_string();
        let ns_of = |p: &str| std::fs::read_link(format!("/proc/{p}/ns/net")).ok();
        let started = std::time::Instant::now();
        while ns_of(&pid) == ns_of("self") || ns_of(&pid).is_none() {
            assert!(
                started.elapsed() < std::time::Duration::from_secs(10),
                "unshare did not start"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let peer = Peer { holder };
        ip(&[
            "link", "add", "vpeer0", "type", "veth", "peer", "name", "vpeer1", "netns", &pid,
        ]);
        ip(&["addr", "add", "192.0.2.1/24", "dev", "vpeer0"]);
        ip(&["link", "set", "vpeer0", "up"]);
        for args in [
            vec!["link", "set", "lo", "up"],
            vec!["addr", "add", "192.0.2.20/24", "dev", "vpeer1"],
            vec!["link", "set", "vpeer1", "up"],
        ] {
            let st = peer.command("ip").args(&args).status().unwrap();
            assert!(st.success(), "ip {args:?} in the peer failed");
        }
        peer
    }

    /// `program`, to run inside the peer's namespace.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.args(["-t", &self.holder.0.id().to_string(), "-n", "--"])
            .arg(program);
        cmd
    }
}

fn ip(args: &[&str]) {
    let st = Command::new("ip").args(args).status().unwrap();
    assert!(st.success(), "ip {args:?} failed");
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
