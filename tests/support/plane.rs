//! The real control plane for integration tests.
//!
//! One plane serves a whole test run: the one `AGENTCARD_TEST_KUBECONFIG` names (`scripts/test`
//! starts one plane and exports it), otherwise a plane this test binary starts with
//! `tests/controlplane/start` in `target/tmp/`, stopped by a watchdog process when the test
//! binary exits. `KUBECONFIG` is never read: a user's often names a real cluster, and the tests
//! create and delete namespaces, CRDs and cluster roles. A plane that cannot start fails the
//! test with the reason: integration tests never skip silently.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use super::root;

/// The kubeconfig of the plane this test run uses, starting one if needed.
pub fn kubeconfig() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        if let Some(path) = std::env::var_os("AGENTCARD_TEST_KUBECONFIG").filter(|p| !p.is_empty())
        {
            return PathBuf::from(path);
        }
        start_for_this_run("plane")
    })
}

/// A plane of this test binary's own, whatever `AGENTCARD_TEST_KUBECONFIG` says: for suites that run an
/// operator watching every namespace, which would reconcile other suites' cards on a shared
/// plane. Started once per binary, stopped when the binary exits.
pub fn dedicated_kubeconfig() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| start_for_this_run("dedicated-plane"))
}

/// Build the plane's binaries when they are not cached yet (`tests/controlplane/build`), once
/// per test binary: for a test about to enter a network namespace, where no module can be
/// downloaded.
pub fn build_binaries() {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let out = Command::new("bash")
            .arg(root().join("tests/controlplane/build"))
            .output()
            .expect("running tests/controlplane/build");
        assert!(
            out.status.success(),
            "the test control plane could not be built:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    });
}

/// Start a plane in `target/tmp/<tag>-<pid>` with a watchdog that stops it when this test
/// binary exits, however it exits; its kubeconfig.
fn start_for_this_run(tag: &str) -> PathBuf {
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{tag}-{}", std::process::id()));
    let start = root().join("tests/controlplane/start");
    let out = Command::new("bash")
        .arg(&start)
        .arg(&dir)
        .output()
        .expect("running tests/controlplane/start");
    assert!(
        out.status.success(),
        "the test control plane did not start ({}):\n{}\n{}",
        start.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Stop the plane when this test binary exits, however it exits.
    super::on_exit_stop(&root().join("tests/controlplane/stop"), &dir, true);
    dir.join("kubeconfig")
}

/// A client for the test plane, with the project's CRDs installed (when there are any).
pub async fn client() -> Client {
    let client = client_for(kubeconfig()).await;
    install_crds(&client).await;
    client
}

/// A client for the plane of `kubeconfig`.
pub async fn client_for(kubeconfig: &Path) -> Client {
    let kc = Kubeconfig::read_from(kubeconfig).expect("reading the test kubeconfig");
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("test kubeconfig");
    Client::try_from(config).expect("kube client")
}

/// A plane of a test's own (to stop it mid-test), stopped when dropped.
pub struct OwnPlane {
    /// Its directory (kubeconfig at `dir/kubeconfig`).
    pub dir: tempfile::TempDir,
}

/// A component [`OwnPlane::kill`] stopped: its name and command line.
pub struct Killed {
    component: String,
    args: Vec<String>,
}

impl OwnPlane {
    /// Start a plane in a fresh directory.
    pub fn start() -> OwnPlane {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new("bash")
            .arg(root().join("tests/controlplane/start"))
            .arg(dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "own plane did not start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // Dropping it stops it; should this process end without unwinding (an abort, a kill),
        // the watchdog does.
        super::on_exit_stop(&root().join("tests/controlplane/stop"), dir.path(), false);
        OwnPlane { dir }
    }

    /// Its kubeconfig.
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }

    /// Stop one component (`etcd`, `kube-apiserver`) for `down`, then start it again with the
    /// same command line (same ports, certificates and data), as a crash and restart would.
    pub fn restart(&self, component: &str, down: std::time::Duration) {
        let stopped = self.kill(component);
        std::thread::sleep(down);
        self.revive(stopped);
    }

    /// Kill one component (`etcd`, `kube-apiserver`); what [`OwnPlane::revive`] starts again.
    pub fn kill(&self, component: &str) -> Killed {
        let pidfile = self.dir.path().join(format!("pids/{component}.pid"));
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let _ = Command::new("kill")
            .arg("-KILL")
            .arg(pid.to_string())
            .status();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::path::Path::new(&format!("/proc/{pid}")).exists()
            && std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| !s.contains(") Z "))
        {
            assert!(
                std::time::Instant::now() < deadline,
                "{component} did not stop"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Killed {
            component: component.to_string(),
            args,
        }
    }

    /// Start a killed component again with its command line.
    pub fn revive(&self, killed: Killed) {
        let Killed { component, args } = killed;
        let log = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(self.dir.path().join(format!("logs/{component}.log")))
            .unwrap();
        let child = Command::new(&args[0])
            .args(&args[1..])
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let pidfile = self.dir.path().join(format!("pids/{component}.pid"));
        std::fs::write(&pidfile, format!("{}\n", child.id())).unwrap();
        // Not waited for here: ./stop ends it with the rest of the plane.
        std::mem::forget(child);
    }

    /// Stop it now.
    pub fn stop(&self) {
        let _ = Command::new("bash")
            .arg(root().join("tests/controlplane/stop"))
            .arg(self.dir.path())
            .output();
    }
}

impl Drop for OwnPlane {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Apply every CRD in `crds/` and wait until each is Established.
pub async fn install_crds(client: &Client) {
    let dir = root().join("crds");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for doc in text.split("\n---").filter(|d| d.contains("kind:")) {
            let crd: CustomResourceDefinition = agentcard_operator::yaml::from_str(doc)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let name = crd.metadata.name.clone().unwrap();
            api.patch(
                &name,
                &PatchParams::apply("agentcard-tests").force(),
                &Patch::Apply(&crd),
            )
            .await
            .unwrap_or_else(|e| panic!("installing CRD {name}: {e}"));
            wait_established(&api, &name).await;
        }
    }
}

/// Wait until CRD `name` is Established (or fail the test).
pub async fn wait_established(api: &Api<CustomResourceDefinition>, name: &str) {
    wait_for(Duration::from_secs(30), || async {
        api.get(name)
            .await
            .ok()
            .and_then(|c| c.status)
            .and_then(|s| s.conditions)
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            })
    })
    .await
    .unwrap_or_else(|()| panic!("CRD {name} not Established"));
}

/// Poll `check` with growing intervals until it holds or `timeout` passes.
pub async fn wait_for<F, Fut>(timeout: Duration, mut check: F) -> Result<(), ()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    let mut delay = Duration::from_millis(50);
    loop {
        if check().await {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(());
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(1));
    }
}

/// A namespace of its own for one test, deleted when dropped.
pub struct TestNamespace {
    /// The namespace name.
    pub name: String,
}

impl TestNamespace {
    /// Create `t-<prefix>-<random>`.
    pub async fn new(client: &Client, prefix: &str) -> Self {
        let name = format!("t-{prefix}-{:08x}", rand_u32());
        let api: Api<Namespace> = Api::all(client.clone());
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {"agentcard.dev/test": "true"}}
        }))
        .unwrap();
        api.create(&PostParams::default(), &ns)
            .await
            .expect("creating test namespace");
        TestNamespace { name }
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        let name = self.name.clone();
        // Drop cannot await; delete from a thread with its own runtime and its own client (the
        // test's client lives on the test's runtime, which this thread blocks).
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                let Ok(kc) = Kubeconfig::read_from(kubeconfig()) else {
                    return;
                };
                let Ok(config) =
                    Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await
                else {
                    return;
                };
                let Ok(client) = Client::try_from(config) else {
                    return;
                };
                let api: Api<Namespace> = Api::all(client);
                let _ = api.delete(&name, &DeleteParams::background()).await;
            });
        })
        .join();
    }
}

/// A random number for unique test names.
pub fn rand_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    h.finish() as u32
}
