//! The A2A v1.0 Agent Card as Rust types.
//!
//! Field names and shapes follow `specification/a2a.proto` of A2A v1.0 in its ProtoJSON
//! form (camelCase). Presence follows ProtoJSON too: proto3 `optional` booleans are
//! `Option<bool>` so an explicit `false` survives, plain scalars are skipped when they hold
//! their default. Unknown fields are not modelled: [`crate::parse`] reports them (strict
//! mode, for cards users write) or drops them (lenient mode, for cards others signed).
//!
//! The types carry `JsonSchema` so the `AgentCard` CRD documents every field from these doc
//! comments. Variants that the protocol models as `oneof` are structs of optional members
//! (exactly one set, checked by [`crate::validate`]) because Kubernetes structural schemas
//! cannot express `oneOf` between differently shaped objects.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

fn is_false(b: &bool) -> bool {
    !*b
}

/// Any JSON value, documented in CRDs as free-form (`x-kubernetes-preserve-unknown-fields`).
fn free_form_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

/// An A2A v1.0 Agent Card: what an agent says about itself at `/.well-known/agent-card.json`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentCard {
    /// Human-readable name of the agent.
    #[serde(default)]
    pub name: String,
    /// What the agent does, for humans and for other agents choosing a peer.
    #[serde(default)]
    pub description: String,
    /// Endpoints where the agent speaks A2A; the first one is the preferred interface.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub supported_interfaces: Vec<AgentInterface>,
    /// The organisation that runs the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<AgentProvider>,
    /// Version of the agent (free-form, e.g. semantic version).
    #[serde(default)]
    pub version: String,
    /// URL of human-readable documentation for the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub documentation_url: Option<String>,
    /// Optional A2A features the agent supports.
    #[serde(default)]
    pub capabilities: AgentCapabilities,
    /// Security schemes the agent accepts, by name; referenced from `securityRequirements`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub security_schemes: BTreeMap<String, SecurityScheme>,
    /// Alternatives (OR) of scheme combinations (AND) a client must satisfy to call the agent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_requirements: Vec<SecurityRequirement>,
    /// Media types the agent accepts as input by default, e.g. `text/plain`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub default_input_modes: Vec<String>,
    /// Media types the agent produces by default, e.g. `application/json`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub default_output_modes: Vec<String>,
    /// What the agent can do; at least one skill.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skills: Vec<AgentSkill>,
    /// JWS signatures over the card's canonical form. Written by the operator, never by users.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(skip)]
    pub signatures: Vec<AgentCardSignature>,
    /// URL of an icon for the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icon_url: Option<String>,
}

/// One endpoint where the agent speaks A2A.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentInterface {
    /// Absolute `https` URL (HTTP bindings) or `host:port` (gRPC) of the endpoint.
    #[serde(default)]
    pub url: String,
    /// Protocol binding: `JSONRPC`, `GRPC`, `HTTP+JSON`, or a URI naming another binding.
    #[serde(default)]
    pub protocol_binding: String,
    /// Tenant to send in requests to this endpoint, when the agent is multi-tenant.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tenant: String,
    /// A2A protocol version spoken at this endpoint, e.g. `1.0` or `0.3`.
    #[serde(default)]
    pub protocol_version: String,
}

/// The organisation behind the agent.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentProvider {
    /// URL of the provider's website.
    #[serde(default)]
    pub url: String,
    /// Name of the provider's organisation.
    #[serde(default)]
    pub organization: String,
}

/// Optional A2A features. Booleans are tri-state: unset, `true`, or an explicit `false`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentCapabilities {
    /// Whether the agent streams responses (SSE / server streaming).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streaming: Option<bool>,
    /// Whether the agent can push task updates to a client webhook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push_notifications: Option<bool>,
    /// Protocol extensions the agent supports.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<AgentExtension>,
    /// Whether an authenticated client can fetch an extended card from the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extended_agent_card: Option<bool>,
}

/// A protocol extension the agent supports.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentExtension {
    /// URI identifying the extension.
    #[serde(default)]
    pub uri: String,
    /// How the agent uses the extension.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Whether clients must support the extension to talk to the agent.
    #[serde(default, skip_serializing_if = "is_false")]
    pub required: bool,
    /// Extension-specific configuration: any JSON object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_object")]
    pub params: Option<serde_json::Map<String, serde_json::Value>>,
}

/// A capability of the agent that clients can discover and ask for.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentSkill {
    /// Unique identifier of the skill within the card.
    #[serde(default)]
    pub id: String,
    /// Human-readable name of the skill.
    #[serde(default)]
    pub name: String,
    /// What the skill does.
    #[serde(default)]
    pub description: String,
    /// Keywords for discovery; at least one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Example prompts or requests.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub examples: Vec<String>,
    /// Input media types, overriding `defaultInputModes` for this skill.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub input_modes: Vec<String>,
    /// Output media types, overriding `defaultOutputModes` for this skill.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output_modes: Vec<String>,
    /// Security requirements for this skill, overriding the card's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_requirements: Vec<SecurityRequirement>,
}

/// One alternative of the card's security: every named scheme must be satisfied (AND).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecurityRequirement {
    /// Scheme name (a key of `securitySchemes`) to the scopes required of it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub schemes: BTreeMap<String, StringList>,
}

/// A list of strings (the protocol's `StringList`), here OAuth scopes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StringList {
    /// The scopes; may be empty for schemes without scopes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub list: Vec<String>,
}

/// A security scheme: exactly one member is set.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecurityScheme {
    /// An API key sent in a header, query parameter or cookie.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_security_scheme: Option<ApiKeySecurityScheme>,
    /// HTTP authentication (RFC 7235), e.g. Bearer or Basic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_auth_security_scheme: Option<HttpAuthSecurityScheme>,
    /// OAuth 2.0 with one flow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth2_security_scheme: Option<OAuth2SecurityScheme>,
    /// OpenID Connect discovery.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_id_connect_security_scheme: Option<OpenIdConnectSecurityScheme>,
    /// Mutual TLS client certificates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtls_security_scheme: Option<MutualTlsSecurityScheme>,
}

/// API key authentication.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiKeySecurityScheme {
    /// Description of the scheme.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Where the key goes: `header`, `query` or `cookie`.
    #[serde(default)]
    pub location: String,
    /// Name of the header, query parameter or cookie.
    #[serde(default)]
    pub name: String,
}

/// HTTP authentication.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpAuthSecurityScheme {
    /// Description of the scheme.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// The HTTP authentication scheme name, e.g. `Bearer`.
    #[serde(default)]
    pub scheme: String,
    /// Hint of the bearer token format, e.g. `JWT`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub bearer_format: String,
}

/// OAuth 2.0 authentication.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OAuth2SecurityScheme {
    /// Description of the scheme.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// The OAuth flow; exactly one member is set.
    #[serde(default)]
    pub flows: OAuthFlows,
    /// URL of the RFC 8414 authorization server metadata.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub oauth2_metadata_url: String,
}

/// OAuth 2.0 flows: exactly one member is set.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OAuthFlows {
    /// Authorization code flow (with optional PKCE).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization_code: Option<AuthorizationCodeOAuthFlow>,
    /// Client credentials flow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_credentials: Option<ClientCredentialsOAuthFlow>,
    /// Implicit flow (deprecated by OAuth 2.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub implicit: Option<ImplicitOAuthFlow>,
    /// Resource owner password flow (deprecated by OAuth 2.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<PasswordOAuthFlow>,
    /// Device authorization flow (RFC 8628).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_code: Option<DeviceCodeOAuthFlow>,
}

/// OAuth 2.0 authorization code flow.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuthorizationCodeOAuthFlow {
    /// Authorization endpoint URL.
    #[serde(default)]
    pub authorization_url: String,
    /// Token endpoint URL.
    #[serde(default)]
    pub token_url: String,
    /// Refresh endpoint URL.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub refresh_url: String,
    /// Available scopes: name to description.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub scopes: BTreeMap<String, String>,
    /// Whether PKCE (RFC 7636) is required.
    #[serde(default, skip_serializing_if = "is_false")]
    pub pkce_required: bool,
}

/// OAuth 2.0 client credentials flow.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientCredentialsOAuthFlow {
    /// Token endpoint URL.
    #[serde(default)]
    pub token_url: String,
    /// Refresh endpoint URL.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub refresh_url: String,
    /// Available scopes: name to description.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub scopes: BTreeMap<String, String>,
}

/// OAuth 2.0 implicit flow.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImplicitOAuthFlow {
    /// Authorization endpoint URL.
    #[serde(default)]
    pub authorization_url: String,
    /// Refresh endpoint URL.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub refresh_url: String,
    /// Available scopes: name to description.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub scopes: BTreeMap<String, String>,
}

/// OAuth 2.0 resource owner password flow.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PasswordOAuthFlow {
    /// Token endpoint URL.
    #[serde(default)]
    pub token_url: String,
    /// Refresh endpoint URL.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub refresh_url: String,
    /// Available scopes: name to description.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub scopes: BTreeMap<String, String>,
}

/// OAuth 2.0 device authorization flow.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeviceCodeOAuthFlow {
    /// Device authorization endpoint URL.
    #[serde(default)]
    pub device_authorization_url: String,
    /// Token endpoint URL.
    #[serde(default)]
    pub token_url: String,
    /// Refresh endpoint URL.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub refresh_url: String,
    /// Available scopes: name to description.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub scopes: BTreeMap<String, String>,
}

/// OpenID Connect authentication.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OpenIdConnectSecurityScheme {
    /// Description of the scheme.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// OpenID Connect discovery URL.
    #[serde(default)]
    pub open_id_connect_url: String,
}

/// Mutual TLS authentication.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MutualTlsSecurityScheme {
    /// Description of the scheme.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
}

/// One JWS signature of the card (detached payload: the canonical card).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentCardSignature {
    /// base64url of the JWS protected header JSON.
    #[serde(default)]
    pub protected: String,
    /// base64url of the signature bytes.
    #[serde(default)]
    pub signature: String,
    /// Unprotected JWS header members, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_object")]
    pub header: Option<serde_json::Map<String, serde_json::Value>>,
}
