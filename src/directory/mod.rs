//! The AgentDirectory registry: the cluster's published cards as a queryable catalog.
//!
//! Data flow: the cluster feed ([`crate::serve::source_cluster`]) keeps one [`entry::Entry`]
//! per served card and, when cards, namespaces or directories change, [`sites`] rebuilds each
//! directory's [`sites::site::Site`] — the cards [`select`] lists, indexed by
//! [`query::Catalog`] — and hands it to [`sites::hosted::Hosted`], which every request reads
//! (the served cards are in [`crate::index::Index`], below both the card server and the
//! directory). Requests to a directory host go to [`http::handle`], which checks the caller
//! ([`access`], in Kubernetes mode), parses the request into an engine query ([`ard`] for the
//! ARD registry API and manifest, [`native`] for `/v1`), runs it, and writes the answer with
//! caching headers; a 200 is kept in [`cache`], keyed by the snapshot, the caller's visibility
//! and the query, and the same request to the same snapshot is answered from there.
//!
//! Beside the local cards, [`federation`] lists other registries' (its sync tasks read the
//! upstreams). The change feed is [`feed`]: the log, its cursors and pages, the log read back
//! from its ConfigMaps ([`feed::persisted`]) and its HTTP answers and streams
//! ([`feed::changes`]).

pub mod access;
pub mod ard;
pub mod cache;
pub mod entry;
pub mod federation;
pub mod feed;
pub mod governance;
pub mod html;
pub mod http;
pub mod mcp;
pub mod native;
mod postings;
pub mod query;
pub mod select;
pub mod sites;
mod text;
pub mod token;

/// An error answer of the registry APIs: `{"errorCode", "message"}` with its HTTP status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status.
    pub status: u16,
    /// ARD error code (`INVALID_ARGUMENT`, `UNAUTHENTICATED`, `NOT_FOUND`, ...).
    pub code: &'static str,
    /// What is wrong, naming the parameter or field.
    pub message: String,
}

impl ApiError {
    /// 400 `INVALID_ARGUMENT`.
    pub fn invalid(message: impl Into<String>) -> Self {
        ApiError {
            status: 400,
            code: "INVALID_ARGUMENT",
            message: message.into(),
        }
    }

    /// 404 `NOT_FOUND`.
    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError {
            status: 404,
            code: "NOT_FOUND",
            message: message.into(),
        }
    }

    /// 401 `UNAUTHENTICATED`.
    pub fn unauthenticated(message: impl Into<String>) -> Self {
        ApiError {
            status: 401,
            code: "UNAUTHENTICATED",
            message: message.into(),
        }
    }

    /// 403 `PERMISSION_DENIED`.
    pub fn forbidden(message: impl Into<String>) -> Self {
        ApiError {
            status: 403,
            code: "PERMISSION_DENIED",
            message: message.into(),
        }
    }

    /// 503 `UNAVAILABLE`: the API server did not answer in time (the caller may retry).
    pub fn unavailable(message: impl Into<String>) -> Self {
        ApiError {
            status: 503,
            code: "UNAVAILABLE",
            message: message.into(),
        }
    }

    /// 500 `INTERNAL`.
    pub fn internal(message: impl Into<String>) -> Self {
        ApiError {
            status: 500,
            code: "INTERNAL",
            message: message.into(),
        }
    }

    /// The JSON body.
    pub fn body(&self) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({"errorCode": self.code, "message": self.message}))
            .unwrap_or_default()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeMap;

    /// Query parameters as the HTTP layer parses them, from `(key, value)` pairs.
    pub fn params(pairs: &[(&str, &str)]) -> BTreeMap<String, Vec<String>> {
        let mut m: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (k, v) in pairs {
            m.entry(k.to_string()).or_default().push(v.to_string());
        }
        m
    }
}
