//! The chart's Pods on a real node: the operator's image built here (`scripts/image`),
//! imported into containerd, installed with helm into a namespace enforcing the restricted
//! Pod Security profile, run by kubelet and runc, probed by kubelet, reached through Traefik
//! and the EndpointSlices the cluster made from the Ready Pods (none made by hand).
//!
//! The node (`tests/node/`) runs in private network and mount namespaces: the outer test
//! builds the image and the tools, starts the node and re-runs this binary inside for the
//! scenario: install, the runtime's view of the container (uid, capabilities, read-only root),
//! a card imported from an agent Pod and served through Traefik, a second agent (a Deployment
//! labelled as kagenti labels A2A agents, its Service marked `appProtocol: a2a`) discovered and
//! served through Traefik with no AgentCard written by anyone, failover of the lease holder
//! and a rolling upgrade with a client probing all along, uninstall.

mod support;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentcard_operator::crd::AgentCard;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::{json, Value};
use support::node::{self, ctr, Node};
use support::operator::current_lease_holder;
use support::plane::{client_for, wait_for};
use support::tools::Tool;
use support::{condition, ready};

const NS: &str = "agentcard-system";
const RELEASE: &str = "rel";
const SERVICE: &str = "rel-agentcard-operator";
const TENANT: &str = "team";
/// A tenant naming others' addresses in its EndpointSlices.
const HOSTILE: &str = "mallory";
const HOST: &str = "echo.agents.test";
/// The host the AgentDiscovery's template gives the discovered agent `helper`.
const DISCOVERED_HOST: &str = "helper.team.agents.test";
const TRAEFIK: &str = "127.0.0.1:18000";
const DONE: &str = "node: installed, hardened, served, failed over, upgraded, uninstalled";

#[test]
fn the_chart_runs_on_a_real_node_from_an_image_built_here() {
    let image = support::image::operator_image();
    let node = Node::start();
    node.run_inside(
        "inside_the_node",
        DONE,
        &[Tool::Helm, Tool::Traefik],
        &[
            ("AGENTCARD_IMAGE_TAR", image.tar.as_os_str()),
            ("AGENTCARD_IMAGE", image.image.as_ref()),
        ],
    );
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is set by the outer test"))
}

/// The operator's Pods of the release, oldest first.
async fn operator_pods(client: &Client) -> Vec<Pod> {
    let mut pods = Api::<Pod>::namespaced(client.clone(), NS)
        .list(&ListParams::default().labels(&format!(
            "app.kubernetes.io/instance={RELEASE},app.kubernetes.io/name=agentcard-operator"
        )))
        .await
        .unwrap()
        .items;
    pods.sort_by_key(|p| p.metadata.creation_timestamp.clone().map(|t| t.0));
    pods
}

fn pod_ready(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn pod_image(p: &Pod) -> String {
    p.spec.as_ref().unwrap().containers[0]
        .image
        .clone()
        .unwrap_or_default()
}

/// Wait until the release runs exactly `n` Pods of `image`, every one Ready, none leaving.
async fn wait_rollout(client: &Client, n: usize, image: &str, within: Duration) -> Vec<Pod> {
    let done = wait_for(within, || async {
        let pods = operator_pods(client).await;
        pods.len() == n && pods.iter().all(|p| pod_ready(p) && pod_image(p) == image)
    })
    .await;
    let pods = operator_pods(client).await;
    if done.is_err() {
        let describe: Vec<String> = pods
            .iter()
            .map(|p| {
                format!(
                    "{} {} ready={} {:?}",
                    p.metadata.name.clone().unwrap_or_default(),
                    pod_image(p),
                    pod_ready(p),
                    p.status.as_ref().map(|s| (&s.phase, &s.container_statuses))
                )
            })
            .collect();
        panic!("not {n} Ready Pods of {image}:\n{}", describe.join("\n"));
    }
    pods
}

fn helm(kubeconfig: &Path, args: &[&str]) {
    let out = support::tools::helm_command(kubeconfig)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "helm {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// GET `path` for `host` through Traefik on a fresh connection; `None` when the connection
/// fails or the response is cut.
fn through_traefik(host: &str, path: &str) -> Option<support::http::Resp> {
    let mut s = TcpStream::connect(TRAEFIK).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    if raw.is_empty() {
        return None;
    }
    Some(support::http::parse(&raw, false))
}

/// A client fetching the card through Traefik every 20 ms until stopped.
struct Prober {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<(usize, Vec<String>)>,
}

impl Prober {
    fn start(hash: String) -> Prober {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let (mut total, mut failed) = (0, Vec::new());
            let start = Instant::now();
            while !flag.load(Ordering::Relaxed) {
                total += 1;
                let at = start.elapsed();
                match through_traefik(HOST, "/.well-known/agent-card.json") {
                    Some(r)
                        if r.status == 200
                            && agentcard_operator::contract::content_hash(&r.body) == hash => {}
                    Some(r) => failed.push(format!(
                        "{at:?}: {} {}",
                        r.status,
                        String::from_utf8_lossy(&r.body)
                    )),
                    None => failed.push(format!("{at:?}: no answer")),
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            (total, failed)
        });
        Prober { stop, thread }
    }

    fn finish(self) -> (usize, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// The status line `field` (e.g. `CapEff`) of process `pid`.
fn proc_status(pid: &str, field: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
        .trim()
        .to_string()
}

/// What the runtime shows of a running container: its uid, capabilities, privilege escalation
/// and root filesystem, read from the kernel through its process, not from the manifest.
fn assert_hardened(pod: &Pod) {
    let name = pod.metadata.name.clone().unwrap();
    let id = pod
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0]
        .container_id
        .clone()
        .unwrap();
    let id = id.strip_prefix("containerd://").unwrap();
    let tasks = ctr(&["tasks", "ls"]);
    let pid = tasks
        .lines()
        .find_map(|l| {
            let mut f = l.split_whitespace();
            (f.next() == Some(id)).then(|| f.next().unwrap().to_string())
        })
        .unwrap_or_else(|| panic!("no task for {name}'s container {id}:\n{tasks}"));
    let uids = proc_status(&pid, "Uid");
    assert!(
        uids.split_whitespace().all(|u| u == "65532"),
        "{name}: Uid {uids}"
    );
    let gids = proc_status(&pid, "Gid");
    assert!(
        gids.split_whitespace().all(|g| g == "65532"),
        "{name}: Gid {gids}"
    );
    for caps in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert_eq!(
            proc_status(&pid, caps),
            "0000000000000000",
            "{name}: {caps}"
        );
    }
    assert_eq!(proc_status(&pid, "NoNewPrivs"), "1", "{name}: NoNewPrivs");
    let mountinfo = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    let root = mountinfo
        .lines()
        .find(|l| l.split_whitespace().nth(4) == Some("/"))
        .unwrap_or_else(|| panic!("{name}: no / in its mountinfo"));
    let options = root.split_whitespace().nth(5).unwrap();
    assert!(
        options.split(',').any(|o| o == "ro"),
        "{name}: / is mounted {options}"
    );
    let write = std::fs::write(format!("/proc/{pid}/root/written-by-the-test"), b"x");
    assert_eq!(
        write.as_ref().map_err(|e| e.raw_os_error()),
        Err(Some(30)),
        "{name}: a write to its root filesystem did not fail with EROFS: {write:?}"
    );
}

/// The API server's address and port, from the `default/kubernetes` EndpointSlice.
async fn api_server_endpoint(client: &Client) -> (String, u16) {
    let slices = Api::<EndpointSlice>::namespaced(client.clone(), "default")
        .list(&ListParams::default().labels("kubernetes.io/service-name=kubernetes"))
        .await
        .unwrap();
    let slice = &slices.items[0];
    let address = slice.endpoints[0].addresses[0].clone();
    let port = slice.ports.as_ref().unwrap()[0].port.unwrap();
    (address, u16::try_from(port).unwrap())
}

/// The path the hostile tenant's cards import from: nothing is served there, so a request
/// that got through is counted as `route="not_found"` by the server it reached, apart from the
/// card requests of legitimate imports refreshing meanwhile.
const PROBE_PATH: &str = "/hostile-probe";

/// Requests for paths it does not serve that the card server at `ip` answered (its admin
/// port's `/metrics`): the hostile tenant's probes.
fn probes_answered_by(ip: &str) -> f64 {
    let addr = format!("{ip}:8081").parse().unwrap();
    let r = support::http::request(addr, "GET", "/metrics", &[("Host", "admin")]);
    assert_eq!(r.status, 200, "{ip}'s metrics");
    let text = String::from_utf8_lossy(&r.body);
    let not_found: String = text
        .lines()
        .filter(|l| l.contains("route=\"not_found\""))
        .map(|l| format!("{l}\n"))
        .collect();
    support::requests_answered(&not_found)
}

/// A selector-less Service `ns/name` whose hand-made slice has one endpoint, `address:port`
/// (naming `pod` as its targetRef when given), and an AgentCard importing from it (from
/// [`PROBE_PATH`] when the namespace is the hostile tenant's).
async fn hand_made_source(
    client: &Client,
    ns: &str,
    name: &str,
    address: &str,
    port: u16,
    pod: Option<(&str, &str)>,
) {
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"ports": [{"name": "http", "port": 80, "targetPort": port}]}
    }))
    .unwrap();
    Api::<Service>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &svc)
        .await
        .unwrap();
    let slice = support::netns::Slice {
        name: &format!("{name}-hand-made"),
        address,
        pod,
    };
    slice.create(client, ns, name, "http", port).await;
    let mut source = json!({"service": {"name": name, "port": 80}, "refreshSeconds": 10});
    if ns == HOSTILE {
        source["path"] = json!(PROBE_PATH);
    }
    let card = json!({
        "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentCard",
        "metadata": {"name": name},
        "spec": {
            "source": source,
            "publish": {"host": format!("{name}.{ns}.agents.test")},
            "backend": {"serviceName": name, "port": 80}
        }
    });
    support::apply_card(client, ns, &card).await;
}

/// Wait for `ns/name` to report `EndpointNotAllowed` saying `why`; its message.
async fn wait_refused(client: &Client, ns: &str, name: &str, why: &str) -> String {
    let cards: Api<AgentCard> = Api::namespaced(client.clone(), ns);
    let message = || async {
        let c = cards.get(name).await.ok()?;
        let (s, r, m) = condition(&c, "SourceReachable")?;
        (s == "False" && r == "EndpointNotAllowed" && m.contains(why) && !ready(&c)).then_some(m)
    };
    let refused = wait_for(Duration::from_secs(60), || async {
        message().await.is_some()
    })
    .await;
    assert!(
        refused.is_ok(),
        "{ns}/{name} is not refused with \"{why}\": {:?}",
        cards.get(name).await.unwrap().status
    );
    message().await.unwrap()
}

/// The addresses of `service`'s EndpointSlices, after asserting the endpointslice controller
/// made every one of them.
async fn slice_addresses(client: &Client, ns: &str, service: &str) -> BTreeSet<String> {
    let slices = Api::<EndpointSlice>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={service}")))
        .await
        .unwrap()
        .items;
    let mut addresses = BTreeSet::new();
    for s in &slices {
        let managed_by = s
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("endpointslice.kubernetes.io/managed-by"))
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            managed_by, "endpointslice-controller.k8s.io",
            "{ns}/{service}: a slice the cluster did not make"
        );
        for e in &s.endpoints {
            if e.conditions.as_ref().and_then(|c| c.ready) == Some(true) {
                addresses.extend(e.addresses.iter().cloned());
            }
        }
    }
    addresses
}

fn pod_ips(pods: &[Pod]) -> BTreeSet<String> {
    pods.iter()
        .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs inside the node's namespaces, started by the outer test"]
async fn inside_the_node() {
    let dir = node::inside_dir();
    let kubeconfig = node::kubeconfig(&dir);
    let client = client_for(&kubeconfig).await;
    let image = env("AGENTCARD_IMAGE");
    let (repository, tag) = image.rsplit_once(':').unwrap();
    let upgrade = format!("{repository}:{tag}-upgrade");

    // 1. The image, imported as a registry would have served it; the upgrade's tag is the
    //    same image under another name.
    ctr(&["images", "import", &env("AGENTCARD_IMAGE_TAR")]);
    ctr(&["images", "tag", &image, &upgrade]);
    let images = ctr(&["images", "ls", "-q"]);
    assert!(images.lines().any(|l| l == image), "{images}");

    // helm install into a namespace enforcing the restricted profile; kubelet's readiness
    // probe makes both replicas Ready.
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NS, "labels": {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "latest"}}}))
    .unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let installed = Instant::now();
    helm(
        &kubeconfig,
        &[
            "install",
            RELEASE,
            "charts/agentcard-operator",
            "--namespace",
            NS,
            "--set",
            &format!("image.repository={repository}"),
            "--set",
            &format!("image.tag={tag}"),
            "--set",
            "image.pullPolicy=Never",
            "--set",
            "ingress.tls=none",
        ],
    );
    let pods = wait_rollout(&client, 2, &image, Duration::from_secs(180)).await;
    println!(
        "helm install -> both Pods Ready: {:.1} s",
        installed.elapsed().as_secs_f64()
    );
    let names: Vec<String> = pods
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    let holder = support::operator::lease_holder(&client, NS).await;
    assert!(
        names.contains(&holder),
        "lease holder {holder} is none of {names:?}"
    );
    for name in &names {
        let logs = support::kubectl(&kubeconfig, &["logs", "-n", NS, name]);
        assert!(
            logs.contains("agentcard-operator running"),
            "{name}'s log has no startup line:\n{logs}"
        );
    }

    // Nothing is pulled: a Pod of an image never imported fails as on any node.
    let missing: Pod = serde_json::from_value(json!({
        "metadata": {"name": "not-imported"},
        "spec": {"containers": [{"name": "c", "image": "registry.invalid/nothing:1"}]}
    }))
    .unwrap();
    let default_pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    default_pods
        .create(&PostParams::default(), &missing)
        .await
        .unwrap();
    let pull_failed = wait_for(Duration::from_secs(60), || async {
        default_pods.get("not-imported").await.is_ok_and(|p| {
            p.status
                .and_then(|s| s.container_statuses)
                .and_then(|cs| cs.into_iter().next())
                .and_then(|c| c.state?.waiting?.reason)
                .is_some_and(|r| r == "ErrImagePull" || r == "ImagePullBackOff")
        })
    })
    .await;
    assert!(
        pull_failed.is_ok(),
        "a Pod of an image never imported: {:?}",
        default_pods.get("not-imported").await.unwrap().status
    );
    default_pods
        .delete("not-imported", &DeleteParams::default())
        .await
        .unwrap();

    // 2. The runtime enforces the restricted settings.
    for p in &pods {
        assert_hardened(p);
    }

    // 3, 4. Traefik routes by the Ingresses the operator wrote to the EndpointSlices the cluster
    //       made: the card (imported from an agent Pod) and JWKS to the operator's Pods, the
    //       agent's path to the agent's Pod.
    let traefik_log = dir.join("traefik.log");
    let _traefik =
        support::netns::traefik(&kubeconfig, TRAEFIK, &["kubernetesIngress"], &traefik_log);
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": TENANT}})).unwrap(),
        )
        .await
        .unwrap();
    node::start_agent(
        &client,
        TENANT,
        &image,
        &node::StandIn {
            name: "echo",
            host: HOST,
            card_name: "Echo",
            labels: json!({}),
            app_protocol: None,
        },
    )
    .await;
    let card: Value = json!({
        "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentCard",
        "metadata": {"name": "echo"},
        "spec": {
            "source": {"service": {"name": "echo", "port": 80}},
            "publish": {"host": HOST},
            "backend": {"serviceName": "echo", "port": 80, "path": "/v1"}
        }
    });
    let cards: Api<AgentCard> = Api::namespaced(client.clone(), TENANT);
    cards
        .patch(
            "echo",
            &PatchParams::apply("test").force(),
            &Patch::Apply(&card),
        )
        .await
        .unwrap();
    let published = wait_for(Duration::from_secs(120), || async {
        cards.get("echo").await.is_ok_and(|c| ready(&c))
    })
    .await;
    let c = cards.get("echo").await.unwrap();
    assert!(
        published.is_ok(),
        "the imported card is not Ready: {:?}",
        c.status
    );
    assert_eq!(
        condition(&c, "SourceReachable")
            .map(|(s, _, _)| s)
            .as_deref(),
        Some("True")
    );
    let hash = c.status.as_ref().unwrap().content_hash.clone().unwrap();

    let operator_ips = pod_ips(&pods);
    assert_eq!(
        slice_addresses(&client, NS, SERVICE).await,
        operator_ips,
        "the chart Service's slices hold the Ready operator Pods"
    );
    let agent_pods = Api::<Pod>::namespaced(client.clone(), TENANT)
        .list(&ListParams::default().labels("app=echo"))
        .await
        .unwrap()
        .items;
    assert_eq!(
        slice_addresses(&client, TENANT, "echo").await,
        pod_ips(&agent_pods),
        "the agent Service's slices hold the agent Pod"
    );

    let served = wait_for(Duration::from_secs(60), || {
        std::future::ready(
            through_traefik(HOST, "/.well-known/agent-card.json").is_some_and(|r| {
                r.status == 200 && agentcard_operator::contract::content_hash(&r.body) == hash
            }),
        )
    })
    .await;
    assert!(
        served.is_ok(),
        "the card is not served through Traefik; its log:\n{}",
        std::fs::read_to_string(&traefik_log).unwrap_or_default()
    );
    let card_bytes = through_traefik(HOST, "/.well-known/agent-card.json")
        .unwrap()
        .body;
    let jwks = through_traefik(HOST, "/.well-known/jwks.json").unwrap();
    assert_eq!(jwks.status, 200, "JWKS through Traefik");
    let verdict = support::python_sdk_verdict(&card_bytes, &jwks.body);
    assert!(verdict.valid, "the Python SDK: {:?}", verdict.error);
    let served_card: Value = serde_json::from_slice(&card_bytes).unwrap();
    assert_eq!(
        served_card["name"], "Echo",
        "the agent's own card, imported"
    );
    let first_url = served_card["supportedInterfaces"][0]["url"]
        .as_str()
        .unwrap();
    assert!(
        first_url.starts_with(&format!("https://{HOST}/v1")),
        "the backend's public URL first: {first_url}"
    );
    // The agent's path reaches the agent's Pod: there, and only there, /v1/agents lists the
    // agent's own card.
    let reached = wait_for(Duration::from_secs(30), || {
        std::future::ready(through_traefik(HOST, "/v1/agents").is_some_and(|r| {
            r.status == 200
                && serde_json::from_slice::<Value>(&r.body)
                    .is_ok_and(|v| v["agents"][0]["card"]["name"] == "Echo")
        }))
    })
    .await;
    assert!(
        reached.is_ok(),
        "the agent's path through Traefik: {:?}",
        through_traefik(HOST, "/v1/agents")
            .map(|r| (r.status, String::from_utf8_lossy(&r.body).into_owned()))
    );

    // 4a. Discovery: a second agent, its Deployment labelled as kagenti labels A2A agents and
    //     its Service's port marked `appProtocol: a2a`, gets a card nobody wrote, at the
    //     templated host, served through Traefik and verified by the Python SDK.
    node::start_agent(
        &client,
        TENANT,
        &image,
        &node::StandIn {
            name: "helper",
            host: DISCOVERED_HOST,
            card_name: "Helper",
            labels: json!({"kagenti.io/type": "agent", "protocol.kagenti.io/a2a": "true"}),
            app_protocol: Some("a2a"),
        },
    )
    .await;
    Api::<agentcard_operator::crd::AgentDiscovery>::all(client.clone())
        .patch(
            "agents",
            &PatchParams::apply("admin").force(),
            &Patch::Apply(json!({
                "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentDiscovery",
                "metadata": {"name": "agents"},
                "spec": {
                    "hostTemplate": "{name}.{namespace}.agents.test",
                    "sources": ["Services", "KagentiWorkloads"],
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": TENANT}}
                }
            })),
        )
        .await
        .unwrap();
    let discovered = wait_for(Duration::from_secs(120), || async {
        cards.get("helper").await.is_ok_and(|c| ready(&c))
    })
    .await;
    let helper = cards.get_opt("helper").await.unwrap();
    assert!(
        discovered.is_ok(),
        "the discovered card is not Ready: {:?}",
        helper.map(|c| c.status)
    );
    let helper_bytes = wait_for(Duration::from_secs(60), || {
        std::future::ready(
            through_traefik(DISCOVERED_HOST, "/.well-known/agent-card.json")
                .is_some_and(|r| r.status == 200),
        )
    })
    .await
    .ok()
    .and_then(|()| through_traefik(DISCOVERED_HOST, "/.well-known/agent-card.json"))
    .map(|r| r.body)
    .unwrap_or_default();
    let helper_card: Value = serde_json::from_slice(&helper_bytes).unwrap_or_default();
    assert_eq!(
        helper_card["name"], "Helper",
        "the discovered agent's own card"
    );
    let jwks = through_traefik(DISCOVERED_HOST, "/.well-known/jwks.json").unwrap();
    let verdict = support::python_sdk_verdict(&helper_bytes, &jwks.body);
    assert!(verdict.valid, "the Python SDK: {:?}", verdict.error);

    // 4b. Import fetches only from the card's namespace's own Pods: a hostile tenant's
    //     hand-made slices naming the agent's Pod (another namespace's), the lease holder's Pod
    //     and the API server are refused, naming the address, and nothing is sent (the agent
    //     and the holder count the requests they answer). The team's selector-less Service in
    //     front of its own Pod waits for the opt-in (step 6).
    let agent_ip = pod_ips(&agent_pods).into_iter().next().unwrap();
    let agent_pod = agent_pods[0].metadata.name.clone().unwrap();
    let holder_ip = pods
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(holder.as_str()))
        .and_then(|p| p.status.as_ref()?.pod_ip.clone())
        .unwrap();
    let (api_ip, api_port) = api_server_endpoint(&client).await;
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": HOSTILE}})).unwrap(),
        )
        .await
        .unwrap();
    let counted = [agent_ip.clone(), holder_ip.clone()];
    let answered = || {
        counted
            .iter()
            .map(|ip| probes_answered_by(ip))
            .collect::<Vec<f64>>()
    };
    let before = answered();
    let cases = [
        (
            HOSTILE,
            "other-pod",
            agent_ip.clone(),
            8080,
            Some((TENANT, agent_pod.as_str())),
            format!("its targetRef is Pod {TENANT}/{agent_pod}, not a Pod of this namespace"),
        ),
        (
            HOSTILE,
            "operator",
            holder_ip.clone(),
            8080,
            None,
            "the operator's own address".to_string(),
        ),
        (
            HOSTILE,
            "api",
            api_ip.clone(),
            api_port,
            None,
            "the Kubernetes API server's address".to_string(),
        ),
        (
            TENANT,
            "vm",
            agent_ip.clone(),
            8080,
            None,
            "the endpoint names no Pod".to_string(),
        ),
    ];
    for (ns, name, address, port, pod, _) in &cases {
        hand_made_source(&client, ns, name, address, *port, *pod).await;
    }
    for (ns, name, address, port, _, why) in &cases {
        let message = wait_refused(&client, ns, name, why).await;
        assert!(
            message.contains(&format!("endpoint {address}:{port} of Service {ns}/{name}")),
            "{name}: {message}"
        );
    }
    // Refused sources are retried within seconds: give them several tries.
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(
        answered(),
        before,
        "requests reached the agent or the operator"
    );
    println!(
        "hostile endpoints refused without a request: another namespace's Pod {agent_ip}, the lease holder {holder_ip}, the API server {api_ip}:{api_port}"
    );

    // 5. Failover: the lease holder's Pod is deleted while a client fetches the card through
    //    Traefik every 20 ms.
    let probe = Prober::start(hash.clone());
    std::thread::sleep(Duration::from_secs(2));
    let deleted = Instant::now();
    Api::<Pod>::namespaced(client.clone(), NS)
        .delete(&holder, &DeleteParams::default())
        .await
        .unwrap();
    let took_over = wait_for(Duration::from_secs(60), || async {
        current_lease_holder(&client, NS)
            .await
            .is_some_and(|h| !h.is_empty() && h != holder)
    })
    .await;
    let takeover = deleted.elapsed();
    assert!(
        took_over.is_ok(),
        "no replica took the lease over from {holder}"
    );
    let new_holder = current_lease_holder(&client, NS).await.unwrap();
    let after = wait_rollout(&client, 2, &image, Duration::from_secs(120)).await;
    assert!(
        after
            .iter()
            .all(|p| p.metadata.name.as_deref() != Some(holder.as_str())),
        "the deleted Pod is still there"
    );
    std::thread::sleep(Duration::from_secs(2));
    let (total, failed) = probe.finish();
    println!(
        "failover: {holder} deleted, {new_holder} took the lease over after {:.2} s; {total} requests through Traefik, {} failed",
        takeover.as_secs_f64(),
        failed.len()
    );
    assert!(failed.is_empty(), "failed during failover: {failed:#?}");

    // 6. Rolling upgrade to another tag: every Pod replaced, no request failed.
    let probe = Prober::start(hash.clone());
    std::thread::sleep(Duration::from_secs(1));
    let upgrading = Instant::now();
    helm(
        &kubeconfig,
        &[
            "upgrade",
            RELEASE,
            "charts/agentcard-operator",
            "--namespace",
            NS,
            "--reuse-values",
            "--set",
            &format!("image.tag={tag}-upgrade"),
            "--set",
            "operator.sourceAllowUnmanagedEndpoints=true",
        ],
    );
    let upgraded = wait_rollout(&client, 2, &upgrade, Duration::from_secs(240)).await;
    let old: BTreeSet<_> = after.iter().map(|p| p.metadata.name.clone()).collect();
    assert!(
        upgraded.iter().all(|p| !old.contains(&p.metadata.name)),
        "not every Pod was replaced"
    );
    std::thread::sleep(Duration::from_secs(2));
    let (total, failed) = probe.finish();
    println!(
        "rolling upgrade to {upgrade}: {:.1} s; {total} requests through Traefik, {} failed",
        upgrading.elapsed().as_secs_f64(),
        failed.len()
    );
    assert!(failed.is_empty(), "failed during the upgrade: {failed:#?}");
    // With the opt-in the team's selector-less Service imports; another namespace's Pod and
    // the API server stay refused, and nothing reaches the agent from the hostile tenant.
    let before = probes_answered_by(&agent_ip);
    let team_cards: Api<AgentCard> = Api::namespaced(client.clone(), TENANT);
    let vm = wait_for(Duration::from_secs(60), || async {
        team_cards.get("vm").await.is_ok_and(|c| {
            ready(&c) && condition(&c, "SourceReachable").is_some_and(|(s, _, _)| s == "True")
        })
    })
    .await;
    assert!(
        vm.is_ok(),
        "the selector-less source with the opt-in: {:?}",
        team_cards.get("vm").await.unwrap().status
    );
    for (name, why) in [
        ("other-pod", "the address of a Pod of another namespace"),
        ("api", "the Kubernetes API server's address"),
    ] {
        wait_refused(&client, HOSTILE, name, why).await;
    }
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(
        probes_answered_by(&agent_ip) - before,
        0.0,
        "the hostile tenant reached the agent with the opt-in"
    );

    // 7. helm uninstall: the Pods terminate within their grace period and the lease is given up.
    let grace = upgraded[0]
        .spec
        .as_ref()
        .unwrap()
        .termination_grace_period_seconds
        .unwrap();
    let uninstalling = Instant::now();
    helm(&kubeconfig, &["uninstall", RELEASE, "--namespace", NS]);
    let gone = wait_for(Duration::from_secs(grace as u64 + 30), || async {
        operator_pods(&client).await.is_empty()
    })
    .await;
    let took = uninstalling.elapsed();
    assert!(gone.is_ok(), "Pods left after uninstall");
    assert!(
        took <= Duration::from_secs(grace as u64 + 5),
        "the Pods took {took:?} to go (grace period {grace} s)"
    );
    // The Lease is the release's: it goes with it, held by no one.
    let lease = Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(client.clone(), NS)
        .get_opt(agentcard_operator::election::LEASE_NAME)
        .await
        .unwrap();
    let holder = lease
        .as_ref()
        .and_then(|l| l.spec.as_ref()?.holder_identity.clone())
        .unwrap_or_default();
    assert!(holder.is_empty(), "the lease is still held by {holder}");
    println!(
        "helm uninstall: Pods gone after {:.1} s (grace {grace} s), the Lease {}",
        took.as_secs_f64(),
        if lease.is_none() {
            "deleted"
        } else {
            "released"
        }
    );
    println!("{DONE}");
}
