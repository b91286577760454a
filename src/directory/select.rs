//! Which cards a directory lists: published cards (status confirms a route and bytes) of the
//! namespaces its `namespaceSelector` matches, whose labels match its `cardSelector`, unless
//! labelled `agentcard.dev/listed: "false"`. One rule for the controller (status counts) and
//! every replica's server (answers).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::crd::AgentDirectorySpec;

/// Card label that keeps a card out of every directory when `"false"`.
pub const LABEL_LISTED: &str = "agentcard.dev/listed";

/// Whether `labels` match `selector` (Kubernetes semantics; `None` or empty matches all).
pub fn matches(selector: Option<&LabelSelector>, labels: &BTreeMap<String, String>) -> bool {
    let Some(selector) = selector else {
        return true;
    };
    let exact = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let expressions = selector.match_expressions.iter().flatten().all(|e| {
        let values = e.values.as_deref().unwrap_or_default();
        let value = labels.get(&e.key);
        match e.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            // An operator the API server would have refused: match nothing rather than all.
            _ => false,
        }
    });
    exact && expressions
}

/// Whether a published card with `card_labels`, in a namespace with `namespace_labels`, is
/// listed by the directory `spec`.
pub fn listed(
    spec: &AgentDirectorySpec,
    namespace_labels: &BTreeMap<String, String>,
    card_labels: &BTreeMap<String, String>,
) -> bool {
    card_labels.get(LABEL_LISTED).map(String::as_str) != Some("false")
        && matches(spec.namespace_selector.as_ref(), namespace_labels)
        && matches(spec.card_selector.as_ref(), card_labels)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn selectors_and_the_opt_out_label() {
        let spec: AgentDirectorySpec = serde_json::from_value(json!({
            "namespaceSelector": {"matchLabels": {"team": "a"}},
            "cardSelector": {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["internal"]}]},
            "publish": {"host": "d.example.com"}
        }))
        .unwrap();
        let ns = labels(&[("team", "a")]);
        assert!(listed(&spec, &ns, &labels(&[])));
        assert!(listed(&spec, &ns, &labels(&[("tier", "public")])));
        assert!(!listed(&spec, &ns, &labels(&[("tier", "internal")])));
        assert!(!listed(&spec, &labels(&[("team", "b")]), &labels(&[])));
        assert!(!listed(&spec, &ns, &labels(&[(LABEL_LISTED, "false")])));
        let all: AgentDirectorySpec =
            serde_json::from_value(json!({"publish": {"host": "d.example.com"}})).unwrap();
        assert!(listed(&all, &labels(&[]), &labels(&[])));
    }
}
