//! Compaction: what the stores drop of an object before they hold it. Nothing reads an
//! AgentCard's `managedFields` or kubectl's last-applied copy (each often as large as the
//! object); of an object the operator writes, only the annotation keys it set are kept, so it
//! can remove the ones it no longer wants.

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, ObjectMeta};

use crate::contract::{DISCOVERY_MANAGER, LABEL_DISCOVERED_BY, MANAGER};
use crate::crd::AgentCard;

/// kubectl's copy of the last applied object: as large as the object, read by nothing here.
pub const ANN_LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// `fieldsType` of the one `managedFields` entry [`compact_meta`] leaves on a stored object:
/// its `fieldsV1` is then a JSON string, the annotation keys the operator set, one per line
/// (the full field set of every entry, a JSON tree per entry, was the largest part of a stored
/// ConfigMap or Ingress).
pub const FIELDS_ANNOTATION_KEYS: &str = "agentcard.dev/AnnotationKeys";

/// Trim an object the operator writes before it is stored: of its `managedFields`, only the
/// annotation keys the operator set are kept (so it may remove the ones it no longer wants),
/// in one entry of type [`FIELDS_ANNOTATION_KEYS`]; kubectl's last-applied copy goes.
pub fn compact_meta(meta: &mut ObjectMeta) {
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(ANN_LAST_APPLIED);
    }
    if meta.managed_fields.is_some() {
        let keys: Vec<String> = operator_annotations(meta).into_iter().collect();
        meta.managed_fields = (!keys.is_empty()).then(|| {
            vec![ManagedFieldsEntry {
                manager: Some(MANAGER.into()),
                fields_type: Some(FIELDS_ANNOTATION_KEYS.into()),
                fields_v1: Some(FieldsV1(serde_json::Value::String(keys.join("\n")))),
                ..Default::default()
            }]
        });
    }
}

/// The annotation keys the operator set on an object (by create or apply), read from its
/// `managedFields` as the API server returns them or as [`compact_meta`] left them.
/// Annotations others added are theirs.
pub fn operator_annotations(meta: &ObjectMeta) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    let ours = meta
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.manager.as_deref() == Some(MANAGER));
    for entry in ours {
        let Some(fields) = entry.fields_v1.as_ref() else {
            continue;
        };
        if entry.fields_type.as_deref() == Some(FIELDS_ANNOTATION_KEYS) {
            let listed = fields.0.as_str().unwrap_or_default();
            keys.extend(listed.lines().map(str::to_string));
            continue;
        }
        let set = fields
            .0
            .get("f:metadata")
            .and_then(|m| m.get("f:annotations"))
            .and_then(serde_json::Value::as_object);
        keys.extend(
            set.into_iter()
                .flat_map(|s| s.keys())
                .filter_map(|k| k.strip_prefix("f:"))
                .map(str::to_string),
        );
    }
    keys
}

/// `fieldsType` of the one `managedFields` entry [`compact_card`] leaves on a discovered card
/// that someone else edited: its `manager` names who ([`card_editor`]).
pub const FIELDS_EDITED_BY: &str = "agentcard.dev/EditedBy";

/// Who, other than discovery and the operator, edited a discovered card's spec or its
/// discovery label (and so claimed it), read from its `managedFields` as the API server
/// returns them or as [`compact_card`] left them. Status writes do not count.
pub fn card_editor(meta: &ObjectMeta) -> Option<String> {
    meta.managed_fields
        .iter()
        .flatten()
        .filter(|m| {
            let manager = m.manager.as_deref().unwrap_or_default();
            manager != DISCOVERY_MANAGER
                && manager != MANAGER
                && m.subresource.as_deref() != Some("status")
        })
        .find(|m| {
            m.fields_type.as_deref() == Some(FIELDS_EDITED_BY)
                || m.fields_v1.as_ref().is_some_and(|f| {
                    f.0.get("f:spec").is_some()
                        || f.0
                            .pointer("/f:metadata/f:labels")
                            .and_then(|l| l.get(format!("f:{LABEL_DISCOVERED_BY}")))
                            .is_some()
                })
        })
        .and_then(|m| m.manager.clone())
}

/// Trim an AgentCard before it is stored: nothing reads a card's `managedFields` (often as
/// large as the card) or kubectl's last-applied copy, but for one fact about a discovered
/// card: who else edited it ([`card_editor`]), kept as one small entry. Otherwise the list
/// goes whole (`None`): a cleared `Vec` would keep its buffer, a few hundred bytes per stored
/// card.
pub fn compact_card(card: &mut AgentCard) {
    let discovered = card
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(LABEL_DISCOVERED_BY));
    let editor = discovered.then(|| card_editor(&card.metadata)).flatten();
    card.metadata.managed_fields = editor.map(|manager| {
        vec![ManagedFieldsEntry {
            manager: Some(manager),
            fields_type: Some(FIELDS_EDITED_BY.into()),
            ..Default::default()
        }]
    });
    if let Some(annotations) = card.metadata.annotations.as_mut() {
        annotations.remove(ANN_LAST_APPLIED);
    }
}

/// A digest of what is written, to tell whether a write would repeat the last one.
pub fn digest(value: &impl serde::Serialize) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_vec(value)
        .unwrap_or_default()
        .hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_the_operators_annotation_fields_are_kept() {
        let mut meta: ObjectMeta = serde_json::from_value(json!({
            "name": "x",
            "annotations": {ANN_LAST_APPLIED: "{…}", "keep": "v"},
            "managedFields": [
                {"manager": MANAGER, "operation": "Apply", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:annotations": {"f:a": {}}, "f:labels": {"f:l": {}}},
                              "f:data": {"f:card.json": {}}}},
                {"manager": MANAGER, "operation": "Update", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:data": {"f:card.json": {}}, "f:metadata": {"f:annotations": {"f:c": {}}}}},
                {"manager": "kubectl", "operation": "Update", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:annotations": {"f:b": {}}}}}
            ]
        }))
        .unwrap();
        compact_meta(&mut meta);
        let annotations = meta.annotations.clone().unwrap_or_default();
        assert!(!annotations.contains_key(ANN_LAST_APPLIED));
        assert_eq!(annotations.get("keep").map(String::as_str), Some("v"));
        let entries = meta.managed_fields.clone().unwrap_or_default();
        assert_eq!(entries.len(), 1);
        assert_eq!(
            entries[0].fields_v1.as_ref().map(|f| f.0.clone()),
            Some(json!("a\nc"))
        );
        // Read the same from the compact entry as from the full ones.
        assert_eq!(
            operator_annotations(&meta).into_iter().collect::<Vec<_>>(),
            ["a", "c"]
        );
        // Compacting again keeps it.
        compact_meta(&mut meta);
        assert_eq!(operator_annotations(&meta).len(), 2);
        // Nothing of ours: no entry left.
        let mut theirs: ObjectMeta = serde_json::from_value(json!({"managedFields": [
            {"manager": "kubectl", "operation": "Update", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:metadata": {"f:annotations": {"f:b": {}}}}}]}))
        .unwrap();
        compact_meta(&mut theirs);
        assert!(theirs.managed_fields.is_none());
    }
}
