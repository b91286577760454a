//! What the load benchmarks share (included by path): the plane they run on ([`BenchPlane`]),
//! reading the environment, quantiles, a process's peak memory and CPU time, waiting for earlier runs' namespaces, the operator's
//! process and metrics, and the floor: the writes the operator makes for `n` new cards, made
//! directly from its own pure build step with no operator running.

// Each benchmark uses part of this file.
#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentcard_operator::crd::AgentCard;
use futures::{stream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::json;
use tokio::sync::Mutex;

/// The control plane a load benchmark runs on: the running local plane
/// `AGENTCARD_TEST_KUBECONFIG` names (never `KUBECONFIG`: it may name a real cluster), or one
/// it starts (`tests/controlplane/start`), stopped when this is dropped, also when the
/// benchmark fails.
pub struct BenchPlane {
    /// Its kubeconfig.
    pub kubeconfig: std::path::PathBuf,
    root: std::path::PathBuf,
    own: Option<tempfile::TempDir>,
}

impl BenchPlane {
    /// The shared plane, or a new one of this run's (the repository at `root`).
    pub fn start(root: &std::path::Path) -> anyhow::Result<BenchPlane> {
        if let Some(k) = std::env::var_os("AGENTCARD_TEST_KUBECONFIG").filter(|k| !k.is_empty()) {
            return Ok(BenchPlane {
                kubeconfig: k.into(),
                root: root.to_path_buf(),
                own: None,
            });
        }
        let dir = tempfile::tempdir()?;
        eprintln!("starting a control plane in {}", dir.path().display());
        // etcd's quota: 8 GiB unless AGENTCARD_ETCD_QUOTA says otherwise (its 2 GiB default
        // is too small for 100,000 cards with their ConfigMaps, Ingresses, Events and the
        // floor's copies, kept with their history until the API server compacts it).
        let quota =
            std::env::var("AGENTCARD_ETCD_QUOTA").unwrap_or_else(|_| (8u64 << 30).to_string());
        let ok = Command::new("bash")
            .arg(root.join("tests/controlplane/start"))
            .arg(dir.path())
            .env("AGENTCARD_ETCD_QUOTA", quota)
            .env("AGENTCARD_CP_FEATURE_GATES", plane_feature_gates())
            .stdout(std::process::Stdio::null())
            .status()?;
        anyhow::ensure!(ok.success(), "the control plane did not start");
        Ok(BenchPlane {
            kubeconfig: dir.path().join("kubeconfig"),
            root: root.to_path_buf(),
            own: Some(dir),
        })
    }

    /// Whether this run started it (and stops it).
    pub fn is_own(&self) -> bool {
        self.own.is_some()
    }

    /// A client of it.
    pub async fn client(&self) -> anyhow::Result<Client> {
        let config = kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(&self.kubeconfig)?,
            &kube::config::KubeConfigOptions::default(),
        )
        .await?;
        Ok(Client::try_from(config)?)
    }
}

/// The API server's feature gates on a plane a benchmark starts: PLANE_FEATURE_GATES when set
/// (empty for the release's defaults), else `DetectCacheInconsistency=false`. That check (beta,
/// on by default since Kubernetes 1.34) lists every resource from etcd every 5 minutes to
/// compare it with the watch cache; at 100,000 cards each such list of AgentCards,
/// ConfigMaps, Ingresses or ControllerRevisions takes the API server several CPU-seconds, on
/// the 2 cores the operator measured here shares with it, at moments no phase controls (a
/// restart took 21–24 s without one and 36–39 s with one, README Sizing). On a cluster the
/// API server runs on nodes of its own.
pub fn plane_feature_gates() -> String {
    std::env::var("PLANE_FEATURE_GATES").unwrap_or_else(|_| "DetectCacheInconsistency=false".into())
}

/// Apply the repository's CRDs (`root/crds`) to the plane of `kubeconfig` and wait until the
/// `established` ones (`crd/<plural>.agentcard.dev`) are served; a kubectl that fails is an
/// error, not a bench that runs against a plane without them.
pub fn apply_crds(
    kubeconfig: &std::path::Path,
    root: &std::path::Path,
    established: &[&str],
) -> anyhow::Result<()> {
    let kubectl = |args: &[&str]| -> anyhow::Result<()> {
        let status = Command::new("kubectl")
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .stdout(std::process::Stdio::null())
            .status()?;
        anyhow::ensure!(
            status.success(),
            "kubectl {} failed: {status}",
            args.join(" ")
        );
        Ok(())
    };
    let crds = root.join("crds");
    kubectl(&["apply", "--server-side", "-f", &crds.to_string_lossy()])?;
    let wait = ["wait", "--for=condition=Established", "--timeout=60s"];
    kubectl(&[&wait[..], established].concat())
}

impl Drop for BenchPlane {
    fn drop(&mut self) {
        if let Some(dir) = &self.own {
            let _ = Command::new("bash")
                .arg(self.root.join("tests/controlplane/stop"))
                .arg(dir.path())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}

/// `name` from the environment as a number, else `default`.
pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The `p` quantile (0–1) of `sorted`.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// The peak resident memory of process `pid` so far, in KiB (`VmHWM`).
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmHWM")
}

/// A memory figure of process `pid` in KiB, as `/proc/<pid>/status` gives it (`VmRSS`,
/// `VmHWM`).
pub fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// KiB as MiB with one decimal, or `unknown`.
pub fn mib(kib: Option<u64>) -> String {
    kib.map_or("unknown".into(), |k| format!("{:.1}", k as f64 / 1024.0))
}

/// `cmd` set up as a server of a load benchmark: its public and admin addresses, the plane's
/// `kubeconfig`, warnings only, no output, and a process group of its own (so a profiler
/// wrapping it stops with it).
pub fn quiet_server<'a>(
    cmd: &'a mut Command,
    listen: std::net::SocketAddr,
    admin: std::net::SocketAddr,
    kubeconfig: &std::path::Path,
) -> &'a mut Command {
    use std::os::unix::process::CommandExt;
    cmd.args(["--listen", &listen.to_string()])
        .args(["--admin-listen", &admin.to_string()])
        .env("KUBECONFIG", kubeconfig)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
}

/// CPU time (user + system) the process `pid` used so far, from `/proc/<pid>/stat`.
pub fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name (which may hold spaces) in parentheses.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // Linux reports in USER_HZ, 100 per second on every architecture it runs this on.
    Some(Duration::from_millis(ticks * 10))
}

/// Wait (at most `limit`) until the namespaces of earlier runs on a shared plane (`bench-…`)
/// are gone: a plane still deleting the thousands of objects they held slows the phases of
/// this run unevenly, and the ratios between them would measure that.
pub async fn earlier_runs_gone(namespaces: &Api<Namespace>, limit: Duration) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let left = namespaces
            .list(&Default::default())
            .await?
            .items
            .iter()
            .filter(|ns| {
                ns.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with("bench-"))
            })
            .count();
        if left == 0 {
            return Ok(());
        }
        if started.elapsed() > limit {
            eprintln!("{left} namespaces of earlier runs are still there after {limit:?}: measuring anyway");
            return Ok(());
        }
        if started.elapsed() < Duration::from_secs(1) {
            eprintln!("waiting for {left} namespaces of earlier runs to be deleted");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Wait (at most 5 minutes: a restart at 100,000 cards lists them first) until the process at `admin` answers `/readyz` with a success.
pub async fn wait_ready(http: &reqwest::Client, admin: std::net::SocketAddr) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let ok = http
            .get(format!("http://{admin}/readyz"))
            .send()
            .await
            .map(|r| r.status().is_success())
            .unwrap_or(false);
        if ok {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the operator did not become ready"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// The operator's metrics, as scraped from `admin`.
pub async fn scrape(http: &reqwest::Client, admin: std::net::SocketAddr) -> anyhow::Result<String> {
    Ok(http
        .get(format!("http://{admin}/metrics"))
        .send()
        .await?
        .text()
        .await?)
}

/// The value of an unlabelled sample `name` in a scrape (0 when absent).
pub fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// The operator's process (group), stopped when dropped: also when the benchmark fails, so no
/// operator is left running against a plane that is gone. The flag: stop it gracefully.
pub struct Operator(pub std::process::Child, pub bool);

impl Operator {
    /// Its process id.
    pub fn id(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        stop(&mut self.0, self.1);
    }
}

/// Stop the operator and whatever runs it (its process group). Under a wrapper (a profiler)
/// SIGTERM first, so the profiler writes its data and the operator drains and exits (up to
/// 30 s); then SIGKILL, so nothing is left running into the next measurement.
pub fn stop(op: &mut std::process::Child, graceful: bool) {
    let group = format!("-{}", op.id());
    if graceful {
        let _ = Command::new("kill")
            .args(["-TERM", "--", &group])
            .stderr(std::process::Stdio::null())
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline && matches!(op.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    let _ = Command::new("kill")
        .args(["-KILL", "--", &group])
        .stderr(std::process::Stdio::null())
        .status();
    // A process started without a group of its own (a `serve --from-dir` upstream) is killed
    // alone: waiting for it after the group kill missed it would never end.
    let _ = op.kill();
    let _ = op.wait();
}

/// What the floor writes per card, in order (the old floor patches the finalizer in after the
/// apply; a card with a backend also gets its backend Ingress).
pub const FLOOR_CALLS: &str =
    "apply AgentCard, create ConfigMap, create Ingress, create ControllerRevision, apply status, create Event";

/// The floor phase's outcome.
pub struct Floor {
    pub elapsed: Duration,
    pub failed: usize,
    pub namespace: String,
    pub op_namespace: String,
    pub names: Vec<String>,
}

impl Floor {
    /// Drop the floor cards' finalizers, so their namespace can go on a plane that stays.
    pub async fn release(&self, client: &Client, concurrency: usize) {
        let cards: Api<AgentCard> = Api::namespaced(client.clone(), &self.namespace);
        let patch = json!({"metadata": {"finalizers": null}});
        stream::iter(&self.names)
            .for_each_concurrent(concurrency, |name| {
                let cards = cards.clone();
                let patch = patch.clone();
                async move {
                    let _ = cards
                        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await;
                }
            })
            .await;
    }
}

/// The writes the operator makes for `n` new cards, made directly (no watches, no reconcile
/// logic): each card is applied as the benchmark applies it, then (`finalizer`: as earlier
/// versions did) gets the finalizer patch, then the ConfigMap and Ingress its build step
/// makes, its first revision (not the old floor: earlier versions kept none), its status by
/// server-side apply and its Event. Twice `concurrency` at once: the
/// client's and the operator's writers.
pub async fn writes_floor(
    client: &Client,
    run_id: u32,
    n: usize,
    concurrency: usize,
    finalizer: bool,
    card: &(dyn Fn(&str, &str) -> serde_json::Value + Sync),
) -> anyhow::Result<Floor> {
    use agentcard_operator::a2a::keys::{Algorithm, SigningKey};
    use agentcard_operator::controller::agentcard::build::build;
    use agentcard_operator::controller::agentcard::{outcome_event, revisions, status};
    use agentcard_operator::controller::config::Settings;
    use agentcard_operator::controller::events::Events;
    use agentcard_operator::controller::finalizers::LEGACY_CARD;
    use agentcard_operator::controller::routes::policy::IngressPolicy;
    use agentcard_operator::controller::routes::routing::Routing;
    use k8s_openapi::api::apps::v1::ControllerRevision;
    use k8s_openapi::api::networking::v1::Ingress;
    use kube::runtime::events::Reporter;
    use kube::Resource;

    let which = if finalizer { "old-floor" } else { "floor" };
    let (namespace, op_namespace) = (
        format!("bench-{which}-{run_id}"),
        format!("bench-{which}-op-{run_id}"),
    );
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for name in [&namespace, &op_namespace] {
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": name}}))?,
            )
            .await?;
    }
    let keys = vec![SigningKey::generate(Algorithm::ES256, None)?];
    let settings = Settings {
        operator_namespace: op_namespace.clone(),
        service_name: "agentcard-operator".into(),
        service_port_name: "http".into(),
        ingress: IngressPolicy::default(),
        routing: Routing::default(),
        retired_retention_seconds: 604_800,
    };
    let events = Events::new(
        client.clone(),
        Reporter {
            controller: "agentcard-operator".into(),
            instance: None,
        },
    );
    let cards: Api<AgentCard> = Api::namespaced(client.clone(), &namespace);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let ingresses: Api<Ingress> = Api::namespaced(client.clone(), &op_namespace);
    let backend_ingresses: Api<Ingress> = Api::namespaced(client.clone(), &namespace);
    let revs: Api<ControllerRevision> = Api::namespaced(client.clone(), &namespace);
    let finalizer = finalizer.then(|| {
        json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": [LEGACY_CARD]},
        ])
    });
    let failed = std::sync::atomic::AtomicUsize::new(0);
    let names: Vec<String> = (0..n).map(|i| format!("floor-{i}")).collect();
    let started = Instant::now();
    stream::iter(names.iter().enumerate())
        .for_each_concurrent(2 * concurrency, |(i, name)| {
            let (cards, cms, ingresses, backend_ingresses, revs) = (
                cards.clone(),
                cms.clone(),
                ingresses.clone(),
                backend_ingresses.clone(),
                revs.clone(),
            );
            let (keys, settings, events, finalizer, failed) =
                (&keys, &settings, &events, &finalizer, &failed);
            async move {
                let host = format!("f{i}.floor{run_id}.agents.test");
                let one = async {
                    let applied = cards
                        .patch(
                            name,
                            &PatchParams::apply("bench").force(),
                            &Patch::Apply(&card(name, &host)),
                        )
                        .await?;
                    let card = match finalizer {
                        Some(f) => {
                            cards
                                .patch(
                                    name,
                                    &PatchParams::default(),
                                    &Patch::Json::<()>(serde_json::from_value(f.clone())?),
                                )
                                .await?
                        }
                        None => applied.clone(),
                    };
                    let now = jiff::Timestamp::now();
                    let built = build(&card, keys, settings, None, now, now)?;
                    cms.create(&PostParams::default(), &built.configmap).await?;
                    if let Some(ingress) = &built.ingress {
                        ingresses.create(&PostParams::default(), ingress).await?;
                    }
                    if let Some(ingress) = &built.backend_ingress {
                        backend_ingresses
                            .create(&PostParams::default(), ingress)
                            .await?;
                    }
                    if finalizer.is_none() {
                        // Its first revision (earlier versions kept none).
                        let revision = revisions::revision_object(&card, &built, 1, None);
                        revs.create(&PostParams::default(), &revision).await?;
                    }
                    let stamp = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now);
                    let outcome: Result<_, agentcard_operator::controller::Error> =
                        Ok((built, Vec::new()));
                    let event = outcome_event(&outcome);
                    let status = status::next(&status::Found {
                        card: &card,
                        published: &card,
                        outcome: &outcome,
                        source: None,
                        retired: &[],
                        revoked: &[],
                        routing: settings.routing.kind,
                        routed: None,
                        now: stamp,
                        operator: &settings.operator_namespace,
                        backend: None,
                        drift: None,
                    });
                    agentcard_operator::controller::apply_status(&cards, name, &status).await?;
                    events.publish(&event, &applied.object_ref(&())).await?;
                    anyhow::Ok(())
                };
                if let Err(e) = one.await {
                    if failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < 3 {
                        eprintln!("floor {name}: {e}");
                    }
                }
            }
        })
        .await;
    Ok(Floor {
        elapsed: started.elapsed(),
        failed: failed.into_inner(),
        namespace,
        op_namespace,
        names,
    })
}

/// What a load benchmark's watch and poller share, by card index: when each card was written,
/// which a watch showed Ready, how long after its write each was first served, and when the
/// last one was.
#[derive(Clone, Default)]
pub struct Progress {
    /// When each card (or the object it is made for) was written.
    pub written: Arc<Mutex<HashMap<usize, Instant>>>,
    /// The cards a watch showed Ready: only those are polled.
    pub ready: Arc<std::sync::Mutex<HashSet<usize>>>,
    /// How long after its write each card was first served.
    pub served: Arc<Mutex<HashMap<usize, Duration>>>,
    /// When a card was last first served.
    pub last_served: Arc<Mutex<Option<Instant>>>,
}

/// Poll the card server at `addr` for the cards the watch shows Ready and not yet served (a
/// card is served once its status confirms its bytes, the same write that makes it Ready), so
/// when each is served is measured without loading the server, and the two cores the plane
/// shares, with requests for cards that cannot be served yet. Each such card is asked about
/// once per pass, passes spaced; ends once `n` are served.
pub fn poll_served(
    http: reqwest::Client,
    addr: std::net::SocketAddr,
    n: usize,
    host: impl Fn(usize) -> String + Clone + Send + Sync + 'static,
    progress: Progress,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while progress.served.lock().await.len() < n {
            let pending: Vec<(usize, Instant)> = {
                let ready: Vec<usize> = progress
                    .ready
                    .lock()
                    .map(|r| r.iter().copied().collect())
                    .unwrap_or_default();
                let written = progress.written.lock().await;
                let served = progress.served.lock().await;
                ready
                    .into_iter()
                    .filter(|i| !served.contains_key(i))
                    .filter_map(|i| written.get(&i).map(|t| (i, *t)))
                    .collect()
            };
            stream::iter(pending)
                .for_each_concurrent(8, |(i, t)| {
                    let (http, progress, host) = (http.clone(), progress.clone(), host.clone());
                    async move {
                        let r = http
                            .get(format!("http://{addr}/.well-known/agent-card.json"))
                            .header("host", host(i))
                            .send()
                            .await;
                        if r.is_ok_and(|r| r.status().is_success()) {
                            progress.served.lock().await.insert(i, t.elapsed());
                            progress.last_served.lock().await.replace(Instant::now());
                        }
                    }
                })
                .await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}
