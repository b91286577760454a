//! The platform's Ingress policy: what a tenant's `spec.publish.ingress` may ask for.
//!
//! The card route is an Ingress in the operator's namespace, read by a shared ingress
//! controller, so nothing a tenant writes may configure that controller: annotations pass only
//! when they match the operator's allow-list (default `cert-manager.io/*`), the class is the
//! operator's (a card may pick another only from an allowed list), and TLS Secrets of the card
//! route are named by the operator (per host by default). Pure: [`IngressPolicy::check`] turns
//! a card's settings into problems with their paths, and build reads the rest.

use crate::a2a::{Problem, Problems};
use crate::contract::bounded_name;
use crate::crd::agentcard::IngressSettings;

/// Annotation patterns tenants may set when the operator is given none: none. A card route
/// lives in the operator's namespace and shares its host (and, with per-host TLS, its
/// certificate Secret) with other tenants' routes on a shared host, so what configures it —
/// the certificate issuer above all — is the platform's to choose ([`IngressPolicy::annotations`],
/// `--ingress-annotation`), not a tenant's.
pub const DEFAULT_ALLOWED_ANNOTATIONS: &str = "";

/// How the card route's Ingress gets TLS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TlsPolicy {
    /// One Secret per host in the operator's namespace, named by the operator
    /// (`agentcard-tls-<host>`), e.g. issued by cert-manager.
    PerHost,
    /// One Secret for every host (e.g. a wildcard certificate) in the operator's namespace.
    Secret(String),
    /// No TLS section: TLS is terminated before the ingress controller.
    None,
}

impl std::str::FromStr for TlsPolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "per-host" => Ok(TlsPolicy::PerHost),
            "none" => Ok(TlsPolicy::None),
            other => match other.strip_prefix("secret:") {
                Some(name) if !name.is_empty() => Ok(TlsPolicy::Secret(name.to_string())),
                _ => Err(format!(
                    "{other:?}: expected per-host, none or secret:<name>"
                )),
            },
        }
    }
}

/// What tenants' Ingress settings may do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IngressPolicy {
    /// Annotation keys tenants may set: exact keys, or `prefix/*` for every key of a prefix.
    pub allowed_annotations: Vec<String>,
    /// `ingressClassName` of every Ingress the operator writes (`None`: the cluster default).
    pub class_name: Option<String>,
    /// Classes a card may choose instead of `class_name` (exact names, or `*`).
    pub allowed_classes: Vec<String>,
    /// TLS of the card route.
    pub tls: TlsPolicy,
    /// Annotations the platform sets on every Ingress the operator writes (e.g.
    /// `cert-manager.io/cluster-issuer`); they win over a tenant's of the same key.
    pub annotations: std::collections::BTreeMap<String, String>,
}

impl Default for IngressPolicy {
    fn default() -> Self {
        IngressPolicy {
            allowed_annotations: crate::contract::patterns(DEFAULT_ALLOWED_ANNOTATIONS),
            class_name: None,
            allowed_classes: Vec::new(),
            tls: TlsPolicy::PerHost,
            annotations: Default::default(),
        }
    }
}

fn key_matches(pattern: &str, key: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(head) => key.starts_with(head),
        None => pattern == key,
    }
}

impl IngressPolicy {
    /// Whether a tenant may set annotation `key`.
    pub fn annotation_allowed(&self, key: &str) -> bool {
        self.allowed_annotations.iter().any(|p| key_matches(p, key))
    }

    /// Every way `settings` (at `spec.publish.ingress`) breaks the policy.
    pub fn check(&self, settings: &IngressSettings) -> Problems {
        let mut problems = Vec::new();
        for key in settings.annotations.keys() {
            if !self.annotation_allowed(key) {
                problems.push(Problem::error(
                    format!("spec.publish.ingress.annotations[{key:?}]"),
                    format!(
                        "not allowed by the operator's annotation allow-list {:?}",
                        self.allowed_annotations
                    ),
                ));
            }
        }
        if let Some(class) = &settings.class_name {
            let allowed = self.class_name.as_deref() == Some(class.as_str())
                || self.allowed_classes.iter().any(|p| p == "*" || p == class);
            if !allowed {
                problems.push(Problem::error(
                    "spec.publish.ingress.className",
                    format!(
                        "{class:?} is not an ingress class cards may choose (operator class {:?}, allowed {:?})",
                        self.class_name, self.allowed_classes
                    ),
                ));
            }
        }
        Problems(problems)
    }

    /// The class of an Ingress for `settings` (after [`IngressPolicy::check`] passed).
    pub fn class_for(&self, settings: &IngressSettings) -> Option<String> {
        settings
            .class_name
            .clone()
            .or_else(|| self.class_name.clone())
    }

    /// The TLS Secret of the card route for `host`, if any.
    pub fn tls_secret(&self, host: &str) -> Option<String> {
        match &self.tls {
            TlsPolicy::PerHost => Some(bounded_name(&format!("agentcard-tls-{host}"), host, 253)),
            TlsPolicy::Secret(name) => Some(name.clone()),
            TlsPolicy::None => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn settings(ann: &[&str], class: Option<&str>) -> IngressSettings {
        IngressSettings {
            class_name: class.map(str::to_string),
            tls_secret_name: None,
            annotations: ann
                .iter()
                .map(|k| (k.to_string(), "v".to_string()))
                .collect::<BTreeMap<_, _>>(),
        }
    }

    #[test]
    fn by_default_a_tenant_chooses_no_annotation_of_its_route_not_even_the_issuer() {
        let p = IngressPolicy::default();
        for key in [
            "cert-manager.io/cluster-issuer",
            "cert-manager.io/issuer",
            "cert-manager.io/issuer-kind",
            "nginx.ingress.kubernetes.io/server-snippet",
        ] {
            let problems = p.check(&settings(&[key], None));
            assert_eq!(problems.0.len(), 1, "{key}");
            assert!(problems
                .to_string()
                .contains(&format!("annotations[{key:?}]")));
        }
    }

    #[test]
    fn only_allow_listed_annotations_pass_and_each_refusal_names_its_key() {
        let p = IngressPolicy {
            allowed_annotations: vec!["cert-manager.io/*".into()],
            ..IngressPolicy::default()
        };
        assert!(p
            .check(&settings(&["cert-manager.io/cluster-issuer"], None))
            .0
            .is_empty());
        let problems = p.check(&settings(
            &[
                "nginx.ingress.kubernetes.io/server-snippet",
                "nginx.ingress.kubernetes.io/auth-url",
                "cert-manager.io/issuer",
            ],
            None,
        ));
        let text = problems.to_string();
        assert_eq!(problems.0.len(), 2, "{text}");
        assert!(text.contains(
            "spec.publish.ingress.annotations[\"nginx.ingress.kubernetes.io/server-snippet\"]"
        ));
        assert!(text.contains("auth-url"));
        assert!(!p.annotation_allowed("cert-manager.iox/evil"));
    }

    #[test]
    fn the_class_is_the_operators_unless_allowed() {
        let mut p = IngressPolicy {
            class_name: Some("public".into()),
            ..Default::default()
        };
        assert!(p.check(&settings(&[], Some("public"))).0.is_empty());
        assert!(!p.check(&settings(&[], Some("internal"))).0.is_empty());
        assert_eq!(p.class_for(&settings(&[], None)).as_deref(), Some("public"));
        p.allowed_classes = vec!["internal".into()];
        assert!(p.check(&settings(&[], Some("internal"))).0.is_empty());
    }

    #[test]
    fn tls_secrets_are_named_by_the_operator() {
        let p = IngressPolicy::default();
        assert_eq!(
            p.tls_secret("a.example.com").as_deref(),
            Some("agentcard-tls-a.example.com")
        );
        assert!(p.tls_secret(&"a".repeat(250)).unwrap().len() <= 253);
        assert_eq!("none".parse::<TlsPolicy>(), Ok(TlsPolicy::None));
        assert_eq!(
            "secret:wild".parse::<TlsPolicy>(),
            Ok(TlsPolicy::Secret("wild".into()))
        );
        assert!("bogus".parse::<TlsPolicy>().is_err());
    }
}
