//! The Go tools the tests use (helm, Traefik, actionlint, Prometheus and promtool, Vault, the Gateway API CRDs), built once from Go modules
//! by `tests/tools/build` and cached outside the repository. A tool that cannot be built fails
//! the test with the build's output: tests never skip.
//!
//! A test that runs inside a private network namespace cannot download anything there: its
//! outer half prepares the tools first ([`Tool::prepare`]) and hands their paths to the inner
//! half in the environment, where [`Tool::path`] finds them without calling the build.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use super::root;

/// A tool `tests/tools/build` makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tool {
    /// helm, built from `helm.sh/helm/v3`.
    Helm,
    /// Traefik, built from `github.com/traefik/traefik/v3`.
    Traefik,
    /// The directory of the Gateway API standard CRDs (the module Traefik uses, downloaded).
    GatewayApi,
    /// actionlint, built from `github.com/rhysd/actionlint`: lints `.github/workflows`.
    Actionlint,
    /// The Prometheus server, built from `github.com/prometheus/prometheus`.
    Prometheus,
    /// promtool, from the same module: checks and unit-tests rule files.
    Promtool,
    /// Vault (`server -dev`: its transit engine and Kubernetes auth), built from
    /// `github.com/hashicorp/vault`.
    Vault,
}

impl Tool {
    /// Its name for `tests/tools/build`.
    fn name(self) -> &'static str {
        match self {
            Tool::Helm => "helm",
            Tool::Traefik => "traefik",
            Tool::GatewayApi => "gateway-api",
            Tool::Actionlint => "actionlint",
            Tool::Prometheus => "prometheus",
            Tool::Promtool => "promtool",
            Tool::Vault => "vault",
        }
    }

    /// The variable an outer test sets to the prepared path for its inner half.
    fn env(self) -> &'static str {
        match self {
            Tool::Helm => "AGENTCARD_TOOL_HELM",
            Tool::Traefik => "AGENTCARD_TOOL_TRAEFIK",
            Tool::GatewayApi => "AGENTCARD_TOOL_GATEWAY_API",
            Tool::Actionlint => "AGENTCARD_TOOL_ACTIONLINT",
            Tool::Prometheus => "AGENTCARD_TOOL_PROMETHEUS",
            Tool::Promtool => "AGENTCARD_TOOL_PROMTOOL",
            Tool::Vault => "AGENTCARD_TOOL_VAULT",
        }
    }

    fn cell(self) -> &'static OnceLock<PathBuf> {
        static HELM: OnceLock<PathBuf> = OnceLock::new();
        static TRAEFIK: OnceLock<PathBuf> = OnceLock::new();
        static GATEWAY_API: OnceLock<PathBuf> = OnceLock::new();
        static ACTIONLINT: OnceLock<PathBuf> = OnceLock::new();
        static PROMETHEUS: OnceLock<PathBuf> = OnceLock::new();
        static PROMTOOL: OnceLock<PathBuf> = OnceLock::new();
        static VAULT: OnceLock<PathBuf> = OnceLock::new();
        match self {
            Tool::Helm => &HELM,
            Tool::Traefik => &TRAEFIK,
            Tool::GatewayApi => &GATEWAY_API,
            Tool::Actionlint => &ACTIONLINT,
            Tool::Prometheus => &PROMETHEUS,
            Tool::Promtool => &PROMTOOL,
            Tool::Vault => &VAULT,
        }
    }

    /// Its path: the one the outer test handed over, else built (once per test binary).
    pub fn path(self) -> &'static PathBuf {
        self.cell()
            .get_or_init(|| match std::env::var_os(self.env()) {
                Some(p) if !p.is_empty() => PathBuf::from(p),
                _ => build(self.name()),
            })
    }

    /// Build it now (network available) and say where it is, for a command about to enter a
    /// network namespace: the `(variable, path)` to set in its environment.
    pub fn prepare(self) -> (&'static str, &'static PathBuf) {
        (self.env(), self.path())
    }
}

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
    Tool::Helm.path()
}

/// The Traefik binary.
pub fn traefik() -> &'static PathBuf {
    Tool::Traefik.path()
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
    Tool::GatewayApi.path()
}
