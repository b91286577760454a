//! Revisions: every content hash a card publishes kept as an immutable `ControllerRevision`
//! in the card's namespace, owned by the card (they go with it), numbered 1, 2, … in the
//! order published.
//!
//! Data flow: after [`super::apply`] wrote new bytes (the status does not report this hash as
//! a revision yet), a card's first revision is created as number 1; for a later one the card's
//! revisions are listed by its uid label, and the hash's revision is
//! the existing one (a retry after a failed status write) or a new one ([`revision_object`]:
//! pure) holding the exact bytes served, with their signatures, the spec that made them, when
//! they were published and the breaking-change findings against the revision before. Past
//! `spec.publish.revisionHistoryLimit` (default 10) the oldest go, except a revision an
//! approval in the status names. A card whose status already reports the hash costs no API
//! call. The card server reads them on demand for `/v1/agents/{ns}/{name}/revisions`; the
//! CLI's `revisions` prints them.

use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Resource, ResourceExt};

use super::build::Built;
use super::compatibility::Compared;
use crate::contract::KEY_CARD;
use crate::controller::error::Error;
use crate::crd::revision::{RevisionData, ANN_CONTENT_HASH, LABEL_CARD, LABEL_CARD_UID};
use crate::crd::AgentCard;

/// Revisions kept without `spec.publish.revisionHistoryLimit`.
pub const DEFAULT_HISTORY: i64 = 10;

/// The name of the revision of `card_name` with `hash`.
pub fn revision_name(card_name: &str, hash: &str) -> String {
    let stem: String = card_name.chars().take(240).collect();
    format!("{stem}-{}", &hash[..hash.len().min(10)])
}

/// The revision object for `built` of `card`, numbered `number`, after `previous`.
pub fn revision_object(
    card: &AgentCard,
    built: &Built,
    number: i64,
    previous: Option<&str>,
) -> ControllerRevision {
    let document = built
        .configmap
        .data
        .as_ref()
        .and_then(|d| d.get(KEY_CARD))
        .cloned()
        .unwrap_or_default();
    let (findings, compared) = match &built.breaking {
        Compared::Changed(found) => (found.iter().map(ToString::to_string).collect(), true),
        Compared::Resigned => (Vec::new(), true),
        Compared::Unchanged => (Vec::new(), previous.is_none()),
        Compared::Unknown => (Vec::new(), false),
    };
    let data = RevisionData {
        content_hash: built.content_hash.clone(),
        published_at: built.served.published_at.clone(),
        document,
        spec: card.spec.clone(),
        previous: previous.map(str::to_string),
        findings,
        compared,
    };
    let name = card.name_any();
    let mut labels = std::collections::BTreeMap::from([(
        LABEL_CARD_UID.to_string(),
        card.uid().unwrap_or_default(),
    )]);
    if name.len() <= 63 {
        labels.insert(LABEL_CARD.to_string(), name.clone());
    }
    ControllerRevision {
        metadata: ObjectMeta {
            name: Some(revision_name(&name, &built.content_hash)),
            namespace: card.namespace(),
            labels: Some(labels),
            annotations: Some(std::collections::BTreeMap::from([(
                ANN_CONTENT_HASH.to_string(),
                built.content_hash.clone(),
            )])),
            owner_references: Some(vec![OwnerReference {
                api_version: AgentCard::api_version(&()).to_string(),
                kind: AgentCard::kind(&()).to_string(),
                name,
                uid: card.uid().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: Some(false),
            }]),
            ..Default::default()
        },
        data: serde_json::to_value(&data).ok().map(RawExtension),
        revision: number,
    }
}

/// The revisions to delete from `revisions` (sorted oldest first) to keep `limit`, never one
/// whose hash is in `keep`.
pub fn pruned<'a>(
    revisions: &'a [ControllerRevision],
    limit: i64,
    keep: &BTreeSet<String>,
) -> Vec<&'a ControllerRevision> {
    let limit = usize::try_from(limit.max(1)).unwrap_or(1);
    let over = revisions.len().saturating_sub(limit);
    revisions
        .iter()
        .take(over)
        .filter(|r| {
            r.annotations()
                .get(ANN_CONTENT_HASH)
                .is_none_or(|h| !keep.contains(h))
        })
        .collect()
}

/// The card's revisions, oldest first.
pub async fn list(
    api: &Api<ControllerRevision>,
    uid: &str,
) -> Result<Vec<ControllerRevision>, kube::Error> {
    let mut revs = api
        .list(&ListParams::default().labels(&format!("{LABEL_CARD_UID}={uid}")))
        .await?
        .items;
    revs.sort_by_key(|r| r.revision);
    Ok(revs)
}

/// Record `built` (just applied) as a revision of `card` unless the status reports it as one
/// already: the revision number of the served bytes.
pub async fn record(client: &kube::Client, card: &AgentCard, built: &Built) -> Result<i64, Error> {
    let status = card.status.as_ref();
    if let Some(n) = status
        .filter(|s| s.content_hash.as_deref() == Some(built.content_hash.as_str()))
        .and_then(|s| s.revision)
    {
        return Ok(n);
    }
    let api: Api<ControllerRevision> =
        Api::namespaced(client.clone(), &card.namespace().unwrap_or_default());
    // A card that never published has no revisions to number after or prune: its first is
    // created without listing (a bulk publish pays one call per card, not two). One an
    // earlier pass made before its status write failed is found by name.
    if status.is_none_or(|s| s.revision.is_none() && s.content_hash.is_none()) {
        let obj = revision_object(card, built, 1, None);
        return match api.create(&PostParams::default(), &obj).await {
            Ok(created) => Ok(created.revision),
            Err(kube::Error::Api(e)) if e.code == 409 => {
                existing(&api, &obj, &built.content_hash).await
            }
            Err(e) => Err(e.into()),
        };
    }
    let uid = card.uid().unwrap_or_default();
    let mut revs = list(&api, &uid).await?;
    let hash_of = |r: &ControllerRevision| r.annotations().get(ANN_CONTENT_HASH).cloned();
    let number = match revs
        .iter()
        .find(|r| hash_of(r).as_deref() == Some(&built.content_hash))
    {
        Some(r) => r.revision,
        None => {
            let last = revs.last();
            let next = last.map_or(1, |r| r.revision + 1);
            let previous = status
                .and_then(|s| s.content_hash.clone())
                .or_else(|| last.and_then(hash_of));
            let obj = revision_object(card, built, next, previous.as_deref());
            match api.create(&PostParams::default(), &obj).await {
                Ok(created) => revs.push(created),
                // Made by an earlier pass that then failed: it holds these bytes.
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    return existing(&api, &obj, &built.content_hash).await;
                }
                Err(e) => return Err(e.into()),
            }
            next
        }
    };
    let limit = card
        .spec
        .publish
        .revision_history_limit
        .unwrap_or(DEFAULT_HISTORY);
    let keep: BTreeSet<String> = status
        .map(|s| {
            s.approvals
                .iter()
                .filter_map(|a| a.approved_hash.clone())
                .collect()
        })
        .unwrap_or_default();
    for old in pruned(&revs, limit, &keep) {
        match api.delete(&old.name_any(), &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(number)
}

/// The revision named as `obj` that already exists: its number, when it holds `hash`.
async fn existing(
    api: &Api<ControllerRevision>,
    obj: &ControllerRevision,
    hash: &str,
) -> Result<i64, Error> {
    let found = api
        .get(obj.metadata.name.as_deref().unwrap_or_default())
        .await?;
    if found
        .annotations()
        .get(ANN_CONTENT_HASH)
        .map(String::as_str)
        != Some(hash)
    {
        return Err(Error::Internal(format!(
            "ControllerRevision {} holds other content",
            found.name_any()
        )));
    }
    Ok(found.revision)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rev(n: i64, hash: &str) -> ControllerRevision {
        ControllerRevision {
            metadata: ObjectMeta {
                name: Some(format!("c-{n}")),
                annotations: Some([(ANN_CONTENT_HASH.to_string(), hash.to_string())].into()),
                ..Default::default()
            },
            data: None,
            revision: n,
        }
    }

    #[test]
    fn the_oldest_past_the_limit_go_but_an_approved_one_stays() {
        let revs: Vec<_> = (1..=5).map(|n| rev(n, &format!("h{n}"))).collect();
        let names = |v: Vec<&ControllerRevision>| v.iter().map(|r| r.revision).collect::<Vec<_>>();
        assert_eq!(names(pruned(&revs, 3, &BTreeSet::new())), vec![1, 2]);
        let keep = BTreeSet::from(["h1".to_string()]);
        assert_eq!(names(pruned(&revs, 3, &keep)), vec![2]);
        assert!(pruned(&revs, 10, &BTreeSet::new()).is_empty());
    }

    #[test]
    fn names_fit_and_end_with_the_hash() {
        let long = "a".repeat(253);
        let n = revision_name(&long, "0123456789abcdef0123456789abcdef");
        assert!(n.len() <= 253 && n.ends_with("-0123456789"));
    }
}
