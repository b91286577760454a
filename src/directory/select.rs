//! Which cards a directory lists: published cards (status confirms a route and bytes) of the
//! namespaces its `namespaceSelector` matches, whose labels match its `cardSelector`, unless
//! labelled `agentcard.dev/listed: "false"`; under `admission: ApprovalRequired`, only while
//! the card's status (written by the lease holder from the directory's `AgentCardApproval`s)
//! says `Approved` for that directory. One rule for the controller (status counts) and every
//! replica's server (answers).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::crd::agentdirectory::Admission;
use crate::crd::{AgentDirectorySpec, ApprovalState, ApprovalStatus};

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
/// selected by the directory `spec`: listed under `Open` admission, waiting for an approval
/// (or approved) under `ApprovalRequired`.
pub fn selected(
    spec: &AgentDirectorySpec,
    namespace_labels: &BTreeMap<String, String>,
    card_labels: &BTreeMap<String, String>,
) -> bool {
    card_labels.get(LABEL_LISTED).map(String::as_str) != Some("false")
        && matches(spec.namespace_selector.as_ref(), namespace_labels)
        && matches(spec.card_selector.as_ref(), card_labels)
}

/// The verdict of directory `name` (`spec`) on a card it selects, from the card's
/// `status.approvals`: `Approved` under `Open` admission; otherwise what the status says
/// (`Pending` when it says nothing of this directory, as for a card the lease holder has not
/// looked at since the directory began to require approval).
pub fn verdict(
    name: &str,
    spec: &AgentDirectorySpec,
    approvals: &[ApprovalStatus],
) -> ApprovalState {
    match spec.admission {
        Admission::Open => ApprovalState::Approved,
        Admission::ApprovalRequired => approvals
            .iter()
            .find(|a| a.directory == name)
            .map_or(ApprovalState::Pending, |a| a.state),
    }
}

/// Whether directory `name` (`spec`) lists a published card: selected, and approved where
/// that is required.
pub fn listed(
    name: &str,
    spec: &AgentDirectorySpec,
    namespace_labels: &BTreeMap<String, String>,
    card_labels: &BTreeMap<String, String>,
    approvals: &[ApprovalStatus],
) -> bool {
    selected(spec, namespace_labels, card_labels)
        && verdict(name, spec, approvals) == ApprovalState::Approved
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
        assert!(selected(&spec, &ns, &labels(&[])));
        assert!(selected(&spec, &ns, &labels(&[("tier", "public")])));
        assert!(!selected(&spec, &ns, &labels(&[("tier", "internal")])));
        assert!(!selected(&spec, &labels(&[("team", "b")]), &labels(&[])));
        assert!(!selected(&spec, &ns, &labels(&[(LABEL_LISTED, "false")])));
        let all: AgentDirectorySpec =
            serde_json::from_value(json!({"publish": {"host": "d.example.com"}})).unwrap();
        assert!(selected(&all, &labels(&[]), &labels(&[])));
        assert!(listed("d", &all, &labels(&[]), &labels(&[]), &[]));
    }

    #[test]
    fn approval_required_lists_only_what_the_status_approves_for_that_directory() {
        let spec: AgentDirectorySpec = serde_json::from_value(json!({
            "publish": {"host": "d.example.com"}, "admission": "ApprovalRequired"
        }))
        .unwrap();
        let none = labels(&[]);
        let said = |directory: &str, state| ApprovalStatus {
            directory: directory.into(),
            state,
            ..Default::default()
        };
        // Nothing said of it: pending, not listed.
        assert_eq!(verdict("d", &spec, &[]), ApprovalState::Pending);
        assert!(!listed("d", &spec, &none, &none, &[]));
        // Approved for another directory only: still not listed here.
        let other = [said("other", ApprovalState::Approved)];
        assert!(!listed("d", &spec, &none, &none, &other));
        for state in [
            ApprovalState::Pending,
            ApprovalState::Rejected,
            ApprovalState::Voided,
        ] {
            assert!(!listed("d", &spec, &none, &none, &[said("d", state)]));
        }
        assert!(listed(
            "d",
            &spec,
            &none,
            &none,
            &[said("d", ApprovalState::Approved)]
        ));
        // Labels a tenant writes cannot stand in for an approval.
        let forged = labels(&[("agentcard.dev/approved", "true"), (LABEL_LISTED, "true")]);
        assert!(!listed("d", &spec, &none, &forged, &[]));
    }
}
