//! `agentcard-operator run` as a test runs it: a real process against the test plane, scoped
//! to the test's own namespaces so parallel tests never touch each other's cards.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use super::plane::kubeconfig;

/// A running operator process, killed on drop.
pub struct Operator {
    /// Public port.
    pub server: ServerPorts,
    child: Child,
    /// Its log file.
    pub log: PathBuf,
    _dir: tempfile::TempDir,
}

/// The ports of a running process.
pub struct ServerPorts {
    pub addr: std::net::SocketAddr,
    pub admin: std::net::SocketAddr,
}

impl Operator {
    /// Start `run` for operator namespace `opns`, reconciling cards of `watch` only.
    pub fn start(opns: &str, watch: &str, extra: &[&str]) -> Operator {
        Self::start_on(kubeconfig(), opns, Some(watch), extra)
    }

    /// Start `run` on the plane of `kubeconfig` (every namespace when `watch` is `None`) and
    /// wait until it is ready.
    pub fn start_on(
        kubeconfig: &Path,
        opns: &str,
        watch: Option<&str>,
        extra: &[&str],
    ) -> Operator {
        let op = Self::spawn_on(kubeconfig, opns, watch, extra);
        op.wait_ready();
        op
    }

    /// Start `run` and return once it listens (ready or not).
    pub fn spawn_on(
        kubeconfig: &Path,
        opns: &str,
        watch: Option<&str>,
        extra: &[&str],
    ) -> Operator {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("operator.log");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentcard-operator"));
        cmd.arg("run").args(["--namespace", opns]);
        if let Some(watch) = watch {
            cmd.args(["--watch-namespace", watch]);
        }
        if !extra.contains(&"--listen") {
            cmd.args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"]);
        }
        let mut child = cmd
            .args(extra)
            .env("NO_COLOR", "1")
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "info,agentcard_operator=debug")
            .env_remove("POD_NAME")
            .env_remove("POD_NAMESPACE")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("spawn operator");
        let (addr, admin) = super::http::wait_for_addresses(&log, &mut child);
        Operator {
            server: ServerPorts { addr, admin },
            child,
            log,
            _dir: dir,
        }
    }

    /// Wait until `/readyz` answers 200 (or fail with the log).
    pub fn wait_ready(&self) {
        let admin = self.server.admin;
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let ready = || {
            std::net::TcpStream::connect(admin).is_ok()
                && super::http::request(admin, "GET", "/readyz", &[("Host", "admin")]).status == 200
        };
        while !ready() {
            assert!(
                std::time::Instant::now() < deadline,
                "operator not ready:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Wait up to `timeout` for the process to exit on its own.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        super::wait_exit(&mut self.child, timeout)
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its `/metrics` scrape.
    pub fn metrics(&self) -> String {
        let r = super::http::request(self.server.admin, "GET", "/metrics", &[("Host", "admin")]);
        String::from_utf8_lossy(&r.body).into_owned()
    }

    /// Its resident memory now, in KiB (`VmRSS`).
    pub fn rss_kib(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }

    /// Its log so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// GET on its public port.
    pub fn get(&self, host: &str, path: &str) -> super::http::Resp {
        super::http::request(self.server.addr, "GET", path, &[("Host", host)])
    }

    /// Send SIGTERM, as Kubernetes does to a stopping pod.
    pub fn terminate(&self) {
        super::terminate(&self.child);
    }

    /// Kill it hard (no lease release), as a crash would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Wait until `pred` holds for card `name` (or fail with its last state and the end of `op`'s
/// log).
pub async fn wait_card(
    api: &kube::Api<agentcard_operator::crd::AgentCard>,
    name: &str,
    op: &Operator,
    what: &str,
    pred: impl Fn(&agentcard_operator::crd::AgentCard) -> bool,
) -> agentcard_operator::crd::AgentCard {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut last = None;
    loop {
        if let Ok(c) = api.get(name).await {
            if pred(&c) {
                return c;
            }
            last = Some(c);
        }
        if tokio::time::Instant::now() >= deadline {
            let log = op.logs();
            let lines: Vec<&str> = log.lines().collect();
            panic!(
                "{name}: {what} did not happen; last status {:?}\noperator log (end):\n{}",
                last.and_then(|c| c.status),
                lines[lines.len().saturating_sub(80)..].join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The identity holding the operator's lease in `namespace` now, if any.
pub async fn current_lease_holder(client: &kube::Client, namespace: &str) -> Option<String> {
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(client.clone(), namespace);
    leases
        .get_opt("agentcard-operator-leader")
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
}

/// The identity holding the operator's lease in `namespace`, once one does (or fail after 20 s).
pub async fn lease_holder(client: &kube::Client, namespace: &str) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let holder = current_lease_holder(client, namespace)
            .await
            .unwrap_or_default();
        if !holder.is_empty() {
            return holder;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no lease holder in {namespace}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
