//! A control plane with a real node (`tests/node/`: kubelet, kube-proxy, kube-scheduler,
//! containerd, runc and CNI), all in private network and mount namespaces. The outer test
//! starts it, then re-runs this test binary inside those namespaces for an inner, ignored test
//! that does the work (Pod and Service addresses, the plane and `ctr` are only reachable
//! there). Nothing can be downloaded in there: the outer test builds and installs first.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::root;
use super::tools::Tool;

/// A node and its plane, stopped when dropped (and by a watchdog if this process dies).
pub struct Node {
    /// Its directory (`tests/node/start DIR`).
    pub dir: PathBuf,
}

impl Node {
    /// Build what the node needs and start it in a directory of this test binary's own.
    pub fn start() -> Node {
        let dir =
            PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("node-{}", std::process::id()));
        let out = Command::new("bash")
            .arg(root().join("tests/node/start"))
            .arg(&dir)
            .output()
            .expect("running tests/node/start");
        assert!(
            out.status.success(),
            "the node did not start:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!("{}", String::from_utf8_lossy(&out.stderr));
        // However this process ends, the node goes with it.
        super::on_exit_stop(&root().join("tests/node/stop"), &dir, false);
        Node { dir }
    }

    /// Re-run this test binary's `inner` test inside the node's namespaces, with `tools` and
    /// the SDK oracles prepared outside first and `env` set; its output, after asserting it
    /// passed and printed `done`.
    pub fn run_inside(
        &self,
        inner: &str,
        done: &str,
        tools: &[Tool],
        env: &[(&str, &OsStr)],
    ) -> String {
        let mut exec = Command::new("bash");
        exec.arg(root().join("tests/node/exec"))
            .arg(&self.dir)
            .env("AGENTCARD_IN_NODE", "1")
            .env("AGENTCARD_NODE_DIR", &self.dir);
        for (k, v) in env {
            exec.env(k, v);
        }
        super::run_inner(exec, inner, done, tools)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(root().join("tests/node/stop"))
            .arg(&self.dir)
            .output();
    }
}

/// Inside: the node's directory (asserting this runs inside, started by the outer test).
pub fn inside_dir() -> PathBuf {
    assert_eq!(
        std::env::var("AGENTCARD_IN_NODE").as_deref(),
        Ok("1"),
        "run by the outer test"
    );
    PathBuf::from(std::env::var_os("AGENTCARD_NODE_DIR").expect("AGENTCARD_NODE_DIR"))
}

/// Inside: the node's plane's kubeconfig.
pub fn kubeconfig(dir: &Path) -> PathBuf {
    dir.join("plane/kubeconfig")
}

/// Inside: run `ctr -n k8s.io ARGS` against the node's containerd; its stdout, after
/// asserting it succeeded.
pub fn ctr(args: &[&str]) -> String {
    let out = Command::new("ctr")
        .args(["-n", "k8s.io"])
        .args(args)
        .output()
        .expect("running ctr");
    assert!(
        out.status.success(),
        "ctr {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
