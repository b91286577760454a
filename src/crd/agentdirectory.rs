//! `AgentDirectory` (agentcard.dev/v1alpha1, cluster-scoped): a registry of the cluster's
//! published cards, served on a host of its own.
//!
//! Both resources are in the category `agentcard-operator` (`kubectl get agentcard-operator -A`
//! lists them together). Not `agentcard`: kubectl expands a category before a singular name, so
//! `kubectl get agentcard NAME` would fail once the category held two resources.
//!
//! The spec says which cards are listed (namespace and card label selectors) and where and to
//! whom the registry is served; the lease holder writes the status (the route it decided, the
//! number of cards listed) and the directory's Ingress, and every replica serves the registry
//! from its in-memory index.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::agentcard::IngressSettings;

/// A registry of the cluster's Agent Cards, queried by skill, tag, provider and capability, and
/// speaking the AI Catalog / ARD registry protocol.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "agentcard.dev",
    version = "v1alpha1",
    kind = "AgentDirectory",
    doc = "A registry of the cluster's published Agent Cards, served on a host of its own: the cards of the namespaces and labels it selects, and other registries' (spec.upstreams). Clients query it by skill, tag, provider and capability through the ARD registry API, the native /v1 API, MCP tools, a change feed and a web page. The status says where it is served, how many cards it lists, and how each upstream syncs.",
    shortname = "adir",
    category = "agentcard-operator",
    status = "AgentDirectoryStatus",
    printcolumn = r#"{"name":"Host","type":"string","jsonPath":".spec.publish.host"}"#,
    printcolumn = r#"{"name":"Access","type":"string","jsonPath":".spec.access.mode"}"#,
    printcolumn = r#"{"name":"Cards","type":"integer","jsonPath":".status.cards"}"#,
    printcolumn = r#"{"name":"Pending","type":"integer","jsonPath":".status.approvals.pending","priority":1}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct AgentDirectorySpec {
    /// Namespaces whose cards are listed (empty: every namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// Cards listed, by their labels (empty: every card). A card labelled
    /// `agentcard.dev/listed: "false"` is in no directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub card_selector: Option<LabelSelector>,
    /// Where the registry is served. The directory holds the whole host.
    pub publish: DirectoryPublish,
    /// Who may read it.
    #[serde(default)]
    pub access: Access,
    /// Name of the registry shown to clients (default: the object's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// What the registry holds, for clients.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Other registries whose agents this directory lists too (federation), each with where
    /// its entries came from. Fetched only from these URLs; an identifier listed here and by
    /// an upstream is the local one, then the first upstream's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(validation = Rule::new("self.all(u, self.exists_one(v, v.name == u.name))").message("upstream names must be unique"))]
    #[schemars(length(max = 16))]
    pub upstreams: Vec<Upstream>,
    /// Whether a selected card is listed at once (`Open`, default) or only while an
    /// `AgentCardApproval` of this directory approves what it serves (`ApprovalRequired`).
    #[serde(default)]
    pub admission: Admission,
    /// Under `ApprovalRequired`, which edits void an approval: `BreakingChange` (default: what
    /// the breaking-change classifier finds breaking) or `AnyChange` (any new content).
    #[serde(default)]
    pub reapprove_on: ReapproveOn,
}

/// Whether a directory lists what it selects at once.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum Admission {
    /// Every selected card is listed.
    #[default]
    Open,
    /// A selected card is listed only while an approval of this directory matches it.
    ApprovalRequired,
}

/// Which edits void an approval.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum ReapproveOn {
    /// An edit that breaks callers of the approved card (removed skills, interfaces, ...).
    #[default]
    BreakingChange,
    /// Any edit of what is served.
    AnyChange,
}

/// Another registry a directory lists the agents of.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Upstream {
    /// Name of the upstream (shown as the entries' origin and in status).
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')").message("must be a DNS label"))]
    #[schemars(length(max = 63))]
    pub name: String,
    /// Base URL of the registry: `http(s)://host[:port][/prefix]` (for `AgentDirectory`, the
    /// directory's host and path prefix; for `ARD`, where `GET /agents` answers).
    #[x_kube(validation = Rule::new("self.matches('^https?://[^/?#@]+(/[^?#]*)?$')").message("must be an http(s) URL without query, fragment or user info"))]
    #[schemars(length(max = 2048))]
    pub url: String,
    /// `AgentDirectory` (another directory of this operator, followed through its change
    /// feed) or `ARD` (any ARD registry, paged on each refresh).
    #[serde(default)]
    pub kind: UpstreamKind,
    /// Seconds between two refreshes (default 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 5 && self <= 86400").message("must be between 5 and 86400"))]
    pub refresh_seconds: Option<i64>,
    /// Whose signatures the cards must carry.
    #[serde(default)]
    pub trust: Trust,
    /// Only the entries matching these native filters (`skill`, `tag`, `provider`,
    /// `capability`, `inputMode`, `outputMode`, `binding`, `namespace`: values ORed within a
    /// filter, filters ANDed), as `GET /v1/agents` would select them.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub include: std::collections::BTreeMap<String, Vec<String>>,
    /// Most entries taken from this upstream (default 10,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1 && self <= 100000").message("must be between 1 and 100000"))]
    pub max_entries: Option<i64>,
    /// Seconds the last good entries stay listed while the upstream cannot be reached
    /// (default 86400).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 0 && self <= 2592000").message("must be between 0 and 2592000"))]
    pub keep_seconds: Option<i64>,
    /// Accept `http://` for `url` and `trust.jwksUrl` (default: `https://` only: a card read
    /// over plain HTTP can be changed on the way).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_http: bool,
    /// Address ranges (CIDR) the upstream's names may resolve to besides public addresses:
    /// by default loopback, link-local and cloud metadata, private ranges (the cluster's Pods,
    /// Services, nodes and API server) and other special-purpose ranges are never connected
    /// to, whatever an upstream's names or its cards' URLs resolve to. Name an in-cluster
    /// registry's range here (e.g. `10.96.0.0/12`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub allow_addresses: Vec<String>,
}

/// The protocol an upstream speaks.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum UpstreamKind {
    /// A directory of this operator: its change feed (`/v1/changes`).
    #[default]
    AgentDirectory,
    /// An ARD registry: `GET /agents`, each entry's card inline or at its URL.
    #[serde(rename = "ARD")]
    Ard,
}

/// Whose signatures an upstream's cards must carry: the keys at `jwksUrl` or in the `jwks`
/// Secret (at most one), or none (absent: cards are listed `verified: false`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!(has(self.jwksUrl) && has(self.jwks))").message("trust: at most one of jwksUrl and jwks"))]
pub struct Trust {
    /// A JWKS URL (fetched like the upstream): a card with no signature that verifies with
    /// its keys is not listed. Absent: cards are listed unverified (`verified: false`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.matches('^https?://[^/?#@]+(/[^?#]*)?$')").message("must be an http(s) URL"))]
    #[schemars(length(max = 2048))]
    pub jwks_url: Option<String>,
    /// A JWKS held in a Secret of the operator's namespace (the chart must name it in
    /// `federation.trustSecrets`, so the operator may read it). Used like `jwksUrl`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jwks: Option<SecretKeyRef>,
}

/// A key of a Secret in the operator's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// The Secret's name.
    pub name: String,
    /// The key holding the JWKS (default `jwks.json`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// Where a directory is served.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct DirectoryPublish {
    /// Public DNS name of the registry, e.g. `agents.example.com`.
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+$')").message("must be a lower-case DNS name with at least two labels, e.g. agents.example.com"))]
    #[x_kube(validation = Rule::new("size(self) <= 253").message("must be at most 253 characters"))]
    pub host: String,
    /// Path prefix of the registry API (e.g. `/registry`); empty serves at the root.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[x_kube(validation = Rule::new("self == '' || self.matches('^(/[A-Za-z0-9._~-]+)+$')").message("must be empty or like /segment[/segment...] without a trailing slash"))]
    #[x_kube(validation = Rule::new("!self.matches('(^|/)[.][.]?(/|$)')").message("must not contain . or .. segments"))]
    pub path_prefix: String,
    /// Ingress settings, under the same operator policy as cards.
    #[serde(default)]
    pub ingress: IngressSettings,
}

/// Who may read a directory.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Access {
    /// `Public`: anyone; `Kubernetes`: callers with a bearer token the API server accepts, who
    /// see the cards of the namespaces where they may `get` AgentCards.
    #[serde(default)]
    pub mode: AccessMode,
}

/// How callers are admitted.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum AccessMode {
    /// Anyone may read every listed card.
    #[default]
    Public,
    /// Kubernetes identities, each seeing what its RBAC allows.
    Kubernetes,
}

/// What the operator last did with the directory.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentDirectoryStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`, with its reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Number of cards listed.
    #[serde(default)]
    pub cards: i64,
    /// Under `admission: ApprovalRequired`, the selected cards by verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvals: Option<ApprovalCounts>,
    /// Public URL of the registry (its ARD manifest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Where the registry is served, as the operator decided it; every replica routes by this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served: Option<DirectoryRoute>,
    /// Each upstream as the lease holder last synced it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upstreams: Vec<UpstreamStatus>,
}

/// A directory's selected cards by approval verdict.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalCounts {
    /// Waiting for an approval.
    pub pending: i64,
    /// Approved (listed).
    pub approved: i64,
    /// Rejected.
    pub rejected: i64,
    /// Approved once, voided by an edit.
    pub voided: i64,
}

/// How an upstream's sync went.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpstreamStatus {
    /// The upstream's name.
    pub name: String,
    /// Entries listed from it.
    pub entries: i64,
    /// Its entries not listed because a local card or an earlier upstream has the same
    /// identifier.
    #[serde(default)]
    pub shadowed: i64,
    /// Its entries refused (bad signature, not a card, too large, a loop, another origin's
    /// card URL, past maxEntries).
    #[serde(default)]
    pub refused: i64,
    /// When it last answered in full (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sync: Option<String>,
    /// Whether its last refresh reached it.
    pub reachable: bool,
    /// What went wrong last, or the first refused entry and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The route a directory is served on.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DirectoryRoute {
    /// Host (lower case); the directory holds all of it.
    pub host: String,
    /// Path prefix of the registry API (`""` or `/a/b`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub path_prefix: String,
    /// When the directory took the host (RFC 3339).
    pub since: String,
}
