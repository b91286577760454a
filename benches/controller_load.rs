//! Load benchmark of the controller on the local control plane:
//! `cargo bench --bench controller_load` (env: CARDS=1000, CONCURRENCY=32 client writers,
//! OPERATOR_CONCURRENCY=32 for the operator's --concurrency, AGENTCARD_TEST_KUBECONFIG to use a
//! running local plane instead of starting one (never KUBECONFIG: it may name a real cluster),
//! OPERATOR_WRAPPER to run the operator under a profiler).
//!
//! Reports: how fast the plane accepts N plain ConfigMap writes (the reference), then for N
//! AgentCards applied with the same concurrency: time until all are Ready, p50/p99 latency from
//! a card's apply to its bytes being served over HTTP, the API requests per card (from the
//! operator's `agentcard_api_requests_total`), the operator's peak RSS and CPU time; then a
//! restart with every card unchanged (time to ready and to every card served, and every write);
//! last, with the operator stopped, the floor: the same API writes the operator makes for each
//! card (the client's apply, ConfigMap, Ingress, status, Event), made directly from the
//! operator's own pure build step, so what the API server alone needs for them is beside the
//! all-Ready time; and the old floor, the same with the finalizer patch earlier versions made
//! (after the apply), so the two are compared in one run. The old floor runs first: the new one
//! meets the larger store, which can only make it look slower.
//! On a shared plane, a run first waits for the namespaces earlier runs deleted to be gone.
//! Readiness comes from a watch, and only cards the watch shows Ready are polled over HTTP: the
//! benchmark itself adds little load to the API server and the card server it measures.

use std::collections::HashMap;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentcard_operator::controller::api_calls::read_counts;
use agentcard_operator::crd::AgentCard;
use futures::{stream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::WatchStreamExt;
use kube::{Client, Config};
use serde_json::json;
use tokio::sync::Mutex;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// CPU time (user + system) the process `pid` used so far, from `/proc/<pid>/stat`.
fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name (which may hold spaces) in parentheses.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // Linux reports in USER_HZ, 100 per second on every architecture it runs this on.
    Some(Duration::from_millis(ticks * 10))
}

fn card(name: &str, host: &str) -> serde_json::Value {
    json!({
        "apiVersion": "agentcard.dev/v1alpha1",
        "kind": "AgentCard",
        "metadata": {"name": name},
        "spec": {
            "publish": {"host": host},
            "card": {
                "name": format!("Agent {name}"),
                "description": "Load test agent.",
                "version": "1.0.0",
                "supportedInterfaces": [{"url": format!("https://{host}/a2a"), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
                "capabilities": {"streaming": true},
                "defaultInputModes": ["text/plain"],
                "defaultOutputModes": ["application/json"],
                "skills": [{"id": "work", "name": "Work", "description": "Does work.", "tags": ["load"]}]
            }
        }
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // `cargo bench` passes --bench; nothing else to parse.
    let n = env_usize("CARDS", 1000);
    let concurrency = env_usize("CONCURRENCY", 32);
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let plane_dir = tempfile::tempdir()?;
    let kubeconfig = match std::env::var_os("AGENTCARD_TEST_KUBECONFIG").filter(|k| !k.is_empty()) {
        Some(k) => PathBuf::from(k),
        None => {
            eprintln!("starting a control plane in {}", plane_dir.path().display());
            let ok = Command::new("bash")
                .arg(root.join("tests/controlplane/start"))
                .arg(plane_dir.path())
                .stdout(Stdio::null())
                .status()?;
            anyhow::ensure!(ok.success(), "the control plane did not start");
            plane_dir.path().join("kubeconfig")
        }
    };
    let own_plane = std::env::var_os("AGENTCARD_TEST_KUBECONFIG").is_none_or(|k| k.is_empty());
    let config = Config::from_custom_kubeconfig(
        Kubeconfig::read_from(&kubeconfig)?,
        &KubeConfigOptions::default(),
    )
    .await?;
    let client = Client::try_from(config)?;
    let kubectl = |args: &[&str]| {
        Command::new("kubectl")
            .args(args)
            .env("KUBECONFIG", &kubeconfig)
            .stdout(Stdio::null())
            .status()
    };
    kubectl(&[
        "apply",
        "--server-side",
        "-f",
        root.join("crds").to_str().unwrap_or("crds"),
    ])?;
    kubectl(&[
        "wait",
        "--for=condition=Established",
        "crd/agentcards.agentcard.dev",
        "--timeout=60s",
    ])?;
    let run_id = std::process::id();
    let (op_ns, ref_ns, ns) = (
        format!("bench-op-{run_id}"),
        format!("bench-ref-{run_id}"),
        format!("bench-cards-{run_id}"),
    );
    let namespaces: Api<Namespace> = Api::all(client.clone());
    earlier_runs_gone(&namespaces, Duration::from_secs(300)).await?;
    for name in [&op_ns, &ref_ns, &ns] {
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": name}}))?,
            )
            .await?;
    }

    // Reference: plain writes of the same number of objects, same concurrency.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ref_ns);
    let started = Instant::now();
    stream::iter(0..n)
        .for_each_concurrent(concurrency, |i| {
            let cms = cms.clone();
            async move {
                let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": format!("ref-{i}")}, "data": {"k": "v".repeat(600)}})).unwrap_or_default();
                if let Err(e) = cms.patch(&format!("ref-{i}"), &PatchParams::apply("bench").force(), &Patch::Apply(&cm)).await {
                    eprintln!("reference write failed: {e}");
                }
            }
        })
        .await;
    let reference = started.elapsed();

    // Second reference: the same AgentCards accepted by the API server with no operator running
    // (CRD schema and CEL validation cost alone).
    let ref_cards: Api<AgentCard> = Api::namespaced(client.clone(), &ref_ns);
    let started = Instant::now();
    stream::iter(0..n)
        .for_each_concurrent(concurrency, |i| {
            let ref_cards = ref_cards.clone();
            async move {
                let name = format!("ref-{i}");
                let host = format!("r{i}.ref.agents.test");
                if let Err(e) = ref_cards
                    .patch(
                        &name,
                        &PatchParams::apply("bench").force(),
                        &Patch::Apply(&card(&name, &host)),
                    )
                    .await
                {
                    eprintln!("reference AgentCard write failed: {e}");
                }
            }
        })
        .await;
    let reference_cards = started.elapsed();
    // The reference cards go before the operator starts: it watches the cards of every
    // namespace, and would otherwise hold twice the cards measured (they have no finalizer yet,
    // so they go at once).
    ref_cards
        .delete_collection(&Default::default(), &Default::default())
        .await?;
    while !ref_cards
        .list(&kube::api::ListParams::default().limit(1))
        .await?
        .items
        .is_empty()
    {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The operator, release build.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let admin = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    // OPERATOR_WRAPPER (e.g. `heaptrack -o /tmp/op`) runs the operator under a profiler.
    let wrapper: Vec<String> = std::env::var("OPERATOR_WRAPPER")
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let start_operator = || {
        let binary = env!("CARGO_BIN_EXE_agentcard-operator").to_string();
        let (program, prefix) = match wrapper.split_first() {
            Some((p, rest)) => (p.clone(), [rest, &[binary]].concat()),
            None => (binary, Vec::new()),
        };
        Command::new(program)
            .args(prefix)
            .args(["run", "--namespace", &op_ns, "--watch-namespace", &ns])
            // Every card lives in one namespace here.
            .args(["--max-cards-per-namespace", "0"])
            .args([
                "--concurrency",
                &env_usize("OPERATOR_CONCURRENCY", 32).to_string(),
            ])
            .args([
                "--listen",
                &addr.to_string(),
                "--admin-listen",
                &admin.to_string(),
            ])
            .env("KUBECONFIG", &kubeconfig)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // A group of its own: a wrapper and the operator under it stop together.
            .process_group(0)
            .spawn()
    };
    let graceful = !wrapper.is_empty();
    let op = Operator(start_operator()?, graceful);
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(16)
        .build()?;
    wait_ready(&http, admin).await?;
    // Wait for the operator to lead (the signing Secret and JWKS exist).
    tokio::time::sleep(Duration::from_secs(2)).await;

    let cards: Api<AgentCard> = Api::namespaced(client.clone(), &ns);
    let applied: Arc<Mutex<HashMap<usize, Instant>>> = Arc::default();
    let served: Arc<Mutex<HashMap<usize, Duration>>> = Arc::default();
    let host = move |i: usize| format!("a{i}.bench{run_id}.agents.test");

    // Poll the server for the cards that are Ready but not seen served yet.
    let last_served: Arc<Mutex<Option<Instant>>> = Arc::default();
    // The cards the watch below shows Ready: only those are polled over HTTP (a card is served
    // once its status confirms its bytes, the same write that makes it Ready), so the poller
    // measures when each card is served without loading the server (and the two cores the
    // plane shares) with requests for cards that cannot be served yet.
    let ready_seen: Arc<std::sync::Mutex<std::collections::HashSet<usize>>> = Arc::default();
    let poller = {
        let (applied, served, http, last_served, ready_seen) = (
            applied.clone(),
            served.clone(),
            http.clone(),
            last_served.clone(),
            ready_seen.clone(),
        );
        tokio::spawn(async move {
            loop {
                let pending: Vec<(usize, Instant)> = {
                    let ready: Vec<usize> = ready_seen
                        .lock()
                        .map(|r| r.iter().copied().collect())
                        .unwrap_or_default();
                    let a = applied.lock().await;
                    let s = served.lock().await;
                    ready
                        .into_iter()
                        .filter(|i| !s.contains_key(i))
                        .filter_map(|i| a.get(&i).map(|t| (i, *t)))
                        .collect()
                };
                if served.lock().await.len() >= n {
                    break;
                }
                // Each Ready card not yet served is asked about once per pass, passes spaced.
                stream::iter(pending)
                    .for_each_concurrent(8, |(i, t)| {
                        let (http, served, last_served) =
                            (http.clone(), served.clone(), last_served.clone());
                        async move {
                            let r = http
                                .get(format!("http://{addr}/.well-known/agent-card.json"))
                                .header("host", host(i))
                                .send()
                                .await;
                            if r.is_ok_and(|r| r.status().is_success()) {
                                served.lock().await.insert(i, t.elapsed());
                                last_served.lock().await.replace(Instant::now());
                            }
                        }
                    })
                    .await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    // Counts the cards whose Ready condition is True, from a watch; ends when all are.
    let ready_watch = {
        let cards = cards.clone();
        let ready_seen = ready_seen.clone();
        tokio::spawn(async move {
            let mut ready = std::collections::HashSet::new();
            let events = kube::runtime::watcher(cards, Default::default())
                .default_backoff()
                .applied_objects();
            futures::pin_mut!(events);
            while let Some(card) = events.next().await {
                let Ok(card) = card else { continue };
                let is_ready = card.status.as_ref().is_some_and(|s| {
                    s.conditions
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True")
                });
                let name = card.metadata.name.clone().unwrap_or_default();
                if is_ready {
                    if let Some(i) = name.strip_prefix("agent-").and_then(|i| i.parse().ok()) {
                        if let Ok(mut seen) = ready_seen.lock() {
                            seen.insert(i);
                        }
                    }
                    ready.insert(name);
                } else {
                    ready.remove(&name);
                }
                if ready.len() >= n {
                    return Ok::<Instant, anyhow::Error>(Instant::now());
                }
            }
            anyhow::bail!("the card watch ended")
        })
    };
    let started = Instant::now();
    stream::iter(0..n)
        .for_each_concurrent(concurrency, |i| {
            let (cards, applied) = (cards.clone(), applied.clone());
            async move {
                let name = format!("agent-{i}");
                let t = Instant::now();
                match cards
                    .patch(
                        &name,
                        &PatchParams::apply("bench").force(),
                        &Patch::Apply(&card(&name, &host(i))),
                    )
                    .await
                {
                    Ok(_) => {
                        applied.lock().await.insert(i, t);
                    }
                    Err(e) => eprintln!("apply {name}: {e}"),
                }
            }
        })
        .await;
    let applied_in = started.elapsed();

    // All Ready? (Read from the watch started before the applies: listing every card each
    // second would load the API server the operator is measured against.)
    let all_ready = tokio::time::timeout(Duration::from_secs(600), ready_watch)
        .await
        .map_err(|_| anyhow::anyhow!("not all {n} Ready after 10 minutes"))???
        .duration_since(started);
    let _ = tokio::time::timeout(Duration::from_secs(120), poller).await;
    // What the cards cost in API requests (the operator counts its own, by verb and resource).
    let calls = read_counts(&scrape(&http, admin).await?);
    let rss = peak_rss_kib(op.id());
    let cpu = cpu_time(op.id());
    drop(op);

    // Restart with every card unchanged: a fresh process serves them all, and writes nothing.
    let restarted = Instant::now();
    let op = Operator(start_operator()?, graceful);
    wait_ready(&http, admin).await?;
    let ready_after = restarted.elapsed();
    let mut waiting: Vec<usize> = (0..n).collect();
    while !waiting.is_empty() {
        anyhow::ensure!(
            restarted.elapsed() < Duration::from_secs(120),
            "{} cards not served 2 minutes after the restart",
            waiting.len()
        );
        let missed: Vec<usize> = stream::iter(waiting)
            .map(|i| {
                let http = http.clone();
                async move {
                    let ok = http
                        .get(format!("http://{addr}/.well-known/agent-card.json"))
                        .header("host", host(i))
                        .send()
                        .await
                        .is_ok_and(|r| r.status().is_success());
                    (!ok).then_some(i)
                }
            })
            .buffer_unordered(32)
            .filter_map(|m| async move { m })
            .collect()
            .await;
        waiting = missed;
    }
    let restart_served = restarted.elapsed();
    // Writes once every card was reconciled by the new leader and nothing moved for 5 s.
    let mut last = (0.0, Instant::now());
    let settled = loop {
        let text = scrape(&http, admin).await?;
        // Labelled by controller now, unlabelled in earlier releases (the
        // benchmark also runs against an older binary through OPERATOR_WRAPPER).
        let reconciles = metric(
            &text,
            "agentcard_reconciles_total{controller=\"agentcard\"}",
        )
        .max(metric(&text, "agentcard_reconciles_total"));
        if reconciles != last.0 {
            last = (reconciles, Instant::now());
        } else if reconciles >= n as f64 && last.1.elapsed() > Duration::from_secs(5) {
            break text;
        }
        anyhow::ensure!(
            restarted.elapsed() < Duration::from_secs(300),
            "the restarted operator reconciled {reconciles} of {n} cards in 5 minutes"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let restart_writes: Vec<((String, String), f64)> = read_counts(&settled)
        .into_iter()
        .filter(|((verb, _), _)| matches!(verb.as_str(), "create" | "patch" | "update" | "delete"))
        .collect();
    let restart_rss = peak_rss_kib(op.id());
    drop(op);

    // The floors, with no operator running (it watches every namespace's cards).
    let old_floor = writes_floor(&client, run_id, n, concurrency, true).await?;
    let floor = writes_floor(&client, run_id, n, concurrency, false).await?;
    let all_served = last_served.lock().await.map(|t| t.duration_since(started));
    let mut lat: Vec<Duration> = served.lock().await.values().copied().collect();
    lat.sort();

    println!("controller load benchmark: {n} objects, concurrency {concurrency}");
    println!(
        "  reference: {n} plain ConfigMap writes accepted in {:.2?} ({:.0} writes/s)",
        reference,
        n as f64 / reference.as_secs_f64()
    );
    println!(
        "  reference: {n} AgentCards accepted with no operator running in {:.2?} ({:.0} writes/s)",
        reference_cards,
        n as f64 / reference_cards.as_secs_f64()
    );
    println!(
        "  AgentCards: applied in {:.2?} ({:.0} applies/s); all {n} Ready after {:.2?}",
        applied_in,
        n as f64 / applied_in.as_secs_f64(),
        all_ready
    );
    println!(
        "  all {n} served over HTTP (so their status confirmed) after {:.2?}",
        all_served.unwrap_or_default()
    );
    println!(
        "  apply -> served over HTTP: p50 {:.1?}, p99 {:.1?}, max {:.1?} ({} measured)",
        percentile(&lat, 0.50),
        percentile(&lat, 0.99),
        lat.last().copied().unwrap_or_default(),
        lat.len()
    );
    let per_card: f64 = calls
        .iter()
        .filter(|((verb, _), _)| verb != "watch" && verb != "list")
        .map(|(_, v)| v)
        .sum::<f64>()
        / n as f64;
    println!("  API requests per card (without lists and watches): {per_card:.2}");
    for ((verb, resource), count) in &calls {
        println!("    {verb:>6} {resource:<28} {count:>8.0}");
    }
    println!(
        "  operator peak RSS: {} MiB; CPU time {}",
        rss.map_or("unknown".into(), |k| format!("{:.1}", k as f64 / 1024.0)),
        cpu.map_or("unknown".into(), |c| format!("{c:.2?}"))
    );
    println!(
        "  restart with {n} unchanged cards: ready after {ready_after:.2?}, all served after {restart_served:.2?}; {} reconciles; writes (the Lease is the leader's own):",
        last.0
    );
    for ((verb, resource), count) in &restart_writes {
        println!("    {verb:>6} {resource:<28} {count:>8.0}");
    }
    println!(
        "  restarted operator peak RSS: {} MiB",
        restart_rss.map_or("unknown".into(), |k| format!("{:.1}", k as f64 / 1024.0))
    );
    let target = 2.0 * per_card * n as f64 / (n as f64 / reference.as_secs_f64());
    println!(
        "  target (2 x {per_card:.2} calls x {n} cards / {:.0} writes/s): {target:.1}s; all Ready took {:.2}x that",
        n as f64 / reference.as_secs_f64(),
        all_ready.as_secs_f64() / target
    );
    println!(
        "  floor: the writes the operator makes for {n} cards, made directly, no operator ({FLOOR_CALLS}): {:.2?}; all Ready took {:.2}x that (target <= 1.1)",
        floor.elapsed,
        all_ready.as_secs_f64() / floor.elapsed.as_secs_f64()
    );
    println!(
        "  old floor: the same with the finalizer patch earlier versions made: {:.2?}; the floor is {:.2}x that (target <= 0.8)",
        old_floor.elapsed,
        floor.elapsed.as_secs_f64() / old_floor.elapsed.as_secs_f64()
    );
    for f in [&old_floor, &floor] {
        if f.failed > 0 {
            println!("    {} floor writes failed in {}", f.failed, f.namespace);
        }
    }
    if !own_plane {
        // The old floor's cards carry the finalizer with no operator to remove it.
        old_floor.release(&client, concurrency).await;
    }
    for name in [
        &op_ns,
        &ref_ns,
        &ns,
        &floor.namespace,
        &floor.op_namespace,
        &old_floor.namespace,
        &old_floor.op_namespace,
    ] {
        let _ = namespaces.delete(name, &Default::default()).await;
    }
    if own_plane {
        let _ = Command::new("bash")
            .arg(root.join("tests/controlplane/stop"))
            .arg(plane_dir.path())
            .stdout(Stdio::null())
            .status();
    }
    Ok(())
}

/// Wait (at most 60 s) until the operator at `admin` answers `/readyz` with a success.
/// Wait (at most `limit`) until the namespaces of earlier runs on a shared plane (`bench-…`)
/// are gone: a plane still deleting the thousands of objects they held slows the phases of
/// this run unevenly, and the ratios between them would measure that.
async fn earlier_runs_gone(namespaces: &Api<Namespace>, limit: Duration) -> anyhow::Result<()> {
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

async fn wait_ready(http: &reqwest::Client, admin: std::net::SocketAddr) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
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
async fn scrape(http: &reqwest::Client, admin: std::net::SocketAddr) -> anyhow::Result<String> {
    Ok(http
        .get(format!("http://{admin}/metrics"))
        .send()
        .await?
        .text()
        .await?)
}

/// The value of an unlabelled sample `name` in a scrape (0 when absent).
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Stop the operator and whatever runs it (its process group). Under a wrapper (a profiler)
/// SIGTERM first, so the profiler writes its data and the operator drains and exits (up to
/// 30 s); then SIGKILL, so nothing is left running into the next measurement.
/// The operator's process (group), stopped when dropped: also when the benchmark fails, so no
/// operator is left running against a plane that is gone.
struct Operator(std::process::Child, bool);

impl Operator {
    fn id(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        stop(&mut self.0, self.1);
    }
}

fn stop(op: &mut std::process::Child, graceful: bool) {
    let group = format!("-{}", op.id());
    if graceful {
        let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline && matches!(op.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
    let _ = op.wait();
}

/// What the floor writes per card, in order (the old floor patches the finalizer in after the
/// apply).
const FLOOR_CALLS: &str =
    "apply AgentCard, create ConfigMap, create Ingress, apply status, create Event";

/// The floor phase's outcome.
struct Floor {
    elapsed: Duration,
    failed: usize,
    namespace: String,
    op_namespace: String,
    names: Vec<String>,
}

impl Floor {
    /// Drop the floor cards' finalizers, so their namespace can go on a plane that stays.
    async fn release(&self, client: &Client, concurrency: usize) {
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
/// makes, its status by server-side apply and its Event. Twice `concurrency` at once: the
/// client's and the operator's writers.
async fn writes_floor(
    client: &Client,
    run_id: u32,
    n: usize,
    concurrency: usize,
    finalizer: bool,
) -> anyhow::Result<Floor> {
    use agentcard_operator::a2a::keys::{Algorithm, SigningKey};
    use agentcard_operator::controller::agentcard::build::build;
    use agentcard_operator::controller::agentcard::{outcome_event, status};
    use agentcard_operator::controller::config::Settings;
    use agentcard_operator::controller::events::Events;
    use agentcard_operator::controller::finalizers::LEGACY_CARD;
    use agentcard_operator::controller::routes::policy::IngressPolicy;
    use agentcard_operator::controller::routes::routing::Routing;
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
            let (cards, cms, ingresses) = (cards.clone(), cms.clone(), ingresses.clone());
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
