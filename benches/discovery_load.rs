//! Load benchmark of AgentDiscovery on the local control plane:
//! `cargo bench --bench discovery_load` (env: SERVICES=1000, CONCURRENCY=32 client writers,
//! OPERATOR_CONCURRENCY=32). Needs root: it re-runs itself inside a private network namespace
//! (`unshare --net`), where one stand-in agent (a static v1.0 card over Python's http.server)
//! listens in a second namespace linked by a veth pair, and every agent Service's
//! EndpointSlice names a Pod of its namespace that reports that address: the operator fetches
//! cards only from such Pods, never from loopback. The plane is started inside too.
//!
//! Reports, in one run: with an AgentDiscovery of `Services` in place and the operator running,
//! N Services with a port marked `appProtocol: a2a` created with the same concurrency (each
//! with its Pod and EndpointSlice made beforehand): the time until every discovered card is
//! Ready, p50/p99 from a Service's creation to its card being served over HTTP, the operator's
//! API requests per discovered card (by verb and resource, lists and watches apart), its peak
//! RSS and CPU time; then, with the operator stopped, the floor: the writes discovery and the
//! operator make per agent, made directly from the operator's own pure build step (the
//! discovered AgentCard's apply, ConfigMap, card Ingress, backend Ingress, status, Event).

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentcard_operator::controller::api_calls::read_counts;
use agentcard_operator::crd::AgentCard;
use futures::{stream, StreamExt};
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::WatchStreamExt;
use kube::{Client, Config};
use serde_json::{json, Value};

#[path = "support/load.rs"]
mod load;
use load::*;

/// Set in the re-run inside the private network namespace.
const IN_NETNS: &str = "AGENTCARD_BENCH_IN_NETNS";
/// The stand-in agent's address (in the peer namespace) and port.
const AGENT_ADDR: &str = "192.0.2.20";
const AGENT_PORT: u16 = 19100;

/// The card the stand-in agent serves (to every Service: one agent behind all of them), with
/// the in-cluster interface URL an agent in a cluster names itself by.
fn agent_card() -> Value {
    json!({
        "name": "Bench Agent", "description": "Answers the benchmark.", "version": "1.0.0",
        "supportedInterfaces": [{"url": "http://agent.bench.svc:8080/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "capabilities": {}, "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "answer", "name": "Answer", "description": "Answers.", "tags": ["bench"]}]
    })
}

/// What discovery writes for agent `name` on `host`, with the agent's card in `spec.card` (the
/// floor's build step reads the card from there; the operator fetches it).
fn discovered_card(name: &str, host: &str) -> Value {
    json!({
        "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentCard",
        "metadata": {"name": name, "labels": {"agentcard.dev/discovered-by": "bench"}},
        "spec": {
            "card": agent_card(),
            "publish": {"host": host},
            "backend": {"serviceName": name, "port": 8080}
        }
    })
}

fn run(program: &str, args: &[&str]) -> anyhow::Result<()> {
    let ok = Command::new(program).args(args).status()?;
    anyhow::ensure!(ok.success(), "{program} {args:?} failed");
    Ok(())
}

/// A process killed (with its group) when dropped.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0.id())])
            .status();
        let _ = self.0.wait();
    }
}

/// Loopback up; a peer namespace (held by a `sleep`) linked by a veth pair, the stand-in agent
/// serving its card there.
fn network(card_dir: &std::path::Path) -> anyhow::Result<(Child, Child)> {
    run("ip", &["link", "set", "lo", "up"])?;
    let holder = Child(
        Command::new("unshare")
            .args(["--net", "--", "sleep", "infinity"])
            .process_group(0)
            .spawn()?,
    );
    let pid = holder.0.id().to_string();
    let ns_of = |p: &str| std::fs::read_link(format!("/proc/{p}/ns/net")).ok();
    let started = Instant::now();
    while ns_of(&pid).is_none() || ns_of(&pid) == ns_of("self") {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(10),
            "unshare did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    run(
        "ip",
        &[
            "link", "add", "vb0", "type", "veth", "peer", "name", "vb1", "netns", &pid,
        ],
    )?;
    run("ip", &["addr", "add", "192.0.2.1/24", "dev", "vb0"])?;
    run("ip", &["link", "set", "vb0", "up"])?;
    let inside = |args: &[&str]| {
        let mut all = vec!["-t", pid.as_str(), "-n", "--"];
        all.extend_from_slice(args);
        run("nsenter", &all)
    };
    inside(&["ip", "link", "set", "lo", "up"])?;
    inside(&[
        "ip",
        "addr",
        "add",
        &format!("{AGENT_ADDR}/24"),
        "dev",
        "vb1",
    ])?;
    inside(&["ip", "link", "set", "vb1", "up"])?;
    let well_known = card_dir.join(".well-known");
    std::fs::create_dir_all(&well_known)?;
    std::fs::write(well_known.join("agent-card.json"), agent_card().to_string())?;
    let agent = Child(
        Command::new("nsenter")
            .args(["-t", &pid, "-n", "--", "python3", "-m", "http.server"])
            .arg(AGENT_PORT.to_string())
            .args(["--bind", "0.0.0.0", "--directory"])
            .arg(card_dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()?,
    );
    Ok((holder, agent))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    if std::env::var(IN_NETNS).as_deref() != Ok("1") {
        // Outside: build the plane's binaries (they may need downloads), then run inside.
        run(
            "bash",
            &[root
                .join("tests/controlplane/build")
                .to_str()
                .unwrap_or_default()],
        )?;
        let status = Command::new("unshare")
            .args(["--net", "--"])
            .arg(std::env::current_exe()?)
            .args(std::env::args().skip(1))
            .env(IN_NETNS, "1")
            .status()?;
        std::process::exit(status.code().unwrap_or(1));
    }
    let n = env_usize("SERVICES", 1000);
    let concurrency = env_usize("CONCURRENCY", 32);
    let work = tempfile::tempdir()?;
    let (_holder, _agent) = network(&work.path().join("agent"))?;
    let plane_dir = work.path().join("plane");
    eprintln!("starting a control plane in {}", plane_dir.display());
    let ok = Command::new("bash")
        .arg(root.join("tests/controlplane/start"))
        .arg(&plane_dir)
        .stdout(Stdio::null())
        .status()?;
    anyhow::ensure!(ok.success(), "the control plane did not start");
    let _plane = StopPlane(root.join("tests/controlplane/stop"), plane_dir.clone());
    let kubeconfig = plane_dir.join("kubeconfig");
    let config = Config::from_custom_kubeconfig(
        Kubeconfig::read_from(&kubeconfig)?,
        &KubeConfigOptions::default(),
    )
    .await?;
    let client = Client::try_from(config)?;
    load::apply_crds(
        &kubeconfig,
        &root,
        &[
            "crd/agentcards.agentcard.dev",
            "crd/agentdiscoveries.agentcard.dev",
        ],
    )?;
    let run_id = std::process::id();

    let (op_ns, ns) = (
        format!("bench-op-{run_id}"),
        format!("bench-agents-{run_id}"),
    );
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for name in [&op_ns, &ns] {
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": name}}))?,
            )
            .await?;
    }
    // Each agent's Pod (reporting the agent's address, as kubelet would) and EndpointSlice,
    // made before the timed phase: what the timed phase adds is the Service.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), &ns);
    let name = |i: usize| format!("agent-{i}");
    stream::iter(0..n)
        .map(|i| {
            let (pods, slices, ns) = (pods.clone(), slices.clone(), ns.clone());
            async move {
                let pod: Pod = serde_json::from_value(json!({
                    "metadata": {"name": name(i)},
                    "spec": {"containers": [{"name": "agent", "image": "example.org/agent:1"}]}
                }))?;
                pods.create(&PostParams::default(), &pod).await?;
                let ip = json!({"status": {"phase": "Running", "podIP": AGENT_ADDR, "podIPs": [{"ip": AGENT_ADDR}]}});
                pods.patch_status(&name(i), &PatchParams::default(), &Patch::Merge(&ip))
                    .await?;
                let slice: EndpointSlice = serde_json::from_value(json!({
                    "metadata": {"name": name(i), "labels": {"kubernetes.io/service-name": name(i)}},
                    "addressType": "IPv4",
                    "endpoints": [{"addresses": [AGENT_ADDR], "conditions": {"ready": true},
                                   "targetRef": {"kind": "Pod", "namespace": ns, "name": name(i)}}],
                    "ports": [{"name": "http", "port": AGENT_PORT, "protocol": "TCP"}]
                }))?;
                slices.create(&PostParams::default(), &slice).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(concurrency)
        .for_each(|r| {
            if let Err(e) = r {
                eprintln!("set-up: {e}");
            }
            futures::future::ready(())
        })
        .await;

    // The operator (release build), and the discovery of the agents' namespace.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let admin = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let op = Operator(
        quiet_server(
            Command::new(env!("CARGO_BIN_EXE_agentcard-operator"))
                .args(["run", "--namespace", &op_ns, "--watch-namespace", &ns])
                .args(["--ingress-tls", "none"])
                .args(["--max-cards-per-namespace", "0"])
                .args([
                    "--concurrency",
                    &env_usize("OPERATOR_CONCURRENCY", 32).to_string(),
                ]),
            addr,
            admin,
            &kubeconfig,
        )
        .spawn()?,
        false,
    );
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(16)
        .build()?;
    wait_ready(&http, admin).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    Api::<agentcard_operator::crd::AgentDiscovery>::all(client.clone())
        .patch(
            "bench",
            &PatchParams::apply("bench").force(),
            &Patch::Apply(json!({
                "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentDiscovery",
                "metadata": {"name": "bench"},
                "spec": {
                    "hostTemplate": "{name}.{namespace}.agents.test",
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}
                }
            })),
        )
        .await?;
    let before = read_counts(&scrape(&http, admin).await?);

    // Timed: the Services, and every discovered card Ready and served.
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let cards: Api<AgentCard> = Api::namespaced(client.clone(), &ns);
    let progress = Progress::default();
    let (created, served, ready_seen) = (
        progress.written.clone(),
        progress.served.clone(),
        progress.ready.clone(),
    );
    let host = {
        let ns = ns.clone();
        move |i: usize| format!("agent-{i}.{ns}.agents.test")
    };
    let index = |card_name: &str| card_name.strip_prefix("agent-")?.parse::<usize>().ok();
    let ready_watch = {
        let (cards, ready_seen) = (cards.clone(), ready_seen.clone());
        tokio::spawn(async move {
            let events = kube::runtime::watcher(cards, Default::default())
                .default_backoff()
                .applied_objects();
            futures::pin_mut!(events);
            while let Some(Ok(card)) = events.next().await {
                let ready = card.status.as_ref().is_some_and(|s| {
                    s.conditions
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True")
                });
                if let (true, Some(i)) = (ready, card.metadata.name.as_deref().and_then(index)) {
                    let mut seen = ready_seen.lock().unwrap_or_else(|e| e.into_inner());
                    seen.insert(i);
                    if seen.len() >= n {
                        return Instant::now();
                    }
                }
            }
            Instant::now()
        })
    };
    let poller = poll_served(http.clone(), addr, n, host.clone(), progress);
    let started = Instant::now();
    stream::iter(0..n)
        .for_each_concurrent(concurrency, |i| {
            let (services, created) = (services.clone(), created.clone());
            async move {
                let svc: Service = serde_json::from_value(json!({
                    "metadata": {"name": name(i)},
                    // Headless: the plane's Service range holds a few hundred addresses, and
                    // cards are fetched through EndpointSlices, never a cluster IP.
                    "spec": {"clusterIP": "None", "ports": [{"name": "http", "port": 8080, "targetPort": AGENT_PORT, "appProtocol": "a2a"}]}
                }))
                .unwrap_or_default();
                created.lock().await.insert(i, Instant::now());
                if let Err(e) = services.create(&PostParams::default(), &svc).await {
                    eprintln!("Service {}: {e}", name(i));
                }
            }
        })
        .await;
    let created_all = started.elapsed();
    let limit = Duration::from_secs(600);
    let all_ready = tokio::time::timeout(limit, ready_watch).await;
    let all_ready = match all_ready {
        Ok(Ok(at)) => at.duration_since(started),
        _ => anyhow::bail!(
            "not every discovered card was Ready within {limit:?}: {} of {n}",
            ready_seen.lock().map(|r| r.len()).unwrap_or(0)
        ),
    };
    let _ = tokio::time::timeout(Duration::from_secs(120), poller).await;
    let after = read_counts(&scrape(&http, admin).await?);
    let rss = peak_rss_kib(op.id()).unwrap_or(0);
    let cpu = cpu_time(op.id()).unwrap_or_default();
    drop(op);
    // Last, with the operator stopped: the floor, the same writes per agent made directly (it
    // meets the larger store, which can only make it look slower).
    let floor = writes_floor(&client, run_id, n, concurrency, false, &discovered_card).await?;

    let mut latencies: Vec<Duration> = served.lock().await.values().copied().collect();
    latencies.sort();
    let delta: Vec<((String, String), f64)> = after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, d)| *d > 0.0)
        .collect();
    let is_read = |verb: &str| matches!(verb, "list" | "watch");
    let per_card: f64 = delta
        .iter()
        .filter(|((verb, _), _)| !is_read(verb))
        .map(|(_, d)| d)
        .sum::<f64>()
        / n as f64;
    println!("discovery load benchmark: {n} agent Services, concurrency {concurrency}");
    println!(
        "  floor ({FLOOR_CALLS}, and the backend Ingress; {} failed): {:.2?}",
        floor.failed, floor.elapsed
    );
    println!("  Services created in {created_all:.2?}");
    println!(
        "  all {n} discovered cards Ready after {all_ready:.2?} ({:.2}x the floor)",
        all_ready.as_secs_f64() / floor.elapsed.as_secs_f64()
    );
    println!(
        "  Service created -> its card served: p50 {:.2?}, p99 {:.2?} ({} of {n} seen served)",
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        latencies.len()
    );
    println!(
        "  operator API requests per discovered card (without lists and watches): {per_card:.2}"
    );
    for ((verb, resource), count) in &delta {
        println!("    {verb:>6} {resource:<28} {count:>8.0}");
    }
    println!(
        "  operator peak RSS {:.1} MiB, CPU {cpu:.2?}",
        rss as f64 / 1024.0
    );
    Ok(())
}

/// The plane started in `.1` by this run, stopped with `.0` (its stop script) when dropped.
struct StopPlane(PathBuf, PathBuf);

impl Drop for StopPlane {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(&self.0)
            .arg(&self.1)
            .stdout(Stdio::null())
            .status();
    }
}
