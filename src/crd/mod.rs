//! The custom resources of the `agentcard.dev` API group, generated into `crds/` by
//! `agentcard-operator crds`.

pub mod agentcard;
pub mod agentdirectory;

pub use agentcard::{
    AgentCard, AgentCardSpec, AgentCardStatus, Compatibility, Lifecycle, LifecycleState, Overrides,
    ServedLifecycle, ServedRoute, Source, SourceService, SourceStatus, Successor,
};
pub use agentdirectory::{AccessMode, AgentDirectory, AgentDirectorySpec, AgentDirectoryStatus};

use kube::CustomResourceExt;

/// Every CRD of the operator, as the YAML `crds/` holds (documents separated by `---`).
pub fn crds_yaml() -> Result<String, serde_yaml::Error> {
    let docs = [AgentCard::crd(), AgentDirectory::crd()];
    let mut out = String::new();
    for (i, crd) in docs.iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        out.push_str(&serde_yaml::to_string(crd)?);
    }
    Ok(out)
}
