//! The directory as MCP tools: `/mcp` on each directory host, the streamable HTTP transport of
//! the official Rust SDK (`rmcp`), stateless (every POST stands alone, JSON answers).
//!
//! Data flow: [`super::http::handle`] resolves the host's [`Site`] and the caller's visibility
//! (in Kubernetes access mode the bearer token is the caller, refused with 401 before MCP is
//! reached) and attaches them to the request as a [`Caller`] → [`serve`] hands the request to
//! rmcp, which parses JSON-RPC and calls a tool → each tool turns its arguments into the native
//! API's query parameters and answers with the native views' JSON ([`super::native`]), so a
//! tool returns exactly what `GET /v1/agents`, `/v1/agents/{ns}/{name}` and `/v1/facets` would.
//! Argument mistakes are tool errors (`isError`), naming the argument.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::Extension;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{tool, tool_handler, tool_router, ErrorData, ServerHandler};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::entry::Field;
use super::{ard, native};
use crate::directory::sites::site::Site;

/// Who asks, resolved before the request reaches MCP: the directory its host names and the
/// namespaces the caller may see (`None`: every one).
#[derive(Clone)]
pub struct Caller {
    /// The directory.
    pub site: Arc<Site>,
    /// The namespaces the caller may see.
    pub visible: Option<HashSet<String>>,
}

/// One value or several (any of them matches, as a repeated query parameter does).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum OneOrMany {
    /// One value.
    One(String),
    /// Several values.
    Many(Vec<String>),
}

/// The native API's filters and text, as tool arguments (names as its query parameters).
#[derive(Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SearchArgs {
    /// Free text, matched against names, descriptions, skills, tags and examples; results are
    /// ranked by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub q: Option<String>,
    /// Skill id or name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skill: Option<OneOrMany>,
    /// Skill tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<OneOrMany>,
    /// Provider organization.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<OneOrMany>,
    /// `streaming`, `pushNotifications`, `extendedAgentCard`, or an extension URI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capability: Option<OneOrMany>,
    /// Input media type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_mode: Option<OneOrMany>,
    /// Output media type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_mode: Option<OneOrMany>,
    /// Protocol binding (`JSONRPC`, `GRPC`, `HTTP+JSON`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binding: Option<OneOrMany>,
    /// Kubernetes namespace of the agent's AgentCard.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<OneOrMany>,
    /// `true` (its Service has a ready endpoint), `false`, or `unknown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reachable: Option<OneOrMany>,
    /// `Active`, `Deprecated` or `Retired` (retired agents are listed only when asked for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<OneOrMany>,
    /// Results per page, 1 to 100 (default 20).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// The `metadata.nextCursor` of the previous page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

/// Which agent: its identifier, or its AgentCard's namespace and name.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetArgs {
    /// The directory identifier, `urn:air:<host>:<namespace>:<name>` (`urn:ai:` accepted).
    #[serde(default)]
    pub identifier: Option<String>,
    /// The AgentCard's namespace (with `name`).
    #[serde(default)]
    pub namespace: Option<String>,
    /// The AgentCard's name (with `namespace`).
    #[serde(default)]
    pub name: Option<String>,
}

/// Tool arguments of type `T`, read so that a mistake names the argument (`limit: invalid
/// type: ...`), with `T`'s schema.
#[derive(Debug)]
pub struct Args<T>(pub T);

impl<'de, T: serde::de::DeserializeOwned> Deserialize<'de> for Args<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        serde_path_to_error::deserialize(v).map(Args).map_err(|e| {
            let path = e.path().to_string();
            if path == "." {
                serde::de::Error::custom(e.into_inner())
            } else {
                serde::de::Error::custom(format!("{path}: {}", e.into_inner()))
            }
        })
    }
}

impl<T: JsonSchema> JsonSchema for Args<T> {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        T::schema_name()
    }

    fn schema_id() -> std::borrow::Cow<'static, str> {
        T::schema_id()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        T::json_schema(generator)
    }

    fn inline_schema() -> bool {
        T::inline_schema()
    }
}

/// The arguments as the native API's query parameters (each value a repeated parameter).
fn params(args: &SearchArgs) -> BTreeMap<String, Vec<String>> {
    let v = serde_json::to_value(args).unwrap_or(Value::Null);
    let mut out = BTreeMap::new();
    for (k, v) in v.as_object().into_iter().flatten() {
        let values = match v {
            Value::Array(items) => items
                .iter()
                .map(|i| i.as_str().map_or_else(|| i.to_string(), str::to_string))
                .collect(),
            Value::String(s) => vec![s.clone()],
            other => vec![other.to_string()],
        };
        out.insert(k.clone(), values);
    }
    out
}

fn tool_error(message: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message.into())])
}

/// The caller the HTTP layer attached (always there on `/mcp`).
fn caller(parts: &http::request::Parts) -> Result<&Caller, ErrorData> {
    parts
        .extensions
        .get::<Caller>()
        .ok_or_else(|| ErrorData::internal_error("no directory for this request", None))
}

/// Why a tool call is refused: its text is the tool error the client reads.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// The arguments are wrong, as the native API would say (naming the parameter).
    #[error("{0}")]
    Arguments(String),
    /// `identifier` is no ARD identifier.
    #[error("identifier: {0:?} is not an ARD identifier (urn:air:<host>:<namespace>:<name>)")]
    Identifier(String),
    /// No such agent visible to the caller.
    #[error("no agent {0}")]
    NoAgent(String),
    /// Neither an identifier nor a namespace and name.
    #[error("give either identifier, or both namespace and name")]
    Which,
    /// Paging asked of a tool that does not page.
    #[error("limit, cursor: only for search_agents")]
    NoPaging,
}

/// `search_agents`: the first page of [`native::page`] for the arguments (pure).
pub fn search(c: &Caller, args: &SearchArgs) -> Result<Value, ToolError> {
    let r = native::request(&params(args), true).map_err(|e| ToolError::Arguments(e.message))?;
    let page = c
        .site
        .catalog
        .list(&r.query, c.visible.as_ref(), r.after.as_deref(), r.limit);
    Ok(native::page(&page))
}

/// `get_agent_card`: [`native::item`] of one agent (pure).
pub fn get(c: &Caller, args: &GetArgs) -> Result<Value, ToolError> {
    let visible = c.visible.as_ref();
    let found = match (&args.identifier, &args.namespace, &args.name) {
        (Some(id), None, None) => {
            let id = ard::canonical_identifier(id);
            if !ard::is_identifier(&id) {
                return Err(ToolError::Identifier(id));
            }
            c.site
                .catalog
                .get(&id, visible)
                .ok_or_else(|| ToolError::NoAgent(id.clone()))
        }
        (None, Some(ns), Some(name)) => c
            .site
            .catalog
            .get_card(ns, name, visible)
            .ok_or_else(|| ToolError::NoAgent(format!("{ns}/{name}"))),
        _ => Err(ToolError::Which),
    }?;
    Ok(native::item(&found))
}

/// `list_facets`: [`native::facets`] for the arguments (pure; no paging).
pub fn facets(c: &Caller, args: &SearchArgs) -> Result<Value, ToolError> {
    if args.limit.is_some() || args.cursor.is_some() {
        return Err(ToolError::NoPaging);
    }
    let r = native::request(&params(args), false).map_err(|e| ToolError::Arguments(e.message))?;
    let (counts, total) =
        c.site
            .catalog
            .facets_with_total(&r.query, c.visible.as_ref(), &Field::ALL);
    Ok(native::facets(&counts, total))
}

fn answer(result: Result<Value, ToolError>) -> CallToolResult {
    match result {
        Ok(v) => CallToolResult::structured(v),
        Err(e) => tool_error(e.to_string()),
    }
}

/// The MCP server: three read-only tools over the caller's directory.
#[derive(Clone)]
pub struct DirectoryTools {
    tool_router: ToolRouter<Self>,
}

#[tool_router]
impl DirectoryTools {
    fn new() -> Self {
        DirectoryTools {
            tool_router: Self::tool_router(),
        }
    }

    /// Search the directory's agents.
    #[tool(
        description = "Search the A2A agents of this directory by text and filters (skill, tag, provider, capability, inputMode, outputMode, binding, namespace, reachable, lifecycle). Returns {agents: [{card, _meta}], metadata: {count, total, nextCursor}}.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn search_agents(
        &self,
        Extension(parts): Extension<http::request::Parts>,
        Parameters(Args(args)): Parameters<Args<SearchArgs>>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(answer(search(caller(&parts)?, &args)))
    }

    /// One agent's card.
    #[tool(
        description = "Get one agent's signed A2A card and directory metadata, by identifier or by namespace and name.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn get_agent_card(
        &self,
        Extension(parts): Extension<http::request::Parts>,
        Parameters(Args(args)): Parameters<Args<GetArgs>>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(answer(get(caller(&parts)?, &args)))
    }

    /// Facet counts.
    #[tool(
        description = "Count the directory's agents by skill, tag, provider, capability, media types, binding, namespace, reachability and lifecycle, over the agents matching the optional text and filters.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn list_facets(
        &self,
        Extension(parts): Extension<http::request::Parts>,
        Parameters(Args(args)): Parameters<Args<SearchArgs>>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(answer(facets(caller(&parts)?, &args)))
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for DirectoryTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "agentcard-operator-directory",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(
                "Search and read the A2A agent cards this directory lists, as its native API does.",
            )
    }
}

/// The MCP service, built once: stateless, JSON answers, any Host (the server routes by host
/// before this point), request bodies of at most 64 KiB.
fn service() -> &'static StreamableHttpService<DirectoryTools, NeverSessionManager> {
    static SERVICE: OnceLock<StreamableHttpService<DirectoryTools, NeverSessionManager>> =
        OnceLock::new();
    SERVICE.get_or_init(|| {
        let config = StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_json_response(true)
            .with_sse_keep_alive(None)
            .disable_allowed_hosts()
            .with_max_request_body_bytes(64 * 1024);
        let tools = DirectoryTools::new();
        StreamableHttpService::new(
            move || Ok(tools.clone()),
            Arc::new(NeverSessionManager::default()),
            config,
        )
    })
}

/// Answer one `/mcp` request for `caller`.
pub async fn serve<B>(
    caller: Caller,
    mut req: http::Request<B>,
) -> http::Response<BoxBody<Bytes, std::convert::Infallible>>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send + 'static,
    B::Error: std::fmt::Display,
{
    req.extensions_mut().insert(caller);
    service().handle(req).await
}
