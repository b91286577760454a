//! Validate: may this AgentCard be published, as it is, where it asks?
//!
//! Three questions, all answered from data at hand (no client): is the effective card (spec.card
//! plus the backend interface) a valid A2A card (errors name `spec.card.…` paths); may the
//! card's namespace publish on its host (operator allow list, or the Namespace annotation
//! cluster admins set); does an older card already hold the same host and path prefix.

use std::collections::BTreeMap;

use jiff::Timestamp;
use kube::ResourceExt;

use super::build::{effective_card, prefix};
use crate::a2a::validate::{lint, validate as validate_card, LintOptions};
use crate::a2a::Problems;
use crate::controller::Error;
use crate::crd::AgentCard;

/// Namespace annotation listing the hosts (patterns) its cards may publish on.
pub const ANN_ALLOWED_HOSTS: &str = "agentcard.dev/allowed-hosts";

/// Whether `host` matches `pattern`: `*` (any), `*.example.com` (any name below), or exact.
pub fn host_matches(pattern: &str, host: &str) -> bool {
    let pattern = pattern.trim().trim_end_matches('.').to_ascii_lowercase();
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    if pattern == "*" {
        return true;
    }
    match pattern.strip_prefix("*.") {
        Some(suffix) => host.ends_with(&format!(".{suffix}")),
        None => pattern == host,
    }
}

/// Patterns of a comma-separated list.
pub fn patterns(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect()
}

/// Whether a namespace (with `ns_annotations`) may publish on `host`.
pub fn host_allowed(
    host: &str,
    operator: &[String],
    ns_annotations: &BTreeMap<String, String>,
) -> bool {
    let ns_list = ns_annotations
        .get(ANN_ALLOWED_HOSTS)
        .map(|l| patterns(l))
        .unwrap_or_default();
    operator
        .iter()
        .chain(ns_list.iter())
        .any(|p| host_matches(p, host))
}

/// The A2A validation of the effective card: errors (with `spec.card` paths) or warnings.
pub fn card(card: &AgentCard) -> Result<Vec<String>, Error> {
    let effective = effective_card(card);
    let errors = validate_card(&effective);
    if !errors.is_empty() {
        return Err(Error::InvalidSpec(
            Problems(errors).with_prefix("spec.card"),
        ));
    }
    Ok(lint(&effective, LintOptions { public: true })
        .into_iter()
        .map(|p| Problems(vec![p]).with_prefix("spec.card").to_string())
        .collect())
}

fn claim_key(c: &AgentCard) -> (Timestamp, String, String) {
    let created = c
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or(Timestamp::MAX, |t| t.0);
    (created, c.namespace().unwrap_or_default(), c.name_any())
}

/// Host checks: allowance, then the oldest allowed claim on host + prefix wins.
/// `peers` are the other cards of the cluster; `ns_annotations` looks up a namespace's annotations.
pub fn host(
    card: &AgentCard,
    peers: &[std::sync::Arc<AgentCard>],
    operator_allow: &[String],
    ns_annotations: &dyn Fn(&str) -> BTreeMap<String, String>,
) -> Result<(), Error> {
    let ns = card.namespace().unwrap_or_default();
    let host = card.spec.publish.host.to_ascii_lowercase();
    let annotations = ns_annotations(&ns);
    if !host_allowed(&host, operator_allow, &annotations) {
        return Err(Error::HostNotAllowed {
            host,
            namespace: ns,
            operator: operator_allow.to_vec(),
            namespace_list: annotations
                .get(ANN_ALLOWED_HOSTS)
                .map(|l| patterns(l))
                .unwrap_or_default(),
        });
    }
    let mine = claim_key(card);
    let my_prefix = prefix(card);
    let older = peers
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| p.metadata.uid != card.metadata.uid)
        .filter(|p| p.spec.publish.host.eq_ignore_ascii_case(&host) && prefix(p) == my_prefix)
        .filter(|p| {
            host_allowed(
                &host,
                operator_allow,
                &ns_annotations(&p.namespace().unwrap_or_default()),
            )
        })
        .map(|p| claim_key(p))
        .filter(|k| *k < mine)
        .min();
    match older {
        Some((_, ons, oname)) => Err(Error::HostConflict {
            host,
            prefix: my_prefix,
            owner: format!("{ons}/{oname}"),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_patterns() {
        assert!(host_matches("*", "a.example.com"));
        assert!(host_matches("*.example.com", "a.b.example.com"));
        assert!(!host_matches("*.example.com", "example.com"));
        assert!(!host_matches("*.example.com", "evilexample.com"));
        assert!(host_matches("A.example.com.", "a.example.com"));
        assert!(!host_matches("a.example.com", "b.example.com"));
    }

    #[test]
    fn namespace_annotation_extends_the_operator_list() {
        let ann = BTreeMap::from([(
            ANN_ALLOWED_HOSTS.to_string(),
            "team.example.com, *.team.example.org".to_string(),
        )]);
        let op = vec!["*.shared.example.com".to_string()];
        assert!(host_allowed("x.shared.example.com", &op, &BTreeMap::new()));
        assert!(!host_allowed("team.example.com", &op, &BTreeMap::new()));
        assert!(host_allowed("team.example.com", &op, &ann));
        assert!(host_allowed("a.team.example.org", &op, &ann));
        assert!(!host_allowed("other.example.com", &op, &ann));
    }
}
