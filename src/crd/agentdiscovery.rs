//! `AgentDiscovery` (agentcard.dev/v1alpha1, cluster-scoped): which running agents get a card
//! written for them. Only cluster admins write it (the chart gives tenants no role on it): it
//! decides which namespaces' workloads are searched and under which host their cards appear.
//!
//! For each agent found (Services marked as A2A, kagent `Agent`s, workloads kagenti labels as
//! A2A agents), the lease holder writes an `AgentCard` in the agent's namespace that imports
//! the card the agent serves (`spec.source`) and routes the agent's traffic on the card's host
//! (`spec.backend`, so the card's interface is the public URL, not the agent's in-cluster one):
//! every rule of import and publishing holds for it as for a card a person wrote. The status
//! counts what was found, written and left alone.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Which agents already running in the cluster get an AgentCard written for them.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "agentcard.dev",
    version = "v1alpha1",
    kind = "AgentDiscovery",
    doc = "Finds the A2A agents already running in the cluster and writes an AgentCard for each in its namespace, importing the card the agent serves and routing the agent's A2A traffic on the card's host: Services with a port whose appProtocol is a2a (or kgateway.dev/a2a) or labelled agentcard.dev/discover=true, kagent Agents (through their Service), and Deployments or StatefulSets labelled as kagenti labels A2A agents (through the Service that selects their Pods), in the namespaces it selects. A Service, workload, Agent or whole namespace labelled agentcard.dev/discover=false is left out. A card someone edits or labels agentcard.dev/claimed=true is theirs from then on. Only cluster admins write it; the status counts what was found and published.",
    shortname = "adisc",
    category = "agentcard-operator",
    status = "AgentDiscoveryStatus",
    printcolumn = r#"{"name":"Host template","type":"string","jsonPath":".spec.hostTemplate"}"#,
    printcolumn = r#"{"name":"Found","type":"integer","jsonPath":".status.found.total"}"#,
    printcolumn = r#"{"name":"Cards","type":"integer","jsonPath":".status.cards"}"#,
    printcolumn = r#"{"name":"Published","type":"integer","jsonPath":".status.published"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct AgentDiscoverySpec {
    /// Namespaces searched (empty: every namespace). A namespace labelled
    /// `agentcard.dev/discover: "false"` is never searched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// What is searched for (default: `Services`): any of `Services`, `KagentAgents`,
    /// `KagentiWorkloads`.
    #[serde(default = "default_sources")]
    #[schemars(length(min = 1, max = 3))]
    pub sources: Vec<DiscoverySource>,
    /// The public host of a discovered agent's card, from `{name}` (the card's name: the
    /// Service's, or the kagent Agent's) and
    /// `{namespace}`, e.g. `{name}.{namespace}.agents.example.com`. The host allowance and
    /// claims apply as to any card: a host someone else holds leaves the discovered card
    /// `HostConflict`, never served.
    #[x_kube(validation = Rule::new("self.contains('{name}')").message("must contain {name}, so each agent gets a host of its own"))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9{}.-]+$')").message("may hold lower-case letters, digits, '-', '.', {name} and {namespace} only"))]
    #[schemars(length(max = 253))]
    pub host_template: String,
    /// When directories list a discovered card: `Immediate`, or `AfterClaim` (only once
    /// someone owns it: until then the card is labelled `agentcard.dev/listed: "false"`).
    #[serde(default)]
    pub listing: Listing,
}

fn default_sources() -> Vec<DiscoverySource> {
    vec![DiscoverySource::Services]
}

/// A kind of workload discovery searches.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
pub enum DiscoverySource {
    /// Services with a port whose `appProtocol` is `a2a` or `kgateway.dev/a2a`, or labelled
    /// `agentcard.dev/discover: "true"`.
    Services,
    /// kagent's `agents.kagent.dev` (v1alpha2), read only while that CRD is installed: the card
    /// is imported from the Service of the Agent's name, and what the Agent declares
    /// (description, version, provider, the skills of `spec.declarative.a2aConfig`) fills what
    /// the served card leaves empty (`spec.defaults`). The card is owned by the Agent.
    KagentAgents,
    /// Deployments and StatefulSets labelled `kagenti.io/type: agent` and
    /// `protocol.kagenti.io/a2a`, through the Service of their namespace that selects their
    /// Pods.
    KagentiWorkloads,
}

impl DiscoverySource {
    /// The source's name as written in the spec.
    pub fn as_str(self) -> &'static str {
        match self {
            DiscoverySource::Services => "Services",
            DiscoverySource::KagentAgents => "KagentAgents",
            DiscoverySource::KagentiWorkloads => "KagentiWorkloads",
        }
    }
}

/// When a discovered card is listed by directories.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum Listing {
    /// As soon as it is published.
    #[default]
    Immediate,
    /// Once someone has claimed it (edited it or labelled it `agentcard.dev/claimed: "true"`).
    AfterClaim,
}

/// What the discovery last found and did.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentDiscoveryStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`: the discovery ran, with what kept it from writing if anything did.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// How many agents each source found.
    #[serde(default)]
    pub found: Found,
    /// AgentCards this discovery writes (claimed ones not counted).
    #[serde(default)]
    pub cards: i64,
    /// Of those, how many are Ready (published).
    #[serde(default)]
    pub published: i64,
    /// Discovered cards claimed by someone, which the discovery no longer writes.
    #[serde(default)]
    pub claimed: i64,
    /// Agents found but left alone, and why (at most 20 listed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<Skipped>,
}

/// Agents found, per source. An agent two sources find (a kagent Agent's Service marked as
/// A2A) is counted once, under the source that tells most about it: kagent, then kagenti,
/// then Services.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Found {
    /// Every agent found.
    #[serde(default)]
    pub total: i64,
    /// Services found by their port's `appProtocol` or their label.
    #[serde(default)]
    pub services: i64,
    /// kagent Agents found.
    #[serde(default)]
    pub kagent_agents: i64,
    /// kagenti workloads found (counted by the Service that fronts them).
    #[serde(default)]
    pub kagenti_workloads: i64,
}

/// An agent found but given no card.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Skipped {
    /// Its namespace.
    pub namespace: String,
    /// The card's name it would have had (the Service's, or the kagent Agent's).
    pub name: String,
    /// Why: `NameTaken` (an AgentCard of that name that discovery did not write),
    /// `InvalidHost` (the template gives no valid host), `NoService` (a kagent Agent or kagenti
    /// workload with no Service, or none with a port, to import its card from).
    pub reason: String,
    /// In words.
    pub message: String,
}
