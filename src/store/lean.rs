//! Reading an object's metadata from a watch without building what no reader looks at.
//!
//! The API server sends every object with its `managedFields`: per field manager, a JSON tree
//! naming each field it set (on an AgentCard, every field of the card its author applied; on
//! a card ConfigMap, every label, annotation and data key). Deserialised as Kubernetes'
//! `ObjectMeta` types each tree becomes a `serde_json::Value`, one map and one string per
//! field, which the stores then drop ([`super::compact`]): at 100,000 cards, millions of
//! allocations made and freed while a restarted process lists every object, on the way to
//! serving its cards.
//!
//! Data flow: a watch's JSON → [`lean_meta`] (`deserialize_with` on the `metadata` of each
//! watched form) → an `ObjectMeta` whose `managedFields` entries keep their manager,
//! operation, subresource and time, and of their field trees only what the readers ask:
//! whether the manager set anything under `spec` (`{"f:spec": {}}`), the discovery label, and
//! the annotation keys ([`super::compact::operator_annotations`], [`super::compact::card_editor`]
//! read those and nothing else) → the stores' own compaction, as before.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    FieldsV1, ManagedFieldsEntry, ObjectMeta, OwnerReference, Time,
};
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::contract::LABEL_DISCOVERED_BY;
use crate::crd::{AgentCard, AgentCardSpec, AgentCardStatus};

/// `deserialize_with` for `metadata`: an `ObjectMeta` with its `managedFields` trees pruned
/// to what the readers ask (see the module doc); every other field as Kubernetes sends it.
pub fn lean_meta<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    WireMeta::deserialize(d).map(ObjectMeta::from)
}

/// An AgentCard as the operator's card watch reads it: its metadata by [`lean_meta`], its spec
/// and status typed, then moved into the `AgentCard` the store keeps (the kube `Controller`
/// reads that type).
#[derive(Clone, Debug, Deserialize)]
pub struct WireCard {
    #[serde(default, deserialize_with = "lean_meta")]
    metadata: ObjectMeta,
    spec: AgentCardSpec,
    #[serde(default)]
    status: Option<AgentCardStatus>,
}

super::resource_as!(WireCard, AgentCard);

impl From<WireCard> for AgentCard {
    fn from(w: WireCard) -> AgentCard {
        AgentCard {
            metadata: w.metadata,
            spec: w.spec,
            status: w.status,
        }
    }
}

/// `ObjectMeta` as it comes, but for the field trees of `managedFields`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireMeta {
    annotations: Option<BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
    generate_name: Option<String>,
    generation: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    managed_fields: Option<Vec<WireEntry>>,
    name: Option<String>,
    namespace: Option<String>,
    owner_references: Option<Vec<OwnerReference>>,
    resource_version: Option<String>,
    self_link: Option<String>,
    uid: Option<String>,
}

impl From<WireMeta> for ObjectMeta {
    fn from(m: WireMeta) -> ObjectMeta {
        ObjectMeta {
            annotations: m.annotations,
            creation_timestamp: m.creation_timestamp,
            deletion_grace_period_seconds: m.deletion_grace_period_seconds,
            deletion_timestamp: m.deletion_timestamp,
            finalizers: m.finalizers,
            generate_name: m.generate_name,
            generation: m.generation,
            labels: m.labels,
            managed_fields: m
                .managed_fields
                .map(|entries| entries.into_iter().map(ManagedFieldsEntry::from).collect()),
            name: m.name,
            namespace: m.namespace,
            owner_references: m.owner_references,
            resource_version: m.resource_version,
            self_link: m.self_link,
            uid: m.uid,
        }
    }
}

/// A `managedFields` entry with its field tree pruned.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireEntry {
    api_version: Option<String>,
    fields_type: Option<String>,
    fields_v1: Option<Pruned>,
    manager: Option<String>,
    operation: Option<String>,
    subresource: Option<String>,
    time: Option<Time>,
}

impl From<WireEntry> for ManagedFieldsEntry {
    fn from(e: WireEntry) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            api_version: e.api_version,
            fields_type: e.fields_type,
            fields_v1: e.fields_v1.map(|p| FieldsV1(p.0)),
            manager: e.manager,
            operation: e.operation,
            subresource: e.subresource,
            time: e.time,
        }
    }
}

/// A field tree (`fieldsV1`) cut down to `f:spec` (present or not, its content dropped),
/// `f:metadata.f:labels` with the discovery label alone, and `f:metadata.f:annotations` with
/// every key. A `fieldsV1` that is not a JSON object (as [`super::compact`] writes for its
/// own entry type) is kept whole.
struct Pruned(Value);

/// Which subtree a [`Pruned`] map is: what its keys keep.
#[derive(Clone, Copy)]
enum Level {
    /// The whole tree: `f:spec` and `f:metadata`.
    Root,
    /// `f:metadata`: `f:labels` and `f:annotations`.
    Metadata,
    /// `f:metadata.f:labels`: the discovery label.
    Labels,
    /// `f:metadata.f:annotations`: every key.
    Annotations,
}

impl Level {
    /// What the value under `key` is kept as: `None` when it is skipped.
    fn child(self, key: &str) -> Option<Option<Level>> {
        match (self, key) {
            (Level::Root, "f:spec") => Some(None),
            (Level::Root, "f:metadata") => Some(Some(Level::Metadata)),
            (Level::Metadata, "f:labels") => Some(Some(Level::Labels)),
            (Level::Metadata, "f:annotations") => Some(Some(Level::Annotations)),
            (Level::Labels, k) if k.strip_prefix("f:") == Some(LABEL_DISCOVERED_BY) => Some(None),
            (Level::Annotations, k) if k.starts_with("f:") => Some(None),
            _ => None,
        }
    }
}

impl<'de> Deserialize<'de> for Pruned {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Pruned, D::Error> {
        d.deserialize_any(PrunedVisitor(Level::Root)).map(Pruned)
    }
}

/// Visits one map of a field tree at its [`Level`]; a value of any other shape is kept as it
/// is at the root (an entry type other than `FieldsV1`) and as `{}` below it.
struct PrunedVisitor(Level);

impl PrunedVisitor {
    /// A non-map value: kept at the root, an empty set below it.
    fn leaf<E>(&self, v: Value) -> Result<Value, E> {
        Ok(match self.0 {
            Level::Root => v,
            _ => Value::Object(Map::new()),
        })
    }
}

impl<'de> Visitor<'de> for PrunedVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a managedFields field set")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut kept = Map::new();
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            match self.0.child(&key) {
                Some(Some(level)) => {
                    let v = map.next_value_seed(Subtree(level))?;
                    kept.insert(key.into_owned(), v);
                }
                Some(None) => {
                    map.next_value::<IgnoredAny>()?;
                    kept.insert(key.into_owned(), Value::Object(Map::new()));
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Value::Object(kept))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Value, E> {
        self.leaf(Value::String(v.to_string()))
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Value, E> {
        self.leaf(Value::Null)
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Value, E> {
        self.leaf(Value::Bool(v))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Value, E> {
        self.leaf(Value::from(v))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Value, E> {
        self.leaf(Value::from(v))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        self.leaf(Value::from(v))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        match self.0 {
            // Kept whole at the root, as `serde_json` reads it.
            Level::Root => {
                let mut items = Vec::new();
                while let Some(v) = seq.next_element::<Value>()? {
                    items.push(v);
                }
                Ok(Value::Array(items))
            }
            _ => {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Value::Object(Map::new()))
            }
        }
    }
}

/// A subtree read at its level.
struct Subtree(Level);

impl<'de> serde::de::DeserializeSeed<'de> for Subtree {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(PrunedVisitor(self.0))
    }
}

/// A map key, borrowed from the input when it has no escapes (most of a field tree's keys
/// are looked at and skipped: none of them is allocated).
struct Key<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Key<'de>, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a field name")
            }

            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }

            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_string())))
            }

            fn visit_string<E>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::MANAGER;
    use crate::store::compact::{card_editor, operator_annotations};
    use serde_json::json;

    #[derive(Deserialize)]
    struct Lean {
        #[serde(deserialize_with = "lean_meta")]
        metadata: ObjectMeta,
    }

    /// The metadata of an object two managers wrote, as the API server sends it.
    fn sent(discovery_label_by: &str) -> Value {
        json!({
            "name": "a", "namespace": "ns", "uid": "u-1", "resourceVersion": "42",
            "generation": 3, "creationTimestamp": "2026-12-01T00:00:00Z",
            "generateName": "a-", "selfLink": "/x", "deletionGracePeriodSeconds": 30,
            "deletionTimestamp": "2026-12-02T00:00:00Z",
            "labels": {"l": "v", LABEL_DISCOVERED_BY: "x"},
            "annotations": {"mine": "1", "theirs": "2"},
            "finalizers": ["f"],
            "ownerReferences": [{"apiVersion": "v1", "kind": "K", "name": "o", "uid": "ou"}],
            "managedFields": [
                {"manager": MANAGER, "operation": "Apply", "apiVersion": "v1",
                 "time": "2026-12-01T00:00:00Z", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:data": {".": {}, "f:k": {}},
                              "f:metadata": {"f:annotations": {".": {}, "f:mine": {}},
                                             "f:labels": {"f:l": {}},
                                             "f:ownerReferences": {"k:{\"uid\":\"ou\"}": {}}}}},
                {"manager": "kubectl", "operation": "Update", "subresource": "status",
                 "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:status": {"f:a": {"f:b": {}}}}},
                {"manager": "editor", "operation": "Apply", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:spec": {"f:card": {"f:skills": {}, "f:name": {}}},
                              "f:metadata": {"f:labels": {
                                  format!("f:{discovery_label_by}"): {}, "f:other": {}}}}},
            ],
        })
    }

    fn lean(meta: &Value) -> ObjectMeta {
        serde_json::from_value::<Lean>(json!({ "metadata": meta }))
            .map(|l| l.metadata)
            .expect("lean metadata")
    }

    fn typed(meta: &Value) -> ObjectMeta {
        serde_json::from_value(meta.clone()).expect("typed metadata")
    }

    #[test]
    fn everything_but_the_field_trees_reads_as_kubernetes_reads_it() {
        let meta = sent("agentcard.dev/other-label");
        let (mut lean, mut typed) = (lean(&meta), typed(&meta));
        let trees = |m: &mut ObjectMeta| {
            m.managed_fields
                .iter_mut()
                .flatten()
                .map(|e| e.fields_v1.take())
                .count()
        };
        assert_eq!(trees(&mut lean), 3);
        assert_eq!(trees(&mut typed), 3);
        assert_eq!(lean, typed);
    }

    #[test]
    fn the_field_trees_keep_what_the_readers_ask() {
        for label in [LABEL_DISCOVERED_BY, "agentcard.dev/other-label"] {
            let meta = sent(label);
            let (lean, typed) = (lean(&meta), typed(&meta));
            assert_eq!(operator_annotations(&lean), operator_annotations(&typed));
            assert_eq!(
                operator_annotations(&lean).into_iter().collect::<Vec<_>>(),
                ["mine"]
            );
            assert_eq!(card_editor(&lean), card_editor(&typed));
            assert_eq!(card_editor(&lean).as_deref(), Some("editor"));
        }
        let trees: Vec<Value> = lean(&sent(LABEL_DISCOVERED_BY))
            .managed_fields
            .into_iter()
            .flatten()
            .filter_map(|e| e.fields_v1.map(|f| f.0))
            .collect();
        assert_eq!(
            trees,
            [
                json!({"f:metadata": {"f:annotations": {"f:mine": {}}, "f:labels": {}}}),
                json!({}),
                json!({"f:spec": {}, "f:metadata": {"f:labels": {
                    format!("f:{LABEL_DISCOVERED_BY}"): {}}}}),
            ]
        );
    }

    #[test]
    fn a_label_only_edit_of_a_discovered_card_still_names_its_editor() {
        let meta = json!({"name": "a", "managedFields": [
            {"manager": "someone", "operation": "Update", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:metadata": {"f:labels": {format!("f:{LABEL_DISCOVERED_BY}"): {}}}}},
        ]});
        assert_eq!(card_editor(&lean(&meta)).as_deref(), Some("someone"));
        let unrelated_label = json!({"name": "a", "managedFields": [
            {"manager": "someone", "operation": "Update", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:metadata": {"f:labels": {"f:unrelated": {}}}}},
        ]});
        assert_eq!(card_editor(&lean(&unrelated_label)), None);
    }

    #[test]
    fn a_field_set_that_is_not_a_tree_is_kept_as_it_is() {
        // The operator's own compacted entry (a string of annotation keys) and odd shapes.
        for fields in [json!("a\nb"), json!(["x", {"y": 1}]), json!(7), json!(null)] {
            let meta = json!({"managedFields": [{"manager": MANAGER, "fieldsV1": fields}]});
            let kept = lean(&meta).managed_fields.unwrap_or_default();
            let want = (!fields.is_null()).then(|| FieldsV1(fields.clone()));
            assert_eq!(kept[0].fields_v1, want, "{fields}");
        }
    }

    #[test]
    fn a_wire_card_is_the_agent_card_it_was_read_from_but_for_the_field_trees() {
        let card = json!({
            "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentCard",
            "metadata": sent("agentcard.dev/other-label"),
            "spec": {"publish": {"host": "a.example.com"},
                     "card": {"name": "A", "description": "d", "version": "1",
                              "skills": [{"id": "s", "name": "S", "description": "d",
                                          "tags": ["t"]}]}},
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Published",
                                       "message": "m",
                                       "lastTransitionTime": "2026-12-01T00:00:00Z"}],
                       "configMap": "agentcard-a", "contentHash": "h", "revision": 2},
        });
        let text = serde_json::to_vec(&card).expect("json");
        let wire: WireCard = serde_json::from_slice(&text).expect("wire card");
        let mut lean = AgentCard::from(wire);
        let mut typed: AgentCard = serde_json::from_slice(&text).expect("typed card");
        assert_eq!(card_editor(&lean.metadata), card_editor(&typed.metadata));
        for c in [&mut lean, &mut typed] {
            for e in c.metadata.managed_fields.iter_mut().flatten() {
                e.fields_v1 = None;
            }
        }
        assert_eq!(
            serde_json::to_value(&lean).expect("json"),
            serde_json::to_value(&typed).expect("json")
        );
    }

    #[test]
    fn escaped_keys_are_read() {
        let text = r#"{"metadata": {"name": "a", "managedFields": [{"manager": "m",
            "fieldsV1": {"f:metadata": {"f:annotations": {"f:a\"b": {}, "f:c\u0064": {}}}}}]}}"#;
        let meta = serde_json::from_str::<Lean>(text).expect("lean").metadata;
        let keys: Vec<String> = meta.managed_fields.unwrap_or_default()[0]
            .fields_v1
            .as_ref()
            .and_then(|f| f.0.pointer("/f:metadata/f:annotations"))
            .and_then(Value::as_object)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        assert_eq!(keys, ["f:a\"b", "f:cd"]);
    }
}
