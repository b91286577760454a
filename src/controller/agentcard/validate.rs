//! Validate: may this AgentCard be published, as it is, where it asks?
//!
//! Three questions, all answered from data at hand (no client): is the effective card (spec.card
//! plus the backend interface) a valid A2A card (errors name `spec.card.…` paths); does its
//! routing stay inside its own route subtree and within the operator's Ingress policy; may the
//! card's namespace publish on its host (operator allow list, or the Namespace annotation
//! cluster admins set). Who holds a host is the next stage's question ([`super::claim`]).

use std::collections::BTreeMap;

use super::card::{backend_path, effective_card, extended_card, prefix, EXTENDED_SPEC};
use crate::a2a::validate::{lint, validate as validate_card, LintOptions};
use crate::a2a::{Problem, Problems};
use crate::contract::{host_matches, patterns};
use crate::controller::config::Settings;
use crate::controller::error::Error;
use crate::controller::routes::policy::IngressPolicy;
use crate::controller::routes::routing::{RouteKind, Routing};
use crate::controller::routes::table::inside_subtree;
use crate::crd::AgentCard;

pub use crate::contract::ANN_ALLOWED_HOSTS;

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
    extended(card, &effective)?;
    Ok(lint(&effective, LintOptions { public: true })
        .into_iter()
        .map(|p| Problems(vec![p]).with_prefix("spec.card").to_string())
        .collect())
}

/// The extended card (with `spec.extendedCard`): its additions do not collide with the public
/// card, the whole is a valid A2A card (an error in an addition is named where the spec wrote
/// it), and nothing of the public card is missing from it.
fn extended(card: &AgentCard, public: &crate::a2a::AgentCard) -> Result<(), Error> {
    let (Some(spec), Some(built)) = (
        card.spec.extended_card.as_deref(),
        extended_card(card, public),
    ) else {
        return Ok(());
    };
    let extended = built.map_err(Error::InvalidSpec)?;
    let overlay = spec.overlay();
    let mut problems: Vec<Problem> = validate_card(&extended)
        .into_iter()
        .filter_map(|p| {
            let path = crate::a2a::extended::overlay_path(public, &overlay, &p.path)?;
            Some(Problem { path, ..p })
        })
        .collect();
    problems.extend(crate::a2a::extended::missing(public, &extended));
    if problems.is_empty() {
        return Ok(());
    }
    Err(Error::InvalidSpec(
        Problems(problems).with_prefix(EXTENDED_SPEC),
    ))
}

/// Whether namespace `namespace` (with `annotations`) may publish on `host`; the error names
/// both allow lists.
pub fn host_allowance(
    host: &str,
    namespace: &str,
    operator_allow: &[String],
    annotations: &BTreeMap<String, String>,
) -> Result<(), Error> {
    let host = host.to_ascii_lowercase();
    if host_allowed(&host, operator_allow, annotations) {
        return Ok(());
    }
    Err(Error::HostNotAllowed {
        host,
        namespace: namespace.to_string(),
        operator: operator_allow.to_vec(),
        namespace_list: annotations
            .get(ANN_ALLOWED_HOSTS)
            .map(|l| patterns(l))
            .unwrap_or_default(),
    })
}

fn has_dot_segment(path: &str) -> bool {
    path.split('/').any(|s| s == "." || s == "..")
}

/// The routing the card asks for, against the ownership model and the Ingress policy: the
/// backend path lies inside the card's subtree, no dot segments, tenant Ingress settings
/// within the operator's policy. Every problem names its field.
pub fn routing(card: &AgentCard, policy: &IngressPolicy, routes: &Routing) -> Result<(), Error> {
    let mut problems = policy.check(&card.spec.publish.ingress).0;
    if let Some(section) = &card.spec.publish.section_name {
        if routes.kind == RouteKind::HttpRoute && !routes.section_allowed(section) {
            problems.push(Problem::error(
                "spec.publish.sectionName",
                format!(
                    "{section:?} is not a Gateway listener cards may pick (allowed: {:?})",
                    routes.allowed_sections
                ),
            ));
        }
    }
    let prefix = prefix(card);
    if has_dot_segment(&card.spec.publish.path_prefix) {
        problems.push(Problem::error(
            "spec.publish.pathPrefix",
            "must not contain . or .. segments",
        ));
    }
    if card.spec.backend.is_some() {
        let path = backend_path(card);
        if has_dot_segment(&path) {
            problems.push(Problem::error(
                "spec.backend.path",
                "must not contain . or .. segments",
            ));
        } else if !inside_subtree(&prefix, &path) {
            problems.push(Problem::error(
                "spec.backend.path",
                format!(
                    "{path} is outside the card's route subtree {}{prefix}/ (spec.publish.pathPrefix)",
                    card.spec.publish.host
                ),
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(Error::InvalidSpec(Problems(problems)))
    }
}

/// What decides whether a card may publish, besides the card: the operator's settings and
/// host allow list, and its namespace's annotations.
pub struct Admission<'a> {
    /// The operator's settings (Ingress policy, routing).
    pub settings: &'a Settings,
    /// Host patterns every namespace may publish on.
    pub allowed_hosts: &'a [String],
    /// The annotations of the card's namespace (its own allowed hosts).
    pub namespace_annotations: &'a BTreeMap<String, String>,
    /// Whether the card fits its namespace's card limit (the controller's index answers).
    pub namespace_limit: &'a dyn Fn(&AgentCard) -> Result<(), Error>,
}

/// The validate stage: may `card` publish as it is, where it asks (its warnings), or why not.
/// A route the namespace may no longer use is refused first, whatever state the spec is in.
pub fn admit(card: &AgentCard, admission: &Admission<'_>) -> Result<Vec<String>, Error> {
    let ns = card.metadata.namespace.as_deref().unwrap_or_default();
    let (allowed, annotations) = (admission.allowed_hosts, admission.namespace_annotations);
    if let Some(served) = card.status.as_ref().and_then(|s| s.served.as_ref()) {
        host_allowance(&served.host, ns, allowed, annotations)?;
    }
    let warnings = self::card(card)?;
    routing(
        card,
        &admission.settings.ingress,
        &admission.settings.routing,
    )?;
    (admission.namespace_limit)(card)?;
    host_allowance(&card.spec.publish.host, ns, allowed, annotations)?;
    Ok(warnings)
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
    fn backend_paths_stay_inside_the_route_subtree() {
        assert!(inside_subtree("", "/a2a/v1"));
        assert!(inside_subtree("/x", "/x/a2a"));
        assert!(inside_subtree("/x", "/x"));
        assert!(!inside_subtree("/x", "/a2a/v1"));
        assert!(!inside_subtree("/x", "/xa2a"));
        let card = |prefix: &str, path: &str| -> AgentCard {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentCard",
                "metadata": {"name": "c", "namespace": "n"},
                "spec": {"publish": {"host": "h.example.com", "pathPrefix": prefix},
                         "backend": {"serviceName": "s", "port": 80, "path": path},
                         "card": {"name": "n"}}
            }))
            .unwrap()
        };
        let policy = IngressPolicy::default();
        assert!(routing(&card("/x", "/x/a2a"), &policy, &Routing::default()).is_ok());
        let err = routing(&card("/x", "/a2a/v1"), &policy, &Routing::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("spec.backend.path: /a2a/v1 is outside"),
            "{err}"
        );
        let err = routing(&card("/x", "/x/../a2a"), &policy, &Routing::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("spec.backend.path: must not contain"), "{err}");
        // The default backend path is inside.
        let mut c = card("/x", "");
        c.spec.backend.as_mut().unwrap().path = None;
        assert!(routing(&c, &policy, &Routing::default()).is_ok());
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
