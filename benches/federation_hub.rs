//! A hub federating many directories, on the local plane: FED_UPSTREAMS (default 10)
//! `serve --from-dir` processes of FED_CARDS (default 10,000) generated cards each, every one
//! behind a counting proxy (which sets its directory's Host), and the operator (release
//! build) with one public AgentDirectory whose `spec.upstreams` names them all
//! (`refreshSeconds` FED_REFRESH, default 10). Prints, in one run:
//! - the initial sync: from the AgentDirectory's apply until the hub lists every upstream
//!   card (`GET /v1/facets` on the hub's host), and the operator's peak RSS then;
//! - a refresh with nothing changed: the HTTP requests each upstream got over one refresh
//!   period (after the first sync), and the hub's change feed (nothing new expected);
//! - FED_EDITS (default 30) edits, one card file at a time at upstream `i % FED_UPSTREAMS`:
//!   from the file's write until the hub's change feed (an SSE stream from its latest cursor)
//!   carries the edit, p50/p99/max. The wait is mostly the refresh period: a hub reads an
//!   upstream's feed every `refreshSeconds`, so p50 is about half of it plus the work;
//! - the operator's RSS and peak at the end.
//!
//! `cargo bench --bench federation_hub` (about 6 minutes on 2 cores at 10 x 10,000; set
//! AGENTCARD_TEST_KUBECONFIG to use a running local plane).

#[path = "../tests/support/dircards.rs"]
mod dircards;
#[path = "support/load.rs"]
mod load;
#[allow(dead_code)]
#[path = "../tests/support/upstream.rs"]
mod upstream;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use load::{
    env_usize, mib, percentile, quiet_server, status_kib, wait_ready, BenchPlane, Operator,
};
use serde_json::json;

const HUB: &str = "hub.bench.test";

/// One upstream: `serve --from-dir` over its card files, and the proxy clients reach it by.
struct Up {
    cards: PathBuf,
    hosts: Vec<String>,
    proxy: upstream::Proxy,
    /// Stopped when dropped (also when the benchmark fails).
    _server: Operator,
}

/// Upstream `k`: `n` generated cards on hosts of its own (`a<i>.up<k>.bench.test`).
fn upstream(root: &Path, k: usize, n: usize) -> anyhow::Result<Up> {
    let dir = root.join(format!("up{k}"));
    let cards = dir.join("cards");
    std::fs::create_dir_all(&cards)?;
    let mut hosts = Vec::with_capacity(n);
    for (i, (_, _, _, mut card)) in dircards::generate(n, 50, 1 + k as u64)
        .into_iter()
        .enumerate()
    {
        let host = format!("a{i}.up{k}.bench.test");
        // The generator may repeat a skill id within a card, which a hub rightly refuses:
        // every card here is valid, so every one is expected at the hub.
        if let Some(skills) = card["skills"].as_array_mut() {
            for (j, skill) in skills.iter_mut().enumerate() {
                let id = skill["id"].as_str().unwrap_or("skill").to_string();
                skill["id"] = json!(format!("{id}-{j}"));
            }
        }
        card["supportedInterfaces"] = json!([{"url": format!("https://{host}/a2a"),
            "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]);
        std::fs::write(cards.join(format!("{host}.json")), card.to_string())?;
        hosts.push(host);
    }
    let (server, public) = dircards::serve_dir(
        &cards,
        &format!("up{k}.bench.test"),
        &dir.join("server.log"),
    );
    let server = Operator(server, false);
    let proxy = upstream::Proxy::start(public, &format!("up{k}.bench.test"));
    Ok(Up {
        cards,
        hosts,
        proxy,
        _server: server,
    })
}

/// `GET path` with `Host: host` on a new connection: status and body.
fn get(addr: SocketAddr, host: &str, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let status = out.get(9..12)?.parse().ok()?;
    let body = out.split_once("\r\n\r\n")?.1.to_string();
    Some((status, body))
}

/// The `total` a directory's `/v1/facets` answers (chunked or not, the number is in the body).
fn total(addr: SocketAddr, host: &str) -> Option<usize> {
    let (status, body) = get(addr, host, "/v1/facets")?;
    if status != 200 {
        return None;
    }
    let at = body.find("\"total\":")? + 8;
    body[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// A change-feed stream of the hub from its latest cursor: each line read is sent on.
fn follow_hub(addr: SocketAddr) -> anyhow::Result<std::sync::mpsc::Receiver<(Instant, String)>> {
    // The feed answers 503 until the lease holder has written the directory's first log.
    let asked = Instant::now();
    let body = loop {
        match get(addr, HUB, "/v1/changes?limit=1") {
            Some((200, body)) => break body,
            other => anyhow::ensure!(
                asked.elapsed() < Duration::from_secs(60),
                "the hub's feed answered {:?} for a minute",
                other.map(|(status, _)| status)
            ),
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let start = body.find('{').unwrap_or(0);
    let end = body.rfind('}').map_or(body.len(), |e| e + 1);
    let page: serde_json::Value = serde_json::from_str(&body[start..end])?;
    let latest = page["metadata"]["latest"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let mut s = TcpStream::connect(addr)?;
    write!(
        s,
        "GET /v1/changes?since={latest} HTTP/1.1\r\nHost: {HUB}\r\nAccept: text/event-stream\r\n\r\n"
    )?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(s).lines() {
            let Ok(line) = line else { return };
            if tx.send((Instant::now(), line)).is_err() {
                return;
            }
        }
    });
    Ok(rx)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (ups, n) = (
        env_usize("FED_UPSTREAMS", 10),
        env_usize("FED_CARDS", 10_000),
    );
    let refresh = env_usize("FED_REFRESH", 10) as u64;
    let edits = env_usize("FED_EDITS", 30);
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let plane = BenchPlane::start(&root)?;
    let client = plane.client().await?;
    load::apply_crds(
        &plane.kubeconfig,
        &root,
        &["crd/agentdirectories.agentcard.dev"],
    )?;

    let work = tempfile::tempdir()?;
    let t = Instant::now();
    let upstreams: Vec<Up> = (0..ups)
        .map(|k| upstream(work.path(), k, n))
        .collect::<anyhow::Result<_>>()?;
    for up in &upstreams {
        while total(up.proxy.addr, "").is_none_or(|t| t < n) {
            anyhow::ensure!(
                t.elapsed() < Duration::from_secs(600),
                "an upstream did not list its cards"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    println!(
        "federation hub benchmark: {ups} upstreams (serve --from-dir) x {n} cards, refreshSeconds {refresh}"
    );
    println!(
        "  upstreams written and listing every card after {:.1?}",
        t.elapsed()
    );

    let run_id = std::process::id();
    let op_ns = format!("bench-fedop-{run_id}");
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": op_ns}}))?,
        )
        .await?;
    let addr = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let admin = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let op = Operator(
        quiet_server(
            Command::new(env!("CARGO_BIN_EXE_agentcard-operator")).args([
                "run",
                "--namespace",
                &op_ns,
            ]),
            addr,
            admin,
            &plane.kubeconfig,
        )
        .spawn()?,
        false,
    );
    wait_ready(&reqwest::Client::new(), admin).await?;

    let upstream_specs: Vec<serde_json::Value> = upstreams
        .iter()
        .enumerate()
        .map(|(k, up)| {
            json!({"name": format!("up{k}"), "url": format!("http://{}", up.proxy.addr),
                   "refreshSeconds": refresh, "maxEntries": n, "allowHttp": true,
                   "allowAddresses": ["127.0.0.0/8"]})
        })
        .collect();
    let directory = json!({
        "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentDirectory",
        "metadata": {"name": format!("hub-{run_id}")},
        "spec": {"publish": {"host": HUB}, "access": {"mode": "Public"}, "upstreams": upstream_specs}
    });
    let gvk = kube::api::GroupVersionKind::gvk("agentcard.dev", "v1alpha1", "AgentDirectory");
    let dirs: Api<DynamicObject> = Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk));
    let started = Instant::now();
    dirs.patch(
        &format!("hub-{run_id}"),
        &PatchParams::apply("bench").force(),
        &Patch::Apply(&directory),
    )
    .await?;
    let want = ups * n;
    let mut seen = 0;
    while seen < want {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(1800),
            "the hub listed {seen} of {want} entries in 30 minutes"
        );
        std::thread::sleep(Duration::from_millis(200));
        seen = total(addr, HUB).unwrap_or(0);
    }
    let synced = started.elapsed();
    let rss = |field: &str| mib(status_kib(op.id(), field));
    println!(
        "  initial sync: all {want} entries listed at the hub {synced:.2?} after the AgentDirectory's apply; operator RSS {} MiB, peak {} MiB",
        rss("VmRSS"),
        rss("VmHWM")
    );

    // The hub's change feed: its log is written by the lease holder in rounds after the site
    // lists the entries; followed from the latest cursor until nothing comes for 3 s.
    let feed = follow_hub(addr)?;
    let mut recorded = 0;
    while let Ok((_, line)) = feed.recv_timeout(Duration::from_secs(3)) {
        recorded += usize::from(line.starts_with("event: "));
    }
    println!(
        "  the hub's change feed caught up {:.2?} after the apply ({recorded} changes recorded after the first read of it)",
        started.elapsed().saturating_sub(Duration::from_secs(3))
    );
    // A refresh with nothing changed: what each upstream is asked over one period.
    std::thread::sleep(Duration::from_secs(refresh));
    let before: Vec<usize> = upstreams.iter().map(|u| u.proxy.requests().len()).collect();
    std::thread::sleep(Duration::from_secs(refresh));
    let asked: Vec<usize> = upstreams
        .iter()
        .zip(&before)
        .map(|(u, b)| u.proxy.requests().len() - b)
        .collect();
    let quiet: Vec<String> = feed
        .try_iter()
        .map(|(_, l)| l)
        .filter(|l| l.starts_with("event: "))
        .collect();
    println!(
        "  a refresh period ({refresh} s) with nothing changed: requests per upstream {asked:?} ({}); {} change events at the hub",
        upstreams[0]
            .proxy
            .requests()
            .last()
            .cloned()
            .unwrap_or_default(),
        quiet.len()
    );

    // Edits at the upstreams, seen in the hub's feed.
    let mut lat = Vec::with_capacity(edits);
    for e in 0..edits {
        let up = &upstreams[e % ups];
        let host = &up.hosts[(e * 7919) % n];
        let path = up.cards.join(format!("{host}.json"));
        let mut card: serde_json::Value = serde_json::from_slice(&std::fs::read(&path)?)?;
        let marker = format!("fedbench-{e}-{run_id}");
        card["description"] = json!(marker);
        let t0 = Instant::now();
        std::fs::write(&path, card.to_string())?;
        loop {
            let (at, line) = feed
                .recv_timeout(Duration::from_secs(refresh * 3 + 30))
                .map_err(|_| anyhow::anyhow!("edit {e} never reached the hub's feed"))?;
            if line.contains(&marker) {
                lat.push(at.duration_since(t0));
                break;
            }
        }
    }
    lat.sort();
    println!(
        "  {edits} edits at the upstreams -> the hub's change feed: p50 {:.2?}, p99 {:.2?}, max {:.2?}",
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
        lat.last().copied().unwrap_or_default()
    );
    println!(
        "  operator at the end: RSS {} MiB, peak {} MiB",
        rss("VmRSS"),
        rss("VmHWM")
    );
    let _ = dirs
        .delete(&format!("hub-{run_id}"), &Default::default())
        .await;
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&op_ns, &Default::default())
        .await;
    drop(op);
    drop(upstreams);
    drop(plane);
    Ok(())
}
