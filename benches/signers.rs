//! The signer backends under load, on the local control plane:
//! `cargo bench --bench signers` (env: SIGNS=1000 signatures per backend, CARDS=1000 cards per
//! backend, REVOKE_CARDS=10000, CONCURRENCY=32, VAULT_BIN (a `vault` binary; without it, the
//! Vault rows are skipped and said so), AGENTCARD_TEST_KUBECONFIG to use a running local plane).
//! Takes about 5 minutes at the defaults on 2 cores (most of it the 10,000-card revocation).
//!
//! Reports, in one run:
//! 1. sign latency per backend, p50/p99 over SIGNS signatures of a card's signing input: the
//!    Secret's key in memory, a SoftHSM2 token through PKCS#11 (made here with softhsm2-util
//!    and pkcs11-tool), and Vault's transit engine (a `server -dev` started here);
//! 2. the time until CARDS cards are all Ready, one operator per backend in turn (each in
//!    namespaces of its own), the Secret backend first: the same cards, the same concurrency;
//! 3. revocation: REVOKE_CARDS cards signed with the Secret's active key, a spare key beside
//!    it; `agentcard-operator keys revoke` of the active key; the time until the last card is
//!    served signed with the spare key (its served bytes read back over HTTP).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentcard_operator::a2a::{Algorithm, SigningKey};
use agentcard_operator::controller::keys::pkcs11::{self, Pkcs11Uri};
use agentcard_operator::controller::keys::vault::{
    self, TokenSource, Vault, VaultAuth, VaultConfig, VaultUri,
};
use agentcard_operator::crd::AgentCard;
use base64::Engine;
use futures::{stream, StreamExt};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube::Client;
use serde_json::json;

#[path = "support/load.rs"]
mod load;
use load::*;

const SOFTHSM_MODULE: &str = "/usr/lib/softhsm/libsofthsm2.so";

fn card(name: &str, host: &str) -> serde_json::Value {
    json!({
        "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentCard",
        "metadata": {"name": name},
        "spec": {"publish": {"host": host}, "card": {
            "name": format!("Agent {name}"), "description": "Signer load agent.", "version": "1.0.0",
            "supportedInterfaces": [{"url": format!("https://{host}/a2a"), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
            "capabilities": {}, "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
            "skills": [{"id": "work", "name": "Work", "description": "Does work.", "tags": ["load"]}]
        }}
    })
}

/// A SoftHSM2 token with an EC P-256 key, in `dir` (SOFTHSM2_CONF is set for this process and
/// the operators it starts); its `pkcs11:` URI.
fn softhsm(dir: &Path) -> anyhow::Result<String> {
    let tokens = dir.join("tokens");
    std::fs::create_dir_all(&tokens)?;
    let conf = dir.join("softhsm2.conf");
    std::fs::write(
        &conf,
        format!(
            "directories.tokendir = {}\nobjectstore.backend = file\nlog.level = ERROR\n",
            tokens.display()
        ),
    )?;
    std::env::set_var("SOFTHSM2_CONF", &conf);
    let run = |cmd: &mut Command| -> anyhow::Result<()> {
        let out = cmd.output()?;
        anyhow::ensure!(
            out.status.success(),
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    };
    run(Command::new("softhsm2-util").args([
        "--init-token",
        "--free",
        "--label",
        "bench",
        "--pin",
        "1234",
        "--so-pin",
        "5678",
    ]))?;
    run(Command::new("pkcs11-tool").args([
        "--module",
        SOFTHSM_MODULE,
        "--token-label",
        "bench",
        "--login",
        "--pin",
        "1234",
        "--keypairgen",
        "--key-type",
        "EC:prime256v1",
        "--label",
        "cards",
        "--id",
        "01",
    ]))?;
    Ok("pkcs11:token=bench;object=cards?pin-value=1234".to_string())
}

/// A Vault dev server (killed on drop) with the transit engine and an ECDSA P-256 key `cards`.
struct DevVault {
    child: std::process::Child,
    addr: String,
}

impl Drop for DevVault {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.wait();
    }
}

async fn dev_vault(bin: &Path, http: &reqwest::Client) -> anyhow::Result<DevVault> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let child = Command::new(bin)
        .args([
            "server",
            "-dev",
            "-dev-root-token-id=root",
            &format!("-dev-listen-address=127.0.0.1:{port}"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()?;
    let vault = DevVault {
        child,
        addr: format!("http://127.0.0.1:{port}"),
    };
    let call = |method: reqwest::Method, path: &str, body: serde_json::Value| {
        http.request(method, format!("{}/v1/{path}", vault.addr))
            .header("X-Vault-Token", "root")
            .body(body.to_string())
            .send()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !call(reqwest::Method::GET, "sys/health", json!({}))
        .await
        .is_ok_and(|r| r.status().is_success())
    {
        anyhow::ensure!(Instant::now() < deadline, "vault did not start");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    call(
        reqwest::Method::POST,
        "sys/mounts/transit",
        json!({"type": "transit"}),
    )
    .await?
    .error_for_status()?;
    call(
        reqwest::Method::POST,
        "transit/keys/cards",
        json!({"type": "ecdsa-p256"}),
    )
    .await?
    .error_for_status()?;
    Ok(vault)
}

/// Sign `input` `n` times with `key`; the latencies, sorted.
fn sign_latencies(key: &SigningKey, input: &[u8], n: usize) -> anyhow::Result<Vec<Duration>> {
    let mut lat = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        key.sign(input)?;
        lat.push(t.elapsed());
    }
    lat.sort();
    Ok(lat)
}

/// Apply `n` cards in `ns` with `concurrency` and wait until all are Ready; the time it took.
async fn all_ready(
    client: &Client,
    ns: &str,
    n: usize,
    concurrency: usize,
    host: impl Fn(usize) -> String,
) -> anyhow::Result<Duration> {
    let cards: Api<AgentCard> = Api::namespaced(client.clone(), ns);
    let watch = {
        let cards = cards.clone();
        tokio::spawn(async move {
            let mut ready = std::collections::HashSet::new();
            let events = kube::runtime::watcher(cards, Default::default())
                .default_backoff()
                .applied_objects();
            futures::pin_mut!(events);
            while let Some(Ok(card)) = events.next().await {
                let name = card.metadata.name.clone().unwrap_or_default();
                let ok = card.status.as_ref().is_some_and(|s| {
                    s.conditions
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True")
                });
                if ok {
                    ready.insert(name);
                } else {
                    ready.remove(&name);
                }
                if ready.len() >= n {
                    return Some(Instant::now());
                }
            }
            None
        })
    };
    let started = Instant::now();
    let manifests: Vec<(String, serde_json::Value)> = (0..n)
        .map(|i| {
            let name = format!("agent-{i}");
            let m = card(&name, &host(i));
            (name, m)
        })
        .collect();
    stream::iter(manifests)
        .for_each_concurrent(concurrency, |(name, m)| {
            let cards = cards.clone();
            async move {
                if let Err(e) = cards
                    .patch(
                        &name,
                        &PatchParams::apply("bench").force(),
                        &Patch::Apply(&m),
                    )
                    .await
                {
                    eprintln!("apply {name}: {e}");
                }
            }
        })
        .await;
    let done = tokio::time::timeout(Duration::from_secs(900), watch)
        .await??
        .ok_or_else(|| anyhow::anyhow!("the watch ended"))?;
    Ok(done.duration_since(started))
}

/// The kid of the first signature of a served card.
fn served_kid(body: &[u8]) -> Option<String> {
    let card: serde_json::Value = serde_json::from_slice(body).ok()?;
    let protected = card["signatures"][0]["protected"].as_str()?;
    let header = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(protected)
        .ok()?;
    let header: serde_json::Value = serde_json::from_slice(&header).ok()?;
    Some(header["kid"].as_str()?.to_string())
}

struct Run {
    kubeconfig: PathBuf,
    client: Client,
    http: reqwest::Client,
    run_id: u32,
}

impl Run {
    /// Start an operator over namespace `tag`'s cards (its own namespace `<tag>-op`) with
    /// `flags`; its public and admin addresses.
    async fn operator(
        &self,
        tag: &str,
        flags: &[String],
    ) -> anyhow::Result<(Operator, std::net::SocketAddr)> {
        let (op_ns, ns) = (
            format!("bench-{tag}-op-{}", self.run_id),
            format!("bench-{tag}-{}", self.run_id),
        );
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        for name in [&op_ns, &ns] {
            namespaces
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(json!({"metadata": {"name": name}}))?,
                )
                .await?;
        }
        let addr = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        let admin = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        let child = Command::new(env!("CARGO_BIN_EXE_agentcard-operator"))
            .args([
                "run",
                "--namespace",
                &op_ns,
                "--watch-namespace",
                &ns,
                "--max-cards-per-namespace",
                "0",
            ])
            .args([
                "--listen",
                &addr.to_string(),
                "--admin-listen",
                &admin.to_string(),
            ])
            .args(flags)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()?;
        let op = Operator(child, false);
        wait_ready(&self.http, admin).await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        Ok((op, addr))
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let (signs, n, revoke_n, concurrency) = (
        env_usize("SIGNS", 1000),
        env_usize("CARDS", 1000),
        env_usize("REVOKE_CARDS", 10_000),
        env_usize("CONCURRENCY", 32),
    );
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let scratch = tempfile::tempdir()?;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(16)
        .build()?;

    // 1. Sign latency per backend.
    let input = {
        let c = agentcard_operator::a2a::AgentCard::from_json_lenient(
            card("a", "a.bench.test")["spec"]["card"]
                .to_string()
                .as_bytes(),
        )
        .map_err(|p| anyhow::anyhow!("{p}"))?;
        let payload = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(agentcard_operator::a2a::canonical::canonical_bytes(&c));
        format!("eyJhbGciOiJFUzI1NiJ9.{payload}").into_bytes()
    };
    let mut rows: Vec<(String, Vec<Duration>)> = Vec::new();
    rows.push((
        "secret (ES256 in memory)".into(),
        sign_latencies(
            &SigningKey::generate(Algorithm::ES256, None)?,
            &input,
            signs,
        )?,
    ));
    let hsm_uri = softhsm(scratch.path())?;
    let hsm = pkcs11::open(
        &Pkcs11Uri::parse(&hsm_uri).map_err(anyhow::Error::msg)?,
        Some(SOFTHSM_MODULE),
    )?;
    rows.push((
        "pkcs11 (SoftHSM2, ES256)".into(),
        sign_latencies(&hsm.active, &input, signs)?,
    ));
    let vault_bin = std::env::var_os("VAULT_BIN").map(PathBuf::from);
    let dev = match &vault_bin {
        Some(bin) => Some(dev_vault(bin, &http).await?),
        None => None,
    };
    if let Some(dev) = &dev {
        let v = Arc::new(Vault::new(VaultConfig {
            addr: dev.addr.clone(),
            auth: VaultAuth::Token(TokenSource::Value("root".into())),
            ca_file: None,
            refresh: Duration::from_secs(30),
        })?);
        let keys = vault::open(
            &v,
            &VaultUri::parse("hashivault://cards").map_err(anyhow::Error::msg)?,
        )
        .await?;
        let active = keys.active.clone();
        let lat = tokio::task::block_in_place(|| sign_latencies(&active, &input, signs))?;
        rows.push(("hashivault (transit, ES256, HTTP)".into(), lat));
    }

    // 2. All Ready per backend, and 3. revocation, on the plane.
    let plane = BenchPlane::start(&root)?;
    let kubeconfig = plane.kubeconfig.clone();
    let client = plane.client().await?;
    let st = Command::new("kubectl")
        .args(["apply", "--server-side", "-f"])
        .arg(root.join("crds"))
        .env("KUBECONFIG", &kubeconfig)
        .stdout(Stdio::null())
        .status()?;
    anyhow::ensure!(st.success(), "the CRDs did not apply");
    Command::new("kubectl")
        .args([
            "wait",
            "--for=condition=Established",
            "crd/agentcards.agentcard.dev",
            "--timeout=60s",
        ])
        .env("KUBECONFIG", &kubeconfig)
        .stdout(Stdio::null())
        .status()?;
    earlier_runs_gone(&Api::all(client.clone()), Duration::from_secs(300)).await?;
    let run = Run {
        kubeconfig: kubeconfig.clone(),
        client: client.clone(),
        http: http.clone(),
        run_id: std::process::id(),
    };

    let mut backends: Vec<(&str, Vec<String>)> = vec![
        ("secret", vec![]),
        (
            "pkcs11",
            vec![
                "--signer".into(),
                hsm_uri.clone(),
                "--pkcs11-module".into(),
                SOFTHSM_MODULE.into(),
            ],
        ),
    ];
    if let Some(dev) = &dev {
        backends.push((
            "hashivault",
            vec![
                "--signer".into(),
                "hashivault://cards".into(),
                "--vault-addr".into(),
                dev.addr.clone(),
                "--vault-token-file".into(),
                {
                    let f = scratch.path().join("vault-token");
                    std::fs::write(&f, "root")?;
                    f.display().to_string()
                },
            ],
        ));
    }
    let mut ready_rows = Vec::new();
    for (tag, flags) in &backends {
        let (op, _) = run.operator(tag, flags).await?;
        let took = all_ready(
            &client,
            &format!("bench-{tag}-{}", run.run_id),
            n,
            concurrency,
            |i| format!("a{i}.{tag}.bench.test"),
        )
        .await?;
        let rss = peak_rss_kib(op.id());
        ready_rows.push((tag.to_string(), took, rss));
        drop(op);
    }

    // 3. Revocation at REVOKE_CARDS.
    let (op, addr) = run.operator("revoke", &[]).await?;
    let ns = format!("bench-revoke-{}", run.run_id);
    let op_ns = format!("bench-revoke-op-{}", run.run_id);
    let spare = SigningKey::generate(Algorithm::ES256, Some("spare-1"))?;
    Api::<Secret>::namespaced(client.clone(), &op_ns)
        .patch(
            "agentcard-signing-keys",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"spare-1.jwk.json": spare.private_jwk_json()?}})),
        )
        .await?;
    let host = |i: usize| format!("a{i}.revoke.bench.test");
    let ready_in = all_ready(&client, &ns, revoke_n, concurrency, host).await?;
    let leaked = Api::<AgentCard>::namespaced(client.clone(), &ns)
        .get("agent-0")
        .await?
        .status
        .and_then(|s| s.key_id)
        .unwrap_or_default();
    let revoked_at = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_agentcard-operator"))
        .args(["keys", "revoke", "-n", &op_ns, "--", &leaked])
        .env("KUBECONFIG", &kubeconfig)
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "keys revoke: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut waiting: Vec<usize> = (0..revoke_n).collect();
    let mut jwks_clean = None;
    while !waiting.is_empty() {
        anyhow::ensure!(
            revoked_at.elapsed() < Duration::from_secs(900),
            "{} cards still signed with the revoked key after 15 minutes",
            waiting.len()
        );
        if jwks_clean.is_none() {
            let j = http
                .get(format!("http://{addr}/.well-known/jwks.json"))
                .header("host", host(0))
                .send()
                .await?
                .text()
                .await?;
            if !j.contains(&leaked) {
                jwks_clean = Some(revoked_at.elapsed());
            }
        }
        waiting = stream::iter(waiting)
            .map(|i| {
                let http = http.clone();
                async move {
                    let body = match http
                        .get(format!("http://{addr}/.well-known/agent-card.json"))
                        .header("host", host(i))
                        .send()
                        .await
                    {
                        Ok(r) => r.bytes().await.unwrap_or_default(),
                        Err(_) => Default::default(),
                    };
                    (served_kid(&body).as_deref() != Some("spare-1")).then_some(i)
                }
            })
            .buffer_unordered(16)
            .filter_map(|m| async move { m })
            .collect()
            .await;
        if !waiting.is_empty() {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    let resigned = revoked_at.elapsed();
    drop(op);

    println!("signer backends benchmark");
    println!("  sign latency over {signs} signatures of a card's signing input:");
    for (name, lat) in &rows {
        println!(
            "    {name:<36} p50 {:>9.1?}  p99 {:>9.1?}",
            percentile(lat, 0.50),
            percentile(lat, 0.99)
        );
    }
    if dev.is_none() {
        println!("    hashivault: skipped (set VAULT_BIN to a vault binary)");
    }
    println!("  all {n} cards Ready (concurrency {concurrency}), one operator per backend:");
    let base = ready_rows.first().map(|r| r.1).unwrap_or_default();
    for (tag, took, rss) in &ready_rows {
        println!(
            "    {tag:<12} {:>9.2?}  ({:.2}x the Secret backend; operator peak RSS {} MiB)",
            took,
            took.as_secs_f64() / base.as_secs_f64().max(1e-9),
            rss.map_or("?".into(), |k| format!("{:.1}", k as f64 / 1024.0))
        );
    }
    println!("  revocation at {revoke_n} cards (all Ready in {ready_in:.2?}):");
    println!(
        "    the revoked key out of the served JWKS after {:.2?}",
        jwks_clean.unwrap_or_default()
    );
    println!(
        "    the last of {revoke_n} cards served re-signed with the spare key after {resigned:.2?}"
    );
    Ok(())
}
