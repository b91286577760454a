//! `AgentCard` (agentcard.dev/v1alpha1): one A2A Agent Card and where it is published.
//!
//! `spec.card` is the A2A v1.0 card field for field ([`crate::a2a::card`]), or `spec.source`
//! names the agent's own Service whose served card is imported (with `spec.overrides`);
//! `spec.publish` says where it is served; `spec.backend` optionally routes the agent's own traffic on the same
//! host. What the API server can check at admission is in CEL rules here; the rest (the card's
//! own rules, host allowance, conflicts) is checked by the controller and reported in `status`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{CardCondition, Word};
use crate::a2a::card::AgentCard as A2aCard;

// The parts most cards leave out (`source`, `overrides`, `backend`, `status.source`) are boxed:
// every stored card carries the struct inline (the watches hold 10,000 cards), and an absent
// box costs one word instead of the part's full size. The schema is the same.
/// An A2A Agent Card published by the operator at `https://<host>/.well-known/agent-card.json`.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "agentcard.dev",
    version = "v1alpha1",
    kind = "AgentCard",
    doc = "An A2A Agent Card to publish. The card is written in spec.card, or imported from the agent's own Service with spec.source; spec.publish says on which host and path it is served. The operator validates it, signs it with the platform's keys (a JWS over its RFC 8785 canonical form), keeps it in a ConfigMap and serves it at https://<host>/.well-known/agent-card.json behind an Ingress or HTTPRoute. The status says what is served, under which key, and why a change is not.",
    namespaced,
    shortname = "acard",
    category = "agentcard-operator",
    status = "AgentCardStatus",
    printcolumn = r#"{"name":"Host","type":"string","jsonPath":".spec.publish.host"}"#,
    printcolumn = r#"{"name":"Skills","type":"string","jsonPath":".status.skills"}"#,
    printcolumn = r#"{"name":"Signed","type":"string","jsonPath":".status.keyId"}"#,
    printcolumn = r#"{"name":"Source","type":"string","jsonPath":".spec.source.service.name"}"#,
    printcolumn = r#"{"name":"Fetched","type":"date","jsonPath":".status.source.fetchedAt","priority":1}"#,
    printcolumn = r#"{"name":"Backend","type":"string","jsonPath":".status.conditions[?(@.type==\"BackendReady\")].reason","priority":1}"#,
    printcolumn = r#"{"name":"Lifecycle","type":"string","jsonPath":".spec.lifecycle.state","priority":1}"#,
    printcolumn = r#"{"name":"Origin","type":"string","jsonPath":".status.origin"}"#,
    printcolumn = r#"{"name":"Approval","type":"string","jsonPath":".status.approval"}"#,
    printcolumn = r#"{"name":"Revision","type":"integer","jsonPath":".status.revision","priority":1}"#,
    printcolumn = r#"{"name":"Hash","type":"string","jsonPath":".status.contentHash","priority":1}"#,
    printcolumn = r#"{"name":"Extended","type":"string","jsonPath":".status.extendedCard.contentHash","priority":1}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[x_kube(validation = Rule::new("has(self.card) != has(self.source)").message("spec: exactly one of card and source is required"))]
#[x_kube(validation = Rule::new("!has(self.card) || (has(self.card.skills) && size(self.card.skills) > 0)").message("spec.card.skills: at least one skill is required"))]
#[x_kube(validation = Rule::new("!has(self.card) || (has(self.card.name) && self.card.name != '')").message("spec.card.name: required"))]
#[x_kube(validation = Rule::new("!has(self.card) || (has(self.card.supportedInterfaces) && size(self.card.supportedInterfaces) > 0) || has(self.backend)").message("spec.card.supportedInterfaces: at least one interface, or spec.backend, is required"))]
#[x_kube(validation = Rule::new("!has(self.overrides) || has(self.source)").message("spec.overrides: only with spec.source (edit spec.card instead)"))]
#[x_kube(validation = Rule::new("!has(self.defaults) || has(self.source)").message("spec.defaults: only with spec.source (edit spec.card instead)"))]
#[x_kube(validation = Rule::new("!has(self.source) || !has(self.source.extendedCard) || !has(self.extendedCard)").message("spec.extendedCard: not with spec.source.extendedCard (the extended card is imported)"))]
#[x_kube(validation = Rule::new("!has(self.backend) || !has(self.backend.path) || self.backend.path == '' || !has(self.publish.pathPrefix) || self.publish.pathPrefix == '' || self.backend.path == self.publish.pathPrefix || self.backend.path.startsWith(self.publish.pathPrefix + '/')").message("spec.backend.path: must lie inside the card's route subtree spec.publish.pathPrefix (e.g. <pathPrefix>/a2a)"))]
#[serde(rename_all = "camelCase")]
pub struct AgentCardSpec {
    /// The A2A v1.0 Agent Card (camelCase, as in the protocol). `signatures` is written by the
    /// operator, never here. Exactly one of `card` and `source`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub card: Option<A2aCard>,
    /// Import the card the agent already serves, from its Service in this namespace (v1.0 or
    /// v0.3, converted to v1.0), refreshed periodically. Exactly one of `card` and `source`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Box<Source>>,
    /// With `source`: fields set over the imported card before it is signed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overrides: Option<Box<Overrides>>,
    /// With `source`: what fills the fields the imported card leaves empty (applied before
    /// `overrides`). AgentDiscovery writes here what a platform resource declares about the
    /// agent (a kagent `Agent`'s description, version, provider and skills), so the card the
    /// agent serves keeps the last word on everything it does say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defaults: Option<Box<Defaults>>,
    /// Where and how the card is served.
    pub publish: Publish,
    /// The agent's own Service: its A2A traffic is routed on the same host, and the public
    /// interface URL is written into the card as its preferred interface.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<Box<Backend>>,
    /// Compare the published card with the card the agent behind `backend` serves itself, and
    /// say how they differ in the `Drifted` condition (default: `Report` for a card with
    /// `backend` and no `source`; an imported card is what its agent serves).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<Box<Drift>>,
    /// Where the agent is in its life: active (the default), deprecated (still served, with
    /// `Deprecation`/`Sunset` headers and a successor link) or retired (unpublished: its URL
    /// answers 410 Gone for a while, then 404).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<Box<Lifecycle>>,
    /// The authenticated extended card (A2A `GetExtendedAgentCard`): what callers who prove
    /// who they are get beyond the public card. Declared as additions to the public card, so
    /// the extended card is the public card and more; it is validated and signed with the same
    /// keys, kept in the ConfigMap `extended-agentcard-<name>` of this namespace for the agent
    /// to mount and serve, and the public card says `capabilities.extendedAgentCard: true`
    /// while it is published.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extended_card: Option<Box<ExtendedCard>>,
}

/// What authenticated callers get beyond the public card. Everything listed is added to the
/// public card; nothing of it can be removed or changed (only the description may be replaced
/// by a longer one).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExtendedCard {
    /// Replaces the card's description in the extended card.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Skills only authenticated callers see, after the public card's (ids must differ from
    /// the public card's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skills: Vec<crate::a2a::card::AgentSkill>,
    /// Interfaces only authenticated callers see, after the public card's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub supported_interfaces: Vec<crate::a2a::card::AgentInterface>,
    /// Security schemes added to the public card's (names must differ from the public
    /// card's); the added skills may require them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub security_schemes: BTreeMap<String, crate::a2a::card::SecurityScheme>,
    /// Extensions added to `capabilities.extensions`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<crate::a2a::card::AgentExtension>,
    /// Who may fetch the extended card from the operator. With it and a REST backend
    /// (`spec.backend.protocolBinding: HTTP+JSON`), the operator routes
    /// `<backend path>/extendedAgentCard` to its own card server and answers it to callers
    /// whose bearer token this accepts (401 to the others). Without it the agent serves the
    /// extended card itself, from the ConfigMap it mounts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<ExtendedAuth>,
}

/// Whose bearer tokens the operator accepts for an extended card: exactly one of an OIDC
/// issuer's JWTs (verified offline against the issuer's published keys) or Kubernetes
/// ServiceAccount tokens (reviewed by the API server).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.oidc) != has(self.serviceAccount)").message("exactly one of oidc and serviceAccount"))]
pub struct ExtendedAuth {
    /// JWTs of an OpenID Connect issuer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oidc: Option<OidcAuth>,
    /// Kubernetes ServiceAccount tokens (`kubectl create token <sa> --audience <audience>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account: Option<ServiceAccountAuth>,
}

/// An OpenID Connect issuer whose JWTs are accepted: signed by a key of the issuer's JWKS (found
/// through its discovery document), issued by it (`iss`), for one of `audiences` (`aud`), not
/// expired, and carrying every required claim.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct OidcAuth {
    /// The issuer URL (`https://…`, the tokens' `iss`). Its discovery document is
    /// `<issuer>/.well-known/openid-configuration`, fetched from public addresses only, unless
    /// the platform configured this issuer for the operator (`--oidc-issuer`, the chart's
    /// `operator.oidcIssuers`) with its own discovery URL and CA.
    #[x_kube(validation = Rule::new("self.startsWith('https://')").message("must be an https:// URL"))]
    pub issuer: String,
    /// Where the issuer's discovery document is, when not at
    /// `<issuer>/.well-known/openid-configuration` (fetched over https from public addresses;
    /// for an issuer the platform configured, the platform's URL is used instead).
    #[serde(
        default,
        rename = "discoveryURL",
        skip_serializing_if = "Option::is_none"
    )]
    #[x_kube(validation = Rule::new("self.startsWith('https://')").message("must be an https:// URL"))]
    pub discovery_url: Option<String>,
    /// Accepted audiences: a token's `aud` must name one of them.
    #[x_kube(validation = Rule::new("size(self) > 0").message("at least one audience is required"))]
    pub audiences: Vec<String>,
    /// Claims a token must carry with exactly these string values (e.g. a group or a tenant).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub required_claims: BTreeMap<String, String>,
}

/// Kubernetes ServiceAccount tokens the API server authenticates (a TokenReview) for one of
/// `audiences`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceAccountAuth {
    /// Accepted audiences: tokens must be made for one of them (the API server's default
    /// audience is never accepted, so a Pod's own token is not enough).
    #[x_kube(validation = Rule::new("size(self) > 0").message("at least one audience is required"))]
    pub audiences: Vec<String>,
    /// Only ServiceAccounts of these namespaces (empty: of any namespace).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
}

impl ExtendedCard {
    /// The additions as the A2A core lays them over the public card.
    pub fn overlay(&self) -> crate::a2a::extended::Overlay<'_> {
        crate::a2a::extended::Overlay {
            description: self.description.as_deref(),
            skills: &self.skills,
            supported_interfaces: &self.supported_interfaces,
            security_schemes: &self.security_schemes,
            extensions: &self.extensions,
        }
    }
}

/// The lifecycle of a published agent.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Lifecycle {
    /// `Active`, `Deprecated` or `Retired`.
    #[serde(default)]
    pub state: LifecycleState,
    /// Why, or what callers should do (shown by the directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub message: Option<String>,
    /// The agent that replaces this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub successor: Option<Successor>,
    /// When the agent stops answering (RFC 3339 date or date-time), sent as the `Sunset`
    /// header while deprecated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    #[x_kube(validation = Rule::new("self.matches('^[0-9]{4}-[0-9]{2}-[0-9]{2}([Tt][0-9]{2}:[0-9]{2}:[0-9]{2}([.][0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2}))?$')").message("must be an RFC 3339 date or date-time, e.g. 2027-06-30 or 2027-06-30T00:00:00Z"))]
    pub sunset: Option<String>,
}

/// A lifecycle state.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum LifecycleState {
    /// Served and listed as usual.
    #[default]
    Active,
    /// Served with deprecation headers; listed after active agents.
    Deprecated,
    /// Unpublished: 410 Gone with the successor for the retention period, then 404.
    Retired,
}

impl LifecycleState {
    /// The state's name as written in the spec.
    pub fn as_str(self) -> &'static str {
        match self {
            LifecycleState::Active => "Active",
            LifecycleState::Deprecated => "Deprecated",
            LifecycleState::Retired => "Retired",
        }
    }
}

/// The agent replacing a deprecated or retired one: an AgentCard (by name, in this namespace
/// unless another is given) or any agent by its directory identifier.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.name) != has(self.identifier)").message("exactly one of name and identifier"))]
#[x_kube(validation = Rule::new("!has(self.namespace) || has(self.name)").message("namespace: only with name"))]
pub struct Successor {
    /// The successor AgentCard's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub name: Option<String>,
    /// The successor AgentCard's namespace (default: this card's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub namespace: Option<String>,
    /// The successor's directory identifier (`urn:air:<host>:<namespace>:<name>`; `urn:ai:`
    /// is accepted as an alias).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    #[x_kube(validation = Rule::new("self.startsWith('urn:air:') || self.startsWith('urn:ai:')").message("must be a urn:air: identifier"))]
    pub identifier: Option<String>,
}

/// What happens to an edit that would break the card's callers (see `Compatible`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum Compatibility {
    /// Publish it; the `Compatible` condition and a Warning Event list what broke.
    #[default]
    Warn,
    /// Refuse it: the last good card stays served.
    Block,
    /// Publish it only when `card.version` bumps its semver major.
    RequireMajorVersion,
}

/// Where the card is served.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Publish {
    /// Public DNS name the card is served on, e.g. `weather.agents.example.com`.
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+$')").message("must be a lower-case DNS name with at least two labels, e.g. agent.example.com"))]
    #[x_kube(validation = Rule::new("size(self) <= 253").message("must be at most 253 characters"))]
    pub host: String,
    /// Path prefix before `/.well-known/agent-card.json`, for several agents on one host
    /// (e.g. `/weather`). Empty serves at the root.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[x_kube(validation = Rule::new("self == '' || self.matches('^(/[A-Za-z0-9._~-]+)+$')").message("must be empty or like /segment[/segment...] without a trailing slash"))]
    #[x_kube(validation = Rule::new("!self.matches('(^|/)[.][.]?(/|$)')").message("must not contain . or .. segments"))]
    pub path_prefix: String,
    /// Ingress settings for the public route.
    #[serde(default)]
    pub ingress: IngressSettings,
    /// With HTTPRoute routing: the Gateway listener to attach to, when the platform allows
    /// cards to pick one (the Gateways themselves are the platform's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section_name: Option<String>,
    /// `Cache-Control: max-age` in seconds (default 300).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 0 && self <= 86400").message("must be between 0 and 86400"))]
    pub cache_max_age_seconds: Option<i64>,
    /// Also serve the card at the legacy `/.well-known/agent.json` (A2A v0.1–v0.2 clients).
    #[serde(default)]
    pub legacy_path: bool,
    /// Also write the v0.3 card fields (`url`, `preferredTransport`, ...) for v0.3 clients. Needs
    /// an interface with a 0.x `protocolVersion`; signatures still cover the v1.0 form.
    #[serde(default)]
    pub v03_compat: bool,
    /// What to do with an edit that breaks callers of the last published card (removed
    /// skills, interfaces or media types, moved URLs, tightened security, capabilities off):
    /// `Warn` (default), `Block`, or `RequireMajorVersion`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compatibility: Option<Compatibility>,
    /// How many published revisions are kept as ControllerRevisions (default 10; the
    /// revision an approval names is kept beyond it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1 && self <= 100").message("must be between 1 and 100"))]
    pub revision_history_limit: Option<i64>,
}

/// Ingress settings of a published card.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IngressSettings {
    /// `ingressClassName` of the Ingress (the cluster default when empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class_name: Option<String>,
    /// Name of the TLS Secret for the host (in the operator's namespace for the card route, in
    /// the card's namespace for the backend route).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_secret_name: Option<String>,
    /// Annotations copied onto the Ingress (e.g. for cert-manager or the ingress controller).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// Where the agent serves its own card.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Source {
    /// The agent's Service, in the card's own namespace (reached through its EndpointSlices;
    /// ExternalName Services are refused).
    pub service: SourceService,
    /// Path of the card on the agent (default `/.well-known/agent-card.json`, then the legacy
    /// `/.well-known/agent.json`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.startsWith('/') && size(self) <= 1024").message("must be an absolute path like /.well-known/agent-card.json"))]
    pub path: Option<String>,
    /// How often the card is fetched again, in seconds (default 300).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 10 && self <= 86400").message("must be between 10 and 86400"))]
    pub refresh_seconds: Option<i64>,
    /// Also import the extended card the agent serves to authenticated callers (REST
    /// `GetExtendedAgentCard`), calling it with a token of a ServiceAccount of this namespace.
    /// It must be the agent's public card and more; it is published as this card's extended
    /// card (the ConfigMap `extended-agentcard-<name>`), signed like the public card.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extended_card: Option<SourceExtendedCard>,
}

/// How the operator asks the agent for its extended card: with a token it requests from the
/// API server (TokenRequest) for a ServiceAccount of the card's namespace, for an audience the
/// team names, sent as `Authorization: Bearer`. No Secret is ever read.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourceExtendedCard {
    /// The ServiceAccount (of the card's namespace) the agent accepts.
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$') && size(self) <= 253").message("must be a ServiceAccount name"))]
    pub service_account_name: String,
    /// The audience of the token (what the agent checks `aud` against).
    #[x_kube(validation = Rule::new("size(self) > 0 && size(self) <= 1024").message("must be 1 to 1024 characters"))]
    pub audience: String,
    /// The REST path of `GetExtendedAgentCard` on the agent (default `/extendedAgentCard`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.startsWith('/') && size(self) <= 1024").message("must be an absolute path like /extendedAgentCard"))]
    pub path: Option<String>,
}

/// A Service port in the card's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourceService {
    /// Service name (in the card's namespace).
    #[x_kube(validation = Rule::new("self.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$') && size(self) <= 63").message("must be a Service name (DNS label)"))]
    pub name: String,
    /// Service port number.
    #[x_kube(validation = Rule::new("self >= 1 && self <= 65535").message("must be a port number"))]
    pub port: i32,
}

/// Fields set over an imported card before it is signed.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Overrides {
    /// The card's `name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The card's `description`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The card's `provider`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<crate::a2a::card::AgentProvider>,
    /// The card's `documentationUrl`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub documentation_url: Option<String>,
    /// The card's `iconUrl`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icon_url: Option<String>,
    /// Tags added to every skill (kept once each).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skill_tags: Vec<String>,
}

/// Drift detection: how often the agent's own card is fetched and compared with the published
/// one.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Drift {
    /// `Report` (the default with a backend): fetch the agent's own card every interval,
    /// through the same only-this-namespace's-Pods path as import, and report each difference
    /// in the `Drifted` condition; `Off`: never fetch it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<DriftMode>,
    /// Seconds between two fetches of the agent's card (default 300).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 30 && self <= 86400").message("must be between 30 and 86400"))]
    pub interval_seconds: Option<i64>,
    /// Path of the card on the agent (default `/.well-known/agent-card.json`, then the legacy
    /// `/.well-known/agent.json`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.startsWith('/') && size(self) <= 1024").message("must be an absolute path like /.well-known/agent-card.json"))]
    pub path: Option<String>,
}

/// Whether drift is looked for.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum DriftMode {
    /// Never fetch the agent's own card.
    Off,
    /// Fetch and compare it every interval; report differences in the `Drifted` condition.
    Report,
}

/// What fills the fields an imported card leaves empty: a field here is used only where the
/// served card has none (an empty string, no provider, no skills).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Defaults {
    /// The card's `description`, where the served card has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The card's `version`, where the served card has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The card's `provider`, where the served card has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<crate::a2a::card::AgentProvider>,
    /// The card's `documentationUrl`, where the served card has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub documentation_url: Option<String>,
    /// The card's `iconUrl`, where the served card has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icon_url: Option<String>,
    /// The card's skills, where the served card lists none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skills: Vec<crate::a2a::card::AgentSkill>,
}

/// The agent's own Service.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Backend {
    /// Service name, in the card's namespace.
    pub service_name: String,
    /// Service port number.
    #[x_kube(validation = Rule::new("self >= 1 && self <= 65535").message("must be a port number"))]
    pub port: i32,
    /// Path of the agent's A2A endpoint on the public host (default `<pathPrefix>/a2a`). It is
    /// routed as a prefix, so it must lie inside the card's route subtree (`pathPrefix`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == '' || self.matches('^(/[A-Za-z0-9._~-]+)+$')").message("must be like /segment[/segment...] without a trailing slash"))]
    #[x_kube(validation = Rule::new("!self.matches('(^|/)[.][.]?(/|$)')").message("must not contain . or .. segments"))]
    pub path: Option<String>,
    /// Protocol binding spoken there (default `JSONRPC`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol_binding: Option<String>,
    /// A2A protocol version spoken there (default `1.0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol_version: Option<String>,
}

/// What the operator last did with the card.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentCardStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`, `Signed` and `Published`, with reasons.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(with = "Vec<Condition>")]
    pub conditions: Vec<CardCondition>,
    /// Public URL of the served card.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Hash of the served bytes (the HTTP ETag without quotes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_hash: Option<String>,
    /// Id of the key that signed the served card.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
    /// Name of the ConfigMap holding the served bytes (in the card's namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<String>,
    /// Ids of the published skills, comma-separated (for `kubectl get`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skills: Option<String>,
    /// Lint warnings about the card (published anyway).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// What routes the card (`Ingress`, `HTTPRoute` or `None`), as last written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub route_kind: Option<Word>,
    /// Where the card is served, as the operator decided it. The card server routes by this
    /// alone (never by anything a tenant can write); absent when the card is served nowhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served: Option<ServedRoute>,
    /// With `spec.source`: where the card was fetched and when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Box<SourceStatus>>,
    /// The operator installation (its namespace) that wrote this status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<String>,
    /// Operator installations found reconciling the card at once (condition `Conflict`);
    /// empty while one alone does.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub contenders: Vec<String>,
    /// When the card was retired (RFC 3339): its 410 period runs from here, even after it is
    /// unpublished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retired_at: Option<String>,
    /// Where the card came from: `Declared` (written by a person), `Discovered` (written by an
    /// AgentDiscovery for a running agent) or `Claimed` (discovered, then taken over by
    /// someone: discovery no longer writes it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub origin: Option<Word>,
    /// The revision the served bytes are (1, 2, ...: one per content hash published; each
    /// kept as a ControllerRevision named `<card>-<hash>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    /// For each directory with `admission: ApprovalRequired` that selects the card: whether
    /// it may list it, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvals: Vec<ApprovalStatus>,
    /// The approvals in one line for `kubectl get` (`directory=approved,other=pending`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<String>,
    // Boxed: most cards have none, and its inline 48 bytes put a stored card (with its `Arc`)
    // past the allocator's 1,536-byte size class into the 1,792 one.
    /// With `spec.extendedCard`: the extended card published with the served public card.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extended_card: Option<Box<ExtendedCardStatus>>,
}

/// The published extended card.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExtendedCardStatus {
    /// The ConfigMap of the card's namespace holding its exact signed bytes (key
    /// `extended-agent-card.json`), for the agent to mount.
    pub config_map: String,
    /// Hash of those bytes (the ETag they are served with, without quotes).
    pub content_hash: String,
}

/// Whether a directory that requires approval may list the card.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalStatus {
    /// The AgentDirectory.
    pub directory: String,
    /// `Pending`, `Approved`, `Rejected` or `Voided`: the directory lists the card only while
    /// `Approved`.
    pub state: ApprovalState,
    /// The AgentCardApproval this verdict comes from (none while pending with no approval).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<String>,
    /// Its uid: a voided approval stays void; a new approval (a new uid) decides afresh.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_uid: Option<String>,
    /// The content hash that approval names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_hash: Option<String>,
    /// The content hash this verdict is about (the served one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_hash: Option<String>,
    /// The rejection's message, or why the approval was voided or does not apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// What changed for callers since the approved revision (the breaking-change findings
    /// that voided it), for the approver deciding again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<String>,
    /// When the state last changed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
}

/// A directory's verdict on a card.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum ApprovalState {
    /// No approval of the served content yet.
    #[default]
    Pending,
    /// Approved: listed.
    Approved,
    /// Rejected with a message.
    Rejected,
    /// Approved once, then an edit voided the approval: waits for a new one.
    Voided,
}

impl ApprovalState {
    /// Lower-case, as `status.approval` and the directory's `?approval=` write it.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalState::Pending => "pending",
            ApprovalState::Approved => "approved",
            ApprovalState::Rejected => "rejected",
            ApprovalState::Voided => "voided",
        }
    }
}

/// The last fetches of an imported card.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourceStatus {
    /// The URL fetched (`http://<service>.<namespace>.svc:<port><path>`).
    pub url: String,
    /// The agent's `ETag` for the card last fetched, sent back as `If-None-Match`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    /// The protocol version the agent's card is written in (`1.0` or `0.3`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// When the card was last fetched successfully (RFC 3339; a `304 Not Modified` counts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fetched_at: Option<String>,
}

/// The route a card is served on, written by the operator after its ownership checks.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServedRoute {
    /// Host the card is served on (lower case).
    pub host: String,
    /// Path prefix of the card's route subtree (`""` or `/a/b`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub path_prefix: String,
    /// Whether the legacy `/.well-known/agent.json` is served too.
    #[serde(default)]
    pub legacy_path: bool,
    /// `Cache-Control: max-age` of the served card, in seconds.
    pub max_age_seconds: i64,
    /// When the served bytes last changed (RFC 3339; the HTTP `Last-Modified`).
    pub published_at: String,
    /// When this card took its claim on host and prefix (RFC 3339): the first card to become
    /// Ready on a claim holds it.
    pub since: String,
    /// The card's lifecycle as served (absent while active).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<Box<ServedLifecycle>>,
    /// The REST path the operator answers `GetExtendedAgentCard` on
    /// (`<backend path>/extendedAgentCard`): with the extended card to callers `spec.extendedCard.auth`
    /// accepts, or, with no extended card, the A2A `ExtendedAgentCardNotConfiguredError`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extended_path: Option<String>,
}

/// A deprecated or retired card's lifecycle as the operator resolved it: what the card server
/// sends (headers, 410) and what the directory shows.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServedLifecycle {
    /// `Deprecated` or `Retired`.
    pub state: LifecycleState,
    /// When the card entered this state (RFC 3339; the `Deprecation` header's date).
    pub since: String,
    /// The spec's message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The `Sunset` date (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sunset: Option<String>,
    /// The successor's directory identifier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub successor: Option<String>,
    /// The successor's card URL, when it is a card of this cluster that is served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub successor_url: Option<String>,
    /// Retired: until when its URL answers 410 Gone (RFC 3339); then it is unpublished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gone_until: Option<String>,
}
