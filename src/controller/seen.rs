//! What the controllers keep of the Ingresses they write: enough to tell whose an Ingress is,
//! whether it still holds what the operator wants, and what a removal patch must clear, in a
//! fraction of the object's memory (10,000 cards have 10,000 Ingresses in the store).
//!
//! Data flow: the Ingress watch deserialises each object as an [`Ingress`] and at once turns it
//! into a [`SeenIngress`] (`serde(from)`): its metadata, compacted like every stored object
//! ([`compact_meta`]), a digest of its spec and which optional spec fields are set; the spec
//! and status themselves are dropped before the store holds it. The apply step compares the
//! spec it builds by the same digest ([`SeenIngress::holds_spec`]); an Ingress found by a
//! conflicting create is reduced the same way.

use std::borrow::Cow;

use k8s_openapi::api::networking::v1::{Ingress, IngressSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::watches::{compact_meta, digest};

/// An Ingress as the controllers' store holds it.
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(from = "Ingress")]
pub struct SeenIngress {
    /// The Ingress's metadata (compacted: see [`compact_meta`]).
    pub metadata: ObjectMeta,
    /// [`digest`] of the whole `spec` (the operator writes all of it).
    spec_digest: u64,
    /// The optional spec fields that are set.
    pub optional: OptionalSpec,
}

/// Which optional spec fields an Ingress has: the ones a merge patch clears when the operator
/// no longer wants them (a create co-owns every field it wrote).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OptionalSpec {
    /// `spec.tls`.
    pub tls: bool,
    /// `spec.ingressClassName`.
    pub class: bool,
    /// `spec.defaultBackend`.
    pub default_backend: bool,
}

impl OptionalSpec {
    /// The optional fields `spec` sets.
    pub fn of(spec: Option<&IngressSpec>) -> OptionalSpec {
        spec.map_or_else(OptionalSpec::default, |s| OptionalSpec {
            tls: s.tls.is_some(),
            class: s.ingress_class_name.is_some(),
            default_backend: s.default_backend.is_some(),
        })
    }
}

impl SeenIngress {
    /// Whether this Ingress's spec is exactly `spec`.
    pub fn holds_spec(&self, spec: &Option<IngressSpec>) -> bool {
        self.spec_digest == digest(spec)
    }
}

impl From<Ingress> for SeenIngress {
    fn from(ing: Ingress) -> SeenIngress {
        let mut metadata = ing.metadata;
        compact_meta(&mut metadata);
        SeenIngress {
            metadata,
            spec_digest: digest(&ing.spec),
            optional: OptionalSpec::of(ing.spec.as_ref()),
        }
    }
}

impl kube::Resource for SeenIngress {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        <Ingress as kube::Resource>::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        <Ingress as kube::Resource>::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        <Ingress as kube::Resource>::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        <Ingress as kube::Resource>::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ingress(host: &str, class: Option<&str>) -> serde_json::Value {
        let mut spec = json!({"rules": [{"host": host, "http": {"paths": [{"path": "/x",
            "pathType": "Exact", "backend": {"service": {"name": "s", "port": {"name": "http"}}}}]}}]});
        if let Some(c) = class {
            spec["ingressClassName"] = json!(c);
        }
        json!({"metadata": {"name": "i", "namespace": "ops", "resourceVersion": "7",
            "managedFields": [{"manager": "agentcard-operator", "operation": "Apply",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:annotations": {"f:a": {}}}}}],
            "annotations": {"a": "1"}},
            "spec": spec,
            "status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.1"}]}}})
    }

    #[test]
    fn a_seen_ingress_holds_exactly_the_spec_it_was_read_with() {
        let seen: SeenIngress =
            serde_json::from_value(ingress("a.example", Some("nginx"))).unwrap();
        let same: Ingress = serde_json::from_value(ingress("a.example", Some("nginx"))).unwrap();
        let other_host: Ingress =
            serde_json::from_value(ingress("b.example", Some("nginx"))).unwrap();
        let no_class: Ingress = serde_json::from_value(ingress("a.example", None)).unwrap();
        assert!(seen.holds_spec(&same.spec));
        assert!(!seen.holds_spec(&other_host.spec));
        assert!(!seen.holds_spec(&no_class.spec));
        assert!(!seen.holds_spec(&None));
        assert_eq!(
            seen.optional,
            OptionalSpec {
                tls: false,
                class: true,
                default_backend: false
            }
        );
        // Metadata as every stored object keeps it: the operator's annotation keys only.
        assert_eq!(seen.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(
            super::super::watches::operator_annotations(&seen.metadata),
            ["a".to_string()].into()
        );
    }
}
