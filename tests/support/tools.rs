//! The Go tools the tests use (helm, Traefik), built once from Go modules by `tests/tools/build`
//! and cached outside the repository. A tool that cannot be built fails the test with the
//! build's output: tests never skip.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use super::root;

fn build(tool: &str) -> PathBuf {
    let out = Command::new("bash")
        .arg(root().join("tests/tools/build"))
        .arg(tool)
        .output()
        .expect("running tests/tools/build");
    assert!(
        out.status.success(),
        "tests/tools/build {tool} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with(&format!("{tool} ")))
        .unwrap_or_else(|| panic!("tests/tools/build printed no path for {tool}: {stdout}"));
    PathBuf::from(line[tool.len() + 1..].trim())
}

/// The helm binary.
pub fn helm() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| build("helm"))
}

/// The Traefik binary.
pub fn traefik() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| build("traefik"))
}

/// A helm command for the plane of `kubeconfig`, run from the repository root, with its own
/// cache and config directories.
pub fn helm_command(kubeconfig: &std::path::Path) -> Command {
    let mut cmd = Command::new(helm());
    let tmp = std::env::temp_dir();
    cmd.current_dir(root())
        .env("KUBECONFIG", kubeconfig)
        .env("HELM_CACHE_HOME", tmp.join("agentcard-helm-cache"))
        .env("HELM_CONFIG_HOME", tmp.join("agentcard-helm-config"))
        .env("HELM_DATA_HOME", tmp.join("agentcard-helm-data"));
    cmd
}

/// The directory of the Gateway API standard CRDs (from the module Traefik uses).
pub fn gateway_api_crds() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| build("gateway-api"))
}
