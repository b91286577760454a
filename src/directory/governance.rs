//! A directory's governance views: the cards that wait for an approval (to approvers only)
//! and each listed card's published revisions.
//!
//! Data flow: `GET /v1/agents?approval=pending|voided|rejected` (and the web page with the
//! same parameter) → the caller authenticated and asked whether it may create
//! AgentCardApprovals ([`Authorizer::may_approve`]) → the site's waiting cards
//! ([`crate::directory::sites::site::Waiting`], from the verdicts the lease holder wrote in
//! each card's status) filtered and rendered ([`waiting`], pure). `GET
//! /v1/agents/{namespace}/{name}/revisions[/{n}]` → the card must be listed and visible to the
//! caller, as for `/v1/agents/{namespace}/{name}` → its ControllerRevisions read from the API
//! server on demand (they are not kept in memory: most are never asked for) → checked (owned
//! by that card, bytes matching their hash) → the list ([`revision_list`], pure) or the exact
//! bytes served then, signatures included.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::ControllerRevision;
use kube::api::{Api, ListParams};
use kube::ResourceExt;
use serde_json::{json, Value};

use super::access::Authorizer;
use super::native;
use super::query::Visibility;
use super::sites::site::{Site, Waiting};
use super::ApiError;
use crate::crd::revision::{RevisionData, LABEL_CARD, LABEL_CARD_UID};
use crate::crd::ApprovalState;

/// The `approval` values a waiting list is asked for.
const STATES: [&str; 3] = ["pending", "voided", "rejected"];

/// `/v1/agents/{namespace}/{name}/revisions` (`None`) or `…/revisions/{n}` (`Some(n)`).
pub fn revisions_path(rest: &str) -> Option<(String, String, Option<i64>)> {
    let tail = rest.strip_prefix("/v1/agents/")?;
    let mut parts = tail.split('/');
    let (ns, name, word) = (parts.next()?, parts.next()?, parts.next()?);
    if word != "revisions" || ns.is_empty() || name.is_empty() {
        return None;
    }
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(s)
            .decode_utf8_lossy()
            .into_owned()
    };
    let n = match parts.next() {
        None => None,
        Some(n) => Some(n.parse::<i64>().ok().filter(|n| *n > 0)?),
    };
    if parts.next().is_some() {
        return None;
    }
    Some((decode(ns), decode(name), n))
}

/// Whether `state` is what `wanted` (an `approval` parameter value) asks for: `pending` is
/// every card waiting for a decision (never approved, or voided since).
fn wanted(state: ApprovalState, wanted: &str) -> bool {
    match wanted {
        "pending" => matches!(state, ApprovalState::Pending | ApprovalState::Voided),
        other => state.as_str() == other,
    }
}

/// The `approval` parameter of `params`, checked.
pub fn approval_param(params: &BTreeMap<String, Vec<String>>) -> Result<Option<String>, ApiError> {
    let Some(values) = params.get("approval") else {
        return Ok(None);
    };
    match values.as_slice() {
        [v] if STATES.contains(&v.as_str()) => Ok(Some(v.clone())),
        _ => Err(ApiError::invalid(format!(
            "approval: must be one of {}",
            STATES.join(", ")
        ))),
    }
}

/// The site's cards waiting as `state` asks, for an approver.
pub fn waiting_of<'a>(site: &'a Site, state: &str) -> Vec<&'a Waiting> {
    site.waiting
        .iter()
        .filter(|w| wanted(w.approval.state, state))
        .collect()
}

/// The JSON list of `items`: each card as `/v1/agents` shows it, with its verdict (state,
/// message, what changed since the approved revision).
pub fn waiting(items: &[&Waiting]) -> Value {
    let shown: Vec<Value> = items
        .iter()
        .map(|w| {
            let mut v = native::item(&w.entry);
            v["_meta"]["agentcard.dev/directory"]["approval"] = approval_json(w);
            v
        })
        .collect();
    json!({"agents": shown, "total": items.len()})
}

/// A waiting card's verdict as the APIs show it.
pub fn approval_json(w: &Waiting) -> Value {
    let a = &w.approval;
    json!({
        "state": a.state.as_str(),
        "message": a.message,
        "changes": a.changes,
        "approval": a.approval,
        "approvedHash": a.approved_hash,
        "contentHash": a.content_hash,
        "since": a.since,
    })
}

/// Whether the caller (its `authorization` header) may approve; 401 without a token the API
/// server accepts, 403 when it may not.
pub async fn check_approver(
    authorizer: Option<&Authorizer>,
    authorization: Option<&str>,
) -> Result<(), ApiError> {
    let authorizer = authorizer
        .ok_or_else(|| ApiError::internal("this server cannot check Kubernetes identities"))?;
    let caller = authorizer.caller(authorization).await?;
    if authorizer.may_approve(&caller).await? {
        Ok(())
    } else {
        Err(ApiError::forbidden(
            "approval views are for callers who may create AgentCardApprovals (the agentcard-approver ClusterRole)",
        ))
    }
}

/// A revision as the list shows it.
struct Shown {
    number: i64,
    data: RevisionData,
}

/// The revisions of `revs` that are the card `name`'s own and hold the bytes their hash
/// names, newest first.
fn checked(name: &str, revs: Vec<ControllerRevision>) -> Vec<Shown> {
    let mut out: Vec<Shown> = revs
        .into_iter()
        .filter(|r| {
            r.owner_references()
                .iter()
                .any(|o| o.kind == "AgentCard" && o.name == name && o.controller == Some(true))
        })
        .filter_map(|r| {
            let data = RevisionData::of(&r)?;
            (crate::contract::content_hash(data.document.as_bytes()) == data.content_hash)
                .then_some(Shown {
                    number: r.revision,
                    data,
                })
        })
        .collect();
    out.sort_by_key(|s| std::cmp::Reverse(s.number));
    out
}

/// The list of a card's revisions (`base`: the URL path of the list, for each one's link).
fn revision_list(base: &str, shown: &[Shown]) -> Value {
    let items: Vec<Value> = shown
        .iter()
        .map(|s| {
            json!({
                "revision": s.number,
                "contentHash": s.data.content_hash,
                "publishedAt": s.data.published_at,
                "previous": s.data.previous,
                "findings": s.data.findings,
                "compared": s.data.compared,
                "url": format!("{base}/{}", s.number),
            })
        })
        .collect();
    json!({"revisions": items, "total": shown.len()})
}

/// `GET …/revisions[/{n}]` of the card `namespace`/`name`: the body (the list, or the exact
/// bytes of revision `n`), once the card is found listed and visible to the caller.
pub async fn revisions(
    site: &Site,
    authorizer: Option<&Authorizer>,
    visible: Visibility<'_>,
    (namespace, name, n): (&str, &str, Option<i64>),
) -> Result<Vec<u8>, ApiError> {
    if site.catalog.get_card(namespace, name, visible).is_none() {
        return Err(ApiError::not_found(format!("no agent {namespace}/{name}")));
    }
    let authorizer = authorizer.ok_or_else(|| {
        ApiError::unavailable("this server does not read the cluster's revisions")
    })?;
    let api: Api<ControllerRevision> = Api::namespaced(authorizer.client().clone(), namespace);
    let selector = if name.len() <= 63 {
        format!("{LABEL_CARD}={name}")
    } else {
        LABEL_CARD_UID.to_string()
    };
    let revs = api
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|e| ApiError::unavailable(format!("reading the revisions: {e}")))?
        .items;
    let shown = checked(name, revs);
    match n {
        None => {
            let base = format!("{}{}", site.prefix, native::revisions_of(namespace, name));
            Ok(serde_json::to_vec(&revision_list(&base, &shown)).unwrap_or_default())
        }
        Some(n) => shown
            .into_iter()
            .find(|s| s.number == n)
            .map(|s| s.data.document.into_bytes())
            .ok_or_else(|| ApiError::not_found(format!("no revision {n} of {namespace}/{name}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
    use k8s_openapi::apimachinery::pkg::runtime::RawExtension;

    #[test]
    fn revision_paths_are_parsed_strictly() {
        assert_eq!(
            revisions_path("/v1/agents/ns/c/revisions"),
            Some(("ns".into(), "c".into(), None))
        );
        assert_eq!(
            revisions_path("/v1/agents/ns/c/revisions/3"),
            Some(("ns".into(), "c".into(), Some(3)))
        );
        for bad in [
            "/v1/agents/ns/c",
            "/v1/agents/ns/c/revisions/0",
            "/v1/agents/ns/c/revisions/x",
            "/v1/agents/ns/c/revisions/1/2",
            "/v1/agents//c/revisions",
        ] {
            assert_eq!(revisions_path(bad), None, "{bad}");
        }
    }

    fn rev(n: i64, owner: &str, document: &str, hash: &str) -> ControllerRevision {
        let data = json!({"contentHash": hash, "publishedAt": "2026-01-01T00:00:00Z",
            "document": document, "spec": {"publish": {"host": "a.example"}}});
        ControllerRevision {
            metadata: ObjectMeta {
                name: Some(format!("c-{n}")),
                owner_references: Some(vec![OwnerReference {
                    kind: "AgentCard".into(),
                    name: owner.into(),
                    controller: Some(true),
                    ..Default::default()
                }]),
                ..Default::default()
            },
            data: Some(RawExtension(data)),
            revision: n,
        }
    }

    #[test]
    fn only_the_cards_own_revisions_holding_their_bytes_are_shown_newest_first() {
        let doc = |v: &str| format!("{{\"version\":\"{v}\"}}");
        let hash = |v: &str| crate::contract::content_hash(doc(v).as_bytes());
        let revs = vec![
            rev(1, "c", &doc("1"), &hash("1")),
            rev(2, "c", &doc("2"), &hash("2")),
            // Another card's, and one whose bytes are not what its hash says.
            rev(3, "other", &doc("3"), &hash("3")),
            rev(4, "c", &doc("4"), &hash("5")),
        ];
        let shown = checked("c", revs);
        assert_eq!(shown.iter().map(|s| s.number).collect::<Vec<_>>(), [2, 1]);
        let list = revision_list("/v1/agents/ns/c/revisions", &shown);
        assert_eq!(list["total"], 2);
        assert_eq!(list["revisions"][0]["url"], "/v1/agents/ns/c/revisions/2");
        assert_eq!(list["revisions"][1]["contentHash"], hash("1"));
    }

    #[test]
    fn the_approval_parameter_is_checked() {
        let p = |v: &str| crate::directory::tests::params(&[("approval", v)]);
        assert_eq!(
            approval_param(&p("pending")).unwrap().as_deref(),
            Some("pending")
        );
        assert_eq!(approval_param(&p("approved")).unwrap_err().status, 400);
        assert!(wanted(ApprovalState::Voided, "pending"));
        assert!(!wanted(ApprovalState::Rejected, "pending"));
        assert!(wanted(ApprovalState::Rejected, "rejected"));
    }
}
