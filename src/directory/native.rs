//! The native query API for people with curl: `GET /v1/agents` (filters as repeatable query
//! parameters, `q`, `limit`, `cursor`), `GET /v1/agents/{namespace}/{name}`, `GET /v1/facets`.
//! Items carry the signed card verbatim plus where it is published.

use std::collections::BTreeMap;

use serde_json::{json, value::RawValue, Value};

use super::entry::{Entry, Field};
use super::query::{Buckets, Page, Query};
use super::ApiError;

/// Entries per page when `limit` is not given.
pub const DEFAULT_LIMIT: usize = 20;
/// Most entries per page.
pub const MAX_LIMIT: usize = 100;

/// A parsed `GET /v1/agents` or `GET /v1/facets`.
#[derive(Debug)]
pub struct Request {
    /// The engine query.
    pub query: Query,
    /// Page size.
    pub limit: usize,
    /// Identifier after which the page starts.
    pub after: Option<String>,
}

/// Parse native parameters; `paging` allows `limit` and `cursor` (listings, not facets).
pub fn request(params: &BTreeMap<String, Vec<String>>, paging: bool) -> Result<Request, ApiError> {
    let mut query = Query::default();
    let mut limit = DEFAULT_LIMIT;
    let mut after = None;
    for (key, values) in params {
        let single = || -> Result<&String, ApiError> {
            match values.as_slice() {
                [v] => Ok(v),
                _ => Err(ApiError::invalid(format!("{key}: given more than once"))),
            }
        };
        match key.as_str() {
            "q" => query.text = Some(single()?.clone()).filter(|t| !t.trim().is_empty()),
            "limit" if paging => {
                limit = match single()?.parse::<usize>() {
                    Ok(n) if (1..=MAX_LIMIT).contains(&n) => n,
                    _ => {
                        return Err(ApiError::invalid(format!(
                            "limit: must be an integer from 1 to {MAX_LIMIT}"
                        )))
                    }
                }
            }
            "cursor" if paging => {
                after = Some(super::token::decode_after(single()?).ok_or_else(|| {
                    ApiError::invalid("cursor: not a cursor this directory issued")
                })?)
            }
            other => match Field::from_param(other) {
                Some(field) => {
                    if values.iter().any(|v| v.is_empty()) {
                        return Err(ApiError::invalid(format!("{other}: empty value")));
                    }
                    query.filters.insert(field, values.clone());
                }
                None => {
                    return Err(ApiError::invalid(format!(
                        "{other}: unknown parameter (known: {}, q{})",
                        Field::ALL.map(|f| f.param()).join(", "),
                        if paging { ", limit, cursor" } else { "" }
                    )))
                }
            },
        }
    }
    Ok(Request {
        query,
        limit,
        after,
    })
}

/// One item: `{"card": <signed card verbatim>, "_meta": {"agentcard.dev/directory": {...}}}`.
pub fn item(e: &Entry) -> Value {
    let card: Box<RawValue> = std::str::from_utf8(&e.body)
        .ok()
        .and_then(|s| RawValue::from_string(s.to_string()).ok())
        .unwrap_or_else(|| RawValue::from_string("null".into()).unwrap_or_default());
    let mut v = json!({
        "card": card,
        "_meta": {"agentcard.dev/directory": {
            "identifier": e.identifier,
            "namespace": e.placement.namespace,
            "name": e.placement.name,
            "url": e.placement.url,
            "contentHash": e.placement.content_hash,
            "keyId": e.placement.key_id,
            "updatedAt": e.placement.updated_at,
            "reachable": e.placement.reachable_str(),
            "lifecycle": lifecycle_json(&e.placement),
        }}
    });
    if let Some(d) = &e.placement.drift {
        v["_meta"]["agentcard.dev/directory"]["drift"] =
            json!({"state": d.state, "message": d.message});
    }
    if let Some(n) = e.placement.revision.filter(|_| e.origin.is_none()) {
        v["_meta"]["agentcard.dev/directory"]["revision"] = json!(n);
        v["_meta"]["agentcard.dev/directory"]["revisions"] = json!(revisions_path(&e.placement));
    }
    if let Some(o) = &e.origin {
        v["_meta"]["agentcard.dev/directory"]["origin"] =
            crate::directory::feed::changes::origin_json(o);
    }
    v
}

/// Where a local card's revisions are listed, under the registry's base URL.
pub fn revisions_path(p: &super::entry::Placement) -> String {
    revisions_of(&p.namespace, &p.name)
}

/// `/v1/agents/{namespace}/{name}/revisions`, each segment percent-encoded (DNS names stay as
/// they are).
pub fn revisions_of(namespace: &str, name: &str) -> String {
    const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'.')
        .remove(b'_')
        .remove(b'~');
    let enc = |s: &str| percent_encoding::utf8_percent_encode(s, SEGMENT).to_string();
    format!("/v1/agents/{}/{}/revisions", enc(namespace), enc(name))
}

/// An entry's lifecycle: `{"state": "Active"}`, or the operator's resolved lifecycle
/// (`state`, `since`, `message`, `sunset`, `successor`, `successorUrl`, `goneUntil`).
pub fn lifecycle_json(p: &super::entry::Placement) -> Value {
    match &p.lifecycle {
        Some(l) => serde_json::to_value(l).unwrap_or_else(|_| json!({"state": "Active"})),
        None => json!({"state": "Active"}),
    }
}

/// The envelope of a page: `{"agents": [...], "metadata": {"count", "total", "nextCursor"?}}`.
pub fn page(p: &Page) -> Value {
    let mut metadata = json!({"count": p.items.len(), "total": p.total});
    if let Some(after) = &p.next_after {
        metadata["nextCursor"] = json!(super::token::encode_after(after));
    }
    json!({"agents": p.items.iter().map(|e| item(e)).collect::<Vec<_>>(), "metadata": metadata})
}

/// `{"facets": {"skill": [{"value", "count"}], ...}, "metadata": {"total"}}`.
pub fn facets(counts: &BTreeMap<Field, Buckets>, total: usize) -> Value {
    let facets: serde_json::Map<String, Value> = counts
        .iter()
        .map(|(f, buckets)| {
            (
                f.param().to_string(),
                json!(buckets
                    .iter()
                    .map(|(v, c)| json!({"value": v, "count": c}))
                    .collect::<Vec<_>>()),
            )
        })
        .collect();
    json!({"facets": facets, "metadata": {"total": total}})
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::directory::tests::params;

    #[test]
    fn parameters_are_checked_by_name() {
        let r = request(
            &params(&[("skill", "a"), ("skill", "b"), ("tag", "t"), ("limit", "5")]),
            true,
        )
        .unwrap();
        assert_eq!(r.query.filters[&Field::Skill], ["a", "b"]);
        assert_eq!(r.limit, 5);
        for (p, needle) in [
            (params(&[("colour", "red")]), "colour: unknown parameter"),
            (params(&[("limit", "0")]), "limit"),
            (params(&[("limit", "101")]), "limit"),
            (params(&[("cursor", "bogus")]), "cursor"),
            (params(&[("q", "a"), ("q", "b")]), "q: given more than once"),
        ] {
            let e = request(&p, true).unwrap_err();
            assert!(e.message.contains(needle), "{}", e.message);
        }
        assert!(request(&params(&[("limit", "5")]), false).is_err());
    }
}
