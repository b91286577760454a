//! Shared helpers for the integration tests: paths, the SDK oracles, the operator binary.
#![allow(dead_code)]

pub mod cards;
pub mod cluster;
pub mod directory;
pub mod guides;
pub mod http;
pub mod image;
pub mod netns;
pub mod node;
pub mod operator;
pub mod plane;
pub mod tools;
pub mod upstream;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

/// `(status, reason, message)` of condition `type_` of a card, if present.
pub fn condition(
    card: &agentcard_operator::crd::AgentCard,
    type_: &str,
) -> Option<(String, String, String)> {
    card.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| {
            (
                c.status.to_string(),
                c.reason.to_string(),
                c.message.clone(),
            )
        })
}

/// Whether the card is Ready for its current generation.
pub fn ready(c: &agentcard_operator::crd::AgentCard) -> bool {
    condition(c, "Ready").is_some_and(|(s, _, _)| s == "True")
        && c.status.as_ref().and_then(|s| s.observed_generation) == c.metadata.generation
}

/// Server-side apply `card` (an AgentCard manifest with its name) in `ns`, as a user would.
pub async fn apply_card(client: &kube::Client, ns: &str, card: &serde_json::Value) {
    let name = card["metadata"]["name"].as_str().expect("a named card");
    kube::Api::<agentcard_operator::crd::AgentCard>::namespaced(client.clone(), ns)
        .patch(
            name,
            &kube::api::PatchParams::apply("test").force(),
            &kube::api::Patch::Apply(card),
        )
        .await
        .unwrap();
}

/// Create ServiceAccount `ns/name` (for tokens of it: `kubectl create token`, TokenRequest).
pub async fn service_account(client: &kube::Client, ns: &str, name: &str) {
    let sa: k8s_openapi::api::core::v1::ServiceAccount =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
    kube::Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(client.clone(), ns)
        .create(&Default::default(), &sa)
        .await
        .unwrap();
}

/// Requests a card server answered, from its `/metrics` (`agentcard_http_requests_total`).
pub fn requests_answered(metrics: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("agentcard_http_requests_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The signing test vectors made with the official SDKs.
pub fn vectors() -> PathBuf {
    root().join("tests/data/a2a-vectors")
}

/// The MANIFEST.json of the vectors.
pub fn manifest() -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(vectors().join("MANIFEST.json")).unwrap()).unwrap()
}

/// The operator binary built for this test run.
pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_agentcard-operator"))
}

/// Send SIGTERM to `child`, as Kubernetes does to a stopping pod.
pub fn terminate(child: &std::process::Child) {
    let st = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
}

/// Wait up to `within` for `child` to exit on its own.
pub fn wait_exit(
    child: &mut std::process::Child,
    within: std::time::Duration,
) -> Option<std::process::ExitStatus> {
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if std::time::Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Run a command with `stdin` text, returning its output.
pub fn run(mut cmd: Command, stdin: Option<&[u8]>) -> Output {
    use std::io::Write;
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn");
    let mut pipe = child.stdin.take().unwrap();
    let input = stdin.map(<[u8]>::to_vec).unwrap_or_default();
    let writer = std::thread::spawn(move || {
        let _ = pipe.write_all(&input);
    });
    let out = child.wait_with_output().expect("wait");
    writer.join().unwrap();
    out
}

/// `kubectl ARGS` against the plane of `kubeconfig`; its stdout, after asserting it succeeded.
pub fn kubectl(kubeconfig: &Path, args: &[&str]) -> String {
    let out = Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .expect("running kubectl");
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Run `bash SCRIPT DIR` (a plane's or node's stop) once this test process has exited,
/// however it exits (passes, panics, aborts or is killed), then remove DIR when `remove`.
///
/// The watchdog runs in a session of its own and waits for end of file on a pipe whose only
/// writer is this process: the kernel closes it when the process ends, whatever ends it.
/// (Polling the pid, as this did before, could miss the exit on a machine whose pids wrap
/// around quickly: `pid_max` is 32768 here, and a busy build reuses pids within minutes.)
pub fn on_exit_stop(script: &Path, dir: &Path, remove: bool) {
    static HELD: std::sync::Mutex<Vec<std::process::ChildStdin>> =
        std::sync::Mutex::new(Vec::new());
    let mut watchdog = format!(
        "cat >/dev/null; bash '{script}' '{dir}' >/dev/null 2>&1",
        script = script.display(),
        dir = dir.display()
    );
    if remove {
        watchdog.push_str(&format!("; rm -rf '{}'", dir.display()));
    }
    // Detached on purpose: it outlives this process to clean up after it.
    #[allow(clippy::zombie_processes)]
    let mut child = Command::new("setsid")
        .args(["bash", "-c", &watchdog])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting a watchdog");
    // The write end stays open (and is never written) until this process ends. Rust opens it
    // close-on-exec, so no process this one starts holds it.
    let pipe = child.stdin.take().expect("the watchdog's stdin");
    HELD.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(pipe);
}

/// Re-run this test binary's ignored test `inner` under `wrapper` (a command that runs what
/// follows its arguments in other namespaces), with `tools` and the SDK oracles prepared first
/// (nothing can be downloaded in there) and their paths in its environment; the output, after
/// asserting the inner test passed and printed `done`.
pub fn run_inner(mut wrapper: Command, inner: &str, done: &str, tools: &[tools::Tool]) -> String {
    oracle();
    for tool in tools {
        let (var, path) = tool.prepare();
        wrapper.env(var, path);
    }
    let out = wrapper
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            inner,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env_remove("AGENTCARD_TEST_KUBECONFIG")
        .output()
        .expect("running the inner test");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{text}");
    assert!(out.status.success(), "the inner scenario {inner} failed");
    assert!(
        text.contains(done) && text.contains("test result: ok. 1 passed"),
        "the inner test {inner} did not run to its end"
    );
    text
}

/// The oracle directory (`tests/oracle/setup` run once per test binary). Panics, with the
/// setup's output, when the SDKs cannot be installed: oracle tests never skip silently.
pub fn oracle() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let out = Command::new("bash")
            .arg(root().join("tests/oracle/setup"))
            .output()
            .expect("running tests/oracle/setup");
        assert!(
            out.status.success(),
            "tests/oracle/setup failed: the official SDKs are needed as test oracles\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        PathBuf::from(stdout.lines().last().unwrap_or_default().trim())
    })
}

/// One verdict line of `py_verify.py` / `js_verify.mjs`.
#[derive(Debug, serde::Deserialize)]
pub struct Verdict {
    pub file: String,
    pub valid: bool,
    pub kid: Option<String>,
    pub error: Option<String>,
}

/// Which official SDK to ask.
#[derive(Clone, Copy, Debug)]
pub enum Sdk {
    Python,
    Js,
}

/// Ask an SDK to verify `cards` against `jwks`: one verdict per card.
pub fn sdk_verify(sdk: Sdk, jwks: &Path, cards: &[PathBuf]) -> Vec<Verdict> {
    let dir = oracle();
    let mut cmd = match sdk {
        Sdk::Python => {
            let mut c = Command::new(dir.join("venv/bin/python"));
            c.arg(root().join("tests/oracle/py_verify.py"));
            c
        }
        Sdk::Js => {
            let mut c = Command::new("node");
            c.arg(root().join("tests/oracle/js_verify.mjs"))
                .env("NODE_PATH", dir.join("node/node_modules"))
                .env("AGENTCARD_ORACLE", dir);
            c
        }
    };
    cmd.arg("--jwks").arg(jwks).args(cards);
    let out = run(cmd, None);
    let verdicts: Vec<Verdict> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).expect("verdict line"))
        .collect();
    assert_eq!(
        verdicts.len(),
        cards.len(),
        "{sdk:?} oracle gave {} verdicts for {} cards; stderr:\n{}",
        verdicts.len(),
        cards.len(),
        String::from_utf8_lossy(&out.stderr)
    );
    verdicts
}

/// The Python SDK's verdict on served `card` bytes against served `jwks` bytes.
pub fn python_sdk_verdict(card: &[u8], jwks: &[u8]) -> Verdict {
    let dir = tempfile::tempdir().unwrap();
    let (card_file, jwks_file) = (dir.path().join("card.json"), dir.path().join("jwks.json"));
    std::fs::write(&card_file, card).unwrap();
    std::fs::write(&jwks_file, jwks).unwrap();
    sdk_verify(Sdk::Python, &jwks_file, &[card_file])
        .pop()
        .expect("one verdict")
}

/// The Python SDK's canonical bytes of each card (JSON values), or its error.
pub fn sdk_canonical(cards: &[serde_json::Value]) -> Vec<Result<Vec<u8>, String>> {
    use base64::Engine;
    let mut input = Vec::new();
    for c in cards {
        serde_json::to_writer(&mut input, c).unwrap();
        input.push(b'\n');
    }
    let mut cmd = Command::new(oracle().join("venv/bin/python"));
    cmd.arg(root().join("tests/oracle/py_canon.py"));
    let out = run(cmd, Some(&input));
    assert!(
        out.status.success() || !out.stdout.is_empty(),
        "py_canon failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Result<Vec<u8>, String>> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| match l.strip_prefix("ERR ") {
            Some(e) => Err(e.to_string()),
            None => Ok(base64::engine::general_purpose::STANDARD
                .decode(l.trim())
                .expect("base64")),
        })
        .collect();
    assert_eq!(
        lines.len(),
        cards.len(),
        "py_canon: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    lines
}

/// The Python SDK's `A2ACardResolver` fetching `host` from `base_url`, then verifying the card
/// against `jwks`: `(valid, json verdict line)`.
pub fn sdk_resolve(base_url: &str, host: &str, jwks: &Path) -> (bool, serde_json::Value) {
    let mut cmd = Command::new(oracle().join("venv/bin/python"));
    cmd.arg(root().join("tests/oracle/py_resolve.py"))
        .args(["--base-url", base_url, "--host", host, "--jwks"])
        .arg(jwks);
    let out = run(cmd, None);
    let verdict = verdict_line(&out, "py_resolve");
    (out.status.success() && verdict["valid"] == true, verdict)
}

/// The last JSON line an oracle script (`what`) printed: its verdict.
fn verdict_line(out: &Output, what: &str) -> serde_json::Value {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .rfind(|l| l.starts_with('{'))
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| {
            panic!(
                "{what} printed no verdict: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
}

/// The Python SDK's transport for `binding` (`HTTP+JSON` or `JSONRPC`) fetching the extended
/// card of the agent on `host` (its interface at `interface_path`) from `base_url` with
/// `token`, then verifying it against `jwks` (tests/oracle/py_extended.py): `(fetched and
/// verified, json verdict line)`.
pub fn sdk_extended(
    base_url: &str,
    (host, interface_path, binding): (&str, &str, &str),
    jwks: &Path,
    token: Option<&str>,
) -> (bool, serde_json::Value) {
    let mut cmd = Command::new(oracle().join("venv/bin/python"));
    cmd.arg(root().join("tests/oracle/py_extended.py"))
        .args(["--base-url", base_url, "--host", host])
        .args([
            "--interface-path",
            interface_path,
            "--binding",
            binding,
            "--jwks",
        ])
        .arg(jwks);
    if let Some(t) = token {
        cmd.args(["--token", t]);
    }
    let out = run(cmd, None);
    (out.status.success(), verdict_line(&out, "py_extended"))
}

/// An agent built with the official Python SDK serving the public and extended cards of the
/// files `card` and `extended` (tests/oracle/py_extended_agent.py: JSON-RPC at `/a2a`), as a
/// Pod mounting the operator's ConfigMaps would; killed on drop.
pub struct ExtendedAgent {
    /// Where it listens.
    pub addr: std::net::SocketAddr,
    child: std::process::Child,
}

impl ExtendedAgent {
    /// Start it and wait until its port is bound.
    pub fn start(card: &Path, extended: &Path) -> ExtendedAgent {
        use std::io::BufRead;
        let mut child = Command::new(oracle().join("venv/bin/python"))
            .arg(root().join("tests/oracle/py_extended_agent.py"))
            .args(["--port", "0", "--card"])
            .arg(card)
            .arg("--extended")
            .arg(extended)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("starting the Python SDK agent");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port: u16 = line
            .trim()
            .strip_prefix("listening ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("the agent did not start: {line:?}"));
        ExtendedAgent {
            addr: ([127, 0, 0, 1], port).into(),
            child,
        }
    }
}

impl Drop for ExtendedAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Assert that `body` (a served `/.well-known/did.json`) is the did:web document of `host`:
/// valid by the DID Core JSON Schema (tests/data/did-core, validated by
/// tests/oracle/json_schema.py), its DID `did:web:<host>`, and every key of `jwks` that is
/// ES256 (and only those) a `JsonWebKey2020` assertion method `did:web:<host>#<kid>` with the
/// same public key. Returns the listed key ids.
pub fn assert_did_document(body: &[u8], host: &str, jwks: &[u8]) -> Vec<String> {
    let doc: serde_json::Value = serde_json::from_slice(body).unwrap_or_else(|e| {
        panic!(
            "did.json is not JSON ({e}): {}",
            String::from_utf8_lossy(body)
        )
    });
    let mut cmd = Command::new(oracle().join("venv/bin/python"));
    cmd.arg(root().join("tests/oracle/json_schema.py"))
        .arg(root().join("tests/data/did-core/did-core.json"));
    let out = run(cmd, Some(format!("{doc}\n").as_bytes()));
    let verdict = String::from_utf8_lossy(&out.stdout);
    assert!(
        verdict.contains("\"ok\": true"),
        "DID Core schema: {verdict}\n{doc:#}"
    );
    let did = format!("did:web:{host}");
    assert_eq!(doc["id"], did.as_str());
    let jwks: serde_json::Value = serde_json::from_slice(jwks).unwrap();
    let es256: Vec<&serde_json::Value> = jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|k| k["kty"] == "EC" && k["crv"] == "P-256")
        .collect();
    let methods = doc["verificationMethod"].as_array().unwrap();
    assert_eq!(methods.len(), es256.len(), "{doc:#}");
    let mut kids = Vec::new();
    for key in es256 {
        let kid = key["kid"].as_str().unwrap();
        let id = format!("{did}#{kid}");
        let m = methods
            .iter()
            .find(|m| m["id"] == id.as_str())
            .unwrap_or_else(|| panic!("no verification method {id}: {doc:#}"));
        assert_eq!(m["type"], "JsonWebKey2020");
        assert_eq!(m["controller"], did.as_str());
        for member in ["kty", "crv", "x", "y"] {
            assert_eq!(m["publicKeyJwk"][member], key[member], "{member} of {id}");
        }
        assert!(m["publicKeyJwk"].get("d").is_none());
        assert!(
            doc["assertionMethod"]
                .as_array()
                .unwrap()
                .contains(&serde_json::json!(id)),
            "{id} is not an assertion method"
        );
        kids.push(kid.to_string());
    }
    kids
}
