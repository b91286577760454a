//! The AI Catalog / ARD view of a directory: the manifest (`/.well-known/ai-catalog.json`,
//! `/.well-known/ard.json`), the registry API's requests (`POST /search`, `POST /explore`,
//! `GET /agents`) parsed into engine [`Query`]s, and catalog entries as responses.
//! Pure: the HTTP layer hands bodies and parameters in and writes out what comes back.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::entry::{Entry, Field};
use super::query::Query;
use super::ApiError;

/// Media type of an A2A Agent Card catalog entry.
pub const TYPE_A2A: &str = "application/a2a-agent-card+json";
/// Media type of a registry catalog entry.
pub const TYPE_REGISTRY: &str = "application/ai-registry+json";
/// Most entries per page.
pub const MAX_PAGE: usize = 100;

/// A catalog entry (`ai-catalog.schema.json#/$defs/catalogEntry`) for a listed card.
pub fn catalog_entry(e: &Entry) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("identifier".into(), json!(e.identifier));
    m.insert("displayName".into(), json!(e.title()));
    m.insert("type".into(), json!(TYPE_A2A));
    m.insert("url".into(), json!(e.placement.url));
    let mut optional = |k: &str, v: &str| {
        if !v.is_empty() {
            m.insert(k.into(), json!(v));
        }
    };
    optional("description", e.description());
    optional("version", e.version());
    optional("updatedAt", &e.placement.updated_at);
    let (tags, skills) = (e.tags(), e.skill_ids());
    if !tags.is_empty() {
        m.insert("tags".into(), json!(tags));
    }
    if !skills.is_empty() {
        m.insert("capabilities".into(), json!(skills));
    }
    // From the skills' examples: two to five (v0.9 requires that many; v0.91 asks for it).
    let queries: Vec<&str> = e.examples().take(5).collect();
    if queries.len() >= 2 {
        m.insert("representativeQueries".into(), json!(queries));
    }
    let provider = e.facet_values(Field::Provider).next();
    let mut meta = Map::new();
    meta.insert("namespace".into(), json!(e.placement.namespace));
    meta.insert("name".into(), json!(e.placement.name));
    if let Some(p) = provider {
        meta.insert("provider".into(), json!(p));
    }
    meta.insert("contentHash".into(), json!(e.placement.content_hash));
    meta.insert("keyId".into(), json!(e.placement.key_id));
    // Scalars again: reachability and the lifecycle, flattened.
    meta.insert("reachable".into(), json!(e.placement.reachable_str()));
    meta.insert("lifecycle".into(), json!(e.placement.lifecycle_str()));
    if let Some(l) = &e.placement.lifecycle {
        let fields = [
            ("lifecycleSince", Some(&l.since)),
            ("lifecycleMessage", l.message.as_ref()),
            ("sunset", l.sunset.as_ref()),
            ("successor", l.successor.as_ref()),
            ("successorUrl", l.successor_url.as_ref()),
            ("goneUntil", l.gone_until.as_ref()),
        ];
        for (k, v) in fields {
            if let Some(v) = v {
                meta.insert(k.into(), json!(v));
            }
        }
    }
    if let Some(o) = &e.origin {
        // Catalog metadata holds scalars only.
        meta.insert("originUpstream".into(), json!(o.upstream));
        meta.insert("originUrl".into(), json!(o.url));
        meta.insert("originFetchedAt".into(), json!(o.fetched_at));
        meta.insert("originVerified".into(), json!(o.verified));
        m.insert(
            "provenance".into(),
            json!([{"relation": "copiedFrom", "sourceId": e.identifier,
                    "sourceDigest": e.placement.content_hash}]),
        );
    }
    if let Some(n) = e.placement.revision.filter(|_| e.origin.is_none()) {
        // Earlier versions, as far as scalar metadata allows: the served revision's number
        // and where the list of revisions is (under the registry's base URL).
        meta.insert("revision".into(), json!(n));
        meta.insert(
            "revisions".into(),
            json!(super::native::revisions_path(&e.placement)),
        );
    }
    m.insert("metadata".into(), Value::Object(meta));
    m
}

/// What the manifest says about the directory itself.
pub struct RegistryInfo<'a> {
    /// `urn:air:<host>:agentcard-operator:<directory name>`.
    pub identifier: String,
    /// Its display name.
    pub display_name: &'a str,
    /// Its description.
    pub description: Option<&'a str>,
    /// `https://<host><prefix>`: the registry API's base URL.
    pub base_url: String,
}

/// Most card entries a manifest lists. A manifest is one document every crawler fetches whole;
/// bounded, it stays under about a megabyte whatever the directory holds. Past the bound it
/// lists the first entries, and its registry entry says so (`metadata.complete: false`,
/// `metadata.listedEntries`, `metadata.totalEntries`): the registry API its `url` names
/// (`POST /search` with `pageToken`, or `GET /agents` with `pageToken`) lists them all.
pub const MANIFEST_MAX_ENTRIES: usize = 1_000;

/// The manifest: the visible entries (at most [`MANIFEST_MAX_ENTRIES`]) plus the registry
/// itself.
pub fn manifest<'a>(info: &RegistryInfo<'_>, entries: impl Iterator<Item = &'a Entry>) -> Value {
    manifest_of_at_most(info, entries, MANIFEST_MAX_ENTRIES)
}

/// The manifest listing at most `max` of `entries`.
pub fn manifest_of_at_most<'a>(
    info: &RegistryInfo<'_>,
    mut entries: impl Iterator<Item = &'a Entry>,
    max: usize,
) -> Value {
    let mut list: Vec<Value> = entries
        .by_ref()
        .take(max)
        .map(|e| Value::Object(catalog_entry(e)))
        .collect();
    let listed = list.len();
    let unlisted = entries.count();
    let mut registry = json!({
        "identifier": info.identifier,
        "displayName": info.display_name,
        "type": TYPE_REGISTRY,
        "url": format!("{}/search", info.base_url),
    });
    if let Some(d) = info.description {
        registry["description"] = json!(d);
    }
    if unlisted > 0 {
        registry["metadata"] = json!({
            "complete": false,
            "listedEntries": listed,
            "totalEntries": listed + unlisted,
        });
    }
    list.push(registry);
    json!({
        "specVersion": "1.0",
        "host": {"displayName": info.display_name},
        "entries": list,
    })
}

/// `urn:ai:<rest>` (accepted on input as an alias) as `urn:air:<rest>`.
pub fn canonical_identifier(id: &str) -> String {
    match id.strip_prefix("urn:ai:") {
        Some(rest) => format!("urn:air:{rest}"),
        None => id.to_string(),
    }
}

/// Whether `id` is an ARD identifier: `urn:air:<publisher>(:<segment>)+` (the spec's pattern).
pub fn is_identifier(id: &str) -> bool {
    let Some(rest) = id.strip_prefix("urn:air:") else {
        return false;
    };
    let mut parts = rest.split(':');
    let publisher = parts.next().unwrap_or_default();
    let segment_ok = |s: &str, extra: &[char]| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || extra.contains(&c))
    };
    let mut segments = 0;
    for seg in parts {
        if !segment_ok(seg, &['.', '_', '-']) {
            return false;
        }
        segments += 1;
    }
    segment_ok(publisher, &['.', '-']) && segments > 0
}

/// A filter key of the registry API.
fn apply_filter(
    query: &mut Query,
    key: &str,
    values: Vec<String>,
    at: &str,
) -> Result<(), ApiError> {
    match key {
        "type" => {
            if !values.iter().any(|v| v == TYPE_A2A) {
                query.nothing = true;
            }
        }
        // `urn:ai:` is the v0.91 spelling some clients send for `urn:air:`.
        "identifier" => {
            query.identifiers = Some(values.iter().map(|v| canonical_identifier(v)).collect());
        }
        other => match Field::from_ard(other) {
            Some(field) => query.filters.entry(field).or_default().extend(values),
            None => {
                return Err(ApiError::invalid(format!(
                    "{at}.{other}: unknown filter field (known: type, identifier, tags, capabilities, metadata.{{{}}})",
                    Field::ALL.map(|f| f.param()).join(",")
                )))
            }
        },
    }
    Ok(())
}

fn object<'a>(v: &'a Value, at: &str) -> Result<&'a Map<String, Value>, ApiError> {
    v.as_object()
        .ok_or_else(|| ApiError::invalid(format!("{at}: must be an object")))
}

fn only_keys(m: &Map<String, Value>, allowed: &[&str], at: &str) -> Result<(), ApiError> {
    match m.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(ApiError::invalid(format!(
            "{}{k}: unknown field",
            if at.is_empty() {
                String::new()
            } else {
                format!("{at}.")
            }
        ))),
        None => Ok(()),
    }
}

/// A `QueryModel` (`text`, `filter`) at `at`.
fn query_model(v: &Value, at: &str, text_required: bool) -> Result<Query, ApiError> {
    let m = object(v, at)?;
    // `@context` (v0.91 §5.3.1): the JSON-LD context filter keys resolve against. Every key
    // this registry filters by is an ARD base term, so it changes nothing here.
    only_keys(m, &["text", "filter", "@context"], at)?;
    match m.get("@context") {
        None | Some(Value::String(_) | Value::Object(_) | Value::Array(_)) => {}
        Some(_) => {
            return Err(ApiError::invalid(format!(
                "{at}.@context: must be a context (a string, object or array)"
            )))
        }
    }
    let mut query = Query::default();
    match m.get("text") {
        Some(Value::String(t)) => query.text = Some(t.clone()).filter(|t| !t.trim().is_empty()),
        Some(_) => return Err(ApiError::invalid(format!("{at}.text: must be a string"))),
        None if text_required => return Err(ApiError::invalid(format!("{at}.text: required"))),
        None => {}
    }
    if let Some(filter) = m.get("filter") {
        for (key, value) in object(filter, &format!("{at}.filter"))? {
            let values = match value {
                Value::String(s) => vec![s.clone()],
                Value::Array(items) => items
                    .iter()
                    .map(|i| i.as_str().map(str::to_string))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| {
                        ApiError::invalid(format!("{at}.filter.{key}: must be a string or strings"))
                    })?,
                _ => {
                    return Err(ApiError::invalid(format!(
                        "{at}.filter.{key}: must be a string or strings"
                    )))
                }
            };
            apply_filter(&mut query, key, values, &format!("{at}.filter"))?;
        }
    }
    Ok(query)
}

/// A parsed `POST /search`.
#[derive(Debug)]
pub struct Search {
    /// The query.
    pub query: Query,
    /// Results per page.
    pub page_size: usize,
    /// Where the page starts (from `pageToken`).
    pub offset: usize,
}

fn page_size(v: Option<&Value>, default: usize, at: &str) -> Result<usize, ApiError> {
    match v {
        None => Ok(default),
        Some(v) => match v.as_u64() {
            Some(n) if (1..=MAX_PAGE as u64).contains(&n) => Ok(n as usize),
            _ => Err(ApiError::invalid(format!(
                "{at}: must be an integer from 1 to {MAX_PAGE}"
            ))),
        },
    }
}

/// Parse a `POST /search` body.
pub fn search_request(body: &[u8]) -> Result<Search, ApiError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid(format!("request body: not JSON: {e}")))?;
    let m = object(&v, "request body")?;
    only_keys(m, &["query", "federation", "pageSize", "pageToken"], "")?;
    let query = query_model(
        m.get("query")
            .ok_or_else(|| ApiError::invalid("query: required"))?,
        "query",
        true,
    )?;
    match m.get("federation") {
        None => {}
        Some(Value::String(f)) if ["auto", "referrals", "none"].contains(&f.as_str()) => {}
        Some(_) => {
            return Err(ApiError::invalid(
                "federation: must be one of auto, referrals, none",
            ))
        }
    }
    let offset = match m.get("pageToken") {
        None => 0,
        Some(Value::String(t)) => super::token::decode_offset(t)
            .ok_or_else(|| ApiError::invalid("pageToken: not a token this registry issued"))?,
        Some(_) => return Err(ApiError::invalid("pageToken: must be a string")),
    };
    Ok(Search {
        query,
        page_size: page_size(m.get("pageSize"), 10, "pageSize")?,
        offset,
    })
}

/// A parsed `POST /explore`.
#[derive(Debug)]
pub struct Explore {
    /// The query narrowing what is counted.
    pub query: Query,
    /// The facets asked for, in order.
    pub facets: Vec<FacetRequest>,
}

/// One facet of a `POST /explore`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FacetRequest {
    /// The field path as the request named it (the answer's key).
    pub path: String,
    /// What it counts.
    pub key: FacetKey,
    /// Most buckets shown (`limit`, default 20).
    pub limit: usize,
    /// Fewest cards a bucket needs to be shown (`minCount`, default 1).
    pub min_count: usize,
}

/// What a facet counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FacetKey {
    /// The entry type (always the A2A card type here).
    Type,
    /// One of the engine's fields.
    Field(Field),
}

/// Parse a `POST /explore` body.
pub fn explore_request(body: &[u8]) -> Result<Explore, ApiError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid(format!("request body: not JSON: {e}")))?;
    let m = object(&v, "request body")?;
    only_keys(m, &["query", "resultType"], "")?;
    let query = match m.get("query") {
        Some(q) => query_model(q, "query", false)?,
        None => Query::default(),
    };
    let rt = object(
        m.get("resultType")
            .ok_or_else(|| ApiError::invalid("resultType: required"))?,
        "resultType",
    )?;
    only_keys(rt, &["facets"], "resultType")?;
    let list = rt
        .get("facets")
        .and_then(Value::as_array)
        .ok_or_else(|| ApiError::invalid("resultType.facets: required, an array"))?;
    let mut facets = Vec::new();
    for (i, f) in list.iter().enumerate() {
        let at = format!("resultType.facets[{i}]");
        let fm = object(f, &at)?;
        only_keys(fm, &["field", "limit", "minCount"], &at)?;
        let path = fm
            .get("field")
            .and_then(Value::as_str)
            .ok_or_else(|| ApiError::invalid(format!("{at}.field: required, a string")))?;
        let key = match path {
            "type" => FacetKey::Type,
            other => FacetKey::Field(Field::from_ard(other).ok_or_else(|| {
                ApiError::invalid(format!(
                    "{at}.field: {other} is not a field this registry counts"
                ))
            })?),
        };
        let number = |name: &str, default: usize| -> Result<usize, ApiError> {
            match fm.get(name) {
                None => Ok(default),
                Some(v) => v.as_u64().map(|n| n as usize).ok_or_else(|| {
                    ApiError::invalid(format!("{at}.{name}: must be a non-negative integer"))
                }),
            }
        };
        facets.push(FacetRequest {
            path: path.to_string(),
            key,
            limit: number("limit", 20)?,
            min_count: number("minCount", 1)?,
        });
    }
    Ok(Explore { query, facets })
}

/// A parsed `GET /agents`.
#[derive(Debug)]
pub struct List {
    /// The filter.
    pub query: Query,
    /// `(field, descending)`; `None`: identifier order.
    pub order: Option<(String, bool)>,
    /// Entries per page.
    pub page_size: usize,
    /// Where the page starts.
    pub offset: usize,
}

/// Parse the `filter` expression of `GET /agents`: `path = 'value'` terms joined by `AND`;
/// `OR` between terms of one path. Values may be single- or double-quoted.
pub fn parse_filter(expr: &str) -> Result<Query, ApiError> {
    let mut query = Query::default();
    let bad = |why: &str| ApiError::invalid(format!("filter: {why}"));
    for clause in split_outside_quotes(expr, "AND") {
        let mut key: Option<String> = None;
        let mut values = Vec::new();
        for term in split_outside_quotes(&clause, "OR") {
            let (k, v) = term
                .split_once('=')
                .ok_or_else(|| bad(&format!("{:?}: expected path = 'value'", term.trim())))?;
            let k = k.trim().to_string();
            let v = v.trim();
            let v = v
                .strip_prefix('\'')
                .and_then(|v| v.strip_suffix('\''))
                .or_else(|| v.strip_prefix('"').and_then(|v| v.strip_suffix('"')))
                .unwrap_or(v);
            if k.is_empty() || v.is_empty() {
                return Err(bad(&format!("{:?}: expected path = 'value'", term.trim())));
            }
            if key.as_ref().is_some_and(|existing| *existing != k) {
                return Err(bad("OR joins terms of one path only"));
            }
            key = Some(k);
            values.push(v.to_string());
        }
        if let Some(k) = key {
            apply_filter(&mut query, &k, values, "filter")?;
        }
    }
    Ok(query)
}

fn split_outside_quotes(s: &str, word: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut quote: Option<char> = None;
    let tokens: Vec<&str> = s.split(' ').collect();
    for tok in tokens {
        for c in tok.chars() {
            match quote {
                Some(q) if c == q => quote = None,
                None if c == '\'' || c == '"' => quote = Some(c),
                _ => {}
            }
        }
        if quote.is_none() && tok.eq_ignore_ascii_case(word) && !current.trim().is_empty() {
            parts.push(std::mem::take(&mut current));
            continue;
        }
        if !current.is_empty() {
            current.push(' ');
        }
        current.push_str(tok);
    }
    if !current.trim().is_empty() {
        parts.push(current);
    }
    parts
}

/// Parse the parameters of `GET /agents`.
pub fn list_request(params: &BTreeMap<String, Vec<String>>) -> Result<List, ApiError> {
    if let Some(k) = params
        .keys()
        .find(|k| !["filter", "orderBy", "pageSize", "pageToken"].contains(&k.as_str()))
    {
        return Err(ApiError::invalid(format!("{k}: unknown parameter")));
    }
    let one = |k: &str| -> Result<Option<&String>, ApiError> {
        match params.get(k).map(Vec::as_slice) {
            None | Some([]) => Ok(None),
            Some([v]) => Ok(Some(v)),
            Some(_) => Err(ApiError::invalid(format!("{k}: given more than once"))),
        }
    };
    let query = match one("filter")? {
        Some(f) => parse_filter(f)?,
        None => Query::default(),
    };
    let order = match one("orderBy")? {
        None => None,
        Some(o) => {
            let mut words = o.split_whitespace();
            let field = words.next().unwrap_or_default().to_string();
            let desc = match words.next().map(str::to_ascii_uppercase).as_deref() {
                None | Some("ASC") => false,
                Some("DESC") => true,
                Some(other) => {
                    return Err(ApiError::invalid(format!(
                        "orderBy: {other}: expected ASC or DESC"
                    )))
                }
            };
            if !["identifier", "displayName", "updatedAt"].contains(&field.as_str()) {
                return Err(ApiError::invalid(format!(
                    "orderBy: {field}: expected identifier, displayName or updatedAt"
                )));
            }
            Some((field, desc))
        }
    };
    let page_size = match one("pageSize")? {
        None => 20,
        Some(v) => match v.parse::<usize>() {
            Ok(n) if (1..=MAX_PAGE).contains(&n) => n,
            _ => {
                return Err(ApiError::invalid(format!(
                    "pageSize: must be an integer from 1 to {MAX_PAGE}"
                )))
            }
        },
    };
    let offset = match one("pageToken")? {
        None => 0,
        Some(t) => super::token::decode_offset(t)
            .ok_or_else(|| ApiError::invalid("pageToken: not a token this registry issued"))?,
    };
    Ok(List {
        query,
        order,
        page_size,
        offset,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_bodies_are_checked_field_by_field() {
        let ok = search_request(br#"{"query":{"text":"weather","filter":{"tags":["a","b"],"metadata.provider":"Acme"}},"pageSize":5,"federation":"none"}"#).unwrap();
        assert_eq!(ok.page_size, 5);
        assert_eq!(ok.query.filters[&Field::Tag], ["a", "b"]);
        assert_eq!(ok.query.filters[&Field::Provider], ["Acme"]);
        for (body, needle) in [
            (&br#"{"query":{}}"#[..], "query.text: required"),
            (
                br#"{"query":{"text":"x"},"extra":1}"#,
                "extra: unknown field",
            ),
            (
                br#"{"query":{"text":"x","filter":{"colour":"red"}}}"#,
                "query.filter.colour",
            ),
            (br#"{"query":{"text":"x"},"pageSize":500}"#, "pageSize"),
            (br#"{"query":{"text":"x"},"pageToken":"junk"}"#, "pageToken"),
            (br#"not json"#, "request body"),
        ] {
            let err = search_request(body).unwrap_err();
            assert!(
                err.message.contains(needle),
                "{}: {}",
                String::from_utf8_lossy(body),
                err.message
            );
            assert_eq!(err.code, "INVALID_ARGUMENT");
        }
    }

    #[test]
    fn list_filters_parse_and_and_or() {
        let q = parse_filter("tags = 'a b' OR tags = \"c\" AND metadata.namespace = team AND type = 'application/a2a-agent-card+json'").unwrap();
        assert_eq!(q.filters[&Field::Tag], ["a b", "c"]);
        assert_eq!(q.filters[&Field::Namespace], ["team"]);
        assert!(!q.nothing);
        assert!(
            parse_filter("type = 'application/mcp-server-card+json'")
                .unwrap()
                .nothing
        );
        assert!(parse_filter("tags = a OR metadata.namespace = b").is_err());
        assert!(parse_filter("nonsense").is_err());
        assert!(parse_filter("colour = red")
            .unwrap_err()
            .message
            .contains("colour"));
    }

    #[test]
    fn a_manifest_lists_at_most_its_bound_and_its_registry_entry_says_how_many_there_are() {
        let entries: Vec<Entry> = (0..7)
            .map(|i| {
                let placement = crate::directory::entry::Placement {
                    namespace: "team".into(),
                    name: format!("a{i}"),
                    host: format!("a{i}.example.com"),
                    url: format!("https://a{i}.example.com/.well-known/agent-card.json"),
                    ..Default::default()
                };
                let card = json!({"name": format!("A{i}"), "description": "d", "version": "1",
                    "supportedInterfaces": [{"url": format!("https://a{i}.example.com/a2a"),
                        "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
                    "capabilities": {}, "defaultInputModes": ["text/plain"],
                    "defaultOutputModes": ["text/plain"],
                    "skills": [{"id": "s", "name": "S", "description": "d", "tags": ["t"]}]});
                Entry::build(placement, card.to_string().into()).unwrap()
            })
            .collect();
        let info = RegistryInfo {
            identifier: "urn:air:example.com:registry:r".into(),
            display_name: "R",
            description: None,
            base_url: "https://dir.example.com".into(),
        };
        let full = manifest_of_at_most(&info, entries.iter(), 10);
        let list = full["entries"].as_array().unwrap();
        assert_eq!(list.len(), 8);
        assert!(list[7].get("metadata").is_none());
        let cut = manifest_of_at_most(&info, entries.iter(), 3);
        let list = cut["entries"].as_array().unwrap();
        assert_eq!(list.len(), 4);
        assert_eq!(list[3]["type"], TYPE_REGISTRY);
        assert_eq!(list[3]["url"], "https://dir.example.com/search");
        assert_eq!(
            list[3]["metadata"],
            json!({"complete": false, "listedEntries": 3, "totalEntries": 7})
        );
    }
}
