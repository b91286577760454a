//! Approval latency on the local control plane: `cargo bench --bench approval_load` (env:
//! CARDS=100, CONCURRENCY=16 client writers, AGENTCARD_TEST_KUBECONFIG to use a running local
//! plane instead of starting one; never KUBECONFIG, which may name a real cluster).
//!
//! N cards are published in a namespace a directory with `admission: ApprovalRequired`
//! selects; once each waits for approval, an AgentCardApproval of each card's content hash is
//! created, and the directory's native API (`/v1/agents`, through the operator's own server)
//! is polled until each card is listed: time from the approval's create call to the card
//! listed, p50/p99. Then each card gets a breaking edit (its skill renamed): time from the
//! apply call to the card gone from the listing, p50/p99. One poller reads the listing every
//! 20 ms for all cards at once, so the figures include up to 20 ms of polling.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentcard_operator::crd::{AgentCard, AgentCardApproval, AgentDirectory, ApprovalState};
use futures::{stream, StreamExt};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::{json, Value};

#[path = "support/load.rs"]
mod load;
use load::*;

fn card(name: &str, host: &str, skill: &str) -> Value {
    json!({
        "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentCard",
        "metadata": {"name": name},
        "spec": {
            "publish": {"host": host},
            "card": {
                "name": format!("Agent {name}"), "description": "Approval benchmark agent.",
                "version": "1.0.0",
                "supportedInterfaces": [{"url": format!("https://{host}/a2a"), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
                "capabilities": {}, "defaultInputModes": ["text/plain"],
                "defaultOutputModes": ["text/plain"],
                "skills": [{"id": skill, "name": "Work", "description": "Does work.", "tags": ["load"]}]
            }
        }
    })
}

/// Apply every card of `names` (on `host(name)`, its skill `skill`), `concurrency` at once:
/// when each apply call started.
async fn apply_all(
    cards: &Api<AgentCard>,
    names: &[String],
    host: &dyn Fn(&str) -> String,
    skill: &str,
    concurrency: usize,
) -> BTreeMap<String, Instant> {
    stream::iter(names.iter().cloned())
        .map(|name| {
            let (cards, c) = (cards.clone(), card(&name, &host(&name), skill));
            async move {
                let at = Instant::now();
                let params = PatchParams::apply("bench").force();
                if let Err(e) = cards.patch(&name, &params, &Patch::Apply(&c)).await {
                    eprintln!("apply of {name} failed: {e}");
                }
                (name, at)
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await
}

/// The names the directory lists now, every page (empty when it does not answer).
async fn listed(
    http: &reqwest::Client,
    addr: std::net::SocketAddr,
    host: &str,
) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/agents?limit=100&cursor={c}"),
            None => "/v1/agents?limit=100".to_string(),
        };
        let Ok(r) = http
            .get(format!("http://{addr}{path}"))
            .header("Host", host)
            .send()
            .await
        else {
            return names;
        };
        let Some(v) = r
            .bytes()
            .await
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        else {
            return names;
        };
        names.extend(
            v["agents"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|a| a["_meta"]["agentcard.dev/directory"]["name"].as_str())
                .map(str::to_string),
        );
        match v["metadata"]["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => return names,
        }
    }
}

/// Poll the listing until every name in `started` is `want_listed`; each one's latency from
/// its start.
async fn measure(
    http: &reqwest::Client,
    addr: std::net::SocketAddr,
    host: &str,
    started: &BTreeMap<String, Instant>,
    want_listed: bool,
) -> anyhow::Result<Vec<Duration>> {
    let mut done: BTreeMap<String, Duration> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(300);
    while done.len() < started.len() {
        anyhow::ensure!(
            Instant::now() < deadline,
            "{} of {} never changed",
            started.len() - done.len(),
            started.len()
        );
        let now = listed(http, addr, host).await;
        let seen = Instant::now();
        for (name, at) in started {
            if !done.contains_key(name) && now.contains(name) == want_listed {
                done.insert(name.clone(), seen.duration_since(*at));
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut v: Vec<Duration> = done.into_values().collect();
    v.sort();
    Ok(v)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let n = env_usize("CARDS", 100);
    let concurrency = env_usize("CONCURRENCY", 16);
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let plane = BenchPlane::start(&root)?;
    let kubeconfig = plane.kubeconfig.clone();
    let config = Config::from_custom_kubeconfig(
        Kubeconfig::read_from(&kubeconfig)?,
        &KubeConfigOptions::default(),
    )
    .await?;
    let client = Client::try_from(config)?;
    let ok = Command::new("kubectl")
        .args(["apply", "--server-side", "-f"])
        .arg(root.join("crds"))
        .env("KUBECONFIG", &kubeconfig)
        .stdout(Stdio::null())
        .status()?;
    anyhow::ensure!(ok.success(), "the CRDs were not applied");
    Command::new("kubectl")
        .args([
            "wait",
            "--for=condition=Established",
            "crd/agentcardapprovals.agentcard.dev",
            "--timeout=60s",
        ])
        .env("KUBECONFIG", &kubeconfig)
        .stdout(Stdio::null())
        .status()?;
    let run_id = std::process::id();
    let (op_ns, ns) = (format!("bench-op-{run_id}"), format!("bench-gov-{run_id}"));
    let namespaces: Api<Namespace> = Api::all(client.clone());
    earlier_runs_gone(&namespaces, Duration::from_secs(300)).await?;
    for name in [&op_ns, &ns] {
        namespaces
            .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": name, "labels": {"bench-gov": run_id.to_string()}}}))?)
            .await?;
    }

    let addr = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let admin = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let _op = Operator(
        Command::new(env!("CARGO_BIN_EXE_agentcard-operator"))
            .args([
                "run",
                "--namespace",
                &op_ns,
                "--max-cards-per-namespace",
                "0",
            ])
            .args([
                "--listen",
                &addr.to_string(),
                "--admin-listen",
                &admin.to_string(),
            ])
            .env("KUBECONFIG", &kubeconfig)
            .env(
                "RUST_LOG",
                std::env::var("OPERATOR_RUST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdout(Stdio::null())
            // OPERATOR_LOG: a file for the operator's log.
            .stderr(match std::env::var_os("OPERATOR_LOG") {
                Some(path) => Stdio::from(std::fs::File::create(path)?),
                None => Stdio::null(),
            })
            // A group of its own: stopped with it when the benchmark ends or fails.
            .process_group(0)
            .spawn()?,
        false,
    );
    let http = reqwest::Client::new();
    wait_ready(&http, admin).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;

    let dir = format!("bench-gov-{run_id}");
    let dhost = format!("{dir}.dir.test");
    let d: AgentDirectory = serde_json::from_value(json!({
        "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentDirectory",
        "metadata": {"name": dir},
        "spec": {"publish": {"host": dhost}, "admission": "ApprovalRequired",
            "namespaceSelector": {"matchLabels": {"bench-gov": run_id.to_string()}}}
    }))?;
    let dirs: Api<AgentDirectory> = Api::all(client.clone());
    dirs.create(&PostParams::default(), &d).await?;
    // Served first: what is measured is the approval, not the directory's own start.
    let deadline = Instant::now() + Duration::from_secs(60);
    while dirs
        .get(&dir)
        .await?
        .status
        .is_none_or(|s| s.served.is_none())
    {
        anyhow::ensure!(Instant::now() < deadline, "the directory was never served");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let cards: Api<AgentCard> = Api::namespaced(client.clone(), &ns);
    let names: Vec<String> = (0..n).map(|i| format!("agent-{i}")).collect();
    let host = |name: &str| format!("{name}-{run_id}.gov.test");
    apply_all(&cards, &names, &host, "work", concurrency).await;
    // Every card published and waiting.
    let deadline = Instant::now() + Duration::from_secs(300);
    let hashes: BTreeMap<String, String> = loop {
        let all = cards.list(&ListParams::default()).await?.items;
        let waiting: BTreeMap<String, String> = all
            .iter()
            .filter_map(|c| {
                let s = c.status.as_ref()?;
                (s.approvals.first()?.state == ApprovalState::Pending)
                    .then(|| Some((c.metadata.name.clone()?, s.content_hash.clone()?)))?
            })
            .collect();
        if waiting.len() == n {
            break waiting;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {} of {n} cards wait for approval",
            waiting.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let answered = http
        .get(format!("http://{addr}/v1/agents"))
        .header("Host", &dhost)
        .send()
        .await?
        .status();
    anyhow::ensure!(answered.is_success(), "the directory answers {answered}");
    anyhow::ensure!(
        listed(&http, addr, &dhost).await.is_empty(),
        "cards listed before approval"
    );

    // Approvals, each timed from its create call.
    let approvals: Api<AgentCardApproval> = Api::all(client.clone());
    let started: BTreeMap<String, Instant> = stream::iter(hashes.clone())
        .map(|(name, hash)| {
            let (approvals, ns, dir) = (approvals.clone(), ns.clone(), dir.clone());
            async move {
                let a: AgentCardApproval = serde_json::from_value(json!({
                    "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentCardApproval",
                    "metadata": {"name": format!("{dir}-{name}")},
                    "spec": {"directory": dir, "card": {"namespace": ns, "name": name},
                        "contentHash": hash, "approver": "bench"}
                }))
                .unwrap_or_else(|e| panic!("approval manifest: {e}"));
                let at = Instant::now();
                if let Err(e) = approvals.create(&PostParams::default(), &a).await {
                    eprintln!("approval failed: {e}");
                }
                (name, at)
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let to_listed = measure(&http, addr, &dhost, &started, true).await?;

    // Breaking edits, each timed from its apply call.
    let started = apply_all(&cards, &names, &host, "work-v2", concurrency).await;
    let to_delisted = measure(&http, addr, &dhost, &started, false).await?;

    println!("approval_load: {n} cards, {concurrency} concurrent writers");
    println!(
        "  approval -> listed:         p50 {:>7.1} ms  p99 {:>7.1} ms  max {:>7.1} ms",
        percentile(&to_listed, 0.50).as_secs_f64() * 1e3,
        percentile(&to_listed, 0.99).as_secs_f64() * 1e3,
        to_listed.last().copied().unwrap_or_default().as_secs_f64() * 1e3
    );
    println!(
        "  breaking edit -> delisted:  p50 {:>7.1} ms  p99 {:>7.1} ms  max {:>7.1} ms",
        percentile(&to_delisted, 0.50).as_secs_f64() * 1e3,
        percentile(&to_delisted, 0.99).as_secs_f64() * 1e3,
        to_delisted
            .last()
            .copied()
            .unwrap_or_default()
            .as_secs_f64()
            * 1e3
    );

    drop(_op);
    dirs.delete(&dir, &Default::default()).await?;
    for a in approvals.list(&ListParams::default()).await?.items {
        if a.spec.directory == dir {
            let _ = approvals
                .delete(&a.metadata.name.unwrap_or_default(), &Default::default())
                .await;
        }
    }
    for name in [&op_ns, &ns] {
        let _ = namespaces.delete(name, &Default::default()).await;
    }
    drop(plane);
    Ok(())
}
