//! The custom resources of the `agentcard.dev` API group, generated into `crds/` by
//! `agentcard-operator crds`.

pub mod agentcard;
pub mod agentcardapproval;
pub mod agentdirectory;
pub mod agentdiscovery;
pub mod condition;
pub mod revision;

pub use agentcard::{
    AgentCard, AgentCardSpec, AgentCardStatus, ApprovalState, ApprovalStatus, Compatibility,
    Defaults, Drift, DriftMode, ExtendedAuth, ExtendedCard, ExtendedCardStatus, Lifecycle,
    LifecycleState, OidcAuth, Overrides, ServedLifecycle, ServedRoute, ServiceAccountAuth, Source,
    SourceExtendedCard, SourceService, SourceStatus, Successor,
};
pub use agentcardapproval::{AgentCardApproval, AgentCardApprovalSpec, CardRef, Decision};
pub use agentdirectory::{
    AccessMode, Admission, AgentDirectory, AgentDirectorySpec, AgentDirectoryStatus, ReapproveOn,
};
pub use agentdiscovery::{AgentDiscovery, AgentDiscoverySpec, AgentDiscoveryStatus};
pub use condition::{CardCondition, Word};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde_json::Value;

/// Most characters of a string in an AgentCard's spec that sets no bound of its own, by what
/// it holds: descriptions, URLs, anything else.
pub const MAX_DESCRIPTION: u64 = 16 * 1024;
/// See [`MAX_DESCRIPTION`].
pub const MAX_URL: u64 = 2048;
/// See [`MAX_DESCRIPTION`]; also an annotation value.
pub const MAX_STRING: u64 = 1024;
/// Most skills of a card.
pub const MAX_SKILLS: u64 = 512;
/// Most items of any other list, and entries of a map, in an AgentCard's spec.
pub const MAX_ITEMS: u64 = 128;

/// The AgentCard CRD with every string, list and map of its spec bounded ([`bound`]): what one
/// card may make the API server store and every replica hold is decided at admission, and a
/// `kubectl apply` of a 1 MB description is refused with the field named.
pub fn agentcard_crd() -> CustomResourceDefinition {
    let crd = AgentCard::crd();
    let Ok(mut v) = serde_json::to_value(&crd) else {
        return crd;
    };
    for version in v["spec"]["versions"].as_array_mut().into_iter().flatten() {
        bound(
            &mut version["schema"]["openAPIV3Schema"]["properties"]["spec"],
            "spec",
        );
    }
    serde_json::from_value(v).unwrap_or(crd)
}

/// Give every string, array and map under `schema` (the schema of a field named `name`) that
/// has no bound of its own one by what it holds (see the constants above). Free-form objects
/// (`x-kubernetes-preserve-unknown-fields`) are left as they are: the card's size limit
/// (`--max-card-bytes`) bounds them.
fn bound(schema: &mut Value, name: &str) {
    let Some(obj) = schema.as_object_mut() else {
        return;
    };
    let lower = name.to_ascii_lowercase();
    match obj.get("type").and_then(Value::as_str) {
        Some("string") if !obj.contains_key("maxLength") && !obj.contains_key("enum") => {
            // An icon may be a `data:` URI: as long as a description.
            let max = if lower.ends_with("description") || lower == "iconurl" {
                MAX_DESCRIPTION
            } else if lower.contains("url") || lower == "examples" {
                MAX_URL
            } else {
                MAX_STRING
            };
            obj.insert("maxLength".into(), max.into());
        }
        Some("array") => {
            if !obj.contains_key("maxItems") {
                let max = if name == "skills" {
                    MAX_SKILLS
                } else {
                    MAX_ITEMS
                };
                obj.insert("maxItems".into(), max.into());
            }
            if let Some(items) = obj.get_mut("items") {
                bound(items, name);
            }
        }
        Some("object") => {
            if let Some(props) = obj.get_mut("properties").and_then(Value::as_object_mut) {
                for (field, sub) in props.iter_mut() {
                    bound(sub, field);
                }
            }
            if let Some(values) = obj.get_mut("additionalProperties") {
                if values.is_object() {
                    bound(values, name);
                    obj.entry("maxProperties").or_insert(MAX_ITEMS.into());
                }
            }
        }
        _ => {}
    }
}

/// Every CRD of the operator, as the YAML `crds/` holds (documents separated by `---`).
pub fn crds_yaml() -> Result<String, crate::yaml::YamlError> {
    let docs = [
        agentcard_crd(),
        AgentDirectory::crd(),
        AgentDiscovery::crd(),
        AgentCardApproval::crd(),
    ];
    let mut out = String::new();
    for (i, crd) in docs.iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        out.push_str(&crate::yaml::to_string(crd)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// kube's store keeps every card as an `Arc<AgentCard>` (two counters before it): at
    /// 100,000 cards, a field that pushes it past jemalloc's 1,536-byte size class costs 25 MB
    /// (the next class is 1,792 bytes). Box what most cards leave empty instead.
    #[test]
    fn a_stored_card_fits_the_1536_byte_size_class() {
        let stored = 2 * std::mem::size_of::<usize>() + std::mem::size_of::<AgentCard>();
        assert!(stored <= 1536, "an Arc<AgentCard> takes {stored} bytes");
    }

    /// The schema of the spec field at `path` (dot-separated; `[]` for a list's items).
    fn at<'a>(v: &'a Value, path: &str) -> &'a Value {
        let mut cur = &v["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        for part in path.split('.') {
            cur = match part {
                "[]" => &cur["items"],
                "{}" => &cur["additionalProperties"],
                field => &cur["properties"][field],
            };
        }
        cur
    }

    #[test]
    fn every_string_list_and_map_of_a_cards_spec_is_bounded() {
        let v = serde_json::to_value(agentcard_crd()).unwrap();
        assert_eq!(at(&v, "card.description")["maxLength"], MAX_DESCRIPTION);
        assert_eq!(at(&v, "card.name")["maxLength"], MAX_STRING);
        assert_eq!(at(&v, "card.iconUrl")["maxLength"], MAX_DESCRIPTION);
        assert_eq!(at(&v, "card.documentationUrl")["maxLength"], MAX_URL);
        assert_eq!(at(&v, "card.skills")["maxItems"], MAX_SKILLS);
        assert_eq!(at(&v, "card.skills.[].tags")["maxItems"], MAX_ITEMS);
        assert_eq!(at(&v, "card.skills.[].tags.[]")["maxLength"], MAX_STRING);
        assert_eq!(
            at(&v, "card.skills.[].description")["maxLength"],
            MAX_DESCRIPTION
        );
        assert_eq!(at(&v, "card.securitySchemes")["maxProperties"], MAX_ITEMS);
        assert_eq!(
            at(&v, "publish.ingress.annotations")["maxProperties"],
            MAX_ITEMS
        );
        assert_eq!(
            at(&v, "publish.ingress.annotations.{}")["maxLength"],
            MAX_STRING
        );
        // A bound of the field's own stays.
        assert_eq!(at(&v, "lifecycle.message")["maxLength"], 1024);
        // Nothing is left unbounded: walk the whole spec.
        fn unbounded(s: &Value, path: &str, out: &mut Vec<String>) {
            match s["type"].as_str() {
                Some("string") if s.get("maxLength").is_none() && s.get("enum").is_none() => {
                    out.push(path.to_string())
                }
                Some("array") => {
                    if s.get("maxItems").is_none() {
                        out.push(path.to_string());
                    }
                    unbounded(&s["items"], &format!("{path}[]"), out);
                }
                _ => {
                    for (k, sub) in s["properties"].as_object().into_iter().flatten() {
                        unbounded(sub, &format!("{path}.{k}"), out);
                    }
                }
            }
        }
        let mut out = Vec::new();
        unbounded(at(&v, "card"), "card", &mut out);
        assert!(out.is_empty(), "unbounded: {out:?}");
    }
}
