//! Load benchmark of the controller on the local control plane:
//! `cargo bench --bench controller_load` (env: CARDS=1000, CONCURRENCY=32 client writers,
//! OPERATOR_CONCURRENCY=32 for the operator's --concurrency, AGENTCARD_TEST_KUBECONFIG to use a
//! running local plane instead of starting one (never KUBECONFIG: it may name a real cluster),
//! OPERATOR_WRAPPER to run the operator and the serving-only replica under a profiler,
//! REFERENCES=0 to skip the two plain-write references and the old floor: the default above
//! 10,000 cards, where each costs as long as the run itself), FLOOR=0 to skip the floor too (a
//! run that re-measures the rest: it takes as long as the operator's part),
//! INITIAL_LIST=pages to have the operator and the serving-only replica list in pages instead
//! of the default streaming lists (`--initial-list`), SERVING_PAGE_SIZES=500,2000 to start the
//! serving-only replica once per list page size (one after the other; default: once, with the
//! operator's default), KEEP=1 to leave the operator's and the cards' namespaces on a shared
//! plane (AGENTCARD_TEST_KUBECONFIG), to restart the operator on them again. A plane this
//! benchmark starts gets an 8 GiB etcd quota (AGENTCARD_ETCD_QUOTA) and its API server's
//! periodic cache consistency check off (PLANE_FEATURE_GATES, see `support/load.rs`). Time on
//! 2 cores: about 8 minutes at 10,000 cards, 39 at 100,000 without the references, 21 with
//! FLOOR=0.
//!
//! Reports: how fast the plane accepts N plain ConfigMap writes (the reference), then for N
//! AgentCards applied with the same concurrency: time until all are Ready, p50/p99 latency from
//! a card's apply to its bytes being served over HTTP, the API requests per card (from the
//! operator's `agentcard_api_requests_total`), the operator's peak RSS and CPU time; then a
//! restart with every card unchanged (time until the card server's index holds every card, to
//! ready, and until each card was answered over HTTP, and every write);
//! then a serving-only replica (`serve --from-cluster`): its time until every card is served
//! and its peak RSS;
//! last, with the operator stopped, the floor: the same API writes the operator makes for each
//! card (the client's apply, ConfigMap, Ingress, status, Event), made directly from the
//! operator's own pure build step, so what the API server alone needs for them is beside the
//! all-Ready time; and the old floor, the same with the finalizer patch earlier versions made
//! (after the apply), so the two are compared in one run. The old floor runs first: the new one
//! meets the larger store, which can only make it look slower.
//! On a shared plane, a run first waits for the namespaces earlier runs deleted to be gone.
//! Readiness comes from a watch, and only cards the watch shows Ready are polled over HTTP: the
//! benchmark itself adds little load to the API server and the card server it measures.

use std::path::PathBuf;
use std::process::Command;
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

#[path = "support/load.rs"]
mod load;
use load::*;

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
    let references = env_usize("REFERENCES", usize::from(n <= 10_000)) != 0;
    // Waits scale with the count (a 2-core machine writes a few hundred objects a second).
    let scaled =
        |floor_secs: u64, per_sec: usize| Duration::from_secs(floor_secs.max((n / per_sec) as u64));
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let plane = BenchPlane::start(&root)?;
    let kubeconfig = plane.kubeconfig.clone();
    let own_plane = plane.is_own();
    let config = Config::from_custom_kubeconfig(
        Kubeconfig::read_from(&kubeconfig)?,
        &KubeConfigOptions::default(),
    )
    .await?;
    let client = Client::try_from(config)?;
    apply_crds(&kubeconfig, &root, &["crd/agentcards.agentcard.dev"])?;
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
    stream::iter(0..if references { n } else { 0 })
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
    stream::iter(0..if references { n } else { 0 })
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
    // The operator's binary, under the wrapper when there is one (the operator and the
    // serving-only replica alike).
    let initial_list = std::env::var("INITIAL_LIST").unwrap_or_else(|_| "auto".into());
    let wrapped = || {
        let binary = env!("CARGO_BIN_EXE_agentcard-operator").to_string();
        let (program, prefix) = match wrapper.split_first() {
            Some((p, rest)) => (p.clone(), [rest, &[binary]].concat()),
            None => (binary, Vec::new()),
        };
        let mut cmd = Command::new(program);
        cmd.args(prefix);
        cmd
    };
    let start_operator = || {
        let mut cmd = wrapped();
        cmd.args(["run", "--namespace", &op_ns, "--watch-namespace", &ns])
            .args(["--initial-list", &initial_list])
            // Every card lives in one namespace here: no per-namespace bound on their number
            // or their bytes (100,000 cards pass the default 32 MiB of specs).
            .args([
                "--max-cards-per-namespace",
                "0",
                "--max-namespace-card-bytes",
                "0",
            ])
            .args([
                "--concurrency",
                &env_usize("OPERATOR_CONCURRENCY", 32).to_string(),
            ]);
        // A group of its own: a wrapper and the operator under it stop together.
        quiet_server(&mut cmd, addr, admin, &kubeconfig).spawn()
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
    let progress = Progress::default();
    let (applied, served, last_served, ready_seen) = (
        progress.written.clone(),
        progress.served.clone(),
        progress.last_served.clone(),
        progress.ready.clone(),
    );
    let host = move |i: usize| format!("a{i}.bench{run_id}.agents.test");
    let poller = poll_served(http.clone(), addr, n, host, progress);

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
    let ready_limit = scaled(600, 20);
    let all_ready = tokio::time::timeout(ready_limit, ready_watch)
        .await
        .map_err(|_| anyhow::anyhow!("not all {n} Ready after {ready_limit:?}"))???
        .duration_since(started);
    let _ = tokio::time::timeout(scaled(120, 500), poller).await;
    // What the cards cost in API requests (the operator counts its own, by verb and resource).
    let calls = read_counts(&scrape(&http, admin).await?);
    let rss = peak_rss_kib(op.id());
    let cpu = cpu_time(op.id());
    drop(op);

    // Restart with every card unchanged: a fresh process serves them all, and writes nothing.
    let restarted = Instant::now();
    let op = Operator(start_operator()?, graceful);
    // When the card server's index held every card (its gauge), then when `/readyz` said so;
    // the walk below then asks for each card over HTTP, 100,000 requests that take seconds of
    // their own on 2 cores, beside the reconciles the new leader starts.
    let indexed_after = wait_indexed(&http, admin, n, restarted, scaled(120, 200)).await?;
    wait_ready(&http, admin).await?;
    let ready_after = restarted.elapsed();
    every_card_served(
        &http,
        addr,
        n,
        &host,
        restarted,
        scaled(120, 200),
        "the restart",
    )
    .await?;
    let restart_served = restarted.elapsed();
    // CPU spent until then: beside the wall time, whether the process or the plane bounds it.
    let restart_cpu = cpu_time(op.id());
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
            restarted.elapsed() < scaled(300, 100),
            "the restarted operator reconciled {reconciles} of {n} cards in {:?}",
            scaled(300, 100)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let restart_writes: Vec<((String, String), f64)> = read_counts(&settled)
        .into_iter()
        .filter(|((verb, _), _)| matches!(verb.as_str(), "create" | "patch" | "update" | "delete"))
        .collect();
    let restart_rss = peak_rss_kib(op.id());
    drop(op);

    // A serving-only replica (`serve --from-cluster`): its start, until it serves every card;
    // once per page size in SERVING_PAGE_SIZES (0: the default), one replica at a time.
    let page_sizes: Vec<String> = std::env::var("SERVING_PAGE_SIZES")
        .unwrap_or_else(|_| "0".into())
        .split(',')
        .map(|p| p.trim().to_string())
        .collect();
    let mut serving_runs = Vec::new();
    for page in page_sizes {
        let (serve_addr, serve_admin) = (
            std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?,
            std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?,
        );
        let serving_started = Instant::now();
        let serving = Operator(
            quiet_server(
                wrapped()
                    .args(["serve", "--from-cluster", "--namespace", &op_ns])
                    .args(["--initial-list", &initial_list])
                    .args(match page.as_str() {
                        "0" => vec![],
                        p => vec!["--list-page-size", p],
                    }),
                serve_addr,
                serve_admin,
                &kubeconfig,
            )
            .spawn()?,
            graceful,
        );
        wait_ready(&http, serve_admin).await?;
        every_card_served(
            &http,
            serve_addr,
            n,
            &host,
            serving_started,
            scaled(120, 200),
            "serve --from-cluster",
        )
        .await?;
        let served_after = serving_started.elapsed();
        let cpu = cpu_time(serving.id());
        serving_runs.push((page, served_after, cpu, peak_rss_kib(serving.id())));
    }

    // The floors, with no operator running (it watches every namespace's cards).
    let old_floor = if references {
        Some(writes_floor(&client, run_id, n, concurrency, true, &card).await?)
    } else {
        None
    };
    let floor = if env_usize("FLOOR", 1) != 0 {
        Some(writes_floor(&client, run_id, n, concurrency, false, &card).await?)
    } else {
        None
    };
    let all_served = last_served.lock().await.map(|t| t.duration_since(started));
    let mut lat: Vec<Duration> = served.lock().await.values().copied().collect();
    lat.sort();

    println!(
        "controller load benchmark: {n} objects, concurrency {concurrency}, --initial-list {initial_list}"
    );
    if references {
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
    } else {
        println!("  references and the old floor skipped (REFERENCES=0)");
    }
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
        mib(rss),
        cpu_text(cpu)
    );
    println!(
        "  restart with {n} unchanged cards: every card in the serving index after {indexed_after:.2?}, ready after {ready_after:.2?}, each card answered over HTTP by {restart_served:.2?} (CPU {} by then); {} reconciles; writes (the Lease is the leader's own):",
        cpu_text(restart_cpu),
        last.0
    );
    for ((verb, resource), count) in &restart_writes {
        println!("    {verb:>6} {resource:<28} {count:>8.0}");
    }
    println!("  restarted operator peak RSS: {} MiB", mib(restart_rss));
    for (page, served_after, cpu, rss) in &serving_runs {
        let pages = match page.as_str() {
            "0" => String::new(),
            p => format!(", lists in pages of {p}"),
        };
        println!(
            "  a serving-only replica (serve --from-cluster{pages}): every card served {served_after:.2?} after its start (CPU {}); peak RSS {} MiB",
            cpu_text(*cpu),
            mib(*rss)
        );
    }
    if references {
        let target = 2.0 * per_card * n as f64 / (n as f64 / reference.as_secs_f64());
        println!(
            "  target (2 x {per_card:.2} calls x {n} cards / {:.0} writes/s): {target:.1}s; all Ready took {:.2}x that",
            n as f64 / reference.as_secs_f64(),
            all_ready.as_secs_f64() / target
        );
    }
    match &floor {
        Some(floor) => println!(
            "  floor: the writes the operator makes for {n} cards, made directly, no operator ({FLOOR_CALLS}): {:.2?}; all Ready took {:.2}x that (target <= 1.1)",
            floor.elapsed,
            all_ready.as_secs_f64() / floor.elapsed.as_secs_f64()
        ),
        None => println!("  floor skipped (FLOOR=0)"),
    }
    if let (Some(old_floor), Some(floor)) = (&old_floor, &floor) {
        println!(
            "  old floor: the same with the finalizer patch earlier versions made: {:.2?}; the floor is {:.2}x that (target <= 0.8)",
            old_floor.elapsed,
            floor.elapsed.as_secs_f64() / old_floor.elapsed.as_secs_f64()
        );
    }
    for f in old_floor.iter().chain(floor.iter()) {
        if f.failed > 0 {
            println!("    {} floor writes failed in {}", f.failed, f.namespace);
        }
    }
    if let (false, Some(old_floor)) = (own_plane, &old_floor) {
        // The old floor's cards carry the finalizer with no operator to remove it.
        old_floor.release(&client, concurrency).await;
    }
    let floor_namespaces = old_floor
        .iter()
        .chain(floor.iter())
        .flat_map(|f| [&f.namespace, &f.op_namespace]);
    // KEEP=1 leaves the operator's and the cards' namespaces on a shared plane, for a restart
    // measured again by hand (`run --namespace bench-op-<id> --watch-namespace bench-cards-<id>`).
    let keep = env_usize("KEEP", 0) != 0 && !own_plane;
    let kept: &[&String] = if keep { &[&op_ns, &ns] } else { &[] };
    for name in [&op_ns, &ref_ns, &ns].into_iter().chain(floor_namespaces) {
        if !kept.contains(&name) {
            let _ = namespaces.delete(name, &Default::default()).await;
        }
    }
    if keep {
        println!("  kept namespaces {op_ns} and {ns} (KEEP=1)");
    }
    drop(plane);
    Ok(())
}

/// Wait until the server at `addr` answers 200 for every card's host (polled 32 at a time,
/// the ones still missing again), at most `limit` after `since`.
async fn every_card_served(
    http: &reqwest::Client,
    addr: std::net::SocketAddr,
    n: usize,
    host: &(dyn Fn(usize) -> String + Sync),
    since: Instant,
    limit: Duration,
    what: &str,
) -> anyhow::Result<()> {
    let mut waiting: Vec<usize> = (0..n).collect();
    while !waiting.is_empty() {
        anyhow::ensure!(
            since.elapsed() < limit,
            "{} cards not served {limit:?} after {what}",
            waiting.len()
        );
        let missed: Vec<usize> = stream::iter(waiting)
            .map(|i| async move {
                let ok = http
                    .get(format!("http://{addr}/.well-known/agent-card.json"))
                    .header("host", host(i))
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success());
                (!ok).then_some(i)
            })
            .buffer_unordered(32)
            .filter_map(|m| async move { m })
            .collect()
            .await;
        waiting = missed;
    }
    Ok(())
}

/// How long after `since` the operator's card server held `n` cards in its index
/// (`agentcard_served_cards`, scraped every 100 ms: a card in the index is one it answers).
async fn wait_indexed(
    http: &reqwest::Client,
    admin: std::net::SocketAddr,
    n: usize,
    since: Instant,
    limit: Duration,
) -> anyhow::Result<Duration> {
    loop {
        // Refused while the new process binds its ports: not yet, like an index short of n.
        let held = match scrape(http, admin).await {
            Ok(text) => metric(&text, "agentcard_served_cards"),
            Err(_) => 0.0,
        };
        if held >= n as f64 {
            return Ok(since.elapsed());
        }
        anyhow::ensure!(
            since.elapsed() < limit,
            "the serving index held {held} of {n} cards {limit:?} after the restart"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A process's CPU time as the report prints it.
fn cpu_text(cpu: Option<Duration>) -> String {
    cpu.map_or("unknown".into(), |c| format!("{c:.2?}"))
}
